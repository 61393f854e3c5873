"""The Database's whole life in the real loop: create, scale, upgrades (one
whose pre-upgrade backup fails, one whose restore fails), and deletion under
every policy; volumes and held children compared by uid throughout."""

from harness import GROUP, need
from kube import condition, controller_uid, job_outcome, pod_ready

VERSION_ANNOTATION = "opshooks.io/postgres-version"


def database(ns, name, version, size="small", policy="Snapshot", backups=False):
    backup = {
        "enabled": backups,
        "destination": {"s3Bucket": "e2e-backups", "s3Prefix": f"{name}/", "credentialsSecret": "s3-creds"},
    }
    if backups:
        backup["schedule"] = "0 3 * * *"
    return {
        "apiVersion": GROUP,
        "kind": "Database",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "version": version,
            "size": size,
            "storage": {"size": "1Gi"},
            "deletionPolicy": policy,
            "backup": backup,
        },
    }


def why_not_running(s, name, st):
    """What a Database that is not Running reports, and its StatefulSet and
    pods as observed: so a wait that times out in CI says why."""
    conds = [
        f"{c.get('type')}={c.get('status')} ({c.get('reason')}: {str(c.get('message', ''))[:160]})"
        for c in st.get("conditions") or []
        if c.get("status") != "True" or c.get("type") in ("Failover", "Switchover", "Rollout", "PrimaryChange")
    ]
    sts = s.k.get("StatefulSet", s.ns, name) or {}
    sts_st = sts.get("status") or {}
    rollout = (sts.get("spec") or {}).get("updateStrategy", {}).get("rollingUpdate", {})
    def pod(p):
        # An unready pod's phase, node and first unready reason: Pending
        # (unscheduled, a claim unbound) reads differently from a probe.
        st = p.get("status") or {}
        why = [
            f"{c.get('type')}:{c.get('reason')}" + (f" ({str(c.get('message'))[:120]})" if c.get("type") == "PodScheduled" else "")
            for c in st.get("conditions") or []
            if c.get("status") != "True"
        ]
        seen = "ready" if pod_ready(p) else f"unready({st.get('phase')},{p['spec'].get('nodeName') or 'no node'},{','.join(why[:2])})"
        return f"{p['metadata']['name']}:{seen}:{p['metadata'].get('labels', {}).get('controller-revision-hash', '?')}"

    pods = [pod(p) for p in s.k.list("Pod", s.ns) if p["metadata"]["name"].rsplit("-", 1)[0] == name]
    claims = [
        f"{c['metadata']['name']}:{(c.get('status') or {}).get('phase')}"
        for c in s.k.list("PersistentVolumeClaim", s.ns)
        if (c.get("status") or {}).get("phase") != "Bound"
    ]
    if claims:
        pods.append(f"(claims not bound: {' '.join(claims)})")
    return (
        f"primary {st.get('currentPrimary')} epoch {st.get('primaryEpoch')}; conditions: {'; '.join(conds) or 'none'}; "
        f"StatefulSet replicas {sts_st.get('replicas')} ready {sts_st.get('readyReplicas')} "
        f"updateRevision {sts_st.get('updateRevision')} partition {rollout.get('partition')}; pods {' '.join(pods) or 'none'}"
    )


def db_running(s, name, n, version, timeout=180, image=None):
    """`name` Running `version` with `n` ready instances, its StatefulSet on
    `image` (the version's official image when None)."""
    image_wanted = image or f"postgres:{version}"

    def check():
        db = s.parent("Database", name)
        st = s.synced(db)
        need(st.get("phase") == "Running" and st.get("ready") is True, f"phase {st.get('phase')} ready {st.get('ready')}; {why_not_running(s, name, st)}")
        need(st.get("version") == version, f"status.version {st.get('version')}, want {version}")
        need(st.get("replicas") == n and st.get("readyReplicas") == n, f"replicas {st.get('replicas')}/{st.get('readyReplicas')}, want {n}")
        sts = s.k.get("StatefulSet", s.ns, name)
        need(sts is not None, "StatefulSet missing")
        need(sts["metadata"].get("annotations", {}).get(VERSION_ANNOTATION) == version, "StatefulSet runs another version")
        image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
        need(image == image_wanted, f"StatefulSet image {image}, want {image_wanted}")
        need(sts["spec"]["replicas"] == n and (sts.get("status") or {}).get("readyReplicas") == n, "StatefulSet not ready")
        init = s.job(f"{name}-init")
        need(job_outcome(init) == "Succeeded", f"init job {job_outcome(init)}")
        initialized = condition(db, "Initialized")
        need(initialized and initialized.get("status") == "True", f"Initialized {initialized}")
        cols = s.columns("pgdb", name)
        want = {"READY": f"{n}/{n}", "VERSION": version, "PHASE": "Running", "PRIMARY": st.get("currentPrimary")}
        need(all(cols.get(k) == v for k, v in want.items()), f"kubectl get pgdb: {cols}, want {want}")
        return db

    return s.wait(f"Database {name} Running {version} with {n} ready instances", check, timeout)


