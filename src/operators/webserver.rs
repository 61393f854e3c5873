//! WebServer: keeps N identical web server pods running, the classic first
//! example of the operator pattern.
//!
//! Desired state is exactly `spec.replicas` Pods named `<name>-0` to
//! `<name>-(n-1)`, so scaling down drops the highest indices first. Pods
//! cannot change their ports in place, so the controller uses Metacontroller's
//! `RollingRecreate`: a pod whose desired image or port differs is deleted
//! and recreated, one at a time, each waiting for the previous to be Ready.
//! Status reports only what was observed.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodSpec, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    non_root_pod, ready_of, refuse_not_built, restricted_container, selector_string,
    standard_labels,
};
use super::validate::{self, InvalidSpec};
use crate::hook::Child;
use crate::hook::ObservedPod;
use crate::hook::SyncRequest;
use crate::hook::SyncResponse;
use crate::hook::conditions::{self, Condition, Observation};
use crate::operator::{ChildResource, Context, ControllerSpec, HookError, Operator};

/// The image a WebServer runs when its spec names none: nginx built to run
/// as a user other than root (uid 101) on an unprivileged port, so its
/// pods meet the restricted Pod Security Standard.
pub const DEFAULT_IMAGE: &str = "nginxinc/nginx-unprivileged";
/// The port a WebServer listens on when its spec names none (the default
/// image's).
pub const DEFAULT_PORT: i32 = 8080;
/// The most pods one WebServer may ask for: a guard against a typo such as
/// `replicas: 10000` flooding a cluster.
pub const MAX_REPLICAS: i32 = 1000;
/// The longest WebServer name: `<name>-999` must still fit a 63-character
/// label and hostname.
pub const MAX_NAME: usize = 59;
/// The container name inside every pod.
pub const CONTAINER: &str = "web";
/// The `app.kubernetes.io/name` label of every pod.
const APP: &str = "webserver";

