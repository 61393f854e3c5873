//! The one path from bytes to an operator call to bytes, used by the router
//! and `opshooks hook` alike, so what the command line prints is exactly
//! what the server sends: decode the body (refusing repeated keys), check
//! that the parent is of the route's kind and within Kubernetes' limits,
//! run the operator's function, serialize its answer. [`Call`] is the one
//! record of a call, for logs and metrics.

use bytes::Bytes;
use serde::Serialize;

use crate::hook::quote::{cut_to, quote};
use crate::hook::{CustomizeRequest, DecodeError, Hook, ParentHead, SyncRequest, decode_body};
use crate::operator::names::{MAX_LABEL_VALUE, dns_label};
use crate::operator::{Context, Erased, HookError, Operator};
use crate::operators::schema::admit;
use serde_json::value::RawValue;

/// A successful answer: the exact response body.
#[derive(Debug)]
pub struct Answer {
    /// The JSON body to send.
    pub body: Vec<u8>,
    /// How many desired children or related rules the body holds.
    pub children_out: usize,
}

/// The one record of a hook call, for its answer, its log line and its
/// metrics: what is known of the request, and the answer or why there is
/// none (an operator's [`HookError`] here, a `Problem` once the server has
/// turned it, or its own refusals, into an HTTP answer).
#[derive(Debug)]
pub struct Call<E = HookError> {
    /// `namespace/name` of the parent, when the body got that far.
    pub parent: Option<String>,
    /// How many observed children (and related objects) the request carried.
    pub children_in: usize,
    /// The answer, or why there is none.
    pub result: Result<Answer, E>,
}

/// Answers one hook call from its raw request body; `None` when the
/// operator has no such hook. The body is freed as soon as it is decoded.
pub fn call(op: &Operator, hook: Hook, body: Bytes, ctx: &Context) -> Option<Call> {
    let erased = op.hook(hook)?;
    let mut call = Call::new();
    call.result = (|| match erased {
        Erased::Composite(f) => {
            let mut req: SyncRequest = decode_body(&body)?;
            // Everything the operator reads is decoded: the body's memory
            // goes back before the work begins.
            drop(body);
            let head = ParentHead::of(&req.parent);
            call.parent = parent_ref(&head);
            check_served(op, hook, &head)?;
            // A deletion goes on whatever the spec says: each operator's
            // finalize decides what an invalid spec still allows.
            let parent = (hook != Hook::Finalize).then(|| parent_value(&req.parent));
            call.children_in = req.children.len() + req.related.len();
            req.children.check_keys()?;
            req.related.check_keys()?;
            req.children.check_scope(head.namespace())?;
            req.related.check_scope(None)?;
            // The route decides which hook this is, whatever the body says.
            req.finalizing = hook == Hook::Finalize;
            let answer = f(req, ctx)?;
            if let Some(parent) = parent {
                admit(op, &parent?, None)?;
            }
            Ok(Answer {
                children_out: answer.children.len(),
                body: to_body(&answer),
            })
        }
        Erased::Customize(f) => {
            let req: CustomizeRequest = decode_body(&body)?;
            drop(body);
            let head = ParentHead::of(&req.parent);
            call.parent = parent_ref(&head);
            check_served(op, hook, &head)?;
            let parent = parent_value(&req.parent)?;
            let answer = f(req, ctx)?;
            // While the parent is deleted, customize must answer: the
            // finalize call waits for it.
            if parent.pointer("/metadata/deletionTimestamp").is_none() {
                admit(op, &parent, None)?;
            }
            Ok(Answer {
                children_out: answer.related_resources.len(),
                body: to_body(&answer),
            })
        }
    })();
    Some(call)
}

/// [`call`] on a borrowed body, for tests and tools that keep theirs.
pub fn call_slice(op: &Operator, hook: Hook, body: &[u8], ctx: &Context) -> Option<Call> {
    call(op, hook, Bytes::copy_from_slice(body), ctx)
}

impl<E> Call<E> {
    /// A call refused before its body was decoded.
    pub fn refused(why: E) -> Self {
        Call {
            parent: None,
            children_in: 0,
            result: Err(why),
        }
    }

