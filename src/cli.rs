//! The subcommands that do not serve: `hook`, `openapi`, `manifests`,
//! `simulate`, `render`, `report`.
//!
//! `hook` runs a request through [`crate::call::call`], the
//! same code path as the server, and prints the exact body the server would
//! send; a refusal prints the same problem document and fails.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;

use k8s_openapi::jiff::Timestamp;

use crate::call as adapter;
use crate::config::{HookArgs, ManifestArgs, RenderArgs, ReportArgs, SimulateArgs};
use crate::hook::Hook;
use crate::http::Problem;
use crate::manifests::{self, ControllerOptions};
use crate::operator::{Context, Operator};
use crate::operators;

/// A subcommand's failure: what to print on stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// One line for stderr.
    pub message: String,
    /// 1 for a refused request, 2 for bad usage or I/O.
    pub code: i32,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 2,
        }
    }
}

/// `opshooks hook OPERATOR HOOK [FILE]`.
pub fn hook(args: &HookArgs) -> Result<(), Failure> {
    let ops = operators::all();
    let op = operator_named(&ops, &args.operator)?;
    let hook = Hook::parse(&args.hook).ok_or_else(|| {
        Failure::usage(format!(
            "unknown hook {:?}; use sync, finalize or customize",
            args.hook
        ))
    })?;
    let now = now_from(args.now.as_deref())?;
    let body = read_input(args.file.as_deref())?;
    let ctx = match args.seed {
        Some(seed) => Context::seeded(now, seed, 1),
        None => Context::fresh(now).map_err(|err| Failure::usage(format!("randomness: {err}")))?,
    };
    let call = adapter::call_slice(op, hook, &body, &ctx).ok_or_else(|| {
        let hooks: Vec<_> = op.hooks().map(|h| h.as_str()).collect();
        Failure::usage(format!(
            "operator {} has no {hook} hook; its hooks are: {}",
            op.name,
            hooks.join(", ")
        ))
    })?;
    match call.result {
        Ok(answer) => print_body(&answer.body),
        Err(err) => {
            let problem = Problem::from_hook_error(&err);
            print_body(&serde_json::to_vec(&problem).expect("problems serialize"))?;
            let hint = not_a_request(&body)
                .map(|hint| format!("\nhint: {hint}"))
                .unwrap_or_default();
            Err(Failure {
                message: format!("{}{hint}", problem_line(&problem)),
                code: 1,
            })
        }
    }
}

/// What a refused body is instead of a hook request, when it is something
/// a person would try: YAML, or a bare parent as written for kubectl.
fn not_a_request(body: &[u8]) -> Option<String> {
    const WRAP: &str = "a hook request is the JSON Metacontroller sends: {\"parent\": <the object>, \"children\": {}, \"related\": {}}; to see an operator's whole life from a parent as written for kubectl, use `opshooks simulate OPERATOR FILE`";
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(_) => {
            let yaml: serde_json::Value = yaml_serde::from_slice(body).ok()?;
            return yaml
                .is_object()
                .then(|| format!("the body is YAML, not JSON; {WRAP}"));
        }
    };
    let object = value.as_object()?;
    match (object.get("kind"), object.contains_key("parent")) {
        (Some(kind), false) => Some(format!(
            "the body is a bare {}, not a hook request; {WRAP}",
            kind.as_str().unwrap_or("object")
        )),
        _ => None,
    }
}

/// `opshooks render OPERATOR PARENT [--observed FILE]...`: the one answer
/// Metacontroller would get for this parent and these observed objects,
/// printed as objects rather than as a hook response.
pub fn render(args: &RenderArgs) -> Result<(), Failure> {
    let ops = operators::all();
    let op = operator_named(&ops, &args.operator)?;
    let now = now_from(args.now.as_deref())?;
    let seed = seed_from(args.seed)?;
    let mut parents = objects_in(&args.file)?;
    if parents.len() != 1 {
        return Err(Failure::usage(format!(
            "{}: holds {} objects; give exactly one parent (the observed objects go in --observed)",
            args.file.display(),
            parents.len()
        )));
    }
    let parent = parents.remove(0);
    let mut sim = crate::simulate::Simulation::new(op, parent.clone(), now, seed)
        .map_err(|err| Failure::usage(format!("{}: {err}", args.file.display())))?;
    // Simulation::new stamps the parent with a uid, a generation and a
    // finalizer, as the API server and Metacontroller would; the objects
    // printed are the parent as given, with its new status.
    for path in &args.observed {
        for object in objects_in(path)? {
            sim.observe(object)
                .map_err(|err| Failure::usage(format!("{}: {err}", path.display())))?;
        }
    }
    let answer = sim.answer().map_err(|refusal| {
        let message = match &refusal.error {
            Some(err) => problem_line(&Problem::from_hook_error(err)),
            None => refusal.reason,
        };
        Failure {
            message: format!("{} refused: {message}", refusal.hook),
            code: 1,
        }
    })?;
    let mut rendered = parent;
    if let (Some(object), Some(status)) = (rendered.as_object_mut(), answer.get("status")) {
        object.insert("status".into(), status.clone());
    }
    let mut items = vec![rendered];
    items.extend(answer["children"].as_array().cloned().unwrap_or_default());
    print_objects(&items, &args.output);
    Ok(())
}

