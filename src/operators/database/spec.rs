//! The Database custom resource: its spec and status types, the names
//! derived from it, the facts it writes that others read back (the data
//! directory of a major, the claim of an instance), and the checks the
//! schema cannot make. The bottom of the Database's stack: it imports
//! nothing of the Database but the rules of `spec.postgresql`
//! (`parameters`) and the placement settings (leaves), which import nothing of it.

// The CRD structs are re-exported by database.rs, but kube's KubeSchema
// derive emits them again, and unreachable_pub then misses the re-export.
#![allow(unreachable_pub)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::parameters;
pub use super::placement::{Affinity, TopologySpreadConstraint};
use crate::operators::resources;

mod backup;
mod bootstrap;
mod status;
pub use backup::{Archive, DatabaseBackup};
pub use bootstrap::{ArchiveRecovery, Bootstrap, before_stamp, bootstrap_destination};
pub use status::{
    ArchiveProgress, DatabaseStatus, InstanceStatus, LastFailover, Phase, RestoredFrom,
    StoredBaseBackup, VerifiedBaseBackup,
};

/// Label on every object of a Database, naming it; customize selects by it.
pub const LABEL_DATABASE: &str = "opshooks.io/database";
/// Annotation on the StatefulSet naming the PostgreSQL major it runs: a
/// hint for people. The operator reads the major from the pod template
/// (where the data lives and which image runs it), which anyone editing an
/// annotation cannot change by accident.
pub const ANNOTATION_VERSION: &str = "opshooks.io/postgres-version";
/// Annotation on the StatefulSet: a hash of the pod template it was
/// written with. A template about to change (a new image, new resources)
/// is written with the partition that keeps the primary on the old one.
pub const TEMPLATE_HASH: &str = "opshooks.io/template-hash";
/// The label the StatefulSet controller puts on each pod: the revision of
/// the template it was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";
/// The longest Database name: it prefixes Jobs (`<name>-pre-upgrade-17`)
/// and the backup CronJob's jobs, which must fit in 63.
pub const MAX_NAME: usize = 40;
/// The PostgreSQL port.
pub const PORT: i32 = 5432;
/// The StatefulSet's volume claim template: instance `i`'s volume is the
/// claim `data-<name>-<i>`.
pub const VOLUME: &str = "data";

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
    printcolumn(name = "Primary", type_ = "string", json_path = ".status.currentPrimary"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.readyInstances"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Last Backup", type_ = "date", json_path = ".status.lastBackupTime"),
    printcolumn(name = "Recoverable From", type_ = "date", json_path = ".status.lastVerifiedBaseBackup.recoverableFrom"),
    printcolumn(name = "Last Archived", type_ = "date", json_path = ".status.archive.lastArchivedTime"),
    printcolumn(name = "Wanted", type_ = "string", json_path = ".spec.version", priority = "1"),
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".status.endpoint", priority = "1"),
    printcolumn(name = "Verified", type_ = "string", json_path = ".status.conditions[?(@.type==\"BackupVerified\")].status", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 40").message("metadata.name must be at most 40 characters, so that job names fit in 63")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.replication) || self.replication != 'synchronous' || (has(self.size) && self.size != 'small')").message("spec.replication synchronous needs a standby to confirm each commit, and size small runs one instance; choose size medium or large, or replication asynchronous"),
    validation = Rule::new("self.deletionPolicy != 'Snapshot' || has(self.backup)").message("deletionPolicy Snapshot needs spec.backup.destination to store the snapshot; add one, or choose Retain or Delete"),
    validation = Rule::new("self.version >= oldSelf.version").message("spec.version cannot go down: downgrades are refused; restore a backup into a new Database (spec.bootstrap) instead"),
    validation = Rule::new("has(self.credentialsSecret) == has(oldSelf.credentialsSecret) && (!has(self.credentialsSecret) || self.credentialsSecret == oldSelf.credentialsSecret)").message("spec.credentialsSecret cannot change once created: the database's user keeps the password it was created with"),
    validation = Rule::new("has(self.databaseName) == has(oldSelf.databaseName) && (!has(self.databaseName) || self.databaseName == oldSelf.databaseName)").message("spec.databaseName cannot change once created"),
    validation = Rule::new("has(self.user) == has(oldSelf.user) && (!has(self.user) || self.user == oldSelf.user)").message("spec.user cannot change once created"),
    validation = Rule::new("has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || self.bootstrap == oldSelf.bootstrap)").message("spec.bootstrap cannot change once created: it says where the data came from"),
    validation = Rule::new("!has(self.bootstrap) || has(self.bootstrap.destination) || has(self.backup)").message("spec.bootstrap needs a destination to read the dump from: set spec.bootstrap.destination or spec.backup.destination"),
    validation = Rule::new("!has(self.bootstrap) || !has(self.bootstrap.archive) || (has(self.backup) && has(self.backup.archive))").message("spec.bootstrap.archive needs spec.backup.archive: its sidecar fetches the WAL the recovery replays, from spec.backup.destination"),
    validation = Rule::new("!has(self.backup) || !has(self.backup.archive) || !has(self.backup.archive.retentionDays) || has(self.backup.archive.verifySchedule)").message("spec.backup.archive.retentionDays needs spec.backup.archive.verifySchedule: old base backups are deleted only right after a verification run proved the newest one restores")
)]
pub struct DatabaseSpec {
    /// The PostgreSQL major version: 14, 15, 16, 17 or 18. Raising it upgrades
    /// the database (pre-upgrade backup, then restore into the new version);
    /// lowering it is refused.
    pub version: Major,
    /// small: 1 instance, 500m CPU and 512Mi memory; medium: 2 instances,
    /// 1 CPU and 1Gi; large: 3 instances, 2 CPUs and 2Gi. The first instance
    /// is the primary, the others streaming standbys. `resources` replaces
    /// the CPU and memory; the size still sets the number of instances.
    #[serde(default)]
    pub size: Size,
    /// The CPU and memory of each instance (requests and limits), in place
    /// of the size's. Changing them rolls the standbys first, switches over
    /// to an updated one, then updates the old primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources::schema")]
    pub resources: Option<ResourceRequirements>,
    /// PostgreSQL's own settings: server parameters and pg_hba.conf lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgresql: Option<Postgresql>,
    /// Where the instances' TLS certificate comes from. Every instance
    /// serves TLS and refuses connections over TCP without it, whatever
    /// this says; when omitted, each instance makes its own self-signed
    /// certificate (encrypted, but clients cannot verify the server:
    /// sslmode=require). Changing it rolls the instances, standbys first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
    /// The volume of each instance. Its size may grow (the claims are
    /// expanded where their StorageClass allows it), never shrink; its
    /// StorageClass is fixed once created.
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
    /// Where a new Database's data comes from: a dump restored before
    /// anyone can write. Only a Database that never held data restores;
    /// fixed once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<Bootstrap>,
    /// When a standby takes over from a primary that stopped being ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverSpec>,
    /// How commits wait for the standbys: asynchronous (the default: a
    /// failover can lose the last commits the primary acknowledged) or
    /// synchronous (every commit waits until one standby has it: no commit
    /// is lost, writes wait while no standby is up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<Replication>,
    /// The PostgreSQL image every instance and every Job that runs
    /// PostgreSQL's tools uses: a pinned tag or digest, a private registry,
    /// an image with extensions (PostGIS). `postgres:<version>` when
    /// omitted. A tag that starts with a major (`16`, `16.4`,
    /// `16-3.4-alpine`) must name `spec.version`'s. Changing it within a
    /// major rolls the standbys first, switches over to an updated one,
    /// then updates the old primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub image_name: Option<String>,
    /// Secrets (of type kubernetes.io/dockerconfigjson, in this namespace)
    /// to pull `imageName` with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub image_pull_secrets: Vec<LocalSecret>,
    /// Which nodes run the instances and how they keep apart: by default
    /// each instance prefers a node without another instance of this
    /// Database (pod anti-affinity, weight 100, over
    /// kubernetes.io/hostname); `podAntiAffinityType: required` makes it a
    /// rule. Changing it rolls the instances, standbys first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// How the instances spread over zones or other topologies, each
    /// constraint counting this Database's instances. When omitted: over
    /// topology.kubernetes.io/zone, maxSkew 1, ScheduleAnyway (a
    /// preference, so a single zone or nodes without the label change
    /// nothing); `[]` for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8))]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// A PodDisruptionBudget (maxUnavailable 1) over the instances of a
    /// Database of two or more, so a node drain evicts one instance at a
    /// time and never the primary and its standbys at once; true when
    /// omitted. A single instance gets none (its budget could only make
    /// every drain wait for ever). False: no budget, for development
    /// Databases whose nodes must drain without waiting.
    #[serde(default, rename = "enablePDB", skip_serializing_if = "Option::is_none")]
    pub enable_pdb: Option<bool>,
    /// PostgreSQL's metrics: prometheus-community's postgres_exporter
    /// beside each instance, and optionally a PodMonitor. Turning it on or
    /// off rolls the instances, standbys first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitoring: Option<Monitoring>,
}