/// A set of identical web server pods.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "opshooks.io",
    version = "v1alpha1",
    kind = "WebServer",
    namespaced,
    status = "WebServerStatus",
    shortname = "ws",
    category = "opshooks",
    doc = "WebServer runs a fixed number of identical web server pods.",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.readyPods"),
    printcolumn(name = "Up-to-date", type_ = "string", json_path = ".status.conditions[?(@.type==\"UpToDate\")].status"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image", priority = "1"),
    printcolumn(name = "Port", type_ = "integer", json_path = ".spec.port", priority = "1"),
    scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.count", label_selector_path = ".status.selector"),
    validation = Rule::new("self.metadata.name.size() <= 59").message("metadata.name must be at most 59 characters, so that pod names <name>-<index> fit in 63")
)]
#[serde(rename_all = "camelCase")]
pub struct WebServerSpec {
    /// How many web server pods to run, from 0 to 1000.
    #[schemars(range(min = 0, max = 1000))]
    pub replicas: i32,
    /// The container image every pod runs, for example nginx:1.27.
    #[serde(default = "default_image")]
    #[schemars(length(min = 1, max = 255), pattern(r"^\S+$"))]
    pub image: String,
    /// The TCP port the web server listens on; declared on the container and
    /// used for the readiness probe.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

fn default_image() -> String {
    DEFAULT_IMAGE.to_string()
}

fn default_port() -> i32 {
    DEFAULT_PORT
}

/// What was observed of a WebServer's pods.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct WebServerStatus {
    /// Observed pods in phase Running or Pending.
    pub count: i32,
    /// Observed pods whose Ready condition is True.
    pub ready_replicas: i32,
    /// Ready pods of those asked for, as `n/m`, for `kubectl get ws`'s READY.
    pub ready_pods: String,
    /// Ready: every desired pod exists and is ready.
    pub conditions: Vec<Condition>,
    /// The label selector of this WebServer's pods, as a string: the scale
    /// subresource's `labelSelectorPath`, by which a HorizontalPodAutoscaler
    /// finds the pods to measure.
    pub selector: String,
    /// The parent generation Metacontroller last synced; set by Metacontroller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The WebServer operator and its routes.
pub fn operator() -> Operator {
    let controller = ControllerSpec {
        children: vec![ChildResource::new(
            "v1",
            "pods",
            "OnDelete",
            "the hook rolls pods itself, one at a time: Metacontroller v4.17.2's rolling updates look pods up by name where they are keyed by namespace/name, and never get past the first",
        )],
        generate_selector: true,
        resync_period_seconds: None,
    };
    Operator::new::<WebServer>("webserver", controller, "Pod × replicas").sync(sync)
}

/// Desired pods and observed status of one WebServer.
///
/// Pods cannot change image or port in place, and Metacontroller never
/// updates them (`OnDelete`), so a template change rolls like this: every
/// out-of-date pod is answered as it runs, except the lowest-index one,
/// which is left out (Metacontroller deletes it, and the next sync creates
/// it anew) only while every other pod is there and ready; an out-of-date
/// pod that is down already goes first, as replacing it costs nothing. At
/// most one more pod is unavailable at a time, and a new pod that does not
/// become ready stops the rollout there. A pod that ran to an end (evicted,
/// failed) is left out too, so it is created anew.
pub fn sync(
    req: &SyncRequest<WebServer>,
    ctx: &Context,
) -> Result<SyncResponse<WebServerStatus>, HookError> {
    let ws = &req.parent;
    validate(ws)?;
    // An answer leaves out every pod it does not name, and Metacontroller
    // deletes those: a pod someone else made a child (`hello-debug`) is
    // refused, not deleted.
    refuse_not_built::<Pod>(&req.children, "WebServer", name(ws), |n| is_built(ws, n))?;
    let observed = req.children.of::<ObservedPod>()?;
    // Each pod is written out as soon as it is built: a thousand k8s-openapi
    // Pods held at once cost megabytes.
    let desired = desired_pods(ws, &observed).map(|p| Child::new(&p));
    Ok(SyncResponse {
        status: status(ws, &observed, ctx),
        children: Child::sorted(desired.collect()),
        ..SyncResponse::default()
    })
}

/// The pods to answer, rolling one out-of-date pod at a time, built one by
/// one as the iterator is read.
pub fn desired_pods<'a>(
    ws: &'a WebServer,
    observed: &'a [ObservedPod],
) -> impl Iterator<Item = Pod> + 'a {
    // One lookup per index, not a scan: a body may carry thousands of pods.
    let by_name: BTreeMap<&str, &ObservedPod> = observed
        .iter()
        .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
        .collect();
    // Each index's pod, looked up once: the rules below ask several times.
    let found: Vec<Option<&ObservedPod>> = (0..ws.spec.replicas)
        .map(|index| by_name.get(pod_name(ws, index).as_str()).copied())
        .collect();
    let seen = |index: i32| found[index as usize];
    let running = |p: &ObservedPod| p.metadata.deletion_timestamp.is_none();
    let outdated = |index: i32| {
        seen(index)
            .filter(|p| running(p))
            .and_then(|p| template_of(p).filter(|t| *t != (ws.spec.image.as_str(), ws.spec.port)))
    };
    let unavailable = |index: i32| seen(index).is_none_or(|p| !running(p) || !p.is_ready());
    // An out-of-date pod that is down already goes first: replacing it costs
    // nothing (and may be what brings it back). Otherwise the lowest one,
    // once every other pod is there and ready.
    let next = (0..ws.spec.replicas)
        .find(|i| outdated(*i).is_some() && unavailable(*i))
        .or_else(|| {
            let lowest = (0..ws.spec.replicas).find(|i| outdated(*i).is_some())?;
            (0..ws.spec.replicas)
                .filter(|i| *i != lowest)
                .all(|i| !unavailable(i))
                .then_some(lowest)
        });
    // A pod that ran to an end (evicted, failed) is never restarted by
    // Kubernetes, nor replaced by Metacontroller under OnDelete: leave it
    // out so it is deleted and created anew.
    let ended =
        |index: i32| seen(index).is_some_and(|p| matches!(p.phase(), Some("Failed" | "Succeeded")));
    let kept: Vec<(i32, Option<(&str, i32)>)> = (0..ws.spec.replicas)
        .filter(|i| Some(*i) != next && !ended(*i))
        .map(|index| (index, outdated(index)))
        .collect();
    kept.into_iter()
        .map(move |(index, outdated)| match outdated {
            Some((image, port)) => pod_running(ws, index, image, port),
            None => pod(ws, index),
        })
}

/// The image and port an observed pod runs, if it is one of ours.
fn template_of(p: &ObservedPod) -> Option<(&str, i32)> {
    let container = p
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)?;
    let port = container.ports.as_ref()?.first()?.container_port;
    Some((container.image.as_deref()?, port))
}

