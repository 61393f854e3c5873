//! Every decision the Database operator makes, from the observed state:
//! which major runs, whether an upgrade is in progress and how far it got,
//! what a deletion does next, and which Jobs exist for each. The builders in
//! `children` and the conditions in `status` only read the [`Plan`].

use std::collections::BTreeMap;

use super::images::Images;
use super::names::{generated_credentials_name, jobs};
use super::observed::Observed;
use super::parameters::{self, Held};
use super::primary::{self, Primary};
use super::restore::{self, Restore};
use super::rollout::{self, Rollout, Serving};
use super::spec::{ANNOTATION_VERSION, Database, Major, VOLUME, name};
use super::storage::Growth;
use super::tls;
use super::trust;
use super::upgrade;
use crate::operator::HookError;
use crate::operators::report::InstanceSays;
use crate::operators::validate::InvalidSpec;
use k8s_openapi::jiff::Timestamp;

/// What to build, decided from the observed state alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The major the data is in now: what the StatefulSet runs.
    pub running: Major,
    /// The major to report as running: what the StatefulSet runs or,
    /// while it is missing, what the status last reported (the status is
    /// where the major the volumes hold is remembered). Unlike `running`,
    /// never the spec's version when nothing names one.
    pub reported: Option<Major>,
    /// The major the StatefulSet should run.
    pub version: Major,
    /// How many instances the StatefulSet should run.
    pub replicas: i32,
    /// Where an upgrade stands, and which of its Jobs exist.
    pub upgrade: upgrade::Decision,
    /// Whether the initial-configuration Job should exist.
    pub init_job: bool,
    /// Where the restore of `spec.bootstrap` stands.
    pub restore: Restore,
    /// Whether the bootstrap's restore Job (`jobs::restore`) should exist.
    pub restore_job: bool,
    /// With `verify.afterEachBackup`: when the backup whose dump the
    /// verification run after it checks succeeded.
    pub verify_after: Option<Timestamp>,
    /// Whether to keep the StatefulSet at all (false only late in finalizing).
    pub keep_statefulset: bool,
    /// Whether deleting the StatefulSet may delete its volumes.
    pub delete_volumes: bool,
    /// Whether the snapshot Job should exist.
    pub snapshot_job: bool,
    /// While deleting: every observed Job is kept, built or not, and
    /// nothing that is not observed is created, but the snapshot Job.
    pub deleting: bool,
    /// While deleting: the volumes the StatefulSet controller has not yet
    /// handed to the StatefulSet (when they are to go with it) or taken
    /// back from it (when they are to stay). The StatefulSet is kept until
    /// there is none.
    pub volumes_pending: Vec<String>,
    /// Who is the primary, and where a change of primary stands.
    pub primary: Primary,
    /// Whether the Database holds data (initialized, restored, or over
    /// retained volumes): an instance with an empty volume must then never
    /// initialize a new cluster.
    pub initialized: bool,
    /// The image of each major in play.
    pub images: Images,
    /// How a change of the instances' template rolls out.
    pub rollout: Rollout,
    /// The server parameters the instances run: `spec.postgresql`'s, but
    /// for the decreases [`held`](Plan::held).
    pub parameters: BTreeMap<String, String>,
    /// The decreases the instances do not take while the Database has
    /// standbys (see [`parameters::hold_decreases`]).
    pub held: Vec<Held>,
    /// Where the claims stand against `spec.storage.size`.
    pub growth: Growth,
    /// How the operator's clients and the applications connect: the
    /// sslmode, and the CA when there is one.
    pub tls: tls::Client,
    /// The issue of cert-manager's certificate the instances must serve,
    /// once one runs an older (see [`trust::renewal`]).
    pub certificate_renewal: Option<String>,
}

/// Decides the StatefulSet's version and size and which Jobs exist.
pub fn plan(db: &Database, seen: &Observed) -> Result<Plan, HookError> {
    let running = running(db, seen)?;
    let desired = db.spec.version;
    if desired < running {
        return Err(InvalidSpec::new(
            "spec.version",
            format!(
                "{} is older than the running {}; downgrades are refused, restore a backup into a new Database (spec.bootstrap) instead",
                desired.as_str(),
                running.as_str()
            ),
        )
        .into());
    }
    super::storage::refuse_shrink(db, seen)?;
    let mut plan = upgrade_plan(db, seen, running);
    // A failed or impossible upgrade (no destination, a failed backup or
    // restore) leaves the old version serving: it fails over as ever.
    let upgrading = plan.upgrade.step.in_progress();
    decide_primary(db, seen, &mut plan, upgrading);
    Ok(plan)
}

