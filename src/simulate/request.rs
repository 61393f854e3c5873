//! What Metacontroller sends: the sync (or, once the parent is being
//! deleted, finalize) request made from the cluster as it is now, with the
//! parent's children grouped by type as hook version v2 keys them and the
//! related objects the customize hook asks for, and the resources the
//! simulator models. It changes nothing in the cluster; a request for a
//! parent being deleted marks the deletion begun.

use serde_json::{Value, json};

use super::Simulation;
use super::cluster::is_owned_by;
use super::report::Refusal;
use crate::call as adapter;
use crate::hook::Hook;
use crate::operator::{ChildResource, Context, HookError};

/// One call, ready to make.
pub(super) struct Request {
    /// The hook to call: sync or finalize.
    pub(super) hook: Hook,
    /// The request's body.
    pub(super) body: Vec<u8>,
    /// The call's time and randomness.
    pub(super) ctx: Context,
    /// Whether the parent is being deleted.
    pub(super) finalizing: bool,
}

impl<'a> Simulation<'a> {
    /// The sync (or, for a parent being deleted, finalize) request
    /// Metacontroller would send now, customize's related objects included,
    /// and the parent it was made from.
    pub(super) fn request(&mut self) -> Result<(Request, Value), Refusal> {
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

/// The kind of a declared child type, by its resource's plural
/// (`Unknown` for one the simulator does not model).
pub(super) fn kind_of(child: &ChildResource) -> &'static str {
    KINDS
        .iter()
        .find(|(plural, _)| *plural == child.resource)
        .map(|(_, kind)| *kind)
        .unwrap_or("Unknown")
}
