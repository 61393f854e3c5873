"""Backups and a restore on real PostgreSQL in the real loop (issue 33):
the backup CronJob's Jobs and the bootstrap's restore Job run as processes
on proc-node-0, against a real S3-compatible server.

dbrealbackup: moto's standalone S3 server (the one tests/scripts runs) in
the node's network namespace, on the node's address, which every pod
routes to; the aws-cli image's stand-in is the AWS CLI v1 (build-tools.sh).
A small Database on PostgreSQL 15 takes rows, then its backups are turned
on with a schedule of every minute: the kube-controller-manager's CronJob
controller starts a Job, whose `dump` container runs pg_dump against the
primary through the read-write Service (TLS) and whose `upload` container
puts the dump into the bucket; the Database's status records the backup.
Each backup is verified (`verify.afterEachBackup`): the verify Job
restores the dump into a scratch server in its pod and counts the tables
and rows, and `BackupVerified` turns True with that proof.
A second Database is created from it (`spec.bootstrap.database`): its
restore Job chooses the newest dump with the AWS CLI, creates the
application user and database, and restores into its primary before the
read-write Service exists; every acknowledged row of the first is read
back through the second's read-write Service as the second's own
application user, and `status.restoredFrom` names the dump. Both are then
deleted with their volumes.

Run it with OPSHOOKS_E2E_PROC_NODE=1 tests/e2e/loop.sh --only dbrealbackup."""

import base64
import contextlib
import subprocess
import sys
import urllib.request

from harness import need
from kube import condition
from scenarios.database import database, db_gone, db_running
from scenarios.dbreal import POOL, POOL_KEY, TOLERATION, app_login, node_ns, on_proc_node, on_the_node, psql

# The node's own address in its network namespace (procnet.py's NODE_IP).
NODE_IP = "10.89.0.1"
S3_PORT = 19000
BUCKET = "e2e-real-backups"
ACCESS_KEY = "e2e-access-key"
SECRET_KEY = "e2e-secret-key-not-for-logs"


@contextlib.contextmanager
def s3_server(s):
    """moto's S3 server in the node's network namespace, stopped after."""
    endpoint = f"http://{NODE_IP}:{S3_PORT}"
    log = open(f"{s.suite.dir}/moto-{s.ns}.log", "w")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", node_ns(s), sys.executable, "-m", "moto.server", "-H", NODE_IP, "-p", str(S3_PORT)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def up():
            code, out = on_the_node(s, [sys.executable, "-c", f"import urllib.request; urllib.request.urlopen('{endpoint}/moto-api/', timeout=2)"])
            need(proc.poll() is None, f"moto exited {proc.returncode}")
            need(code == 0, f"moto not answering yet: {out[-200:]}")

        s.wait(f"moto's S3 server on {endpoint}", up, 60, every=0.5)
        yield endpoint
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        if proc.poll() is None:
            proc.kill()
        log.close()


def s3(s, endpoint, code):
    """Python `code` with boto3's client `c` for the server, run on the node."""
    prelude = (
        "import boto3; "
        f"c = boto3.client('s3', endpoint_url='{endpoint}', region_name='us-east-1', "
        f"aws_access_key_id='{ACCESS_KEY}', aws_secret_access_key='{SECRET_KEY}'); "
    )
    return on_the_node(s, [sys.executable, "-c", prelude + code])


def placed(db):
    db["spec"]["affinity"] = {"nodeSelector": {POOL_KEY: POOL}, "tolerations": [TOLERATION]}
    return db


