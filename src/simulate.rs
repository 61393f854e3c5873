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

pub mod cluster;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::call as adapter;
use crate::hook::Hook;
use crate::operator::{ChildResource, Context, HookError, Operator};
use crate::operators::database;
use crate::operators::schema::{self, PartSchema};
use cluster::{Actor, Change, Cluster, Key, Verb, is_owned_by, object_map, owner_ref, uid_of};

/// How far the model's clock moves per step.
pub const STEP_SECONDS: i64 = 10;

/// Something that happens to the cluster from outside the loop.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The user sets a field of the parent's spec (`spec.version=17`).
    SetSpec {
        /// The path below `spec`, dot-separated.
        path: Vec<String>,
        /// The new value: JSON if it parses as JSON, a string otherwise.
        value: Value,
    },
    /// The user deletes the parent.
    DeleteParent,
    /// The user deletes any object (`delete Job/orders-snapshot`).
    Delete {
        /// The object's kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// The user sets an annotation (`annotate CronJob/x key=value`).
    Annotate {
        /// The object's kind.
        kind: String,
        /// Its name.
        name: String,
        /// The annotation.
        key: String,
        /// Its value; `None` removes it.
        value: Option<String>,
    },
    /// The hook does not answer for this many steps.
    HookDown(u32),
    /// Every run of this Job fails, from now on; a name ending in `*`
    /// stands for every Job whose name starts so (`orders-promote-*`).
    FailJob(String),
    /// Runs of this Job succeed again.
    HealJob(String),
    /// This pod is (or, with `false`, is no longer) kept not ready.
    NotReady(String, bool),
    /// The designated primary's pod, as the parent's role ConfigMap
    /// (`<parent>-role`, `data.primary`) names it, is kept not ready until
    /// `ready POD`.
    KillPrimary,
    /// This StatefulSet pod's volumes are lost: its claims are deleted and
    /// made again empty, and the pod with them (see
    /// [`cluster::Cluster::lose_volume`] for how an instance starts on an
    /// empty volume).
    LoseVolume(String),
    /// The CronJob's schedule fires: one Job from its template.
    RunCronJob(String),
    /// Metacontroller is killed in the middle of its next sync, after this
    /// many writes of the answer (deletions, creations, updates; the status
    /// is the last), and starts again: what it had not written is lost.
    RestartMetacontroller(usize),
}

impl Event {
    /// Parses the words of `--then`: `spec.PATH=VALUE`, `delete`,
    /// `delete KIND/NAME`, `annotate KIND/NAME KEY=VALUE`,
    /// `unannotate KIND/NAME KEY`, `hook-down N`, `fail-job NAME`,
    /// `heal-job NAME`, `not-ready POD`, `ready POD`, `kill-primary`,
    /// `lose-volume POD`, `run-cronjob NAME`, `restart-metacontroller N`.
    pub fn parse(text: &str) -> Result<Event, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        match words.as_slice() {
            [assignment] if assignment.starts_with("spec.") => Event::set_spec(text, assignment),
            ["delete"] => Ok(Event::DeleteParent),
            ["delete", target] => {
                let (kind, name) = object(target)?;
                Ok(Event::Delete { kind, name })
            }
            ["annotate", target, assignment] => {
                let (kind, name) = object(target)?;
                let (key, value) = assignment
                    .split_once('=')
                    .ok_or_else(|| format!("{text:?}: write annotate KIND/NAME KEY=VALUE"))?;
                Ok(Event::Annotate {
                    kind,
                    name,
                    key: key.to_string(),
                    value: Some(value.to_string()),
                })
            }
            ["unannotate", target, key] => {
                let (kind, name) = object(target)?;
                Ok(Event::Annotate {
                    kind,
                    name,
                    key: key.to_string(),
                    value: None,
                })
            }
            ["hook-down", steps] => steps
                .parse()
                .map(Event::HookDown)
                .map_err(|_| format!("{text:?}: hook-down takes a number of steps")),
            ["fail-job", name] => Ok(Event::FailJob(name.to_string())),
            ["heal-job", name] => Ok(Event::HealJob(name.to_string())),
            ["not-ready", pod] => Ok(Event::NotReady(pod.to_string(), true)),
            ["ready", pod] => Ok(Event::NotReady(pod.to_string(), false)),
            ["kill-primary"] => Ok(Event::KillPrimary),
            ["lose-volume", pod] => Ok(Event::LoseVolume(pod.to_string())),
            ["run-cronjob", name] => Ok(Event::RunCronJob(name.to_string())),
            ["restart-metacontroller", writes] => writes
                .parse()
                .map(Event::RestartMetacontroller)
                .map_err(|_| format!("{text:?}: restart-metacontroller takes a number of writes")),
            _ => Err(format!(
                "{text:?} is not an event; use spec.PATH=VALUE, delete, delete KIND/NAME, annotate KIND/NAME KEY=VALUE, unannotate KIND/NAME KEY, hook-down N, fail-job NAME, heal-job NAME, not-ready POD, ready POD, kill-primary, lose-volume POD, run-cronjob NAME or restart-metacontroller N"
            )),
        }
    }

    /// `spec.PATH=VALUE`, the value JSON if it parses as JSON.
    fn set_spec(text: &str, assignment: &str) -> Result<Event, String> {
        let (path, value) = assignment
            .split_once('=')
            .ok_or_else(|| format!("{text:?}: write spec.PATH=VALUE"))?;
        let value = serde_json::from_str(value).unwrap_or_else(|_| json!(value));
        Ok(Event::SetSpec {
            path: path["spec.".len()..].split('.').map(String::from).collect(),
            value,
        })
    }
}

