"""Backups and a restore on real PostgreSQL in the real loop (issue 33):
the backup CronJob's Jobs and the bootstrap's restore Job run as processes
on proc-node-0, against a real S3-compatible server.

dbrealbackup: a real S3 server, versitygw (build-tools.sh; buckets as
directories), in the node's network namespace, on the node's address,
which every pod routes to, checking every request's signature; the aws-cli image's stand-in is the AWS CLI v1 (build-tools.sh).
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
application user, and `status.restoredFrom` names the dump. The first,
given a row more, is deleted under Snapshot: its snapshot Job dumps it
into the bucket before its volume goes; created again from its own name
(`spec.bootstrap.database` naming itself), it serves every row, the last
one too, from the snapshot. Both are then deleted with their volumes.
Before its backups, the first turns on WAL archiving
(`spec.backup.archive`): its instance restarts with the archiver sidecar,
whose barman-cloud stores the WAL segments in the same bucket; the
sidecar then takes the base backups the hook asks for (the schedule's
first at once, then one asked for by annotation) into the archive.
Once the first is deleted with every volume, two Databases recover from
its archive side by side (`spec.bootstrap.archive`): one to the end of the
archive, with every row, the last one too; one to a time noted a second
before the last row's commit, with exactly the rows committed before it.

Run it with OPSHOOKS_E2E_PROC_NODE=1 tests/e2e/loop.sh --only dbrealbackup."""

import base64
import contextlib
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

from harness import need
from kube import condition
from scenarios.database import database, db_gone, db_running, old_version_serving, upgrading_reason
from scenarios.dbreal import POOL, POOL_KEY, TOLERATION, app_login, fault, node_ns, node_pods_said, on_proc_node, on_the_node, psql
from scenarios.dbrealfault import superuser

# The node's own address in its network namespace (procnet.py's NODE_IP).
NODE_IP = "10.89.0.1"
# One server per scenario: they run side by side in the node's namespace.
S3_PORTS = {"dbrealbackup": 19000, "dbrealupgrade": 19001, "dbrealcatchup": 19002}
BUCKET = "e2e-real-backups"
ACCESS_KEY = "e2e-access-key"
SECRET_KEY = "e2e-secret-key-not-for-logs"
# How long a new instance may take to run: kube-scheduler 1.34 sometimes
# parks a pod whose claim the hostpath provisioner binds a moment after
# its first try ("unbound immediate PersistentVolumeClaims") until its
# five-minute flush of unschedulable pods (seen once here).
PLACED = 420


class S3Server:
    """A real S3 server, versitygw (build-tools.sh), in the node's network
    namespace: buckets as directories under the suite's directory, the
    scenario's keys as its root user's (every request signed with them).
    `down()` stops it (connections refused, as a store that is down), `up()`
    starts it again over the same buckets."""

    def __init__(self, s, scenario):
        self.s = s
        self.port = S3_PORTS[scenario]
        self.endpoint = f"http://{NODE_IP}:{self.port}"
        self.root = f"{s.suite.dir}/s3-{s.ns}"
        os.makedirs(self.root, exist_ok=True)
        self.log = open(f"{s.suite.dir}/versitygw-{s.ns}.log", "a")
        self.proc = None

    def up(self):
        s = self.s
        self.proc = proc = subprocess.Popen(
            ["ip", "netns", "exec", node_ns(s), f"{s.suite.tools}/versitygw", "--port", f"{NODE_IP}:{self.port}", "--access", ACCESS_KEY, "--secret", SECRET_KEY, "--quiet", "posix", self.root],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

        def answers():
            code, out = s3(s, self.endpoint, "c.list_buckets()")
            need(proc.poll() is None, f"versitygw exited {proc.returncode}")
            need(code == 0, f"versitygw not answering yet: {out[-200:]}")

        s.wait(f"versitygw's S3 server on {self.endpoint}", answers, 60, every=0.5)

    def down(self):
        if self.proc is None:
            return
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@contextlib.contextmanager
def s3_server(s, scenario):
    """An S3Server, up, stopped after."""
    server = S3Server(s, scenario)
    try:
        server.up()
        yield server
    finally:
        server.down()
        server.log.close()


def s3(s, endpoint, code, timeout=30):
    """Python `code` with boto3's client `c` for the server, run on the node
    (killed after `timeout` seconds)."""
    prelude = (
        "import boto3; "
        f"c = boto3.client('s3', endpoint_url='{endpoint}', region_name='us-east-1', "
        f"aws_access_key_id='{ACCESS_KEY}', aws_secret_access_key='{SECRET_KEY}'); "
    )
    return on_the_node(s, [sys.executable, "-c", prelude + code], timeout=timeout)


def placed(db):
    db["spec"]["affinity"] = {"nodeSelector": {POOL_KEY: POOL}, "tolerations": [TOLERATION]}
    return db


def bucket_and_keys(s, endpoint, prefix):
    """The bucket and the keys' Secret `s3-creds`: the destination under
    `prefix`."""
    code, out = s3(s, endpoint, f"c.create_bucket(Bucket='{BUCKET}')")
    need(code == 0, f"create_bucket: {out}")
    s.k.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3-creds", "namespace": s.ns},
            "stringData": {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY},
        }
    )
    return {"s3Bucket": BUCKET, "s3Prefix": prefix, "endpoint": endpoint, "credentialsSecret": "s3-creds"}


