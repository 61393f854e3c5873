//! One log line and one metric per hook call, written when the answer's
//! last byte is handed to the connection, or, when the client went away
//! first (an HTTP/2 stream reset, a closed connection), when the call or
//! its answer is dropped: then the outcome says `client_gone`, never the
//! status nobody received. It does not decide anything about the call.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use hyper::body::{Frame, SizeHint};
use tracing::{error, info, warn};

use super::error;
use super::metrics::Metrics;
use crate::hook::Hook;

/// What one call's line and metric say; written once, when the answer is
/// delivered or, on drop, as a client that went away.
pub(super) struct Report {
    metrics: Metrics,
    operator: &'static str,
    hook: Hook,
    started: Instant,
    /// Filled in when the call is answered.
    answer: Option<Answer>,
    written: bool,
}

/// What the server answered.
struct Answer {
    parent: Option<String>,
    children_in: usize,
    children_out: usize,
    elapsed: Duration,
    status: StatusCode,
    detail: Option<String>,
}

impl Report {
    /// The report of a call that arrived at `started`.
    pub(super) fn new(
        metrics: Metrics,
        operator: &'static str,
        hook: Hook,
        started: Instant,
    ) -> Self {
        Report {
            metrics,
            operator,
            hook,
            started,
            answer: None,
            written: false,
        }
    }

    /// Records the answer and ties the report to its body: the line is
    /// written when the body's end is handed to the connection.
    pub(super) fn answered(
        mut self,
        response: Response,
        parent: Option<String>,
        (children_in, children_out): (usize, usize),
        detail: Option<String>,
    ) -> Response {
        self.answer = Some(Answer {
            parent,
            children_in,
            children_out,
            elapsed: self.started.elapsed(),
            status: response.status(),
            detail,
        });
        response.map(|inner| {
            Body::new(Reported {
                inner,
                report: self,
            })
        })
    }

    /// Writes the line and the metric once: as answered when `delivered`,
    /// else as a client that went away.
    fn write(&mut self, delivered: bool) {
        if self.written {
            return;
        }
        self.written = true;
        let answer = self.answer.take();
        let elapsed = answer
            .as_ref()
            .map_or_else(|| self.started.elapsed(), |a| a.elapsed);
        let (operator, hook) = (self.operator, self.hook);
        let duration_ms = elapsed.as_secs_f64() * 1000.0;
        let parent = answer
            .as_ref()
            .and_then(|a| a.parent.clone())
            .unwrap_or_else(|| "-".into());
        let parent = parent.as_str();
        let (children_in, children_out) = answer
            .as_ref()
            .map_or((0, 0), |a| (a.children_in, a.children_out));
        let answer = match answer {
            Some(answer) if delivered => answer,
            answer => {
                let outcome = error::CLIENT_GONE;
                self.metrics
                    .observe(operator, hook.as_str(), outcome, elapsed.as_secs_f64());
                // No status: nobody received one. What it would have been,
                // when the call got that far.
                let unsent_status = answer.map_or(0, |a| a.status.as_u16());
                warn!(
                    operator, hook = %hook, parent, children_in, children_out,
                    duration_ms, outcome, unsent_status, detail = GONE, "hook call"
                );
                return;
            }
        };
        let outcome = error::outcome(answer.status);
        self.metrics
            .observe(operator, hook.as_str(), outcome, elapsed.as_secs_f64());
        let status = answer.status.as_u16();
        // One line per call: info when answered, warn with the reason when
        // the caller must fix something, error when we failed (5xx).
        match answer.detail {
            None => info!(
                operator, hook = %hook, parent, children_in, children_out,
                duration_ms, status, outcome, "hook call"
            ),
            Some(detail) if status >= 500 => error!(
                operator, hook = %hook, parent, children_in, children_out,
                duration_ms, status, outcome, detail, "hook call"
            ),
            Some(detail) => warn!(
                operator, hook = %hook, parent, children_in, children_out,
                duration_ms, status, outcome, detail, "hook call"
            ),
        }
    }
}

/// The detail of a call whose answer nobody received.
const GONE: &str = "the client went away (an HTTP/2 stream reset or a closed connection) before the answer was delivered; nothing was sent";

impl Drop for Report {
    /// A report dropped unwritten is a call whose client went away: hyper
    /// drops the call when its stream is reset, or the answer unsent.
    fn drop(&mut self) {
        self.write(false);
    }
}

/// An answer's body that writes its call's report when its end is handed
/// to the connection.
struct Reported {
    inner: Body,
    report: Report,
}

impl hyper::body::Body for Reported {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        let ended = match &frame {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
            Poll::Ready(Some(Err(_))) | Poll::Pending => false,
        };
        if ended {
            this.report.write(true);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
