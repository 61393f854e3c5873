"""A Database's planned changes of primary in the real loop (issue 21).

dbswitchover: a switchover asked for by annotation
(opshooks.io/switchover=<pod>@<epoch>) names the candidate in the role
ConfigMap before its promote Job (MODE=switchover) exists, keeps the
read-write Service on the old primary until that Job succeeded, restarts
no pod, and records a planned change; a request at a stale epoch afterwards
changes nothing.

dbminor: a new pod template (spec.imageName postgres:16 -> postgres:16.1)
rolls out standbys first (the StatefulSet's partition held above the
primary), then a switchover to an updated standby, then the old primary,
once; the order is read from the watch streams (by resourceVersion)."""

from harness import need, say
from kube import condition, job_outcome, pod_ready
from scenarios.database import db_gone, same_volumes
from scenarios.failover import PrimaryTimeline, large_database, primary_state, rw_selects

SWITCHOVER = "opshooks.io/switchover"
REVISION = "controller-revision-hash"


class PodTimeline:
    """What the watch streams show of one Database's pods and StatefulSet,
    in the API's order of writes: each pod incarnation's creation and the
    first write marking it deleted, and the StatefulSet's partition and
    image as written."""

    def __init__(self, ns, name, pods):
        self.ns, self.name, self.pods = ns, name, set(pods)
        self.created = {}  # uid -> (rv, pod name)
        self.deleted = {}  # uid -> (rv, pod name)
        self.statefulset = []  # (rv, image, partition, template hash)
        self.revisions = {}  # uid -> the pod's revision when made
        self.marked = set()  # uids seen with a deletionTimestamp before they were gone
        self.sts_status = []  # (rv, updateRevision, currentRevision) as reported

    def __call__(self, kind, etype, obj, now):
        md = obj["metadata"]
        if md.get("namespace") != self.ns:
            return
        rv = int(md.get("resourceVersion") or 0)
        if kind == "Pod" and md["name"] in self.pods:  # not the Jobs' pods
            if md["uid"] not in self.created and etype != "DELETED":
                self.created[md["uid"]] = (rv, md["name"])
                self.revisions[md["uid"]] = (md.get("labels") or {}).get(REVISION)
            if (etype == "DELETED" or md.get("deletionTimestamp")) and md["uid"] not in self.deleted:
                self.deleted[md["uid"]] = (rv, md["name"])
            if etype != "DELETED" and md.get("deletionTimestamp"):
                self.marked.add(md["uid"])
        elif kind == "StatefulSet" and md["name"] == self.name and etype != "DELETED":
            spec = obj.get("spec") or {}
            image = spec["template"]["spec"]["containers"][0]["image"]
            partition = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition")
            digest = (md.get("annotations") or {}).get("opshooks.io/template-hash")
            if not self.statefulset or self.statefulset[-1][1:] != (image, partition, digest):
                self.statefulset.append((rv, image, partition, digest))
            status = obj.get("status") or {}
            revs = (status.get("updateRevision"), status.get("currentRevision"))
            if not self.sts_status or self.sts_status[-1][1:] != revs:
                self.sts_status.append((rv, *revs))

    def replaced(self, pod):
        """How many incarnations of `pod` the StatefulSet controller
        deleted: it deletes gracefully (a deletionTimestamp first, the
        pods' 30 s grace), while kwok's delete stage deletes by name with
        grace 0 and no uid precondition, so a late replay of an old pod's
        stage can remove its successor outright: that is kwok, not a
        rollout step (neither the hook nor Metacontroller deletes pods)."""
        return sum(1 for uid in self.marked if self.deleted.get(uid, (0, ""))[1] == pod)

    def outright(self):
        """Incarnations removed without a deletionTimestamp first."""
        return {uid: d for uid, d in self.deleted.items() if uid not in self.marked}

    def made(self, pod, before):
        """The (rv, uid) of every incarnation of `pod` made since `before`
        (pod name -> uid at the start), in order."""
        return sorted((rv, uid) for uid, (rv, n) in self.created.items() if n == pod and uid != before.get(pod))