/// PostgreSQL's metrics (docs/monitoring.md).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Monitoring {
    /// Runs postgres_exporter beside each instance, serving PostgreSQL's
    /// metrics on port 9187 (`metrics`), connected over the pod's loopback
    /// as the role `opshooks_monitor`, a member of `pg_monitor` (a Job
    /// creates it on the primary; its password is in the Secret
    /// `<name>-monitor`).
    #[serde(default)]
    pub enabled: bool,
    /// Also a Prometheus Operator `PodMonitor` `<name>` over the instances'
    /// `metrics` port, labelled with the Database's own labels (so
    /// `kubectl label` on the Database selects it for a Prometheus). Needs
    /// the chart's `operators.database.podMonitor` (where the Prometheus
    /// Operator's CRDs are installed); without it the `Monitoring`
    /// condition says so and the exporter runs without one.
    #[serde(default)]
    pub pod_monitor: bool,
    /// The exporter's image; `quay.io/prometheuscommunity/postgres-exporter:v0.17.1`
    /// when omitted (a mirror of it in a private registry, with
    /// `spec.imagePullSecrets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub image: Option<String>,
    /// Queries of your own, in postgres_exporter's `queries.yaml` format,
    /// from a ConfigMap's key (`--extend.query-path`, which the exporter's
    /// maintainers mark deprecated but still serve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<ConfigMapKey>,
}

