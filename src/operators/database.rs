//! Database: a PostgreSQL lifecycle that never loses data.
//!
//! One primary and `size - 1` streaming standbys in a StatefulSet, Services
//! for the primary (read-write) and the standbys (read-only), generated
//! credentials that are never rotated, a one-time initial-configuration Job,
//! scheduled backups with the Backup operator's job, major-version upgrades
//! through a pre-upgrade backup and a restore Job, and a snapshot before
//! anything is deleted.
//!
//! Volumes are the StatefulSet's own PersistentVolumeClaims, not children of
//! the Database: nothing Metacontroller does to children (a dropped child, a
//! deleted parent) can delete them. They are deleted only when finalizing
//! under `Delete`, or under `Snapshot` after the snapshot Job succeeded, by
//! switching the StatefulSet's PVC retention policy to `Delete` and then
//! removing the StatefulSet; under `Retain` they outlive the Database,
//! owned by nothing.
//!
//! The decisions live in [`plan`]: a pure function from the observed state
//! to what to build; [`children`] turns that into objects.

pub mod children;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::backup_job::{self, RunStatus, validate_destination};
use super::common::{is_ready, sorted_children};
use super::validate::{self, InvalidSpec};
use crate::hook::conditions::{self, Condition, ConditionStatus, Observation, format_time};
use crate::hook::{
    CustomizeRequest, CustomizeResponse, ObservedPod, RelatedResourceRule, SyncRequest,
    SyncResponse,
};
use crate::operator::{ChildResource, Context, ControllerSpec, HookError, Operator};
pub use backup_job::Destination;

/// Label on every object of a Database, naming it; customize selects by it.
pub const LABEL_DATABASE: &str = "opshooks.io/database";
/// Annotation on the StatefulSet naming the PostgreSQL major it runs: a
/// hint for people. The operator reads the major from the pod template
/// (where the data lives and which image runs it), which anyone editing an
/// annotation cannot change by accident.
pub const ANNOTATION_VERSION: &str = "opshooks.io/postgres-version";
/// The longest Database name: it prefixes Jobs (`<name>-pre-upgrade-17`)
/// and the backup CronJob's jobs, which must fit in 63.
pub const MAX_NAME: usize = 40;
/// The PostgreSQL port.
pub const PORT: i32 = 5432;
/// How often to look again while waiting on something that does not
/// trigger a sync by itself.
pub const WAIT_SECONDS: f64 = 15.0;

/// A PostgreSQL database with its storage, credentials, backups and upgrades.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, KubeSchema, PartialEq)]
#[kube(
    group = "opshooks.io",
    version = "v1alpha1",
    kind = "Database",
    namespaced,
    status = "DatabaseStatus",
    shortname = "pgdb",
    category = "opshooks",
    doc = "Database runs PostgreSQL: a primary and streaming standbys, credentials, backups, upgrades and a snapshot before deletion.",
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Running", type_ = "string", json_path = ".status.version"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".status.endpoint", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 40").message("metadata.name must be at most 40 characters, so that job names fit in 63")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.deletionPolicy != 'Snapshot' || has(self.backup)").message("deletionPolicy Snapshot needs spec.backup.destination to store the snapshot; add one, or choose Retain or Delete"),
    validation = Rule::new("self.version >= oldSelf.version").message("spec.version cannot go down: downgrades are refused; restore a backup into a new Database instead"),
    validation = Rule::new("has(self.credentialsSecret) == has(oldSelf.credentialsSecret) && (!has(self.credentialsSecret) || self.credentialsSecret == oldSelf.credentialsSecret)").message("spec.credentialsSecret cannot change once created: the database's user keeps the password it was created with"),
    validation = Rule::new("has(self.databaseName) == has(oldSelf.databaseName) && (!has(self.databaseName) || self.databaseName == oldSelf.databaseName)").message("spec.databaseName cannot change once created"),
    validation = Rule::new("has(self.user) == has(oldSelf.user) && (!has(self.user) || self.user == oldSelf.user)").message("spec.user cannot change once created")
)]
pub struct DatabaseSpec {
    /// The PostgreSQL major version: 14, 15, 16 or 17. Raising it upgrades
    /// the database (pre-upgrade backup, then restore into the new version);
    /// lowering it is refused.
    pub version: Major,
    /// small: 1 instance, 500m CPU and 512Mi memory; medium: 2 instances,
    /// 1 CPU and 1Gi; large: 3 instances, 2 CPUs and 2Gi. The first instance
    /// is the primary, the others streaming standbys.
    #[serde(default)]
    pub size: Size,
    /// The volume of each instance. Fixed once created.
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.storage cannot change once created; resize the PersistentVolumeClaims directly"))]
    pub storage: Storage,
    /// Backups to S3: where (also used for pre-upgrade backups and the
    /// snapshot before deletion) and, when enabled, on which schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<DatabaseBackup>,
    /// An existing Secret with keys `username` and `password` for the
    /// application user; one is generated (and never rotated) when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: Option<String>,
    /// What happens to the data when the Database is deleted: Snapshot (dump
    /// to the backup destination, then delete the volumes; the default),
    /// Retain (keep the volumes, owned by nothing) or Delete.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// The application database's name; the Database's name when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub database_name: Option<String>,
    /// The application user's name, when the credentials are generated; the
    /// Database's name when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub user: Option<String>,
}

/// Supported PostgreSQL majors.
#[derive(
    Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord,
)]
pub enum Major {
    /// PostgreSQL 14.
    #[serde(rename = "14")]
    V14,
    /// PostgreSQL 15.
    #[serde(rename = "15")]
    V15,
    /// PostgreSQL 16.
    #[serde(rename = "16")]
    V16,
    /// PostgreSQL 17.
    #[serde(rename = "17")]
    V17,
}

impl Major {
    /// Every supported major, oldest first.
    pub const ALL: [Major; 4] = [Major::V14, Major::V15, Major::V16, Major::V17];

    /// The version as written, `16`.
    pub fn as_str(self) -> &'static str {
        match self {
            Major::V14 => "14",
            Major::V15 => "15",
            Major::V16 => "16",
            Major::V17 => "17",
        }
    }

    /// Reads a version as written.
    pub fn parse(text: &str) -> Option<Major> {
        Major::ALL.into_iter().find(|m| m.as_str() == text)
    }

    /// The official image of this major.
    pub fn image(self) -> String {
        format!("postgres:{}", self.as_str())
    }
}