def pod_uids(s, pods):
    out = {}
    for p in pods:
        pod = s.k.get("Pod", s.ns, p)
        need(pod is not None and not pod["metadata"].get("deletionTimestamp"), f"pod {p} missing")
        out[p] = pod["metadata"]["uid"]
    return out


def promote_mode(s, job):
    j = s.job(job)
    need(j is not None, f"promote Job {job} missing")
    env = {e["name"]: e.get("value") for c in j["spec"]["template"]["spec"]["containers"] for e in c.get("env") or []}
    return env.get("MODE")


def check_planned_change(s, timeline, old, new, job):
    """The role ConfigMap named `new` before `job` was made; the read-write
    Service selected `old` until `job` was seen Succeeded, and `new` only
    after. Returns the revisions (fenced, made, done, moved)."""
    fenced = timeline.first("role", new)
    made = timeline.first("job", job)
    done = timeline.first("done", job)
    moved = timeline.first("service", new)
    s.expect(None not in (fenced, made, done, moved), f"the watch missed a step: role {fenced}, job {made}, done {done}, service {moved}: {timeline.events}")
    s.expect(fenced[0] < made[0], f"the role ConfigMap named {new} at rv {fenced[0]}, not before {job} was created at rv {made[0]}")
    early = [(rv, v) for rv, _, w, v in timeline.events if w == "service" and rv < done[0] and v != old]
    s.expect(not early, f"the read-write Service selected {early} before {job} was seen Succeeded at rv {done[0]} (want {old} until then)")
    s.expect(moved[0] > done[0], f"the read-write Service moved to {new} at rv {moved[0]}, not after {job} succeeded at rv {done[0]}")
    others = sorted({v for _, _, w, v in timeline.events if w == "job"} - {job})
    s.expect(not others, f"other promote Jobs created: {others}")
    return fenced, made, done, moved


def scenario_switchover(s):
    k, ns, name = s.k, s.ns, "ledger"
    p0, p1, p2 = pods = [f"{name}-{i}" for i in range(3)]
    vols = large_database(s, name)
    uids = pod_uids(s, pods)

    job = f"{name}-promote-1-2"
    s.step(f"ask a switchover to {p2} at epoch 0: fenced, then {job} (switchover mode), then the read-write Service moves")
    timeline = PrimaryTimeline(ns, name)
    s.rec.add_listener(timeline)
    try:
        k.patch("Database", ns, name, {"metadata": {"annotations": {SWITCHOVER: f"{p2}@0"}}})
        after = {p0: ("standby", True), p1: ("standby", True), p2: ("primary", True)}
        db = s.wait(f"{p2} the primary at epoch 1", lambda: primary_state(s, name, p2, 1, after), timeout=120)
    finally:
        s.rec.remove_listener(timeline)
    s.expect(job_outcome(s.job(job)) == "Succeeded", f"promote Job {job} is {job_outcome(s.job(job))}")
    s.expect(promote_mode(s, job) == "switchover", f"promote Job {job} MODE={promote_mode(s, job)}, want switchover")
    fenced, made, done, moved = check_planned_change(s, timeline, p0, p2, job)
    say(
        f"[{s.title} | {s.strategy}] observed: role ConfigMap names {p2} at rv {fenced[0]}, {job} created at rv {made[0]}, "
        f"seen Succeeded at rv {done[0]}, read-write Service selects {p2} at rv {moved[0]} ({moved[1] - fenced[1]:.1f}s after the role)"
    )
    last = db["status"].get("lastFailover") or {}
    s.expect(
        last.get("from") == p0 and last.get("to") == p2 and last.get("epoch") == 1 and last.get("at"),
        f"status.lastFailover {last}",
    )
    s.expect("planned switchover" in last.get("reason", "") and job in last.get("reason", ""), f"lastFailover.reason {last.get('reason')!r} does not say a planned switchover by {job}")
    s.expect(pod_uids(s, pods) == uids, f"pods restarted by a switchover: {uids} -> {pod_uids(s, pods)}")
    same_volumes(s, name, vols)

    s.step(f"a stale request ({p1}@0, the primary is at epoch 1): ignored, nothing changes for two resyncs")
    k.patch("Database", ns, name, {"metadata": {"annotations": {SWITCHOVER: f"{p1}@0"}}})

    def ignored():
        db = primary_state(s, name, p2, 1, after)
        c = condition(db, "FailingOver")
        need(c.get("reason") == "SwitchoverIgnored", f"FailingOver {c}")
        need(p1 in c.get("message", "") and "epoch 0" in c.get("message", ""), f"FailingOver message {c.get('message')!r}")

    s.wait("FailingOver SwitchoverIgnored naming the stale epoch", ignored, timeout=60)
    s.hold(f"{p2} the primary at epoch 1, the request ignored", lambda: (ignored(), need(pod_uids(s, pods) == uids, "a pod restarted")))
    promotes = sorted(j["metadata"]["name"] for j in k.list("Job", ns) if j["metadata"]["name"].startswith(f"{name}-promote-"))
    s.expect(promotes == [job], f"promote Jobs {promotes}, want only {job}")
    same_volumes(s, name, vols)
    release(s, name)