/// Who is the primary, the rollout around it and the instances to run
/// for both ([`primary::decide_all`]), into the plan.
pub(super) fn decide_primary(db: &Database, seen: &Observed, plan: &mut Plan, upgrading: bool) {
    let decided = primary::decide_all(
        db,
        seen,
        plan.replicas,
        plan.restore.lets_serve(),
        upgrading,
    );
    plan.primary = decided.primary;
    plan.rollout = decided.rollout;
    plan.replicas = decided.replicas;
}

/// Refuses (409) while instance 0 refuses to start on its volume because
/// the volume holds another major's data: a Database created again over
/// the retained volumes of an earlier one, at another version. Nothing is
/// initialized beside that data; what to do is a person's choice.
pub fn check_volumes(db: &Database, seen: &Observed) -> Result<(), HookError> {
    let designated = primary::decide(db, seen, false, None).designated;
    let Some((why, InstanceSays::OtherMajor)) = seen.volume_refusal(db, designated) else {
        return Ok(());
    };
    Err(HookError::Unsafe(format!(
        "instance {designated} of Database {name} refuses to start: its {why}; to serve that data, set deletionPolicy Retain, delete this Database and create it again with that spec.version (raise it afterwards to upgrade); to start empty instead, delete the volumes {volume}-{name}-* first",
        name = name(db),
        volume = VOLUME,
    )))
}

/// The major the data is in. From the StatefulSet when there is one; without
/// it (deleted by hand, or a Database re-created over retained volumes) the
/// version last reported in the status, never the one asked for, which
/// would start an empty cluster beside the data.
pub(super) fn running(db: &Database, seen: &Observed) -> Result<Major, HookError> {
    let reported = reported_version(db);
    match (&seen.statefulset, seen.running()) {
        (_, Some(major)) => Ok(major),
        (None, None) => Ok(reported.unwrap_or(db.spec.version)),
        (Some(_), None) => reported.ok_or_else(|| {
            HookError::Unsafe(format!(
                "cannot tell which PostgreSQL major statefulset {} runs (no PGDATA, postgres image or version annotation names one) and status.version is empty; nothing is changed: put back its postgres container or annotate it {ANNOTATION_VERSION}=<major>",
                name(db)
            ))
        }),
    }
}

/// The major the status last reported running.
fn reported_version(db: &Database) -> Option<Major> {
    Major::parse(db.status.as_ref()?.version.as_deref()?)
}

/// The plan of a Database running `running`, with the upgrade to the
/// spec's version where it stands.
pub(super) fn upgrade_plan(db: &Database, seen: &Observed, running: Major) -> Plan {
    let mut plan = at_rest(db, seen, running);
    let upgrade = upgrade::decide(db, seen, running, plan.restore.lets_serve());
    plan.upgrade = upgrade;
    plan.version = upgrade.version(running);
    if upgrade.stops_instances() {
        plan.replicas = 0;
    }
    plan
}

/// The plan of a Database running `running` with no upgrade under way.
fn at_rest(db: &Database, seen: &Observed, running: Major) -> Plan {
    let has = |job: &str| seen.jobs.contains_key(job);
    let primary = primary::decide(db, seen, false, None);
    let primary_ready = primary::is_designated_ready(db, seen, &primary);
    let restore = restore::decide(db, seen, primary_ready);
    let from_dump = db
        .spec
        .bootstrap
        .as_ref()
        .is_some_and(|b| b.archive.is_none());
    // The initial configuration follows the restore, which it would
    // otherwise race: it runs once the primary is ready and the data is in.
    let init_job = has(&jobs::init(db)) || (restore.lets_serve() && primary_ready);
    let (parameters, held) = decide_parameters(db, seen);
    Plan {
        running,
        reported: seen.running().or_else(|| reported_version(db)),
        version: running,
        replicas: db.spec.size.instances(),
        upgrade: upgrade::Decision::idle(db),
        init_job,
        restore,
        // The restore connects to the primary: it starts once that is ready.
        restore_job: has(&jobs::restore(db))
            || (from_dump && restore == Restore::Running && primary_ready),
        verify_after: verify_after(db, seen, restore),
        keep_statefulset: true,
        delete_volumes: false,
        snapshot_job: false,
        deleting: false,
        volumes_pending: Vec::new(),
        primary,
        // Over retained volumes (a claim older than the Database) the
        // data is elsewhere whatever instance 0's volume holds: an empty
        // one refuses to initialize (`start.sh`), and the others report
        // what they hold.
        initialized: seen.was_initialized(db)
            || matches!(restore, Restore::Done | Restore::NotOver(_))
            || seen.claims(db).any(|(_, c)| restore::is_older(c, db)),
        images: Images::of(db, seen),
        rollout: rollout::decide(db, seen, 0, Serving::UNKNOWN, false),
        parameters,
        held,
        growth: Growth::of(db, seen),
        tls: tls::client(db, seen),
        certificate_renewal: trust::renewal(db, seen),
    }
}

