//! Storage growth. A StatefulSet's claim template cannot change once
//! written (the API server refuses it), so raising `spec.storage.size`
//! leaves the template as it was and grows the claims themselves: a Job
//! `<name>-grow-<digest>` patches each claim that requests less, through a
//! ServiceAccount, Role and RoleBinding `<name>-grow` that may patch those
//! claims only. Each patch first tests the request the hook observed, so a
//! claim someone changed meanwhile is never set back. The storage driver
//! then expands the volume, and the `StorageResized` condition follows
//! each claim's capacity. Claims made later from the template (a larger
//! size) start at its size and are grown the same way. A claim whose
//! StorageClass does not allow expansion is left alone, and the condition
//! says why.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, PodSpec, ResourceRequirements, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde_json::json;

use super::names::grow_name;
use super::objects::{core_rule, identity, kept_job, script_job};
use super::observed::Observed;
use super::spec::{Database, VOLUME, name, namespace, shows_condition};
use crate::hook::conditions::{ConditionStatus, Observation};
use crate::hook::digest;
use crate::operators::backup_job::{RunStatus, run_status};
use crate::operators::common::restricted_container;
use crate::operators::expansion::literals;
use crate::operators::resources::cpu_memory;
use crate::operators::validate::{InvalidSpec, quantity_bytes, quote};

/// The condition that reports the claims' sizes.
const CONDITION: &str = "StorageResized";
/// The image of the grow Job when `spec.storage.resizeImage` is omitted:
/// any image whose `kubectl` is on the PATH will do.
const DEFAULT_RESIZE_IMAGE: &str = "rancher/kubectl:v1.34.1";
/// The container of a grow Job's pod that patches instance `i`'s claim is
/// `grow-<i>`.
const CONTAINER_PREFIX: &str = "grow-";

/// Where the claims stand against `spec.storage.size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Growth {
    /// The size the StatefulSet's claim template holds: the observed
    /// StatefulSet's, or the spec's for one still to create.
    pub template: String,
    /// `spec.storage.size`, as written, and in bytes.
    target: (String, u64),
    /// Every instance claim observed, by ordinal.
    claims: Vec<Claim>,
    /// The claims the Role `<name>-grow` lets patch, when it, its
    /// RoleBinding and ServiceAccount are all observed.
    access: Option<BTreeSet<String>>,
    /// A grow Job still running, with the claims it patches: kept, with
    /// its access, until it ends, and no other is made meanwhile (the
    /// claims it patched already would otherwise make another Job for the
    /// rest while it still runs).
    running: Option<(String, Vec<String>)>,
}

/// One instance claim, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Claim {
    name: String,
    /// `spec.resources.requests.storage`, as the API server stores it.
    requested: String,
    requested_bytes: u64,
    capacity: Option<(String, u64)>,
    bound: bool,
    class: Class,
    /// A resize the storage driver or node reports it cannot do, or is
    /// waiting for: (reason, message).
    resizing: Option<(&'static str, String)>,
}

/// Whether a claim's StorageClass lets it grow.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Class {
    Expandable,
    Not(String),
}