def running(s, db):
    """`db` (a small Database on 15) applied and running: its read-write
    Service's address and its application login."""
    name = db["metadata"]["name"]
    s.k.apply(db)
    db_running(s, name, 1, "15", timeout=PLACED)
    cip = s.k.get("Service", s.ns, name)["spec"]["clusterIP"]
    login = s.wait(f"{name}'s application login", lambda: app_login(s, name), 30)
    return cip, login


def with_rows(s, name, policy, destination, rows):
    """A small Database on 15 placed on the process node, backups off, and
    `rows` rows (n = 1..rows) acknowledged in its table `acked`: its
    read-write Service's address and the application login."""
    db = placed(database(s.ns, name, "15", "small", policy=policy))
    db["spec"]["backup"] = {"enabled": False, "destination": destination}
    cip, login = running(s, db)

    def table():
        code, out = psql(s, cip, login, "CREATE TABLE IF NOT EXISTS acked (n int PRIMARY KEY, note text)")
        need(code == 0, f"psql through {cip}: {out}")

    s.wait(f"a connection through {cip}", table, 60, every=1)
    code, out = psql(s, cip, login, f"INSERT INTO acked SELECT n, 'row ' || n FROM generate_series(1, {rows}) n RETURNING 1")
    s.expect(code == 0 and len(out.split()) == rows, f"{rows} rows acknowledged: {code} {out[-200:]}")
    return cip, login


def rows_read_back(s, db, source):
    """`db` applied and running: its rows' count and sum and whether its
    user owns the table, read through its read-write Service as its
    application user, and its status."""
    name = db["metadata"]["name"]
    cip, login = running(s, db)

    def read():
        code, out = psql(s, cip, login, "SELECT count(*), sum(n), pg_get_userbyid(relowner) = current_user FROM acked JOIN pg_class ON relname = 'acked' GROUP BY relowner")
        need(code == 0, f"psql through {cip}: {out}")
        return out

    out = s.wait(f"{source}'s rows read back from {name}", read, 60, every=1)
    return out, s.parent("Database", name).get("status") or {}


def restored(s, name, source, destination):
    """A small Database `name` created from `source`'s newest dump: its
    rows as rows_read_back reads them (its own application user must own
    the table), and its status."""
    db = placed(database(s.ns, name, "15", "small", policy="Delete"))
    db["spec"].pop("backup")
    db["spec"]["bootstrap"] = {"database": source, "destination": destination}
    return rows_read_back(s, db, source)


def keys_in(s, endpoint, prefix):
    """The bucket's keys under `prefix`, sorted."""
    code, out = s3(s, endpoint, f"print('\\n'.join(o['Key'] for o in c.list_objects_v2(Bucket='{BUCKET}', Prefix='{prefix}').get('Contents', [])))")
    need(code == 0, f"list {prefix}: {out}")
    return sorted(out.split())


def dumps_in(s, endpoint, prefix):
    """The dumps under `prefix` (mark.sh leaves <dump>.verified beside a
    verified one), sorted."""
    return [key for key in keys_in(s, endpoint, prefix) if key.endswith(".pgdump")]


ARCHIVE_TIMEOUT = 5
ARCHIVE_WRITES = 5