/// A key of a ConfigMap in the Database's namespace.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct ConfigMapKey {
    /// The ConfigMap's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key; `queries.yaml` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
}

/// PostgreSQL's own settings.
#[derive(Clone, Debug, Default, Deserialize, Serialize, KubeSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = parameters::owned_rule(),
    validation = Rule::new("!has(self.pgHba) || self.pgHba.all(l, !(l.startsWith('hostnossl ') || l.startsWith('hostnossl\\t')) || l.contains('reject'))").message("spec.postgresql.pgHba: a hostnossl line can never match but with reject (the operator refuses every connection without TLS before it); write hostssl (or host)"),
    validation = Rule::new("!has(self.parameters) || !('wal_level' in self.parameters) || self.parameters['wal_level'] in ['replica', 'logical']").message("spec.postgresql.parameters.wal_level must be replica or logical: the standbys stream the primary's WAL")
)]
pub struct Postgresql {
    /// Server parameters, name to value (`work_mem: 64MB`,
    /// `shared_preload_libraries: pg_stat_statements`), passed to every
    /// instance as `-c name=value`. Those the operator sets or relies on
    /// (listen_addresses, port, wal_level below replica, hot_standby,
    /// synchronous_standby_names, primary_conninfo, archive and recovery
    /// settings, ssl and its files: see spec.tls, ...) are refused, naming why. A change rolls
    /// out with restarts, standbys first. max_connections,
    /// max_prepared_transactions, max_locks_per_transaction,
    /// max_wal_senders and max_worker_processes are not lowered while the
    /// Database has standbys (a standby cannot replay a primary with a
    /// higher value): the instances keep what they run, and the
    /// ParametersApplied condition says so.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = parameters::MAX_PARAMETERS))]
    pub parameters: BTreeMap<String, String>,
    /// Lines of pg_hba.conf (`hostssl all all 10.0.0.0/8 scram-sha-256`,
    /// `host all all 0.0.0.0/0 reject`), tried in order after the
    /// operator's own rules (local connections; no TCP connection without
    /// TLS; the replicator, the superuser postgres) and before the last
    /// one, `hostssl all all all scram-sha-256`: a `host` line matches
    /// connections over TLS only. hostgssenc, and hostnossl but with
    /// reject, are refused: such a line could never match.
    /// A change rolls out with restarts, standbys first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = parameters::MAX_HBA_LINES), inner(length(min = 1, max = parameters::MAX_HBA_LINE), pattern(r"^[ \t]*(local|host|hostssl|hostnossl|hostnogssenc)[ \t]")))]
    pub pg_hba: Vec<String>,
}

