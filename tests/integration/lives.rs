//! Properties over whole lives: random specs and random event scripts run
//! through the simulator, with the loop's rules and each operator's
//! data-safety rules checked after every step, not only at the end.
//!
//! Every life ends the same way: failing Jobs heal, failed Jobs are deleted
//! (the documented retry), the parent is deleted, and the deletion must
//! finish within a bounded number of steps. Before the deletion, each
//! life must have reached what its spec asks (progress, not only safety),
//! and only an invalid spec may be refused. `PROPTEST_CASES` runs more
//! lives.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use opshooks::fixtures;
use opshooks::operator::Operator;
use opshooks::simulate::cluster::{Actor, Cluster, Key, POD_NAME_LABEL, Verb};
use opshooks::simulate::{Event, Outcome, Simulation, Step};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::support::operator;

/// Steps allowed for the loop to settle after one event.
const SETTLE: u32 = 60;

/// An event as a test script names it; a child is chosen when it happens.
#[derive(Clone, Debug)]
enum Scripted {
    Spec(&'static str, Value),
    DeleteParent,
    DeleteChild(usize),
    Unannotate(usize),
    Annotate(usize),
    HookDown(u32),
    FailJob(String),
    NotReady(usize),
    DeleteTarget,
    RecreateTarget,
    RunCronJob,
    /// Anyone sets the Database StatefulSet's `whenDeleted` to `Delete`.
    ReleaseVolumes,
    /// Metacontroller is killed after this many writes of its next sync.
    Restart(usize),
    /// The event after this one arrives mid-flight: after only this many
    /// steps, not once the loop has settled.
    Soon(u32),
    /// The Database's designated primary is kept not ready (`kill-primary`)
    /// for this many steps, then back (`ready POD`); with 0, until the life
    /// ends.
    KillPrimaryFor(u32),
    /// The user deletes this object (kind, name).
    Delete(&'static str, &'static str),
    /// One of the Database's instances that is not its designated primary
    /// becomes not ready, and stays so until the life ends.
    StandbyNotReady(usize),
    /// One of the Database's instances loses its volume, while another is
    /// ready (else nothing holds the data, and nothing may serve again).
    LoseVolume(usize),
}

fn start() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

/// What a rule of one operator needs to know of the step just taken.
struct Seen<'a> {
    sim: &'a Simulation<'a>,
    step: &'a Step,
    /// The parent as it was before this step (null once gone).
    before: &'a Value,
    /// The cluster as it was before this step.
    before_cluster: &'a Cluster,
}