def archiving(s, cip, login, endpoint, name):
    """`spec.backup.archive` turned on for the small Database `name`, with
    timeoutSeconds ARCHIVE_TIMEOUT: its instance restarts with the archiver
    sidecar (barman-cloud's stand-in, build-tools.sh) and `Archiving` turns
    True. Then ARCHIVE_WRITES single-row commits, one after another, at
    different points of archive_timeout's cycle: each one's WAL segment
    must reach the bucket (under
    <prefix>archive/<name>-<uid>-pg15/wals/) by archive_timeout's switch and the
    upload. The seconds from each commit's acknowledgement to its segment
    in the bucket: the recovery point through the Database, were every
    volume lost at that moment."""
    s.k.patch("Database", s.ns, name, {"spec": {"backup": {"archive": {"timeoutSeconds": ARCHIVE_TIMEOUT}}}})

    def on():
        db = s.parent("Database", name)
        c = condition(db, "Archiving") or {}
        need(c.get("status") == "True", f"Archiving {c.get('status')} {c.get('reason')}: {c.get('message')}")

    s.wait("Archiving True: the primary runs the archiver", on, PLACED, every=2)
    db_running(s, name, 1, "15", timeout=PLACED)
    code, out = psql(s, cip, login, "CREATE TABLE IF NOT EXISTS wal_probe (at timestamptz DEFAULT now())")
    need(code == 0, f"psql through {cip}: {out}")
    delays = []
    for n in range(ARCHIVE_WRITES):
        # Each write waits for the previous one's segment, so it follows a
        # switch closely: a different pause after it each time spreads the
        # writes over archive_timeout's cycle.
        time.sleep(n * ARCHIVE_TIMEOUT / ARCHIVE_WRITES)
        delays.append(archived(s, cip, login, endpoint, name, "INSERT INTO wal_probe DEFAULT VALUES"))
    return delays


def store_down_and_back(s, store, cip, login, name):
    """The store stopped while `name` writes: its archiver reports the
    failures (status.archive.failingSince, `Archiving` False with reason
    ArchiveFailing); started again, the segments PostgreSQL kept are
    archived, the report names a newer file and `Archiving` is True again.
    The seconds each took, from the stop and from the start."""

    def archive_status():
        db = s.parent("Database", name)
        return db, (db.get("status") or {}).get("archive") or {}

    def reported():
        _, progress = archive_status()
        need(progress.get("lastArchivedWal") and not progress.get("failingSince"), f"status.archive {progress}: no file archived reported yet")
        return progress

    before = s.wait("status.archive names the last file archived", reported, 120, every=2)
    cols = s.columns("pgdb", name)
    s.expect(re.fullmatch(r"\d+m?\d*s|\d+m", cols.get("LAST ARCHIVED") or ""), f"kubectl get pgdb: {cols}, want the last archived file's age under LAST ARCHIVED")
    store.down()
    stopped = time.monotonic()

    def write():
        code, out = psql(s, cip, login, "INSERT INTO wal_probe DEFAULT VALUES")
        need(code == 0, f"psql through {cip}: {out}")

    def failing():
        write()
        db, progress = archive_status()
        c = condition(db, "Archiving") or {}
        need(c.get("reason") == "ArchiveFailing" and progress.get("failingSince"), f"Archiving {c.get('status')} {c.get('reason')}: {c.get('message')}; status.archive {progress}")
        return c, progress

    try:
        c, progress = s.wait("Archiving False (ArchiveFailing) while the store is down", failing, 180, every=3)
        failed_after = round(time.monotonic() - stopped)
        s.expect(c.get("status") == "False" and "barman-cloud-wal-archive exited" in c.get("message", ""), f"Archiving {c}: want False with the archiver's reason")
        s.expect(progress.get("reportedBy") == f"{name}-0" and progress.get("lastFailedWal"), f"status.archive {progress}: want the failure of {name}-0's archiver named")
    finally:
        store.up()
    started = time.monotonic()

    def archiving_again():
        db, progress = archive_status()
        c = condition(db, "Archiving") or {}
        need(c.get("status") == "True" and not progress.get("failingSince"), f"Archiving {c.get('status')} {c.get('reason')}; status.archive {progress}")
        need(progress.get("lastArchivedWal", "") > before["lastArchivedWal"], f"status.archive {progress}: no file newer than {before['lastArchivedWal']}")
        return progress

    after = s.wait("Archiving True again, a newer file archived", archiving_again, 240, every=3)
    return {"failing reported after": failed_after, "archiving again after": round(time.monotonic() - started), "last before": before["lastArchivedWal"], "last after": after["lastArchivedWal"]}


