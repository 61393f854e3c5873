//! Where a Database's instances run: the spec's placement settings (named
//! as CloudNativePG names them: `spec.affinity`,
//! `spec.topologySpreadConstraints`, `spec.enablePDB`), their checks, and
//! what they become in the instances' pod template and in the
//! PodDisruptionBudget. A leaf: it knows the Database only through the
//! selector of its instances' pods, which the caller passes.

// The CRD structs are re-exported by database.rs, but kube's KubeSchema
// derive emits them again, and unreachable_pub then misses the re-export.
#![allow(unreachable_pub)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    self as core, PodAffinityTerm, PodAntiAffinity, WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hook::quote::key_path;
use crate::operators::validate::{InvalidSpec, is_label_key, is_label_value, quote};

/// The topology key of the pod anti-affinity when `topologyKey` is omitted:
/// one instance per node.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// The topology key of the default spread: the zone.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// The weight of the preferred pod anti-affinity: the most a preference
/// can weigh.
pub const PREFERRED_WEIGHT: i32 = 100;

/// Which nodes the instances run on, and how they keep apart.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Affinity {
    /// Keep the instances of this Database apart, one per `topologyKey`
    /// domain (one per node by default); true when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_pod_anti_affinity: Option<bool>,
    /// preferred (the default: the scheduler spreads the instances when it
    /// can and still runs them when it cannot) or required (an instance
    /// that has no domain of its own stays Pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_anti_affinity_type: Option<AntiAffinityType>,
    /// The node label whose values the instances keep apart over;
    /// kubernetes.io/hostname (one instance per node) when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 316))]
    pub topology_key: Option<String>,
    /// Only nodes with all these labels run instances.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints of nodes the instances tolerate (nodes dedicated to
    /// databases, for example).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tolerations: Vec<Toleration>,
}

/// How strongly instances keep apart.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AntiAffinityType {
    /// The scheduler prefers a domain without an instance (weight 100).
    #[default]
    Preferred,
    /// Never two instances in one domain: an instance without a free
    /// domain stays Pending.
    Required,
}

/// A taint the instances tolerate, as in a pod's `tolerations`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// The taint's key; empty with operator Exists tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 316))]
    pub key: Option<String>,
    /// Equal (the default: key and value match) or Exists (any value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    /// The taint's value, with operator Equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub value: Option<String>,
    /// The taint's effect: NoSchedule, PreferNoSchedule or NoExecute; every
    /// effect when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// With effect NoExecute: how long an instance stays on a node after
    /// the taint appears; for ever when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// How a toleration matches a taint's value.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum TolerationOperator {
    /// The values are equal.
    Equal,
    /// Any value.
    Exists,
}

/// A taint's effect.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum TaintEffect {
    /// New pods are not scheduled on the node.
    NoSchedule,
    /// New pods avoid the node.
    PreferNoSchedule,
    /// Running pods are evicted.
    NoExecute,
}

/// How the instances spread over a topology (zones, racks): a pod's
/// `topologySpreadConstraints` whose label selector is always this
/// Database's instances.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpreadConstraint {
    /// The most the instance counts of two domains may differ by.
    #[schemars(range(min = 1, max = 100))]
    pub max_skew: i32,
    /// The node label whose values are the domains, for example
    /// topology.kubernetes.io/zone.
    #[schemars(length(min = 1, max = 316))]
    pub topology_key: String,
    /// DoNotSchedule (an instance that would break the skew stays Pending;
    /// nodes without the label are not used) or ScheduleAnyway (the skew is
    /// a preference).
    pub when_unsatisfiable: Unsatisfiable,
    /// With DoNotSchedule: how many domains there must be at least; fewer
    /// count as that many empty ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub min_domains: Option<i32>,
}

/// What the scheduler does with a pod that would break a spread.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum Unsatisfiable {
    /// The pod stays Pending.
    DoNotSchedule,
    /// The pod runs where the skew is smallest.
    ScheduleAnyway,
}

/// The spread when the spec gives none: over zones, skew 1, as a
/// preference, so single-zone clusters and nodes without the zone label
/// are unaffected.
pub fn default_spread() -> Vec<TopologySpreadConstraint> {
    vec![TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.to_string(),
        when_unsatisfiable: Unsatisfiable::ScheduleAnyway,
        min_domains: None,
    }]
}

