//! Issue 31, item 6: an error detail quotes at most 64 characters of any
//! one user value, whatever the field and however the value is shaped.

use opshooks::call::call_slice;
use opshooks::hook::Hook;
use opshooks::hook::quote::QUOTE_CHARS;
use opshooks::http::Problem;
use serde_json::{Value, json};

use super::support::{ctx, operator};

/// The filler of every hostile value: the detail's longest run of it is
/// how much of the value it quotes.
const FILL: char = 'q';

fn fill(n: usize) -> String {
    FILL.to_string().repeat(n)
}

/// The longest run of [`FILL`] in `text`.
fn longest_fill(text: &str) -> usize {
    text.split(|c| c != FILL)
        .map(|run| run.chars().count())
        .max()
        .unwrap_or(0)
}

fn fixture(operator: &str, case: &str) -> Value {
    let path = super::support::root()
        .join("tests/fixtures")
        .join(operator)
        .join(case)
        .join("request.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// (operator, fixture, spec field, value): every class of field, each
/// with a long value, a long map key, or serde's own quotes inside.
fn hostile() -> Vec<(&'static str, &'static str, String, Value)> {
    let long = fill(900);
    // serde writes an unknown variant between backticks: a value that
    // holds its own backticks and words must not end the quote early.
    let tick = format!("large`{long}`, expected one of `{long}");
    let quote = format!("a\"{long}\\\"{long}");
    let dotted = (0..90).map(|_| "qqqqqqqqq").collect::<Vec<_>>().join(".");
    let mut cases: Vec<(&str, &str, String, Value)> = vec![];
    let db = |field: &str, value: Value| ("database", "v2-running", field.to_string(), value);
    cases.extend([
        db("postgresql", json!({"parameters": {&long: "1"}})),
        db("postgresql", json!({"parameters": {&dotted: "1"}})),
        db("postgresql", json!({"parameters": {"work_mem": format!("{long}\n")}})),
        db("postgresql", json!({"pgHba": [format!("host all all {} scram-sha-256", fill(400))]})),
        db("postgresql", json!({"pgHba": [format!("host all all 10.0.0.0/{} scram-sha-256", fill(400))]})),
        db("postgresql", json!({"pgHba": [format!("host all all 10.0.0.0/8 {}", fill(400))]})),
        db("postgresql", json!({"pgHba": [format!("host all all {}/8 trust", fill(400))]})),
        db("resources", json!({"requests": {&long: "1"}})),
        db("resources", json!({"requests": {&dotted: "1"}})),
        db("resources", json!({"requests": {"cpu": &long}})),
        db("resources", json!({"limits": {"memory": &tick}})),
        db("resources", json!({"requests": {"memory": format!("{}1Gi", "0".repeat(900))}, "limits": {"memory": "1Mi"}})),
        db("size", json!(tick)),
        db("size", json!(long)),
        db("size", json!(quote)),
        db("version", json!(tick)),
        db("deletionPolicy", json!(tick)),
        db("replication", json!(tick)),
        db("databaseName", json!(long)),
        db("user", json!(long)),
        db("credentialsSecret", json!(long)),
        db("storage", json!({"size": &long})),
        db("storage", json!({"size": "1Gi", &long: 1})),
        db("backup", json!({"destination": {"s3Bucket": &long}})),
        db("backup", json!({"destination": {"s3Bucket": "bucket", "s3Prefix": &long}})),
        db("backup", json!({"enabled": true, "schedule": &long, "destination": {"s3Bucket": "bucket"}})),
        db("backup", json!({"enabled": true, "schedule": format!("@{long}"), "destination": {"s3Bucket": "bucket"}})),
        db("backup", json!({"enabled": true, "schedule": format!("{long} * * * *"), "destination": {"s3Bucket": "bucket"}})),
        db("backup", json!({"destination": {"s3Bucket": "bucket"}, "resources": {"limits": {&long: "1"}}})),
        db("backup", json!({"destination": {"s3Bucket": "bucket"}, "serviceAccountName": &long})),
        db("failover", json!({"maxStandbyLag": &long})),
        db("failover", json!({"delay": &long})),
        db("bootstrap", json!({"database": "a", "before": &long})),
        db("affinity", json!({"nodeSelector": {&long: "x"}})),
        db("affinity", json!({"nodeSelector": {"x": &long}})),
        db("affinity", json!({"podAntiAffinityType": &tick})),
        db("affinity", json!({"tolerations": [{"key": &long, "operator": "Exists"}]})),
        db("affinity", json!({"tolerations": [{"key": "k", "operator": &tick}]})),
        db("topologySpreadConstraints", json!([{"topologyKey": &long, "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}])),
        db("imagePullSecrets", json!([{"name": &long}])),
    ]);
    let backup = |field: &str, value: Value| ("backup", "v2-resources", field.to_string(), value);
    cases.extend([
        backup("schedule", json!(long)),
        backup("timeZone", json!(long)),
        backup("target", json!({"kind": &tick, "name": "db"})),
        backup("target", json!({"kind": "StatefulSet", "name": &long})),
        backup("destination", json!({"s3Bucket": &long})),
        backup("resources", json!({"requests": {&long: "1"}})),
        backup("resources", json!({"requests": {"cpu": &long}})),
        backup("serviceAccountName", json!(long)),
    ]);
    let mc = |field: &str, value: Value| ("memcached", "v2-all-ready", field.to_string(), value);
    cases.extend([
        mc("memoryLimit", json!(long)),
        mc("image", json!(format!("a {long}"))),
    ]);
    let web = |field: &str, value: Value| ("webserver", "v2-scale-up", field.to_string(), value);
    // Decoding: an undeclared field, a map key in a path, a wrong type.
    cases.extend([
        web("image", json!(format!("a {long}"))),
        web("replicas", json!(long)),
        web(&long, json!(1)),
        mc(&tick, json!(1)),
        db("postgresql", json!({"parameters": {&long: 1}})),
        backup("destination", json!({"s3Bucket": "bucket", &long: 1})),
    ]);
    cases
}

/// Issue 31, item 6: a 900-character parameter name or resource key, or a
/// backtick trick in an enum, put about 1,000 characters of the value in
/// the detail. Every refusal quotes at most 64 characters of it, and the
/// whole detail stays short.
#[test]
fn no_detail_quotes_more_than_64_characters_of_a_value() {
    let mut failures = vec![];
    let mut refused = 0;
    for (op, case, field, value) in hostile() {
        let mut request = fixture(op, case);
        request["parent"]["spec"][&field] = value;
        let body = request.to_string();
        let call = call_slice(&operator(op), Hook::Sync, body.as_bytes(), &ctx()).unwrap();
        let Err(err) = call.result else { continue };
        refused += 1;
        let detail = Problem::from_hook_error(&err).detail;
        let run = longest_fill(&detail);
        if run > QUOTE_CHARS || detail.chars().count() > 400 {
            failures.push(format!(
                "{op} spec.{field:.20}: {run} characters: {detail:.300}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(refused >= 40, "only {refused} of the cases were refused");
}
