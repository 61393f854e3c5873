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
mod plan;
mod status;

use plan::reported_version;
pub use plan::{
    Deletion, Plan, Upgrade, check_volumes, has_generated_credentials, jobs, plan, plan_deletion,
    plan_finalize,
};
pub use status::status;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::backup_job::{self, RunStatus, validate_destination};
use super::validate::{self, InvalidSpec};
use crate::hook::Child;
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
/// The StatefulSet's volume claim template: instance `i`'s volume is the
/// claim `data-<name>-<i>`.
pub const VOLUME: &str = "data";
/// How `clone.sh` begins the termination message of an instance 0 that
/// refuses to start on its volume.
pub const REFUSAL: &str = "opshooks: ";
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

/// The claim holding instance `ordinal`'s volume, as the StatefulSet
/// controller names it; [`Observed::claims`] reads the name back.
pub fn claim_name(db: &Database, ordinal: u32) -> String {
    format!("{VOLUME}-{}-{ordinal}", name(db))
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

/// Asks for this Database's Pods and PersistentVolumeClaims. The claims are
/// asked for under every deletion policy: whether the StatefulSet holds
/// them decides when it may go, and retained claims of an earlier Database
/// of the same name must be seen before a new one starts beside them.
pub fn customize(
    req: &CustomizeRequest<Database>,
    _ctx: &Context,
) -> Result<CustomizeResponse, HookError> {
    let db = &req.parent;
    let labels = BTreeMap::from([(LABEL_DATABASE.to_string(), name(db).to_string())]);
    let ns = db.metadata.namespace.clone();
    Ok(CustomizeResponse {
        related_resources: vec![
            RelatedResourceRule::labelled("v1", "pods", labels.clone(), ns.clone()),
            RelatedResourceRule::labelled("v1", "persistentvolumeclaims", labels, ns),
        ],
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
    /// The claims labelled as this Database's.
    pub volumes: Vec<PersistentVolumeClaim>,
    /// Every observed child, as its group key and name.
    pub children: BTreeSet<(String, String)>,
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
            children: req
                .children
                .names()
                .map(|(group, name)| (group.to_string(), name.to_string()))
                .collect(),
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
        self.instances(db).any(|(i, p)| i == index && p.is_ready())
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

    /// The instances' volumes, `data-<name>-<ordinal>`, with their
    /// ordinals: also those of ordinals the StatefulSet no longer runs.
    pub fn claims<'a>(
        &'a self,
        db: &'a Database,
    ) -> impl Iterator<Item = (u32, &'a PersistentVolumeClaim)> + 'a {
        self.volumes.iter().filter_map(move |c| {
            let ordinal = c
                .metadata
                .name
                .as_deref()?
                .strip_prefix(VOLUME)?
                .strip_prefix('-')?
                .strip_prefix(name(db))?
                .strip_prefix('-')?
                .parse::<u32>()
                .ok()?;
            Some((ordinal, c))
        })
    }

    /// Why instance 0 refuses to start on its volume, as its `clone` init
    /// container left it: the volume holds another major's data.
    pub fn volume_refusal<'a>(&'a self, db: &'a Database) -> Option<&'a str> {
        let (_, pod) = self.instances(db).find(|(i, _)| *i == 0)?;
        let message = pod.init_container_message("clone")?;
        Some(message.strip_prefix(REFUSAL)?.trim())
    }

    /// True when the observed StatefulSet holds `claim`: the claim carries
    /// an owner reference to it (by uid), so deleting the StatefulSet
    /// deletes the claim.
    pub fn is_held(&self, claim: &PersistentVolumeClaim) -> bool {
        let Some(uid) = self
            .statefulset
            .as_ref()
            .and_then(|s| s.metadata.uid.as_deref())
        else {
            return false;
        };
        claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.uid == uid)
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

/// Desired children and observed status of one Database.
pub fn sync(
    req: &SyncRequest<Database>,
    ctx: &Context,
) -> Result<SyncResponse<DatabaseStatus>, HookError> {
    let db = &req.parent;
    validate(db)?;
    let seen = Observed::from_request(req)?;
    check_volumes(db, &seen)?;
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
    let (plan, deletion) = plan_finalize(db, &seen, ctx)?;
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
    let finalized = finalizing && plan.is_finalized(db, seen);
    let waiting = finalizing && !finalized || plan.upgrade.in_progress();
    Ok(SyncResponse {
        status,
        children: Child::sorted(built),
        resync_after_seconds: waiting.then_some(WAIT_SECONDS),
        finalized: finalizing.then_some(finalized),
    })
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
