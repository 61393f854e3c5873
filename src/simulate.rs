//! The loop, offline: an operator driven through many steps with
//! Metacontroller's semantics, so that what it does over a whole life (not
//! one answer) can be read and checked before it runs anywhere.
//!
//! Each [`Simulation::step`] is what one resync does in a real cluster: the
//! modelled controllers act ([`cluster`]), then Metacontroller calls the
//! customize hook for related objects and the sync (or, once the parent is
//! being deleted, finalize) hook with the observed children, through the
//! same byte adapter the server uses. A 200 answer is applied as
//! Metacontroller applies it: missing children are created, existing ones
//! updated according to their type's update strategy (never under
//! `OnDelete`, recreated under `Recreate`), observed children left out are
//! deleted, the status is written back only if the CRD's schema accepts it
//! (with Metacontroller's own `observedGeneration` and, for rolling child
//! types, its `Updated` condition), and `finalized: true` removes the
//! finalizer. Any other answer changes nothing.
//!
//! What it must not do: read a clock or a random source (time advances a
//! fixed amount per step; randomness is a seed), or call anything outside
//! this process. It lives above `operators` and `hook`; nothing imports it
//! but the CLI and tests.
//!
//! The parts: `events` (the words of `--then` and what they mean),
//! `report` (what each step says), `request` (what Metacontroller sends),
//! `response` (how it applies a 200 answer) and [`cluster`] (the object
//! store and the modelled controllers). This file holds the
//! [`Simulation`] itself: the events applied, the step, the call.

pub mod cluster;
mod events;
mod report;
mod request;
mod response;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::call as adapter;
use crate::hook::Hook;
use crate::operator::Operator;
use crate::operators::database;
use crate::operators::schema::{self, PartSchema};
use cluster::{Actor, Cluster, Key, Verb, is_owned_by, object_map, owner_ref, uid_of};
use report::{condition_text, news};
use request::{Request, kind_of};

pub use events::Event;
pub use report::{Outcome, Refusal, Step};

/// How far the model's clock moves per step.
pub const STEP_SECONDS: i64 = 10;

/// One operator, one parent, one cluster, stepped through time.
pub struct Simulation<'a> {
    op: &'a Operator,
    schema: Arc<PartSchema>,
    /// The cluster: the parent, its children and everything the modelled
    /// controllers made.
    pub cluster: Cluster,
    parent: Key,
    parent_uid: String,
    finalizer: Option<String>,
    seed: u64,
    hook_down: u32,
    /// After a scripted restart: how many writes of the next answer happen.
    crash_after: Option<usize>,
    /// Whether this step's answer was cut short by that restart.
    interrupted: bool,
    steps: u32,
    /// Children and volumes that existed before the parent's deletion
    /// began, none of which may be created again, but a Job the user
    /// deleted since (a retry asked for).
    had: BTreeSet<Key>,
    deleting: bool,
    /// Each condition's text and message as last shown.
    said: BTreeMap<String, (String, String)>,
}

impl<'a> Simulation<'a> {
    /// Creates `parent` (YAML or JSON already parsed) in an empty cluster at
    /// `now`; `seed` stands in for the randomness a server passes each call.
    pub fn new(
        op: &'a Operator,
        mut parent: Value,
        now: Timestamp,
        seed: u64,
    ) -> Result<Self, String> {
        let api_version = op.api_version();
        if parent["apiVersion"] != api_version || parent["kind"] != op.kind.as_str() {
            return Err(format!(
                "the parent must be apiVersion {api_version}, kind {}; this file has {} {}",
                op.kind, parent["apiVersion"], parent["kind"]
            ));
        }
        let finalizer = op
            .hooks()
            .any(|h| h == Hook::Finalize)
            .then(|| format!("metacontroller.io/compositecontroller-{}", op.plural()));
        if let Some(f) = &finalizer {
            object_map(&mut parent, "metadata").insert("finalizers".into(), json!([f]));
        }
        let mut cluster = Cluster::new(now);
        let key = cluster
            .create(parent, Actor::User)
            .ok_or("the parent needs metadata.name")?;
        cluster.take_changes();
        let parent_uid = uid_of(cluster.get(&key).expect("just created"))
            .expect("created objects have uids")
            .to_string();
        Ok(Simulation {
            op,
            schema: PartSchema::status(op),
            cluster,
            parent: key,
            parent_uid,
            finalizer,
            seed,
            hook_down: 0,
            crash_after: None,
            interrupted: false,
            steps: 0,
            had: BTreeSet::new(),
            deleting: false,
            said: BTreeMap::new(),
        })
    }

