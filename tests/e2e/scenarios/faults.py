"""Faults in the real loop: a spec only the hook can refuse, opshooks killed
while every parent changes, Metacontroller killed mid-upgrade and
mid-deletion."""

import time

from harness import GROUP, need, say
from kube import job_outcome
from scenarios.backup import backup_spec, backup_state, make_target
from scenarios.database import database, db_gone, db_running, held_objects, same_held_objects, same_volumes, volumes
from scenarios.memcached import memcached_converged
from scenarios.webserver import webserver_converged


def scenario_invalid_spec(s):
    k, ns, name = s.k, s.ns, "hourly"
    s.step("a valid Backup and its CronJob")
    make_target(s, "pgx")
    k.apply({"apiVersion": GROUP, "kind": "Backup", "metadata": {"name": name, "namespace": ns}, "spec": backup_spec("15 * * * *", "pgx")})
    b, cron = backup_state(s, name, "15 * * * *", False, True, "Scheduled")
    s.step("a schedule only the hook can refuse (minute 61): Warning event, CronJob untouched")
    refusal = s.rec.expect_refusal("backup", f"{ns}/{name}")
    window = s.rec.quiet(f"the refused spec of Backup {ns}/{name}", [b["metadata"]["uid"]])
    k.patch("Backup", ns, name, {"spec": {"schedule": "61 * * * *"}})

    def warned():
        events = k.list("Event", ns)
        mine = [
            e
            for e in events
            if e.get("involvedObject", {}).get("uid") == b["metadata"]["uid"] and e.get("type") == "Warning"
        ]
        need(mine, "no Warning event on the Backup yet")
        text = " | ".join(e.get("message", "") for e in mine)
        need("spec.schedule" in text and "61" in text, f"Warning events do not carry our message: {text[:300]}")
        return text

    text = s.wait("a Warning event with the hook's message", warned, timeout=60)
    say(f"[{s.title}] event: {text[:240]}")
    now = k.get("CronJob", ns, f"{name}-backup")
    s.expect(now["metadata"]["resourceVersion"] == cron["metadata"]["resourceVersion"], "the CronJob changed while the spec was refused")
    s.step("fix the schedule: the loop resumes")
    k.patch("Backup", ns, name, {"spec": {"schedule": "45 * * * *"}})
    backup_state(s, name, "45 * * * *", False, True, "Scheduled")
    s.rec.close(window)
    refusal["end"] = time.time()
    k.delete("Backup", ns, name)


