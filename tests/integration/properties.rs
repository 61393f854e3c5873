//! Properties over arbitrary specs and observed states: exact pod counts
//! with valid unique names, determinism, and no input that panics.

use opshooks::call::call_slice;
use std::collections::{BTreeMap, BTreeSet};

use opshooks::fixtures::{self, request};
use opshooks::hook::Hook;
use opshooks::operator::Operator;
use opshooks::operators;
use opshooks::operators::validate::is_dns_label;
use proptest::prelude::*;
use serde_json::{Value, json};

use opshooks::operators::schema::PartSchema;

use super::support::{ctx, operator};

fn webserver() -> Operator {
    operators::all()
        .into_iter()
        .find(|op| op.name == "webserver")
        .unwrap()
}

fn observed_pod(name: &str, index: u32, phase: &str, ready: bool) -> fixtures::Object {
    fixtures::pod(&format!("{name}-{index}"))
        .namespace("ns")
        .phase(phase)
        .ready_if(ready)
}

fn phase() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["Pending", "Running", "Succeeded", "Failed", "Unknown"])
}

prop_compose! {
    fn observed_state()(
        name in "[a-z]([a-z0-9-]{0,57}[a-z0-9])?",
        replicas in 0i64..=1000,
        pods in prop::collection::btree_map(0u32..1100, (phase(), any::<bool>()), 0..40),
        v2 in any::<bool>(),
    ) -> (String, i64, BTreeMap<u32, (&'static str, bool)>, bool) {
        (name, replicas, pods, v2)
    }
}

fn webserver_request(
    name: &str,
    replicas: i64,
    pods: &BTreeMap<u32, (&'static str, bool)>,
    v2: bool,
) -> Value {
    let parent = fixtures::webserver(name)
        .namespace("ns")
        .generation(1)
        .spec("replicas", replicas);
    let empty = request(parent).namespaced_keys(v2).child_group("Pod.v1");
    pods.iter()
        .fold(empty, |request, (index, (phase, ready))| {
            request.child(observed_pod(name, *index, phase, *ready))
        })
        .json()
}

proptest! {
    #![proptest_config(super::support::proptest_config(64))]

    #[test]
    fn answer_has_exactly_replicas_pods_with_valid_unique_names_but_ended_ones((name, replicas, pods, v2) in observed_state()) {
        let op = webserver();
        let body = webserver_request(&name, replicas, &pods, v2).to_string();
        let call = call_slice(&op, Hook::Sync, body.as_bytes(), &ctx()).unwrap();
        let answer = call.result.expect("valid specs are answered");
        let again = call_slice(&op, Hook::Sync, body.as_bytes(), &ctx()).unwrap().result.unwrap();
        prop_assert_eq!(&answer.body, &again.body, "same input, same bytes");

        let response: Value = serde_json::from_slice(&answer.body).unwrap();
        let children = response["children"].as_array().unwrap();
        let names: BTreeSet<String> = children
            .iter()
            .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        prop_assert_eq!(names.len(), children.len(), "names are unique");
        // Pods that ran to an end (Failed, Succeeded) are left out, so they
        // are deleted and created anew; every other index is answered.
        let ended = |i: &u32| pods.get(i).is_some_and(|(phase, _)| matches!(*phase, "Failed" | "Succeeded"));
        let want: BTreeSet<String> = (0..replicas as u32).filter(|i| !ended(i)).map(|i| format!("{name}-{i}")).collect();
        prop_assert_eq!(&names, &want, "scaling keeps the lowest indices");
        for n in &names {
            prop_assert!(is_dns_label(n), "{} is not a DNS-1123 label", n);
        }
        for child in children {
            prop_assert_eq!(child["kind"].as_str(), Some("Pod"));
            prop_assert_eq!(child["metadata"]["labels"]["app.kubernetes.io/instance"].as_str(), Some(name.as_str()));
        }

        let counted = pods.values().filter(|(phase, _)| matches!(*phase, "Running" | "Pending")).count();
        let ready = pods.values().filter(|(_, ready)| *ready).count();
        prop_assert_eq!(response["status"]["count"].as_u64(), Some(counted as u64));
        prop_assert_eq!(response["status"]["readyReplicas"].as_u64(), Some(ready as u64));
        let all_ready = (0..replicas as u32).all(|i| pods.get(&i).is_some_and(|(_, r)| *r));
        prop_assert_eq!(
            response["status"]["conditions"][0]["status"].as_str(),
            Some(if all_ready { "True" } else { "False" })
        );
    }

    #[test]
    fn any_json_parent_is_answered_or_refused_never_a_panic(spec in arbitrary_json(), name in any::<Option<String>>()) {
        let op = webserver();
        // Any name, or none at all.
        let parent = fixtures::webserver("").set("/metadata/name", json!(name)).set("/spec", spec.clone());
        let body = request(parent).child_group("Pod.v1").json().to_string();
        let call = call_slice(&op, Hook::Sync, body.as_bytes(), &ctx()).unwrap();
        if let Ok(answer) = call.result {
            let response: Value = serde_json::from_slice(&answer.body).unwrap();
            let replicas = spec["replicas"].as_i64().unwrap();
            prop_assert_eq!(response["children"].as_array().unwrap().len() as i64, replicas);
        }
    }

    /// Every operator, with specs of its own fields (plausible values or
    /// anything at all): refused, or answered with well-formed children,
    /// the same bytes twice.
    #[test]
    fn any_parent_of_each_operator_is_refused_or_answered_well((name, spec) in any_operator_spec()) {
        let op = operator(name);
        let body = parent_request(&op, &spec).to_string();
        let call = call_slice(&op, Hook::Sync, body.as_bytes(), &ctx()).unwrap();
        if let Ok(answer) = call.result {
            let again = call_slice(&op, Hook::Sync, body.as_bytes(), &ctx()).unwrap().result.unwrap();
            prop_assert_eq!(&answer.body, &again.body, "same input, same bytes");
            let response: Value = serde_json::from_slice(&answer.body).unwrap();
            for child in response["children"].as_array().unwrap() {
                prop_assert!(child["apiVersion"].is_string() && child["kind"].is_string(), "{}", child);
                let child_name = child["metadata"]["name"].as_str().unwrap_or_default();
                prop_assert!(is_dns_label(child_name) || child_name.contains('.'), "{} is not a valid name", child_name);
            }
        }
    }

    #[test]
    fn any_bytes_are_refused_without_a_panic(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let call = call_slice(&webserver(), Hook::Sync, &body, &ctx()).unwrap();
        // Random bytes are almost never a valid request; when they are, fine.
        if let Err(err) = call.result {
            prop_assert!(!err.to_string().is_empty());
        }
    }
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-5i64..1100).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec!["replicas", "image", "port", "x"]).prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    // Often a plausible spec, sometimes anything at all.
    prop_oneof![
        (
            -5i64..1100,
            prop::option::of(".{0,12}"),
            prop::option::of(-2i64..70000)
        )
            .prop_map(|(r, image, port)| {
                let mut spec = json!({"replicas": r});
                if let Some(image) = image {
                    spec["image"] = image.into();
                }
                if let Some(port) = port {
                    spec["port"] = port.into();
                }
                spec
            }),
        value,
    ]
}

