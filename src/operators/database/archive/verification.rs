//! Proving base backups restore (`spec.backup.archive.verifySchedule`,
//! issue 35): a base backup counts once it has been restored, with the
//! archive replayed over it. As the dumps' verification does for a dump, a
//! CronJob's run restores the newest one into a throwaway PostgreSQL: the
//! recovery's own two steps, to the end of the archive, in a Job's pod
//! instead of an instance's.
//!
//! - init container `pitr-fetch`: `pitr-fetch.sh` downloads the newest
//!   finished base backup into an `emptyDir` (no role is mounted: it never
//!   skips);
//! - `archiver`: `archiver.sh`, which serves the replay's segments from
//!   the Database's own archive (`RECOVERY_SERVER`) and archives nothing;
//!   it ends once the replay wrote `ARCHIVER_UNTIL` (the pod is done only
//!   when every container is);
//! - `verify`: `verify-base.sh`, which runs `pitr-replay.sh` from the
//!   archive's ConfigMap over it to the end of the archive, promotes and
//!   stops the server.
//!
//! The two scripts' lines, read from the newest finished run's pod, make
//! `status.lastVerifiedBaseBackup` and the condition `BaseBackupVerified`.
//! A run that failed is the answer, not something to retry: it is never
//! run again before the next schedule.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PodSpec, PodTemplateSpec, ResourceRequirements, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use super::super::names::{archive_name, destination_url, verify_base_name};
use super::super::objects::{
    POSTGRES_UID, config_volume, job_labels, meta, mount, pull_secrets, value_env,
};
use super::super::observed::Observed;
use super::super::plan::Plan;
use super::super::spec::{Database, VerifiedBaseBackup, shows_condition};
use super::{
    ARCHIVER_SCRIPT, CONTAINER, FETCH_CONTAINER, PITR_FETCH_SCRIPT, RESTORE_WAIT_SECONDS,
    RETAIN_KEY, RETENTION_DAYS_KEY, SCRIPTS_DIR, SCRIPTS_VOLUME, SPOOL, SPOOL_VOLUME,
    barman_container, enabled, server_name, store_env,
};
use crate::hook::ObservedPod;
use crate::hook::conditions::{ConditionStatus, Observation, format_time};
use crate::operators::backup_job::Destination;
use crate::operators::common::{restricted_container, restricted_pod};
use crate::operators::expansion::shell_command;
use crate::operators::report::{Report as Line, Verdict};
use crate::operators::resources::cpu_memory;

/// Label on a run's pods, so they are told from every other pod.
const LABEL: &str = "opshooks.io/verify-base";
/// The replay's container and its script.
const CONTAINER_VERIFY: &str = "verify";
const VERIFY_SCRIPT: &str = include_str!("../verify-base.sh");
/// Where the base backup is restored: the run's own `emptyDir`.
const WORK: &str = "/var/lib/opshooks/verify";
const WORK_VOLUME: &str = "verify";
/// How long a scheduled run may wait to start before it is skipped.
const START_DEADLINE_SECONDS: i64 = 3600;
/// How long one run may take (its Job's `activeDeadlineSeconds`), and the
/// replay within it (`RECOVERY_WAIT`), which stops cleanly before.
const RUN_DEADLINE_SECONDS: i64 = 6 * 3600;
const REPLAY_WAIT_SECONDS: &str = "19800";
/// The condition's type.
const CONDITION: &str = "BaseBackupVerified";

