"""A Database spread over several nodes, and a node drain its
PodDisruptionBudget holds (issue 22, placement).

dbplacement: three more kwok nodes, one per zone, labelled and tainted for
this scenario alone (the other scenarios' pods stay on kwok-node-0, and
this Database's instances, by spec.affinity's nodeSelector and
tolerations, only on these). A large Database under
podAntiAffinityType: required runs its three instances on three distinct
nodes, with a PodDisruptionBudget (maxUnavailable 1) over them. A drain of
a standby's node evicts that standby, which cannot come back (its node
cordoned, the two others taken); while it is away, a drain of the
primary's node is refused by the budget and the primary keeps running. The
nodes are uncordoned, the instance comes back, and the Database (policy
Delete) and the nodes are deleted, leaving the cluster as it was."""

from harness import Failed, need
from kube import condition, pod_ready
from scenarios.database import database, db_gone, db_running

POOL = "opshooks.io/e2e-pool"
ZONES = ("zone-a", "zone-b", "zone-c")


def node(name, zone):
    """A fake node kwok plays the kubelet of (as ../shared/kwok/node.yaml),
    in `zone`, labelled and tainted for this scenario's pool."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "topology.kubernetes.io/zone": zone,
                POOL: "placement",
            },
        },
        "spec": {"taints": [{"key": POOL, "value": "placement", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "500"},
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "500"},
        },
    }


def nodes_ready(s, nodes):
    for n in nodes:
        obj = s.k.get("Node", None, n)
        need(obj is not None, f"node {n} missing")
        c = condition(obj, "Ready")
        need(c and c.get("status") == "True", f"node {n} not Ready: {c}")


def placed(s, pods, nodes):
    """pod -> node, every pod ready on one of `nodes`, no two on one node."""
    where = {}
    for p in pods:
        pod = s.k.get("Pod", s.ns, p)
        need(pod is not None and pod_ready(pod), f"pod {p} not ready")
        where[p] = pod["spec"].get("nodeName")
    need(all(n in nodes for n in where.values()), f"instances outside the pool: {where}")
    need(len(set(where.values())) == len(pods), f"two instances on one node: {where}")
    return where


def budget(s, name, allowed=None):
    pdb = s.k.get("PodDisruptionBudget", s.ns, name)
    need(pdb is not None, f"PodDisruptionBudget {name} missing")
    sts = s.k.get("StatefulSet", s.ns, name)
    need(sts is not None, "StatefulSet missing")
    spec, st = pdb["spec"], pdb.get("status") or {}
    need(spec.get("maxUnavailable") == 1, f"maxUnavailable {spec.get('maxUnavailable')}")
    need(spec["selector"] == sts["spec"]["selector"], f"the budget selects {spec['selector']}, the StatefulSet {sts['spec']['selector']}")
    need(st.get("observedGeneration") == pdb["metadata"]["generation"], f"budget status not observed: {st}")
    if allowed is not None:
        need(st.get("disruptionsAllowed") == allowed, f"disruptionsAllowed {st.get('disruptionsAllowed')}, want {allowed} ({st})")
    return pdb


def drain(s, node, timeout):
    """kubectl drain; returns None when it finished, else its error."""
    try:
        s.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", f"--timeout={timeout}s")
        return None
    except Failed as err:
        return str(err)


def uncordon(s, nodes):
    for n in nodes:
        s.k.patch("Node", None, n, {"spec": {"unschedulable": None}})


def scenario_placement(s):
    k, ns, name = s.k, s.ns, "spread"
    suffix = ns.rsplit("-", 1)[-1]
    nodes = [f"kwok-placement-{suffix}-{i}" for i in range(3)]
    pods = [f"{name}-{i}" for i in range(3)]
    s.step(f"three more fake nodes, one per zone, tainted for this scenario: {nodes}")
    for n, zone in zip(nodes, ZONES):
        k.create(node(n, zone))
    try:
        s.wait("the nodes Ready", lambda: nodes_ready(s, nodes), timeout=60)
        s.step("a large Database under required pod anti-affinity, on those nodes only")
        db = database(ns, name, "16", "large", policy="Delete")
        db["spec"]["affinity"] = {
            "podAntiAffinityType": "required",
            "nodeSelector": {POOL: "placement"},
            "tolerations": [{"key": POOL, "operator": "Equal", "value": "placement", "effect": "NoSchedule"}],
        }
        k.apply(db)
        db_running(s, name, 3, "16")
        where = s.wait("three instances on three distinct nodes", lambda: placed(s, pods, nodes), timeout=60)
        s.wait("a PodDisruptionBudget over the instances, one disruption allowed", lambda: budget(s, name, allowed=1), timeout=60)
        primary = s.synced(s.parent("Database", name)).get("currentPrimary")
        need(primary in pods, f"status.currentPrimary {primary}")
        standby = next(p for p in reversed(pods) if p != primary)
        first, second = where[standby], where[primary]

        s.step(f"drain {first}: the standby {standby} is evicted, and cannot come back")
        old = k.get("Pod", ns, standby)["metadata"]["uid"]
        error = drain(s, first, 90)
        s.expect(error is None, f"draining {first}: {error}")

        def pending():
            pod = k.get("Pod", ns, standby)
            need(pod is not None and pod["metadata"]["uid"] != old, f"{standby} not made again yet")
            need(not pod["spec"].get("nodeName"), f"{standby} scheduled on {pod['spec'].get('nodeName')}")
            c = condition(pod, "PodScheduled")
            need(c and c.get("status") == "False", f"{standby} PodScheduled {c}")
            return c

        c = s.wait(f"{standby} Pending: no node for it", pending, timeout=60)
        s.expect("anti-affinity" in (c.get("message") or "") or "unschedulable" in (c.get("message") or ""), f"{standby} unschedulable for another reason: {c}")
        s.wait("the budget allows no disruption", lambda: budget(s, name, allowed=0), timeout=60)
        held = k.get("Pod", ns, primary)["metadata"]["uid"]

        s.step(f"drain {second}, the primary {primary}'s node: the budget refuses the eviction")
        error = drain(s, second, 15)
        s.expect(error is not None, f"draining {second} finished: the primary was evicted")
        s.expect("disruption budget" in error, f"draining {second} failed for another reason: {error}")
        pod = k.get("Pod", ns, primary)
        s.expect(pod is not None and pod["metadata"]["uid"] == held and not pod["metadata"].get("deletionTimestamp") and pod_ready(pod), f"the primary {primary} was disturbed: {pod and pod['metadata']}")
        s.expect(s.parent("Database", name)["status"].get("currentPrimary") == primary, "the primary changed")

        s.step("uncordon: the standby comes back, the Database runs again")
        uncordon(s, (first, second))
        db_running(s, name, 3, "16")
        s.wait("three instances on three distinct nodes again", lambda: placed(s, pods, nodes), timeout=60)
    finally:
        s.step(f"delete {name} (Delete) and the nodes, leaving the cluster as it was")
        # After a failure too: a deletion under Delete needs every instance
        # running again.
        uncordon(s, nodes)
        if k.get("Database", ns, name) is not None:
            k.delete("Database", ns, name)
            db_gone(s, name)

        def no_pods():
            left = [p for p in pods if k.get("Pod", ns, p) is not None]
            need(not left, f"pods left: {left}")

        s.wait("its pods gone", no_pods, timeout=60)
        for n in nodes:
            k.delete("Node", None, n)