/// Runs one life and returns the first broken rule, if any. After the
/// script's last event (and the healing every life ends with), the loop
/// must have reached what the spec asks (`reached`), unless the spec
/// itself is refused; then the parent is deleted and must be finalized.
fn live(
    op: &Operator,
    parent: Value,
    seed: u64,
    script: &[Scripted],
    setup: impl Fn(&mut Simulation<'_>),
    rule: impl Fn(&Seen<'_>) -> Result<(), String>,
    reached: impl Fn(&Simulation<'_>) -> Result<(), String>,
) -> Result<(), String> {
    let mut sim = Simulation::new(op, parent, start(), seed)?;
    setup(&mut sim);
    let broken = RefCell::new(None::<String>);
    // The last refusal of the spec itself, cleared by every answer.
    let spec_refused = RefCell::new(None::<String>);
    // The parent as last seen, and the volumes when its deletion began.
    let last = RefCell::new(Value::Null);
    let mut claims_at_delete: Option<Vec<String>> = None;
    // Whether the user deleted a StatefulSet by hand: the one case where
    // the README says a deletion waits for a person.
    let mut statefulset_deleted_by_hand = false;
    // Runs the loop until it settles, or for `steps` steps only (an event
    // then arrives mid-flight), checking the rules after every step.
    let run = |sim: &mut Simulation<'_>, what: &str, steps: Option<u32>| -> Result<(), String> {
        let mut before = sim.parent().cloned().unwrap_or(Value::Null);
        let mut before_cluster = sim.cluster.clone();
        let (_, settled) = sim.settle_checked(steps.unwrap_or(SETTLE), |sim, step| {
            let mut found = step.violations.first().cloned();
            match &step.outcome {
                // Only an invalid spec may be refused; anything else
                // refused is a hook that does not do its work.
                Outcome::Refused { reason, .. } if reason.starts_with("spec.") => {
                    *spec_refused.borrow_mut() = Some(reason.clone());
                }
                Outcome::Refused { hook, reason } => {
                    found = found.or_else(|| Some(format!("{hook} refused: {reason}")));
                }
                Outcome::Answered { .. } => *spec_refused.borrow_mut() = None,
                Outcome::HookDown | Outcome::Gone => {}
            }
            if found.is_none() {
                let seen = Seen {
                    sim,
                    step,
                    before: &before,
                    before_cluster: &before_cluster,
                };
                found = rule(&seen).err();
            }
            if let Some(why) = found
                && broken.borrow().is_none()
            {
                *broken.borrow_mut() = Some(format!("{what}: step {}: {why}", step.number));
            }
            before = sim.parent().cloned().unwrap_or(Value::Null);
            before_cluster = sim.cluster.clone();
            if !before.is_null() {
                *last.borrow_mut() = before.clone();
            }
        });
        if let Some(why) = broken.borrow_mut().take() {
            return Err(why);
        }
        if !settled && steps.is_none() {
            return Err(format!("{what}: the loop did not settle in {SETTLE} steps"));
        }
        Ok(())
    };
    let settle = |sim: &mut Simulation<'_>, what: &str| run(sim, what, None);
    settle(&mut sim, "creation")?;
    for (index, scripted) in script.iter().enumerate() {
        let children = sim.children();
        let child = |i: &usize| children.get(i % children.len().max(1)).cloned();
        let event = match scripted {
            Scripted::Spec(path, value) => Some(Event::SetSpec {
                path: path.split('.').map(String::from).collect(),
                value: value.clone(),
            }),
            Scripted::DeleteParent => Some(Event::DeleteParent),
            Scripted::DeleteChild(i) => child(i).map(|k| Event::Delete {
                kind: k.kind,
                name: k.name,
            }),
            Scripted::Unannotate(i) | Scripted::Annotate(i) => child(i).and_then(|k| {
                let object = sim.cluster.get(&k)?;
                let annotations = object.pointer("/metadata/annotations")?.as_object()?;
                let key = annotations.keys().next()?.clone();
                let value = matches!(scripted, Scripted::Annotate(_)).then(|| "{".to_string());
                Some(Event::Annotate {
                    kind: k.kind,
                    name: k.name,
                    key,
                    value,
                })
            }),
            Scripted::HookDown(n) => Some(Event::HookDown(*n)),
            Scripted::FailJob(name) => Some(Event::FailJob(name.clone())),
            Scripted::NotReady(i) => sim
                .cluster
                .objects()
                .filter(|(k, _)| k.kind == "Pod")
                .nth(*i)
                .map(|(k, _)| Event::NotReady(k.name.clone(), true)),
            Scripted::Delete(kind, name) => Some(Event::Delete {
                kind: kind.to_string(),
                name: name.to_string(),
            }),
            Scripted::DeleteTarget => Some(Event::Delete {
                kind: "StatefulSet".into(),
                name: "db".into(),
            }),
            Scripted::RecreateTarget => {
                sim.cluster.create(target(), Actor::User);
                None
            }
            Scripted::Soon(_) => None,
            Scripted::Restart(writes) => Some(Event::RestartMetacontroller(*writes)),
            Scripted::ReleaseVolumes => {
                let key = Key::new("apps/v1", "StatefulSet", "ns", "orders");
                if let Some(mut spec) = sim.cluster.get(&key).map(|s| s["spec"].clone()) {
                    spec["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] = json!("Delete");
                    sim.cluster
                        .update(&key, &json!({"spec": spec}), Actor::User);
                }
                None
            }
            Scripted::RunCronJob => children
                .iter()
                .find(|k| k.kind == "CronJob")
                .map(|k| Event::RunCronJob(k.name.clone())),
            Scripted::KillPrimaryFor(_) => {
                sim.designated_primary().ok().map(|_| Event::KillPrimary)
            }
            Scripted::StandbyNotReady(i) => {
                let primary = sim.designated_primary().ok();
                instances(&sim.cluster)
                    .into_iter()
                    .filter(|pod| Some(pod) != primary.as_ref())
                    .nth(*i)
                    .map(|pod| Event::NotReady(pod, true))
            }
            Scripted::LoseVolume(i) => {
                let pods = instances(&sim.cluster);
                let ready = |pod: &String| {
                    sim.cluster
                        .get(&Key::new("v1", "Pod", "ns", pod))
                        .is_some_and(is_ready_pod)
                };
                pods.get(*i)
                    .filter(|pod| !sim.is_deleting() && pods.iter().any(|o| o != *pod && ready(o)))
                    .map(|pod| Event::LoseVolume(pod.clone()))
            }
        };
        let killed = matches!(event, Some(Event::KillPrimary));
        if let Some(event) = event {
            statefulset_deleted_by_hand |=
                matches!(&event, Event::Delete { kind, .. } if kind == "StatefulSet");
            if matches!(event, Event::DeleteParent) && claims_at_delete.is_none() {
                claims_at_delete = Some(claims(&sim.cluster));
            }
            // Only an event that names something really gone may fail.
            if let Err(why) = sim.apply(&event) {
                let gone = match &event {
                    Event::Delete { kind, name } => !sim
                        .cluster
                        .objects()
                        .any(|(k, _)| &k.kind == kind && &k.name == name),
                    Event::SetSpec { .. } | Event::DeleteParent => sim.parent().is_none(),
                    _ => false,
                };
                if !gone {
                    return Err(format!("{scripted:?} could not be applied: {why}"));
                }
            }
        }
        // The primary killed for a while: back after that many steps.
        if let (Scripted::KillPrimaryFor(steps @ 1..), true) = (scripted, killed) {
            // Nothing ran since the event: the role still names the pod killed.
            let pod = sim.designated_primary()?;
            run(&mut sim, &format!("after {scripted:?}"), Some(*steps))?;
            sim.apply(&Event::NotReady(pod, false))?;
        }
        let soon = match script.get(index + 1) {
            Some(Scripted::Soon(steps)) => Some(*steps),
            _ => None,
        };
        if !matches!(scripted, Scripted::Soon(_)) {
            run(&mut sim, &format!("after {scripted:?}"), soon)?;
        }
    }
    // The end of every life: Jobs heal, failed ones are deleted to retry,
    // the parent is deleted, and the deletion finishes.
    let failing: Vec<String> = sim.cluster.failing_jobs.iter().cloned().collect();
    for job in failing {
        sim.apply(&Event::HealJob(job))?;
    }
    let unready: Vec<String> = sim.cluster.not_ready_pods.iter().cloned().collect();
    for pod in unready {
        sim.apply(&Event::NotReady(pod, false))?;
    }
    for (kind, name) in failed_jobs(&sim) {
        sim.apply(&Event::Delete { kind, name })?;
    }
    settle(&mut sim, "healing")?;
    // Progress: what the spec asks is reached, unless the spec is refused.
    if !sim.is_deleting() && spec_refused.borrow().is_none() {
        reached(&sim).map_err(|why| format!("the spec was never reached: {why}"))?;
    }
    if !sim.is_deleting() {
        claims_at_delete.get_or_insert_with(|| claims(&sim.cluster));
        sim.apply(&Event::DeleteParent)?;
    }
    settle(&mut sim, "deletion")?;
    let last = last.into_inner();
    let claims_before = claims_at_delete.unwrap_or_default();
    // The deletion finishes by itself: nothing is removed for it by hand,
    // except where the README says a person must act: volumes a StatefulSet
    // deleted by hand left behind, which the status names. Then the loop
    // has settled: nothing else moves while it waits.
    if let Some(p) = sim.parent() {
        return match statefulset_deleted_by_hand && person_must_act(p) {
            true => Ok(()),
            false => Err(format!("the parent was never finalized: {}", p["status"])),
        };
    }
    if last.pointer("/spec/deletionPolicy") != Some(&json!("Retain"))
        && !claims(&sim.cluster).is_empty()
    {
        return Err(format!(
            "finalized with volumes {:?} left",
            claims(&sim.cluster)
        ));
    }
    // Under Retain, every volume outlives its Database.
    if last.pointer("/spec/deletionPolicy") == Some(&json!("Retain")) {
        let gone: Vec<&String> = claims_before
            .iter()
            .filter(|c| !claims(&sim.cluster).contains(c))
            .collect();
        if !gone.is_empty() {
            return Err(format!("volumes {gone:?} deleted under Retain"));
        }
    }
    Ok(())
}

/// True when a parent's deletion waits for a person, and its status says
/// what to do (the Database's volumes that no StatefulSet holds any more).
fn person_must_act(parent: &Value) -> bool {
    condition(parent, "Ready").is_some_and(|c| {
        c["reason"] == "WaitingForVolumes"
            && c["message"]
                .as_str()
                .is_some_and(|m| m.contains("deleted by hand"))
    })
}

/// The names of the volume claims in a cluster.
fn claims(cluster: &Cluster) -> Vec<String> {
    cluster
        .objects()
        .filter(|(k, _)| k.kind == "PersistentVolumeClaim")
        .map(|(k, _)| k.name.clone())
        .collect()
}

/// True when a Job has failed and nobody deleted it yet: what it held
/// (a change of primary, an upgrade) waits for a person.
/// The names of the Jobs that failed.
fn failed_jobs_in(cluster: &Cluster) -> impl Iterator<Item = &str> {
    cluster
        .objects()
        .filter(|(k, o)| {
            k.kind == "Job" && o.pointer("/status/conditions/0/type") == Some(&json!("Failed"))
        })
        .map(|(k, _)| k.name.as_str())
}

fn failed_jobs(sim: &Simulation<'_>) -> Vec<(String, String)> {
    failed_jobs_in(&sim.cluster)
        .map(|name| ("Job".to_string(), name.to_string()))
        .collect()
}

fn deleted_by_the_loop<'a>(step: &'a Step, kind: &'a str) -> impl Iterator<Item = &'a Key> + 'a {
    step.changes
        .iter()
        .filter(move |c| c.verb == Verb::Deleted && c.actor != Actor::User && c.key.kind == kind)
        .map(|c| &c.key)
}

/// True while the parent is being deleted, or once it is gone.
fn is_deleting(parent: &Value) -> bool {
    parent.is_null() || parent.pointer("/metadata/deletionTimestamp").is_some()
}

/// The Backup's target: a PostgreSQL StatefulSet whose password is in a Secret.
fn target() -> Value {
    let password = json!({"secretKeyRef": {"name": "db", "key": "password"}});
    fixtures::statefulset("db")
        .namespace("ns")
        .set("/spec/serviceName", json!("db"))
        .replicas(1)
        .set("/spec/selector", json!({"matchLabels": {"app": "db"}}))
        .set("/spec/template/metadata/labels", json!({"app": "db"}))
        .containers(json!([{"name": "postgres", "image": "postgres:16",
            "ports": [{"containerPort": 5432}],
            "env": [{"name": "POSTGRES_PASSWORD", "valueFrom": password}]}]))
        .json()
}

/// The Database `orders` every Database life starts from, backed up.
fn orders(version: &str, size: &str, policy: &str) -> Value {
    fixtures::database("orders")
        .namespace("ns")
        .spec("version", version)
        .spec("size", size)
        .spec("storage/size", "1Gi")
        .spec("deletionPolicy", policy)
        .spec(
            "backup",
            json!({"enabled": true, "schedule": "0 2 * * *", "destination": {"s3Bucket": "backups"}}),
        )
        .json()
}

/// The WebServer `web` of `replicas`.
fn web(replicas: i64) -> Value {
    fixtures::webserver("web")
        .namespace("ns")
        .spec("replicas", replicas)
        .json()
}

fn common_events() -> impl Strategy<Value = Scripted> {
    prop_oneof![
        (0usize..20).prop_map(Scripted::DeleteChild),
        (0usize..20).prop_map(Scripted::Unannotate),
        (0usize..20).prop_map(Scripted::Annotate),
        (1u32..5).prop_map(Scripted::HookDown),
        (0usize..6).prop_map(Scripted::NotReady),
        Just(Scripted::DeleteParent),
        (1u32..4).prop_map(Scripted::Soon),
        (0usize..12).prop_map(Scripted::Restart),
    ]
}

/// 256 lives of each operator (`PROPTEST_CASES` for more); a failing one
/// is saved (with its seed) to lives.proptest-regressions beside this file
/// and replayed first on every later run, so a failure found in CI can be
/// replayed here from the minimal input it prints.
fn config() -> ProptestConfig {
    super::support::proptest_config(256)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn webserver_lives(
        replicas in 0i64..5,
        seed in any::<u64>(),
        script in prop::collection::vec(prop_oneof![
            (0i64..6).prop_map(|n| Scripted::Spec("replicas", json!(n))),
            prop::sample::select(vec!["nginx:1.27", "nginx:1.28"]).prop_map(|i| Scripted::Spec("image", json!(i))),
            common_events(),
        ], 0..6),
    ) {
        let op = operator("webserver");
        let parent = web(replicas);
        let rule = |seen: &Seen<'_>| {
            // A pod still wanted is replaced (left out, so deleted) only
            // while every other wanted pod was there and ready: at most one
            // is unavailable at a time.
            let replicas = seen.before.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
            let wanted = |name: &str| name.trim_start_matches("web-").parse::<i64>().is_ok_and(|i| i < replicas);
            for pod in deleted_by_the_loop(seen.step, "Pod").filter(|k| wanted(&k.name)) {
                // Replacing a pod that is down already costs nothing.
                let was_down = seen.sim.cluster.not_ready_pods.contains(&pod.name)
                    || seen.before_cluster.get(pod).is_none_or(|p| {
                        p.pointer("/status/conditions/0/status") != Some(&json!("True"))
                    });
                if was_down {
                    continue;
                }
                for other in (0..replicas).map(|i| format!("web-{i}")).filter(|n| *n != pod.name) {
                    let key = Key::new("v1", "Pod", "ns", &other);
                    // As the hook saw it: after the controllers' round of
                    // this step (the answer only deletes the replaced pod
                    // and creates missing ones, which show not ready).
                    let ready = seen.sim.cluster.get(&key).is_some_and(|p| {
                        p.pointer("/status/conditions/0/status") == Some(&json!("True"))
                    });
                    if !ready {
                        return Err(format!("{pod} replaced while {other} was not ready"));
                    }
                }
            }
            Ok(())
        };
        let result = live(&op, parent, seed, &script, |_| {}, rule, webserver_reached);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    #[test]
    fn memcached_lives(
        size in 0i64..4,
        seed in any::<u64>(),
        script in prop::collection::vec(prop_oneof![
            (0i64..5).prop_map(|n| Scripted::Spec("size", json!(n))),
            Just(Scripted::Spec("memoryLimit", json!("64Mi"))),
            common_events(),
        ], 0..6),
    ) {
        let op = operator("memcached");
        let parent = fixtures::memcached("cache").namespace("ns").spec("size", size).json();
        let rule = |seen: &Seen<'_>| {
            for kind in ["Deployment", "Service"] {
                if let Some(key) = deleted_by_the_loop(seen.step, kind).next()
                    && !is_deleting(seen.before)
                {
                    return Err(format!("{key} deleted while the Memcached lives"));
                }
            }
            Ok(())
        };
        let result = live(&op, parent, seed, &script, |_| {}, rule, memcached_reached);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    #[test]
    fn backup_lives(
        seed in any::<u64>(),
        target_first in any::<bool>(),
        script in prop::collection::vec(prop_oneof![
            Just(Scripted::Spec("schedule", json!("30 3 * * *"))),
            Just(Scripted::Spec("suspend", json!(true))),
            Just(Scripted::Spec("suspend", json!(false))),
            Just(Scripted::DeleteTarget),
            Just(Scripted::RecreateTarget),
            Just(Scripted::RunCronJob),
            common_events(),
        ], 0..6),
    ) {
        let op = operator("backup");
        let parent = fixtures::backup("nightly").namespace("ns")
            .spec("schedule", "0 2 * * *")
            .spec("target", json!({"kind": "StatefulSet", "name": "db"}))
            .spec("destination", json!({"s3Bucket": "backups"}))
            .json();
        let setup = |sim: &mut Simulation<'_>| {
            if target_first {
                sim.cluster.create(target(), Actor::User);
            }
        };
        let rule = |seen: &Seen<'_>| {
            // The CronJob (and the backups it runs) goes only with the Backup.
            if let Some(key) = deleted_by_the_loop(seen.step, "CronJob").next()
                && !is_deleting(seen.before)
            {
                return Err(format!("{key} deleted while the Backup lives"));
            }
            Ok(())
        };
        let result = live(&op, parent, seed, &script, setup, rule, backup_reached);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    #[test]
    fn database_lives(
        bootstrap in any::<bool>(),
        version in 14u32..17,
        size in prop::sample::select(vec!["small", "medium", "large"]),
        policy in prop::sample::select(vec!["Snapshot", "Retain", "Delete"]),
        delay in prop::option::of(prop::sample::select(vec![0u32, 10, 30, 60])),
        first_postgresql in prop::option::of(prop::sample::select(postgresql())),
        placement in prop::option::of(placement()),
        seed in any::<u64>(),
        script in prop::collection::vec(prop_oneof![
            1 => (14u32..=17).prop_map(|v| Scripted::Spec("version", json!(v.to_string()))),
            1 => prop::sample::select(vec!["small", "medium", "large"]).prop_map(|s| Scripted::Spec("size", json!(s))),
            1 => prop::sample::select(vec!["Snapshot", "Retain", "Delete"]).prop_map(|p| Scripted::Spec("deletionPolicy", json!(p))),
            1 => prop::sample::select(vec!["orders-snapshot", "orders-init", "orders-pre-upgrade-17", "orders-upgrade-17",
                                      "orders-pre-upgrade-16", "orders-upgrade-16", "orders-restore", "orders-promote-*",
                                      "orders-grow-*"])
                .prop_map(|j| Scripted::FailJob(j.to_string())),
            1 => Just(Scripted::ReleaseVolumes),
            3 => (1u32..10).prop_map(Scripted::KillPrimaryFor),
            1 => (0usize..3).prop_map(Scripted::StandbyNotReady),
            1 => (0usize..3).prop_map(Scripted::LoseVolume),
            1 => Just(Scripted::FailJob("orders-promote-*".to_string())),
            2 => prop::sample::select(vec!["pg/postgres@sha256:01", "pg/postgres@sha256:02"])
                .prop_map(|i| Scripted::Spec("imageName", json!(i))),
            1 => prop::sample::select(resources()).prop_map(|r| Scripted::Spec("resources", r)),
            2 => prop::sample::select(postgresql()).prop_map(|p| Scripted::Spec("postgresql", p)),
            1 => placement().prop_map(|(affinity, _, _)| Scripted::Spec("affinity", affinity)),
            1 => any::<bool>().prop_map(|on| Scripted::Spec("enablePDB", json!(on))),
            1 => prop::sample::select(vec!["2Gi", "3Gi"]).prop_map(|g| Scripted::Spec("storage.size", json!(g))),
            4 => common_events(),
        ], 0..7),
    ) {
        let op = operator("database");
        let mut parent = orders(&version.to_string(), size, policy);
        if let Some((affinity, spread, pdb)) = placement {
            parent["spec"]["affinity"] = affinity;
            if let Some(spread) = spread {
                parent["spec"]["topologySpreadConstraints"] = spread;
            }
            if let Some(pdb) = pdb {
                parent["spec"]["enablePDB"] = json!(pdb);
            }
        }
        if bootstrap {
            parent["spec"]["bootstrap"] = json!({"database": "orders"});
        }
        if let Some(delay) = delay {
            parent["spec"]["failover"] = json!({"delay": delay});
        }
        if let Some(pg) = first_postgresql {
            parent["spec"]["postgresql"] = pg;
        }
        let history = History::default();
        let primaries = Primaries::default();
        let rule = |seen: &Seen<'_>| {
            database_rule(seen)?;
            placement_rule(seen.sim)?;
            restore_rule(seen, &history)?;
            rollout_rule(seen)?;
            failover_rule(seen, &primaries)
        };
        let result = live(&op, parent, seed, &script, |_| {}, rule, database_reached);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// A Database's placement settings: `spec.affinity`, and maybe
/// `spec.topologySpreadConstraints` and `spec.enablePDB`.
fn placement() -> impl Strategy<Value = (Value, Option<Value>, Option<bool>)> {
    (
        prop::option::of(any::<bool>()),
        prop::option::of(prop::sample::select(vec!["preferred", "required"])),
        prop::option::of(prop::sample::select(vec![
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
        ])),
        prop::option::of(prop::sample::select(vec![
            json!([]),
            json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule", "minDomains": 2}]),
        ])),
        prop::option::of(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(|(enable, kind, key, spread, pdb, dedicated)| {
            let mut affinity = json!({});
            if let Some(enable) = enable {
                affinity["enablePodAntiAffinity"] = json!(enable);
            }
            if let Some(kind) = kind {
                affinity["podAntiAffinityType"] = json!(kind);
            }
            if let Some(key) = key {
                affinity["topologyKey"] = json!(key);
            }
            if dedicated {
                affinity["nodeSelector"] = json!({"pool": "databases"});
                affinity["tolerations"] =
                    json!([{"key": "dedicated", "value": "databases", "effect": "NoSchedule"}]);
            }
            (affinity, spread, pdb)
        })
}

/// Placement: the instances' anti-affinity and spread select exactly the
/// StatefulSet's pods, as its anti-affinity type says; a
/// PodDisruptionBudget, when there is one, selects them too and lets one
/// go at a time; and while the Database lives (not deleting, every sync
/// answered) there is one exactly when the size asks for two or more
/// instances and `enablePDB` is not false.
fn placement_rule(sim: &Simulation<'_>) -> Result<(), String> {
    let sts = sim
        .cluster
        .get(&Key::new("apps/v1", "StatefulSet", "ns", "orders"));
    let pdb = sim.cluster.get(&Key::new(
        "policy/v1",
        "PodDisruptionBudget",
        "ns",
        "orders",
    ));
    let Some(sts) = sts else {
        return Ok(());
    };
    let selector = sts.pointer("/spec/selector/matchLabels");
    let template = sts.pointer("/spec/template/spec").unwrap_or(&Value::Null);
    let anti = template.pointer("/affinity/podAntiAffinity");
    let terms = [
        "/requiredDuringSchedulingIgnoredDuringExecution/0/labelSelector/matchLabels",
        "/preferredDuringSchedulingIgnoredDuringExecution/0/podAffinityTerm/labelSelector/matchLabels",
    ];
    if let Some(anti) = anti
        && !terms.iter().any(|t| anti.pointer(t) == selector)
    {
        return Err(format!(
            "the anti-affinity {anti} does not select the StatefulSet's pods {selector:?}"
        ));
    }
    for c in template["topologySpreadConstraints"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if c.pointer("/labelSelector/matchLabels") != selector {
            return Err(format!("the spread {c} does not select the instances"));
        }
    }
    if let Some(pdb) = pdb
        && (pdb.pointer("/spec/selector/matchLabels") != selector
            || pdb.pointer("/spec/maxUnavailable") != Some(&json!(1)))
    {
        return Err(format!(
            "the PodDisruptionBudget {pdb} is not maxUnavailable 1 over the instances"
        ));
    }
    Ok(())
}

/// What the settled Database's placement must be: the anti-affinity of
/// the type the spec asks, and a PodDisruptionBudget exactly when there
/// are two or more instances and `enablePDB` is not false.
fn placement_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let sts = object(sim, "apps/v1", "StatefulSet", "orders")?;
    let anti = sts.pointer("/spec/template/spec/affinity/podAntiAffinity");
    let on = json!(true);
    let enabled = spec(sim, "affinity/enablePodAntiAffinity", &on) == &on;
    let preferred = json!("preferred");
    let kind = spec(sim, "affinity/podAntiAffinityType", &preferred);
    let field = if kind == &json!("required") {
        "requiredDuringSchedulingIgnoredDuringExecution"
    } else {
        "preferredDuringSchedulingIgnoredDuringExecution"
    };
    if enabled != anti.is_some_and(|a| a.get(field).is_some()) {
        return Err(format!(
            "the pod anti-affinity is {anti:?}; the spec asks {kind}, enabled: {enabled}"
        ));
    }
    let small = json!("small");
    let instances = match spec(sim, "size", &small).as_str() {
        Some("medium") => 2,
        Some("large") => 3,
        _ => 1,
    };
    let want = instances >= 2 && spec(sim, "enablePDB", &on) != &json!(false);
    let has = object(sim, "policy/v1", "PodDisruptionBudget", "orders").is_ok();
    if want != has {
        return Err(format!(
            "{instances} instances, enablePDB {}: a PodDisruptionBudget: {has}",
            spec(sim, "enablePDB", &Value::Null)
        ));
    }
    Ok(())
}

/// The parent's spec value at `path`, or `default`.
fn spec<'a>(sim: &'a Simulation<'_>, path: &str, default: &'a Value) -> &'a Value {
    sim.parent()
        .and_then(|p| p.pointer(&format!("/spec/{path}")))
        .unwrap_or(default)
}

/// The parent's status (null once it is gone).
fn status(sim: &Simulation<'_>) -> Value {
    sim.parent()
        .map(|p| p["status"].clone())
        .unwrap_or_default()
}

/// A parent's condition of type `kind`, if it has one.
fn condition<'a>(parent: &'a Value, kind: &str) -> Option<&'a Value> {
    status_condition(parent.get("status")?, kind)
}

