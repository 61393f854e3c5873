//! The StatefulSet controller: pods made in order (or all at once under
//! `Parallel`) from the revision of the template they belong to, a claim
//! per volume claim template and ordinal, the claims handed to the
//! StatefulSet as its retention policy says once their pod is ready, the
//! rolling update down to the partition, the revisions in the status; and
//! a lost volume, which the StatefulSet makes again empty.

use serde_json::{Value, json};

use super::workload::workload;
use super::{
    Actor, Cluster, DEFAULT_CLASS, Key, REVISION_LABEL, is_ready, object_map, owner_ref, pod_key,
    uid_of,
};
use crate::hook::digest;

impl Cluster {
    /// Pods and claims of one StatefulSet, its claims' owner references as
    /// its retention policy says, and its status.
    pub(super) fn statefulset(&mut self, key: &Key) {
        let Some(sts) = self.objects.get(key).cloned() else {
            return;
        };
        if sts.pointer("/metadata/deletionTimestamp").is_some() {
            return;
        }
        let (replicas, template) = workload(&sts);
        let claims = sts
            .pointer("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let delete_claims = sts
            .pointer("/spec/persistentVolumeClaimRetentionPolicy/whenDeleted")
            .and_then(Value::as_str)
            == Some("Delete");
        let ordered = sts
            .pointer("/spec/podManagementPolicy")
            .and_then(Value::as_str)
            != Some("Parallel");
        let update = format!("{}-{}", key.name, digest::of_json(&template));
        self.revisions.entry(update.clone()).or_insert(template);
        let current = sts
            .pointer("/status/currentRevision")
            .and_then(Value::as_str)
            .unwrap_or(&update)
            .to_string();
        let partition = rolling_partition(&sts);
        for index in 0..replicas {
            let claim_keys = self.ensure_claims(key, index, &claims);
            let pod = pod_key(key, index);
            // Below the partition a pod made again keeps the current
            // revision; at or above it, it takes the update revision.
            let revision = if partition.is_some_and(|p| index < p) {
                &current
            } else {
                &update
            };
            self.ensure_revision_pod(&pod, revision, &sts);
            // As the real controller: a pod's claims follow the retention
            // policy only once that pod runs and is ready, and under
            // OrderedReady nothing past the first pod that is not goes on.
            // Claims of ordinals past `replicas` are never touched.
            let ready = self.objects.get(&pod).is_some_and(is_ready);
            if ready {
                for claim_key in &claim_keys {
                    if let Some(pvc) = self.objects.get_mut(claim_key) {
                        set_owned(pvc, &sts, delete_claims);
                    }
                }
            } else if ordered {
                break;
            }
        }
        if let Some(partition) = partition {
            self.roll(key, &update, partition, replicas);
        }
        self.remove_extra_pods(key, &sts, replicas);
        self.set_workload_status(key, &sts);
        self.set_revision_status(key, &update, &current, replicas);
    }

    /// A StatefulSet's revisions in its status: the update revision, how
    /// many of its `replicas` pods run it, and the current revision, which
    /// becomes the update revision once every pod does.
    fn set_revision_status(&mut self, key: &Key, update: &str, current: &str, replicas: usize) {
        let updated = (0..replicas)
            .filter(|i| self.revision_of(&pod_key(key, *i)) == Some(update))
            .count();
        let current = if updated == replicas { update } else { current };
        let status = json!({"updateRevision": update, "currentRevision": current, "updatedReplicas": updated});
        if let Some(object) = self.objects.get_mut(key) {
            object_map(object, "status").extend(status.as_object().cloned().unwrap_or_default());
        }
    }

    /// The rolling update, as the real controller does it: from the
    /// highest ordinal down to the partition, the first pod not at the
    /// update revision is deleted (made again at it next round), one per
    /// round, and nothing goes on past a pod that is not ready.
    fn roll(&mut self, key: &Key, update: &str, partition: usize, replicas: usize) {
        for index in (partition..replicas).rev() {
            let pod = pod_key(key, index);
            let Some(object) = self.objects.get(&pod) else {
                return;
            };
            if self.revision_of(&pod) != Some(update) {
                self.delete(&pod, Actor::Controllers);
                return;
            }
            if !is_ready(object) {
                return;
            }
        }
    }

    /// The revision a StatefulSet's pod was made at.
    fn revision_of(&self, pod: &Key) -> Option<&str> {
        self.objects
            .get(pod)?
            .pointer(&format!("/metadata/labels/{REVISION_LABEL}"))
            .and_then(Value::as_str)
    }

    /// A StatefulSet's pod exists, made (if missing) from the template of
    /// `revision` and labelled with it. An existing pod is left alone: only
    /// the rolling update replaces pods.
    fn ensure_revision_pod(&mut self, pod: &Key, revision: &str, owner: &Value) {
        if self.objects.contains_key(pod) {
            return;
        }
        let template = self.revisions.get(revision).cloned().unwrap_or(json!({}));
        self.ensure_pod(pod, &template, owner);
        if let Some(labels) = self
            .objects
            .get_mut(pod)
            .and_then(|o| o.pointer_mut("/metadata/labels"))
            .and_then(Value::as_object_mut)
        {
            labels.insert(REVISION_LABEL.into(), json!(revision));
        }
    }

    /// The claims of the StatefulSet `key`'s pod `index`, one per template
    /// in `claims`, created (bound) where they are missing.
    fn ensure_claims(&mut self, key: &Key, index: usize, claims: &[Value]) -> Vec<Key> {
        let claim_keys: Vec<Key> = claims
            .iter()
            .map(|claim| {
                let template = claim
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("data");
                let name = format!("{template}-{}-{index}", key.name);
                Key::new("v1", "PersistentVolumeClaim", &key.namespace, &name)
            })
            .collect();
        for (claim, claim_key) in claims.iter().zip(&claim_keys) {
            if !self.objects.contains_key(claim_key) {
                // Admission gives a claim without a class the default one;
                // the volume bound to it has the size it requests.
                let mut spec = claim.get("spec").cloned().unwrap_or(json!({}));
                if let Some(spec) = spec.as_object_mut() {
                    spec.entry("storageClassName")
                        .or_insert_with(|| json!(DEFAULT_CLASS));
                }
                let capacity = spec
                    .pointer("/resources/requests")
                    .cloned()
                    .unwrap_or(json!({}));
                let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim_key.name, "namespace": key.namespace,
                                 "labels": claim.pointer("/metadata/labels").cloned().unwrap_or(json!({}))},
                    "spec": spec,
                    "status": {"phase": "Bound", "capacity": capacity}});
                self.create(pvc, Actor::Controllers);
            }
        }
        claim_keys
    }

    /// Loses the volume of a StatefulSet's pod (a disk or its zone lost):
    /// its claims and the pod are deleted, and the StatefulSet makes them
    /// again on its next round, the claims bound to new, empty volumes.
    /// Returns the claims lost; none when `pod` is not a StatefulSet's.
    pub fn lose_volume(&mut self, pod: &Key) -> Vec<String> {
        let Some(object) = self.objects.get(pod) else {
            return Vec::new();
        };
        let Some((sts_key, sts)) = self
            .statefulset_of(object)
            .map(|(k, o)| (k.clone(), o.clone()))
        else {
            return Vec::new();
        };
        let Some(index) = pod
            .name
            .strip_prefix(&format!("{}-", sts_key.name))
            .and_then(|i| i.parse::<usize>().ok())
        else {
            return Vec::new();
        };
        let templates = sts
            .pointer("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let claims: Vec<Key> = self.ensure_claims(&sts_key, index, &templates);
        for claim in &claims {
            self.delete(claim, Actor::User);
        }
        self.delete(pod, Actor::User);
        self.collect_garbage();
        // The StatefulSet makes them again, empty, on its next round, and
        // the pod on them.
        let names: Vec<String> = claims.into_iter().map(|k| k.name).collect();
        self.empty_volumes.extend(names.iter().cloned());
        names
    }
}

/// A StatefulSet's rolling-update partition (0 when unset); `None` under
/// `OnDelete`, where the controller replaces no pod by itself.
fn rolling_partition(sts: &Value) -> Option<usize> {
    let strategy = sts.pointer("/spec/updateStrategy");
    if strategy.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("OnDelete") {
        return None;
    }
    let partition = strategy
        .and_then(|s| s.pointer("/rollingUpdate/partition"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    Some(usize::try_from(partition.max(0)).unwrap_or(0))
}

/// Adds (`owned`) or removes `owner`'s owner reference on `object`; an
/// object left with none has no `ownerReferences`.
fn set_owned(object: &mut Value, owner: &Value, owned: bool) {
    let uid = uid_of(owner).unwrap_or_default().to_string();
    let meta = object_map(object, "metadata");
    let mut refs: Vec<Value> = meta
        .get("ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
    if owned {
        refs.push(owner_ref(owner));
    }
    if refs.is_empty() {
        meta.remove("ownerReferences");
    } else {
        meta.insert("ownerReferences".into(), Value::Array(refs));
    }
}