def scenario_hook_outage(s):
    k, ns, suite = s.k, s.ns, s.suite
    s.step("a WebServer, a Memcached, a Backup and a Database, converged")
    k.apply({"apiVersion": GROUP, "kind": "WebServer", "metadata": {"name": "web", "namespace": ns}, "spec": {"replicas": 2}})
    k.apply({"apiVersion": GROUP, "kind": "Memcached", "metadata": {"name": "mc", "namespace": ns}, "spec": {"size": 2}})
    make_target(s, "pgo")
    k.apply({"apiVersion": GROUP, "kind": "Backup", "metadata": {"name": "bk", "namespace": ns}, "spec": backup_spec("0 2 * * *", "pgo")})
    k.apply(database(ns, "db", "16", "small", policy="Delete"))
    webserver_converged(s, "web", 2, "nginxinc/nginx-unprivileged")
    memcached_converged(s, "mc", 2)
    backup_state(s, "bk", "0 2 * * *", False, True, "Scheduled")
    db_running(s, "db", 1, "16")
    parents = [s.parent(kind, n) for kind, n in (("WebServer", "web"), ("Memcached", "mc"), ("Backup", "bk"), ("Database", "db"))]
    uids = [p["metadata"]["uid"] for p in parents]
    vols = volumes(s, "db")
    held = held_objects(s, uids)
    s.step("opshooks killed; every parent changes meanwhile: nothing created or deleted")
    window = s.rec.quiet("the opshooks outage", uids)
    suite.opshooks.kill()
    k.patch("WebServer", ns, "web", {"spec": {"replicas": 4}})
    k.patch("Memcached", ns, "mc", {"spec": {"size": 3}})
    k.patch("Backup", ns, "bk", {"spec": {"schedule": "0 4 * * *"}})
    k.patch("Database", ns, "db", {"spec": {"size": "medium"}})

    def untouched():
        need(len(s.children("Pod", uids[0])) == 2, "WebServer pods changed")
        need(k.get("Deployment", ns, "mc")["spec"]["replicas"] == 2, "Deployment changed")
        need(k.get("CronJob", ns, "bk-backup")["spec"]["schedule"] == "0 2 * * *", "CronJob changed")
        need(k.get("StatefulSet", ns, "db")["spec"]["replicas"] == 1, "StatefulSet changed")
        same_volumes(s, "db", vols)
        same_held_objects(s, held, uids)

    try:
        s.hold("children untouched during the outage", untouched)
    finally:
        # Back even when the hold failed: every later scenario needs it.
        s.rec.close(window)
        s.step("opshooks back: everything converges within seconds")
        suite.opshooks.start()
    back = time.time()
    webserver_converged(s, "web", 4, "nginxinc/nginx-unprivileged")
    memcached_converged(s, "mc", 3)
    backup_state(s, "bk", "0 4 * * *", False, True, "Scheduled")
    db_running(s, "db", 2, "16")
    took = time.time() - back
    say(f"[{s.title}] converged {took:.1f}s after opshooks came back")
    s.expect(took <= 45, f"took {took:.0f}s to converge after opshooks came back (want <= 45)")
    same_volumes(s, "db", vols)
    s.wait("the same Services, Secrets, ConfigMaps and EndpointSlice after the outage", lambda: same_held_objects(s, held, uids), timeout=1)
    s.step("clean up")
    for kind, n in (("WebServer", "web"), ("Memcached", "mc"), ("Backup", "bk"), ("Database", "db")):
        k.delete(kind, ns, n)
    db_gone(s, "db")


def kill_while_running(s, job):
    """Kills Metacontroller, then starts it again, while Job job runs: the
    Job is checked right before and right after the kill, or the scenario
    would pass having killed it before or after what it is about."""

    def running(when):
        state = job_outcome(s.job(job)) or "gone"
        s.expect(state == "Running", f"job {job} is {state} {when} the kill, want Running")

    running("before")
    s.suite.metacontroller.kill()
    try:
        running("right after")
        time.sleep(3)
    finally:
        s.suite.metacontroller.start(s.suite.mc_extra)


def scenario_metacontroller_restarts(s):
    k, ns, name = s.k, s.ns, "mig"
    s.step("a Database (15, medium, Snapshot)")
    k.apply(database(ns, name, "15", "medium"))
    db_running(s, name, 2, "15")
    vols = volumes(s, name)
    s.step("upgrade to 16; Metacontroller killed while the restore Job runs, then restarted")
    slow = s.stage(f"{name}-upgrade-16", "succeed", delay_ms=10000)
    k.patch("Database", ns, name, {"spec": {"version": "16"}})
    s.wait("the restore Job", lambda: need(s.job(f"{name}-upgrade-16"), "not yet"), timeout=180)
    kill_while_running(s, f"{name}-upgrade-16")
    db_running(s, name, 2, "16", timeout=240)
    s.unstage(slow)
    same_volumes(s, name, vols)
    for job in (f"{name}-pre-upgrade-16", f"{name}-upgrade-16"):
        n = len(s.rec.creations_of("Job", ns, job))
        s.expect(n == 1, f"job {job} created {n} times")
    s.step("delete under Snapshot; Metacontroller killed while the snapshot runs, then restarted")
    slow = s.stage(f"{name}-snapshot", "succeed", delay_ms=10000)
    k.delete("Database", ns, name)
    s.wait("the snapshot Job", lambda: need(s.job(f"{name}-snapshot"), "not yet"), timeout=120)
    kill_while_running(s, f"{name}-snapshot")
    try:
        db_gone(s, name)
    finally:
        s.unstage(slow)
    n = len(s.rec.creations_of("Job", ns, f"{name}-snapshot"))
    s.expect(n == 1, f"snapshot job created {n} times")