/// A status's condition `kind`.
fn status_condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    let conditions = status.get("conditions")?.as_array()?;
    conditions.iter().find(|c| c["type"] == kind)
}

/// A promote Job's `MODE`: `switchover` or `failover`.
fn job_mode(job: &Value) -> Option<&Value> {
    let env = job
        .pointer("/spec/template/spec/containers/0/env")?
        .as_array()?;
    Some(&env.iter().find(|e| e["name"] == "MODE")?["value"])
}

/// The parent's condition `kind` is True.
fn condition_true(sim: &Simulation<'_>, kind: &str) -> Result<(), String> {
    match sim.parent().and_then(|p| condition(p, kind)) {
        Some(c) if c["status"] == "True" => Ok(()),
        _ => Err(format!("{kind} is not True: {}", status(sim))),
    }
}

fn object<'a>(
    sim: &'a Simulation<'_>,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Result<&'a Value, String> {
    sim.cluster
        .get(&Key::new(api_version, kind, "ns", name))
        .ok_or_else(|| format!("{kind}/{name} does not exist"))
}

fn is_ready_pod(pod: &Value) -> bool {
    pod.pointer("/status/conditions/0/status") == Some(&json!("True"))
}

/// WebServer: `replicas` ready pods of the spec's image, and Ready.
fn webserver_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let replicas = spec(sim, "replicas", &json!(0)).as_u64().unwrap_or(0);
    let image = spec(
        sim,
        "image",
        &json!(opshooks::operators::webserver::DEFAULT_IMAGE),
    )
    .clone();
    let pods: Vec<&Value> = sim
        .cluster
        .objects()
        .filter(|(k, _)| k.kind == "Pod")
        .map(|(_, o)| o)
        .collect();
    if pods.len() as u64 != replicas {
        return Err(format!("{} pods for {replicas} replicas", pods.len()));
    }
    for i in 0..replicas {
        let pod = object(sim, "v1", "Pod", &format!("web-{i}"))?;
        if !is_ready_pod(pod) || pod.pointer("/spec/containers/0/image") != Some(&image) {
            return Err(format!("web-{i} is not ready with image {image}: {pod}"));
        }
    }
    condition_true(sim, "Ready")
}

/// Memcached: its Deployment at `size`, and `status.nodes` its pods.
fn memcached_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let size = spec(sim, "size", &json!(0)).clone();
    let deployment = object(sim, "apps/v1", "Deployment", "cache")?;
    if deployment.pointer("/spec/replicas") != Some(&size) {
        return Err(format!(
            "the Deployment runs {} replicas, not {size}",
            deployment["spec"]["replicas"]
        ));
    }
    let pods: Vec<String> = sim
        .cluster
        .objects()
        .filter(|(k, _)| k.kind == "Pod")
        .map(|(k, _)| k.name.clone())
        .collect();
    let nodes = status(sim)["nodes"].clone();
    if nodes != json!(pods) {
        return Err(format!("status.nodes is {nodes}, the pods are {pods:?}"));
    }
    condition_true(sim, "Ready")
}

