//! Backup: scheduled backups of a PostgreSQL StatefulSet to S3.
//!
//! The one child is a CronJob `<name>-backup` whose job (see [`job`]) dumps
//! the target's database through its Service, with the credentials the
//! target itself uses, streams the dump to S3 and prunes old dumps. The
//! customize hook asks for the target StatefulSet and for the Jobs the
//! CronJob created, so status can report the last run.
//!
//! What a human operator knows, encoded here: connection details are read
//! from the target (its Service, port, database, user and the Secret holding
//! the password), never copied; two backups of one target never run at once
//! (`concurrencyPolicy: Forbid`); a missed run more than an hour late is
//! skipped rather than run at peak time; and when the target disappears the
//! CronJob is kept but suspended, so nothing is lost and backups resume when
//! the target returns. Deleting a Backup deletes its CronJob and never
//! touches stored dumps.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Container, EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::backup_job::verification::{self, LABEL_VERIFY, VerifiedBackup, Verify};
use super::backup_job::{
    self as job, Credential, Destination, RunStatus, Schedule, Source, run_status, scheduled,
    validate_destination,
};
use super::common::{refuse_not_built, standard_labels};
use super::expansion::as_seen;
use super::resources;
use super::validate::{self, InvalidSpec};
use crate::hook::Child;
use crate::hook::conditions::{self, Condition, ConditionStatus, Observation, format_time};
use crate::hook::{
    CustomizeRequest, CustomizeResponse, ObjectGroups, ObservedPod, RelatedResourceRule,
    SyncRequest, SyncResponse,
};
use crate::operator::{ChildResource, Context, ControllerSpec, HookError, Operator};

/// Label on every Job and pod of a Backup, naming it; customize selects by it.
pub const LABEL_BACKUP: &str = "opshooks.io/backup";
/// Annotation on the CronJob recording how the target was reached, so the
/// CronJob can be kept, suspended, while the target is gone.
pub const ANNOTATION_SOURCE: &str = "opshooks.io/backup-source";
/// The longest Backup name: `<name>-backup` plus the CronJob controller's
/// 11-character job suffix must fit in 63.
pub const MAX_NAME: usize = 45;
const APP: &str = "backup";

/// Scheduled backups of a stateful workload to S3.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "opshooks.io",
    version = "v1alpha1",
    kind = "Backup",
    namespaced,
    status = "BackupStatus",
    shortname = "bk",
    category = "opshooks",
    doc = "Backup dumps a PostgreSQL StatefulSet's database to S3 on a schedule and prunes old dumps.",
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(name = "Target", type_ = "string", json_path = ".spec.target.name"),
    printcolumn(name = "Last Backup", type_ = "date", json_path = ".status.lastBackupTime"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.lastBackupStatus"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.target.kind", priority = "1"),
    printcolumn(name = "Bucket", type_ = "string", json_path = ".spec.destination.s3Bucket", priority = "1"),
    printcolumn(name = "Verified", type_ = "string", json_path = ".status.conditions[?(@.type==\"BackupVerified\")].status", priority = "1"),
    validation = Rule::new("self.metadata.name.size() <= 45").message("metadata.name must be at most 45 characters, so that job names fit in 63")
)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// When to back up, in standard 5-field cron syntax (minute hour
    /// day-of-month month day-of-week), for example "0 2 * * *", or a macro
    /// such as @daily.
    #[schemars(
        length(min = 1, max = 100),
        pattern(r"^\s*(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+\s+\S+\s+\S+\s+\S+\s+\S+)\s*$")
    )]
    pub schedule: String,
    /// The IANA time zone of the schedule, for example Europe/Berlin; the
    /// controller manager's time zone (usually UTC) when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), pattern(r"^[A-Za-z0-9_+/-]+$"))]
    pub time_zone: Option<String>,
    /// The workload to back up.
    pub target: Target,
    /// Where dumps are stored.
    pub destination: Destination,
    /// Delete this backup's dumps older than this many days, after each
    /// successful run; keep everything when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub retention_days: Option<i32>,
    /// Pause scheduling; a running backup finishes.
    #[serde(default)]
    pub suspend: bool,
    /// The database to dump; the target's POSTGRES_DB (or its user's
    /// database) when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub database: Option<String>,
    /// The AWS CLI image that uploads the dump.
    #[serde(default = "default_upload_image")]
    #[schemars(length(min = 1, max = 255), pattern(r"^\S+$"))]
    pub upload_image: String,
    /// The service account of the backup pods, for cloud identities such as
    /// IRSA; the namespace's default when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub service_account_name: Option<String>,
    /// The resources of every backup container (dump, upload,
    /// verification), replacing the defaults: requests of 100m CPU and
    /// 256Mi memory, no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources::schema")]
    pub resources: Option<ResourceRequirements>,
    /// How many successful runs to keep as Jobs.
    #[serde(default = "default_history")]
    #[schemars(range(min = 0, max = 100))]
    pub successful_jobs_history_limit: i32,
    /// How many failed runs to keep as Jobs, for their logs.
    #[serde(default = "default_history")]
    #[schemars(range(min = 0, max = 100))]
    pub failed_jobs_history_limit: i32,
    /// The longest one run may take, in seconds.
    #[serde(default = "default_deadline")]
    #[schemars(range(min = 60, max = 604800))]
    pub active_deadline_seconds: i64,
    /// Prove the dumps restore: restore the newest into a throwaway
    /// PostgreSQL (the target's image) on a schedule, after each backup, or
    /// both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,
}

