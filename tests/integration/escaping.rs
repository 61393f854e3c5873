//! No spec value is read by the kubelet as a `$(VAR)` reference (issue 31):
//! every answered fixture of every operator, each string of its spec
//! replaced by or followed with a hostile `$(…)` string, answers children
//! whose commands, arguments and environment values resolve no variable.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use opshooks::call::call_slice;
use opshooks::hook::Hook;
use opshooks::operators;
use opshooks::operators::expansion::expand;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::support::{cases, ctx, root};

/// An answered fixture, swept: each string of its spec followed with
/// `$(PGPASSWORD)`.
struct Case {
    operator: &'static str,
    hook: Hook,
    request: Value,
    /// The strings of the spec (JSON pointers) whose sweep was answered:
    /// the property's edits pick among them, so most of its requests are
    /// answered rather than refused by validation.
    open: Vec<String>,
    /// What the sweep's answers resolve: empty when every value passed.
    references: Vec<String>,
}

/// Every fixture of every operator answered with children (sync or
/// finalize), and each (but v1's, which repeat v2's states with the other
/// path keys) with the [`extras`] that keep it answered, swept once.
fn answered_cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| {
        let mut known = Known::new();
        let mut swept = Vec::new();
        for op in operators::all() {
            for case in cases(op.name) {
                let name = case.file_name().unwrap().to_string_lossy().into_owned();
                let hook = name.split('-').find_map(Hook::parse).unwrap_or(Hook::Sync);
                if hook == Hook::Customize || !case.join("response.json").exists() {
                    continue;
                }
                let text = std::fs::read_to_string(case.join("request.json")).unwrap();
                let request: Value = serde_json::from_str(&text).unwrap();
                let more = (!name.starts_with("v1-"))
                    .then(|| with_extras(op.name, hook, &request))
                    .flatten();
                if let Some(more) = more {
                    swept.push(sweep(op.name, hook, more, &mut known));
                }
                swept.push(sweep(op.name, hook, request, &mut known));
            }
        }
        swept
    })
}

