//! Builders of observed objects for tests, in the spirit of kube-rs
//! controller-rs's fixtures and linkerd's `mk_pod`: a test says what is
//! special about its case in one line, `pod("web-0").ready()`,
//! `job("orders-init").failed()`, `statefulset("orders").serving(3)`, and
//! gets the object as Metacontroller sends it (`.json()`) or typed
//! (`.typed()`). Used by the unit tests beside each operator and by the
//! integration tests alike; nothing outside tests calls it.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// An object under construction, as JSON.
#[derive(Clone, Debug)]
pub struct Object(Value);

/// A Pod, running and not ready.
pub fn pod(name: &str) -> Object {
    Object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}),
    )
}

/// A Job that is running.
pub fn job(name: &str) -> Object {
    Object(
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "status": {"active": 1}}),
    )
}

/// A StatefulSet asking for nothing yet; see [`Object::serving`].
pub fn statefulset(name: &str) -> Object {
    Object(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {"selector": {}, "template": {}}}))
}

impl Object {
    /// The object as JSON.
    pub fn json(self) -> Value {
        self.0
    }

    /// The object as a typed Kubernetes object (or a view such as
    /// `ObservedPod`).
    pub fn typed<T: DeserializeOwned>(self) -> T {
        serde_json::from_value(self.0).expect("a fixture decodes as its type")
    }

    /// Sets the value at a JSON pointer, creating the objects on its way.
    pub fn set(mut self, pointer: &str, value: Value) -> Self {
        let mut at = &mut self.0;
        for key in pointer.trim_start_matches('/').split('/') {
            if !at.is_object() {
                *at = json!({});
            }
            at = at
                .as_object_mut()
                .expect("made an object just above")
                .entry(key)
                .or_insert(Value::Null);
        }
        *at = value;
        self
    }

    /// In this namespace.
    pub fn namespace(self, namespace: &str) -> Self {
        self.set("/metadata/namespace", json!(namespace))
    }

    /// With this label.
    pub fn label(self, key: &str, value: &str) -> Self {
        self.metadata_entry("labels", key, value)
    }

    /// With this annotation.
    pub fn annotation(self, key: &str, value: &str) -> Self {
        self.metadata_entry("annotations", key, value)
    }

    /// A Pod that is Ready.
    pub fn ready(self) -> Self {
        self.set(
            "/status/conditions",
            json!([{"type": "Ready", "status": "True"}]),
        )
    }

    /// A Pod in this phase.
    pub fn phase(self, phase: &str) -> Self {
        self.set("/status/phase", json!(phase))
    }

    /// A Job that succeeded.
    pub fn succeeded(self) -> Self {
        self.finished("Complete")
    }

    /// A Job that failed.
    pub fn failed(self) -> Self {
        self.finished("Failed")
    }

    /// A Job in the state its condition type names (`Complete`, `Failed`),
    /// or running for anything else.
    pub fn finished(self, condition: &str) -> Self {
        match condition {
            "Complete" | "Failed" => self.set(
                "/status",
                json!({"conditions": [{"type": condition, "status": "True"}]}),
            ),
            _ => self.set("/status", json!({"active": 1})),
        }
    }

    /// A StatefulSet of `replicas`, all ready, its controller caught up.
    pub fn serving(self, replicas: i32) -> Self {
        let generation = self.0["metadata"]["generation"].clone();
        self.set("/spec/replicas", json!(replicas)).set(
            "/status",
            json!({"replicas": replicas, "readyReplicas": replicas, "observedGeneration": generation}),
        )
    }

    /// Adds `key: value` to `metadata.<map>` (keys hold `/`, which a
    /// pointer would split).
    fn metadata_entry(mut self, map: &str, key: &str, value: &str) -> Self {
        let metadata = &mut self.0["metadata"];
        if !metadata[map].is_object() {
            metadata[map] = json!({});
        }
        metadata[map][key] = json!(value);
        self
    }
}
