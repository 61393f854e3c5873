"""A Database's failover in the real loop (issue 21): its primary made not
ready for longer than spec.failover.delay is replaced by a standby, fenced
first (the read-write Service and the role ConfigMap move before the
promote Job exists); the old primary comes back as a standby; a standby
that goes away and comes back changes nothing; a primary lost while the
Database is deleted under Snapshot is replaced too, so the snapshot reads
the data."""

import time

from harness import NOT_READY_LABEL, need, say
from kube import condition, job_outcome, parse_time, pod_ready
from scenarios.database import database, db_gone, db_running, db_services, same_volumes, volumes

POD_NAME = "statefulset.kubernetes.io/pod-name"
DELAY = 10


class PrimaryTimeline:
    """What the watch streams show of one Database's change of primary, in
    the API's order of writes (resourceVersion): the read-write Service's
    selector, the role ConfigMap's primary, the promote Jobs' creations
    ("job") and the first write showing each Succeeded ("done")."""

    def __init__(self, ns, name):
        self.ns, self.name = ns, name
        self.events = []  # (rv, seen, what, value)
        self.jobs = set()
        self.done = set()

    def __call__(self, kind, etype, obj, now):
        md = obj["metadata"]
        if md.get("namespace") != self.ns or etype == "DELETED":
            return
        rv = int(md.get("resourceVersion") or 0)
        if kind == "Service" and md["name"] == self.name:
            pod = ((obj.get("spec") or {}).get("selector") or {}).get(POD_NAME)
            self.events.append((rv, now, "service", pod))
        elif kind == "ConfigMap" and md["name"] == f"{self.name}-role":
            self.events.append((rv, now, "role", (obj.get("data") or {}).get("primary")))
        elif kind == "Job" and md["name"].startswith(f"{self.name}-promote-") and md["uid"] not in self.jobs:
            self.jobs.add(md["uid"])
            self.events.append((rv, now, "job", md["name"]))
        if kind == "Job" and md["name"].startswith(f"{self.name}-promote-") and md["uid"] not in self.done and job_outcome(obj) == "Succeeded":
            self.done.add(md["uid"])
            self.events.append((rv, now, "done", md["name"]))

    def first(self, what, value):
        """The (rv, seen) of the first write showing `what` at `value`."""
        hits = sorted((rv, seen) for rv, seen, w, v in self.events if w == what and v == value)
        return hits[0] if hits else None


def role(s, name):
    cm = s.k.get("ConfigMap", s.ns, f"{name}-role")
    need(cm is not None, f"ConfigMap {name}-role missing")
    return cm.get("data") or {}


def rw_selects(s, name, pod):
    svc = s.k.get("Service", s.ns, name)
    need(svc is not None, f"read-write Service {name} missing")
    got = (svc["spec"].get("selector") or {}).get(POD_NAME)
    need(got == pod, f"read-write Service selects {got}, want {pod}")


def ro_endpoints(s, name, pods):
    """The read-only EndpointSlice lists exactly these pods, ready."""
    eps = s.k.get("EndpointSlice", s.ns, f"{name}-ro")
    need(eps is not None, "read-only EndpointSlice missing")
    want = {}
    for p in pods:
        pod = s.k.get("Pod", s.ns, p)
        need(pod and pod_ready(pod) and pod["status"].get("podIP"), f"{p} not ready")
        want[pod["status"]["podIP"]] = p
    got = sorted(a for e in eps.get("endpoints") or [] for a in e["addresses"] if (e.get("conditions") or {}).get("ready"))
    need(got == sorted(want), f"read-only endpoints {got}, want {sorted(want.values())} at {sorted(want)}")


def primary_state(s, name, current, epoch, roles):
    """status.currentPrimary, primaryEpoch and instances (name -> (role,
    ready)); no change under way; the role ConfigMap and the read-write
    Service on `current`."""
    db = s.parent("Database", name)
    st = s.synced(db)
    need(st.get("currentPrimary") == current, f"status.currentPrimary {st.get('currentPrimary')}, want {current}")
    need(not st.get("targetPrimary"), f"status.targetPrimary {st.get('targetPrimary')}")
    need(st.get("primaryEpoch") == epoch, f"status.primaryEpoch {st.get('primaryEpoch')}, want {epoch}")
    got = {i["name"]: (i["role"], i["ready"]) for i in st.get("instances") or []}
    need(got == roles, f"status.instances {got}, want {roles}")
    c = condition(db, "FailingOver")
    need(c and c.get("status") == "False", f"FailingOver {c}")
    data = role(s, name)
    need(data.get("primary") == current and data.get("epoch") == str(epoch), f"role ConfigMap {data}")
    rw_selects(s, name, current)
    return db