def db_services(s, name, n):
    def check():
        headless = s.k.get("Service", s.ns, f"{name}-headless")
        need(headless and headless["spec"].get("clusterIP") == "None", "headless Service")
        # The primary is the one the role ConfigMap names: a new pod
        # template (a new size's resources) rolls out with a switchover.
        role = s.k.get("ConfigMap", s.ns, f"{name}-role")
        primary = ((role or {}).get("data") or {}).get("primary")
        need(primary, f"ConfigMap {name}-role names no primary")
        rw = s.k.get("Service", s.ns, name)
        selected = (((rw or {}).get("spec") or {}).get("selector") or {}).get("statefulset.kubernetes.io/pod-name")
        need(selected == primary, f"read-write Service selects {selected}, not the primary {primary}")
        ro = s.k.get("Service", s.ns, f"{name}-ro")
        need(ro and not ro["spec"].get("selector"), "read-only Service must have no selector")
        eps = s.k.get("EndpointSlice", s.ns, f"{name}-ro")
        need(eps is not None, "read-only EndpointSlice missing")
        need(eps["metadata"]["labels"].get("kubernetes.io/service-name") == f"{name}-ro", "EndpointSlice not attached to the read-only Service")
        want = []
        for standby in (f"{name}-{i}" for i in range(n) if f"{name}-{i}" != primary):
            pod = s.k.get("Pod", s.ns, standby)
            need(pod and pod_ready(pod) and pod["status"].get("podIP"), f"standby {standby} not ready")
            want.append(pod["status"]["podIP"])
        got = sorted(a for e in eps.get("endpoints") or [] for a in e["addresses"] if (e.get("conditions") or {}).get("ready"))
        need(got == sorted(want), f"read-only endpoints {got}, want the standbys {sorted(want)}")
        for secret in (f"{name}-superuser", f"{name}-credentials"):
            need(s.k.get("Secret", s.ns, secret), f"Secret {secret} missing")
        need(s.k.get("ConfigMap", s.ns, f"{name}-connection"), "connection ConfigMap missing")

    s.wait(f"Services of {name} and read-only endpoints on the {n - 1} standbys", check, timeout=60)


def volumes(s, name):
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in s.k.list("PersistentVolumeClaim", s.ns, f"opshooks.io/database={name}")
        if not p["metadata"].get("deletionTimestamp")
    }


def same_volumes(s, name, before):
    now = volumes(s, name)
    lost = {v for v in before if now.get(v) != before[v]}
    need(not lost, f"volumes replaced or deleted: {sorted(lost)}")


# Children a client holds on to by name and reads once: a new Secret is a new
# password, a new Service a new cluster IP, a new ConfigMap or EndpointSlice
# lost what other writers put there. Made again, they are a failure even when
# their content ends up the same, so they are compared by uid.
HELD_KINDS = ("Service", "Secret", "ConfigMap", "EndpointSlice")


def held_objects(s, owner_uids):
    """(kind, name) -> uid of every child of HELD_KINDS these parents own."""
    return {
        (kind, o["metadata"]["name"]): o["metadata"]["uid"]
        for kind in HELD_KINDS
        for o in s.k.list(kind, s.ns)
        if controller_uid(o) in owner_uids
    }


def same_held_objects(s, before, owner_uids):
    now = held_objects(s, owner_uids)
    changed = sorted(f"{kind} {name}" for (kind, name), uid in before.items() if now.get((kind, name)) != uid)
    need(not changed, f"made again or deleted: {changed}")


def upgrading_reason(s, name, reason, timeout=180):
    def check():
        db = s.parent("Database", name)
        s.synced(db)
        c = condition(db, "Upgrading")
        need(c and c.get("reason") == reason, f"Upgrading {c}")
        return db

    return s.wait(f"Upgrading condition {reason}", check, timeout)