fn default_upload_image() -> String {
    job::DEFAULT_UPLOAD_IMAGE.to_string()
}

fn default_history() -> i32 {
    3
}

fn default_deadline() -> i64 {
    6 * 3600
}

/// The workload a Backup dumps.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// The kind of workload; only StatefulSet is supported.
    pub kind: TargetKind,
    /// The workload's name, in the Backup's namespace.
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// Kinds of workload a Backup can dump.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum TargetKind {
    /// A PostgreSQL StatefulSet.
    StatefulSet,
}

/// What was observed of a Backup's CronJob and runs.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct BackupStatus {
    /// The observed CronJob's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron_job_name: Option<String>,
    /// When the CronJob last started a run.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_schedule_time: Option<String>,
    /// When the last successful run finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_backup_time: Option<String>,
    /// The outcome of the most recent run.
    pub last_backup_status: RunStatus,
    /// The newest dump proven to restore (with spec.verify).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_verified_backup: Option<VerifiedBackup>,
    /// TargetFound, Ready, LastBackupSucceeded and, with spec.verify,
    /// BackupVerified.
    pub conditions: Vec<Condition>,
    /// The parent generation Metacontroller last synced; set by Metacontroller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The Backup operator and its routes.
pub fn operator() -> Operator {
    let controller = ControllerSpec {
        children: vec![
            ChildResource::new(
                "batch/v1",
                "cronjobs",
                "InPlace",
                "a schedule, destination or suspend change updates the existing CronJob; runs already started are not touched",
            ),
            ChildResource::new(
                "batch/v1",
                "jobs",
                "OnDelete",
                "a verification run after a backup runs once; it is never replaced",
            ),
        ],
        generate_selector: true,
        // Job completions reach us as related objects; resync as a backstop.
        resync_period_seconds: Some(300),
    };
    Operator::new::<Backup>("backup", controller, "CronJob running dump + S3 upload")
        .sync(sync)
        .customize(customize)
}

fn name(b: &Backup) -> &str {
    b.metadata.name.as_deref().unwrap_or_default()
}

/// The CronJob's name.
pub fn cron_job_name(b: &Backup) -> String {
    format!("{}-backup", name(b))
}