def not_ready(s, pod, yes):
    s.k.patch("Pod", s.ns, pod, {"metadata": {"labels": {NOT_READY_LABEL: "true" if yes else None}}})

    def check():
        p = s.k.get("Pod", s.ns, pod)
        need(p is not None, f"pod {pod} missing")
        need(pod_ready(p) != yes, f"pod {pod} ready={pod_ready(p)}")
        return p

    return s.wait(f"pod {pod} {'not ' if yes else ''}ready", check, timeout=60)


def large_database(s, name):
    """Creates Database `name` (16, large: a primary and two standbys,
    spec.failover.delay DELAY) and waits until it runs, instance 0 the
    primary at epoch 0; returns its volumes (name -> uid)."""
    p0, p1, p2 = (f"{name}-{i}" for i in range(3))
    s.step(f"create a Database (16, large: a primary and two standbys, spec.failover.delay {DELAY})")
    db = database(s.ns, name, "16", "large")
    db["spec"]["failover"] = {"delay": DELAY}
    s.k.apply(db)
    db_running(s, name, 3, "16")
    db_services(s, name, 3)
    all_ready = {p0: ("primary", True), p1: ("standby", True), p2: ("standby", True)}
    s.wait(f"{p0} the primary at epoch 0", lambda: primary_state(s, name, p0, 0, all_ready), timeout=60)
    return volumes(s, name)


