//! Continuous WAL archiving (`spec.backup.archive`, issue 35;
//! docs/archiving.md): the whole feature as the hook builds it.
//!
//! - The server: `archive_mode=on`, `archive_timeout` and an
//!   `archive_command` that runs `archive-wal.sh` from the ConfigMap
//!   `<name>-archive`. The script hands each segment to the sidecar through
//!   a spool directory and succeeds only once the sidecar says the store
//!   has it: PostgreSQL keeps the segment, and retries, until then.
//! - The sidecar `archiver`: `archiver.sh` in an image with barman-cloud
//!   (the PostgreSQL image has no Python), the data volume mounted
//!   read-only at the server's path, the spool shared.
//! - Standbys: a `restore_command` that runs `restore-wal.sh` from the same
//!   ConfigMap, through the same sidecar. A standby whose primary already
//!   recycled the WAL it needs (stopped too long, or a new primary that
//!   never had it) replays it from the archive instead of staying
//!   stranded; it streams again once it caught up.
//! - Base backups ([`base_backups`]): asked of a ready standby's sidecar
//!   (else the primary's) through the same ConfigMap, on a schedule and on
//!   demand.
//! - The condition `Archiving`: whether the serving primary runs the
//!   sidecar, and which base backups are asked for.
//!
//! Only a primary archives (`archive_mode=on`): a promoted standby goes on
//! where the old primary stopped, on its new timeline.
//!
//! Not built yet (docs/archiving.md, "Not done yet"): point-in-time
//! recovery through the Database, retention, and the archive's progress in
//! status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EmptyDirVolumeSource, EnvVar, PodSpec, ResourceRequirements, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::names::{
    DATA_DIR, HBA_DIR, HBA_VOLUME, ROLE_DIR, archive_name, destination_url, pgdata, pod_name,
    superuser_secret_name,
};
use super::objects::{config_volume, meta, mount, secret_env, value_env};
use super::observed::Observed;
use super::plan::Plan;
use super::spec::{Archive, ArchiveRecovery, Database, Major, PORT, VOLUME, name, shows_condition};
use crate::hook::conditions::Observation;
use crate::operators::backup_job::{Destination, keys_env, region_env};
use crate::operators::common::restricted_container;
use crate::operators::expansion::shell_command;
use crate::operators::resources::cpu_memory;
use crate::operators::validate::{self, InvalidSpec};

pub(super) mod base_backups;
pub(super) mod report;
pub(super) mod verification;

/// The sidecar's loop.
const ARCHIVER_SCRIPT: &str = include_str!("archiver.sh");
/// The server's `archive_command`, in the ConfigMap.
const ARCHIVE_WAL_SCRIPT: &str = include_str!("archive-wal.sh");
/// Its key in the ConfigMap.
const ARCHIVE_WAL_KEY: &str = "archive-wal.sh";
/// A standby's `restore_command`, in the ConfigMap.
const RESTORE_WAL_SCRIPT: &str = include_str!("restore-wal.sh");
/// Its key in the ConfigMap.
const RESTORE_WAL_KEY: &str = "restore-wal.sh";
/// A base backup, run by the sidecar, from the ConfigMap.
const BASE_BACKUP_SCRIPT: &str = include_str!("base-backup.sh");
/// Its key in the ConfigMap.
const BASE_BACKUP_SCRIPT_KEY: &str = "base-backup.sh";
/// A point-in-time recovery's first step, the init container's command.
const PITR_FETCH_SCRIPT: &str = include_str!("pitr-fetch.sh");
/// Its second, run by `start.sh` from the ConfigMap.
const PITR_REPLAY_SCRIPT: &str = include_str!("pitr-replay.sh");
/// Its key in the ConfigMap.
const PITR_REPLAY_KEY: &str = "pitr-replay.sh";
/// Retention by recovery window, run by a verification's archiver after
/// a proof, from the ConfigMap.
const RETAIN_SCRIPT: &str = include_str!("retain.sh");
/// Its key in the ConfigMap.
const RETAIN_KEY: &str = "retain.sh";
/// The recovery window, in the ConfigMap while `retentionDays` is set.
const RETENTION_DAYS_KEY: &str = "retention-days";
/// How long one start of the primary replays before `pitr-replay.sh` stops
/// the server cleanly and the container exits (the next start goes on
/// from the last restartpoint): below the startup probe's hour
/// (`instances.rs`), which would kill it uncleanly and with no message.
const RECOVERY_WAIT_SECONDS: &str = "3300";
/// The init container that fetches the base backup.
const FETCH_CONTAINER: &str = "pitr-fetch";
/// The base backups asked for, in the ConfigMap ([`base_backups`]).
const BASE_BACKUP_REQUESTS_KEY: &str = "base-backup";
/// How long `restore-wal.sh` waits for the sidecar's answer before a
/// standby streams instead (it asks again later): short, so that a store
/// that hangs delays a standby's catching up, or a promotion's look for
/// timeline history, by this at most.
const RESTORE_WAIT_SECONDS: &str = "20";
/// How much longer than `archive_timeout` a standby's base backup waits
/// for its last segment in the archive: the upload, and segments queued.
const BACKUP_ARCHIVE_MARGIN_SECONDS: i32 = 600;
/// Where both containers see the ConfigMap.
const SCRIPTS_DIR: &str = "/etc/opshooks/archive";
/// The spool both containers share.
const SPOOL: &str = "/var/run/opshooks/wal";
const SPOOL_VOLUME: &str = "wal-spool";
const SCRIPTS_VOLUME: &str = "archive";
/// The sidecar's name.
const CONTAINER: &str = "archiver";