def base_backups(s, endpoint, name):
    """Base backups of `name` (one instance: of its primary) into the
    archive: the schedule's most recent one, asked for as soon as the
    archive is on, then one asked for by the annotation
    opshooks.io/base-backup. Each must be in the bucket, finished, under
    its name (barman-cloud's backup.info); the seconds from the archive on
    (or the annotation) to each."""
    uid = s.parent("Database", name)["metadata"]["uid"]
    base = f"real/archive/{name}-{uid}-pg15/base/"

    def stored(prefix, since):
        def done():
            code, out = s3(s, endpoint, f"""found = 'none'
for o in c.list_objects_v2(Bucket='{BUCKET}', Prefix='{base}').get('Contents', []):
    if o['Key'].endswith('/backup.info'):
        info = c.get_object(Bucket='{BUCKET}', Key=o['Key'])['Body'].read().decode()
        if 'backup_name={prefix}' in info:
            found = 'DONE' if 'status=DONE' in info else 'unfinished'
print(found)""")
            need(code == 0, f"list {base}: {out}")
            message = (condition(s.parent("Database", name), "Archiving") or {}).get("message")
            need(out.strip() == "DONE", f"base backup {prefix}... of {name} under {base}: {out.strip()}; Archiving: {message}")

        s.wait(f"a finished base backup named {prefix}... in the bucket", done, 300, every=2)
        return round(time.time() - since, 1)

    scheduled = stored("scheduled-", time.time())
    asked = time.time()
    s.k.patch("Database", s.ns, name, {"metadata": {"annotations": {"opshooks.io/base-backup": "e2e-1"}}})
    requested = stored("requested-e2e-1", asked)

    # The archiver that took it reports it: status.archive.lastBaseBackup.
    def in_status():
        newest = ((s.parent("Database", name).get("status") or {}).get("archive") or {}).get("lastBaseBackup") or {}
        need(newest.get("name") == "requested-e2e-1" and newest.get("pod") == f"{name}-0" and newest.get("endTime"), f"status.archive.lastBaseBackup {newest}, want requested-e2e-1 of {name}-0")

    s.wait("status.archive.lastBaseBackup names it", in_status, 60, every=2)
    return scheduled, requested


def base_verified(s, name):
    """`spec.backup.archive.verifySchedule` set on `name`: its CronJob
    <name>-verify-base appears, and a run started from it now (as a person
    would, kubectl create job --from) restores the newest base backup into
    a throwaway PostgreSQL beside an archiver, replays the archive over it,
    promotes, and ends (its archiver with it, after retention by a window
    of 14 days, which keeps every backup here: the Job completes).
    `BaseBackupVerified` turns True with status.lastVerifiedBaseBackup.
    The proof, and the seconds from the run's start to it."""
    s.k.patch("Database", s.ns, name, {"spec": {"backup": {"archive": {"verifySchedule": "0 6 * * 0", "retentionDays": 14}}}})
    cron = f"{name}-verify-base"
    s.wait(f"the CronJob {cron}", lambda: need(s.k.get("CronJob", s.ns, cron), f"no CronJob {cron}"), 60, every=1)
    run = f"{cron}-e2e"
    started = time.time()
    s.kubectl("create", "job", f"--from=cronjob/{cron}", run)
    s.wait_job(run, "Succeeded", timeout=300)

    def proven():
        db = s.parent("Database", name)
        proof = (db.get("status") or {}).get("lastVerifiedBaseBackup") or {}
        c = condition(db, "BaseBackupVerified") or {}
        need(c.get("status") == "True" and proof, f"BaseBackupVerified {c.get('status')} {c.get('reason')}: {c.get('message')}")
        need("retention kept" in c.get("message", ""), f"BaseBackupVerified says nothing of retention yet: {c.get('message')}")
        return proof, c["message"]

    proof, message = s.wait("BaseBackupVerified True, with its proof and retention's outcome", proven, 120, every=2)
    return proof, message, round(time.time() - started, 1)


def base_backup_ids(s, endpoint, name):
    """The ids of `name`'s finished base backups in the bucket, oldest
    first, each with its end LSN: {id: end}."""
    uid = s.parent("Database", name)["metadata"]["uid"]
    base = f"real/archive/{name}-{uid}-pg15/base/"
    code, out = s3(s, endpoint, f"""import json
found = {{}}
for o in c.list_objects_v2(Bucket='{BUCKET}', Prefix='{base}').get('Contents', []):
    if o['Key'].endswith('/backup.info'):
        info = dict(l.split('=', 1) for l in c.get_object(Bucket='{BUCKET}', Key=o['Key'])['Body'].read().decode().splitlines() if '=' in l)
        if info.get('status') == 'DONE':
            found[o['Key'].split('/')[-2]] = info.get('end_xlog')
print(json.dumps(found))""")
    need(code == 0, f"list {base}: {out}")
    return dict(sorted(json.loads(out).items()))


def lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def archived(s, cip, login, endpoint, name, sql):
    """`sql` committed through `cip`, then the seconds until the WAL segment
    that holds it is in `name`'s archive, polled on the node (at most
    60 s; the poll is given 90 s in all, its client's start included: a
    30 s limit once cut it short in CI, seven real scenarios at once). The segment that holds the commit: the one the WAL is written
    up to once the commit returned (psql sends the statements as one
    transaction unless told otherwise: the SELECT must follow the COMMIT,
    or it names the segment before the insert's)."""
    code, out = psql(s, cip, login, f"BEGIN; {sql}; COMMIT; SELECT pg_walfile_name(pg_current_wal_lsn())")
    acked = time.time()
    need(code == 0 and re.fullmatch(r"[0-9A-F]{24}", out.strip()), f"psql through {cip}: {out}")
    segment = out.strip()
    uid = s.parent("Database", name)["metadata"]["uid"]
    key = f"real/archive/{name}-{uid}-pg15/wals/{segment[:16]}/{segment}"
    code, out = s3(s, endpoint, f"""import time
while not c.list_objects_v2(Bucket='{BUCKET}', Prefix='{key}').get('Contents') and time.time() < {acked + 60}:
    time.sleep(0.2)
print(time.time() if c.list_objects_v2(Bucket='{BUCKET}', Prefix='{key}').get('Contents') else 'missing')""",
               timeout=90)
    need(code == 0, f"list {key}: {out}")
    need(out.strip() != "missing", f"the commit's segment {segment} of {name} is not in the bucket 60 s after its commit")
    return round(float(out.strip()) - acked, 1)


def recovering(s, name, folder, destination, target_time=None):
    """A small Database `name` recovering from the WAL archive `folder`
    (spec.bootstrap.archive) to `target_time`, or to its end, as the
    source's user and database, applied: it and when it was."""
    db = placed(database(s.ns, name, "15", "small", policy="Delete"))
    db["spec"]["backup"] = {"enabled": False, "destination": destination, "archive": {"timeoutSeconds": ARCHIVE_TIMEOUT}}
    db["spec"]["user"] = "src"
    db["spec"]["databaseName"] = "src"
    db["spec"]["bootstrap"] = {"archive": {"folder": folder}}
    if target_time:
        db["spec"]["bootstrap"]["archive"]["targetTime"] = target_time
    s.k.apply(db)
    return db, time.time()


def recovered(s, recovery, folder):
    """The recovering Database's rows as rows_read_back reads them, its
    status, and the seconds from its creation to that answer."""
    db, started = recovery
    out, status = rows_read_back(s, db, folder)
    return out, status, round(time.time() - started, 1)


def server_time(s, cip, login):
    """The server's clock now, as an ISO 8601 time in UTC."""
    code, out = psql(s, cip, login, "SELECT extract(epoch FROM clock_timestamp())")
    need(code == 0, f"psql through {cip}: {out}")
    return dt.datetime.fromtimestamp(float(out.strip()), dt.timezone.utc).isoformat()