/// Asks for the target StatefulSet and for this Backup's Jobs.
pub fn customize(
    req: &CustomizeRequest<Backup>,
    _ctx: &Context,
) -> Result<CustomizeResponse, HookError> {
    let b = &req.parent;
    // Deleted, it is finalized whatever its spec: finalize waits for this.
    if b.metadata.deletion_timestamp.is_none() {
        validate(b)?;
    }
    let ns = b.metadata.namespace.clone();
    Ok(CustomizeResponse {
        related_resources: vec![
            RelatedResourceRule::named(
                "apps/v1",
                "statefulsets",
                vec![b.spec.target.name.clone()],
                ns.clone(),
            ),
            RelatedResourceRule::labelled(
                "batch/v1",
                "jobs",
                BTreeMap::from([(LABEL_BACKUP.to_string(), name(b).to_string())]),
                ns.clone(),
            ),
            // The verification runs' pods say how their restore went.
            RelatedResourceRule::labelled(
                "v1",
                "pods",
                BTreeMap::from([
                    (LABEL_BACKUP.to_string(), name(b).to_string()),
                    (LABEL_VERIFY.to_string(), "true".to_string()),
                ]),
                ns,
            ),
        ],
    })
}

/// Checks what the CRD schema cannot: the cron syntax, and names.
pub fn validate(b: &Backup) -> Result<(), InvalidSpec> {
    validate::dns_label("metadata.name", name(b), MAX_NAME)?;
    validate::cron("spec.schedule", &b.spec.schedule)?;
    if let Some(zone) = &b.spec.time_zone {
        validate::time_zone("spec.timeZone", zone)?;
    }
    validate::object_name("spec.target.name", &b.spec.target.name, "StatefulSet")?;
    validate_destination("spec.destination", &b.spec.destination)?;
    if let Some(days) = b.spec.retention_days {
        validate::in_range("spec.retentionDays", days.into(), 1, 36500)?;
    }
    validate::image("spec.uploadImage", &b.spec.upload_image)?;
    if let Some(account) = &b.spec.service_account_name {
        validate::object_name("spec.serviceAccountName", account, "ServiceAccount")?;
    }
    for (field, limit) in [
        (
            "spec.successfulJobsHistoryLimit",
            b.spec.successful_jobs_history_limit,
        ),
        (
            "spec.failedJobsHistoryLimit",
            b.spec.failed_jobs_history_limit,
        ),
    ] {
        validate::in_range(field, limit.into(), 0, 100)?;
    }
    validate::in_range(
        "spec.activeDeadlineSeconds",
        b.spec.active_deadline_seconds,
        60,
        604_800,
    )?;
    if let Some(schedule) = b.spec.verify.as_ref().and_then(|v| v.schedule.as_ref()) {
        validate::cron("spec.verify.schedule", schedule)?;
    }
    if let Some(r) = &b.spec.resources {
        resources::validate("spec.resources", r)?;
    }
    Ok(())
}

/// Why a target cannot be backed up.
#[derive(Clone, Debug, PartialEq)]
pub struct Unusable {
    /// CamelCase reason for the condition.
    pub reason: &'static str,
    /// One line for people.
    pub message: String,
}

/// How to reach the database in a PostgreSQL StatefulSet, read from its own
/// spec: its Service, port, database, user and password Secret.
pub fn source_of(sts: &StatefulSet, database: Option<&str>) -> Result<Source, Unusable> {
    let sts_name = sts.metadata.name.clone().unwrap_or_default();
    let ns = sts
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let spec = sts.spec.as_ref();
    let containers = spec
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| p.containers.as_slice())
        .unwrap_or_default();
    let container = postgres_container(containers).ok_or_else(|| Unusable {
        reason: "NotPostgres",
        message: format!("statefulset {sts_name} has no PostgreSQL container (none sets POSTGRES_PASSWORD or runs a postgres image)"),
    })?;
    let var = |name: &str| container.env.iter().flatten().find(|e| e.name == name);
    let password = match var("POSTGRES_PASSWORD").and_then(credential) {
        Some(secret @ Credential::Secret { .. }) => secret,
        _ => {
            return Err(Unusable {
                reason: "PasswordNotInSecret",
                message: format!(
                    "statefulset {sts_name} container {} does not take POSTGRES_PASSWORD from a Secret; backups reuse that Secret and never copy passwords",
                    container.name
                ),
            });
        }
    };
    let user = var("POSTGRES_USER")
        .and_then(credential)
        .unwrap_or_else(|| Credential::Value("postgres".into()));
    let database = database
        .map(String::from)
        .or_else(|| {
            var("POSTGRES_DB").and_then(|e| Some(as_seen(e.value.as_deref()?).into_owned()))
        })
        .or_else(|| match &user {
            Credential::Value(u) => Some(u.clone()),
            Credential::Secret { .. } => None,
        })
        .unwrap_or_else(|| "postgres".into());
    let port = postgres_port(container);
    let service = spec
        .and_then(|s| s.service_name.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| sts_name.clone());
    Ok(Source {
        host: format!("{service}.{ns}.svc"),
        port,
        database,
        user,
        password,
        image: container.image.clone().unwrap_or_else(|| "postgres".into()),
    })
}

