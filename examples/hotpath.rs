//! The cost of one hook call without the network: loops the adapter (bytes
//! in, bytes out, exactly what the server runs per call) over a payload, for
//! profiling with `perf` and for before/after comparisons of the hot path.
//!
//! ```sh
//! cargo run --release --example hotpath -- database sync payload.json [calls]
//! ```

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use opshooks::call as adapter;
use opshooks::hook::Hook;
use opshooks::operator::Context;

/// The server's allocator (so the times are the server's), counting the
/// bytes live at once, for the peak heap of one call.
struct Counting;

#[cfg(feature = "mimalloc")]
static INNER: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(not(feature = "mimalloc"))]
static INNER: std::alloc::System = std::alloc::System;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

#[allow(unsafe_code)]
// SAFETY: every call is passed on unchanged to the real allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's promises about `layout` hold for the inner allocator.
        unsafe { INNER.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from the inner allocator with this layout.
        unsafe { INNER.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            grew(new_size - layout.size());
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: the caller's promises about `ptr`, `layout` and `new_size`
        // hold for the inner allocator, which allocated `ptr`.
        unsafe { INNER.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Counts `bytes` more live, raising the peak if they make a new one.
fn grew(bytes: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

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
    // One call alone, for the most heap it holds at once beyond the body.
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let counted = ALLOCATIONS.load(Ordering::Relaxed);
    drop(adapter::call_slice(op, hook, &body, &ctx));
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - counted;
    let mut out = 0;
    let started = Instant::now();
    for _ in 0..calls {
        let call = adapter::call_slice(op, hook, &body, &ctx).expect("the operator has this hook");
        out = call.result.expect("a 200 answer").body.len();
    }
    let each = started.elapsed().as_secs_f64() / f64::from(calls);
    println!(
        "{name}/{hook}: {} bytes in, {out} bytes out, {:.1} µs per call over {calls} calls, \
         {:.2} MiB of heap at most, {allocations} allocations and growths",
        body.len(),
        each * 1e6,
        peak as f64 / f64::from(1 << 20)
    );
}
