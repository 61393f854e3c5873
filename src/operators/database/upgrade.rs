//! Upgrades between majors, whole: where an upgrade stands (decided from
//! its two Jobs), the Jobs (the pre-upgrade dump to the store, then the
//! restore of the stopped old version into the new one) and the
//! `Upgrading` condition's words. `plan` takes the decision as a value.
//!
//! The steps: `<name>-pre-upgrade-<to>` dumps the database to the backup
//! destination as a safety copy; every instance stops; `<name>-upgrade-<to>`
//! dumps the stopped old version from the primary's own volume and restores
//! it into the new version's cluster beside it; only then does the
//! StatefulSet move to the new image. A failed step leaves the old version
//! serving, its data untouched.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PodSpec;

use super::dumps::backup_job;
use super::images::Images;
use super::names::{DATA_DIR, claim_name, jobs, pgdata, superuser_secret_name};
use super::objects::{
    app_env, claim_volume, mount, script_container, script_job, secret_env, value_env, work_volume,
};
use super::observed::Observed;
use super::primary;
use super::spec::{Database, Major, database_name};
use super::tls;
use crate::operators::backup_job::RunStatus;

/// The upgrade Job's restore into the new version.
pub(super) const UPGRADE_SCRIPT: &str = include_str!("upgrade.sh");
/// The upgrade Job's init container: dumps the stopped old version.
pub(super) const DUMP_STOPPED_SCRIPT: &str = include_str!("dump-stopped.sh");

/// Where an upgrade stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upgrade {
    /// Running the version asked for.
    None,
    /// Asked for a newer version, but there is no destination for the
    /// pre-upgrade backup.
    NoDestination {
        /// The major being upgraded to.
        to: Major,
    },
    /// Taking the pre-upgrade backup.
    BackingUp {
        /// The major being upgraded to.
        to: Major,
    },
    /// The pre-upgrade backup failed; the old version serves.
    BackupFailed {
        /// The major being upgraded to.
        to: Major,
    },
    /// A change of primary is under way: the designated instance may not
    /// be promoted yet, and its volume is not the data to upgrade; the
    /// pre-upgrade backup and the stop wait until the change is done.
    WaitingForPrimary {
        /// The major being upgraded to.
        to: Major,
    },
    /// Stopping the old version so the restore can use its volume.
    Stopping {
        /// The major being upgraded to.
        to: Major,
    },
    /// Restoring into the new version.
    Restoring {
        /// The major being upgraded to.
        to: Major,
    },
    /// The restore failed; the old version serves again.
    RestoreFailed {
        /// The major being upgraded to.
        to: Major,
    },
    /// The restore succeeded; the StatefulSet moves to the new version.
    Starting {
        /// The major being upgraded to.
        to: Major,
    },
}

impl Upgrade {
    /// True while an upgrade moves forward by itself (not stopped by a
    /// failure or a missing destination).
    pub fn in_progress(self) -> bool {
        matches!(
            self,
            Upgrade::BackingUp { .. }
                | Upgrade::WaitingForPrimary { .. }
                | Upgrade::Stopping { .. }
                | Upgrade::Restoring { .. }
                | Upgrade::Starting { .. }
        )
    }

    /// True from the restore on: the restore Job exists.
    pub fn is_restoring(self) -> bool {
        matches!(
            self,
            Upgrade::Restoring { .. } | Upgrade::RestoreFailed { .. } | Upgrade::Starting { .. }
        )
    }
}

/// An upgrade's decision, as the [`Plan`](super::Plan) holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Where the upgrade stands.
    pub step: Upgrade,
    /// The major the upgrade Jobs are for: the spec's, or that of a restore
    /// still running when the spec moved on.
    pub target: Major,
    /// Whether the pre-upgrade backup Job should exist.
    pub pre_upgrade_job: bool,
    /// Whether the upgrade's restore Job should exist.
    pub upgrade_job: bool,
}

impl Decision {
    /// No upgrade under way, and no upgrade Job exists.
    pub(super) fn idle(db: &Database) -> Self {
        Decision {
            step: Upgrade::None,
            target: db.spec.version,
            pre_upgrade_job: false,
            upgrade_job: false,
        }
    }