/// The archive's settings and store, when `spec.backup.archive` is set.
pub(super) fn enabled(db: &Database) -> Option<(&Archive, &Destination)> {
    let backup = db.spec.backup.as_ref()?;
    Some((backup.archive.as_ref()?, &backup.destination))
}

/// The archive this Database recovers from (`spec.bootstrap.archive`),
/// with its own archive on (validation refuses the one without the other).
pub(super) fn recovery(db: &Database) -> Option<&ArchiveRecovery> {
    enabled(db)?;
    db.spec.bootstrap.as_ref()?.archive.as_ref()
}

/// barman-cloud's server name, the archive's folder: the Database's name
/// and uid, and the major `version` of the cluster whose WAL the sidecar
/// reads (`pg<major>`, as its data directory). A new cluster's segments
/// have the old one's file names (timeline 1, from the first segment on),
/// and barman-cloud uploads over what is there. A Database deleted and
/// created again under the same name is a new cluster (a new uid), and so
/// is each major upgrade (`upgrade.sh` restores into a new `initdb`, under
/// the same uid). Under one folder, the new cluster would write over the
/// old archive, which may be the only copy of data someone still needs;
/// each cluster gets its own, and nothing archived is ever overwritten.
/// `None` without a uid, which [`validate`] refuses.
fn server_name(db: &Database, version: Major) -> Option<String> {
    Some(format!("{}-{}-pg{}", name(db), uid(db)?, version.as_str()))
}

/// The Database's `metadata.uid`, when it has one.
fn uid(db: &Database) -> Option<&str> {
    db.metadata.uid.as_deref().filter(|u| !u.is_empty())
}

/// With `spec.backup.archive`, the Database must come with its uid (as the
/// API server and Metacontroller always send it): the archive's folder is
/// named after it ([`server_name`]); and its base backups' schedule must
/// parse.
pub(super) fn validate(db: &Database) -> Result<(), InvalidSpec> {
    let Some((archive, _)) = enabled(db) else {
        return Ok(());
    };
    if let Some(schedule) = &archive.base_backup_schedule {
        validate::cron("spec.backup.archive.baseBackupSchedule", schedule)?;
    }
    if let Some(schedule) = &archive.verify_schedule {
        validate::cron("spec.backup.archive.verifySchedule", schedule)?;
    }
    if let Some(days) = archive.retention_days {
        if !(1..=3650).contains(&days) {
            return Err(InvalidSpec::new(
                "spec.backup.archive.retentionDays",
                format!("is {days}: write a recovery window of 1 to 3650 days"),
            ));
        }
        if archive.verify_schedule.is_none() {
            return Err(InvalidSpec::new(
                "spec.backup.archive.retentionDays",
                "deletes old base backups only right after a verification run proved the newest one restores: set spec.backup.archive.verifySchedule too",
            ));
        }
    }
    if uid(db).is_none() {
        return Err(InvalidSpec::new(
            "metadata.uid",
            "missing, and spec.backup.archive names the archive's folder after it (so that a Database created again under the same name never writes over an older archive): send the Database with its uid, as the API server stores it",
        ));
    }
    Ok(())
}

/// The condition's type.
const CONDITION: &str = "Archiving";