/// Instance count and resources.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// One instance, 500m CPU, 512Mi memory.
    #[default]
    Small,
    /// Two instances, 1 CPU, 1Gi memory each.
    Medium,
    /// Three instances, 2 CPUs, 2Gi memory each.
    Large,
}

impl Size {
    /// How many instances: one primary, the rest standbys.
    pub fn instances(self) -> i32 {
        match self {
            Size::Small => 1,
            Size::Medium => 2,
            Size::Large => 3,
        }
    }

    /// CPU and memory of each instance.
    pub fn resources(self) -> (&'static str, &'static str) {
        match self {
            Size::Small => ("500m", "512Mi"),
            Size::Medium => ("1", "1Gi"),
            Size::Large => ("2", "2Gi"),
        }
    }
}

/// The volume of each instance.
#[derive(Clone, Debug, Deserialize, Serialize, KubeSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// The size of each instance's volume, for example 20Gi.
    #[schemars(pattern(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"))]
    pub size: String,
    /// The StorageClass; the cluster's default when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub storage_class_name: Option<String>,
}

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
}

/// What deleting a Database does to its data.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum DeletionPolicy {
    /// Dump to the backup destination, then delete the volumes.
    #[default]
    Snapshot,
    /// Keep the volumes, owned by nothing.
    Retain,
    /// Delete the volumes.
    Delete,
}

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
    /// Configured, but not every instance is ready, or a step failed.
    Degraded,
    /// Being deleted.
    Deleting,
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
    /// When the last scheduled backup succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_backup_time: Option<String>,
    /// While deleting: when the final snapshot succeeded. Once recorded, the
    /// snapshot is never taken again, whatever happens to its Job.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub snapshot_time: Option<String>,
    /// Ready, Initialized, BackupScheduled, Upgrading and, when deleting, Snapshotted.
    pub conditions: Vec<Condition>,
    /// The parent generation Metacontroller last synced; set by Metacontroller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The Database operator and its routes.
pub fn operator() -> Operator {
    let child_type = |api_version, resource, update_method, why| ChildResource {
        api_version,
        resource,
        update_method,
        status_checks: vec![],
        why,
    };
    let controller = ControllerSpec {
        children: vec![
            child_type(
                "apps/v1",
                "statefulsets",
                "InPlace",
                "the StatefulSet rolls its own pods; scaling and image changes apply in place",
            ),
            child_type(
                "v1",
                "services",
                "InPlace",
                "selectors and ports are updated in place",
            ),
            child_type(
                "discovery.k8s.io/v1",
                "endpointslices",
                "InPlace",
                "the read-only Service's endpoints follow the ready standbys",
            ),
            child_type(
                "v1",
                "configmaps",
                "InPlace",
                "connection details follow the spec",
            ),
            child_type(
                "v1",
                "secrets",
                "OnDelete",
                "credentials are created once and never changed",
            ),
            child_type(
                "batch/v1",
                "jobs",
                "OnDelete",
                "a Job runs once; it is never replaced",
            ),
            child_type(
                "batch/v1",
                "cronjobs",
                "InPlace",
                "a schedule or destination change updates the backup CronJob",
            ),
        ],
        generate_selector: true,
        resync_period_seconds: Some(60),
    };
    Operator::new::<Database>(
        "database",
        controller,
        "StatefulSet, Services, Secrets, ConfigMap, Jobs, backup CronJob",
    )
    .sync(sync)
    .finalize(finalize)
    .customize(customize)
}

/// The parent's name.
pub fn name(db: &Database) -> &str {
    db.metadata.name.as_deref().unwrap_or_default()
}

fn namespace(db: &Database) -> &str {
    db.metadata.namespace.as_deref().unwrap_or("default")
}

/// The application database's name.
pub fn database_name(db: &Database) -> String {
    db.spec
        .database_name
        .clone()
        .unwrap_or_else(|| name(db).to_string())
}

/// The read-write Service's DNS name and port.
pub fn endpoint(db: &Database) -> String {
    format!("{}.{}.svc.cluster.local:{PORT}", name(db), namespace(db))
}

/// Asks for this Database's Pods and, unless its volumes are to be
/// retained, its PersistentVolumeClaims.
pub fn customize(
    req: &CustomizeRequest<Database>,
    _ctx: &Context,
) -> Result<CustomizeResponse, HookError> {
    let db = &req.parent;
    let labels = BTreeMap::from([(LABEL_DATABASE.to_string(), name(db).to_string())]);
    let ns = db.metadata.namespace.clone();
    let mut rules = vec![RelatedResourceRule::labelled(
        "v1",
        "pods",
        labels.clone(),
        ns.clone(),
    )];
    // Retained volumes are released from the Database: it never waits on them.
    if db.spec.deletion_policy != DeletionPolicy::Retain {
        rules.push(RelatedResourceRule::labelled(
            "v1",
            "persistentvolumeclaims",
            labels,
            ns,
        ));
    }
    Ok(CustomizeResponse {
        related_resources: rules,
    })
}

/// Checks what the schema cannot, and names the field.
pub fn validate(db: &Database) -> Result<(), InvalidSpec> {
    validate::dns_label("metadata.name", name(db), MAX_NAME)?;
    if validate::quantity_bytes(&db.spec.storage.size).is_none_or(|b| b == 0) {
        return Err(InvalidSpec::new(
            "spec.storage.size",
            format!(
                "{:?} is not a storage size; write it like 20Gi",
                db.spec.storage.size
            ),
        ));
    }
    // PostgreSQL cuts names at 63 bytes, not characters: a longer name is
    // created but can never log in.
    for (field, value) in [
        ("spec.databaseName", &db.spec.database_name),
        ("spec.user", &db.spec.user),
    ] {
        if let Some(value) = value
            && (value.is_empty() || value.len() > 63)
        {
            return Err(InvalidSpec::new(
                field,
                format!(
                    "{value:?} is {} bytes; PostgreSQL names hold 1 to 63 bytes",
                    value.len()
                ),
            ));
        }
    }
    if let Some(b) = &db.spec.backup {
        validate_destination("spec.backup.destination", &b.destination)?;
        match (&b.schedule, b.enabled) {
            (Some(s), _) => validate::cron("spec.backup.schedule", s)?,
            (None, true) => {
                return Err(InvalidSpec::new(
                    "spec.backup.schedule",
                    "is required when backups are enabled; write it like \"0 2 * * *\"",
                ));
            }
            (None, false) => {}
        }
    }
    if db.spec.deletion_policy == DeletionPolicy::Snapshot && db.spec.backup.is_none() {
        return Err(InvalidSpec::new(
            "spec.deletionPolicy",
            "Snapshot needs spec.backup.destination to store the snapshot; add one, or choose Retain or Delete",
        ));
    }
    Ok(())
}