def scenario_real_backup_restore(s):
    k, ns = s.k, s.ns
    on_proc_node(s)
    with s3_server(s, "dbrealbackup") as store:
        endpoint = store.endpoint
        s.step("a bucket on the S3 server, and the keys' Secret")
        destination = bucket_and_keys(s, endpoint, "real/")

        s.step("a small Database (15) with a destination, backups off; rows written")
        cip, login = with_rows(s, "src", "Snapshot", destination, 500)

        s.step("WAL archiving on (spec.backup.archive, 5 s): the instance restarts with the archiver, and segments reach the bucket")
        delays = archiving(s, cip, login, endpoint, "src")
        print(f"archive: seconds from a commit to its WAL segment in the bucket (archive_timeout {ARCHIVE_TIMEOUT} s): {delays}", flush=True)

        s.step("base backups into the archive: the schedule's first one at once, then one asked for by annotation, which status.archive names")
        scheduled, requested = base_backups(s, endpoint, "src")
        print(f"archive: base backups stored, seconds after the step began: scheduled {scheduled}, requested by annotation {requested}", flush=True)

        # After the base backups: one the outage cut would be tried again
        # only after ten minutes.
        s.step("the S3 server down: Archiving turns False (ArchiveFailing) with the archiver's reason; back up: the WAL written meanwhile is archived, status.archive names a newer file, and Archiving is True again")
        outage = store_down_and_back(s, store, cip, login, "src")
        print(f"archive: store down, then up: {outage}", flush=True)

        s.step("the newest base backup proven to restore (spec.backup.archive.verifySchedule; a run started now): restored in a throwaway PostgreSQL, the archive replayed over it, status says which and how far")
        # A commit after the newest base backup, archived: the replay must
        # reach it.
        before_commit = server_time(s, cip, login)
        archived(s, cip, login, endpoint, "src", "INSERT INTO wal_probe DEFAULT VALUES")
        backups = base_backup_ids(s, endpoint, "src")
        proof, message, took = base_verified(s, "src")
        print(f"archive: base backup verified {took} s after the run's start: {proof}", flush=True)
        s.expect(f"{len(backups)} base backups kept" in message and "and 0 deleted" in message, f"BaseBackupVerified: {message}, want all {len(backups)} base backups kept by a window of 14 days")
        # The window starts where the oldest base backup ended, and
        # kubectl get pgdb shows how far back that is.
        s.expect(proof.get("recoverableFrom") and dt.datetime.fromisoformat(proof["recoverableFrom"]) <= dt.datetime.fromisoformat(proof["backupEnd"]), f"lastVerifiedBaseBackup {proof}: the window's start is not at or before the newest backup's end")
        cols = s.columns("pgdb", "src")
        s.expect(re.fullmatch(r"\d+m?\d*s|\d+m", cols.get("RECOVERABLE FROM") or ""), f"kubectl get pgdb: {cols}, want the archive's window as an age under RECOVERABLE FROM")
        newest = list(backups)[-1] if backups else None
        s.expect(proof.get("id") == newest, f"lastVerifiedBaseBackup {proof}, want the newest base backup of {backups}")
        s.expect(newest and lsn(proof.get("replayedTo") or "0/0") >= lsn(backups[newest]), f"lastVerifiedBaseBackup {proof} replayed to before its backup's end {backups.get(newest)}")
        last_commit = proof.get("lastCommit")
        s.expect(last_commit and dt.datetime.fromisoformat(last_commit) >= dt.datetime.fromisoformat(before_commit), f"lastVerifiedBaseBackup {proof}: the replay did not reach the commit made after {before_commit}")

        s.step("backups on, every minute: the CronJob's Job dumps through the read-write Service and uploads")
        k.patch("Database", ns, "src", {"spec": {"backup": {"enabled": True, "schedule": "* * * * *", "verify": {"afterEachBackup": True}}}})

        def backed_up():
            st = (s.parent("Database", "src").get("status") or {})
            need(st.get("lastBackupTime"), f"no lastBackupTime yet; jobs: {[j['metadata']['name'] for j in k.list('Job', ns)]}")
            keys = dumps_in(s, endpoint, "real/src-")
            need(keys, "no dump of src in the bucket")
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
        # Backups run every minute: the proof may be of a dump newer than
        # the first (seen once, the first's verification overtaken), so it
        # is checked against the bucket as it is now.
        keys = dumps_in(s, endpoint, "real/src-")
        s.expect(proof.get("key") in keys, f"lastVerifiedBackup {proof}, want one of {keys}")
        s.expect((proof.get("tables") or 0) >= 1 and (proof.get("rows") or 0) >= 500, f"lastVerifiedBackup counts {proof}, want the table and its 500 rows")
        k.patch("Database", ns, "src", {"spec": {"backup": {"enabled": False}}})

        s.step("a second Database restored from it (spec.bootstrap.database: src)")
        out, st = restored(s, "dst", "src", destination)
        s.expect(out == "500|125250|t", f"dst answers {out!r}, want 500 rows, the table its user's")
        # The newest of src's scheduled dumps (src-2…, not the snapshot):
        # one more may have been taken before the schedule stopped (each
        # holds the same 500 rows).
        dumps = dumps_in(s, endpoint, "real/src-2")
        s.expect(dumps and (st.get("restoredFrom") or {}).get("object") == f"s3://{BUCKET}/{dumps[-1]}", f"status.restoredFrom {st.get('restoredFrom')}, want the newest of {dumps}")

        s.step("a time noted, then a row more, archived; then src deleted under Snapshot: the snapshot Job dumps it before its volume goes")
        # The time a recovery stops at: after the 500 rows, a second before
        # row 501's commit (the server's clock, as PostgreSQL compares it).
        target = server_time(s, cip, login)
        time.sleep(1)
        delay = archived(s, cip, login, endpoint, "src", "INSERT INTO acked VALUES (501, 'after the backup')")
        print(f"archive: row 501's segment in the bucket {delay} s after its commit", flush=True)
        folder = f"src-{s.parent('Database', 'src')['metadata']['uid']}-pg15"
        k.delete("Database", ns, "src")
        db_gone(s, "src", timeout=240)
        snapshots = dumps_in(s, endpoint, "real/src-snapshot-")
        s.expect(len(snapshots) == 1, f"one snapshot of src in the bucket: {snapshots}")

        s.step("every volume of src gone: Databases recovered from its WAL archive (spec.bootstrap.archive), side by side: to its end, every row, the last one too; to the time noted, exactly the rows before it")
        to_end = recovering(s, "pitr", folder, destination)
        to_time = recovering(s, "pitrtime", folder, destination, target)
        out, st, took = recovered(s, to_end, folder)
        print(f"archive: recovered to the end of the archive, answering {took} s after its creation", flush=True)
        s.expect(out == "501|125751|t", f"pitr answers {out!r}, want 501 rows, the last one archived before src was deleted")
        restored_from = (st.get("restoredFrom") or {}).get("object") or ""
        s.expect(restored_from.endswith(f"/real/archive/{folder} to the end of the archive"), f"status.restoredFrom {st.get('restoredFrom')}, want the archive {folder}")
        out, st, took = recovered(s, to_time, folder)
        print(f"archive: recovered to {target}, answering {took} s after its creation (beside the other)", flush=True)
        s.expect(out == "500|125250|t", f"pitrtime answers {out!r}, want the 500 rows committed before {target}, not row 501")
        restored_from = (st.get("restoredFrom") or {}).get("object") or ""
        s.expect(restored_from.endswith(f"/real/archive/{folder} to time {target}"), f"status.restoredFrom {st.get('restoredFrom')}, want the archive {folder} to {target}")
        k.delete("Database", ns, "pitr")
        k.delete("Database", ns, "pitrtime")

        s.step("src created again from its own snapshot (spec.bootstrap.database: src): every row, the last one too")
        out, st = restored(s, "src", "src", destination)
        s.expect(out == "501|125751|t", f"src answers {out!r}, want 501 rows (the snapshot's, not the backup's 500)")
        s.expect((st.get("restoredFrom") or {}).get("object") == f"s3://{BUCKET}/{snapshots[0]}", f"status.restoredFrom {st.get('restoredFrom')}, want the snapshot {snapshots}")

        s.step("delete them (policy Delete)")
        k.delete("Database", ns, "dst")
        k.delete("Database", ns, "src")
        db_gone(s, "pitr", timeout=180)
        db_gone(s, "pitrtime", timeout=180)
        db_gone(s, "dst", timeout=180)
        db_gone(s, "src", timeout=180)


