//! What a Database's request shows, decoded once: the StatefulSet, Jobs,
//! Secrets, backup CronJob, instance pods and volumes, and the facts read
//! from them (the major the StatefulSet runs, which instance is ready,
//! which volume the StatefulSet holds). Decides nothing.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::Metadata;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolumeClaim, Secret, ServiceAccount, Volume,
};
use k8s_openapi::api::rbac::v1::{Role as RbacRole, RoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use super::kinds::{self, Certificate, CertificateRequest, PodMonitor};
use super::names::{
    archive_report_name, backup_cron_name, ca_config_map_name, claim_ordinal, grow_name, jobs,
    pod_ordinal, role_name,
};
use super::spec::issuer;

use super::parameters;
use super::spec::{ANNOTATION_VERSION, Database, Major, TEMPLATE_HASH, name};

use crate::hook::conditions::ConditionStatus;
use crate::hook::{ObservedPod, SyncRequest};
use crate::operator::HookError;
use crate::operators::backup_job::{self, RunStatus};
use crate::operators::report::{self, Holding, InstanceSays, Report, Unreadable};

/// The label the Job controller puts on the pods of a Job, naming it.
const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// What the role ConfigMap says: the designated primary and its epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Role {
    /// The designated primary's pod name.
    pub primary: String,
    /// The epoch of that designation.
    pub epoch: u64,
    /// It says `initialized=true`: the hook wrote that once the Database
    /// was initialized, and writes it ever after.
    pub initialized: bool,
    /// It says `change=switchover`: the designation is a switchover asked
    /// for, whatever asks for one now.
    pub switchover: bool,
}

impl Role {
    /// Reads the role ConfigMap; `None` when it does not say both.
    fn read(map: &ConfigMap) -> Option<Role> {
        let data = map.data.as_ref()?;
        Some(Role {
            primary: data.get("primary")?.clone(),
            epoch: data.get("epoch")?.parse().ok()?,
            initialized: data.get("initialized").is_some_and(|v| v == "true"),
            switchover: data.get("change").is_some_and(|v| v == "switchover"),
        })
    }
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
    /// The backup CronJob, if it exists (not the verification's).
    pub cron_job: Option<CronJob>,
    /// The instances' pods.
    pub pods: Vec<ObservedPod>,
    /// The claims labelled as this Database's.
    pub volumes: Vec<PersistentVolumeClaim>,
    /// Every observed child, as its group key and name: read while
    /// deleting only, so filled only by [`Observed::with_children`].
    pub children: BTreeSet<(String, String)>,
    /// What the role ConfigMap says, if it exists and says it.
    pub role: Option<Role>,
    /// The names of the observed ConfigMaps.
    pub config_maps: BTreeSet<String>,
    /// What the primary's archiver wrote to `<name>-archive-report`, as
    /// written (`archive::report` reads it).
    pub archive_report: Option<BTreeMap<String, String>>,
    /// The cluster's StorageClasses, by name (related objects).
    pub storage_classes: BTreeMap<String, StorageClass>,
    /// The claims the grow Job's Role lets patch, once that Role, its
    /// RoleBinding and ServiceAccount are all observed.
    pub grow_access: Option<BTreeSet<String>>,
    /// cert-manager's Certificates, when the controller manages them
    /// (`None`: the chart does not declare the type).
    pub certificates: Option<Vec<Certificate>>,
    /// Whether the controller manages Prometheus Operator PodMonitors (the
    /// chart declares the type: `operators.database.podMonitor`).
    pub pod_monitors_managed: bool,
    /// cert-manager's CertificateRequests labelled as this Database's
    /// (related objects, asked for only under `spec.tls.issuerRef`).
    pub certificate_requests: Vec<CertificateRequest>,
    /// The certificates the observed `<name>-ca` ConfigMap holds (the CA
    /// bundle, read once: [`kinds::certificates`]).
    pub ca_bundle: Vec<String>,
    /// When this was observed: the call's time ([`Observed::at`]).
    pub now: Timestamp,
}

