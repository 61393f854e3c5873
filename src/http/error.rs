//! Errors as HTTP answers: [`Refusal`], the one place that decides status codes, and the
//! checks that come before a body reaches an operator (content type, size,
//! read deadline).
//!
//! Every refusal is `application/problem+json` (RFC 9457) whose `detail` is
//! one line naming what to fix: Metacontroller copies our body into a
//! Warning event on the parent, so this text is what users read.

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::hook::DecodeError;
use crate::hook::quote::{cut, cut_quoted};
use crate::operator::HookError;

use super::limits::BODY_GRACE;

/// Seconds a refused caller is asked to wait before trying again (429).
pub const RETRY_AFTER_SECONDS: u64 = 1;
/// The challenge sent with every 401.
pub(super) const CHALLENGE: &str = r#"Bearer realm="opshooks""#;

/// The media type of every error body.
pub(super) const PROBLEM_JSON: &str = "application/problem+json";

/// An error answer in RFC 9457 shape.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Problem {
    /// Always `about:blank`: the status code says what kind of problem it is.
    #[serde(rename = "type")]
    pub type_: String,
    /// The status code's reason phrase.
    pub title: String,
    /// The HTTP status code, repeated for clients that only see the body.
    #[serde(with = "status_code")]
    #[schema(value_type = u16)]
    pub status: StatusCode,
    /// One line for people: which field is wrong and how to fix it.
    pub detail: String,
}

/// The longest `detail` a problem carries.
pub(super) const MAX_DETAIL_CHARS: usize = 1024;

/// Why a request is refused: every refusal the server makes, each with its
/// status code. This is the one place that picks status codes; a refusal
/// becomes a [`Problem`] (and a response) through `From`.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// 400: the body is not JSON, lacks a field, repeats a key, or cannot be read.
    Malformed(String),
    /// 401: the bearer token is missing or wrong.
    Unauthorized(String),
    /// 404: no such route.
    NotFound(String),
    /// 405: the route takes another method.
    MethodNotAllowed(String),
    /// 408: the body did not arrive in time.
    BodyTimeout(String),
    /// 409: the observed state leaves a decision that could lose data open.
    Unsafe(String),
    /// 413: the body is over the limit.
    TooLarge(String),
    /// 415: the body is not sent as JSON.
    NotJson(String),
    /// 422: the parent's spec, name or kind cannot be acted on.
    Invalid(String),
    /// 429: every place for a call is taken.
    Overloaded(String),
    /// 500: a bug in opshooks.
    Bug(String),
    /// 503: no answer before the deadline.
    Deadline(String),
}