    /// The major the StatefulSet should run, of `running` and the new one:
    /// the running one until the restore into the new one succeeded.
    pub(super) fn version(&self, running: Major) -> Major {
        match self.step {
            Upgrade::Starting { to } => to,
            _ => running,
        }
    }

    /// Whether every instance must be stopped: the restore needs the
    /// primary's volume.
    pub(super) fn stops_instances(&self) -> bool {
        matches!(
            self.step,
            Upgrade::Stopping { .. } | Upgrade::Restoring { .. }
        )
    }
}

/// Where an upgrade from `running` to the spec's version stands, from the
/// Jobs observed. `restore_lets_serve`: the bootstrap's restore is done or
/// was never asked for; an upgrade waits for it.
pub(super) fn decide(
    db: &Database,
    seen: &Observed,
    running: Major,
    restore_lets_serve: bool,
) -> Decision {
    let has = |job: &str| seen.jobs.contains_key(job);
    let idle = Decision::idle(db);
    if let Some(to) = in_flight(db, seen, running) {
        return Decision {
            step: Upgrade::Restoring { to },
            target: to,
            pre_upgrade_job: db.spec.backup.is_some() && has(&jobs::pre_upgrade(db, to)),
            upgrade_job: true,
        };
    }
    let to = db.spec.version;
    if to == running || !restore_lets_serve {
        // Upgraded (or never upgraded): the Jobs have done their work and
        // go; the pre-upgrade dump stays in S3, the old data on the volume.
        // An upgrade waits for the bootstrap's restore.
        return idle;
    }
    if db.spec.backup.is_none() {
        return Decision {
            step: Upgrade::NoDestination { to },
            pre_upgrade_job: has(&jobs::pre_upgrade(db, to)),
            upgrade_job: has(&jobs::upgrade(db, to)),
            ..idle
        };
    }
    let step = step(db, seen, to);
    Decision {
        step,
        // Kept once observed, so a failed one stays for its logs and is
        // never retried behind the user's back.
        pre_upgrade_job: step != Upgrade::WaitingForPrimary { to }
            || has(&jobs::pre_upgrade(db, to)),
        upgrade_job: step.is_restoring() || has(&jobs::upgrade(db, to)),
        ..idle
    }
}

/// The major of an upgrade's restore still running that the spec no longer
/// asks for (a newer version asked for, the destination removed). It holds
/// the primary's volume whatever the spec says now: it keeps its Job and
/// every instance stays stopped until it ends. Dropping its Job would start
/// instances on a volume the Job's pod may still be using.
fn in_flight(db: &Database, seen: &Observed, running: Major) -> Option<Major> {
    let to = Major::ALL.into_iter().find(|m| {
        *m > running
            && matches!(
                seen.job(&jobs::upgrade(db, *m)),
                Some(RunStatus::Running | RunStatus::None)
            )
    })?;
    (to != db.spec.version || db.spec.backup.is_none()).then_some(to)
}

/// The step an upgrade to `to` has reached, from its two Jobs.
fn step(db: &Database, seen: &Observed, to: Major) -> Upgrade {
    // During a change of primary the designated instance may be a standby
    // not yet promoted: neither its answers (the backup) nor its volume
    // (the upgrade Job mounts the designated claim) are the data to
    // upgrade. A step whose Job exists goes on: a Job runs once.
    let changing = primary::decide(db, seen, false, None).changing();
    match seen.job(&jobs::pre_upgrade(db, to)) {
        None if changing => Upgrade::WaitingForPrimary { to },
        None | Some(RunStatus::Running | RunStatus::None) => Upgrade::BackingUp { to },
        Some(RunStatus::Failed) => Upgrade::BackupFailed { to },
        Some(RunStatus::Succeeded) => match seen.job(&jobs::upgrade(db, to)) {
            None if changing => Upgrade::WaitingForPrimary { to },
            // The restore needs the primary's volume: stop every instance
            // first, as the StatefulSet itself reports, not only as far as
            // its pods are seen.
            None if seen.live_instances(db) > 0 || !seen.is_stopped() => Upgrade::Stopping { to },
            None | Some(RunStatus::Running | RunStatus::None) => Upgrade::Restoring { to },
            Some(RunStatus::Failed) => Upgrade::RestoreFailed { to },
            Some(RunStatus::Succeeded) => Upgrade::Starting { to },
        },
    }
}

