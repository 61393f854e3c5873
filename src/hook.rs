//! Metacontroller's wire protocol: the request and response bodies of every
//! hook, and typed access to the observed objects inside a request.
//!
//! This module owns the shape of what crosses the wire and nothing else: it
//! knows no axum, does no I/O and reads no clock. Requests tolerate unknown
//! fields (Metacontroller and Kubernetes add fields over time); responses
//! carry exactly the fields Metacontroller's strict decoder accepts.

pub mod conditions;
pub mod digest;
mod objects;
mod pod;
pub mod quote;
mod unique;

pub use objects::{ObjectGroups, group_key};
pub(crate) use objects::{namespaced_resource, serialize_typed};
pub use pod::{ObservedContainer, ObservedPod, ObservedPodSpec, ObservedPodStatus};

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// The hooks a controller can call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hook {
    /// CompositeController `sync`: desired children and status.
    Sync,
    /// CompositeController `finalize`: the parent is being deleted.
    Finalize,
    /// CompositeController `customize`: which related objects to send.
    Customize,
}

impl Hook {
    /// Every hook, in route order.
    pub const ALL: [Hook; 3] = [Hook::Sync, Hook::Finalize, Hook::Customize];

    /// The last segment of the hook's route, also its name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Sync => "sync",
            Hook::Finalize => "finalize",
            Hook::Customize => "customize",
        }
    }

    /// Parses a route segment or command-line word.
    pub fn parse(word: &str) -> Option<Hook> {
        Hook::ALL.into_iter().find(|hook| hook.as_str() == word)
    }
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a request body could not be used. Each message names the field.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    /// The body is not JSON, or lacks a field every hook request has.
    #[error("{0}")]
    Malformed(String),
    /// The parent decodes as JSON but does not fit the operator's resource.
    #[error("{0}")]
    Parent(String),
    /// A group of `children` or `related` the operator reads is not in the
    /// request at all (its `<Kind>.<apiVersion>` key). Metacontroller sends
    /// every group it was asked for, even empty, so this one was not asked
    /// for: answering as if it were empty could delete what it holds.
    #[error(
        "observed group {0} is missing: Metacontroller sends every child type the controller declares and every related group the customize hook asks for, even empty, so it was not asked for; nothing is changed: apply this version's controller manifests, and if they are applied wait for Metacontroller's cached customize answer to expire (at most 20 minutes) or restart Metacontroller"
    )]
    MissingGroup(String),
}

/// Decodes a whole request body, naming the offending field on failure.
/// A key repeated anywhere in the body is refused: which of the two values
/// was meant cannot be known.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    unique::check(body).map_err(|err| {
        let err = err.split(" at line ").next().unwrap_or_default();
        DecodeError::Malformed(format!("request body: {err}"))
    })?;
    decode_text(body, || "request body".into()).map_err(DecodeError::Malformed)
}

/// Decodes the parent object's JSON text into the operator's typed resource.
pub fn decode_parent<P: DeserializeOwned>(parent: &RawValue) -> Result<P, DecodeError> {
    decode_text(parent.get().as_bytes(), String::new).map_err(DecodeError::Parent)
}

/// Decodes JSON text at full speed; only when that fails is it decoded
/// again, keeping the path, to say what (`what`, then the path) is wrong.
pub(crate) fn decode_text<T: DeserializeOwned>(
    text: &[u8],
    what: impl FnOnce() -> String,
) -> Result<T, String> {
    if let Ok(value) = serde_json::from_slice(text) {
        return Ok(value);
    }
    let what = what();
    let what = what.as_str();
    let mut de = serde_json::Deserializer::from_slice(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|err| describe(what, err))?;
    de.end().map_err(|err| prefixed(what, err.to_string()))?;
    Ok(value)
}

/// `what: text`, or the text alone when there is no `what` (the parent's
/// messages name their fields themselves).
fn prefixed(what: &str, text: String) -> String {
    if what.is_empty() {
        text
    } else {
        format!("{what}: {text}")
    }
}