impl Refusal {
    /// The status code of this refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::Malformed(_) => StatusCode::BAD_REQUEST,
            Refusal::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Refusal::NotFound(_) => StatusCode::NOT_FOUND,
            Refusal::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Refusal::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Refusal::Unsafe(_) => StatusCode::CONFLICT,
            Refusal::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Refusal::NotJson(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Refusal::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Refusal::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
            Refusal::Bug(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Refusal::Deadline(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl From<&HookError> for Refusal {
    /// An operator's refusal: 400 for an undecodable body, 422 for a spec it
    /// cannot act on, 409 when acting could lose data (a group it reads
    /// missing from the request included).
    fn from(err: &HookError) -> Self {
        let detail = err.to_string();
        match err {
            HookError::Decode(DecodeError::Malformed(_)) => Refusal::Malformed(detail),
            HookError::Decode(DecodeError::Parent(_)) | HookError::Invalid(_) => {
                Refusal::Invalid(detail)
            }
            // Retried by Metacontroller: a stale customize answer expires.
            HookError::Unsafe(_) | HookError::Decode(DecodeError::MissingGroup(_)) => {
                Refusal::Unsafe(detail)
            }
        }
    }
}

impl From<Refusal> for Problem {
    fn from(refusal: Refusal) -> Self {
        let status = refusal.status();
        let (Refusal::Malformed(detail)
        | Refusal::Unauthorized(detail)
        | Refusal::NotFound(detail)
        | Refusal::MethodNotAllowed(detail)
        | Refusal::BodyTimeout(detail)
        | Refusal::Unsafe(detail)
        | Refusal::TooLarge(detail)
        | Refusal::NotJson(detail)
        | Refusal::Invalid(detail)
        | Refusal::Overloaded(detail)
        | Refusal::Bug(detail)
        | Refusal::Deadline(detail)) = refusal;
        Problem::new(status, detail)
    }
}

impl Problem {
    /// The answer to a failed hook call (see `From<&HookError> for Refusal`).
    pub fn from_hook_error(err: &HookError) -> Problem {
        Refusal::from(err).into()
    }

    /// A problem with `status` and a one-line `detail`, cut to
    /// [`MAX_DETAIL_CHARS`]. Only [`Refusal`] picks the status.
    fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        // A newline would break the one-line event message users read.
        let detail = detail.into().replace(['\n', '\r'], " ");
        // Whatever formatted a user's value into the message, quote at most
        // 64 characters of it.
        let mut detail = cut_quoted(&detail).into_owned();
        // Metacontroller copies the body into an event; keep it an event's
        // size whatever a message quoted.
        if let Some((cut, _)) = detail.char_indices().nth(MAX_DETAIL_CHARS) {
            detail.truncate(cut);
            detail.push('…');
        }
        Problem {
            type_: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status,
            detail,
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self).expect("problems serialize");
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        // What the client needs to act on the two statuses that ask for it.
        match self.status {
            StatusCode::UNAUTHORIZED => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(CHALLENGE),
                );
            }
            StatusCode::TOO_MANY_REQUESTS => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
            }
            _ => {}
        }
        response
    }
}

mod status_code {
    use axum::http::StatusCode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(status: &StatusCode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(status.as_u16())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<StatusCode, D::Error> {
        let code = u16::deserialize(d)?;
        StatusCode::from_u16(code).map_err(serde::de::Error::custom)
    }
}

/// The metrics label of a call whose answer never reached its client.
pub(super) const CLIENT_GONE: &str = "client_gone";

/// Every metrics label [`outcome`] gives, so each series exists from the
/// first scrape.
pub(super) const OUTCOMES: [&str; 13] = [
    "ok",
    "bad_request",
    "unauthorized",
    "unsupported_media_type",
    "payload_too_large",
    "request_timeout",
    "invalid_spec",
    "unsafe",
    "overloaded",
    "timeout",
    "internal",
    "other",
    CLIENT_GONE,
];

/// The outcomes of a refusal made before any route is known, counted with
/// empty `operator` and `hook` labels: hyper's own answers to a request
/// that does not parse (400) or whose head is over its limit (431, or 414
/// for a URI; hyper does not say which), and the router's 404 and 405.
pub(super) const UNROUTED_OUTCOMES: [&str; 4] = [
    "bad_request",
    "head_too_large",
    "not_found",
    "method_not_allowed",
];

/// The metrics label for a response status.
pub(super) fn outcome(status: StatusCode) -> &'static str {
    match status {
        StatusCode::OK => "ok",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE | StatusCode::URI_TOO_LONG => "head_too_large",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::TOO_MANY_REQUESTS => "overloaded",
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_spec",
        StatusCode::CONFLICT => "unsafe",
        StatusCode::SERVICE_UNAVAILABLE => "timeout",
        _ if status.is_server_error() => "internal",
        _ => "other",
    }
}

/// Hook bodies must be JSON: `application/json` or any `+json` type.
pub(super) fn check_content_type(headers: &HeaderMap) -> Result<(), Problem> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = given
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
    {
        Ok(())
    } else {
        let given = if given.is_empty() {
            "none".into()
        } else {
            cut(given)
        };
        Err(Problem::from(Refusal::NotJson(format!(
            "Content-Type is {given}; send the hook request as JSON with Content-Type: application/json"
        ))))
    }
}

