//! Deletion: a Database's finalize hook. It snapshots first (under
//! `Snapshot`), then lets the volumes go with the StatefulSet (or keeps
//! them, under `Retain`), and is finalized only once neither is observed.
//! Deletion only moves forward: each step, once done, stays done, and
//! nothing the Database had is created again. Its decision ([`Deletion`],
//! [`plan_deletion`]) and what an answer keeps while deleting
//! ([`while_deleting`]) are here; the `Deleting` status is `status.rs`'s.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;

use super::names::jobs;
use super::objects::kept_job;
use super::observed::Observed;
use super::plan::{Plan, decide_primary, plan, running, upgrade_plan};
use super::primary::{Primary, is_serving};
use super::spec::{Database, DeletionPolicy};
use super::upgrade::Upgrade;
use crate::hook::Child;
use crate::hook::conditions::{ConditionStatus, Observation, format_time};
use crate::hook::group_key;
use crate::operator::{Context, HookError};
use crate::operators::backup_job::RunStatus;

/// What a deletion answers of the children built: only what is observed,
/// but a snapshot still to take and the promote Job of a change of primary
/// under way (the snapshot reads the primary it makes; without it the
/// deletion would wait for ever, the old primary fenced), and every
/// observed Job, built or not. Deletion only moves forward: what anyone
/// deleted stays gone.
pub(super) fn while_deleting(
    db: &Database,
    seen: &Observed,
    plan: &Plan,
    mut out: Vec<Child>,
) -> Vec<Child> {
    let job_group = group_key::<Job>();
    let snapshot = (job_group.clone(), jobs::snapshot(db));
    let promote = plan
        .primary
        .promote_job
        .as_ref()
        .map(|job| (job_group.clone(), job.clone()));
    out.retain(|child| {
        let (group, name) = child.group_and_name();
        let key = (group, name.to_string());
        seen.children.contains(&key) || key == snapshot || Some(&key) == promote.as_ref()
    });
    let answered: BTreeSet<String> = out
        .iter()
        .filter_map(|child| {
            let (group, name) = child.group_and_name();
            (group == job_group).then(|| name.to_string())
        })
        .collect();
    let kept = seen.jobs.keys().filter(|name| !answered.contains(*name));
    out.extend(kept.map(|name| Child::new(&kept_job(db, name))));
    out
}

/// How far a deletion got, from what is observed and what the status
/// recorded: each step, once done, stays done.
#[derive(Clone, Debug, PartialEq)]
pub struct Deletion {
    /// When the final snapshot succeeded, once it did.
    pub snapshot_time: Option<String>,
}