    /// The parent as stored now, `None` once it is gone.
    pub fn parent(&self) -> Option<&Value> {
        self.cluster.get(&self.parent)
    }

    /// The parent's children (objects it controls), in key order.
    pub fn children(&self) -> Vec<Key> {
        self.cluster
            .objects()
            .filter(|(_, o)| is_owned_by(o, &self.parent_uid))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// True once the parent's deletion began.
    pub fn is_deleting(&self) -> bool {
        self.deleting
    }

    /// Why the API server would refuse to create the parent as it is now:
    /// its spec against the CRD's schema and CEL rules, and the rules on
    /// the whole object (its name's length); the hook's refusal, in the
    /// same words.
    pub fn check_created(&self) -> Result<(), String> {
        let parent = self.parent().ok_or("the parent is gone")?;
        self.admit(parent, None)
    }

    /// Why the CRD refuses `parent`, its spec written over `old` (or
    /// created).
    fn admit(&self, parent: &Value, old: Option<&Value>) -> Result<(), String> {
        schema::admit(self.op, parent, old)
            .map_err(|why| format!("the {} CRD refuses it: {why}", self.op.kind))
    }

    /// Why `event` names nothing there is, or asks for a spec the API
    /// server would refuse, if it does: what a person typing events is
    /// told, instead of an event that silently does nothing. (`apply`
    /// takes any event, as the properties' random specs need.)
    pub fn check(&self, event: &Event) -> Result<(), String> {
        match event {
            Event::SetSpec { path, value } => {
                let spec = self.spec_after(path, value)?;
                let parent = self.parent().ok_or("the parent is gone")?;
                let mut changed = parent.clone();
                changed["spec"] = spec;
                self.admit(&changed, parent.get("spec"))
                    .map_err(|why| format!("spec.{}: {why}", path.join(".")))
            }
            Event::NotReady(pod, _) => self.find("Pod", pod).map(drop),
            Event::FailJob(name) | Event::HealJob(name) => {
                let prefix = format!("{}-", self.parent.name);
                match name.trim_end_matches('*').starts_with(&prefix) {
                    true => Ok(()),
                    false => Err(format!(
                        "names no Job of {}, whose Jobs are named {prefix}…",
                        self.parent.name
                    )),
                }
            }
            _ => Ok(()),
        }
    }

    /// Applies an event from outside the loop.
    pub fn apply(&mut self, event: &Event) -> Result<(), String> {
        match event {
            Event::SetSpec { path, value } => self.set_spec(path, value)?,
            Event::DeleteParent => {
                self.begin_deletion();
                self.cluster.delete(&self.parent.clone(), Actor::User);
                self.cluster.collect_garbage();
            }
            Event::Delete { kind, name } => {
                let key = self.find(kind, name)?;
                // Deleting a failed Job is how a user asks for a retry,
                // also while the parent is deleted.
                if self.deleting && kind == "Job" {
                    self.had.remove(&key);
                }
                self.cluster.delete(&key, Actor::User);
                self.cluster.collect_garbage();
            }
            Event::Annotate {
                kind,
                name,
                key,
                value,
            } => {
                let target = self.find(kind, name)?;
                self.annotate(&target, key, value.as_deref());
            }
            Event::HookDown(steps) => self.hook_down = *steps,
            Event::RestartMetacontroller(writes) => self.crash_after = Some(*writes),
            Event::FailJob(name) => {
                self.cluster.failing_jobs.insert(name.clone());
            }
            Event::HealJob(name) => {
                // As failed: by name, or by a pattern given to fail-job.
                self.cluster.failing_jobs.remove(name);
            }
            Event::NotReady(pod, not_ready) => {
                if *not_ready {
                    self.cluster.not_ready_pods.insert(pod.clone());
                } else {
                    self.cluster.not_ready_pods.remove(pod);
                }
            }
            Event::KillPrimary => {
                let pod = self.designated_primary()?;
                self.cluster.not_ready_pods.insert(pod);
            }
            Event::LoseVolume(pod) => {
                let key = self.find("Pod", pod)?;
                if self.cluster.lose_volume(&key).is_empty() {
                    return Err(format!("{pod} has no volume of a StatefulSet to lose"));
                }
            }
            Event::RunCronJob(name) => {
                let key = self.find("CronJob", name)?;
                self.cluster.run_cronjob(&key);
            }
        }
        Ok(())
    }

    /// The pod the parent's role ConfigMap (`<parent>-role`) names as the
    /// designated primary.
    pub fn designated_primary(&self) -> Result<String, String> {
        let role = database::names::role_name_of(&self.parent.name);
        let map = self.find("ConfigMap", &role).map_err(|_| {
            format!("kill-primary: no ConfigMap/{role} says which pod is the primary")
        })?;
        self.cluster
            .get(&map)
            .and_then(|m| m.pointer("/data/primary"))
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| format!("kill-primary: ConfigMap/{role} names no primary"))
    }

