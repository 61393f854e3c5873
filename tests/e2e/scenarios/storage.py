"""A Database's volumes grown in the real loop (spec.storage.size raised).

dbgrow: a medium Database "grow" on the StorageClass `expandable`
(cluster.sh applies it with a kwok Stage that plays the external volume
resizer: a claim requesting more than it has gets it) is raised 1Gi -> 2Gi.
The hook answers with a Job grow-grow-<digest> and a ServiceAccount, Role
and RoleBinding grow-grow that may get and patch only those claims. kwok
runs no containers, so the suite holds the Job's pod and plays it itself,
kubectl as that ServiceAccount (harness.run_job_as_its_pod): the Job's own
RBAC is what lets it patch. Once every claim has 2Gi, StorageResized is
True and the Job and its access are gone. A shrink is refused by the API
server. Scaled to large, the third claim starts at the StatefulSet's
template size (1Gi, the template cannot change) and a second Job grows it.
A second Database "fixed", on the default class (no allowVolumeExpansion),
raised the same way gets no Job, only StorageResized False
(ExpansionNotAllowed), and its claims are left as they were. Both
Databases (policy Delete) are deleted at the end, volumes and all."""

import json

from harness import Failed, hold_job_pods, need, run_job_as_its_pod
from kube import condition
from scenarios.database import database, db_gone, db_running

EXPANDABLE = "expandable"


def claim_names(name, n):
    return [f"data-{name}-{i}" for i in range(n)]


def claims_at(s, claims, size):
    """Each claim requests `size` and has it."""
    for c in claims:
        pvc = s.k.get("PersistentVolumeClaim", s.ns, c)
        need(pvc is not None, f"claim {c} missing")
        requested = pvc["spec"]["resources"]["requests"].get("storage")
        has = ((pvc.get("status") or {}).get("capacity") or {}).get("storage")
        need(requested == size and has == size, f"claim {c} requests {requested} and has {has}, want {size}")


def storage_resized(s, name, status, reason=None):
    db = s.parent("Database", name)
    s.synced(db)
    c = condition(db, "StorageResized")
    need(c and c.get("status") == status, f"StorageResized {c}, want {status}")
    need(reason is None or c.get("reason") == reason, f"StorageResized {c}, want reason {reason}")
    return c


def grow_jobs(s, name):
    prefix = f"{name}-grow-"
    return [j["metadata"]["name"] for j in s.k.list("Job", s.ns) if j["metadata"]["name"].startswith(prefix)]