/// The body length a request declares in `Content-Length`, if any.
pub(super) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads a whole body of at most `max` bytes within `deadline`, asking
/// `hold` for room for each part as it arrives. When `hold` refuses, the
/// rest of the body is read and dropped (so the client, still sending,
/// reads the refusal rather than a reset connection) and its refusal is
/// the answer.
pub(super) async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limits: &super::Limits,
    hold: impl FnMut(usize) -> Result<(), Problem>,
) -> Result<Bytes, Problem> {
    let (max, deadline) = (limits.max_body_bytes, limits.request_timeout);
    let started = Instant::now();
    let too_large = |size: Option<u64>| {
        let size = size.map_or_else(String::new, |n| format!(" ({n} bytes)"));
        Problem::from(Refusal::TooLarge(format!(
            "the request body{size} is over the limit of {max} bytes; raise --max-body-bytes (OPSHOOKS_MAX_BODY_BYTES)"
        )))
    };
    let declared = declared_length(headers);
    if let Some(length) = declared
        && length > max as u64
    {
        return Err(too_large(Some(length)));
    }
    // One buffer of the declared size: collecting chunks and joining them
    // would hold the body twice at the end. Its pages are touched, and so
    // use memory, only as the body arrives.
    let capacity = declared.map_or(0, |n| usize::try_from(n).unwrap_or(max).min(max));
    // What the read leaves behind, known even when the deadline drops it.
    let mut reading = Reading::default();
    let read = read_frames(body, capacity, started, limits, hold, &mut reading);
    let read = tokio::time::timeout(deadline, read).await;
    let result = match reading.refused {
        Some(problem) => Err(problem),
        None => refused_or_read(read, declared, deadline, too_large),
    };
    if result.is_err() && reading.held >= super::memory::LARGE_BODY {
        // The refused body is freed by now, on this thread: hand its pages
        // back as after a large call, rather than when this thread next
        // allocates.
        super::memory::release_memory();
    }
    result
}

/// What reading a body leaves behind, known even when the deadline drops
/// the read: the most its buffer held, and why it was refused (unset when
/// it was refused for its size).
#[derive(Default)]
struct Reading {
    /// The most the buffer held.
    held: usize,
    /// The refusal that stopped the read, other than for size.
    refused: Option<Problem>,
}

/// Reads a body's frames into one buffer of `capacity` bytes, each part
/// due at the pace [`next_part_due`] sets, asking `hold` for room for each
/// part. `None` when refused: over the size limit, or with the refusal
/// recorded in `reading` (a refused `hold` first drains the rest of the
/// body).
async fn read_frames(
    mut body: Body,
    capacity: usize,
    started: Instant,
    limits: &super::Limits,
    mut hold: impl FnMut(usize) -> Result<(), Problem>,
    reading: &mut Reading,
) -> Result<Option<Bytes>, axum::Error> {
    use http_body_util::BodyExt;
    let mut buffer = Vec::with_capacity(capacity);
    let mut last = started;
    loop {
        let frame = match next_part_due(started, last, buffer.len(), limits.min_body_rate) {
            None => body.frame().await,
            Some((due, why)) => match tokio::time::timeout_at(due.into(), body.frame()).await {
                Ok(frame) => frame,
                Err(_) => {
                    reading.refused =
                        Some(too_slow(buffer.len(), started, why, limits.min_body_rate));
                    return Ok(None);
                }
            },
        };
        let Some(frame) = frame else { break };
        last = Instant::now();
        if let Some(data) = frame?.data_ref() {
            let received = buffer.len() + data.len();
            if received > limits.max_body_bytes {
                return Ok(None);
            }
            if let Err(problem) = hold(received) {
                reading.refused = Some(problem);
                drop(buffer);
                let mut seen = received;
                drain(&mut body, &mut seen, limits.max_body_bytes).await;
                return Ok(None);
            }
            buffer.extend_from_slice(data);
            reading.held = received;
        }
    }
    Ok(Some(Bytes::from(buffer)))
}