/// An event's `KIND/NAME` as kind and name.
fn object(word: &str) -> Result<(String, String), String> {
    word.split_once('/')
        .map(|(k, n)| (k.to_string(), n.to_string()))
        .ok_or_else(|| format!("{word:?}: name an object as KIND/NAME, like Job/orders-snapshot"))
}

/// One call, ready to make.
struct Request {
    hook: Hook,
    body: Vec<u8>,
    ctx: Context,
    finalizing: bool,
}

/// Why `Simulation::answer` has no answer.
#[derive(Debug)]
pub struct Refusal {
    /// The hook that refused.
    pub hook: Hook,
    /// The one-line reason.
    pub reason: String,
    /// The operator's error, when the operator refused.
    pub error: Option<HookError>,
}

/// How the hook answered in one step.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A 200 answer, applied.
    Answered {
        /// The hook that was called.
        hook: Hook,
        /// Whether the answer said `finalized: true`.
        finalized: bool,
    },
    /// A refusal: nothing changed.
    Refused {
        /// The hook that was called.
        hook: Hook,
        /// The one-line reason.
        reason: String,
    },
    /// The hook was down: nothing changed.
    HookDown,
    /// The parent is gone: nothing to call.
    Gone,
}

/// What one step did.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// 1 for the first step.
    pub number: u32,
    /// How the hook answered.
    pub outcome: Outcome,
    /// Every change to the cluster in this step, controllers' included.
    pub changes: Vec<Change>,
    /// The parent's `status.phase`, if it has one.
    pub phase: Option<String>,
    /// The parent's conditions as `Type=Status(Reason)`.
    pub conditions: Vec<String>,
    /// `Type: message` of each condition that is new or changed since the
    /// step before: the part that says what is going on and what to do.
    pub news: Vec<String>,
    /// Broken rules of the loop itself (a status the CRD refuses, something
    /// of a deleting parent created again).
    pub violations: Vec<String>,
    /// The answer's bytes, to tell when the loop has settled.
    pub answer: Option<Vec<u8>>,
    /// The Jobs still running when the hook was called (after the
    /// controllers' round), as the hook saw them.
    pub running_jobs: Vec<String>,
    /// Metacontroller was killed in the middle of writing this step's
    /// answer (a scripted restart): only part of it was written.
    pub interrupted: bool,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {:>3}", self.number)?;
        match &self.outcome {
            Outcome::Answered { hook, finalized } => {
                write!(f, " {hook}")?;
                if *finalized {
                    write!(f, " finalized")?;
                }
            }
            Outcome::Refused { hook, reason } => write!(f, " {hook} REFUSED: {reason}")?,
            Outcome::HookDown => write!(f, " hook down")?,
            Outcome::Gone => write!(f, " parent gone")?,
        }
        for change in self.changes.iter().filter(|c| is_shown(c)) {
            let sign = match change.verb {
                Verb::Created => '+',
                Verb::Updated => '~',
                Verb::Deleted => '-',
            };
            write!(f, " {sign}{}", change.key)?;
            match (change.actor, change.verb) {
                (Actor::User, _) => write!(f, "(user)")?,
                (Actor::Controllers, _) if change.key.kind == "PersistentVolumeClaim" => {}
                (Actor::Controllers, Verb::Created) => write!(f, "(cronjob)")?,
                (Actor::Controllers, _) => write!(f, "(gc)")?,
                (Actor::Metacontroller, _) => {}
            }
        }
        if let Some(phase) = &self.phase {
            write!(f, " | phase={phase}")?;
        }
        if !self.conditions.is_empty() {
            write!(f, " {}", self.conditions.join(" "))?;
        }
        for violation in &self.violations {
            write!(f, " VIOLATION: {violation}")?;
        }
        for news in &self.news {
            write!(f, "\n           {news}")?;
        }
        Ok(())
    }
}

