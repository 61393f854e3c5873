//! The one adapter from a hook route to an operator's pure function:
//! admission and the body's checks, the computation (a small body where it
//! was read, a large one on the blocking pool) under the call's deadline,
//! and the one log line and metric per call (see `report`).

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use tracing::{Level, debug};

use super::admission::Ticket;
use super::memory::{LARGE_BODY, release_memory};
use super::redact::redacted;
use super::report::Report;
use super::{AppState, Limits, Problem, Refusal, auth, error};
use crate::call::{self as adapter, Call};
use crate::hook::Hook;
use crate::operator::Context;

/// Bodies under this size are computed on the task that read them: their
/// work takes microseconds. Larger ones go to the blocking pool, so a long
/// computation never holds up the server's other connections.
const INLINE_BODY: usize = 64 * 1024;

/// The one adapter from a hook route to an operator's pure function.
pub(super) async fn hook_call(
    State(state): State<AppState>,
    index: usize,
    hook: Hook,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let op_name = state.operators[index].name;
    // Written when the answer is delivered, or as a client that went away
    // if hyper drops this call first (an HTTP/2 stream reset).
    let report = Report::new(state.metrics.clone(), op_name, hook, started);
    let call = match answer(&state, index, hook, &headers, body, started).await {
        Ok(call) => call.map_err(|err| Problem::from_hook_error(&err)),
        Err(problem) => Call::refused(problem),
    };
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
    report.answered(response, parent, (children_in, children_out), detail)
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
    let work = Work {
        index,
        hook,
        bytes,
        ctx,
        ticket,
        started,
    };
    compute(state, work).await
}

/// The token, a place for the call and its body: refused (401, 429, 415,
/// 413, 408, 400) before anything is computed.
async fn admit(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Ticket, Bytes), Problem> {
    if let Some(token) = &state.token {
        auth::check(token, headers)?;
    }
    // A place before the body is read: past the limit, answer 429 without
    // holding one more body in memory. The body is read and dropped first,
    // so the client (which is still sending) reads the 429 rather than a
    // reset connection. The body then holds budget as it arrives, not for
    // the length it declares.
    let limits = &state.limits;
    let mut ticket = match state.admission.enter(error::declared_length(headers)) {
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
    let bytes = error::read_body(body, headers, limits, |received| ticket.hold(received)).await?;
    if tracing::enabled!(Level::DEBUG) {
        debug!(body = %redacted(&bytes), "hook request");
    }
    Ok((ticket, bytes))
}

/// A call admitted and holding its place: what the operator computes.
struct Work {
    /// The operator's place in the state's list.
    index: usize,
    hook: Hook,
    bytes: Bytes,
    ctx: Context,
    ticket: Ticket,
    /// When the call arrived, for its deadline.
    started: Instant,
}

/// The operator's work on an admitted body, within the call's deadline:
/// a small body where it was read, a large one on the blocking pool.
async fn compute(state: &AppState, work: Work) -> Result<Call, Problem> {
    if work.bytes.len() >= INLINE_BODY {
        return compute_pooled(state, work).await;
    }
    // A small call is answered where it was read: its work is shorter
    // than handing it to another thread and back (the operators' limits
    // bound it: the most, 1000 WebServer pods from a 300-byte body, takes
    // a few milliseconds). It cannot be cut off, so an answer that comes
    // after the deadline is not sent.
    let (op, hook, limits) = (&state.operators[work.index], work.hook, &state.limits);
    let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        adapter::call(op, hook, work.bytes, &work.ctx)
            .expect("routes exist only for registered hooks")
    }));
    drop(work.ticket);
    match call {
        Err(panic) => Err(bug(hook, &panic_message(panic))),
        Ok(_) if work.started.elapsed() > limits.request_timeout => Err(too_late(hook, limits)),
        Ok(call) => Ok(call),
    }
}

/// A large call runs on the blocking pool, so a long computation never
/// holds up the server's other connections, and is given up at the
/// deadline.
async fn compute_pooled(state: &AppState, work: Work) -> Result<Call, Problem> {
    let (index, hook, limits) = (work.index, work.hook, &state.limits);
    let operators = Arc::clone(&state.operators);
    let large = work.bytes.len() >= LARGE_BODY;
    let task = tokio::task::spawn_blocking(move || {
        let call = adapter::call(&operators[index], hook, work.bytes, &work.ctx)
            .expect("routes exist only for registered hooks");
        if large {
            release_memory();
        }
        // The places are freed when the work ends, not when the caller
        // stops waiting: abandoned work still counts against the limit.
        drop(work.ticket);
        call
    });
    let remaining = limits
        .request_timeout
        .saturating_sub(work.started.elapsed());
    let call = tokio::time::timeout(remaining, task).await;
    if large {
        // This worker thread read the body: hand back what it held too.
        release_memory();
    }
    match call {
        Err(_) => Err(too_late(hook, limits)),
        Ok(Err(join)) => Err(bug(hook, &join)),
        Ok(Ok(call)) => Ok(call),
    }
}

/// The refusal of a call that outlived its deadline.
fn too_late(hook: Hook, limits: &Limits) -> Problem {
    Problem::from(Refusal::Deadline(format!(
        "the {hook} hook took longer than {} s; nothing was changed, Metacontroller will retry",
        limits.request_timeout.as_secs_f64()
    )))
}

/// The refusal of a call whose computation panicked.
fn bug(hook: Hook, why: &dyn std::fmt::Display) -> Problem {
    Problem::from(Refusal::Bug(format!(
        "the {hook} hook failed unexpectedly ({why}); this is a bug in opshooks, please report it"
    )))
}

/// What a panic said, when it said it with a string. It takes the payload
/// as `catch_unwind` gives it: a `&Box<dyn Any>` coerced to `&dyn Any`
/// would be the box itself, which is neither string.
fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    let said = match panic.downcast::<&str>() {
        Ok(s) => Some((*s).to_string()),
        Err(panic) => panic.downcast::<String>().ok().map(|s| *s),
    };
    match said {
        Some(said) => format!("panicked with message {said:?}"),
        None => "panicked".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::panic_message;

    /// Found in review: the 500 of a panicking hook never said what the
    /// panic said (the payload's box was read as the payload).
    #[test]
    fn regression_a_panic_says_what_it_said() {
        let caught = |f: fn()| std::panic::catch_unwind(f).unwrap_err();
        assert_eq!(
            panic_message(caught(|| panic!("boom"))),
            "panicked with message \"boom\""
        );
        assert_eq!(
            panic_message(caught(|| panic!("{} left", 3))),
            "panicked with message \"3 left\""
        );
        assert_eq!(
            panic_message(caught(|| std::panic::panic_any(7))),
            "panicked"
        );
    }
}