def scenario_real_major_upgrade(s):
    """dbrealupgrade: a small Database on PostgreSQL 15 upgraded to 18, the
    newest major, for real, three majors in one step. The process node's
    postgres:18 runs zonky's PostgreSQL 18 server binaries (build-tools.sh;
    the machine's client tools after them): the pre-upgrade Job dumps 15
    into the bucket, the instances stop, and the upgrade Job fails (a fault
    the node injects): 15 serves again with every row, Upgrading says
    UpgradeFailed. With the fault gone and the failed Job deleted, the
    upgrade Job initializes 18 beside the old data and restores the dump,
    and the instance starts on 18 with every row, its application user
    logging in with the password it had."""
    k, ns = s.k, s.ns
    on_proc_node(s)
    with s3_server(s, "dbrealupgrade") as store:
        endpoint = store.endpoint
        s.step("a bucket and the keys' Secret; a small Database (15), rows written")
        destination = bucket_and_keys(s, endpoint, "up/")
        cip, login = with_rows(s, "up", "Delete", destination, 300)

        def served():
            cip = k.get("Service", ns, "up")["spec"]["clusterIP"]
            code, out = psql(s, cip, login, "SELECT current_setting('server_version_num')::int / 10000, count(*), sum(n) FROM acked")
            need(code == 0, f"psql through {cip}: {out}")
            return out

        s.step("spec.version 18 with the upgrade Job failing (a fault on the node): 15 serves again, every row, Upgrading says so")
        failing = fault(s, "up-upgrade-18", "fail")
        k.patch("Database", ns, "up", {"spec": {"version": "18"}})

        said = condition(upgrading_reason(s, "up", "UpgradeFailed", timeout=420), "Upgrading")
        s.expect("15 serves again" in said.get("message", ""), f"Upgrading says {said.get('message')!r}")
        s.wait("15 serving again", lambda: old_version_serving(s, "up", 1, "15"), 300, every=1)
        out = s.wait("every row read back from PostgreSQL 15 after the failed upgrade", served, 120, every=1)
        s.expect(out == "15|300|45150", f"after the failed upgrade the Database answers {out!r}, want 15|300|45150")

        s.step("the fault gone and the failed Job deleted: the upgrade is tried again, the instance on 18")
        os.remove(failing)
        k.delete("Job", ns, "up-upgrade-18")
        db_running(s, "up", 1, "18", timeout=600)

        out = s.wait("every row read back from PostgreSQL 18, as the same user with the same password", served, 120, every=1)
        s.expect(out == "18|300|45150", f"the upgraded Database answers {out!r}, want 18|300|45150")
        pre = dumps_in(s, endpoint, "up/up-pre-upgrade-18-")
        s.expect(len(pre) == 1, f"the pre-upgrade dump in the bucket: {pre}")

        s.step("delete it (policy Delete)")
        k.delete("Database", ns, "up")
        db_gone(s, "up", timeout=180)