/// The placement of every instance's pod: the fields of a pod spec this
/// module fills.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodPlacement {
    /// The pod anti-affinity, when enabled.
    pub affinity: Option<core::Affinity>,
    /// `spec.affinity.nodeSelector`.
    pub node_selector: Option<BTreeMap<String, String>>,
    /// `spec.affinity.tolerations`.
    pub tolerations: Option<Vec<core::Toleration>>,
    /// `spec.topologySpreadConstraints`, or the zone spread.
    pub topology_spread_constraints: Option<Vec<core::TopologySpreadConstraint>>,
}

/// The instances' anti-affinity to each other over `a`'s topology key
/// (the node by default): preferred or required, or none when turned off.
fn anti_affinity(a: &Affinity, instances: LabelSelector) -> Option<PodAntiAffinity> {
    let term = PodAffinityTerm {
        label_selector: Some(instances),
        topology_key: a
            .topology_key
            .clone()
            .unwrap_or_else(|| HOSTNAME.to_string()),
        ..PodAffinityTerm::default()
    };
    match (
        a.enable_pod_anti_affinity.unwrap_or(true),
        a.pod_anti_affinity_type.unwrap_or_default(),
    ) {
        (false, _) => None,
        (true, AntiAffinityType::Preferred) => Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: PREFERRED_WEIGHT,
                    pod_affinity_term: term,
                },
            ]),
            ..PodAntiAffinity::default()
        }),
        (true, AntiAffinityType::Required) => Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![term]),
            ..PodAntiAffinity::default()
        }),
    }
}

/// Where the instances, the pods `selector` selects, run.
pub fn pod_placement(
    affinity: Option<&Affinity>,
    spread: Option<&[TopologySpreadConstraint]>,
    selector: &BTreeMap<String, String>,
) -> PodPlacement {
    let default = Affinity::default();
    let a = affinity.unwrap_or(&default);
    let instances = || LabelSelector {
        match_labels: Some(selector.clone()),
        match_expressions: None,
    };
    let anti = anti_affinity(a, instances());
    let default_spread = default_spread();
    let spread: Vec<core::TopologySpreadConstraint> = spread
        .unwrap_or(&default_spread)
        .iter()
        .map(|c| core::TopologySpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            when_unsatisfiable: format!("{:?}", c.when_unsatisfiable),
            min_domains: c.min_domains,
            label_selector: Some(instances()),
            ..core::TopologySpreadConstraint::default()
        })
        .collect();
    let tolerations: Vec<core::Toleration> = a
        .tolerations
        .iter()
        .map(|t| core::Toleration {
            key: t.key.clone(),
            operator: t.operator.map(|o| format!("{o:?}")),
            value: t.value.clone(),
            effect: t.effect.map(|e| format!("{e:?}")),
            toleration_seconds: t.toleration_seconds,
        })
        .collect();
    PodPlacement {
        affinity: anti.map(|anti| core::Affinity {
            pod_anti_affinity: Some(anti),
            ..core::Affinity::default()
        }),
        node_selector: (!a.node_selector.is_empty()).then(|| a.node_selector.clone()),
        tolerations: (!tolerations.is_empty()).then_some(tolerations),
        topology_spread_constraints: (!spread.is_empty()).then_some(spread),
    }
}

/// The PodDisruptionBudget of `instances` instances, the pods `selector`
/// selects: at most one of them evicted at a time (a node drain waits for
/// the evicted instance to be ready again elsewhere before it evicts the
/// next), when there are two or more. None for a single instance, whose
/// budget could only forbid every eviction (a drain that never ends) or
/// allow it (no budget at all), and none when `enabled` is false.
pub fn disruption_budget(
    metadata: ObjectMeta,
    selector: &BTreeMap<String, String>,
    instances: i32,
    enabled: bool,
) -> Option<PodDisruptionBudget> {
    (enabled && instances >= 2).then(|| PodDisruptionBudget {
        metadata,
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector.clone()),
                match_expressions: None,
            }),
            // An instance that is not ready (stuck, crash-looping) may
            // still be evicted: it serves nothing, and keeping it would
            // hold every drain.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_string()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}