/// Everything observed about one Database, decoded once.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The StatefulSet, if it exists.
    pub statefulset: Option<StatefulSet>,
    /// Our Jobs, by name.
    pub jobs: BTreeMap<String, Job>,
    /// Our Secrets, by name.
    pub secrets: BTreeMap<String, Secret>,
    /// The backup CronJob, if it exists.
    pub cron_job: Option<CronJob>,
    /// The instances' pods.
    pub pods: Vec<ObservedPod>,
    /// The instances' volumes (not asked for under Retain).
    pub volumes: Vec<PersistentVolumeClaim>,
}

impl Observed {
    /// Decodes the request's children and related objects. A StatefulSet
    /// of another name is refused: it holds volumes, and an answer without
    /// it would delete it.
    pub fn from_request(req: &SyncRequest<Database>) -> Result<Self, HookError> {
        let db = &req.parent;
        let mut statefulsets = req.children.of::<StatefulSet>()?;
        if let Some(other) = statefulsets
            .iter()
            .find(|s| s.metadata.name.as_deref() != Some(name(db)))
        {
            return Err(HookError::Unsafe(format!(
                "statefulset {} is a child of Database {} but not one opshooks builds (that is {}); nothing is changed: remove its owner reference or delete it by hand",
                other.metadata.name.as_deref().unwrap_or_default(),
                name(db),
                name(db)
            )));
        }
        Ok(Observed {
            statefulset: statefulsets.pop(),
            jobs: req
                .children
                .of::<Job>()?
                .into_iter()
                .filter_map(|j| Some((j.metadata.name.clone()?, j)))
                .collect(),
            secrets: req
                .children
                .of::<Secret>()?
                .into_iter()
                .filter_map(|s| Some((s.metadata.name.clone()?, s)))
                .collect(),
            cron_job: req.children.of::<CronJob>()?.into_iter().next(),
            pods: req.related.of::<ObservedPod>()?,
            volumes: req.related.of::<PersistentVolumeClaim>()?,
        })
    }

    /// The major the StatefulSet runs: the data directory its postgres
    /// container uses (`PGDATA`, `.../pg16`), else that container's image
    /// tag, else, as a last hint, the version annotation. `None` without a
    /// StatefulSet or when none of them names a major.
    pub fn running(&self) -> Option<Major> {
        let sts = self.statefulset.as_ref()?;
        let postgres = sts
            .spec
            .as_ref()?
            .template
            .spec
            .as_ref()
            .and_then(|p| p.containers.iter().find(|c| c.name == "postgres"));
        let from_pgdata = postgres
            .and_then(|c| c.env.as_ref())
            .and_then(|env| env.iter().find(|e| e.name == "PGDATA"))
            .and_then(|e| e.value.as_deref())
            .and_then(|dir| dir.rsplit_once("/pg"))
            .and_then(|(_, major)| Major::parse(major));
        let from_image = || {
            let image = postgres?.image.as_deref()?;
            let tag = image.strip_prefix("postgres:")?;
            Major::parse(tag.split(['.', '-', '@']).next()?)
        };
        let from_annotation = || {
            let annotations = sts.metadata.annotations.as_ref()?;
            Major::parse(annotations.get(ANNOTATION_VERSION)?)
        };
        from_pgdata.or_else(from_image).or_else(from_annotation)
    }

    /// The outcome of one of our Jobs, if it exists.
    pub fn job(&self, name: &str) -> Option<RunStatus> {
        self.jobs.get(name).map(backup_job::run_status)
    }

    /// The pod of instance `index`, if it exists and is ready.
    pub fn is_instance_ready(&self, db: &Database, index: u32) -> bool {
        self.instances(db).any(|(i, p)| i == index && is_ready(p))
    }

    /// The StatefulSet's pods with their ordinals: `<name>-<n>` and
    /// labelled as instances (Job pods share the Database label, not these).
    pub fn instances<'a>(
        &'a self,
        db: &'a Database,
    ) -> impl Iterator<Item = (u32, &'a ObservedPod)> + 'a {
        self.pods.iter().filter_map(move |p| {
            let labels = p.metadata.labels.as_ref();
            let is_instance = labels
                .and_then(|l| l.get(crate::operators::common::LABEL_NAME))
                .is_some_and(|app| app == "postgresql");
            let index = p
                .metadata
                .name
                .as_deref()?
                .strip_prefix(name(db))?
                .strip_prefix('-')?
                .parse::<u32>()
                .ok()?;
            is_instance.then_some((index, p))
        })
    }

    /// True when the StatefulSet (if any) is scaled to zero and its
    /// controller has seen that and reports no replica left.
    pub fn is_stopped(&self) -> bool {
        let Some(sts) = &self.statefulset else {
            return true;
        };
        let asked = sts.spec.as_ref().and_then(|s| s.replicas) == Some(0);
        let status = sts.status.as_ref();
        let seen_generation = status.and_then(|s| s.observed_generation);
        asked
            && status.is_some_and(|s| s.replicas == 0)
            && seen_generation >= sts.metadata.generation
    }

    /// Instance pods that exist at all (being deleted or not): the restore
    /// must wait until none is left holding the primary's volume.
    pub fn live_instances(&self, db: &Database) -> usize {
        self.instances(db).count()
    }
}

/// Job names, one place.
pub mod jobs {
    use super::{Database, Major, name};

    /// The initial configuration.
    pub fn init(db: &Database) -> String {
        format!("{}-init", name(db))
    }

    /// The backup taken before upgrading to `to`.
    pub fn pre_upgrade(db: &Database, to: Major) -> String {
        format!("{}-pre-upgrade-{}", name(db), to.as_str())
    }