impl Step {
    /// The step as one JSON object: number, hook, outcome, phase,
    /// conditions, changes and violations.
    pub fn to_json(&self) -> Value {
        let (hook, outcome) = match &self.outcome {
            Outcome::Answered { hook, finalized } => (
                Some(*hook),
                if *finalized { "finalized" } else { "answered" }.to_string(),
            ),
            Outcome::Refused { hook, reason } => (Some(*hook), format!("refused: {reason}")),
            Outcome::HookDown => (None, "hook down".to_string()),
            Outcome::Gone => (None, "parent gone".to_string()),
        };
        let changes: Vec<Value> = self
            .changes
            .iter()
            .map(|c| {
                json!({"verb": format!("{:?}", c.verb), "object": c.key.to_string(),
                       "by": format!("{:?}", c.actor)})
            })
            .collect();
        json!({
            "step": self.number,
            "hook": hook.map(|h| h.as_str()),
            "outcome": outcome,
            "phase": self.phase,
            "conditions": self.conditions,
            "messages": self.news,
            "changes": changes,
            "violations": self.violations,
        })
    }
}

impl Outcome {
    /// A refusal of `hook`, for `reason`.
    fn refused(hook: Hook, reason: String) -> Self {
        Outcome::Refused { hook, reason }
    }
}

/// Pods come and go with their workloads; the timeline shows what the
/// operator and the user did, the volumes, the Jobs a CronJob starts and
/// what the garbage collector deletes.
fn is_shown(change: &Change) -> bool {
    match (change.actor, change.key.kind.as_str(), change.verb) {
        (Actor::Controllers, "Pod", _) => false,
        (Actor::Controllers, "PersistentVolumeClaim" | "Job", _) => true,
        (Actor::Controllers, _, verb) => verb == Verb::Deleted,
        _ => true,
    }
}