def release(s, name):
    """Deletes the Database (Snapshot: one snapshot, then its volumes), so
    that its three instances' CPU requests leave the one fake node to the
    scenarios still to run."""
    s.step(f"delete {name} (Snapshot), freeing the node for the scenarios after")
    s.k.delete("Database", s.ns, name)
    db_gone(s, name)


def updated(s, name, pods, image):
    """Every instance runs `image` at the StatefulSet's update revision,
    ready; the rollout reports done."""
    sts = s.k.get("StatefulSet", s.ns, name)
    need(sts is not None, "StatefulSet missing")
    rev = (sts.get("status") or {}).get("updateRevision")
    for p in pods:
        pod = s.k.get("Pod", s.ns, p)
        need(pod is not None and pod_ready(pod), f"pod {p} not ready")
        need(pod["spec"]["containers"][0]["image"] == image, f"pod {p} runs {pod['spec']['containers'][0]['image']}")
        need((pod["metadata"].get("labels") or {}).get(REVISION) == rev, f"pod {p} at revision {pod['metadata']['labels'].get(REVISION)}, not {rev}")
    db = s.parent("Database", name)
    s.synced(db)
    c = condition(db, "Upgrading")
    need(c and c.get("status") == "False" and c.get("reason") == "UpToDate", f"Upgrading {c}")
    return sts


