//! Restoring a new Database from a dump (`spec.bootstrap`), whole: where
//! the restore stands (decided from its Job and what the Database already
//! holds: nothing is ever restored over data), the restore Job, and the
//! `Restored` condition with `status.restoredFrom`. `plan` takes the
//! decision as a value.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaim, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{
    credentials_secret_name, destination_url, instance_host, jobs, superuser_secret_name,
};
use super::objects::{
    INIT_APP_SCRIPT, app_env, mount, script_container, script_job, secret_env, value_env,
    work_volume,
};
use super::observed::Observed;
use super::spec::{
    Bootstrap, Database, PORT, RestoredFrom, before_stamp, bootstrap_destination, database_name,
};
use super::tls;
use crate::hook::conditions::{ConditionStatus, Observation, format_time, normal_time};
use crate::operator::Context;
use crate::operators::backup_job::{self, Choice, RunStatus};
use crate::operators::report::{InstanceSays, Report, Verdict};
use crate::operators::resources;

/// The bootstrap's restore Job: restores the chosen dump.
const RESTORE_SCRIPT: &str = include_str!("restore.sh");

/// Where the restore of `spec.bootstrap` stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restore {
    /// No bootstrap asked for.
    None,
    /// Asked for, but the Database holds data of its own: nothing is
    /// ever restored over it.
    NotOver(Holds),
    /// The restore Job runs (or is about to); nobody can write yet.
    Running,
    /// The restore Job failed; the Database does not serve.
    Failed,
    /// Restored, now or earlier (recorded in the status for ever).
    Done,
}

/// What a Database asked to restore already holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// It was initialized: its own data.
    Initialized,
    /// It was created over the retained volumes of an earlier Database of
    /// its name: it serves their data.
    RetainedVolumes,
}

impl Restore {
    /// True when the Database may serve: nothing to restore, or restored.
    pub fn lets_serve(self) -> bool {
        !matches!(self, Restore::Running | Restore::Failed)
    }

    /// The `Restored` condition's reason for this step. A later call reads
    /// it back ([`Restore::from_reason`]): it is how a restore whose failed
    /// Job was deleted is told from a Database that never restored.
    pub fn reason(self) -> &'static str {
        match self {
            Restore::None => "NotRequested",
            Restore::NotOver(Holds::Initialized) => "AlreadyInitialized",
            Restore::NotOver(Holds::RetainedVolumes) => "RetainedVolumes",
            Restore::Running => "Restoring",
            Restore::Failed => "RestoreFailed",
            Restore::Done => "Restored",
        }
    }

    /// The step a recorded reason names, when the Job that decided it is
    /// gone: a restore under way stays one (its Job is made again), a
    /// restore done stays done, and what the Database was found holding
    /// stays its reason.
    fn from_reason(reason: &str) -> Option<Restore> {
        match reason {
            "Restoring" | "RestoreFailed" => Some(Restore::Running),
            "Restored" => Some(Restore::Done),
            "AlreadyInitialized" => Some(Restore::NotOver(Holds::Initialized)),
            "RetainedVolumes" => Some(Restore::NotOver(Holds::RetainedVolumes)),
            _ => None,
        }
    }
}