    /// The object of `kind` named `name` in the parent's namespace.
    fn find(&self, kind: &str, name: &str) -> Result<Key, String> {
        self.cluster
            .objects()
            .map(|(k, _)| k)
            .find(|k| k.kind == kind && k.name == name && k.namespace == self.parent.namespace)
            .cloned()
            .ok_or_else(|| format!("no {kind}/{name} in the cluster"))
    }

    /// The user sets `spec.PATH` of the parent, making the objects on the
    /// way.
    fn set_spec(&mut self, path: &[String], value: &Value) -> Result<(), String> {
        let spec = self.spec_after(path, value)?;
        self.cluster
            .update(&self.parent.clone(), &json!({"spec": spec}), Actor::User);
        Ok(())
    }

    /// The parent's spec with `spec.PATH` set to `value`.
    fn spec_after(&self, path: &[String], value: &Value) -> Result<Value, String> {
        let parent = self.parent().ok_or("the parent is gone")?;
        let mut spec = parent.get("spec").cloned().unwrap_or(json!({}));
        let mut at = &mut spec;
        for (i, part) in path.iter().enumerate() {
            let map = at
                .as_object_mut()
                .ok_or_else(|| format!("spec.{} is not an object", path[..i].join(".")))?;
            at = map.entry(part.clone()).or_insert_with(|| json!({}));
        }
        *at = value.clone();
        Ok(spec)
    }

    /// The user sets (or, with `None`, removes) an annotation of `target`.
    fn annotate(&mut self, target: &Key, key: &str, value: Option<&str>) {
        self.cluster.edit(target, |object| {
            let annotations = object_map(object, "metadata")
                .entry("annotations")
                .or_insert_with(|| json!({}));
            if let Some(map) = annotations.as_object_mut() {
                match value {
                    Some(v) => map.insert(key.to_string(), json!(v)),
                    None => map.remove(key),
                };
            }
        });
    }

    /// Notes, once, that the parent's deletion began, and what it had
    /// then: none of it may be created again.
    fn begin_deletion(&mut self) {
        if self.deleting {
            return;
        }
        self.deleting = true;
        let uid = self.parent_uid.clone();
        self.had = self
            .cluster
            .objects()
            .filter(|(k, o)| is_owned_by(o, &uid) || k.kind == "PersistentVolumeClaim")
            .map(|(k, _)| k.clone())
            .collect();
    }

