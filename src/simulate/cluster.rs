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
//!
//! This file holds what every part shares: the object store ([`Cluster`]),
//! [`Key`], [`Change`] and who made it, the helpers on objects, and the
//! round that calls each controller ([`Cluster::reconcile`]). One file per
//! modelled controller sits below it: `pod` (the kubelet), `statefulset`,
//! `deployment` with `workload` (what the two workloads share), `job` (and
//! the CronJob), `storage` (volume expansion) and `garbage` (the garbage
//! collector). They use what is here; nothing here uses them but the round.

mod deployment;
mod garbage;
mod job;
mod pod;
mod statefulset;
mod storage;
mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::hook::conditions::format_time;

pub use job::job_matches;

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

    /// Records a change, for [`Cluster::take_changes`].
    fn record(&mut self, verb: Verb, key: &Key, actor: Actor) {
        self.changes.push(Change {
            verb,
            key: key.clone(),
            actor,
        });
    }

    /// How many rounds `object` has seen since it was created.
    fn age_of(&self, object: &Value) -> u32 {
        uid_of(object)
            .and_then(|uid| self.age.get(uid))
            .copied()
            .unwrap_or(0)
    }

    /// The StatefulSet that owns `pod`, if one does.
    fn statefulset_of(&self, pod: &Value) -> Option<(&Key, &Value)> {
        let owners = owners(pod);
        self.objects.iter().find(|(k, o)| {
            k.kind == "StatefulSet" && uid_of(o).is_some_and(|u| owners.iter().any(|w| w == u))
        })
    }
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