/// `Archiving`, while `spec.backup.archive` is set (and after, as
/// `Disabled`, so that it does not stay as last written): whether the
/// serving primary runs the archiver (of the cluster of the plan's
/// major), whether its archiver reports failures ([`report`]), and which
/// base backups are asked for. PostgreSQL also counts each failure in
/// `pg_stat_archiver`, which the alert `OpshooksPostgresWALArchiveFailing`
/// reads.
pub(super) fn condition(db: &Database, seen: &Observed, plan: &Plan) -> Option<Observation> {
    let primary = plan.primary.serving.unwrap_or(plan.primary.designated);
    let version = plan.version;
    let Some((archive, dest)) = enabled(db) else {
        return shows_condition(db, CONDITION).then(|| {
            Observation::new(
                CONDITION,
                false,
                "Disabled",
                "spec.backup.archive is not set: no WAL is archived, and after losing every volume the newest copy is the last dump",
            )
        });
    };
    let pod = pod_name(db, primary);
    let spec = seen
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(pod.as_str()))
        .map(|p| p.spec.as_ref());
    let pending = match spec {
        None => Some(format!(
            "the primary {pod} does not run yet: it archives from its first start, with the sidecar"
        )),
        Some(spec) if !spec.is_some_and(|s| s.containers.iter().any(|c| c.name == CONTAINER)) => {
            Some(format!(
                "the primary {pod} runs without the archiver yet: it archives once the rollout has restarted it with the sidecar"
            ))
        }
        Some(_) => None,
    };
    if let Some(words) = pending {
        return Some(Observation::new(CONDITION, false, "Pending", words));
    }
    if let Some(words) = report::failing(report::progress(db, seen).as_ref(), &pod) {
        return Some(Observation::new(CONDITION, false, "ArchiveFailing", words));
    }
    let timeout = archive.timeout_seconds();
    Some(Observation::new(
        CONDITION,
        true,
        "Archiving",
        format!(
            "the primary {pod} hands each WAL segment to its archiver, which stores it at {}/{}, within {timeout} s of a write; a segment stays on the volume until stored, and failures are counted in pg_stat_archiver; {}",
            destination_url(dest),
            server_name(db, version).unwrap_or_default(),
            base_backups::decide(db, seen, plan).message(db)
        ),
    ))
}

/// The server's archive settings, as `-c` arguments.
pub(super) fn args(db: &Database) -> Vec<String> {
    let Some((archive, _)) = enabled(db) else {
        return Vec::new();
    };
    let timeout = archive.timeout_seconds();
    [
        "archive_mode=on".to_string(),
        format!("archive_command=sh {SCRIPTS_DIR}/{ARCHIVE_WAL_KEY} %f"),
        format!("archive_timeout={timeout}s"),
        format!("restore_command=sh {SCRIPTS_DIR}/{RESTORE_WAL_KEY} %f %p"),
    ]
    .into_iter()
    .flat_map(|arg| ["-c".to_string(), arg])
    .collect()
}

/// The ConfigMap `archive_command` and `restore_command` run their
/// scripts from, the sidecar its base backups (with the list of those
/// asked for), a recovery or a verification its replay, and a
/// verification its retention.
pub(super) fn scripts(db: &Database, seen: &Observed, plan: &Plan) -> Option<ConfigMap> {
    let (archive, _) = enabled(db)?;
    let requests = base_backups::decide(db, seen, plan).requests(db);
    Some(ConfigMap {
        metadata: meta(db, archive_name(db)),
        data: Some(BTreeMap::from_iter(
            [
                (ARCHIVE_WAL_KEY.to_string(), ARCHIVE_WAL_SCRIPT.to_string()),
                (RESTORE_WAL_KEY.to_string(), RESTORE_WAL_SCRIPT.to_string()),
                (
                    BASE_BACKUP_SCRIPT_KEY.to_string(),
                    BASE_BACKUP_SCRIPT.to_string(),
                ),
                (BASE_BACKUP_REQUESTS_KEY.to_string(), requests),
                // A recovery's replay, and a verification's.
                (PITR_REPLAY_KEY.to_string(), PITR_REPLAY_SCRIPT.to_string()),
                (RETAIN_KEY.to_string(), RETAIN_SCRIPT.to_string()),
            ]
            .into_iter()
            .chain(
                // Read by retain.sh when it runs: only while the field is set.
                archive
                    .retention_days
                    .map(|days| (RETENTION_DAYS_KEY.to_string(), days.to_string())),
            ),
        )),
        ..ConfigMap::default()
    })
}