/// Where the restore of `spec.bootstrap` stands. It runs only for a
/// Database that never held data: none was recorded restored or
/// initialized, and no volume of its name is older than it (retained
/// volumes of an earlier Database are served, never restored over). Its own
/// StatefulSet and claims say nothing: Metacontroller may call again, after
/// creating them, before the first answer's status is written, and taking
/// them for data would serve an empty cluster that is never restored.
/// Once started it goes on until it succeeded: a failed Job deleted by the
/// user is made again. (`restore.sh` refuses a database that holds tables,
/// whatever is decided here.)
///
/// A recovery from an archive (`spec.bootstrap.archive`) has no Job: the
/// designated primary's pod fetches and replays before its server starts,
/// so it is done once that primary is ready (or the init Job, which waits
/// for it, exists).
pub(super) fn decide(db: &Database, seen: &Observed, primary_ready: bool) -> Restore {
    let Some(bootstrap) = &db.spec.bootstrap else {
        return Restore::None;
    };
    let status = db.status.as_ref();
    if status.is_some_and(|s| s.restored_from.is_some()) {
        return Restore::Done;
    }
    if bootstrap.archive.is_some() {
        return decide_recovery(db, seen, primary_ready);
    }
    match seen.job(&jobs::restore(db)) {
        Some(RunStatus::Succeeded) => return Restore::Done,
        Some(RunStatus::Failed) => return Restore::Failed,
        Some(RunStatus::Running | RunStatus::None) => return Restore::Running,
        None => {}
    }
    let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let recorded = conditions
        .iter()
        .find(|c| c.type_ == "Restored")
        .and_then(|c| Restore::from_reason(c.reason.as_deref().unwrap_or_default()));
    // What the Database was found holding stays its reason.
    if let Some(holds @ Restore::NotOver(_)) = recorded {
        return holds;
    }
    if seen.jobs.contains_key(&jobs::init(db)) {
        return Restore::NotOver(Holds::Initialized);
    }
    // Volumes older than the Database come first: the role this Database
    // wrote counts them as initialized, and a second call made before the
    // first answer's status was stored would otherwise give the general
    // reason instead of the specific one.
    let retained = seen.claims(db).any(|(_, c)| is_older(c, db));
    match recorded {
        None if retained => Restore::NotOver(Holds::RetainedVolumes),
        _ if seen.was_initialized(db) => Restore::NotOver(Holds::Initialized),
        Some(step) => step,
        None => Restore::Running,
    }
}

/// Where a recovery from an archive stands: what was recorded, never over
/// retained volumes or an initialized Database, done once the recovered
/// primary is ready.
fn decide_recovery(db: &Database, seen: &Observed, primary_ready: bool) -> Restore {
    let recorded = db
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Restored"))
        .and_then(|c| Restore::from_reason(c.reason.as_deref().unwrap_or_default()));
    if let Some(step @ (Restore::NotOver(_) | Restore::Done)) = recorded {
        return step;
    }
    // Whenever seen, even after a first answer recorded the recovery under
    // way (volumes older than the Database may be listed late): a primary
    // on them serves their data, which nothing recovered.
    if seen.claims(db).any(|(_, c)| is_older(c, db)) {
        return Restore::NotOver(Holds::RetainedVolumes);
    }
    // Before the initialized check: the init Job follows the recovery, and
    // may be seen before the status that recorded it done.
    if primary_ready || seen.jobs.contains_key(&jobs::init(db)) {
        return Restore::Done;
    }
    if seen.was_initialized(db) {
        return Restore::NotOver(Holds::Initialized);
    }
    Restore::Running
}

/// What the recovering instances last said went wrong (`pitr-fetch.sh` in
/// the init container, `start.sh` with `pitr-replay.sh`), if anything.
/// A fetch that was skipped or done is no trouble; a line that does not
/// read is shown as it is.
fn recovery_trouble(db: &Database, seen: &Observed) -> Option<String> {
    seen.instances(db).find_map(|(_, pod)| {
        let fetch = pod.container_message("pitr-fetch").filter(|m| {
            !matches!(
                Report::parse(m),
                Ok(Report::Fetched { .. }
                    | Report::ArchiveStep {
                        verdict: Verdict::Skipped,
                        ..
                    })
            )
        });
        let replay = pod.container_message("postgres").filter(|m| {
            matches!(
                Report::parse(m),
                Ok(Report::Instance {
                    about: InstanceSays::Recovery,
                    ..
                })
            )
        });
        fetch.or(replay).map(|m| m.trim().to_string())
    })
}

/// True for a volume made before the Database (by an earlier one of its
/// name), or of unknown age: never one its own StatefulSet made, which is
/// at least as young as the Database (creation times count seconds, so
/// "older" is strictly earlier).
pub(super) fn is_older(claim: &PersistentVolumeClaim, db: &Database) -> bool {
    let created = |meta: &ObjectMeta| meta.creation_timestamp.as_ref().map(|t| t.0);
    match (created(&claim.metadata), created(&db.metadata)) {
        (Some(claim), Some(database)) => claim < database,
        _ => true,
    }
}