/// Why a body's next part is due when it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pace {
    /// It may pause for at most [`BODY_GRACE`].
    Pause,
    /// It must arrive at the minimum rate on average.
    Rate,
}

/// When the next part of a body that began at `started`, last sent a part
/// at `last` and holds `received` bytes must arrive, and why: a pause of
/// at most [`BODY_GRACE`], and on average `min_rate` bytes a second from
/// [`BODY_GRACE`] after it began. `None` when `min_rate` is 0.
pub(super) fn next_part_due(
    started: Instant,
    last: Instant,
    received: usize,
    min_rate: u64,
) -> Option<(Instant, Pace)> {
    if min_rate == 0 {
        return None;
    }
    let owed = Duration::from_secs_f64(received as f64 / min_rate as f64);
    let by_rate = started + BODY_GRACE + owed;
    let by_pause = last + BODY_GRACE;
    Some(if by_pause <= by_rate {
        (by_pause, Pace::Pause)
    } else {
        (by_rate, Pace::Rate)
    })
}

/// The refusal of a body that arrived too slowly.
fn too_slow(received: usize, started: Instant, why: Pace, min_rate: u64) -> Problem {
    let grace = BODY_GRACE.as_secs();
    let what = match why {
        Pace::Pause => format!("paused for more than {grace} s"),
        Pace::Rate => format!("averaged under {min_rate} bytes/s after its first {grace} s"),
    };
    Problem::from(Refusal::BodyTimeout(format!(
        "the request body {what} ({received} bytes in {:.1} s); send it at once, or lower --min-body-bytes-per-second (OPSHOOKS_MIN_BODY_BYTES_PER_SECOND, 0 turns the check off)",
        started.elapsed().as_secs_f64()
    )))
}

/// What reading a body came to: the body, or why it is refused.
fn refused_or_read(
    read: Result<Result<Option<Bytes>, axum::Error>, tokio::time::error::Elapsed>,
    declared: Option<u64>,
    deadline: Duration,
    too_large: impl Fn(Option<u64>) -> Problem,
) -> Result<Bytes, Problem> {
    match read {
        Err(_) => Err(Problem::from(Refusal::BodyTimeout(format!(
            "the request body did not arrive within {} s",
            deadline.as_secs_f64()
        )))),
        Ok(Ok(None)) => Err(too_large(None)),
        Ok(Err(err)) if is_length_limit(&err) => Err(too_large(None)),
        Ok(Err(err)) => Err(Problem::from(Refusal::Malformed(format!(
            "the request body could not be read: {err}"
        )))),
        Ok(Ok(Some(bytes))) => whole(bytes, declared),
    }
}

/// A body is used only when it is as long as its `Content-Length` says: an
/// HTTP/2 stream reset with NO_ERROR ends the body early without an error
/// (hyper reads that reset as the end), and a cut body can still be valid
/// JSON that forgets children.
fn whole(bytes: Bytes, declared: Option<u64>) -> Result<Bytes, Problem> {
    match declared {
        Some(length) if length != bytes.len() as u64 => {
            Err(Problem::from(Refusal::Malformed(format!(
                "the request body ended after {} of the {length} bytes its Content-Length declares; send the whole body",
                bytes.len()
            ))))
        }
        _ => Ok(bytes),
    }
}

/// Reads and drops a body of at most `max` bytes within `deadline`, holding
/// one frame at a time; gives up silently past either. Returns how many
/// bytes it read.
pub(super) async fn discard_body(body: Body, max: usize, deadline: Duration) -> usize {
    let mut body = body;
    let mut seen = 0;
    let _ = tokio::time::timeout(deadline, drain(&mut body, &mut seen, max)).await;
    seen
}

/// Reads and drops the rest of a body, one frame at a time, until it ends,
/// fails or passes `max` bytes counting the `seen` already read.
async fn drain(body: &mut Body, seen: &mut usize, max: usize) {
    use http_body_util::BodyExt;
    while let Some(Ok(frame)) = body.frame().await {
        *seen += frame.data_ref().map_or(0, Bytes::len);
        if *seen > max {
            break;
        }
    }
}

