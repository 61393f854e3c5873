//! Status conditions in the Kubernetes convention, and the two rules that
//! keep them stable: a condition keeps its `lastTransitionTime` unless its
//! status flips, and a condition someone else wrote (Metacontroller's own
//! `Updated`, a user's, another tool's) is answered back unchanged.
//!
//! Others follow looser conventions than ours: Metacontroller's `Updated`
//! has no `lastTransitionTime`, so only `type` and `status` are required
//! when reading (and in the CRD); every condition we write has them all.
//!
//! The current time is an argument, never read here, so the same observed
//! parent gives byte-identical conditions.

use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A condition's status.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known yet.
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(holds: bool) -> Self {
        if holds {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// One condition of a parent's status, as `kubectl describe` shows it.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The aspect this condition reports, such as `Ready`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// Whether the condition holds: True, False or Unknown.
    pub status: ConditionStatus,
    /// A CamelCase word for why, for machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// One sentence for why, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the status last changed (RFC 3339, seconds). Always set on the
    /// conditions opshooks writes; Metacontroller's own omit it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: Option<String>,
    /// The parent's `metadata.generation` this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A condition as an operator decides it, before its transition time is known.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// The condition type.
    pub type_: &'static str,
    /// Whether it holds.
    pub status: ConditionStatus,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human message.
    pub message: String,
}

impl Observation {
    /// A condition that holds or not, with its reason and message.
    pub fn new(
        type_: &'static str,
        status: impl Into<ConditionStatus>,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Observation {
            type_,
            status: status.into(),
            reason,
            message: message.into(),
        }
    }
}

/// Formats a time the way Kubernetes stores `metav1.Time`: RFC 3339 in UTC,
/// whole seconds.
pub fn format_time(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `text` as [`format_time`] writes it, when it is a time; `None` for
/// anything else (a script's or a user's value that is not one).
pub fn normal_time(text: &str) -> Option<String> {
    text.parse::<Timestamp>().ok().map(format_time)
}

/// Condition types Metacontroller itself sets on every sync of a parent
/// whose children roll (`Updated`). They are left out of our answers:
/// Metacontroller adds its condition to the status we answer, but its
/// `SetCondition` replaces an existing one only in a copy (it reads the list
/// with `unstructured.NestedSlice`, which copies), so a condition we echoed
/// back would stay as it first was, hiding every later rollout state.
pub const METACONTROLLER_CONDITIONS: [&str; 1] = ["Updated"];

/// Turns observations into conditions, keeping each previously observed
/// condition's `lastTransitionTime` when its status did not change, then
/// appends, unchanged and in their observed order, the previous conditions
/// of types the operator did not observe: those are someone else's
/// (except [`METACONTROLLER_CONDITIONS`], which Metacontroller sets anew).
///
/// Every operator reports the same condition types on every call (while
/// deleting, a few more), so a type missing from `observations` is never
/// one of ours gone stale.
pub fn reconcile(
    previous: &[Condition],
    observations: Vec<Observation>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let foreign: Vec<Condition> = previous
        .iter()
        .filter(|old| !observations.iter().any(|seen| seen.type_ == old.type_))
        .filter(|old| !METACONTROLLER_CONDITIONS.contains(&old.type_.as_str()))
        .cloned()
        .collect();
    observations
        .into_iter()
        .map(|seen| {
            let last_transition_time = previous
                .iter()
                .find(|old| old.type_ == seen.type_ && old.status == seen.status)
                .and_then(|old| old.last_transition_time.clone())
                .unwrap_or_else(|| format_time(now));
            Condition {
                type_: seen.type_.to_string(),
                status: seen.status,
                reason: Some(seen.reason.to_string()),
                message: Some(seen.message),
                last_transition_time: Some(last_transition_time),
                observed_generation: generation,
            }
        })
        .chain(foreign)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn ready(status: bool) -> Observation {
        Observation::new("Ready", status, "Because", "a reason")
    }

    #[test]
    fn transition_time_rules() {
        let earlier = reconcile(&[], vec![ready(true)], Some(1), at("2026-01-01T00:00:00Z"));
        struct Case {
            reason: &'static str,
            observation: Observation,
            want_time: &'static str,
        }
        let cases = [
            Case {
                reason: "same status keeps the old time",
                observation: ready(true),
                want_time: "2026-01-01T00:00:00Z",
            },
            Case {
                reason: "a flip takes the current time",
                observation: ready(false),
                want_time: "2026-02-02T10:20:30Z",
            },
            Case {
                reason: "a new type takes the current time",
                observation: Observation::new("Other", true, "R", "m"),
                want_time: "2026-02-02T10:20:30Z",
            },
        ];
        for case in cases {
            let got = reconcile(
                &earlier,
                vec![case.observation],
                Some(2),
                at("2026-02-02T10:20:30.999Z"),
            );
            assert_eq!(
                got[0].last_transition_time.as_deref(),
                Some(case.want_time),
                "{}",
                case.reason
            );
            assert_eq!(got[0].observed_generation, Some(2), "{}", case.reason);
        }
    }

    /// Metacontroller adds `Updated` (no lastTransitionTime) to the status
    /// of parents whose children roll: it must be read without complaint and
    /// left for Metacontroller to set again; others' conditions come back
    /// exactly as read.
    #[test]
    fn regression_others_conditions_are_read_and_metacontrollers_left_to_it() {
        let updated = r#"{"type":"Updated","status":"True","reason":"OnLatestRevision","message":"latest ControllerRevision: hello-5d4c"}"#;
        let previous: Vec<Condition> = serde_json::from_str(&format!(
            r#"[{{"type":"Ready","status":"True","reason":"R","message":"m","lastTransitionTime":"2026-01-01T00:00:00Z"}},{updated},{{"type":"Custom","status":"Unknown"}}]"#
        ))
        .unwrap();
        let got = reconcile(
            &previous,
            vec![ready(false)],
            Some(3),
            at("2026-03-03T00:00:00Z"),
        );
        let types: Vec<&str> = got.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "Custom"]);
        assert_eq!(
            serde_json::to_string(&got[1]).unwrap(),
            r#"{"type":"Custom","status":"Unknown"}"#
        );
        assert_eq!(got[0].status, ConditionStatus::False);
    }

    #[test]
    fn conditions_serialize_in_kubernetes_shape() {
        let got = reconcile(&[], vec![ready(true)], None, at("2026-01-01T00:00:00Z"));
        assert_eq!(
            serde_json::to_string(&got[0]).unwrap(),
            r#"{"type":"Ready","status":"True","reason":"Because","message":"a reason","lastTransitionTime":"2026-01-01T00:00:00Z"}"#
        );
    }
}
