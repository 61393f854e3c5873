//! The route table: which operators exist and which hooks each answers, and
//! the one adapter that turns a request body into a call of an operator's
//! pure function and its result into a response body.
//!
//! The HTTP server and `opshooks hook` both go through [`Operator::call`], so
//! what the command line prints is exactly what the server would send.
//!
//! Adding an operator: write `operators/<kind>.rs` with a `pub fn operator()`
//! and add one line to [`all`].

pub mod backup;
pub mod database;
pub mod memcached;
pub mod validate;
pub mod webserver;

use std::collections::BTreeMap;

use bytes::Bytes;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::CustomResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::hook::{
    CustomizeRequest, CustomizeResponse, DecodeError, Hook, SyncRequest, SyncResponse, decode_body,
};
pub use validate::InvalidSpec;

/// Every operator opshooks serves, in route order.
pub fn all() -> Vec<Operator> {
    vec![
        webserver::operator(),
        memcached::operator(),
        backup::operator(),
        database::operator(),
    ]
}

/// How many random bytes a hook call gets.
pub const ENTROPY: usize = 64;

/// What a hook call may use besides the request: everything that is not a
/// pure function of the observed state.
#[derive(Clone, Debug)]
pub struct Context {
    /// The current time, for condition transition times and schedules.
    pub now: Timestamp,
    /// Fresh random bytes, for secrets generated once (never read from the
    /// system inside an operator, so tests can fix them).
    pub entropy: [u8; ENTROPY],
}

impl Context {
    /// A fixed context for unit tests: a known time, all-zero randomness.
    #[cfg(test)]
    pub(crate) fn fixed() -> Self {
        Context {
            now: "2026-03-04T05:06:07Z".parse().expect("a valid time"),
            entropy: [0; ENTROPY],
        }
    }

    /// A context at `now` with fresh random bytes from the operating system.
    pub fn fresh(now: Timestamp) -> Result<Self, getrandom::Error> {
        let mut entropy = [0u8; ENTROPY];
        getrandom::fill(&mut entropy)?;
        Ok(Context { now, entropy })
    }
}

/// Why a hook call has no answer. Never answered with a 200.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HookError {
    /// The request body could not be decoded.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The parent's spec is invalid for the operator.
    #[error(transparent)]
    Invalid(#[from] InvalidSpec),
    /// The observed state leaves a decision that could lose data open: the
    /// operator answers nothing, so Metacontroller changes nothing, and the
    /// message says what to check.
    #[error("{0}")]
    Unsafe(String),
}

/// A successful answer: the exact response body.
#[derive(Debug)]
pub struct Answer {
    /// The JSON body to send.
    pub body: Vec<u8>,
    /// How many desired children or related rules the body holds.
    pub children_out: usize,
}

/// The result of one hook call, with what is known of the request for logs.
#[derive(Debug)]
pub struct Call {
    /// `namespace/name` of the parent, when the body got that far.
    pub parent: Option<String>,
    /// How many observed children (and related objects) the request carried.
    pub children_in: usize,
    /// The answer, or why there is none.
    pub result: Result<Answer, HookError>,
}

/// The pure function behind a composite `sync` or `finalize` hook.
pub type SyncFn<P> = fn(&SyncRequest<P>, &Context) -> Result<SyncResponse, HookError>;
/// The pure function behind a `customize` hook.
pub type CustomizeFn<P> =
    fn(&CustomizeRequest<P>, &Context) -> Result<CustomizeResponse, HookError>;

type Handler = Box<dyn Fn(Bytes, &Context) -> Call + Send + Sync>;

/// One child type of a CompositeController and how Metacontroller updates it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildResource {
    /// `v1` or `group/version`.
    pub api_version: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
    /// Metacontroller's update method for existing children of this type.
    pub update_method: &'static str,
    /// Conditions a child must show before a rolling update moves on.
    pub status_checks: Vec<(&'static str, &'static str)>,
    /// Why this update method, for the manifest's reader.
    #[serde(skip)]
    pub why: &'static str,
}