/// Checks the placement settings as the API server would check the pod
/// template they make, naming the spec's field.
pub fn validate(
    affinity: Option<&Affinity>,
    spread: Option<&[TopologySpreadConstraint]>,
) -> Result<(), InvalidSpec> {
    if let Some(a) = affinity {
        if let Some(key) = &a.topology_key {
            label_key("spec.affinity.topologyKey", key)?;
        }
        for (key, value) in &a.node_selector {
            label_key("spec.affinity.nodeSelector", key)?;
            if !is_label_value(value) {
                return Err(InvalidSpec::new(
                    key_path("spec.affinity.nodeSelector", key),
                    format!(
                        "{} is not a label value; use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                        quote(value)
                    ),
                ));
            }
        }
        for (i, t) in a.tolerations.iter().enumerate() {
            toleration(&format!("spec.affinity.tolerations[{i}]"), t)?;
        }
    }
    let mut seen = Vec::new();
    for (i, c) in spread.unwrap_or_default().iter().enumerate() {
        let field = format!("spec.topologySpreadConstraints[{i}]");
        label_key(&format!("{field}.topologyKey"), &c.topology_key)?;
        if c.max_skew < 1 {
            return Err(InvalidSpec::new(
                format!("{field}.maxSkew"),
                format!("{} is not a skew; use 1 or more", c.max_skew),
            ));
        }
        if c.min_domains.is_some() && c.when_unsatisfiable != Unsatisfiable::DoNotSchedule {
            return Err(InvalidSpec::new(
                format!("{field}.minDomains"),
                "counts only with whenUnsatisfiable DoNotSchedule; remove it, or use DoNotSchedule",
            ));
        }
        if c.min_domains.is_some_and(|m| m < 1) {
            return Err(InvalidSpec::new(
                format!("{field}.minDomains"),
                "must be 1 or more",
            ));
        }
        let pair = (&c.topology_key, c.when_unsatisfiable);
        if seen.contains(&pair) {
            return Err(InvalidSpec::new(
                field,
                format!(
                    "repeats topologyKey {} with whenUnsatisfiable {:?}; the API server refuses two such constraints, merge them",
                    quote(&c.topology_key),
                    c.when_unsatisfiable
                ),
            ));
        }
        seen.push(pair);
    }
    Ok(())
}

fn label_key(field: &str, key: &str) -> Result<(), InvalidSpec> {
    if is_label_key(key) {
        return Ok(());
    }
    Err(InvalidSpec::new(
        field,
        format!(
            "{} is not a label key; write it like kubernetes.io/hostname or topology.kubernetes.io/zone",
            quote(key)
        ),
    ))
}