impl Observed {
    /// True once the initial configuration succeeded, now or earlier: the
    /// Database holds data an instance must never initialize over. The one
    /// definition of "initialized", and sticky: the init Job's success, or
    /// what the hook recorded of it, in the status (`Initialized=True`) or in
    /// the role ConfigMap (`initialized=true`). The Job deleted (by a person
    /// or a TTL) and made again, or one of the two records lost, never turns
    /// it false; each record is only ever written true from this.
    pub fn was_initialized(&self, db: &Database) -> bool {
        self.job(&jobs::init(db)) == Some(RunStatus::Succeeded)
            || self.role.as_ref().is_some_and(|r| r.initialized)
            || db.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Initialized" && c.status == ConditionStatus::True)
            })
    }

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
        let config_maps = req.children.of::<ConfigMap>()?;
        Ok(Observed {
            statefulset: statefulsets.pop(),
            jobs: by_name(req.children.of::<Job>()?),
            secrets: by_name(req.children.of::<Secret>()?),
            cron_job: req
                .children
                .of::<CronJob>()?
                .into_iter()
                .find(|c| c.metadata.name.as_deref() == Some(&backup_cron_name(db))),
            pods: req.related.of::<ObservedPod>()?,
            volumes: req.related.of::<PersistentVolumeClaim>()?,
            children: BTreeSet::new(),
            role: config_maps
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(&role_name(db)))
                .and_then(Role::read),
            ca_bundle: config_maps
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(&ca_config_map_name(db)))
                .and_then(|c| c.data.as_ref()?.get(kinds::KEY))
                .map(|text| kinds::certificates(text))
                .unwrap_or_default(),
            archive_report: config_maps
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(&archive_report_name(db)))
                .map(|c| c.data.clone().unwrap_or_default()),
            config_maps: config_maps
                .into_iter()
                .filter_map(|c| c.metadata.name)
                .collect(),
            storage_classes: by_name(req.related.of::<StorageClass>()?),
            grow_access: grow_access(req)?,
            certificates: req
                .children
                .has::<Certificate>()
                .then(|| req.children.of::<Certificate>())
                .transpose()?,
            pod_monitors_managed: req.children.has::<PodMonitor>(),
            // A group asked for and missing is refused (never read as none).
            certificate_requests: match issuer(db) {
                Some(_) => req.related.of::<CertificateRequest>()?,
                None => Vec::new(),
            },
            now: Timestamp::UNIX_EPOCH,
        })
    }

    /// Observed at `now`.
    pub fn at(mut self, now: Timestamp) -> Self {
        self.now = now;
        self
    }

    /// With every observed child's group key and name, which only a
    /// deletion reads (nothing gone is created again): a sync does not pay
    /// for it.
    pub fn with_children(mut self, req: &SyncRequest<Database>) -> Self {
        self.children = req
            .children
            .names()
            .map(|(group, name)| (group.to_string(), name.to_string()))
            .collect();
        self
    }

    /// The major the StatefulSet runs: the data directory its postgres
    /// container uses (`PGDATA`, `.../pg16`), else that container's image
    /// tag (any registry's), else, as a last hint, the version annotation. `None` without a
    /// StatefulSet or when none of them names a major.
    pub fn running(&self) -> Option<Major> {
        let sts = self.statefulset.as_ref()?;
        let postgres = self.postgres_container();
        let from_pgdata = postgres
            .and_then(|c| c.env.as_ref())
            .and_then(|env| env.iter().find(|e| e.name == "PGDATA"))
            .and_then(|e| e.value.as_deref())
            .and_then(Major::of_data_dir);
        // One rule for a tag's major, the spec's (`Major::of_image`): a
        // tag that names no major, or one this operator does not run,
        // leaves it to the annotation.
        let from_image = || Major::of_image(postgres?.image.as_deref()?).ok().flatten();
        let from_annotation = || {
            let annotations = sts.metadata.annotations.as_ref()?;
            Major::parse(annotations.get(ANNOTATION_VERSION)?)
        };
        from_pgdata.or_else(from_image).or_else(from_annotation)
    }

    /// The StatefulSet's `postgres` container, as its template has it.
    fn postgres_container(&self) -> Option<&Container> {
        self.statefulset
            .as_ref()?
            .spec
            .as_ref()?
            .template
            .spec
            .as_ref()?
            .containers
            .iter()
            .find(|c| c.name == "postgres")
    }

    /// The server parameters the StatefulSet's template passes (`-c
    /// name=value`), the operator's own among them; empty without one.
    pub fn running_parameters(&self) -> BTreeMap<String, String> {
        self.postgres_container()
            .and_then(|c| c.command.as_deref())
            .map(parameters::of_command)
            .unwrap_or_default()
    }

    /// The value the StatefulSet's template gives the postgres
    /// container's variable `var`, when it gives one as a value.
    pub fn postgres_env(&self, var: &str) -> Option<&str> {
        let env = self.postgres_container()?.env.as_ref()?;
        env.iter().find(|e| e.name == var)?.value.as_deref()
    }

    /// The instances the StatefulSet is asked to run; 0 without one.
    pub fn statefulset_replicas(&self) -> i32 {
        self.statefulset.as_ref().map_or(0, |s| {
            s.spec.as_ref().and_then(|spec| spec.replicas).unwrap_or(1)
        })
    }

    /// The image the StatefulSet's template runs.
    pub fn running_image(&self) -> Option<&str> {
        self.postgres_container()?.image.as_deref()
    }

    /// The StatefulSet's update revision, once its controller has seen its
    /// newest template (`None` before, or without a StatefulSet): the
    /// revision an instance runs the template at when its pod carries it.
    pub fn update_revision(&self) -> Option<&str> {
        let sts = self.statefulset.as_ref()?;
        let status = sts.status.as_ref()?;
        (status.observed_generation >= sts.metadata.generation)
            .then_some(status.update_revision.as_deref())
            .flatten()
    }

    /// Whether an instance may still be made, or run, from a template
    /// other than the newest: the StatefulSet's current and update
    /// revisions differ, or its controller has not reported the newest
    /// generation yet.
    pub fn rollout_in_flight(&self) -> bool {
        let Some(sts) = self.statefulset.as_ref() else {
            return false;
        };
        let status = sts.status.as_ref();
        let current = status.and_then(|s| s.current_revision.as_deref());
        self.update_revision().is_none() || current != self.update_revision()
    }

    /// The StatefulSet's update revision as last reported, even when its
    /// controller has not seen the newest generation yet.
    pub fn last_update_revision(&self) -> Option<&str> {
        self.statefulset
            .as_ref()?
            .status
            .as_ref()?
            .update_revision
            .as_deref()
    }

    /// The StatefulSet's rolling-update partition, as observed.
    pub fn partition(&self) -> Option<i32> {
        self.statefulset
            .as_ref()?
            .spec
            .as_ref()?
            .update_strategy
            .as_ref()?
            .rolling_update
            .as_ref()?
            .partition
    }

    /// Whether an instance may still mount a volume that `is` matches:
    /// the StatefulSet's template has one, or its rollout is not done (a
    /// pod of an older template may).
    pub fn may_mount(&self, is: impl Fn(&Volume) -> bool) -> bool {
        let in_template = self
            .statefulset
            .as_ref()
            .and_then(|s| s.spec.as_ref()?.template.spec.as_ref()?.volumes.as_ref())
            .is_some_and(|volumes| volumes.iter().any(is));
        in_template || self.rollout_in_flight()
    }

    /// The template hash the StatefulSet was last written with
    /// ([`TEMPLATE_HASH`]), if any.
    pub fn template_hash(&self) -> Option<&str> {
        self.statefulset
            .as_ref()?
            .metadata
            .annotations
            .as_ref()?
            .get(TEMPLATE_HASH)
            .map(String::as_str)
    }

    /// The template hash Job `job` was annotated with ([`TEMPLATE_HASH`]):
    /// a promote Job's, the instances' template when it was made.
    pub fn job_template_hash(&self, job: &str) -> Option<&str> {
        self.jobs
            .get(job)?
            .metadata
            .annotations
            .as_ref()?
            .get(TEMPLATE_HASH)
            .map(String::as_str)
    }

    /// The value of `var` in the environment of Job `job`'s first
    /// container that sets it.
    pub fn job_env(&self, job: &str, var: &str) -> Option<&str> {
        let pod = self.jobs.get(job)?.spec.as_ref()?.template.spec.as_ref()?;
        pod.containers
            .iter()
            .filter_map(|c| c.env.as_ref())
            .flatten()
            .find(|e| e.name == var)?
            .value
            .as_deref()
    }

    /// The outcome of one of our Jobs, if it exists.
    pub fn job(&self, name: &str) -> Option<RunStatus> {
        self.jobs.get(name).map(backup_job::run_status)
    }

    /// When one of our Jobs succeeded: its completion time, if it says.
    pub fn job_completed_at(&self, name: &str) -> Option<Timestamp> {
        Some(
            self.jobs
                .get(name)?
                .status
                .as_ref()?
                .completion_time
                .as_ref()?
                .0,
        )
    }

    /// When one of our Jobs finished, succeeded or failed: its completion
    /// time, else its `Complete` or `Failed` condition's last transition
    /// (a failed Job has no completion time), if it did and says when.
    pub fn job_finished_at(&self, name: &str) -> Option<Timestamp> {
        self.job_completed_at(name).or_else(|| {
            self.jobs
                .get(name)?
                .status
                .as_ref()?
                .conditions
                .iter()
                .flatten()
                .filter(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
                .find_map(|c| Some(c.last_transition_time.as_ref()?.0))
        })
    }

    /// The message the named container of a pod of Job `job` left when it
    /// stopped: from the newest such pod (by name) that left one. Job pods
    /// share the Database's label, so they are observed with the instances.
    pub fn job_message(&self, job: &str, container: &str) -> Option<&str> {
        self.pods
            .iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(JOB_NAME_LABEL))
                    .is_some_and(|name| name == job)
            })
            .filter_map(|p| {
                let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                Some((
                    (created, p.metadata.name.as_deref()),
                    p.container_message(container)?,
                ))
            })
            .max_by_key(|(newest, _)| *newest)
            .map(|(_, message)| message)
    }

    /// When the backup CronJob last succeeded.
    pub fn last_backup_time(&self) -> Option<Timestamp> {
        let status = self.cron_job.as_ref()?.status.as_ref()?;
        Some(status.last_successful_time.as_ref()?.0)
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
            let index = pod_ordinal(db, p.metadata.name.as_deref()?)?;
            is_instance.then_some((index, p))
        })
    }

    /// The instances' volumes, `data-<name>-<ordinal>`, with their
    /// ordinals: also those of ordinals the StatefulSet no longer runs.
    pub fn claims<'a>(
        &'a self,
        db: &'a Database,
    ) -> impl Iterator<Item = (u32, &'a PersistentVolumeClaim)> + 'a {
        self.volumes
            .iter()
            .filter_map(move |c| Some((claim_ordinal(db, c.metadata.name.as_deref()?)?, c)))
    }

    /// What instance `ordinal`'s `postgres` container last left in its
    /// termination log (`start.sh`), if anything.
    fn instance_message<'a>(&'a self, db: &'a Database, ordinal: u32) -> Option<&'a str> {
        let (_, pod) = self.instances(db).find(|(i, _)| *i == ordinal)?;
        pod.container_message("postgres")
    }

    /// Why instance `ordinal` refuses to start on its volume, as its
    /// `postgres` container left it (`start.sh`), and what that is about:
    /// the volume holds another major's data, or is empty although the
    /// Database was initialized.
    pub fn volume_refusal<'a>(
        &'a self,
        db: &'a Database,
        ordinal: u32,
    ) -> Option<(&'a str, InstanceSays)> {
        let message = self.instance_message(db, ordinal)?;
        let words = message.strip_prefix(report::INSTANCE)?.trim();
        let about = match Report::parse(message) {
            Ok(Report::Instance { about, .. }) => about,
            _ => InstanceSays::Other,
        };
        Some((words, about))
    }

    /// Whether instance `ordinal` refuses to start because its data
    /// directory is empty although the Database was initialized.
    pub fn has_empty_volume(&self, db: &Database, ordinal: u32) -> bool {
        self.volume_refusal(db, ordinal)
            .is_some_and(|(_, about)| about == InstanceSays::EmptyVolume)
    }

    /// What instance `ordinal` reported it holds when it refused to start
    /// (`start.sh`): `None` when it reported nothing of the kind,
    /// `Some(Err(message))` for a report that does not read.
    pub(super) fn holding<'a>(
        &'a self,
        db: &'a Database,
        ordinal: u32,
    ) -> Option<Result<Holding, &'a str>> {
        let message = self.instance_message(db, ordinal)?;
        match Report::parse(message) {
            Ok(Report::Holds { holding, .. }) => Some(Ok(holding)),
            Err(Unreadable {
                prefix: Some(report::INSTANCE),
                words,
            }) if words.starts_with(report::HOLDS) => Some(Err(message.trim())),
            _ => None,
        }
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