/// Backup: a CronJob with the spec's schedule, suspended exactly when
/// asked or while the target is gone.
fn backup_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let target_gone = sim
        .cluster
        .get(&Key::new("apps/v1", "StatefulSet", "ns", "db"))
        .is_none();
    let Ok(cron) = object(sim, "batch/v1", "CronJob", "nightly-backup") else {
        // A target never seen leaves nothing to build the job from: the
        // status must say the target is missing.
        let says_so = sim
            .parent()
            .and_then(|p| condition(p, "TargetFound"))
            .is_some_and(|c| c["status"] == "False");
        return match target_gone && says_so {
            true => Ok(()),
            false => Err(format!("no CronJob: {}", status(sim))),
        };
    };
    let schedule = spec(sim, "schedule", &Value::Null);
    if &cron["spec"]["schedule"] != schedule {
        return Err(format!(
            "the CronJob runs on {}, the spec says {schedule}",
            cron["spec"]["schedule"]
        ));
    }
    let target_gone = sim
        .cluster
        .get(&Key::new("apps/v1", "StatefulSet", "ns", "db"))
        .is_none();
    let suspend = spec(sim, "suspend", &json!(false)) == &json!(true) || target_gone;
    if cron["spec"]["suspend"] != json!(suspend) {
        return Err(format!(
            "the CronJob's suspend is {}, not {suspend}",
            cron["spec"]["suspend"]
        ));
    }
    Ok(())
}

/// Database: Running at `spec.version`, its Services there and the
/// initial configuration done.
fn database_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let status = status(sim);
    let version = spec(sim, "version", &Value::Null);
    if status["phase"] != "Running" || &status["version"] != version {
        return Err(format!(
            "phase {} at version {}, asked {version}",
            status["phase"], status["version"]
        ));
    }
    for service in ["orders", "orders-headless", "orders-ro"] {
        object(sim, "v1", "Service", service)?;
    }
    condition_true(sim, "Initialized")?;
    if !spec(sim, "bootstrap", &Value::Null).is_null() {
        restored(sim)?;
    }
    condition_true(sim, "Ready")?;
    primary_reached(sim)?;
    settings_reached(sim)?;
    placement_reached(sim)?;
    storage_reached(sim)?;
    images_reached(sim)
}

/// Every instance's claim holds at least `spec.storage.size` (a size the
/// lives write as `<n>Gi`), and the grow Job, Role, RoleBinding and
/// ServiceAccount are gone.
fn storage_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let gib = |v: &Value| v.as_str()?.strip_suffix("Gi")?.parse::<u32>().ok();
    let wanted =
        gib(spec(sim, "storage/size", &Value::Null)).ok_or("spec.storage.size is not <n>Gi")?;
    for pod in instances(&sim.cluster) {
        let claim = object(sim, "v1", "PersistentVolumeClaim", &format!("data-{pod}"))?;
        let has = gib(&claim["status"]["capacity"]["storage"]);
        if has.is_none_or(|has| has < wanted) {
            return Err(format!(
                "claim data-{pod} holds {has:?} Gi, the spec asks {wanted}Gi"
            ));
        }
    }
    let left: Vec<String> = sim
        .cluster
        .objects()
        .filter(|(k, _)| k.name.starts_with("orders-grow"))
        .map(|(k, _)| k.to_string())
        .collect();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("grow objects left: {left:?}"))
    }
}

/// `spec.resources` a life may set: Null drops them (back to the size's).
fn resources() -> Vec<Value> {
    vec![
        Value::Null,
        json!({"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}),
        json!({"requests": {"cpu": "1", "memory": "3Gi"}}),
    ]
}

/// `spec.postgresql` a life may set: parameters that go up and down
/// (max_connections, whose decrease is held while standbys run), others
/// that change freely, and pg_hba lines.
fn postgresql() -> Vec<Value> {
    vec![
        Value::Null,
        json!({"parameters": {"max_connections": "200", "work_mem": "8MB"}}),
        json!({"parameters": {"max_connections": "300"}, "pgHba": ["host all all 10.0.0.0/8 scram-sha-256"]}),
        json!({"parameters": {"max_connections": "50", "max_worker_processes": "4"}}),
        json!({"pgHba": ["host all all 0.0.0.0/0 reject"]}),
    ]
}

/// Every instance runs what `spec.resources` and `spec.postgresql` ask:
/// the resources, a `-c name=value` for each parameter, and the
/// pg_hba.conf's mount and TLS; a parameter an instance does not run
/// is one the `ParametersApplied` condition says is held.
fn settings_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let resources = spec(sim, "resources", &Value::Null);
    let parameters = spec(sim, "postgresql/parameters", &Value::Null);
    let hba = spec(sim, "postgresql/pgHba", &Value::Null);
    let applied = sim
        .parent()
        .and_then(|p| condition(p, "ParametersApplied"))
        .cloned()
        .unwrap_or_default();
    for pod in instances(&sim.cluster) {
        let container = object(sim, "v1", "Pod", &pod)?
            .pointer("/spec/containers/0")
            .cloned()
            .unwrap_or_default();
        if !resources.is_null() && &container["resources"] != resources {
            return Err(format!(
                "{pod} runs with {}, the spec asks {resources}",
                container["resources"]
            ));
        }
        let command: Vec<&str> = container["command"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, value) in parameters.as_object().into_iter().flatten() {
            let arg = format!("{name}={}", value.as_str().unwrap_or_default());
            let held = applied["status"] == "False"
                && applied["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&format!("{name} stays at")));
            if !command.contains(&arg.as_str()) && !held {
                return Err(format!(
                    "{pod} does not run -c {arg}, and ParametersApplied does not say it is held: {applied}"
                ));
            }
        }
        // Every instance reads the operator's pg_hba.conf (TLS only over
        // TCP, then the spec's lines) and serves TLS, lines or not.
        let reads_hba = command.iter().any(|a| a.starts_with("hba_file="));
        let serves_tls = command.contains(&"ssl=on");
        if !reads_hba || !serves_tls {
            return Err(format!(
                "{pod} reads hba_file: {reads_hba}, serves TLS: {serves_tls}, the spec's pgHba: {hba}"
            ));
        }
    }
    Ok(())
}

/// Every instance runs the image the spec asks for, and no rollout is
/// reported under way.
fn images_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let version = spec(sim, "version", &Value::Null)
        .as_str()
        .unwrap_or_default();
    let official = json!(format!("postgres:{version}"));
    let want = spec(sim, "imageName", &official);
    for pod in instances(&sim.cluster) {
        let object = object(sim, "v1", "Pod", &pod)?;
        let image = object
            .pointer("/spec/containers/0/image")
            .unwrap_or(&Value::Null);
        if image != want {
            return Err(format!("{pod} runs {image}, the spec asks {want}"));
        }
    }
    match condition(sim.parent().unwrap_or(&Value::Null), "Upgrading") {
        Some(c) if c["status"] == "True" => Err(format!("Upgrading: {}", c["message"])),
        _ => Ok(()),
    }
}

/// A rollout never restarts the serving primary: no instance the status
/// named the current primary, with no change of primary under way, is
/// deleted by the StatefulSet controller while the StatefulSet still runs
/// its ordinal, unless it is the only instance (nothing to switch over
/// to). Scaled to nothing (a major upgrade), or a StatefulSet deleted and
/// made again, is not a rollout. The controllers act before the hook's
/// answer is applied, so the StatefulSet they acted on is the one before
/// the step: a single instance restarted for its new image while the
/// answer grows it to three is the one-instance rollout.
fn rollout_rule(seen: &Seen<'_>) -> Result<(), String> {
    let status = &seen.before["status"];
    let (Some(primary), true) = (
        status["currentPrimary"].as_str(),
        status["targetPrimary"].is_null(),
    ) else {
        return Ok(());
    };
    let key = Key::new("apps/v1", "StatefulSet", "ns", "orders");
    let sts = seen.before_cluster.get(&key);
    // A StatefulSet deleted (by a user) takes its pods with it: no rollout.
    let same = sts.and_then(|s| s.pointer("/metadata/uid"))
        == seen
            .sim
            .cluster
            .get(&key)
            .and_then(|s| s.pointer("/metadata/uid"));
    // A pod above the replicas the step left is scaled away, not
    // restarted (a major upgrade stops every instance on purpose, from the
    // highest ordinal, which after a failover is the primary).
    let replicas_of = |s: Option<&Value>| s.and_then(|s| s.pointer("/spec/replicas")?.as_u64());
    let replicas = replicas_of(sts.filter(|_| same))
        .unwrap_or(0)
        .min(replicas_of(seen.sim.cluster.get(&key)).unwrap_or(0));
    let restarted = deleted_by_the_loop(seen.step, "Pod")
        .filter(|k| k.name == primary)
        .any(|k| instance_ordinal(&k.name).is_some_and(|o| u64::from(o) < replicas));
    if restarted && replicas > 1 && !is_deleting(seen.before) {
        return Err(format!(
            "the serving primary {primary} was restarted by the StatefulSet controller with standbys to switch over to"
        ));
    }
    Ok(())
}

/// A settled Database has one primary, ready and serving: the role
/// ConfigMap names it, the status reports it with no change under way,
/// and the read-write Service selects it.
fn primary_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let (primary, epoch) = role(&sim.cluster).ok_or("no role ConfigMap says who is primary")?;
    let status = status(sim);
    if status["currentPrimary"] != json!(primary) || status["primaryEpoch"] != json!(epoch) {
        return Err(format!(
            "the role ConfigMap names {primary} at epoch {epoch}, the status {} at {}",
            status["currentPrimary"], status["primaryEpoch"]
        ));
    }
    if !status["targetPrimary"].is_null() {
        return Err(format!("still changing to {}", status["targetPrimary"]));
    }
    if !is_ready_pod(object(sim, "v1", "Pod", &primary)?) {
        return Err(format!("the primary {primary} is not ready"));
    }
    match read_write_pod(&sim.cluster)? {
        Some(pod) if pod == primary => Ok(()),
        other => Err(format!(
            "the read-write Service selects {other:?}, not {primary}"
        )),
    }
}

/// With `spec.bootstrap`: restored, and the dump recorded; or, over
/// retained volumes, their data served and nothing restored.
fn restored(sim: &Simulation<'_>) -> Result<(), String> {
    let status = status(sim);
    let reason = condition(sim.parent().unwrap_or(&Value::Null), "Restored")
        .map(|c| c["reason"].clone())
        .unwrap_or(Value::Null);
    match reason.as_str() {
        Some("Restored") if status["restoredFrom"].is_object() => Ok(()),
        Some("RetainedVolumes") => Ok(()),
        _ => Err(format!(
            "not restored: Restored {reason}, restoredFrom {}",
            status["restoredFrom"]
        )),
    }
}

/// What a Database's life showed so far, for the rules that look back.
#[derive(Default)]
struct History {
    /// The restore Job was seen succeeded.
    restored: Cell<bool>,
    /// The init Job was seen: the Database was initialized.
    initialized: Cell<bool>,
}

