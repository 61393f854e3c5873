//! `spec.backup`: where a Database's dumps and WAL archive go, and how
//! they are made, kept and verified.

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::operators::backup_job::Destination;
use crate::operators::backup_job::verification::Verify;
use crate::operators::resources;

/// Backups of a Database.
#[derive(Clone, Debug, Deserialize, Serialize, KubeSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!self.enabled || has(self.schedule)").message("spec.backup.schedule is required when backups are enabled"))]
pub struct DatabaseBackup {
    /// Run scheduled backups.
    #[serde(default)]
    pub enabled: bool,
    /// When, in 5-field cron syntax, for example "0 2 * * *".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    pub schedule: Option<String>,
    /// Where dumps go: scheduled, pre-upgrade and the final snapshot.
    pub destination: Destination,
    /// Delete scheduled dumps older than this many days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub retention_days: Option<i32>,
    /// Prove the dumps restore: restore the newest into a throwaway
    /// PostgreSQL on a schedule, after each backup, or both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verify>,
    /// The AWS CLI image that talks to the store (upload, select, mark),
    /// as Backup's `uploadImage`; amazon/aws-cli when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255), pattern(r"^\S+$"))]
    pub upload_image: Option<String>,
    /// The service account of every pod that reads or writes the store
    /// (backups, snapshot, verification, restore), for cloud identities
    /// such as IRSA; the namespace's default when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub service_account_name: Option<String>,
    /// The resources of every container of the backup, snapshot,
    /// verification and restore Jobs, as Backup's `resources`, replacing
    /// the defaults: requests of 100m CPU and 256Mi memory, no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources::schema")]
    pub resources: Option<ResourceRequirements>,
    /// Continuous WAL archiving to `destination` (docs/archiving.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<Archive>,
}

impl DatabaseBackup {
    /// The image that talks to the store.
    pub fn upload_image(&self) -> &str {
        self.upload_image
            .as_deref()
            .unwrap_or(crate::operators::backup_job::DEFAULT_UPLOAD_IMAGE)
    }
}

/// `archive_timeout` when the spec gives none: a quiet database's last
/// commits reach the store within about a minute, as the issue asks, at
/// the cost of at most one more (compressed, nearly empty) segment a
/// minute.
pub const DEFAULT_ARCHIVE_TIMEOUT_SECONDS: i32 = 60;
/// Base backups when the spec names no schedule: one a day, at an hour
/// most clusters are quiet, so a recovery replays at most a day of WAL.
pub const DEFAULT_BASE_BACKUP_SCHEDULE: &str = "0 1 * * *";
/// An image with barman-cloud and a shell: CloudNativePG's PostgreSQL
/// image, whose operator archives with the same tool.
pub const DEFAULT_ARCHIVER_IMAGE: &str = "ghcr.io/cloudnative-pg/postgresql:17.2";

/// Continuous WAL archiving (`spec.backup.archive`): the primary hands
/// every WAL segment to barman-cloud, in a sidecar of each instance, which
/// stores it under `archive/` at `spec.backup.destination`. A segment is
/// removed from the primary's volume only once the store has it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Archive {
    /// Switch to a new segment, and so archive, at least this often while
    /// anything was written: the bound on the commits lost with every
    /// volume, plus the upload. 60 when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 3600))]
    pub timeout_seconds: Option<i32>,
    /// An image with barman-cloud and a POSIX shell; CloudNativePG's
    /// PostgreSQL image when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255), pattern(r"^\S+$"))]
    pub image: Option<String>,
    /// When to take a physical base backup, in 5-field cron syntax read in
    /// UTC; "0 1 * * *" (01:00 every day) when omitted. The first is taken
    /// as soon as the archive is on, each from a ready standby when there
    /// is one. A recovery replays the archive from the end of a base
    /// backup: the more often, the shorter the replay. The annotation
    /// opshooks.io/base-backup=<token> asks for one now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    pub base_backup_schedule: Option<String>,
    /// When to prove the newest base backup restores, in 5-field cron
    /// syntax read in UTC, for example "0 6 * * 0": a throwaway PostgreSQL
    /// in a Job downloads it and replays the whole archive over it to its
    /// end, and status.lastVerifiedBaseBackup says how far it got. None
    /// when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    pub verify_schedule: Option<String>,
    /// The recovery window to keep, in days: every base backup that ended
    /// within it, the newest one before it (from which any second of it is
    /// reached), and the WAL from the oldest kept backup on. Older base
    /// backups and WAL are deleted, and only by a verification run right
    /// after it proved the newest base backup restores: so it needs
    /// verifySchedule. Nothing is ever deleted when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3650))]
    pub retention_days: Option<u32>,
}

impl Archive {
    /// `archive_timeout` in seconds.
    pub fn timeout_seconds(&self) -> i32 {
        self.timeout_seconds
            .unwrap_or(DEFAULT_ARCHIVE_TIMEOUT_SECONDS)
    }

    /// The archiver's image.
    pub fn image(&self) -> &str {
        self.image.as_deref().unwrap_or(DEFAULT_ARCHIVER_IMAGE)
    }

    /// When base backups are taken.
    pub fn base_backup_schedule(&self) -> &str {
        self.base_backup_schedule
            .as_deref()
            .unwrap_or(DEFAULT_BASE_BACKUP_SCHEDULE)
    }
}