    /// The restore into `to`.
    pub fn upgrade(db: &Database, to: Major) -> String {
        format!("{}-upgrade-{}", name(db), to.as_str())
    }

    /// The snapshot before deletion.
    pub fn snapshot(db: &Database) -> String {
        format!("{}-snapshot", name(db))
    }
}

/// Where an upgrade stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upgrade {
    /// Running the version asked for.
    None,
    /// Asked for a newer version, but there is no destination for the
    /// pre-upgrade backup.
    NoDestination { to: Major },
    /// Taking the pre-upgrade backup.
    BackingUp { to: Major },
    /// The pre-upgrade backup failed; the old version serves.
    BackupFailed { to: Major },
    /// Stopping the old version so the restore can use its volume.
    Stopping { to: Major },
    /// Restoring into the new version.
    Restoring { to: Major },
    /// The restore failed; the old version serves again.
    RestoreFailed { to: Major },
    /// The restore succeeded; the StatefulSet moves to the new version.
    Starting { to: Major },
}

impl Upgrade {
    /// True while an upgrade moves forward by itself (not stopped by a
    /// failure or a missing destination).
    pub fn in_progress(self) -> bool {
        matches!(
            self,
            Upgrade::BackingUp { .. }
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

/// What to build, decided from the observed state alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The major the data is in now: what the StatefulSet runs.
    pub running: Major,
    /// The major the StatefulSet should run.
    pub version: Major,
    /// The major the upgrade Jobs are for: the spec's, or that of a restore
    /// still running when the spec moved on.
    pub target: Major,
    /// How many instances the StatefulSet should run.
    pub replicas: i32,
    /// Where an upgrade stands.
    pub upgrade: Upgrade,
    /// Whether the initial-configuration Job should exist.
    pub init_job: bool,
    /// Whether the pre-upgrade backup Job should exist.
    pub pre_upgrade_job: bool,
    /// Whether the upgrade's restore Job should exist.
    pub restore_job: bool,
    /// Whether to keep the StatefulSet at all (false only late in finalizing).
    pub keep_statefulset: bool,
    /// Whether deleting the StatefulSet may delete its volumes.
    pub delete_volumes: bool,
    /// Whether the snapshot Job should exist.
    pub snapshot_job: bool,
}

/// Decides the StatefulSet's version and size and which Jobs exist.
pub fn plan(db: &Database, seen: &Observed) -> Result<Plan, HookError> {
    let running = running(db, seen)?;
    let desired = db.spec.version;
    if desired < running {
        return Err(InvalidSpec::new(
            "spec.version",
            format!(
                "{} is older than the running {}; downgrades are refused, restore a backup into a new Database instead",
                desired.as_str(),
                running.as_str()
            ),
        )
        .into());
    }
    Ok(upgrade_plan(db, seen, running))
}

/// The major the data is in. From the StatefulSet when there is one; without
/// it (deleted by hand, or a Database re-created over retained volumes) the
/// version last reported in the status, never the one asked for, which
/// would start an empty cluster beside the data.
fn running(db: &Database, seen: &Observed) -> Result<Major, HookError> {
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

/// Where an upgrade from `running` to the spec's version stands, from the
/// Jobs observed.
fn upgrade_plan(db: &Database, seen: &Observed, running: Major) -> Plan {
    let instances = db.spec.size.instances();
    let init_job = seen.jobs.contains_key(&jobs::init(db)) || seen.is_instance_ready(db, 0);
    let mut plan = Plan {
        running,
        version: running,
        target: db.spec.version,
        replicas: instances,
        upgrade: Upgrade::None,
        init_job,
        pre_upgrade_job: false,
        restore_job: false,
        keep_statefulset: true,
        delete_volumes: false,
        snapshot_job: false,
    };
    // A restore that is still running holds the primary's volume, whatever
    // the spec says now (a newer version asked for, the destination
    // removed): it keeps its Job and every instance stays stopped until it
    // ends. Dropping its Job would start instances on a volume the Job's
    // pod may still be using.
    let in_flight = Major::ALL.into_iter().find(|m| {
        *m > running
            && matches!(
                seen.job(&jobs::upgrade(db, *m)),
                Some(RunStatus::Running | RunStatus::None)
            )
    });
    if let Some(to) = in_flight
        && (to != db.spec.version || db.spec.backup.is_none())
    {
        plan.target = to;
        plan.upgrade = Upgrade::Restoring { to };
        plan.replicas = 0;
        plan.restore_job = true;
        plan.pre_upgrade_job =
            db.spec.backup.is_some() && seen.jobs.contains_key(&jobs::pre_upgrade(db, to));
        return plan;
    }
    let to = db.spec.version;
    if to == running {
        // Upgraded (or never upgraded): the Jobs have done their work and
        // go; the pre-upgrade dump stays in S3, the old data on the volume.
        return plan;
    }
    if db.spec.backup.is_none() {
        plan.upgrade = Upgrade::NoDestination { to };
        plan.pre_upgrade_job = seen.jobs.contains_key(&jobs::pre_upgrade(db, to));
        plan.restore_job = seen.jobs.contains_key(&jobs::upgrade(db, to));
        return plan;
    }
    plan.upgrade = match seen.job(&jobs::pre_upgrade(db, to)) {
        None | Some(RunStatus::Running | RunStatus::None) => Upgrade::BackingUp { to },
        Some(RunStatus::Failed) => Upgrade::BackupFailed { to },
        Some(RunStatus::Succeeded) => match seen.job(&jobs::upgrade(db, to)) {
            // The restore needs the primary's volume: stop every instance
            // first, as the StatefulSet itself reports, not only as far as
            // its pods are seen.
            None if seen.live_instances(db) > 0 || !seen.is_stopped() => Upgrade::Stopping { to },
            None | Some(RunStatus::Running | RunStatus::None) => Upgrade::Restoring { to },
            Some(RunStatus::Failed) => Upgrade::RestoreFailed { to },
            Some(RunStatus::Succeeded) => {
                // The new version's data is complete: move the StatefulSet.
                plan.version = to;
                Upgrade::Starting { to }
            }
        },
    };
    // Kept once observed, so a failed one stays for its logs and is never
    // retried behind the user's back.
    plan.pre_upgrade_job = true;
    plan.restore_job =
        plan.upgrade.is_restoring() || seen.jobs.contains_key(&jobs::upgrade(db, to));
    if matches!(
        plan.upgrade,
        Upgrade::Stopping { .. } | Upgrade::Restoring { .. }
    ) {
        plan.replicas = 0;
    }
    plan
}

/// How far a deletion got, from what is observed and what the status
/// recorded: each step, once done, stays done.
#[derive(Clone, Debug, PartialEq)]
pub struct Deletion {
    /// When the final snapshot succeeded, once it did.
    pub snapshot_time: Option<String>,
}

impl Deletion {
    /// The record carried in the status, completed by what is observed now.
    pub fn observe(db: &Database, seen: &Observed, ctx: &Context) -> Self {
        let recorded = db.status.as_ref().and_then(|s| s.snapshot_time.clone());
        let succeeded = seen
            .jobs
            .get(&jobs::snapshot(db))
            .filter(|j| backup_job::run_status(j) == RunStatus::Succeeded);
        let observed = succeeded.map(|job| {
            job.status
                .as_ref()
                .and_then(|s| s.completion_time.as_ref())
                .map_or_else(|| format_time(ctx.now), |t| format_time(t.0))
        });
        Deletion {
            snapshot_time: recorded.or(observed),
        }
    }
}

/// Decides what finalizing does, on top of the plan: snapshot first under
/// Snapshot, then let the volumes go with the StatefulSet.
///
/// Deletion only moves forward. Nothing the Database had is created again:
/// no StatefulSet (it would bring fresh, empty volumes), no Job but the
/// snapshot (and that only while the data is still served and no snapshot
/// succeeded). The Jobs observed are kept until the Database is gone (a
/// pre-upgrade or restore Job only while the spec still has the destination
/// it is built with), so the snapshot Job a later call reads never
/// disappears with an answer.
pub fn plan_deletion(db: &Database, seen: &Observed, deletion: &Deletion, mut plan: Plan) -> Plan {
    let snapshot_name = jobs::snapshot(db);
    let has = |job: &str| seen.jobs.contains_key(job);
    let to = plan.target;
    // An upgrade that has not reached its restore is abandoned: the old
    // version keeps serving so the snapshot can read it.
    if !has(&jobs::upgrade(db, to)) {
        plan.version = plan.running;
        plan.replicas = db.spec.size.instances();
    }
    // Exactly the Jobs observed: none is started, none that can still be
    // built is dropped.
    plan.init_job = has(&jobs::init(db));
    plan.pre_upgrade_job = has(&jobs::pre_upgrade(db, to));
    plan.restore_job = has(&jobs::upgrade(db, to));
    let exists = seen
        .statefulset
        .as_ref()
        .is_some_and(|s| s.metadata.deletion_timestamp.is_none());
    // The snapshot reads the running primary: not while a restore holds
    // the volume (no instance runs), nor before the primary is ready.
    let serving = exists && plan.replicas > 0 && seen.is_instance_ready(db, 0);
    let snapshotted = deletion.snapshot_time.is_some();
    // Once the StatefulSet was told to delete its volumes, the StatefulSet
    // controller may already have handed some of them to it: switching back
    // half-way could leave a few owned and deleted with it. Stay the course.
    let committed = seen
        .statefulset
        .as_ref()
        .and_then(|s| {
            s.spec
                .as_ref()?
                .persistent_volume_claim_retention_policy
                .as_ref()
        })
        .and_then(|p| p.when_deleted.as_deref())
        == Some("Delete");
    let volumes_may_go = committed
        || match db.spec.deletion_policy {
            DeletionPolicy::Retain => false,
            DeletionPolicy::Delete => true,
            DeletionPolicy::Snapshot => snapshotted,
        };
    plan.snapshot_job = has(&snapshot_name)
        || (db.spec.deletion_policy == DeletionPolicy::Snapshot
            && db.spec.backup.is_some()
            && !snapshotted
            && serving);
    // Under Snapshot the data must stay until the snapshot succeeded.
    let may_remove = db.spec.deletion_policy == DeletionPolicy::Retain || volumes_may_go;
    plan.delete_volumes = volumes_may_go;
    plan.keep_statefulset = exists && (!may_remove || !retention_applied(seen, volumes_may_go));
    plan
}

/// True when the observed StatefulSet already carries the PVC retention
/// policy we want on deletion and its controller has seen it, so deleting
/// it now lets the volumes go (or keeps them) as intended.
fn retention_applied(seen: &Observed, delete_volumes: bool) -> bool {
    let Some(sts) = &seen.statefulset else {
        return true;
    };
    let want = if delete_volumes { "Delete" } else { "Retain" };
    let policy = sts
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref())
        .and_then(|p| p.when_deleted.as_deref())
        .unwrap_or("Retain");
    let seen_generation = sts.status.as_ref().and_then(|s| s.observed_generation);
    policy == want && seen_generation >= sts.metadata.generation
}

/// Desired children and observed status of one Database.
pub fn sync(
    req: &SyncRequest<Database>,
    ctx: &Context,
) -> Result<SyncResponse<DatabaseStatus>, HookError> {
    let db = &req.parent;
    validate(db)?;
    let seen = Observed::from_request(req)?;
    let plan = plan(db, &seen)?;
    answer(db, &seen, plan, None, ctx)
}

/// Deletion: snapshot (under Snapshot), then remove the StatefulSet with
/// its volumes (or without them, under Retain); finalized only when neither
/// is observed any more.
pub fn finalize(
    req: &SyncRequest<Database>,
    ctx: &Context,
) -> Result<SyncResponse<DatabaseStatus>, HookError> {
    let db = &req.parent;
    if let Err(invalid) = validate(db) {
        // Nothing of it is left: an invalid spec must not hold the deletion.
        if req.children.is_empty() && req.related.is_empty() {
            let previous = db.status.as_ref().map(|s| s.conditions.as_slice());
            let status = DatabaseStatus {
                phase: Phase::Deleting,
                conditions: conditions::reconcile(
                    previous.unwrap_or_default(),
                    vec![Observation::new(
                        "Ready",
                        false,
                        "Deleted",
                        format!("{invalid}; nothing of this Database is left, so it is deleted"),
                    )],
                    db.metadata.generation,
                    ctx.now,
                ),
                ..DatabaseStatus::default()
            };
            return Ok(SyncResponse {
                status,
                children: vec![],
                resync_after_seconds: None,
                finalized: Some(true),
            });
        }
        return Err(invalid.into());
    }
    let seen = Observed::from_request(req)?;
    // A downgrade asked for while deleting must not block the deletion: the
    // plan keeps the running version.
    let base = match plan(db, &seen) {
        Err(HookError::Invalid(_)) => upgrade_plan(db, &seen, running(db, &seen)?),
        other => other?,
    };
    let deletion = Deletion::observe(db, &seen, ctx);
    let plan = plan_deletion(db, &seen, &deletion, base);
    answer(db, &seen, plan, Some(&deletion), ctx)
}

/// The answer from the plan; `deletion` is how far a deletion got, `None`
/// when not finalizing.
fn answer(
    db: &Database,
    seen: &Observed,
    plan: Plan,
    deletion: Option<&Deletion>,
    ctx: &Context,
) -> Result<SyncResponse<DatabaseStatus>, HookError> {
    let finalizing = deletion.is_some();
    let built = children::build(db, seen, &plan, ctx)?;
    let status = status(db, seen, &plan, deletion, ctx);
    let clean = seen.statefulset.is_none() && seen.volumes.is_empty();
    let finalized = finalizing && !plan.keep_statefulset && clean;
    let waiting = finalizing && !finalized || plan.upgrade.in_progress();
    Ok(SyncResponse {
        status,
        children: sorted_children(built),
        resync_after_seconds: waiting.then_some(WAIT_SECONDS),
        finalized: finalizing.then_some(finalized),
    })
}

/// The status from the observed state and the plan made from it.
pub fn status(
    db: &Database,
    seen: &Observed,
    plan: &Plan,
    deletion: Option<&Deletion>,
    ctx: &Context,
) -> DatabaseStatus {
    let finalizing = deletion.is_some();
    let sts_status = seen.statefulset.as_ref().and_then(|s| s.status.as_ref());
    let replicas = sts_status.map_or(0, |s| s.replicas);
    let ready_replicas = sts_status.and_then(|s| s.ready_replicas).unwrap_or(0);
    let instances = db.spec.size.instances();
    let init = seen.job(&jobs::init(db));
    let upgrading = plan.upgrade.in_progress();
    let upgrade_failed = matches!(
        plan.upgrade,
        Upgrade::BackupFailed { .. } | Upgrade::RestoreFailed { .. }
    );
    let primary_ready = seen.is_instance_ready(db, 0);

    let initialized = match init {
        Some(RunStatus::Succeeded) => Observation::new(
            "Initialized",
            true,
            "Initialized",
            format!("database {:?} and its user are in place", database_name(db)),
        ),
        Some(RunStatus::Failed) => Observation::new(
            "Initialized",
            false,
            "InitFailed",
            format!(
                "job {} failed; see kubectl logs job/{}",
                jobs::init(db),
                jobs::init(db)
            ),
        ),
        Some(_) => Observation::new(
            "Initialized",
            false,
            "Initializing",
            format!("job {} is running", jobs::init(db)),
        ),
        None => Observation::new(
            "Initialized",
            false,
            "WaitingForPrimary",
            "the initial configuration runs once the primary is ready",
        ),
    };
    let phase = if finalizing {
        Phase::Deleting
    } else if upgrading {
        Phase::Upgrading
    } else if seen.statefulset.is_none() || (init.is_none() && !primary_ready) {
        Phase::Creating
    } else if init != Some(RunStatus::Succeeded) {
        if init == Some(RunStatus::Failed) {
            Phase::Degraded
        } else {
            Phase::Initializing
        }
    } else if ready_replicas >= instances && replicas == instances && !upgrade_failed {
        Phase::Running
    } else {
        Phase::Degraded
    };
    let ready = phase == Phase::Running;
    let leftover: Vec<String> = seen
        .volumes
        .iter()
        .filter_map(|v| v.metadata.name.clone())
        .collect();
    let ready_condition = if finalizing && seen.statefulset.is_none() && !leftover.is_empty() {
        Observation::new(
            "Ready",
            false,
            "WaitingForVolumes",
            format!(
                "waiting for volumes {} to be deleted; a volume the StatefulSet never owned (scaled away, never ready) must be deleted by hand",
                leftover.join(", ")
            ),
        )
    } else if ready {
        Observation::new(
            "Ready",
            true,
            "Running",
            format!("{ready_replicas} of {instances} instances are ready"),
        )
    } else {
        Observation::new(
            "Ready",
            false,
            "NotReady",
            format!("phase {phase:?}: {ready_replicas} of {instances} instances are ready"),
        )
    };
    let backup_scheduled = match &db.spec.backup {
        Some(b) if b.enabled => match &seen.cron_job {
            Some(_) => Observation::new(
                "BackupScheduled",
                true,
                "Scheduled",
                format!(
                    "backups run on schedule {:?}",
                    b.schedule.as_deref().unwrap_or_default()
                ),
            ),
            None => Observation::new(
                "BackupScheduled",
                false,
                "CronJobPending",
                "the backup CronJob is being created",
            ),
        },
        _ => Observation::new(
            "BackupScheduled",
            false,
            "Disabled",
            "spec.backup.enabled is false",
        ),
    };
    let upgrading_condition = match plan.upgrade {
        Upgrade::None => Observation::new(
            "Upgrading",
            false,
            "UpToDate",
            format!("running PostgreSQL {}", plan.version.as_str()),
        ),
        Upgrade::NoDestination { to } => Observation::new(
            "Upgrading",
            false,
            "NoBackupDestination",
            format!(
                "upgrading to {} needs a pre-upgrade backup: set spec.backup.destination; {} keeps running",
                to.as_str(),
                plan.version.as_str()
            ),
        ),
        Upgrade::BackingUp { to } => Observation::new(
            "Upgrading",
            true,
            "BackingUp",
            format!(
                "job {} takes the pre-upgrade backup",
                jobs::pre_upgrade(db, to)
            ),
        ),
        Upgrade::BackupFailed { to } => Observation::new(
            "Upgrading",
            false,
            "PreUpgradeBackupFailed",
            format!(
                "job {} failed; {} keeps running; delete the job to retry",
                jobs::pre_upgrade(db, to),
                plan.version.as_str()
            ),
        ),
        Upgrade::Stopping { to } => Observation::new(
            "Upgrading",
            true,
            "Stopping",
            format!(
                "stopping {} so job {} can restore into {}",
                plan.version.as_str(),
                jobs::upgrade(db, to),
                to.as_str()
            ),
        ),
        Upgrade::Restoring { to } => Observation::new(
            "Upgrading",
            true,
            "Restoring",
            format!(
                "job {} restores the pre-upgrade backup into {}",
                jobs::upgrade(db, to),
                to.as_str()
            ),
        ),
        Upgrade::Starting { to } => Observation::new(
            "Upgrading",
            true,
            "Starting",
            format!("the restore into {} succeeded; starting it", to.as_str()),
        ),
        Upgrade::RestoreFailed { to } => Observation::new(
            "Upgrading",
            false,
            "UpgradeFailed",
            format!(
                "job {} failed; {} serves again with its data untouched; delete the job to retry",
                jobs::upgrade(db, to),
                plan.version.as_str()
            ),
        ),
    };
    let mut observations = vec![
        ready_condition,
        initialized,
        backup_scheduled,
        upgrading_condition,
    ];
    if let Some(deletion) = deletion {
        observations.push(snapshotted(db, seen, deletion));
    }
    let previous = db
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    DatabaseStatus {
        phase,
        ready,
        endpoint: Some(endpoint(db)),
        // Carried over while the StatefulSet is missing: the status is where
        // the major the volumes hold is remembered (see `running`).
        version: seen
            .running()
            .or_else(|| reported_version(db))
            .map(|m| m.as_str().to_string()),
        replicas,
        ready_replicas,
        last_backup_time: seen
            .cron_job
            .as_ref()
            .and_then(|c| c.status.as_ref()?.last_successful_time.as_ref())
            .map(|t| format_time(t.0)),
        snapshot_time: deletion.and_then(|d| d.snapshot_time.clone()),
        conditions: conditions::reconcile(previous, observations, db.metadata.generation, ctx.now),
        observed_generation: None,
    }
}

/// While deleting: whether the data was snapshotted, or why not yet.
fn snapshotted(db: &Database, seen: &Observed, deletion: &Deletion) -> Observation {
    let job = jobs::snapshot(db);
    let condition = |status: ConditionStatus, reason, message: String| {
        Observation::new("Snapshotted", status, reason, message)
    };
    match db.spec.deletion_policy {
        DeletionPolicy::Retain => condition(
            ConditionStatus::False,
            "Retained",
            "deletionPolicy Retain: the volumes are kept".into(),
        ),
        DeletionPolicy::Delete => condition(
            ConditionStatus::False,
            "NotRequested",
            "deletionPolicy Delete: no snapshot".into(),
        ),
        DeletionPolicy::Snapshot => match (&deletion.snapshot_time, seen.job(&job)) {
            (Some(at), _) => condition(
                ConditionStatus::True,
                "Snapshotted",
                format!("job {job} stored the final snapshot at {at}"),
            ),
            (None, Some(RunStatus::Failed)) => condition(
                ConditionStatus::False,
                "SnapshotFailed",
                format!(
                    "job {job} failed; nothing is deleted; fix the cause and delete the job to retry, or set deletionPolicy Retain"
                ),
            ),
            (None, None) if seen.statefulset.is_some() && !seen.is_instance_ready(db, 0) => {
                condition(
                    ConditionStatus::Unknown,
                    "WaitingForPrimary",
                    format!(
                        "job {job} takes the final snapshot once the primary is ready; nothing is deleted meanwhile"
                    ),
                )
            }
            (None, None) if seen.statefulset.is_none() => {
                let volumes: Vec<&str> = seen
                    .volumes
                    .iter()
                    .filter_map(|v| v.metadata.name.as_deref())
                    .collect();
                condition(
                    ConditionStatus::False,
                    "NothingToSnapshot",
                    if volumes.is_empty() {
                        "the StatefulSet is gone and no volume is left: nothing to snapshot".into()
                    } else {
                        format!(
                            "the StatefulSet is gone and no snapshot is recorded; nothing is created again while deleting; volumes {} go with the StatefulSet's retention policy, or by hand once copied",
                            volumes.join(", ")
                        )
                    },
                )
            }
            _ => condition(
                ConditionStatus::Unknown,
                "SnapshotRunning",
                format!("job {job} takes the final snapshot"),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn db(version: &str, policy: &str) -> Database {
        serde_json::from_value(json!({
            "metadata": {"name": "orders", "namespace": "prod"},
            "spec": {"version": version, "size": "medium", "storage": {"size": "1Gi"}, "deletionPolicy": policy,
                     "backup": {"destination": {"s3Bucket": "b"}}}
        }))
        .unwrap()
    }

    fn job(state: &str) -> Job {
        let status = match state {
            "Running" => json!({"active": 1}),
            s => json!({"conditions": [{"type": s, "status": "True"}]}),
        };
        serde_json::from_value(json!({"metadata": {"name": "x"}, "status": status})).unwrap()
    }

    fn running(version: &str) -> Observed {
        let sts: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "orders", "annotations": {ANNOTATION_VERSION: version}},
            "spec": {"selector": {}, "template": {}}
        }))
        .unwrap();
        Observed {
            statefulset: Some(sts),
            ..Observed::default()
        }
    }

    /// `running`, scaled to zero, its controller reporting no replica left.
    fn stopped(version: &str) -> Observed {
        let mut seen = running(version);
        let sts = seen.statefulset.as_mut().unwrap();
        sts.metadata.generation = Some(2);
        sts.spec.as_mut().unwrap().replicas = Some(0);
        sts.status =
            Some(serde_json::from_value(json!({"replicas": 0, "observedGeneration": 2})).unwrap());
        seen
    }

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
                plan.upgrade,
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
        assert_eq!(plan.upgrade, Upgrade::Stopping { to: Major::V17 });
    }

