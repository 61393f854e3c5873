//! What Metacontroller does with a 200 answer: the observed children the
//! answer leaves out deleted, the desired ones created or updated by their
//! type's update method, the status written back if the CRD's schema
//! accepts it (with `observedGeneration` and, for rolling child types, the
//! `Updated` condition), and the finalizer removed once a finalize answer
//! says `finalized: true`. A scripted restart cuts it short.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::Simulation;
use super::cluster::{Actor, Key, is_owned_by, object_map, owner_ref};
use super::request::kind_of;

impl<'a> Simulation<'a> {
    /// Applies a 200 answer, and removes the finalizer once a finalize
    /// answer (`finalizing`) says `finalized: true` and was applied in
    /// full. Returns whether the answer said `finalized: true`.
    pub(super) fn apply_and_finalize(
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

    /// Writes the answer's status back to the parent, as Metacontroller
    /// does: with `observedGeneration` and, for rolling child types, the
    /// `Updated` condition; a status the CRD's schema refuses is not
    /// written, and is a violation.
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