/// Adds archiving to an instance's pod running `version`: the spool and
/// the script to `server`, the container that runs PostgreSQL, and the
/// sidecar.
pub(super) fn apply(db: &Database, version: Major, pod: &mut PodSpec, server: &str) {
    let Some((archive, dest)) = enabled(db) else {
        return;
    };
    for container in pod.containers.iter_mut().filter(|c| c.name == server) {
        container.env.get_or_insert_with(Vec::new).extend([
            value_env("WAL_SPOOL", SPOOL),
            value_env("RESTORE_WAIT", RESTORE_WAIT_SECONDS),
        ]);
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .extend([
                mount(SPOOL_VOLUME, SPOOL, false),
                mount(SCRIPTS_VOLUME, SCRIPTS_DIR, true),
            ]);
    }
    let mut archiver = sidecar(db, archive, dest, version);
    if let Some(recovery) = recovery(db) {
        for container in pod.containers.iter_mut().filter(|c| c.name == server) {
            container.env.get_or_insert_with(Vec::new).extend(
                [
                    value_env("RECOVERY_FROM_ARCHIVE", &recovery.folder),
                    value_env("ARCHIVE_SCRIPTS", SCRIPTS_DIR),
                    value_env("RECOVERY_WAIT", RECOVERY_WAIT_SECONDS),
                ]
                .into_iter()
                .chain(target_env(recovery)),
            );
        }
        archiver
            .env
            .get_or_insert_with(Vec::new)
            .push(value_env("RECOVERY_SERVER", &recovery.folder));
        pod.init_containers
            .get_or_insert_with(Vec::new)
            .push(fetch_container(archive, dest, version, recovery));
    }
    report::apply(db, pod, &mut archiver);
    pod.containers.push(archiver);
    pod.volumes.get_or_insert_with(Vec::new).extend([
        Volume {
            name: SPOOL_VOLUME.to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: None,
                size_limit: Some(Quantity("256Mi".to_string())),
            }),
            ..Volume::default()
        },
        config_volume(SCRIPTS_VOLUME, archive_name(db)),
    ]);
}

/// The init container of a point-in-time recovery: `pitr-fetch.sh`, which
/// downloads the base backup for the target into the designated primary's
/// empty data directory while the Database was never initialized (the
/// mounted role says), and otherwise does nothing.
fn fetch_container(
    archive: &Archive,
    dest: &Destination,
    version: Major,
    recovery: &ArchiveRecovery,
) -> Container {
    let mut env = vec![
        value_env("PGDATA", pgdata(version)),
        value_env("ROLE_DIR", ROLE_DIR),
        value_env("HOME", SPOOL),
        value_env("ARCHIVE_DESTINATION", destination_url(dest)),
        value_env("ARCHIVE_SERVER", &recovery.folder),
    ];
    env.extend(target_env(recovery));
    env.extend(store_env(dest));
    barman_container(
        archive,
        FETCH_CONTAINER,
        PITR_FETCH_SCRIPT,
        env,
        vec![
            mount(VOLUME, DATA_DIR, false),
            mount(SPOOL_VOLUME, SPOOL, false),
            mount("role", ROLE_DIR, true),
        ],
    )
}

/// A container of the archiver's image (barman-cloud) running `script`:
/// the sidecar, a recovery's fetch, and a verification's fetch and
/// archiver, each with its own values and mounts.
fn barman_container(
    archive: &Archive,
    name: &str,
    script: &str,
    env: Vec<EnvVar>,
    mounts: Vec<VolumeMount>,
) -> Container {
    Container {
        name: name.to_string(),
        image: Some(archive.image().to_string()),
        command: Some(shell_command(script)),
        env: Some(env),
        volume_mounts: Some(mounts),
        resources: Some(archiver_resources()),
        security_context: Some(restricted_container()),
        ..Container::default()
    }
}

/// The recovery's target, as `pitr-fetch.sh` and `pitr-replay.sh` read it
/// (none: the end of the archive).
fn target_env(recovery: &ArchiveRecovery) -> Option<EnvVar> {
    let (variable, value) = recovery.target()?;
    Some(value_env(variable, value))
}

