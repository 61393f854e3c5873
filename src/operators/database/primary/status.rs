//! What the status says of the primary: who it is, each instance's role,
//! the last failover, and the `FailingOver` condition.

use super::super::names::pod_name;
use super::super::observed::Observed;
use super::super::spec::{Database, InstanceStatus, LastFailover};
use super::{Primary, Step, delay_seconds};
use crate::hook::conditions::{ConditionStatus, Observation, format_time};

/// The last failover: the one the plan saw succeed now, else the one
/// recorded.
pub(in super::super) fn last(db: &Database, primary: &Primary) -> Option<LastFailover> {
    let Some(new) = &primary.last else {
        return db.status.as_ref()?.last_failover.clone();
    };
    let from = new.from.map(|o| pod_name(db, o));
    let to = pod_name(db, new.to);
    Some(LastFailover {
        at: new.at.map(format_time),
        reason: if new.planned {
            format!("planned switchover; job {} promoted {to}", new.job)
        } else if let Some(from) = &from {
            format!(
                "{from} was not ready for longer than spec.failover.delay; job {} promoted {to}",
                new.job
            )
        } else {
            // Nothing recorded which instance served (a Database created
            // again over retained volumes designates the newest data): no
            // guess at why.
            format!(
                "job {} promoted {to}; no serving primary was recorded before it",
                new.job
            )
        },
        from,
        to,
        epoch: new.epoch,
    })
}

/// Each observed instance the StatefulSet runs: its role and readiness.
/// Of the `replicas` instances the plan runs.
pub(in super::super) fn instances(
    db: &Database,
    seen: &Observed,
    primary: &Primary,
    replicas: i32,
) -> Vec<InstanceStatus> {
    let mut out: Vec<(u32, InstanceStatus)> = seen
        .instances(db)
        .filter(|(o, _)| i64::from(*o) < i64::from(replicas))
        .map(|(o, pod)| {
            let role = match (o == primary.designated, Some(o) == primary.serving) {
                (true, true) => "primary",
                (true, false) => "promoting",
                (false, true) => "fenced",
                (false, false) => "standby",
            };
            let status = InstanceStatus {
                name: pod_name(db, o),
                role: role.to_string(),
                ready: pod.is_ready(),
            };
            (o, status)
        })
        .collect();
    out.sort_by_key(|(o, _)| *o);
    out.dedup_by_key(|(o, _)| *o);
    out.into_iter().map(|(_, s)| s).collect()
}

/// `FailingOver`: True while the primary changes or a change is stuck;
/// False otherwise, saying whether the primary is not ready and what
/// happens next.
pub(in super::super) fn condition(
    db: &Database,
    seen: &Observed,
    primary: &Primary,
) -> Observation {
    let designated = pod_name(db, primary.designated);
    let epoch = primary.epoch;
    let why_down = seen
        .volume_refusal(db, primary.designated)
        .map(|(why, _)| format!(" (it refuses to start: {why})"))
        .unwrap_or_default();
    let delay = delay_seconds(db);
    let (status, reason, message) = match &primary.step {
        Step::Steady if primary.changing() => (
            ConditionStatus::True,
            "Promoting",
            format!("{designated} is being promoted at epoch {epoch}"),
        ),
        Step::Steady => steady(&designated, primary),
        Step::Waiting { since, after } => (
            ConditionStatus::False,
            "PrimaryNotReady",
            format!(
                "primary {designated} not ready since {}{why_down}; a ready standby takes over at {} (spec.failover.delay {delay}s) if it stays so",
                format_time(*since),
                format_time(*after)
            ),
        ),
        Step::NoCandidate { since } => (
            ConditionStatus::False,
            "NoCandidate",
            format!(
                "primary {designated} not ready since {}{why_down}, longer than spec.failover.delay ({delay}s), and no standby is ready to take over; writes wait until one is",
                format_time(*since)
            ),
        ),
        Step::Fencing => fencing(db, primary),
        Step::Starting => (
            ConditionStatus::True,
            "Starting",
            format!(
                "{designated} is designated primary at epoch {epoch}, and no instance is known to serve (the role was lost); its promote job starts once {designated} is ready on the data it holds"
            ),
        ),
        Step::Promoting => promoting(db, primary),
        Step::RoleLost(why) => (
            ConditionStatus::True,
            "RoleLost",
            format!("{why}; writes wait"),
        ),
        Step::Stuck => (
            ConditionStatus::True,
            "PromoteRefused",
            format!(
                "no standby could be promoted at epoch {epoch}: {}; writes wait; fix the cause and delete the failed promote jobs to try again",
                refusals(primary)
            ),
        ),
    };
    Observation::new("FailingOver", status, reason, message)
}

