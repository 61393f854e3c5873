//! Memcached: a sized cache whose status lists its members, the example
//! every operator framework starts with.
//!
//! Children are a Deployment of `size` memcached pods and a headless Service
//! so clients can resolve every node. The customize hook asks Metacontroller
//! for this cache's Pods, which are the Deployment's grandchildren, so the
//! status can name them. What a human operator adds: UDP is off (memcached's
//! UDP port is a well-known amplification vector), the item memory is set
//! below the container's memory limit so connection buffers fit, and the
//! container runs unprivileged on a read-only root filesystem.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SecurityContext, Service, ServicePort, ServiceSpec, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    ready_of, refuse_not_built, restricted_container, restricted_pod, selector_labels,
    selector_string, standard_labels,
};
use super::validate::{self, InvalidSpec, quote};
use crate::hook::conditions::{self, Condition, Observation};
use crate::hook::{
    Child, CustomizeRequest, CustomizeResponse, ObservedPod, RelatedResourceRule, SyncRequest,
    SyncResponse,
};
use crate::operator::{ChildResource, Context, ControllerSpec, HookError, Operator};

/// The image a Memcached runs when its spec names none: the official image,
/// pinned.
pub const DEFAULT_IMAGE: &str = "memcached:1.6.38";
/// memcached's standard port.
pub const DEFAULT_PORT: i32 = 11211;
/// The most nodes one Memcached may ask for.
pub const MAX_SIZE: i32 = 1000;
/// The smallest memory limit that leaves memcached room to work.
pub const MIN_MEMORY_MIB: u64 = 32;
/// The longest Memcached name: it names the Deployment and Service and goes
/// into labels.
pub const MAX_NAME: usize = 50;
const APP: &str = "memcached";

/// A memcached cluster of `size` nodes.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "opshooks.io",
    version = "v1alpha1",
    kind = "Memcached",
    namespaced,
    status = "MemcachedStatus",
    shortname = "mc",
    category = "opshooks",
    doc = "Memcached runs a memcached cluster of a given size and lists its members.",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.readyNodes"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Memory", type_ = "string", json_path = ".spec.memoryLimit", priority = "1"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image", priority = "1"),
    scale(spec_replicas_path = ".spec.size", status_replicas_path = ".status.readyReplicas", label_selector_path = ".status.selector"),
    validation = Rule::new("self.metadata.name.size() <= 50").message("metadata.name must be at most 50 characters")
)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedSpec {
    /// How many memcached nodes to run, from 0 to 1000.
    #[schemars(range(min = 0, max = 1000))]
    pub size: i32,
    /// The TCP port memcached listens on and the Service exposes.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub container_port: i32,
    /// The memcached image, for example memcached:1.6.38.
    #[serde(default = "default_image")]
    #[schemars(length(min = 1, max = 255), pattern(r"^\S+$"))]
    pub image: String,
    /// Memory limit of each node, as a Kubernetes quantity (for example
    /// 256Mi, at least 32Mi). memcached is told to use 90% of it for items,
    /// leaving the rest for connections. Without it memcached uses its
    /// default of 64 MiB and the container has no memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"))]
    pub memory_limit: Option<String>,
}

fn default_image() -> String {
    DEFAULT_IMAGE.to_string()
}

fn default_port() -> i32 {
    DEFAULT_PORT
}

/// What was observed of a Memcached's nodes.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct MemcachedStatus {
    /// Names of the cache's pods that are not being deleted, sorted.
    pub nodes: Vec<String>,
    /// How many of those pods are Ready.
    pub ready_replicas: i32,
    /// Ready nodes of those asked for, as `n/m`, for `kubectl get mc`'s READY.
    pub ready_nodes: String,
    /// Ready: every desired node is ready.
    pub conditions: Vec<Condition>,
    /// The label selector of this cache's pods, as a string: the scale
    /// subresource's `labelSelectorPath`, by which a HorizontalPodAutoscaler
    /// finds the pods to measure.
    pub selector: String,
    /// The parent generation Metacontroller last synced; set by Metacontroller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The Memcached operator and its routes.
pub fn operator() -> Operator {
    let controller = ControllerSpec {
        children: vec![
            ChildResource::new(
                "apps/v1",
                "deployments",
                "InPlace",
                "a size or image change updates the existing Deployment, which rolls its pods itself",
            ),
            ChildResource::new(
                "v1",
                "services",
                "InPlace",
                "a port change updates the Service in place; its clusterIP None never changes",
            ),
        ],
        generate_selector: true,
        resync_period_seconds: None,
    };
    Operator::new::<Memcached>("memcached", controller, "Deployment + headless Service")
        .sync(sync)
        .customize(customize)
}

