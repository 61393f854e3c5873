"""A Database started from a backup (spec.bootstrap) in the real loop: nothing
serves before its restore Job succeeded, a failed restore stays down until
its Job is deleted, and a Database created again over the volumes it
retained serves them and restores nothing."""

from harness import Failed, need
from kube import condition, job_outcome
from scenarios.database import database, db_gone, db_running, db_services, deleted_under_retain, drop_volumes, same_volumes

BUCKET = "e2e-backups"


def bootstrapped(ns, name, source, size="small", policy="Snapshot", backups=False):
    db = database(ns, name, "16", size, policy=policy, backups=backups)
    db["spec"]["bootstrap"] = {"database": source}
    return db


def report(source):
    """What restore.sh leaves in its termination log on success, for a dump
    of Database `source`; and the object restoredFrom must then name."""
    key = f"{source}/{source}-snapshot-20261124T030000Z.pgdump"
    return f"opshooks restore: restored bytes=4096 taken=2026-11-24T03:00:00Z key={key}", f"s3://{BUCKET}/{key}"


def deleted(s, name):
    """Deleted under Snapshot: its snapshot taken, everything gone."""
    s.step("delete the Database")
    s.k.delete("Database", s.ns, name)
    db_gone(s, name)


# Why a Database re-created over retained volumes restores nothing.
NOT_OVER_RETAINED = ("RetainedVolumes",)


def restored_reason(s, name, status, reason, phase, timeout=180):
    def check():
        db = s.parent("Database", name)
        st = s.synced(db)
        c = condition(db, "Restored")
        reasons = (reason,) if isinstance(reason, str) else reason
        need(c and c.get("status") == status and c.get("reason") in reasons, f"Restored {c}")
        need(st.get("phase") == phase, f"phase {st.get('phase')}, want {phase}")
        return db

    return s.wait(f"Database {name} {phase}, Restored {status} ({reason})", check, timeout)


def not_serving(s, name, phase):
    """Nothing a client or a schedule uses exists: no read-write or read-only
    Service, no read-only endpoints, no init Job, no backup CronJob."""
    for kind, child in (
        ("Service", name),
        ("Service", f"{name}-ro"),
        ("EndpointSlice", f"{name}-ro"),
        ("Job", f"{name}-init"),
        ("CronJob", f"{name}-backup"),
    ):
        need(s.k.get(kind, s.ns, child) is None, f"{kind} {child} exists before the restore succeeded")
    st = s.parent("Database", name).get("status") or {}
    need(st.get("phase") == phase, f"phase {st.get('phase')}, want {phase}")
    need(not st.get("restoredFrom"), f"status.restoredFrom {st.get('restoredFrom')} before the restore succeeded")


def restored_from(s, name, want_object):
    def check():
        db = s.parent("Database", name)
        s.synced(db)
        got = (db.get("status") or {}).get("restoredFrom") or {}
        need(got.get("object") == want_object, f"status.restoredFrom {got}, want object {want_object}")
        need(got.get("bytes") == 4096 and got.get("taken") == "2026-11-24T03:00:00Z", f"status.restoredFrom {got}")
        need(got.get("restoredAt"), f"status.restoredFrom {got} has no restoredAt")
        c = condition(db, "Restored")
        need(c and c.get("status") == "True" and c.get("reason") == "Restored", f"Restored {c}")
        need(want_object in (c.get("message") or ""), f"Restored message {c.get('message')!r} does not name {want_object}")

    s.wait(f"Database {name} records the dump it was restored from", check, timeout=60)


