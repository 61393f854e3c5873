//! The Job controller, as the model runs it: a Job runs for a few rounds,
//! then succeeds or fails as scripted, a grow Job's `kubectl patch` of
//! claims applied as kubectl would; and the CronJob, which starts a Job
//! only when told to.

use serde_json::{Value, json};

use super::{Actor, Cluster, Key, Verb, object_map, owner_ref};
use crate::hook::conditions::format_time;

impl Cluster {
    /// A Job runs for `job_steps` rounds, then succeeds or, if scripted,
    /// fails. A finished Job stays finished.
    pub(super) fn job(&mut self, key: &Key) {
        let Some(job) = self.objects.get(key) else {
            return;
        };
        let finished = job
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty());
        if finished {
            return;
        }
        let done = self.age_of(job) >= self.job_steps;
        let mut fails = self.failing_jobs.iter().any(|f| job_matches(f, &key.name));
        if done && !fails {
            let patches = claim_patches(job, &key.namespace);
            fails = !self.patch_claims(&patches);
        }
        let now = format_time(self.now);
        let status = match (done, fails) {
            (false, _) => json!({"active": 1, "startTime": now}),
            (true, false) => json!({"succeeded": 1, "completionTime": now,
                "conditions": [{"type": "Complete", "status": "True"}]}),
            (true, true) => json!({"failed": 1,
                "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
        };
        if let Some(object) = self.objects.get_mut(key) {
            object
                .as_object_mut()
                .map(|o| o.insert("status".into(), status));
        }
    }

    /// Applies a grow Job's `kubectl patch` of claims, each a JSON patch of
    /// `test` and `replace` operations; false (nothing changed of that
    /// claim) when a test fails or the claim is missing, as kubectl fails.
    fn patch_claims(&mut self, patches: &[(Key, Vec<Value>)]) -> bool {
        let mut all = true;
        for (claim, ops) in patches {
            let Some(object) = self.objects.get(claim) else {
                all = false;
                continue;
            };
            let mut patched = object.clone();
            let applied = ops.iter().all(|op| {
                let path = op["path"].as_str().unwrap_or_default();
                match op["op"].as_str() {
                    Some("test") => patched.pointer(path) == Some(&op["value"]),
                    Some("replace") => patched
                        .pointer_mut(path)
                        .map(|v| *v = op["value"].clone())
                        .is_some(),
                    _ => false,
                }
            });
            if applied {
                if let Some(object) = self.objects.get_mut(claim) {
                    *object = patched;
                }
                self.record(Verb::Updated, claim, Actor::Controllers);
            }
            all &= applied;
        }
        all
    }

    /// Starts a Job from a CronJob's template, as a schedule firing would.
    pub fn run_cronjob(&mut self, cronjob: &Key) -> Option<Key> {
        let cron = self.objects.get(cronjob)?.clone();
        let template = cron.pointer("/spec/jobTemplate")?;
        let name = format!("{}-{}", cronjob.name, self.next_uid);
        let mut job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": cronjob.namespace,
                         "labels": template.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
                         "ownerReferences": [owner_ref(&cron)]},
            "spec": template.get("spec").cloned().unwrap_or(json!({})),
        });
        object_map(&mut job, "status").insert("active".into(), json!(1));
        self.create(job, Actor::Controllers)
    }
}

/// The claims a Job's containers patch with `kubectl patch
/// persistentvolumeclaim NAME --namespace NS --type=json -p PATCH`, and
/// their patches.
fn claim_patches(job: &Value, namespace: &str) -> Vec<(Key, Vec<Value>)> {
    let containers = job
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array);
    containers
        .into_iter()
        .flatten()
        .filter(|c| c["command"] == json!(["kubectl"]))
        .filter_map(|c| {
            let args: Vec<&str> = c["args"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let ["patch", "persistentvolumeclaim", name, rest @ ..] = args.as_slice() else {
                return None;
            };
            let after = |flag: &str| {
                rest.iter()
                    .position(|a| *a == flag)
                    .and_then(|i| rest.get(i + 1))
            };
            let ns = after("--namespace").copied().unwrap_or(namespace);
            let ops: Vec<Value> = serde_json::from_str(after("-p")?).ok()?;
            Some((Key::new("v1", "PersistentVolumeClaim", ns, name), ops))
        })
        .collect()
}

/// True when `pattern` (a Job's name, or the start of names followed by
/// `*`) names the Job `name`.
pub fn job_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(start) => name.starts_with(start),
        None => pattern == name,
    }
}