/// The CronJob of the verification runs, while the Database serves (not
/// while it is restored) and `verifySchedule` is set.
pub(in super::super) fn cron_job(db: &Database, plan: &Plan) -> Option<CronJob> {
    let (archive, dest) = enabled(db)?;
    let schedule = archive.verify_schedule.as_deref()?.trim();
    if !plan.restore.lets_serve() {
        return None;
    }
    let server = server_name(db, plan.version)?;
    let pgdata = format!("{WORK}/pgdata");
    let until = format!("{SPOOL}/finished");
    let store = || run_store_env(dest, &server);
    let fetch = barman_container(
        archive,
        FETCH_CONTAINER,
        PITR_FETCH_SCRIPT,
        [value_env("PGDATA", &pgdata)]
            .into_iter()
            .chain(store())
            .collect(),
        vec![
            mount(WORK_VOLUME, WORK, false),
            mount(SPOOL_VOLUME, SPOOL, false),
        ],
    );
    let archiver = barman_container(
        archive,
        CONTAINER,
        ARCHIVER_SCRIPT,
        [
            value_env("PGDATA", &pgdata),
            value_env("WAL_SPOOL", SPOOL),
            value_env("RECOVERY_SERVER", &server),
            value_env("ARCHIVER_UNTIL", &until),
        ]
        .into_iter()
        .chain(retention_env(archive.retention_days))
        .chain(store())
        .collect(),
        vec![
            mount(SPOOL_VOLUME, SPOOL, false),
            mount(SCRIPTS_VOLUME, SCRIPTS_DIR, true),
        ],
    );
    let mut labels = job_labels(db);
    labels.insert(LABEL.to_string(), "true".to_string());
    let empty_dir = |name: &str| Volume {
        name: name.to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    let pod = PodSpec {
        restart_policy: Some("Never".to_string()),
        init_containers: Some(vec![fetch]),
        containers: vec![archiver, verify_container(plan, &pgdata, &until)],
        volumes: Some(vec![
            empty_dir(WORK_VOLUME),
            empty_dir(SPOOL_VOLUME),
            config_volume(SCRIPTS_VOLUME, archive_name(db)),
        ]),
        security_context: Some(restricted_pod(POSTGRES_UID)),
        image_pull_secrets: pull_secrets(db),
        ..PodSpec::default()
    };
    let mut cron_meta = meta(db, verify_base_name(db));
    cron_meta.labels = Some(labels.clone());
    Some(scheduled(cron_meta, schedule, labels, pod))
}

/// Where a run's containers find the archive of `server`.
fn run_store_env(dest: &Destination, server: &str) -> Vec<EnvVar> {
    let mut env = vec![
        value_env("HOME", SPOOL),
        value_env("ARCHIVE_DESTINATION", destination_url(dest)),
        value_env("ARCHIVE_SERVER", server),
    ];
    env.extend(store_env(dest));
    env
}

/// After a proof, retention by recovery window (retain.sh, from the
/// ConfigMap), in the archiver's container once its loop ended.
fn retention_env(days: Option<u32>) -> Vec<EnvVar> {
    let Some(days) = days else {
        return Vec::new();
    };
    vec![
        value_env("RETAIN_SCRIPT", format!("{SCRIPTS_DIR}/{RETAIN_KEY}")),
        value_env("RETENTION_DAYS", days.to_string()),
        value_env(
            "RETENTION_FILE",
            format!("{SCRIPTS_DIR}/{RETENTION_DAYS_KEY}"),
        ),
    ]
}

/// The container that replays the archive over the base backup fetched
/// into `pgdata`, and writes `until` when done.
fn verify_container(plan: &Plan, pgdata: &str, until: &str) -> Container {
    Container {
        name: CONTAINER_VERIFY.to_string(),
        image: Some(plan.images.image(plan.version)),
        command: Some(shell_command(VERIFY_SCRIPT)),
        env: Some(vec![
            value_env("PGDATA", pgdata),
            value_env("WAL_SPOOL", SPOOL),
            value_env("RESTORE_WAIT", RESTORE_WAIT_SECONDS),
            value_env("ARCHIVE_SCRIPTS", SCRIPTS_DIR),
            value_env("RECOVERY_WAIT", REPLAY_WAIT_SECONDS),
            value_env("ARCHIVER_UNTIL", until),
        ]),
        volume_mounts: Some(vec![
            mount(WORK_VOLUME, WORK, false),
            mount(SPOOL_VOLUME, SPOOL, false),
            mount(SCRIPTS_VOLUME, SCRIPTS_DIR, true),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(cpu_memory("100m", "256Mi")),
            limits: Some(cpu_memory("1", "1Gi")),
            ..ResourceRequirements::default()
        }),
        security_context: Some(restricted_container()),
        ..Container::default()
    }
}

/// The CronJob running `pod` on `schedule` (UTC), one run at a time, each
/// run's Job and pod labelled `labels`.
fn scheduled(
    metadata: ObjectMeta,
    schedule: &str,
    labels: BTreeMap<String, String>,
    pod: PodSpec,
) -> CronJob {
    let labelled = || ObjectMeta {
        labels: Some(labels.clone()),
        ..ObjectMeta::default()
    };
    CronJob {
        metadata,
        spec: Some(CronJobSpec {
            schedule: schedule.to_string(),
            time_zone: Some("Etc/UTC".to_string()),
            concurrency_policy: Some("Forbid".to_string()),
            starting_deadline_seconds: Some(START_DEADLINE_SECONDS),
            successful_jobs_history_limit: Some(1),
            failed_jobs_history_limit: Some(1),
            job_template: JobTemplateSpec {
                metadata: Some(labelled()),
                spec: Some(JobSpec {
                    backoff_limit: Some(0),
                    active_deadline_seconds: Some(RUN_DEADLINE_SECONDS),
                    template: PodTemplateSpec {
                        metadata: Some(labelled()),
                        spec: Some(pod),
                    },
                    ..JobSpec::default()
                }),
            },
            ..CronJobSpec::default()
        }),
        status: None,
    }
}

/// What one finished run said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in super::super) enum Run {
    /// The base backup restored, and the archive replayed over it; what
    /// retention did after, when it ran (`Err`: it did not do its work).
    Verified(VerifiedBaseBackup, Option<Result<String, String>>),
    /// It did not, and why.
    Failed(String),
}