/// What the server reads of a parent before any operator decodes it: its
/// type and its name. Every field is optional and of any JSON type, so a
/// malformed parent still gets as far as the check that names the problem.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentHead {
    #[serde(default)]
    api_version: Value,
    #[serde(default)]
    kind: Value,
    #[serde(default)]
    metadata: Option<HeadMetadata>,
}

/// The name and namespace of a parent; the rest of its metadata is skipped.
#[derive(Debug, Default, Deserialize)]
struct HeadMetadata {
    #[serde(default)]
    name: Value,
    #[serde(default)]
    namespace: Value,
}

impl ParentHead {
    /// The head of a parent's JSON text; empty when it is not an object.
    pub fn of(parent: &RawValue) -> Self {
        serde_json::from_str(parent.get()).unwrap_or_default()
    }

    /// `apiVersion`, or "" when absent or not a string.
    pub fn api_version(&self) -> &str {
        self.api_version.as_str().unwrap_or_default()
    }

    /// `kind`, or "" when absent or not a string.
    pub fn kind(&self) -> &str {
        self.kind.as_str().unwrap_or_default()
    }

    /// `metadata.name`, when present and a string.
    pub fn name(&self) -> Option<&str> {
        self.metadata.as_ref()?.name.as_str()
    }

    /// `metadata.namespace`, when present and a string.
    pub fn namespace(&self) -> Option<&str> {
        self.metadata.as_ref()?.namespace.as_str()
    }
}

/// Renders a serde error with the JSON path where it happened.
pub(crate) fn describe<E: std::fmt::Display>(
    what: &str,
    err: serde_path_to_error::Error<E>,
) -> String {
    let path = path_text(err.path());
    let inner = err.into_inner().to_string();
    // serde appends " at line 1 column 9": keep it for syntax errors (path
    // "?"), where it is all the user has, and drop it elsewhere.
    let syntax = path == "?";
    let located = path != "." && !syntax;
    let inner = match inner.rfind(" at line ") {
        Some(at) if !syntax => inner[..at].to_string(),
        _ => inner,
    };
    prefixed(
        what,
        if located {
            format!("{path}: {inner}")
        } else {
            inner
        },
    )
}

/// A path as serde_path_to_error writes it, with each key (a user's, in a
/// map) cut to [`quote::QUOTE_CHARS`] characters.
fn path_text(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    if path.iter().next().is_none() {
        return ".".into();
    }
    let mut text = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => text.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(&quote::cut(key));
            }
            Segment::Unknown => text.push_str(if text.is_empty() { "?" } else { ".?" }),
        }
    }
    text
}

/// The body of a CompositeController `sync` or `finalize` call.
///
/// The OpenAPI document is generated from these wire types (`ToSchema`), with
/// the parent, its status and the observed objects filled in per operator.
#[derive(Clone, Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[schema(bound = "")]
pub struct SyncRequest<P = Box<RawValue>> {
    /// The CompositeController that called; opaque to operators.
    // Kept as its JSON text: nothing reads it.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub controller: Option<Box<RawValue>>,
    /// The parent object as stored in the API server.
    #[schema(value_type = Object)]
    pub parent: P,
    /// Observed children, grouped by `<Kind>.<apiVersion>`. Required: an
    /// absent or `null` group map is refused, never taken as "nothing".
    #[serde(deserialize_with = "objects::required")]
    #[schema(value_type = Object)]
    pub children: ObjectGroups,
    /// Related objects chosen by the customize hook, grouped like `children`.
    /// Required, like `children`.
    #[serde(deserialize_with = "objects::required")]
    #[schema(value_type = Object)]
    pub related: ObjectGroups,
    /// True only when the finalize hook is called.
    #[serde(default)]
    pub finalizing: bool,
}

impl SyncRequest {
    /// Replaces the parent's JSON text with the operator's typed resource.
    pub fn typed<P: DeserializeOwned>(self) -> Result<SyncRequest<P>, DecodeError> {
        Ok(SyncRequest {
            controller: self.controller,
            parent: decode_parent(&self.parent)?,
            children: self.children,
            related: self.related,
            finalizing: self.finalizing,
        })
    }
}

