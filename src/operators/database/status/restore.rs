//! `Restored` and `status.restoredFrom`: whether the bootstrap's dump is
//! in, from which object, or why not (a failed step, as its pod said it;
//! or data this Database already holds, which nothing is restored over).

use super::super::names::jobs;
use super::super::observed::Observed;
use super::super::plan::{Holds, Plan, Restore};
use super::super::spec::{Database, RestoredFrom, bootstrap_destination};
use crate::hook::conditions::{ConditionStatus, Observation, format_time};
use crate::operator::Context;
use crate::operators::report::Report;
use k8s_openapi::jiff::Timestamp;

/// The dump this Database was restored from: as recorded, or, the first
/// time the restore Job is seen succeeded, as its pod reported it (the
/// choice in words when the pod is gone).
pub(super) fn restored_from(
    db: &Database,
    seen: &Observed,
    plan: &Plan,
    ctx: &Context,
) -> Option<RestoredFrom> {
    if let Some(recorded) = db.status.as_ref().and_then(|s| s.restored_from.clone()) {
        return Some(recorded);
    }
    if plan.restore != Restore::Done {
        return None;
    }
    let job_name = jobs::restore(db);
    // Nothing to report without the restore Job observed.
    seen.job(&job_name)?;
    let at = seen.job_completed_at(&job_name).unwrap_or(ctx.now);
    let report = seen.job_message(&job_name, "restore").map(Report::parse);
    let Some(Ok(Report::Restored { bytes, taken, key })) = report else {
        return Some(RestoredFrom {
            object: db
                .spec
                .bootstrap
                .as_ref()
                .map(|b| b.describe())
                .unwrap_or_default(),
            bytes: None,
            taken: None,
            restored_at: format_time(at),
        });
    };
    let bucket = bootstrap_destination(db).map_or("", |d| d.s3_bucket.as_str());
    Some(RestoredFrom {
        object: format!("s3://{bucket}/{key}"),
        bytes,
        // The schema says date-time: a report's time that is not one is left out.
        taken: taken
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map(format_time),
        restored_at: format_time(at),
    })
}

/// `Restored`: whether the bootstrap's dump is in, or why not.
pub(super) fn restored(
    db: &Database,
    seen: &Observed,
    plan: &Plan,
    from: Option<&RestoredFrom>,
) -> Observation {
    let job = jobs::restore(db);
    let reason = plan.restore.reason();
    let (status, message) = match plan.restore {
        Restore::Done => (
            ConditionStatus::True,
            from.map_or_else(|| format!("job {job} restored the dump"), restored_words),
        ),
        Restore::Running => (
            ConditionStatus::Unknown,
            format!(
                "job {job} restores {}{}{}; nobody can write until it succeeded",
                db.spec
                    .bootstrap
                    .as_ref()
                    .map(|b| b.describe())
                    .unwrap_or_default(),
                bootstrap_destination(db)
                    .map(|d| format!(" from s3://{}/{}", d.s3_bucket, d.s3_prefix))
                    .unwrap_or_default(),
                if plan.restore_job {
                    ""
                } else {
                    " once the primary is ready"
                }
            ),
        ),
        Restore::Failed => (
            ConditionStatus::False,
            format!(
                "job {job} failed: {}; the Database does not serve; fix the cause and delete the job to retry",
                failure(seen, &job)
            ),
        ),
        Restore::NotOver(holds) => (ConditionStatus::False, not_over(holds)),
        Restore::None => (ConditionStatus::False, "no spec.bootstrap".to_string()),
    };
    Observation::new("Restored", status, reason, message)
}

/// The recorded restore, in words.
fn restored_words(from: &RestoredFrom) -> String {
    let mut words = format!("restored {}", from.object);
    if let Some(bytes) = from.bytes {
        words.push_str(&format!(" ({bytes} bytes)"));
    }
    if let Some(taken) = &from.taken {
        words.push_str(&format!(", taken {taken}"));
    }
    words.push_str(&format!(", at {}", from.restored_at));
    words
}

/// Why a restore Job failed, as its pod said it (the first container that
/// left a reason), or where to look.
fn failure(seen: &Observed, job: &str) -> String {
    ["select", "init", "restore"]
        .into_iter()
        .find_map(|c| seen.job_message(job, c))
        .map(|m| match Report::parse(m) {
            Ok(report) => report.words(),
            Err(unreadable) => unreadable.words.to_string(),
        })
        .unwrap_or_else(|| format!("see kubectl logs job/{job} --all-containers"))
}

/// Why nothing is restored over what the Database holds.
fn not_over(holds: Holds) -> String {
    match holds {
        Holds::Initialized => "this Database was initialized: nothing is restored over its data",
        Holds::RetainedVolumes => {
            "volumes of an earlier Database of this name were here: it serves their data, and nothing is restored over it; to restore instead, delete those volumes and this Database, then create it again"
        }
    }
    .to_string()
}