/// The bootstrap's rules, for one step: nothing serves (the read-write
/// Service), is backed up on a schedule or snapshotted before the restore
/// succeeded, and no restore Job is ever made for a Database that was
/// initialized.
fn restore_rule(seen: &Seen<'_>, history: &History) -> Result<(), String> {
    let cluster = &seen.sim.cluster;
    let has = |kind: &str, name: &str| {
        cluster
            .objects()
            .any(|(k, _)| k.kind == kind && k.name == name)
    };
    let restore_done = cluster.objects().any(|(k, o)| {
        k.kind == "Job"
            && k.name == "orders-restore"
            && o.pointer("/status/conditions/0/type") == Some(&json!("Complete"))
    });
    history.restored.set(history.restored.get() || restore_done);
    let created = |kind: &str, name: &str| {
        seen.step.changes.iter().any(|c| {
            c.verb == Verb::Created
                && c.actor != Actor::User
                && c.key.kind == kind
                && c.key.name == name
        })
    };
    if created("Job", "orders-restore") && history.initialized.get() {
        return Err("restore Job made for a Database that was initialized".into());
    }
    history
        .initialized
        .set(history.initialized.get() || has("Job", "orders-init"));
    let bootstrapped = seen.before.pointer("/spec/bootstrap").is_some();
    let restoring = bootstrapped
        && !history.restored.get()
        && (has("Job", "orders-restore") || created("Job", "orders-restore"));
    if restoring {
        for (kind, name) in [
            ("Service", "orders"),
            ("CronJob", "orders-backup"),
            ("Job", "orders-snapshot"),
            ("Job", "orders-init"),
        ] {
            if has(kind, name) {
                return Err(format!("{kind} {name} exists before the restore succeeded"));
            }
        }
    }
    Ok(())
}

/// The Database's data-safety rules, for one step.
fn database_rule(seen: &Seen<'_>) -> Result<(), String> {
    let sts_key = Key::new("apps/v1", "StatefulSet", "ns", "orders");
    let sts = seen.sim.cluster.get(&sts_key);
    let released = |s: &Value| {
        s.pointer("/spec/persistentVolumeClaimRetentionPolicy/whenDeleted")
            == Some(&json!("Delete"))
    };
    let policy = seen
        .before
        .pointer("/spec/deletionPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Snapshot");
    // Snapshotted: the snapshot Job succeeded (as the cluster shows it, so
    // the rule holds whatever the operator remembers it by).
    let snapshot_job = Key::new("batch/v1", "Job", "ns", "orders-snapshot");
    let snapshotted = [seen.before_cluster, &seen.sim.cluster].iter().any(|c| {
        c.get(&snapshot_job)
            .is_some_and(|j| j.pointer("/status/conditions/0/type") == Some(&json!("Complete")))
    });
    // Volumes are released to the StatefulSet only while deleting, and under
    // Snapshot only once the snapshot succeeded: whether the StatefulSet
    // was updated to release them or created released.
    let released_now = seen.step.changes.iter().any(|c| {
        c.key == sts_key
            && c.actor != Actor::User
            && matches!(c.verb, Verb::Updated | Verb::Created)
    }) && sts.is_some_and(released);
    if released_now {
        let allowed = is_deleting(seen.before)
            && (policy == "Delete" || (policy == "Snapshot" && snapshotted));
        if !allowed {
            return Err(format!(
                "volumes released under {policy}, deleting: {}, snapshot: {snapshotted}",
                is_deleting(seen.before)
            ));
        }
    }
    // A volume goes only with a StatefulSet that was released while
    // deleting (checked above), never otherwise.
    if let Some(pvc) = deleted_by_the_loop(seen.step, "PersistentVolumeClaim").next() {
        if !is_deleting(seen.before) {
            return Err(format!("{pvc} deleted while the Database lives"));
        }
        if policy == "Retain" {
            return Err(format!("{pvc} deleted while deleting under Retain"));
        }
    }
    // The StatefulSet and the Secrets go only while deleting.
    for kind in ["StatefulSet", "Secret"] {
        if let Some(key) = deleted_by_the_loop(seen.step, kind).next()
            && !is_deleting(seen.before)
        {
            return Err(format!("{key} deleted while the Database lives"));
        }
    }
    // A restore holds the primary's volume: while one runs, no instance is
    // asked for, and its Job is never deleted by the loop.
    let running_restore = |cluster: &Cluster| {
        cluster.objects().find_map(|(k, o)| {
            let running = o.pointer("/status/conditions/0").is_none();
            (k.kind == "Job" && k.name.starts_with("orders-upgrade-") && running)
                .then(|| k.name.clone())
        })
    };
    if let Some(job) = running_restore(&seen.sim.cluster)
        && let Some(sts) = sts
        && sts.pointer("/spec/replicas") != Some(&json!(0))
    {
        return Err(format!(
            "instances asked for while {job} restores: {}",
            sts["spec"]["replicas"]
        ));
    }
    if let Some(job) = deleted_by_the_loop(seen.step, "Job")
        .find(|k| k.name.starts_with("orders-upgrade-") && seen.step.running_jobs.contains(&k.name))
    {
        return Err(format!("{job} deleted while it restored"));
    }
    // The data directory moves to a new major only after that major's
    // restore Job succeeded.
    let pgdata = |cluster: &Cluster| {
        let sts = cluster.get(&sts_key)?;
        let env = sts
            .pointer("/spec/template/spec/containers/0/env")?
            .as_array()?;
        let dir = env.iter().find(|e| e["name"] == "PGDATA")?["value"].as_str()?;
        Some(dir.rsplit_once("/pg")?.1.to_string())
    };
    if let (Some(was), Some(now)) = (pgdata(seen.before_cluster), pgdata(&seen.sim.cluster))
        && was != now
    {
        let job = Key::new("batch/v1", "Job", "ns", &format!("orders-upgrade-{now}"));
        // The Job finishes in the controllers' round of the same step, just
        // before the hook is called: the cluster after the step shows it.
        let restored =
            seen.sim.cluster.get(&job).is_some_and(|j| {
                j.pointer("/status/conditions/0/type") == Some(&json!("Complete"))
            });
        if !restored {
            return Err(format!(
                "data directory moved from pg{was} to pg{now} without a restore"
            ));
        }
    }
    Ok(())
}

/// The Database's instance pods (`orders-<ordinal>`), in name order.
fn instances(cluster: &Cluster) -> Vec<String> {
    cluster
        .objects()
        .filter(|(k, _)| k.kind == "Pod" && instance_ordinal(&k.name).is_some())
        .map(|(k, _)| k.name.clone())
        .collect()
}

/// The ordinal of an instance pod's name (`orders-2`).
fn instance_ordinal(pod: &str) -> Option<u32> {
    pod.strip_prefix("orders-")?.parse().ok()
}

/// What the role ConfigMap says: the designated primary and the epoch.
fn role(cluster: &Cluster) -> Option<(String, u64)> {
    let map = cluster.get(&Key::new("v1", "ConfigMap", "ns", "orders-role"))?;
    let primary = map.pointer("/data/primary")?.as_str()?.to_string();
    let epoch = map.pointer("/data/epoch")?.as_str()?.parse().ok()?;
    Some((primary, epoch))
}

/// True when the role ConfigMap publishes its designation as a
/// switchover's (`change: switchover`).
fn published_as_switchover(cluster: &Cluster) -> bool {
    cluster
        .get(&Key::new("v1", "ConfigMap", "ns", "orders-role"))
        .and_then(|map| map.pointer("/data/change"))
        .is_some_and(|c| c == "switchover")
}

/// The pod the read-write Service selects by name, `Ok(None)` when there
/// is no such Service, an error when it selects pods by anything else.
fn read_write_pod(cluster: &Cluster) -> Result<Option<String>, String> {
    let Some(service) = cluster.get(&Key::new("v1", "Service", "ns", "orders")) else {
        return Ok(None);
    };
    let selector = service.pointer("/spec/selector").and_then(Value::as_object);
    let pod = selector.and_then(|s| s.get(POD_NAME_LABEL)?.as_str());
    let Some(pod) = pod else {
        return Err(format!(
            "the read-write Service selects more than one pod: {}",
            service["spec"]["selector"]
        ));
    };
    // And nothing but that pod, whatever else the selector says.
    let selected: Vec<&Key> = cluster
        .objects()
        .filter(|(k, _)| k.kind == "Pod")
        .filter(|(_, p)| {
            selector.into_iter().flatten().all(|(label, value)| {
                p.pointer(&format!("/metadata/labels/{}", label.replace('/', "~1"))) == Some(value)
            })
        })
        .map(|(k, _)| k)
        .collect();
    if selected.len() > 1 {
        return Err(format!("the read-write Service selects {selected:?}"));
    }
    Ok(Some(pod.to_string()))
}

/// The Database's `spec.failover.delay`, in seconds (3 when unset).
fn failover_delay(parent: &Value) -> i64 {
    parent
        .pointer("/spec/failover/delay")
        .and_then(Value::as_i64)
        .unwrap_or(3)
}

/// True when a planned switchover runs: the status says so, or the
/// promote Job of the role's designation promotes in switchover mode (it
/// may have failed). Only a rollout asks for one in these lives (they never
/// annotate): the fencing rule checks that each such Job was made during
/// one.
fn is_planned(status: &Value, cluster: &Cluster, role: Option<&(String, u64)>) -> bool {
    let mode = role.and_then(|(pod, epoch)| {
        let ordinal = instance_ordinal(pod)?;
        let job = cluster.get(&Key::new(
            "batch/v1",
            "Job",
            "ns",
            &format!("orders-promote-{epoch}-{ordinal}"),
        ))?;
        job_mode(job)
    });
    status_condition(status, "FailingOver").is_some_and(|c| c["reason"] == "SwitchingOver")
        || mode.is_some_and(|m| m == "switchover")
}

/// What a Database's life showed of its primary, for the failover rules.
#[derive(Default)]
struct Primaries {
    /// Since when each instance (by pod uid) has been seen not ready, as
    /// the cluster showed it after every step (the loop's own record, not
    /// the pods' `lastTransitionTime`, which the model writes and the hook
    /// reads).
    not_ready_since: RefCell<BTreeMap<String, (String, Timestamp)>>,
    /// The highest epoch the role ConfigMap has said.
    role_epoch: Cell<u64>,
    /// The highest epoch the status has said.
    status_epoch: Cell<u64>,
    /// When a scripted failure last held the instances.
    held_since: Cell<Option<Timestamp>>,
    /// The role epochs a planned switchover designated.
    planned_epochs: RefCell<BTreeSet<u64>>,
}

