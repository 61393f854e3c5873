//! Physical base backups into the archive (issue 35): which ones the hook
//! asks for, and of which instance. A point-in-time recovery starts from a
//! base backup and replays the archived WAL from its end, so without one
//! the archive restores nothing.
//!
//! The hook never reaches an instance: it lists what it asks for in the
//! archive's ConfigMap (key `base-backup`, one `<name> <pod> <checkpoint>`
//! a line), and the archiver sidecar of the pod named runs
//! `base-backup.sh` beside the server, which reads the data directory from
//! the volume the two share. The name makes each backup happen once:
//! `base-backup.sh` takes none when the store already has a finished
//! backup of that name, so a ConfigMap that reaches a pod a minute late,
//! or a pod created again, repeats nothing.
//!
//! - **When**: the most recent time of `baseBackupSchedule` (cron, UTC) at
//!   or before now, named `scheduled-<time>`: the first one is taken as
//!   soon as the archive is on, then one a period. And on demand: the
//!   annotation `opshooks.io/base-backup: <token>` asks for
//!   `requested-<token>`; another token asks for another.
//! - **Of which instance**: the ready standby of the lowest ordinal, with
//!   an immediate restartpoint (a standby serves no writes); the primary,
//!   with a spread checkpoint, only when no standby is ready.
//! - **Not while** the Database is being restored, upgraded or deleted,
//!   or while the primary changes (a failover or a switchover under way):
//!   the standby asked could be the one being promoted.

use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;

use super::super::names::pod_name;
use super::super::observed::Observed;
use super::super::plan::Plan;
use super::super::spec::Database;
use super::enabled;
use crate::operators::validate;

/// Annotation on a Database asking for a base backup now: a token of
/// letters, digits, `.`, `_` and `-` (1 to 63), which names it.
pub const ANNOTATION: &str = "opshooks.io/base-backup";

/// A base backup asked of one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in super::super) struct Asked {
    /// Its name in the store.
    pub name: String,
    /// The instance whose sidecar takes it.
    pub instance: u32,
    /// Whether that instance is a ready standby (else the primary).
    pub from_standby: bool,
}

/// The base backups asked for now, and what the condition says of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in super::super) struct BaseBackups {
    pub asked: Vec<Asked>,
    /// Why none is asked for, or an annotation that is not followed.
    pub notes: Vec<String>,
}

impl BaseBackups {
    /// The ConfigMap's `base-backup` file, as `archiver.sh` reads it.
    pub(in super::super) fn requests(&self, db: &Database) -> String {
        self.asked
            .iter()
            .map(|a| {
                let checkpoint = if a.from_standby {
                    "immediate"
                } else {
                    "spread"
                };
                format!("{} {} {checkpoint}\n", a.name, pod_name(db, a.instance))
            })
            .collect()
    }

    /// The condition's sentence on base backups.
    pub(in super::super) fn message(&self, db: &Database) -> String {
        let asked = self.asked.iter().map(|a| {
            let of = if a.from_standby {
                "a ready standby"
            } else {
                "the primary: no standby is ready"
            };
            format!("{} of {} ({of})", a.name, pod_name(db, a.instance))
        });
        let asked: Vec<String> = asked.collect();
        let mut out = if asked.is_empty() {
            "no base backup is asked for".to_string()
        } else {
            format!(
                "base backups asked for: {}; each is taken once, and barman-cloud-backup-list says which the store holds",
                asked.join(", ")
            )
        };
        for note in &self.notes {
            out.push_str("; ");
            out.push_str(note);
        }
        out
    }
}

/// The base backups to ask for at `seen.now`.
pub(in super::super) fn decide(db: &Database, seen: &Observed, plan: &Plan) -> BaseBackups {
    let Some((archive, _)) = enabled(db) else {
        return BaseBackups::default();
    };
    let mut out = BaseBackups::default();
    let requested = requested(db, &mut out.notes);
    let serving = match plan.primary.serving {
        Some(serving)
            if !plan.primary.changing()
                && plan.restore.lets_serve()
                && !plan.deleting
                && !plan.upgrade.step.in_progress() =>
        {
            serving
        }
        _ => {
            out.notes.push(
                "none while the Database is restored, upgraded or deleted, or while the primary changes".to_string(),
            );
            return out;
        }
    };
    let standby = (0..u32::try_from(plan.replicas).unwrap_or(0))
        .filter(|&i| i != serving)
        .find(|&i| seen.is_instance_ready(db, i));
    let of = |name: String| Asked {
        name,
        instance: standby.unwrap_or(serving),
        from_standby: standby.is_some(),
    };
    out.asked
        .extend(scheduled(archive.base_backup_schedule(), seen.now).map(of));
    out.asked.extend(requested.map(of));
    out
}

/// `scheduled-<time>`, the most recent time of `schedule` at or before
/// `now`; `None` for a schedule that does not parse (refused by
/// validation) or never came.
fn scheduled(schedule: &str, now: Timestamp) -> Option<String> {
    let at = validate::latest_run(&validate::parsed_cron(schedule)?, now)?;
    Some(format!(
        "scheduled-{}",
        at.to_zoned(TimeZone::UTC).strftime("%Y%m%dT%H%MZ")
    ))
}

