//! Proving dumps restore. A verification run chooses the newest dump
//! (`select.sh`, AWS CLI image) and restores it into a throwaway PostgreSQL
//! inside its own pod (`verify.sh`: `initdb` in an `emptyDir`, a server on a
//! unix socket only), then checks the restore against the dump's table of
//! contents and its rows; then `mark.sh` records the dump verified in the
//! store (`<key>.verified`), so retention keeps older dumps until a newer
//! one verified. Operators run it on a schedule and after each new dump, and
//! read what it reported from its pod's termination message.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    Choice, Destination, POSTGRES_UID, WORK_DIR, env, s3_env, script_container, select_container,
    work_volume,
};
use crate::hook::ObservedPod;
use crate::hook::conditions::{ConditionStatus, Observation, format_time, normal_time};
use crate::operators::common::restricted_pod;
use crate::operators::report;
use crate::operators::validate;

/// Restores a dump into a throwaway PostgreSQL and checks it.
pub const VERIFY_SCRIPT: &str = include_str!("verify.sh");
/// Records a verified dump in the store as `<key>.verified`, which retention
/// reads (`RETENTION_REQUIRES_VERIFIED`).
pub const MARK_SCRIPT: &str = include_str!("mark.sh");
/// Label on a verification run's pods, so they are told from backups'.
pub const LABEL_VERIFY: &str = "opshooks.io/verify";
/// How long a scheduled run may wait to start before it is skipped
/// (the CronJob's `startingDeadlineSeconds`).
const START_DEADLINE_SECONDS: i64 = 3600;
/// How long one run may take (its Job's `activeDeadlineSeconds`).
const RUN_DEADLINE_SECONDS: i64 = 6 * 3600;

/// How dumps are proven to restore.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Verify {
    /// When to verify the newest dump, in 5-field cron syntax, for example
    /// "0 6 * * *".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    pub schedule: Option<String>,
    /// Also verify each new dump as soon as the backup CronJob reports it.
    #[serde(default)]
    pub after_each_backup: bool,
}

/// The newest dump proven to restore.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedBackup {
    /// The object, as its key.
    pub key: String,
    /// When the dump was taken, from its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub taken: Option<String>,
    /// When the verification run started.
    #[schemars(extend("format" = "date-time"))]
    pub verified_at: String,
    /// How long the restore and the checks took, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
    /// Tables restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<u64>,
    /// Rows restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
}

/// What one verification run needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Run<'a> {
    /// Where the dumps are.
    pub destination: &'a Destination,
    /// Whose dumps: backup names (see `Choice::Newest`).
    pub names: Vec<String>,
    /// A PostgreSQL image of the dumps' major or newer.
    pub image: String,
    /// The AWS CLI image.
    pub upload_image: &'a str,
    /// The pods' service account (for a cloud identity to read and mark
    /// the store); the namespace's default when `None`.
    pub service_account: Option<&'a str>,
    /// The resources of each container (the defaults of
    /// [`crate::operators::resources::backup`] when `None`).
    pub resources: Option<&'a ResourceRequirements>,
    /// Labels of the run's Jobs and pods ([`LABEL_VERIFY`] is added).
    pub labels: BTreeMap<String, String>,
}

