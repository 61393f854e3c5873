//! `spec.bootstrap`: which data a new Database starts from, a dump or a
//! point in a WAL archive.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::Database;
use crate::operators::backup_job::Destination;
use crate::operators::validate::InvalidSpec;
use k8s_openapi::jiff::Timestamp;

/// Which data a new Database starts from: the newest dump of a Database or
/// of a Backup, one dump by its key, or a point in a WAL archive (exactly
/// one of `database`, `backup`, `key` and `archive`).
#[derive(Clone, Debug, Deserialize, Serialize, KubeSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("[has(self.database), has(self.backup), has(self.key), has(self.archive)].filter(x, x).size() == 1").message("spec.bootstrap names exactly one of database, backup, key and archive"),
    validation = Rule::new("!has(self.key) || !has(self.before)").message("spec.bootstrap.before chooses among dumps; with an exact key there is nothing to choose"),
    validation = Rule::new("!has(self.archive) || (!has(self.before) && !has(self.destination))").message("spec.bootstrap.archive recovers from the archive in spec.backup.destination to its own target: before and destination are for dumps")
)]
pub struct Bootstrap {
    /// The Database whose newest dump to restore: its scheduled dumps,
    /// pre-upgrade dumps and final snapshot. This Database's own name
    /// brings back a Database deleted under Snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub database: Option<String>,
    /// The Backup whose newest dump to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub backup: Option<String>,
    /// Exactly this object, for example nightly/orders-20261124T020000Z.pgdump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub key: Option<String>,
    /// With database or backup: the newest dump taken strictly before this
    /// time (RFC 3339, for example 2026-11-24T09:00:00Z), to go back to
    /// before a bad migration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub before: Option<String>,
    /// Where the dumps are; spec.backup.destination when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<Destination>,
    /// A point-in-time recovery from another Database's WAL archive in
    /// spec.backup.destination, instead of a dump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<ArchiveRecovery>,
}

/// Where in a WAL archive a new Database starts: a base backup, then the
/// archived WAL replayed up to the target (at most one of `targetTime`,
/// `targetLSN` and `targetName`; none: the end of the archive).
#[derive(Clone, Debug, Deserialize, Serialize, KubeSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("[has(self.targetTime), has(self.targetLSN), has(self.targetName)].filter(x, x).size() <= 1").message("spec.bootstrap.archive names at most one of targetTime, targetLSN and targetName")
)]
pub struct ArchiveRecovery {
    /// The archive's folder, as the source Database's Archiving condition
    /// names it: <name>-<uid>-pg<major>, the major being spec.version.
    #[schemars(length(min = 1, max = 120), pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]*$"))]
    pub folder: String,
    /// Replay up to this time, RFC 3339 (2026-11-24T17:00:00Z), commits at
    /// that time included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub target_time: Option<String>,
    /// Replay up to this WAL position, such as 0/5000028.
    #[serde(default, rename = "targetLSN", skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 3, max = 17),
        pattern(r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$")
    )]
    pub target_lsn: Option<String>,
    /// Replay up to this restore point (pg_create_restore_point), looked for
    /// after the newest base backup only: one made before it is reached by
    /// targetLSN, the LSN pg_create_restore_point answered, when an older
    /// base backup ended before that LSN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub target_name: Option<String>,
}

impl ArchiveRecovery {
    /// The target as the recovery scripts take it: (variable, value).
    pub fn target(&self) -> Option<(&'static str, &str)> {
        [
            ("RECOVERY_TARGET_TIME", &self.target_time),
            ("RECOVERY_TARGET_LSN", &self.target_lsn),
            ("RECOVERY_TARGET_NAME", &self.target_name),
        ]
        .into_iter()
        .find_map(|(var, value)| Some((var, value.as_deref()?)))
    }

    /// The target in words.
    pub fn describe_target(&self) -> String {
        match (&self.target_time, &self.target_lsn, &self.target_name) {
            (Some(t), _, _) => format!("time {t}"),
            (_, Some(lsn), _) => format!("LSN {lsn}"),
            (_, _, Some(name)) => format!("restore point {name}"),
            _ => "the end of the archive".to_string(),
        }
    }
}

impl Bootstrap {
    /// Which dump, in words: "the newest dump of Database orders taken
    /// before 2026-11-24T09:00:00Z".
    pub fn describe(&self) -> String {
        let before = self
            .before
            .as_ref()
            .map(|t| format!(" taken before {t}"))
            .unwrap_or_default();
        match (&self.database, &self.backup, &self.key) {
            (Some(db), _, _) => format!("the newest dump of Database {db}{before}"),
            (_, Some(backup), _) => format!("the newest dump of Backup {backup}{before}"),
            (_, _, Some(key)) => format!("object {key}"),
            _ => match &self.archive {
                Some(a) => format!("archive {} to {}", a.folder, a.describe_target()),
                None => "no dump".to_string(),
            },
        }
    }
}

/// Where the bootstrap's dumps are: its own destination, or the backups'.
pub fn bootstrap_destination(db: &Database) -> Option<&Destination> {
    let bootstrap = db.spec.bootstrap.as_ref()?;
    if bootstrap.archive.is_some() {
        return Some(&db.spec.backup.as_ref()?.destination);
    }
    bootstrap
        .destination
        .as_ref()
        .or_else(|| Some(&db.spec.backup.as_ref()?.destination))
}

/// `spec.bootstrap.before` as the 14 digits a dump's name carries
/// (YYYYMMDDHHMMSS, UTC).
pub fn before_stamp(before: &str) -> Result<String, InvalidSpec> {
    let time: Timestamp = before.parse().map_err(|_| {
        InvalidSpec::new(
            "spec.bootstrap.before",
            format!("{before:?} is not an RFC 3339 time; write it like 2026-11-24T09:00:00Z"),
        )
    })?;
    Ok(time.strftime("%Y%m%d%H%M%S").to_string())
}
