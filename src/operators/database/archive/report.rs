//! The archive's progress in status (issue 35): what the store received,
//! which only the archiver sidecar of the primary knows (the hook never
//! reaches an instance or the store).
//!
//! - The sidecar (`archiver.sh`) writes what it saw to the ConfigMap
//!   `<name>-archive-report` with a JSON merge patch of its `data`: the
//!   newest file stored and when, when failures began and the newest one.
//!   A failure's start and end at once, a newer file every 10 s at most.
//!   The archiver that took a base backup (a ready standby's, else the
//!   primary's) reports it the same way: `base-backup.sh`'s line of the
//!   newest one stored, and of the newest failure until one succeeds.
//! - The hook desires that ConfigMap with no `data`, so that it exists and
//!   goes with the Database; neither side writes the other's fields (a
//!   3-way merge leaves fields it never applied, server-side apply those
//!   another manager owns).
//! - The hook reads it into `status.archive`, each value checked (a WAL
//!   file's name, a time, a pod of this Database, a reason cut to 300
//!   characters), and `Archiving` says `ArchiveFailing` while the serving
//!   primary's archiver reports failures. It decides nothing else: anyone
//!   who may write ConfigMaps in the namespace may write this one.
//! - The sidecar's identity: the instances' ServiceAccount (the lease's,
//!   also for a single instance that archives), a Role rule `patch` on
//!   this one ConfigMap, and a token projected into the sidecar alone.

use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec};
use k8s_openapi::api::rbac::v1::PolicyRule;

use super::super::names::{archive_report_name, lease_account_name, pod_ordinal};
use super::super::objects::{api_credentials_volume, core_rule, meta, mount, value_env};
use super::super::observed::Observed;
use super::super::spec::{ArchiveProgress, Database, StoredBaseBackup, namespace};
use super::enabled;
use crate::hook::conditions::normal_time;
use crate::operators::report::Report;

/// Where the sidecar reads its token and the cluster's CA.
const CREDENTIALS: &str = "/var/run/secrets/opshooks/archiver";
const CREDENTIALS_VOLUME: &str = "archiver-credentials";
/// The longest reason kept in status.
const REASON_CHARS: usize = 300;

/// The ConfigMap the sidecar writes to, without data: the hook's part of
/// it is that it exists.
pub(in super::super) fn config_map(db: &Database) -> Option<ConfigMap> {
    enabled(db)?;
    Some(ConfigMap {
        metadata: meta(db, archive_report_name(db)),
        ..ConfigMap::default()
    })
}

/// The sidecar's one permission: `patch` on that ConfigMap.
pub(in super::super) fn rule(db: &Database) -> Option<PolicyRule> {
    enabled(db)?;
    Some(core_rule(
        "configmaps",
        &["patch"],
        vec![archive_report_name(db)],
    ))
}

/// Lets `archiver` report: where to, and its token, which the pod mounts
/// into no other container; the pod runs as the instances' ServiceAccount.
pub(super) fn apply(db: &Database, pod: &mut PodSpec, archiver: &mut Container) {
    archiver.env.get_or_insert_with(Vec::new).extend([
        value_env("ARCHIVE_REPORT", archive_report_name(db)),
        value_env("NAMESPACE", namespace(db)),
        value_env("ARCHIVER_CREDENTIALS", CREDENTIALS),
    ]);
    archiver
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .push(mount(CREDENTIALS_VOLUME, CREDENTIALS, true));
    pod.volumes
        .get_or_insert_with(Vec::new)
        .push(api_credentials_volume(CREDENTIALS_VOLUME));
    pod.service_account_name
        .get_or_insert_with(|| lease_account_name(db));
    pod.automount_service_account_token = Some(false);
}

/// What the report says, each value kept only when it is what the sidecar
/// writes there; `None` without the archive or before any report.
pub(in super::super) fn progress(db: &Database, seen: &Observed) -> Option<ArchiveProgress> {
    enabled(db)?;
    let data = seen.archive_report.as_ref()?;
    let wal = |key: &str| data.get(key).filter(|v| is_wal_file(v)).cloned();
    let time = |key: &str| normal_time(data.get(key)?);
    let progress = ArchiveProgress {
        last_archived_wal: wal("lastArchivedWal"),
        last_archived_time: time("lastArchivedTime"),
        failing_since: time("failingSince"),
        last_failed_wal: wal("lastFailedWal"),
        last_failure_time: time("lastFailureTime"),
        last_failure: data.get("lastFailure").map(|why| reason(why)),
        reported_by: data.get("pod").filter(|pod| is_pod(db, pod)).cloned(),
        last_base_backup: data
            .get("lastBaseBackup")
            .and_then(|line| stored(db, line, data.get("baseBackupPod"))),
        base_backup_failure: data
            .get("baseBackupFailure")
            .filter(|line| !line.is_empty())
            .map(|line| match Report::parse(line) {
                Ok(Report::ArchiveStep { why, .. }) => reason(why),
                _ => reason(line),
            }),
    };
    (progress != ArchiveProgress::default()).then_some(progress)
}