def scenario_minor_update(s):
    k, ns, name = s.k, s.ns, "inventory"
    p0, p1, p2 = pods = [f"{name}-{i}" for i in range(3)]
    image = "postgres:16.1"
    vols = large_database(s, name)
    uids = pod_uids(s, pods)

    job = f"{name}-promote-1-1"
    s.step(f"spec.imageName {image}: {p2} and {p1} update, a switchover to {p1}, then {p0} updates")
    timeline = PrimaryTimeline(ns, name)
    pods_seen = PodTimeline(ns, name, pods)
    s.rec.add_listener(timeline)
    s.rec.add_listener(pods_seen)
    try:
        k.patch("Database", ns, name, {"spec": {"imageName": image}})

        def rolling():
            c = condition(s.parent("Database", name), "Upgrading")
            need(c and c.get("status") == "True" and c.get("reason") == "RollingUpdate", f"Upgrading {c}")

        s.soft("Upgrading True RollingUpdate", rolling, timeout=60)
        final = {p0: ("standby", True), p1: ("primary", True), p2: ("standby", True)}

        def done():
            primary_state(s, name, p1, 1, final)
            return updated(s, name, pods, image)

        sts = s.wait(f"every instance on {image}, {p1} the primary at epoch 1, Upgrading UpToDate", done, timeout=300)
    finally:
        s.rec.remove_listener(timeline)
        s.rec.remove_listener(pods_seen)
    # The last step's partition 0 stays until the StatefulSet controller
    # reports the rollout done; the next sync holds it above the new
    # primary again.
    def held():
        st = k.get("StatefulSet", ns, name)
        partition = ((st["spec"].get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition")
        need(partition == 2, f"StatefulSet partition {partition} at the end, want 2 (held above the new primary {p1})")

    s.soft(f"the partition held above the new primary {p1} again", held, timeout=60)
    s.expect(job_outcome(s.job(job)) == "Succeeded", f"promote Job {job} is {job_outcome(s.job(job))}")
    s.expect(promote_mode(s, job) == "switchover", f"promote Job {job} MODE={promote_mode(s, job)}, want switchover")
    fenced, made, done_at, moved = check_planned_change(s, timeline, p0, p1, job)

    # The template change came with the partition held above the primary.
    new = [(rv, part) for rv, img, part, _ in pods_seen.statefulset if img == image]
    s.expect(new and new[0][1] == 1, f"the StatefulSet took {image} with partition {new[0][1] if new else None}, want 1 (above the primary {p0}): {pods_seen.statefulset}")
    early = [(rv, part) for rv, part in new if rv < done_at[0] and (part or 0) < 1]
    s.expect(not early, f"partition below 1 (the primary {p0} exposed) before {job} succeeded at rv {done_at[0]}: {early}")
    opened = [rv for rv, part in new if rv > done_at[0] and part == 0]
    s.expect(opened, f"partition 0 (the old primary {p0} updates) never written after {job} succeeded: {pods_seen.statefulset}")
    # Each pod replaced exactly once; the standbys above the primary before it.
    made_of = {p: pods_seen.made(p, uids) for p in pods}
    say(
        f"[{s.title} | {s.strategy}] observed: StatefulSet (rv, image, partition, template hash) {pods_seen.statefulset}; "
        f"its status (rv, updateRevision, currentRevision) {pods_seen.sts_status}; pods' revisions when made {pods_seen.revisions}; "
        f"pods made (rv, uid) {made_of}; deleted (uid: rv, pod) {pods_seen.deleted}; role names {p1} at rv {fenced[0]}, "
        f"{job} made at rv {made[0]}, Succeeded at rv {done_at[0]}, read-write Service on {p1} at rv {moved[0]}"
    )
    replaced = {p: pods_seen.replaced(p) for p in pods}
    s.expect(all(n == 1 for n in replaced.values()), f"the StatefulSet controller replaced the pods {replaced} times, want once each (removed outright, by kwok: {pods_seen.outright()})")
    s.expect(all(made_of.values()), f"pods made again {made_of}: each must be")
    stale = {p: pods_seen.revisions[m[-1][1]] for p, m in made_of.items() if pods_seen.revisions[m[-1][1]] != sts["status"]["updateRevision"]}
    s.expect(not stale, f"pods last made at another revision than {sts['status']['updateRevision']}: {stale}")
    gone = {p: pods_seen.deleted.get(uids[p]) for p in pods}
    s.expect(all(gone.values()), f"the watch did not see every old pod deleted: {gone}")
    order = sorted((made_of[p][0][0], p) for p in pods)
    s.expect([p for _, p in order] == [p2, p1, p0], f"pods replaced in the order {order}, want {p2}, {p1}, then the old primary {p0}")
    for p in (p1, p2):
        s.expect(made_of[p][0][0] < gone[p0][0], f"{p} replaced at rv {made_of[p][0][0]}, after the primary {p0} was deleted at rv {gone[p0][0]}")
    s.expect(fenced[0] > made_of[p1][0][0], f"the switchover to {p1} started at rv {fenced[0]}, before {p1} was updated at rv {made_of[p1][0][0]}")
    s.expect(gone[p0][0] > done_at[0] and gone[p0][0] > moved[0], f"the old primary {p0} was deleted at rv {gone[p0][0]}, before {job} succeeded (rv {done_at[0]}) and the read-write Service moved (rv {moved[0]})")
    db = s.parent("Database", name)
    st = db["status"]
    s.expect(st.get("primaryEpoch") == 1, f"status.primaryEpoch {st.get('primaryEpoch')}, want 1 (grew by exactly one)")
    last = st.get("lastFailover") or {}
    s.expect(last.get("from") == p0 and last.get("to") == p1 and last.get("epoch") == 1, f"status.lastFailover {last}")
    s.expect("planned switchover" in last.get("reason", "") and job in last.get("reason", ""), f"lastFailover.reason {last.get('reason')!r}: the rollout's switchover is a planned change")
    rw_selects(s, name, p1)
    same_volumes(s, name, vols)
    s.hold(f"{p1} the primary, every instance on {image}", lambda: (primary_state(s, name, p1, 1, final), updated(s, name, pods, image)))
    release(s, name)
