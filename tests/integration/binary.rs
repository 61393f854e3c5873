//! The built binary: `opshooks hook` prints exactly what the server sends,
//! and the server drains in-flight calls on shutdown.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, header};
use http_body_util::BodyExt;
use opshooks::http::{self, Limits};
use tower::ServiceExt;

use super::support::{FIXED_NOW, root, state};

fn opshooks() -> Command {
    Command::new(env!("CARGO_BIN_EXE_opshooks"))
}

/// The JSON a command that succeeded printed.
fn json_of(out: &std::process::Output) -> serde_json::Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn hook_command_prints_the_servers_exact_body() {
    for case in ["v1-first-sync", "v2-image-change"] {
        let file = root()
            .join("tests/fixtures/webserver")
            .join(case)
            .join("request.json");
        let out = opshooks()
            .args(["hook", "webserver", "sync", "--now", FIXED_NOW])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );

        let request = Request::post("/webserver/sync")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(std::fs::read(&file).unwrap()))
            .unwrap();
        let response = http::router(state(Limits::default()))
            .oneshot(request)
            .await
            .unwrap();
        let served = response.into_body().collect().await.unwrap().to_bytes();
        assert!(
            out.stdout == served.to_vec(),
            "{case}: hook command and server differ"
        );
    }
}

#[test]
fn hook_command_reads_stdin_and_fails_on_refusal() {
    let body = std::fs::read(
        root().join("tests/fixtures/webserver/invalid-image-with-space/request.json"),
    )
    .unwrap();
    let mut child = opshooks()
        .args(["hook", "webserver", "sync"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let problem: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(problem["status"], 422);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("422 Unprocessable Entity: spec.image"),
        "{stderr}"
    );
}

#[test]
fn hook_command_explains_a_body_that_is_not_a_request() {
    let yaml = root().join("examples/database.yaml");
    let out = opshooks()
        .args(["hook", "database", "sync"])
        .arg(&yaml)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hint: the body is YAML, not JSON"),
        "{stderr}"
    );
    let parent: serde_json::Value =
        yaml_serde::from_str(&std::fs::read_to_string(&yaml).unwrap()).unwrap();
    let bare = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bare.path(), serde_json::to_vec(&parent).unwrap()).unwrap();
    let out = opshooks()
        .args(["hook", "database", "sync"])
        .arg(bare.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hint: the body is a bare Database, not a hook request"),
        "{stderr}"
    );
    // A request refused for its content gets no hint.
    let out = opshooks()
        .args(["hook", "webserver", "sync"])
        .arg(root().join("tests/fixtures/webserver/invalid-image-with-space/request.json"))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hint:"));
}

