//! Builders of observed objects for tests, in the spirit of kube-rs
//! controller-rs's fixtures and linkerd's `mk_pod`: a test says what is
//! special about its case in one line, `pod("web-0").ready()`,
//! `job("orders-init").failed()`, `statefulset("orders").serving(3)`,
//! `database("orders").spec("version", "16")`, and gets the object as
//! Metacontroller sends it (`.json()`) or typed (`.typed()`); a
//! [`request`] gathers a parent and its observed objects into a hook's
//! body. Used by the unit tests beside each operator and by the
//! integration tests alike; nothing outside tests calls it. It is not
//! `#[cfg(test)]` because `tests/` links the library as built without it.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The API version of every parent (the custom resources) in this crate.
const PARENT_API_VERSION: &str = "opshooks.io/v1alpha1";

/// An object under construction, as JSON.
#[derive(Clone, Debug)]
pub struct Object(Value);

/// Any object, with nothing but its kind and name: the start of the
/// builders below, and of kinds no builder names (a Secret, a claim).
pub fn object(api_version: &str, kind: &str, name: &str) -> Object {
    Object(json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}))
}

/// A Pod, running and not ready.
pub fn pod(name: &str) -> Object {
    object("v1", "Pod", name).set(
        "/status",
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}),
    )
}

/// A Job that is running.
pub fn job(name: &str) -> Object {
    object("batch/v1", "Job", name).set("/status", json!({"active": 1}))
}

/// A StatefulSet asking for nothing yet; see [`Object::serving`].
pub fn statefulset(name: &str) -> Object {
    object("apps/v1", "StatefulSet", name).set("/spec", json!({"selector": {}, "template": {}}))
}

/// A parent of `kind` (`WebServer`, `Memcached`, `Backup`, `Database`)
/// with an empty spec; see [`Object::spec`].
pub fn parent(kind: &str, name: &str) -> Object {
    object(PARENT_API_VERSION, kind, name).set("/spec", json!({}))
}

/// A WebServer with an empty spec.
pub fn webserver(name: &str) -> Object {
    parent("WebServer", name)
}

/// A Memcached with an empty spec.
pub fn memcached(name: &str) -> Object {
    parent("Memcached", name)
}

/// A Backup with an empty spec.
pub fn backup(name: &str) -> Object {
    parent("Backup", name)
}

/// A Database with an empty spec.
pub fn database(name: &str) -> Object {
    parent("Database", name)
}

/// Database `orders` in namespace `prod`, where the Database's unit tests
/// start: version 16, size medium, 1Gi of storage, `deletionPolicy:
/// Retain`; a test sets what its case is about (`.spec("size", "large")`).
pub fn orders() -> Object {
    database("orders")
        .namespace("prod")
        .spec("version", "16")
        .spec("size", "medium")
        .spec("storage", json!({"size": "1Gi"}))
        .spec("deletionPolicy", "Retain")
}