/// Whether `pod` belongs to a Job of the CronJob (its runs, and one
/// started from it by hand: `<cron>-…`), not to a pod anyone labelled.
fn is_run_of(db: &Database, pod: &ObservedPod) -> bool {
    let prefix = format!("{}-", verify_base_name(db));
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Job" && o.controller == Some(true) && o.name.starts_with(&prefix))
}

/// The finished runs among the observed pods, oldest first; one still
/// running says nothing yet.
fn finished(db: &Database, seen: &Observed) -> Vec<Run> {
    let mut runs: Vec<_> = seen
        .pods
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(LABEL))
                && is_run_of(db, p)
        })
        .filter_map(|p| {
            let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            Some(((created, p.metadata.name.clone()), read(p)?))
        })
        .collect();
    runs.sort_by(|(a, _), (b, _)| a.cmp(b));
    runs.into_iter().map(|(_, run)| run).collect()
}

/// One run's pod, as its two scripts reported: `pitr-fetch.sh`'s line and
/// `pitr-replay.sh`'s. Without a line that tells, its failure, if it
/// failed; `None` while it runs.
fn read(pod: &ObservedPod) -> Option<Run> {
    let step = |container: &str| {
        let message = pod.container_message(container)?;
        Some((message, Line::parse(message)))
    };
    let failed = |what: &str, verdict: Verdict, why: &str| {
        Some(Run::Failed(format!("{what} {}: {why}", ended(verdict))))
    };
    match (step(FETCH_CONTAINER), step(CONTAINER_VERIFY)) {
        (
            Some((
                _,
                Ok(Line::Fetched {
                    id,
                    end_time,
                    recoverable_from,
                    seconds: fetch,
                    ..
                }),
            )),
            Some((
                _,
                Ok(Line::Recovered {
                    lsn,
                    last_commit,
                    seconds: replay,
                    ..
                }),
            )),
        ) => Some(Run::Verified(
            VerifiedBaseBackup {
                id: id.to_string(),
                backup_end: Some(end_time.to_string()),
                replayed_to: lsn.to_string(),
                last_commit: last_commit.map(str::to_string),
                recoverable_from: Some(retained_from(pod).unwrap_or(recoverable_from).to_string()),
                verified_at: pod
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| format_time(t.0))
                    .unwrap_or_default(),
                seconds: fetch.zip(replay).map(|(f, r)| f + r),
            },
            retention(pod),
        )),
        (_, Some((_, Ok(Line::ArchiveStep { verdict, why, .. })))) => {
            failed("the replay", verdict, why)
        }
        (Some((_, Ok(Line::ArchiveStep { verdict, why, .. }))), _) => {
            failed("the download of the newest base backup", verdict, why)
        }
        (_, Some((message, _))) | (Some((message, _)), None) if pod.failure().is_some() => Some(
            Run::Failed(format!("it failed, and its line does not read: {message}")),
        ),
        _ => pod
            .failure()
            .map(|why| Run::Failed(format!("it left no report: {why}"))),
    }
}