/// A sync request for `spec` with nothing observed.
fn parent_request(op: &Operator, spec: &Value) -> Value {
    // As the API server stores it and Metacontroller sends it: with a uid.
    let parent = fixtures::parent(&op.kind, "p")
        .namespace("ns")
        .uid("p-uid")
        .generation(1)
        .set("/spec", spec.clone());
    request(parent).every_group(op.name).json()
}

/// A field's value: often one of the plausible ones, sometimes anything.
fn field(plausible: Vec<Value>) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-5i64..1100).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    prop_oneof![39 => prop::sample::select(plausible), 1 => leaf].boxed()
}

/// An object of some of `fields`.
fn object_of(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let picks: Vec<_> = fields
        .into_iter()
        .map(|(key, value)| prop::option::weighted(0.97, value).prop_map(move |v| (key, v)))
        .collect();
    picks
        .prop_map(|pairs| {
            Value::Object(
                pairs
                    .into_iter()
                    .filter_map(|(k, v)| Some((k.to_string(), v?)))
                    .collect(),
            )
        })
        .boxed()
}

fn strings(values: &[&str]) -> Vec<Value> {
    values.iter().map(|v| json!(v)).collect()
}

/// Each operator's own spec fields, so every operator's answered branch
/// runs (issue 18: only WebServer-shaped specs were generated).
fn any_operator_spec() -> impl Strategy<Value = (&'static str, Value)> {
    let numbers = |values: &[i64]| values.iter().map(|v| json!(v)).collect::<Vec<_>>();
    // Plausible values, mostly valid: the last of each list is not.
    let webserver = object_of(vec![
        ("replicas", field(numbers(&[0, 1, 2, 3, 5, 9, 1000, 1001]))),
        (
            "image",
            field(strings(&[
                "nginx:1.27",
                "nginx",
                "registry.example/web@sha256:00",
            ])),
        ),
        (
            "port",
            field(numbers(&[80, 8080, 443, 1, 65535, 8443, 65536])),
        ),
    ]);
    let memcached = object_of(vec![
        ("size", field(numbers(&[0, 1, 2, 3, 5, 9, 1000, -1]))),
        (
            "containerPort",
            field(numbers(&[11211, 11212, 1, 65535, 0])),
        ),
        (
            "image",
            field(strings(&[
                "memcached:1.6.38",
                "memcached:1.6",
                "mirror.example/mc:1",
            ])),
        ),
        (
            "memoryLimit",
            field(strings(&["64Mi", "1Gi", "512Mi", "32Mi", "2Gi", "lots"])),
        ),
    ]);
    let buckets = [
        "backups",
        "orders-backups",
        "my.bucket",
        "b-2",
        "b-3",
        "b-4",
        "Not_A",
    ];
    let destination = object_of(vec![
        ("s3Bucket", field(strings(&buckets))),
        ("s3Prefix", field(strings(&["nightly/", "db/orders/", ""]))),
        (
            "credentialsSecret",
            field(strings(&["s3-creds", "aws", "creds"])),
        ),
    ]);
    let schedules = [
        "0 2 * * *",
        "@daily",
        "*/15 * * * *",
        "30 3 * * 1-5",
        "@hourly",
        "0 0 1 * *",
        "61 * * * *",
    ];
    let targets: Vec<Value> = ["db", "pg", "a", "b", "c", "d"]
        .iter()
        .map(|name| json!({"kind": "StatefulSet", "name": name}))
        .chain([json!({"kind": "Deployment", "name": "db"})])
        .collect();
    let backup = object_of(vec![
        ("schedule", field(strings(&schedules))),
        ("target", field(targets)),
        ("destination", destination.clone()),
        ("retentionDays", field(numbers(&[7, 30, 1, 365, 90, 14, 0]))),
        ("suspend", field(vec![json!(true), json!(false)])),
    ]);
    let sizes = ["1Gi", "20Gi", "500Mi", "2Gi", "5Gi", "1Ti", "x"];
    let backups = json!({"s3Bucket": "backups"});
    let database = object_of(vec![
        (
            "version",
            field(strings(&["14", "15", "16", "17", "18", "15", "13"])),
        ),
        (
            "size",
            field(strings(&[
                "small", "medium", "large", "small", "medium", "huge",
            ])),
        ),
        (
            "storage",
            field(sizes.iter().map(|size| json!({"size": size})).collect()),
        ),
        (
            "deletionPolicy",
            field(strings(&[
                "Retain", "Delete", "Snapshot", "Delete", "Other",
            ])),
        ),
        (
            "backup",
            field(vec![
                json!({"destination": backups}),
                json!({"enabled": true, "schedule": "0 2 * * *", "destination": backups}),
                json!({"enabled": true, "destination": backups}),
                json!({"destination": backups, "archive": {}}),
                json!({"destination": backups, "archive": {"timeoutSeconds": 4, "image": "a b"}}),
                json!({"destination": backups, "archive": {"baseBackupSchedule": "0 3 * * *",
                    "verifySchedule": "0 5 * * 0", "retentionDays": 14}}),
            ]),
        ),
        (
            "databaseName",
            field(strings(&["app", "orders", "a", "b", "c", &"x".repeat(64)])),
        ),
        ("user", field(strings(&["app", "orders", "svc"]))),
    ]);
    prop_oneof![
        webserver.prop_map(|s| ("webserver", s)),
        memcached.prop_map(|s| ("memcached", s)),
        backup.prop_map(|s| ("backup", s)),
        database.prop_map(|s| ("database", s)),
    ]
}