/// `requested-<token>`, from the annotation; a token that is not a name
/// is noted and not followed.
fn requested(db: &Database, notes: &mut Vec<String>) -> Option<String> {
    let token = db.metadata.annotations.as_ref()?.get(ANNOTATION)?.trim();
    let valid = (1..=63).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_".contains(&b));
    if valid {
        Some(format!("requested-{token}"))
    } else {
        notes.push(format!(
            "the annotation {ANNOTATION}={token:?} is not followed: write 1 to 63 letters, digits, '.', '_' or '-'"
        ));
        None
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::super::observed::Role;
    use super::super::super::plan::{plan, tests::running};
    use super::*;
    use crate::fixtures::{self, instance};

    const NOW: &str = "2026-12-06T20:04:00Z";

    /// A large Database archiving, its primary orders-0, these instances ready.
    fn asked(ready: [bool; 3], annotation: Option<&str>) -> BaseBackups {
        asked_at(ready, annotation, 0)
    }

    /// `asked`, the role ConfigMap at `epoch` (above 0 with no promote Job
    /// recorded: no instance is known to serve).
    fn asked_at(ready: [bool; 3], annotation: Option<&str>, epoch: u64) -> BaseBackups {
        let mut db = fixtures::orders()
            .uid("orders-uid")
            .spec("size", "large")
            .spec(
                "backup",
                json!({"destination": {"s3Bucket": "b"}, "archive": {"baseBackupSchedule": "0 */6 * * *"}}),
            );
        if let Some(token) = annotation {
            db = db.annotation(ANNOTATION, token);
        }
        let db: Database = db.typed();
        let mut seen = running("16");
        seen.pods = (0..3)
            .map(|i| instance(i).ready_if(ready[i as usize]).typed())
            .collect();
        seen.role = Some(Role {
            primary: "orders-0".to_string(),
            epoch,
            initialized: true,
            ..Role::default()
        });
        let seen = seen.at(NOW.parse().expect("a time"));
        let plan = plan(&db, &seen).expect("a plan");
        decide(&db, &seen, &plan)
    }

    fn lines(b: &BaseBackups) -> Vec<(String, u32, bool)> {
        b.asked
            .iter()
            .map(|a| (a.name.clone(), a.instance, a.from_standby))
            .collect()
    }

    /// The rule: a base backup never runs on a primary when a
    /// standby is ready.
    #[test]
    fn a_ready_standby_takes_the_base_backup_and_the_primary_only_without_one() {
        let from_standby = asked([true, true, true], None);
        assert_eq!(
            lines(&from_standby),
            [("scheduled-20261206T1800Z".to_string(), 1, true)]
        );
        let db: Database = fixtures::orders().typed();
        assert_eq!(
            from_standby.requests(&db),
            "scheduled-20261206T1800Z orders-1 immediate\n"
        );
        // orders-1 not ready: the next ready standby.
        assert_eq!(lines(&asked([true, false, true], None))[0].1, 2);
        // No standby ready: the primary, with a spread checkpoint.
        let from_primary = asked([true, false, false], None);
        assert_eq!(
            lines(&from_primary),
            [("scheduled-20261206T1800Z".to_string(), 0, false)]
        );
        assert_eq!(
            from_primary.requests(&db),
            "scheduled-20261206T1800Z orders-0 spread\n"
        );
        assert!(from_primary.message(&db).contains("no standby is ready"));
        // The primary changing (here no instance is known to serve): none,
        // and it says why.
        let unsettled = asked_at([true, true, true], Some("now"), 1);
        assert!(unsettled.asked.is_empty());
        assert_eq!(unsettled.requests(&db), "");
        assert!(
            unsettled.message(&db).contains("none while"),
            "{}",
            unsettled.message(&db)
        );
    }

    #[test]
    fn the_annotation_asks_for_one_more_and_a_bad_token_is_said_and_ignored() {
        let both = asked([true, true, true], Some("before-migration.1"));
        assert_eq!(
            lines(&both),
            [
                ("scheduled-20261206T1800Z".to_string(), 1, true),
                ("requested-before-migration.1".to_string(), 1, true)
            ]
        );
        let bad = asked([true, true, true], Some("$(reboot)"));
        assert_eq!(bad.asked.len(), 1, "only the scheduled one");
        let db: Database = fixtures::orders().typed();
        assert!(
            bad.message(&db).contains("is not followed"),
            "{}",
            bad.message(&db)
        );
    }

    #[test]
    fn the_schedule_names_its_most_recent_time() {
        let at = |s: &str| s.parse::<Timestamp>().expect("a time");
        assert_eq!(
            scheduled("0 1 * * *", at("2026-12-06T20:04:00Z")).as_deref(),
            Some("scheduled-20261206T0100Z")
        );
        // At the scheduled minute itself, that one.
        assert_eq!(
            scheduled("0 1 * * *", at("2026-12-07T01:00:30Z")).as_deref(),
            Some("scheduled-20261207T0100Z")
        );
        assert_eq!(
            scheduled("0 1 * * *", at("2026-12-07T00:59:59Z")).as_deref(),
            Some("scheduled-20261206T0100Z")
        );
        assert_eq!(
            scheduled("not a schedule", at("2026-12-07T00:00:00Z")),
            None
        );
        // Every macro validation accepts names a time.
        for (macro_, expected) in [
            ("@midnight", "scheduled-20261207T0000Z"),
            ("@daily", "scheduled-20261207T0000Z"),
            ("@hourly", "scheduled-20261207T0500Z"),
            ("@weekly", "scheduled-20261206T0000Z"),
            ("@monthly", "scheduled-20261201T0000Z"),
            ("@yearly", "scheduled-20260101T0000Z"),
            ("@annually", "scheduled-20260101T0000Z"),
        ] {
            assert!(validate::cron("f", macro_).is_ok(), "{macro_}");
            let named = scheduled(macro_, at("2026-12-07T05:30:00Z"));
            assert_eq!(named.as_deref(), Some(expected), "{macro_}");
        }
    }
}
