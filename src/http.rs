//! The HTTP face of opshooks: `router()` with one POST route per operator
//! hook, health and readiness, Prometheus metrics, the OpenAPI document, and
//! `serve()` with graceful shutdown.
//!
//! Every hook route goes through `hook_call`, the one adapter that checks
//! the content type and size, reads the body under a deadline, runs the
//! operator's pure function (a small body where it was read, a large one in
//! the blocking pool) and turns the result into a response. Failures are
//! never a 200: they are `application/problem+json` with a one-line
//! `detail` that Metacontroller shows users as an event.

mod admission;
pub mod auth;
mod error;
pub mod metrics;
pub mod openapi;
pub mod reload;
mod server;
pub mod tls;

pub use error::RETRY_AFTER_SECONDS;
pub use error::{Problem, Refusal};
pub use server::{ServeOptions, serve};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::{Level, debug, error, info, warn};

use crate::call::{self as adapter, Call};
use crate::hook::Hook;
use crate::operator::{Context, Operator};
use admission::Admission;
use metrics::Metrics;

/// Limits the server enforces on every hook call.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Deadline for reading a body and answering it.
    pub request_timeout: Duration,
    /// Most hook computations at once.
    pub max_concurrent: usize,
    /// Most further calls waiting (reading their body or for a worker).
    pub max_queued: usize,
    /// Most bytes of bodies held by all calls in progress.
    pub max_buffered_bytes: usize,
}

impl Limits {
    /// Limits from the flags, where 0 means the default: one computation
    /// per CPU core, [`DEFAULT_QUEUED`] waiting, twice the largest body held.
    pub fn new(
        max_body_bytes: usize,
        request_timeout: Duration,
        max_concurrent: usize,
        max_queued: usize,
        max_buffered_bytes: usize,
    ) -> Self {
        let or = |value: usize, default: fn() -> usize| if value == 0 { default() } else { value };
        Limits {
            max_body_bytes,
            request_timeout,
            max_concurrent: or(max_concurrent, || {
                std::thread::available_parallelism().map_or(1, usize::from)
            }),
            max_queued: or(max_queued, || DEFAULT_QUEUED),
            max_buffered_bytes: if max_buffered_bytes == 0 {
                max_body_bytes.saturating_mul(2)
            } else {
                max_buffered_bytes
            },
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::new(32 * 1024 * 1024, Duration::from_secs(9), 0, 0, 0)
    }
}

/// How many calls may wait for a worker by default: small calls cost
/// little to hold, and the byte budget refuses large ones early.
pub const DEFAULT_QUEUED: usize = 256;

/// Where hook calls get the current time; tests pass a fixed clock.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The wall clock.
pub fn system_clock() -> Clock {
    Arc::new(Timestamp::now)
}

/// What every request handler shares.
#[derive(Clone)]
pub struct AppState {
    operators: Arc<Vec<Operator>>,
    limits: Limits,
    admission: Admission,
    metrics: Metrics,
    clock: Clock,
    ready: Arc<AtomicBool>,
    token: Option<Arc<auth::Token>>,
    metrics_auth: bool,
}

impl AppState {
    /// State for serving `operators` under `limits`, reading time from `clock`.
    pub fn new(operators: Vec<Operator>, limits: Limits, clock: Clock) -> Self {
        let metrics = Metrics::new(
            operators
                .iter()
                .flat_map(|op| op.hooks().map(|hook| (op.name, hook.as_str()))),
        );
        AppState {
            operators: Arc::new(operators),
            admission: Admission::new(
                limits.max_concurrent,
                limits.max_queued,
                limits.max_buffered_bytes,
            ),
            limits,
            metrics,
            clock,
            ready: Arc::new(AtomicBool::new(true)),
            token: None,
            metrics_auth: false,
        }
    }