/// While `pod`'s archiver reports failures: since when, and the newest.
/// A report of another pod (a primary before a failover) is history.
pub(super) fn failing(progress: Option<&ArchiveProgress>, pod: &str) -> Option<String> {
    let p = progress.filter(|p| p.reported_by.as_deref() == Some(pod))?;
    let since = p.failing_since.as_deref()?;
    Some(format!(
        "the archiver of {pod} has failed to store WAL since {since} (last {} at {}: {}); the primary keeps every segment not yet stored on its volume, which fills if the store stays down (docs/archiving.md)",
        p.last_failed_wal.as_deref().unwrap_or("a file"),
        p.last_failure_time.as_deref().unwrap_or(since),
        p.last_failure.as_deref().unwrap_or("no reason reported"),
    ))
}

/// A pod of this Database's.
fn is_pod(db: &Database, pod: &str) -> bool {
    pod_ordinal(db, pod).is_some()
}

/// `base-backup.sh`'s line of a backup stored, as status shows it: its
/// id and name as names, its end as a time, the pod one of this
/// Database's; nothing when the line is not such a line.
fn stored(db: &Database, line: &str, pod: Option<&String>) -> Option<StoredBaseBackup> {
    let Ok(Report::BaseBackupStored {
        id,
        from,
        end_time,
        seconds,
        name,
        ..
    }) = Report::parse(line)
    else {
        return None;
    };
    let is_name = |n: &&str| {
        (1..=64).contains(&n.len())
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-:+".contains(&b))
    };
    Some(StoredBaseBackup {
        id: Some(id).filter(is_name)?.to_string(),
        name: name.filter(is_name).map(str::to_string),
        from: from.to_string(),
        pod: pod.filter(|p| is_pod(db, p)).cloned(),
        end_time: normal_time(end_time),
        seconds,
    })
}

/// A name the archiver serves: a segment, a `.partial`, `.history` or
/// `.backup` file (its request loop's rule).
fn is_wal_file(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
        && !name.starts_with('.')
}

/// A reason as status shows it: one line, at most [`REASON_CHARS`].
fn reason(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(REASON_CHARS)
        .collect()
}