/// The server parameters to run, and the decreases held. A Database with
/// standbys (asked for, or still running) keeps what its StatefulSet's
/// template runs of the parameters a standby needs at least as high as
/// its primary's: the rollout restarts the standbys first, and one
/// restarted below its primary stops replaying. One instance alone takes
/// any value, and so does a Database with no StatefulSet yet.
fn decide_parameters(db: &Database, seen: &Observed) -> (BTreeMap<String, String>, Vec<Held>) {
    let wanted = db
        .spec
        .postgresql
        .as_ref()
        .map(|pg| pg.parameters.clone())
        .unwrap_or_default();
    let instances = seen.statefulset_replicas().max(db.spec.size.instances());
    if seen.statefulset.is_none() || instances <= 1 {
        return (wanted, Vec::new());
    }
    parameters::hold_decreases(&wanted, &seen.running_parameters())
}

/// The last backup's time, when each backup is to be verified: the backup
/// CronJob's last success, once there is something to back up.
fn verify_after(db: &Database, seen: &Observed, restore: Restore) -> Option<Timestamp> {
    let backup = db.spec.backup.as_ref()?;
    let after_each = backup.enabled && backup.verify.as_ref()?.after_each_backup;
    let last = seen.last_backup_time()?;
    (after_each && restore.lets_serve()).then_some(last)
}

