//! A small, explicit model of a cluster for the simulator: an object store
//! and the few Kubernetes controllers whose work an operator reads back.
//!
//! What it models, and nothing more: StatefulSets create their pods (each
//! labelled with its name) and claims, hand claims to themselves when
//! their retention policy says `Delete`, and replace pods whose template
//! changed; Deployments keep their pod count; Jobs run for a few steps and
//! then succeed or fail as scripted; pods become ready one step after they
//! appear (unless scripted not to, or an instance refuses to start on an
//! empty volume, as `start.sh` does), their `Ready` condition's
//! `lastTransitionTime` moving only when it flips; the garbage collector deletes what its owners left behind; a CronJob
//! starts a Job only when told to. Everything is deterministic: uids,
//! addresses and times come from counters, never from a clock or a random
//! source. The e2e suite runs the real controllers; this model is only for
//! fast, many-step checks, and is kept honest by comparing it with them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::hook::conditions::format_time;
use crate::hook::digest;

/// The label the StatefulSet controller puts on each of its pods, naming it.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label the StatefulSet controller puts on each of its pods: the
/// revision of the template it was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// What an instance that refuses to start on an empty volume leaves in its
/// container's termination message (the words of `start.sh`).
pub const EMPTY_VOLUME_REFUSAL: &str = "opshooks: the data directory is empty although the Database was initialized: nothing is initialized over lost data; a standby takes over\n";