/// What the upgrade's Jobs are built from, as the plan decided.
pub(super) struct Build<'a> {
    /// The major the data is in.
    pub from: Major,
    /// The major the Jobs are for.
    pub to: Major,
    /// Whether the pre-upgrade backup Job exists.
    pub pre_upgrade_job: bool,
    /// Whether the restore Job exists.
    pub upgrade_job: bool,
    /// The image of each major.
    pub images: &'a Images,
    /// How the backup connects.
    pub tls: &'a tls::Client,
    /// The designated primary, whose volume holds the data.
    pub designated: u32,
}

/// The Jobs of an upgrade: the pre-upgrade backup of the running version
/// and the restore into the new one.
pub(super) fn jobs(db: &Database, build: &Build<'_>) -> Vec<Job> {
    let mut out = Vec::new();
    if build.pre_upgrade_job {
        out.extend(backup_job(
            db,
            jobs::pre_upgrade(db, build.to),
            build.images.image(build.from),
            build.tls,
        ));
    }
    if build.upgrade_job {
        out.push(upgrade_job(db, build));
    }
    out
}

/// The restore into `to`, while every instance is stopped: dump the old
/// version from its own volume (nothing can write any more, so the dump is
/// complete), build the new version's cluster beside the old one, restore.
/// The S3 pre-upgrade backup taken before stopping stays as a safety copy.
fn upgrade_job(db: &Database, build: &Build<'_>) -> Job {
    let (from, to) = (build.from, build.to);
    // Whether a restore may start (only after the S3 safety copy) is the
    // plan's decision; one that started is always built, to be kept.
    let dump = "/work/dump.pgdump";
    let dump_env = vec![
        value_env("OLD_PGDATA", pgdata(from)),
        value_env("DUMP", dump),
        value_env("PGDATABASE", database_name(db)),
    ];
    let mut env = vec![
        value_env("NEW_PGDATA", pgdata(to)),
        value_env("OLD_PGDATA", pgdata(from)),
        value_env("DUMP", dump),
        secret_env("POSTGRES_PASSWORD", superuser_secret_name(db), "password"),
        secret_env(
            "REPLICATION_PASSWORD",
            superuser_secret_name(db),
            "replication-password",
        ),
    ];
    env.extend(app_env(db));
    let mounts = vec![
        mount("work", "/work", false),
        mount("data", DATA_DIR, false),
    ];
    let pod = PodSpec {
        init_containers: Some(vec![script_container(
            ("dump", build.images.image(from)),
            DUMP_STOPPED_SCRIPT,
            dump_env,
            Some(mounts.clone()),
        )]),
        containers: vec![script_container(
            ("upgrade", build.images.image(to)),
            UPGRADE_SCRIPT,
            env,
            Some(mounts),
        )],
        volumes: Some(vec![
            work_volume(),
            claim_volume("data", claim_name(db, build.designated)),
        ]),
        ..PodSpec::default()
    };
    script_job(db, jobs::upgrade(db, to), pod, 1)
}