/// `--seed`: the seed given, or a random one.
fn seed_from(seed: Option<u64>) -> Result<u64, Failure> {
    Ok(match seed {
        Some(seed) => seed,
        None => {
            let mut bytes = [0u8; 8];
            getrandom::fill(&mut bytes)
                .map_err(|err| Failure::usage(format!("randomness: {err}")))?;
            u64::from_le_bytes(bytes)
        }
    })
}

/// Every object in a file: YAML documents, JSON, or a kubectl List.
fn objects_in(path: &Path) -> Result<Vec<serde_json::Value>, Failure> {
    use serde::Deserialize;
    let bad = |err: String| Failure::usage(format!("{}: {err}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|err| bad(err.to_string()))?;
    let mut out = Vec::new();
    for document in yaml_serde::Deserializer::from_str(&text) {
        let value = serde_json::Value::deserialize(document).map_err(|err| bad(err.to_string()))?;
        match value {
            serde_json::Value::Null => {}
            serde_json::Value::Object(ref o)
                if o.get("kind").and_then(|k| k.as_str()) == Some("List") =>
            {
                out.extend(
                    o.get("items")
                        .and_then(|i| i.as_array())
                        .cloned()
                        .unwrap_or_default(),
                );
            }
            value => out.push(value),
        }
    }
    Ok(out)
}

/// Prints rendered objects: a kubectl List as JSON with `--output json`,
/// else YAML documents.
fn print_objects(items: &[serde_json::Value], output: &str) {
    let mut out = std::io::stdout().lock();
    if output == "json" {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
        serde_json::to_writer_pretty(&mut out, &list).expect("JSON values serialize");
        writeln!(out).ok();
    } else {
        for item in items {
            let text = yaml_serde::to_string(item).expect("JSON values serialize as YAML");
            write!(out, "---\n{text}").ok();
        }
    }
}

/// A refusal as one line: `422 Unprocessable Entity: spec.x: …`.
fn problem_line(problem: &Problem) -> String {
    format!(
        "{} {}: {}",
        problem.status.as_u16(),
        problem.title,
        problem.detail
    )
}

/// `--now`: the time given, or the wall clock.
fn now_from(text: Option<&str>) -> Result<Timestamp, Failure> {
    match text {
        Some(text) => text.parse::<Timestamp>().map_err(|err| {
            Failure::usage(format!(
                "--now {text:?}: {err}; use RFC 3339 like 2026-01-01T00:00:00Z"
            ))
        }),
        None => Ok(Timestamp::now()),
    }
}

/// The operator named on the command line, or a usage failure naming them
/// all.
fn operator_named<'a>(ops: &'a [Operator], name: &str) -> Result<&'a Operator, Failure> {
    ops.iter().find(|op| op.name == name).ok_or_else(|| {
        let names: Vec<_> = ops.iter().map(|op| op.name).collect();
        Failure::usage(format!(
            "unknown operator {name:?}; use one of: {}",
            names.join(", ")
        ))
    })
}

/// `opshooks openapi`.
pub fn openapi() -> Result<(), Failure> {
    print_text(&crate::http::openapi::yaml(&operators::all()))
}

/// `opshooks report [FILE]`: the termination message as the hook reads it,
/// as one line of JSON; one that does not read fails (exit 1), saying so.
pub fn report(args: &ReportArgs) -> Result<(), Failure> {
    let body = read_input(args.file.as_deref())?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| Failure::usage("the termination message is not UTF-8"))?;
    let report = operators::report::Report::parse(text).map_err(|unreadable| Failure {
        message: unreadable.to_string(),
        code: 1,
    })?;
    let json = serde_json::to_string(&report)
        .map_err(|err| Failure::usage(format!("the report as JSON: {err}")))?;
    print_text(&format!("{json}\n"))
}

/// `opshooks manifests [--dir DIR]`.
pub fn manifests(args: &ManifestArgs) -> Result<(), Failure> {
    let opts = ControllerOptions {
        base_url: args.base_url.trim_end_matches('/').to_string(),
        hook_version: args.hook_version.clone(),
        timeout: args.hook_timeout.clone(),
    };
    let ops = operators::all();
    if let Some(chart) = &args.chart {
        write_files(chart, manifests::chart_files(&ops))?;
    }
    match &args.dir {
        Some(dir) => write_files(dir, manifests::files(&ops, &opts)),
        None if args.chart.is_some() => Ok(()),
        None => print_text(&manifests::stream(&ops, &opts)),
    }
}

fn write_files(root: &Path, files: Vec<(std::path::PathBuf, String)>) -> Result<(), Failure> {
    for (name, text) in files {
        let path = root.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|err| Failure::usage(format!("{}: {err}", parent.display())))?;
        }
        std::fs::write(&path, text)
            .map_err(|err| Failure::usage(format!("{}: {err}", path.display())))?;
    }
    Ok(())
}

