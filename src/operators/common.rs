//! What the operators share: the recommended labels, the restricted
//! security contexts, child serialization and ordering, pod readiness.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// Sorts children by apiVersion, kind, namespace and name, so the answer is
/// the same whatever order a builder produced them in.
pub fn sorted_children(children: Vec<Value>) -> Vec<Value> {
    let mut keyed: Vec<_> = children
        .into_iter()
        .map(|child| {
            let key = ["apiVersion", "kind"]
                .iter()
                .map(|f| {
                    child
                        .get(f)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                })
                .chain(["namespace", "name"].iter().map(|f| {
                    child
                        .pointer(&format!("/metadata/{f}"))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                }))
                .collect::<Vec<_>>();
            (key, child)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, child)| child).collect()
}

/// Label naming the application, `webserver`.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// Label naming the parent a child belongs to.
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
/// Label naming who manages the child: always `opshooks`.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// The recommended labels of a child of parent `instance` of application `app`.
pub fn standard_labels(app: &str, instance: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_string(), app.to_string()),
        (LABEL_INSTANCE.to_string(), instance.to_string()),
        (LABEL_MANAGED_BY.to_string(), "opshooks".to_string()),
    ])
}

/// The labels that select the children of one parent: name and instance.
pub fn selector_labels(app: &str, instance: &str) -> BTreeMap<String, String> {
    let mut labels = standard_labels(app, instance);
    labels.remove(LABEL_MANAGED_BY);
    labels
}

/// A container that runs with no capabilities and cannot gain privileges:
/// the "restricted" Pod Security Standard.
pub fn restricted_container() -> k8s_openapi::api::core::v1::SecurityContext {
    k8s_openapi::api::core::v1::SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(k8s_openapi::api::core::v1::Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: None,
        }),
        ..Default::default()
    }
}

/// A pod that runs as `uid` (group and volume group too), non-root, with
/// the runtime's default seccomp profile.
pub fn restricted_pod(uid: i64) -> k8s_openapi::api::core::v1::PodSecurityContext {
    k8s_openapi::api::core::v1::PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        fs_group: Some(uid),
        seccomp_profile: Some(k8s_openapi::api::core::v1::SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// A typed Kubernetes object as a desired child.
pub fn child<K: k8s_openapi::Resource + Serialize>(object: &K) -> Value {
    serde_json::to_value(object).expect("Kubernetes objects serialize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn children_sort_by_kind_then_name() {
        let pod = |n: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n}});
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}});
        let sorted = sorted_children(vec![svc.clone(), pod("b"), pod("a")]);
        assert_eq!(sorted, vec![pod("a"), pod("b"), svc]);
    }
}
