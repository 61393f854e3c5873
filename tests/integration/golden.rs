//! Golden fixtures: realistic Metacontroller requests replayed through the
//! same code path as the server, compared with the committed answers.
//! `OPSHOOKS_BLESS=1 cargo test` rewrites the answers on purpose.

use opshooks::call::call_slice;
use opshooks::hook::Hook;
use opshooks::http::Problem;
use opshooks::operators;
use opshooks::operators::schema::PartSchema;
use serde_json::Value;

use super::support::{assert_matches_file, cases, ctx};

fn pretty(body: &[u8]) -> String {
    let value: Value = serde_json::from_slice(body).unwrap();
    serde_json::to_string_pretty(&value).unwrap() + "\n"
}

/// Replays every case of every operator; a case folder holds request.json
/// and either response.json (a 200) or problem.json (a refusal).
#[test]
fn fixtures_replay_to_their_committed_answers() {
    let mut replayed = 0;
    for op in operators::all() {
        for case in cases(op.name) {
            let hook = hook_of(&case);
            let request = std::fs::read(case.join("request.json")).unwrap();
            let call = call_slice(&op, hook, &request, &ctx()).expect("hook exists");
            match call.result {
                Ok(answer) => {
                    assert!(
                        !case.join("problem.json").exists(),
                        "{}: expected a refusal",
                        case.display()
                    );
                    if hook != Hook::Customize {
                        check_shape(&op, &case, &answer.body);
                    }
                    assert_matches_file(&case.join("response.json"), &pretty(&answer.body));
                }
                Err(err) => {
                    assert!(
                        !case.join("response.json").exists(),
                        "{}: unexpected refusal: {err}",
                        case.display()
                    );
                    let problem = serde_json::to_vec(&Problem::from_hook_error(&err)).unwrap();
                    assert_matches_file(&case.join("problem.json"), &pretty(&problem));
                }
            }
            replayed += 1;
        }
    }
    // Every folder under tests/fixtures is a case of a known operator, and
    // every case was replayed: a misnamed folder or file cannot hide.
    let on_disk: usize = std::fs::read_dir(super::support::root().join("tests/fixtures"))
        .unwrap()
        .map(|operator| {
            let operator = operator.unwrap().path();
            let name = operator.file_name().unwrap().to_str().unwrap().to_string();
            assert!(
                operators::all().iter().any(|op| op.name == name),
                "{}: not an operator",
                operator.display()
            );
            std::fs::read_dir(&operator).unwrap().count()
        })
        .sum();
    assert_eq!(
        replayed, on_disk,
        "every case folder has a request.json and was replayed"
    );
}

/// The hook a case folder is for: the first word of its name that names
/// one (`finalize-retain`), `sync` otherwise.
fn hook_of(case: &std::path::Path) -> Hook {
    case.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('-').find_map(Hook::parse))
        .unwrap_or(Hook::Sync)
}

