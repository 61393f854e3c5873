//! Bodies as debug logs show them: every Secret's data replaced, so a log
//! never holds a password.

use serde_json::Value;

/// A body for debug logs, with the data of every Secret replaced.
pub fn redacted(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(mut value) => {
            redact(&mut value);
            value.to_string()
        }
        Err(_) => format!("<{} bytes, not JSON>", body.len()),
    }
}

fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("kind").and_then(Value::as_str) == Some("Secret") {
                for field in ["data", "stringData"] {
                    if let Some(Value::Object(data)) = map.get_mut(field) {
                        for v in data.values_mut() {
                            *v = Value::String("<redacted>".into());
                        }
                    }
                }
            }
            map.values_mut().for_each(redact);
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_redacted_wherever_they_appear() {
        let body = json!({"children": {"Secret.v1": {"s": {"kind": "Secret", "data": {"password": "aHVudGVyMg=="}, "stringData": {"u": "root"}}}},
                          "parent": {"kind": "Thing", "data": {"kept": "yes"}}});
        let out = redacted(body.to_string().as_bytes());
        assert!(!out.contains("aHVudGVyMg=="), "{out}");
        assert!(!out.contains("root"), "{out}");
        assert!(out.contains("kept"), "{out}");
        assert_eq!(redacted(b"not json"), "<8 bytes, not JSON>");
    }
}