/// The claims the observed Role `<name>-grow` lets patch, when it, its
/// RoleBinding and its ServiceAccount are all observed.
fn grow_access(req: &SyncRequest<Database>) -> Result<Option<BTreeSet<String>>, HookError> {
    let grow = grow_name(&req.parent);
    let named = |meta: &ObjectMeta| meta.name.as_deref() == Some(grow.as_str());
    let account = req
        .children
        .of::<ServiceAccount>()?
        .iter()
        .any(|a| named(&a.metadata));
    let binding = req
        .children
        .of::<RoleBinding>()?
        .iter()
        .any(|b| named(&b.metadata));
    let roles = req.children.of::<RbacRole>()?;
    let Some(role) = roles.iter().find(|r| named(&r.metadata)) else {
        return Ok(None);
    };
    let claims = role
        .rules
        .iter()
        .flatten()
        .filter(|r| r.verbs.iter().any(|v| v == "patch"))
        .flat_map(|r| r.resource_names.iter().flatten().cloned())
        .collect();
    Ok((account && binding).then_some(claims))
}

/// Objects by their names (an object without one is left out).
fn by_name<K: Metadata<Ty = ObjectMeta>>(objects: Vec<K>) -> BTreeMap<String, K> {
    objects
        .into_iter()
        .filter_map(|o| Some((o.metadata().name.clone()?, o)))
        .collect()
}
