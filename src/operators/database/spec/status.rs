//! What a Database's status says: its phase, the primary and its last
//! change, each instance, the dump it was restored from. Read and written
//! by the hook only; anyone with status access can write it, so nothing
//! here decides alone (see `plan` and `primary` for how each is trusted).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hook::conditions::Condition;
use crate::operators::backup_job::verification::VerifiedBackup;

/// Where a Database is in its life.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the primary to start.
    #[default]
    Creating,
    /// The primary is up; the initial configuration is running.
    Initializing,
    /// Every instance is ready.
    Running,
    /// Moving to a new major version.
    Upgrading,
    /// Restoring the dump it starts from; nobody can write yet.
    Restoring,
    /// A planned change rolls out with the primary serving: a new template
    /// instance by instance, or a switchover asked for (writes stop for
    /// its few seconds). A rollout that stalls on an instance shows in
    /// `RolledOut` and the instance's readiness, not here.
    Updating,
    /// Configured, but not every instance is ready, or a step failed.
    Degraded,
    /// Being deleted.
    Deleting,
}

impl Phase {
    /// Its name, as the status writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Creating => "Creating",
            Phase::Initializing => "Initializing",
            Phase::Running => "Running",
            Phase::Upgrading => "Upgrading",
            Phase::Restoring => "Restoring",
            Phase::Updating => "Updating",
            Phase::Degraded => "Degraded",
            Phase::Deleting => "Deleting",
        }
    }
}

/// What was observed of a Database.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct DatabaseStatus {
    /// Where the Database is in its life.
    pub phase: Phase,
    /// True when every instance is ready and the database is configured.
    pub ready: bool,
    /// host:port of the read-write Service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The major version actually running, from the StatefulSet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Instances the StatefulSet runs.
    pub replicas: i32,
    /// Instances that are ready.
    pub ready_replicas: i32,
    /// Ready instances of those the Database runs, as `n/m`, for
    /// `kubectl get pgdb`'s READY.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_instances: Option<String>,
    /// When the last scheduled backup succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_backup_time: Option<String>,
    /// While deleting: when the final snapshot succeeded. Once recorded, the
    /// snapshot is never taken again, whatever happens to its Job.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub snapshot_time: Option<String>,
    /// The newest dump proven to restore (with spec.backup.verify).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_verified_backup: Option<VerifiedBackup>,
    /// The newest base backup proven to restore, with the archive replayed
    /// over it (with spec.backup.archive.verifySchedule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_verified_base_backup: Option<VerifiedBaseBackup>,
    /// The WAL archive's progress, as the primary's archiver last reported
    /// it (with spec.backup.archive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive: Option<ArchiveProgress>,
    /// The dump this Database was restored from, once it was: kept for ever.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<RestoredFrom>,
    /// The instance serving as the primary (its pod's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_primary: Option<String>,
    /// While the primary changes: the instance being promoted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_primary: Option<String>,
    /// Counts the designations of a primary; only grows.
    pub primary_epoch: u64,
    /// The last failover: when, from, to, at which epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<LastFailover>,
    /// Each instance's role and readiness, as observed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceStatus>,
    /// Ready, Initialized, BackupScheduled, Upgrading, Restored (with
    /// spec.bootstrap), ParametersApplied (with spec.postgresql) and, when
    /// deleting, Snapshotted.
    pub conditions: Vec<Condition>,
    /// The parent generation Metacontroller last synced; set by Metacontroller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The WAL archive's progress, as the archiver sidecar of the primary
/// last reported it: what the store received, not what the hook decided.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveProgress {
    /// The newest WAL file the store received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archived_wal: Option<String>,
    /// When it was stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_archived_time: Option<String>,
    /// While archiving fails: when the failures began. PostgreSQL keeps
    /// every segment not yet stored on the volume meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub failing_since: Option<String>,
    /// The WAL file of the newest failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_wal: Option<String>,
    /// When the newest failure happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_failure_time: Option<String>,
    /// Why it failed: barman-cloud's last complaint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// The pod whose archiver reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_by: Option<String>,
    /// The newest base backup an instance's archiver stored (or found
    /// stored), as it reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_base_backup: Option<StoredBaseBackup>,
    /// While the newest base backup an archiver tried failed: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_backup_failure: Option<String>,
}

/// A base backup in the store, as the archiver that took it reported.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StoredBaseBackup {
    /// Its id in the store.
    pub id: String,
    /// The name the hook asked for it by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `primary` or `standby`: the server it was taken from.
    pub from: String,
    /// The pod whose archiver took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// When it ended: a recovery can start from this point on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub end_time: Option<String>,
    /// How long it took, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
}

/// A failover that happened.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LastFailover {
    /// When the new primary was promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub at: Option<String>,
    /// The primary before (its pod's name), when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The instance promoted.
    pub to: String,
    /// The epoch of its designation.
    pub epoch: u64,
    /// What happened, in words.
    pub reason: String,
}

/// One instance, as observed.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// Its pod's name.
    pub name: String,
    /// primary, standby, or promoting (designated, not yet promoted).
    pub role: String,
    /// Whether its pod is ready.
    pub ready: bool,
}

/// The dump a Database was restored from.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RestoredFrom {
    /// The object restored, s3://bucket/key.
    pub object: String,
    /// Its size in bytes, as the restore Job reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// When the dump was taken, from its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub taken: Option<String>,
    /// When the restore Job succeeded.
    #[schemars(extend("format" = "date-time"))]
    pub restored_at: String,
}

/// A base backup proven to restore: downloaded into a throwaway PostgreSQL,
/// with the archive replayed over it to its end, and promoted.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedBaseBackup {
    /// The backup's id in the store.
    pub id: String,
    /// When the backup ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub backup_end: Option<String>,
    /// The last WAL record replayed over it: how far the archive read back.
    pub replayed_to: String,
    /// The time of the last transaction replayed, when one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit: Option<String>,
    /// The earliest point the archive recovered to at that run: the end
    /// of its oldest base backup (after retention, the oldest it kept).
    /// With the last commit, the window a recovery could reach then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_from: Option<String>,
    /// When the verification run started.
    #[schemars(extend("format" = "date-time"))]
    pub verified_at: String,
    /// How long the download and the replay took, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
}
