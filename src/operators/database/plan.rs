//! Every decision the Database operator makes, from the observed state:
//! which major runs, whether an upgrade is in progress and how far it got,
//! what a deletion does next, and which Jobs exist for each. The builders in
//! `children` and the conditions in `status` only read the [`Plan`].

use super::*;

/// Job names, one place.
pub mod jobs {
    use super::{Database, Major, name};

    /// The initial configuration.
    pub fn init(db: &Database) -> String {
        format!("{}-init", name(db))
    }

    /// The backup taken before upgrading to `to`.
    pub fn pre_upgrade(db: &Database, to: Major) -> String {
        format!("{}-pre-upgrade-{}", name(db), to.as_str())
    }

    /// The restore into `to`.
    pub fn upgrade(db: &Database, to: Major) -> String {
        format!("{}-upgrade-{}", name(db), to.as_str())
    }

    /// The snapshot before deletion.
    pub fn snapshot(db: &Database) -> String {
        format!("{}-snapshot", name(db))
    }
}

/// Where an upgrade stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upgrade {
    /// Running the version asked for.
    None,
    /// Asked for a newer version, but there is no destination for the
    /// pre-upgrade backup.
    NoDestination { to: Major },
    /// Taking the pre-upgrade backup.
    BackingUp { to: Major },
    /// The pre-upgrade backup failed; the old version serves.
    BackupFailed { to: Major },
    /// Stopping the old version so the restore can use its volume.
    Stopping { to: Major },
    /// Restoring into the new version.
    Restoring { to: Major },
    /// The restore failed; the old version serves again.
    RestoreFailed { to: Major },
    /// The restore succeeded; the StatefulSet moves to the new version.
    Starting { to: Major },
}

impl Upgrade {
    /// True while an upgrade moves forward by itself (not stopped by a
    /// failure or a missing destination).
    pub fn in_progress(self) -> bool {
        matches!(
            self,
            Upgrade::BackingUp { .. }
                | Upgrade::Stopping { .. }
                | Upgrade::Restoring { .. }
                | Upgrade::Starting { .. }
        )
    }

    /// True from the restore on: the restore Job exists.
    pub fn is_restoring(self) -> bool {
        matches!(
            self,
            Upgrade::Restoring { .. } | Upgrade::RestoreFailed { .. } | Upgrade::Starting { .. }
        )
    }
}

/// What to build, decided from the observed state alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The major the data is in now: what the StatefulSet runs.
    pub running: Major,
    /// The major the StatefulSet should run.
    pub version: Major,
    /// The major the upgrade Jobs are for: the spec's, or that of a restore
    /// still running when the spec moved on.
    pub target: Major,
    /// How many instances the StatefulSet should run.
    pub replicas: i32,
    /// Where an upgrade stands.
    pub upgrade: Upgrade,
    /// Whether the initial-configuration Job should exist.
    pub init_job: bool,
    /// Whether the pre-upgrade backup Job should exist.
    pub pre_upgrade_job: bool,
    /// Whether the upgrade's restore Job should exist.
    pub restore_job: bool,
    /// Whether to keep the StatefulSet at all (false only late in finalizing).
    pub keep_statefulset: bool,
    /// Whether deleting the StatefulSet may delete its volumes.
    pub delete_volumes: bool,
    /// Whether the snapshot Job should exist.
    pub snapshot_job: bool,
    /// While deleting: every observed Job is kept, built or not, and
    /// nothing that is not observed is created, but the snapshot Job.
    pub deleting: bool,
    /// While deleting: the volumes the StatefulSet controller has not yet
    /// handed to the StatefulSet (when they are to go with it) or taken
    /// back from it (when they are to stay). The StatefulSet is kept until
    /// there is none.
    pub volumes_pending: Vec<String>,
}

/// Decides the StatefulSet's version and size and which Jobs exist.
pub fn plan(db: &Database, seen: &Observed) -> Result<Plan, HookError> {
    let running = running(db, seen)?;
    let desired = db.spec.version;
    if desired < running {
        return Err(InvalidSpec::new(
            "spec.version",
            format!(
                "{} is older than the running {}; downgrades are refused, restore a backup into a new Database instead",
                desired.as_str(),
                running.as_str()
            ),
        )
        .into());
    }
    Ok(upgrade_plan(db, seen, running))
}