/// The answer to a CompositeController `sync` or `finalize` call.
///
/// Exactly the four fields of Metacontroller's `SyncHookResponse`, so its
/// strict decoder accepts it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(bound = "")]
pub struct SyncResponse<S = Value> {
    /// The parent's whole new status; Metacontroller adds `observedGeneration`.
    /// Operators answer their own status type; the wire carries JSON.
    #[schema(value_type = Object)]
    pub status: S,
    /// Every desired child, sorted; an observed child missing here is deleted.
    #[schema(value_type = Vec<Object>)]
    pub children: Vec<Child>,
    /// Asks Metacontroller to call again after this many seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, nullable = false)]
    pub resync_after_seconds: Option<f64>,
    /// On finalize: true once nothing is left to clean up.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub finalized: Option<bool>,
}

impl<S: Serialize> SyncResponse<S> {
    /// The answer with its status as JSON, as the wire carries it (keys in
    /// the order `serde_json` sorts them, as every golden answer has them).
    pub fn into_untyped(self) -> SyncResponse {
        SyncResponse {
            status: serde_json::to_value(self.status).expect("statuses are plain JSON"),
            children: self.children,
            resync_after_seconds: self.resync_after_seconds,
            finalized: self.finalized,
        }
    }
}

/// One desired child in its wire form: the object's JSON text, written
/// once straight from its typed struct, and what children are sorted by.
#[derive(Clone, Debug)]
pub struct Child {
    key: ChildKey,
    json: Box<RawValue>,
}

/// apiVersion, kind, namespace and name: the order of an answer's children.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChildKey {
    #[serde(default)]
    api_version: Cow<'static, str>,
    #[serde(default)]
    kind: Cow<'static, str>,
    #[serde(default)]
    metadata: ChildName,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
struct ChildName {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

impl Child {
    /// A typed Kubernetes object as a desired child.
    pub fn new<K>(object: &K) -> Child
    where
        K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta> + Serialize,
    {
        let meta = object.metadata();
        let text = |field: &Option<String>| field.clone().unwrap_or_default();
        Child {
            key: ChildKey {
                api_version: Cow::Borrowed(K::API_VERSION),
                kind: Cow::Borrowed(K::KIND),
                metadata: ChildName {
                    namespace: text(&meta.namespace),
                    name: text(&meta.name),
                },
            },
            json: serde_json::value::to_raw_value(object).expect("Kubernetes objects serialize"),
        }
    }

    /// The group key Metacontroller files this child under
    /// (`<Kind>.<apiVersion>`) and its name.
    pub fn group_and_name(&self) -> (String, &str) {
        let key = &self.key;
        (
            format!("{}.{}", key.kind, key.api_version),
            &key.metadata.name,
        )
    }

    /// The child's JSON text, as answered.
    pub fn json(&self) -> &str {
        self.json.get()
    }

    /// The child as a JSON tree, for tests and tools that inspect answers.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.json.get()).expect("a child is JSON")
    }

    /// Sorts children by apiVersion, kind, namespace and name, so an answer
    /// is the same whatever order its builder produced them in.
    pub fn sorted(mut children: Vec<Child>) -> Vec<Child> {
        children.sort_by(|a, b| a.key.cmp(&b.key));
        children
    }
}

impl PartialEq for Child {
    fn eq(&self, other: &Self) -> bool {
        self.json.get() == other.json.get()
    }
}

impl Serialize for Child {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Child {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let json = Box::<RawValue>::deserialize(deserializer)?;
        let key = serde_json::from_str(json.get()).map_err(serde::de::Error::custom)?;
        Ok(Child { key, json })
    }
}

/// The body of a `customize` call.
#[derive(Clone, Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[schema(bound = "")]
pub struct CustomizeRequest<P = Box<RawValue>> {
    /// The CompositeController that called; opaque to operators.
    // Kept as its JSON text: nothing reads it.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub controller: Option<Box<RawValue>>,
    /// The parent object as stored in the API server.
    #[schema(value_type = Object)]
    pub parent: P,
}

impl CustomizeRequest {
    /// Replaces the parent's JSON text with the operator's typed resource.
    pub fn typed<P: DeserializeOwned>(self) -> Result<CustomizeRequest<P>, DecodeError> {
        Ok(CustomizeRequest {
            controller: self.controller,
            parent: decode_parent(&self.parent)?,
        })
    }
}

