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
use serde_json::value::RawValue;

use super::{DecodeError, decode_text};

/// The group key Metacontroller uses for a Kubernetes type: `Pod.v1`,
/// `StatefulSet.apps/v1`.
pub fn group_key<K: k8s_openapi::Resource>() -> String {
    format!("{}.{}", K::KIND, K::API_VERSION)
}

/// Observed objects: `<Kind>.<apiVersion>` → path key → object.
///
/// Each object is kept as its JSON text and decoded only when an operator
/// asks for its type: a tree of `Value`s costs several times the body's
/// size, and a parent with thousands of children sends tens of MiB.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(transparent)]
pub struct ObjectGroups(BTreeMap<String, BTreeMap<String, Box<RawValue>>>);

impl PartialEq for ObjectGroups {
    fn eq(&self, other: &Self) -> bool {
        let texts = |g: &Self| {
            g.0.iter()
                .flat_map(|(kind, group)| {
                    group
                        .iter()
                        .map(move |(k, v)| (kind.clone(), k.clone(), v.get().to_string()))
                })
                .collect::<Vec<_>>()
        };
        texts(self) == texts(other)
    }
}

impl ObjectGroups {
    /// All observed objects of type `K`, decoded and sorted by namespace and
    /// name. Fields the typed model does not know are ignored.
    ///
    /// A group that is not there at all is refused: Metacontroller sends
    /// every child type the controller declares and every related group the
    /// customize hook asked for, even empty, so an absent group was not
    /// asked for (a customize answer cached from before an upgrade), never
    /// "no such object".
    ///
    /// An object whose `metadata.name` is missing or does not match its
    /// path key (`name` or `namespace/name`) is refused: Metacontroller never
    /// sends one, and an operator that skipped it would leave it out of its
    /// answer, which deletes it.
    pub fn of<K>(&self) -> Result<Vec<K>, DecodeError>
    where
        K: k8s_openapi::Resource + Metadata<Ty = ObjectMeta> + DeserializeOwned,
    {
        let key = group_key::<K>();
        let Some(group) = self.0.get(&key) else {
            return Err(DecodeError::MissingGroup(key));
        };
        let mut objects = group
            .iter()
            .map(|(path, raw)| {
                let object: K =
                    decode_text(raw.get().as_bytes(), || format!("observed {key} {path:?}"))
                        .map_err(DecodeError::Malformed)?;
                let meta = object.metadata();
                check_path(&key, path, meta.name.as_deref(), meta.namespace.as_deref())?;
                Ok(object)
            })
            .collect::<Result<Vec<K>, _>>()?;
        objects.sort_by(|a, b| {
            let (a, b) = (a.metadata(), b.metadata());
            (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name))
        });
        Ok(objects)
    }

    /// Checks that every observed object, of every group, carries the name
    /// (and namespace) its path key says, reading nothing else of it. An
    /// operator leaves the groups it does not read out of its answer
    /// untouched only in appearance: Metacontroller would delete a
    /// mis-keyed object that the answer rebuilds under its real name.
    pub fn check_keys(&self) -> Result<(), DecodeError> {
        for (key, group) in &self.0 {
            for (path, raw) in group {
                // Borrowed from the text, so a call's check allocates nothing
                // but for a name with escapes; a failure decodes again to
                // name the path.
                match serde_json::from_str::<Head<&str>>(raw.get()) {
                    Ok(head) => head.check(key, path)?,
                    Err(_) => decode_text::<Head<String>>(raw.get().as_bytes(), || {
                        format!("observed {key} {path:?}")
                    })
                    .map_err(DecodeError::Malformed)?
                    .check(key, path)?,
                }
            }
        }
        Ok(())
    }

    /// Checks that no object is observed twice (under a `name` and a
    /// `namespace/name` key of one group) and, for children (`namespace`:
    /// the parent's), that none lies in another namespace: Metacontroller
    /// sends neither, and an answer built from such a request would act
    /// on the wrong object or delete one of the two.
    pub fn check_scope(&self, namespace: Option<&str>) -> Result<(), DecodeError> {
        for (key, group) in &self.0 {
            let mut seen = std::collections::BTreeSet::new();
            for (path, raw) in group {
                let head: Head<String> =
                    serde_json::from_str(raw.get()).unwrap_or(Head { metadata: None });
                let meta = head.metadata.as_ref();
                let object_ns = meta.and_then(|m| m.namespace.clone());
                if let (Some(parent), Some(object)) = (namespace, object_ns.as_deref())
                    && parent != object
                {
                    return Err(DecodeError::Malformed(format!(
                        "observed {key} {path:?}: metadata.namespace is {object:?}, not the parent's {parent:?}; a child lies in its parent's namespace"
                    )));
                }
                let ns = object_ns.or_else(|| namespace.map(String::from));
                if !seen.insert((ns, name_in(path).to_string())) {
                    return Err(DecodeError::Malformed(format!(
                        "observed {key} {path:?}: the same object is observed under two keys"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Every object as its group key and name (read from its path key,
    /// which [`ObjectGroups::check_keys`] holds to the object's name).
    pub fn names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .flat_map(|(key, group)| group.keys().map(move |path| (key.as_str(), name_in(path))))
    }

    /// The names of the objects of type `K` (read from their path keys,
    /// which [`ObjectGroups::check_keys`] holds to their names); a missing
    /// group is refused as [`ObjectGroups::of`] refuses it.
    pub fn names_of<K: k8s_openapi::Resource>(&self) -> Result<Vec<&str>, DecodeError> {
        let key = group_key::<K>();
        let group = self.0.get(&key).ok_or(DecodeError::MissingGroup(key))?;
        Ok(group.keys().map(|path| name_in(path)).collect())
    }

    /// Whether the group of type `K` is in the request (a child type the
    /// controller may or may not declare).
    pub fn has<K: k8s_openapi::Resource>(&self) -> bool {
        self.0.contains_key(&group_key::<K>())
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
        let value = serde_json::value::to_raw_value(object).expect("Kubernetes objects serialize");
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

/// The name in a path key, `name` or `namespace/name`.
fn name_in(path: &str) -> &str {
    path.rsplit_once('/').map_or(path, |(_, n)| n)
}

/// An observed object must carry the name (and namespace, when the key has
/// one) its path key says.
fn check_path(
    key: &str,
    path: &str,
    name: Option<&str>,
    namespace: Option<&str>,
) -> Result<(), DecodeError> {
    let fail = |what: String| {
        Err(DecodeError::Malformed(format!(
            "observed {key} {path:?}: {what}; every observed object is keyed by its own name"
        )))
    };
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return fail("metadata.name is missing".into());
    };
    let (namespace_in_key, key_name) = match path.split_once('/') {
        Some((ns, n)) => (Some(ns), n),
        None => (None, path),
    };
    if key_name != name {
        return fail(format!("metadata.name is {name:?}"));
    }
    if let Some(ns) = namespace_in_key
        && namespace != Some(ns)
    {
        return fail(format!(
            "metadata.namespace is {:?}",
            namespace.unwrap_or_default()
        ));
    }
    Ok(())
}

/// An observed object's name and namespace (borrowed from the text as
/// `&str`, or owned where escapes need it); the rest is skipped unread.
#[derive(Deserialize)]
struct Head<S> {
    #[serde(default = "Option::default")]
    metadata: Option<HeadMeta<S>>,
}

#[derive(Deserialize)]
struct HeadMeta<S> {
    #[serde(default = "Option::default")]
    name: Option<S>,
    #[serde(default = "Option::default")]
    namespace: Option<S>,
}

impl<S: AsRef<str>> Head<S> {
    /// [`check_path`] on this object's name and namespace.
    fn check(&self, key: &str, path: &str) -> Result<(), DecodeError> {
        let meta = self.metadata.as_ref();
        let name = meta.and_then(|m| m.name.as_ref()).map(AsRef::as_ref);
        let namespace = meta.and_then(|m| m.namespace.as_ref()).map(AsRef::as_ref);
        check_path(key, path, name, namespace)
    }
}

/// A group map that must be there: Metacontroller always sends one (an
/// empty object when nothing is observed; its request builders turn a nil
/// map into `{}`), so `null` is a broken request. Taking it as empty would
/// answer as if nothing existed, and Metacontroller deletes what an answer
/// leaves out. (An absent field is refused by serde as a missing field.)
pub(super) fn required<'de, D>(deserializer: D) -> Result<ObjectGroups, D::Error>
where
    D: Deserializer<'de>,
{
    Option::<ObjectGroups>::deserialize(deserializer)?.ok_or_else(|| {
        serde::de::Error::custom(
            "is null; send an object keyed by <Kind>.<apiVersion> ({} when nothing is observed)",
        )
    })
}

/// `k8s_openapi::Resource` and `Metadata` for a namespaced type of another
/// project (cert-manager's, the Prometheus Operator's) that the hook reads
/// or writes: `namespaced_resource!(Type, "group", "v1", "Kind", "plural")`.
/// The type holds `metadata: ObjectMeta`.
macro_rules! namespaced_resource {
    ($type:ty, $group:literal, $version:literal, $kind:literal, $plural:literal) => {
        impl k8s_openapi::Resource for $type {
            const API_VERSION: &'static str = concat!($group, "/", $version);
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = k8s_openapi::NamespaceResourceScope;
        }

        impl k8s_openapi::Metadata for $type {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use namespaced_resource;

/// Serializes an object of another project's type as the API takes it:
/// its `apiVersion` and `kind`, its metadata and spec, never a status.
pub(crate) fn serialize_typed<K, Spec, S>(
    metadata: &ObjectMeta,
    spec: &Spec,
    s: S,
) -> Result<S::Ok, S::Error>
where
    K: k8s_openapi::Resource,
    Spec: Serialize,
    S: serde::Serializer,
{
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Wire<'a, Spec> {
        api_version: &'static str,
        kind: &'static str,
        metadata: &'a ObjectMeta,
        spec: &'a Spec,
    }
    Serialize::serialize(
        &Wire {
            api_version: K::API_VERSION,
            kind: K::KIND,
            metadata,
            spec,
        },
        s,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::object;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

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
        let pod = |name: &str| object("v1", "Pod", name).namespace("ns");
        let v1 = groups(json!({"Pod.v1": {
            "web-1": pod("web-1").json(),
            "web-0": pod("web-0").set("/somethingNew", json!(1)).json(),
        }}));
        let v2 = groups(
            json!({"Pod.v1": {"ns/web-0": pod("web-0").json(), "ns/web-1": pod("web-1").json()}}),
        );
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

    /// An object skipped for a missing or mismatched name would be left out
    /// of the answer, and so deleted: such a body is refused instead.
    #[test]
    fn regression_objects_must_carry_the_name_of_their_key() {
        struct Case {
            reason: &'static str,
            group: Value,
            want: Option<&'static str>,
        }
        let cases = [
            Case {
                reason: "v1 key, name only",
                group: json!({"web-0": {"metadata": {"name": "web-0", "namespace": "ns"}}}),
                want: None,
            },
            Case {
                reason: "name missing",
                group: json!({"ns/web-0": {"metadata": {"namespace": "ns"}}}),
                want: Some("observed Pod.v1 \"ns/web-0\": metadata.name is missing"),
            },
            Case {
                reason: "name differs from the key",
                group: json!({"ns/wrong": {"metadata": {"name": "right", "namespace": "ns"}}}),
                want: Some("observed Pod.v1 \"ns/wrong\": metadata.name is \"right\""),
            },
            Case {
                reason: "namespace differs from the key",
                group: json!({"ns/web-0": {"metadata": {"name": "web-0", "namespace": "other"}}}),
                want: Some("observed Pod.v1 \"ns/web-0\": metadata.namespace is \"other\""),
            },
        ];
        for case in cases {
            let groups = groups(json!({ "Pod.v1": case.group }));
            let got = groups.of::<Pod>();
            // check_keys, which reads every group, must agree with `of`.
            let checked = groups.check_keys();
            match case.want {
                None => assert!(
                    got.is_ok() && checked.is_ok(),
                    "{}: {got:?} {checked:?}",
                    case.reason
                ),
                Some(want) => {
                    let err = got.unwrap_err().to_string();
                    assert!(err.starts_with(want), "{}: {err}", case.reason);
                    let err = checked.unwrap_err().to_string();
                    assert!(err.starts_with(want), "{}: check_keys: {err}", case.reason);
                }
            }
        }
    }

    /// check_keys reads names borrowed from the text; a name written with
    /// escapes cannot be borrowed and is read again, owned: it must be
    /// judged the same, and a broken object still names its path.
    #[test]
    fn check_keys_reads_escaped_names_and_names_broken_objects() {
        let escaped: ObjectGroups =
            serde_json::from_str(r#"{"Pod.v1": {"web-0": {"metadata": {"name": "web\u002d0"}}}}"#)
                .unwrap();
        assert!(escaped.check_keys().is_ok());
        let renamed: ObjectGroups =
            serde_json::from_str(r#"{"Pod.v1": {"web-0": {"metadata": {"name": "web\u002d1"}}}}"#)
                .unwrap();
        let err = renamed.check_keys().unwrap_err().to_string();
        assert!(err.contains("metadata.name is \"web-1\""), "{err}");
        let broken = groups(json!({"Pod.v1": {"web-0": {"metadata": {"name": 7}}}}));
        let err = broken.check_keys().unwrap_err().to_string();
        assert!(err.contains("metadata.name"), "{err}");
    }

    /// Issue 31: an absent group was read as "none", so finalize let
    /// retained volumes go while a claim existed.
    #[test]
    fn regression_absent_group_is_refused_and_bad_object_names_its_key() {
        let g = groups(json!({"Pod.v1": {"web-0": {"metadata": {"name": 7}}}, "Job.batch/v1": {}}));
        assert!(g.of::<Job>().unwrap().is_empty());
        let err = g.of::<StatefulSet>().unwrap_err();
        assert_eq!(err, DecodeError::MissingGroup("StatefulSet.apps/v1".into()));
        assert!(
            err.to_string()
                .starts_with("observed group StatefulSet.apps/v1 is missing"),
            "{err}"
        );
        let err = g.of::<Pod>().unwrap_err().to_string();
        assert!(
            err.starts_with("observed Pod.v1 \"web-0\": metadata.name: invalid type"),
            "{err}"
        );
    }

    /// Issue 31: an object in another namespace, or one observed under
    /// both key shapes, reached the operator.
    #[test]
    fn regression_children_lie_in_the_parents_namespace_and_once() {
        let pod = |ns: &str| json!({"metadata": {"name": "web-0", "namespace": ns}});
        let cases = [
            ("own namespace", json!({"ns/web-0": pod("ns")}), None),
            ("v1 key", json!({"web-0": pod("ns")}), None),
            (
                "other namespace",
                json!({"other/web-0": pod("other")}),
                Some("metadata.namespace is \"other\", not the parent's \"ns\""),
            ),
            (
                "two keys",
                json!({"web-0": pod("ns"), "ns/web-0": pod("ns")}),
                Some("the same object is observed under two keys"),
            ),
        ];
        for (reason, group, want) in cases {
            let got = groups(json!({ "Pod.v1": group })).check_scope(Some("ns"));
            match want {
                None => assert!(got.is_ok(), "{reason}: {got:?}"),
                Some(want) => {
                    let err = got.unwrap_err().to_string();
                    assert!(err.contains(want), "{reason}: {err}");
                }
            }
        }
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