/// The failover rules, for one step (issue 21):
/// - never two designated primaries: the role ConfigMap names one
///   instance, the read-write Service selects exactly that pod (or, in a
///   step Metacontroller was killed in the middle of writing, the one it
///   named before), and the status lists at most one instance as primary;
/// - the epoch, in the role ConfigMap and in the status, only grows;
/// - progress: a primary down for 30 s past the delay while another
///   instance stays ready has been replaced (unless a scripted failure,
///   an upgrade, a restore, a refused spec or a deletion holds it);
/// - no promotion before the delay: a new epoch designates another
///   instance only once the primary that served (the status's
///   `currentPrimary`) has been not ready for `spec.failover.delay`, and a
///   promote Job is created only for the instance and epoch the role
///   ConfigMap named before that step (fencing first), which the read-write
///   Service (if there is one) selects by the end of it. (The old primary may come back
///   between the designation and its Job: the change then goes on.)
fn failover_rule(seen: &Seen<'_>, primaries: &Primaries) -> Result<(), String> {
    let cluster = &seen.sim.cluster;
    let now = cluster.now;
    {
        let mut since = primaries.not_ready_since.borrow_mut();
        for pod in instances(cluster) {
            let object = cluster.get(&Key::new("v1", "Pod", "ns", &pod));
            let uid = object.and_then(|o| o.pointer("/metadata/uid")?.as_str());
            let uid = uid.unwrap_or_default().to_string();
            if object.is_some_and(is_ready_pod) {
                since.remove(&pod);
            } else if since.get(&pod).is_none_or(|(was, _)| *was != uid) {
                // A pod made again is a new start: its time begins anew.
                since.insert(pod, (uid, now));
            }
        }
    }
    let not_ready_for = |pod: &str| {
        primaries
            .not_ready_since
            .borrow()
            .get(pod)
            .map_or(0, |(_, since)| now.duration_since(*since).as_secs())
    };
    let status = seen.sim.parent().map(|p| &p["status"]);
    let role_now = role(cluster);
    let role_before = role(seen.before_cluster);
    // Who is designated: the role ConfigMap, or while a user deleted it,
    // what the status says.
    let designated = role_now.as_ref().map(|(p, _)| p.clone()).or_else(|| {
        let status = status?;
        let pod = status
            .get("targetPrimary")
            .or(status.get("currentPrimary"))?;
        pod.as_str().map(String::from)
    });
    if let Some((primary, _)) = &role_now
        && instance_ordinal(primary).is_none()
    {
        return Err(format!(
            "the role ConfigMap names {primary:?}, not one instance"
        ));
    }
    // A planned switchover (only a rollout asks for one in these lives)
    // keeps the read-write Service on the primary that serves until the
    // candidate is promoted.
    // A switchover's designation stays planned while its promotion is
    // refused, also once its failed Job is deleted while a refused spec
    // freezes the status (the Service then stays on the primary that
    // serves, as it must).
    let planned = match (status, role_now.as_ref()) {
        (Some(s), Some((_, epoch))) if is_planned(s, cluster, role_now.as_ref()) => {
            primaries.planned_epochs.borrow_mut().insert(*epoch);
            true
        }
        (Some(s), Some((_, epoch))) => {
            primaries.planned_epochs.borrow().contains(epoch)
                && status_condition(s, "FailingOver")
                    .is_some_and(|c| c["reason"] == "PromoteRefused")
        }
        _ => status.is_some_and(|s| is_planned(s, cluster, None)),
    };
    let serving = status
        .and_then(|s| s["currentPrimary"].as_str())
        .map(String::from);
    let designated = if planned { serving } else { designated };
    if let (Some(pod), Some(designated)) = (read_write_pod(cluster)?, &designated)
        && &pod != designated
    {
        let named_before = role_before.as_ref().is_some_and(|(p, _)| *p == pod);
        if !(seen.step.interrupted && named_before) {
            return Err(format!(
                "the read-write Service selects {pod}, the designated primary is {designated}"
            ));
        }
    }
    let primaries_listed = status
        .and_then(|s| s["instances"].as_array())
        .into_iter()
        .flatten()
        .filter(|i| i["role"] == "primary")
        .count();
    if primaries_listed > 1 {
        return Err(format!(
            "{primaries_listed} instances listed as primary: {}",
            status.map_or(Value::Null, |s| s["instances"].clone())
        ));
    }
    // The epochs only grow.
    if let Some(epoch) = status.and_then(|s| s["primaryEpoch"].as_u64()) {
        if epoch < primaries.status_epoch.get() {
            return Err(format!(
                "status.primaryEpoch went from {} to {epoch}",
                primaries.status_epoch.get()
            ));
        }
        primaries.status_epoch.set(epoch);
    }
    if let Some((primary, epoch)) = &role_now {
        let highest = primaries.role_epoch.get();
        if *epoch < highest {
            return Err(format!(
                "the role ConfigMap's epoch went from {highest} to {epoch}"
            ));
        }
        primaries.role_epoch.set(*epoch);
        // A new epoch: no promotion before the delay.
        let serving = seen
            .before
            .pointer("/status/currentPrimary")
            .and_then(Value::as_str)
            .map(String::from)
            .or_else(|| role_before.as_ref().map(|(p, _)| p.clone()))
            .unwrap_or_else(|| "orders-0".to_string());
        let delay = failover_delay(seen.before);
        // A change of primary already under way (its delay passed when it
        // began) that moves on to another candidate, the one designated
        // having failed (its volume lost, say), is not a new failover.
        let under_way = status_condition(&seen.before["status"], "FailingOver")
            .is_some_and(|c| c["status"] == "True");
        if *epoch > highest
            && *primary != serving
            && not_ready_for(&serving) < delay
            && !planned
            && !under_way
        {
            return Err(format!(
                "{primary} designated at epoch {epoch} when {serving} had been not ready for {}s, under the {delay}s delay",
                not_ready_for(&serving)
            ));
        }
    }
    // Progress while it happens: a primary down well past the delay while
    // another instance stays ready has been replaced, unless something
    // else holds the instances or a person must look (a scripted failure,
    // an upgrade or a restore, a refused spec, a deletion).
    // A failing promote Job holds a change of primary until a person (the
    // healing) deletes it; the clock starts again then. No other failing
    // Job does (a failed backup, snapshot or grow must not keep the
    // primary down); an uninitialized Database never fails over (the init
    // Job failing holds it there).
    let is_promote = |job: &str| job.starts_with("orders-promote-");
    if cluster.failing_jobs.iter().any(|j| is_promote(j))
        || failed_jobs_in(seen.before_cluster).any(is_promote)
    {
        primaries.held_since.set(Some(now));
    }
    let held_since = primaries.held_since.get().unwrap_or(Timestamp::UNIX_EPOCH);
    let answered = matches!(seen.step.outcome, Outcome::Answered { .. });
    let initialized = status.is_some_and(|s| {
        s["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Initialized" && c["status"] == "True")
        })
    });
    let held = !initialized
        || status.is_some_and(|s| s["phase"] == "Upgrading" || s["phase"] == "Restoring");
    if let Some((primary, _)) = &role_now
        && answered
        && !held
        && !is_deleting(seen.before)
        && now.duration_since(held_since).as_secs() >= failover_delay(seen.before) + 30
        && not_ready_for(primary) >= failover_delay(seen.before) + 30
    {
        let size = match seen.before.pointer("/spec/size").and_then(Value::as_str) {
            Some("large") => 3,
            Some("medium") => 2,
            _ => 1,
        };
        let ready_in = |c: &Cluster, pod: &str| {
            c.get(&Key::new("v1", "Pod", "ns", pod))
                .is_some_and(is_ready_pod)
        };
        let standby = instances(cluster).into_iter().find(|pod| {
            pod != primary
                && instance_ordinal(pod).is_some_and(|o| o < size)
                && ready_in(cluster, pod)
                && ready_in(seen.before_cluster, pod)
        });
        if let Some(standby) = standby {
            return Err(format!(
                "{primary} has been not ready for {}s (delay {}s) while {standby} is ready, and nothing replaced it",
                not_ready_for(primary),
                failover_delay(seen.before)
            ));
        }
    }
    // A designation published as a switchover's is a rollout's (no
    // annotation asks for one in these lives).
    let rolling = status
        .and_then(|s| status_condition(s, "Upgrading"))
        .is_some_and(|c| c["reason"] == "RollingUpdate");
    if role_now != role_before && published_as_switchover(cluster) && !rolling {
        return Err(format!(
            "the role ConfigMap publishes {role_now:?} as a switchover, and no rollout asked for one"
        ));
    }
    // Fencing first: a promote Job only for what the role named before.
    for change in seen.step.changes.iter().filter(|c| {
        c.verb == Verb::Created
            && c.actor != Actor::User
            && c.key.kind == "Job"
            && c.key.name.starts_with("orders-promote-")
    }) {
        let job = &change.key.name;
        let (epoch, ordinal) = job["orders-promote-".len()..]
            .split_once('-')
            .ok_or_else(|| format!("{job}: not a promote Job's name"))?;
        let candidate = format!("orders-{ordinal}");
        let fenced = role_before
            .as_ref()
            .is_some_and(|(p, e)| *p == candidate && e.to_string() == epoch);
        if !fenced {
            return Err(format!(
                "{job} created while the role ConfigMap said {role_before:?}: nothing is promoted before every instance can read who the primary is"
            ));
        }
        let switches = cluster
            .get(&change.key)
            .and_then(job_mode)
            .is_some_and(|m| m == "switchover");
        // A switchover is one from its designation: the Job made again
        // (its failed one deleted) after the rollout gave way to a major
        // upgrade is still one, as the role ConfigMap published it.
        if switches && !rolling && !published_as_switchover(seen.before_cluster) {
            return Err(format!("{job} switches over, and no rollout asked for it"));
        }
        // (No read-write Service at all, as while deleting, routes nothing.)
        let selected = read_write_pod(cluster)?;
        let routed = if planned {
            designated.clone()
        } else {
            Some(candidate)
        };
        if !seen.step.interrupted && selected.is_some() && selected != routed {
            return Err(format!(
                "{job} created while the read-write Service selects {selected:?}"
            ));
        }
    }
    Ok(())
}

/// Found by a helper's run of the lives: a user deleted the read-only
/// Service's EndpointSlice while the Database was being deleted (its
/// snapshot failing), and the finalize answer created it again. Deletion
/// only moves forward: what is gone stays gone.
#[test]
fn regression_nothing_deleted_is_created_again_while_deleting() {
    let parent = orders("14", "small", "Snapshot");
    let script = [
        Scripted::FailJob("orders-snapshot".into()),
        Scripted::DeleteParent,
        Scripted::DeleteChild(4),
    ];
    let result = live(
        &operator("database"),
        parent,
        0,
        &script,
        |_| {},
        database_rule,
        database_reached,
    );
    assert!(result.is_ok(), "{}", result.unwrap_err());
}

/// Found by the lives on a merge (issue 22): a medium Database rolls out a
/// new image while its standby is down, is asked to downgrade (refused),
/// and is deleted once the standby is back. The deletion let the rollout
/// switch over while its status reported the downgrade as an upgrade's
/// backup: a switchover no rollout was seen to ask for.
#[test]
fn regression_a_switchover_while_deleting_is_the_rollout_s() {
    let script = [
        Scripted::StandbyNotReady(0),
        Scripted::Spec("imageName", json!("pg/postgres@sha256:01")),
        Scripted::Spec("version", json!("14")),
    ];
    scripted_database_life(orders("16", "medium", "Delete"), &script);
}

