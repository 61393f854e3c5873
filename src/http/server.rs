//! The listener: accepts connections (at most `max_connections` open at
//! once), speaks HTTP/1.1 and HTTP/2, optionally over TLS, and puts a time
//! limit on every phase a client controls:
//!
//! - the TLS handshake and an HTTP/1.1 request's headers must arrive within
//!   the header read timeout;
//! - a connection with no call in flight for the idle timeout is closed,
//!   whether bytes move (HTTP/2 pings, a trickle) or not;
//! - bodies and answers have the request deadline (in the hook adapter).
//!
//! On shutdown it stops accepting, closes every connection with no call in
//! flight at once (idle and half-sent ones included), lets the calls in
//! flight finish for at most the grace period, and returns. Shutdown
//! begins when the future `serve` is given resolves: the binary passes
//! [`shutdown_signal`] (SIGTERM or Ctrl-C), tests their own.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;
use tracing::{debug, info, warn};

use super::AppState;
use super::metrics::Metrics;
use super::tls::Tls;

/// How the listener treats connections.
#[derive(Clone)]
pub struct ServeOptions {
    /// Time for a TLS handshake and for an HTTP/1.1 request's headers.
    pub header_read_timeout: Duration,
    /// A connection with nothing in flight and no traffic for this long is
    /// closed.
    pub idle_timeout: Duration,
    /// Most connections open at once; past it, new ones wait in the
    /// kernel's backlog.
    pub max_connections: usize,
    /// How long calls in flight may take to finish after shutdown begins.
    pub grace: Duration,
    /// Serve HTTPS with this configuration (reloaded as its files change).
    pub tls: Option<Arc<Tls>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(8),
            max_connections: 1024,
            grace: Duration::from_secs(20),
            tls: None,
        }
    }
}

/// Serves `state`'s router on `listener` until `shutdown` resolves, then
/// drains as the module documentation says.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    options: ServeOptions,
) -> io::Result<()> {
    let app = super::router(state.clone());
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let tasks = tokio_util::task::TaskTracker::new();
    let options = Arc::new(options);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors or a connection reset before
                    // accept: wait a little rather than spin.
                    warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let (app, options, stop) = (app.clone(), Arc::clone(&options), stop_rx.clone());
        let metrics = state.metrics.clone();
        tasks.spawn(async move {
            connection(stream, app, &options, stop, &metrics).await;
            drop(slot);
        });
    }
    drop(listener);
    state.drain();
    info!("shutting down: no new connections, finishing in-flight calls");
    let _ = stop_tx.send(true);
    tasks.close();
    if tokio::time::timeout(options.grace, tasks.wait())
        .await
        .is_err()
    {
        warn!(
            grace_seconds = options.grace.as_secs_f64(),
            "in-flight calls did not finish in time; exiting anyway"
        );
    }
    Ok(())
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

async fn connection(
    stream: TcpStream,
    app: Router,
    options: &ServeOptions,
    stop: watch::Receiver<bool>,
    metrics: &Metrics,
) {
    let _ = stream.set_nodelay(true);
    match &options.tls {
        None => http(stream, app, options, stop, metrics).await,
        Some(tls) => {
            let acceptor = TlsAcceptor::from(Arc::clone(&*tls.current()));
            match tokio::time::timeout(options.header_read_timeout, acceptor.accept(stream)).await {
                Ok(Ok(io)) => http(io, app, options, stop, metrics).await,
                Ok(Err(err)) => debug!(error = %err, "TLS handshake failed"),
                Err(_) => debug!("TLS handshake timed out"),
            }
        }
    }
}

async fn http<I>(
    io: I,
    app: Router,
    options: &ServeOptions,
    mut stop: watch::Receiver<bool>,
    metrics: &Metrics,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // The idle clock starts when HTTP does, after any TLS handshake.
    let activity = Arc::new(Activity::new());
    let calls = Arc::clone(&activity);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let in_flight = InFlight::new(Arc::clone(&calls));
        let app = app.clone();
        async move {
            let response = app.oneshot(request.map(Body::new)).await;
            drop(in_flight);
            response
        }
    });
    let protocols = protocols(options);
    let conn = protocols.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut draining = *stop.borrow();
    if draining {
        conn.as_mut().graceful_shutdown();
    }
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(err) = result {
                    ended_with(&*err, metrics);
                }
                return;
            }
            _ = stop.changed(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = tick.tick() => {
                // Idle: nothing in flight since the last call ended (or HTTP
                // began), however many bytes moved meanwhile: HTTP/2 pings
                // or a trickle that never makes a call must not keep a
                // connection open past the idle timeout docs/configuration.md states.
                // An HTTP/1.1 request's headers are bounded by hyper's
                // header read timeout, shorter by default.
                let idle = activity.since_call() >= options.idle_timeout;
                if activity.in_flight() == 0 && (draining || idle) {
                    debug!(draining, "closing a connection with nothing in flight");
                    return;
                }
            }
        }
    }
}

/// HTTP/1.1 and HTTP/2 as every connection speaks them: an HTTP/1.1
/// request's headers within the header read timeout, at most 64 HTTP/2
/// streams at once.
fn protocols(options: &ServeOptions) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(64);
    builder
}

/// A connection that ended with an error: logged at debug, and counted
/// when hyper answered it (see [`hyper_refusal`]).
fn ended_with(err: &(dyn std::error::Error + 'static), metrics: &Metrics) {
    debug!(error = %err, "connection ended with an error");
    if let Some(status) = hyper_refusal(err) {
        metrics.refused_unrouted(status);
    }
}

/// The status hyper answered a connection's error with, if it answered:
/// an HTTP/1 request it could not parse gets 400, a head over its limit
/// 431 or 414 (see `on_error` in hyper's `proto/h1/role.rs`). Hyper offers
/// no hook of its own, so this reads the error the connection ended with;
/// an HTTP/2 protocol error is a reset or GOAWAY, not an answer.
fn hyper_refusal(err: &(dyn std::error::Error + 'static)) -> Option<StatusCode> {
    let err = err.downcast_ref::<hyper::Error>()?;
    if err.is_parse_too_large() {
        Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
    } else if err.is_parse() && !err.is_parse_version_h2() && !err.is_parse_status() {
        Some(StatusCode::BAD_REQUEST)
    } else {
        None
    }
}

/// What a connection is doing: calls in flight and when the last call ended
/// (in milliseconds since HTTP began on the connection). Bytes moving are not
/// activity: only a call is.
struct Activity {
    started: Instant,
    last_call_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Activity {
            started: Instant::now(),
            last_call_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn since_call(&self) -> Duration {
        let last = Duration::from_millis(self.last_call_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }

    fn call_ended(&self) {
        self.last_call_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// One call in flight on a connection, for as long as it lives.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.call_ended();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