/// The container that runs PostgreSQL: the one given POSTGRES_PASSWORD,
/// else the one running a postgres image.
fn postgres_container(containers: &[Container]) -> Option<&Container> {
    let has = |c: &Container, var: &str| c.env.iter().flatten().any(|e| e.name == var);
    containers
        .iter()
        .find(|c| has(c, "POSTGRES_PASSWORD"))
        .or_else(|| {
            containers
                .iter()
                .find(|c| c.image.as_deref().is_some_and(|i| i.contains("postgres")))
        })
}

/// Where a variable's value comes from: written in the spec (as its
/// program sees it), or a Secret's key (a ConfigMap or field reference is
/// no credential).
fn credential(e: &EnvVar) -> Option<Credential> {
    if let Some(value) = &e.value {
        return Some(Credential::Value(as_seen(value).into_owned()));
    }
    let secret = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
    Some(Credential::Secret {
        name: secret.name.clone(),
        key: secret.key.clone(),
    })
}

/// The port PostgreSQL listens on: the one named for it, else 5432.
fn postgres_port(container: &Container) -> i32 {
    let ports = || container.ports.iter().flatten();
    ports()
        .find(|p| {
            matches!(
                p.name.as_deref(),
                Some("postgres" | "postgresql" | "tcp-postgresql")
            )
        })
        .or_else(|| ports().find(|p| p.container_port == 5432))
        .map_or(5432, |p| p.container_port)
}

/// The CronJob of a Backup: the shared backup job on the Backup's schedule.
pub fn cron_job(b: &Backup, source: &Source, suspend: bool) -> CronJob {
    let mut labels = standard_labels(APP, name(b));
    labels.insert(LABEL_BACKUP.to_string(), name(b).to_string());
    let plan = job::Plan {
        source,
        destination: &b.spec.destination,
        name: name(b),
        retention_days: b.spec.retention_days,
        retention_requires_verified: b.spec.verify.is_some(),
        upload_image: &b.spec.upload_image,
        service_account: b.spec.service_account_name.as_deref(),
        resources: b.spec.resources.as_ref(),
        active_deadline_seconds: b.spec.active_deadline_seconds,
        labels: labels.clone(),
    };
    let meta = ObjectMeta {
        name: Some(cron_job_name(b)),
        namespace: b.metadata.namespace.clone(),
        labels: Some(labels.clone()),
        annotations: Some(BTreeMap::from([(
            ANNOTATION_SOURCE.to_string(),
            serde_json::to_string(source).expect("sources serialize"),
        )])),
        ..ObjectMeta::default()
    };
    let schedule = Schedule {
        cron: b.spec.schedule.trim(),
        time_zone: b.spec.time_zone.as_deref(),
        suspend,
        history: (
            b.spec.successful_jobs_history_limit,
            b.spec.failed_jobs_history_limit,
        ),
    };
    scheduled(meta, &schedule, &plan)
}