/// Asks for this cache's Pods, so sync can list them.
pub fn customize(
    req: &CustomizeRequest<Memcached>,
    _ctx: &Context,
) -> Result<CustomizeResponse, HookError> {
    let mc = &req.parent;
    // Deleted, it is finalized whatever its spec: finalize waits for this.
    if mc.metadata.deletion_timestamp.is_none() {
        validate(mc)?;
    }
    Ok(CustomizeResponse {
        related_resources: vec![RelatedResourceRule::labelled(
            "v1",
            "pods",
            selector_labels(APP, name(mc)),
            mc.metadata.namespace.clone(),
        )],
    })
}

/// Desired Deployment and Service, and the observed members.
pub fn sync(
    req: &SyncRequest<Memcached>,
    ctx: &Context,
) -> Result<SyncResponse<MemcachedStatus>, HookError> {
    let mc = &req.parent;
    let item_memory = validate(mc)?;
    let pods = req.related.of::<ObservedPod>()?;
    // Both children are named after the cache; any other would be deleted.
    let built = |n: &str| n == name(mc);
    refuse_not_built::<Deployment>(&req.children, "Memcached", name(mc), built)?;
    refuse_not_built::<Service>(&req.children, "Memcached", name(mc), built)?;
    Ok(SyncResponse {
        status: status(mc, &pods, ctx),
        children: Child::sorted(vec![
            Child::new(&deployment(mc, item_memory)),
            Child::new(&service(mc)),
        ]),
        ..SyncResponse::default()
    })
}

fn name(mc: &Memcached) -> &str {
    mc.metadata.name.as_deref().unwrap_or_default()
}

/// Checks the spec; returns the item memory in MiB when a limit is set.
pub fn validate(mc: &Memcached) -> Result<Option<u64>, InvalidSpec> {
    validate::dns_label("metadata.name", name(mc), MAX_NAME)?;
    validate::in_range("spec.size", mc.spec.size.into(), 0, MAX_SIZE.into())?;
    validate::in_range(
        "spec.containerPort",
        mc.spec.container_port.into(),
        1,
        65535,
    )?;
    validate::image("spec.image", &mc.spec.image)?;
    let Some(limit) = &mc.spec.memory_limit else {
        return Ok(None);
    };
    let mib = validate::quantity_bytes(limit)
        .map(|bytes| bytes / (1024 * 1024))
        .ok_or_else(|| {
            InvalidSpec::new(
                "spec.memoryLimit",
                format!(
                    "{} is not a memory quantity; write it like 256Mi or 1Gi",
                    quote(limit)
                ),
            )
        })?;
    if mib < MIN_MEMORY_MIB {
        return Err(InvalidSpec::new(
            "spec.memoryLimit",
            format!(
                "{limit} is below the minimum of {MIN_MEMORY_MIB}Mi; memcached needs room for its items and connections"
            ),
        ));
    }
    Ok(Some(mib * 9 / 10))
}