def old_version_serving(s, name, n, version):
    sts = s.k.get("StatefulSet", s.ns, name)
    need(sts is not None, "StatefulSet missing")
    need(sts["metadata"]["annotations"].get(VERSION_ANNOTATION) == version, f"StatefulSet left version {version}")
    need(sts["spec"]["replicas"] == n and (sts.get("status") or {}).get("readyReplicas") == n, f"StatefulSet not serving {n} ready instances")
    db = s.parent("Database", name)
    need((db.get("status") or {}).get("version") == version, f"status.version {(db.get('status') or {}).get('version')}")


def db_gone(s, name, volumes_too=True, timeout=180):
    def check():
        s.gone("Database", name)
        s.gone("StatefulSet", name)
        if volumes_too:
            left = volumes(s, name)
            need(not left, f"volumes left: {sorted(left)}")

    s.wait(f"Database {name} gone" + (" with its volumes" if volumes_too else ""), check, timeout)


def scenario_database(s):
    k, ns, name = s.k, s.ns, "shop"
    s.step("create a Database (15, medium: a primary and a standby, backups on)")
    k.apply(database(ns, name, "15", "medium", backups=True))
    db_running(s, name, 2, "15")
    s.wait("the init Job, run once", lambda: need(len(s.rec.creations_of("Job", ns, f"{name}-init")) == 1, "init job created more than once"))
    db_services(s, name, 2)
    s.wait("backup CronJob", lambda: need(s.k.get("CronJob", ns, f"{name}-backup"), "missing"))
    vols = volumes(s, name)
    owner = [s.parent("Database", name)["metadata"]["uid"]]
    held = held_objects(s, owner)
    s.expect(len(held) >= 7, f"Services, Secrets, ConfigMap and EndpointSlice of {name}: only {sorted(held)}")
    s.expect(sorted(vols) == [f"data-{name}-0", f"data-{name}-1"], f"volumes {sorted(vols)}")
    s.step("scale to large (3 instances)")
    k.patch("Database", ns, name, {"spec": {"size": "large"}})
    db_running(s, name, 3, "15")
    db_services(s, name, 3)
    same_volumes(s, name, vols)
    s.wait("the same Services, Secrets, ConfigMap and EndpointSlice", lambda: same_held_objects(s, held, owner), timeout=1)
    vols = volumes(s, name)
    s.step("upgrade 15 -> 16 succeeds")
    k.patch("Database", ns, name, {"spec": {"version": "16"}})
    db_running(s, name, 3, "16", timeout=240)
    db_services(s, name, 3)
    same_volumes(s, name, vols)
    s.wait("the same Services, Secrets, ConfigMap and EndpointSlice", lambda: same_held_objects(s, held, owner), timeout=1)
    for job in (f"{name}-pre-upgrade-16", f"{name}-upgrade-16"):
        n = len(s.rec.creations_of("Job", ns, job))
        s.expect(n == 1, f"job {job} created {n} times")
    s.step("upgrade 16 -> 17 whose pre-upgrade backup fails: 16 keeps serving")
    fail_pre = s.stage(f"{name}-pre-upgrade-17", "fail")
    k.patch("Database", ns, name, {"spec": {"version": "17"}})
    s.wait_job(f"{name}-pre-upgrade-17", "Failed", timeout=180)
    upgrading_reason(s, name, "PreUpgradeBackupFailed")
    s.hold("the old version serving, data untouched", lambda: (old_version_serving(s, name, 3, "16"), same_volumes(s, name, vols)))
    s.step("retry (delete the failed Job); now the restore fails: 16 serves again")
    s.unstage(fail_pre)
    fail_restore = s.stage(f"{name}-upgrade-17", "fail")
    k.delete("Job", ns, f"{name}-pre-upgrade-17")
    s.wait_job(f"{name}-upgrade-17", "Failed", timeout=240)
    upgrading_reason(s, name, "UpgradeFailed")
    s.wait("the old version serving again", lambda: old_version_serving(s, name, 3, "16"), timeout=120)
    same_volumes(s, name, vols)
    s.hold("the old version serving, data untouched", lambda: (old_version_serving(s, name, 3, "16"), same_volumes(s, name, vols)))
    s.step("retry the restore (delete the failed Job): 17 runs")
    s.unstage(fail_restore)
    k.delete("Job", ns, f"{name}-upgrade-17")
    db_running(s, name, 3, "17", timeout=240)
    db_services(s, name, 3)
    same_volumes(s, name, vols)
    s.wait("the same Services, Secrets, ConfigMap and EndpointSlice", lambda: same_held_objects(s, held, owner), timeout=1)
    s.step("delete under Snapshot: one snapshot, then volumes, StatefulSet and parent gone")
    k.delete("Database", ns, name)
    s.wait_job_seen(f"{name}-snapshot", "Succeeded")
    db_gone(s, name)
    n = len(s.rec.creations_of("Job", ns, f"{name}-snapshot"))
    s.expect(n == 1, f"snapshot job created {n} times")
    n = len(s.rec.creations_of("StatefulSet", ns, name))
    s.expect(n == 1, f"StatefulSet created {n} times")


