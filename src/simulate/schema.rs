//! A parent's status, or a spec the user writes, checked as the API server
//! checks it: against that part of the operator's CRD schema (its
//! structure, types and bounds; CEL rules are not evaluated here).
//!
//! The CRD's schema is OpenAPI v3 with Kubernetes' own keywords; it becomes
//! plain JSON Schema here, and fields it does not declare are refused (the
//! API server would prune them, so a status that relies on one is wrong).

use serde_json::{Value, json};

use crate::operator::Operator;

/// The schema of one part (`spec` or `status`) of an operator's CRD, ready
/// to check values with.
pub struct PartSchema {
    validator: jsonschema::Validator,
}

impl PartSchema {
    /// The schema of `op`'s `status`, from its generated CRD.
    pub fn status(op: &Operator) -> Self {
        Self::of(op, "status")
    }

    /// The schema of `op`'s `spec`, from its generated CRD.
    pub fn spec(op: &Operator) -> Self {
        Self::of(op, "spec")
    }

    fn of(op: &Operator, part: &str) -> Self {
        let crd = serde_json::to_value(op.crd()).expect("CRDs serialize");
        let mut schema =
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][part].clone();
        to_json_schema(&mut schema);
        PartSchema {
            validator: jsonschema::validator_for(&schema).expect("generated CRD schemas are valid"),
        }
    }

    /// Every reason the API server would refuse `value`, one line each.
    pub fn errors(&self, value: &Value) -> Vec<String> {
        self.validator
            .iter_errors(value)
            .map(|e| match e.instance_path().as_str() {
                "" => e.to_string(),
                path => format!("{path}: {e}"),
            })
            .collect()
    }
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
    }
}
