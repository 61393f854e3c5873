//! Shared test helpers: the fixed clock, fixture discovery, blessing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use opshooks::http::{AppState, Limits};
use opshooks::operator::Context;
use opshooks::operators;

/// The time every golden fixture is answered at.
pub const FIXED_NOW: &str = "2026-01-02T03:04:05Z";

/// The random bytes every golden fixture is answered with.
pub const FIXED_ENTROPY: [u8; opshooks::operator::ENTROPY] = [7; opshooks::operator::ENTROPY];

/// Set to exactly `1` to rewrite golden files and generated artifacts on
/// purpose.
pub const BLESS: &str = "OPSHOOKS_BLESS";

pub fn now() -> Timestamp {
    FIXED_NOW.parse().unwrap()
}

pub fn ctx() -> Context {
    Context {
        now: now(),
        entropy: FIXED_ENTROPY,
    }
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether this run rewrites files. Only `1` blesses: `OPSHOOKS_BLESS=0` or
/// an empty value once blessed too, so a run meant to check rewrote instead.
pub fn blessing() -> bool {
    match std::env::var_os(BLESS) {
        None => false,
        Some(value) if value == "1" => true,
        Some(value) => panic!("{BLESS}={value:?}: only {BLESS}=1 blesses; unset it to check"),
    }
}

/// Router state with the fixed clock.
pub fn state(limits: Limits) -> AppState {
    AppState::new(operators::all(), limits, Arc::new(now))
}

/// Every fixture case folder of an operator, sorted.
pub fn cases(operator: &str) -> Vec<PathBuf> {
    let dir = root().join("tests/fixtures").join(operator);
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("request.json").exists())
        .collect();
    cases.sort();
    cases
}

/// Compares `got` with the file at `path`, or rewrites the file when blessing
/// (a bless run passes; CI refuses OPSHOOKS_BLESS and fails on a changed tree).
pub fn assert_matches_file(path: &Path, got: &str) {
    if blessing() {
        std::fs::write(path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("{}: {err}; run with {BLESS}=1 to create it", path.display()));
    if want != got {
        let diff = line_diff(&want, got);
        panic!(
            "{} differs from what the code produces (-want +got):\n{diff}\nrun with {BLESS}=1 to accept",
            path.display()
        );
    }
}

/// A unified diff of two texts, three lines of context, cut to 200 lines.
fn line_diff(want: &str, got: &str) -> String {
    let diff = similar::TextDiff::from_lines(want, got)
        .unified_diff()
        .context_radius(3)
        .header("want", "got")
        .to_string();
    diff.lines().take(200).collect::<Vec<_>>().join("\n")
}

/// The operator registered under `name`.
pub fn operator(name: &str) -> opshooks::operator::Operator {
    operators::all()
        .into_iter()
        .find(|op| op.name == name)
        .unwrap()
}

/// A property test's configuration: `cases` random inputs, or as many as
/// `PROPTEST_CASES` says when it is set (`PROPTEST_CASES=2000 cargo test
/// lives`). `ProptestConfig::with_cases` alone would ignore the variable.
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    let asked = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok());
    proptest::test_runner::Config::with_cases(asked.unwrap_or(cases))
}
