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
use backup::target;

mod backup;
mod database;
mod memcached;
mod webserver;

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
    // docs/deletion.md says a deletion waits for a person.
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
    // except where docs/deletion.md says a person must act: volumes a StatefulSet
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
/// is saved (with its seed) to `<file>.proptest-regressions` beside the
/// operator's file (`database/mod.proptest-regressions`)
/// and replayed first on every later run, so a failure found in CI can be
/// replayed here from the minimal input it prints.
fn config() -> ProptestConfig {
    super::support::proptest_config(256)
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