/// How a script that did not do its work ended, in words.
fn ended(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Refused => "was refused",
        Verdict::Skipped => "was skipped",
        Verdict::Failed => "failed",
    }
}

/// The end of the oldest base backup retention kept, when it ran.
fn retained_from(pod: &ObservedPod) -> Option<&str> {
    match Line::parse(pod.container_message(CONTAINER)?) {
        Ok(Line::Retained { oldest_end, .. }) => oldest_end,
        _ => None,
    }
}

/// What `retain.sh` said, in the archiver's container after a proof.
fn retention(pod: &ObservedPod) -> Option<Result<String, String>> {
    let message = pod.container_message(CONTAINER)?;
    Some(match Line::parse(message) {
        Ok(Line::Retained {
            kept,
            deleted,
            window_days,
            oldest,
            ..
        }) => Ok(format!(
            "retention kept a recovery window of {} days: {} base backups kept, the oldest {}, and {} deleted with the WAL before them",
            window_days.unwrap_or_default(),
            kept.unwrap_or_default(),
            oldest.unwrap_or("-"),
            deleted.unwrap_or_default()
        )),
        Ok(Line::ArchiveStep { verdict, why, .. }) => {
            Err(format!("retention {}: {why}", ended(verdict)))
        }
        _ => Err(format!("retention's line does not read: {message}")),
    })
}

/// `BaseBackupVerified` (with `verifySchedule`, and after as `Disabled`),
/// and the newest base backup proven to restore: the newest run's, when it
/// proved one, else the one recorded before.
pub(in super::super) fn verified(
    db: &Database,
    seen: &Observed,
    now: Timestamp,
) -> (Option<Observation>, Option<VerifiedBaseBackup>) {
    let runs = finished(db, seen);
    let run = runs.last();
    let last = last_proof(db, &runs, now);
    let schedule = enabled(db).and_then(|(a, _)| a.verify_schedule.as_deref());
    let Some(schedule) = schedule else {
        let disabled = shows_condition(db, CONDITION).then(|| {
            Observation::new(
                CONDITION,
                false,
                "Disabled",
                "spec.backup.archive.verifySchedule is not set: no base backup is proven to restore",
            )
        });
        return (disabled, last);
    };
    let (status, reason, message) = said(run, last.as_ref(), schedule, db);
    (
        Some(Observation::new(CONDITION, status, reason, message)),
        last,
    )
}

/// The newest proof observed, though a newer run failed (the CronJob keeps
/// its last successful run's pod); else the one recorded before, which
/// anyone may have written: only while its time reads and is not in the
/// future.
fn last_proof(db: &Database, runs: &[Run], now: Timestamp) -> Option<VerifiedBaseBackup> {
    let recorded = db
        .status
        .as_ref()
        .and_then(|s| s.last_verified_base_backup.as_ref());
    let observed = runs.iter().rev().find_map(|r| match r {
        Run::Verified(v, _) => Some(v),
        Run::Failed(_) => None,
    });
    let recorded = recorded.filter(|r| r.verified_at.parse::<Timestamp>().is_ok_and(|t| t <= now));
    observed.or(recorded).cloned()
}