    /// One resync: the controllers act, then the hook is called and its
    /// answer applied.
    pub fn step(&mut self) -> Step {
        self.steps += 1;
        self.cluster.now = self
            .cluster
            .now
            .checked_add(SignedDuration::from_secs(STEP_SECONDS))
            .unwrap_or(self.cluster.now);
        self.cluster.reconcile();
        self.interrupted = false;
        let running_jobs = self.cluster.running_jobs();
        let mut violations = Vec::new();
        let (outcome, answer) = if self.parent().is_none() {
            (Outcome::Gone, None)
        } else if self.hook_down > 0 {
            self.hook_down -= 1;
            (Outcome::HookDown, None)
        } else {
            self.call(&mut violations)
        };
        let changes = self.cluster.take_changes();
        if self.deleting {
            for change in &changes {
                if change.verb == Verb::Created && self.had.contains(&change.key) {
                    violations.push(format!("{} created again while deleting", change.key));
                }
            }
        }
        // The cluster and what was said are separate fields: the status is
        // read in place while `said` is brought up to date.
        let status = self.cluster.get(&self.parent).and_then(|p| p.get("status"));
        let news = news(&mut self.said, status);
        Step {
            number: self.steps,
            outcome,
            changes,
            running_jobs,
            phase: status
                .and_then(|s| s.get("phase"))
                .and_then(Value::as_str)
                .map(String::from),
            conditions: status
                .and_then(|s| s.get("conditions"))
                .and_then(Value::as_array)
                .map(|list| list.iter().map(condition_text).collect())
                .unwrap_or_default(),
            news,
            violations,
            answer,
            interrupted: self.interrupted,
        }
    }

    /// Calls customize (if any) and sync or finalize, and applies the answer.
    fn call(&mut self, violations: &mut Vec<String>) -> (Outcome, Option<Vec<u8>>) {
        match self.ask() {
            Err(refusal) => (Outcome::refused(refusal.hook, refusal.reason), None),
            Ok((request, parent, body)) => {
                let finalized =
                    self.apply_and_finalize(&parent, &body, request.finalizing, violations);
                let hook = request.hook;
                (Outcome::Answered { hook, finalized }, Some(body))
            }
        }
    }

    /// Makes the call Metacontroller would make now: the request, the
    /// parent it was made from and the 200 answer's body, or why there is
    /// none.
    fn ask(&mut self) -> Result<(Request, Value, Vec<u8>), Refusal> {
        let (request, parent) = self.request()?;
        let hook = request.hook;
        let call =
            adapter::call_slice(self.op, hook, &request.body, &request.ctx).ok_or_else(|| {
                Refusal {
                    hook,
                    reason: format!("{} has no {hook} hook", self.op.name),
                    error: None,
                }
            })?;
        match call.result {
            Ok(answer) => Ok((request, parent, answer.body)),
            Err(err) => Err(Refusal {
                hook,
                reason: err.to_string(),
                error: Some(err),
            }),
        }
    }

    /// What the hook answers now, as Metacontroller would call it, without
    /// applying the answer: `opshooks render`. The answer's body, or why
    /// it was refused.
    pub fn answer(&mut self) -> Result<Value, Refusal> {
        self.steps += 1;
        let (_, _, body) = self.ask()?;
        Ok(serde_json::from_slice(&body).expect("answers are JSON"))
    }

    /// Adds an object the parent observes: one of the operator's child
    /// types becomes the parent's child (an owner reference to it, as
    /// Metacontroller's children have), anything else stays as it is.
    pub fn observe(&mut self, mut object: Value) -> Result<Key, String> {
        let child = self
            .op
            .controller
            .children
            .iter()
            .any(|c| object["apiVersion"] == c.api_version && object["kind"] == kind_of(c));
        if child {
            let owner = owner_ref(self.parent().ok_or("the parent is gone")?);
            object_map(&mut object, "metadata").insert("ownerReferences".into(), json!([owner]));
        }
        self.cluster
            .create(object, Actor::User)
            .ok_or_else(|| "needs apiVersion, kind and metadata.name, once each".to_string())
    }

