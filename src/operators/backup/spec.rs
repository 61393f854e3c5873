//! The Backup custom resource: its spec and status types, the names
//! derived from it and the checks the schema cannot make. The bottom of the
//! Backup's stack: it imports nothing of the Backup.

// The CRD structs are re-exported by backup.rs, but kube's derive emits
// them again, and unreachable_pub then misses the re-export.
#![allow(unreachable_pub)]

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hook::conditions::Condition;
use crate::operators::backup_job::verification::{VerifiedBackup, Verify};
use crate::operators::backup_job::{self as job, Destination, RunStatus, validate_destination};
use crate::operators::resources;
use crate::operators::validate::{self, InvalidSpec};

/// The longest Backup name: `<name>-backup` plus the CronJob controller's
/// 11-character job suffix must fit in 63.
pub const MAX_NAME: usize = 45;

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

/// The uploader when `spec.uploadImage` is omitted.
fn default_upload_image() -> String {
    job::DEFAULT_UPLOAD_IMAGE.to_string()
}

/// The Jobs kept of each outcome when no history limit is given.
fn default_history() -> i32 {
    3
}

/// The longest run when `spec.activeDeadlineSeconds` is omitted: six hours.
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

/// The Backup's name.
pub(super) fn name(b: &Backup) -> &str {
    b.metadata.name.as_deref().unwrap_or_default()
}

/// The CronJob's name.
pub fn cron_job_name(b: &Backup) -> String {
    format!("{}-backup", name(b))
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