/// Instance `ordinal` of Database `orders`: its pod, as its StatefulSet
/// labels it, running and not ready.
pub fn instance(ordinal: u32) -> Object {
    pod(&format!("orders-{ordinal}")).label("app.kubernetes.io/name", "postgresql")
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

    /// With this uid.
    pub fn uid(self, uid: &str) -> Self {
        self.set("/metadata/uid", json!(uid))
    }

    /// At this generation.
    pub fn generation(self, generation: i64) -> Self {
        self.set("/metadata/generation", json!(generation))
    }

    /// Created at this time (RFC 3339).
    pub fn created(self, at: &str) -> Self {
        self.set("/metadata/creationTimestamp", json!(at))
    }

    /// Being deleted (since the Unix epoch: no test reads when).
    pub fn deleting(self) -> Self {
        self.set("/metadata/deletionTimestamp", json!("1970-01-01T00:00:00Z"))
    }

    /// A parent whose spec has `field` (a JSON pointer below `spec`, such
    /// as `storage/size`) set to `value`.
    pub fn spec(self, field: &str, value: impl Into<Value>) -> Self {
        self.set(&format!("/spec/{field}"), value.into())
    }

    /// With this status, whole.
    pub fn status(self, status: Value) -> Self {
        self.set("/status", status)
    }

    /// A Pod that is Ready.
    pub fn ready(self) -> Self {
        self.ready_if(true)
    }

    /// A Pod that is Ready when `ready`, not ready otherwise.
    pub fn ready_if(self, ready: bool) -> Self {
        let status = if ready { "True" } else { "False" };
        self.set(
            "/status/conditions",
            json!([{"type": "Ready", "status": status}]),
        )
    }

    /// A Pod not ready since `at` (its `Ready` condition's transition).
    pub fn not_ready_since(self, at: &str) -> Self {
        self.set(
            "/status/conditions",
            json!([{"type": "Ready", "status": "False", "lastTransitionTime": at}]),
        )
    }

    /// A Pod in this phase.
    pub fn phase(self, phase: &str) -> Self {
        self.set("/status/phase", json!(phase))
    }

    /// A Pod with this IP address.
    pub fn ip(self, ip: &str) -> Self {
        self.set("/status/podIP", json!(ip))
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

    /// A StatefulSet or Deployment asking for `replicas`.
    pub fn replicas(self, replicas: i64) -> Self {
        self.set("/spec/replicas", json!(replicas))
    }

    /// A StatefulSet whose volumes go with it (`Delete`) or stay
    /// (`Retain`) when it is deleted.
    pub fn when_deleted(self, policy: &str) -> Self {
        self.set(
            "/spec/persistentVolumeClaimRetentionPolicy/whenDeleted",
            json!(policy),
        )
    }

    /// A workload whose pods run these containers.
    pub fn containers(self, containers: Value) -> Self {
        self.set("/spec/template/spec/containers", containers)
    }

    /// A workload whose pod template carries these annotations.
    pub fn template_annotations(self, annotations: Value) -> Self {
        self.set("/spec/template/metadata/annotations", annotations)
    }

    /// A StatefulSet of `replicas`, all ready, its controller caught up.
    pub fn serving(self, replicas: i32) -> Self {
        let generation = self.0["metadata"]["generation"].clone();
        self.set("/spec/replicas", json!(replicas)).set(
            "/status",
            json!({"replicas": replicas, "readyReplicas": replicas, "observedGeneration": generation}),
        )
    }

    /// The group Metacontroller files the object under: `Kind.apiVersion`.
    fn group(&self) -> String {
        let text = |field: &str| self.0[field].as_str().unwrap_or_default().to_string();
        format!("{}.{}", text("kind"), text("apiVersion"))
    }

    /// The object's key in its group: `name`, or `namespace/name` as
    /// Metacontroller's v2 hooks key it.
    fn key(&self, namespaced: bool) -> String {
        let metadata = &self.0["metadata"];
        let name = metadata["name"].as_str().unwrap_or_default();
        match metadata["namespace"].as_str() {
            Some(namespace) if namespaced => format!("{namespace}/{name}"),
            _ => name.to_string(),
        }
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

/// A hook's request body under construction: a parent, its observed
/// children and related objects, each filed under its group and key as
/// Metacontroller sends them.
#[derive(Clone, Debug)]
pub struct Request {
    body: Value,
    namespaced_keys: bool,
}

/// A request about `parent`, with nothing observed yet.
pub fn request(parent: Object) -> Request {
    Request {
        body: json!({"parent": parent.0, "children": {}, "related": {}}),
        namespaced_keys: false,
    }
}

impl Request {
    /// Keys the objects added from now on `namespace/name`, as
    /// Metacontroller's v2 hooks do, when `namespaced` (by name alone,
    /// as v1 hooks do, otherwise).
    pub fn namespaced_keys(mut self, namespaced: bool) -> Self {
        self.namespaced_keys = namespaced;
        self
    }

    /// With this observed child.
    pub fn child(self, object: Object) -> Self {
        self.insert("children", object)
    }

    /// With this related object.
    pub fn related(self, object: Object) -> Self {
        self.insert("related", object)
    }

    /// With a group of children (`Pod.v1`), empty until a child is added,
    /// as Metacontroller sends a group it watches with nothing in it.
    pub fn child_group(mut self, group: &str) -> Self {
        self.group("children", group);
        self
    }

    /// With a group of related objects, empty until one is added.
    pub fn related_group(mut self, group: &str) -> Self {
        self.group("related", group);
        self
    }

    /// With every group Metacontroller sends `operator`'s hooks, empty
    /// until an object is added: its declared child types and the related
    /// groups its customize hook asks for.
    pub fn every_group(mut self, operator: &str) -> Self {
        let (children, related) = groups_of(operator);
        for group in children {
            self.group("children", group);
        }
        for group in related {
            self.group("related", group);
        }
        self
    }

    /// The request as JSON.
    pub fn json(self) -> Value {
        self.body
    }

    fn insert(mut self, side: &str, object: Object) -> Self {
        let (group, key) = (object.group(), object.key(self.namespaced_keys));
        self.group(side, &group)[key] = object.0;
        self
    }

    /// The group `group` of `side` (`children` or `related`), made empty
    /// if it is not there.
    fn group(&mut self, side: &str, group: &str) -> &mut Value {
        let groups = &mut self.body[side];
        if !groups[group].is_object() {
            groups[group] = json!({});
        }
        &mut groups[group]
    }
}

/// The child groups `operator` declares and the related groups its
/// customize hook asks for: what every request to it carries.
pub fn groups_of(operator: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match operator {
        "webserver" => (&["Pod.v1"], &[]),
        "memcached" => (&["Deployment.apps/v1", "Service.v1"], &["Pod.v1"]),
        "backup" => (
            &["CronJob.batch/v1", "Job.batch/v1"],
            &["StatefulSet.apps/v1", "Job.batch/v1", "Pod.v1"],
        ),
        "database" => (
            &[
                "StatefulSet.apps/v1",
                "Service.v1",
                "EndpointSlice.discovery.k8s.io/v1",
                "ConfigMap.v1",
                "Secret.v1",
                "Job.batch/v1",
                "CronJob.batch/v1",
                "PodDisruptionBudget.policy/v1",
                "ServiceAccount.v1",
                "Role.rbac.authorization.k8s.io/v1",
                "RoleBinding.rbac.authorization.k8s.io/v1",
            ],
            &[
                "Pod.v1",
                "PersistentVolumeClaim.v1",
                "StorageClass.storage.k8s.io/v1",
            ],
        ),
        _ => (&[], &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_files_objects_by_group_and_key_as_metacontroller_does() {
        let parent = webserver("web").namespace("ns").spec("replicas", 2);
        let got = request(parent)
            .child(pod("web-0").namespace("ns"))
            .namespaced_keys(true)
            .child(pod("web-1").namespace("ns").ready())
            .related(job("init").failed())
            .child_group("Service.v1")
            .json();
        assert_eq!(got["parent"]["spec"], json!({"replicas": 2}));
        assert_eq!(got["parent"]["apiVersion"], "opshooks.io/v1alpha1");
        let pods = got["children"]["Pod.v1"].as_object().unwrap();
        assert_eq!(pods.keys().collect::<Vec<_>>(), ["ns/web-1", "web-0"]);
        assert_eq!(
            pods["ns/web-1"]["status"]["conditions"][0]["status"],
            "True"
        );
        assert_eq!(got["children"]["Service.v1"], json!({}));
        let init = &got["related"]["Job.batch/v1"]["init"];
        assert_eq!(init["status"]["conditions"][0]["type"], "Failed");
    }
}
