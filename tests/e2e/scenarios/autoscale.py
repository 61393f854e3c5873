"""Scaling on metrics: a HorizontalPodAutoscaler, in the real
kube-controller-manager, scales a WebServer and a Memcached through their
scale subresources. Before the scale subresource named a label selector
(`labelSelectorPath: .status.selector`), the HPA stopped at
`ScalingActive=False`, reason `InvalidSelector`."""

import metrics_api
from harness import GROUP, need
from kube import condition, pod_ready

METRIC = "opshooks_e2e_requests_per_second"


def hpa(s, kind, name, max_replicas):
    """An HPA on the External metric METRIC of the target's name: one
    replica per 10 of it."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": s.ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": GROUP, "kind": kind, "name": name},
            "minReplicas": 1,
            "maxReplicas": max_replicas,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": f"{METRIC}_{name}"},
                        "target": {"type": "AverageValue", "averageValue": "10"},
                    },
                }
            ],
        },
    }


def scaled(s, kind, name, field, want):
    """The HPA found the pods (not InvalidSelector), is active, and the
    parent's spec, status and ready pods reached `want`."""

    def check():
        h = s.k.get("HorizontalPodAutoscaler", s.ns, name)
        active = condition(h, "ScalingActive") or {}
        need(
            active.get("reason") != "InvalidSelector",
            f"the HPA cannot find {kind} {name}'s pods: {active.get('message')}",
        )
        need(active.get("status") == "True", f"ScalingActive {active}")
        parent = s.parent(kind, name)
        need(parent["spec"][field] == want, f"spec.{field}={parent['spec'][field]}, want {want} (HPA {h.get('status')})")
        st = s.synced(parent)
        need(st.get("readyReplicas") == want, f"status.readyReplicas={st.get('readyReplicas')}, want {want}")
        pods = [p for p in s.k.list("Pod", s.ns) if p["metadata"]["name"].startswith(f"{name}-")]
        ready = [p for p in pods if pod_ready(p)]
        need(len(ready) == want, f"{len(ready)} ready pods, want {want}")
        return parent, h

    return s.wait(f"the HPA to scale {kind} {name} to {want}", check, timeout=180)


def scenario_autoscale(s):
    metrics_api.start(s.k, f"{s.suite.dir}/metrics-api")
    metrics_api.set_value(s.ns, f"{METRIC}_web", "30")
    metrics_api.set_value(s.ns, f"{METRIC}_cache", "30")

    s.step("a WebServer of 1 replica, an HPA on 30 requests/s at 10 a replica")
    s.k.apply(
        {"apiVersion": GROUP, "kind": "WebServer", "metadata": {"name": "web", "namespace": s.ns}, "spec": {"replicas": 1}}
    )
    s.k.apply(hpa(s, "WebServer", "web", 4))
    ws, _ = scaled(s, "WebServer", "web", "replicas", 3)
    need(ws["status"].get("selector"), "status.selector is empty")

    s.step("a user sets replicas: 1 under the HPA; its next sync sets 3 again")
    s.k.patch("WebServer", s.ns, "web", {"spec": {"replicas": 1}})
    scaled(s, "WebServer", "web", "replicas", 3)

    s.step("the load rises to 40: the HPA scales up to 4, its maximum")
    metrics_api.set_value(s.ns, f"{METRIC}_web", "40")
    scaled(s, "WebServer", "web", "replicas", 4)

    s.step("a Memcached of 1 node, an HPA on 30 at 10 a node")
    s.k.apply(
        {"apiVersion": GROUP, "kind": "Memcached", "metadata": {"name": "cache", "namespace": s.ns}, "spec": {"size": 1}}
    )
    s.k.apply(hpa(s, "Memcached", "cache", 4))
    mc, _ = scaled(s, "Memcached", "cache", "size", 3)
    nodes = mc["status"].get("nodes") or []
    need(len(nodes) == 3, f"status.nodes lists {nodes}, want the 3 members")

    s.step("`kubectl autoscale` on CPU, as docs/memcached.md shows: the HPA finds the pods")
    s.k.delete("HorizontalPodAutoscaler", s.ns, "cache")
    s.kubectl("autoscale", "memcached", "cache", "--min=1", "--max=4", "--cpu-percent=60")

    def finds_pods():
        h = s.k.get("HorizontalPodAutoscaler", s.ns, "cache")
        able = condition(h, "AbleToScale") or {}
        active = condition(h, "ScalingActive") or {}
        need(able.get("status") == "True", f"AbleToScale {able}")
        # No metrics-server runs here, so CPU cannot be read: the HPA got
        # past the selector to the metric, which is what this checks.
        need(active.get("reason") not in (None, "InvalidSelector"), f"ScalingActive {active}")

    s.wait("the CPU HPA to get past the selector", finds_pods, timeout=120)

    s.step("delete both")
    for kind, name in (("HorizontalPodAutoscaler", "web"), ("HorizontalPodAutoscaler", "cache")):
        s.k.delete(kind, s.ns, name)
    s.k.delete("WebServer", s.ns, "web")
    s.k.delete("Memcached", s.ns, "cache")
    s.wait("WebServer and Memcached gone", lambda: (s.gone("WebServer", "web"), s.gone("Memcached", "cache")))