/// Issue 31: a group missing from `children` or `related` was read as
/// empty, so `finalize` under `Retain` answered `finalized: true` while a
/// claim existed. Every group of every answered sync and finalize case,
/// dropped in turn, gets a 409 naming it.
#[test]
fn regression_every_missing_group_of_every_hook_is_refused_naming_it() {
    let mut dropped = 0;
    for op in operators::all() {
        for case in cases(op.name) {
            let hook = hook_of(&case);
            if hook == Hook::Customize || !case.join("response.json").exists() {
                continue;
            }
            let request: Value =
                serde_json::from_slice(&std::fs::read(case.join("request.json")).unwrap()).unwrap();
            for side in ["children", "related"] {
                for group in request[side].as_object().unwrap().keys() {
                    let mut without = request.clone();
                    without[side].as_object_mut().unwrap().remove(group);
                    let call = call_slice(&op, hook, without.to_string().as_bytes(), &ctx())
                        .expect("hook exists");
                    // A type only the chart declares (cert-manager's): its
                    // absence is how the controller is installed, not a
                    // stale answer, so only a spec that needs it is refused.
                    if group == "Certificate.cert-manager.io/v1" {
                        let needed = !request["parent"]["spec"]["tls"]["issuerRef"].is_null();
                        match call.result {
                            Ok(_) => assert!(!needed, "{}: answered 200", case.display()),
                            Err(err) => {
                                let problem = Problem::from_hook_error(&err);
                                assert!(needed, "{}: {problem:?}", case.display());
                                assert_eq!(problem.status, 422, "{}: {problem:?}", case.display());
                                assert!(problem.detail.contains(group), "{}", problem.detail);
                            }
                        }
                        dropped += 1;
                        continue;
                    }
                    // The Prometheus Operator's PodMonitor, also the chart's
                    // to declare: a monitoring setting never blocks a sync
                    // (a failover), so its absence is said in a condition.
                    if group == "PodMonitor.monitoring.coreos.com/v1" {
                        let answer = call.result.unwrap_or_else(|err| {
                            panic!("{}: without {group}: {err:?}", case.display())
                        });
                        let text = String::from_utf8(answer.body).unwrap();
                        assert!(
                            !text.contains("\"kind\":\"PodMonitor\""),
                            "{}",
                            case.display()
                        );
                        // Said when asked for, unless a failed role Job says more.
                        let monitoring = &request["parent"]["spec"]["monitoring"];
                        let asked =
                            monitoring["enabled"] == true && monitoring["podMonitor"] == true;
                        assert!(
                            !asked
                                || text.contains("PodMonitorUnavailable")
                                || text.contains("RoleFailed"),
                            "{}",
                            case.display()
                        );
                        dropped += 1;
                        continue;
                    }
                    let problem = match call.result {
                        Ok(_) => panic!("{}: {side} without {group} answered 200", case.display()),
                        Err(err) => Problem::from_hook_error(&err),
                    };
                    assert_eq!(problem.status, 409, "{}: {problem:?}", case.display());
                    assert!(
                        problem
                            .detail
                            .starts_with(&format!("observed group {group} is missing")),
                        "{}: {side} without {group}: {}",
                        case.display(),
                        problem.detail
                    );
                    dropped += 1;
                }
            }
        }
    }
    assert!(dropped > 1000, "only {dropped} groups dropped");
}

/// Both hook versions of the same observed state give the same answer.
#[test]
fn hook_versions_do_not_change_the_answer() {
    let op = operators::all()
        .into_iter()
        .find(|op| op.name == "webserver")
        .unwrap();
    let case = |name: &str| {
        std::fs::read(
            super::support::root()
                .join("tests/fixtures/webserver")
                .join(name)
                .join("request.json"),
        )
        .unwrap()
    };
    let v1: Value = serde_json::from_slice(&case("v1-all-ready")).unwrap();
    let mut v2 = v1.clone();
    let pods = v2["children"]["Pod.v1"].as_object().unwrap().clone();
    v2["children"]["Pod.v1"] = pods
        .into_iter()
        .map(|(name, pod)| (format!("shop/{name}"), pod))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let answer = |v: &Value| {
        call_slice(&op, Hook::Sync, v.to_string().as_bytes(), &ctx())
            .unwrap()
            .result
            .unwrap()
            .body
    };
    assert_ne!(v1, v2);
    assert_eq!(answer(&v1), answer(&v2));
}

/// What Metacontroller's strict decoder and the API server demand of an
/// answer: only the known fields, whole children, and a status that the
/// CRD's status schema accepts with exactly its types.
fn check_shape(op: &opshooks::operator::Operator, case: &std::path::Path, body: &[u8]) {
    let answer: Value = serde_json::from_slice(body).unwrap();
    // The fields the wire type documents (tests/e2e/wire.py holds them to
    // Metacontroller's own CompositeHookResponse).
    let schema = <opshooks::hook::SyncResponse as utoipa::PartialSchema>::schema();
    let schema = serde_json::to_value(schema).unwrap();
    let fields = schema["properties"].as_object().unwrap();
    for key in answer.as_object().unwrap().keys() {
        assert!(
            fields.contains_key(key),
            "{}: unknown response field {key}",
            case.display()
        );
    }
    for child in answer["children"].as_array().unwrap() {
        for field in ["/apiVersion", "/kind", "/metadata/name"] {
            assert!(
                child.pointer(field).and_then(Value::as_str).is_some(),
                "{}: child without {field}",
                case.display()
            );
        }
    }
    let errors = PartSchema::status(op).errors(&answer["status"]);
    assert!(
        errors.is_empty(),
        "{}: status does not fit the CRD: {errors:?}",
        case.display()
    );
}