/// The `Upgrading` condition's status, reason and message for `upgrade`,
/// with `version` the major the StatefulSet runs; the status adds a
/// rollout's words.
pub(super) fn words(
    db: &Database,
    upgrade: Upgrade,
    version: Major,
) -> (bool, &'static str, String) {
    let (reason, message) = match upgrade {
        Upgrade::None => return settled(version),
        Upgrade::NoDestination { to } => (
            "NoBackupDestination",
            format!(
                "upgrading to {} needs a pre-upgrade backup: set spec.backup.destination; {} keeps running",
                to.as_str(),
                version.as_str()
            ),
        ),
        Upgrade::BackingUp { to } => (
            "BackingUp",
            format!(
                "job {} takes the pre-upgrade backup",
                jobs::pre_upgrade(db, to)
            ),
        ),
        Upgrade::BackupFailed { to } => (
            "PreUpgradeBackupFailed",
            format!(
                "job {} failed; {} keeps running; delete the job to retry",
                jobs::pre_upgrade(db, to),
                version.as_str()
            ),
        ),
        Upgrade::WaitingForPrimary { to } => (
            "WaitingForPrimary",
            format!(
                "the upgrade to {} waits until the change of primary under way is done: until then the designated instance may not hold the newest data",
                to.as_str()
            ),
        ),
        Upgrade::Stopping { to } => (
            "Stopping",
            format!(
                "stopping {} so job {} can restore into {}",
                version.as_str(),
                jobs::upgrade(db, to),
                to.as_str()
            ),
        ),
        Upgrade::Restoring { to } => (
            "Restoring",
            format!(
                "job {} restores the dump of the stopped old version into {}",
                jobs::upgrade(db, to),
                to.as_str()
            ),
        ),
        Upgrade::Starting { to } => (
            "Starting",
            format!("the restore into {} succeeded; starting it", to.as_str()),
        ),
        Upgrade::RestoreFailed { to } => (
            "UpgradeFailed",
            format!(
                "job {} failed; {} serves again with its data untouched; delete the job to retry",
                jobs::upgrade(db, to),
                version.as_str()
            ),
        ),
    };
    (upgrade.in_progress(), reason, message)
}

