//! The promote Jobs that failed: what each reported, and the switchovers
//! a rollout had refused in a row under its template.

use super::super::names::pod_name;
use super::super::observed::Observed;
use super::super::spec::Database;
use super::{ANNOTATION_SWITCHOVER, SWITCHOVER_MODE, promote_jobs};
use crate::operators::backup_job::RunStatus;
use crate::operators::report::{self, Report, Unreadable};

/// What a failed promote Job reported (`promote.sh`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The Job.
    pub job: String,
    /// Its words, after `opshooks promote: `.
    pub said: String,
    /// It refused before `pg_promote()`: nothing was promoted.
    pub before_promoting: bool,
    /// It refused because the old primary still answers as a primary.
    pub old_primary_answers: bool,
}

/// The switchover promote Jobs that failed under the instances' template
/// last written (the rollout under way) since the primary last changed
/// (at epochs above every succeeded promote Job's), newest first. A new
/// template, the one that mends the cause perhaps, starts the count again.
pub(super) fn refused_switchovers<'a>(db: &'a Database, seen: &'a Observed) -> Vec<(u64, &'a str)> {
    let Some(template) = seen.template_hash() else {
        return Vec::new();
    };
    let since = promote_jobs(db, seen)
        .filter(|(_, _, job)| seen.job(job) == Some(RunStatus::Succeeded))
        .map(|(epoch, _, _)| epoch)
        .max()
        .unwrap_or(0);
    let mut refused: Vec<(u64, &str)> = promote_jobs(db, seen)
        .filter(|(epoch, _, job)| {
            *epoch > since
                && seen.job(job) == Some(RunStatus::Failed)
                && seen.job_env(job, "MODE") == Some(SWITCHOVER_MODE)
                && seen.job_template_hash(job) == Some(template)
        })
        .map(|(epoch, _, job)| (epoch, job))
        .collect();
    refused.sort_unstable_by(|a, b| b.cmp(a));
    refused
}

/// Why the rollout no longer asks for its switchover to `to`, and how a
/// person goes on.
pub(super) fn rollout_gave_up(
    db: &Database,
    seen: &Observed,
    to: u32,
    refused: &[(u64, &str)],
) -> String {
    let (_, last) = refused[0];
    let why = refusal(seen, last).said;
    format!(
        "the rollout's switchover to {} is not asked again: {} switchovers in a row were refused under the template it rolls out (the last, job {last}: {why}); once the cause is mended, ask for it with the annotation {ANNOTATION_SWITCHOVER}: {}@<status.primaryEpoch>, or change the template",
        pod_name(db, to),
        refused.len(),
        pod_name(db, to),
    )
}

/// What this epoch's failed promote Jobs reported, by Job.
pub(super) fn refusals(db: &Database, seen: &Observed, epoch: u64) -> Vec<Refusal> {
    promote_jobs(db, seen)
        .filter(|(e, _, job)| *e == epoch && seen.job(job) == Some(RunStatus::Failed))
        .map(|(_, _, job)| refusal(seen, job))
        .collect()
}

/// What a failed promote Job reported.
pub(super) fn refusal(seen: &Observed, job: &str) -> Refusal {
    let said = seen.job_message(job, "promote").map(Report::parse);
    let (said, before_promoting, old_primary_answers) = match said {
        Some(Ok(r)) if r.prefix() == report::PROMOTE => {
            let answers = matches!(
                r,
                Report::PromoteRefused {
                    old_primary_answers: true,
                    ..
                }
            );
            let refused = matches!(r, Report::PromoteRefused { .. });
            (r.words(), refused, answers)
        }
        Some(Err(Unreadable {
            prefix: Some(report::PROMOTE),
            words,
        })) => (words.to_string(), false, false),
        _ => (
            "failed without a report; see its logs".to_string(),
            false,
            false,
        ),
    };
    Refusal {
        job: job.to_string(),
        said,
        before_promoting,
        old_primary_answers,
    }
}