def scenario_snapshot_fails(s):
    k, ns, name = s.k, s.ns, "ledger"
    s.step("create a Database (16, small, Snapshot)")
    k.apply(database(ns, name, "16"))
    db_running(s, name, 1, "16")
    vols = volumes(s, name)
    sts_uid = s.k.get("StatefulSet", ns, name)["metadata"]["uid"]
    s.step("delete while its snapshot fails: nothing is deleted")
    fail = s.stage(f"{name}-snapshot", "fail")
    k.delete("Database", ns, name)
    s.wait_job(f"{name}-snapshot", "Failed", timeout=180)

    def intact():
        db = s.parent("Database", name)
        need(db["metadata"].get("deletionTimestamp"), "not deleting")
        sts = s.k.get("StatefulSet", ns, name)
        need(sts and sts["metadata"]["uid"] == sts_uid, "StatefulSet deleted or replaced")
        same_volumes(s, name, vols)
        need((db.get("status") or {}).get("phase") == "Deleting", f"phase {(db.get('status') or {}).get('phase')}")

    s.hold("StatefulSet, volumes and parent intact", intact)
    s.step("retry: delete the failed snapshot Job; the snapshot succeeds and deletion finishes")
    s.unstage(fail)
    s.rec.allow_recreation("Job", ns, f"{name}-snapshot")
    k.delete("Job", ns, f"{name}-snapshot")
    db_gone(s, name)
    n = len(s.rec.creations_of("Job", ns, f"{name}-snapshot"))
    s.expect(n == 2, f"snapshot job created {n} times, want 2 (the failed one and the retry)")


def deleted_under_retain(s, name):
    """A Database (16, medium, Retain) created, then deleted: its volumes
    stay. Returns them (name -> uid)."""
    k, ns = s.k, s.ns
    s.step("create a Database (16, medium, Retain)")
    k.apply(database(ns, name, "16", "medium", policy="Retain"))
    db_running(s, name, 2, "16")
    vols = volumes(s, name)
    s.step("delete: StatefulSet and parent go, volumes stay")
    k.delete("Database", ns, name)
    db_gone(s, name, volumes_too=False)
    s.hold("volumes kept", lambda: same_volumes(s, name, vols))
    return vols


def drop_volumes(s, vols):
    s.step("clean up the retained volumes (by hand, as a user would)")
    for v in vols:
        s.rec.allow_pvc_delete(s.ns, v)
        s.k.delete("PersistentVolumeClaim", s.ns, v)


def scenario_retain(s):
    drop_volumes(s, deleted_under_retain(s, "archive"))


def scenario_delete(s):
    k, ns, name = s.k, s.ns, "scratch"
    s.step("create a Database (16, large, Delete)")
    k.apply(database(ns, name, "16", "large", policy="Delete"))
    db_running(s, name, 3, "16")
    # Issue 18: the StatefulSet controller never hands the claim of an
    # ordinal scaled away to the StatefulSet, so deleting it left
    # data-scratch-2 behind and the Database waited for ever.
    s.step("scale to medium: data-scratch-2 stays, no pod uses it")
    k.apply(database(ns, name, "16", "medium", policy="Delete"))
    db_running(s, name, 2, "16")
    need(len(volumes(s, name)) == 3, f"volumes {sorted(volumes(s, name))}, want 3 after the scale-down")
    s.step("delete: StatefulSet, every volume (the scaled-away one too) and parent gone, no snapshot")
    k.delete("Database", ns, name)
    db_gone(s, name)
    s.expect(not s.rec.creations_of("Job", ns, f"{name}-snapshot"), "a snapshot job was created under Delete")