/// A `StorageResized` condition's status, reason and message.
type Why = (ConditionStatus, &'static str, String);

impl Growth {
    /// Reads the claims of `db`, and which of them may grow.
    pub fn of(db: &Database, seen: &Observed) -> Self {
        let target = db.spec.storage.size.clone();
        let bytes = quantity_bytes(&target).unwrap_or(0);
        let claims = seen
            .claims(db)
            .filter(|(_, c)| c.metadata.deletion_timestamp.is_none())
            .filter_map(|(_, c)| claim(c, seen))
            .collect();
        Growth {
            template: template_size(seen).unwrap_or_else(|| target.clone()),
            target: (target, bytes),
            claims,
            access: seen.grow_access.clone(),
            running: running(db, seen),
        }
    }

    /// The claims the grow Job patches: bound, of a class that expands,
    /// requesting less than the spec.
    fn to_patch(&self) -> Vec<&Claim> {
        self.claims
            .iter()
            .filter(|c| c.requested_bytes < self.target.1 && c.bound)
            .filter(|c| c.class == Class::Expandable)
            .collect()
    }

    /// Whether the observed Role lets the grow Job patch every claim it
    /// would patch.
    fn access_granted(&self) -> bool {
        self.access
            .as_ref()
            .is_some_and(|names| self.to_patch().iter().all(|c| names.contains(&c.name)))
    }

    /// The grow Job's name: it names what it patches (each claim and the
    /// request it tests for) and the size, so another growth, or a claim
    /// that changed meanwhile, is another Job, and the same one is never
    /// run twice.
    fn job_name(&self, db: &Database) -> Option<String> {
        let patches = self.to_patch();
        if patches.is_empty() {
            return None;
        }
        let what: Vec<(&str, &str)> = patches
            .iter()
            .map(|c| (c.name.as_str(), c.requested.as_str()))
            .collect();
        let digest = digest::of_json(&(&self.target.0, what));
        Some(format!("{}-{}", grow_name(db), &digest[..8]))
    }

    /// The children that grow the claims: none when nothing is to grow.
    /// The Job comes once its ServiceAccount, Role and RoleBinding are
    /// observed with the claims it patches, so its pod never starts
    /// without the right to patch them.
    pub fn children(
        &self,
        db: &Database,
        seen: &Observed,
    ) -> (ServiceAccount, Role, RoleBinding, Option<Job>) {
        let mut claims: BTreeSet<String> = self.to_patch().iter().map(|c| c.name.clone()).collect();
        let job_name = self.job_name(db).unwrap_or_default();
        let job = match &self.running {
            Some((running, patches)) => {
                claims.extend(patches.iter().cloned());
                Some(match *running == job_name {
                    true => self.job(db, job_name),
                    false => kept_job(db, running),
                })
            }
            None => (self.access_granted() || seen.jobs.contains_key(&job_name))
                .then(|| self.job(db, job_name)),
        };
        let claims: Vec<String> = claims.into_iter().collect();
        let rule = core_rule("persistentvolumeclaims", &["get", "patch"], claims);
        let (account, role, binding) = identity(db, grow_name(db), vec![rule], true);
        (account, role, binding, job)
    }

    /// Whether anything is to grow (and so the grow children exist).
    pub fn growing(&self) -> bool {
        self.running.is_some() || !self.to_patch().is_empty()
    }

    /// The grow Job: one container a claim, each one `kubectl patch` that
    /// tests the observed request before it replaces it.
    fn job(&self, db: &Database, job_name: String) -> Job {
        let image = db
            .spec
            .storage
            .resize_image
            .clone()
            .unwrap_or_else(|| DEFAULT_RESIZE_IMAGE.to_string());
        let containers = self
            .to_patch()
            .iter()
            .map(|c| {
                let ordinal = c.name.rsplit('-').next().unwrap_or_default();
                let patch = json!([
                    {"op": "test", "path": "/spec/resources/requests/storage", "value": c.requested},
                    {"op": "replace", "path": "/spec/resources/requests/storage", "value": self.target.0},
                ]);
                Container {
                    name: format!("{CONTAINER_PREFIX}{ordinal}"),
                    image: Some(image.clone()),
                    command: Some(vec!["kubectl".to_string()]),
                    args: Some(literals([
                        "patch",
                        "persistentvolumeclaim",
                        &c.name,
                        "--namespace",
                        namespace(db),
                        "--type=json",
                        "-p",
                        &patch.to_string(),
                    ])),
                    resources: Some(ResourceRequirements {
                        requests: Some(cpu_memory("10m", "64Mi")),
                        ..ResourceRequirements::default()
                    }),
                    // kubectl's error is the container's message.
                    termination_message_policy: Some("FallbackToLogsOnError".to_string()),
                    security_context: Some(restricted_container()),
                    ..Container::default()
                }
            })
            .collect();
        script_job(
            db,
            job_name,
            PodSpec {
                service_account_name: Some(grow_name(db)),
                containers,
                ..PodSpec::default()
            },
            3,
        )
    }

    /// The `StorageResized` condition, once a claim is or was smaller than
    /// the spec (a Database that never grew does not show it).
    pub fn observation(&self, db: &Database, seen: &Observed) -> Option<Observation> {
        let below = self.claims.iter().any(|c| self.is_short(c));
        if !shows_condition(db, CONDITION) && !below {
            return None;
        }
        let size = &self.target.0;
        let (status, reason, message) = self.why_short(db, seen).unwrap_or_else(|| {
            (
                ConditionStatus::True,
                "AsRequested",
                format!("every claim has at least {size}"),
            )
        });
        Some(Observation::new(CONDITION, status, reason, message))
    }

    /// Short: requesting less, or holding less than it requests. A claim
    /// not yet bound has no capacity to judge.
    fn is_short(&self, c: &Claim) -> bool {
        c.requested_bytes < self.target.1
            || c.capacity.as_ref().is_some_and(|(_, b)| *b < self.target.1)
    }

    /// Why the claims are not all as requested yet, the first cause first;
    /// `None` when they are.
    fn why_short(&self, db: &Database, seen: &Observed) -> Option<Why> {
        if self.claims.is_empty() {
            return Some((
                ConditionStatus::Unknown,
                "ClaimsNotObserved",
                format!("no claim {VOLUME}-{}-<i> is observed yet", name(db)),
            ));
        }
        self.grow_failed(db, seen)
            .or_else(|| self.not_expandable())
            .or_else(|| {
                let (reason, message) = self
                    .claims
                    .iter()
                    .filter(|c| self.is_short(c))
                    .find_map(|c| c.resizing.clone())?;
                Some((ConditionStatus::False, reason, message))
            })
            .or_else(|| self.unbound())
            .or_else(|| self.grow_job(db, seen))
            .or_else(|| self.expanding())
    }

    /// The grow Job failed: what its container said.
    fn grow_failed(&self, db: &Database, seen: &Observed) -> Option<Why> {
        let job = self.job_name(db)?;
        if seen.job(&job) != Some(RunStatus::Failed) {
            return None;
        }
        let why = self
            .to_patch()
            .iter()
            .filter_map(|c| {
                let ordinal = c.name.rsplit('-').next().unwrap_or_default();
                seen.job_message(&job, &format!("{CONTAINER_PREFIX}{ordinal}"))
            })
            .next()
            .map(|m| format!(": {}", m.trim()))
            .unwrap_or_default();
        Some((
            ConditionStatus::False,
            "GrowFailed",
            format!(
                "Job {job} failed to grow the claims to {size}{why}; see kubectl logs job/{job}, and delete the Job to try again",
                size = self.target.0
            ),
        ))
    }

    /// Claims short of the size whose StorageClass does not let them grow.
    fn not_expandable(&self) -> Option<Why> {
        let mut stuck: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for c in self
            .claims
            .iter()
            .filter(|c| c.requested_bytes < self.target.1)
        {
            if let Class::Not(why) = &c.class {
                stuck.entry(why).or_default().push(&c.name);
            }
        }
        if stuck.is_empty() {
            return None;
        }
        let why: Vec<String> = stuck
            .iter()
            .map(|(why, claims)| format!("{why} ({})", claims.join(", ")))
            .collect();
        Some((
            ConditionStatus::False,
            "ExpansionNotAllowed",
            format!(
                "the claims stay as they are, short of {}: {}; set allowVolumeExpansion: true on the StorageClass if its driver expands volumes",
                self.target.0,
                why.join("; ")
            ),
        ))
    }

    /// Claims short of the size and not bound to a volume yet.
    fn unbound(&self) -> Option<Why> {
        let unbound: Vec<&str> = self
            .claims
            .iter()
            .filter(|c| c.requested_bytes < self.target.1 && !c.bound)
            .map(|c| c.name.as_str())
            .collect();
        (!unbound.is_empty()).then(|| {
            (
                ConditionStatus::False,
                "WaitingForBinding",
                format!(
                    "{} grow to {} once bound to a volume",
                    unbound.join(", "),
                    self.target.0
                ),
            )
        })
    }

    /// The grow Job runs, or is to.
    fn grow_job(&self, db: &Database, seen: &Observed) -> Option<Why> {
        let size = &self.target.0;
        if let Some((job, claims)) = &self.running {
            return Some((
                ConditionStatus::False,
                "Growing",
                format!("Job {job} patches {} to request {size}", claims.join(", ")),
            ));
        }
        let job = self.job_name(db)?;
        let names: Vec<&str> = self.to_patch().iter().map(|c| c.name.as_str()).collect();
        let when = match self.access_granted() || seen.jobs.contains_key(&job) {
            true => "",
            false => ", once its ServiceAccount, Role and RoleBinding exist",
        };
        Some((
            ConditionStatus::False,
            "Growing",
            format!(
                "Job {job} patches {} to request {size}{when}",
                names.join(", ")
            ),
        ))
    }

    /// Claims that request the size and wait for the driver to expand them.
    fn expanding(&self) -> Option<Why> {
        let expanding: Vec<String> = self
            .claims
            .iter()
            .filter(|c| self.is_short(c))
            .filter_map(|c| Some(format!("{} has {}", c.name, c.capacity.as_ref()?.0)))
            .collect();
        (!expanding.is_empty()).then(|| {
            (
                ConditionStatus::False,
                "Expanding",
                format!(
                    "the claims request {}; the storage driver expands them: {}",
                    self.target.0,
                    expanding.join(", ")
                ),
            )
        })
    }
}

/// The first observed grow Job of `db` that has not ended, with the
/// claims its containers patch (`kubectl patch persistentvolumeclaim
/// <claim> ...`).
fn running(db: &Database, seen: &Observed) -> Option<(String, Vec<String>)> {
    let prefix = format!("{}-", grow_name(db));
    seen.jobs.iter().find_map(|(name, job)| {
        let digest = name.strip_prefix(&prefix)?;
        let ours = digest.len() == 8 && digest.bytes().all(|b| b.is_ascii_hexdigit());
        let ended = matches!(run_status(job), RunStatus::Succeeded | RunStatus::Failed);
        if !ours || ended {
            return None;
        }
        let containers = &job.spec.as_ref()?.template.spec.as_ref()?.containers;
        let claims = containers
            .iter()
            .filter_map(|c| match c.args.as_deref()? {
                [patch, kind, claim, ..] if patch == "patch" && kind == "persistentvolumeclaim" => {
                    Some(claim.clone())
                }
                _ => None,
            })
            .collect();
        Some((name.clone(), claims))
    })
}

/// The size the observed StatefulSet's claim template requests.
/// Refuses a `spec.storage.size` below the size the observed StatefulSet's
/// claim template holds: that template is written once, from the size the
/// Database was made with, which the CRD's rule keeps the spec from ever
/// going under, so a smaller spec got past the API server's check (or
/// came through `render`). A claim larger than the spec is left as it is
/// and not refused: a claim grown by hand (a full disk at night) or
/// retained from a Database of the same name must not stop every sync,
/// failover included.
pub(super) fn refuse_shrink(db: &Database, seen: &Observed) -> Result<(), InvalidSpec> {
    let Some(template) = template_size(seen) else {
        return Ok(());
    };
    let spec = &db.spec.storage.size;
    match (quantity_bytes(spec), quantity_bytes(&template)) {
        (Some(want), Some(made)) if want < made => Err(InvalidSpec::new(
            "spec.storage.size",
            format!(
                "{} is smaller than {}, the size the StatefulSet's volume claim template was made with; a volume only grows: keep {} or more, or restore a backup into a new Database with a smaller one",
                quote(spec),
                quote(&template),
                quote(&template)
            ),
        )),
        _ => Ok(()),
    }
}

fn template_size(seen: &Observed) -> Option<String> {
    let sts = seen.statefulset.as_ref()?.spec.as_ref()?;
    let template = sts
        .volume_claim_templates
        .as_ref()?
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(VOLUME))?;
    let requests = template
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?;
    Some(requests.get("storage")?.0.clone())
}