/// Where the instances' TLS certificate comes from.
#[derive(Clone, Debug, Default, Deserialize, Serialize, KubeSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.secretName) && has(self.issuerRef))").message("spec.tls: give secretName or issuerRef, not both: the instances serve one certificate"))]
pub struct Tls {
    /// A Secret in this namespace (type kubernetes.io/tls) holding the
    /// server's certificate (`tls.crt`), its key (`tls.key`) and the CA
    /// that signed it (`ca.crt`). The certificate must name the
    /// read-write and read-only Services (`<name>.<namespace>.svc`,
    /// `<name>-ro.<namespace>.svc`) and the instances
    /// (`<name>-<i>.<name>-headless.<namespace>.svc`): clients verify it
    /// (sslmode=verify-full). A renewed certificate is served from each
    /// instance's next start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
    /// A cert-manager issuer: the operator makes a `Certificate`
    /// `<name>-tls` (its Secret of the same name) for the Services and
    /// every instance, and the instances serve it as they serve
    /// `secretName`'s. The issuer must fill `ca.crt` and keep its CA
    /// across renewals (a CA or Vault issuer; not SelfSigned: a roll onto
    /// a new CA stops half way). Needs the chart's
    /// `operators.database.certManager`. Instances start once cert-manager
    /// has written the Secret; each later issue (a renewal) rolls them,
    /// standbys first, as any template change does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_ref: Option<IssuerRef>,
}

/// A cert-manager issuer, as a `Certificate`'s `issuerRef` names it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct IssuerRef {
    /// The issuer's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// `Issuer` (in this namespace; when omitted) or `ClusterIssuer`, or an
    /// external issuer's kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(r"^[A-Z][A-Za-z0-9]*$"))]
    pub kind: Option<String>,
    /// The issuer's API group; cert-manager.io when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub group: Option<String>,
}

/// A Secret in the Database's namespace, by name.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct LocalSecret {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// When a standby takes over.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// Seconds the primary must stay not ready before a standby takes over
    /// (3 when omitted). Shorter fails over faster; longer rides out a
    /// slow restart without a change of primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub delay: Option<u32>,
    /// How far behind the primary a standby may replay (a quantity of
    /// WAL, for example 64Mi) and still serve reads and be a failover
    /// candidate; no limit when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub max_standby_lag: Option<String>,
}

/// How commits wait for the standbys.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Replication {
    /// Commits return once the primary has them.
    #[default]
    Asynchronous,
    /// Commits return once the primary and one standby have them
    /// (`synchronous_standby_names = 'ANY 1 ("<name>-0", …)'`, naming the
    /// instances, and `synchronous_commit` on); needs size medium or large.
    Synchronous,
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
    /// PostgreSQL 18.
    #[serde(rename = "18")]
    V18,
}

impl Major {
    /// Every supported major, oldest first.
    pub const ALL: [Major; 5] = [Major::V14, Major::V15, Major::V16, Major::V17, Major::V18];

    /// The newest supported major, the one an end-of-life major is told
    /// to upgrade to.
    pub const NEWEST: Major = Major::ALL[Major::ALL.len() - 1];

    /// The day the PostgreSQL project stopped fixing this major, once it
    /// has: such a major still runs (and upgrades), and the `Upgrading`
    /// condition says so. 14's was 2026-11-12
    /// (postgresql.org/support/versioning).
    pub fn end_of_life(self) -> Option<&'static str> {
        match self {
            Major::V14 => Some("2026-11-12"),
            Major::V15 | Major::V16 | Major::V17 | Major::V18 => None,
        }
    }

    /// The version as written, `16`.
    pub fn as_str(self) -> &'static str {
        match self {
            Major::V14 => "14",
            Major::V15 => "15",
            Major::V16 => "16",
            Major::V17 => "17",
            Major::V18 => "18",
        }
    }

    /// Reads a version as written.
    pub fn parse(text: &str) -> Option<Major> {
        Major::ALL.into_iter().find(|m| m.as_str() == text)
    }

    /// Where this major's cluster lives on a volume mounted at `volume`:
    /// `<volume>/pg16`, so an upgrade builds the new major beside the old.
    pub fn data_dir(self, volume: &str) -> String {
        format!("{volume}/pg{}", self.as_str())
    }

    /// The major whose cluster lives at `dir`, read back from
    /// [`Major::data_dir`]'s name.
    pub fn of_data_dir(dir: &str) -> Option<Major> {
        Major::parse(dir.rsplit_once("/pg")?.1)
    }

    /// The official image of this major.
    pub fn image(self) -> String {
        format!("postgres:{}", self.as_str())
    }

    /// The major an image's tag names, when it starts with one
    /// (`postgres:16`, `registry:5000/postgis/postgis:16-3.4`,
    /// `postgres:16.4-bookworm@sha256:...`); `None` for a tag that names no
    /// major (`latest`, a digest alone). Err with the number when the tag
    /// starts with a major this operator does not run.
    pub fn of_image(image: &str) -> Result<Option<Major>, String> {
        let image = image.split_once('@').map_or(image, |(name, _)| name);
        let last = image.rsplit('/').next().unwrap_or(image);
        let Some((_, tag)) = last.split_once(':') else {
            return Ok(None);
        };
        let number: String = tag.chars().take_while(char::is_ascii_digit).collect();
        let ends = tag[number.len()..].chars().next();
        if number.is_empty() || ends.is_some_and(|c| c != '.' && c != '-' && c != '_') {
            return Ok(None);
        }
        Major::parse(&number).map(Some).ok_or(number)
    }
}