/// Refuses (409) while instance 0 refuses to start on its volume because
/// the volume holds another major's data: a Database created again over
/// the retained volumes of an earlier one, at another version. Nothing is
/// initialized beside that data; what to do is a person's choice.
pub fn check_volumes(db: &Database, seen: &Observed) -> Result<(), HookError> {
    let Some(why) = seen.volume_refusal(db) else {
        return Ok(());
    };
    Err(HookError::Unsafe(format!(
        "instance 0 of Database {name} refuses to start: its {why}; to serve that data, set deletionPolicy Retain, delete this Database and create it again with that spec.version (raise it afterwards to upgrade); to start empty instead, delete the volumes {volume}-{name}-* first",
        name = name(db),
        volume = VOLUME,
    )))
}

/// The major the data is in. From the StatefulSet when there is one; without
/// it (deleted by hand, or a Database re-created over retained volumes) the
/// version last reported in the status, never the one asked for, which
/// would start an empty cluster beside the data.
pub(super) fn running(db: &Database, seen: &Observed) -> Result<Major, HookError> {
    let reported = reported_version(db);
    match (&seen.statefulset, seen.running()) {
        (_, Some(major)) => Ok(major),
        (None, None) => Ok(reported.unwrap_or(db.spec.version)),
        (Some(_), None) => reported.ok_or_else(|| {
            HookError::Unsafe(format!(
                "cannot tell which PostgreSQL major statefulset {} runs (no PGDATA, postgres image or version annotation names one) and status.version is empty; nothing is changed: put back its postgres container or annotate it {ANNOTATION_VERSION}=<major>",
                name(db)
            ))
        }),
    }
}

/// The major the status last reported running.
pub(super) fn reported_version(db: &Database) -> Option<Major> {
    Major::parse(db.status.as_ref()?.version.as_deref()?)
}

/// Where an upgrade from `running` to the spec's version stands, from the
/// Jobs observed.
pub(super) fn upgrade_plan(db: &Database, seen: &Observed, running: Major) -> Plan {
    let instances = db.spec.size.instances();
    let init_job = seen.jobs.contains_key(&jobs::init(db)) || seen.is_instance_ready(db, 0);
    let mut plan = Plan {
        running,
        version: running,
        target: db.spec.version,
        replicas: instances,
        upgrade: Upgrade::None,
        init_job,
        pre_upgrade_job: false,
        restore_job: false,
        keep_statefulset: true,
        delete_volumes: false,
        snapshot_job: false,
        deleting: false,
        volumes_pending: Vec::new(),
    };
    // A restore that is still running holds the primary's volume, whatever
    // the spec says now (a newer version asked for, the destination
    // removed): it keeps its Job and every instance stays stopped until it
    // ends. Dropping its Job would start instances on a volume the Job's
    // pod may still be using.
    let in_flight = Major::ALL.into_iter().find(|m| {
        *m > running
            && matches!(
                seen.job(&jobs::upgrade(db, *m)),
                Some(RunStatus::Running | RunStatus::None)
            )
    });
    if let Some(to) = in_flight
        && (to != db.spec.version || db.spec.backup.is_none())
    {
        plan.target = to;
        plan.upgrade = Upgrade::Restoring { to };
        plan.replicas = 0;
        plan.restore_job = true;
        plan.pre_upgrade_job =
            db.spec.backup.is_some() && seen.jobs.contains_key(&jobs::pre_upgrade(db, to));
        return plan;
    }
    let to = db.spec.version;
    if to == running {
        // Upgraded (or never upgraded): the Jobs have done their work and
        // go; the pre-upgrade dump stays in S3, the old data on the volume.
        return plan;
    }
    if db.spec.backup.is_none() {
        plan.upgrade = Upgrade::NoDestination { to };
        plan.pre_upgrade_job = seen.jobs.contains_key(&jobs::pre_upgrade(db, to));
        plan.restore_job = seen.jobs.contains_key(&jobs::upgrade(db, to));
        return plan;
    }
    plan.upgrade = match seen.job(&jobs::pre_upgrade(db, to)) {
        None | Some(RunStatus::Running | RunStatus::None) => Upgrade::BackingUp { to },
        Some(RunStatus::Failed) => Upgrade::BackupFailed { to },
        Some(RunStatus::Succeeded) => match seen.job(&jobs::upgrade(db, to)) {
            // The restore needs the primary's volume: stop every instance
            // first, as the StatefulSet itself reports, not only as far as
            // its pods are seen.
            None if seen.live_instances(db) > 0 || !seen.is_stopped() => Upgrade::Stopping { to },
            None | Some(RunStatus::Running | RunStatus::None) => Upgrade::Restoring { to },
            Some(RunStatus::Failed) => Upgrade::RestoreFailed { to },
            Some(RunStatus::Succeeded) => {
                // The new version's data is complete: move the StatefulSet.
                plan.version = to;
                Upgrade::Starting { to }
            }
        },
    };
    // Kept once observed, so a failed one stays for its logs and is never
    // retried behind the user's back.
    plan.pre_upgrade_job = true;
    plan.restore_job =
        plan.upgrade.is_restoring() || seen.jobs.contains_key(&jobs::upgrade(db, to));
    if matches!(
        plan.upgrade,
        Upgrade::Stopping { .. } | Upgrade::Restoring { .. }
    ) {
        plan.replicas = 0;
    }
    plan
}