def scenario_failover(s):
    k, ns, name = s.k, s.ns, "payments"
    p0, p1, p2 = (f"{name}-{i}" for i in range(3))
    vols = large_database(s, name)
    s.expect(sorted(vols) == [f"data-{p}" for p in (p0, p1, p2)], f"volumes {sorted(vols)}")

    s.step(f"the primary {p0} not ready: within the delay nothing changes, then {p1} is fenced in and promoted")
    timeline = PrimaryTimeline(ns, name)
    s.rec.add_listener(timeline)
    try:
        pod = not_ready(s, p0, True)
        since = parse_time(condition(pod, "Ready")["lastTransitionTime"])

        def waiting():
            db = s.parent("Database", name)
            c = condition(db, "FailingOver")
            need(c and c.get("reason") == "PrimaryNotReady", f"FailingOver {c}")
            need(p0 in (c.get("message") or ""), f"FailingOver message {c.get('message')!r}")

        s.soft("FailingOver False PrimaryNotReady while within the delay", waiting, timeout=DELAY - 2)

        def promoted():
            db = s.parent("Database", name)
            st = s.synced(db)
            need(st.get("currentPrimary") == p1, f"status.currentPrimary {st.get('currentPrimary')} (targetPrimary {st.get('targetPrimary')})")
            need(st.get("primaryEpoch") == 1, f"status.primaryEpoch {st.get('primaryEpoch')}")
            need(not st.get("targetPrimary"), f"status.targetPrimary {st.get('targetPrimary')}")
            last = st.get("lastFailover") or {}
            need(last.get("from") == p0 and last.get("to") == p1 and last.get("epoch") == 1 and last.get("at"), f"status.lastFailover {last}")
            return db

        db = s.wait(f"{p1} promoted (status.currentPrimary, primaryEpoch 1, lastFailover)", promoted, timeout=DELAY + 90)
    finally:
        s.rec.remove_listener(timeline)
    job = f"{name}-promote-1-1"
    s.expect(job_outcome(s.job(job)) == "Succeeded", f"promote Job {job} is {job_outcome(s.job(job))}")
    s.expect(timeline.jobs and len(s.rec.creations_of("Job", ns, job)) == 1, f"promote Job {job} created {len(s.rec.creations_of('Job', ns, job))} times")
    made = timeline.first("job", job)
    moved = timeline.first("service", p1)
    fenced = timeline.first("role", p1)
    s.expect(made is not None, f"the watch did not see {job} created: {timeline.events}")
    s.expect(moved is not None and moved[0] < made[0], f"the read-write Service moved to {p1} at {moved}, not before {job} was created at {made}")
    s.expect(fenced is not None and fenced[0] < made[0], f"the role ConfigMap named {p1} at {fenced}, not before {job} was created at {made}")
    others = sorted({(w, v) for _, _, w, v in timeline.events if w == "job"} - {("job", job)})
    s.expect(not others, f"other promote Jobs created: {others}")
    # Not before the delay: the first write of the change came at least
    # DELAY seconds after the pod's Ready went False (whole seconds).
    say(
        f"[{s.title} | {s.strategy}] observed: {p0} not ready at {time.strftime('%H:%M:%S', time.localtime(since))}; "
        f"role ConfigMap names {p1} at rv {fenced[0]}, read-write Service selects it at rv {moved[0]} "
        f"({moved[1] - since:.1f}s later), {job} created at rv {made[0]}"
    )
    s.expect(moved[1] >= since + DELAY - 1, f"the read-write Service moved {moved[1] - since:.1f}s after {p0} went not ready, before the delay ({DELAY}s)")
    last = db["status"]["lastFailover"]
    s.expect(job in last.get("reason", ""), f"lastFailover.reason {last.get('reason')!r} does not name {job}")
    same_volumes(s, name, vols)

    s.step(f"the old primary {p0} ready again: a standby; the read-write Service stays on {p1}")
    not_ready(s, p0, False)
    back = {p0: ("standby", True), p1: ("primary", True), p2: ("standby", True)}
    s.wait(f"{p0} listed as a standby", lambda: primary_state(s, name, p1, 1, back), timeout=60)
    s.wait(f"read-only endpoints on {p0} and {p2}", lambda: ro_endpoints(s, name, [p0, p2]), timeout=60)
    db_running(s, name, 3, "16", timeout=60)
    s.hold(f"{p1} the primary, {p0} and {p2} the read-only endpoints", lambda: (primary_state(s, name, p1, 1, back), ro_endpoints(s, name, [p0, p2])))

    s.step(f"a standby ({p2}) not ready for longer than the delay: no failover, it leaves the read-only endpoints")
    not_ready(s, p2, True)
    down = {p0: ("standby", True), p1: ("primary", True), p2: ("standby", False)}
    s.wait(f"{p2} out of the read-only endpoints", lambda: (primary_state(s, name, p1, 1, down), ro_endpoints(s, name, [p0])), timeout=60)
    start = time.time()
    s.hold("no failover", lambda: (primary_state(s, name, p1, 1, down), ro_endpoints(s, name, [p0])))
    s.expect(time.time() - start > DELAY, "the hold was shorter than the delay")
    s.step(f"{p2} ready again: it rejoins the read-only endpoints")
    not_ready(s, p2, False)
    s.wait(f"{p2} back in the read-only endpoints", lambda: (primary_state(s, name, p1, 1, back), ro_endpoints(s, name, [p0, p2])), timeout=60)

    s.step(f"a standby ({p2}) lost (its pod deleted): the StatefulSet makes it again, on its volume; no failover")
    lost = k.get("Pod", ns, p2)["metadata"]["uid"]
    k.delete("Pod", ns, p2)

    def again():
        pod = k.get("Pod", ns, p2)
        need(pod is not None and pod["metadata"]["uid"] != lost and not pod["metadata"].get("deletionTimestamp"), f"{p2} not made again yet")
        need(pod_ready(pod), f"{p2} made again, not ready yet")

    s.wait(f"{p2} made again and ready", again, timeout=90)
    s.wait(f"{p2} back in the read-only endpoints", lambda: (primary_state(s, name, p1, 1, back), ro_endpoints(s, name, [p0, p2])), timeout=60)
    created = sorted(j["metadata"]["name"] for j in k.list("Job", ns) if j["metadata"]["name"].startswith(f"{name}-promote-"))
    s.expect(created == [job], f"promote Jobs {created}, want only {job}")
    same_volumes(s, name, vols)

    s.step(f"delete under Snapshot while the primary {p1} is not ready: no snapshot until a standby took over")
    not_ready(s, p1, True)
    k.delete("Database", ns, name)
    deleted = time.time()
    takeover = f"{name}-promote-2-0"

    def waiting_for_primary():
        db = s.parent("Database", name)
        need(db["metadata"].get("deletionTimestamp"), "not deleting")
        st = db.get("status") or {}
        need(st.get("phase") == "Deleting", f"phase {st.get('phase')}")
        c = condition(db, "Snapshotted")
        need(c and c.get("reason") == "WaitingForPrimary", f"Snapshotted {c}")
        need(s.job(f"{name}-snapshot") is None, "a snapshot Job while the primary is not ready")
        same_volumes(s, name, vols)

    s.soft("Snapshotted WaitingForPrimary", waiting_for_primary, timeout=30)
    s.wait_job_seen(takeover, "Succeeded")
    s.expect(time.time() - deleted >= DELAY - 1, "the deletion's failover came before the delay")
    s.wait_job_seen(f"{name}-snapshot", "Succeeded")
    db_gone(s, name)
    n = len(s.rec.creations_of("Job", ns, f"{name}-snapshot"))
    s.expect(n == 1, f"snapshot job created {n} times")
