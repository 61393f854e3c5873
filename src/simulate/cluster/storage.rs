//! The storage driver: a bound claim's capacity follows its request when
//! its StorageClass allows volume expansion.

use serde_json::{Value, json};

use super::{Cluster, Key, object_map};

impl Cluster {
    /// A storage driver that expands volumes online: a bound claim of a
    /// class that allows expansion has what it requests, one round after
    /// it asked.
    pub(super) fn expand(&mut self, key: &Key) {
        let Some(claim) = self.objects.get(key) else {
            return;
        };
        let class = claim
            .pointer("/spec/storageClassName")
            .and_then(Value::as_str);
        let expands = self.storage_classes.iter().any(|c| {
            c.pointer("/metadata/name").and_then(Value::as_str) == class
                && c["allowVolumeExpansion"] == json!(true)
        });
        let wanted = claim.pointer("/spec/resources/requests/storage").cloned();
        let has = claim.pointer("/status/capacity/storage");
        if !expands || wanted.is_none() || has == wanted.as_ref() {
            return;
        }
        if let Some(status) = self.objects.get_mut(key).map(|c| object_map(c, "status")) {
            let capacity = status.entry("capacity").or_insert_with(|| json!({}));
            if let Some(capacity) = capacity.as_object_mut() {
                capacity.insert("storage".into(), wanted.unwrap_or_default());
            }
        }
    }
}