/// Desired CronJob and observed status of one Backup.
pub fn sync(
    req: &SyncRequest<Backup>,
    ctx: &Context,
) -> Result<SyncResponse<BackupStatus>, HookError> {
    let b = &req.parent;
    validate(b)?;
    let observed_cron = req
        .children
        .of::<CronJob>()?
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(cron_job_name(b).as_str()));
    let target = req
        .related
        .of::<StatefulSet>()?
        .into_iter()
        .find(|s| s.metadata.name.as_deref() == Some(b.spec.target.name.as_str()));
    // The backup runs: the verification runs share the Backup's label.
    let (verify_jobs, jobs): (Vec<Job>, Vec<Job>) = req
        .related
        .of::<Job>()?
        .into_iter()
        .partition(|j| labelled_verify(&j.metadata));
    let pods = req.related.of::<ObservedPod>()?;

    let usable = target
        .as_ref()
        .map(|sts| source_of(sts, b.spec.database.as_deref()));
    let mut children = match (&usable, &observed_cron) {
        (Some(Ok(source)), _) => vec![Child::new(&cron_job(b, source, b.spec.suspend))],
        // While the target is gone or unusable, the CronJob is kept,
        // suspended, with the connection it was built with.
        (_, Some(cron)) => vec![Child::new(&cron_job(b, &built_with(b, cron)?, true))],
        (_, None) => vec![],
    };
    if let Some(Ok(source)) = &usable {
        children.extend(verification_children(b, source, observed_cron.as_ref()));
    }
    keep_or_refuse_not_built(b, &req.children, &mut children)?;
    let status = status(
        b,
        observed_cron.as_ref(),
        usable.as_ref(),
        (&jobs, &pods, &verify_jobs),
        ctx,
    );
    Ok(SyncResponse {
        status,
        children: Child::sorted(children),
        ..SyncResponse::default()
    })
}

/// The connection an observed CronJob was built with: read from its own
/// job template (which we wrote, and which a user edit of an annotation
/// cannot change), else from its annotation. Neither readable means the
/// CronJob cannot be rebuilt, and leaving it out would delete it and any
/// backup it is running: refuse instead.
fn built_with(b: &Backup, cron: &CronJob) -> Result<Source, HookError> {
    let from_template = || {
        let job = cron.spec.as_ref()?.job_template.spec.as_ref()?;
        job::source_in(job.template.spec.as_ref()?)
    };
    let from_annotation = || {
        let text = cron.metadata.annotations.as_ref()?.get(ANNOTATION_SOURCE)?;
        serde_json::from_str::<Source>(text).ok()
    };
    from_template().or_else(from_annotation).ok_or_else(|| {
        HookError::Unsafe(format!(
            "statefulset {} is gone or unusable and cronjob {} no longer shows which database it backs up (its dump container and its {ANNOTATION_SOURCE} annotation are unreadable); nothing is changed: restore the target statefulset",
            b.spec.target.name,
            cron_job_name(b)
        ))
    })
}

/// Children it does not build, which an answer without them would delete:
/// a CronJob of another name is refused; a Job other than a verification
/// run (one started by hand) is kept as it is, as Jobs run once and are
/// never updated.
fn keep_or_refuse_not_built(
    b: &Backup,
    observed: &ObjectGroups,
    children: &mut Vec<Child>,
) -> Result<(), HookError> {
    let verify = format!("{}-verify", name(b));
    refuse_not_built::<CronJob>(observed, "Backup", name(b), |n| {
        n == cron_job_name(b) || n == verify
    })?;
    let runs = format!("{}-v-", name(b));
    for job in observed.names_of::<Job>()? {
        if !job.starts_with(&runs) {
            children.push(Child::new(&Job {
                metadata: ObjectMeta {
                    name: Some(job.to_string()),
                    namespace: b.metadata.namespace.clone(),
                    ..ObjectMeta::default()
                },
                ..Job::default()
            }));
        }
    }
    Ok(())
}

/// True for the objects of a verification run.
fn labelled_verify(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_VERIFY))
}