/// The restore of `spec.bootstrap`'s dump into the new primary, before
/// anyone can write: `select` chooses the dump and downloads it, `init`
/// creates the application user and database (as the init Job does), and
/// `restore` restores the dump into it in one transaction, everything owned
/// by the application user. It reaches the designated primary through the
/// headless Service, since the read-write Service does not exist yet.
pub(super) fn job(
    db: &Database,
    designated: u32,
    image: String,
    client: &tls::Client,
) -> Option<Job> {
    let bootstrap = db.spec.bootstrap.as_ref()?;
    let destination = bootstrap_destination(db)?;
    // The store is read with the Database's backup settings when it has
    // them (the same account reads what it wrote).
    let backup = db.spec.backup.as_ref();
    let upload_image = backup.map_or(backup_job::DEFAULT_UPLOAD_IMAGE, |b| b.upload_image());
    let choice = choice(bootstrap)?;
    let connection = vec![
        value_env("PGHOST", instance_host(db, designated)),
        value_env("PGPORT", PORT.to_string()),
        value_env("PGUSER", "postgres"),
        secret_env("PGPASSWORD", superuser_secret_name(db), "password"),
        value_env("PGCONNECT_TIMEOUT", "30"),
    ];
    let mut init_env = connection.clone();
    init_env.extend(app_env(db));
    let mut restore_env = connection;
    restore_env.extend([
        value_env("WORK_DIR", "/work"),
        value_env("PGDATABASE", database_name(db)),
        secret_env("APP_USER", credentials_secret_name(db), "username"),
    ]);
    let given = backup.and_then(|b| b.resources.as_ref());
    let with_resources = |container: Container| Container {
        resources: Some(resources::backup(given)),
        ..container
    };
    let pod = PodSpec {
        init_containers: Some(vec![
            backup_job::select_container(destination, &choice, upload_image, given),
            with_resources(script_container(
                ("init", image.clone()),
                INIT_APP_SCRIPT,
                init_env,
                None,
            )),
        ]),
        containers: vec![with_resources(script_container(
            ("restore", image),
            RESTORE_SCRIPT,
            restore_env,
            Some(vec![mount("work", "/work", false)]),
        ))],
        volumes: Some(vec![work_volume()]),
        service_account_name: backup.and_then(|b| b.service_account_name.clone()),
        ..PodSpec::default()
    };
    let mut pod = pod;
    client.apply(&mut pod, &["init", "restore"]);
    Some(script_job(db, jobs::restore(db), pod, 1))
}

/// Which dump the restore takes: the key named, else the newest of the
/// Database's or the Backup's dumps (before `before`, when given).
fn choice(bootstrap: &Bootstrap) -> Option<Choice> {
    let before = bootstrap
        .before
        .as_deref()
        .and_then(|b| before_stamp(b).ok());
    Some(
        match (&bootstrap.key, &bootstrap.database, &bootstrap.backup) {
            (Some(key), _, _) => Choice::Key(key.clone()),
            (None, Some(database), _) => Choice::Newest {
                names: jobs::dump_names(database),
                before,
            },
            (None, None, Some(backup)) => Choice::Newest {
                names: vec![backup.clone()],
                before,
            },
            (None, None, None) => return None,
        },
    )
}