/// The words of a Database running the version asked for: up to date, or
/// past its end of life.
fn settled(version: Major) -> (bool, &'static str, String) {
    match version.end_of_life() {
        None => (
            false,
            "UpToDate",
            format!("running PostgreSQL {}", version.as_str()),
        ),
        Some(date) => (
            false,
            "EndOfLife",
            format!(
                "running PostgreSQL {}, which reached its end of life on {date} and gets no more fixes: set spec.version to {} to upgrade",
                version.as_str(),
                Major::NEWEST.as_str()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::children;
    use super::super::plan::plan;
    use super::super::plan::tests::{db, instance, job, running, stopped};
    use super::*;
    use serde_json::json;

    /// Review finding: a newer version (or no destination) asked for while
    /// the restore into 17 runs dropped its Job and started the instances
    /// again, on the volume the restore may still be using.
    #[test]
    fn regression_a_running_restore_holds_whatever_the_spec_says() {
        // A restore from 15 into 16 is running.
        let mut seen = stopped("15");
        for (name, state) in [
            ("orders-pre-upgrade-16", "Complete"),
            ("orders-upgrade-16", "Running"),
        ] {
            seen.jobs.insert(name.into(), job(state));
        }
        let mut no_destination = db("16", "Delete");
        no_destination.spec.backup = None;
        for (reason, d) in [
            ("17 asked for meanwhile", db("17", "Delete")),
            ("the destination removed", no_destination),
        ] {
            let plan = plan(&d, &seen).unwrap();
            assert_eq!(
                plan.upgrade.step,
                Upgrade::Restoring { to: Major::V16 },
                "{reason}"
            );
            assert_eq!((plan.replicas, plan.version), (0, Major::V15), "{reason}");
            let built = children::upgrade_jobs(&d, &plan);
            assert!(
                built
                    .iter()
                    .any(|j| j.metadata.name.as_deref() == Some("orders-upgrade-16")),
                "{reason}: the running restore Job is kept"
            );
        }
        // Stopping waits for the StatefulSet itself to report zero replicas.
        let mut stopping = running("16");
        stopping
            .jobs
            .insert("orders-pre-upgrade-17".into(), job("Complete"));
        let plan = plan(&db("17", "Delete"), &stopping).unwrap();
        assert_eq!(plan.upgrade.step, Upgrade::Stopping { to: Major::V17 });
    }

    #[test]
    fn upgrade_steps() {
        let d = db("17", "Delete");
        struct Case {
            reason: &'static str,
            jobs: Vec<(&'static str, &'static str)>,
            pods: u32,
            want: Upgrade,
            want_version: Major,
            want_replicas: i32,
        }
        let to = Major::V17;
        let cases = [
            Case {
                reason: "starts with the backup",
                jobs: vec![],
                pods: 2,
                want: Upgrade::BackingUp { to },
                want_version: Major::V16,
                want_replicas: 2,
            },
            Case {
                reason: "a failed backup keeps 16 serving",
                jobs: vec![("orders-pre-upgrade-17", "Failed")],
                pods: 2,
                want: Upgrade::BackupFailed { to },
                want_version: Major::V16,
                want_replicas: 2,
            },
            Case {
                reason: "stops before restoring",
                jobs: vec![("orders-pre-upgrade-17", "Complete")],
                pods: 2,
                want: Upgrade::Stopping { to },
                want_version: Major::V16,
                want_replicas: 0,
            },
            Case {
                reason: "restores once stopped",
                jobs: vec![("orders-pre-upgrade-17", "Complete")],
                pods: 0,
                want: Upgrade::Restoring { to },
                want_version: Major::V16,
                want_replicas: 0,
            },
            Case {
                reason: "a failed restore brings 16 back",
                jobs: vec![
                    ("orders-pre-upgrade-17", "Complete"),
                    ("orders-upgrade-17", "Failed"),
                ],
                pods: 0,
                want: Upgrade::RestoreFailed { to },
                want_version: Major::V16,
                want_replicas: 2,
            },
            Case {
                reason: "moves to 17 only after the restore",
                jobs: vec![
                    ("orders-pre-upgrade-17", "Complete"),
                    ("orders-upgrade-17", "Complete"),
                ],
                pods: 0,
                want: Upgrade::Starting { to },
                want_version: Major::V17,
                want_replicas: 2,
            },
        ];
        for case in cases {
            // No pod left means the StatefulSet was scaled to zero and says so.
            let mut seen = if case.pods == 0 {
                stopped("16")
            } else {
                running("16")
            };
            seen.jobs = case
                .jobs
                .iter()
                .map(|(n, s)| (n.to_string(), job(s)))
                .collect();
            seen.pods = (0..case.pods).map(|i| instance(i).typed()).collect();
            let plan = plan(&d, &seen).unwrap();
            assert_eq!(plan.upgrade.step, case.want, "{}", case.reason);
            assert_eq!(plan.version, case.want_version, "{}", case.reason);
            assert_eq!(plan.replicas, case.want_replicas, "{}", case.reason);
        }
    }

    /// Issue 32 item 7: a change of primary under way (orders-1 designated
    /// at epoch 1, not yet promoted) holds the upgrade before its backup
    /// and before its stop: the upgrade Job would mount the designated,
    /// un-promoted standby's volume. Once a step's Job exists it goes on.
    #[test]
    fn an_upgrade_waits_for_a_change_of_primary() {
        let mut d = db("17", "Delete");
        d.status = Some(
            serde_json::from_value(json!({"currentPrimary": "orders-0",
                "targetPrimary": "orders-1", "primaryEpoch": 1}))
            .unwrap(),
        );
        let to = Major::V17;
        let mut seen = running("16");
        seen.pods = (0..2).map(|i| instance(i).ready().typed()).collect();
        let waiting = plan(&d, &seen).unwrap();
        assert_eq!(waiting.upgrade.step, Upgrade::WaitingForPrimary { to });
        assert!(
            !waiting.upgrade.pre_upgrade_job,
            "no backup of the candidate"
        );
        seen.jobs
            .insert("orders-pre-upgrade-17".into(), job("Complete"));
        let backed_up = plan(&d, &seen).unwrap();
        assert_eq!(backed_up.upgrade.step, Upgrade::WaitingForPrimary { to });
        assert_eq!(backed_up.replicas, 2, "nothing stops");
        assert!(!backed_up.upgrade.upgrade_job);
        // The promote Job succeeded: the upgrade goes on.
        seen.jobs
            .insert("orders-promote-1-1".into(), job("Complete"));
        assert_eq!(
            plan(&d, &seen).unwrap().upgrade.step,
            Upgrade::Stopping { to }
        );
    }
}
