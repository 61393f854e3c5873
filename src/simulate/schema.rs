//! A parent's status checked as the API server checks it: against the
//! status schema of the operator's CRD.
//!
//! The CRD's schema is OpenAPI v3 with Kubernetes' own keywords; it becomes
//! plain JSON Schema here, and fields it does not declare are refused (the
//! API server would prune them, so a status that relies on one is wrong).

use serde_json::{Value, json};

use crate::operator::Operator;

/// The status schema of one operator's CRD, ready to check statuses with.
pub struct StatusSchema {
    validator: jsonschema::Validator,
}

impl StatusSchema {
    /// The schema of `op`'s `status`, from its generated CRD.
    pub fn of(op: &Operator) -> Self {
        let crd = serde_json::to_value(op.crd()).expect("CRDs serialize");
        let mut schema =
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"].clone();
        to_json_schema(&mut schema);
        StatusSchema {
            validator: jsonschema::validator_for(&schema).expect("generated CRD schemas are valid"),
        }
    }

    /// Every reason the API server would refuse `status`, one line each.
    pub fn errors(&self, status: &Value) -> Vec<String> {
        self.validator
            .iter_errors(status)
            .map(|e| format!("{}: {e}", e.instance_path()))
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
        let schema = StatusSchema::of(&op);
        let ok = json!({"count": 1, "readyReplicas": 1, "observedGeneration": 2, "conditions": [
            {"type": "Ready", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Updated", "status": "True", "reason": "OnLatestRevision", "message": "latest"}]});
        assert_eq!(schema.errors(&ok), Vec::<String>::new());
        let bad = json!({"count": "one", "conditions": [{"type": "Ready"}]});
        let errors = schema.errors(&bad);
        assert_eq!(errors.len(), 2, "{errors:?}");
    }
}