/// True when an observed pod runs the spec's image and port.
pub fn is_current(ws: &WebServer, p: &ObservedPod) -> bool {
    template_of(p) == Some((ws.spec.image.as_str(), ws.spec.port))
}

/// Checks what the CRD schema checks, for requests that bypassed it.
pub fn validate(ws: &WebServer) -> Result<(), InvalidSpec> {
    let name = ws.metadata.name.as_deref().unwrap_or_default();
    validate::dns_label("metadata.name", name, MAX_NAME)?;
    validate::in_range(
        "spec.replicas",
        ws.spec.replicas.into(),
        0,
        MAX_REPLICAS.into(),
    )?;
    validate::image("spec.image", &ws.spec.image)?;
    validate::in_range("spec.port", ws.spec.port.into(), 1, 65535)?;
    Ok(())
}

/// The label Metacontroller's generated selector matches: the parent's uid.
pub const LABEL_CONTROLLER_UID: &str = "controller-uid";

/// The labels of every pod of a WebServer, the parent's uid among them.
///
/// Metacontroller adds `controller-uid` to desired children itself
/// (`generateSelector`), but only after its rolling update has compared the
/// desired pods with the observed ones; there a desired pod without the
/// label reads as a change (the label would be removed), so no pod ever
/// counts as updated and a rollout stops after its first pod. With the label
/// in our own answer, the comparison sees the pod as it is.
pub fn labels(ws: &WebServer) -> BTreeMap<String, String> {
    let mut labels = standard_labels(APP, ws.metadata.name.as_deref().unwrap_or_default());
    if let Some(uid) = &ws.metadata.uid {
        labels.insert(LABEL_CONTROLLER_UID.to_string(), uid.clone());
    }
    labels
}

fn name(ws: &WebServer) -> &str {
    ws.metadata.name.as_deref().unwrap_or_default()
}

/// True when `pod` is a name this operator gives a pod: `<name>-<index>`,
/// the index written as [`pod_name`] writes it (no sign, no leading zero),
/// whatever its size: a pod left from a larger `replicas` is one it built.
pub fn is_built(ws: &WebServer, pod: &str) -> bool {
    pod.strip_prefix(name(ws))
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|index| {
            !index.is_empty()
                && index.bytes().all(|b| b.is_ascii_digit())
                && (index == "0" || !index.starts_with('0'))
        })
}

/// The name of the pod at `index`.
pub fn pod_name(ws: &WebServer, index: i32) -> String {
    format!(
        "{}-{index}",
        ws.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The pod at `index`: the image with its port declared and probed.
pub fn pod(ws: &WebServer, index: i32) -> Pod {
    pod_running(ws, index, &ws.spec.image, ws.spec.port)
}

/// The pod at `index` with a given image and port: the current template's,
/// or an out-of-date pod's own while it waits for its turn to be replaced.
fn pod_running(ws: &WebServer, index: i32, image: &str, port: i32) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(ws, index)),
            namespace: ws.metadata.namespace.clone(),
            labels: Some(labels(ws)),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: CONTAINER.to_string(),
                image: Some(image.to_string()),
                ports: Some(vec![ContainerPort {
                    name: Some("http".to_string()),
                    container_port: port,
                    protocol: Some("TCP".to_string()),
                    ..ContainerPort::default()
                }]),
                readiness_probe: Some(Probe {
                    tcp_socket: Some(TCPSocketAction {
                        port: IntOrString::String("http".to_string()),
                        host: None,
                    }),
                    period_seconds: Some(5),
                    ..Probe::default()
                }),
                security_context: Some(restricted_container()),
                ..Container::default()
            }],
            // The restricted Pod Security Standard: the image must run as
            // a user other than root (its own USER, which the kubelet
            // checks), never gain privileges, hold no capabilities.
            security_context: Some(non_root_pod()),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// True when the pod is Running or Pending, the original example's "count".
pub fn is_counted(pod: &ObservedPod) -> bool {
    matches!(pod.phase(), Some("Running" | "Pending"))
}

/// The status of a WebServer from its observed pods.
pub fn status(ws: &WebServer, observed: &[ObservedPod], ctx: &Context) -> WebServerStatus {
    let count = observed.iter().filter(|p| is_counted(p)).count();
    let ready = observed.iter().filter(|p| p.is_ready()).count();
    let previous = ws
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    WebServerStatus {
        count: count as i32,
        ready_replicas: ready as i32,
        ready_pods: ready_of(ready as i32, ws.spec.replicas, count as i32),
        conditions: conditions::reconcile(
            previous,
            vec![ready_condition(ws, observed), up_to_date(ws, observed)],
            ws.metadata.generation,
            ctx.now,
        ),
        selector: selector_string(APP, ws.metadata.name.as_deref().unwrap_or_default()),
        observed_generation: None,
    }
}