/// How an operator's CompositeController is set up.
#[derive(Clone, Debug)]
pub struct ControllerSpec {
    /// Child types, in manifest order.
    pub children: Vec<ChildResource>,
    /// Let Metacontroller label children with the parent's uid instead of
    /// reading a selector from the parent's spec.
    pub generate_selector: bool,
    /// Periodic resync, for operators whose status depends on time.
    pub resync_period_seconds: Option<i32>,
}

/// One operator: its resource, its controller and its hooks.
pub struct Operator {
    /// The route segment, `webserver`.
    pub name: &'static str,
    /// The parent's kind, `WebServer`.
    pub kind: String,
    /// The parent's CRD, generated from its Rust types.
    pub crd: CustomResourceDefinition,
    /// How its CompositeController is set up.
    pub controller: ControllerSpec,
    /// What a user reads in the README table: the children it manages.
    pub children_summary: &'static str,
    hooks: BTreeMap<Hook, Handler>,
}

impl Operator {
    /// An operator for the custom resource `P`, with no hooks yet.
    pub fn new<P: CustomResourceExt>(
        name: &'static str,
        controller: ControllerSpec,
        children_summary: &'static str,
    ) -> Self {
        Operator {
            name,
            kind: P::crd().spec.names.kind,
            crd: P::crd(),
            controller,
            children_summary,
            hooks: BTreeMap::new(),
        }
    }

    /// Adds the `sync` hook.
    pub fn sync<P: DeserializeOwned + 'static>(self, f: SyncFn<P>) -> Self {
        self.composite(Hook::Sync, f)
    }

    /// Adds the `finalize` hook.
    pub fn finalize<P: DeserializeOwned + 'static>(self, f: SyncFn<P>) -> Self {
        self.composite(Hook::Finalize, f)
    }

    /// Adds the `customize` hook.
    pub fn customize<P: DeserializeOwned + 'static>(mut self, f: CustomizeFn<P>) -> Self {
        let served = self.served(Hook::Customize);
        let handler = move |body: Bytes, ctx: &Context| {
            let mut call = Call::new();
            call.result = (|| {
                let req: CustomizeRequest = decode_body(&body)?;
                drop(body);
                call.parent = parent_ref(&req.parent);
                served.check(&req.parent)?;
                let answer = f(&req.typed::<P>()?, ctx)?;
                Ok(Answer {
                    children_out: answer.related_resources.len(),
                    body: to_body(&answer),
                })
            })();
            call
        };
        self.hooks.insert(Hook::Customize, Box::new(handler));
        self
    }

    fn composite<P: DeserializeOwned + 'static>(mut self, hook: Hook, f: SyncFn<P>) -> Self {
        let finalizing = hook == Hook::Finalize;
        let served = self.served(hook);
        let handler = move |body: Bytes, ctx: &Context| {
            let mut call = Call::new();
            call.result = (|| {
                let mut req: SyncRequest = decode_body(&body)?;
                // Everything the operator reads is decoded: the body's
                // memory goes back before the work begins.
                drop(body);
                call.parent = parent_ref(&req.parent);
                served.check(&req.parent)?;
                call.children_in = req.children.len() + req.related.len();
                // The route decides which hook this is, whatever the body says.
                req.finalizing = finalizing;
                let answer = f(&req.typed::<P>()?, ctx)?;
                Ok(Answer {
                    children_out: answer.children.len(),
                    body: to_body(&answer),
                })
            })();
            call
        };
        self.hooks.insert(hook, Box::new(handler));
        self
    }

    fn served(&self, hook: Hook) -> Served {
        Served {
            route: format!("/{}/{hook}", self.name),
            kind: self.kind.clone(),
            api_version: self.api_version(),
        }
    }

    /// The hooks this operator answers, in route order.
    pub fn hooks(&self) -> impl Iterator<Item = Hook> + '_ {
        self.hooks.keys().copied()
    }

    /// Answers one hook call from its raw request body; `None` when this
    /// operator has no such hook.
    pub fn call(&self, hook: Hook, body: &[u8], ctx: &Context) -> Option<Call> {
        self.call_owned(hook, Bytes::copy_from_slice(body), ctx)
    }

    /// [`Operator::call`] for a body the caller gives up, so that it is
    /// freed as soon as it is decoded.
    pub fn call_owned(&self, hook: Hook, body: Bytes, ctx: &Context) -> Option<Call> {
        self.hooks.get(&hook).map(|handler| handler(body, ctx))
    }

    /// The plural resource name of the parent, `webservers`.
    pub fn plural(&self) -> &str {
        &self.crd.spec.names.plural
    }

    /// The parent's `group/version`.
    pub fn api_version(&self) -> String {
        let version = &self.crd.spec.versions[0].name;
        format!("{}/{version}", self.crd.spec.group)
    }
}

