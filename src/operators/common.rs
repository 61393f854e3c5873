//! What the operators share: the recommended labels, the restricted
//! security contexts.

use std::collections::BTreeMap;

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

/// The selector of one parent's pods as a label-selector string
/// (`k=v,k=v`), what the scale subresource's `labelSelectorPath` points at:
/// a HorizontalPodAutoscaler finds the pods to measure by it.
pub fn selector_string(app: &str, instance: &str) -> String {
    selector_labels(app, instance)
        .into_iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `n/m` for a READY printer column: `ready` of the `wanted` pods, or of
/// those still `running` while a smaller count takes effect.
pub fn ready_of(ready: i32, wanted: i32, running: i32) -> String {
    format!("{ready}/{}", wanted.max(running))
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
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        fs_group: Some(uid),
        ..non_root_pod()
    }
}

/// A pod whose image chooses its user, which must not be root (the
/// kubelet refuses to start it otherwise), with the runtime's default
/// seccomp profile: with [`restricted_container`], the "restricted" Pod
/// Security Standard for images the user names.
pub fn non_root_pod() -> k8s_openapi::api::core::v1::PodSecurityContext {
    k8s_openapi::api::core::v1::PodSecurityContext {
        run_as_non_root: Some(true),
        seccomp_profile: Some(k8s_openapi::api::core::v1::SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// Refuses the request when an observed child of type `K` is not one
/// `is_built` names ([`not_built`]); a missing group is refused too.
pub fn refuse_not_built<K: k8s_openapi::Resource>(
    children: &crate::hook::ObjectGroups,
    kind: &str,
    parent: &str,
    is_built: impl Fn(&str) -> bool,
) -> Result<(), crate::operator::HookError> {
    match children.names_of::<K>()?.into_iter().find(|n| !is_built(n)) {
        Some(name) => Err(not_built(
            kind,
            parent,
            &crate::hook::group_key::<K>(),
            name,
        )),
        None => Ok(()),
    }
}

/// The refusal for an observed child of `parent` (a `kind`) that the
/// operator does not build: an answer without it would delete it, and the
/// operator owns none of its fields to answer it with.
pub fn not_built(kind: &str, parent: &str, group: &str, name: &str) -> crate::operator::HookError {
    crate::operator::HookError::Unsafe(format!(
        "{group} {} is a child of {kind} {parent} but not one opshooks builds; nothing is changed, as an answer without it would delete it: remove its owner reference, or delete it by hand",
        crate::hook::quote::quote(name)
    ))
}