impl Run<'_> {
    fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.insert(LABEL_VERIFY.to_string(), "true".to_string());
        labels
    }

    /// The pod of one run: select, then verify.
    pub fn pod_template(&self) -> PodTemplateSpec {
        let choice = Choice::Newest {
            names: self.names.clone(),
            before: None,
        };
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(self.labels()),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                restart_policy: Some("Never".to_string()),
                // In order: choose and download, verify, and only then mark
                // the dump verified in the store.
                init_containers: Some(vec![
                    select_container(self.destination, &choice, self.upload_image, self.resources),
                    script_container(
                        ("verify", &self.image),
                        VERIFY_SCRIPT,
                        vec![env("WORK_DIR", WORK_DIR)],
                        self.resources,
                    ),
                ]),
                containers: vec![script_container(
                    ("mark", self.upload_image),
                    MARK_SCRIPT,
                    [env("WORK_DIR", WORK_DIR), env("HOME", WORK_DIR)]
                        .into_iter()
                        .chain(s3_env(self.destination))
                        .collect(),
                    self.resources,
                )],
                volumes: Some(vec![work_volume()]),
                security_context: Some(restricted_pod(POSTGRES_UID)),
                service_account_name: self.service_account.map(String::from),
                ..PodSpec::default()
            }),
        }
    }

    /// One run, never retried: a dump that does not restore is the answer,
    /// not a failure to try again.
    pub fn job_spec(&self) -> JobSpec {
        JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(RUN_DEADLINE_SECONDS),
            template: self.pod_template(),
            ..JobSpec::default()
        }
    }

    /// The run after the backup that succeeded at `backed_up`: named
    /// `<meta's name>-<YYYYMMDDHHMMSS>`, so each new dump is verified once.
    pub fn after_backup(&self, mut meta: ObjectMeta, backed_up: Timestamp) -> Job {
        let base = meta.name.take().unwrap_or_default();
        meta.name = Some(after_backup_name(&base, backed_up));
        meta.labels = Some(self.labels());
        Job {
            metadata: meta,
            spec: Some(self.job_spec()),
            status: None,
        }
    }

    /// Runs on `schedule`: never two at once, the last run of each outcome
    /// kept for its logs.
    pub fn scheduled(&self, mut meta: ObjectMeta, schedule: &str) -> CronJob {
        meta.labels = Some(self.labels());
        CronJob {
            metadata: meta,
            spec: Some(CronJobSpec {
                schedule: schedule.to_string(),
                concurrency_policy: Some("Forbid".to_string()),
                starting_deadline_seconds: Some(START_DEADLINE_SECONDS),
                successful_jobs_history_limit: Some(1),
                failed_jobs_history_limit: Some(1),
                job_template: JobTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(self.labels()),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(self.job_spec()),
                },
                ..CronJobSpec::default()
            }),
            status: None,
        }
    }
}

/// The name of the run that verifies the dump of the backup that succeeded
/// at `at`: `<base>-<YYYYMMDDHHMMSS>`.
pub fn after_backup_name(base: &str, at: Timestamp) -> String {
    format!("{base}-{}", at.strftime("%Y%m%d%H%M%S"))
}

/// What the newest finished run reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// The dump restored and checked out.
    Verified(VerifiedBackup),
    /// It did not, and why.
    Failed(String),
}

