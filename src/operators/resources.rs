//! Compute resources that operators share: the schema of a `resources`
//! field (a Kubernetes ResourceRequirements without `claims`), its checks,
//! and the requests every backup container gets when none are given.
//!
//! The Rust type is k8s-openapi's own; only its schema is written here, so
//! the CRD describes what a user may write (requests and limits, each an
//! integer or a quantity string) and nothing the pods cannot take.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::{Schema, SchemaGenerator, json_schema};

use crate::hook::quote::{cut, key_path};
use crate::operators::validate::{self, InvalidSpec};

/// The most entries `requests` or `limits` may hold.
pub const MAX_ENTRIES: usize = 8;

/// The schema of a `resources` field: `requests` and `limits`, maps of
/// resource names to quantities, as the API server writes them for its own
/// types.
pub fn schema(_: &mut SchemaGenerator) -> Schema {
    let quantity = json_schema!({
        "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
        "x-kubernetes-int-or-string": true,
    });
    let map = |what: &str| {
        json_schema!({
            "description": what,
            "type": "object",
            "maxProperties": MAX_ENTRIES,
            "additionalProperties": quantity.clone(),
        })
    };
    json_schema!({
        "type": "object",
        "properties": {
            "requests": map("What the scheduler reserves, for example cpu: 500m, memory: 1Gi."),
            "limits": map("The most the containers may use, for example memory: 1Gi; a request may not exceed its limit."),
        },
    })
}

/// Checks a `resources` field at `field`: known resource names, quantities
/// Kubernetes reads, and no request above its limit.
pub fn validate(field: &str, r: &ResourceRequirements) -> Result<(), InvalidSpec> {
    if r.claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(InvalidSpec::new(
            format!("{field}.claims"),
            "is not supported: these pods declare no resource claims; set requests and limits only",
        ));
    }
    let empty = BTreeMap::new();
    let requests = r.requests.as_ref().unwrap_or(&empty);
    let limits = r.limits.as_ref().unwrap_or(&empty);
    for (part, map) in [("requests", requests), ("limits", limits)] {
        if map.len() > MAX_ENTRIES {
            return Err(InvalidSpec::new(
                format!("{field}.{part}"),
                format!(
                    "names {} resources, at most {MAX_ENTRIES}; keep cpu, memory and ephemeral-storage",
                    map.len()
                ),
            ));
        }
        for (resource, Quantity(value)) in map {
            let at = key_path(&format!("{field}.{part}"), resource);
            if !is_resource_name(resource) {
                return Err(InvalidSpec::new(
                    at,
                    format!(
                        "{} is not a resource Kubernetes knows; use cpu, memory, ephemeral-storage, hugepages-<size> or an extended resource such as example.com/gpu",
                        validate::quote(resource)
                    ),
                ));
            }
            if validate::quantity(value).is_none() {
                let like = if resource == "cpu" {
                    "500m or 2"
                } else {
                    "512Mi or 2Gi"
                };
                return Err(InvalidSpec::new(
                    at,
                    format!(
                        "{} is not a quantity; write it like {like}",
                        validate::quote(value)
                    ),
                ));
            }
        }
    }
    for (resource, Quantity(request)) in requests {
        let Some(Quantity(limit)) = limits.get(resource) else {
            continue;
        };
        if validate::quantity(request) > validate::quantity(limit) {
            return Err(InvalidSpec::new(
                key_path(&format!("{field}.requests"), resource),
                format!(
                    "{} is more than its limit {}; Kubernetes refuses a request above the limit: lower the request or raise the limit",
                    cut(request),
                    cut(limit)
                ),
            ));
        }
    }
    Ok(())
}

/// A resource name a container may request: the standard ones, huge
/// pages, or a domain-qualified extended resource.
fn is_resource_name(name: &str) -> bool {
    match name {
        "cpu" | "memory" | "ephemeral-storage" => true,
        _ if name.starts_with("hugepages-") => validate::quantity(&name[10..]).is_some(),
        _ => name.split_once('/').is_some_and(|(domain, rest)| {
            validate::is_dns_subdomain(domain)
                && !rest.is_empty()
                && rest.len() <= 63
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        }),
    }
}

/// A `requests` or `limits` map of `cpu` and `memory`.
pub fn cpu_memory(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.to_string())),
        ("memory".to_string(), Quantity(memory.to_string())),
    ])
}

/// The requests of a backup container when its owner names none: enough
/// to be scheduled beside the database it reads, no limit. A dump's memory
/// grows with the number of objects in the database and a verification
/// runs a whole PostgreSQL: a default limit would kill the nightly backup
/// of a large schema, where a request only reserves room for a small one.
pub fn backup_defaults() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(cpu_memory("100m", "256Mi")),
        ..ResourceRequirements::default()
    }
}

/// The resources of a backup container: its owner's `resources` when
/// given (they replace the defaults), else [`backup_defaults`].
pub fn backup(given: Option<&ResourceRequirements>) -> ResourceRequirements {
    given.cloned().unwrap_or_else(backup_defaults)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources(json: serde_json::Value) -> ResourceRequirements {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn sound_resources_pass() {
        for ok in [
            serde_json::json!({}),
            serde_json::json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}),
            serde_json::json!({"requests": {"cpu": 1}, "limits": {"cpu": 2, "hugepages-2Mi": "64Mi"}}),
            serde_json::json!({"limits": {"example.com/gpu": "1"}}),
        ] {
            assert!(
                validate("spec.resources", &resources(ok.clone())).is_ok(),
                "{ok}"
            );
        }
    }

    #[test]
    fn each_fault_names_its_field() {
        for (json, field, words) in [
            (
                serde_json::json!({"requests": {"cpu": "lots"}}),
                "spec.resources.requests.cpu",
                "\"lots\" is not a quantity; write it like 500m or 2",
            ),
            (
                serde_json::json!({"limits": {"memory": "1GB"}}),
                "spec.resources.limits.memory",
                "write it like 512Mi or 2Gi",
            ),
            (
                serde_json::json!({"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}),
                "spec.resources.requests.memory",
                "2Gi is more than its limit 1Gi",
            ),
            (
                serde_json::json!({"requests": {"cpu": "1500m"}, "limits": {"cpu": "1"}}),
                "spec.resources.requests.cpu",
                "more than its limit",
            ),
            (
                serde_json::json!({"requests": {"gpu": "1"}}),
                "spec.resources.requests.gpu",
                "not a resource Kubernetes knows",
            ),
            (
                serde_json::json!({"claims": [{"name": "x"}]}),
                "spec.resources.claims",
                "is not supported",
            ),
        ] {
            let e = validate("spec.resources", &resources(json.clone())).unwrap_err();
            assert_eq!(e.field, field, "{json}");
            assert!(e.message.contains(words), "{json}: {}", e.message);
        }
    }

    #[test]
    fn backups_get_requests_unless_told_otherwise() {
        let defaults = backup(None);
        assert_eq!(defaults.requests.as_ref().unwrap()["memory"].0, "256Mi");
        assert_eq!(defaults.limits, None);
        let given = resources(serde_json::json!({"limits": {"memory": "4Gi"}}));
        assert_eq!(backup(Some(&given)), given);
    }
}
