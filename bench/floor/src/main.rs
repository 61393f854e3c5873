//! The floor: every hook path parses its body into `serde_json::Value` and
//! answers that value, serialised again. A hook cannot do less work with
//! serde_json and axum, so opshooks' throughput is measured against it.
//!
//! Usage: opshooks-bench-floor [--listen ADDR]   (default 127.0.0.1:8080)

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

/// The same body limit as opshooks' default `--max-body-bytes`.
const MAX_BODY_BYTES: usize = 32 << 20;

async fn echo(Json(body): Json<Value>) -> Json<Value> {
    Json(body)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut listen = String::from("127.0.0.1:8080");
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--listen", Some(addr)) => listen = addr,
            _ => {
                eprintln!("usage: opshooks-bench-floor [--listen ADDR]");
                std::process::exit(2);
            }
        }
    }
    // The same runtime as opshooks: tokio's multi-thread runtime, one worker
    // per core.
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(async move {
        let app = Router::new()
            .route("/readyz", get(|| async { "ok" }))
            .route("/{operator}/{hook}", post(echo))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .unwrap_or_else(|err| panic!("cannot listen on {listen}: {err}"));
        axum::serve(listener, app).await.expect("serve");
    });
}