/// An instance claim as observed; `None` for one with no readable request
/// (nothing to decide on: it is left alone).
fn claim(c: &PersistentVolumeClaim, seen: &Observed) -> Option<Claim> {
    let spec = c.spec.as_ref()?;
    let requested = spec
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")?
        .0
        .clone();
    let requested_bytes = quantity_bytes(&requested)?;
    let status = c.status.as_ref();
    let capacity = status
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| Some((q.0.clone(), quantity_bytes(&q.0)?)));
    let name = c.metadata.name.clone()?;
    Some(Claim {
        class: class(spec.storage_class_name.as_deref(), seen),
        bound: status.and_then(|s| s.phase.as_deref()) == Some("Bound"),
        resizing: resizing(&name, c),
        name,
        requested,
        requested_bytes,
        capacity,
    })
}

/// Whether claims of StorageClass `class` may grow, from the observed
/// StorageClasses. A class not observed is not taken to allow it.
fn class(class: Option<&str>, seen: &Observed) -> Class {
    let Some(class) = class.filter(|c| !c.is_empty()) else {
        return Class::Not("no StorageClass: a volume provisioned by hand grows by hand".into());
    };
    match seen.storage_classes.get(class) {
        Some(sc) if sc.allow_volume_expansion == Some(true) => Class::Expandable,
        Some(_) => Class::Not(format!(
            "StorageClass {class} does not allow volume expansion"
        )),
        None => Class::Not(format!("StorageClass {class} is not observed")),
    }
}

/// What the claim's conditions say of a resize under way or failed.
fn resizing(name: &str, c: &PersistentVolumeClaim) -> Option<(&'static str, String)> {
    let conditions = c.status.as_ref()?.conditions.as_ref()?;
    let with = |t: &str| {
        conditions
            .iter()
            .find(|x| x.type_ == t && x.status == "True")
    };
    let said = |x: &k8s_openapi::api::core::v1::PersistentVolumeClaimCondition| {
        x.message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default()
    };
    if let Some(x) = with("ControllerResizeError").or_else(|| with("NodeResizeError")) {
        return Some((
            "ResizeFailed",
            format!("the volume of {name} failed to grow{}", said(x)),
        ));
    }
    with("FileSystemResizePending").map(|x| {
        (
            "FileSystemResizePending",
            format!(
                "the volume of {name} grew; its file system grows when the node next mounts it (its pod restarts){}",
                said(x)
            ),
        )
    })
}