/// Where an object lives.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// `v1` or `group/version`.
    pub api_version: String,
    /// `StatefulSet`.
    pub kind: String,
    /// The namespace (every modelled object is namespaced).
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl Key {
    /// A key from its parts.
    pub fn new(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        Key {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The key of an object, from its own fields.
    pub fn of(object: &Value) -> Option<Key> {
        let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        Some(Key::new(
            text("/apiVersion")?,
            text("/kind")?,
            text("/metadata/namespace").unwrap_or("default"),
            text("/metadata/name")?,
        ))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// Who changed the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    /// Metacontroller, applying a hook's answer.
    Metacontroller,
    /// The Kubernetes controllers (the model below), garbage collector included.
    Controllers,
    /// A person or a tool outside the loop (scripted events).
    User,
}

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// It was created.
    Created,
    /// Its desired state changed.
    Updated,
    /// It was deleted (or marked for deletion, if it has finalizers).
    Deleted,
}

/// One change to the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// What happened.
    pub verb: Verb,
    /// To which object.
    pub key: Key,
    /// Who did it.
    pub actor: Actor,
}

/// The name of the simulated cluster's default StorageClass.
const DEFAULT_CLASS: &str = "standard";

/// The object store and the controllers' model.
#[derive(Clone, Debug)]
pub struct Cluster {
    objects: BTreeMap<Key, Value>,
    next_uid: u64,
    /// Steps each object has existed, by uid: drives readiness and Jobs.
    age: BTreeMap<String, u32>,
    /// The model's clock: advanced by the simulation, read by nobody else.
    pub now: Timestamp,
    /// Jobs whose runs fail: by name, or by the start of their names for
    /// an entry that ends in `*` (`orders-promote-*`).
    pub failing_jobs: BTreeSet<String>,
    /// Pods (by name) that never become ready.
    pub not_ready_pods: BTreeSet<String>,
    /// How many steps a Job runs before it finishes.
    pub job_steps: u32,
    /// Claims (by name) whose volumes are empty: made again after a
    /// volume was lost, until a pod starts on them.
    pub empty_volumes: BTreeSet<String>,
    /// The pod templates StatefulSets ran, by revision name
    /// (`<statefulset>-<digest>`): the controller's ControllerRevisions.
    revisions: BTreeMap<String, Value>,
    changes: Vec<Change>,
    /// The cluster's StorageClasses (cluster-scoped, so kept apart from the
    /// namespaced objects): one, the default, which allows expansion.
    storage_classes: Vec<Value>,
}

impl Cluster {
    /// An empty cluster whose clock starts at `now`.
    pub fn new(now: Timestamp) -> Self {
        Cluster {
            objects: BTreeMap::new(),
            next_uid: 1,
            age: BTreeMap::new(),
            now,
            failing_jobs: BTreeSet::new(),
            not_ready_pods: BTreeSet::new(),
            job_steps: 1,
            empty_volumes: BTreeSet::new(),
            revisions: BTreeMap::new(),
            changes: Vec::new(),
            storage_classes: vec![json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": DEFAULT_CLASS,
                             "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "simulated", "allowVolumeExpansion": true,
                "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"})],
        }
    }

    /// The cluster's StorageClasses.
    pub fn storage_classes(&self) -> &[Value] {
        &self.storage_classes
    }

    /// The object at `key`.
    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// Every object, in key order.
    pub fn objects(&self) -> impl Iterator<Item = (&Key, &Value)> {
        self.objects.iter()
    }

    /// The changes since the last call, in order.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    /// True when an object with this uid exists.
    pub fn has_uid(&self, uid: &str) -> bool {
        self.objects.values().any(|o| uid_of(o) == Some(uid))
    }

    /// Stores a new object with a fresh uid, generation 1 and a creation
    /// time; `None` when one with that key exists.
    pub fn create(&mut self, mut object: Value, actor: Actor) -> Option<Key> {
        let key = Key::of(&object)?;
        if self.objects.contains_key(&key) {
            return None;
        }
        let uid = format!("uid-{}", self.next_uid);
        self.next_uid += 1;
        let meta = object_map(&mut object, "metadata");
        meta.insert("namespace".into(), json!(key.namespace));
        meta.insert("uid".into(), json!(uid));
        meta.insert("generation".into(), json!(1));
        meta.insert("creationTimestamp".into(), json!(format_time(self.now)));
        self.age.insert(uid, 0);
        self.objects.insert(key.clone(), object);
        self.record(Verb::Created, &key, actor);
        Some(key)
    }

    /// Replaces an object's fields with `fields` (top-level fields other
    /// than metadata and status, plus labels and annotations), raising its
    /// generation when the spec changed. Returns whether anything changed.
    pub fn update(&mut self, key: &Key, fields: &Value, actor: Actor) -> bool {
        let Some(object) = self.objects.get_mut(key) else {
            return false;
        };
        let before = object.clone();
        if let (Some(target), Some(source)) = (object.as_object_mut(), fields.as_object()) {
            for (field, value) in source {
                if field != "metadata" && field != "status" {
                    target.insert(field.clone(), value.clone());
                }
            }
        }
        for field in ["labels", "annotations"] {
            if let Some(value) = fields.pointer(&format!("/metadata/{field}")) {
                object_map(object, "metadata").insert(field.into(), value.clone());
            }
        }
        if *object == before {
            return false;
        }
        if object.get("spec") != before.get("spec") {
            let generation = before
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            object_map(object, "metadata").insert("generation".into(), json!(generation + 1));
        }
        self.record(Verb::Updated, key, actor);
        true
    }

    /// Edits an object in place without recording a change of its desired
    /// state (status writes, finalizer bookkeeping, users' edits recorded by
    /// the caller).
    pub fn edit(&mut self, key: &Key, edit: impl FnOnce(&mut Value)) {
        if let Some(object) = self.objects.get_mut(key) {
            edit(object);
        }
    }

    /// Deletes an object, or marks it for deletion while it has finalizers.
    pub fn delete(&mut self, key: &Key, actor: Actor) -> bool {
        let Some(object) = self.objects.get_mut(key) else {
            return false;
        };
        let has_finalizers = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if object.pointer("/metadata/deletionTimestamp").is_some() {
                return false;
            }
            let now = format_time(self.now);
            object_map(object, "metadata").insert("deletionTimestamp".into(), json!(now));
        } else {
            self.objects.remove(key);
        }
        self.record(Verb::Deleted, key, actor);
        true
    }

    /// Removes one finalizer; an object being deleted goes once it has none.
    pub fn remove_finalizer(&mut self, key: &Key, finalizer: &str) {
        let Some(object) = self.objects.get_mut(key) else {
            return;
        };
        if let Some(list) = object
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f != finalizer);
        }
        let empty = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if empty && object.pointer("/metadata/deletionTimestamp").is_some() {
            self.objects.remove(key);
        }
    }

    /// The Jobs that have not finished: while there is one, the controllers
    /// will change something by themselves, so the loop has not settled.
    pub fn running_jobs(&self) -> Vec<String> {
        self.objects
            .iter()
            .filter(|(k, o)| {
                k.kind == "Job"
                    && o.pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty)
            })
            .map(|(k, _)| k.name.clone())
            .collect()
    }

    /// One round of every modelled controller, then garbage collection.
    pub fn reconcile(&mut self) {
        for age in self.age.values_mut() {
            *age += 1;
        }
        // Pods first, so a workload's status counts what its pods are now.
        let pods: Vec<Key> = self
            .objects
            .keys()
            .filter(|k| k.kind == "Pod")
            .cloned()
            .collect();
        for key in &pods {
            self.pod(key);
        }
        let keys: Vec<Key> = self.objects.keys().cloned().collect();
        for key in &keys {
            match (key.api_version.as_str(), key.kind.as_str()) {
                ("apps/v1", "StatefulSet") => self.statefulset(key),
                ("apps/v1", "Deployment") => self.deployment(key),
                ("batch/v1", "Job") => self.job(key),
                ("v1", "PersistentVolumeClaim") => self.expand(key),
                _ => {}
            }
        }
        self.collect_garbage();
    }

    /// A storage driver that expands volumes online: a bound claim of a
    /// class that allows expansion has what it requests, one round after
    /// it asked.
    fn expand(&mut self, key: &Key) {
        let Some(claim) = self.objects.get(key) else {
            return;
        };
        let class = claim
            .pointer("/spec/storageClassName")
            .and_then(Value::as_str);
        let expands = self.storage_classes.iter().any(|c| {
            c.pointer("/metadata/name").and_then(Value::as_str) == class
                && c["allowVolumeExpansion"] == json!(true)
        });
        let wanted = claim.pointer("/spec/resources/requests/storage").cloned();
        let has = claim.pointer("/status/capacity/storage");
        if !expands || wanted.is_none() || has == wanted.as_ref() {
            return;
        }
        if let Some(status) = self.objects.get_mut(key).map(|c| object_map(c, "status")) {
            let capacity = status.entry("capacity").or_insert_with(|| json!({}));
            if let Some(capacity) = capacity.as_object_mut() {
                capacity.insert("storage".into(), wanted.unwrap_or_default());
            }
        }
    }

    /// Starts a Job from a CronJob's template, as a schedule firing would.
    pub fn run_cronjob(&mut self, cronjob: &Key) -> Option<Key> {
        let cron = self.objects.get(cronjob)?.clone();
        let template = cron.pointer("/spec/jobTemplate")?;
        let name = format!("{}-{}", cronjob.name, self.next_uid);
        let mut job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": cronjob.namespace,
                         "labels": template.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
                         "ownerReferences": [owner_ref(&cron)]},
            "spec": template.get("spec").cloned().unwrap_or(json!({})),
        });
        object_map(&mut job, "status").insert("active".into(), json!(1));
        self.create(job, Actor::Controllers)
    }

    fn record(&mut self, verb: Verb, key: &Key, actor: Actor) {
        self.changes.push(Change {
            verb,
            key: key.clone(),
            actor,
        });
    }

    fn age_of(&self, object: &Value) -> u32 {
        uid_of(object)
            .and_then(|uid| self.age.get(uid))
            .copied()
            .unwrap_or(0)
    }

    /// Pods and claims of one StatefulSet, its claims' owner references as
    /// its retention policy says, and its status.
    fn statefulset(&mut self, key: &Key) {
        let Some(sts) = self.objects.get(key).cloned() else {
            return;
        };
        if sts.pointer("/metadata/deletionTimestamp").is_some() {
            return;
        }
        let (replicas, template) = workload(&sts);
        let claims = sts
            .pointer("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let delete_claims = sts
            .pointer("/spec/persistentVolumeClaimRetentionPolicy/whenDeleted")
            .and_then(Value::as_str)
            == Some("Delete");
        let ordered = sts
            .pointer("/spec/podManagementPolicy")
            .and_then(Value::as_str)
            != Some("Parallel");
        let update = format!("{}-{}", key.name, digest::of_json(&template));
        self.revisions.entry(update.clone()).or_insert(template);
        let current = sts
            .pointer("/status/currentRevision")
            .and_then(Value::as_str)
            .unwrap_or(&update)
            .to_string();
        let partition = rolling_partition(&sts);
        for index in 0..replicas {
            let claim_keys = self.ensure_claims(key, index, &claims);
            let pod = pod_key(key, index);
            // Below the partition a pod made again keeps the current
            // revision; at or above it, it takes the update revision.
            let revision = if partition.is_some_and(|p| index < p) {
                &current
            } else {
                &update
            };
            self.ensure_revision_pod(&pod, revision, &sts);
            // As the real controller: a pod's claims follow the retention
            // policy only once that pod runs and is ready, and under
            // OrderedReady nothing past the first pod that is not goes on.
            // Claims of ordinals past `replicas` are never touched.
            let ready = self.objects.get(&pod).is_some_and(is_ready);
            if ready {
                for claim_key in &claim_keys {
                    if let Some(pvc) = self.objects.get_mut(claim_key) {
                        set_owned(pvc, &sts, delete_claims);
                    }
                }
            } else if ordered {
                break;
            }
        }
        if let Some(partition) = partition {
            self.roll(key, &update, partition, replicas);
        }
        self.remove_extra_pods(key, &sts, replicas);
        self.set_workload_status(key, &sts);
        let updated = (0..replicas)
            .filter(|i| self.revision_of(&pod_key(key, *i)) == Some(update.as_str()))
            .count();
        let current = if updated == replicas {
            &update
        } else {
            &current
        };
        let status = json!({"updateRevision": update, "currentRevision": current, "updatedReplicas": updated});
        if let Some(object) = self.objects.get_mut(key) {
            object_map(object, "status").extend(status.as_object().cloned().unwrap_or_default());
        }
    }

    /// The rolling update, as the real controller does it: from the
    /// highest ordinal down to the partition, the first pod not at the
    /// update revision is deleted (made again at it next round), one per
    /// round, and nothing goes on past a pod that is not ready.
    fn roll(&mut self, key: &Key, update: &str, partition: usize, replicas: usize) {
        for index in (partition..replicas).rev() {
            let pod = pod_key(key, index);
            let Some(object) = self.objects.get(&pod) else {
                return;
            };
            if self.revision_of(&pod) != Some(update) {
                self.delete(&pod, Actor::Controllers);
                return;
            }
            if !is_ready(object) {
                return;
            }
        }
    }

    /// The revision a StatefulSet's pod was made at.
    fn revision_of(&self, pod: &Key) -> Option<&str> {
        self.objects
            .get(pod)?
            .pointer(&format!("/metadata/labels/{REVISION_LABEL}"))
            .and_then(Value::as_str)
    }

    /// A StatefulSet's pod exists, made (if missing) from the template of
    /// `revision` and labelled with it. An existing pod is left alone: only
    /// the rolling update replaces pods.
    fn ensure_revision_pod(&mut self, pod: &Key, revision: &str, owner: &Value) {
        if self.objects.contains_key(pod) {
            return;
        }
        let template = self.revisions.get(revision).cloned().unwrap_or(json!({}));
        self.ensure_pod(pod, &template, owner);
        if let Some(labels) = self
            .objects
            .get_mut(pod)
            .and_then(|o| o.pointer_mut("/metadata/labels"))
            .and_then(Value::as_object_mut)
        {
            labels.insert(REVISION_LABEL.into(), json!(revision));
        }
    }

    /// The claims of the StatefulSet `key`'s pod `index`, one per template
    /// in `claims`, created (bound) where they are missing.
    fn ensure_claims(&mut self, key: &Key, index: usize, claims: &[Value]) -> Vec<Key> {
        let claim_keys: Vec<Key> = claims
            .iter()
            .map(|claim| {
                let template = claim
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("data");
                let name = format!("{template}-{}-{index}", key.name);
                Key::new("v1", "PersistentVolumeClaim", &key.namespace, &name)
            })
            .collect();
        for (claim, claim_key) in claims.iter().zip(&claim_keys) {
            if !self.objects.contains_key(claim_key) {
                // Admission gives a claim without a class the default one;
                // the volume bound to it has the size it requests.
                let mut spec = claim.get("spec").cloned().unwrap_or(json!({}));
                if let Some(spec) = spec.as_object_mut() {
                    spec.entry("storageClassName")
                        .or_insert_with(|| json!(DEFAULT_CLASS));
                }
                let capacity = spec
                    .pointer("/resources/requests")
                    .cloned()
                    .unwrap_or(json!({}));
                let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim_key.name, "namespace": key.namespace,
                                 "labels": claim.pointer("/metadata/labels").cloned().unwrap_or(json!({}))},
                    "spec": spec,
                    "status": {"phase": "Bound", "capacity": capacity}});
                self.create(pvc, Actor::Controllers);
            }
        }
        claim_keys
    }

    fn deployment(&mut self, key: &Key) {
        let Some(deployment) = self.objects.get(key).cloned() else {
            return;
        };
        let (replicas, template) = workload(&deployment);
        for index in 0..replicas {
            self.ensure_pod(&pod_key(key, index), &template, &deployment);
        }
        self.remove_extra_pods(key, &deployment, replicas);
        self.set_workload_status(key, &deployment);
    }

    /// A pod of a workload exists and runs the current template; a pod of
    /// an older template is replaced (created again on the next round).
    fn ensure_pod(&mut self, pod_key: &Key, template: &Value, owner: &Value) {
        let spec = template.get("spec").cloned().unwrap_or(json!({}));
        if let Some(existing) = self.objects.get(pod_key) {
            if existing.get("spec") != Some(&spec) {
                self.delete(pod_key, Actor::Controllers);
            }
            return;
        }
        let mut labels = template
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or(json!({}));
        // The StatefulSet controller names each pod in a label, which a
        // Service can select one pod by.
        if owner["kind"] == "StatefulSet"
            && let Some(map) = labels.as_object_mut()
        {
            map.insert(POD_NAME_LABEL.into(), json!(pod_key.name));
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_key.name, "namespace": pod_key.namespace,
                         "labels": labels,
                         "ownerReferences": [owner_ref(owner)]},
            "spec": spec,
            "status": {"phase": "Pending"}});
        self.create(pod, Actor::Controllers);
    }

    fn remove_extra_pods(&mut self, key: &Key, owner: &Value, replicas: usize) {
        let Some(uid) = uid_of(owner).map(String::from) else {
            return;
        };
        let extra: Vec<Key> = self
            .objects
            .iter()
            .filter(|(k, o)| {
                k.kind == "Pod" && k.namespace == key.namespace && is_owned_by(o, &uid)
            })
            .filter(|(k, _)| {
                k.name
                    .strip_prefix(&format!("{}-", key.name))
                    .and_then(|i| i.parse::<usize>().ok())
                    .is_none_or(|i| i >= replicas)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for pod in extra {
            self.delete(&pod, Actor::Controllers);
        }
    }

    fn set_workload_status(&mut self, key: &Key, owner: &Value) {
        let Some(uid) = uid_of(owner) else {
            return;
        };
        let pods: Vec<&Value> = self
            .objects
            .iter()
            .filter(|(k, o)| k.kind == "Pod" && is_owned_by(o, uid))
            .map(|(_, o)| o)
            .collect();
        let ready = pods.iter().filter(|p| is_ready(p)).count();
        let status = json!({
            "replicas": pods.len(),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": owner.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        });
        if let Some(object) = self.objects.get_mut(key) {
            object_map(object, "status").extend(status.as_object().cloned().unwrap_or_default());
        }
    }

    /// A Job runs for `job_steps` rounds, then succeeds or, if scripted,
    /// fails. A finished Job stays finished.
    fn job(&mut self, key: &Key) {
        let Some(job) = self.objects.get(key) else {
            return;
        };
        let finished = job
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty());
        if finished {
            return;
        }
        let done = self.age_of(job) >= self.job_steps;
        let mut fails = self.failing_jobs.iter().any(|f| job_matches(f, &key.name));
        if done && !fails {
            let patches = claim_patches(job, &key.namespace);
            fails = !self.patch_claims(&patches);
        }
        let now = format_time(self.now);
        let status = match (done, fails) {
            (false, _) => json!({"active": 1, "startTime": now}),
            (true, false) => json!({"succeeded": 1, "completionTime": now,
                "conditions": [{"type": "Complete", "status": "True"}]}),
            (true, true) => json!({"failed": 1,
                "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
        };
        if let Some(object) = self.objects.get_mut(key) {
            object
                .as_object_mut()
                .map(|o| o.insert("status".into(), status));
        }
    }

    /// Applies a grow Job's `kubectl patch` of claims, each a JSON patch of
    /// `test` and `replace` operations; false (nothing changed of that
    /// claim) when a test fails or the claim is missing, as kubectl fails.
    fn patch_claims(&mut self, patches: &[(Key, Vec<Value>)]) -> bool {
        let mut all = true;
        for (claim, ops) in patches {
            let Some(object) = self.objects.get(claim) else {
                all = false;
                continue;
            };
            let mut patched = object.clone();
            let applied = ops.iter().all(|op| {
                let path = op["path"].as_str().unwrap_or_default();
                match op["op"].as_str() {
                    Some("test") => patched.pointer(path) == Some(&op["value"]),
                    Some("replace") => patched
                        .pointer_mut(path)
                        .map(|v| *v = op["value"].clone())
                        .is_some(),
                    _ => false,
                }
            });
            if applied {
                if let Some(object) = self.objects.get_mut(claim) {
                    *object = patched;
                }
                self.record(Verb::Updated, claim, Actor::Controllers);
            }
            all &= applied;
        }
        all
    }

    /// A pod runs once scheduled and is ready from its second round on,
    /// unless scripted not to be, or unless it refuses to start on an empty
    /// volume (see [`Cluster::refuses_empty_volume`]). Its `Ready`
    /// condition's `lastTransitionTime` moves only when its status flips,
    /// as the kubelet's does: how long a pod has been not ready is read
    /// from it.
    fn pod(&mut self, key: &Key) {
        let Some(pod) = self.objects.get(key) else {
            return;
        };
        let empty = self.empty_claims(pod, &key.name);
        let refuses = !empty.is_empty() && self.refuses_empty_volume(pod, &key.name);
        let ready = self.age_of(pod) >= 1 && !self.not_ready_pods.contains(&key.name) && !refuses;
        let status = if ready { "True" } else { "False" };
        let was = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
        let since = was
            .filter(|c| c["status"] == status)
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(format_time(self.now)));
        let ip = format!(
            "10.{}.{}.{}",
            self.next_uid % 200,
            key.name.len() % 250,
            uid_of(pod).map_or(0, |u| u.len())
        );
        let ip = pod
            .pointer("/status/podIP")
            .and_then(Value::as_str)
            .map_or(ip, String::from);
        let mut status = json!({"phase": "Running", "podIP": ip, "conditions": [
            {"type": "Ready", "status": status, "lastTransitionTime": since}]});
        if refuses {
            // As `start.sh` leaves it: the hook reads why from here.
            status["containerStatuses"] = json!([{"name": "postgres", "restartCount": 1,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "message": EMPTY_VOLUME_REFUSAL}}}]);
        }
        if let Some(object) = self.objects.get_mut(key) {
            object
                .as_object_mut()
                .map(|o| o.insert("status".into(), status));
        }
        // A pod that starts on an empty volume fills it (it cloned).
        if ready {
            for claim in empty {
                self.empty_volumes.remove(&claim);
            }
        }
    }

    /// The StatefulSet that owns `pod`, if one does.
    fn statefulset_of(&self, pod: &Value) -> Option<(&Key, &Value)> {
        let owners = owners(pod);
        self.objects.iter().find(|(k, o)| {
            k.kind == "StatefulSet" && uid_of(o).is_some_and(|u| owners.iter().any(|w| w == u))
        })
    }

    /// The claims of a StatefulSet's pod (`<template>-<pod>`, for each of
    /// its owner's claim templates) that are empty.
    fn empty_claims(&self, pod: &Value, name: &str) -> Vec<String> {
        if self.empty_volumes.is_empty() {
            return Vec::new();
        }
        let Some((_, sts)) = self.statefulset_of(pod) else {
            return Vec::new();
        };
        sts.pointer("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| t.pointer("/metadata/name").and_then(Value::as_str))
            .map(|t| format!("{t}-{name}"))
            .filter(|claim| self.empty_volumes.contains(claim))
            .collect()
    }

    /// `start.sh`'s rule for an instance whose volume is empty: it reads
    /// its role from the ConfigMap its pod mounts as the volume `role`
    /// (`primary`, `initialized`). If it is the designated primary of a
    /// Database that was initialized, it refuses to start (initializing
    /// there would serve an empty cluster over lost data), and stays not
    /// ready, saying why in its container's termination message; any other
    /// instance clones the primary and becomes ready, as on a first start.
    fn refuses_empty_volume(&self, pod: &Value, name: &str) -> bool {
        let namespace = pod
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        let role = pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "role")
            .and_then(|v| v.pointer("/configMap/name"))
            .and_then(Value::as_str)
            .and_then(|map| {
                self.objects
                    .get(&Key::new("v1", "ConfigMap", namespace, map))
            });
        role.is_some_and(|role| {
            role.pointer("/data/primary").and_then(Value::as_str) == Some(name)
                && role.pointer("/data/initialized").and_then(Value::as_str) == Some("true")
        })
    }

    /// Loses the volume of a StatefulSet's pod (a disk or its zone lost):
    /// its claims and the pod are deleted, and the StatefulSet makes them
    /// again on its next round, the claims bound to new, empty volumes.
    /// Returns the claims lost; none when `pod` is not a StatefulSet's.
    pub fn lose_volume(&mut self, pod: &Key) -> Vec<String> {
        let Some(object) = self.objects.get(pod) else {
            return Vec::new();
        };
        let Some((sts_key, sts)) = self
            .statefulset_of(object)
            .map(|(k, o)| (k.clone(), o.clone()))
        else {
            return Vec::new();
        };
        let Some(index) = pod
            .name
            .strip_prefix(&format!("{}-", sts_key.name))
            .and_then(|i| i.parse::<usize>().ok())
        else {
            return Vec::new();
        };
        let templates = sts
            .pointer("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let claims: Vec<Key> = self.ensure_claims(&sts_key, index, &templates);
        for claim in &claims {
            self.delete(claim, Actor::User);
        }
        self.delete(pod, Actor::User);
        self.collect_garbage();
        // The StatefulSet makes them again, empty, on its next round, and
        // the pod on them.
        let names: Vec<String> = claims.into_iter().map(|k| k.name).collect();
        self.empty_volumes.extend(names.iter().cloned());
        names
    }

    /// Deletes, until none is left, objects whose every owner is gone.
    pub fn collect_garbage(&mut self) {
        loop {
            let uids: BTreeSet<String> = self
                .objects
                .values()
                .filter_map(|o| uid_of(o).map(String::from))
                .collect();
            let orphans: Vec<Key> = self
                .objects
                .iter()
                .filter(|(_, o)| {
                    let owners = owners(o);
                    !owners.is_empty() && owners.iter().all(|uid| !uids.contains(uid))
                })
                .map(|(k, _)| k.clone())
                .collect();
            if orphans.is_empty() {
                return;
            }
            for key in orphans {
                self.delete(&key, Actor::Controllers);
            }
        }
    }
}

/// The claims a Job's containers patch with `kubectl patch
/// persistentvolumeclaim NAME --namespace NS --type=json -p PATCH`, and
/// their patches.
fn claim_patches(job: &Value, namespace: &str) -> Vec<(Key, Vec<Value>)> {
    let containers = job
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array);
    containers
        .into_iter()
        .flatten()
        .filter(|c| c["command"] == json!(["kubectl"]))
        .filter_map(|c| {
            let args: Vec<&str> = c["args"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let ["patch", "persistentvolumeclaim", name, rest @ ..] = args.as_slice() else {
                return None;
            };
            let after = |flag: &str| {
                rest.iter()
                    .position(|a| *a == flag)
                    .and_then(|i| rest.get(i + 1))
            };
            let ns = after("--namespace").copied().unwrap_or(namespace);
            let ops: Vec<Value> = serde_json::from_str(after("-p")?).ok()?;
            Some((Key::new("v1", "PersistentVolumeClaim", ns, name), ops))
        })
        .collect()
}

/// True when `pattern` (a Job's name, or the start of names followed by
/// `*`) names the Job `name`.
pub fn job_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(start) => name.starts_with(start),
        None => pattern == name,
    }
}