/// Whether a string of an operator's spec (by its pointer) took
/// `$(PGPASSWORD)` after it and stayed answered: a field's validation
/// hardly depends on the state, so each is tried alone once and then with
/// the others in one call (each call of a Database costs).
type Known = std::collections::BTreeMap<(&'static str, String), bool>;

/// `request` with the [`extras`] that keep it answered, all at once when
/// they fit, else one by one; `None` when none fits.
fn with_extras(operator: &'static str, hook: Hook, request: &Value) -> Option<Value> {
    let add = |request: &Value, (at, value): (&str, Value)| {
        with(request, &format!("/parent/spec{at}"), value)
    };
    let all = extras(operator)
        .into_iter()
        .fold(request.clone(), |r, extra| add(&r, extra).unwrap_or(r));
    if answered_references(operator, hook, &all).is_some() {
        return (&all != request).then_some(all);
    }
    let mut more = request.clone();
    for extra in extras(operator) {
        if let Some(next) = add(&more, extra)
            && answered_references(operator, hook, &next).is_some()
        {
            more = next;
        }
    }
    (&more != request).then_some(more)
}

/// Spec fields no fixture sets, with plausible values, so the sweep reaches
/// every string field of every operator's spec.
fn extras(operator: &str) -> Vec<(&'static str, Value)> {
    let destination = json!({
        "s3Bucket": "orders-backups",
        "s3Prefix": "nightly/",
        "region": "eu-west-1",
        "endpoint": "http://minio.storage:9000",
        "credentialsSecret": "s3-creds",
    });
    match operator {
        "backup" => vec![
            ("/database", json!("orders")),
            ("/timeZone", json!("Europe/Paris")),
        ],
        "database" => vec![
            ("/databaseName", json!("orders")),
            ("/user", json!("app")),
            ("/credentialsSecret", json!("orders-app")),
            ("/replication", json!("synchronous")),
            ("/failover", json!({"maxStandbyLag": "16Mi"})),
            (
                "/storage/resizeImage",
                json!("registry.example/kubectl:1.31"),
            ),
            ("/imagePullSecrets", json!([{"name": "regcred"}])),
            ("/affinity", json!({"nodeSelector": {"disk": "ssd"}})),
            ("/backup/destination/region", json!("eu-west-1")),
            (
                "/backup/destination/endpoint",
                json!("http://minio.storage:9000"),
            ),
            (
                "/postgresql",
                json!({"parameters": {"cluster_name": "orders"}}),
            ),
            (
                "/bootstrap",
                json!({"key": "nightly/orders-20261124T020000Z.pgdump", "destination": destination}),
            ),
            (
                "/bootstrap",
                json!({"backup": "nightly", "before": "2026-11-24T09:00:00Z", "destination": destination}),
            ),
        ],
        _ => vec![],
    }
}

/// `request` with `value` at `pointer`, whose parent must be an object
/// that has nothing there yet.
fn with(request: &Value, pointer: &str, value: Value) -> Option<Value> {
    let (parent, key) = pointer.rsplit_once('/')?;
    let mut request = request.clone();
    let fields = request.pointer_mut(parent)?.as_object_mut()?;
    if fields.contains_key(key) {
        return None;
    }
    fields.insert(key.to_string(), value);
    Some(request)
}

/// `request` answered as it is and with each string of its spec followed
/// with `$(PGPASSWORD)` (followed, not replaced: most fields keep their
/// shape and the request stays valid): those known to take it all in one
/// call, each new one alone.
fn sweep(operator: &'static str, hook: Hook, request: Value, known: &mut Known) -> Case {
    const HOSTILE: &str = "$(PGPASSWORD)";
    let mut strings = Vec::new();
    string_pointers(&request["parent"]["spec"], "/parent/spec", &mut strings);
    let mut references = Vec::new();
    let mut answer = |request: &Value, what: &str| {
        let answered = answered_references(operator, hook, request);
        if let Some(found) = &answered {
            references.extend(found.iter().map(|f| format!("{what}: {f}")));
        }
        answered.is_some()
    };
    answer(&request, "as committed");
    let is = |known: &Known, pointer: &String| known.get(&(operator, pointer.clone())).copied();
    let mut open: Vec<String> = strings
        .iter()
        .filter(|p| is(known, p) == Some(true))
        .cloned()
        .collect();
    let together = open.iter().fold(request.clone(), |r, pointer| {
        edit(&r, pointer, true, HOSTILE)
    });
    let mut alone: Vec<&String> = strings.iter().filter(|p| is(known, p).is_none()).collect();
    if !open.is_empty() && !answer(&together, &format!("{open:?}")) {
        alone.extend(strings.iter().filter(|p| is(known, p) == Some(true)));
        open.clear();
    }
    for pointer in alone {
        let took = answer(&edit(&request, pointer, true, HOSTILE), pointer);
        known.insert((operator, pointer.clone()), took);
        if took {
            open.push(pointer.clone());
        }
    }
    Case {
        operator,
        hook,
        request,
        open,
        references,
    }
}

/// `request` with the string at `pointer` replaced by `text`, or followed
/// with it.
fn edit(request: &Value, pointer: &str, append: bool, text: &str) -> Value {
    let mut request = request.clone();
    if let Some(Value::String(field)) = request.pointer_mut(pointer) {
        match append {
            true => field.push_str(text),
            false => *field = text.to_string(),
        }
    }
    request
}

/// What the children answered to `request` resolve, or `None` when it is
/// refused.
fn answered_references(operator: &str, hook: Hook, request: &Value) -> Option<Vec<String>> {
    let op = super::support::operator(operator);
    let call = call_slice(&op, hook, request.to_string().as_bytes(), &ctx()).unwrap();
    let response: Value = serde_json::from_slice(&call.result.ok()?.body).unwrap();
    let mut found = Vec::new();
    resolvable_references(&response["children"], &mut found);
    Some(found)
}

/// The JSON pointer of every string under `value`.
fn string_pointers(value: &Value, at: &str, out: &mut Vec<String>) {
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    match value {
        Value::String(_) => out.push(at.to_string()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                string_pointers(item, &format!("{at}/{i}"), out);
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields {
                string_pointers(item, &format!("{at}/{}", escape(key)), out);
            }
        }
        _ => {}
    }
}

/// A string the kubelet would expand if written as it is.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "$(POSTGRES_PASSWORD)",
            "$(PGPASSWORD)",
            "$(APP_PASSWORD)",
            "$(REPLICATION_PASSWORD)",
            "$(AWS_SECRET_ACCESS_KEY)",
            "$(KUBERNETES_SERVICE_HOST)",
            "$$(PGPASSWORD)",
            "$$$(PGPASSWORD)",
            "$(",
            "$",
            "a$b",
            "$é(PGPASSWORD)",
        ])
        .prop_map(String::from),
        "[a-z]{0,3}\\$\\([A-Z_]{1,12}\\)[a-z]{0,3}",
    ]
}