/// The newest finished verification run among `pods` and `jobs`, as it
/// reported itself: `mark`'s message when recording the proof failed (it
/// leaves one only then), else `verify`'s, or `select`'s when choosing or
/// downloading failed. A run that failed without a message (killed for
/// memory, evicted, past its deadline, never started) is a failure all the
/// same: its pod's failure, else its failed Job's condition.
pub fn newest_report<'a>(
    pods: impl Iterator<Item = &'a ObservedPod>,
    jobs: impl Iterator<Item = &'a Job>,
) -> Option<Report> {
    let is_run = |meta: &ObjectMeta| {
        meta.labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_VERIFY))
    };
    let from_pods = pods.filter(|p| is_run(&p.metadata)).filter_map(|p| {
        let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let report = match ["mark", "verify", "select"]
            .into_iter()
            .find_map(|c| p.container_message(c))
        {
            Some(message) => read_report(message, created),
            None => Report::Failed(format!("it left no report: {}", p.failure()?)),
        };
        Some(((created, p.metadata.name.clone()), report))
    });
    let from_jobs = jobs
        .filter(|j| is_run(&j.metadata) && super::run_status(j) == super::RunStatus::Failed)
        .map(|j| {
            let created = j.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let failed = j
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Failed"));
            let why = failed
                .map(|c| {
                    format!(
                        "{}: {}",
                        c.reason.as_deref().unwrap_or("Failed"),
                        c.message.as_deref().unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            let name = j.metadata.name.clone();
            let report = Report::Failed(format!(
                "job {} failed and no pod of it left a report ({})",
                name.as_deref().unwrap_or_default(),
                why.trim_end_matches([' ', ':'])
            ));
            ((created, name), report)
        });
    // A run's pod is made after its Job: what the pod says wins.
    from_pods
        .chain(from_jobs)
        .max_by(|(a, _), (b, _)| a.cmp(b))
        .map(|(_, report)| report)
}

/// Reads one run's message: `opshooks verify: verified tables=<n> rows=<n>
/// seconds=<n> bytes=<n> taken=<time> key=<key>`, or a reason.
fn read_report(message: &str, finished: Option<Timestamp>) -> Report {
    // Any other line is a failure: what follows its beginning is why.
    let Ok(report::Report::Verified {
        tables,
        rows,
        seconds,
        taken,
        key,
        ..
    }) = report::Report::parse(message)
    else {
        let reason = message.split_once(": ").map_or(message, |(_, why)| why);
        return Report::Failed(reason.trim().to_string());
    };
    Report::Verified(VerifiedBackup {
        key: key.to_string(),
        taken: taken.and_then(normal_time),
        verified_at: finished.map(format_time).unwrap_or_default(),
        seconds,
        tables,
        rows,
    })
}

/// The newest dump proven to restore: the newest run's, when it verified
/// one, else the one recorded before.
pub fn last_verified(
    report: Option<&Report>,
    recorded: Option<&VerifiedBackup>,
) -> Option<VerifiedBackup> {
    match report {
        Some(Report::Verified(v)) if recorded.is_none_or(|r| r.verified_at <= v.verified_at) => {
            Some(v.clone())
        }
        _ => recorded.cloned(),
    }
}

/// Two scheduled runs in a row that should have finished with no proof
/// at least as new as the first: the times of both, read in UTC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overdue {
    schedule: String,
    runs: [Timestamp; 2],
}

impl Overdue {
    /// Whether a proof from `proof` (a run's start; `None`: no proof that
    /// parses) is older than `schedule` allows at `now`, for a parent made
    /// at `created`.
    ///
    /// A run started on time may wait up to its start deadline and take
    /// up to its run deadline (7 h together): a run scheduled that long
    /// before `now` should have finished. One such run may fail or be
    /// skipped (a drained node, a controller manager in another time zone
    /// than the UTC the hook reads the schedule in); when the last two
    /// have left no proof as new as the earlier one, the proof is
    /// overdue. Runs from before the parent was made do not count. A
    /// schedule that does not parse (refused elsewhere) decides nothing.
    pub fn of(
        schedule: &str,
        now: Timestamp,
        created: Option<Timestamp>,
        proof: Option<Timestamp>,
    ) -> Option<Self> {
        let cron = validate::parsed_cron(schedule)?;
        let finished_by = now
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(
                START_DEADLINE_SECONDS + RUN_DEADLINE_SECONDS,
            ))
            .ok()?;
        let mut runs = cron
            .iter_before(finished_by.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC))
            .map(|z| z.timestamp());
        let latest = validate::latest_run(&cron, finished_by)?;
        let earlier = runs.find(|t| *t < latest)?;
        let counts = created.is_none_or(|c| c <= earlier);
        let missed = proof.is_none_or(|p| p < earlier);
        (counts && missed).then(|| Overdue {
            schedule: schedule.trim().to_string(),
            runs: [earlier, latest],
        })
    }

    /// The condition's message: when the last proof was, when one was due.
    fn message(&self, last: Option<&VerifiedBackup>) -> String {
        let last = match last {
            Some(v) => format!("the newest proof is {} from {}", v.key, v.verified_at),
            None => "no verification has proven a dump".to_string(),
        };
        let due = |t: Timestamp| {
            t.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(
                START_DEADLINE_SECONDS + RUN_DEADLINE_SECONDS,
            ))
            .map(format_time)
            .unwrap_or_default()
        };
        format!(
            "{last}; the runs scheduled at {} and {} ({:?}, UTC) should have finished by {} and {} with a newer one: see kubectl get cronjobs,jobs",
            format_time(self.runs[0]),
            format_time(self.runs[1]),
            self.schedule,
            due(self.runs[0]),
            due(self.runs[1]),
        )
    }
}