/// The words of a primary that serves: stable, or stable with a request
/// or a status field that was ignored, and why.
fn steady(designated: &str, primary: &Primary) -> (ConditionStatus, &'static str, String) {
    let epoch = primary.epoch;
    match &primary.request_ignored {
        Some(why) => (
            ConditionStatus::False,
            "SwitchoverIgnored",
            format!("{designated} is the primary (epoch {epoch}); {why}"),
        ),
        None => (
            ConditionStatus::False,
            "Stable",
            match &primary.status_ignored {
                Some(why) => format!("{designated} is the primary (epoch {epoch}); {why}"),
                None => format!("{designated} is the primary (epoch {epoch})"),
            },
        ),
    }
}

/// The words while a new primary is fenced: a switchover's (planned), or a
/// failover's.
fn fencing(db: &Database, primary: &Primary) -> (ConditionStatus, &'static str, String) {
    let designated = pod_name(db, primary.designated);
    let epoch = primary.epoch;
    match primary.planned {
        true => (
            ConditionStatus::True,
            "SwitchingOver",
            format!(
                "{designated} is designated primary at epoch {epoch} for a switchover{}; the read-write Service stays on the old primary until its promote job has stopped writes there and promoted {designated}",
                replacing(db, primary)
            ),
        ),
        false => (
            ConditionStatus::True,
            "Fencing",
            format!(
                "{}{designated} is designated primary at epoch {epoch}{}; the read-write Service selects it, and its promote job starts once every instance reads the role ConfigMap",
                recovered(primary),
                replacing(db, primary)
            ),
        ),
    }
}

/// The words while the promote Job runs: a switchover's (planned), or a
/// failover's.
fn promoting(db: &Database, primary: &Primary) -> (ConditionStatus, &'static str, String) {
    let designated = pod_name(db, primary.designated);
    match primary.planned {
        true => (
            ConditionStatus::True,
            "SwitchingOver",
            format!(
                "job {} stops writes on the old primary, waits until {designated} has all of its WAL, then promotes it{}",
                primary.promote_job.as_deref().unwrap_or_default(),
                replacing(db, primary)
            ),
        ),
        false => (
            ConditionStatus::True,
            "Promoting",
            format!(
                "job {} promotes {designated}{} once it is the most advanced standby and the old primary does not answer as one",
                primary.promote_job.as_deref().unwrap_or_default(),
                replacing(db, primary)
            ),
        ),
    }
}

fn recovered(primary: &Primary) -> String {
    primary
        .recovered
        .as_ref()
        .map(|why| format!("{why}: "))
        .unwrap_or_default()
}

fn replacing(db: &Database, primary: &Primary) -> String {
    primary
        .serving
        .filter(|o| *o != primary.designated)
        .map(|o| format!(" in place of {}", pod_name(db, o)))
        .unwrap_or_default()
}

fn refusals(primary: &Primary) -> String {
    primary
        .refusals
        .iter()
        .map(|r| format!("job {}: {}", r.job, r.said))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::super::super::primary::decide;
    use super::super::super::primary::tests::{EMPTY_VOLUME, db, instance};
    use super::*;
    use serde_json::json;

    /// docs/failover.md ("A lost volume"): the designated primary's
    /// refusal of its empty volume is what `FailingOver` says while the
    /// delay runs.
    #[test]
    fn failing_over_repeats_the_primarys_refusal_of_its_empty_volume() {
        let db = db(json!({"currentPrimary": "orders-0", "primaryEpoch": 0}));
        let refusing = instance(0)
            .not_ready_since("2026-03-04T05:06:00Z")
            .set(
                "/status/containerStatuses",
                json!([{"name": "postgres", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1, "message": EMPTY_VOLUME}}}]),
            )
            .typed();
        let seen = Observed {
            pods: vec![
                refusing,
                instance(1).ready().typed(),
                instance(2).ready().typed(),
            ],
            ..Observed::default()
        }
        .at("2026-03-04T05:06:07Z".parse().unwrap());
        let primary = decide(&db, &seen, true, None);
        let c = condition(&db, &seen, &primary);
        assert_eq!(c.reason, "PrimaryNotReady", "{}", c.message);
        assert!(
            c.message.contains("(it refuses to start: the data directory /var/lib/postgresql/data/pg16 is empty although the Database was initialized"),
            "{}",
            c.message
        );
    }
}