fn toleration(field: &str, t: &Toleration) -> Result<(), InvalidSpec> {
    let key = t.key.as_deref().unwrap_or_default();
    let exists = t.operator == Some(TolerationOperator::Exists);
    if !key.is_empty() {
        label_key(&format!("{field}.key"), key)?;
    } else if !exists {
        return Err(InvalidSpec::new(
            format!("{field}.operator"),
            "must be Exists when the key is empty (a toleration of every taint)",
        ));
    }
    let value = t.value.as_deref().unwrap_or_default();
    if exists && !value.is_empty() {
        return Err(InvalidSpec::new(
            format!("{field}.value"),
            "must be empty with operator Exists, which matches any value",
        ));
    }
    if !is_label_value(value) {
        return Err(InvalidSpec::new(
            format!("{field}.value"),
            format!("{} is not a taint's value", quote(value)),
        ));
    }
    if t.toleration_seconds.is_some() && t.effect != Some(TaintEffect::NoExecute) {
        return Err(InvalidSpec::new(
            format!("{field}.tolerationSeconds"),
            "counts only with effect NoExecute; set that effect, or remove it",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector() -> BTreeMap<String, String> {
        BTreeMap::from([("app".to_string(), "orders".to_string())])
    }

    fn affinity(json: serde_json::Value) -> Affinity {
        serde_json::from_value(json).unwrap()
    }

    fn spread(json: serde_json::Value) -> Vec<TopologySpreadConstraint> {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn by_default_instances_prefer_other_nodes_and_spread_over_zones() {
        let p = pod_placement(None, None, &selector());
        let anti = p.affinity.unwrap().pod_anti_affinity.unwrap();
        let preferred = anti
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(preferred[0].weight, 100);
        assert_eq!(preferred[0].pod_affinity_term.topology_key, HOSTNAME);
        assert_eq!(
            preferred[0]
                .pod_affinity_term
                .label_selector
                .as_ref()
                .unwrap()
                .match_labels,
            Some(selector())
        );
        assert!(
            anti.required_during_scheduling_ignored_during_execution
                .is_none()
        );
        let spread = p.topology_spread_constraints.unwrap();
        assert_eq!(spread.len(), 1);
        assert_eq!(
            (
                spread[0].topology_key.as_str(),
                spread[0].when_unsatisfiable.as_str()
            ),
            (ZONE, "ScheduleAnyway")
        );
        assert_eq!(p.node_selector, None);
        assert_eq!(p.tolerations, None);
    }

    #[test]
    fn required_disabled_and_an_empty_spread_say_so() {
        let a =
            affinity(serde_json::json!({"podAntiAffinityType": "required", "topologyKey": "rack"}));
        let p = pod_placement(Some(&a), Some(&[]), &selector());
        let anti = p.affinity.unwrap().pod_anti_affinity.unwrap();
        let required = anti
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(required[0].topology_key, "rack");
        assert!(
            anti.preferred_during_scheduling_ignored_during_execution
                .is_none()
        );
        assert_eq!(p.topology_spread_constraints, None);
        let off = affinity(serde_json::json!({"enablePodAntiAffinity": false}));
        assert_eq!(pod_placement(Some(&off), None, &selector()).affinity, None);
    }

    #[test]
    fn a_budget_only_for_two_instances_or_more_and_when_enabled() {
        let meta = ObjectMeta::default();
        assert!(disruption_budget(meta.clone(), &selector(), 1, true).is_none());
        assert!(disruption_budget(meta.clone(), &selector(), 3, false).is_none());
        let pdb = disruption_budget(meta, &selector(), 2, true).unwrap();
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(spec.selector.unwrap().match_labels, Some(selector()));
    }

    #[test]
    fn bad_placement_is_refused_naming_the_field() {
        let refused = |a: serde_json::Value, s: serde_json::Value| {
            let a = affinity(a);
            let s = spread(s);
            validate(Some(&a), Some(&s)).unwrap_err()
        };
        let ok = |a: serde_json::Value, s: serde_json::Value| {
            validate(Some(&affinity(a)), Some(&spread(s))).unwrap();
        };
        ok(
            serde_json::json!({"topologyKey": "topology.kubernetes.io/zone",
                "nodeSelector": {"node-role.kubernetes.io/db": ""},
                "tolerations": [{"operator": "Exists"},
                    {"key": "dedicated", "value": "db", "effect": "NoExecute", "tolerationSeconds": 30}]}),
            serde_json::json!([{"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule", "minDomains": 2},
                {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway"}]),
        );
        let none = serde_json::json!([]);
        for (a, s, field) in [
            (
                serde_json::json!({"topologyKey": "not a key"}),
                none.clone(),
                "spec.affinity.topologyKey",
            ),
            (
                serde_json::json!({"nodeSelector": {"disk": "fast ssd"}}),
                none.clone(),
                "spec.affinity.nodeSelector.disk",
            ),
            (
                serde_json::json!({"nodeSelector": {"/disk": "ssd"}}),
                none.clone(),
                "spec.affinity.nodeSelector",
            ),
            (
                serde_json::json!({"tolerations": [{"value": "x"}]}),
                none.clone(),
                "spec.affinity.tolerations[0].operator",
            ),
            (
                serde_json::json!({"tolerations": [{"operator": "Exists"}, {"key": "k", "operator": "Exists", "value": "v"}]}),
                none.clone(),
                "spec.affinity.tolerations[1].value",
            ),
            (
                serde_json::json!({"tolerations": [{"key": "k", "tolerationSeconds": 5}]}),
                none.clone(),
                "spec.affinity.tolerations[0].tolerationSeconds",
            ),
            (
                serde_json::json!({}),
                serde_json::json!([{"maxSkew": 0, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}]),
                "spec.topologySpreadConstraints[0].maxSkew",
            ),
            (
                serde_json::json!({}),
                serde_json::json!([{"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}]),
                "spec.topologySpreadConstraints[0].minDomains",
            ),
            (
                serde_json::json!({}),
                serde_json::json!([{"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}]),
                "spec.topologySpreadConstraints[1]",
            ),
            (
                serde_json::json!({}),
                serde_json::json!([{"maxSkew": 1, "topologyKey": "", "whenUnsatisfiable": "DoNotSchedule"}]),
                "spec.topologySpreadConstraints[0].topologyKey",
            ),
        ] {
            assert_eq!(refused(a.clone(), s).field, field, "{a}");
        }
    }
}
