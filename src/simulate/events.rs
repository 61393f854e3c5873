//! The events of `--then`: what happens to the cluster from outside the
//! loop (a spec set, an object deleted or annotated, the hook down, a Job
//! made to fail, a pod kept not ready, a volume lost, a CronJob fired,
//! Metacontroller restarted), and their parsing from the words a person
//! types. Only the language: what an event does to the cluster is
//! `Simulation::apply`'s.

use serde_json::{Value, json};

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
    /// [`cluster::Cluster::lose_volume`](super::cluster::Cluster::lose_volume)
    /// for how an instance starts on an empty volume).
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

#[cfg(test)]
mod tests {
    use super::*;
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
}
