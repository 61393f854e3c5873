//! The status of a Backup: what was observed of its CronJob, target and
//! runs, and one small function per condition (`TargetFound`, `Ready`,
//! `LastBackupSucceeded` and, with `spec.verify`, `BackupVerified`).
//! Computed from observed objects only; imports `spec` and `source` below it.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::source::Unusable;
use super::spec::{Backup, BackupStatus, cron_job_name};
use crate::hook::ObservedPod;
use crate::hook::conditions::{self, ConditionStatus, Observation, format_time};
use crate::operator::Context;
use crate::operators::backup_job::verification::{self, VerifiedBackup};
use crate::operators::backup_job::{RunStatus, Source, run_status};

/// With `spec.verify`: `BackupVerified` and the newest dump proven to
/// restore, from the newest finished verification run; its schedule (read
/// in UTC: the verify CronJob names no time zone) bounds how old the proof
/// may be.
fn verified(
    b: &Backup,
    pods: &[ObservedPod],
    jobs: &[Job],
    ctx: &Context,
) -> (Option<Observation>, Option<VerifiedBackup>) {
    let Some(verify) = &b.spec.verify else {
        return (None, None);
    };
    let report = verification::newest_report(pods.iter(), jobs.iter());
    let recorded = b
        .status
        .as_ref()
        .and_then(|s| s.last_verified_backup.as_ref());
    let last = verification::last_verified(report.as_ref(), recorded);
    let overdue = verify.schedule.as_deref().and_then(|schedule| {
        verification::Overdue::of(
            schedule,
            ctx.now,
            b.metadata.creation_timestamp.as_ref().map(|t| t.0),
            last.as_ref().and_then(verification::proof_time),
        )
    });
    (
        Some(verification::condition(
            report.as_ref(),
            recorded,
            overdue.as_ref(),
        )),
        last,
    )
}

/// A Kubernetes time as status writes it.
fn time(t: &Option<Time>) -> Option<String> {
    t.as_ref().map(|t| format_time(t.0))
}

/// The most recent of several Jobs: latest creation, then name.
pub fn latest(jobs: &[Job]) -> Option<&Job> {
    jobs.iter().max_by(|a, b| {
        let key = |j: &Job| {
            (
                j.metadata.creation_timestamp.as_ref().map(|t| t.0),
                j.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    })
}

/// The status of a Backup from its observed CronJob, target and Jobs.
pub fn status(
    b: &Backup,
    cron: Option<&CronJob>,
    target: Option<&Result<Source, Unusable>>,
    (jobs, pods, verify_jobs): (&[Job], &[ObservedPod], &[Job]),
    ctx: &Context,
) -> BackupStatus {
    let cron_status = cron.and_then(|c| c.status.as_ref());
    let last = latest(jobs);
    let last_status = last.map_or(RunStatus::None, run_status);
    let last_backup_time = jobs
        .iter()
        .filter(|j| run_status(j) == RunStatus::Succeeded)
        .filter_map(|j| j.status.as_ref()?.completion_time.as_ref().map(|t| t.0))
        .max()
        .map(format_time)
        .or_else(|| time(&cron_status.and_then(|s| s.last_successful_time.clone())));
    let previous = b
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let (verified, last_verified_backup) = verified(b, pods, verify_jobs, ctx);
    let mut observations = vec![
        target_found(b, target, cron.is_some()),
        ready(b, cron, target),
        last_backup_succeeded(last, last_status),
    ];
    observations.extend(verified);
    BackupStatus {
        cron_job_name: cron.and_then(|c| c.metadata.name.clone()),
        last_schedule_time: time(&cron_status.and_then(|s| s.last_schedule_time.clone())),
        last_backup_time,
        last_backup_status: last_status,
        last_verified_backup,
        conditions: conditions::reconcile(previous, observations, b.metadata.generation, ctx.now),
        observed_generation: None,
    }
}

/// `TargetFound`: whether the StatefulSet to back up exists.
/// What happens meanwhile depends on whether a CronJob was made before:
/// it is kept, suspended; none is made while there is nothing to back up.
fn target_found(
    b: &Backup,
    target: Option<&Result<Source, Unusable>>,
    has_cron: bool,
) -> Observation {
    let target_name = &b.spec.target.name;
    let ns = b.metadata.namespace.as_deref().unwrap_or("default");
    let meanwhile = match has_cron {
        true => "the CronJob is kept, suspended, until it exists",
        false => "no CronJob is made until it exists",
    };
    match target {
        None => Observation::new(
            "TargetFound",
            false,
            "TargetNotFound",
            format!(
                "statefulset {target_name} was not found in namespace {ns}; {meanwhile}; stored backups are kept"
            ),
        ),
        Some(_) => Observation::new(
            "TargetFound",
            true,
            "TargetFound",
            format!("statefulset {target_name} found"),
        ),
    }
}

/// `Ready`: whether backups are scheduled, or why not.
fn ready(
    b: &Backup,
    cron: Option<&CronJob>,
    target: Option<&Result<Source, Unusable>>,
) -> Observation {
    match (target, cron, b.spec.suspend) {
        (Some(Err(why)), _, _) => Observation::new("Ready", false, why.reason, why.message.clone()),
        (None, _, _) => Observation::new("Ready", false, "TargetNotFound", "no target to back up"),
        (_, None, _) => Observation::new(
            "Ready",
            false,
            "CronJobPending",
            format!("waiting for CronJob {} to be created", cron_job_name(b)),
        ),
        (_, Some(_), true) => Observation::new(
            "Ready",
            false,
            "Suspended",
            "spec.suspend is true; no backups are scheduled",
        ),
        (_, Some(_), false) => Observation::new(
            "Ready",
            true,
            "Scheduled",
            format!("backups run on schedule {:?}", b.spec.schedule.trim()),
        ),
    }
}

/// `LastBackupSucceeded`: how the newest backup Job went.
fn last_backup_succeeded(last: Option<&Job>, last_status: RunStatus) -> Observation {
    let last_name = last
        .and_then(|j| j.metadata.name.clone())
        .unwrap_or_default();
    match last_status {
        RunStatus::Succeeded => Observation::new(
            "LastBackupSucceeded",
            true,
            "Succeeded",
            format!("job {last_name} succeeded"),
        ),
        RunStatus::Failed => Observation::new(
            "LastBackupSucceeded",
            false,
            "Failed",
            format!("job {last_name} failed; see kubectl logs job/{last_name} --all-containers"),
        ),
        RunStatus::Running => Observation::new(
            "LastBackupSucceeded",
            ConditionStatus::Unknown,
            "Running",
            format!("job {last_name} is running"),
        ),
        RunStatus::None => Observation::new(
            "LastBackupSucceeded",
            ConditionStatus::Unknown,
            "NoBackupYet",
            "no backup has run yet",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn job_runs_order_by_creation_then_name() {
        let jobs: [Job; 2] = [
            fixtures::job("b")
                .created("2026-01-02T00:00:00Z")
                .failed()
                .typed(),
            fixtures::job("a")
                .created("2026-01-03T00:00:00Z")
                .succeeded()
                .typed(),
        ];
        assert_eq!(latest(&jobs).unwrap().metadata.name.as_deref(), Some("a"));
        assert_eq!(run_status(&jobs[0]), RunStatus::Failed);
        assert_eq!(run_status(&jobs[1]), RunStatus::Succeeded);
    }
}