    /// Steps until the loop settles (the same answer and no change for
    /// two steps in a row, or the parent gone) or `max_steps` pass. Nothing
    /// in the model waits silently (a Job finishes, a pod becomes ready, on
    /// the first round after it appears), so two quiet steps mean settled.
    /// Returns the steps taken and whether it settled.
    pub fn settle(&mut self, max_steps: u32) -> (Vec<Step>, bool) {
        self.settle_checked(max_steps, |_, _| {})
    }

    /// [`Simulation::settle`], calling `check` after every step with the
    /// cluster as that step left it.
    pub fn settle_checked(
        &mut self,
        max_steps: u32,
        mut check: impl FnMut(&Simulation<'_>, &Step),
    ) -> (Vec<Step>, bool) {
        let mut steps: Vec<Step> = Vec::new();
        let mut quiet = 0;
        while steps.len() < max_steps as usize {
            let step = self.step();
            check(self, &step);
            let same = steps.last().is_some_and(|last| {
                last.answer == step.answer && last.conditions == step.conditions
            });
            let gone = step.outcome == Outcome::Gone;
            let idle = self.hook_down == 0 && step.running_jobs.is_empty();
            quiet = if step.changes.is_empty() && same && idle {
                quiet + 1
            } else {
                0
            };
            steps.push(step);
            if gone || quiet >= 2 {
                return (steps, true);
            }
        }
        (steps, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::webserver;
    use crate::operators::all;

    #[test]
    fn kill_primary_needs_a_role_config_map() {
        let op = all().into_iter().find(|op| op.name == "webserver").unwrap();
        let parent = webserver("web").namespace("ns").spec("replicas", 1).json();
        let mut sim =
            Simulation::new(&op, parent, "2026-01-01T00:00:00Z".parse().unwrap(), 1).unwrap();
        let why = sim.apply(&Event::KillPrimary).unwrap_err();
        assert!(why.contains("no ConfigMap/web-role"), "{why}");
    }

    #[test]
    fn a_webserver_scales_and_rolls_an_image_change_to_the_end() {
        let op = all().into_iter().find(|op| op.name == "webserver").unwrap();
        let parent = webserver("web").namespace("ns").spec("replicas", 2).json();
        let mut sim =
            Simulation::new(&op, parent, "2026-01-01T00:00:00Z".parse().unwrap(), 1).unwrap();
        let (steps, settled) = sim.settle(30);
        assert!(settled);
        assert!(steps.iter().all(|s| s.violations.is_empty()), "{steps:?}");
        let pods = |sim: &Simulation<'_>| {
            sim.cluster
                .objects()
                .filter(|(k, _)| k.kind == "Pod")
                .count()
        };
        assert_eq!(pods(&sim), 2);
        let status = &sim.parent().unwrap()["status"];
        assert_eq!(status["readyReplicas"], 2);
        sim.apply(&Event::parse("spec.image=nginx:1.27").unwrap())
            .unwrap();
        let (steps, settled) = sim.settle(30);
        assert!(settled);
        let replaced = steps
            .iter()
            .flat_map(|s| &s.changes)
            .filter(|c| c.verb == Verb::Deleted && c.key.kind == "Pod")
            .count();
        assert_eq!(replaced, 2, "each pod replaced once");
        let images: Vec<Value> = sim
            .cluster
            .objects()
            .filter(|(k, _)| k.kind == "Pod")
            .map(|(_, p)| p["spec"]["containers"][0]["image"].clone())
            .collect();
        assert_eq!(images, [json!("nginx:1.27"), json!("nginx:1.27")]);
        let up_to_date = &sim.parent().unwrap()["status"]["conditions"][1];
        assert_eq!(
            (&up_to_date["type"], &up_to_date["status"]),
            (&json!("UpToDate"), &json!("True"))
        );
        sim.apply(&Event::parse("spec.replicas=0").unwrap())
            .unwrap();
        let (_, settled) = sim.settle(30);
        assert!(settled);
        assert_eq!(pods(&sim), 0);
    }
}