def scenario_real_backup_restore(s):
    k, ns = s.k, s.ns
    on_proc_node(s)
    with s3_server(s) as endpoint:
        s.step(f"a bucket on the S3 server, and the keys' Secret")
        code, out = s3(s, endpoint, f"c.create_bucket(Bucket='{BUCKET}')")
        need(code == 0, f"create_bucket: {out}")
        k.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "s3-creds", "namespace": ns},
                "stringData": {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY},
            }
        )
        destination = {"s3Bucket": BUCKET, "s3Prefix": "real/", "endpoint": endpoint, "credentialsSecret": "s3-creds"}

        s.step("a small Database (15) with a destination, backups off; rows written")
        src = placed(database(ns, "src", "15", "small", policy="Delete"))
        src["spec"]["backup"] = {"enabled": False, "destination": destination}
        k.apply(src)
        db_running(s, "src", 1, "15", timeout=300)
        cip = k.get("Service", ns, "src")["spec"]["clusterIP"]
        login = s.wait("src's application login", lambda: app_login(s, "src"), 30)

        def table():
            code, out = psql(s, cip, login, "CREATE TABLE IF NOT EXISTS acked (n int PRIMARY KEY, note text)")
            need(code == 0, f"psql through {cip}: {out}")

        s.wait(f"a connection through {cip}", table, 60, every=1)
        code, out = psql(s, cip, login, "INSERT INTO acked SELECT n, 'row ' || n FROM generate_series(1, 500) n RETURNING 1")
        s.expect(code == 0 and len(out.split()) == 500, f"500 rows acknowledged: {code} {out[-200:]}")

        s.step("backups on, every minute: the CronJob's Job dumps through the read-write Service and uploads")
        k.patch("Database", ns, "src", {"spec": {"backup": {"enabled": True, "schedule": "* * * * *", "verify": {"afterEachBackup": True}}}})

        def backed_up():
            st = (s.parent("Database", "src").get("status") or {})
            need(st.get("lastBackupTime"), f"no lastBackupTime yet; jobs: {[j['metadata']['name'] for j in k.list('Job', ns)]}")
            code, out = s3(s, endpoint, f"print('\\n'.join(o['Key'] for o in c.list_objects_v2(Bucket='{BUCKET}', Prefix='real/').get('Contents', [])))")
            need(code == 0, f"list: {out}")
            keys = [key for key in out.split() if key.startswith("real/src-") and key.endswith(".pgdump")]
            need(keys, f"no dump of src in the bucket: {out!r}")
            return st["lastBackupTime"], keys

        at, keys = s.wait("a backup recorded and its dump in the bucket", backed_up, 240, every=2)
        print(f"backup at {at}: {keys}", flush=True)

        s.step("the verify Job restores the dump into a scratch server and counts what came back")

        def verified():
            db = s.parent("Database", "src")
            st = db.get("status") or {}
            proof = st.get("lastVerifiedBackup") or {}
            c = condition(db, "BackupVerified") or {}
            need(c.get("status") == "True" and proof, f"BackupVerified {c.get('status')} {c.get('reason')}: {c.get('message')}")
            return proof

        proof = s.wait("BackupVerified True, with its proof", verified, 240, every=2)
        print(f"verified: {proof}", flush=True)
        s.expect(proof.get("key") in keys, f"lastVerifiedBackup {proof}, want one of {keys}")
        s.expect((proof.get("tables") or 0) >= 1 and (proof.get("rows") or 0) >= 500, f"lastVerifiedBackup counts {proof}, want the table and its 500 rows")
        k.patch("Database", ns, "src", {"spec": {"backup": {"enabled": False}}})

        s.step("a second Database restored from it (spec.bootstrap.database: src)")
        dst = placed(database(ns, "dst", "15", "small", policy="Delete"))
        dst["spec"].pop("backup")
        dst["spec"]["bootstrap"] = {"database": "src", "destination": destination}
        k.apply(dst)
        db_running(s, "dst", 1, "15", timeout=300)
        dst_ip = k.get("Service", ns, "dst")["spec"]["clusterIP"]
        dst_login = s.wait("dst's application login", lambda: app_login(s, "dst"), 30)

        def restored():
            code, out = psql(s, dst_ip, dst_login, "SELECT count(*), sum(n), pg_get_userbyid(relowner) FROM acked JOIN pg_class ON relname = 'acked' GROUP BY relowner")
            need(code == 0, f"psql through {dst_ip}: {out}")
            return out

        out = s.wait("every acknowledged row of src read back from dst", restored, 60, every=1)
        s.expect(out == f"500|125250|{dst_login[0]}", f"dst answers {out!r}, want 500 rows owned by {dst_login[0]}")
        st = s.parent("Database", "dst").get("status") or {}
        key = (st.get("restoredFrom") or {}).get("object", "")
        s.expect(key in [f"s3://{BUCKET}/{k}" for k in keys], f"status.restoredFrom {st.get('restoredFrom')}, want one of {keys}")

        s.step("delete both (policy Delete)")
        k.delete("Database", ns, "dst")
        k.delete("Database", ns, "src")
        db_gone(s, "dst", timeout=180)
        db_gone(s, "src", timeout=180)
