//! The Database's rules, checked after every step of a life: nothing the
//! data needs is deleted, a restore never runs over data, a rollout moves
//! one instance at a time, and a failover never leaves two primaries or
//! promotes before the delay.

use super::*;

/// A rollout never restarts the serving primary: no instance the status
/// named the current primary, with no change of primary under way, is
/// deleted by the StatefulSet controller while the StatefulSet still runs
/// its ordinal, unless it is the only instance (nothing to switch over
/// to). Scaled to nothing (a major upgrade), or a StatefulSet deleted and
/// made again, is not a rollout. The controllers act before the hook's
/// answer is applied, so the StatefulSet they acted on is the one before
/// the step: a single instance restarted for its new image while the
/// answer grows it to three is the one-instance rollout.
pub(super) fn rollout_rule(seen: &Seen<'_>) -> Result<(), String> {
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

/// What a Database's life showed so far, for the rules that look back.
#[derive(Default)]
pub(super) struct History {
    /// The restore Job was seen succeeded.
    restored: Cell<bool>,
    /// The init Job was seen: the Database was initialized.
    initialized: Cell<bool>,
}

/// What a bootstrapped Database makes only once its data is in (the
/// restore succeeded, or the recovered primary was ready): what serves,
/// dumps or initializes it.
const SERVING_AFTER_RESTORE: [(&str, &str); 4] = [
    ("Service", "orders"),
    ("CronJob", "orders-backup"),
    ("Job", "orders-snapshot"),
    ("Job", "orders-init"),
];

/// The bootstrap's rules, for one step: nothing serves (the read-write
/// Service), is backed up on a schedule or snapshotted before the restore
/// succeeded, and no restore Job is ever made for a Database that was
/// initialized.
pub(super) fn restore_rule(seen: &Seen<'_>, history: &History) -> Result<(), String> {
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
    if seen.before.pointer("/spec/bootstrap/archive").is_some() {
        return recovery_rule(seen, history, &created);
    }
    let bootstrapped = seen.before.pointer("/spec/bootstrap").is_some();
    let restoring = bootstrapped
        && !history.restored.get()
        && (has("Job", "orders-restore") || created("Job", "orders-restore"));
    if restoring {
        for (kind, name) in SERVING_AFTER_RESTORE {
            if has(kind, name) {
                return Err(format!("{kind} {name} exists before the restore succeeded"));
            }
        }
    }
    Ok(())
}

/// The rules of a recovery from an archive (`spec.bootstrap.archive`),
/// for one step: no restore Job, ever; nothing serves, initializes or is
/// backed up before the designated primary was seen ready, at the start
/// or the end of the step (the recovered
/// primary: its server starts only once the replay promoted it) or the
/// role said the Database holds data (retained volumes: nothing is
/// recovered over them); and once the role said `initialized=true`, it
/// never says `false` again (an emptied volume would fetch the source's
/// data in place of this Database's).
fn recovery_rule(
    seen: &Seen<'_>,
    history: &History,
    created: &dyn Fn(&str, &str) -> bool,
) -> Result<(), String> {
    if created("Job", "orders-restore") {
        return Err("a restore Job made for a recovery from an archive".into());
    }
    let initialized = |cluster: &Cluster| {
        cluster
            .get(&Key::new("v1", "ConfigMap", "ns", "orders-role"))
            .and_then(|c| c.pointer("/data/initialized")?.as_str().map(str::to_string))
    };
    let designated_ready = |cluster: &Cluster| {
        role(cluster).is_some_and(|(pod, _)| {
            cluster
                .get(&Key::new("v1", "Pod", "ns", &pod))
                .is_some_and(is_ready_pod)
        })
    };
    // The hook answers from the cluster as it was at some point of the
    // step: ready before or after it counts.
    let before = seen.before_cluster;
    let recovered = history.restored.get()
        || designated_ready(before)
        || designated_ready(&seen.sim.cluster)
        || initialized(before).as_deref() == Some("true");
    if !recovered {
        for (kind, name) in SERVING_AFTER_RESTORE {
            if created(kind, name) {
                return Err(format!(
                    "{kind} {name} made before the recovered primary was ever ready"
                ));
            }
        }
    }
    let now = initialized(&seen.sim.cluster);
    if history.initialized.get() && now.as_deref() == Some("false") {
        return Err("the role says initialized=false after it said true".into());
    }
    history
        .initialized
        .set(history.initialized.get() || now.as_deref() == Some("true"));
    history.restored.set(recovered);
    Ok(())
}

/// The Database's data-safety rules, for one step.
pub(super) fn database_rule(seen: &Seen<'_>) -> Result<(), String> {
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

/// What the role ConfigMap says: the designated primary and the epoch.
pub(super) fn role(cluster: &Cluster) -> Option<(String, u64)> {
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
pub(super) fn read_write_pod(cluster: &Cluster) -> Result<Option<String>, String> {
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
pub(super) struct Primaries {
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
pub(super) fn failover_rule(seen: &Seen<'_>, primaries: &Primaries) -> Result<(), String> {
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
        // A switchover whose old primary no longer serves (every pod made
        // again, the old one fenced by the role ConfigMap) routes as a
        // failover does: to the candidate, which refuses writes until it
        // is promoted.
        let selected = read_write_pod(cluster)?;
        let routed = match &designated {
            Some(serving) if planned => Some(serving.clone()),
            _ => Some(candidate),
        };
        if !seen.step.interrupted && selected.is_some() && selected != routed {
            return Err(format!(
                "{job} created while the read-write Service selects {selected:?}"
            ));
        }
    }
    Ok(())
}

/// The base backups the archive's ConfigMap asks for: (name, pod,
/// checkpoint) per line.
pub(super) fn base_backups_asked(cluster: &Cluster) -> Vec<(String, String, String)> {
    let map = cluster.get(&Key::new("v1", "ConfigMap", "ns", "orders-archive"));
    let text = map
        .and_then(|m| m.pointer("/data/base-backup"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut words = line.split(' ').map(str::to_string);
            Some((words.next()?, words.next()?, words.next()?))
        })
        .collect()
}

/// The ready instances of `cluster` other than `primary` that its
/// StatefulSet keeps (one scaled away is not asked for anything).
pub(super) fn ready_standbys(cluster: &Cluster, primary: &str) -> Vec<String> {
    let kept = cluster
        .get(&Key::new("apps/v1", "StatefulSet", "ns", "orders"))
        .and_then(|s| s.pointer("/spec/replicas")?.as_u64())
        .unwrap_or(0);
    instances(cluster)
        .into_iter()
        .filter(|pod| pod != primary)
        .filter(|pod| instance_ordinal(pod).is_some_and(|o| u64::from(o) < kept))
        .filter(|pod| {
            cluster
                .get(&Key::new("v1", "Pod", "ns", pod))
                .is_some_and(is_ready_pod)
        })
        .collect()
}

/// The rule: a base backup is never asked of the primary while a
/// standby is ready, and only a standby's is taken with an immediate
/// checkpoint. The hook answers from the cluster as it was at some point
/// of the step, so a readiness or a primary that changed within the step
/// decides nothing: the rule holds where before and after agree. Only an
/// answer applied whole counts: a refused spec (a downgrade) or a hook
/// that is down leaves the ConfigMap as the last answer wrote it.
pub(super) fn base_backup_rule(seen: &Seen<'_>) -> Result<(), String> {
    if !matches!(seen.step.outcome, Outcome::Answered { .. }) || seen.step.interrupted {
        return Ok(());
    }
    let primary = |cluster: &Cluster| role(cluster).map(|(pod, _)| pod);
    let (Some(was), Some(is)) = (primary(seen.before_cluster), primary(&seen.sim.cluster)) else {
        return Ok(());
    };
    for (name, pod, checkpoint) in base_backups_asked(&seen.sim.cluster) {
        let standby_ready = [seen.before_cluster, &seen.sim.cluster]
            .iter()
            .map(|c| ready_standbys(c, &is))
            .reduce(|a, b| a.into_iter().filter(|p| b.contains(p)).collect())
            .unwrap_or_default();
        if was == is && pod == is && !standby_ready.is_empty() {
            return Err(format!(
                "base backup {name} asked of the primary {pod} while {standby_ready:?} are ready"
            ));
        }
        if (pod == is) == (checkpoint == "immediate") && was == is {
            return Err(format!(
                "base backup {name} of {pod} ({checkpoint}), the primary being {is}"
            ));
        }
    }
    Ok(())
}
