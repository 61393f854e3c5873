"""The WebServer's whole life in the real loop: create, scale both ways, an
image change rolling every pod one at a time, scale to zero and delete."""

import threading

from harness import GROUP, need
from kube import condition, controller_uid, pod_ready


def webserver_converged(s, name, n, image):
    def check():
        ws = s.parent("WebServer", name)
        pods = s.children("Pod", ws["metadata"]["uid"])
        names = sorted(p["metadata"]["name"] for p in pods)
        want = sorted(f"{name}-{i}" for i in range(n))
        need(names == want, f"pods {names}, want {want}")
        images = {p["spec"]["containers"][0]["image"] for p in pods}
        need(images <= {image}, f"pod images {images}, want {image}")
        unready = [p["metadata"]["name"] for p in pods if not pod_ready(p)]
        need(not unready, f"pods not ready: {unready}")
        st = s.synced(ws)
        need(
            st.get("count") == n and st.get("readyReplicas") == n,
            f"status count={st.get('count')} readyReplicas={st.get('readyReplicas')}, want {n}",
        )
        ready = condition(ws, "Ready")
        need(ready and ready.get("status") == "True", f"Ready condition {ready}")
        cols = s.columns("ws", name)
        want = {"READY": f"{n}/{n}", "UP-TO-DATE": "True", "IMAGE": image}
        need(all(cols.get(k) == v for k, v in want.items()), f"kubectl get ws: {cols}, want {want}")
        return ws

    def updated():
        # Metacontroller's own condition (pods roll): once converged it must
        # say so, naming the revision of the current spec.
        ws = s.parent("WebServer", name)
        cond = condition(ws, "Updated")
        need(cond is not None, "no Updated condition from Metacontroller in the status")
        latest = [
            r["metadata"]["name"]
            for r in s.k.list("ControllerRevision", s.ns)
            if (r.get("parentPatch") or {}).get("spec") == ws["spec"]
        ]
        need(
            cond.get("status") == "True" and any(r in cond.get("message", "") for r in latest),
            f"Metacontroller's Updated condition {cond} does not name the current spec's revision {latest}",
        )

    ws = s.wait(f"{n} ready pods of {image}, and the status saying so", check)
    if pods_roll(s):
        s.soft("the Updated condition naming the current revision", updated)
    return ws


def pods_roll(s):
    """Whether the chart's WebServer controller has Metacontroller roll the
    pods (only then does Metacontroller write its Updated condition)."""
    for cc in s.k.list("CompositeController"):
        if cc["spec"]["parentResource"]["resource"] != "webservers":
            continue
        for child in cc["spec"].get("childResources") or []:
            if child["resource"] == "pods":
                method = (child.get("updateStrategy") or {}).get("method", "OnDelete")
                return method in ("RollingRecreate", "RollingInPlace")
    return False


class PodTimeline:
    """Follows one parent's pods through the watch stream: the most pods of
    the desired names that were missing or unready at any one moment, and
    which names were seen replaced (a new pod under the name)."""

    def __init__(self, owner_uid, names, pods):
        self.owner, self.names = owner_uid, set(names)
        self.lock = threading.Lock()
        self.state = {}
        self.replaced = []
        self.max_unavailable = 0
        for p in pods:
            self.state[p["metadata"]["name"]] = (p["metadata"]["uid"], pod_ready(p))

    def __call__(self, kind, etype, obj, _t):
        if kind != "Pod" or controller_uid(obj) != self.owner:
            return
        name, uid = obj["metadata"]["name"], obj["metadata"]["uid"]
        with self.lock:
            if etype == "DELETED":
                if self.state.get(name, (None,))[0] == uid:
                    del self.state[name]
            else:
                if name in self.state and self.state[name][0] != uid:
                    self.replaced.append(name)
                elif name not in self.state and etype == "ADDED":
                    self.replaced.append(name)
                self.state[name] = (uid, pod_ready(obj))
            down = sum(1 for n in self.names if not (n in self.state and self.state[n][1]))
            self.max_unavailable = max(self.max_unavailable, down)


def new_webserver(s, name, replicas):
    s.step(f"create a WebServer of {replicas} replicas")
    s.k.apply(
        {
            "apiVersion": GROUP,
            "kind": "WebServer",
            "metadata": {"name": name, "namespace": s.ns},
            "spec": {"replicas": replicas, "image": "nginxinc/nginx-unprivileged", "port": 8080},
        }
    )
    webserver_converged(s, name, replicas, "nginxinc/nginx-unprivileged")


def scenario_webserver(s):
    k, ns, name = s.k, s.ns, "hello"
    new_webserver(s, name, 3)
    s.step("scale up to 5 (spec.replicas)")
    k.patch("WebServer", ns, name, {"spec": {"replicas": 5}})
    webserver_converged(s, name, 5, "nginxinc/nginx-unprivileged")
    s.step("scale down to 3 with kubectl scale (the scale subresource)")
    s.kubectl("scale", f"webserver/{name}", "--replicas=3")
    webserver_converged(s, name, 3, "nginxinc/nginx-unprivileged")
    s.step("image change rolls every pod, one at a time")
    ws = s.parent("WebServer", name)
    pods = s.children("Pod", ws["metadata"]["uid"])
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    timeline = PodTimeline(ws["metadata"]["uid"], before, pods)
    s.rec.add_listener(timeline)
    try:
        k.patch("WebServer", ns, name, {"spec": {"image": "nginxinc/nginx-unprivileged:1.27"}})
        webserver_converged(s, name, 3, "nginxinc/nginx-unprivileged:1.27")
    finally:
        s.rec.remove_listener(timeline)
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in s.children("Pod", ws["metadata"]["uid"])}
    same = [n for n in before if after.get(n) == before[n]]
    s.expect(not same, f"pods not recreated by the image change: {same}")
    # max_unavailable counts only what the stream showed: without every
    # replacement in it (a dead or lagging Pod watch) it proves nothing.
    unseen = sorted(set(before) - set(timeline.replaced))
    s.expect(not unseen, f"the Pod watch did not show these pods replaced during the roll: {unseen}")
    s.expect(
        timeline.max_unavailable <= 1,
        f"{timeline.max_unavailable} pods were unavailable at once during the roll (want at most 1)",
    )
    webserver_zero_and_delete(s, name)


def webserver_zero_and_delete(s, name):
    # The hook, not the garbage collector, removes the pods: nothing is left
    # behind for a later run in this namespace.
    s.step("scale to 0, then delete")
    s.k.patch("WebServer", s.ns, name, {"spec": {"replicas": 0}})

    def zero():
        ws = s.parent("WebServer", name)
        need(not s.children("Pod", ws["metadata"]["uid"], live=False), "pods remain")
        st = s.synced(ws)
        need(st.get("count") == 0, f"status count {st.get('count')}")
        ready = condition(ws, "Ready")
        need(ready and ready.get("status") == "True" and ready.get("reason") == "ScaledToZero", f"Ready {ready}")

    s.wait("no pods and Ready=True ScaledToZero", zero)
    s.k.delete("WebServer", s.ns, name)
    s.wait("WebServer gone", lambda: s.gone("WebServer", name))


def scenario_webserver_brief(s):
    """Create, converge, scale to zero, delete: the least that shows the
    hooks are reached (secure.sh runs it with TLS, a bearer token and client
    certificates)."""
    name = "brief"
    new_webserver(s, name, 2)
    webserver_zero_and_delete(s, name)