/// The pod spec of a child that makes pods: a Pod, a workload's template,
/// a CronJob's job template.
fn pod_spec(child: &Value) -> Option<&Value> {
    [
        "/spec/jobTemplate/spec/template/spec",
        "/spec/template/spec",
    ]
    .iter()
    .find_map(|p| child.pointer(p))
    .or_else(|| (child["kind"] == "Pod").then(|| &child["spec"]))
}

/// Which rules of the "restricted" Pod Security Standard (baseline
/// included, as far as our children could break them) `pod` breaks.
fn restricted_breaks(pod: &Value) -> Vec<String> {
    let mut broken = Vec::new();
    let pod_level = &pod["securityContext"];
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| pod[*k].as_array().into_iter().flatten())
        .collect();
    let every =
        |test: &dyn Fn(&Value) -> bool| containers.iter().all(|c| test(&c["securityContext"]));
    let table: [(&str, bool); 5] = [
        (
            "runAsNonRoot",
            pod_level["runAsNonRoot"] == true || every(&|s| s["runAsNonRoot"] == true),
        ),
        (
            "seccompProfile RuntimeDefault or Localhost",
            ["RuntimeDefault", "Localhost"].contains(
                &pod_level["seccompProfile"]["type"]
                    .as_str()
                    .unwrap_or_default(),
            ) || every(&|s| {
                ["RuntimeDefault", "Localhost"]
                    .contains(&s["seccompProfile"]["type"].as_str().unwrap_or_default())
            }),
        ),
        (
            "allowPrivilegeEscalation false",
            every(&|s| s["allowPrivilegeEscalation"] == false),
        ),
        (
            "capabilities drop ALL, add at most NET_BIND_SERVICE",
            every(&|s| {
                s["capabilities"]["drop"]
                    .as_array()
                    .is_some_and(|d| d.contains(&Value::from("ALL")))
                    && s["capabilities"]["add"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .all(|a| a == "NET_BIND_SERVICE")
            }),
        ),
        (
            "runAsUser not 0, not privileged, no host namespaces or ports",
            pod_level["runAsUser"] != 0
                && every(&|s| s["runAsUser"] != 0 && s["privileged"] != true)
                && ["hostNetwork", "hostPID", "hostIPC"]
                    .iter()
                    .all(|k| pod[*k] != true)
                && containers.iter().all(|c| {
                    c["ports"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .all(|p| p.get("hostPort").is_none())
                }),
        ),
    ];
    broken.extend(
        table
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(rule, _)| rule.to_string()),
    );
    let allowed = [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    for volume in pod["volumes"].as_array().into_iter().flatten() {
        let kinds = volume.as_object().unwrap().keys().filter(|k| *k != "name");
        for kind in kinds.filter(|k| !allowed.contains(&k.as_str())) {
            broken.push(format!("volume type {kind}"));
        }
    }
    broken
}

/// Issue 31 item 12: in a namespace enforcing the restricted Pod Security
/// Standard, WebServer pods were forbidden. Every pod any operator's
/// answer makes, in every golden answer, meets it.
#[test]
fn every_pod_every_operator_makes_meets_the_restricted_standard() {
    let mut pods = 0;
    let mut broken = Vec::new();
    for op in operators::all() {
        for case in cases(op.name) {
            let Ok(text) = std::fs::read(case.join("response.json")) else {
                continue;
            };
            let answer: Value = serde_json::from_slice(&text).unwrap();
            for child in answer["children"].as_array().into_iter().flatten() {
                let Some(pod) = pod_spec(child) else { continue };
                pods += 1;
                for rule in restricted_breaks(pod) {
                    broken.push(format!(
                        "{}: {} {}: {rule}",
                        case.display(),
                        child["kind"],
                        child["metadata"]["name"]
                    ));
                }
            }
        }
    }
    assert!(pods > 100, "only {pods} pod templates");
    assert!(
        broken.is_empty(),
        "{} breaks, first: {:#?}",
        broken.len(),
        &broken[..broken.len().min(10)]
    );
}