/// `Ready`: every requested pod is ready, or which are not.
fn ready_condition(ws: &WebServer, observed: &[ObservedPod]) -> Observation {
    let ready_names: BTreeSet<&str> = observed
        .iter()
        .filter(|p| p.is_ready())
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let unready: Vec<String> = (0..ws.spec.replicas)
        .map(|index| pod_name(ws, index))
        .filter(|name| !ready_names.contains(name.as_str()))
        .collect();
    let desired = ws.spec.replicas;
    if desired == 0 {
        Observation::new("Ready", true, "ScaledToZero", "no pods are requested")
    } else if unready.is_empty() {
        Observation::new(
            "Ready",
            true,
            "AllPodsReady",
            format!("{desired} of {desired} pods are ready"),
        )
    } else {
        Observation::new(
            "Ready",
            false,
            "PodsNotReady",
            format!(
                "{} of {desired} pods are ready; waiting for {}",
                desired as usize - unready.len(),
                summarize(&unready)
            ),
        )
    }
}

/// `UpToDate`: every pod runs the spec's image and port, or which are
/// still to replace.
fn up_to_date(ws: &WebServer, observed: &[ObservedPod]) -> Observation {
    let outdated: Vec<String> = observed
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && !is_current(ws, p))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    if outdated.is_empty() {
        Observation::new(
            "UpToDate",
            true,
            "AllPodsCurrent",
            format!("every pod runs {} on port {}", ws.spec.image, ws.spec.port),
        )
    } else {
        Observation::new(
            "UpToDate",
            false,
            "RollingOut",
            format!(
                "replacing one pod at a time, each once the others are ready; still to replace: {}",
                summarize(&outdated)
            ),
        )
    }
}

