//! A parent's status, or a spec the user writes, checked as the API server
//! checks it: against that part of the operator's CRD schema (its
//! structure, types and bounds) and its CEL rules
//! (`x-kubernetes-validations`), transition rules (`oldSelf`) included.
//!
//! [`admit`] is the one refusal every entry point gives a parent the CRD
//! refuses: the hook (server and `opshooks hook`, through `call`),
//! `opshooks render` and `opshooks simulate` all ask it, so none of them
//! accepts what another refuses. It sits below `call` and `simulate`,
//! beside the operators whose CRDs it reads.
//!
//! The CRD's schema is OpenAPI v3 with Kubernetes' own keywords; it becomes
//! plain JSON Schema here, and fields it does not declare are refused (the
//! API server would prune them, so a status that relies on one is wrong).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use jsonschema::error::ValidationErrorKind;
use serde_json::{Value, json};

use crate::hook::quote::{cut, cut_quoted, key_path};
use crate::operator::{InvalidSpec, Operator};

/// Why the API server would refuse to store `parent` as it is, written
/// over a parent whose spec was `old_spec` (or created, without it): its
/// spec against the CRD's schema, then the CRD's CEL rules on the spec and
/// on the whole object. One line naming the first field, then up to two
/// more reasons, and how many more there are.
pub fn admit(op: &Operator, parent: &Value, old_spec: Option<&Value>) -> Result<(), InvalidSpec> {
    let errors = Admission::of(op).errors(parent, old_spec);
    let Some(first) = errors.first() else {
        return Ok(());
    };
    let (field, message) = first.split_once(": ").unwrap_or(("spec", first));
    // A few whole lines after the first, as the API server lists them.
    let mut message = std::iter::once(message)
        .chain(errors.iter().skip(1).take(2).map(String::as_str))
        .collect::<Vec<_>>()
        .join("; ");
    if errors.len() > 3 {
        message.push_str(&format!(" (and {} more)", errors.len() - 3));
    }
    Err(InvalidSpec::new(field, cut_quoted(&message)))
}

/// What is built once per operator (from its CRD) and kept, by name.
type Kept<T> = OnceLock<Mutex<BTreeMap<&'static str, Arc<T>>>>;

/// `op`'s entry of `built`, made by `build` the first time.
fn kept<T>(built: &Kept<T>, op: &Operator, build: impl FnOnce() -> T) -> Arc<T> {
    let mut built = built
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    built
        .entry(op.name)
        .or_insert_with(|| Arc::new(build()))
        .clone()
}

/// What the API server checks of one operator's parents, built once per
/// operator and kept: the CRD is generated from the Rust types, and a
/// server answers many calls.
struct Admission {
    spec: PartSchema,
    /// The rules on the whole object.
    object: Value,
    kind: String,
}

impl Admission {
    fn of(op: &Operator) -> Arc<Admission> {
        static BUILT: Kept<Admission> = OnceLock::new();
        kept(&BUILT, op, || {
            let crd = serde_json::to_value(op.crd()).expect("CRDs serialize");
            let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            Admission {
                spec: PartSchema::of(op, "spec"),
                object: json!({"x-kubernetes-validations": root["x-kubernetes-validations"]}),
                kind: op.kind.clone(),
            }
        })
    }

    /// Every reason, one line each: the schema's first, and the rules only
    /// for a spec of the right shape (as the API server, which evaluates
    /// no rule on a value of the wrong type).
    fn errors(&self, parent: &Value, old_spec: Option<&Value>) -> Vec<String> {
        let mut spec = parent.get("spec").cloned().unwrap_or(json!({}));
        drop_nulls(&self.spec.crd, &mut spec);
        let spec = &spec;
        let mut errors = self.spec.errors(spec);
        if errors.is_empty() {
            errors = self.spec.rule_errors("spec", spec, old_spec);
        }
        check_rules(&self.object, &self.kind, parent, None, &mut errors);
        errors
    }
}

/// The schema of one part (`spec` or `status`) of an operator's CRD, ready
/// to check values with.
pub struct PartSchema {
    /// `spec` or `status`: where the fields named in errors are.
    part: &'static str,
    validator: jsonschema::Validator,
    /// The part's schema as the CRD has it, with its CEL rules.
    crd: Value,
}