/// The dump this Database was restored from: as recorded, or, the first
/// time the restore Job is seen succeeded, as its pod reported it (the
/// choice in words when the pod is gone).
pub(super) fn restored_from(
    db: &Database,
    seen: &Observed,
    restore: Restore,
    ctx: &Context,
) -> Option<RestoredFrom> {
    if let Some(recorded) = db.status.as_ref().and_then(|s| s.restored_from.clone()) {
        return Some(recorded);
    }
    if restore != Restore::Done {
        return None;
    }
    if let Some(recovery) = db.spec.bootstrap.as_ref().and_then(|b| b.archive.as_ref()) {
        return Some(RestoredFrom {
            object: format!(
                "{}/{} to {}",
                destination_url(bootstrap_destination(db)?),
                recovery.folder,
                recovery.describe_target()
            ),
            bytes: None,
            taken: None,
            restored_at: format_time(ctx.now),
        });
    }
    let job_name = jobs::restore(db);
    // Nothing to report without the restore Job observed.
    seen.job(&job_name)?;
    let at = seen.job_completed_at(&job_name).unwrap_or(ctx.now);
    let report = seen.job_message(&job_name, "restore").map(Report::parse);
    let Some(Ok(Report::Restored { bytes, taken, key })) = report else {
        return Some(RestoredFrom {
            object: db
                .spec
                .bootstrap
                .as_ref()
                .map(|b| b.describe())
                .unwrap_or_default(),
            bytes: None,
            taken: None,
            restored_at: format_time(at),
        });
    };
    let bucket = bootstrap_destination(db).map_or("", |d| d.s3_bucket.as_str());
    Some(RestoredFrom {
        object: format!("s3://{bucket}/{key}"),
        bytes,
        // The schema says date-time: a report's time that is not one is left out.
        taken: taken.and_then(normal_time),
        restored_at: format_time(at),
    })
}

/// `Restored`: whether the bootstrap's dump is in, or why not.
/// `job_made`: the restore Job is built (it waits for a ready primary).
pub(super) fn restored(
    db: &Database,
    seen: &Observed,
    restore: Restore,
    job_made: bool,
    from: Option<&RestoredFrom>,
) -> Observation {
    let job = jobs::restore(db);
    let reason = restore.reason();
    let (status, message) = match restore {
        Restore::Done => (
            ConditionStatus::True,
            from.map_or_else(|| format!("job {job} restored the dump"), restored_words),
        ),
        Restore::Running
            if db
                .spec
                .bootstrap
                .as_ref()
                .is_some_and(|b| b.archive.is_some()) =>
        {
            (ConditionStatus::Unknown, recovering_words(db, seen))
        }
        Restore::Running => (
            ConditionStatus::Unknown,
            format!(
                "job {job} restores {}{}{}; nobody can write until it succeeded",
                db.spec
                    .bootstrap
                    .as_ref()
                    .map(|b| b.describe())
                    .unwrap_or_default(),
                bootstrap_destination(db)
                    .map(|d| format!(" from s3://{}/{}", d.s3_bucket, d.s3_prefix))
                    .unwrap_or_default(),
                if job_made {
                    ""
                } else {
                    " once the primary is ready"
                }
            ),
        ),
        Restore::Failed => (
            ConditionStatus::False,
            format!(
                "job {job} failed: {}; the Database does not serve; fix the cause and delete the job to retry",
                failure(seen, &job)
            ),
        ),
        Restore::NotOver(holds) => (ConditionStatus::False, not_over(holds)),
        Restore::None => (ConditionStatus::False, "no spec.bootstrap".to_string()),
    };
    Observation::new("Restored", status, reason, message)
}

/// A recovery from an archive under way, in words, with what went wrong
/// last when anything did.
fn recovering_words(db: &Database, seen: &Observed) -> String {
    let Some(recovery) = db.spec.bootstrap.as_ref().and_then(|b| b.archive.as_ref()) else {
        return String::new();
    };
    let from = bootstrap_destination(db)
        .map(|d| format!("{}/{}", destination_url(d), recovery.folder))
        .unwrap_or_else(|| recovery.folder.clone());
    let mut words = format!(
        "the primary recovers from the archive {from} to {}: its init container fetches a base backup, then it replays the WAL and promotes; nobody can write until it is ready",
        recovery.describe_target()
    );
    if let Some(trouble) = recovery_trouble(db, seen) {
        words.push_str(&format!("; last: {trouble}"));
    }
    words
}

/// The recorded restore, in words.
fn restored_words(from: &RestoredFrom) -> String {
    let mut words = format!("restored {}", from.object);
    if let Some(bytes) = from.bytes {
        words.push_str(&format!(" ({bytes} bytes)"));
    }
    if let Some(taken) = &from.taken {
        words.push_str(&format!(", taken {taken}"));
    }
    words.push_str(&format!(", at {}", from.restored_at));
    words
}