    /// Requires `token` on every hook route, and on `/metrics` too when
    /// `metrics_auth`.
    pub fn with_token(mut self, token: Arc<auth::Token>, metrics_auth: bool) -> Self {
        self.token = Some(token);
        self.metrics_auth = metrics_auth;
        self
    }

    /// Marks the server as draining: `/readyz` answers 503 from now on.
    pub fn drain(&self) {
        self.ready.store(false, Ordering::SeqCst);
    }
}

/// The router of every route opshooks serves.
pub fn router(state: AppState) -> Router {
    let mut router = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/openapi.json", get(openapi_json));
    for (index, op) in state.operators.iter().enumerate() {
        for hook in op.hooks() {
            let path = format!("/{}/{}", op.name, hook);
            router = router.route(
                &path,
                post(
                    move |state: State<AppState>, headers: HeaderMap, body: Body| {
                        hook_call(state, index, hook, headers, body)
                    },
                ),
            );
        }
    }
    router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &axum::http::Request<Body>| {
                    let route = req
                        .extensions()
                        .get::<MatchedPath>()
                        .map_or("unmatched", MatchedPath::as_str);
                    // At debug: the hook call line names the operator and hook
                    // already, and an enabled span costs every request.
                    tracing::debug_span!("http", method = %req.method(), route)
                })
                .on_request(())
                .on_response(DefaultOnResponse::new().level(Level::DEBUG)),
        )
        .with_state(state)
}

async fn readyz(State(state): State<AppState>) -> Response {
    if state.ready.load(Ordering::SeqCst) {
        "ok\n".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response()
    }
}

async fn metrics_text(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let (true, Some(token)) = (state.metrics_auth, &state.token)
        && let Err(problem) = auth::check(token, &headers)
    {
        return problem.into_response();
    }
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        state.metrics.render(),
    )
        .into_response()
}

async fn openapi_json(State(state): State<AppState>) -> Response {
    let doc = openapi::document(&state.operators);
    (
        [(header::CONTENT_TYPE, "application/json")],
        doc.to_json().expect("the OpenAPI document serializes"),
    )
        .into_response()
}

