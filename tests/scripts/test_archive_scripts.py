"""Continuous WAL archiving and point-in-time recovery, run for real.

src/operators/database/archive-wal.sh (archive_command) and restore-wal.sh
(restore_command) run inside a real PostgreSQL server, as the server runs
them (`sh <mounted script> %f`); archiver.sh runs beside it as the sidecar
does, sharing the spool directory and reading the data directory, with the
real barman-cloud (requirements.txt) against moto's S3 server behind a
proxy that can refuse every connection (the store down). base-backup.sh,
pitr-fetch.sh (both the sidecar's image) and pitr-replay.sh (the
PostgreSQL image) run as `/bin/sh -c <script text>` with only their
container's environment. What the sidecar reports for the Database's
status (ARCHIVE_REPORT) goes to a stand-in API server on loopback
(tests/support/apiserver.py), which merges its patches as the real one
does.

The sidecar runs as root here and the server as `postgres` (the test's
Python, with barman-cloud, is under /root, which `postgres` cannot read);
in a pod both run as one user. So the test hands a fetched data directory
to `postgres` (chown), as that one user would own it.

A writer commits one row per transaction (a sequence number and a client
timestamp) and records which commits were acknowledged. The figures of the
first test (acknowledged commits lost, restore time) are printed, and
appended to $OPSHOOKS_RPO_REPORT when set; OPSHOOKS_RPO_RUNS repeats it,
OPSHOOKS_ARCHIVE_TIMEOUT sets archive_timeout (seconds, default 2).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import psycopg2
import pytest
from apiserver import MERGE_PATCH, ApiServer, credentials, make_ca, make_cert, status_answer  # tests/support
from kubelet import expand  # tests/support
from pods import Proxy, wait_for  # tests/support
from pyhelpers import free_port  # tests/support
from reports import parse, termination_line  # tests/support

from postgres import (  # noqa: F401 (scratch: an autouse fixture)
    BIN,
    PG_PATH,
    SCRIPTS,
    SUPERUSER_PASSWORD,
    SYSTEM_PATH,
    Cluster,
    Result,
    fresh_path,
    pg_dir,
    postgres_ids,
    run,
    scratch,
    shell_path,
)
from s3 import PY_BIN, SECRET_ACCESS_KEY, bucket, s3  # noqa: F401 (bucket, s3: fixtures)

ARCHIVE_TIMEOUT = int(os.environ.get("OPSHOOKS_ARCHIVE_TIMEOUT", "2"))
RPO_RUNS = int(os.environ.get("OPSHOOKS_RPO_RUNS", "1"))
# A commit is in the archive at most archive_timeout after it (the forced
# segment switch) plus the segment's upload (barman-cloud starting, gzip,
# the PUT) and the sidecar's polling; this allows for a slow, shared
# machine.
UPLOAD_BOUND = 10
# The store's prefix: a user's value, hostile; it must stay data.
PREFIX = "pitr 'it''s' \"q\" $(touch /tmp/pwned-archive) `x`/db"
PWNED = Path("/tmp/pwned-archive")
SERVER = "orders-db"


# --------------------------------------------------------------------------
# The store, and what runs beside the server


@dataclasses.dataclass
class Store:
    """moto's S3, reached through a proxy the test can turn off."""
    s3: object
    proxy: Proxy
    moto_port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}"

    def down(self) -> None:
        self.proxy.retarget(None)  # every new connection is closed at once

    def up(self) -> None:
        self.proxy.retarget(self.moto_port)

    def wal_names(self, bucket: str) -> list[str]:
        keys = self.s3.keys(bucket, f"{PREFIX}/{SERVER}/wals/")
        # Segments, history files and backup labels, without the .gz of barman's gzip.
        return sorted(re.sub(r"\.gz$", "", k.rsplit("/", 1)[1]) for k in keys)


@pytest.fixture(scope="module")
def store(s3):
    proxy = Proxy()
    st = Store(s3, proxy, urlparse(s3.endpoint).port)
    st.up()
    yield st
    proxy.close()
    assert not PWNED.exists(), "a store value ran as shell"


@pytest.fixture(scope="module")
def mounted(scratch) -> Path:
    """archive-wal.sh and restore-wal.sh as the ConfigMap mounts them in
    the PostgreSQL container (read-only)."""
    return config_map_mount("archive-scripts", {n: (SCRIPTS / n).read_text() for n in ("archive-wal.sh", "restore-wal.sh")})


def config_map_mount(name: str, files: dict[str, str]) -> Path:
    """`files` in a new directory, read-only as the kubelet mounts a
    ConfigMap."""
    d = fresh_path(name)
    d.mkdir()
    for key, text in files.items():
        (d / key).write_text(text)
        (d / key).chmod(0o444)
    d.chmod(0o555)
    return d


def store_env(store: Store, bucket: str, **extra: str) -> dict[str, str]:
    """The sidecar image's environment: barman-cloud on PATH, the store.
    Two tries per request (botocore reads AWS_MAX_ATTEMPTS), so that a
    store that is down fails a request in about a second, not eight."""
    home = fresh_path("sidecar-home")
    home.mkdir()
    return {
        "PATH": f"{PY_BIN}:{SYSTEM_PATH}",
        "HOME": str(home),
        "ARCHIVE_DESTINATION": f"s3://{bucket}/{PREFIX}",
        "ARCHIVE_SERVER": SERVER,
        "ARCHIVE_ENDPOINT": store.endpoint,
        "AWS_ACCESS_KEY_ID": "moto",
        "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_RETRY_MODE": "standard",
        "AWS_MAX_ATTEMPTS": "2",
        **extra,
    }


RUNNING: list = []  # sidecars and writers a test started, stopped at its end


@pytest.fixture(autouse=True)
def stop_what_runs():
    yield
    while RUNNING:
        RUNNING.pop().stop()


class Sidecar:
    """archiver.sh, as the sidecar container runs it."""

    def __init__(self, env: dict[str, str], pgdata: Path, spool: Path, command: list[str] | None = None) -> None:
        self.log = fresh_path("archiver.log")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                command or ["sh", "-c", (SCRIPTS / "archiver.sh").read_text()], executable=shell_path("dash"),
                env={**env, "PGDATA": str(pgdata), "WAL_SPOOL": str(spool)},
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=spool.parent,
                # What it creates in the spool, the server's user may write
                # and read too (in a pod, both are one user).
                preexec_fn=lambda: os.umask(0),
            )
        RUNNING.append(self)

    def stop(self, kill: bool = False) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(c: Cluster, settings: list[str], spool: Path, **env: str) -> None:
    """The server with `settings` (name=value) as its `-c` arguments,
    handing files to the sidecar through `spool`; `env`: more of its
    container's values."""
    c.port = c.port or free_port()
    opts = (f"-c listen_addresses=127.0.0.1 -c port={c.port} -c unix_socket_directories={c.sock} "
            "-c fsync=off -c full_page_writes=off -c synchronous_commit=on "
            "-c wal_level=replica -c track_commit_timestamp=on "
            + " ".join(f"-c '{setting}'" for setting in settings))
    env = {"PATH": PG_PATH, "HOME": str(c.sock), "LANG": "C.UTF-8", "WAL_SPOOL": str(spool), **env}
    r = run([str(BIN / "pg_ctl"), "-D", str(c.data), "-l", str(c.sock / "log"), "-w", "-t", "60",
             "-o", opts, "start"], env, as_postgres=True, timeout=90)
    log = c.sock / "log"
    assert r.rc == 0, f"postgres did not start: {r}\n{log.read_text(errors='replace') if log.exists() else ''}"


class Primary:
    """A primary archiving through archive-wal.sh and its sidecar."""

    def __init__(self, store: Store, bucket: str, mounted: Path | None, *, settings: list[str] | None = None,
                 env: dict[str, str] | None = None, command: list[str] | None = None) -> None:
        """`settings`: the server's archive settings (name=value), else
        this file's; `env` and `command`: the sidecar's, else this file's."""
        root = fresh_path("primary")
        self.cluster = Cluster(root / "data", root / "sock")
        self.cluster.initdb()
        self.spool = pg_dir(root / "spool")
        self.settings = settings or ["archive_mode=on", f"archive_command=sh {mounted}/archive-wal.sh %f",
                                     f"archive_timeout={ARCHIVE_TIMEOUT}"]
        self.env = env or store_env(store, bucket)
        self.sidecar = Sidecar(self.env, self.cluster.data, self.spool, command)
        self.start()
        self.cluster.sql("CREATE TABLE ledger (seq bigint PRIMARY KEY, at timestamptz NOT NULL)")

    def start(self) -> None:
        start_server(self.cluster, self.settings, self.spool)

    def log(self) -> str:
        path = self.cluster.sock / "log"
        return path.read_text(errors="replace") if path.exists() else ""

    def lose(self) -> None:
        """Every volume lost: the server and the sidecar killed mid-work,
        the data directory deleted entirely."""
        self.cluster.stop("immediate")
        self.sidecar.stop(kill=True)
        shutil.rmtree(self.cluster.data)

    def archive_all(self, timeout: float = 60) -> str:
        """Ends the current segment and waits until the archive has it; its name."""
        seg = self.cluster.sql("SELECT pg_walfile_name(pg_switch_wal())")
        deadline = time.monotonic() + timeout
        while self.cluster.sql("SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver") < seg:
            assert time.monotonic() < deadline, f"{seg} not archived in {timeout}s\n{self.sidecar.output()}"
            time.sleep(0.2)
        return seg