/// What a base backup's proof says.
fn proven(v: &VerifiedBaseBackup) -> String {
    format!(
        "base backup {} (ended {}) restored into a throwaway PostgreSQL, the archive replayed over it up to {} (last commit {}), the end of its WAL, with no gap; the archive then held base backups back to {} (only the newest is restored here)",
        v.id,
        v.backup_end.as_deref().unwrap_or("-"),
        v.replayed_to,
        v.last_commit.as_deref().unwrap_or("-"),
        v.recoverable_from.as_deref().unwrap_or("-"),
    )
}

/// The condition's status, reason and message from the newest run and the
/// last proof.
fn said(
    run: Option<&Run>,
    last: Option<&VerifiedBaseBackup>,
    schedule: &str,
    db: &Database,
) -> (ConditionStatus, &'static str, String) {
    match (run, last) {
        (Some(Run::Verified(v, retention)), _) => (
            ConditionStatus::True,
            // A store that retention cannot prune grows: said in the
            // reason, so that it is seen.
            match retention {
                Some(Err(_)) => "RetentionFailed",
                _ => "Verified",
            },
            format!(
                "{}, in {} s{}",
                proven(v),
                v.seconds.unwrap_or_default(),
                retention
                    .as_ref()
                    .map(|r| format!("; {}", r.as_ref().unwrap_or_else(|e| e)))
                    .unwrap_or_default()
            ),
        ),
        (Some(Run::Failed(why)), last) => (
            ConditionStatus::False,
            "VerificationFailed",
            format!(
                "the newest verification run failed: {why}; {}",
                last.as_ref().map_or_else(
                    || "no base backup was ever proven to restore".to_string(),
                    |v| format!("the last one proven: {} at {}", v.id, v.verified_at)
                )
            ),
        ),
        (None, Some(v)) => (
            ConditionStatus::True,
            "Verified",
            format!(
                "{} at {}; no newer run has finished",
                proven(v),
                v.verified_at
            ),
        ),
        (None, None) => (
            ConditionStatus::Unknown,
            "NotYetVerified",
            format!(
                "no verification has finished yet: the first runs on {:?} (UTC); one runs now with kubectl create job --from=cronjob/{} <a name>",
                schedule.trim(),
                verify_base_name(db)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::super::observed::Role;
    use super::super::super::plan::{plan, tests::running};
    use super::*;
    use crate::fixtures;

    /// A Database archiving, verified on `schedule`, with `recorded` in its
    /// status.
    fn db(schedule: Option<&str>, recorded: Option<serde_json::Value>) -> Database {
        let mut archive = json!({});
        if let Some(s) = schedule {
            archive["verifySchedule"] = json!(s);
        }
        let mut db = fixtures::orders().uid("orders-uid").spec(
            "backup",
            json!({"destination": {"s3Bucket": "b"}, "archive": archive}),
        );
        if let Some(r) = recorded {
            db = db.status(json!({"lastVerifiedBaseBackup": r}));
        }
        db.typed()
    }

    /// A run's pod made at `created`, with the two scripts' lines (`None`:
    /// no line) and `phase`.
    fn run(created: &str, fetch: Option<&str>, replay: Option<&str>, phase: &str) -> ObservedPod {
        let exit = if phase == "Failed" { 1 } else { 0 };
        let status = |name: &str, line: Option<&str>, code: i32| match line {
            Some(message) => {
                json!({"name": name, "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                "state": {"terminated": {"exitCode": code, "message": message}}})
            }
            None => {
                json!({"name": name, "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                "state": {"running": {}}})
            }
        };
        serde_json::from_value(json!({
            "metadata": {"name": format!("orders-verify-base-{created}"), "creationTimestamp": created,
                "labels": {LABEL: "true"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "orders-verify-base-1",
                    "uid": "u", "controller": true}]},
            "status": {"phase": phase,
                "initContainerStatuses": [status("pitr-fetch", fetch, if replay.is_some() { 0 } else { exit })],
                "containerStatuses": [status("verify", replay, exit)]}
        }))
        .expect("a pod")
    }

    fn now() -> Timestamp {
        "2026-02-01T00:00:00Z".parse().unwrap()
    }

    const FETCHED: &str = "opshooks pitr-fetch: fetched id=20260111T010003 end=0/B000028 end_time=2026-01-11T01:00:11Z recoverable_from=2026-01-02T01:00:07Z seconds=4";
    const RECOVERED: &str = "opshooks pitr-replay: recovered lsn=0/C0001F0 last_commit=2026-01-11T05:59:41Z timeline=2 ready_seconds=9 seconds=10";

    fn seen(pods: Vec<ObservedPod>) -> Observed {
        let mut seen = running("16");
        seen.pods = pods;
        seen
    }

    #[test]
    fn a_run_proves_a_backup_only_with_both_lines_and_says_why_not() {
        let proven = VerifiedBaseBackup {
            id: "20260111T010003".to_string(),
            backup_end: Some("2026-01-11T01:00:11Z".to_string()),
            replayed_to: "0/C0001F0".to_string(),
            last_commit: Some("2026-01-11T05:59:41Z".to_string()),
            recoverable_from: Some("2026-01-02T01:00:07Z".to_string()),
            verified_at: "2026-01-11T06:00:00Z".to_string(),
            seconds: Some(14),
        };
        let at = "2026-01-11T06:00:00Z";
        let refused = "opshooks pitr-fetch: refused the archive holds no finished base backup";
        let failed = "opshooks pitr-replay: failed the server stopped before it reached the end of the archive: x";
        let cases: [(ObservedPod, Option<Run>); 6] = [
            (
                run(at, Some(FETCHED), Some(RECOVERED), "Succeeded"),
                Some(Run::Verified(proven, None)),
            ),
            // Still replaying: it says nothing yet.
            (run(at, Some(FETCHED), None, "Running"), None),
            (
                run(at, Some(FETCHED), Some(failed), "Failed"),
                Some(Run::Failed(
                    "the replay failed: the server stopped before it reached the end of the archive: x".to_string(),
                )),
            ),
            (
                run(at, Some(refused), None, "Failed"),
                Some(Run::Failed(
                    "the download of the newest base backup was refused: the archive holds no finished base backup"
                        .to_string(),
                )),
            ),
            (
                run(at, Some(FETCHED), Some("Killed"), "Failed"),
                Some(Run::Failed(
                    "it failed, and its line does not read: Killed".to_string(),
                )),
            ),
            (
                run(at, None, None, "Failed"),
                Some(Run::Failed("it left no report: phase Failed".to_string())),
            ),
        ];
        for (pod, want) in cases {
            let got = read(&pod);
            match (&got, &want) {
                (Some(Run::Failed(g)), Some(Run::Failed(w))) if want.is_some() => {
                    assert!(
                        g.starts_with(w.as_str()) || w.starts_with("it left"),
                        "{g:?} for {w:?}"
                    );
                }
                _ => assert_eq!(got, want),
            }
        }
    }

    #[test]
    fn status_keeps_the_last_proof_and_the_condition_says_the_newest_run() {
        let old = json!({"id": "old", "replayedTo": "0/1", "verifiedAt": "2026-01-04T06:00:00Z"});
        let db = db(Some("0 6 * * 0"), Some(old));
        let proven = run(
            "2026-01-11T06:00:00Z",
            Some(FETCHED),
            Some(RECOVERED),
            "Succeeded",
        );
        let failed = run(
            "2026-01-18T06:00:00Z",
            Some(FETCHED),
            Some("opshooks pitr-replay: failed the store is down"),
            "Failed",
        );
        let (condition, last) = verified(&db, &seen(vec![proven.clone()]), now());
        let condition = condition.expect("a condition");
        assert_eq!(
            (condition.status, condition.reason),
            (ConditionStatus::True, "Verified")
        );
        assert_eq!(last.map(|l| l.id).as_deref(), Some("20260111T010003"));

        // The newest run failed: False, and the proof stays the last one.
        let (condition, last) = verified(&db, &seen(vec![proven, failed]), now());
        let condition = condition.expect("a condition");
        assert_eq!(condition.status, ConditionStatus::False);
        assert!(
            condition.message.contains("the store is down")
                && condition
                    .message
                    .contains("the last one proven: 20260111T010003"),
            "{}",
            condition.message
        );
        assert_eq!(last.map(|l| l.id).as_deref(), Some("20260111T010003"));

        // Between runs, the recorded proof. What is observed wins over it
        // (anyone may write status), and a recorded time in the future or
        // that does not read counts for nothing.
        let (condition, last) = verified(&db, &seen(Vec::new()), now());
        assert_eq!(condition.map(|c| c.reason), Some("Verified"));
        assert_eq!(last.map(|l| l.id).as_deref(), Some("old"));
        let older = run(
            "2026-01-01T06:00:00Z",
            Some(FETCHED),
            Some(RECOVERED),
            "Succeeded",
        );
        let (_, last) = verified(&db, &seen(vec![older]), now());
        assert_eq!(last.map(|l| l.id).as_deref(), Some("20260111T010003"));
        for forged in ["9999-01-01T00:00:00Z", "yesterday"] {
            let db = self::db(
                Some("0 6 * * 0"),
                Some(json!({"id": "forged", "replayedTo": "0/1", "verifiedAt": forged})),
            );
            let (condition, last) = verified(&db, &seen(Vec::new()), now());
            assert_eq!(last, None, "{forged}");
            assert_eq!(condition.map(|c| c.reason), Some("NotYetVerified"));
        }
        // A pod labelled as a run but of no Job of the CronJob proves nothing.
        let mut stray = run(
            "2026-01-20T06:00:00Z",
            Some(FETCHED),
            Some(RECOVERED),
            "Succeeded",
        );
        stray.metadata.owner_references = None;
        let (_, last) = verified(&db, &seen(vec![stray]), now());
        assert_eq!(last.map(|l| l.id).as_deref(), Some("old"));

        // Never run: Unknown, and how to run one now.
        let (condition, _) = verified(&self::db(Some("0 6 * * 0"), None), &seen(Vec::new()), now());
        let condition = condition.expect("a condition");
        assert_eq!(condition.status, ConditionStatus::Unknown);
        assert!(
            condition
                .message
                .contains("--from=cronjob/orders-verify-base")
        );

        // Off: no condition, and no CronJob.
        let off = self::db(None, None);
        assert_eq!(verified(&off, &seen(Vec::new()), now()).0, None);
    }

    #[test]
    fn the_run_restores_beside_the_archiver_of_its_own_archive_which_it_stops() {
        let db = db(Some("0 6 * * 0"), None);
        let mut seen = running("16");
        seen.role = Some(Role {
            primary: "orders-0".to_string(),
            epoch: 1,
            initialized: true,
            ..Role::default()
        });
        let plan = plan(&db, &seen).expect("a plan");
        let cron = cron_job(&db, &plan).expect("a CronJob");
        let job = cron.spec.expect("spec").job_template.spec.expect("a Job");
        assert_eq!(job.backoff_limit, Some(0), "a failed proof is the answer");
        let pod = job.template.spec.expect("a pod");
        let env = |c: &Container, var: &str| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == var)
                .and_then(|e| e.value.clone())
        };
        let fetch = &pod.init_containers.as_ref().expect("init")[0];
        assert_eq!(env(fetch, "ROLE_DIR"), None, "no role: it never skips");
        assert_eq!(
            env(fetch, "ARCHIVE_SERVER").as_deref(),
            Some("orders-orders-uid-pg16")
        );
        let [archiver, verify] = &pod.containers[..] else {
            panic!("two containers: {:?}", pod.containers)
        };
        assert_eq!(
            env(archiver, "RECOVERY_SERVER").as_deref(),
            Some("orders-orders-uid-pg16")
        );
        assert_eq!(
            env(archiver, "ARCHIVE_SCRIPTS"),
            None,
            "it takes no base backup"
        );
        let until = env(archiver, "ARCHIVER_UNTIL");
        assert!(until.is_some());
        assert_eq!(env(verify, "ARCHIVER_UNTIL"), until);
        assert_eq!(env(verify, "ARCHIVE_SCRIPTS").as_deref(), Some(SCRIPTS_DIR));
        assert_eq!(
            verify.image.as_deref(),
            Some(plan.images.image(plan.version).as_str())
        );
    }
}

#[cfg(test)]
mod retention_tests {
    use serde_json::json;

    use super::super::super::plan::{plan, tests::running};
    use super::super::validate;
    use super::*;

    #[test]
    fn retention_runs_in_the_archiver_after_a_proof_and_only_with_verification() {
        let db = |archive| -> Database {
            crate::fixtures::orders()
                .uid("orders-uid")
                .spec(
                    "backup",
                    json!({"destination": {"s3Bucket": "b"}, "archive": archive}),
                )
                .typed()
        };
        let refused = validate(&db(json!({"retentionDays": 14})))
            .expect_err("retention without verification is refused");
        assert_eq!(refused.field, "spec.backup.archive.retentionDays");
        assert!(
            refused.message.contains("verifySchedule"),
            "{}",
            refused.message
        );
        let zero = validate(&db(
            json!({"retentionDays": 0, "verifySchedule": "0 6 * * 0"}),
        ));
        assert!(zero.is_err(), "a window of 0 days");

        let env = |db: &Database| {
            let plan = plan(db, &running("16")).expect("a plan");
            let cron = cron_job(db, &plan).expect("a CronJob");
            let pod = cron
                .spec
                .unwrap()
                .job_template
                .spec
                .unwrap()
                .template
                .spec
                .unwrap();
            let archiver = pod
                .containers
                .into_iter()
                .find(|c| c.name == CONTAINER)
                .unwrap();
            archiver
                .env
                .unwrap_or_default()
                .into_iter()
                .filter_map(|e| Some((e.name, e.value?)))
                .collect::<BTreeMap<_, _>>()
        };
        let kept = env(&db(
            json!({"retentionDays": 14, "verifySchedule": "0 6 * * 0"}),
        ));
        assert_eq!(kept.get("RETENTION_DAYS").map(String::as_str), Some("14"));
        assert_eq!(
            kept.get("RETAIN_SCRIPT").map(String::as_str),
            Some(format!("{SCRIPTS_DIR}/{RETAIN_KEY}").as_str())
        );
        let none = env(&db(json!({"verifySchedule": "0 6 * * 0"})));
        assert_eq!(
            none.get("RETAIN_SCRIPT"),
            None,
            "nothing is deleted without retentionDays"
        );
    }

    #[test]
    fn what_retention_did_is_said_after_the_proof() {
        let pod = |message: &str| -> ObservedPod {
            serde_json::from_value(json!({
                "metadata": {"name": "orders-verify-base-1"},
                "status": {"containerStatuses": [{"name": "archiver", "ready": false, "restartCount": 0,
                    "image": "i", "imageID": "", "state": {"terminated": {"exitCode": 0, "message": message}}}]}
            }))
            .unwrap()
        };
        let cases = [
            (
                "opshooks retain: kept=3 deleted=1 window_days=14 oldest=20261120T010002 oldest_end=2026-11-20T01:00:09Z",
                "retention kept a recovery window of 14 days: 3 base backups kept, the oldest 20261120T010002, and 1 deleted with the WAL before them",
            ),
            (
                "opshooks retain: failed barman-cloud-backup-delete: AccessDenied",
                "retention failed: barman-cloud-backup-delete: AccessDenied",
            ),
            ("Killed", "retention's line does not read: Killed"),
        ];
        for (line, said) in cases {
            let got = retention(&pod(line)).expect("a retention line");
            assert_eq!(got.as_ref().unwrap_or_else(|e| e), said);
            assert_eq!(got.is_ok(), said.starts_with("retention kept"), "{said}");
        }
        // After retention the window starts at the oldest backup it kept.
        assert_eq!(
            retained_from(&pod(cases[0].0)),
            Some("2026-11-20T01:00:09Z")
        );
        assert_eq!(retained_from(&pod(cases[1].0)), None);
    }
}