/// The answer to a `customize` call.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomizeResponse {
    /// Which objects Metacontroller should send in `related`.
    pub related_resources: Vec<RelatedResourceRule>,
}

/// One rule of a customize answer: a kind of object, narrowed by a selector
/// or by names, never both.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResourceRule {
    /// The API version, `v1` or `group/version`.
    pub api_version: String,
    /// The plural resource name, `pods`.
    pub resource: String,
    /// Objects whose labels match.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    pub label_selector: Option<LabelSelector>,
    /// Objects in the namespaces whose labels match.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    pub namespace_selector: Option<LabelSelector>,
    /// Objects in this namespace only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub namespace: Option<String>,
    /// Objects with exactly these names.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub names: Option<Vec<String>>,
}

impl RelatedResourceRule {
    /// Objects of a resource with these labels, optionally in one namespace.
    pub fn labelled(
        api_version: &str,
        resource: &str,
        labels: BTreeMap<String, String>,
        namespace: Option<String>,
    ) -> Self {
        RelatedResourceRule {
            api_version: api_version.to_string(),
            resource: resource.to_string(),
            label_selector: Some(LabelSelector {
                match_labels: Some(labels),
                match_expressions: None,
            }),
            namespace_selector: None,
            namespace,
            names: None,
        }
    }

    /// Objects of a resource with exactly these names, optionally in one namespace.
    pub fn named(
        api_version: &str,
        resource: &str,
        names: Vec<String>,
        namespace: Option<String>,
    ) -> Self {
        RelatedResourceRule {
            api_version: api_version.to_string(),
            resource: resource.to_string(),
            label_selector: None,
            namespace_selector: None,
            namespace,
            names: Some(names),
        }
    }
}

/// The body of a DecoratorController `sync` or `finalize` call.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct DecoratorRequest<T = Value> {
    /// The DecoratorController that called; opaque to operators.
    #[serde(default)]
    pub controller: Value,
    /// The decorated object.
    pub object: T,
    /// Observed attachments, grouped like a composite's children.
    #[serde(deserialize_with = "objects::required")]
    pub attachments: ObjectGroups,
    /// Related objects chosen by the customize hook.
    #[serde(deserialize_with = "objects::required")]
    pub related: ObjectGroups,
    /// True only when the finalize hook is called.
    #[serde(default)]
    pub finalizing: bool,
}