/// One Database life of `script`, under the database, rollout and
/// failover rules, that must reach its spec and finish its deletion.
fn scripted_database_life(parent: Value, script: &[Scripted]) {
    let primaries = Primaries::default();
    let rule = |seen: &Seen<'_>| {
        database_rule(seen)?;
        rollout_rule(seen)?;
        failover_rule(seen, &primaries)
    };
    let result = live(
        &operator("database"),
        parent,
        0,
        script,
        |_| {},
        rule,
        database_reached,
    );
    assert!(result.is_ok(), "{}", result.unwrap_err());
}

/// Events in the middle of a change, named in issue 18, each run as a
/// whole life: the rules after every step, progress, a finished deletion.
#[test]
fn events_mid_flight() {
    // Jobs run for three steps, so each step of an upgrade (backup, stop,
    // restore, start) is in flight for a while; the event arrives after
    // 1 to 12 steps of it.
    let slow_jobs = |sim: &mut Simulation<'_>| sim.cluster.job_steps = 3;
    let database_life = |script: &[Scripted], what: &str| {
        let primaries = Primaries::default();
        let result = live(
            &operator("database"),
            orders("15", "medium", "Snapshot"),
            0,
            script,
            slow_jobs,
            |seen| database_rule(seen).and_then(|()| failover_rule(seen, &primaries)),
            database_reached,
        );
        assert!(result.is_ok(), "{what}: {}", result.unwrap_err());
    };
    let events: [(&str, Scripted); 3] = [
        ("a delete during an upgrade", Scripted::DeleteParent),
        (
            "a spec change while a Job runs",
            Scripted::Spec("version", json!("17")),
        ),
        (
            "a size change during an upgrade",
            Scripted::Spec("size", json!("large")),
        ),
    ];
    for (reason, event) in events {
        for soon in 1..=12 {
            let script = [
                Scripted::Spec("version", json!("16")),
                Scripted::Soon(soon),
                event.clone(),
            ];
            database_life(&script, &format!("{reason}, after {soon} steps"));
        }
    }
    // Metacontroller killed in the middle of a sync during an upgrade and
    // during a deletion: after each number of its writes, at each moment.
    for (reason, first) in [
        ("during an upgrade", Scripted::Spec("version", json!("16"))),
        ("during a deletion", Scripted::DeleteParent),
    ] {
        let writes = [0, 1, 2, 3, 5, 8, 13];
        for (soon, writes) in (1..=8).flat_map(|soon| writes.map(move |w| (soon, w))) {
            let script = [
                first.clone(),
                Scripted::Soon(soon),
                Scripted::Restart(writes),
            ];
            database_life(
                &script,
                &format!("a restart {reason}, after {soon} steps and {writes} writes"),
            );
        }
    }
    let rollout = [
        Scripted::Spec("image", json!("nginx:1.28")),
        Scripted::Soon(2),
        Scripted::HookDown(3),
    ];
    let result = live(
        &operator("webserver"),
        web(3),
        0,
        &rollout,
        |_| {},
        |_| Ok(()),
        webserver_reached,
    );
    assert!(
        result.is_ok(),
        "a hook outage in the middle of a rollout: {}",
        result.unwrap_err()
    );
}

/// Events in the middle of a failover (issue 21), each run as a whole
/// life: the primary of a large Database is killed and stays down until the
/// life ends; 1 to 8 steps later (within the delay, at the designation, at
/// the fence, while the promote Job runs, after it), the role ConfigMap or
/// the read-write Service is deleted, Metacontroller restarts after some
/// writes, promote Jobs fail, a standby goes down, the size shrinks or the
/// parent is deleted. The rules hold after every step, and every life ends
/// with one ready primary.
#[test]
fn failover_events_mid_flight() {
    let slow_jobs = |sim: &mut Simulation<'_>| sim.cluster.job_steps = 3;
    let mut events = vec![
        (
            "the role ConfigMap deleted",
            Scripted::Delete("ConfigMap", "orders-role"),
        ),
        (
            "the read-write Service deleted",
            Scripted::Delete("Service", "orders"),
        ),
        (
            "promote Jobs failing",
            Scripted::FailJob("orders-promote-*".into()),
        ),
        ("a standby down", Scripted::StandbyNotReady(0)),
        ("a smaller size", Scripted::Spec("size", json!("medium"))),
        ("a deletion", Scripted::DeleteParent),
    ];
    for writes in [0, 1, 2, 3, 5, 8, 13] {
        events.push(("a restart", Scripted::Restart(writes)));
    }
    for soon in 1..=8 {
        for (reason, event) in &events {
            let script = [
                Scripted::KillPrimaryFor(0),
                Scripted::Soon(soon),
                event.clone(),
            ];
            let primaries = Primaries::default();
            let result = live(
                &operator("database"),
                orders("16", "large", "Snapshot"),
                0,
                &script,
                slow_jobs,
                |seen| database_rule(seen).and_then(|()| failover_rule(seen, &primaries)),
                database_reached,
            );
            assert!(
                result.is_ok(),
                "{reason} {event:?}, {soon} steps after kill-primary: {}",
                result.unwrap_err()
            );
        }
    }
}

/// Only a failing promote Job holds a failover (issue 32): with another
/// Job failing (here the snapshot's, scripted to fail whenever it runs),
/// a primary killed for good is still replaced within the delay and 30 s,
/// as the failover rule demands.
#[test]
fn another_failing_job_does_not_hold_a_failover() {
    let script = [
        Scripted::FailJob("orders-snapshot".into()),
        Scripted::KillPrimaryFor(0),
    ];
    let primaries = Primaries::default();
    let result = live(
        &operator("database"),
        orders("16", "large", "Snapshot"),
        0,
        &script,
        |_| {},
        |seen| database_rule(seen).and_then(|()| failover_rule(seen, &primaries)),
        database_reached,
    );
    assert!(result.is_ok(), "{}", result.unwrap_err());
}

/// The restart event stops Metacontroller after that many writes of its
/// next sync: the rest of the answer and the status are never written.
#[test]
fn a_restart_loses_what_metacontroller_had_not_written() {
    let op = operator("webserver");
    let mut sim = Simulation::new(&op, web(3), start(), 0).unwrap();
    sim.apply(&Event::RestartMetacontroller(1)).unwrap();
    let step = sim.step();
    let created: Vec<&Key> = step
        .changes
        .iter()
        .filter(|c| c.verb == Verb::Created)
        .map(|c| &c.key)
        .collect();
    assert_eq!(created.len(), 1, "one write, then the restart: {created:?}");
    assert!(
        sim.parent().unwrap().get("status").is_none(),
        "no status written"
    );
    let step = sim.step();
    assert_eq!(
        step.changes
            .iter()
            .filter(|c| c.verb == Verb::Created)
            .count(),
        2,
        "the next sync writes the rest"
    );
    assert!(sim.parent().unwrap().get("status").is_some());
}

/// A Database created again, with `spec.bootstrap`, over the volumes an
/// earlier one retained: it serves their data and never restores over it
/// (no restore Job, ever), nor starts an empty cluster beside them (the
/// StatefulSet takes the claims that are there).
#[test]
fn a_database_created_over_retained_volumes_serves_them_and_never_restores() {
    let mut parent = orders("16", "medium", "Retain");
    parent["spec"]["bootstrap"] = json!({"database": "orders"});
    let retained = ["data-orders-0", "data-orders-1"];
    // Made by the earlier Database, a day before this one.
    let setup = |sim: &mut Simulation<'_>| {
        let now = sim.cluster.now;
        sim.cluster.now = now
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_hours(24))
            .unwrap_or(now);
        for claim in retained {
            let volume = fixtures::object("v1", "PersistentVolumeClaim", claim)
                .namespace("ns")
                .label("opshooks.io/database", "orders")
                .spec("resources", json!({"requests": {"storage": "1Gi"}}))
                .spec("storageClassName", "standard")
                .status(json!({"phase": "Bound", "capacity": {"storage": "1Gi"}}));
            sim.cluster.create(volume.json(), Actor::User);
        }
        sim.cluster.now = now;
    };
    let rule = |seen: &Seen<'_>| {
        database_rule(seen)?;
        if let Some(c) = seen.step.changes.iter().find(|c| {
            c.verb == Verb::Created
                && c.actor != Actor::User
                && c.key.kind == "PersistentVolumeClaim"
        }) {
            return Err(format!("{} created beside the retained volumes", c.key));
        }
        match seen
            .sim
            .cluster
            .objects()
            .find(|(k, _)| k.name == "orders-restore")
        {
            Some((key, _)) => Err(format!("{key} made over retained volumes")),
            None => Ok(()),
        }
    };
    let reached = |sim: &Simulation<'_>| {
        database_reached(sim)?;
        let reason = condition(sim.parent().unwrap_or(&Value::Null), "Restored")
            .map(|c| c["reason"].clone());
        match reason {
            Some(r) if r == "RetainedVolumes" => Ok(()),
            other => Err(format!("Restored reason {other:?}, not RetainedVolumes")),
        }
    };
    let scripts = [
        vec![],
        vec![Scripted::Restart(3)],
        vec![Scripted::FailJob("orders-init".into())],
        vec![Scripted::Spec("size", json!("small"))],
    ];
    for script in scripts {
        let result = live(
            &operator("database"),
            parent.clone(),
            0,
            &script,
            setup,
            rule,
            reached,
        );
        assert!(result.is_ok(), "{script:?}: {}", result.unwrap_err());
    }
}