impl Call {
    fn new() -> Self {
        Call {
            parent: None,
            children_in: 0,
            result: Err(HookError::Decode(DecodeError::Malformed(String::new()))),
        }
    }
}

/// What a route serves: a parent of any other kind is refused before the
/// operator sees it. Decoding alone would not notice (a Memcached's `spec`
/// can look like a WebServer's), and the answer would be built for the
/// wrong resource: a Memcached with `size: 0` posted to the WebServer route
/// would drop every pod.
struct Served {
    route: String,
    kind: String,
    api_version: String,
}

impl Served {
    fn check(&self, parent: &Value) -> Result<(), DecodeError> {
        let field = |name: &str| parent.get(name).and_then(Value::as_str).unwrap_or("");
        let (kind, api_version) = (field("kind"), field("apiVersion"));
        if kind != self.kind || api_version != self.api_version {
            return Err(DecodeError::Parent(format!(
                "parent: kind {} of apiVersion {} is not served here; {} serves {} of {}",
                validate::quote(kind),
                validate::quote(api_version),
                self.route,
                self.kind,
                self.api_version
            )));
        }
        // Kubernetes' own limits, before any work: a name or namespace is
        // repeated in every child and log line, so an oversized one (which no
        // API server would have stored) must not multiply into the answer.
        // Each operator checks its name more strictly.
        let meta = parent.get("metadata");
        let text = |name: &str| meta.and_then(|m| m.get(name)).and_then(Value::as_str);
        if let Some(namespace) = text("namespace") {
            validate::dns_label("metadata.namespace", namespace, validate::MAX_LABEL_VALUE)
                .map_err(|e| DecodeError::Parent(e.to_string()))?;
        }
        if let Some(name) = text("name").filter(|n| n.len() > MAX_NAME) {
            return Err(DecodeError::Parent(format!(
                "metadata.name: {} is {} characters long; Kubernetes names hold at most {MAX_NAME}",
                validate::quote(name),
                name.len()
            )));
        }
        Ok(())
    }
}

/// Serializes an answer. Our own response types always serialize.
fn to_body<T: Serialize>(answer: &T) -> Vec<u8> {
    serde_json::to_vec(answer).expect("hook responses are plain JSON")
}

/// `namespace/name` (or `name`) of a parent, for logs.
fn parent_ref(parent: &Value) -> Option<String> {
    let meta = parent.get("metadata")?;
    // Cut to Kubernetes' limits: this goes into every log line of the call,
    // before the parent is validated.
    let cut = |text: &str, max: usize| match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    };
    let name = cut(meta.get("name")?.as_str()?, MAX_NAME);
    Some(match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) => format!("{}/{name}", cut(ns, validate::MAX_LABEL_VALUE)),
        None => name,
    })
}

/// The longest object name Kubernetes stores (a DNS-1123 subdomain).
const MAX_NAME: usize = 253;

/// Sorts children by apiVersion, kind, namespace and name, so the answer is
/// the same whatever order a builder produced them in.
pub fn sorted_children(children: Vec<Value>) -> Vec<Value> {
    let mut keyed: Vec<_> = children
        .into_iter()
        .map(|child| {
            let key = ["apiVersion", "kind"]
                .iter()
                .map(|f| {
                    child
                        .get(f)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                })
                .chain(["namespace", "name"].iter().map(|f| {
                    child
                        .pointer(&format!("/metadata/{f}"))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                }))
                .collect::<Vec<_>>();
            (key, child)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, child)| child).collect()
}