fn read_input(file: Option<&Path>) -> Result<Vec<u8>, Failure> {
    match file {
        Some(path) if path != Path::new("-") => {
            std::fs::read(path).map_err(|err| Failure::usage(format!("{}: {err}", path.display())))
        }
        _ => {
            let mut body = Vec::new();
            std::io::stdin()
                .read_to_end(&mut body)
                .map_err(|err| Failure::usage(format!("stdin: {err}")))?;
            Ok(body)
        }
    }
}

/// Writes the body exactly; a newline follows only on a terminal, so a pipe
/// receives the same bytes the server would send.
fn print_body(body: &[u8]) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    let newline: &[u8] = if stdout.is_terminal() { b"\n" } else { b"" };
    stdout
        .write_all(body)
        .and_then(|()| stdout.write_all(newline))
        .and_then(|()| stdout.flush())
        .map_err(|err| Failure::usage(format!("stdout: {err}")))
}

fn print_text(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|err| Failure::usage(format!("stdout: {err}")))
}

/// `opshooks simulate OPERATOR FILE [--then EVENT]...`: the timeline, one
/// line per step, until the loop settles after the parent's creation and
/// after each event. Fails (1) on a broken rule of the loop or a loop that
/// does not settle.
pub fn simulate(args: &SimulateArgs) -> Result<(), Failure> {
    let ops = operators::all();
    let op = operator_named(&ops, &args.operator)?;
    let (mut sim, events) = simulation(op, args)?;
    let broken = run_stages(&mut sim, &events, args)?;
    if broken > 0 {
        return Err(Failure {
            message: format!("{broken} broken rule(s) of the loop; see VIOLATION above"),
            code: 1,
        });
    }
    Ok(())
}

/// The simulation the flags ask for, before its first step: the parent,
/// the objects `--with` adds, the Jobs that fail, and the events to come.
fn simulation<'a>(
    op: &'a Operator,
    args: &SimulateArgs,
) -> Result<(crate::simulate::Simulation<'a>, Vec<crate::simulate::Event>), Failure> {
    use crate::simulate::{Event, Simulation};
    let read = |path: &Path| -> Result<serde_json::Value, Failure> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| Failure::usage(format!("{}: {err}", path.display())))?;
        yaml_serde::from_str(&text)
            .map_err(|err| Failure::usage(format!("{}: {err}", path.display())))
    };
    let parent = read(&args.file)?;
    let start = args
        .start
        .parse::<Timestamp>()
        .map_err(|err| Failure::usage(format!("--start {:?}: {err}; use RFC 3339", args.start)))?;
    let events = args
        .then
        .iter()
        .map(|e| Event::parse(e))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::usage)?;
    let mut sim = Simulation::new(op, parent, start, args.seed).map_err(Failure::usage)?;
    sim.check_created()
        .map_err(|why| Failure::usage(format!("{}: {why}", args.file.display())))?;
    for path in &args.with {
        let object = read(path)?;
        sim.cluster
            .create(object, crate::simulate::cluster::Actor::User)
            .ok_or_else(|| {
                Failure::usage(format!(
                    "{}: needs apiVersion, kind and metadata.name, once each",
                    path.display()
                ))
            })?;
    }
    for job in &args.fail_job {
        let event = Event::FailJob(job.clone());
        sim.check(&event)
            .and_then(|()| sim.apply(&event))
            .map_err(|why| Failure::usage(format!("--fail-job {why}")))?;
    }
    Ok((sim, events))
}

/// Settles after the parent's creation and after each event, printing
/// every step; the number of broken rules, or why it stopped.
fn run_stages(
    sim: &mut crate::simulate::Simulation<'_>,
    events: &[crate::simulate::Event],
    args: &SimulateArgs,
) -> Result<usize, Failure> {
    let mut out = std::io::stdout().lock();
    let mut broken = 0;
    // Each event is shown in the words the user typed.
    let stages = std::iter::once(None).chain(events.iter().zip(&args.then).map(Some));
    for event in stages {
        if let Some((event, typed)) = event {
            if args.format == "json" {
                writeln!(out, "{}", serde_json::json!({"event": typed})).ok();
            } else {
                writeln!(out, "-- {typed}").ok();
            }
            sim.check(event)
                .and_then(|()| sim.apply(event))
                .map_err(|why| Failure::usage(format!("--then {typed}: {why}")))?;
        }
        let (steps, settled) = sim.settle(args.max_steps);
        for step in &steps {
            if args.format == "json" {
                writeln!(out, "{}", step.to_json()).ok();
            } else {
                writeln!(out, "{step}").ok();
            }
            broken += step.violations.len();
        }
        if args.format == "json" {
            let objects: Vec<&serde_json::Value> = sim
                .cluster
                .objects()
                .filter(|(k, _)| k.kind != "Pod")
                .map(|(_, object)| object)
                .collect();
            writeln!(
                out,
                "{}",
                serde_json::json!({"settled": settled, "objects": objects})
            )
            .ok();
        }
        if !settled {
            return Err(Failure {
                message: format!("the loop did not settle within {} steps", args.max_steps),
                code: 1,
            });
        }
    }
    Ok(broken)
}
