//! What a step reports: how the hook answered ([`Outcome`], or why there
//! is no answer, [`Refusal`]), what changed, the parent's phase and
//! conditions and what they newly say ([`Step`]), as a line of the
//! timeline or as JSON. Only the report: nothing here changes the cluster.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Value, json};

use super::cluster::{Actor, Change, Verb};
use crate::hook::Hook;
use crate::operator::HookError;

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
    pub(super) fn refused(hook: Hook, reason: String) -> Self {
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

/// `Type: message` of each of `status`'s conditions that is new or changed
/// since `said` last recorded it (which it now does).
pub(super) fn news(
    said: &mut BTreeMap<String, (String, String)>,
    status: Option<&Value>,
) -> Vec<String> {
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
pub(super) fn condition_text(condition: &Value) -> String {
    format!(
        "{}={}({})",
        condition["type"].as_str().unwrap_or("?"),
        condition["status"].as_str().unwrap_or("?"),
        condition["reason"].as_str().unwrap_or("")
    )
}