#[test]
fn seed_means_the_same_to_hook_and_simulate() {
    let example = root().join("examples/database.yaml");
    let secret_of = |objects: &[serde_json::Value]| {
        objects
            .iter()
            .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == "orders-superuser")
            .map(|o| o["data"].clone())
            .expect("the superuser Secret")
    };
    let simulated = |seed: &str| {
        let out = opshooks()
            .arg("simulate")
            .arg("database")
            .arg(&example)
            .args(["--seed", seed, "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let settled: serde_json::Value = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|l| l.get("settled").is_some())
            .unwrap();
        secret_of(settled["objects"].as_array().unwrap())
    };
    let parent: serde_json::Value =
        yaml_serde::from_str(&std::fs::read_to_string(&example).unwrap()).unwrap();
    let request = tempfile::NamedTempFile::new().unwrap();
    let mut body = opshooks::fixtures::request(opshooks::fixtures::object("", "", ""))
        .every_group("database")
        .json();
    body["parent"] = parent;
    std::fs::write(request.path(), serde_json::to_vec(&body).unwrap()).unwrap();
    let hooked = |seed: &str| {
        let out = opshooks()
            .args([
                "hook",
                "database",
                "sync",
                "--seed",
                seed,
                "--now",
                "2026-01-01T00:00:10Z",
            ])
            .arg(request.path())
            .output()
            .unwrap();
        let answer = json_of(&out);
        secret_of(answer["children"].as_array().unwrap())
    };
    assert_eq!(hooked("7"), simulated("7"));
    assert_ne!(hooked("7"), hooked("8"));
    let out = opshooks()
        .args(["hook", "database", "sync", "--seed", "abc"])
        .arg(request.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn render_answers_for_a_parent_as_written_and_what_it_observes() {
    let example = root().join("examples/webserver.yaml");
    let render = |extra: &[&std::ffi::OsStr]| {
        let out = opshooks()
            .arg("render")
            .arg("webserver")
            .arg(&example)
            .args(["--now", "2026-01-01T00:01:00Z", "-o", "json"])
            .args(extra)
            .output()
            .unwrap();
        json_of(&out)["items"].as_array().unwrap().clone()
    };
    let first = render(&[]);
    assert_eq!(first[0]["kind"], "WebServer");
    assert_eq!(
        first[0]["status"]["conditions"][0]["reason"],
        "PodsNotReady"
    );
    let mut pods: Vec<serde_json::Value> = first
        .iter()
        .filter(|o| o["kind"] == "Pod")
        .cloned()
        .collect();
    assert_eq!(pods.len(), 3);
    for pod in &mut pods {
        pod["status"] = serde_json::json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    }
    // Observed as a kubectl List, as `kubectl get -o json` prints them.
    let observed = tempfile::NamedTempFile::new().unwrap();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": pods});
    std::fs::write(observed.path(), serde_json::to_vec(&list).unwrap()).unwrap();
    let then = render(&["--observed".as_ref(), observed.path().as_os_str()]);
    assert_eq!(
        then[0]["status"]["conditions"][0]["message"],
        "3 of 3 pods are ready"
    );
    assert_eq!(then.len(), first.len());
    // A refused spec is the hook's refusal; a file of two parents is bad usage.
    let bad = tempfile::NamedTempFile::new().unwrap();
    let render_text = |text: &str| {
        std::fs::write(bad.path(), text).unwrap();
        let out = opshooks()
            .args(["render", "webserver"])
            .arg(bad.path())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = render_text(
        "apiVersion: opshooks.io/v1alpha1\nkind: WebServer\nmetadata: {name: x}\nspec: {image: nginx, replicas: -1}\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("422 Unprocessable Entity: spec.replicas"),
        "{stderr}"
    );
    let parent = std::fs::read_to_string(&example).unwrap();
    let (code, stderr) = render_text(&format!("{parent}---\n{parent}"));
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("holds 2 objects; give exactly one parent"),
        "{stderr}"
    );
}

#[test]
fn hook_command_names_unknown_operators_and_hooks() {
    let out = opshooks()
        .args(["hook", "nosuch", "sync", "/dev/null"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("unknown operator \"nosuch\"; use one of: webserver")
    );
    let out = opshooks()
        .args(["hook", "webserver", "finalize", "/dev/null"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no finalize hook"));
}

#[test]
fn simulate_shows_events_as_typed_and_refuses_events_that_name_nothing() {
    let example = root().join("examples/database.yaml");
    let simulate = |event: &str| {
        opshooks()
            .arg("simulate")
            .arg("database")
            .arg(&example)
            .args(["--then", event])
            .output()
            .unwrap()
    };
    let out = simulate("spec.version=\"17\"");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\n-- spec.version=\"17\"\n"), "{text}");
    // What a condition says to do, once, when it changes.
    let said = "\n           Upgrading: job orders-pre-upgrade-17 takes the pre-upgrade backup\n";
    assert_eq!(text.matches(said).count(), 1, "{text}");
    // The Jobs a CronJob starts, and what the garbage collector deletes.
    let out = opshooks()
        .arg("simulate")
        .arg("database")
        .arg(&example)
        .args(["--then", "run-cronjob orders-backup", "--then", "delete"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("+Job/orders-backup-25(cronjob)"), "{text}");
    assert!(text.contains("-CronJob/orders-backup(gc)"), "{text}");
    for (event, why) in [
        ("not-ready nosuch-0", "no Pod/nosuch-0 in the cluster"),
        (
            "fail-job nosuchjob",
            "names no Job of orders, whose Jobs are named orders-",
        ),
        (
            "spec.replica=5",
            "spec.replica: field not declared in schema",
        ),
        (
            "spec.storage.size=3",
            "spec.storage.size: 3 is not of type \"string\"",
        ),
        // The CRD's CEL rules, transition rules included.
        ("spec.version=\"15\"", "spec: spec.version cannot go down"),
        (
            "spec.storage.size=\"10Gi\"",
            "spec.storage: spec.storage.size cannot shrink",
        ),
        (
            "spec.storage.storageClassName=\"fast\"",
            "spec.storage: spec.storage.storageClassName cannot change once created",
        ),
        (
            "spec.bootstrap={\"database\":\"a\",\"backup\":\"b\"}",
            "spec.bootstrap: spec.bootstrap names exactly one of database, backup, key and archive",
        ),
    ] {
        let out = simulate(event);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{event}: {stderr}");
        assert!(
            stderr.contains(&format!("--then {event}: ")) && stderr.contains(why),
            "{event}: {stderr}"
        );
    }
    let out = opshooks()
        .args(["manifests", "--base-url", "opshooks.svc"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs http:// or https://"));
}

#[test]
fn simulate_refuses_each_parent_the_api_server_refuses_with_its_words() {
    // tests/e2e/invalid/: parents the real API server refuses (hooks.py
    // checks it does, with the `# expect:` words); the simulator refuses
    // each before the first step, with the same words.
    let dir = root().join("tests/e2e/invalid");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let want = text
            .lines()
            .find_map(|l| l.strip_prefix("# expect: "))
            .unwrap();
        let kind = text
            .lines()
            .find_map(|l| l.strip_prefix("kind: "))
            .unwrap()
            .to_lowercase();
        let out = opshooks()
            .args(["simulate", &kind])
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", path.display());
        assert!(
            stderr.contains("CRD refuses it") && stderr.contains(want),
            "{}: wanted {want:?} in {stderr}",
            path.display()
        );
        assert!(out.stdout.is_empty(), "{}", path.display());
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} invalid parents");
}

/// Issue 31: `render` took `spec.imag` and a CloudNativePG-style
/// `instances: 5` with exit 0 (defaults used) while `simulate` refused
/// them. Every parent the API server refuses is refused by `render`,
/// `hook` (the server's path) and `simulate` alike: render and hook with
/// the same 422, and where only the CRD refuses, all three in its words.
#[test]
fn render_hook_and_simulate_refuse_each_parent_the_api_server_refuses() {
    let dir = root().join("tests/e2e/invalid");
    let detail = |stderr: &str, after: &str| -> String {
        let line = stderr.lines().next().unwrap_or_default();
        line.split_once(after)
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_else(|| panic!("no {after:?} in {stderr}"))
    };
    let mut same_words = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let kind = text
            .lines()
            .find_map(|l| l.strip_prefix("kind: "))
            .unwrap()
            .to_lowercase();
        let run = |args: &[&str], stdin: Option<&str>| {
            let mut command = opshooks();
            command
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
            let mut input = child.stdin.take().unwrap();
            input
                .write_all(stdin.unwrap_or_default().as_bytes())
                .unwrap();
            drop(input);
            let out = child.wait_with_output().unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let file = path.to_str().unwrap();
        let (code, simulated) = run(&["simulate", &kind, file], None);
        assert_eq!(code, Some(2), "{file}: {simulated}");
        let (code, rendered) = run(&["render", &kind, file, "--seed", "1"], None);
        assert_eq!(code, Some(1), "{file}: {rendered}");
        // The hook Metacontroller calls first: customize where there is one.
        let parent: serde_json::Value = yaml_serde::from_str(&text).unwrap();
        let (hook, request) = match kind.as_str() {
            "webserver" => (
                "sync",
                serde_json::json!({"parent": parent, "children": {"Pod.v1": {}}, "related": {}}),
            ),
            _ => ("customize", serde_json::json!({"parent": parent})),
        };
        let (code, hooked) = run(
            &["hook", &kind, hook, "--seed", "1"],
            Some(&request.to_string()),
        );
        assert_eq!(code, Some(1), "{file}: {hooked}");
        let hooked = detail(&hooked, "422 Unprocessable Entity: ");
        assert_eq!(
            detail(&rendered, "422 Unprocessable Entity: "),
            hooked,
            "{file}"
        );
        if detail(&simulated, "CRD refuses it: ") == hooked {
            same_words += 1;
        }
    }
    // spec.replica, spec.instances: what only the CRD checks.
    assert!(same_words >= 2, "only {same_words} in the CRD's words");
}

/// Issue 31 item 7, each example through `render`: a field the CRD does
/// not declare, what only the API server refuses (a CronJob's time zone),
/// a name customize must refuse as sync does, and a storage shrink below
/// the size the observed StatefulSet was made with (rendered with exit 0
/// before: the hook took it and reported `StorageResized` True).
#[test]
fn render_refuses_each_example_of_issue_31_item_7() {
    let tmp = tempfile::tempdir().unwrap();
    let render = |kind: &str, parent: &str, observed: Option<&str>| {
        let file = tmp.path().join("parent.yaml");
        std::fs::write(&file, parent).unwrap();
        let mut command = opshooks();
        command
            .args(["render", kind])
            .arg(&file)
            .args(["--seed", "1", "-o", "json"]);
        if let Some(objects) = observed {
            let seen = tmp.path().join("observed.json");
            std::fs::write(&seen, objects).unwrap();
            command.arg("--observed").arg(&seen);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stderr, out.stdout)
    };
    // A Backup with `destination` and `spec` fields added.
    let backup = |destination: &str, spec: &str| {
        format!(
            "apiVersion: opshooks.io/v1alpha1\nkind: Backup\nmetadata: {{name: b, namespace: default}}\nspec: {{schedule: \"@daily\", target: {{kind: StatefulSet, name: mydb}}, destination: {{s3Bucket: my-bucket{destination}}}{spec}}}\n"
        )
    };
    let database = std::fs::read_to_string(root().join("examples/database.yaml")).unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "webserver",
            "apiVersion: opshooks.io/v1alpha1\nkind: WebServer\nmetadata: {name: w, namespace: default}\nspec: {replicas: 1, imag: nginx}\n".into(),
            "spec.imag",
        ),
        (
            "database",
            database.replace("  size: large\n", "  size: large\n  instances: 5\n"),
            "spec.instances",
        ),
        ("backup", backup("", ", serviceAccountName: \"backup\\nwriter\""), "spec.serviceAccountName"),
        ("backup", backup(", credentialsSecret: \"a b\"", ""), "spec.destination.credentialsSecret"),
        ("backup", backup("", ", timeZone: Mars/Olympus"), "spec.timeZone"),
        ("backup", backup("", ", activeDeadlineSeconds: 0"), "spec.activeDeadlineSeconds"),
        ("backup", backup("", ", successfulJobsHistoryLimit: -1"), "spec.successfulJobsHistoryLimit"),
        ("backup", backup("", "").replace("name: mydb", "name: \"\""), "spec.target.name"),
        ("database", database.replace("name: orders", "name: Orders_DB"), "metadata.name"),
    ];
    for (kind, parent, field) in &cases {
        let (code, stderr, _) = render(kind, parent, None);
        assert_eq!(code, Some(1), "{field}: {stderr}");
        assert!(
            stderr.contains(&format!("422 Unprocessable Entity: {field}")),
            "{field}: {stderr}"
        );
    }
    // A shrink needs what was observed: the StatefulSet a first render
    // made (20Gi), then the spec at 10Gi.
    let (code, stderr, first) = render("database", &database, None);
    assert_eq!(code, Some(0), "{stderr}");
    let first: serde_json::Value = serde_json::from_slice(&first).unwrap();
    let statefulset = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "StatefulSet")
        .unwrap()
        .to_string();
    let shrunk = database.replace("size: 20Gi", "size: 10Gi");
    let (code, stderr, _) = render("database", &shrunk, Some(&statefulset));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "422 Unprocessable Entity: spec.storage.size: \"10Gi\" is smaller than \"20Gi\""
        ),
        "{stderr}"
    );
}

#[test]
fn openapi_and_manifests_commands_print_the_committed_files() {
    let out = opshooks().arg("openapi").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        out.stdout,
        std::fs::read(root().join("openapi.yaml")).unwrap()
    );

    let dir = tempfile::tempdir().unwrap();
    let out = opshooks()
        .args(["manifests", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    for entry in std::fs::read_dir(root().join("metacontroller")).unwrap() {
        let path = entry.unwrap().path();
        let written = std::fs::read(dir.path().join(path.file_name().unwrap())).unwrap();
        assert!(
            written == std::fs::read(&path).unwrap(),
            "{} differs from opshooks manifests",
            path.display()
        );
    }
}

#[tokio::test]
async fn shutdown_finishes_in_flight_calls_then_stops() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(
        listener,
        state(Limits::default()),
        async {
            let _ = stop_rx.await;
        },
        http::ServeOptions {
            grace: Duration::from_secs(5),
            ..http::ServeOptions::default()
        },
    ));
    // Open a call and send only half of its body, then ask for shutdown.
    let body =
        std::fs::read(root().join("tests/fixtures/webserver/v1-first-sync/request.json")).unwrap();
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /webserver/sync HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(head.as_bytes()).await.unwrap();
    let (first, rest) = body.split_at(body.len() / 2);
    stream.write_all(first).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop_tx.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // New connections are refused while the in-flight call goes on.
    assert!(tokio::net::TcpStream::connect(address).await.is_err());
    stream.write_all(rest).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server stops after draining")
        .unwrap()
        .unwrap();
}