impl Deletion {
    /// What the snapshot Job shows, else the record carried in the status.
    /// The status is what the hook wrote last, but anyone with status
    /// access can write it: an observed Job that failed or still runs
    /// decides over it, and a recorded time counts only if it is a time.
    pub fn observe(db: &Database, seen: &Observed, ctx: &Context) -> Self {
        let recorded = db
            .status
            .as_ref()
            .and_then(|s| s.snapshot_time.as_deref()?.parse::<Timestamp>().ok())
            .map(format_time);
        let snapshot = jobs::snapshot(db);
        let snapshot_time = match seen.job(&snapshot) {
            Some(RunStatus::Succeeded) => Some(format_time(
                seen.job_completed_at(&snapshot).unwrap_or(ctx.now),
            )),
            Some(_) => None,
            None => recorded,
        };
        Deletion { snapshot_time }
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
    keep_observed_jobs(db, seen, &mut plan);
    let exists = seen
        .statefulset
        .as_ref()
        .is_some_and(|s| s.metadata.deletion_timestamp.is_none());
    // The snapshot reads the running primary: not while a restore holds
    // the volume (no instance runs), nor before the primary is ready. A
    // Database whose bootstrap never restored holds nothing to snapshot, and
    // a snapshot of it would become the newest dump of its name.
    let restored = plan.restore.lets_serve();
    let serving = exists && plan.replicas > 0 && restored && is_serving(db, seen, &plan.primary);
    let snapshotted = deletion.snapshot_time.is_some();
    let volumes_may_go = volumes_may_go(db.spec.deletion_policy, snapshotted || !restored);
    plan.snapshot_job = seen.jobs.contains_key(&jobs::snapshot(db))
        || (db.spec.deletion_policy == DeletionPolicy::Snapshot
            && db.spec.backup.is_some()
            && !snapshotted
            && serving);
    plan.delete_volumes = volumes_may_go;
    let pending = if exists {
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
        && let Some(highest) = pending.iter().map(|(ordinal, _)| *ordinal).max()
    {
        let needed = i32::try_from(highest).map_or(i32::MAX, |h| h.saturating_add(1));
        plan.replicas = plan.replicas.max(needed);
    }
    plan.volumes_pending = pending.into_iter().map(|(_, name)| name).collect();
    // Under Snapshot the data must stay until the snapshot succeeded.
    let may_remove = db.spec.deletion_policy == DeletionPolicy::Retain || volumes_may_go;
    plan.keep_statefulset = exists
        && (!may_remove
            || !retention_applied(seen, volumes_may_go)
            || !plan.volumes_pending.is_empty());
    plan
}

/// While deleting, exactly the Jobs observed: none is started, none that
/// can still be built is dropped. An upgrade that has not reached its
/// restore is abandoned: the old version keeps serving so the snapshot can
/// read it, and no step of that upgrade is reported (nor of a downgrade,
/// which `plan` refuses and `upgrade_plan` reads as an upgrade): a
/// rollout's switchover may go on meanwhile, and says so.
fn keep_observed_jobs(db: &Database, seen: &Observed, plan: &mut Plan) {
    let has = |job: &str| seen.jobs.contains_key(job);
    let to = plan.upgrade.target;
    if !has(&jobs::upgrade(db, to)) {
        plan.upgrade.step = Upgrade::None;
        plan.version = plan.running;
        // Never fewer instances than run: a smaller size (or one a refused
        // spec asks for, which no sync applied) would stop the standby a
        // failover needs when the primary is lost, and the snapshot would
        // wait for ever for a primary.
        plan.replicas = db.spec.size.instances().max(seen.statefulset_replicas());
        // Nothing holds the instances then: they may fail over.
        decide_primary(db, seen, plan, false);
    }
    plan.init_job = has(&jobs::init(db));
    plan.upgrade.pre_upgrade_job = has(&jobs::pre_upgrade(db, to));
    plan.upgrade.upgrade_job = has(&jobs::upgrade(db, to));
    plan.restore_job = has(&jobs::restore(db));
    plan.deleting = true;
}

/// Whether the volumes may go with the StatefulSet. Only the policy and a
/// recorded snapshot decide: a `whenDeleted: Delete` seen on the StatefulSet
/// (written by anyone) does not. Switching it back is safe, because the
/// StatefulSet is kept until the claims are seen released.
fn volumes_may_go(policy: DeletionPolicy, snapshotted: bool) -> bool {
    match policy {
        DeletionPolicy::Retain => false,
        DeletionPolicy::Delete => true,
        DeletionPolicy::Snapshot => snapshotted,
    }
}

/// The volumes not yet as deleting the StatefulSet needs them, with their
/// ordinals: not held by it when they are to go with it, or still held when
/// they are to stay.
fn volumes_pending(db: &Database, seen: &Observed, delete_volumes: bool) -> Vec<(u32, String)> {
    seen.claims(db)
        .filter(|(_, c)| seen.is_held(c) != delete_volumes)
        .filter_map(|(ordinal, c)| Some((ordinal, c.metadata.name.clone()?)))
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

/// `Ready` while deleting, when the deletion waits on the volumes: the
/// StatefulSet controller has not yet handed them over (or back), or they
/// outlived the StatefulSet although they were to go.
pub(super) fn deleting_condition(
    db: &Database,
    seen: &Observed,
    plan: &Plan,
) -> Option<Observation> {
    let waiting = |message: String| {
        Some(Observation::new(
            "Ready",
            false,
            "WaitingForVolumes",
            message,
        ))
    };
    if !plan.volumes_pending.is_empty() {
        let (verb, outcome) = if plan.delete_volumes {
            ("holds", "they go with it")
        } else {
            ("has released", "they stay when it goes")
        };
        return waiting(format!(
            "deleting: the StatefulSet is kept until it {verb} volumes {}, so {outcome}; its controller does that only for an instance it runs and finds ready, so an instance scaled away earlier runs again meanwhile",
            plan.volumes_pending.join(", ")
        ));
    }
    let leftover: Vec<&str> = seen
        .claims(db)
        .filter_map(|(_, c)| c.metadata.name.as_deref())
        .collect();
    let volumes_stay = db.spec.deletion_policy == DeletionPolicy::Retain;
    if seen.statefulset.is_some() || leftover.is_empty() || volumes_stay {
        return None;
    }
    waiting(format!(
        "waiting for volumes {} to be deleted; the StatefulSet is gone, so a volume it did not hold must be deleted by hand (after copying its data, if no snapshot was taken)",
        leftover.join(", ")
    ))
}

/// While deleting: whether the data was snapshotted, or why not yet.
pub(super) fn snapshotted(
    db: &Database,
    seen: &Observed,
    primary: &Primary,
    deletion: &Deletion,
) -> Observation {
    let job = jobs::snapshot(db);
    let condition = |status: ConditionStatus, reason, message: String| {
        Observation::new("Snapshotted", status, reason, message)
    };
    match db.spec.deletion_policy {
        DeletionPolicy::Retain => condition(
            ConditionStatus::False,
            "Retained",
            "deletionPolicy Retain: the volumes are kept".into(),
        ),
        DeletionPolicy::Delete => condition(
            ConditionStatus::False,
            "NotRequested",
            "deletionPolicy Delete: no snapshot".into(),
        ),
        DeletionPolicy::Snapshot => match (&deletion.snapshot_time, seen.job(&job)) {
            (Some(at), _) => condition(
                ConditionStatus::True,
                "Snapshotted",
                format!("job {job} stored the final snapshot at {at}"),
            ),
            (None, Some(RunStatus::Failed)) => condition(
                ConditionStatus::False,
                "SnapshotFailed",
                format!(
                    "job {job} failed; nothing is deleted; fix the cause and delete the job to retry, or set deletionPolicy Retain"
                ),
            ),
            (None, None) if seen.statefulset.is_some() && !is_serving(db, seen, primary) => {
                condition(
                    ConditionStatus::Unknown,
                    "WaitingForPrimary",
                    format!(
                        "job {job} takes the final snapshot once the primary is ready; nothing is deleted meanwhile"
                    ),
                )
            }
            (None, None) if seen.statefulset.is_none() => condition(
                ConditionStatus::False,
                "NothingToSnapshot",
                nothing_to_snapshot(seen),
            ),
            _ => condition(
                ConditionStatus::Unknown,
                "SnapshotRunning",
                format!("job {job} takes the final snapshot"),
            ),
        },
    }
}

/// Why there is nothing to snapshot once the StatefulSet is gone, and what
/// becomes of the volumes left.
fn nothing_to_snapshot(seen: &Observed) -> String {
    let volumes: Vec<&str> = seen
        .volumes
        .iter()
        .filter_map(|v| v.metadata.name.as_deref())
        .collect();
    if volumes.is_empty() {
        return "the StatefulSet is gone and no volume is left: nothing to snapshot".into();
    }
    format!(
        "the StatefulSet is gone and no snapshot is recorded; nothing is created again while deleting; volumes {} go with the StatefulSet's retention policy, or by hand once copied",
        volumes.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::super::children;
    use super::super::plan::tests::{db, instance, job, running, serving, with_job};
    use super::super::spec::{DatabaseStatus, Major};
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn not_yet() -> Deletion {
        Deletion {
            snapshot_time: None,
        }
    }

    #[test]
    fn deletion_keeps_data_until_allowed() {
        let seen = serving("16");
        let base = plan(&db("16", "Snapshot"), &seen).unwrap();
        let snapshot = plan_deletion(&db("16", "Snapshot"), &seen, &not_yet(), base.clone());
        assert!(snapshot.snapshot_job && snapshot.keep_statefulset && !snapshot.delete_volumes);
        let mut done = serving("16");
        done.jobs.insert("orders-snapshot".into(), job("Complete"));
        let record = Deletion::observe(&db("16", "Snapshot"), &done, &Context::fixed());
        let after = plan_deletion(&db("16", "Snapshot"), &done, &record, base.clone());
        assert!(
            after.delete_volumes,
            "after the snapshot the volumes may go"
        );
        assert!(
            after.keep_statefulset,
            "but only once the StatefulSet carries whenDeleted=Delete"
        );
        assert!(after.snapshot_job, "the finished snapshot Job is kept");
        let idle = plan_deletion(
            &db("16", "Snapshot"),
            &running("16"),
            &not_yet(),
            base.clone(),
        );
        assert!(
            !idle.snapshot_job && idle.keep_statefulset,
            "no snapshot before the primary serves; nothing goes meanwhile"
        );
        let retain = plan_deletion(&db("16", "Retain"), &seen, &not_yet(), base);
        assert!(!retain.delete_volumes);
    }

    /// Found by the lives (issue 21): a medium Database failed over to
    /// orders-1, then shrunk to small: its StatefulSet asked for one
    /// instance, orders-0, and stopped the primary. The read-write Service
    /// selected no pod and nothing failed over. The instances up to the
    /// designated primary keep running, deleting or not.
    #[test]
    fn regression_a_smaller_size_never_stops_the_designated_primary() {
        let ctx = Context::fixed();
        let mut d = db("16", "Snapshot");
        d.spec.size = serde_json::from_value(json!("small")).unwrap();
        d.status = Some(
            serde_json::from_value(json!({"currentPrimary": "orders-1", "primaryEpoch": 1}))
                .unwrap(),
        );
        let mut seen = serving("16");
        seen.jobs
            .insert("orders-promote-1-1".into(), job("Complete"));
        let seen = seen.at(ctx.now);
        let planned = plan(&d, &seen).unwrap();
        assert_eq!((planned.primary.designated, planned.replicas), (1, 2));
        let (deleting, _) = plan_finalize(&d, &seen, &ctx).unwrap();
        assert_eq!(deleting.replicas, 2, "while deleting too");
        d.status = None;
        let first = plan(&d, &serving("16")).unwrap();
        assert_eq!(first.replicas, 1, "instance 0 the primary: the size alone");
    }

    /// Found by the lives (issue 21), after the fix above: that small
    /// Database's primary, orders-1, then lost its volume. Its standby,
    /// orders-0, was never counted (the size has one instance), so nothing
    /// failed over. And a Database deleted with a refused spec (a
    /// downgrade) never decided its primary at all, so its deletion waited
    /// for ever for a primary whose volume was lost.
    #[test]
    fn regression_standbys_below_a_kept_primary_and_under_a_refused_spec_take_over() {
        let ctx = Context::fixed();
        let lost = |ordinal: usize, version: &str| {
            let mut seen = serving(version);
            seen.pods = vec![instance(0).ready().typed(), instance(1).ready().typed()];
            seen.pods[ordinal] = instance(ordinal as u32)
                .not_ready_since("2026-03-04T05:00:00Z")
                .typed();
            seen.jobs
                .insert(jobs::init(&db(version, "Snapshot")), job("Complete"));
            seen.at(ctx.now)
        };
        let mut small = db("16", "Snapshot");
        small.spec.size = serde_json::from_value(json!("small")).unwrap();
        small.status = Some(
            serde_json::from_value(json!({"currentPrimary": "orders-1", "primaryEpoch": 1}))
                .unwrap(),
        );
        let mut seen = lost(1, "16");
        seen.jobs
            .insert("orders-promote-1-1".into(), job("Complete"));
        let planned = plan(&small, &seen).unwrap();
        assert_eq!(
            (planned.primary.designated, planned.primary.epoch),
            (0, 2),
            "orders-0 takes over"
        );

        let mut downgraded = db("14", "Delete");
        downgraded.metadata.deletion_timestamp =
            Some(Time("2026-03-04T05:06:00Z".parse().unwrap()));
        let seen = lost(0, "16");
        assert!(plan(&downgraded, &seen).is_err(), "the spec is refused");
        let (planned, _) = plan_finalize(&downgraded, &seen, &ctx).unwrap();
        assert_eq!(
            (planned.primary.designated, planned.primary.epoch),
            (1, 1),
            "orders-1 takes over, so the deletion can go on"
        );
    }

    /// Found by the lives (issue 22): a Database rolling out a new image
    /// was asked to downgrade (refused) and deleted. Finalizing read the
    /// downgrade as an upgrade to 14 and reported its pre-upgrade backup
    /// (a Job never made), while the deletion, the upgrade abandoned, let
    /// the rollout's switchover go on: a promote Job in switchover mode
    /// with no rollout in the status. An upgrade abandoned by a deletion
    /// reports no step; one that reached its restore goes on.
    #[test]
    fn regression_a_deletion_reports_no_step_of_an_abandoned_upgrade() {
        let ctx = Context::fixed();
        let deleting = |version: &str| {
            let mut d = db(version, "Delete");
            d.metadata.deletion_timestamp = Some(Time("2026-03-04T05:06:00Z".parse().unwrap()));
            d
        };
        let cases = [
            ("a refused downgrade", "14", vec![], Upgrade::None),
            ("an upgrade before its backup", "17", vec![], Upgrade::None),
            (
                "an upgrade backing up",
                "17",
                vec![("orders-pre-upgrade-17", "Running")],
                Upgrade::None,
            ),
            (
                "an upgrade whose backup failed",
                "17",
                vec![("orders-pre-upgrade-17", "Failed")],
                Upgrade::None,
            ),
            (
                "an upgrade restoring",
                "17",
                vec![
                    ("orders-pre-upgrade-17", "Complete"),
                    ("orders-upgrade-17", "Running"),
                ],
                Upgrade::Restoring { to: Major::V17 },
            ),
        ];
        for (what, version, jobs, want) in cases {
            let mut seen = serving("16");
            for (name, state) in jobs {
                seen = with_job(seen, name, state);
            }
            let (planned, _) = plan_finalize(&deleting(version), &seen, &ctx).unwrap();
            assert_eq!(planned.upgrade.step, want, "{what}");
        }
    }

    /// Found by the lives (issue 21): a Database deleted while its primary
    /// was not ready designated a standby in the middle of the deletion,
    /// whose promote Job the deletion's answer never made (it made no Job
    /// but the snapshot): the old primary fenced, the new one never
    /// promoted, the snapshot waiting for a primary for ever. A primary
    /// lost while deleting is replaced as at any other time, so that the
    /// final snapshot can read the new one.
    #[test]
    fn regression_a_failover_while_deleting_makes_its_promote_job() {
        let ctx = Context::fixed();
        let mut seen = serving("16");
        seen.pods = vec![
            instance(0).not_ready_since("2026-03-04T05:00:00Z").typed(),
            instance(1).ready().typed(),
        ];
        seen.jobs
            .insert(jobs::init(&db("16", "Snapshot")), job("Complete"));
        let seen = seen.at(ctx.now);
        let mut deleting = db("16", "Snapshot");
        deleting.metadata.deletion_timestamp = Some(Time("2026-03-04T05:06:00Z".parse().unwrap()));
        deleting.status =
            Some(serde_json::from_value(json!({"currentPrimary": "orders-0"})).unwrap());
        let (planned, _) = plan_finalize(&deleting, &seen, &ctx).unwrap();
        assert_eq!(
            (planned.primary.designated, planned.primary.epoch),
            (1, 1),
            "the first ready standby is designated, deleting or not"
        );
        assert!(
            !planned.snapshot_job,
            "no snapshot of a primary being replaced"
        );

        deleting.status = Some(
            serde_json::from_value(
                json!({"currentPrimary": "orders-0", "targetPrimary": "orders-1", "primaryEpoch": 1}),
            )
            .unwrap(),
        );
        let mut fenced = seen.clone();
        fenced.role = Some(crate::operators::database::observed::Role {
            primary: "orders-1".into(),
            epoch: 1,
            ..Default::default()
        });
        let (planned, _) = plan_finalize(&deleting, &fenced, &ctx).unwrap();
        assert_eq!(
            planned.primary.promote_job.as_deref(),
            Some("orders-promote-1-1")
        );
        let built = children::build(&deleting, &fenced, &planned, &ctx).unwrap();
        assert!(
            built
                .iter()
                .any(|c| c.group_and_name().1 == "orders-promote-1-1"),
            "the deletion's answer makes the promote Job"
        );
    }

    /// Issue 8: once the StatefulSet and the snapshot Job were gone, the
    /// next finalize call desired both again: new empty volumes, and a
    /// snapshot of the empty database uploaded as the newest dump.
    #[test]
    fn regression_deletion_never_creates_the_statefulset_or_a_done_snapshot_again() {
        struct Case {
            reason: &'static str,
            policy: &'static str,
            statefulset: bool,
            jobs: Vec<(&'static str, &'static str)>,
            recorded: bool,
            want_statefulset: bool,
            want_snapshot_job: bool,
        }
        let cases = [
            Case {
                reason: "StatefulSet and snapshot Job gone, snapshot recorded",
                policy: "Snapshot",
                statefulset: false,
                jobs: vec![],
                recorded: true,
                want_statefulset: false,
                want_snapshot_job: false,
            },
            Case {
                reason: "StatefulSet and snapshot Job gone, nothing recorded (status lost)",
                policy: "Snapshot",
                statefulset: false,
                jobs: vec![],
                recorded: false,
                want_statefulset: false,
                want_snapshot_job: false,
            },
            Case {
                reason: "snapshot Job gone after success, StatefulSet still there",
                policy: "Snapshot",
                statefulset: true,
                jobs: vec![],
                recorded: true,
                want_statefulset: true,
                want_snapshot_job: false,
            },
            Case {
                reason: "failed snapshot Job deleted by the user: retry",
                policy: "Snapshot",
                statefulset: true,
                jobs: vec![],
                recorded: false,
                want_statefulset: true,
                want_snapshot_job: true,
            },
            Case {
                reason: "Delete: StatefulSet gone stays gone",
                policy: "Delete",
                statefulset: false,
                jobs: vec![("orders-init", "Complete")],
                recorded: false,
                want_statefulset: false,
                want_snapshot_job: false,
            },
            Case {
                reason: "Retain: StatefulSet gone stays gone",
                policy: "Retain",
                statefulset: false,
                jobs: vec![],
                recorded: false,
                want_statefulset: false,
                want_snapshot_job: false,
            },
        ];
        for case in cases {
            let d = db("16", case.policy);
            let mut seen = if case.statefulset {
                serving("16")
            } else {
                Observed::default()
            };
            seen.jobs = case
                .jobs
                .iter()
                .map(|(n, s)| (n.to_string(), job(s)))
                .collect();
            let deletion = Deletion {
                snapshot_time: case.recorded.then(|| "2026-01-01T00:00:00Z".to_string()),
            };
            let mut parent = d.clone();
            parent.status = Some(DatabaseStatus {
                version: Some("16".into()),
                ..DatabaseStatus::default()
            });
            let base = plan(&parent, &seen).unwrap();
            let got = plan_deletion(&parent, &seen, &deletion, base);
            assert_eq!(
                got.keep_statefulset, case.want_statefulset,
                "{}",
                case.reason
            );
            assert_eq!(got.snapshot_job, case.want_snapshot_job, "{}", case.reason);
            assert!(
                !got.init_job || seen.jobs.contains_key("orders-init"),
                "{}",
                case.reason
            );
        }
    }

    #[test]
    fn a_recorded_snapshot_stays_recorded() {
        let mut d = db("16", "Snapshot");
        d.status = Some(DatabaseStatus {
            snapshot_time: Some("2026-01-01T00:00:00Z".into()),
            ..DatabaseStatus::default()
        });
        let got = Deletion::observe(&d, &Observed::default(), &Context::fixed());
        assert_eq!(got.snapshot_time.as_deref(), Some("2026-01-01T00:00:00Z"));
        let mut failed = Observed::default();
        failed.jobs.insert("orders-snapshot".into(), job("Failed"));
        let got = Deletion::observe(&db("16", "Snapshot"), &failed, &Context::fixed());
        assert_eq!(got.snapshot_time, None, "a failed snapshot records nothing");
        // Issue 31: a status written by hand finished a failed snapshot.
        for forged in ["", "garbage", "2026-01-01T00:00:00Z"] {
            d.status = Some(DatabaseStatus {
                snapshot_time: Some(forged.into()),
                ..DatabaseStatus::default()
            });
            let got = Deletion::observe(&d, &failed, &Context::fixed());
            assert_eq!(got.snapshot_time, None, "{forged:?} over a failed Job");
            let got = Deletion::observe(&d, &Observed::default(), &Context::fixed());
            assert_eq!(
                got.snapshot_time.is_some(),
                !forged.is_empty() && forged != "garbage"
            );
        }
    }
}