async fn not_found(State(state): State<AppState>, uri: Uri) -> Problem {
    let path = uri.path();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (first, second) = (parts.next().unwrap_or_default(), parts.next());
    let detail = match (state.operators.iter().find(|op| op.name == first), second) {
        (Some(op), Some(hook)) => format!(
            "operator {} has no {hook:?} hook; its hooks are: {}",
            op.name,
            op.hooks()
                .map(|h| h.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => format!(
            "no route {}; hooks are POST /<operator>/<hook> with operator one of: {}",
            crate::hook::quote::cut(path),
            state
                .operators
                .iter()
                .map(|op| op.name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    state.metrics.refused_unrouted(StatusCode::NOT_FOUND);
    Problem::from(Refusal::NotFound(detail))
}

async fn method_not_allowed(State(state): State<AppState>, method: Method, uri: Uri) -> Response {
    state
        .metrics
        .refused_unrouted(StatusCode::METHOD_NOT_ALLOWED);
    // Hook routes are /<operator>/<hook>; every other route is a GET.
    let allowed = if uri.path().matches('/').count() == 2 {
        "POST"
    } else {
        "GET"
    };
    let problem = Problem::from(Refusal::MethodNotAllowed(format!(
        "{method} is not allowed on {}; use {allowed}",
        uri.path()
    )));
    ([(header::ALLOW, allowed)], problem).into_response()
}

/// The one adapter from a hook route to an operator's pure function.
async fn hook_call(
    State(state): State<AppState>,
    index: usize,
    hook: Hook,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let op_name = state.operators[index].name;
    let call = match answer(&state, index, hook, &headers, body, started).await {
        Ok(call) => call.map_err(|err| Problem::from_hook_error(&err)),
        Err(problem) => Call::refused(problem),
    };
    let elapsed = started.elapsed();
    let Call {
        parent,
        children_in,
        result,
    } = call;
    let (response, children_out, detail) = match result {
        Ok(answer) => {
            if tracing::enabled!(Level::DEBUG) {
                debug!(body = %redacted(&answer.body), "hook response");
            }
            let json = HeaderValue::from_static("application/json");
            let response = ([(header::CONTENT_TYPE, json)], answer.body).into_response();
            (response, answer.children_out, None)
        }
        Err(problem) => {
            let detail = problem.detail.clone();
            (problem.into_response(), 0, Some(detail))
        }
    };
    let status = response.status();
    let outcome = error::outcome(status);
    state
        .metrics
        .observe(op_name, hook.as_str(), outcome, elapsed.as_secs_f64());
    let parent = parent.as_deref().unwrap_or("-");
    let duration_ms = elapsed.as_secs_f64() * 1000.0;
    let status = status.as_u16();
    // One line per call: info when answered, warn with the reason when the
    // caller must fix something, error when we failed (5xx).
    match detail {
        None => info!(
            operator = op_name, hook = %hook, parent, children_in, children_out,
            duration_ms, status, outcome, "hook call"
        ),
        Some(detail) if status >= 500 => error!(
            operator = op_name, hook = %hook, parent, children_in, children_out,
            duration_ms, status, outcome, detail, "hook call"
        ),
        Some(detail) => warn!(
            operator = op_name, hook = %hook, parent, children_in, children_out,
            duration_ms, status, outcome, detail, "hook call"
        ),
    }
    response
}

/// Runs one hook call: the server's own checks (token, admission, content
/// type, body, deadline), then the operator through the adapter. `Err` is
/// a refusal of the server's; the operator's own is inside the [`Call`].
async fn answer(
    state: &AppState,
    index: usize,
    hook: Hook,
    headers: &HeaderMap,
    body: Body,
    started: Instant,
) -> Result<Call, Problem> {
    let (ticket, bytes) = admit(state, headers, body).await?;
    let ctx = Context::fresh((state.clock)()).map_err(|err| {
        Problem::from(Refusal::Bug(format!(
            "no randomness from the operating system: {err}"
        )))
    })?;
    let deadline = started + state.limits.request_timeout;
    let ticket = state.admission.work(ticket, deadline).await?;
    compute(state, index, hook, bytes, ctx, ticket, started).await
}

/// The token, a place for the call and its body: refused (401, 429, 415,
/// 413, 408, 400) before anything is computed.
async fn admit(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(admission::Ticket, Bytes), Problem> {
    if let Some(token) = &state.token {
        auth::check(token, headers)?;
    }
    // A place before the body is read: past the limit, answer 429 without
    // holding one more body in memory. The body is read and dropped first,
    // so the client (which is still sending) reads the 429 rather than a
    // reset connection.
    let limits = &state.limits;
    let size = error::declared_length(headers).unwrap_or(limits.max_body_bytes as u64);
    let ticket = match state.admission.enter(size) {
        Ok(ticket) => ticket,
        Err(problem) => {
            let seen =
                error::discard_body(body, limits.max_body_bytes, limits.request_timeout).await;
            if seen >= LARGE_BODY {
                release_memory();
            }
            return Err(problem);
        }
    };
    error::check_content_type(headers)?;
    let bytes =
        error::read_body(body, headers, limits.max_body_bytes, limits.request_timeout).await?;
    if tracing::enabled!(Level::DEBUG) {
        debug!(body = %redacted(&bytes), "hook request");
    }
    Ok((ticket, bytes))
}

/// The operator's work on an admitted body, within the call's deadline:
/// a small body where it was read, a large one on the blocking pool.
async fn compute(
    state: &AppState,
    index: usize,
    hook: Hook,
    bytes: Bytes,
    ctx: Context,
    ticket: admission::Ticket,
    started: Instant,
) -> Result<Call, Problem> {
    let limits = &state.limits;
    let too_late = || {
        Problem::from(Refusal::Deadline(format!(
            "the {hook} hook took longer than {} s; nothing was changed, Metacontroller will retry",
            limits.request_timeout.as_secs_f64()
        )))
    };
    let bug = |why: &dyn std::fmt::Display| {
        Problem::from(Refusal::Bug(format!(
            "the {hook} hook failed unexpectedly ({why}); this is a bug in opshooks, please report it"
        )))
    };
    if bytes.len() < INLINE_BODY {
        // A small call is answered where it was read: its work is shorter
        // than handing it to another thread and back (the operators' limits
        // bound it: the most, 1000 WebServer pods from a 300-byte body,
        // takes a few milliseconds). It cannot be cut off, so an answer that
        // comes after the deadline is not sent.
        let op = &state.operators[index];
        let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            adapter::call(op, hook, bytes, &ctx).expect("routes exist only for registered hooks")
        }));
        drop(ticket);
        return match call {
            Err(panic) => Err(bug(&panic_message(&panic))),
            Ok(_) if started.elapsed() > limits.request_timeout => Err(too_late()),
            Ok(call) => Ok(call),
        };
    }
    let operators = Arc::clone(&state.operators);
    let large = bytes.len() >= LARGE_BODY;
    let work = tokio::task::spawn_blocking(move || {
        let call = adapter::call(&operators[index], hook, bytes, &ctx)
            .expect("routes exist only for registered hooks");
        if large {
            release_memory();
        }
        // The places are freed when the work ends, not when the caller
        // stops waiting: abandoned work still counts against the limit.
        drop(ticket);
        call
    });
    let remaining = limits.request_timeout.saturating_sub(started.elapsed());
    let call = tokio::time::timeout(remaining, work).await;
    if large {
        // This worker thread read the body: hand back what it held too.
        release_memory();
    }
    match call {
        Err(_) => Err(too_late()),
        Ok(Err(join)) => Err(bug(&join)),
        Ok(Ok(call)) => Ok(call),
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let said = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned());
    match said {
        Some(said) => format!("panicked with message {said:?}"),
        None => "panicked".to_string(),
    }
}

/// Bodies under this size are computed on the task that read them: their
/// work takes microseconds. Larger ones go to the blocking pool, so a long
/// computation never holds up the server's other connections.
const INLINE_BODY: usize = 64 * 1024;

/// Bodies from this size on are followed by handing freed memory back.
const LARGE_BODY: usize = 1 << 20;

/// Hands the memory a large call freed back to the system at once. mimalloc
/// purges freed pages only when the thread that owns them allocates again,
/// and a blocking-pool thread may sit idle for a long time after a burst.
fn release_memory() {
    #[cfg(feature = "mimalloc")]
    #[allow(unsafe_code)]
    // SAFETY: mi_collect only walks this thread's own heap.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

/// A body for debug logs, with the data of every Secret replaced.
pub fn redacted(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(mut value) => {
            redact(&mut value);
            value.to_string()
        }
        Err(_) => format!("<{} bytes, not JSON>", body.len()),
    }
}

fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("kind").and_then(Value::as_str) == Some("Secret") {
                for field in ["data", "stringData"] {
                    if let Some(Value::Object(data)) = map.get_mut(field) {
                        for v in data.values_mut() {
                            *v = Value::String("<redacted>".into());
                        }
                    }
                }
            }
            map.values_mut().for_each(redact);
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_redacted_wherever_they_appear() {
        let body = json!({"children": {"Secret.v1": {"s": {"kind": "Secret", "data": {"password": "aHVudGVyMg=="}, "stringData": {"u": "root"}}}},
                          "parent": {"kind": "Thing", "data": {"kept": "yes"}}});
        let out = redacted(body.to_string().as_bytes());
        assert!(!out.contains("aHVudGVyMg=="), "{out}");
        assert!(!out.contains("root"), "{out}");
        assert!(out.contains("kept"), "{out}");
        assert_eq!(redacted(b"not json"), "<8 bytes, not JSON>");
    }
}
