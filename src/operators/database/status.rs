//! The Database's status from what was observed and the plan made from it.

use super::backups;
use super::deletion::{self, Deletion};
use super::names::{endpoint, jobs, pod_name};
use super::observed::Observed;
use super::plan::Plan;
use super::primary::{self, is_designated_ready};
use super::restore::{self, Restore};
use super::rollout::Step;
use super::spec::{Database, DatabaseStatus, Phase, RestoredFrom, database_name, shows_condition};
use super::upgrade::{self, Upgrade};
use crate::hook::conditions::{self, Observation, format_time};
use crate::operator::Context;
use crate::operators::backup_job::RunStatus;
use crate::operators::common::ready_of;

/// The status from the observed state and the plan made from it.
pub fn status(
    db: &Database,
    seen: &Observed,
    plan: &Plan,
    deletion: Option<&Deletion>,
    ctx: &Context,
) -> DatabaseStatus {
    let finalizing = deletion.is_some();
    let sts_status = seen.statefulset.as_ref().and_then(|s| s.status.as_ref());
    let replicas = sts_status.map_or(0, |s| s.replicas);
    let ready_replicas = sts_status.and_then(|s| s.ready_replicas).unwrap_or(0);
    let instances = running_instances(db, plan);
    let init = init_run(db, seen);
    let initialized = initialized(db, init, plan.restore.lets_serve());
    let phase = phase(db, seen, plan, init, finalizing, (replicas, ready_replicas));
    let ready = phase == Phase::Running;
    let ready_condition = finalizing
        .then(|| deletion::deleting_condition(db, seen, plan))
        .flatten()
        .unwrap_or_else(|| ready_condition(phase, ready_replicas, instances));
    let mut observations = vec![ready_condition, initialized];
    observations.extend(feature_conditions(db, seen, plan, instances));
    let restored_from = restore::restored_from(db, seen, plan.restore, ctx);
    let (verified_condition, last_verified_backup) = backups::verified(db, seen, ctx);
    observations.extend(verified_condition);
    let (base_verified, last_verified_base_backup) =
        super::archive::verification::verified(db, seen, ctx.now);
    observations.extend(base_verified);
    observations.extend(restored_and_snapshotted(
        db,
        seen,
        plan,
        restored_from.as_ref(),
        deletion,
    ));
    let previous = db.status.as_ref().map(|s| s.conditions.as_slice());
    let primary = &plan.primary;
    DatabaseStatus {
        current_primary: primary.serving.map(|o| pod_name(db, o)),
        target_primary: primary.changing().then(|| pod_name(db, primary.designated)),
        primary_epoch: primary.epoch,
        last_failover: primary::status::last(db, primary),
        instances: primary::status::instances(db, seen, &plan.primary, plan.replicas),
        phase,
        ready,
        endpoint: Some(endpoint(db)),
        version: plan.reported.map(|m| m.as_str().to_string()),
        replicas,
        ready_replicas,
        // Of the instances wanted, or of those still running while a
        // smaller size takes effect.
        ready_instances: Some(ready_of(ready_replicas, instances, replicas)),
        last_backup_time: seen.last_backup_time().map(format_time),
        snapshot_time: deletion.and_then(|d| d.snapshot_time.clone()),
        restored_from,
        last_verified_backup,
        last_verified_base_backup,
        archive: super::archive::report::progress(db, seen),
        conditions: conditions::reconcile(
            previous.unwrap_or_default(),
            observations,
            db.metadata.generation,
            ctx.now,
        ),
        observed_generation: None,
    }
}

/// `Restored` of a Database bootstrapped from a backup or the archive, and
/// `Snapshotted` while it is deleted.
fn restored_and_snapshotted(
    db: &Database,
    seen: &Observed,
    plan: &Plan,
    restored_from: Option<&RestoredFrom>,
    deletion: Option<&Deletion>,
) -> Vec<Observation> {
    let mut observations = Vec::new();
    if db.spec.bootstrap.is_some() {
        observations.push(restore::restored(
            db,
            seen,
            plan.restore,
            plan.restore_job,
            restored_from,
        ));
    }
    if let Some(deletion) = deletion {
        observations.push(deletion::snapshotted(db, seen, &plan.primary, deletion));
    }
    observations
}

/// How the initial configuration ran. Once initialized, the init Job seen
/// again (made again after it was deleted) counts as succeeded: its first
/// run did.
fn init_run(db: &Database, seen: &Observed) -> Option<RunStatus> {
    match seen.was_initialized(db) {
        true => Some(RunStatus::Succeeded),
        false => seen.job(&jobs::init(db)),
    }
}