/// One operator, one parent, one cluster, stepped through time.
pub struct Simulation<'a> {
    op: &'a Operator,
    schema: PartSchema,
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

    /// The sync (or, for a parent being deleted, finalize) request
    /// Metacontroller would send now, customize's related objects included,
    /// and the parent it was made from.
    fn request(&mut self) -> Result<(Request, Value), Refusal> {
        let parent = self.parent().expect("checked by the caller").clone();
        let finalizing = parent.pointer("/metadata/deletionTimestamp").is_some();
        if finalizing {
            self.begin_deletion();
        }
        let hook = if finalizing {
            Hook::Finalize
        } else {
            Hook::Sync
        };
        let ctx = Context::seeded(self.cluster.now, self.seed, self.steps);
        let related = self.related(&parent, &ctx)?;
        let request = json!({
            "controller": {},
            "parent": parent,
            "children": self.children_groups(),
            "related": related,
            "finalizing": finalizing,
        });
        let body = serde_json::to_vec(&request).expect("JSON values serialize");
        Ok((
            Request {
                hook,
                body,
                ctx,
                finalizing,
            },
            parent,
        ))
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

    /// Applies a 200 answer, and removes the finalizer once a finalize
    /// answer (`finalizing`) says `finalized: true` and was applied in
    /// full. Returns whether the answer said `finalized: true`.
    fn apply_and_finalize(
        &mut self,
        parent: &Value,
        body: &[u8],
        finalizing: bool,
        violations: &mut Vec<String>,
    ) -> bool {
        let response: Value = serde_json::from_slice(body).expect("answers are JSON");
        let finalized = response["finalized"] == true;
        let applied = self.apply_answer(parent, &response, violations);
        self.interrupted = !applied;
        if finalizing && finalized && applied {
            if let Some(finalizer) = self.finalizer.clone() {
                self.cluster
                    .remove_finalizer(&self.parent.clone(), &finalizer);
            }
            self.cluster.collect_garbage();
        }
        finalized
    }

    /// Every declared child type, with the parent's children of that type,
    /// keyed as hook version v2 keys them.
    fn children_groups(&self) -> Value {
        let mut groups = serde_json::Map::new();
        for child in &self.op.controller.children {
            let kind = kind_of(child);
            let members: serde_json::Map<String, Value> = self
                .cluster
                .objects()
                .filter(|(k, o)| {
                    k.api_version == child.api_version
                        && k.kind == kind
                        && is_owned_by(o, &self.parent_uid)
                })
                .map(|(k, o)| (format!("{}/{}", k.namespace, k.name), o.clone()))
                .collect();
            groups.insert(
                format!("{kind}.{}", child.api_version),
                Value::Object(members),
            );
        }
        Value::Object(groups)
    }

    /// The related objects the customize hook asks for.
    fn related(&self, parent: &Value, ctx: &Context) -> Result<Value, Refusal> {
        let refused = |reason: String, error: Option<HookError>| Refusal {
            hook: Hook::Customize,
            reason,
            error,
        };
        let mut groups = serde_json::Map::new();
        if !self.op.hooks().any(|h| h == Hook::Customize) {
            return Ok(Value::Object(groups));
        }
        let body = serde_json::to_vec(&json!({"controller": {}, "parent": parent}))
            .expect("JSON values serialize");
        let call =
            adapter::call_slice(self.op, Hook::Customize, &body, ctx).expect("checked above");
        let answer = call.result.map_err(|e| refused(e.to_string(), Some(e)))?;
        let response: Value = serde_json::from_slice(&answer.body).expect("answers are JSON");
        for rule in response["relatedResources"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let api_version = rule["apiVersion"].as_str().unwrap_or_default();
            let (kind, members) = if rule["resource"] == "storageclasses" {
                // Cluster-scoped: keyed by name alone.
                let classes = self.cluster.storage_classes().iter().filter_map(|c| {
                    Some((
                        c.pointer("/metadata/name")?.as_str()?.to_string(),
                        c.clone(),
                    ))
                });
                ("StorageClass", classes.collect())
            } else {
                self.namespaced_related(rule, api_version)
                    .map_err(|reason| refused(reason, None))?
            };
            let group = groups
                .entry(format!("{kind}.{api_version}"))
                .or_insert_with(|| json!({}));
            if let Some(map) = group.as_object_mut() {
                map.extend(members);
            }
        }
        Ok(Value::Object(groups))
    }

    /// The namespaced objects one related rule selects, keyed
    /// `<namespace>/<name>`, with their kind.
    fn namespaced_related(
        &self,
        rule: &Value,
        api_version: &str,
    ) -> Result<(&'static str, serde_json::Map<String, Value>), String> {
        let kind = KINDS
            .iter()
            .find(|(plural, _)| rule["resource"] == *plural)
            .map(|(_, kind)| *kind)
            .ok_or_else(|| format!("the simulator does not model {}", rule["resource"]))?;
        let namespace = rule["namespace"]
            .as_str()
            .unwrap_or(self.parent.namespace.as_str());
        let wanted = rule["labelSelector"]["matchLabels"].as_object();
        let names = rule["names"].as_array();
        let members = self
            .cluster
            .objects()
            .filter(|(k, _)| {
                k.api_version == api_version && k.kind == kind && k.namespace == namespace
            })
            .filter(|(k, _)| names.is_none_or(|n| n.iter().any(|n| n == k.name.as_str())))
            .filter(|(_, o)| {
                wanted.is_none_or(|w| {
                    w.iter().all(|(label, value)| {
                        o.pointer(&format!("/metadata/labels/{}", label.replace('/', "~1")))
                            == Some(value)
                    })
                })
            })
            .map(|(k, o)| (format!("{}/{}", k.namespace, k.name), o.clone()))
            .collect();
        Ok((kind, members))
    }

    /// Applies an answer as Metacontroller does: the observed children the
    /// answer leaves out are deleted, then the desired ones are created or
    /// updated by their update method, then the status is written. After a
    /// scripted restart (`crash_after`) it stops after that many writes,
    /// as a Metacontroller killed in the middle of a sync would: the rest,
    /// the status included, is never written. Returns whether it finished.
    fn apply_answer(
        &mut self,
        parent: &Value,
        response: &Value,
        violations: &mut Vec<String>,
    ) -> bool {
        let observed: BTreeSet<Key> = self
            .cluster
            .objects()
            .filter(|(_, o)| is_owned_by(o, &self.parent_uid))
            .map(|(k, _)| k.clone())
            .collect();
        let desired = self.desired(response, violations);
        let wanted: BTreeSet<Key> = desired.iter().map(|(k, _, _)| k.clone()).collect();
        let mut budget = self.crash_after.take();
        let mut spend = || match &mut budget {
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
            None => true,
        };
        for key in observed.difference(&wanted) {
            if !spend() {
                return false;
            }
            self.cluster.delete(key, Actor::Metacontroller);
        }
        for (key, mut child, as_answered) in desired {
            let method = self.update_method(&key);
            if !spend() {
                return false;
            }
            if observed.contains(&key) {
                self.update_child(&key, &child, &as_answered, method);
            } else if self.cluster.get(&key).is_none() {
                object_map(&mut child, "metadata")
                    .insert("ownerReferences".into(), json!([owner_ref(parent)]));
                self.cluster.create(child, Actor::Metacontroller);
            }
        }
        if !spend() {
            return false;
        }
        self.write_status(parent, response, violations);
        true
    }

    /// The answer's children as Metacontroller reads them: each with its
    /// key, as it will be applied (namespaced, labelled with the parent's
    /// uid) and as answered. A child without a key is a violation.
    fn desired(&self, response: &Value, violations: &mut Vec<String>) -> Vec<(Key, Value, Value)> {
        let mut desired = Vec::new();
        for child in response["children"].as_array().into_iter().flatten() {
            let mut child = child.clone();
            // Metacontroller's rolling update compares the answer as given,
            // before the label below is added (see `apply_update`).
            let as_answered = child.clone();
            let meta = object_map(&mut child, "metadata");
            meta.entry("namespace")
                .or_insert_with(|| json!(self.parent.namespace));
            // Metacontroller labels every desired child with the parent's
            // uid before it compares or creates anything.
            if self.op.controller.generate_selector {
                let labels = meta.entry("labels").or_insert_with(|| json!({}));
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert("controller-uid".into(), json!(self.parent_uid));
                }
            }
            let Some(key) = Key::of(&child) else {
                violations.push("a child without apiVersion, kind or name".into());
                continue;
            };
            desired.push((key, child, as_answered));
        }
        desired
    }

    /// How the controller updates children of `key`'s type (`OnDelete`
    /// for a type it does not declare).
    fn update_method(&self, key: &Key) -> &'static str {
        self.op
            .controller
            .children
            .iter()
            .find(|c| c.api_version == key.api_version && kind_of(c) == key.kind)
            .map(|c| c.update_method)
            .unwrap_or("OnDelete")
    }

    /// An observed child the answer keeps, by its update method.
    fn update_child(&mut self, key: &Key, child: &Value, as_answered: &Value, method: &str) {
        let existing = self.cluster.get(key).expect("observed").clone();
        match method {
            "OnDelete" => {}
            "Recreate" => {
                if differs(&existing, child) {
                    self.cluster.delete(key, Actor::Metacontroller);
                }
            }
            // A rolling update decides whether a child is up to date before
            // Metacontroller adds `controller-uid` to the desired children:
            // a child answered without it never is, and is recreated again
            // and again (the real loop stalls).
            "RollingRecreate" => {
                if differs(&existing, child) || differs(&existing, as_answered) {
                    self.cluster.delete(key, Actor::Metacontroller);
                }
            }
            _ => {
                self.cluster.update(key, child, Actor::Metacontroller);
            }
        }
    }

    fn write_status(&mut self, parent: &Value, response: &Value, violations: &mut Vec<String>) {
        let mut status = response.get("status").cloned().unwrap_or(Value::Null);
        if status.is_null() {
            return;
        }
        let generation = parent
            .pointer("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1));
        if let Some(map) = status.as_object_mut() {
            map.insert("observedGeneration".into(), generation);
        }
        let rolling = self
            .op
            .controller
            .children
            .iter()
            .any(|c| c.update_method.starts_with("Rolling"));
        if rolling {
            set_condition(
                &mut status,
                json!({"type": "Updated", "status": "True", "reason": "OnLatestRevision",
                       "message": format!("latest ControllerRevision: {}", self.parent.name)}),
            );
        }
        let errors = self.schema.errors(&status);
        if !errors.is_empty() {
            violations.push(format!("can't update status: {}", errors.join("; ")));
            return;
        }
        self.cluster.edit(&self.parent.clone(), |p| {
            if let Some(map) = p.as_object_mut() {
                map.insert("status".into(), status);
            }
        });
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

/// `Type: message` of each of `status`'s conditions that is new or changed
/// since `said` last recorded it (which it now does).
fn news(said: &mut BTreeMap<String, (String, String)>, status: Option<&Value>) -> Vec<String> {
    let mut news = Vec::new();
    let conditions = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array);
    for condition in conditions.into_iter().flatten() {
        let kind = condition["type"].as_str().unwrap_or("?").to_string();
        let now = (
            condition_text(condition),
            condition["message"].as_str().unwrap_or("").to_string(),
        );
        if said.get(&kind) != Some(&now) {
            if !now.1.is_empty() {
                news.push(format!("{kind}: {}", now.1));
            }
            said.insert(kind, now);
        }
    }
    news
}

/// `Type=Status(Reason)`.
fn condition_text(condition: &Value) -> String {
    format!(
        "{}={}({})",
        condition["type"].as_str().unwrap_or("?"),
        condition["status"].as_str().unwrap_or("?"),
        condition["reason"].as_str().unwrap_or("")
    )
}

/// Metacontroller's `SetCondition`, as it behaves: a condition of a new type
/// is appended; one whose type is already in the answered status is
/// replaced only in a copy (`unstructured.NestedSlice` copies), so the
/// answered one stays.
fn set_condition(status: &mut Value, condition: Value) {
    let Some(map) = status.as_object_mut() else {
        return;
    };
    let list = map.entry("conditions").or_insert_with(|| json!([]));
    let Some(list) = list.as_array_mut() else {
        return;
    };
    if !list.iter().any(|c| c["type"] == condition["type"]) {
        list.push(condition);
    }
}

/// True when applying `desired` would change `existing`.
fn differs(existing: &Value, desired: &Value) -> bool {
    let Some(fields) = desired.as_object() else {
        return false;
    };
    fields
        .iter()
        .filter(|(k, _)| *k != "metadata" && *k != "status")
        .any(|(k, v)| existing.get(k) != Some(v))
        || ["labels", "annotations"].iter().any(|f| {
            let want = desired.pointer(&format!("/metadata/{f}"));
            want.is_some() && existing.pointer(&format!("/metadata/{f}")) != want
        })
}

/// The resources the simulator models, plural to kind.
const KINDS: [(&str, &str); 14] = [
    ("pods", "Pod"),
    ("serviceaccounts", "ServiceAccount"),
    ("roles", "Role"),
    ("rolebindings", "RoleBinding"),
    ("services", "Service"),
    ("configmaps", "ConfigMap"),
    ("secrets", "Secret"),
    ("persistentvolumeclaims", "PersistentVolumeClaim"),
    ("statefulsets", "StatefulSet"),
    ("deployments", "Deployment"),
    ("jobs", "Job"),
    ("cronjobs", "CronJob"),
    ("endpointslices", "EndpointSlice"),
    ("poddisruptionbudgets", "PodDisruptionBudget"),
];

fn kind_of(child: &ChildResource) -> &'static str {
    KINDS
        .iter()
        .find(|(plural, _)| *plural == child.resource)
        .map(|(_, kind)| *kind)
        .unwrap_or("Unknown")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::webserver;
    use crate::operators::all;

    #[test]
    fn events_parse_and_bad_ones_say_how() {
        assert_eq!(
            Event::parse("spec.version=17").unwrap(),
            Event::SetSpec {
                path: vec!["version".into()],
                value: json!(17)
            }
        );
        assert_eq!(
            Event::parse("spec.image=nginx:1").unwrap(),
            Event::SetSpec {
                path: vec!["image".into()],
                value: json!("nginx:1")
            }
        );
        assert_eq!(
            Event::parse("delete Job/orders-snapshot").unwrap(),
            Event::Delete {
                kind: "Job".into(),
                name: "orders-snapshot".into()
            }
        );
        assert_eq!(Event::parse("kill-primary").unwrap(), Event::KillPrimary);
        assert_eq!(
            Event::parse("lose-volume orders-0").unwrap(),
            Event::LoseVolume("orders-0".into())
        );
        let wrong = Event::parse("explode").unwrap_err();
        assert!(wrong.contains("is not an event"), "{wrong}");
        assert!(wrong.contains("kill-primary, lose-volume POD"), "{wrong}");
        assert!(
            Event::parse("delete orders")
                .unwrap_err()
                .contains("KIND/NAME")
        );
    }

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