def scenario_real_catch_up(s):
    """A standby the primary no longer has WAL for catches up from the
    archive (issue 35): a medium Database (15, a primary and a standby,
    1Gi volumes: wal_keep_size 107 MB) archiving every 5 s; its standby
    stopped (its pod deleted, the node holding the new one's containers at
    their start) while the primary writes and switches past what it keeps
    and checkpoints, until the segment the standby needs next is gone from
    the primary's pg_wal; released, the standby replays that WAL from the
    archive through its own sidecar (its server's log says "restored log
    file"), then streams again and holds every row."""
    k, ns, name = s.k, s.ns, "cu"
    on_proc_node(s)
    with s3_server(s, "dbrealcatchup") as store:
        s.step("a medium Database (15) archiving its WAL to the S3 server (spec.backup.archive, 5 s)")
        destination = bucket_and_keys(s, store.endpoint, "catchup/")
        db = placed(database(ns, name, "15", "medium", policy="Delete"))
        db["spec"]["backup"] = {"enabled": False, "destination": destination, "archive": {"timeoutSeconds": ARCHIVE_TIMEOUT}}
        k.apply(db)
        db_running(s, name, 2, "15", timeout=PLACED)
        su = superuser(s, name)

        def ip(pod):
            found = ((k.get("Pod", ns, pod) or {}).get("status") or {}).get("podIP")
            need(found, f"{pod} has no address")
            return found

        primary = (s.parent("Database", name).get("status") or {}).get("currentPrimary")
        s.expect(primary in (f"{name}-0", f"{name}-1"), f"currentPrimary {primary}")
        standby = f"{name}-1" if primary == f"{name}-0" else f"{name}-0"

        def sql(pod, text):
            code, out = psql(s, ip(pod), su, text)
            need(code == 0, f"{pod}: {text}: {out}")
            return out

        s.wait("a table on the primary, on the standby too", lambda: (sql(primary, "CREATE TABLE IF NOT EXISTS caught (n int)"), need(sql(standby, "SELECT count(*) FROM pg_class WHERE relname = 'caught'") == "1", "not replayed yet")), 60, every=1)

        s.step("the standby stopped; the primary writes and switches past its wal_keep_size and checkpoints: the WAL the standby needs is only in the archive")
        replayed = sql(standby, "SELECT pg_last_wal_replay_lsn()")
        needed = sql(primary, f"SELECT pg_walfile_name('{replayed}')")
        held = fault(s, standby, "delay")
        k.delete("Pod", ns, standby)
        rows = 0

        def recycled():
            nonlocal rows
            for _ in range(4):
                rows += 1
                sql(primary, f"INSERT INTO caught VALUES ({rows})")
                sql(primary, "SELECT pg_switch_wal()")
            sql(primary, "CHECKPOINT")
            left = sql(primary, f"SELECT count(*) FROM pg_ls_waldir() WHERE name = '{needed}'")
            archived = sql(primary, "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver")
            need(left == "0", f"{needed} still in the primary's pg_wal (archived up to {archived})")

        s.wait(f"{needed} recycled on the primary", recycled, 300, every=1)
        print(f"archive: {rows} segments switched until {needed} left the primary", flush=True)

        s.step("the standby released: it replays the WAL from the archive through its sidecar, then streams again with every row")
        os.remove(held)
        started = time.monotonic()

        def caught_up():
            need(sql(standby, "SELECT count(*) FROM caught") == str(rows), f"{standby} has not every row yet")
            need(sql(standby, "SELECT status FROM pg_stat_wal_receiver") == "streaming", f"{standby} does not stream")

        s.wait(f"{standby} caught up and streaming", caught_up, PLACED, every=2)
        took = round(time.monotonic() - started)
        said = node_pods_said(s, standby).get(standby, {})
        log = said.get("postgres", "")
        s.expect("restored log file" in log, f"{standby}'s server never restored a file from the archive: {log[-1500:]}")
        print(f"archive: {standby} caught up from the archive and streams again {took} s after its release", flush=True)
        db_running(s, name, 2, "15", timeout=PLACED)