impl PartSchema {
    /// The schema of `op`'s `status`, from its generated CRD: built once
    /// per operator and kept, since every simulated life checks each
    /// status it writes against it.
    pub fn status(op: &Operator) -> Arc<Self> {
        static BUILT: Kept<PartSchema> = OnceLock::new();
        kept(&BUILT, op, || Self::of(op, "status"))
    }

    /// The schema of `op`'s `spec`, from its generated CRD.
    pub fn spec(op: &Operator) -> Self {
        Self::of(op, "spec")
    }

    fn of(op: &Operator, part: &'static str) -> Self {
        let crd = serde_json::to_value(op.crd()).expect("CRDs serialize");
        let crd =
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][part].clone();
        let mut schema = crd.clone();
        to_json_schema(&mut schema);
        PartSchema {
            part,
            validator: jsonschema::validator_for(&schema).expect("generated CRD schemas are valid"),
            crd,
        }
    }

    /// Every CEL rule of the part that `value` breaks, as an update from
    /// `old` (or a create, without it), one line each: `path: message`.
    /// As the API server does, a rule that reads `oldSelf` applies only
    /// where the old value exists, and list items are not compared with
    /// old ones.
    pub fn rule_errors(&self, path: &str, value: &Value, old: Option<&Value>) -> Vec<String> {
        // The API server defaults both before it evaluates a rule.
        let defaulted = |v: &Value| {
            let mut v = v.clone();
            apply_defaults(&self.crd, &mut v);
            v
        };
        let old = old.map(defaulted);
        let mut errors = Vec::new();
        check_rules(
            &self.crd,
            path,
            &defaulted(value),
            old.as_ref(),
            &mut errors,
        );
        errors
    }

    /// Every reason the API server would refuse `value`, one line each,
    /// naming the field (`spec.replicas: ...`); a field the schema does not
    /// declare and a missing one in the API server's words.
    pub fn errors(&self, value: &Value) -> Vec<String> {
        self.validator
            .iter_errors(value)
            .flat_map(|e| {
                let at = dotted(self.part, e.instance_path().as_str());
                match e.kind() {
                    ValidationErrorKind::AdditionalProperties { unexpected } => unexpected
                        .iter()
                        .map(|field| {
                            format!(
                                "{}: field not declared in schema; remove it or check its spelling (kubectl explain)",
                                key_path(&at, field)
                            )
                        })
                        .collect(),
                    ValidationErrorKind::Required { property } => {
                        let field = property.as_str().unwrap_or_default();
                        vec![format!("{at}.{field}: Required value")]
                    }
                    _ => vec![format!("{at}: {e}")],
                }
            })
            .collect()
    }
}

/// A JSON pointer into `part` as a field path: `/items/0/name` in `spec`
/// is `spec.items[0].name`.
fn dotted(part: &str, pointer: &str) -> String {
    let mut path = part.to_string();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        match segment.parse::<usize>() {
            Ok(index) => path.push_str(&format!("[{index}]")),
            Err(_) => path.push_str(&format!(".{}", cut(&segment))),
        }
    }
    path
}

/// Drops, as the API server does before it validates, every `null` given
/// to a field its schema does not make nullable: `postgresql: null` is
/// stored as no `postgresql`.
fn drop_nulls(schema: &Value, value: &mut Value) {
    if let (Some(fields), Some(object)) = (schema["properties"].as_object(), value.as_object_mut())
    {
        object.retain(|name, v| {
            !(v.is_null() && fields.get(name).is_some_and(|s| s["nullable"] != true))
        });
        for (name, sub) in fields {
            if let Some(field) = object.get_mut(name) {
                drop_nulls(sub, field);
            }
        }
    }
}

/// Fills in, as the API server does, every field `schema` gives a default
/// that `value` lacks, at every depth.
fn apply_defaults(schema: &Value, value: &mut Value) {
    if let (Some(fields), Some(object)) = (schema["properties"].as_object(), value.as_object_mut())
    {
        for (name, sub) in fields {
            if let (false, Some(default)) = (object.contains_key(name), sub.get("default")) {
                object.insert(name.clone(), default.clone());
            }
            if let Some(field) = object.get_mut(name) {
                apply_defaults(sub, field);
            }
        }
    }
    if let (Some(values), Some(object)) =
        (schema.get("additionalProperties"), value.as_object_mut())
        && values.is_object()
    {
        object.values_mut().for_each(|v| apply_defaults(values, v));
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array_mut()) {
        list.iter_mut().for_each(|v| apply_defaults(items, v));
    }
}