/// Each operator's generated specs are answered often enough for the
/// property above to test its answers, not only its refusals.
#[test]
fn each_operators_generated_specs_are_often_answered() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut counts: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for _ in 0..1024 {
        let (name, spec) = any_operator_spec().new_tree(&mut runner).unwrap().current();
        let op = operator(name);
        let body = parent_request(&op, &spec).to_string();
        let answered = call_slice(&op, Hook::Sync, body.as_bytes(), &ctx())
            .unwrap()
            .result
            .is_ok();
        let entry = counts.entry(name).or_default();
        if answered {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }
    eprintln!("answered, refused: {counts:?}");
    for (name, (answered, refused)) in counts {
        assert!(
            answered * 5 >= answered + refused,
            "{name}: {answered} of {} answered",
            answered + refused
        );
    }
}

fn kinds(response: &Value) -> Vec<(String, String)> {
    response["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

prop_compose! {
    fn memcached_state()(
        size in 0i64..=1000,
        port in 1i64..=65535,
        memory in prop::option::of(32u32..4096),
        pods in prop::collection::btree_map("[a-z0-9]{5}", (any::<bool>(), any::<bool>()), 0..20),
        v2 in any::<bool>(),
    ) -> Value {
        let mut parent = fixtures::memcached("cache").namespace("ns").spec("size", size).spec("containerPort", port);
        if let Some(mib) = memory { parent = parent.spec("memoryLimit", format!("{mib}Mi")); }
        let empty = request(parent).namespaced_keys(v2)
            .child_group("Deployment.apps/v1").child_group("Service.v1").related_group("Pod.v1");
        pods.iter().fold(empty, |request, (suffix, (ready, deleting))| {
            let pod = fixtures::pod(&format!("cache-{suffix}")).namespace("ns").ready_if(*ready);
            request.related(if *deleting { pod.deleting() } else { pod })
        }).json()
    }
}

prop_compose! {
    fn backup_state()(
        minute in 0u32..60, hour in 0u32..24,
        target in prop::sample::select(vec!["present", "missing", "literal-password"]),
        cron_observed in any::<bool>(),
        suspend in any::<bool>(),
        jobs in prop::collection::vec((0u32..1000, prop::sample::select(vec!["Complete", "Failed", "Running"])), 0..6),
    ) -> (Value, bool, bool) {
        let password = if target == "literal-password" {
            json!({"name": "POSTGRES_PASSWORD", "value": "x"})
        } else {
            json!({"name": "POSTGRES_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}})
        };
        let sts = fixtures::statefulset("db").namespace("ns").set("/spec/serviceName", json!("db"))
            .containers(json!([{"name": "pg", "image": "postgres:16", "env": [password]}]));
        let source = json!({"host": "db.ns.svc", "port": 5432, "database": "postgres", "user": {"value": "postgres"},
            "password": {"secret": {"name": "db", "key": "password"}}, "image": "postgres:16"});
        let cron = fixtures::object("batch/v1", "CronJob", "b-backup").namespace("ns")
            .annotation("opshooks.io/backup-source", &source.to_string())
            .set("/spec", json!({"schedule": "0 1 * * *", "jobTemplate": {}}));
        let parent = fixtures::backup("b").namespace("ns")
            .spec("schedule", format!("{minute} {hour} * * *"))
            .spec("target", json!({"kind": "StatefulSet", "name": "db"}))
            .spec("destination", json!({"s3Bucket": "bucket"}))
            .spec("suspend", suspend);
        let mut request = request(parent).every_group("backup");
        if cron_observed { request = request.child(cron); }
        if target != "missing" { request = request.related(sts); }
        for (i, (t, state)) in jobs.iter().enumerate() {
            let job = fixtures::job(&format!("b-backup-{i}")).namespace("ns")
                .created(&format!("2026-01-01T{:02}:00:00Z", t % 24)).finished(state);
            request = request.related(if *state == "Running" { job } else {
                job.set("/status/completionTime", json!(format!("2026-01-01T00:{:02}:00Z", t % 60)))
            });
        }
        (request.json(), target == "present", cron_observed)
    }
}

proptest! {
    #![proptest_config(super::support::proptest_config(64))]

    #[test]
    fn memcached_always_keeps_its_deployment_and_service(request in memcached_state()) {
        let op = operator("memcached");
        let body = request.to_string();
        let answer = call_slice(&op, Hook::Sync, body.as_bytes(), &ctx()).unwrap().result.expect("valid specs are answered");
        let again = call_slice(&op, Hook::Sync, body.as_bytes(), &ctx()).unwrap().result.unwrap();
        prop_assert_eq!(&answer.body, &again.body);
        let response: Value = serde_json::from_slice(&answer.body).unwrap();
        prop_assert_eq!(kinds(&response), vec![("Deployment".to_string(), "cache".to_string()), ("Service".to_string(), "cache".to_string())]);
        prop_assert_eq!(&response["children"][0]["spec"]["replicas"], &request["parent"]["spec"]["size"]);
        let nodes: Vec<&str> = response["status"]["nodes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        let mut sorted = nodes.clone();
        sorted.sort();
        prop_assert_eq!(nodes, sorted);
    }

    #[test]
    fn backup_never_has_two_cronjobs_and_never_drops_an_observed_one((request, target_usable, cron_observed) in backup_state()) {
        let op = operator("backup");
        let answer = call_slice(&op, Hook::Sync, request.to_string().as_bytes(), &ctx()).unwrap().result.expect("valid specs are answered");
        let response: Value = serde_json::from_slice(&answer.body).unwrap();
        let children = kinds(&response);
        prop_assert!(children.len() <= 1, "{:?}", children);
        if cron_observed || target_usable {
            prop_assert_eq!(children, vec![("CronJob".to_string(), "b-backup".to_string())]);
            let suspended = response["children"][0]["spec"]["suspend"].as_bool().unwrap();
            let want = !target_usable || request["parent"]["spec"]["suspend"].as_bool().unwrap();
            prop_assert_eq!(suspended, want, "suspended exactly when the target is unusable or spec.suspend");
            prop_assert_eq!(response["children"][0]["spec"]["concurrencyPolicy"].as_str(), Some("Forbid"));
        } else {
            prop_assert!(children.is_empty());
        }
    }

    /// Any parent is answered or refused, never a panic; an answer is one
    /// Metacontroller and the API server accept: whole children and a status
    /// the CRD's schema takes.
    #[test]
    fn any_parent_is_refused_or_answered_acceptably(spec in arbitrary_json(), which in 0usize..4, hook in prop::sample::select(Hook::ALL.to_vec())) {
        let op = &operators::all()[which];
        let parent = fixtures::object(op.api_version(), &op.kind, "x").namespace("ns").set("/spec", spec);
        // With the groups Metacontroller always sends: a body without them
        // is refused (400) before the spec is read.
        let body = request(parent).json().to_string();
        let Some(call) = call_slice(op, hook, body.as_bytes(), &ctx()) else {
            return Ok(());
        };
        if let Err(err) = &call.result {
            let text = err.to_string();
            prop_assert!(!text.contains("`children`") && !text.contains("`related`"), "{}", text);
        }
        if let Ok(answer) = call.result {
            let response: Value = serde_json::from_slice(&answer.body).unwrap();
            if hook == Hook::Customize {
                prop_assert!(response["relatedResources"].is_array());
            } else {
                for child in response["children"].as_array().unwrap() {
                    prop_assert!(child["apiVersion"].is_string() && child["kind"].is_string(), "{}", child);
                    prop_assert!(child["metadata"]["name"].as_str().is_some_and(|n| !n.is_empty()), "{}", child);
                }
                let errors = PartSchema::status(op).errors(&response["status"]);
                prop_assert!(errors.is_empty(), "{:?}", errors);
            }
        }
    }
}

prop_compose! {
    fn database_state()(
        desired in 14u32..=18,
        running in prop::option::of(14u32..=18),
        size in prop::sample::select(vec!["small", "medium", "large"]),
        policy in prop::sample::select(vec!["Snapshot", "Retain", "Delete"]),
        has_backup in any::<bool>(),
        when_deleted in prop::sample::select(vec!["Retain", "Delete"]),
        sts_synced in any::<bool>(),
        jobs in prop::collection::btree_map(
            prop::sample::select(vec!["init", "pre-upgrade", "upgrade", "snapshot", "older-upgrade"]),
            prop::sample::select(vec!["Complete", "Failed", "Running"]),
            0..4,
        ),
        secret_data in prop::option::of("[a-zA-Z0-9]{1,30}"),
        pods in prop::collection::btree_map(0u32..4, any::<bool>(), 0..4),
        volumes in prop::collection::vec(any::<bool>(), 0..4),
        finalizing in any::<bool>(),
        extras in database_extras(),
    ) -> (Value, bool) {
        let name = "db";
        let job_name = |kind: &str| match kind {
            "init" => "db-init".to_string(),
            "snapshot" => "db-snapshot".to_string(),
            // A Job of an upgrade the spec moved past: no builder makes it.
            "older-upgrade" => "db-upgrade-13".to_string(),
            other => format!("db-{other}-{desired}"),
        };
        let mut parent = fixtures::database(name).namespace("ns").generation(1)
            .spec("version", desired.to_string()).spec("size", size).spec("storage/size", "1Gi").spec("deletionPolicy", policy);
        if has_backup {
            parent = parent.spec("backup", json!({"enabled": true, "schedule": "0 2 * * *", "destination": {"s3Bucket": "bucket"}}));
        }
        for (field, value) in extras {
            // Synchronous replication needs a standby: `small` refuses it.
            if field == "replication" && size == "small" {
                continue;
            }
            // The image of the spec's major, as the property reads images.
            let value = match field {
                "imageName" => json!(format!("postgres:{desired}")),
                _ => value,
            };
            parent = parent.spec(field, value);
        }
        let mut request = request(parent).every_group("database");
        if let Some(running) = running {
            request = request.child(fixtures::statefulset(name).namespace("ns").uid("sts-uid").generation(2)
                .annotation("opshooks.io/postgres-version", &running.to_string())
                .when_deleted(when_deleted)
                .status(json!({"replicas": 1, "observedGeneration": if sts_synced { 2 } else { 1 }})));
        }
        for (kind, state) in &jobs {
            request = request.child(fixtures::job(&job_name(kind)).namespace("ns").finished(state));
        }
        if let Some(data) = &secret_data {
            let b64 = |s: &str| base64_encode(s.as_bytes());
            let secret = |name: &str, data: Value| fixtures::object("v1", "Secret", name).namespace("ns").set("/data", data);
            request = request
                .child(secret("db-superuser", json!({"password": b64(data), "replication-password": b64(&format!("r{data}"))})))
                .child(secret("db-credentials", json!({"username": b64("db"), "password": b64(&format!("a{data}"))})));
        }
        for (i, ready) in &pods {
            request = request.related(fixtures::pod(&format!("db-{i}")).namespace("ns")
                .label("app.kubernetes.io/name", "postgresql").ip(&format!("10.0.0.{i}")).ready_if(*ready));
        }
        // Each volume held by the StatefulSet (an owner reference to its
        // uid) or not, as its controller left it.
        for (i, held) in volumes.iter().enumerate() {
            let claim = fixtures::object("v1", "PersistentVolumeClaim", &format!("data-db-{i}")).namespace("ns");
            request = request.related(if *held {
                claim.set("/metadata/ownerReferences", json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": "sts-uid"}]))
            } else { claim });
        }
        (request.json(), finalizing)
    }
}

/// Every optional Database field, each present or not with a valid value,
/// so the properties see the spec users write, not only the fields the
/// first operator had.
fn database_extras() -> impl Strategy<Value = Vec<(&'static str, Value)>> {
    let fields: Vec<(&'static str, Value)> = vec![
        ("replication", json!("synchronous")),
        ("failover", json!({"delay": 10, "maxStandbyLag": "16Mi"})),
        ("tls", json!({"secretName": "db-tls"})),
        ("monitoring", json!({"enabled": true})),
        (
            "postgresql",
            json!({"parameters": {"work_mem": "8MB", "max_connections": "200"}, "pgHba": ["host all all 10.0.0.0/8 scram-sha-256"]}),
        ),
        ("credentialsSecret", json!("app-credentials")),
        ("databaseName", json!("shop")),
        ("user", json!("shopper")),
        ("imageName", Value::Null),
        ("imagePullSecrets", json!([{"name": "registry"}])),
        ("enablePDB", json!(false)),
        (
            "resources",
            json!({"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}),
        ),
        (
            "topologySpreadConstraints",
            json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}]),
        ),
    ];
    prop::sample::subsequence(fields.clone(), 0..=fields.len())
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn observed<'a>(request: &'a Value, group: &str, name: &str) -> Option<&'a Value> {
    request["children"].get(group)?.get(name)
}

fn job_succeeded(request: &Value, name: &str) -> bool {
    observed(request, "Job.batch/v1", name)
        .is_some_and(|j| j["status"]["conditions"][0]["type"] == "Complete")
}

proptest! {
    #![proptest_config(super::support::proptest_config(256))]

    /// The data-safety invariants of the Database operator, over arbitrary
    /// observed states and spec changes.
    #[test]
    fn database_never_loses_data((request, finalizing) in database_state()) {
        let op = operator("database");
        let hook = if finalizing { Hook::Finalize } else { Hook::Sync };
        let body = request.to_string();
        let call = call_slice(&op, hook, body.as_bytes(), &ctx()).unwrap();
        let Ok(answer) = call.result else { return Ok(()) };
        let again = call_slice(&op, hook, body.as_bytes(), &ctx()).unwrap().result.unwrap();
        prop_assert_eq!(&answer.body, &again.body, "same input, same bytes");
        let response: Value = serde_json::from_slice(&answer.body).unwrap();
        let children = response["children"].as_array().unwrap();
        let find = |kind: &str, name: &str| children.iter().find(|c| c["kind"] == kind && c["metadata"]["name"] == name);
        let policy = request["parent"]["spec"]["deletionPolicy"].as_str().unwrap();
        let snapshot_done = job_succeeded(&request, "db-snapshot");
        let may_delete_volumes = finalizing && (policy == "Delete" || (policy == "Snapshot" && snapshot_done));

        // 1. Generated Secrets never change once observed.
        for secret in ["db-superuser", "db-credentials"] {
            if let Some(seen) = observed(&request, "Secret.v1", secret) {
                let answered = find("Secret", secret);
                prop_assert!(answered.is_some(), "{} dropped", secret);
                prop_assert_eq!(&answered.unwrap()["data"], &seen["data"], "{} changed", secret);
            }
        }
        // 2. Volumes may be deleted only when finalizing under Delete, or
        //    under Snapshot after the snapshot succeeded, whatever the
        //    observed StatefulSet says (anyone can edit it).
        let sts = find("StatefulSet", "db");
        if let Some(sts) = sts {
            let when_deleted = &sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"];
            prop_assert!(when_deleted == "Retain" || may_delete_volumes, "volumes released: {}", when_deleted);
        }
        // 3. An observed StatefulSet is dropped only when finalizing, under
        //    Snapshot only after the snapshot succeeded, and only once every
        //    volume is as deleting it needs: held by it when the volumes go
        //    with it, held by nothing when they stay.
        let volumes = request["related"]["PersistentVolumeClaim.v1"].as_object().unwrap();
        if observed(&request, "StatefulSet.apps/v1", "db").is_some() && sts.is_none() {
            prop_assert!(finalizing && (policy != "Snapshot" || snapshot_done), "StatefulSet dropped");
            for (name, claim) in volumes {
                let held = claim["metadata"].get("ownerReferences").is_some();
                prop_assert_eq!(held, may_delete_volumes, "StatefulSet dropped while {} is held: {}", name, held);
            }
        }
        // 4. finalized only when no StatefulSet is observed, and no volume
        //    unless the volumes are retained.
        if response["finalized"] == true {
            prop_assert!(observed(&request, "StatefulSet.apps/v1", "db").is_none());
            prop_assert!(policy == "Retain" || volumes.is_empty(), "finalized with volumes left");
        }
        // 5. The image moves to a new major only after the upgrade Job succeeded.
        if let (Some(sts), Some(seen)) = (sts, observed(&request, "StatefulSet.apps/v1", "db")) {
            let running = seen["metadata"]["annotations"]["opshooks.io/postgres-version"].as_str().unwrap();
            let image = sts["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap();
            if image != format!("postgres:{running}") {
                let to = image.trim_start_matches("postgres:");
                prop_assert!(job_succeeded(&request, &format!("db-upgrade-{to}")), "moved to {} before its upgrade Job succeeded", image);
            }
        }
        // 6. Deletion only moves forward: a StatefulSet that is gone is
        //    never created again (it would bring new, empty volumes).
        if finalizing && observed(&request, "StatefulSet.apps/v1", "db").is_none() {
            prop_assert!(sts.is_none(), "StatefulSet created again while deleting");
        }
        // 7. While deleting, every observed Job stays, built by the
        //    operator or not (an older upgrade's), and the only Job that
        //    can be created is the snapshot, and only while the StatefulSet
        //    is there to be read.
        if finalizing {
            let seen_jobs = request["children"]["Job.batch/v1"].as_object().cloned().unwrap_or_default();
            for name in seen_jobs.keys() {
                prop_assert!(find("Job", name).is_some(), "observed Job {} dropped while deleting", name);
            }
            for child in children {
                let (kind, name) = (child["kind"].as_str().unwrap(), child["metadata"]["name"].as_str().unwrap());
                let group = format!("{kind}.{}", child["apiVersion"].as_str().unwrap());
                let was_observed = observed(&request, &group, name).is_some();
                prop_assert!(was_observed || (kind == "Job" && name == "db-snapshot"), "{} {} created while deleting", kind, name);
            }
            for job in children.iter().filter(|c| c["kind"] == "Job") {
                let name = job["metadata"]["name"].as_str().unwrap();
                if !seen_jobs.contains_key(name) {
                    prop_assert_eq!(name, "db-snapshot", "Job created while deleting");
                    prop_assert!(observed(&request, "StatefulSet.apps/v1", "db").is_some(), "snapshot of a StatefulSet that is gone");
                }
            }
        }
    }
}

/// The Database property skips states the operator refuses (downgrades,
/// mostly); they must stay a minority, or the property would test little.
#[test]
fn database_property_states_are_mostly_answered() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let op = operator("database");
    let (mut answered, mut refused) = (0u32, 0u32);
    for _ in 0..512 {
        let (request, finalizing) = database_state().new_tree(&mut runner).unwrap().current();
        let hook = if finalizing {
            Hook::Finalize
        } else {
            Hook::Sync
        };
        match call_slice(&op, hook, request.to_string().as_bytes(), &ctx())
            .unwrap()
            .result
        {
            Ok(_) => answered += 1,
            Err(_) => refused += 1,
        }
    }
    eprintln!(
        "database property: {refused} of {} generated states refused",
        answered + refused
    );
    assert!(
        refused * 2 < answered,
        "{refused} of {} generated states refused",
        answered + refused
    );
}