/// A StatefulSet's rolling-update partition (0 when unset); `None` under
/// `OnDelete`, where the controller replaces no pod by itself.
fn rolling_partition(sts: &Value) -> Option<usize> {
    let strategy = sts.pointer("/spec/updateStrategy");
    if strategy.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("OnDelete") {
        return None;
    }
    let partition = strategy
        .and_then(|s| s.pointer("/rollingUpdate/partition"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    Some(usize::try_from(partition.max(0)).unwrap_or(0))
}

/// How many pods a workload asks for (1 when unset) and their template.
fn workload(object: &Value) -> (usize, Value) {
    let replicas = object
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0) as usize;
    let template = object
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(json!({}));
    (replicas, template)
}

/// The pod a workload runs at `index`: `<workload>-<index>`.
fn pod_key(workload: &Key, index: usize) -> Key {
    Key::new(
        "v1",
        "Pod",
        &workload.namespace,
        &format!("{}-{index}", workload.name),
    )
}

/// The uid of an object.
pub fn uid_of(object: &Value) -> Option<&str> {
    object.pointer("/metadata/uid").and_then(Value::as_str)
}

/// The uids an object's owner references name.
pub fn owners(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// True when one of `object`'s owner references names `uid`.
pub fn is_owned_by(object: &Value, uid: &str) -> bool {
    owners(object).iter().any(|u| u == uid)
}

/// True for a pod whose Ready condition is True.
pub fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// A controller owner reference to `owner`.
pub fn owner_ref(owner: &Value) -> Value {
    json!({
        "apiVersion": owner.get("apiVersion").cloned().unwrap_or(Value::Null),
        "kind": owner.get("kind").cloned().unwrap_or(Value::Null),
        "name": owner.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
        "uid": owner.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn set_owned(object: &mut Value, owner: &Value, owned: bool) {
    let uid = uid_of(owner).unwrap_or_default().to_string();
    let meta = object_map(object, "metadata");
    let mut refs: Vec<Value> = meta
        .get("ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
    if owned {
        refs.push(owner_ref(owner));
    }
    if refs.is_empty() {
        meta.remove("ownerReferences");
    } else {
        meta.insert("ownerReferences".into(), Value::Array(refs));
    }
}

/// The object at `field` of `value`, made an object if it was not one.
pub fn object_map<'a>(value: &'a mut Value, field: &str) -> &'a mut Map<String, Value> {
    if !value.is_object() {
        *value = json!({});
    }
    let map = value.as_object_mut().expect("made an object above");
    let entry = map.entry(field.to_string()).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry.as_object_mut().expect("made an object above")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn at() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    /// A StatefulSet of `replicas`, one volume each.
    fn statefulset(replicas: i64, when_deleted: &str) -> Value {
        fixtures::statefulset("db")
            .namespace("ns")
            .replicas(replicas)
            .set("/spec/template/metadata/labels", json!({"app": "db"}))
            .containers(json!([{"name": "c"}]))
            .set(
                "/spec/volumeClaimTemplates",
                json!([{"metadata": {"name": "data"}}]),
            )
            .when_deleted(when_deleted)
            .json()
    }

    fn count(cluster: &Cluster, kind: &str) -> usize {
        cluster.objects().filter(|(k, _)| k.kind == kind).count()
    }

    #[test]
    fn statefulset_claims_follow_the_retention_policy() {
        for (policy, claims_after) in [("Retain", 2), ("Delete", 0)] {
            let mut cluster = Cluster::new(at());
            let sts = cluster.create(statefulset(2, policy), Actor::User).unwrap();
            // OrderedReady: one pod a round, each once the one before is ready.
            for _ in 0..4 {
                cluster.reconcile();
            }
            assert_eq!(count(&cluster, "Pod"), 2, "{policy}");
            assert_eq!(count(&cluster, "PersistentVolumeClaim"), 2, "{policy}");
            let ready = cluster.get(&sts).unwrap()["status"]["readyReplicas"].clone();
            assert_eq!(ready, json!(2), "{policy}");
            cluster.delete(&sts, Actor::User);
            cluster.collect_garbage();
            assert_eq!(count(&cluster, "Pod"), 0, "{policy}");
            assert_eq!(
                count(&cluster, "PersistentVolumeClaim"),
                claims_after,
                "{policy}"
            );
        }
    }

    /// A StatefulSet of three, its pods all started (one a round, in order).
    fn three_running() -> (Cluster, Key) {
        let mut cluster = Cluster::new(at());
        let sts = cluster
            .create(statefulset(3, "Retain"), Actor::User)
            .unwrap();
        for _ in 0..6 {
            cluster.reconcile();
        }
        (cluster, sts)
    }

    /// Issue 21: a changed template rolls out from the highest ordinal
    /// down to the partition, one pod a round once the one above is ready;
    /// a pod below the partition keeps the old template, even made again.
    #[test]
    fn a_new_template_rolls_down_to_the_partition_only() {
        let (mut cluster, sts) = three_running();
        let uid =
            |c: &Cluster, i: usize| uid_of(c.get(&pod_key(&sts, i)).unwrap()).map(String::from);
        let image = |c: &Cluster, i: usize| {
            c.get(&pod_key(&sts, i))
                .and_then(|p| p.pointer("/spec/containers/0/image").cloned())
        };
        let before: Vec<_> = (0..3).map(|i| uid(&cluster, i)).collect();
        let mut changed = cluster.get(&sts).unwrap().clone();
        changed["spec"]["template"]["spec"]["containers"] = json!([{"name": "c", "image": "v2"}]);
        changed["spec"]["updateStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 1}});
        cluster.update(&sts, &changed, Actor::User);
        let mut replaced = Vec::new();
        for _ in 0..10 {
            cluster.reconcile();
            for i in 0..3 {
                if cluster.get(&pod_key(&sts, i)).is_none() && !replaced.contains(&i) {
                    replaced.push(i);
                }
            }
        }
        assert_eq!(replaced, vec![2, 1], "the order of replacements");
        assert_eq!(
            uid(&cluster, 0),
            before[0],
            "instance 0 is below the partition"
        );
        assert_eq!(image(&cluster, 1), Some(json!("v2")));
        assert_eq!(image(&cluster, 0), None);
        let status = cluster.get(&sts).unwrap()["status"].clone();
        assert_eq!(status["updatedReplicas"], json!(2));
        assert_ne!(status["currentRevision"], status["updateRevision"]);
        // Made again below the partition: the old template.
        cluster.delete(&pod_key(&sts, 0), Actor::User);
        cluster.reconcile();
        assert_eq!(image(&cluster, 0), None);
        // Partition 0: instance 0 goes too, and the revision is complete.
        changed["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(0);
        cluster.update(&sts, &changed, Actor::User);
        for _ in 0..4 {
            cluster.reconcile();
        }
        assert_eq!(image(&cluster, 0), Some(json!("v2")));
        let status = cluster.get(&sts).unwrap()["status"].clone();
        assert_eq!(status["currentRevision"], status["updateRevision"]);
    }

    /// Issue 18: the real StatefulSet controller hands a claim to the
    /// StatefulSet only for a pod it runs and finds ready, in order, and
    /// never for an ordinal left over from a scale-down.
    #[test]
    fn claims_are_handed_over_pod_by_pod_and_never_for_leftover_ordinals() {
        let (mut cluster, sts) = three_running();
        assert_eq!(count(&cluster, "Pod"), 3);
        let template = statefulset(2, "Delete")["spec"].clone();
        cluster.update(&sts, &json!({"spec": template}), Actor::User);
        cluster.not_ready_pods.insert("db-1".into());
        for _ in 0..3 {
            cluster.reconcile();
        }
        let uid = cluster.get(&sts).unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string();
        let held = |cluster: &Cluster, i: usize| {
            let claim = Key::new("v1", "PersistentVolumeClaim", "ns", &format!("data-db-{i}"));
            is_owned_by(cluster.get(&claim).unwrap(), &uid)
        };
        assert!(held(&cluster, 0), "a ready pod's claim is handed over");
        assert!(!held(&cluster, 1), "not while its pod is not ready");
        assert!(!held(&cluster, 2), "never for an ordinal scaled away");
        cluster.not_ready_pods.clear();
        for _ in 0..3 {
            cluster.reconcile();
        }
        assert!(held(&cluster, 1));
        assert!(!held(&cluster, 2), "still never for an ordinal scaled away");
    }

    fn ready_condition(cluster: &Cluster, pod: &str) -> (Value, Value) {
        let pod = cluster.get(&Key::new("v1", "Pod", "ns", pod)).unwrap();
        let ready = &pod["status"]["conditions"][0];
        (ready["status"].clone(), ready["lastTransitionTime"].clone())
    }

    /// The hook measures how long a pod has been not ready from its Ready
    /// condition's lastTransitionTime: it moves only when the status flips.
    /// Under `Parallel` every pod is made in the first round and becomes
    /// ready in the next, whether or not the others are.
    #[test]
    fn parallel_pods_start_together_and_ready_moves_only_when_it_flips() {
        let mut cluster = Cluster::new(at());
        let mut sts = statefulset(3, "Retain");
        sts["spec"]["podManagementPolicy"] = json!("Parallel");
        cluster.not_ready_pods.insert("db-0".into());
        cluster.create(sts, Actor::User).unwrap();
        let tick = |cluster: &mut Cluster| {
            cluster.now = cluster
                .now
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(10))
                .unwrap();
            cluster.reconcile();
        };
        tick(&mut cluster);
        assert_eq!(count(&cluster, "Pod"), 3, "all at once");
        tick(&mut cluster);
        assert_eq!(ready_condition(&cluster, "db-1").0, "True");
        assert_eq!(ready_condition(&cluster, "db-2").0, "True");
        let (status, since) = ready_condition(&cluster, "db-0");
        assert_eq!(
            (status, &since),
            (json!("False"), &json!("2026-01-01T00:00:20Z"))
        );
        for _ in 0..3 {
            tick(&mut cluster);
        }
        assert_eq!(
            ready_condition(&cluster, "db-0").1,
            since,
            "kept while False"
        );
        assert_eq!(
            ready_condition(&cluster, "db-1").1,
            json!("2026-01-01T00:00:20Z"),
            "kept while True"
        );
        cluster.not_ready_pods.clear();
        tick(&mut cluster);
        assert_eq!(
            ready_condition(&cluster, "db-0"),
            (json!("True"), json!("2026-01-01T00:01:00Z")),
            "moved when it flipped"
        );
    }

    /// `start.sh`'s rule on an empty volume: the designated primary of an
    /// initialized Database refuses to start; another instance clones.
    #[test]
    fn on_a_lost_volume_the_designated_primary_refuses_and_a_standby_clones() {
        for (role, pod, ready) in [
            (("db-0", "true"), "db-0", false),
            (("db-0", "true"), "db-1", true),
            (("db-0", "false"), "db-0", true),
        ] {
            let mut cluster = Cluster::new(at());
            let mut sts = statefulset(2, "Retain");
            sts["spec"]["template"]["spec"]["volumes"] =
                json!([{"name": "role", "configMap": {"name": "db-role"}}]);
            let map = fixtures::object("v1", "ConfigMap", "db-role")
                .namespace("ns")
                .set("/data", json!({"primary": role.0, "initialized": role.1}));
            cluster.create(map.json(), Actor::User);
            cluster.create(sts, Actor::User).unwrap();
            for _ in 0..4 {
                cluster.reconcile();
            }
            let claim = format!("data-{pod}");
            let uid = |cluster: &Cluster| {
                let key = Key::new("v1", "PersistentVolumeClaim", "ns", &claim);
                uid_of(cluster.get(&key).unwrap()).unwrap().to_string()
            };
            let before = uid(&cluster);
            let lost = cluster.lose_volume(&Key::new("v1", "Pod", "ns", pod));
            assert_eq!(lost, vec![claim.clone()]);
            for _ in 0..3 {
                cluster.reconcile();
            }
            assert_ne!(uid(&cluster), before, "a new claim");
            let (status, _) = ready_condition(&cluster, pod);
            let why = format!("{role:?} {pod}");
            assert_eq!(status, json!(if ready { "True" } else { "False" }), "{why}");
            assert_eq!(cluster.empty_volumes.contains(&claim), !ready, "{why}");
        }
    }

    #[test]
    fn scale_down_keeps_claims_and_jobs_finish_as_scripted() {
        let (mut cluster, sts) = three_running();
        cluster.update(&sts, &json!({"spec": {"replicas": 1, "template": statefulset(1, "Retain")["spec"]["template"],
            "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}), Actor::User);
        cluster.reconcile();
        assert_eq!(count(&cluster, "Pod"), 1);
        assert_eq!(count(&cluster, "PersistentVolumeClaim"), 3);
        assert_eq!(cluster.get(&sts).unwrap()["metadata"]["generation"], 2);

        cluster.failing_jobs.insert("bad".into());
        cluster.failing_jobs.insert("worse-*".into());
        for name in ["good", "bad", "worse-1"] {
            // As a user creates it: no status yet.
            let job = fixtures::object("batch/v1", "Job", name).namespace("ns");
            cluster.create(job.json(), Actor::User);
        }
        for _ in 0..3 {
            cluster.reconcile();
        }
        let condition = |name: &str| {
            cluster
                .get(&Key::new("batch/v1", "Job", "ns", name))
                .unwrap()["status"]["conditions"][0]["type"]
                .clone()
        };
        assert_eq!(condition("good"), "Complete");
        assert_eq!(condition("bad"), "Failed");
        assert_eq!(condition("worse-1"), "Failed", "by the start of its name");
    }
}