/// Checks the rules of `schema` on `value`, then of its fields and items.
fn check_rules(
    schema: &Value,
    path: &str,
    value: &Value,
    old: Option<&Value>,
    errors: &mut Vec<String>,
) {
    // As the API server, no rule is evaluated on a null (a nullable field
    // set to null).
    if value.is_null() {
        return;
    }
    let rules = schema["x-kubernetes-validations"].as_array();
    for rule in rules.into_iter().flatten() {
        let text = rule["rule"].as_str().unwrap_or_default();
        if text.contains("oldSelf") && old.is_none() {
            continue;
        }
        if let Err(why) = holds(text, value, old) {
            let message = rule["message"].as_str().map_or(why, str::to_string);
            errors.push(format!("{path}: {message}"));
        }
    }
    if let (Some(fields), Some(object)) = (schema["properties"].as_object(), value.as_object()) {
        for (name, sub) in fields {
            if let Some(field) = object.get(name) {
                let was = old.and_then(|o| o.get(name));
                check_rules(sub, &format!("{path}.{name}"), field, was, errors);
            }
        }
    }
    if let (Some(values), Some(object)) = (schema.get("additionalProperties"), value.as_object())
        && values.is_object()
    {
        for (key, field) in object {
            let was = old.and_then(|o| o.get(key));
            check_rules(values, &key_path(path, key), field, was, errors);
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (i, item) in list.iter().enumerate() {
            check_rules(items, &format!("{path}[{i}]"), item, None, errors);
        }
    }
}

/// Whether the CEL rule `text` holds for `value` (as `self`) and `old` (as
/// `oldSelf`); Err says why not, for a rule without a message.
fn holds(text: &str, value: &Value, old: Option<&Value>) -> Result<(), String> {
    let program = cel::Program::compile(text).map_err(|e| format!("rule {text}: {e}"))?;
    let mut context = cel::Context::default();
    quantities(&mut context);
    let bind = |v: &Value| cel::to_value(v).map_err(|e| format!("rule {text}: {e}"));
    context.add_variable_from_value("self", bind(value)?);
    if let Some(old) = old {
        context.add_variable_from_value("oldSelf", bind(old)?);
    }
    match program.execute(&context) {
        Ok(cel::Value::Bool(true)) => Ok(()),
        Ok(other) => Err(format!("failed rule: {text} (is {other:?})")),
        Err(e) => Err(format!("rule {text} cannot be evaluated: {e}")),
    }
}

/// Kubernetes' CEL quantity library, as far as the CRDs use it: a
/// quantity is its value in bytes (an `int`), which is all a comparison of
/// sizes needs. `quantity()` of text that is not one fails, as there.
fn quantities(context: &mut cel::Context<'_, '_>) {
    use super::validate::quantity_bytes;
    use cel::extractors::This;
    use std::sync::Arc;
    let bytes = |text: &str| quantity_bytes(text).and_then(|b| i64::try_from(b).ok());
    let declared = [
        context.add_function("isQuantity", move |text: Arc<String>| {
            bytes(&text).is_some()
        }),
        context.add_function("quantity", move |text: Arc<String>| {
            bytes(&text).map(cel::Value::Int).ok_or_else(|| {
                cel::ExecutionError::function_error(
                    "quantity",
                    format!("{text:?} is not a quantity"),
                )
            })
        }),
        context.add_function("compareTo", |This(a): This<i64>, b: i64| a.cmp(&b) as i64),
    ];
    debug_assert!(declared.iter().all(Result::is_ok), "{declared:?}");
}

/// Turns a CRD's OpenAPI v3 schema into JSON Schema in place: Kubernetes'
/// `x-kubernetes-*` keywords go, `nullable` becomes a `null` type, and an
/// object with declared properties takes no others.
pub fn to_json_schema(value: &mut Value) {
    if let Value::Object(map) = value {
        map.retain(|k, _| !k.starts_with("x-kubernetes-"));
        if map.remove("nullable") == Some(Value::Bool(true))
            && let Some(Value::String(t)) = map.get("type").cloned()
        {
            map.insert("type".into(), json!([t, "null"]));
        }
        if map.contains_key("properties") && !map.contains_key("additionalProperties") {
            map.insert("additionalProperties".into(), Value::Bool(false));
        }
        map.values_mut().for_each(to_json_schema);
    } else if let Value::Array(items) = value {
        items.iter_mut().for_each(to_json_schema);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::all;

    #[test]
    fn others_conditions_pass_and_wrong_types_do_not() {
        let op = all().into_iter().find(|op| op.name == "webserver").unwrap();
        let schema = PartSchema::status(&op);
        let ok = json!({"count": 1, "readyReplicas": 1, "observedGeneration": 2, "conditions": [
            {"type": "Ready", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Updated", "status": "True", "reason": "OnLatestRevision", "message": "latest"}]});
        assert_eq!(schema.errors(&ok), Vec::<String>::new());
        let bad = json!({"count": "one", "conditions": [{"type": "Ready"}]});
        let errors = schema.errors(&bad);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("status.co"), "{errors:?}");
    }

    /// Every rule of every CRD, wherever it sits.
    fn rules(schema: &Value, out: &mut Vec<String>) {
        if let Some(list) = schema["x-kubernetes-validations"].as_array() {
            out.extend(list.iter().map(|r| r["rule"].as_str().unwrap().to_string()));
        }
        match schema {
            Value::Object(map) => map.values().for_each(|v| rules(v, out)),
            Value::Array(items) => items.iter().for_each(|v| rules(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_crd_rule_compiles() {
        let mut all_rules = Vec::new();
        for op in all() {
            rules(&serde_json::to_value(op.crd()).unwrap(), &mut all_rules);
        }
        assert!(all_rules.len() >= 10, "{all_rules:?}");
        for rule in all_rules {
            assert!(cel::Program::compile(&rule).is_ok(), "{rule}");
        }
    }

    #[test]
    fn transition_rules_apply_to_updates_only() {
        let op = all().into_iter().find(|op| op.name == "database").unwrap();
        let schema = PartSchema::spec(&op);
        let old = json!({"version": "16", "storage": {"size": "1Gi"}, "deletionPolicy": "Retain"});
        assert_eq!(
            schema.rule_errors("spec", &old, Some(&old)),
            Vec::<String>::new()
        );
        let mut up = old.clone();
        up["version"] = json!("17");
        assert_eq!(
            schema.rule_errors("spec", &up, Some(&old)),
            Vec::<String>::new()
        );
        // The storage grows, in any unit, but never shrinks, and keeps
        // its class: CEL's quantity library compares the sizes.
        let mut grown = old.clone();
        grown["storage"]["size"] = json!("1.5Gi");
        assert_eq!(
            schema.rule_errors("spec", &grown, Some(&old)),
            Vec::<String>::new()
        );
        let mut same = old.clone();
        same["storage"]["size"] = json!("1024Mi");
        assert_eq!(
            schema.rule_errors("spec", &same, Some(&old)),
            Vec::<String>::new()
        );
        let errors = schema.rule_errors("spec", &old, Some(&grown));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.storage: spec.storage.size cannot shrink"),
            "{errors:?}"
        );
        let mut classed = old.clone();
        classed["storage"]["storageClassName"] = json!("fast");
        for (new, was) in [(&classed, &old), (&old, &classed)] {
            let errors = schema.rule_errors("spec", new, Some(was));
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(
                errors[0].contains("spec.storage.storageClassName cannot change"),
                "{errors:?}"
            );
        }
        // Created so, it is fine: there is no old value to compare with.
        assert_eq!(schema.rule_errors("spec", &old, None), Vec::<String>::new());
        let errors = schema.rule_errors("spec", &old, Some(&up));
        assert!(
            errors[0].contains("spec.version cannot go down"),
            "{errors:?}"
        );
        // A rule without oldSelf applies on create too.
        let mut snapshot = old.clone();
        snapshot["deletionPolicy"] = json!("Snapshot");
        let errors = schema.rule_errors("spec", &snapshot, None);
        assert!(
            errors[0].contains("deletionPolicy Snapshot needs"),
            "{errors:?}"
        ); // Defaults first, as the API server: backup.enabled (false) is
        // filled in before `!self.enabled || has(self.schedule)` reads it.
        let mut stored = old.clone();
        stored["backup"] = json!({"destination": {"s3Bucket": "orders-backups"}});
        assert_eq!(
            schema.rule_errors("spec", &stored, None),
            Vec::<String>::new()
        );
    }
}