/// With `spec.verify`: the CronJob `<name>-verify` on its schedule, and
/// after each backup the CronJob reports succeeded the Job
/// `<name>-v-<YYYYMMDDHHMMSS>` (short: a Backup's name takes up to 45 of
/// a Job's 63 characters).
fn verification_children(b: &Backup, source: &Source, cron: Option<&CronJob>) -> Vec<Child> {
    let Some(verify) = &b.spec.verify else {
        return Vec::new();
    };
    let mut labels = standard_labels(APP, name(b));
    labels.insert(LABEL_BACKUP.to_string(), name(b).to_string());
    let run = verification::Run {
        destination: &b.spec.destination,
        names: vec![name(b).to_string()],
        image: source.image.clone(),
        upload_image: &b.spec.upload_image,
        service_account: b.spec.service_account_name.as_deref(),
        resources: b.spec.resources.as_ref(),
        labels,
    };
    let meta = |object: String| ObjectMeta {
        name: Some(object),
        namespace: b.metadata.namespace.clone(),
        ..ObjectMeta::default()
    };
    let mut children = Vec::new();
    if let Some(schedule) = &verify.schedule {
        let cron = run.scheduled(meta(format!("{}-verify", name(b))), schedule.trim());
        children.push(Child::new(&cron));
    }
    let last_backup = cron
        .and_then(|c| c.status.as_ref()?.last_successful_time.as_ref())
        .map(|t| t.0);
    if let Some(at) = last_backup.filter(|_| verify.after_each_backup) {
        children.push(Child::new(
            &run.after_backup(meta(format!("{}-v", name(b))), at),
        ));
    }
    children
}

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
    use serde_json::json;

    fn sts(env: serde_json::Value, ports: serde_json::Value, service: Option<&str>) -> StatefulSet {
        fixtures::statefulset("mydb")
            .namespace("prod")
            .set("/spec/serviceName", json!(service))
            .containers(json!([
                {"name": "sidecar", "image": "busybox"},
                {"name": "pg", "image": "postgres:16.4", "env": env, "ports": ports}]))
            .typed()
    }

    fn secret(name: &str, key: &str) -> serde_json::Value {
        json!({"secretKeyRef": {"name": name, "key": key}})
    }

    #[test]
    fn source_is_read_from_the_target() {
        let env = json!([
            {"name": "POSTGRES_USER", "valueFrom": secret("creds", "user")},
            {"name": "POSTGRES_PASSWORD", "valueFrom": secret("creds", "pass")},
            {"name": "POSTGRES_DB", "value": "orders"}]);
        let source = source_of(
            &sts(
                env,
                json!([{"name": "postgresql", "containerPort": 6432}]),
                Some("mydb-hl"),
            ),
            None,
        )
        .unwrap();
        assert_eq!(source.host, "mydb-hl.prod.svc");
        assert_eq!(source.port, 6432);
        assert_eq!(source.database, "orders");
        assert_eq!(source.image, "postgres:16.4");
        assert_eq!(
            source.user,
            Credential::Secret {
                name: "creds".into(),
                key: "user".into()
            }
        );
        assert_eq!(
            source.password,
            Credential::Secret {
                name: "creds".into(),
                key: "pass".into()
            }
        );
    }

    #[test]
    fn defaults_follow_the_postgres_image() {
        let env = json!([{"name": "POSTGRES_PASSWORD", "valueFrom": secret("c", "p")}]);
        let source = source_of(&sts(env.clone(), json!([]), None), None).unwrap();
        assert_eq!(
            source.host, "mydb.prod.svc",
            "no serviceName: the StatefulSet's name"
        );
        assert_eq!(source.port, 5432);
        assert_eq!(source.user, Credential::Value("postgres".into()));
        assert_eq!(source.database, "postgres", "the user's own database");
        let chosen = source_of(&sts(env, json!([]), None), Some("other")).unwrap();
        assert_eq!(chosen.database, "other", "spec.database wins");
    }

    #[test]
    fn a_literal_password_is_never_copied() {
        let env = json!([{"name": "POSTGRES_PASSWORD", "value": "hunter2"}]);
        let err = source_of(&sts(env, json!([]), None), None).unwrap_err();
        assert_eq!(err.reason, "PasswordNotInSecret");
        assert!(!err.message.contains("hunter2"));
    }

    #[test]
    fn a_statefulset_without_postgres_is_unusable() {
        let not_pg: StatefulSet = fixtures::statefulset("web")
            .containers(json!([{"name": "nginx", "image": "nginx"}]))
            .typed();
        assert_eq!(source_of(&not_pg, None).unwrap_err().reason, "NotPostgres");
    }

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