/// The Deployment running `size` memcached pods.
pub fn deployment(mc: &Memcached, item_memory_mib: Option<u64>) -> Deployment {
    let labels = standard_labels(APP, name(mc));
    Deployment {
        metadata: ObjectMeta {
            name: Some(name(mc).to_string()),
            namespace: mc.metadata.namespace.clone(),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(mc.spec.size),
            selector: LabelSelector {
                match_labels: Some(selector_labels(APP, name(mc))),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container(mc, item_memory_mib)],
                    // The official image's memcache user.
                    security_context: Some(restricted_pod(11211)),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// The memcached container: its port (UDP off), the item memory (`-m`)
/// and memory request and limit when a limit is set, ready once the port
/// accepts.
fn container(mc: &Memcached, item_memory_mib: Option<u64>) -> Container {
    let port = mc.spec.container_port;
    let mut args = vec!["-p".to_string(), port.to_string(), "-U".into(), "0".into()];
    if let Some(mib) = item_memory_mib {
        args.extend(["-m".to_string(), mib.to_string()]);
    }
    let resources = mc
        .spec
        .memory_limit
        .as_ref()
        .map(|limit| ResourceRequirements {
            limits: Some([("memory".to_string(), Quantity(limit.clone()))].into()),
            requests: Some([("memory".to_string(), Quantity(limit.clone()))].into()),
            ..ResourceRequirements::default()
        });
    Container {
        name: APP.to_string(),
        image: Some(mc.spec.image.clone()),
        args: Some(args),
        ports: Some(vec![ContainerPort {
            name: Some("memcache".to_string()),
            container_port: port,
            protocol: Some("TCP".to_string()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("memcache".to_string()),
                host: None,
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        resources,
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..restricted_container()
        }),
        ..Container::default()
    }
}

/// The headless Service that resolves to every ready node.
pub fn service(mc: &Memcached) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name(mc).to_string()),
            namespace: mc.metadata.namespace.clone(),
            labels: Some(standard_labels(APP, name(mc))),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(selector_labels(APP, name(mc))),
            ports: Some(vec![ServicePort {
                name: Some("memcache".to_string()),
                port: mc.spec.container_port,
                target_port: Some(IntOrString::String("memcache".to_string())),
                protocol: Some("TCP".to_string()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The status from the observed pods of this cache.
pub fn status(mc: &Memcached, pods: &[ObservedPod], ctx: &Context) -> MemcachedStatus {
    let live: Vec<&ObservedPod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let mut nodes: Vec<String> = live
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    nodes.sort();
    let ready = live.iter().filter(|p| p.is_ready()).count() as i32;
    let size = mc.spec.size;
    let observation = if size == 0 {
        Observation::new("Ready", true, "ScaledToZero", "no nodes are requested")
    } else if ready >= size {
        Observation::new(
            "Ready",
            true,
            "AllNodesReady",
            format!("{size} of {size} nodes are ready"),
        )
    } else {
        Observation::new(
            "Ready",
            false,
            "NodesNotReady",
            format!("{ready} of {size} nodes are ready"),
        )
    };
    let previous = mc
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    MemcachedStatus {
        ready_nodes: ready_of(ready, size, nodes.len() as i32),
        nodes,
        ready_replicas: ready,
        conditions: conditions::reconcile(
            previous,
            vec![observation],
            mc.metadata.generation,
            ctx.now,
        ),
        selector: selector_string(APP, name(mc)),
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, pod};

    /// The Memcached `cache` of `size`, its port and image the defaults.
    fn mc(size: i32, memory: Option<&str>) -> Memcached {
        let cache = fixtures::memcached("cache")
            .namespace("shop")
            .spec("size", size);
        match memory {
            Some(limit) => cache.spec("memoryLimit", limit),
            None => cache,
        }
        .typed()
    }

    fn ctx() -> Context {
        Context::fixed()
    }

    #[test]
    fn memory_limit_sets_item_memory_with_headroom() {
        let cases = [
            (None, Ok(None), "no limit: memcached's default"),
            (Some("256Mi"), Ok(Some(230)), "90% of the limit"),
            (Some("1Gi"), Ok(Some(921)), "binary suffix"),
            (Some("100M"), Ok(Some(85)), "decimal suffix: 95 MiB"),
            (Some("16Mi"), Err("spec.memoryLimit"), "below the minimum"),
            (Some("lots"), Err("spec.memoryLimit"), "not a quantity"),
        ];
        for (limit, want, reason) in cases {
            let got = validate(&mc(1, limit)).map_err(|e| e.field);
            assert_eq!(got, want.map_err(String::from), "{reason}");
        }
    }

    #[test]
    fn deployment_is_sized_hardened_and_udp_free() {
        let d = deployment(&mc(3, Some("256Mi")), Some(230));
        let spec = d.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(
            c.args.as_ref().unwrap(),
            &["-p", "11211", "-U", "0", "-m", "230"]
        );
        assert_eq!(
            c.resources.as_ref().unwrap().limits.as_ref().unwrap()["memory"].0,
            "256Mi"
        );
        assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
        assert_eq!(
            spec.selector.match_labels.unwrap(),
            selector_labels(APP, "cache")
        );
    }

    #[test]
    fn service_is_headless_on_the_port() {
        let s = service(&mc(1, None)).spec.unwrap();
        assert_eq!(s.cluster_ip.as_deref(), Some("None"));
        assert_eq!(s.ports.unwrap()[0].port, 11211);
    }

    #[test]
    fn status_lists_live_nodes_sorted() {
        let pods: [ObservedPod; 3] = [
            pod("cache-b").ready().typed(),
            pod("cache-a").typed(),
            pod("cache-c").ready().deleting().typed(),
        ];
        let got = status(&mc(2, None), &pods, &ctx());
        assert_eq!(got.nodes, ["cache-a", "cache-b"]);
        assert_eq!(got.ready_replicas, 1);
        assert_eq!(
            got.conditions[0].message.as_deref().unwrap(),
            "1 of 2 nodes are ready"
        );
        let zero = status(&mc(0, None), &[], &ctx());
        assert_eq!(
            zero.conditions[0].reason.as_deref().unwrap(),
            "ScaledToZero"
        );
    }

    #[test]
    fn customize_asks_for_this_caches_pods_in_its_namespace() {
        let req = CustomizeRequest {
            controller: None,
            parent: mc(1, None),
        };
        let rules = customize(&req, &ctx()).unwrap().related_resources;
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].resource, "pods");
        assert_eq!(rules[0].namespace.as_deref(), Some("shop"));
        assert_eq!(
            rules[0]
                .label_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app.kubernetes.io/instance"],
            "cache"
        );
    }
}
