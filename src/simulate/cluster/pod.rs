//! The kubelet, as the model runs it: a pod runs once scheduled and is
//! ready from its second round, unless scripted not to be or unless it
//! refuses to start on an empty volume (as `start.sh` does), its `Ready`
//! condition's `lastTransitionTime` moving only when it flips.

use serde_json::{Value, json};

use super::{Cluster, EMPTY_VOLUME_REFUSAL, Key, uid_of};
use crate::hook::conditions::format_time;

impl Cluster {
    /// A pod runs once scheduled and is ready from its second round on,
    /// unless scripted not to be, or unless it refuses to start on an empty
    /// volume (see [`Cluster::refuses_empty_volume`]). Its `Ready`
    /// condition's `lastTransitionTime` moves only when its status flips,
    /// as the kubelet's does: how long a pod has been not ready is read
    /// from it.
    pub(super) fn pod(&mut self, key: &Key) {
        let Some(pod) = self.objects.get(key) else {
            return;
        };
        let empty = self.empty_claims(pod, &key.name);
        let refuses = !empty.is_empty() && self.refuses_empty_volume(pod, &key.name);
        let ready = self.age_of(pod) >= 1 && !self.not_ready_pods.contains(&key.name) && !refuses;
        let status = if ready { "True" } else { "False" };
        let was = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
        let since = was
            .filter(|c| c["status"] == status)
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(format_time(self.now)));
        let ip = format!(
            "10.{}.{}.{}",
            self.next_uid % 200,
            key.name.len() % 250,
            uid_of(pod).map_or(0, |u| u.len())
        );
        let ip = pod
            .pointer("/status/podIP")
            .and_then(Value::as_str)
            .map_or(ip, String::from);
        let mut status = json!({"phase": "Running", "podIP": ip, "conditions": [
            {"type": "Ready", "status": status, "lastTransitionTime": since}]});
        if refuses {
            // As `start.sh` leaves it: the hook reads why from here.
            status["containerStatuses"] = json!([{"name": "postgres", "restartCount": 1,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "message": EMPTY_VOLUME_REFUSAL}}}]);
        }
        if let Some(object) = self.objects.get_mut(key) {
            object
                .as_object_mut()
                .map(|o| o.insert("status".into(), status));
        }
        // A pod that starts on an empty volume fills it (it cloned).
        if ready {
            for claim in empty {
                self.empty_volumes.remove(&claim);
            }
        }
    }

    /// The claims of a StatefulSet's pod (`<template>-<pod>`, for each of
    /// its owner's claim templates) that are empty.
    fn empty_claims(&self, pod: &Value, name: &str) -> Vec<String> {
        if self.empty_volumes.is_empty() {
            return Vec::new();
        }
        let Some((_, sts)) = self.statefulset_of(pod) else {
            return Vec::new();
        };
        sts.pointer("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| t.pointer("/metadata/name").and_then(Value::as_str))
            .map(|t| format!("{t}-{name}"))
            .filter(|claim| self.empty_volumes.contains(claim))
            .collect()
    }

    /// `start.sh`'s rule for an instance whose volume is empty: it reads
    /// its role from the ConfigMap its pod mounts as the volume `role`
    /// (`primary`, `initialized`). If it is the designated primary of a
    /// Database that was initialized, it refuses to start (initializing
    /// there would serve an empty cluster over lost data), and stays not
    /// ready, saying why in its container's termination message; any other
    /// instance clones the primary and becomes ready, as on a first start.
    fn refuses_empty_volume(&self, pod: &Value, name: &str) -> bool {
        let namespace = pod
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        let role = pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "role")
            .and_then(|v| v.pointer("/configMap/name"))
            .and_then(Value::as_str)
            .and_then(|map| {
                self.objects
                    .get(&Key::new("v1", "ConfigMap", namespace, map))
            });
        role.is_some_and(|role| {
            role.pointer("/data/primary").and_then(Value::as_str) == Some(name)
                && role.pointer("/data/initialized").and_then(Value::as_str) == Some("true")
        })
    }
}
