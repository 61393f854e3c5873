//! The part of an observed Pod that operators read: its metadata, its
//! containers' names, images and ports, its phase, conditions and IP.
//!
//! A full `k8s_openapi` Pod takes about 4.5 KiB before its first string
//! (a `PodSpec` and a `Container` are over 1 KiB each, mostly empty
//! options), so a parent with 30,000 observed pods cost over 150 MiB to
//! decode. Everything else in the JSON is skipped while decoding.

use k8s_openapi::Metadata;
use k8s_openapi::api::core::v1::{ContainerPort, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// An observed Pod, with only what operators read.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ObservedPod {
    /// The pod's metadata, in full.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Its containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ObservedPodSpec>,
    /// Its phase and conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ObservedPodStatus>,
}

/// The containers of an observed pod.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ObservedPodSpec {
    /// Name, image and ports of each container.
    #[serde(default)]
    pub containers: Vec<ObservedContainer>,
}

/// One container of an observed pod.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ObservedContainer {
    /// The container's name.
    #[serde(default)]
    pub name: String,
    /// Its image reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Its declared ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
}

/// Phase and conditions of an observed pod.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ObservedPodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Conditions such as `Ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    /// The pod's IP address, once it has one.
    #[serde(rename = "podIP", default, skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// Why the pod is in its phase, when the kubelet says: `Evicted`,
    /// `DeadlineExceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How its init containers ran.
    #[serde(
        rename = "initContainerStatuses",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub init_container_statuses: Option<Vec<ObservedContainerStatus>>,
    /// How its containers ran.
    #[serde(
        rename = "containerStatuses",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub container_statuses: Option<Vec<ObservedContainerStatus>>,
}

/// How one container of an observed pod ran: its name and, when it
/// stopped, the message it left (`terminationMessagePath`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObservedContainerStatus {
    /// The container's name.
    #[serde(default)]
    pub name: String,
    /// Its state now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ObservedContainerState>,
    /// Its state before its last restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_state: Option<ObservedContainerState>,
}

/// A container's state, as far as operators read it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ObservedContainerState {
    /// Set once the container stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<ObservedTermination>,
}

/// How a container stopped.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObservedTermination {
    /// Its exit code.
    #[serde(default)]
    pub exit_code: i32,
    /// The message it wrote to its termination log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it stopped, when the kubelet says: `OOMKilled`, `Error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl ObservedPod {
    /// When the init container `name` of this pod last finished, as its
    /// status says.
    pub fn init_finished_at(&self, name: &str) -> Option<k8s_openapi::jiff::Timestamp> {
        self.status
            .as_ref()?
            .init_container_statuses
            .as_ref()?
            .iter()
            .find(|c| c.name == name)?
            .state
            .as_ref()?
            .terminated
            .as_ref()?
            .finished_at
            .as_ref()
            .map(|t| t.0)
    }

    /// True when the pod is not being deleted and its Ready condition is
    /// True.
    pub fn is_ready(&self) -> bool {
        self.metadata.deletion_timestamp.is_none()
            && self
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|conds| {
                    conds
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
    }

    /// Since when the pod is not ready: its `Ready` condition is not True
    /// and says when that began. `None` when it is ready, or nothing says
    /// since when.
    pub fn not_ready_since(&self) -> Option<k8s_openapi::jiff::Timestamp> {
        let ready = self
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready")?;
        if ready.status == "True" {
            return None;
        }
        Some(ready.last_transition_time.as_ref()?.0)
    }

    /// The view of a full Pod (for tests and examples that build pods).
    pub fn from_pod(pod: &k8s_openapi::api::core::v1::Pod) -> Self {
        serde_json::to_value(pod)
            .and_then(serde_json::from_value)
            .expect("a Pod decodes as its view")
    }

    /// The message the named init container left when it last stopped.
    pub fn init_container_message(&self, container: &str) -> Option<&str> {
        let statuses = self.status.as_ref()?.init_container_statuses.as_ref()?;
        last_message(statuses, container)
    }

    /// The message the named container (init or not) left when it last
    /// stopped.
    pub fn container_message(&self, container: &str) -> Option<&str> {
        let status = self.status.as_ref()?;
        [&status.container_statuses, &status.init_container_statuses]
            .into_iter()
            .flatten()
            .find_map(|statuses| last_message(statuses, container))
    }

    /// The pod's phase, if reported.
    pub fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_deref()
    }

    /// Why the pod failed, when it did (phase `Failed`, or a container
    /// that stopped with a non-zero exit code), whatever it printed: the
    /// phase's reason, else the first failed container's exit code and
    /// reason.
    pub fn failure(&self) -> Option<String> {
        let status = self.status.as_ref()?;
        let failed_container = [&status.init_container_statuses, &status.container_statuses]
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|c| {
                let t = c.state.as_ref()?.terminated.as_ref()?;
                (t.exit_code != 0).then(|| {
                    let why = t.reason.as_deref().unwrap_or("no reason given");
                    format!("container {} exited {} ({why})", c.name, t.exit_code)
                })
            });
        match (status.phase.as_deref(), failed_container) {
            (_, Some(container)) => Some(container),
            (Some("Failed"), None) => Some(format!(
                "pod phase Failed ({})",
                status.reason.as_deref().unwrap_or("no reason given")
            )),
            _ => None,
        }
    }
}

/// The message `container` left in its termination log, now or before its
/// last restart.
fn last_message<'a>(statuses: &'a [ObservedContainerStatus], container: &str) -> Option<&'a str> {
    let status = statuses.iter().find(|c| c.name == container)?;
    [&status.state, &status.last_state]
        .into_iter()
        .flatten()
        .find_map(|s| s.terminated.as_ref()?.message.as_deref())
}

impl k8s_openapi::Resource for ObservedPod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl Metadata for ObservedPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::pod;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    /// The view reads the same fields a full Pod decodes, from the same JSON.
    #[test]
    fn reads_what_a_full_pod_reads() {
        let json = pod("web-0")
            .namespace("shop")
            .label("a", "b")
            .ready()
            .ip("10.0.0.1")
            .set(
                "/spec",
                json!({"containers": [{"name": "web", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "resources": {"limits": {"memory": "64Mi"}}}],
                    "nodeName": "n1"}),
            )
            .set(
                "/status/containerStatuses",
                json!([{"name": "web", "ready": true, "restartCount": 0, "image": "x", "imageID": ""}]),
            )
            .json();
        let view: ObservedPod = serde_json::from_value(json.clone()).unwrap();
        let full: Pod = serde_json::from_value(json).unwrap();
        assert_eq!(view.metadata, full.metadata);
        assert!(view.is_ready());
        assert_eq!(view.phase(), Some("Running"));
        assert_eq!(
            view.status.as_ref().unwrap().pod_ip,
            full.status.as_ref().unwrap().pod_ip
        );
        let container = &view.spec.as_ref().unwrap().containers[0];
        let full_container = &full.spec.as_ref().unwrap().containers[0];
        assert_eq!(container.name, full_container.name);
        assert_eq!(container.image, full_container.image);
        assert_eq!(container.ports, full_container.ports);
        let mut deleting = view.clone();
        deleting.metadata.deletion_timestamp = full.metadata.creation_timestamp.clone().or(Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().unwrap(),
            ),
        ));
        assert!(!deleting.is_ready());
    }
}
