//! Observed objects as Metacontroller sends them, and typed access to them.
//!
//! Metacontroller groups objects by `<Kind>.<apiVersion>` and keys each
//! group by a path whose shape depends on the hook version (`name` or
//! `namespace/name`). Operators never parse those keys: they ask for all
//! objects of a Kubernetes type and get them decoded, sorted by namespace and
//! name.

use std::collections::BTreeMap;

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::{DecodeError, describe};

/// The group key Metacontroller uses for a Kubernetes type: `Pod.v1`,
/// `StatefulSet.apps/v1`.
pub fn group_key<K: k8s_openapi::Resource>() -> String {
    format!("{}.{}", K::KIND, K::API_VERSION)
}

/// Observed objects: `<Kind>.<apiVersion>` → path key → object.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(transparent)]
pub struct ObjectGroups(BTreeMap<String, BTreeMap<String, Value>>);

impl ObjectGroups {
    /// All observed objects of type `K`, decoded and sorted by namespace and
    /// name. Fields the typed model does not know are ignored.
    pub fn of<K>(&self) -> Result<Vec<K>, DecodeError>
    where
        K: k8s_openapi::Resource + Metadata<Ty = ObjectMeta> + DeserializeOwned,
    {
        let key = group_key::<K>();
        let Some(group) = self.0.get(&key) else {
            return Ok(Vec::new());
        };
        let mut objects = group
            .iter()
            .map(|(path, value)| {
                serde_path_to_error::deserialize::<_, K>(value).map_err(|err| {
                    DecodeError::Malformed(describe(&format!("observed {key} {path:?}"), err))
                })
            })
            .collect::<Result<Vec<K>, _>>()?;
        objects.sort_by(|a, b| {
            let (a, b) = (a.metadata(), b.metadata());
            (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name))
        });
        Ok(objects)
    }

    /// How many objects there are across all groups.
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeMap::len).sum()
    }

    /// True when no object was observed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds an object under the key Metacontroller's hook `version` would use.
    /// Test and example code uses this to build requests.
    pub fn insert<K>(&mut self, object: &K, path: String)
    where
        K: k8s_openapi::Resource + Serialize,
    {
        let value = serde_json::to_value(object).expect("Kubernetes objects serialize");
        self.0
            .entry(group_key::<K>())
            .or_default()
            .insert(path, value);
    }

    /// Declares a group as present and empty, as Metacontroller does for every
    /// child type of the controller.
    pub fn declare<K: k8s_openapi::Resource>(&mut self) {
        self.0.entry(group_key::<K>()).or_default();
    }
}

/// Metacontroller may send `null` for an empty map; treat it as empty.
pub(super) fn null_as_empty<'de, D>(deserializer: D) -> Result<ObjectGroups, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(Option::<ObjectGroups>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn groups(value: Value) -> ObjectGroups {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn group_keys_follow_metacontroller() {
        assert_eq!(group_key::<Pod>(), "Pod.v1");
        assert_eq!(group_key::<StatefulSet>(), "StatefulSet.apps/v1");
    }

    #[test]
    fn both_hook_versions_decode_to_the_same_sorted_objects() {
        let v1 = groups(json!({"Pod.v1": {
            "web-1": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "ns"}},
            "web-0": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "ns"}, "somethingNew": 1},
        }}));
        let v2 = groups(json!({"Pod.v1": {
            "ns/web-0": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "ns"}},
            "ns/web-1": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "ns"}},
        }}));
        let names = |g: &ObjectGroups| {
            g.of::<Pod>()
                .unwrap()
                .into_iter()
                .map(|p| p.metadata.name.unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&v1), ["web-0", "web-1"]);
        assert_eq!(names(&v1), names(&v2));
    }

    #[test]
    fn keys_are_never_parsed_for_names() {
        // A key that disagrees with the object: the metadata wins.
        let g = groups(json!({"Pod.v1": {"ns/wrong": {"metadata": {"name": "right"}}}}));
        let pods = g.of::<Pod>().unwrap();
        assert_eq!(pods[0].metadata.name.as_deref(), Some("right"));
    }

    #[test]
    fn absent_group_is_empty_and_bad_object_names_its_key() {
        let g = groups(json!({"Pod.v1": {"web-0": {"metadata": {"name": 7}}}}));
        assert!(g.of::<StatefulSet>().unwrap().is_empty());
        let err = g.of::<Pod>().unwrap_err().to_string();
        assert!(
            err.starts_with("observed Pod.v1 \"web-0\": metadata.name: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn len_counts_across_groups() {
        let g = groups(
            json!({"Pod.v1": {"a": {}, "b": {}}, "Service.v1": {"c": {}}, "ConfigMap.v1": {}}),
        );
        assert_eq!(g.len(), 3);
        assert!(!g.is_empty());
        assert!(ObjectGroups::default().is_empty());
    }
}