/// Label naming the application, `webserver`.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// Label naming the parent a child belongs to.
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
/// Label naming who manages the child: always `opshooks`.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// The recommended labels of a child of parent `instance` of application `app`.
pub fn standard_labels(app: &str, instance: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_string(), app.to_string()),
        (LABEL_INSTANCE.to_string(), instance.to_string()),
        (LABEL_MANAGED_BY.to_string(), "opshooks".to_string()),
    ])
}

/// The labels that select the children of one parent: name and instance.
pub fn selector_labels(app: &str, instance: &str) -> BTreeMap<String, String> {
    let mut labels = standard_labels(app, instance);
    labels.remove(LABEL_MANAGED_BY);
    labels
}

/// True when the pod is not being deleted and its Ready condition is True.
pub fn is_ready(pod: &crate::hook::ObservedPod) -> bool {
    pod.is_ready()
}

/// A container that runs with no capabilities and cannot gain privileges:
/// the "restricted" Pod Security Standard.
pub fn restricted_container() -> k8s_openapi::api::core::v1::SecurityContext {
    k8s_openapi::api::core::v1::SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(k8s_openapi::api::core::v1::Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: None,
        }),
        ..Default::default()
    }
}

/// A pod that runs as `uid` (group and volume group too), non-root, with
/// the runtime's default seccomp profile.
pub fn restricted_pod(uid: i64) -> k8s_openapi::api::core::v1::PodSecurityContext {
    k8s_openapi::api::core::v1::PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        fs_group: Some(uid),
        seccomp_profile: Some(k8s_openapi::api::core::v1::SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// A typed Kubernetes object as a desired child.
pub fn child<K: k8s_openapi::Resource + Serialize>(object: &K) -> Value {
    serde_json::to_value(object).expect("Kubernetes objects serialize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Issue 10: a 1 MiB namespace made a 1,000 MiB WebServer answer, and
    /// an 8 MiB name was echoed back in the 422 and the log line.
    #[test]
    fn regression_oversized_names_are_refused_before_any_work_and_never_echoed() {
        let webserver = all().into_iter().find(|op| op.name == "webserver").unwrap();
        let huge = "a".repeat(1 << 20);
        for (field, meta) in [
            (
                "metadata.namespace",
                json!({"name": "web", "namespace": huge}),
            ),
            ("metadata.name", json!({"name": huge, "namespace": "ns"})),
            (
                "metadata.namespace",
                json!({"name": "web", "namespace": "Not_A_Label"}),
            ),
        ] {
            let body = json!({"parent": {"apiVersion": "opshooks.io/v1alpha1", "kind": "WebServer",
                "metadata": meta, "spec": {"replicas": 1000}}, "children": {"Pod.v1": {}}});
            let call = webserver
                .call(Hook::Sync, body.to_string().as_bytes(), &Context::fixed())
                .unwrap();
            let err = call.result.unwrap_err().to_string();
            assert!(
                err.starts_with(field),
                "{field}: {}",
                &err[..err.len().min(200)]
            );
            assert!(err.len() < 300, "{field}: a {} byte message", err.len());
            assert!(call.parent.unwrap().len() <= 253 + 1 + 63 + 2 * '…'.len_utf8());
        }
    }

    #[test]
    fn operator_names_are_unique_route_segments() {
        let ops = all();
        let mut names: Vec<_> = ops.iter().map(|op| op.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ops.len());
        for name in names {
            assert!(name.chars().all(|c| c.is_ascii_lowercase()), "{name}");
        }
    }

    #[test]
    fn children_sort_by_kind_then_name() {
        let pod = |n: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n}});
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}});
        let sorted = sorted_children(vec![svc.clone(), pod("b"), pod("a")]);
        assert_eq!(sorted, vec![pod("a"), pod("b"), svc]);
    }

    #[test]
    fn parent_ref_handles_cluster_scoped_and_missing_metadata() {
        assert_eq!(
            parent_ref(&json!({"metadata": {"name": "a", "namespace": "n"}})),
            Some("n/a".into())
        );
        assert_eq!(
            parent_ref(&json!({"metadata": {"name": "a"}})),
            Some("a".into())
        );
        assert_eq!(parent_ref(&json!({})), None);
    }
}