/// What each feature says of itself, in the order the status lists it:
/// backups, the upgrade, failover (once there are standbys), parameters,
/// the certificate, monitoring, storage.
fn feature_conditions(
    db: &Database,
    seen: &Observed,
    plan: &Plan,
    instances: i32,
) -> Vec<Observation> {
    let mut out = vec![
        backups::backup_scheduled(db, seen, plan.restore.lets_serve()),
        upgrading_condition(db, plan),
    ];
    // Shown once there are standbys, and kept true after: a condition
    // left out would stay in the status as it was last written.
    if instances > 1 || shows_condition(db, "FailingOver") {
        out.push(primary::status::condition(db, seen, &plan.primary));
    }
    out.extend(parameters_condition(db, plan));
    out.extend(super::certificate::condition(db, seen));
    out.extend(super::monitoring::condition(db, seen, plan));
    out.extend(super::archive::condition(db, seen, plan));
    out.extend(plan.growth.observation(db, seen));
    out
}

/// `Initialized`: how the one-time setup Job went.
fn initialized(db: &Database, init: Option<RunStatus>, restored: bool) -> Observation {
    match init {
        Some(RunStatus::Succeeded) => Observation::new(
            "Initialized",
            true,
            "Initialized",
            format!("database {:?} and its user are in place", database_name(db)),
        ),
        Some(RunStatus::Failed) => Observation::new(
            "Initialized",
            false,
            "InitFailed",
            format!(
                "job {} failed; see kubectl logs job/{}",
                jobs::init(db),
                jobs::init(db)
            ),
        ),
        Some(_) => Observation::new(
            "Initialized",
            false,
            "Initializing",
            format!("job {} is running", jobs::init(db)),
        ),
        None if !restored => Observation::new(
            "Initialized",
            false,
            "WaitingForRestore",
            "the initial configuration runs once the restore succeeded",
        ),
        None => Observation::new(
            "Initialized",
            false,
            "WaitingForPrimary",
            "the initial configuration runs once the primary is ready",
        ),
    }
}

/// `Ready`: whether every instance serves, or what it waits for.
fn ready_condition(phase: Phase, ready_replicas: i32, instances: i32) -> Observation {
    if phase == Phase::Running {
        Observation::new(
            "Ready",
            true,
            "Running",
            format!("{ready_replicas} of {instances} instances are ready"),
        )
    } else {
        // The phase is why: "3 of 3 instances are ready" is no contradiction
        // beside Upgrading, as it was beside "NotReady".
        Observation::new(
            "Ready",
            false,
            phase.as_str(),
            format!("phase {phase:?}: {ready_replicas} of {instances} instances are ready"),
        )
    }
}

/// Where a rollout of a new template stands, when one is under way.
fn rollout_words(db: &Database, plan: &Plan) -> Option<String> {
    let primary = plan
        .primary
        .serving
        .map_or_else(|| "?".to_string(), |p| pod_name(db, p));
    let then = "standbys first, then a switchover, then the old primary";
    Some(match plan.rollout.step {
        Step::Done | Step::Unknown => return None,
        Step::Paused => {
            "a change of primary is under way; the new template waits for it".to_string()
        }
        Step::Standbys { updated, of } => format!(
            "a new template rolls out ({then}): {updated} of the {of} standbys above the primary {primary} run it"
        ),
        Step::MovePrimary { to } => format!(
            "a new template rolls out ({then}): the primary {primary} is the highest instance and first switches over to {}",
            pod_name(db, to)
        ),
        Step::Switchover { to } => format!(
            "a new template rolls out ({then}): the standbys run it; switching over from {primary} to {}",
            pod_name(db, to)
        ),
        Step::Rest { updated, of } => format!(
            "a new template rolls out ({then}): the primary {primary} runs it; {updated} of {of} instances do"
        ),
    })
}