    /// The same record with the reason for no answer turned by `f`.
    pub fn map_err<F>(self, f: impl FnOnce(E) -> F) -> Call<F> {
        Call {
            parent: self.parent,
            children_in: self.children_in,
            result: self.result.map_err(f),
        }
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
fn check_served(op: &Operator, hook: Hook, parent: &ParentHead) -> Result<(), DecodeError> {
    let (kind, api_version) = (parent.kind(), parent.api_version());
    if kind != op.kind || api_version != op.api_version() {
        return Err(DecodeError::Parent(format!(
            "parent: kind {} of apiVersion {} is not served here; /{}/{hook} serves {} of {}",
            quote(kind),
            quote(api_version),
            op.name,
            op.kind,
            op.api_version()
        )));
    }
    // Kubernetes' own limits, before any work: a name or namespace is
    // repeated in every child and log line, so an oversized one (which no
    // API server would have stored) must not multiply into the answer.
    // Each operator checks its name more strictly.
    if let Some(namespace) = parent.namespace() {
        dns_label("metadata.namespace", namespace, MAX_LABEL_VALUE)
            .map_err(|e| DecodeError::Parent(e.to_string()))?;
    }
    if let Some(name) = parent.name().filter(|n| n.len() > MAX_NAME) {
        return Err(DecodeError::Parent(format!(
            "metadata.name: {} is {} characters long; Kubernetes names hold at most {MAX_NAME}",
            quote(name),
            name.len()
        )));
    }
    Ok(())
}

/// The parent as plain JSON, for [`admit`]: what the API server would
/// refuse to store is refused here too, in the words `opshooks simulate`
/// uses, so a parent that bypassed the CRD (stored before a rule, or a
/// hand-made request) never gets an answer built on defaults. The
/// operator's own refusal, which names the value and how to fix it, comes
/// first; the CRD's is the floor under it.
fn parent_value(parent: &RawValue) -> Result<serde_json::Value, DecodeError> {
    serde_json::from_str(parent.get()).map_err(|e| DecodeError::Parent(format!("parent: {e}")))
}

/// Serializes an answer. Our own response types always serialize.
fn to_body<T: Serialize>(answer: &T) -> Vec<u8> {
    serde_json::to_vec(answer).expect("hook responses are plain JSON")
}

/// `namespace/name` (or `name`) of a parent, for logs.
fn parent_ref(parent: &ParentHead) -> Option<String> {
    // Cut to Kubernetes' limits: this goes into every log line of the call,
    // before the parent is validated.
    let name = cut_to(parent.name()?, MAX_NAME);
    Some(match parent.namespace() {
        Some(ns) => format!("{}/{name}", cut_to(ns, MAX_LABEL_VALUE)),
        None => name.into_owned(),
    })
}

/// The longest object name Kubernetes stores (a DNS-1123 subdomain).
const MAX_NAME: usize = 253;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, request};
    use serde_json::{Value, json};

    /// Issue 10: a 1 MiB namespace made a 1,000 MiB WebServer answer, and
    /// an 8 MiB name was echoed back in the 422 and the log line.
    #[test]
    fn regression_oversized_names_are_refused_before_any_work_and_never_echoed() {
        let webserver = crate::operators::all()
            .into_iter()
            .find(|op| op.name == "webserver")
            .unwrap();
        let huge = "a".repeat(1 << 20);
        for (field, parent) in [
            (
                "metadata.namespace",
                fixtures::webserver("web").namespace(&huge),
            ),
            ("metadata.name", fixtures::webserver(&huge).namespace("ns")),
            (
                "metadata.namespace",
                fixtures::webserver("web").namespace("Not_A_Label"),
            ),
        ] {
            let body = request(parent.spec("replicas", 1000))
                .child_group("Pod.v1")
                .json();
            let call = call_slice(
                &webserver,
                Hook::Sync,
                body.to_string().as_bytes(),
                &Context::fixed(),
            )
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

    /// Customize refuses a spec the CRD refuses, but not while the parent
    /// is deleted: Metacontroller calls finalize only after customize
    /// answered, and an invalid spec must never hold a deletion (found by
    /// database_lives when customize first applied the CRD's checks).
    #[test]
    fn customize_refuses_an_invalid_spec_except_while_deleting() {
        let database = crate::operators::all()
            .into_iter()
            .find(|op| op.name == "database")
            .unwrap();
        let parent = fixtures::orders().spec("instances", 5);
        let ask = |parent: Value| {
            let body = json!({"parent": parent}).to_string();
            call_slice(
                &database,
                Hook::Customize,
                body.as_bytes(),
                &Context::fixed(),
            )
            .unwrap()
            .result
        };
        let err = ask(parent.clone().json()).unwrap_err().to_string();
        assert!(
            err.starts_with("spec.instances: field not declared"),
            "{err}"
        );
        assert!(ask(parent.deleting().json()).is_ok());
        // A null the API server drops is no refusal.
        let nulled = fixtures::orders().spec("postgresql", Value::Null);
        let nulled = ask(nulled.json());
        assert!(nulled.is_ok(), "{nulled:?}");
    }

    #[test]
    fn parent_ref_handles_cluster_scoped_and_missing_metadata() {
        let head =
            |parent: Value| ParentHead::of(&serde_json::value::to_raw_value(&parent).unwrap());
        assert_eq!(
            parent_ref(&head(json!({"metadata": {"name": "a", "namespace": "n"}}))),
            Some("n/a".into())
        );
        assert_eq!(
            parent_ref(&head(json!({"metadata": {"name": "a"}}))),
            Some("a".into())
        );
        assert_eq!(parent_ref(&head(json!({}))), None);
        assert_eq!(parent_ref(&head(json!({"metadata": "a"}))), None);
        assert_eq!(parent_ref(&head(json!(5))), None);
    }
}