/// Names a few items and counts the rest, to keep messages one line.
fn summarize(names: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = names[..names.len().min(SHOWN)].join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::operators::common::LABEL_INSTANCE;

    /// The WebServer `web` of `replicas`, its image and port the defaults.
    fn ws(replicas: i32) -> WebServer {
        fixtures::webserver("web")
            .namespace("shop")
            .generation(3)
            .spec("replicas", replicas)
            .typed()
    }

    fn ctx() -> Context {
        Context::fixed()
    }

    #[test]
    fn pods_carry_image_port_labels_and_namespace() {
        let mut server = ws(2);
        server.spec.image = "nginx:1.27".into();
        server.spec.port = 8080;
        let pod = pod(&server, 1);
        assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[LABEL_INSTANCE], "web");
        let container = &pod.spec.unwrap().containers[0];
        assert_eq!(container.image.as_deref(), Some("nginx:1.27"));
        assert_eq!(container.ports.as_ref().unwrap()[0].container_port, 8080);
    }

    #[test]
    fn status_selector_selects_its_pods_and_no_others() {
        // The scale subresource's labelSelectorPath: an HPA finds the pods
        // to measure by this string, so it must match every pod this
        // WebServer builds and none of another WebServer's.
        let matches = |selector: &str, pod: &Pod| {
            let labels = pod.metadata.labels.as_ref().unwrap();
            selector.split(',').all(|term| {
                let (key, value) = term.split_once('=').unwrap();
                labels.get(key).map(String::as_str) == Some(value)
            })
        };
        let server = ws(2);
        let selector = status(&server, &[], &ctx()).selector;
        assert!(!selector.is_empty());
        assert!((0..2).all(|i| matches(&selector, &pod(&server, i))));
        let other = fixtures::webserver("web2")
            .namespace("shop")
            .spec("replicas", 1)
            .typed();
        assert!(
            !matches(&selector, &pod(&other, 0)),
            "{selector} selects web2's pod"
        );
    }

    #[test]
    fn status_rules() {
        struct Case {
            reason: &'static str,
            replicas: i32,
            pods: Vec<fixtures::Object>,
            want: (i32, i32, &'static str, &'static str),
        }
        let cases = [
            Case {
                reason: "nothing observed yet",
                replicas: 2,
                pods: vec![],
                want: (
                    0,
                    0,
                    "False",
                    "0 of 2 pods are ready; waiting for web-0, web-1",
                ),
            },
            Case {
                reason: "all ready",
                replicas: 2,
                pods: vec![
                    fixtures::pod("web-0").ready(),
                    fixtures::pod("web-1").ready(),
                ],
                want: (2, 2, "True", "2 of 2 pods are ready"),
            },
            Case {
                reason: "pending counts but is not ready",
                replicas: 2,
                pods: vec![
                    fixtures::pod("web-0").ready(),
                    fixtures::pod("web-1").phase("Pending"),
                ],
                want: (2, 1, "False", "1 of 2 pods are ready; waiting for web-1"),
            },
            Case {
                reason: "failed and succeeded pods are not counted",
                replicas: 1,
                pods: vec![
                    fixtures::pod("web-0").phase("Failed"),
                    fixtures::pod("web-1").phase("Succeeded"),
                ],
                want: (0, 0, "False", "0 of 1 pods are ready; waiting for web-0"),
            },
            Case {
                reason: "an extra ready pod being scaled away does not make a missing one ready",
                replicas: 1,
                pods: vec![fixtures::pod("web-1").ready()],
                want: (1, 1, "False", "0 of 1 pods are ready; waiting for web-0"),
            },
            Case {
                reason: "scaled to zero is ready",
                replicas: 0,
                pods: vec![fixtures::pod("web-0").ready()],
                want: (1, 1, "True", "no pods are requested"),
            },
        ];
        for case in cases {
            let pods: Vec<ObservedPod> =
                case.pods.into_iter().map(fixtures::Object::typed).collect();
            let got = status(&ws(case.replicas), &pods, &ctx());
            let cond = &got.conditions[0];
            let status = serde_json::to_value(cond.status).unwrap();
            assert_eq!(
                (
                    got.count,
                    got.ready_replicas,
                    status.as_str().unwrap(),
                    cond.message.as_deref().unwrap()
                ),
                case.want,
                "{}",
                case.reason
            );
        }
    }

    /// Issue 8's real loop: Metacontroller's rolling update never got past
    /// the first pod, so the hook rolls: one out-of-date pod left out at a
    /// time, only while every other pod is there and ready.
    #[test]
    fn template_changes_roll_one_pod_at_a_time() {
        let running = |index: i32, image: &str, ready: bool| {
            let mut spec = ws(3);
            spec.spec.image = image.into();
            let mut p: ObservedPod = fixtures::pod(&pod_name(&spec, index))
                .ready_if(ready)
                .typed();
            p.spec = ObservedPod::from_pod(&pod(&spec, index)).spec;
            p
        };
        let failed = |index: i32, image: &str| {
            let mut p = running(index, image, false);
            p.status.as_mut().unwrap().phase = Some("Failed".into());
            p
        };
        struct Case {
            reason: &'static str,
            pods: Vec<ObservedPod>,
            want: Vec<(&'static str, &'static str)>,
        }
        let new = DEFAULT_IMAGE;
        let cases = [
            Case {
                reason: "all out of date and ready: the lowest goes first",
                pods: vec![
                    running(0, "old", true),
                    running(1, "old", true),
                    running(2, "old", true),
                ],
                want: vec![("web-1", "old"), ("web-2", "old")],
            },
            Case {
                reason: "the new pod is not ready yet: nothing else goes",
                pods: vec![
                    running(0, new, false),
                    running(1, "old", true),
                    running(2, "old", true),
                ],
                want: vec![("web-0", new), ("web-1", "old"), ("web-2", "old")],
            },
            Case {
                reason: "the new pod is ready: the next goes",
                pods: vec![
                    running(0, new, true),
                    running(1, "old", true),
                    running(2, "old", true),
                ],
                want: vec![("web-0", new), ("web-2", "old")],
            },
            Case {
                reason: "a pod is missing: it is created, nothing goes",
                pods: vec![running(0, new, true), running(1, "old", true)],
                want: vec![("web-0", new), ("web-1", "old"), ("web-2", new)],
            },
            Case {
                reason: "an out-of-date pod is down already: it goes first, whatever the others",
                pods: vec![
                    running(0, "old", true),
                    running(1, "old", false),
                    running(2, new, false),
                ],
                want: vec![("web-0", "old"), ("web-2", new)],
            },
            Case {
                reason: "a failed pod is left out, to be created anew",
                pods: vec![running(0, new, true), failed(1, new), running(2, new, true)],
                want: vec![("web-0", new), ("web-2", new)],
            },
            Case {
                reason: "all current: every pod as the spec says",
                pods: vec![
                    running(0, new, true),
                    running(1, new, true),
                    running(2, new, false),
                ],
                want: vec![("web-0", new), ("web-1", new), ("web-2", new)],
            },
        ];
        for case in cases {
            let got: Vec<(String, String)> = desired_pods(&ws(3), &case.pods)
                .map(|p| {
                    let image = p.spec.unwrap().containers[0].image.clone().unwrap();
                    (p.metadata.name.unwrap(), image)
                })
                .collect();
            let want: Vec<(String, String)> = case
                .want
                .iter()
                .map(|(n, i)| (n.to_string(), i.to_string()))
                .collect();
            assert_eq!(got, want, "{}", case.reason);
        }
    }

    /// Issue 8's real loop: without the parent's uid in our own answer, an
    /// image change recreated one pod and the rollout stopped there.
    #[test]
    fn regression_pods_carry_the_parents_uid_so_rollouts_complete() {
        let mut parent = ws(2);
        parent.metadata.uid = Some("uid-1".into());
        let labels = pod(&parent, 0).metadata.labels.unwrap();
        assert_eq!(
            labels.get(LABEL_CONTROLLER_UID).map(String::as_str),
            Some("uid-1")
        );
        let without_uid = pod(&ws(2), 0).metadata.labels.unwrap();
        assert!(!without_uid.contains_key(LABEL_CONTROLLER_UID));
    }

    /// Issue 31 item 5: a pod the WebServer did not build is refused, not
    /// deleted; every index it may have built counts, however large (a
    /// first attempt stopped at 999 and refused `a-1000`).
    #[test]
    fn pods_it_built_are_named_by_a_canonical_index() {
        let cases = [
            ("web-0", true, "the first index"),
            ("web-7", true, "an index below replicas"),
            ("web-999", true, "the largest index replicas allows"),
            ("web-1000", true, "an index left from a larger spec of old"),
            (
                "web-123456789012345678901234567890",
                true,
                "any size, no overflow",
            ),
            ("web-debug", false, "a name someone gave a pod by hand"),
            ("web-", false, "no index"),
            ("web", false, "the parent's own name"),
            ("web-00", false, "a leading zero: pod_name never writes it"),
            ("web-01", false, "a leading zero"),
            ("web--1", false, "a sign"),
            ("web-+1", false, "a plus sign"),
            ("web-1a", false, "digits then letters"),
            (
                "web-1-0",
                false,
                "a child of the WebServer web-1, not of web",
            ),
            ("webx-1", false, "another prefix"),
            ("other-1", false, "another parent's pod"),
            ("web-١", false, "a digit outside ASCII"),
        ];
        let server = ws(3);
        for (name, built, reason) in cases {
            assert_eq!(is_built(&server, name), built, "{name}: {reason}");
        }
        for index in [0, 1, 9, 10, 999, 1000, i32::MAX] {
            assert!(is_built(&server, &pod_name(&server, index)), "{index}");
        }
    }

    #[test]
    fn long_waiting_lists_are_summarized() {
        let got = status(&ws(5), &[], &ctx());
        assert_eq!(
            got.conditions[0].message.as_deref().unwrap(),
            "0 of 5 pods are ready; waiting for web-0, web-1, web-2 and 2 more"
        );
    }

    #[test]
    fn terminating_pods_are_not_ready() {
        let pod: ObservedPod = fixtures::pod("web-0").ready().deleting().typed();
        assert!(!pod.is_ready());
        assert!(is_counted(&pod));
    }

    #[test]
    fn validation_names_the_field() {
        let cases = [
            (-1, "web", DEFAULT_IMAGE, 80, "spec.replicas"),
            (1001, "web", DEFAULT_IMAGE, 80, "spec.replicas"),
            (1, "web", "my image", 80, "spec.image"),
            (1, "web", DEFAULT_IMAGE, 0, "spec.port"),
            (1, "Web", DEFAULT_IMAGE, 80, "metadata.name"),
            (1, &"w".repeat(60), DEFAULT_IMAGE, 80, "metadata.name"),
        ];
        for (replicas, name, image, port, field) in cases {
            let mut server = ws(replicas);
            server.metadata.name = Some(name.to_string());
            server.spec.image = image.into();
            server.spec.port = port;
            assert_eq!(validate(&server).unwrap_err().field, field);
        }
        assert!(validate(&ws(1000)).is_ok());
    }
}