/// When the newest proof was taken, if its time parses (a status anyone
/// can write counts only then).
pub fn proof_time(v: &VerifiedBackup) -> Option<Timestamp> {
    v.verified_at.parse().ok()
}

/// `BackupVerified`: whether the newest dump checked restored; between
/// runs (the last one's pod gone), the dump last proven; False when the
/// newest proof is older than the schedule allows ([`Overdue`]).
pub fn condition(
    report: Option<&Report>,
    recorded: Option<&VerifiedBackup>,
    overdue: Option<&Overdue>,
) -> Observation {
    if !matches!(report, Some(Report::Failed(_)))
        && let Some(overdue) = overdue
    {
        let last = last_verified(report, recorded);
        return Observation::new(
            "BackupVerified",
            ConditionStatus::False,
            "VerificationOverdue",
            overdue.message(last.as_ref()),
        );
    }
    let (status, reason, message) = match report {
        Some(Report::Verified(v)) => (
            ConditionStatus::True,
            "Verified",
            format!(
                "{} restored into a throwaway PostgreSQL: {} tables, {} rows, in {} s",
                v.key,
                v.tables.unwrap_or_default(),
                v.rows.unwrap_or_default(),
                v.seconds.unwrap_or_default()
            ),
        ),
        Some(Report::Failed(why)) => (
            ConditionStatus::False,
            "VerificationFailed",
            format!("the newest dump's verification failed: {why}"),
        ),
        None => match recorded {
            Some(v) => (
                ConditionStatus::True,
                "Verified",
                format!(
                    "{} restored at {}; no newer run has finished",
                    v.key, v.verified_at
                ),
            ),
            None => (
                ConditionStatus::Unknown,
                "NotYetVerified",
                "no verification has finished yet".to_string(),
            ),
        },
    };
    Observation::new("BackupVerified", status, reason, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    /// Issue 31 item 11: a proof older than the schedule allows is not
    /// True. Runs at 06:00 UTC daily; a run has 7 h to start and finish;
    /// one missed run is tolerated, two are not.
    #[test]
    fn a_proof_is_overdue_once_two_runs_in_a_row_left_none() {
        let t = |s: &str| s.parse::<Timestamp>().unwrap();
        let made = Some(t("2026-01-01T00:00:00Z"));
        // (reason, schedule, now, proof, the two runs due without one)
        type Case<'a> = (
            &'a str,
            &'a str,
            &'a str,
            Option<&'a str>,
            Option<[&'a str; 2]>,
        );
        let cases: [Case<'_>; 10] = [
            (
                "the runs of Jan 3 and 4 should have finished; the proof is from Jan 3's",
                "0 6 * * *",
                "2026-01-05T12:00:00Z",
                Some("2026-01-03T06:00:05Z"),
                None,
            ),
            (
                "the proof is from Jan 2: Jan 3's and Jan 4's runs left none",
                "0 6 * * *",
                "2026-01-05T12:00:00Z",
                Some("2026-01-02T06:00:05Z"),
                Some(["2026-01-03T06:00:00Z", "2026-01-04T06:00:00Z"]),
            ),
            (
                "exactly 7 h after Jan 5's run, it counts as due",
                "0 6 * * *",
                "2026-01-05T13:00:00Z",
                Some("2026-01-03T06:00:05Z"),
                Some(["2026-01-04T06:00:00Z", "2026-01-05T06:00:00Z"]),
            ),
            (
                "a minute before, Jan 5's run may still be going",
                "0 6 * * *",
                "2026-01-05T12:59:00Z",
                Some("2026-01-03T06:00:05Z"),
                None,
            ),
            (
                "never proven, two runs past",
                "0 6 * * *",
                "2026-01-05T12:00:00Z",
                None,
                Some(["2026-01-03T06:00:00Z", "2026-01-04T06:00:00Z"]),
            ),
            (
                "never proven, but made after the earlier run (Dec 31)",
                "0 6 * * *",
                "2026-01-01T14:00:00Z",
                None,
                None,
            ),
            (
                "a macro",
                "@daily",
                "2026-01-05T12:00:00Z",
                Some("2026-01-03T00:00:05Z"),
                Some(["2026-01-04T00:00:00Z", "2026-01-05T00:00:00Z"]),
            ),
            (
                // Validation accepts it, croner alone does not read it.
                "@midnight, as @daily",
                "@midnight",
                "2026-01-05T12:00:00Z",
                Some("2026-01-03T00:00:05Z"),
                Some(["2026-01-04T00:00:00Z", "2026-01-05T00:00:00Z"]),
            ),
            (
                "hourly: at 12:30 the 04:00 and 05:00 runs are due; 03:00's proof is too old",
                "0 * * * *",
                "2026-01-05T12:30:00Z",
                Some("2026-01-05T03:00:10Z"),
                Some(["2026-01-05T04:00:00Z", "2026-01-05T05:00:00Z"]),
            ),
            (
                "a schedule that does not parse decides nothing",
                "not a schedule",
                "2026-01-05T12:00:00Z",
                None,
                None,
            ),
        ];
        for (reason, schedule, now, proof, want) in cases {
            let got = Overdue::of(schedule, t(now), made, proof.map(t)).map(|o| o.runs);
            assert_eq!(got, want.map(|w| w.map(t)), "{reason}");
        }
        let overdue = Overdue::of("0 6 * * *", t("2026-01-05T12:00:00Z"), made, None).unwrap();
        let proof = VerifiedBackup {
            key: "orders/2026-01-02.dump".into(),
            verified_at: "2026-01-02T06:00:05Z".into(),
            ..VerifiedBackup::default()
        };
        let got = condition(Some(&Report::Verified(proof.clone())), None, Some(&overdue));
        assert_eq!(
            (got.status, got.reason),
            (ConditionStatus::False, "VerificationOverdue")
        );
        assert!(
            got.message
                .contains("orders/2026-01-02.dump from 2026-01-02T06:00:05Z"),
            "{}",
            got.message
        );
        assert!(
            got.message
                .contains("should have finished by 2026-01-03T13:00:00Z and 2026-01-04T13:00:00Z"),
            "{}",
            got.message
        );
    }

    fn run_pod(name: &str, created: &str, message: &str) -> ObservedPod {
        let status = json_status(message);
        fixtures::pod(name)
            .label(LABEL_VERIFY, "true")
            .created(created)
            .status(status)
            .typed()
    }

    /// The older of the test's two runs, the verified one.
    fn v_pod(pods: &[ObservedPod]) -> ObservedPod {
        pods[0].clone()
    }

    fn json_status(message: &str) -> serde_json::Value {
        serde_json::json!({"containerStatuses": [
            {"name": "verify", "state": {"terminated": {"exitCode": 0, "message": message}}}
        ]})
    }

    #[test]
    fn the_newest_finished_run_is_the_report() {
        let ok = "opshooks verify: verified tables=3 rows=4213 seconds=7 bytes=99 taken=2026-01-05T02:00:03Z key=n/orders-20260105T020003Z.pgdump\n";
        let bad = "opshooks verify: the dump is truncated or corrupt: pg_restore: error: unexpected end of file\n";
        let older = run_pod("v-1", "2026-01-04T00:00:00Z", ok);
        let newer = run_pod("v-2", "2026-01-05T00:00:00Z", bad);
        let backup_pod = fixtures::pod("b-1")
            .created("2026-01-06T00:00:00Z")
            .status(json_status(ok))
            .typed::<ObservedPod>();
        let pods = [older.clone(), newer.clone(), backup_pod];
        assert_eq!(
            newest_report(pods.iter(), [].iter()),
            Some(Report::Failed(
                "the dump is truncated or corrupt: pg_restore: error: unexpected end of file"
                    .into()
            )),
            "the newest verification pod, not a backup's"
        );
        let Some(Report::Verified(v)) = newest_report([older].iter(), [].iter()) else {
            panic!("a verified run reads as one");
        };
        assert_eq!(
            (
                v.key.as_str(),
                v.tables,
                v.rows,
                v.seconds,
                v.taken.as_deref()
            ),
            (
                "n/orders-20260105T020003Z.pgdump",
                Some(3),
                Some(4213),
                Some(7),
                Some("2026-01-05T02:00:03Z")
            )
        );
        // Verified, but the proof was not recorded in the store (retention
        // then keeps the older dumps): a failure, saying so.
        let unmarked = fixtures::pod("v-3")
            .label(LABEL_VERIFY, "true")
            .created("2026-01-07T00:00:00Z")
            .status(serde_json::json!({"containerStatuses": [
                {"name": "mark", "state": {"terminated": {"exitCode": 1, "message": "opshooks mark: access denied writing n/x.pgdump.verified\n"}}}],
                "initContainerStatuses": [
                {"name": "verify", "state": {"terminated": {"exitCode": 0, "message": ok}}}]}))
            .typed::<ObservedPod>();
        assert_eq!(
            newest_report([unmarked].iter(), [].iter()),
            Some(Report::Failed(
                "access denied writing n/x.pgdump.verified".into()
            ))
        );
        // Issue 31: a run killed for memory left no message and was
        // ignored, so an older success stayed True.
        let oom_killed = fixtures::pod("v-4")
            .label(LABEL_VERIFY, "true")
            .created("2026-01-08T00:00:00Z")
            .status(serde_json::json!({"phase": "Failed", "containerStatuses": [
                {"name": "verify", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}))
            .typed::<ObservedPod>();
        assert_eq!(
            newest_report([v_pod(&pods), oom_killed].iter(), [].iter()),
            Some(Report::Failed(
                "it left no report: container verify exited 137 (OOMKilled)".into()
            ))
        );
        let evicted = fixtures::pod("v-5")
            .label(LABEL_VERIFY, "true")
            .created("2026-01-08T00:00:00Z")
            .status(serde_json::json!({"phase": "Failed", "reason": "Evicted"}))
            .typed::<ObservedPod>();
        assert_eq!(
            newest_report([v_pod(&pods), evicted].iter(), [].iter()),
            Some(Report::Failed(
                "it left no report: pod phase Failed (Evicted)".into()
            ))
        );
        // Past its deadline, or never started: only the Job says so.
        let past_deadline = fixtures::job("orders-verify-20260108000000")
            .label(LABEL_VERIFY, "true")
            .created("2026-01-08T00:00:00Z")
            .set(
                "/status",
                serde_json::json!({"conditions": [
                    {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}),
            )
            .typed::<Job>();
        assert_eq!(
            newest_report([v_pod(&pods)].iter(), [past_deadline.clone()].iter()),
            Some(Report::Failed(
                "job orders-verify-20260108000000 failed and no pod of it left a report (DeadlineExceeded)".into()
            ))
        );
        // A run still going (no failure, no message) reports nothing.
        let running = fixtures::pod("v-6")
            .label(LABEL_VERIFY, "true")
            .created("2026-01-09T00:00:00Z")
            .status(serde_json::json!({"phase": "Running"}))
            .typed::<ObservedPod>();
        assert_eq!(
            newest_report([v_pod(&pods), running].iter(), [].iter()),
            newest_report([v_pod(&pods)].iter(), [].iter())
        );
        // A failed run keeps the dump proven before; a newer success replaces it.
        let failed = newest_report(pods.iter(), [].iter());
        assert_eq!(last_verified(failed.as_ref(), Some(&v)), Some(v.clone()));
        assert_eq!(last_verified(failed.as_ref(), None), None);
    }
}