/// How far a deletion got, from what is observed and what the status
/// recorded: each step, once done, stays done.
#[derive(Clone, Debug, PartialEq)]
pub struct Deletion {
    /// When the final snapshot succeeded, once it did.
    pub snapshot_time: Option<String>,
}

impl Deletion {
    /// The record carried in the status, completed by what is observed now.
    pub fn observe(db: &Database, seen: &Observed, ctx: &Context) -> Self {
        let recorded = db.status.as_ref().and_then(|s| s.snapshot_time.clone());
        let succeeded = seen
            .jobs
            .get(&jobs::snapshot(db))
            .filter(|j| backup_job::run_status(j) == RunStatus::Succeeded);
        let observed = succeeded.map(|job| {
            job.status
                .as_ref()
                .and_then(|s| s.completion_time.as_ref())
                .map_or_else(|| format_time(ctx.now), |t| format_time(t.0))
        });
        Deletion {
            snapshot_time: recorded.or(observed),
        }
    }
}

/// Decides what finalizing does, on top of the plan: snapshot first under
/// Snapshot, then let the volumes go with the StatefulSet.
///
/// Deletion only moves forward. Nothing the Database had is created again:
/// no StatefulSet (it would bring fresh, empty volumes), no Job but the
/// snapshot (and that only while the data is still served and no snapshot
/// succeeded). Every Job observed is kept until the Database is gone, built
/// again where a builder makes it and by name otherwise, so the snapshot
/// Job a later call reads never disappears with an answer.
pub fn plan_deletion(db: &Database, seen: &Observed, deletion: &Deletion, mut plan: Plan) -> Plan {
    let snapshot_name = jobs::snapshot(db);
    let has = |job: &str| seen.jobs.contains_key(job);
    let to = plan.target;
    // An upgrade that has not reached its restore is abandoned: the old
    // version keeps serving so the snapshot can read it.
    if !has(&jobs::upgrade(db, to)) {
        plan.version = plan.running;
        plan.replicas = db.spec.size.instances();
    }
    // Exactly the Jobs observed: none is started, none that can still be
    // built is dropped.
    plan.init_job = has(&jobs::init(db));
    plan.pre_upgrade_job = has(&jobs::pre_upgrade(db, to));
    plan.restore_job = has(&jobs::upgrade(db, to));
    plan.deleting = true;
    let exists = seen
        .statefulset
        .as_ref()
        .is_some_and(|s| s.metadata.deletion_timestamp.is_none());
    // The snapshot reads the running primary: not while a restore holds
    // the volume (no instance runs), nor before the primary is ready.
    let serving = exists && plan.replicas > 0 && seen.is_instance_ready(db, 0);
    let snapshotted = deletion.snapshot_time.is_some();
    // Only the policy and a recorded snapshot let volumes go: a
    // `whenDeleted: Delete` seen on the StatefulSet (written by anyone)
    // does not. Switching it back is safe, because the StatefulSet is kept
    // until the claims are seen released (below).
    let volumes_may_go = match db.spec.deletion_policy {
        DeletionPolicy::Retain => false,
        DeletionPolicy::Delete => true,
        DeletionPolicy::Snapshot => snapshotted,
    };
    plan.snapshot_job = has(&snapshot_name)
        || (db.spec.deletion_policy == DeletionPolicy::Snapshot
            && db.spec.backup.is_some()
            && !snapshotted
            && serving);
    plan.delete_volumes = volumes_may_go;
    plan.volumes_pending = if exists {
        volumes_pending(db, seen, volumes_may_go)
    } else {
        Vec::new()
    };
    // The StatefulSet controller hands a claim over (or takes it back) only
    // for an instance it runs and finds ready, in order: a claim of an
    // ordinal left over from a scale-down is never touched. Such an
    // instance runs again until its claim is as the policy says. Not while
    // a restore holds the primary's volume (no instance runs then).
    if plan.replicas > 0
        && let Some(highest) = seen
            .claims(db)
            .filter(|(_, c)| {
                plan.volumes_pending
                    .iter()
                    .any(|p| c.metadata.name.as_ref() == Some(p))
            })
            .map(|(i, _)| i)
            .max()
    {
        let needed = i32::try_from(highest).map_or(i32::MAX, |h| h.saturating_add(1));
        plan.replicas = plan.replicas.max(needed);
    }
    // Under Snapshot the data must stay until the snapshot succeeded.
    let may_remove = db.spec.deletion_policy == DeletionPolicy::Retain || volumes_may_go;
    plan.keep_statefulset = exists
        && (!may_remove
            || !retention_applied(seen, volumes_may_go)
            || !plan.volumes_pending.is_empty());
    plan
}