/// The image the spec asks for: `spec.imageName`, or the official image
/// of `spec.version`.
pub fn image(db: &Database) -> String {
    db.spec
        .image_name
        .clone()
        .unwrap_or_else(|| db.spec.version.image())
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
#[x_kube(validation = Rule::new("has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)").message("spec.storage.storageClassName cannot change once created: the claims keep the class they were made with"))]
#[x_kube(validation = Rule::new("!isQuantity(self.size) || !isQuantity(oldSelf.size) || quantity(self.size).compareTo(quantity(oldSelf.size)) >= 0").message("spec.storage.size cannot shrink: a volume only grows; keep the size, or restore a backup into a new Database with a smaller one"))]
pub struct Storage {
    /// The size of each instance's volume, for example 20Gi. Raising it
    /// grows every instance's claim (status condition `StorageResized`).
    #[schemars(
        length(min = 1, max = 32),
        pattern(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")
    )]
    pub size: String,
    /// The StorageClass; the cluster's default when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub storage_class_name: Option<String>,
    /// The kubectl image of the Job that grows the claims when `size`
    /// rises (its command is `kubectl`); rancher/kubectl when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255), pattern(r"^\S+$"))]
    pub resize_image: Option<String>,
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

/// Whether the status shows a condition of this type. A condition shown
/// once is kept answered: one left out would stay as it was last written.
pub fn shows_condition(db: &Database, type_: &str) -> bool {
    db.status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == type_))
}

/// The parent's name.
pub fn name(db: &Database) -> &str {
    db.metadata.name.as_deref().unwrap_or_default()
}

/// The parent's namespace.
pub fn namespace(db: &Database) -> &str {
    db.metadata.namespace.as_deref().unwrap_or("default")
}

/// The application database's name.
pub fn database_name(db: &Database) -> String {
    db.spec
        .database_name
        .clone()
        .unwrap_or_else(|| name(db).to_string())
}

/// Whether every commit waits for a standby.
pub fn is_synchronous(db: &Database) -> bool {
    db.spec.replication == Some(Replication::Synchronous)
}

/// The issuer of `spec.tls`, when the certificate comes from cert-manager.
pub(super) fn issuer(db: &Database) -> Option<&IssuerRef> {
    db.spec.tls.as_ref()?.issuer_ref.as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_tag_names_its_major_when_it_starts_with_one() {
        for (image, want) in [
            ("postgres:16", Ok(Some(Major::V16))),
            ("postgres:16.4-bookworm", Ok(Some(Major::V16))),
            ("registry:5000/postgis/postgis:17-3.5", Ok(Some(Major::V17))),
            ("postgres:15.6@sha256:abcd", Ok(Some(Major::V15))),
            ("postgres:latest", Ok(None)),
            ("postgres@sha256:abcd", Ok(None)),
            ("registry:5000/postgres", Ok(None)),
            ("postgres:16beta", Ok(None)),
            ("postgres:18.1", Ok(Some(Major::V18))),
            ("postgres:13.9", Err("13".to_string())),
            ("postgres:19", Err("19".to_string())),
        ] {
            assert_eq!(Major::of_image(image), want, "{image}");
        }
    }

    #[test]
    fn eighteen_is_the_newest_and_only_fourteen_has_reached_its_end_of_life() {
        assert_eq!(Major::NEWEST, Major::V18);
        assert_eq!(Major::parse("18"), Some(Major::V18));
        let ended: Vec<&str> = Major::ALL
            .into_iter()
            .filter(|m| m.end_of_life().is_some())
            .map(Major::as_str)
            .collect();
        assert_eq!(ended, ["14"]);
    }
}