/// How barman-cloud reaches the store, the sidecar's and the recovery's:
/// its endpoint (an S3-compatible store's), region and keys.
fn store_env(dest: &Destination) -> Vec<EnvVar> {
    let mut env: Vec<EnvVar> = dest
        .endpoint
        .iter()
        .map(|endpoint| value_env("ARCHIVE_ENDPOINT", endpoint))
        .collect();
    env.push(region_env(dest));
    env.extend(keys_env(dest));
    env
}

/// The archiver's resources, the sidecar's and the recovery's.
fn archiver_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(cpu_memory("20m", "64Mi")),
        // A base backup runs barman-cloud-backup and its two upload
        // processes beside the loop: three Pythons.
        limits: Some(cpu_memory("500m", "512Mi")),
        ..ResourceRequirements::default()
    }
}

/// The sidecar: `archiver.sh`, the server's data read-only at its path,
/// the ConfigMap's scripts, and the server at 127.0.0.1 as the superuser
/// for base backups (`pg_backup_start` and `pg_backup_stop`).
fn sidecar(db: &Database, archive: &Archive, dest: &Destination, version: Major) -> Container {
    let mut env = vec![
        value_env("PGDATA", pgdata(version)),
        value_env("WAL_SPOOL", SPOOL),
        // barman-cloud's SDKs read no file of their own here.
        value_env("HOME", SPOOL),
        value_env("ARCHIVE_DESTINATION", destination_url(dest)),
        value_env(
            "ARCHIVE_SERVER",
            server_name(db, version).unwrap_or_default(),
        ),
        value_env("ARCHIVE_SCRIPTS", SCRIPTS_DIR),
        // A standby's base backup is stored once its last segment is
        // archived, which a quiet primary does after archive_timeout.
        value_env(
            "BACKUP_ARCHIVE_WAIT",
            (archive.timeout_seconds() + BACKUP_ARCHIVE_MARGIN_SECONDS).to_string(),
        ),
        value_env("PGHOST", "127.0.0.1"),
        value_env("PGPORT", PORT.to_string()),
        value_env("PGUSER", "postgres"),
        secret_env("PGPASSWORD", superuser_secret_name(db), "password"),
        value_env("PGCONNECT_TIMEOUT", "30"),
    ];
    env.extend(store_env(dest));
    barman_container(
        archive,
        CONTAINER,
        ARCHIVER_SCRIPT,
        env,
        vec![
            mount(VOLUME, DATA_DIR, true),
            mount(SPOOL_VOLUME, SPOOL, false),
            mount(SCRIPTS_VOLUME, SCRIPTS_DIR, true),
            // barman-cloud-backup copies the server's hba_file, outside
            // the data directory, from where the server reads it.
            mount(HBA_VOLUME, HBA_DIR, true),
        ],
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::observed::Role;
    use super::super::plan::{plan, tests::running};
    use super::*;
    use crate::fixtures;
    use crate::hook::conditions::ConditionStatus;

    pub(super) fn archived() -> Database {
        fixtures::orders()
            .uid("orders-uid")
            .spec(
                "backup",
                json!({
                    "destination": {"s3Bucket": "dumps", "s3Prefix": "orders/", "credentialsSecret": "s3"},
                    "archive": {"timeoutSeconds": 30}
                }),
            )
            .typed()
    }

    /// The plan for `seen`, the StatefulSet running 16 and the role
    /// ConfigMap naming instance `primary`.
    fn planned(db: &Database, seen: &Observed, primary: u32) -> Plan {
        let mut seen = seen.clone();
        seen.statefulset = running("16").statefulset;
        seen.role = Some(Role {
            primary: format!("orders-{primary}"),
            epoch: 1,
            initialized: true,
            ..Role::default()
        });
        plan(db, &seen).expect("a plan")
    }

    #[test]
    fn the_condition_says_whether_the_serving_primary_runs_the_archiver() {
        let db = archived();
        let pod = |containers: &[&str]| {
            let spec = containers
                .iter()
                .map(|c| json!({"name": c}))
                .collect::<Vec<_>>();
            fixtures::instance(1)
                .set("/spec", json!({"containers": spec}))
                .typed()
        };
        let said = |seen: &Observed, primary| {
            let c = condition(&db, seen, &planned(&db, seen, primary))
                .expect("shown while archiving is on");
            (c.status == ConditionStatus::True, c.reason)
        };
        let mut seen = Observed {
            pods: vec![pod(&["postgres", "lease"])],
            ..Observed::default()
        };
        assert_eq!(said(&seen, 1), (false, "Pending"));
        seen.pods = vec![pod(&["postgres", "lease", CONTAINER])];
        assert_eq!(said(&seen, 1), (true, "Archiving"));
        // Another instance's sidecar says nothing of the primary's.
        assert_eq!(said(&seen, 0), (false, "Pending"));
        // Off: nothing, or Disabled once the status showed it.
        let off = fixtures::orders().typed();
        assert!(condition(&off, &seen, &planned(&off, &seen, 1)).is_none());
        let shown = fixtures::orders()
            .status(
                json!({"conditions": [{"type": "Archiving", "status": "True", "reason": "Archiving",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
            )
            .typed();
        let c = condition(&shown, &seen, &planned(&shown, &seen, 1)).map(|c| (c.status, c.reason));
        assert_eq!(c, Some((ConditionStatus::False, "Disabled")));
    }

    #[test]
    fn the_archive_is_named_after_the_incarnation_and_refused_without_one() {
        let db = archived();
        assert_eq!(
            server_name(&db, Major::V16).as_deref(),
            Some("orders-orders-uid-pg16")
        );
        // A major upgrade's new cluster archives beside the old one's.
        assert_eq!(
            server_name(&db, Major::V17).as_deref(),
            Some("orders-orders-uid-pg17")
        );
        assert!(validate(&db).is_ok());
        let mut without = db.clone();
        without.metadata.uid = None;
        let refused = validate(&without).expect_err("no uid, no archive folder");
        assert!(
            refused.to_string().starts_with("metadata.uid: missing"),
            "{refused}"
        );
        // Without archiving, the uid is not needed.
        assert!(validate(&fixtures::orders().typed()).is_ok());
    }

    #[test]
    fn without_the_field_nothing_archives() {
        let db = fixtures::orders().typed();
        assert!(args(&db).is_empty());
        let seen = Observed::default();
        assert!(scripts(&db, &seen, &planned(&db, &seen, 0)).is_none());
        let mut pod = PodSpec::default();
        apply(&db, Major::V16, &mut pod, "postgres");
        assert_eq!(pod, PodSpec::default());
    }

    #[test]
    fn the_server_hands_each_segment_to_the_sidecar_and_standbys_fetch_through_it() {
        let db = archived();
        assert_eq!(
            args(&db),
            [
                "-c",
                "archive_mode=on",
                "-c",
                "archive_command=sh /etc/opshooks/archive/archive-wal.sh %f",
                "-c",
                "archive_timeout=30s",
                "-c",
                "restore_command=sh /etc/opshooks/archive/restore-wal.sh %f %p"
            ]
        );
        let seen = Observed::default();
        let data = scripts(&db, &seen, &planned(&db, &seen, 0))
            .and_then(|cm| cm.data)
            .unwrap_or_default();
        assert_eq!(
            data.get(ARCHIVE_WAL_KEY).map(String::as_str),
            Some(ARCHIVE_WAL_SCRIPT)
        );
        assert_eq!(
            data.get(RESTORE_WAL_KEY).map(String::as_str),
            Some(RESTORE_WAL_SCRIPT)
        );
    }

    #[test]
    fn the_sidecar_reads_the_data_and_reaches_the_store() {
        let db = archived();
        let mut pod = PodSpec {
            containers: vec![Container {
                name: "postgres".to_string(),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        apply(&db, Major::V16, &mut pod, "postgres");
        let sidecar = &pod.containers[1];
        let value = |var: &str| {
            sidecar
                .env
                .iter()
                .flatten()
                .find(|e| e.name == var)
                .map(|e| {
                    e.value
                        .clone()
                        .unwrap_or_else(|| format!("{:?}", e.value_from))
                })
        };
        assert_eq!(
            value("ARCHIVE_DESTINATION").as_deref(),
            Some("s3://dumps/orders/archive")
        );
        assert_eq!(
            value("ARCHIVE_SERVER").as_deref(),
            Some("orders-orders-uid-pg16")
        );
        assert_eq!(value("PGDATA"), Some(pgdata(Major::V16)));
        assert!(value("AWS_SECRET_ACCESS_KEY").is_some_and(|v| v.contains("\"s3\"")));
        let data = sidecar
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == VOLUME);
        assert_eq!(
            data.and_then(|m| m.read_only),
            Some(true),
            "the sidecar never writes the data"
        );
        let server = &pod.containers[0];
        let spool = server
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == SPOOL_VOLUME);
        assert_eq!(spool.map(|m| m.mount_path.as_str()), Some(SPOOL));
    }
}