/// The volumes not yet as deleting the StatefulSet needs them: not held by
/// it when they are to go with it, or still held when they are to stay.
fn volumes_pending(db: &Database, seen: &Observed, delete_volumes: bool) -> Vec<String> {
    seen.claims(db)
        .filter(|(_, c)| seen.is_held(c) != delete_volumes)
        .filter_map(|(_, c)| c.metadata.name.clone())
        .collect()
}

/// True when the observed StatefulSet already carries the PVC retention
/// policy we want on deletion and its controller has seen it.
pub(super) fn retention_applied(seen: &Observed, delete_volumes: bool) -> bool {
    let Some(sts) = &seen.statefulset else {
        return true;
    };
    let want = if delete_volumes { "Delete" } else { "Retain" };
    let policy = sts
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref())
        .and_then(|p| p.when_deleted.as_deref())
        .unwrap_or("Retain");
    let seen_generation = sts.status.as_ref().and_then(|s| s.observed_generation);
    policy == want && seen_generation >= sts.metadata.generation
}

/// The plan for a Database being deleted, and how far its deletion got. A
/// downgrade asked for while deleting must not block the deletion: the plan
/// keeps the running version.
pub fn plan_finalize(
    db: &Database,
    seen: &Observed,
    ctx: &Context,
) -> Result<(Plan, Deletion), HookError> {
    let base = match plan(db, seen) {
        Err(HookError::Invalid(_)) => upgrade_plan(db, seen, running(db, seen)?),
        other => other?,
    };
    let deletion = Deletion::observe(db, seen, ctx);
    let plan = plan_deletion(db, seen, &deletion, base);
    Ok((plan, deletion))
}

impl Plan {
    /// A deletion is done once the StatefulSet is no longer kept and is
    /// gone, and with it every volume that was to go: under Retain the
    /// volumes stay, owned by nothing; otherwise none may be left.
    pub fn is_finalized(&self, db: &Database, seen: &Observed) -> bool {
        let volumes_stay = db.spec.deletion_policy == DeletionPolicy::Retain;
        !self.keep_statefulset
            && seen.statefulset.is_none()
            && (volumes_stay || seen.claims(db).next().is_none())
    }
}

/// Whether the generated application credentials exist: when the spec names
/// no Secret of its own, and also once generated even if the spec later
/// names one, since they exist nowhere else.
pub fn has_generated_credentials(db: &Database, seen: &Observed) -> bool {
    db.spec.credentials_secret.is_none()
        || seen
            .secrets
            .contains_key(&children::generated_credentials_name(db))
}