/// The data of a report, for tests.
#[cfg(test)]
pub(in super::super) fn data(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::archived;
    use super::*;
    use crate::fixtures;

    /// Status shows what the report holds, each value checked: a value the
    /// sidecar would not write (a name of another pod, a WAL name with a
    /// slash, a time that is no time, a reason of many lines) is left out
    /// or made one line, never shown as written.
    #[test]
    fn status_shows_the_report_checked() {
        let db = archived();
        let seen = |pairs: &[(&str, &str)]| Observed {
            archive_report: Some(data(pairs)),
            ..Observed::default()
        };
        assert_eq!(progress(&db, &Observed::default()), None);
        assert_eq!(progress(&db, &seen(&[])), None);
        let p = progress(
            &db,
            &seen(&[
                ("pod", "orders-0"),
                ("failingSince", ""),
                ("lastArchivedWal", "000000010000000000000003"),
                ("lastArchivedTime", "2026-01-01T00:00:10Z"),
            ]),
        )
        .unwrap();
        assert_eq!(p.reported_by.as_deref(), Some("orders-0"));
        assert_eq!(p.failing_since, None);
        assert_eq!(
            p.last_archived_wal.as_deref(),
            Some("000000010000000000000003")
        );
        assert_eq!(
            p.last_archived_time.as_deref(),
            Some("2026-01-01T00:00:10Z")
        );
        assert_eq!(failing(Some(&p), "orders-0"), None);

        let odd = progress(
            &db,
            &seen(&[
                ("pod", "billing-0"),
                ("lastArchivedWal", "../../etc/passwd"),
                ("lastArchivedTime", "yesterday"),
                ("lastFailure", "one\nline\u{1b}[31m"),
            ]),
        )
        .unwrap();
        assert_eq!(
            odd,
            ArchiveProgress {
                last_failure: Some("one line [31m".into()),
                ..ArchiveProgress::default()
            }
        );
        let long = "x".repeat(5000);
        let cut = progress(&db, &seen(&[("lastFailure", &long)])).unwrap();
        assert_eq!(cut.last_failure.unwrap().len(), REASON_CHARS);
    }

    /// The newest base backup as the archiver that took it reported it,
    /// read by the one parser of the scripts' lines: a line that is not
    /// one is no backup, and a failure shows its reason.
    #[test]
    fn status_shows_the_base_backup_a_sidecar_stored() {
        let db = archived();
        let with = |pairs: &[(&str, &str)]| {
            progress(
                &db,
                &Observed {
                    archive_report: Some(data(pairs)),
                    ..Observed::default()
                },
            )
        };
        let line = "opshooks base-backup: stored id=20260102T010203 from=standby begin=0/4000028 end=0/5000100 end_wal=000000010000000000000005 end_time=2026-01-02T01:02:04+00:00 seconds=3 name=scheduled-20260102T0100Z";
        let p = with(&[
            ("lastBaseBackup", line),
            ("baseBackupPod", "orders-1"),
            ("baseBackupFailure", ""),
        ])
        .unwrap();
        assert_eq!(
            p.last_base_backup,
            Some(StoredBaseBackup {
                id: "20260102T010203".into(),
                name: Some("scheduled-20260102T0100Z".into()),
                from: "standby".into(),
                pod: Some("orders-1".into()),
                end_time: Some("2026-01-02T01:02:04Z".into()),
                seconds: Some(3),
            })
        );
        assert_eq!(p.base_backup_failure, None);
        let p = with(&[
            (
                "lastBaseBackup",
                "opshooks base-backup: stored id=../x from=standby end=0/1 end_time=t",
            ),
            (
                "baseBackupFailure",
                "opshooks base-backup: failed cannot reach the store",
            ),
        ])
        .unwrap();
        assert_eq!(p.last_base_backup, None);
        assert_eq!(
            p.base_backup_failure.as_deref(),
            Some("cannot reach the store")
        );
    }

    /// Failing only while the serving primary's own archiver says so: the
    /// report of a primary before a failover is history, not the present.
    #[test]
    fn failing_is_the_serving_primarys_report() {
        let db = archived();
        let p = progress(
            &db,
            &Observed {
                archive_report: Some(data(&[
                    ("pod", "orders-0"),
                    ("failingSince", "2026-01-01T00:00:00Z"),
                    ("lastFailedWal", "000000010000000000000004"),
                    ("lastFailureTime", "2026-01-01T00:05:00Z"),
                    (
                        "lastFailure",
                        "barman-cloud-wal-archive exited with 4: EndpointConnectionError",
                    ),
                ])),
                ..Observed::default()
            },
        );
        let words = failing(p.as_ref(), "orders-0").unwrap();
        assert!(
            words.starts_with("the archiver of orders-0 has failed to store WAL since 2026-01-01T00:00:00Z (last 000000010000000000000004 at 2026-01-01T00:05:00Z: barman-cloud-wal-archive exited with 4"),
            "{words}"
        );
        assert_eq!(failing(p.as_ref(), "orders-1"), None);
    }

    /// The sidecar alone gets the token, and may patch the one ConfigMap,
    /// which the hook desires without data.
    #[test]
    fn only_the_sidecar_may_write_the_report() {
        let db = archived();
        let mut pod = PodSpec {
            containers: vec![Container {
                name: "postgres".into(),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        let mut archiver = Container::default();
        apply(&db, &mut pod, &mut archiver);
        assert_eq!(pod.service_account_name.as_deref(), Some("orders-lease"));
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.containers[0].volume_mounts, None);
        assert_eq!(archiver.volume_mounts.unwrap()[0].name, CREDENTIALS_VOLUME);
        let rule = rule(&db).unwrap();
        assert_eq!(rule.verbs, ["patch"]);
        assert_eq!(
            rule.resource_names.as_deref(),
            Some(&["orders-archive-report".to_string()][..])
        );
        let map = config_map(&db).unwrap();
        assert_eq!(map.data, None);
        assert_eq!(config_map(&fixtures::orders().typed()), None);
    }
}