/// Why a restore Job failed, as its pod said it (the first container that
/// left a reason), or where to look.
fn failure(seen: &Observed, job: &str) -> String {
    ["select", "init", "restore"]
        .into_iter()
        .find_map(|c| seen.job_message(job, c))
        .map(|m| match Report::parse(m) {
            Ok(report) => report.words(),
            Err(unreadable) => unreadable.words.to_string(),
        })
        .unwrap_or_else(|| format!("see kubectl logs job/{job} --all-containers"))
}

/// Why nothing is restored over what the Database holds.
fn not_over(holds: Holds) -> String {
    match holds {
        Holds::Initialized => "this Database was initialized: nothing is restored over its data",
        Holds::RetainedVolumes => {
            "volumes of an earlier Database of this name were here: it serves their data, and nothing is restored over it; to restore instead, delete those volumes and this Database, then create it again"
        }
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::super::children;
    use super::super::plan::plan;
    use super::super::plan::tests::{bootstrapped, db, instance, running, with_job};
    use super::*;
    use crate::operator::Context;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    #[test]
    fn a_bootstrap_restores_only_into_a_database_that_never_held_data() {
        let fresh = bootstrapped(&[]);
        let mut retained = Observed::default();
        retained
            .volumes
            .push(serde_json::from_value(json!({"metadata": {"name": "data-orders-0"}})).unwrap());
        // The second call, before the first answer's status is stored: the
        // role it wrote counts the old volumes as initialized.
        let mut retained_role = retained.clone();
        retained_role.role = Some(crate::operators::database::observed::Role {
            primary: "orders-0".into(),
            epoch: 0,
            initialized: true,
            switchover: false,
        });
        let initialized = bootstrapped(&[("Initialized", "True", "Initialized")]);
        let failed_before = bootstrapped(&[("Restored", "False", "RestoreFailed")]);
        let adopted_before = bootstrapped(&[("Restored", "False", "RetainedVolumes")]);
        let mut recorded = bootstrapped(&[]);
        recorded.status.as_mut().unwrap().restored_from = Some(Default::default());
        let cases = [
            (
                "first call, nothing there",
                &fresh,
                Observed::default(),
                Restore::Running,
            ),
            (
                "its Job running",
                &fresh,
                with_job(running("16"), "orders-restore", "Running"),
                Restore::Running,
            ),
            (
                "its Job failed",
                &fresh,
                with_job(running("16"), "orders-restore", "Failed"),
                Restore::Failed,
            ),
            (
                "its Job succeeded",
                &fresh,
                with_job(running("16"), "orders-restore", "Complete"),
                Restore::Done,
            ),
            (
                "recorded, the Job gone",
                &recorded,
                running("16"),
                Restore::Done,
            ),
            (
                "the failed Job deleted: again",
                &failed_before,
                running("16"),
                Restore::Running,
            ),
            (
                "created over retained volumes",
                &fresh,
                retained,
                Restore::NotOver(Holds::RetainedVolumes),
            ),
            (
                "created over retained volumes, the role written before the status",
                &fresh,
                retained_role,
                Restore::NotOver(Holds::RetainedVolumes),
            ),
            (
                "adopted earlier",
                &adopted_before,
                running("16"),
                Restore::NotOver(Holds::RetainedVolumes),
            ),
            (
                "its init Job seen",
                &fresh,
                with_job(running("16"), "orders-init", "Complete"),
                Restore::NotOver(Holds::Initialized),
            ),
            (
                "initialized once",
                &initialized,
                Observed::default(),
                Restore::NotOver(Holds::Initialized),
            ),
            (
                "its own StatefulSet, the status not yet written",
                &fresh,
                running("16"),
                Restore::Running,
            ),
        ];
        for (reason, d, seen, want) in cases {
            assert_eq!(decide(d, &seen, false), want, "{reason}");
        }
        // Found by the restore's real-loop scenario: Metacontroller called
        // again with the StatefulSet and its claims before the first
        // status was written, and the Database served an empty cluster,
        // never restored. Only a volume older than the Database is data.
        let mut dated = bootstrapped(&[]);
        dated.metadata.creation_timestamp = Some(Time("2026-01-01T00:00:05Z".parse().unwrap()));
        let claim_made = |at: &str| -> Observed {
            let mut seen = running("16");
            seen.volumes.push(
                serde_json::from_value(
                    json!({"metadata": {"name": "data-orders-0", "creationTimestamp": at}}),
                )
                .unwrap(),
            );
            seen
        };
        for (reason, at, want) in [
            (
                "its own claim, the same second",
                "2026-01-01T00:00:05Z",
                Restore::Running,
            ),
            (
                "its own claim, later",
                "2026-01-01T00:00:09Z",
                Restore::Running,
            ),
            (
                "a claim older than it",
                "2026-01-01T00:00:04Z",
                Restore::NotOver(Holds::RetainedVolumes),
            ),
        ] {
            assert_eq!(decide(&dated, &claim_made(at), false), want, "{reason}");
        }
        let mut plain = db("16", "Snapshot");
        plain.status = None;
        assert_eq!(decide(&plain, &Observed::default(), false), Restore::None);
    }

    #[test]
    fn nothing_serves_or_initializes_before_the_restore_succeeded() {
        let names = |d: &Database, seen: &Observed| -> Vec<String> {
            let plan = plan(d, seen).unwrap();
            let ctx = Context {
                now: "2026-01-01T00:00:00Z".parse().unwrap(),
                entropy: [0xAB; crate::operator::ENTROPY],
            };
            children::build(d, seen, &plan, &ctx)
                .unwrap()
                .iter()
                .map(|c| {
                    let v = serde_json::to_value(c).unwrap();
                    format!(
                        "{}/{}",
                        v["kind"].as_str().unwrap(),
                        v["metadata"]["name"].as_str().unwrap()
                    )
                })
                .collect()
        };
        let mut d = bootstrapped(&[]);
        d.spec.backup.as_mut().unwrap().enabled = true;
        d.spec.backup.as_mut().unwrap().schedule = Some("0 2 * * *".into());
        let mut restoring = with_job(running("16"), "orders-restore", "Running");
        restoring.pods.push(instance(0).ready().typed());
        let built = names(&d, &restoring);
        assert!(
            built.contains(&"Job/orders-restore".to_string()),
            "{built:?}"
        );
        for serving in [
            "Service/orders",
            "Service/orders-ro",
            "EndpointSlice/orders-ro",
            "CronJob/orders-backup",
            "Job/orders-init",
        ] {
            assert!(
                !built.contains(&serving.to_string()),
                "{serving} while restoring: {built:?}"
            );
        }
        let restored = with_job(restoring, "orders-restore", "Complete");
        let built = names(&d, &restored);
        for serving in [
            "Service/orders",
            "Service/orders-ro",
            "EndpointSlice/orders-ro",
            "CronJob/orders-backup",
            "Job/orders-init",
            "Job/orders-restore",
        ] {
            assert!(
                built.contains(&serving.to_string()),
                "{serving} once restored: {built:?}"
            );
        }
    }

    /// `bootstrapped`, recovering from an archive instead of a dump.
    fn recovering(conditions: &[(&str, &str, &str)]) -> Database {
        let mut d = bootstrapped(conditions);
        d.spec.bootstrap = Some(
            serde_json::from_value(json!({"archive": {"folder": "orders-uid-1-pg16"}})).unwrap(),
        );
        d.spec.backup.as_mut().unwrap().archive = Some(serde_json::from_value(json!({})).unwrap());
        d
    }

    #[test]
    fn a_recovery_from_an_archive_is_done_once_its_primary_is_ready_never_over_data() {
        let fresh = recovering(&[]);
        let mut retained = Observed::default();
        retained
            .volumes
            .push(serde_json::from_value(json!({"metadata": {"name": "data-orders-0"}})).unwrap());
        let mut initialized = Observed::default();
        initialized.role = Some(crate::operators::database::observed::Role {
            primary: "orders-0".into(),
            epoch: 0,
            initialized: true,
            switchover: false,
        });
        let with_init = with_job(running("16"), "orders-init", "Running");
        let done = recovering(&[("Restored", "True", "Restored")]);
        let adopted = recovering(&[("Restored", "False", "RetainedVolumes")]);
        let under_way = recovering(&[("Restored", "Unknown", "Restoring")]);
        for (reason, d, seen, primary_ready, want) in [
            (
                "first call",
                &fresh,
                Observed::default(),
                false,
                Restore::Running,
            ),
            (
                "the primary recovering",
                &fresh,
                running("16"),
                false,
                Restore::Running,
            ),
            (
                "the primary ready: recovered",
                &fresh,
                running("16"),
                true,
                Restore::Done,
            ),
            (
                "the init Job seen before the status",
                &fresh,
                with_init,
                false,
                Restore::Done,
            ),
            (
                "recorded done",
                &done,
                Observed::default(),
                false,
                Restore::Done,
            ),
            (
                "retained volumes",
                &fresh,
                retained.clone(),
                true,
                Restore::NotOver(Holds::RetainedVolumes),
            ),
            (
                "retained volumes seen only after the recovery was recorded under way",
                &under_way,
                retained.clone(),
                true,
                Restore::NotOver(Holds::RetainedVolumes),
            ),
            (
                "recorded over retained volumes, ready",
                &adopted,
                running("16"),
                true,
                Restore::NotOver(Holds::RetainedVolumes),
            ),
            (
                "initialized, by the role",
                &fresh,
                initialized,
                false,
                Restore::NotOver(Holds::Initialized),
            ),
        ] {
            assert_eq!(decide(d, &seen, primary_ready), want, "{reason}");
        }
        // No restore Job, ever: the pods recover.
        let plan = plan(&fresh, &running("16")).unwrap();
        assert!(!plan.restore_job);
    }
    #[test]
    fn a_recovery_says_what_its_pods_last_reported_wrong() {
        let d = recovering(&[]);
        let mut seen = Observed::default();
        let words = |seen: &Observed| restored(&d, seen, Restore::Running, false, None).message;
        assert!(
            words(&seen).starts_with(
                "the primary recovers from the archive s3://b/archive/orders-uid-1-pg16 to the end of the archive"
            ),
            "{}",
            words(&seen)
        );
        let said = |container: &str, message: &str| {
            instance(0)
                .set(
                    "/status/initContainerStatuses",
                    json!([{"name": container, "ready": false, "restartCount": 1, "image": "i", "imageID": "",
                            "lastState": {}, "state": {"terminated": {"exitCode": 3, "message": message}}}]),
                )
                .typed()
        };
        let replay = "opshooks: the recovery from the archive orders-uid-1-pg16 did not finish: pitr-replay: failed the archive ends before the target";
        // Each container's last message, and what `Restored` then ends
        // with (`None`: no "; last:" at all).
        for (container, message, last) in [
            (
                "pitr-fetch",
                "opshooks pitr-fetch: skipped 'orders-0' is not the designated primary\n",
                None,
            ),
            (
                "pitr-fetch",
                "opshooks pitr-fetch: refused the target, time 2020-01-01T00:00:00Z, is before the end of the first base backup\n",
                Some(
                    "opshooks pitr-fetch: refused the target, time 2020-01-01T00:00:00Z, is before the end of the first base backup",
                ),
            ),
            (
                "pitr-fetch",
                "opshooks pitr-fetch: fetched id=20261206T010203 end=0/5000100 end_time=2026-12-06T01:02:04+00:00 recoverable_from=2026-12-05T01:02:04+00:00 seconds=1\n",
                None,
            ),
            // A line the hook cannot read is shown as it is.
            (
                "pitr-fetch",
                "sh: 1: barman-cloud-restore: not found\n",
                Some("sh: 1: barman-cloud-restore: not found"),
            ),
            // start.sh's refusal after a replay that failed; not its other
            // refusals.
            ("postgres", replay, Some(replay)),
            (
                "postgres",
                "opshooks: volume holds PostgreSQL 15 data (pg15), not 16: nothing is initialized or served beside it",
                None,
            ),
        ] {
            seen.pods = vec![said(container, message)];
            let words = words(&seen);
            match last {
                Some(last) => assert!(words.ends_with(&format!("; last: {last}")), "{words}"),
                None => assert!(!words.contains("; last:"), "{words}"),
            }
        }
    }
}