    /// `running`, with instance 0 up and ready.
    fn serving(version: &str) -> Observed {
        let mut seen = running(version);
        seen.pods = vec![serde_json::from_value(json!({
            "metadata": {"name": "orders-0", "labels": {"app.kubernetes.io/name": "postgresql"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()];
        seen
    }

    #[test]
    fn upgrade_steps() {
        let d = db("17", "Delete");
        struct Case {
            reason: &'static str,
            jobs: Vec<(&'static str, &'static str)>,
            pods: usize,
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
            seen.pods = (0..case.pods)
                .map(|i| {
                    serde_json::from_value(json!({"metadata": {"name": format!("orders-{i}"), "labels": {"app.kubernetes.io/name": "postgresql"}}}))
                        .unwrap()
                })
                .collect();
            let plan = plan(&d, &seen).unwrap();
            assert_eq!(plan.upgrade, case.want, "{}", case.reason);
            assert_eq!(plan.version, case.want_version, "{}", case.reason);
            assert_eq!(plan.replicas, case.want_replicas, "{}", case.reason);
        }
    }

    #[test]
    fn downgrades_are_refused() {
        let err = plan(&db("15", "Delete"), &running("16")).unwrap_err();
        assert!(
            matches!(&err, HookError::Invalid(e) if e.field == "spec.version"),
            "{err:?}"
        );
    }

    fn not_yet() -> Deletion {
        Deletion {
            snapshot_time: None,
        }
    }

    #[test]
    fn deletion_keeps_data_until_allowed() {
        let seen = serving("16");
        let base = plan(&db("16", "Snapshot"), &seen).unwrap();
        let snapshot = plan_deletion(&db("16", "Snapshot"), &seen, &not_yet(), base.clone());
        assert!(snapshot.snapshot_job && snapshot.keep_statefulset && !snapshot.delete_volumes);
        let mut done = serving("16");
        done.jobs.insert("orders-snapshot".into(), job("Complete"));
        let record = Deletion::observe(&db("16", "Snapshot"), &done, &Context::fixed());
        let after = plan_deletion(&db("16", "Snapshot"), &done, &record, base.clone());
        assert!(
            after.delete_volumes,
            "after the snapshot the volumes may go"
        );
        assert!(
            after.keep_statefulset,
            "but only once the StatefulSet carries whenDeleted=Delete"
        );
        assert!(after.snapshot_job, "the finished snapshot Job is kept");
        let idle = plan_deletion(
            &db("16", "Snapshot"),
            &running("16"),
            &not_yet(),
            base.clone(),
        );
        assert!(
            !idle.snapshot_job && idle.keep_statefulset,
            "no snapshot before the primary serves; nothing goes meanwhile"
        );
        let retain = plan_deletion(&db("16", "Retain"), &seen, &not_yet(), base);
        assert!(!retain.delete_volumes);
    }

    /// Issue 8: once the StatefulSet and the snapshot Job were gone, the
    /// next finalize call desired both again: new empty volumes, and a
    /// snapshot of the empty database uploaded as the newest dump.
    #[test]
    fn regression_deletion_never_creates_the_statefulset_or_a_done_snapshot_again() {
        struct Case {
            reason: &'static str,
            policy: &'static str,
            statefulset: bool,
            jobs: Vec<(&'static str, &'static str)>,
            recorded: bool,
            want_statefulset: bool,
            want_snapshot_job: bool,
        }
        let cases = [
            Case {
                reason: "StatefulSet and snapshot Job gone, snapshot recorded",
                policy: "Snapshot",
                statefulset: false,
                jobs: vec![],
                recorded: true,
                want_statefulset: false,
                want_snapshot_job: false,
            },
            Case {
                reason: "StatefulSet and snapshot Job gone, nothing recorded (status lost)",
                policy: "Snapshot",
                statefulset: false,
                jobs: vec![],
                recorded: false,
                want_statefulset: false,
                want_snapshot_job: false,
            },
            Case {
                reason: "snapshot Job gone after success, StatefulSet still there",
                policy: "Snapshot",
                statefulset: true,
                jobs: vec![],
                recorded: true,
                want_statefulset: true,
                want_snapshot_job: false,
            },
            Case {
                reason: "failed snapshot Job deleted by the user: retry",
                policy: "Snapshot",
                statefulset: true,
                jobs: vec![],
                recorded: false,
                want_statefulset: true,
                want_snapshot_job: true,
            },
            Case {
                reason: "Delete: StatefulSet gone stays gone",
                policy: "Delete",
                statefulset: false,
                jobs: vec![("orders-init", "Complete")],
                recorded: false,
                want_statefulset: false,
                want_snapshot_job: false,
            },
            Case {
                reason: "Retain: StatefulSet gone stays gone",
                policy: "Retain",
                statefulset: false,
                jobs: vec![],
                recorded: false,
                want_statefulset: false,
                want_snapshot_job: false,
            },
        ];
        for case in cases {
            let d = db("16", case.policy);
            let mut seen = if case.statefulset {
                serving("16")
            } else {
                Observed::default()
            };
            seen.jobs = case
                .jobs
                .iter()
                .map(|(n, s)| (n.to_string(), job(s)))
                .collect();
            let deletion = Deletion {
                snapshot_time: case.recorded.then(|| "2026-01-01T00:00:00Z".to_string()),
            };
            let mut parent = d.clone();
            parent.status = Some(DatabaseStatus {
                version: Some("16".into()),
                ..DatabaseStatus::default()
            });
            let base = plan(&parent, &seen).unwrap();
            let got = plan_deletion(&parent, &seen, &deletion, base);
            assert_eq!(
                got.keep_statefulset, case.want_statefulset,
                "{}",
                case.reason
            );
            assert_eq!(got.snapshot_job, case.want_snapshot_job, "{}", case.reason);
            assert!(
                !got.init_job || seen.jobs.contains_key("orders-init"),
                "{}",
                case.reason
            );
        }
    }

    #[test]
    fn a_recorded_snapshot_stays_recorded() {
        let mut d = db("16", "Snapshot");
        d.status = Some(DatabaseStatus {
            snapshot_time: Some("2026-01-01T00:00:00Z".into()),
            ..DatabaseStatus::default()
        });
        let got = Deletion::observe(&d, &Observed::default(), &Context::fixed());
        assert_eq!(got.snapshot_time.as_deref(), Some("2026-01-01T00:00:00Z"));
        let mut failed = Observed::default();
        failed.jobs.insert("orders-snapshot".into(), job("Failed"));
        let got = Deletion::observe(&db("16", "Snapshot"), &failed, &Context::fixed());
        assert_eq!(got.snapshot_time, None, "a failed snapshot records nothing");
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
        assert_eq!(upgrade.upgrade, Upgrade::BackingUp { to: Major::V17 });
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