/// Whether the generated application credentials exist: when the spec names
/// no Secret of its own, and also once generated even if the spec later
/// names one, since they exist nowhere else.
pub fn has_generated_credentials(db: &Database, seen: &Observed) -> bool {
    db.spec.credentials_secret.is_none()
        || seen.secrets.contains_key(&generated_credentials_name(db))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::fixtures;
    use crate::hook::conditions::ConditionStatus;
    use crate::operator::Context;
    use crate::operators::database::children;
    use k8s_openapi::api::batch::v1::Job;
    use serde_json::json;

    pub(in super::super) fn db(version: &str, policy: &str) -> Database {
        fixtures::orders()
            .spec("version", version)
            .spec("deletionPolicy", policy)
            .spec("backup", json!({"destination": {"s3Bucket": "b"}}))
            .typed()
    }

    pub(in super::super) fn job(state: &str) -> Job {
        fixtures::job("x").finished(state).typed()
    }

    pub(in super::super) fn running(version: &str) -> Observed {
        let sts = fixtures::statefulset("orders").annotation(ANNOTATION_VERSION, version);
        Observed {
            statefulset: Some(sts.typed()),
            ..Observed::default()
        }
    }

    pub(in super::super) use crate::fixtures::instance;

    /// `running`, scaled to zero, its controller reporting no replica left.
    pub(in super::super) fn stopped(version: &str) -> Observed {
        let mut seen = running(version);
        let sts = seen.statefulset.as_mut().unwrap();
        sts.metadata.generation = Some(2);
        sts.spec.as_mut().unwrap().replicas = Some(0);
        sts.status =
            Some(serde_json::from_value(json!({"replicas": 0, "observedGeneration": 2})).unwrap());
        seen
    }

    /// `db`, asked to start from the newest dump of Database orders, with
    /// these status conditions (type, status, reason).
    pub(in super::super) fn bootstrapped(conditions: &[(&str, &str, &str)]) -> Database {
        let mut d = db("16", "Snapshot");
        d.spec.bootstrap = Some(serde_json::from_value(json!({"database": "orders"})).unwrap());
        let conditions: Vec<_> = conditions
            .iter()
            .map(|(t, s, r)| json!({"type": t, "status": s, "reason": r, "message": "m"}))
            .collect();
        d.status = Some(serde_json::from_value(json!({"conditions": conditions})).unwrap());
        d
    }

    pub(in super::super) fn with_job(mut seen: Observed, name: &str, state: &str) -> Observed {
        seen.jobs.insert(name.into(), job(state));
        seen
    }

    /// Issue 32, item 4, found by review: the init Job deleted (a person,
    /// a TTL) is made again and runs; "initialized" must stay true in the
    /// status, so that the next call does not write `initialized=false`
    /// into the role ConfigMap (failover off, and `start.sh` would
    /// initialize an empty primary volume beside the standbys' data). The
    /// role ConfigMap's `initialized=true` keeps it when the status is
    /// lost too.
    #[test]
    fn initialized_stays_true_whatever_is_deleted() {
        let mut initialized = db("16", "Snapshot");
        initialized.status = Some(
            serde_json::from_value(json!({"conditions": [
                {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "m"}]}))
            .unwrap(),
        );
        let rerun = with_job(running("16"), "orders-init", "Running");
        let got = plan(&initialized, &rerun).unwrap();
        assert!(got.initialized, "the plan");
        let status = crate::operators::database::status::status(
            &initialized,
            &rerun,
            &got,
            None,
            &Context::fixed(),
        );
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Initialized")
            .unwrap();
        assert_eq!(condition.status, ConditionStatus::True, "{condition:?}");

        let mut role_only = running("16");
        role_only.role = Some(crate::operators::database::observed::Role {
            primary: "orders-0".into(),
            epoch: 3,
            initialized: true,
            switchover: false,
        });
        let fresh = db("16", "Snapshot");
        assert!(role_only.was_initialized(&fresh), "the role ConfigMap");
        assert!(
            plan(&fresh, &role_only).unwrap().initialized,
            "the plan, from the role"
        );
    }

    /// `running`, with instance 0 up and ready.
    pub(in super::super) fn serving(version: &str) -> Observed {
        let mut seen = running(version);
        seen.pods = vec![instance(0).ready().typed()];
        seen
    }

    #[test]
    fn downgrades_are_refused() {
        let err = plan(&db("15", "Delete"), &running("16")).unwrap_err();
        assert!(
            matches!(&err, HookError::Invalid(e) if e.field == "spec.version"),
            "{err:?}"
        );
    }

    /// Issue 9: with the annotation gone and no reported version, a raised
    /// spec.version moved the StatefulSet to an empty data directory.
    #[test]
    fn regression_running_version_comes_from_the_pod_template() {
        let sts = |annotation: Option<&str>, pgdata: Option<&str>, image: Option<&str>| {
            let mut env = vec![];
            if let Some(dir) = pgdata {
                env.push(json!({"name": "PGDATA", "value": dir}));
            }
            let mut container = json!({"name": "postgres", "env": env});
            if let Some(image) = image {
                container["image"] = json!(image);
            }
            let mut meta = json!({"name": "orders"});
            if let Some(a) = annotation {
                meta["annotations"] = json!({ANNOTATION_VERSION: a});
            }
            Observed {
                statefulset: Some(
                    serde_json::from_value(json!({"metadata": meta,
                        "spec": {"selector": {}, "template": {"spec": {"containers": [container]}}}}))
                    .unwrap(),
                ),
                ..Observed::default()
            }
        };
        struct Case {
            reason: &'static str,
            seen: Observed,
            want: Option<Major>,
        }
        let cases = [
            Case {
                reason: "PGDATA names the data directory",
                seen: sts(
                    None,
                    Some("/var/lib/postgresql/data/pg16"),
                    Some("postgres:17"),
                ),
                want: Some(Major::V16),
            },
            Case {
                reason: "the image when PGDATA is absent",
                seen: sts(None, None, Some("postgres:15.6")),
                want: Some(Major::V15),
            },
            Case {
                reason: "the template beats an edited annotation",
                seen: sts(Some("17"), None, Some("postgres:16")),
                want: Some(Major::V16),
            },
            Case {
                reason: "any registry's image, read as the spec reads imageName",
                seen: sts(
                    Some("15"),
                    None,
                    Some("registry:5000/postgis/postgis:17-3.5"),
                ),
                want: Some(Major::V17),
            },
            Case {
                reason: "the annotation as a last hint",
                seen: sts(Some("14"), None, Some("example/pg:latest")),
                want: Some(Major::V14),
            },
            Case {
                reason: "nothing names a major",
                seen: sts(None, None, None),
                want: None,
            },
        ];
        for case in cases {
            assert_eq!(case.seen.running(), case.want, "{}", case.reason);
        }
        let err = plan(&db("17", "Delete"), &sts(None, None, None)).unwrap_err();
        assert!(matches!(err, HookError::Unsafe(_)), "{err:?}");
        let upgrade = plan(&db("17", "Delete"), &sts(None, None, Some("postgres:16"))).unwrap();
        assert_eq!(
            upgrade.upgrade.step,
            upgrade::Upgrade::BackingUp { to: Major::V17 }
        );
        assert_eq!(upgrade.version, Major::V16);
    }

    #[test]
    fn passwords_are_long_and_url_safe() {
        let d = db("16", "Delete");
        let ctx = Context {
            now: "2026-01-01T00:00:00Z".parse().unwrap(),
            entropy: [0xAB; crate::operator::ENTROPY],
        };
        let secrets = children::secrets(&d, &Observed::default(), &ctx);
        let password = &secrets[0].data.as_ref().unwrap()["password"].0;
        assert_eq!(password.len(), 28);
        assert!(
            password
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
        );
    }
}
