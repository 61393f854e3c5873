"""The Memcached's whole life in the real loop: status.nodes following the
real pods, resized in place, a pod made not ready and healed."""

from harness import GROUP, NOT_READY_LABEL, need
from kube import condition, controller_uid, pod_ready


def memcached_pods(s, dep):
    sel = ",".join(f"{a}={b}" for a, b in dep["spec"]["selector"]["matchLabels"].items())
    return [p for p in s.k.list("Pod", s.ns, sel) if not p["metadata"].get("deletionTimestamp")]


def memcached_converged(s, name, n, ready=None):
    ready = n if ready is None else ready

    def check():
        mc = s.parent("Memcached", name)
        dep = s.k.get("Deployment", s.ns, name)
        need(dep is not None, "Deployment not created")
        need(controller_uid(dep) == mc["metadata"]["uid"], "Deployment not owned by the Memcached")
        need(dep["spec"]["replicas"] == n, f"Deployment replicas {dep['spec']['replicas']}, want {n}")
        svc = s.k.get("Service", s.ns, name)
        need(svc is not None and svc["spec"].get("clusterIP") == "None", "headless Service missing")
        pods = memcached_pods(s, dep)
        names = sorted(p["metadata"]["name"] for p in pods)
        need(len(names) == n, f"{len(names)} pods, want {n}")
        really_ready = sum(1 for p in pods if pod_ready(p))
        need(really_ready == ready, f"{really_ready} pods ready, want {ready}")
        st = s.synced(mc)
        need(st.get("nodes") == names, f"status.nodes {st.get('nodes')}, real pods {names}")
        need(st.get("readyReplicas") == ready, f"status.readyReplicas {st.get('readyReplicas')}, want {ready}")
        cond = condition(mc, "Ready")
        want = "True" if ready >= n else "False"
        need(cond and cond.get("status") == want, f"Ready condition {cond}, want {want}")
        cols = s.columns("mc", name)
        need(cols.get("READY") == f"{ready}/{n}", f"kubectl get mc: READY {cols.get('READY')}, want {ready}/{n}")
        return mc, dep, pods

    return s.wait(f"{n} memcached nodes ({ready} ready) and status.nodes listing them", check)


def scenario_memcached(s):
    k, ns, name = s.k, s.ns, "cache"
    s.step("create a Memcached of 3 nodes")
    k.apply(
        {
            "apiVersion": GROUP,
            "kind": "Memcached",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"size": 3, "memoryLimit": "64Mi"},
        }
    )
    _, dep, _ = memcached_converged(s, name, 3)
    dep_uid = dep["metadata"]["uid"]
    s.step("resize in place to 5")
    k.patch("Memcached", ns, name, {"spec": {"size": 5}})
    _, dep, _ = memcached_converged(s, name, 5)
    s.expect(dep["metadata"]["uid"] == dep_uid, "the Deployment was replaced, not resized in place")
    s.step("resize to 2 with kubectl scale")
    s.kubectl("scale", f"memcached/{name}", "--replicas=2")
    _, dep, pods = memcached_converged(s, name, 2)
    s.expect(dep["metadata"]["uid"] == dep_uid, "the Deployment was replaced, not resized in place")
    s.step("a pod that becomes not ready shows in the status")
    victim = sorted(p["metadata"]["name"] for p in pods)[0]
    k.patch("Pod", ns, victim, {"metadata": {"labels": {NOT_READY_LABEL: "true"}}})
    mc, _, _ = memcached_converged(s, name, 2, ready=1)
    s.expect(victim in mc["status"]["nodes"], f"the not-ready pod {victim} left status.nodes")
    s.step("it heals, and the status follows")
    k.patch("Pod", ns, victim, {"metadata": {"labels": {NOT_READY_LABEL: None}}})
    memcached_converged(s, name, 2)
    s.step("delete")
    k.delete("Memcached", ns, name)
    s.wait("Memcached and its Deployment gone", lambda: (s.gone("Memcached", name), s.gone("Deployment", name)))
