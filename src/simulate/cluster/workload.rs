//! What the Deployment and StatefulSet controllers share: how many pods a
//! workload asks for and their template, a pod made from a template (and
//! replaced when the template changed), the pods past `replicas` removed,
//! and the workload's status counted from its pods.

use serde_json::{Value, json};

use super::{
    Actor, Cluster, Key, POD_NAME_LABEL, is_owned_by, is_ready, object_map, owner_ref, uid_of,
};

impl Cluster {
    /// A pod of a workload exists and runs the current template; a pod of
    /// an older template is replaced (created again on the next round).
    pub(super) fn ensure_pod(&mut self, pod_key: &Key, template: &Value, owner: &Value) {
        let spec = template.get("spec").cloned().unwrap_or(json!({}));
        if let Some(existing) = self.objects.get(pod_key) {
            if existing.get("spec") != Some(&spec) {
                self.delete(pod_key, Actor::Controllers);
            }
            return;
        }
        let mut labels = template
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or(json!({}));
        // The StatefulSet controller names each pod in a label, which a
        // Service can select one pod by.
        if owner["kind"] == "StatefulSet"
            && let Some(map) = labels.as_object_mut()
        {
            map.insert(POD_NAME_LABEL.into(), json!(pod_key.name));
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_key.name, "namespace": pod_key.namespace,
                         "labels": labels,
                         "ownerReferences": [owner_ref(owner)]},
            "spec": spec,
            "status": {"phase": "Pending"}});
        self.create(pod, Actor::Controllers);
    }

    /// Deletes the pods of `owner` (the workload `key`) whose ordinal is
    /// `replicas` or more, or that have none.
    pub(super) fn remove_extra_pods(&mut self, key: &Key, owner: &Value, replicas: usize) {
        let Some(uid) = uid_of(owner).map(String::from) else {
            return;
        };
        let extra: Vec<Key> = self
            .objects
            .iter()
            .filter(|(k, o)| {
                k.kind == "Pod" && k.namespace == key.namespace && is_owned_by(o, &uid)
            })
            .filter(|(k, _)| {
                k.name
                    .strip_prefix(&format!("{}-", key.name))
                    .and_then(|i| i.parse::<usize>().ok())
                    .is_none_or(|i| i >= replicas)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for pod in extra {
            self.delete(&pod, Actor::Controllers);
        }
    }

    /// The workload's `replicas`, `readyReplicas`, `availableReplicas` and
    /// `observedGeneration`, counted from the pods it owns.
    pub(super) fn set_workload_status(&mut self, key: &Key, owner: &Value) {
        let Some(uid) = uid_of(owner) else {
            return;
        };
        let pods: Vec<&Value> = self
            .objects
            .iter()
            .filter(|(k, o)| k.kind == "Pod" && is_owned_by(o, uid))
            .map(|(_, o)| o)
            .collect();
        let ready = pods.iter().filter(|p| is_ready(p)).count();
        let status = json!({
            "replicas": pods.len(),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": owner.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        });
        if let Some(object) = self.objects.get_mut(key) {
            object_map(object, "status").extend(status.as_object().cloned().unwrap_or_default());
        }
    }
}

/// How many pods a workload asks for (1 when unset) and their template.
pub(super) fn workload(object: &Value) -> (usize, Value) {
    let replicas = object
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0) as usize;
    let template = object
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(json!({}));
    (replicas, template)
}