/// The answer to a DecoratorController `sync` or `finalize` call.
///
/// A `None` label or annotation value removes that key from the object;
/// `status: None` (sent as `null`) leaves the object's status alone.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorResponse {
    /// Labels to set, or to remove where the value is `None`.
    pub labels: BTreeMap<String, Option<String>>,
    /// Annotations to set, or to remove where the value is `None`.
    pub annotations: BTreeMap<String, Option<String>>,
    /// The object's new status, or `None` to leave it alone.
    pub status: Option<Value>,
    /// Every desired attachment; an observed one missing here is deleted.
    pub attachments: Vec<Value>,
    /// Asks Metacontroller to call again after this many seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resync_after_seconds: Option<f64>,
    /// On finalize: true once nothing is left to clean up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalized: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sync_request_tolerates_unknown_fields() {
        let body = br#"{"controller":{},"parent":{"a":1},"children":{},"related":{},"extra":true}"#;
        let req: SyncRequest = decode_body(body).unwrap();
        assert_eq!(req.parent.get(), r#"{"a":1}"#);
        assert_eq!(req.children.len(), 0);
        assert!(!req.finalizing);
    }

    /// Issue 18: a missing or null `related` was taken as empty, so a
    /// Database's finalize answered `finalized: true` while its volumes
    /// were still there, and Backup suspended its CronJob. Absent input
    /// never means that nothing exists.
    #[test]
    fn regression_absent_or_null_groups_are_refused() {
        for (reason, body, field) in [
            (
                "children null",
                r#"{"parent":{},"children":null,"related":{}}"#,
                "children",
            ),
            (
                "related null",
                r#"{"parent":{},"children":{},"related":null}"#,
                "related",
            ),
            (
                "related missing",
                r#"{"parent":{},"children":{}}"#,
                "related",
            ),
            (
                "children missing",
                r#"{"parent":{},"related":{}}"#,
                "children",
            ),
        ] {
            let err = decode_body::<SyncRequest>(body.as_bytes()).unwrap_err();
            let DecodeError::Malformed(text) = &err else {
                panic!("{reason}: {err:?}");
            };
            assert!(text.contains(field), "{reason}: {text}");
        }
    }

    #[test]
    fn missing_parent_names_the_field() {
        let err = decode_body::<SyncRequest>(br#"{"children":{}}"#).unwrap_err();
        assert_eq!(
            err,
            DecodeError::Malformed("request body: missing field `parent`".into())
        );
    }

    #[test]
    fn wrong_type_inside_children_names_the_path() {
        let err = decode_body::<SyncRequest>(br#"{"parent":{},"children":{"Pod.v1":[]}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("request body: children.Pod.v1: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn trailing_garbage_is_malformed() {
        assert!(matches!(
            decode_body::<SyncRequest>(br#"{"parent":{}} x"#),
            Err(DecodeError::Malformed(_))
        ));
    }

    #[test]
    fn sync_response_has_only_the_fields_metacontroller_knows() {
        let plain = SyncResponse {
            status: json!({}),
            children: vec![],
            ..SyncResponse::default()
        };
        assert_eq!(
            serde_json::to_string(&plain).unwrap(),
            r#"{"status":{},"children":[]}"#
        );
        let full = SyncResponse {
            status: json!({}),
            children: vec![],
            resync_after_seconds: Some(30.0),
            finalized: Some(true),
        };
        assert_eq!(
            serde_json::to_string(&full).unwrap(),
            r#"{"status":{},"children":[],"resyncAfterSeconds":30.0,"finalized":true}"#
        );
    }

    #[test]
    fn children_sort_by_kind_then_name_and_answer_their_json() {
        use crate::fixtures::object;
        use k8s_openapi::api::core::v1::{Pod, Service};
        let pod = |name: &str| Child::new(&object("v1", "Pod", name).typed::<Pod>());
        let svc = Child::new(&object("v1", "Service", "a").typed::<Service>());
        let sorted = Child::sorted(vec![svc.clone(), pod("b"), pod("a")]);
        assert_eq!(sorted, vec![pod("a"), pod("b"), svc]);
        let answer = serde_json::to_string(&sorted).unwrap();
        let back: Vec<Child> = serde_json::from_str(&answer).unwrap();
        assert_eq!(Child::sorted(back.into_iter().rev().collect()), sorted);
        assert_eq!(
            sorted[0].to_value(),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}})
        );
    }

    #[test]
    fn decorator_response_removes_keys_with_null() {
        let mut answer = DecoratorResponse::default();
        answer.labels.insert("gone".into(), None);
        answer.labels.insert("kept".into(), Some("yes".into()));
        assert_eq!(
            serde_json::to_value(&answer).unwrap(),
            json!({"labels": {"gone": null, "kept": "yes"}, "annotations": {}, "status": null, "attachments": []})
        );
    }

    #[test]
    fn related_rule_never_mixes_names_and_selectors() {
        let named = RelatedResourceRule::named("apps/v1", "statefulsets", vec!["db".into()], None);
        let value = serde_json::to_value(&named).unwrap();
        assert_eq!(
            value,
            json!({"apiVersion": "apps/v1", "resource": "statefulsets", "names": ["db"]})
        );
        let labelled = RelatedResourceRule::labelled(
            "v1",
            "pods",
            BTreeMap::from([("app".to_string(), "x".to_string())]),
            Some("ns".into()),
        );
        assert_eq!(
            serde_json::to_value(&labelled).unwrap(),
            json!({"apiVersion": "v1", "resource": "pods", "labelSelector": {"matchLabels": {"app": "x"}}, "namespace": "ns"})
        );
    }

    #[test]
    fn hooks_round_trip_through_their_names() {
        for hook in Hook::ALL {
            assert_eq!(Hook::parse(hook.as_str()), Some(hook));
        }
        assert_eq!(Hook::parse("delete"), None);
    }
}