/// Every reference in the commands, arguments and environment values of
/// every container under `value` that the kubelet could resolve: one of
/// the container's variables, or an upper-case name such as those of the
/// Service variables the kubelet adds. (Our scripts' `$(mktemp)` is a
/// shell's.)
fn resolvable_references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (key, item) in fields {
                if matches!(key.as_str(), "containers" | "initContainers") {
                    for container in item.as_array().into_iter().flatten() {
                        container_references(container, out);
                    }
                }
                resolvable_references(item, out);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|item| resolvable_references(item, out)),
        _ => {}
    }
}

fn container_references(container: &Value, out: &mut Vec<String>) {
    let env = container["env"].as_array().cloned().unwrap_or_default();
    let defined: BTreeSet<&str> = env.iter().filter_map(|v| v["name"].as_str()).collect();
    let upper = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    let written = ["command", "args"]
        .iter()
        .flat_map(|field| container[field].as_array().into_iter().flatten())
        .chain(env.iter().map(|v| &v["value"]))
        .filter_map(Value::as_str);
    for text in written {
        expand(text, |name| {
            if defined.contains(name) || upper(name) {
                out.push(format!(
                    "container {}: $({name}) in {text:.80}",
                    container["name"]
                ));
            }
            None
        });
    }
}

proptest! {
    #![proptest_config(super::support::proptest_config(128))]

    /// Issue 31, item 1: `spec.postgresql.parameters.cluster_name:
    /// "$(POSTGRES_PASSWORD)"` put the password on the server's command
    /// line, `spec.databaseName: "$(PGPASSWORD)"` in the init Job's env.
    /// Up to three strings of a fixture's spec, each replaced by or
    /// followed with a hostile string.
    #[test]
    fn no_spec_value_is_a_variable_reference_in_any_child(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<bool>(), hostile()), 1..=3),
    ) {
        let case = which.get(answered_cases());
        prop_assume!(!case.open.is_empty());
        let request = edits.iter().fold(case.request.clone(), |request, (at, append, text)| {
            edit(&request, at.get::<String>(&case.open), *append, text)
        });
        if let Some(found) = answered_references(case.operator, case.hook, &request) {
            prop_assert!(found.is_empty(), "{}: {:#?}", case.operator, found);
        }
    }
}

/// Every string of every answered fixture's spec, followed with
/// `$(PGPASSWORD)`, passes as written; and the committed answers
/// themselves resolve nothing, so what the property finds is a spec value.
#[test]
fn every_spec_string_of_every_fixture_passes_as_written() {
    let cases = answered_cases();
    let references: Vec<_> = cases
        .iter()
        .flat_map(|case| case.references.iter().map(move |r| (case.operator, r)))
        .collect();
    assert!(references.is_empty(), "{references:#?}");
    // The sweep reaches children: most fixtures take a hostile value in
    // some string and are answered.
    let open = cases.iter().filter(|case| !case.open.is_empty()).count();
    assert!(open * 2 > cases.len(), "{open} of {} fixtures", cases.len());
}

/// Every script a committed answer runs (`/bin/sh -c <script>` in a
/// container's command or an exec probe's) reaches the shell as written in
/// `src/`, after the kubelet's expansion (which applies to both). Found in
/// the real loop: `start.sh`'s `server=$$` reached the shell as
/// `server=$`, so the lease's watchdog never watched a server.
#[test]
fn every_script_reaches_its_shell_as_written() {
    let mut sources = BTreeSet::new();
    let mut dirs = vec![root().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "sh") {
                sources.insert(std::fs::read_to_string(path).unwrap());
            }
        }
    }
    let mut scripts = Vec::new();
    for op in operators::all() {
        for case in cases(op.name) {
            let Ok(text) = std::fs::read_to_string(case.join("response.json")) else {
                continue;
            };
            let response: Value = serde_json::from_str(&text).unwrap();
            shell_scripts(&response, &mut scripts);
        }
    }
    assert!(scripts.len() > 100, "only {} scripts found", scripts.len());
    let changed: Vec<&str> = scripts
        .iter()
        .filter(|text| !sources.contains(&expand(text, |_| None)))
        .map(|text| text.get(..120).unwrap_or(text))
        .collect();
    assert!(
        changed.is_empty(),
        "{} scripts the kubelet changes: {changed:#?}",
        changed.len()
    );
}

/// The `<script>` of every `["/bin/sh", "-c", <script>, ...]` under `value`.
fn shell_scripts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Array(items) => {
            if let [
                Value::String(sh),
                Value::String(c),
                Value::String(script),
                ..,
            ] = items.as_slice()
                && sh == "/bin/sh"
                && c == "-c"
            {
                out.push(script.clone());
            }
            items.iter().for_each(|item| shell_scripts(item, out));
        }
        Value::Object(fields) => fields.values().for_each(|item| shell_scripts(item, out)),
        _ => {}
    }
}