/// Steps `sim` until it settles, with the Database's rules and the
/// failover rules checked after every step; `record` sees every step.
fn settle_database(
    sim: &mut Simulation<'_>,
    primaries: &Primaries,
    mut record: impl FnMut(&Simulation<'_>, &Step),
) -> Vec<Step> {
    let mut before = sim.parent().cloned().unwrap_or(Value::Null);
    let mut before_cluster = sim.cluster.clone();
    let (steps, settled) = sim.settle_checked(SETTLE, |sim, step| {
        let seen = Seen {
            sim,
            step,
            before: &before,
            before_cluster: &before_cluster,
        };
        let broken = database_rule(&seen).and_then(|()| failover_rule(&seen, primaries));
        assert!(
            broken.is_ok(),
            "step {}: {}",
            step.number,
            broken.unwrap_err()
        );
        assert!(step.violations.is_empty(), "{step}");
        record(sim, step);
        before = sim.parent().cloned().unwrap_or(Value::Null);
        before_cluster = sim.cluster.clone();
    });
    assert!(
        settled,
        "{}",
        steps.last().map(ToString::to_string).unwrap_or_default()
    );
    steps
}

/// Issue 21, one whole failover in the loop: a large Database settles; its
/// primary is killed; only once the delay has passed does the read-write
/// Service move to a standby, whose promote Job runs and succeeds; the
/// status reports the new primary and the failover. The old primary, back,
/// is listed as a standby, and the Service stays on the new primary.
#[test]
fn a_killed_primary_fails_over_after_the_delay_and_comes_back_as_a_standby() {
    let op = operator("database");
    let mut sim = Simulation::new(&op, orders("16", "large", "Snapshot"), start(), 0).unwrap();
    let primaries = Primaries::default();
    settle_database(&mut sim, &primaries, |_, _| {});
    assert_eq!(role(&sim.cluster), Some(("orders-0".to_string(), 0)));
    assert_eq!(read_write_pod(&sim.cluster), Ok(Some("orders-0".into())));

    sim.apply(&Event::parse("kill-primary").unwrap()).unwrap();
    // (time, the pod the read-write Service selects, the promote Jobs).
    let mut timeline: Vec<(Timestamp, Option<String>, Vec<String>)> = Vec::new();
    settle_database(&mut sim, &primaries, |sim, _| {
        let jobs = sim
            .cluster
            .objects()
            .filter(|(k, _)| k.kind == "Job" && k.name.starts_with("orders-promote-"))
            .map(|(k, o)| format!("{} {}", k.name, o["status"]["conditions"][0]["type"]))
            .collect();
        timeline.push((sim.cluster.now, read_write_pod(&sim.cluster).unwrap(), jobs));
    });
    let killed_at = timeline[0].0;
    let moved = timeline
        .iter()
        .find(|(_, pod, _)| pod.as_deref() != Some("orders-0"))
        .expect("the read-write Service moved");
    assert_eq!(
        moved.1.as_deref(),
        Some("orders-1"),
        "the first ready standby"
    );
    // The default delay, 3 s: the first of the simulation's 10 s steps
    // after it.
    assert_eq!(
        moved.0.duration_since(killed_at).as_secs(),
        10,
        "moved once the delay passed, not before: {timeline:?}"
    );
    assert!(
        moved.2.is_empty(),
        "fenced before anything is promoted: {timeline:?}"
    );
    let (_, _, jobs) = timeline.last().unwrap();
    assert_eq!(jobs, &["orders-promote-1-1 \"Complete\""]);
    let after = status(&sim);
    assert_eq!(after["currentPrimary"], "orders-1");
    assert_eq!(after["primaryEpoch"], 1);
    assert_eq!(after["lastFailover"]["from"], "orders-0");
    assert_eq!(after["lastFailover"]["to"], "orders-1");
    assert_eq!(after["lastFailover"]["epoch"], 1);
    assert!(after["lastFailover"]["at"].is_string(), "{after}");
    assert_eq!(role(&sim.cluster), Some(("orders-1".to_string(), 1)));

    sim.apply(&Event::parse("ready orders-0").unwrap()).unwrap();
    settle_database(&mut sim, &primaries, |_, _| {});
    let status = status(&sim);
    let old = status["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "orders-0")
        .cloned();
    assert_eq!(
        old,
        Some(json!({"name": "orders-0", "role": "standby", "ready": true})),
        "{status}"
    );
    assert_eq!(read_write_pod(&sim.cluster), Ok(Some("orders-1".into())));
    assert_eq!(status["currentPrimary"], "orders-1");
    primary_reached(&sim).unwrap();
}

/// A switchover a rollout asked for (small to medium changes the
/// resources), its promote Job failing, then a downgrade refused: when the
/// healing deletes the failed Job, the frozen status no longer says
/// SwitchingOver, and the Service rightly stays on the serving primary.
#[test]
fn regression_a_planned_switchover_stays_planned_once_its_job_is_deleted() {
    let script = [
        Scripted::FailJob("orders-promote-*".to_string()),
        Scripted::Spec("size", json!("medium")),
        Scripted::Spec("version", json!("14")),
    ];
    scripted_database_life(orders("15", "small", "Snapshot"), &script);
}

/// Issue 22, storage growth in the loop: a medium Database grows from 1Gi
/// to 2Gi; every claim comes to request and hold 2Gi through one grow Job
/// under its own Role, the grow objects go once done, and the StatefulSet's
/// claim template keeps the size it was created with (the API server
/// refuses a change there). Scaled to large, the third instance's claim,
/// made at 1Gi from that template, is grown the same way by another Job.
/// No grow Job is ever created twice.
#[test]
fn a_grown_storage_reaches_every_claim_and_a_claim_made_later() {
    let op = operator("database");
    let mut sim = Simulation::new(&op, orders("16", "medium", "Delete"), start(), 0).unwrap();
    let primaries = Primaries::default();
    settle_database(&mut sim, &primaries, |_, _| {});
    let created: RefCell<Vec<String>> = RefCell::default();
    let record = |_: &Simulation<'_>, step: &Step| {
        created.borrow_mut().extend(
            step.changes
                .iter()
                .filter(|c| c.verb == Verb::Created && c.key.kind == "Job")
                .filter(|c| c.key.name.starts_with("orders-grow-"))
                .map(|c| c.key.name.clone()),
        );
    };
    let grown = |sim: &Simulation<'_>, claims: u32| {
        for i in 0..claims {
            let key = Key::new(
                "v1",
                "PersistentVolumeClaim",
                "ns",
                &format!("data-orders-{i}"),
            );
            let claim = sim.cluster.get(&key).expect("the claim exists");
            assert_eq!(
                claim["spec"]["resources"]["requests"]["storage"], "2Gi",
                "{key}"
            );
            assert_eq!(claim["status"]["capacity"]["storage"], "2Gi", "{key}");
        }
        let parent = sim.parent().unwrap();
        let resized = condition(parent, "StorageResized").expect("StorageResized shown");
        assert_eq!(resized["status"], "True", "{resized}");
        assert_eq!(resized["reason"], "AsRequested", "{resized}");
        storage_reached(sim).unwrap();
        let sts = Key::new("apps/v1", "StatefulSet", "ns", "orders");
        let template = &sim.cluster.get(&sts).unwrap()["spec"]["volumeClaimTemplates"][0];
        assert_eq!(template["spec"]["resources"]["requests"]["storage"], "1Gi");
    };

    sim.apply(&Event::parse(r#"spec.storage.size="2Gi""#).unwrap())
        .unwrap();
    settle_database(&mut sim, &primaries, record);
    grown(&sim, 2);
    assert_eq!(created.borrow().len(), 1, "one grow Job: {created:?}");

    sim.apply(&Event::parse(r#"spec.size="large""#).unwrap())
        .unwrap();
    settle_database(&mut sim, &primaries, record);
    grown(&sim, 3);
    let created = created.into_inner();
    assert_eq!(
        created.len(),
        2,
        "another grow Job, for the new claim: {created:?}"
    );
    let unique: BTreeSet<&String> = created.iter().collect();
    assert_eq!(
        unique.len(),
        created.len(),
        "a grow Job made twice: {created:?}"
    );
}

/// Found by database_lives once it grew the storage at random (the seed,
/// not the storage): a downgrade the hook refuses freezes the syncs, the
/// primary's volume is lost meanwhile (no failover while refused), the
/// size goes down to small, and the Database is deleted. The deletion
/// scaled the StatefulSet to the size, stopping the one standby that held
/// the data, and failed over to no one (the candidates were bounded by the
/// size): the snapshot waited for a primary for ever. Now a deletion keeps
/// the instances that run, and a standby still running above a smaller
/// size may take over.
#[test]
fn regression_a_deletion_keeps_the_standby_a_lost_primary_needs() {
    let script = [
        Scripted::Spec("version", json!("14")),
        Scripted::LoseVolume(0),
        Scripted::Spec("size", json!("small")),
    ];
    scripted_database_life(orders("16", "medium", "Snapshot"), &script);
}

/// Found by database_lives once grow Jobs could fail at random (the seed,
/// not the Job): the primary's volume is lost, and one step later, before
/// the failover delay has passed, the size goes down to small. The
/// StatefulSet was scaled to the size at once, stopping the one standby
/// holding the data, and the primary refused its empty volume for ever
/// (Degraded). Now a smaller size waits while the designated primary is
/// not ready; the standby takes over, and the instances are kept up to it.
#[test]
fn regression_a_smaller_size_waits_while_the_primary_is_down() {
    let script = [
        Scripted::LoseVolume(0),
        Scripted::Soon(1),
        Scripted::Spec("size", json!("small")),
    ];
    scripted_database_life(orders("14", "medium", "Snapshot"), &script);
}

/// Found by a CI run of database_lives: a rollout's switchover whose
/// promote Jobs fail, the primary orders-2 killed and failed over from
/// (epoch 3, orders-1 designated), then orders-1's volume lost before it
/// is promoted. The hook moves on to orders-0 (epoch 4) while orders-2,
/// back, is ready: the change under way goes on with another candidate.
/// The failover rule took that for a new failover before the delay; it is
/// the same one, whose delay had passed. (A rule fix: the hook was right.)
#[test]
fn regression_a_failover_under_way_moves_on_from_a_lost_candidate() {
    let script = [
        Scripted::Spec(
            "affinity",
            json!({"nodeSelector": {"pool": "databases"}, "tolerations": [{"effect": "NoSchedule", "key": "dedicated", "value": "databases"}]}),
        ),
        Scripted::Spec("imageName", json!("pg/postgres@sha256:01")),
        Scripted::FailJob("orders-promote-*".to_string()),
        Scripted::KillPrimaryFor(4),
        Scripted::LoseVolume(1),
    ];
    scripted_database_life(orders("14", "large", "Snapshot"), &script);
}

/// Found by database_lives (random, again after its seed was saved): the
/// pre-upgrade dump of a major upgrade fails, and the resources change.
#[test]
fn regression_a_rollout_while_a_major_upgrade_waits_on_its_dump() {
    let script = [
        Scripted::FailJob("orders-pre-upgrade-16".into()),
        Scripted::Spec("version", json!("16")),
        Scripted::Spec(
            "resources",
            json!({"limits": {"memory": "1Gi"}, "requests": {"cpu": "250m", "memory": "1Gi"}}),
        ),
    ];
    scripted_database_life(orders("14", "medium", "Snapshot"), &script);
}

/// Found by database_lives (random): promote Jobs failing, a parameter
/// change that needs a restart (a rollout: its switchover Job fails), then
/// a major upgrade, which the change of primary holds. Healed, the failed
/// Job deleted, the switchover's Job is made again while `Upgrading` says
/// the major upgrade: a switchover from its designation, as the role
/// ConfigMap publishes it. The rule took it for one no rollout asked for.
/// (A rule fix: the hook was right.)
#[test]
fn regression_a_rollouts_failed_switchover_retried_during_a_major_upgrade() {
    let script = [
        Scripted::FailJob("orders-promote-*".to_string()),
        Scripted::Spec(
            "postgresql",
            json!({"parameters": {"max_connections": "200", "work_mem": "8MB"}}),
        ),
        Scripted::Spec("version", json!("15")),
    ];
    scripted_database_life(orders("14", "medium", "Snapshot"), &script);
}
