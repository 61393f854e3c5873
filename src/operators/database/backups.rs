//! Backups: the scheduled dumps (a CronJob of the Backup operator's job),
//! the final snapshot before deletion, and the verification that restores
//! the newest dump into a throwaway server. How a dump is made is
//! [`dumps`](super::dumps); the dump before an upgrade is the upgrade's.

use k8s_openapi::api::batch::v1::Job;

use super::dumps::{backup_job, backup_plan, source};
use super::names::{backup_cron_name, jobs, verify_name};
use super::objects::{job_labels, meta};
use super::observed::Observed;
use super::plan::Plan;
use super::spec::{Database, name};
use crate::hook::Child;
use crate::hook::conditions::Observation;
use crate::operator::Context;
use crate::operators::backup_job::verification::{self, VerifiedBackup};
use crate::operators::backup_job::{self, Schedule};

/// The final snapshot, a dump with the backup job, before deletion.
fn snapshot_job(db: &Database, plan: &Plan) -> Option<Job> {
    backup_job(
        db,
        jobs::snapshot(db),
        plan.images.image(plan.version),
        &plan.tls,
    )
}

/// The scheduled backups, when enabled.
fn backup_cron_job(db: &Database, plan: &Plan) -> Option<k8s_openapi::api::batch::v1::CronJob> {
    // A schedule before the bootstrap's restore would store empty dumps
    // under this Database's name, newer than the one it restores.
    let backup = db
        .spec
        .backup
        .as_ref()
        .filter(|b| b.enabled && plan.restore.lets_serve())?;
    let source = source(db, plan.images.image(plan.version));
    let dump_name = name(db).to_string();
    let job_plan = backup_plan(db, &source, &dump_name, backup.retention_days)?;
    let schedule = Schedule {
        cron: backup.schedule.as_deref()?.trim(),
        time_zone: None,
        suspend: false,
        history: (3, 3),
    };
    let mut cron = backup_job::scheduled(meta(db, backup_cron_name(db)), &schedule, &job_plan);
    let pod = cron
        .spec
        .as_mut()
        .and_then(|s| s.job_template.spec.as_mut())
        .and_then(|j| j.template.spec.as_mut());
    if let Some(pod) = pod {
        plan.tls.apply(pod, &["dump"]);
    }
    Some(cron)
}

/// How this Database's dumps are verified, once it serves: the newest of
/// them (scheduled, pre-upgrade or snapshot), restored with the running
/// major's image (the dumps' own or newer).
fn verification<'a>(db: &'a Database, plan: &Plan) -> Option<verification::Run<'a>> {
    let backup = db.spec.backup.as_ref()?;
    backup.verify.as_ref()?;
    plan.restore.lets_serve().then(|| verification::Run {
        destination: &backup.destination,
        names: jobs::dump_names(name(db)),
        image: plan.images.image(plan.version),
        upload_image: backup.upload_image(),
        service_account: backup.service_account_name.as_deref(),
        resources: backup.resources.as_ref(),
        labels: job_labels(db),
    })
}

/// The children backups add, as the plan decided: the final snapshot, the
/// scheduled dumps, and the verification's runs (on its schedule, and
/// after each backup).
pub(super) fn children(db: &Database, plan: &Plan) -> Vec<Child> {
    let mut out = Vec::new();
    if plan.snapshot_job {
        out.extend(snapshot_job(db, plan).as_ref().map(Child::new));
    }
    if let Some(cron) = backup_cron_job(db, plan) {
        out.push(Child::new(&cron));
    }
    if let Some(run) = verification(db, plan) {
        let verify = db.spec.backup.as_ref().and_then(|b| b.verify.as_ref());
        if let Some(schedule) = verify.and_then(|v| v.schedule.as_deref()) {
            out.push(Child::new(
                &run.scheduled(meta(db, verify_name(db)), schedule.trim()),
            ));
        }
        if let Some(at) = plan.verify_after {
            out.push(Child::new(&run.after_backup(meta(db, verify_name(db)), at)));
        }
    }
    out
}

/// `BackupScheduled`: whether scheduled backups are asked for and set up.
pub(super) fn backup_scheduled(db: &Database, seen: &Observed, restored: bool) -> Observation {
    match &db.spec.backup {
        Some(b) if b.enabled && !restored => Observation::new(
            "BackupScheduled",
            false,
            "WaitingForRestore",
            "scheduled backups start once the restore succeeded",
        ),
        Some(b) if b.enabled => match &seen.cron_job {
            Some(_) => Observation::new(
                "BackupScheduled",
                true,
                "Scheduled",
                format!(
                    "backups run on schedule {:?}",
                    b.schedule.as_deref().unwrap_or_default()
                ),
            ),
            None => Observation::new(
                "BackupScheduled",
                false,
                "CronJobPending",
                "the backup CronJob is being created",
            ),
        },
        _ => Observation::new(
            "BackupScheduled",
            false,
            "Disabled",
            "spec.backup.enabled is false",
        ),
    }
}

/// With `spec.backup.verify`: `BackupVerified`, from the newest finished
/// verification run; and the newest dump proven to restore, now or before.
/// Its schedule (read in UTC: the verify CronJob names no time zone)
/// bounds how old the proof may be.
pub(super) fn verified(
    db: &Database,
    seen: &Observed,
    ctx: &Context,
) -> (Option<Observation>, Option<VerifiedBackup>) {
    let report = verification::newest_report(seen.pods.iter(), seen.jobs.values());
    let recorded = db
        .status
        .as_ref()
        .and_then(|s| s.last_verified_backup.as_ref());
    let verify = db.spec.backup.as_ref().and_then(|b| b.verify.as_ref());
    let last = verification::last_verified(report.as_ref(), recorded);
    let overdue = verify
        .and_then(|v| v.schedule.as_deref())
        .and_then(|schedule| {
            verification::Overdue::of(
                schedule,
                ctx.now,
                db.metadata.creation_timestamp.as_ref().map(|t| t.0),
                last.as_ref().and_then(verification::proof_time),
            )
        });
    (
        verify.map(|_| verification::condition(report.as_ref(), recorded, overdue.as_ref())),
        last,
    )
}
