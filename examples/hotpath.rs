//! The cost of one hook call without the network: loops the adapter (bytes
//! in, bytes out, exactly what the server runs per call) over a payload, for
//! profiling with `perf` and for before/after comparisons of the hot path.
//!
//! ```sh
//! cargo run --release --example hotpath -- database sync payload.json [calls]
//! ```

use std::time::Instant;

use opshooks::hook::Hook;
use opshooks::http::adapter;
use opshooks::operator::Context;

// The server's allocator, so the numbers are the server's.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, hook, path, rest @ ..] = args.as_slice() else {
        eprintln!("usage: hotpath OPERATOR HOOK PAYLOAD.json [CALLS]");
        std::process::exit(2);
    };
    let calls: u32 = rest
        .first()
        .map_or(2000, |n| n.parse().expect("CALLS is a number"));
    let body = std::fs::read(path).expect("the payload is readable");
    let operators = opshooks::operators::all();
    let op = operators
        .iter()
        .find(|op| op.name == name)
        .expect("a known operator");
    let hook = Hook::parse(hook).expect("sync, finalize or customize");
    let ctx = Context::fresh("2026-01-01T00:00:00Z".parse().expect("a time")).expect("entropy");
    let mut out = 0;
    let started = Instant::now();
    for _ in 0..calls {
        let call = adapter::call_slice(op, hook, &body, &ctx).expect("the operator has this hook");
        out = call.result.expect("a 200 answer").body.len();
    }
    let each = started.elapsed().as_secs_f64() / f64::from(calls);
    println!(
        "{name}/{hook}: {} bytes in, {out} bytes out, {:.1} µs per call over {calls} calls",
        body.len(),
        each * 1e6
    );
}
