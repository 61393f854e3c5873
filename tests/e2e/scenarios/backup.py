"""The Backup's whole life in the real loop, against a PostgreSQL StatefulSet:
schedule changes, the target gone and back, a run that succeeds and one that
fails."""

import time

from harness import GROUP, need
from kube import condition, controller_uid


def postgres_statefulset(ns, name, replicas=1):
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "postgres",
                            "image": "postgres:16",
                            "env": [
                                {
                                    "name": "POSTGRES_PASSWORD",
                                    "valueFrom": {"secretKeyRef": {"name": f"{name}-secret", "key": "password"}},
                                },
                                {"name": "POSTGRES_USER", "value": "app"},
                                {"name": "POSTGRES_DB", "value": "app"},
                            ],
                            "ports": [{"name": "postgres", "containerPort": 5432}],
                        }
                    ]
                },
            },
        },
    }


def backup_spec(schedule, target):
    return {
        "schedule": schedule,
        "target": {"kind": "StatefulSet", "name": target},
        "destination": {"s3Bucket": "e2e-backups", "s3Prefix": "nightly/", "credentialsSecret": "s3-creds"},
        "retentionDays": 7,
    }


def make_target(s, name):
    s.k.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-secret", "namespace": s.ns},
            "stringData": {"password": "e2e"},
        }
    )
    s.k.apply(postgres_statefulset(s.ns, name))


def backup_state(s, name, schedule, suspended, target_found, ready_reason):
    def check():
        b = s.parent("Backup", name)
        cron = s.k.get("CronJob", s.ns, f"{name}-backup")
        need(cron is not None, "CronJob not created")
        need(controller_uid(cron) == b["metadata"]["uid"], "CronJob not owned by the Backup")
        need(cron["spec"]["schedule"] == schedule, f"CronJob schedule {cron['spec']['schedule']!r}, want {schedule!r}")
        need(cron["spec"].get("suspend") == suspended, f"CronJob suspend {cron['spec'].get('suspend')}, want {suspended}")
        st = s.synced(b)
        need(st.get("cronJobName") == f"{name}-backup", f"status.cronJobName {st.get('cronJobName')}")
        found = condition(b, "TargetFound")
        need(found and found.get("status") == ("True" if target_found else "False"), f"TargetFound {found}")
        need(target_found or "suspended" in found.get("message", ""), f"TargetFound does not say the CronJob is suspended: {found}")
        ready = condition(b, "Ready")
        need(ready and ready.get("reason") == ready_reason, f"Ready {ready}, want reason {ready_reason}")
        cols = s.columns("bk", name)
        want = {"SCHEDULE": schedule, "SUSPEND": str(bool(b["spec"].get("suspend"))).lower(), "KIND": b["spec"]["target"]["kind"]}
        need(all(cols.get(k) == v for k, v in want.items()), f"kubectl get bk: {cols}, want {want}")
        return b, cron

    return s.wait(f"CronJob on {schedule!r} suspend={suspended}, status {ready_reason}", check)


def backup_run(s, name, status, cond_status):
    def check():
        b = s.parent("Backup", name)
        st = s.synced(b)
        need(st.get("lastBackupStatus") == status, f"status.lastBackupStatus {st.get('lastBackupStatus')}, want {status}")
        last = condition(b, "LastBackupSucceeded")
        need(last and last.get("status") == cond_status, f"LastBackupSucceeded {last}")
        return b

    return s.wait(f"status saying the last backup {status}", check)


def scenario_backup(s):
    k, ns, name, target = s.k, s.ns, "nightly", "pg"
    s.step("create a PostgreSQL StatefulSet and a Backup of it")
    make_target(s, target)
    k.apply({"apiVersion": GROUP, "kind": "Backup", "metadata": {"name": name, "namespace": ns}, "spec": backup_spec("0 2 * * *", target)})
    b, cron = backup_state(s, name, "0 2 * * *", False, True, "Scheduled")
    cron_uid = cron["metadata"]["uid"]
    s.expect(b["status"].get("lastBackupStatus") == "None", f"lastBackupStatus {b['status'].get('lastBackupStatus')} before any run")
    s.step("schedule change updates the CronJob in place")
    k.patch("Backup", ns, name, {"spec": {"schedule": "30 3 * * 1-5"}})
    _, cron = backup_state(s, name, "30 3 * * 1-5", False, True, "Scheduled")
    s.expect(cron["metadata"]["uid"] == cron_uid, "the CronJob was replaced")
    s.step("target deleted: CronJob kept, suspended, status says so")
    k.delete("StatefulSet", ns, target)
    _, cron = backup_state(s, name, "30 3 * * 1-5", True, False, "TargetNotFound")
    s.expect(cron["metadata"]["uid"] == cron_uid, "the CronJob was replaced")
    s.step("target recreated: CronJob resumed")
    k.apply(postgres_statefulset(ns, target))
    _, cron = backup_state(s, name, "30 3 * * 1-5", False, True, "Scheduled")
    s.expect(cron["metadata"]["uid"] == cron_uid, "the CronJob was replaced")
    s.step("a backup Job that succeeds shows in the status")
    s.kubectl("create", "job", f"--from=cronjob/{name}-backup", f"{name}-manual-1")
    s.wait_job(f"{name}-manual-1", "Succeeded")
    b = backup_run(s, name, "Succeeded", "True")
    s.expect(b["status"].get("lastBackupTime"), "status.lastBackupTime not set after a successful run")
    s.step("a backup Job that fails shows in the status")
    stage = s.stage(f"{name}-manual-2", "fail")
    try:
        time.sleep(1.1)  # a later creationTimestamp than the first run's
        s.kubectl("create", "job", f"--from=cronjob/{name}-backup", f"{name}-manual-2")
        s.wait_job(f"{name}-manual-2", "Failed", timeout=180)
        backup_run(s, name, "Failed", "False")
    finally:
        s.unstage(stage)
    s.step("delete: the CronJob goes with it")
    k.delete("Backup", ns, name)
    s.wait("Backup and CronJob gone", lambda: (s.gone("Backup", name), s.gone("CronJob", f"{name}-backup")))