def grow_job(s, name, containers, claims, size, before=()):
    """Waits for a grow Job of `name` other than those in `before`, its
    ServiceAccount, and a Role that lets it get and patch exactly `claims`;
    checks it has one container per claim (`containers`) patching it to
    `size`. Returns the Job's name."""

    def check():
        jobs = [j for j in grow_jobs(s, name) if j not in before]
        need(len(jobs) == 1, f"grow Jobs {grow_jobs(s, name)} (earlier: {list(before)})")
        job = s.job(jobs[0])
        spec = job["spec"]["template"]["spec"]
        need(spec.get("serviceAccountName") == f"{name}-grow", f"serviceAccountName {spec.get('serviceAccountName')}")
        need([c["name"] for c in spec["containers"]] == containers, f"containers {[c['name'] for c in spec['containers']]}, want {containers}")
        for c in spec["containers"]:
            need(c.get("command") == ["kubectl"] and c["args"][:2] == ["patch", "persistentvolumeclaim"], f"container {c['name']}: {c.get('command')} {c.get('args')}")
            ops = json.loads(c["args"][c["args"].index("-p") + 1])
            need(ops[-1] == {"op": "replace", "path": "/spec/resources/requests/storage", "value": size}, f"container {c['name']} patches {ops}")
        need(s.k.get("ServiceAccount", s.ns, f"{name}-grow"), f"ServiceAccount {name}-grow missing")
        role = s.k.get("Role", s.ns, f"{name}-grow")
        need(role is not None, f"Role {name}-grow missing")
        want = [{"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "patch"], "resourceNames": claims}]
        need(role.get("rules") == want, f"Role {name}-grow rules {role.get('rules')}, want {want}")
        binding = s.k.get("RoleBinding", s.ns, f"{name}-grow")
        need(binding is not None, f"RoleBinding {name}-grow missing")
        need(binding["roleRef"]["name"] == f"{name}-grow", f"RoleBinding {name}-grow binds {binding['roleRef']}")
        return jobs[0]

    return s.wait(f"a grow Job of {name} for {claims}, with its ServiceAccount, Role and RoleBinding", check, timeout=120)


def grow_access_gone(s, name, job):
    s.gone("Job", job)
    # Nor another: a Job answered for the claims left after one container
    # patched its claim goes as soon as the other did too.
    need(not grow_jobs(s, name), f"grow Jobs left: {grow_jobs(s, name)}")
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        s.gone(kind, f"{name}-grow")


def grown(s, name, n, size, job):
    """After the grow Job ran: every claim at `size`, the condition True,
    the Job and its access gone."""
    s.wait(f"the {n} claims of {name} requesting and having {size}", lambda: claims_at(s, claim_names(name, n), size), timeout=60)
    s.wait("StorageResized True", lambda: storage_resized(s, name, "True"), timeout=60)
    s.wait(f"Job {job} and the ServiceAccount, Role and RoleBinding {name}-grow gone", lambda: grow_access_gone(s, name, job), timeout=60)


def scenario_grow(s):
    k, ns, name, fixed = s.k, s.ns, "grow", "fixed"
    hold = hold_job_pods(s, f"{name}-grow-")
    try:
        s.step(f"create {name} (16, medium, Delete) on the StorageClass {EXPANDABLE}, and {fixed} on the default one, both 1Gi")
        db = database(ns, name, "16", "medium", policy="Delete")
        db["spec"]["storage"] = {"size": "1Gi", "storageClassName": EXPANDABLE}
        k.apply(db)
        k.apply(database(ns, fixed, "16", "medium", policy="Delete"))
        db_running(s, name, 2, "16")
        db_running(s, fixed, 2, "16")
        claims_at(s, claim_names(name, 2), "1Gi")
        claims_at(s, claim_names(fixed, 2), "1Gi")

        s.step(f"raise {name} to 2Gi: a grow Job that may patch its two claims only")
        k.patch("Database", ns, name, {"spec": {"storage": {"size": "2Gi"}}})
        first = grow_job(s, name, ["grow-0", "grow-1"], claim_names(name, 2), "2Gi")
        s.step(f"play {first}'s pod: kubectl patch as ServiceAccount {name}-grow")
        run_job_as_its_pod(s, ns, first)
        grown(s, name, 2, "2Gi", first)
        db_running(s, name, 2, "16")

        s.step("a shrink back to 1Gi is refused by the API server")
        try:
            s.kubectl("patch", "pgdb", name, "--type=merge", "-p", json.dumps({"spec": {"storage": {"size": "1Gi"}}}))
            refused = None
        except Failed as err:
            refused = str(err)
        s.expect(refused is not None and "cannot shrink" in refused, f"shrink to 1Gi: {refused or 'accepted'}")
        s.expect(s.parent("Database", name)["spec"]["storage"]["size"] == "2Gi", "the Database's size changed")

        s.step(f"scale {name} to large: data-{name}-2 starts at the template's 1Gi, and a second Job grows it")
        k.patch("Database", ns, name, {"spec": {"size": "large"}})
        db_running(s, name, 3, "16")
        claims_at(s, [f"data-{name}-2"], "1Gi")
        second = grow_job(s, name, ["grow-2"], [f"data-{name}-2"], "2Gi", before=[first])
        run_job_as_its_pod(s, ns, second)
        grown(s, name, 3, "2Gi", second)

        s.step(f"raise {fixed} (default class, no allowVolumeExpansion) to 2Gi: no Job, the condition says why")
        k.patch("Database", ns, fixed, {"spec": {"storage": {"size": "2Gi"}}})
        c = s.wait("StorageResized False (ExpansionNotAllowed)", lambda: storage_resized(s, fixed, "False", "ExpansionNotAllowed"), timeout=60)
        s.expect("allowVolumeExpansion" in (c.get("message") or ""), f"StorageResized message: {c.get('message')}")

        def untouched():
            need(not grow_jobs(s, fixed), f"grow Jobs of {fixed}: {grow_jobs(s, fixed)}")
            need(s.k.get("Role", ns, f"{fixed}-grow") is None, f"Role {fixed}-grow exists")
            claims_at(s, claim_names(fixed, 2), "1Gi")
            storage_resized(s, fixed, "False", "ExpansionNotAllowed")

        s.hold(f"{fixed}'s claims untouched, no Job", untouched)
    finally:
        s.unstage(hold)
        s.step(f"delete {name} and {fixed} (Delete): StatefulSets, volumes and parents gone")
        for db_name in (name, fixed):
            if k.get("Database", ns, db_name) is not None:
                k.delete("Database", ns, db_name)
        for db_name in (name, fixed):
            db_gone(s, db_name)

