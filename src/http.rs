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
//!
//! The map: this file holds the router, the state every handler shares and
//! the small routes; `hook_call` the hook routes' adapter; `admission` the
//! places and bytes a call may hold (429); `limits` the limits themselves;
//! `auth` the bearer token; `error` every refusal and the body's checks;
//! `redact` Secrets out of debug logs; `report` the one log line and
//! metric per call, written when its answer is delivered; `memory` handing freed pages back
//! after a large body; `server` the listener, draining and the shutdown
//! signal; `tls` and `reload` the certificate and the files that change
//! underneath; `metrics` and `openapi` what they say.

mod admission;
pub mod auth;
mod error;
mod hook_call;
mod limits;
mod memory;
pub mod metrics;
pub mod openapi;
mod redact;
pub mod reload;
mod report;
mod server;
pub mod tls;

pub use error::RETRY_AFTER_SECONDS;
pub use error::{Problem, Refusal};
pub use limits::{BODY_GRACE, DEFAULT_MIN_BODY_RATE, DEFAULT_QUEUED, Limits};
pub use redact::redacted;
pub use server::{ServeOptions, serve, shutdown_signal};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use k8s_openapi::jiff::Timestamp;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::operator::Operator;
use admission::Admission;
use hook_call::hook_call;
use metrics::Metrics;

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