def scenario_restore(s):
    k, ns, name, source = s.k, s.ns, "billing", "ledger"
    message, obj = report(source)
    s.step("create a Database (16, medium, backups on) from the newest dump of Database ledger; its restore Job succeeds slowly")
    slow = s.stage(f"{name}-restore", "succeed", delay_ms=45000, message=message)
    try:
        k.apply(bootstrapped(ns, name, source, "medium", backups=True))
        s.wait_job(f"{name}-restore", "Running", timeout=180)
        restored_reason(s, name, "Unknown", "Restoring", "Restoring", timeout=60)
        s.step("while the restore runs: phase Restoring, no Service, endpoints, init Job or backup CronJob")

        def restoring():
            job = s.job(f"{name}-restore")
            if job_outcome(job) == "Succeeded":
                raise Failed("the restore Job succeeded before the hold ended: the stage's delay is too short")
            not_serving(s, name, "Restoring")

        s.hold("nothing serving while the restore runs", restoring)
        s.step("the restore Job succeeds: Running, served, backed up, restoredFrom recorded")
        s.wait_job(f"{name}-restore", "Succeeded", timeout=120)
    finally:
        s.unstage(slow)
    db_running(s, name, 2, "16")
    db_services(s, name, 2)
    s.wait("backup CronJob", lambda: need(k.get("CronJob", ns, f"{name}-backup"), "missing"))
    restored_from(s, name, obj)
    for job in (f"{name}-restore", f"{name}-init"):
        n = len(s.rec.creations_of("Job", ns, job))
        s.expect(n == 1, f"job {job} created {n} times")
    deleted(s, name)


def scenario_restore_fails(s):
    k, ns, name = s.k, s.ns, "orders"
    message, obj = report(name)
    s.step("create a Database (16, small) from the newest dump of Database orders; its restore Job fails")
    fail = s.stage(f"{name}-restore", "fail")
    try:
        k.apply(bootstrapped(ns, name, name))
        s.wait_job(f"{name}-restore", "Failed", timeout=180)
        db = restored_reason(s, name, "False", "RestoreFailed", "Degraded")
        said = condition(db, "Restored").get("message") or ""
        s.expect("failed by the e2e suite" in said, f"Restored does not say why the restore failed: {said!r}")
        s.step("it stays down: no Service, endpoints, init Job or backup CronJob")
        s.hold("nothing serving after the failed restore", lambda: (not_serving(s, name, "Degraded"), s.wait_job(f"{name}-restore", "Failed", timeout=1)))
    finally:
        s.unstage(fail)
    s.step("retry: delete the failed Job; it is made again and succeeds")
    succeed = s.stage(f"{name}-restore", "succeed", message=message)
    try:
        k.delete("Job", ns, f"{name}-restore")
        s.wait("the restore Job made again", lambda: need(len(s.rec.creations_of("Job", ns, f"{name}-restore")) == 2, "not yet"), timeout=120)
        s.wait_job(f"{name}-restore", "Succeeded", timeout=180)
    finally:
        s.unstage(succeed)
    db_running(s, name, 1, "16")
    db_services(s, name, 1)
    restored_from(s, name, obj)
    n = len(s.rec.creations_of("Job", ns, f"{name}-restore"))
    s.expect(n == 2, f"restore job created {n} times, want 2 (the failed one and the retry)")
    deleted(s, name)


def scenario_restore_over_retained(s):
    k, ns, name = s.k, s.ns, "vault"
    vols = deleted_under_retain(s, name)
    s.expect(sorted(vols) == [f"data-{name}-0", f"data-{name}-1"], f"volumes {sorted(vols)}")
    s.step("create it again with the same name, asking to restore its newest dump: it serves the retained volumes instead")
    # Were a restore Job made, it would succeed at once: only the absence of
    # one tells the Database restored nothing over its data.
    k.apply(bootstrapped(ns, name, name, "medium", policy="Retain"))
    # The role counts volumes older than the Database as initialized; the
    # specific reason still comes first.
    restored_reason(s, name, "False", NOT_OVER_RETAINED, "Running", timeout=180)
    db_running(s, name, 2, "16")
    db_services(s, name, 2)

    def serves_old_volumes():
        same_volumes(s, name, vols)
        need(s.rec.creations_of("Job", ns, f"{name}-restore") == [], "a restore Job was created")
        db = s.parent("Database", name)
        c = condition(db, "Restored")
        need(c and c.get("status") == "False" and c.get("reason") in NOT_OVER_RETAINED, f"Restored {c}")
        st = db.get("status") or {}
        need(not st.get("restoredFrom"), f"status.restoredFrom {st.get('restoredFrom')}")
        need(st.get("phase") == "Running", f"phase {st.get('phase')}")

    s.hold("the old volumes served, no restore Job", serves_old_volumes)
    s.step("delete it: its volumes stay")
    k.delete("Database", ns, name)
    db_gone(s, name, volumes_too=False)
    same_volumes(s, name, vols)
    drop_volumes(s, vols)