class Writer(threading.Thread):
    """Commits one row per transaction until stopped or the server fails;
    `acked` holds (seq, time acknowledged) for every commit that returned."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg2.connect(host="127.0.0.1", port=cluster.port, user="postgres",
                                     password=cluster.password, dbname="postgres", connect_timeout=5)
        self.acked: list[tuple[int, float]] = []
        self.error: Exception | None = None
        self.halt = threading.Event()
        self.start()
        RUNNING.append(self)

    def run(self) -> None:
        cur = self.conn.cursor()
        seq = 0
        try:
            while not self.halt.is_set():
                seq += 1
                cur.execute("INSERT INTO ledger VALUES (%s, clock_timestamp())", (seq,))
                self.conn.commit()
                self.acked.append((seq, time.time()))
                time.sleep(0.004)
        except psycopg2.Error as e:
            self.error = e

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        with contextlib.suppress(psycopg2.Error):
            self.conn.close()


# --------------------------------------------------------------------------
# The scripts, as their containers run them


def termination(path: Path) -> str:
    """The script's line, once the hook's parser has read it (every line
    the archive's scripts write goes through it: `opshooks report`)."""
    return termination_line(path).strip()


@dataclasses.dataclass
class Job:
    rc: int
    out: str
    err: str
    line: str  # the termination log

    def __str__(self) -> str:
        return f"rc={self.rc}\n--- stdout\n{self.out}--- stderr\n{self.err}--- termination log\n{self.line}"


def job(script: str, env: dict[str, str], *, as_postgres: bool = False, timeout: float = 120,
        command: list[str] | None = None) -> Job:
    """`/bin/sh -c <script text>` (or `command`, as a pod spec gives it)
    with exactly env and a termination log, output to files (a server left
    running cannot hang the test)."""
    logs = pg_dir(fresh_path("termination"))
    log = logs / "log"
    kwargs: dict = {}
    if as_postgres and os.geteuid() == 0:
        uid, gid = postgres_ids()
        kwargs = {"user": uid, "group": gid, "extra_groups": []}
    with open(logs / "out", "w+") as out, open(logs / "err", "w+") as err:
        proc = subprocess.Popen(command or ["sh", "-c", (SCRIPTS / script).read_text()], executable=shell_path("dash"),
                                env={**env, "TERMINATION_LOG": str(log)}, cwd=logs, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, start_new_session=True, **kwargs)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.seek(0)
        err.seek(0)
        killed = f"{script} still running after {timeout}s (killed)\n" if proc.returncode == -signal.SIGKILL else ""
        return Job(proc.returncode, out.read(), killed + err.read(), termination(log))


def fields(line: str) -> dict:
    """The hook's reading of a script's line (from its "opshooks " on, as
    the sidecar's log quotes it): its fields, typed and camelCased."""
    return parse(line[line.index("opshooks "):])


def base_backup(primary: Primary) -> dict:
    c = primary.cluster
    r = job("base-backup.sh", {**primary.env, "PGHOST": "127.0.0.1", "PGPORT": str(c.port),
                               "PGUSER": "postgres", "PGPASSWORD": c.password,
                               "BACKUP_IMMEDIATE_CHECKPOINT": "true"}, timeout=60)
    assert r.rc == 0 and r.line.startswith("opshooks base-backup: stored id="), \
        f"{r}\n--- sidecar\n{primary.sidecar.output()[-3000:]}\n--- server\n{primary.log()[-3000:]}"
    return fields(r.line)


def targets(target: dict[str, str]) -> dict[str, str]:
    return {f"RECOVERY_TARGET_{k.upper()}": v for k, v in target.items()}


def fetch(env: dict[str, str], pgdata: Path, **target: str) -> Job:
    return job("pitr-fetch.sh", {**env, "PGDATA": str(pgdata), **targets(target)})


@dataclasses.dataclass
class Recovered:
    data: Path
    fetch_line: str
    replay_line: str
    fetch_seconds: float
    ready_seconds: float  # from the replay's start to a server taking writes

    @property
    def restore_seconds(self) -> float:
        return self.fetch_seconds + self.ready_seconds

    def rows(self) -> list[int]:
        """The ledger of the recovered server (started on its own)."""
        root = fresh_path("check")
        c = Cluster(self.data, pg_dir(root / "sock"), password=SUPERUSER_PASSWORD)
        c.start()
        try:
            out = c.sql("SELECT seq FROM ledger ORDER BY seq")
            return [int(x) for x in out.split()] if out else []
        finally:
            c.stop()


def recover(store: Store, bucket: str, mounted: Path, env: dict[str, str] | None = None,
            **target: str) -> Recovered:
    """pitr-fetch.sh, then pitr-replay.sh with a sidecar serving
    restore-wal.sh, into a data directory that does not exist yet; `env`:
    the sidecar image's values, else this file's store."""
    root = pg_dir(fresh_path("recovered"))
    data = root / "data"
    env = env or store_env(store, bucket)
    started = time.monotonic()
    r = fetch(env, data, **target)
    fetch_seconds = time.monotonic() - started
    assert r.rc == 0 and r.line.startswith("opshooks pitr-fetch: fetched id="), str(r)
    fetch_line = r.line
    r, sidecar = replay(env, data, mounted, **target)
    assert r.rc == 0 and r.line.startswith("opshooks pitr-replay: recovered lsn="), f"{r}\n--- sidecar\n{sidecar}"
    return Recovered(data, fetch_line, r.line, fetch_seconds, float(fields(r.line)["readySeconds"]))


def replay(env: dict[str, str], data: Path, mounted: Path, during=None, **target: str) -> tuple[Job, str]:
    """pitr-replay.sh over the base backup fetched into `data`, its
    sidecar serving the archive `env` names; the sidecar's last output.
    `during(sidecar)` runs in a thread meanwhile."""
    subprocess.run(["chown", "-R", "postgres:postgres", str(data)], check=True)  # one user in a pod
    root = data.parent
    spool = pg_dir(root / "spool")
    # The recovery's requests are served from the archive it recovers,
    # as the pod's sidecar gets it (RECOVERY_SERVER, the bootstrap's folder).
    sidecar = Sidecar({"RECOVERY_SERVER": env["ARCHIVE_SERVER"], **env}, data, spool)
    watcher = threading.Thread(target=during, args=(sidecar,), daemon=True) if during else None
    if watcher:
        watcher.start()
    home = pg_dir(root / "home")
    r = job("pitr-replay.sh", {"PATH": PG_PATH, "HOME": str(home), "LANG": "C.UTF-8",
                               "PGDATA": str(data), "WAL_SPOOL": str(spool),
                               "ARCHIVE_SCRIPTS": str(mounted), **targets(target)},
            as_postgres=True)
    sidecar.stop()
    if watcher:
        watcher.join(30)
    return r, sidecar.output()[-3000:]


def report(figures: dict) -> None:
    text = json.dumps(figures)
    print(f"\nRPO {text}", file=sys.stderr, flush=True)
    if os.environ.get("OPSHOOKS_RPO_REPORT"):
        with open(os.environ["OPSHOOKS_RPO_REPORT"], "a") as f:
            f.write(text + "\n")


def contiguous(rows: list[int]) -> None:
    """One writer, one commit after another: a consistent recovery holds
    a prefix of them, with no hole."""
    assert rows == list(range(1, len(rows) + 1)), f"holes in the recovered ledger: {rows[:5]}...{rows[-5:]}"


# --------------------------------------------------------------------------
# a. Every volume lost: recover to the end of the archive


@pytest.mark.parametrize("run_index", range(RPO_RUNS))
def test_every_volume_lost_recovers_to_the_end_of_the_archive(store, bucket, mounted, run_index):
    """The figures: acknowledged commits lost (the RPO) and the time from
    the start of the restore to a server taking writes, with
    archive_timeout at ARCHIVE_TIMEOUT. The bound: a commit is archived at
    most archive_timeout after it (the forced switch) plus its segment's
    upload, so none acknowledged earlier than that before the loss is lost."""
    primary = Primary(store, bucket, mounted)
    writer = Writer(primary.cluster)
    time.sleep(2)
    backup = base_backup(primary)
    backup_done = time.time()
    at_backup = len(writer.acked)
    # The loss falls anywhere in archive_timeout's cycle (the backup's end
    # switched segments), so repeated runs sample the whole window.
    time.sleep(5 + random.uniform(0, ARCHIVE_TIMEOUT))
    lost_at = time.time()
    primary.lose()
    writer.stop()
    acked = writer.acked
    assert writer.error is not None, "the writer never saw the server go"
    assert len(acked) > at_backup > 0

    rec = recover(store, bucket, mounted)
    assert fields(rec.fetch_line)["id"] == backup["id"]
    rows = rec.rows()
    contiguous(rows)
    got = len(rows)
    lost = [seq for seq, _ in acked if seq > got]
    newest_kept = dict(acked).get(got)
    window = lost_at - newest_kept if newest_kept else float("inf")
    figures = {"run": run_index + 1, "archive_timeout_s": ARCHIVE_TIMEOUT, "acked": len(acked),
               "loss_after_backup_s": round(lost_at - backup_done, 1),
               "acked_lost": len(lost), "lost_window_s": round(window, 2),
               "restore_s": round(rec.restore_seconds, 1), "fetch_s": round(rec.fetch_seconds, 1),
               "replay_to_ready_s": rec.ready_seconds}
    report(figures)
    assert got >= at_backup, figures
    # Nothing acknowledged more than archive_timeout + an upload before the loss is lost.
    assert window <= ARCHIVE_TIMEOUT + UPLOAD_BOUND, figures
    assert not PWNED.exists()


# --------------------------------------------------------------------------
# b. A named time


def test_recovers_exactly_the_commits_before_a_time(store, bucket, mounted):
    # The source runs with more connections than its postgresql.conf says
    # (an instance's -c argument): a replay with hot_standby on stops at
    # once ("insufficient parameter settings").
    primary = Primary(store, bucket, mounted, settings=[
        "archive_mode=on", f"archive_command=sh {mounted}/archive-wal.sh %f",
        f"archive_timeout={ARCHIVE_TIMEOUT}", "max_connections=150"])
    writer = Writer(primary.cluster)
    time.sleep(1)
    base_backup(primary)
    time.sleep(3)
    writer.stop()
    primary.archive_all()
    # Every commit's time as its WAL record has it (track_commit_timestamp).
    out = primary.cluster.sql("SELECT seq, to_json(pg_xact_commit_timestamp(xmin)) #>> '{}' FROM ledger ORDER BY seq")
    commits = [(int(s), dt.datetime.fromisoformat(t)) for s, t in (line.split("|") for line in out.splitlines())]
    # The target: half-way between two commits after the backup, a
    # millisecond or more apart, so no commit is on it.
    middle = len(commits) * 3 // 4
    i = next(i for i in range(middle, len(commits) - 1)
             if commits[i + 1][1] - commits[i][1] >= dt.timedelta(milliseconds=1))
    target = commits[i][1] + (commits[i + 1][1] - commits[i][1]) / 2
    expected = [s for s, t in commits if t < target]
    assert 0 < len(expected) < len(commits)

    rec = recover(store, bucket, mounted, time=target.isoformat())
    rows = rec.rows()
    assert rows == expected, (len(rows), len(expected), target)
    assert fields(rec.replay_line)["timeline"] == 2


def batch(primary: Primary, first: int) -> None:
    """Rows `first` to `first` + 99, in one transaction."""
    primary.cluster.sql(f"INSERT INTO ledger SELECT s, clock_timestamp() FROM generate_series({first}, {first + 99}) s")


def backed_up_batches(primary: Primary, batches: int) -> list[str]:
    """Rows 1-100, a base backup, then `batches` more batches of 100 rows,
    each in a segment ended and archived: those segments' names."""
    batch(primary, 1)
    base_backup(primary)
    after = []
    for first in range(101, 101 + 100 * batches, 100):
        batch(primary, first)
        after.append(primary.archive_all())
    return after


RESTORE_POINT = "before 'the' \"migration\" $(touch /tmp/pwned-archive) `x`; \\"


def test_recovers_exactly_to_an_lsn_and_to_a_restore_point(store, bucket, mounted):
    """Four batches of rows, each one transaction: the LSN after the
    second and a restore point (a hostile name) after the third. The LSN
    recovers the first two batches, the name the first three; a restore
    point made before the newest base backup (the only one here), which a
    name recovers from, fails the replay with words that name the way to
    it (its LSN, from an older backup)."""
    primary = Primary(store, bucket, mounted, settings=[
        "archive_mode=on", f"archive_command=sh {mounted}/archive-wal.sh %f",
        f"archive_timeout={ARCHIVE_TIMEOUT}", "max_connections=150"])
    c = primary.cluster
    batch(primary, 1)
    c.sql("SELECT pg_create_restore_point('made before the backup')")
    base_backup(primary)
    batch(primary, 101)
    lsn = c.sql("SELECT pg_current_wal_insert_lsn()")
    batch(primary, 201)
    conn = psycopg2.connect(host="127.0.0.1", port=c.port, user="postgres", password=c.password,
                            dbname="postgres", connect_timeout=5)
    with conn, conn.cursor() as cur:  # the name as a parameter, as a user's client sends it
        cur.execute("SELECT pg_create_restore_point(%s)", (RESTORE_POINT,))
    conn.close()
    batch(primary, 301)
    primary.archive_all()

    rec = recover(store, bucket, mounted, lsn=lsn)
    assert rec.rows() == list(range(1, 201)), lsn
    assert fields(rec.replay_line)["timeline"] == 2
    rec = recover(store, bucket, mounted, name=RESTORE_POINT)
    assert rec.rows() == list(range(1, 301))
    assert not PWNED.exists()

    # The restore point made before the newest base backup: the replay from
    # that backup never meets it.
    early_root = pg_dir(fresh_path("early"))
    env = store_env(store, bucket)
    assert fetch(env, early_root / "data", name="made before the backup").rc == 0
    r, _ = replay(env, early_root / "data", mounted, name="made before the backup")
    assert r.rc == 1, str(r)
    assert r.line.startswith("opshooks pitr-replay: failed the archive ends before the target, "
                             "restore point 'made before the backup'"), str(r)
    assert "one made before it is reached by targetLSN" in r.line, str(r)


def test_a_gap_in_the_archive_stops_the_replay_instead_of_ending_it(store, bucket, mounted):
    """Four segments archived after the base backup, each with 100 rows.
    A segment missing from the store where a later one is there ends a
    replay as the end of the archive does ("missing"), and would promote a
    server without what came after. The archiver names the gap instead,
    and the replay fails, promoting nothing:
    - the second of the four deleted (a lost upload, a hand that tidied
      up): the next segment the store holds is named;
    - the last two deleted, with the old timeline's .partial and a later
      timeline's segment there (an old primary that archived late, then
      a promoted standby, which archives its own timeline only): each is
      named in turn, PostgreSQL asking for the hole on the old timeline.
    Everything put back, a recovery holds all 500 rows."""
    primary = Primary(store, bucket, mounted)
    c = primary.cluster
    after = backed_up_batches(primary, 4)
    # Stopped, so that archive_timeout adds no segment while the store is
    # changed below (its archiver hands over what is ready first).
    c.stop()
    primary.sidecar.stop()
    wals = f"{PREFIX}/{SERVER}/wals/"

    def segments() -> list[str]:
        return [w for w in store.wal_names(bucket) if re.fullmatch(r"[0-9A-F]{24}", w)]
    assert set(after) <= set(segments()), (after, segments())
    keys = {n: next(k for k in store.s3.keys(bucket, wals) if f"/{n}" in k) for n in after}
    bodies = {n: store.s3.get(bucket, k) for n, k in keys.items()}
    env = store_env(store, bucket)

    def gap_named(lost: str, later: str) -> None:
        root = pg_dir(fresh_path("gap"))
        assert fetch(env, root / "data").rc == 0
        r, sidecar = replay(env, root / "data", mounted)
        assert r.rc == 1, f"{r}\n--- sidecar\n{sidecar}"
        assert r.line.startswith("opshooks pitr-replay: failed the server stopped before it reached the end of the archive"), str(r)
        assert f"a gap in the archive {SERVER}: {lost} is not there but {later}, after it, is" in r.line, str(r)
        # Never promoted: still a server in archive recovery.
        assert (root / "data" / "recovery.signal").exists()

    # The same timeline. The segment named is the first the store holds
    # after the lost one (the primary's archive_timeout may have added one).
    store.s3.client.delete_object(Bucket=bucket, Key=keys[after[1]])
    gap_named(after[1], min(w for w in segments() if w > after[1]))
    store.s3.put(bucket, keys[after[1]], bodies[after[1]])

    # A later timeline. Every segment from after[2] on goes; the old
    # timeline's .partial of the segment after it stands for the promoted
    # standby's first upload, then that standby's segment of timeline 2.
    for n in segments():
        if n >= after[2]:
            store.s3.client.delete_object(Bucket=bucket, Key=next(k for k in store.s3.keys(bucket, wals) if f"/{n}" in k))
    partial = f"{after[3]}.partial"
    newer = f"00000002{after[3][8:]}"
    folder = f"{wals}{after[3][:16]}/"
    store.s3.put(bucket, f"{folder}{partial}.gz", b"not replayed")
    gap_named(after[2], partial)
    store.s3.client.delete_object(Bucket=bucket, Key=f"{folder}{partial}.gz")
    store.s3.put(bucket, f"{wals}{newer[:16]}/{newer}.gz", b"not replayed")
    gap_named(after[2], newer)
    store.s3.client.delete_object(Bucket=bucket, Key=f"{wals}{newer[:16]}/{newer}.gz")

    for n in after[2:]:
        store.s3.put(bucket, keys[n], bodies[n])
    assert recover(store, bucket, mounted).rows() == list(range(1, 501))


def test_the_store_down_during_a_replay_stops_it_and_a_retry_goes_on(store, bucket, mounted):
    """The store goes down once the replay has fetched the first segment
    after the base backup: the next segment that cannot be fetched must
    not read as the end of the archive (a server promoted with 200 of the
    400 rows). The replay fails, saying why, and promotes nothing; run
    again with the store back, it goes on over the same data directory
    and holds every row."""
    primary = Primary(store, bucket, mounted)
    after = backed_up_batches(primary, 3)
    env = store_env(store, bucket)
    data = pg_dir(fresh_path("outage")) / "data"
    assert fetch(env, data).rc == 0

    def down_after_the_first(sidecar: Sidecar) -> None:
        deadline = time.monotonic() + 60
        while f"restored {after[0]}" not in sidecar.output() and time.monotonic() < deadline:
            time.sleep(0.02)
        store.down()

    try:
        r, sidecar = replay(env, data, mounted, during=down_after_the_first)
    finally:
        store.up()
    assert f"restored {after[0]}" in sidecar, sidecar
    assert r.rc == 1, f"{r}\n--- sidecar\n{sidecar}"
    assert r.line.startswith("opshooks pitr-replay: failed the server stopped before it reached the end of the archive"), str(r)
    assert re.search(r"restore-wal: \S+ could not be fetched: barman-cloud-wal-restore exited with \d+: .*"
                     r"recovery stops here rather than take this for the end of the archive", r.line), str(r)
    assert (data / "recovery.signal").exists()  # never promoted

    r, sidecar = replay(env, data, mounted)
    assert r.rc == 0 and r.line.startswith("opshooks pitr-replay: recovered lsn="), f"{r}\n--- sidecar\n{sidecar}"
    assert Recovered(data, "", r.line, 0, 0).rows() == list(range(1, 401))


# --------------------------------------------------------------------------
# c. The store down for a while


# What the sidecar reports to the API server meanwhile (ARCHIVE_REPORT):
# the ConfigMap the hook made for it, on a stand-in API server.
NAMESPACE, REPORT = "shop", "orders-archive-report"
TOKEN = "archiver-token"
REPORT_KEYS = {"pod", "failingSince", "lastArchivedWal", "lastArchivedTime", "lastFailedWal", "lastFailure",
               "lastFailureTime"}
BASE_BACKUP_KEYS = {"baseBackupPod", "baseBackupFailure", "lastBaseBackup"}
WAL_FILE = r"[0-9A-F]{24}(\.partial|\.[0-9A-F]{8}\.backup)?|[0-9A-F]{8}\.history"


@pytest.fixture(scope="module")
def cluster_pki(scratch) -> tuple[Path, tuple[Path, Path]]:
    """The cluster's CA certificate, and the API server's key and
    certificate for 127.0.0.1."""
    d = fresh_path("pki")
    d.mkdir()
    ca = make_ca(d, "cluster-ca")
    return ca[1], make_cert(d, ca, "apiserver", "127.0.0.1")


@pytest.fixture
def api(cluster_pki):
    """The API server, holding the report's ConfigMap as the hook desires
    it: without data."""
    server = ApiServer(cluster_pki[1], NAMESPACE, {REPORT: {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": REPORT, "namespace": NAMESPACE}}})
    yield server
    server.close()


def report_env(api: ApiServer, ca: Path) -> dict[str, str]:
    """The sidecar's values for reporting to `api`, as the pod orders-0
    has them: its ServiceAccount's token and CA where the hook mounts
    them, the server's address as the kubelet sets it."""
    creds = credentials(fresh_path("archiver-credentials"), ca, TOKEN)
    return {"ARCHIVE_REPORT": REPORT, "NAMESPACE": NAMESPACE, "ARCHIVER_CREDENTIALS": str(creds),
            "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api.port),
            "HOSTNAME": "orders-0"}


def reported(api: ApiServer, primary: Primary, what: str, holds, timeout: float = 60) -> dict[str, str]:
    """The report's data (every patch merged) once `holds(data)`; the
    sidecar sends at once only a failure's start and end, so a slow,
    shared machine is given a minute."""
    deadline = time.monotonic() + timeout
    while True:
        with api.lock:
            data = dict(api.configmaps[REPORT].get("data", {}))
        if holds(data):
            return data
        assert time.monotonic() < deadline, f"no report {what} in {timeout}s: {data}\n{primary.sidecar.output()[-3000:]}"
        time.sleep(0.2)


def utc(stamp: str) -> dt.datetime:
    """An RFC 3339 time in UTC, as the report has it (seconds, "Z")."""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp), stamp
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_the_store_down_loses_no_wal_and_the_report_says_so_meanwhile(store, bucket, mounted, api, cluster_pki):
    """The store down for a while: the server keeps its segments until
    the store is back, then every one is archived and recovers. Meanwhile
    the sidecar's report (the Database's status reads it) says archiving
    is failing, since when and why, still naming the last file stored;
    once the store is back, that it is not, with a newer file."""
    primary = Primary(store, bucket, mounted, env=store_env(store, bucket, **report_env(api, cluster_pki[0])))
    writer = Writer(primary.cluster)
    base_backup(primary)
    before = primary.cluster.sql("SELECT failed_count FROM pg_stat_archiver")
    ok = reported(api, primary, "of a file stored", lambda d: d.get("lastArchivedWal") and d.get("failingSince") == "")
    assert ok["pod"] == "orders-0" and re.fullmatch(WAL_FILE, ok["lastArchivedWal"]), ok
    began = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    store.down()
    try:
        outage = time.monotonic()
        time.sleep(2 * ARCHIVE_TIMEOUT + 4)
        stats = primary.cluster.sql("SELECT failed_count, coalesce(last_failed_wal, '') FROM pg_stat_archiver")
        failed, last_failed = stats.split("|")
        assert int(failed) > int(before) and last_failed, stats
        ready = list((primary.cluster.data / "pg_wal" / "archive_status").glob("*.ready"))
        assert ready, "segments waiting for the archive: none while the store is down?"
        # archive-wal.sh's reason, in the server's log.
        assert re.search(r"archive-wal: \S+ is not archived: barman-cloud-wal-archive exited with \d+: ",
                         primary.log()), primary.log()[-3000:]
        failing = reported(api, primary, "of the failures", lambda d: d.get("failingSince"))
        assert utc(failing["failingSince"]) >= began, (began, failing)
        assert re.fullmatch(WAL_FILE, failing["lastFailedWal"]), failing
        assert failing["lastFailure"].startswith("barman-cloud-wal-archive exited with "), failing
        assert utc(failing["lastFailureTime"]) >= utc(failing["failingSince"]), failing
        # The last file stored is kept beside the failure, older than it.
        assert ok["lastArchivedWal"] <= failing["lastArchivedWal"] < failing["lastFailedWal"], (ok, failing)
        assert utc(failing["lastArchivedTime"]) <= utc(failing["failingSince"]), failing
        acked_in_outage = len(writer.acked)
    finally:
        store.up()
    writer.stop()
    back = time.monotonic()
    last = primary.archive_all(timeout=90)
    caught_up = time.monotonic() - back
    # Nothing up to that segment waits; archive_timeout may have ended a
    # newer one meanwhile (autovacuum, a checkpoint), still on its way.
    waiting = sorted(f.name.split(".")[0] for f in (primary.cluster.data / "pg_wal" / "archive_status").glob("*.ready"))
    assert all(w > last for w in waiting), (last, waiting)
    # Every segment from the first on is in the store: none skipped.
    names = store.wal_names(bucket)
    segments = [n for n in names if re.fullmatch(r"[0-9A-F]{24}", n)]
    numbers = [int(n[8:16], 16) * 256 + int(n[16:24], 16) for n in segments]
    assert numbers == list(range(numbers[0], numbers[-1] + 1)), segments
    assert segments[-1] == last

    # Back: not failing, the newest file stored after the outage began;
    # the failure stays, the newest there was.
    well = reported(api, primary, f"of {last} stored",
                    lambda d: d.get("failingSince") == "" and d.get("lastArchivedWal", "") >= last)
    assert utc(well["lastArchivedTime"]) > began, (began, well)
    assert well["lastFailedWal"] >= failing["lastFailedWal"], (failing, well)
    # Every report a merge patch of the ConfigMap's data, by this sidecar's
    # field manager, with its token.
    patches = api.requests
    assert patches, "no report sent"
    for r in patches:
        assert (r.method, r.path) == ("PATCH", f"/api/v1/namespaces/{NAMESPACE}/configmaps/{REPORT}"
                                               "?fieldManager=opshooks-archiver"), r
        assert r.headers.get("authorization") == f"Bearer {TOKEN}", r
        assert r.headers.get("content-type") == MERGE_PATCH, r
        assert list(r.body) == ["data"] and set(r.body["data"]) <= REPORT_KEYS, r

    rec = recover(store, bucket, mounted)
    rows = rec.rows()
    contiguous(rows)
    assert len(rows) >= len(writer.acked) >= acked_in_outage, (len(rows), len(writer.acked))
    print(f"\nstore down {back - outage:.1f}s, archive caught up {caught_up:.1f}s after, "
          f"{len(writer.acked)} commits all recovered, {len(patches)} reports", file=sys.stderr)


@pytest.mark.parametrize("why", ["refused", "no API server"])
def test_a_report_that_cannot_be_sent_never_holds_archiving_up(store, bucket, mounted, api, cluster_pki, why):
    """The report refused (the Role lost its rule: a 403 Status), or no
    API server to send it to: segments are archived as before, the
    sidecar says once that the report was not sent, and why, not at each
    try; and it tries again, so a refusal lifted is caught up."""
    env = store_env(store, bucket, **report_env(api, cluster_pki[0]))
    if why == "refused":
        api.answer = status_answer(403, "Forbidden", f'configmaps "{REPORT}" is forbidden: no patch')
        words = f'HTTP 403 configmaps "{REPORT}" is forbidden'
    else:
        del env["KUBERNETES_SERVICE_HOST"]
        words = "KUBERNETES_SERVICE_HOST is not set"
    primary = Primary(store, bucket, mounted, env=env)
    # A new segment archived again and again over three of the sidecar's
    # tries (one each REPORT_SECONDS, 10 s; seen at the API server when
    # there is one), each in the time it is given anywhere else.
    started = time.monotonic()
    archived: list[str] = []
    while len(api.requests) < 3 if why == "refused" else time.monotonic() - started < 22:
        assert time.monotonic() - started < 90, f"{len(api.requests)} tries in 90s\n{primary.sidecar.output()}"
        primary.cluster.sql(f"INSERT INTO ledger VALUES ({len(archived) + 1}, now())")
        archived.append(primary.archive_all(timeout=30))
        time.sleep(1)
    assert archived == sorted(set(archived)), archived
    log = primary.sidecar.output()
    assert primary.sidecar.proc.poll() is None, log
    assert log.count("report: not sent") == 1 and words in log, log
    assert api.configmaps[REPORT].get("data") is None, api.configmaps[REPORT]
    if why == "refused":
        assert all(t == f"Bearer {TOKEN}" for t in api.tokens), api.tokens
        api.answer = None
        last = primary.archive_all(timeout=30)
        reported(api, primary, f"of {last} stored", lambda d: d.get("lastArchivedWal", "") >= last)
        wait_for("the sidecar saying the report is sent again",
                 lambda: "report: sent again" in primary.sidecar.output(), timeout=60)
        assert primary.sidecar.output().count("report: not sent") == 1, primary.sidecar.output()
    else:
        assert api.requests == [], api.requests


def test_a_report_without_its_namespace_is_refused():
    """ARCHIVE_REPORT names a ConfigMap, and a name alone is no ConfigMap:
    the sidecar does not start (a pod that fails, not one that archives
    and never says so), before it makes anything."""
    spool = fresh_path("spool")
    env = {"PATH": SYSTEM_PATH, "ARCHIVE_DESTINATION": "s3://bucket/db", "ARCHIVE_SERVER": SERVER,
           "PGDATA": str(fresh_path("data")), "WAL_SPOOL": str(spool), "ARCHIVE_REPORT": REPORT}
    r = job("archiver.sh", env, timeout=15)
    assert r.rc == 1 and "ARCHIVE_REPORT is set but NAMESPACE is not" in r.err, str(r)
    assert not spool.exists()


# --------------------------------------------------------------------------
# d. Refusals: a target outside the archive, data in the way


def test_a_target_outside_the_archive_is_refused_and_touches_nothing(store, bucket, mounted):
    primary = Primary(store, bucket, mounted)
    env = store_env(store, bucket)
    root = pg_dir(fresh_path("refused"))
    # No base backup yet.
    r = fetch(env, root / "absent")
    assert r.rc == 3 and "no finished base backup" in r.line, str(r)
    before_backup = primary.cluster.sql("SELECT to_json(now()) #>> '{}'")
    lsn_before = primary.cluster.sql("SELECT pg_current_wal_lsn()")
    time.sleep(1)
    backup = base_backup(primary)

    empty = pg_dir(root / "empty")
    for where in (root / "absent", empty):
        for target in ({"time": before_backup}, {"lsn": lsn_before}):
            r = fetch(env, where, **target)
            assert r.rc == 3, str(r)
            assert r.line.startswith("opshooks pitr-fetch: refused the target"), str(r)
            assert "is before the end of the first base backup" in r.line, str(r)
            assert f"the archive recovers from {backup['endTime']}" in r.line, str(r)
            assert "refused" in r.err
    assert not (root / "absent").exists()
    assert list(empty.iterdir()) == []

    # A time in the future, one without its offset, two targets at once.
    for target, words in (({"time": "2999-01-01T00:00:00Z"}, "is in the future"),
                          ({"time": "2024-05-01 17:00:00"}, "not an ISO 8601 time with its UTC offset"),
                          ({"time": before_backup, "name": "x"}, "more than one of")):
        r = fetch(env, root / "absent", **target)
        assert r.rc == 3 and words in r.line, str(r)
    assert not (root / "absent").exists()

    # Never over data: a directory that holds anything, left as it was.
    full = pg_dir(root / "full")
    (full / "PG_VERSION").write_text("15\n")
    r = fetch(env, full)
    assert r.rc == 3 and "is not empty: a recovery never writes over data" in r.line, str(r)
    assert [p.name for p in full.iterdir()] == ["PG_VERSION"]

    # In a pod (ROLE_DIR, the mounted role): only the designated primary of
    # a Database never initialized fetches, into its empty data directory;
    # every other start is skipped (exit 0), nothing asked or written.
    role = pg_dir(root / "role")

    def in_pod(pod: str, designated: str, initialized: str, where: Path) -> Job:
        (role / "primary").write_text(designated)
        (role / "initialized").write_text(initialized)
        return job("pitr-fetch.sh", {**env, "PGDATA": str(where), "ROLE_DIR": str(role), "HOSTNAME": pod})

    # What a download cut off earlier left beside the data directory goes
    # with any skip.
    (root / "absent.fetching").mkdir()
    for pod, designated, initialized, where, words in (
            ("orders-1", "orders-0", "false", root / "absent", "'orders-1' is not the designated primary"),
            ("orders-0", "orders-0", "true", root / "absent", "initialized='true'"),
            ("orders-0", "orders-0", "", root / "absent", "initialized=''"),
            ("orders-0", "orders-0", "false", full, "holds data already")):
        r = in_pod(pod, designated, initialized, where)
        assert r.rc == 0 and r.line.startswith("opshooks pitr-fetch: skipped") and words in r.line, str(r)
    assert not (root / "absent").exists() and not (root / "absent.fetching").exists()
    assert [p.name for p in full.iterdir()] == ["PG_VERSION"]
    # A download cut off earlier left its folder beside the data directory:
    # the next try starts it afresh and moves the whole into place.
    (root / "empty.fetching").mkdir()
    (root / "empty.fetching" / "half").write_text("x")
    r = in_pod("orders-0", "orders-0", "false", empty)
    assert r.rc == 0 and r.line.startswith(f"opshooks pitr-fetch: fetched id={backup['id']}"), str(r)
    assert (empty / "PG_VERSION").exists() and (empty / "backup_label").exists()
    assert not (empty / "half").exists() and not (root / "empty.fetching").exists()
    assert oct(empty.stat().st_mode & 0o777) == "0o700"

    # pitr-replay.sh over a server's own data (no fetched backup): refused.
    primary.cluster.stop()
    r = job("pitr-replay.sh", {"PATH": PG_PATH, "HOME": str(root), "PGDATA": str(primary.cluster.data),
                               "ARCHIVE_SCRIPTS": str(mounted)}, as_postgres=True)
    assert r.rc == 3 and "no fetched base backup" in r.line, str(r)
    assert not (primary.cluster.data / "recovery.signal").exists()


# --------------------------------------------------------------------------
# e. The hand-over without a sidecar, in every shell


@pytest.mark.parametrize("shell", ["dash", "bash", "busybox"])
def test_no_sidecar_no_success(shell):
    """archive-wal.sh never succeeds unless the sidecar says stored;
    restore-wal.sh never reads silence as the end of the archive."""
    spool = pg_dir(fresh_path("spool"))
    data = pg_dir(fresh_path("data"))
    env = {"PATH": SYSTEM_PATH, "WAL_SPOOL": str(spool), "ARCHIVE_WAIT": "1", "RESTORE_WAIT": "1"}

    def sh(script: str, *args: str, cwd: Path = spool) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", "-c", (SCRIPTS / script).read_text(), "sh", *args], env=env, cwd=cwd,
                              executable=shell_path(shell), capture_output=True, text=True, timeout=30)

    seg = "000000010000000000000003"
    r = sh("archive-wal.sh", seg)
    assert r.returncode == 1 and "did not answer within 1s" in r.stderr, (r.returncode, r.stderr)
    assert not (spool / "archive" / "requests" / seg).exists()  # withdrawn
    for bad in ("../../etc/passwd", ".hidden", "", "a b"):
        r = sh("archive-wal.sh", bad)
        assert r.returncode == 1 and "is not the name of a WAL file" in r.stderr, (r.returncode, r.stderr)
    # A failure the sidecar reports is passed on.
    failed = spool / "archive" / "failed"
    threading.Timer(0.3, lambda: (failed / seg).write_text("the store said no\n")).start()
    r = sh("archive-wal.sh", seg)
    assert r.returncode == 1 and "not archived: the store said no" in r.stderr, (r.returncode, r.stderr)

    # restore_command runs in the data directory.
    r = sh("restore-wal.sh", seg, "pg_wal/RECOVERYXLOG", cwd=data)
    assert r.returncode == 126 and "recovery stops here" in r.stderr, (r.returncode, r.stderr)
    (data / "standby.signal").write_text("")
    r = sh("restore-wal.sh", seg, "pg_wal/RECOVERYXLOG", cwd=data)
    assert r.returncode == 1 and "a standby" in r.stderr, (r.returncode, r.stderr)
    # A point-in-time recovery (no standby.signal) asks in its own folder
    # (pitr-replay.sh), and takes the answer it finds there.
    (data / "standby.signal").unlink()
    requests = spool / "recovery" / "requests"
    env["WAL_RESTORE_FROM"] = "recovery"
    threading.Timer(0.3, lambda: (spool / "recovery" / "missing" / seg).write_text("") if (requests / seg).exists() else None).start()
    r = sh("restore-wal.sh", seg, "pg_wal/RECOVERYXLOG", cwd=data)
    assert r.returncode == 1 and "did not answer" not in r.stderr, (r.returncode, r.stderr)
    assert not (spool / "recovery" / "missing" / seg).exists()  # collected
    env["WAL_RESTORE_FROM"] = "elsewhere"
    r = sh("restore-wal.sh", seg, "pg_wal/RECOVERYXLOG", cwd=data)
    assert r.returncode == 126 and "not restore or recovery" in r.stderr, (r.returncode, r.stderr)


# --------------------------------------------------------------------------
# f. The hook's pod, as it answers it


RENDERED = Path(__file__).resolve().parents[1] / "fixtures" / "database" / "v2-archive-turned-on" / "response.json"


def rendered_pod() -> tuple[list[str], str, dict, dict[str, str]]:
    """What the hook answers for a running Database given
    spec.backup.archive: a golden fixture, which the integration tests hold
    to the hook's answer byte for byte. The server's archive settings (its
    `-c` arguments), where the server mounts the scripts' ConfigMap, the
    archiver sidecar, and the ConfigMap's files, each as the kubelet
    passes it on."""
    answer = json.loads(RENDERED.read_text())
    kids = {(c["kind"], c["metadata"]["name"]): c for c in answer["children"]}
    pod = kids[("StatefulSet", "orders")]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    command = [expand(a, {}) for a in containers["postgres"]["command"]]
    settings = [value for flag, value in zip(command, command[1:])
                if flag == "-c" and value.startswith(("archive_", "restore_command"))]
    volume = next(v["name"] for v in pod["volumes"] if v.get("configMap", {}).get("name") == "orders-archive")
    mount = next(m["mountPath"] for m in containers["postgres"]["volumeMounts"] if m["name"] == volume)
    sidecar = containers["archiver"]
    sidecar = {**sidecar, "command": [expand(a, {}) for a in sidecar["command"]]}
    server_env = {e["name"]: e["value"] for e in containers["postgres"]["env"] if "value" in e}
    return settings, mount, sidecar, kids[("ConfigMap", "orders-archive")]["data"], server_env


@dataclasses.dataclass
class Rendered:
    """The rendered pod, mapped to this machine: the server's settings and
    its RESTORE_WAIT, the sidecar's values and command, the ConfigMap's
    files where both containers mount them."""
    settings: list[str]
    restore_wait: str
    env: dict[str, str]  # without the server's port and password, each server's own
    command: list[str]
    where: str  # the archive's path in the bucket
    scripts: Path
    requests: str  # the base backups asked for (the ConfigMap's base-backup)

    def sidecar_env(self, pod: str, server: Cluster) -> dict[str, str]:
        """The sidecar's values in pod `pod`, beside `server`."""
        return {**self.env, "HOSTNAME": pod, "PGPORT": str(server.port), "PGPASSWORD": server.password}


def rendered(store: Store, bucket: str) -> Rendered:
    """rendered_pod(), mapped to this machine, and nothing else: the mount
    paths, the data directory, the spool, the endpoint, the bucket's name,
    the keys and the superuser's password (Secrets' in the pod), the
    server's port."""
    settings, mount, sidecar, files, server_env = rendered_pod()
    assert [s.split("=")[0] for s in settings] == ["archive_mode", "archive_command", "archive_timeout",
                                                   "restore_command"], settings
    scripts = config_map_mount("rendered-scripts", files)
    settings = [s.replace(mount, str(scripts)) for s in settings]

    given = {e["name"]: expand(e["value"], {}) for e in sidecar["env"] if "value" in e}
    from_secrets = {e["name"] for e in sidecar["env"] if "valueFrom" in e}
    assert from_secrets == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD"}, from_secrets
    assert (given["PGHOST"], given["PGPORT"], given["ARCHIVE_SCRIPTS"]) == ("127.0.0.1", "5432", mount), given
    where = urlparse(given["ARCHIVE_DESTINATION"])
    # This machine's: barman-cloud's PATH, a HOME, the endpoint and the keys.
    mapped = ("PATH", "HOME", "ARCHIVE_ENDPOINT", *from_secrets, "AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS", "PGPORT")
    local = store_env(store, bucket)
    env = {**{k: local[k] for k in mapped if k in local}, **{k: v for k, v in given.items() if k not in mapped},
           "ARCHIVE_DESTINATION": f"s3://{bucket}{where.path}", "ARCHIVE_SCRIPTS": str(scripts)}
    return Rendered(settings, server_env["RESTORE_WAIT"], env, sidecar["command"], where.path.lstrip("/"),
                    scripts, files["base-backup"])


def test_the_hooks_pod_archives_as_it_answers_it(store, bucket):
    """The server's archive settings, the sidecar's command and values
    and the ConfigMap's script, all as the hook answers them, archive a
    segment into the store where the hook says the archive is. Mapped to
    this machine, and nothing else: the mount paths, the data directory,
    the spool, the endpoint, the bucket's name and the keys (a Secret's in
    the pod)."""
    r = rendered(store, bucket)
    primary = Primary(store, bucket, None, settings=r.settings, env=r.env, command=r.command)
    primary.cluster.sql("INSERT INTO ledger SELECT g, now() FROM generate_series(1, 1000) g")
    seg = primary.archive_all()
    # barman-cloud's layout: <destination>/<server name>/wals/, the
    # server named after the Database, its uid and its major (docs/archiving.md).
    assert r.env["ARCHIVE_SERVER"] == "orders-db-uid-0001-pg16", r.env["ARCHIVE_SERVER"]
    stored = store.s3.keys(bucket, f"{r.where}/orders-db-uid-0001-pg16/wals/")
    assert any(seg in key for key in stored), f"{seg} not under the hook's archive path: {stored}"
    assert primary.cluster.sql("SELECT failed_count FROM pg_stat_archiver") == "0", primary.log()[-2000:]


def clone_standby(p: Cluster) -> tuple[Cluster, Path]:
    """A standby of `p` (pg_basebackup, not started) and its sidecar's spool."""
    root = pg_dir(fresh_path("standby"))
    standby = Cluster(root / "data", pg_dir(root / "sock"), password=p.password)
    cloned = run([str(BIN / "pg_basebackup"), "-D", str(standby.data), "-R", "-X", "stream", "-c", "fast",
                  "-h", "127.0.0.1", "-p", str(p.port), "-U", "postgres"],
                 {"PATH": PG_PATH, "HOME": str(root), "PGPASSWORD": p.password}, as_postgres=True, timeout=120)
    assert cloned.rc == 0, str(cloned)
    return standby, pg_dir(root / "spool")


# --------------------------------------------------------------------------
# g. A standby its primary no longer has WAL for


def test_a_standby_the_primary_recycled_wal_for_catches_up_from_the_archive(store, bucket):
    """A standby stopped while its primary wrote, archived and recycled the
    segments it would need next: streaming alone cannot bring it back
    ("requested WAL segment ... has already been removed", checked first
    with no restore_command), with the hook's restore_command and its own
    sidecar it replays them from the archive, then streams again. Both
    servers with the hook's settings, as every instance of the StatefulSet
    has them."""
    r = rendered(store, bucket)
    primary = Primary(store, bucket, None, settings=r.settings, env=r.env, command=r.command)
    p = primary.cluster
    standby, spool = clone_standby(p)
    sidecar = Sidecar(r.env, standby.data, spool, r.command)

    def rows() -> int:
        return int(standby.sql("SELECT count(*) FROM ledger"))

    def wait_rows(n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(AssertionError):
                if rows() == n:
                    return True
            time.sleep(0.3)
        return False

    without = [setting for setting in r.settings if not setting.startswith("restore_command=")]
    start_server(standby, r.settings, spool, RESTORE_WAIT=r.restore_wait)
    p.sql("INSERT INTO ledger SELECT g, now() FROM generate_series(1, 100) g")
    assert wait_rows(100, 30), f"the standby does not stream\n{(standby.sock / 'log').read_text()[-2000:]}"
    needed = p.sql(f"SELECT pg_walfile_name('{standby.sql('SELECT pg_last_wal_replay_lsn()')}')")
    standby.stop()

    # Segments written, archived, and recycled past what the standby needs.
    for n in range(4):
        p.sql(f"INSERT INTO ledger SELECT g, now() FROM generate_series({101 + 100 * n}, {200 + 100 * n}) g")
        primary.archive_all()
    p.sql("CHECKPOINT")
    p.sql("CHECKPOINT")
    assert p.sql(f"SELECT count(*) FROM pg_ls_waldir() WHERE name = '{needed}'") == "0", \
        f"{needed} is still on the primary: the test would not need the archive"

    (standby.sock / "log").unlink()
    start_server(standby, without, spool, RESTORE_WAIT=r.restore_wait)
    assert not wait_rows(500, 10), "the standby caught up without the archive: the test proves nothing"
    assert "has already been removed" in (standby.sock / "log").read_text(), (standby.sock / "log").read_text()
    standby.stop()

    start_server(standby, r.settings, spool, RESTORE_WAIT=r.restore_wait)
    assert wait_rows(500, 60), \
        f"the standby did not catch up\n{(standby.sock / 'log').read_text()[-3000:]}\n--- sidecar\n{sidecar.output()[-2000:]}"
    assert "restored log file" in (standby.sock / "log").read_text()
    # And it streams again: a row written now arrives without the archive.
    p.sql("INSERT INTO ledger VALUES (501, now())")
    assert wait_rows(501, 30), (standby.sock / "log").read_text()[-2000:]
    assert p.sql("SELECT state FROM pg_stat_replication") == "streaming"
    standby.stop()


# --------------------------------------------------------------------------
# h. A base backup asked for by the hook


def backups(env: dict[str, str]) -> list[dict]:
    """The store's base backups of the archive `env` names, as listed."""
    listed = subprocess.run(["barman-cloud-backup-list", "--endpoint-url", env["ARCHIVE_ENDPOINT"], "--format", "json",
                             "--", env["ARCHIVE_DESTINATION"], env["ARCHIVE_SERVER"]],
                            env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)["backups_list"]


def backups_named(env: dict[str, str], name: str) -> list[dict]:
    """The store's base backups of the archive `env` names, called `name`."""
    return [b for b in backups(env) if b.get("backup_name") == name]


def backup_ids(env: dict[str, str]) -> list[str]:
    """The ids of the store's base backups of the archive `env` names."""
    return sorted(b["backup_id"] for b in backups(env))


def test_a_base_backup_asked_of_a_standby_is_taken_there_once_and_restores(store, bucket, api, cluster_pki):
    """The hook's ConfigMap asks for a base backup of the ready standby
    orders-1 (golden `v2-archive-rolled-out`). Its sidecar, as rendered,
    takes it there (the backup label says from a standby), the primary's
    takes none; the standby's sidecar reports it for the Database's
    status (its line, which the hook's parser reads, and its pod; nothing
    of archiving, which a standby does not do); a sidecar started again
    with an empty spool (a new pod) finds the store has it and takes no
    second one; and the backup restores: recovered to the end of the
    archive, it holds every row."""
    r = rendered(store, bucket)
    name, pod, checkpoint = r.requests.split()
    assert (pod, checkpoint) == ("orders-1", "immediate"), r.requests
    # A standby's backup needs the WAL it replays written with full pages,
    # as PostgreSQL writes it by default (this file's servers save that I/O).
    settings = [*r.settings, "full_page_writes=on"]
    primary = Primary(store, bucket, None, settings=settings, env=r.env, command=r.command)
    p = primary.cluster
    primary.sidecar.stop()
    primary.sidecar = Sidecar(r.sidecar_env("orders-0", p), p.data, primary.spool, r.command)
    standby, spool = clone_standby(p)
    start_server(standby, settings, spool, RESTORE_WAIT=r.restore_wait)
    reporting = {**r.sidecar_env("orders-1", standby), **report_env(api, cluster_pki[0]), "HOSTNAME": "orders-1"}
    sidecar = Sidecar(reporting, standby.data, spool, r.command)
    p.sql("INSERT INTO ledger SELECT g, now() FROM generate_series(1, 1000) g")
    p.sql("CREATE TABLE tick (n int)")

    def wait_for(sidecar: Sidecar, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while text not in sidecar.output():
            assert time.monotonic() < deadline, \
                f"no '{text}' in {timeout}s\n--- sidecar\n{sidecar.output()[-3000:]}\n--- primary\n{primary.log()[-2000:]}"
            # A standby's backup is stored once its last segment is archived:
            # a write, so that the switch has a segment to end (with none
            # since the last switch, archive_all would wait for the current
            # one, which nothing switches).
            p.sql("INSERT INTO tick VALUES (1)")
            primary.archive_all()
            time.sleep(1)
        return next(line for line in sidecar.output().splitlines() if text in line)

    line = wait_for(sidecar, f"base backup {name}: opshooks base-backup: stored", 120)
    taken = fields(line)
    assert (taken["report"], taken["from"], taken["name"], taken["already"]) == ("baseBackupStored", "standby", name, False), line
    assert len(backups_named(r.env, name)) == 1
    # Recorded as done (its exit status read right), so never started again.
    assert (spool / "backup" / "done" / name).exists(), sidecar.output()[-2000:]
    assert sidecar.output().count(f"base backup {name}: starting") == 1, sidecar.output()[-2000:]
    assert "base backup" not in primary.sidecar.output(), primary.sidecar.output()[-2000:]
    said = reported(api, primary, "of the base backup", lambda d: d.get("lastBaseBackup"))
    assert set(said) == BASE_BACKUP_KEYS, said
    assert (said["baseBackupPod"], said["baseBackupFailure"]) == ("orders-1", ""), said
    assert fields(said["lastBaseBackup"]) == taken, said
    assert all(set(q.body["data"]) <= BASE_BACKUP_KEYS for q in api.requests), api.requests

    # A new pod: the same request, an empty spool; the store already has it.
    sidecar.stop()
    again = Sidecar(r.sidecar_env("orders-1", standby), standby.data, pg_dir(fresh_path("spool")), r.command)
    line = wait_for(again, f"base backup {name}: opshooks base-backup: stored", 60)
    assert fields(line)["already"] is True and fields(line)["id"] == taken["id"], line
    assert len(backups_named(r.env, name)) == 1

    # It restores: every row, from the standby's backup and the archive.
    p.sql("INSERT INTO ledger SELECT g, now() FROM generate_series(1001, 1100) g")
    primary.archive_all()
    env = {**store_env(store, bucket), **{k: r.env[k] for k in ("ARCHIVE_DESTINATION", "ARCHIVE_SERVER")}}
    recovered = recover(store, bucket, r.scripts, env=env)
    assert fields(recovered.fetch_line)["id"] == taken["id"], recovered.fetch_line
    contiguous(rows := recovered.rows())
    assert len(rows) == 1100
    standby.stop()


def test_a_report_carries_only_the_part_that_changed(store, bucket, api, cluster_pki):
    """A primary's sidecar that took a base backup (none of its standbys
    ready) reports it once: its later reports of the WAL do not carry it
    again, which would write it back over a standby's newer one in the
    Database's status."""
    r = rendered(store, bucket)
    name = r.requests.split()[0]
    files = {f.name: f.read_text() for f in r.scripts.iterdir() if f.is_file()}
    scripts = config_map_mount("own-base-backup", {**files, "base-backup": f"{name} orders-0 immediate\n"})
    primary = Primary(store, bucket, None, settings=r.settings, env=r.env, command=r.command)
    p = primary.cluster
    primary.sidecar.stop()
    env = {**r.sidecar_env("orders-0", p), **report_env(api, cluster_pki[0]), "ARCHIVE_SCRIPTS": str(scripts)}
    primary.sidecar = Sidecar(env, p.data, primary.spool, r.command)
    p.sql("CREATE TABLE tick (n int)")
    deadline = time.monotonic() + 120
    while not api.configmaps[REPORT].get("data", {}).get("lastBaseBackup"):
        assert time.monotonic() < deadline, f"no base backup reported\n{primary.sidecar.output()[-3000:]}"
        p.sql("INSERT INTO tick VALUES (1)")
        primary.archive_all()
        time.sleep(1)
    taken = api.configmaps[REPORT]["data"]
    assert taken["baseBackupPod"] == "orders-0" and fields(taken["lastBaseBackup"])["name"] == name, taken
    sent = len(api.requests)
    for n in range(3):
        p.sql("INSERT INTO tick VALUES (1)")
        last = primary.archive_all()
    reported(api, primary, f"of {last} stored", lambda d: d.get("lastArchivedWal", "") >= last)
    later = api.requests[sent:]
    assert later, "no report of the WAL after the base backup's"
    assert all(not set(q.body["data"]) & BASE_BACKUP_KEYS for q in later), [q.body for q in later]


# --------------------------------------------------------------------------
# i. A base backup proven to restore, by the hook's verification pod


VERIFY_RENDERED = RENDERED.parent.parent / "v2-archive-verify-base" / "response.json"


def rendered_verification(store: Store, bucket: str) -> tuple[dict[str, tuple[list[str], dict[str, str]]], Path]:
    """The verification CronJob's pod as the hook answers it (golden
    `v2-archive-verify-base`): each container's command and values, mapped
    to this machine and nothing else (its volumes to new directories, the
    ConfigMap's files where it mounts them, barman-cloud's or PostgreSQL's
    PATH, the endpoint, the bucket's name, the keys); and the spool."""
    answer = json.loads(VERIFY_RENDERED.read_text())
    kids = {(c["kind"], c["metadata"]["name"]): c for c in answer["children"]}
    pod = kids[("CronJob", "orders-verify-base")]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    root = pg_dir(fresh_path("verify-pod"))
    dirs = {}
    for v in pod["volumes"]:
        if "emptyDir" in v:
            dirs[v["name"]] = pg_dir(root / v["name"])
        else:
            files = kids[("ConfigMap", v["configMap"]["name"])]["data"]
            dirs[v["name"]] = config_map_mount("verify-scripts", files)
    local = store_env(store, bucket)
    out = {}
    for c in pod["initContainers"] + pod["containers"]:
        paths = {m["mountPath"]: str(dirs[m["name"]]) for m in c["volumeMounts"]}

        def here(value: str) -> str:
            for mount, d in paths.items():
                if value == mount or value.startswith(mount + "/"):
                    return d + value[len(mount):]
            return value
        env = {e["name"]: here(expand(e["value"], {})) for e in c["env"] if "value" in e}
        secrets = {e["name"] for e in c["env"] if "valueFrom" in e}
        if "ARCHIVE_DESTINATION" in env:
            mapped = ("PATH", "ARCHIVE_ENDPOINT", *secrets, "AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS")
            env.update({k: local[k] for k in mapped})
            env["ARCHIVE_DESTINATION"] = f"s3://{bucket}{urlparse(env['ARCHIVE_DESTINATION']).path}"
        else:
            env.update({"PATH": PG_PATH, "HOME": str(pg_dir(root / "home")), "LANG": "C.UTF-8"})
        if c["name"] == "archiver":  # job() gives the others theirs
            env["TERMINATION_LOG"] = str(root / "archiver.termination")
        out[c["name"]] = ([expand(a, {}) for a in c["command"]], env)
    return out, dirs["wal-spool"]


def test_the_verification_pod_restores_the_newest_base_backup_and_ends(store, bucket):
    """The hook's verification pod, as rendered: its init container
    fetches the newest base backup, its archiver serves the replay from
    the Database's own archive, and its PostgreSQL container replays the
    whole archive over the backup and promotes. The restored server holds
    every row committed and archived, not only the backup's; then the
    archiver ends by itself, so the pod (and its Job) finishes. A run that
    cannot replay ends its archiver all the same."""
    r = rendered(store, bucket)
    primary = Primary(store, bucket, None, settings=r.settings, env=r.env, command=r.command)
    p = primary.cluster
    p.sql("INSERT INTO ledger SELECT g, now() FROM generate_series(1, 1000) g")
    backup = base_backup(primary)
    p.sql("INSERT INTO ledger SELECT g, now() FROM generate_series(1001, 1500) g")
    primary.archive_all()

    pod, spool = rendered_verification(store, bucket)
    assert pod["archiver"][1]["RECOVERY_SERVER"] == r.env["ARCHIVE_SERVER"], pod["archiver"][1]
    command, env = pod["pitr-fetch"]
    fetched = job("", env, command=command)
    assert fetched.rc == 0 and fields(fetched.line)["id"] == backup["id"], str(fetched)
    data = Path(env["PGDATA"])
    subprocess.run(["chown", "-R", "postgres:postgres", str(data)], check=True)  # one user in a pod
    command, env = pod["archiver"]
    archiver = Sidecar(env, data, spool, command)
    command, env = pod["verify"]
    replayed = job("", env, command=command, as_postgres=True)
    assert replayed.rc == 0, f"{replayed}\n--- archiver\n{archiver.output()[-3000:]}"
    assert fields(replayed.line)["report"] == "recovered", replayed.line
    # Then retention (the golden keeps 14 days): every backup is a day old
    # at most, so it deletes none.
    assert archiver.proc.wait(60) == 0, archiver.output()[-2000:]
    retained = fields(termination(Path(pod["archiver"][1]["TERMINATION_LOG"])))
    assert (retained["report"], retained["kept"], retained["deleted"]) == ("retained", 1, 0), retained
    rows = Recovered(data, fetched.line, replayed.line, 0, 0).rows()
    contiguous(rows)
    assert len(rows) == 1500, f"{len(rows)} rows: the archive after the backup was not replayed"

    # Nothing to replay (no fetched backup): refused, and the archiver
    # ends; retention refuses too, with nothing deleted.
    pod, spool = rendered_verification(store, bucket)
    command, env = pod["archiver"]
    archiver = Sidecar(env, Path(env["PGDATA"]), spool, command)
    command, env = pod["verify"]
    refused = job("", env, command=command, as_postgres=True)
    assert refused.rc == 3 and fields(refused.line)["report"] == "archiveStep", str(refused)
    assert archiver.proc.wait(15) == 3, archiver.output()[-2000:]
    said = fields(termination(Path(pod["archiver"][1]["TERMINATION_LOG"])))
    assert (said["script"], said["verdict"]) == ("retain", "refused"), said
    assert backup_ids(primary.env) == [backup["id"]], "retention deleted without a proof"


def aged(store: Store, bucket: str, env: dict[str, str], backup_id: str, days: int) -> None:
    """Base backup `backup_id` made `days` older in the store: its times in
    its backup.info, which barman-cloud's retention reads, moved back (the
    machine cannot wait for a window of days to pass)."""
    where = urlparse(env["ARCHIVE_DESTINATION"]).path.lstrip("/")
    key = f"{where}/{env['ARCHIVE_SERVER']}/base/{backup_id}/backup.info"
    info = store.s3.get(bucket, key).decode()

    def older(m: re.Match) -> str:
        t = dt.datetime.fromisoformat(m.group(2)) - dt.timedelta(days=days)
        return f"{m.group(1)}={t.isoformat(sep=' ')}"
    info = re.sub(r"^(begin_time|end_time)=(.+)$", older, info, flags=re.M)
    store.s3.put(bucket, key, info.encode())


def test_retention_keeps_the_window_after_a_proof_and_deletes_what_is_older(store, bucket):
    """Three base backups, the first aged 30 days and the second 20 (their
    catalog times moved back), the window 14 days, as the golden renders
    the verification pod. After the proof of the newest, retention keeps
    the second (the newest before the window: any second of the window is
    reached from it) and the newest, deletes the first and the WAL before
    the second; the WAL from the second on stays, and the archive still
    recovers to its end with every row."""
    r = rendered(store, bucket)
    primary = Primary(store, bucket, None, settings=r.settings, env=r.env, command=r.command)
    p = primary.cluster
    ids = []
    for n in range(3):
        p.sql(f"INSERT INTO ledger SELECT g, now() FROM generate_series({n * 100 + 1}, {n * 100 + 100}) g")
        primary.archive_all()
        ids.append(base_backup(primary)["id"])
    p.sql("INSERT INTO ledger SELECT g, now() FROM generate_series(301, 400) g")
    primary.archive_all()
    env = primary.env
    aged(store, bucket, env, ids[0], 30)
    aged(store, bucket, env, ids[1], 20)
    where = urlparse(env["ARCHIVE_DESTINATION"]).path.lstrip("/")
    wals = f"{where}/{env['ARCHIVE_SERVER']}/wals/"
    before = sorted(k.rsplit("/", 1)[-1] for k in store.s3.keys(bucket, wals))

    pod, spool = rendered_verification(store, bucket)
    # A proof, but the ConfigMap no longer holds a window (the field removed
    # after the run was created): retain.sh refuses, and nothing goes.
    proof = pg_dir(fresh_path("proof")) / "finished"
    proof.write_text("0\n")
    gone = job("retain.sh", {**pod["archiver"][1], "ARCHIVER_UNTIL": str(proof),
                             "RETENTION_FILE": str(proof.parent / "retention-days")})
    assert gone.rc == 3 and fields(gone.line)["verdict"] == "refused", str(gone)
    assert backup_ids(env) == sorted(ids), "retention ran with no window in the ConfigMap"

    command, fetch_env = pod["pitr-fetch"]
    fetched = job("", fetch_env, command=command)
    assert fetched.rc == 0 and fields(fetched.line)["id"] == ids[2], str(fetched)
    data = Path(fetch_env["PGDATA"])
    subprocess.run(["chown", "-R", "postgres:postgres", str(data)], check=True)
    command, archiver_env = pod["archiver"]
    archiver = Sidecar(archiver_env, data, spool, command)
    command, verify_env = pod["verify"]
    replayed = job("", verify_env, command=command, as_postgres=True)
    assert replayed.rc == 0, f"{replayed}\n--- archiver\n{archiver.output()[-3000:]}"
    assert archiver.proc.wait(60) == 0, archiver.output()[-3000:]
    said = fields(termination(Path(archiver_env["TERMINATION_LOG"])))
    assert (said["kept"], said["deleted"], said["windowDays"], said["oldest"]) == (2, 1, 14, ids[1]), said
    # The window now starts where the second backup ended (20 days back).
    age = dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(said["oldestEnd"])
    assert dt.timedelta(days=19) < age < dt.timedelta(days=21), said

    left = backups(env)
    assert backup_ids(env) == ids[1:], left
    begin_wal = next(b["begin_wal"] for b in left if b["backup_id"] == ids[1])
    after = sorted(k.rsplit("/", 1)[-1] for k in store.s3.keys(bucket, wals))
    # The primary archives on (its archive_timeout), so a newer segment may
    # have come since `before`: what counts is that none it held is gone.
    deleted = [w for w in before if w[:24] >= begin_wal and w not in after]
    assert not deleted, f"WAL the window needs was deleted: {deleted}"
    assert any(w[:24] < begin_wal for w in before) and not any(w[:24] < begin_wal for w in after), \
        f"the WAL before {begin_wal} stays: {after[:5]}"
    recovered = recover(store, bucket, r.scripts, env={**store_env(store, bucket), **{k: env[k] for k in ("ARCHIVE_DESTINATION", "ARCHIVE_SERVER")}})
    contiguous(rows := recovered.rows())
    assert len(rows) == 400