fn is_length_limit(err: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_type(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn json_content_types() {
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/merge-patch+json",
        ] {
            assert!(check_content_type(&with_type(ok)).is_ok(), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/jsonx",
        ] {
            let problem = check_content_type(&with_type(bad)).unwrap_err();
            assert_eq!(problem.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{bad}");
        }
        let none = check_content_type(&HeaderMap::new()).unwrap_err();
        assert!(
            none.detail.starts_with("Content-Type is none;"),
            "{}",
            none.detail
        );
    }

    #[test]
    fn details_are_cut_to_an_events_size() {
        let problem = Problem::new(StatusCode::BAD_REQUEST, "é".repeat(5000));
        assert_eq!(problem.detail.chars().count(), MAX_DETAIL_CHARS + 1);
        assert!(problem.detail.ends_with('…'));
    }

    #[test]
    fn details_stay_on_one_line() {
        let problem = Problem::new(StatusCode::BAD_REQUEST, "a\nb\r\nc");
        assert_eq!(problem.detail, "a b  c");
        assert_eq!(problem.title, "Bad Request");
    }

    /// Reads `body` with at most `max` bytes, declaring `length`, with
    /// room for every byte.
    async fn read(body: &str, length: Option<&'static str>, max: usize) -> Result<Bytes, Problem> {
        let mut headers = HeaderMap::new();
        if let Some(length) = length {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static(length));
        }
        let body = Body::from(body.to_string());
        let limits = super::super::Limits {
            max_body_bytes: max,
            request_timeout: Duration::from_secs(1),
            ..super::super::Limits::default()
        };
        read_body(body, &headers, &limits, |_| Ok(())).await
    }

    #[tokio::test]
    async fn declared_and_streamed_oversize_bodies_are_refused() {
        let declared = read(&"x".repeat(11), Some("11"), 10).await.unwrap_err();
        assert_eq!(declared.status, StatusCode::PAYLOAD_TOO_LARGE);
        let streamed = read(&"x".repeat(11), None, 10).await.unwrap_err();
        assert_eq!(streamed.status, StatusCode::PAYLOAD_TOO_LARGE);
        let fits = read(&"x".repeat(10), None, 10).await.unwrap();
        assert_eq!(fits.len(), 10);
    }

    /// Issue 18: a body that ends before its Content-Length (an HTTP/2
    /// stream reset with NO_ERROR ends it without an error) is refused,
    /// never computed.
    #[tokio::test]
    async fn a_body_shorter_than_its_content_length_is_refused() {
        let cut = read("{}", Some("12"), 100).await.unwrap_err();
        assert_eq!(cut.status, StatusCode::BAD_REQUEST);
        let detail = &cut.detail;
        assert!(detail.contains("after 2 of the 12 bytes"), "{detail}");
    }

    /// A body's next part is due by the sooner of a 2 s pause and its
    /// average rate counted from 2 s after it began; no minimum, no due time.
    #[test]
    fn a_bodys_next_part_is_due_by_its_pause_or_its_rate() {
        let t0 = Instant::now();
        let s = |secs: f64| t0 + Duration::from_secs_f64(secs);
        // Nothing yet: 2 s of grace.
        assert_eq!(next_part_due(t0, t0, 0, 1000), Some((s(2.0), Pace::Pause)));
        // 500 bytes at 1000 B/s owe 0.5 s past the grace; the last part
        // came at 1 s, so the pause ends at 3 s and the rate first.
        assert_eq!(
            next_part_due(t0, s(1.0), 500, 1000),
            Some((s(2.5), Pace::Rate))
        );
        // Far ahead of the rate: only the pause counts.
        assert_eq!(
            next_part_due(t0, s(1.0), 10_000, 1000),
            Some((s(3.0), Pace::Pause))
        );
        assert_eq!(next_part_due(t0, t0, 0, 0), None);
    }
}