/// `ParametersApplied`, with `spec.postgresql` (and kept once shown, as a
/// condition left out would stay as it was last written): whether the
/// instances' template carries every parameter asked for, or which
/// decreases it holds and how to make them.
fn parameters_condition(db: &Database, plan: &Plan) -> Option<Observation> {
    let shown = shows_condition(db, PARAMETERS_APPLIED);
    if db.spec.postgresql.is_none() && !shown {
        return None;
    }
    if plan.held.is_empty() {
        return Some(Observation::new(
            PARAMETERS_APPLIED,
            true,
            "Applied",
            "the instances' template carries spec.postgresql; a change rolls out standbys first (see Upgrading)",
        ));
    }
    let held: Vec<String> = plan
        .held
        .iter()
        .map(|h| format!("{} stays at {}, not {}", h.name, h.running, h.wanted))
        .collect();
    Some(Observation::new(
        PARAMETERS_APPLIED,
        false,
        "DecreaseHeld",
        format!(
            "{}: a standby stops replaying below its primary's value, and changes roll out standbys first; to lower it, run one instance (spec.size small), lower it, then raise the size again",
            held.join("; ")
        ),
    ))
}

/// The condition of [`parameters_condition`].
const PARAMETERS_APPLIED: &str = "ParametersApplied";

/// `Upgrading`: where the upgrade the plan is in stands.
fn upgrading_condition(db: &Database, plan: &Plan) -> Observation {
    let (status, reason, message) = upgrade_words(db, plan);
    Observation::new("Upgrading", status, reason, message)
}

/// Where the upgrade stands, in the `Upgrading` condition's words: its
/// status, reason and message. A major upgrade that does not hold the
/// instances (its backup failed, no destination) lets a new template roll
/// out: the condition says so, with the upgrade's words after it, since a
/// rollout's switchover is what a reader of the status must be told.
fn upgrade_words(db: &Database, plan: &Plan) -> (bool, &'static str, String) {
    // Only what does not hold the instances lets a template roll.
    let rolling = match plan.upgrade.step.in_progress() {
        true => None,
        false => rollout_words(db, plan),
    };
    match (plan.upgrade.step, rolling) {
        (_, None) => upgrade::words(db, plan.upgrade.step, plan.version),
        (Upgrade::None, Some(rolling)) => (true, "RollingUpdate", rolling),
        (_, Some(rolling)) => {
            let (_, _, major) = upgrade::words(db, plan.upgrade.step, plan.version);
            (true, "RollingUpdate", format!("{rolling}; {major}"))
        }
    }
}

/// The instances a Database runs when all is well: its size's, and more
/// while its designated (or still serving) primary's ordinal is past them
/// (a size made smaller after a failover).
fn running_instances(db: &Database, plan: &Plan) -> i32 {
    db.spec
        .size
        .instances()
        .max(plan.primary.instances_needed())
}

/// The phase: deleting, upgrading, creating, initializing, running, or
/// degraded when none of these holds.
fn phase(
    db: &Database,
    seen: &Observed,
    plan: &Plan,
    init: Option<RunStatus>,
    finalizing: bool,
    (replicas, ready_replicas): (i32, i32),
) -> Phase {
    let instances = running_instances(db, plan);
    let upgrade_failed = matches!(
        plan.upgrade.step,
        Upgrade::BackupFailed { .. } | Upgrade::RestoreFailed { .. }
    );
    let primary_ready = is_designated_ready(db, seen, &plan.primary);
    if finalizing {
        Phase::Deleting
    } else if plan.upgrade.step.in_progress() {
        Phase::Upgrading
    } else if plan.restore == Restore::Running {
        Phase::Restoring
    } else if plan.restore == Restore::Failed {
        Phase::Degraded
    } else if seen.statefulset.is_none() || (init.is_none() && !primary_ready) {
        Phase::Creating
    } else if init != Some(RunStatus::Succeeded) {
        if init == Some(RunStatus::Failed) {
            Phase::Degraded
        } else {
            Phase::Initializing
        }
    } else if ready_replicas >= instances
        && replicas == instances
        && !upgrade_failed
        && primary_ready
        && !plan.primary.changing()
    {
        Phase::Running
    } else if !upgrade_failed && is_planned_change(plan, primary_ready) {
        Phase::Updating
    } else {
        Phase::Degraded
    }
}

/// A change someone planned is what keeps an instance down: a switchover
/// asked for (by a person or a rollout), or a rollout restarting the
/// instances one by one while the primary serves. A primary lost, or an
/// instance down with nothing rolling, is no plan.
fn is_planned_change(plan: &Plan, primary_ready: bool) -> bool {
    if plan.primary.changing() {
        return plan.primary.planned;
    }
    let rolling = matches!(
        plan.rollout.step,
        Step::Standbys { .. }
            | Step::MovePrimary { .. }
            | Step::Switchover { .. }
            | Step::Rest { .. }
    );
    rolling && primary_ready
}
