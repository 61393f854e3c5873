"""The backup job's two shell scripts, run for real.

src/operators/backup_job/dump.sh and upload.sh run here exactly as the backup
pod runs them: each as `/bin/sh -c <script text>` (the text read from its
real path in src/ for every run), the two at the same time, meeting on a
FIFO in a shared WORK_DIR, each with only its own container's environment
(the variables job.rs sets, plus the PATH and HOME an image supplies).

They talk to real servers on loopback: a PostgreSQL started with initdb and
password (SCRAM) authentication over TCP, and moto's standalone S3 server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest
from pyhelpers import ServerProcess, StartFailed, free_port  # tests/support, on sys.path by conftest.py

REPO = Path(__file__).resolve().parents[2]
BACKUP_DIR = REPO / "src" / "operators" / "backup_job"
DUMP_SH = BACKUP_DIR / "dump.sh"
UPLOAD_SH = BACKUP_DIR / "upload.sh"
# The restore and verification Jobs' scripts (test_restore_scripts.py).
SELECT_SH = BACKUP_DIR / "select.sh"
VERIFY_SH = BACKUP_DIR / "verify.sh"
MARK_SH = BACKUP_DIR / "mark.sh"
SCRIPTS = [DUMP_SH, UPLOAD_SH, SELECT_SH, VERIFY_SH, MARK_SH]

# The aws CLI and moto come from the interpreter running the tests, where
# requirements.txt installed them.
PY_BIN = str(Path(sys.executable).parent)
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The scripts run under each shell the pod may give them: dash (/bin/sh of
# the Debian-based postgres images), bash started as `sh` (/bin/sh of the
# amazon/aws-cli image) and busybox (the alpine postgres images).
SHELLS = {
    "dash": ("/bin/dash", ["sh"]),
    "bash": ("/bin/bash", ["sh"]),  # argv[0] "sh": bash's POSIX mode, as /bin/sh
    "busybox": ("/bin/busybox", ["sh"]),
}

STAMP_RE = r"\d{8}T\d{6}Z"
# S3 lists at most 1000 keys a page; moto is told to list 4, so every
# retention run below reads a listing of several pages, as a busy prefix does.
PAGE_SIZE = 4
SECRET_ACCESS_KEY = "moto-secret-key-not-for-logs"


def have_shell(shell: str) -> bool:
    return os.access(SHELLS[shell][0], os.X_OK)


def stamp(when: dt.datetime) -> str:
    return when.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


# --------------------------------------------------------------------------
# PostgreSQL


def pg_bin() -> Path:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]),
    )
    if not found:
        pytest.fail("no PostgreSQL server found; run tests/scripts/setup.sh")
    return Path(found[-1]).parent


def as_postgres(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run server tools as `postgres`."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclasses.dataclass
class Postgres:
    bin: Path
    host: str
    port: int
    user: str
    password: str

    def env(self, database: str = "postgres", **extra: str) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}:{SYSTEM_PATH}",
            "PGHOST": self.host,
            "PGPORT": str(self.port),
            "PGUSER": self.user,
            "PGPASSWORD": self.password,
            "PGDATABASE": database,
            "PGCONNECT_TIMEOUT": "10",
        }
        env.update(extra)
        return env

    def sql(self, query: str, database: str = "postgres", **env: str) -> str:
        """Runs SQL over TCP with password auth; returns psql's unaligned output."""
        out = subprocess.run(
            [str(self.bin / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"],
            input=query,
            env=self.env(database, **env),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if out.returncode != 0:
            raise AssertionError(f"psql failed ({out.returncode}): {out.stderr}")
        return out.stdout

    def create_database(self, name: str, owner: str | None = None) -> None:
        owner_sql = f" OWNER {quote_ident(owner)}" if owner else ""
        self.sql(f"CREATE DATABASE {quote_ident(name)}{owner_sql} TEMPLATE template0")


SCRATCH: Path | None = None


@pytest.fixture(scope="session", autouse=True)
def scratch():
    """One temporary folder for all runs' WORK_DIRs, removed at the end."""
    global SCRATCH
    SCRATCH = Path(tempfile.mkdtemp(prefix="opshooks-runs-"))
    try:
        yield SCRATCH
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)


@contextlib.contextmanager
def running_postgres():
    """A PostgreSQL started with initdb, password (SCRAM) auth over TCP on
    loopback; stopped and removed on exit."""
    binary = pg_bin()
    root = Path(tempfile.mkdtemp(prefix="opshooks-pg-"))
    data = root / "data"
    # Spaces, quotes, a dollar and a backslash: PGPASSWORD must reach libpq
    # untouched by any shell.
    password = "p a's\"s $(w) `o` \\rd"
    pwfile = root / "pwfile"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(pwfile, "postgres", "postgres")
    port = free_port()
    subprocess.run(
        as_postgres(
            [
                str(binary / "initdb"),
                "-D", str(data),
                "-U", "postgres",
                f"--pwfile={pwfile}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E", "UTF8",
                "--locale=C",
            ]
        ),
        check=True,
        capture_output=True,
        timeout=120,
    )
    opts = (
        f"-c listen_addresses=127.0.0.1 -c port={port} "
        f"-c unix_socket_directories={root} -c fsync=off "
        "-c full_page_writes=off -c synchronous_commit=off"
    )
    start = subprocess.run(
        as_postgres(
            [str(binary / "pg_ctl"), "-D", str(data), "-l", str(root / "log"),
             "-w", "-t", "60", "-o", opts, "start"]
        ),
        capture_output=True,
        text=True,
        timeout=90,
    )
    if start.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        pytest.fail(f"postgres did not start: {start.stdout}{start.stderr}\n{log}")
    pg = Postgres(binary, "127.0.0.1", port, "postgres", password)
    try:
        # Password auth really is in force over TCP.
        hba = (data / "pg_hba.conf").read_text()
        assert re.search(r"^host\s+all\s+all\s+127\.0\.0\.1/32\s+scram-sha-256", hba, re.M)
        assert pg.sql("SELECT 1").strip() == "1"
        yield pg
    finally:
        subprocess.run(
            as_postgres([str(binary / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres():
    with running_postgres() as pg:
        yield pg


# --------------------------------------------------------------------------
# S3 (moto's standalone server)


@dataclasses.dataclass
class S3:
    endpoint: str
    client: object

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        keys = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix
        ):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return sorted(keys)

    def put(self, bucket: str, key: str, body: bytes = b"old dump") -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=body)

    def get(self, bucket: str, key: str) -> bytes:
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()


@contextlib.contextmanager
def running_s3(**env: str):
    """moto's standalone S3 server on loopback (env: its settings), with a
    client; stopped on exit."""
    port = free_port()
    log = tempfile.TemporaryFile()
    server = ServerProcess(
        "moto server",
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        log,
        env=dict(os.environ, MOTO_S3_DEFAULT_MAX_KEYS=str(PAGE_SIZE), **env),
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).read()
        return True

    try:
        try:
            server.wait_ready(answers, 60, 0.2)
        except StartFailed:
            log.seek(0)
            pytest.fail(f"moto server did not start: {log.read().decode()}")
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="moto",
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )
        yield S3(endpoint, client)
    finally:
        server.stop(signal.SIGTERM, grace=10)  # with its process group
        log.close()


@pytest.fixture(scope="session")
def s3():
    with running_s3() as server:
        yield server


@pytest.fixture
def bucket(s3):
    name = f"opshooks-test-{uuid.uuid4().hex[:12]}"
    s3.client.create_bucket(Bucket=name)
    return name


# --------------------------------------------------------------------------
# One backup run, as the pod does it


@dataclasses.dataclass
class Run:
    dump_rc: int
    dump_out: str
    dump_err: str
    upload_rc: int
    upload_out: str
    upload_err: str
    started: dt.datetime
    finished: dt.datetime
    work_dir: Path

    def __str__(self) -> str:
        return (
            f"dump rc={self.dump_rc}\n--- dump stdout\n{self.dump_out}"
            f"--- dump stderr\n{self.dump_err}"
            f"upload rc={self.upload_rc}\n--- upload stdout\n{self.upload_out}"
            f"--- upload stderr\n{self.upload_err}"
        )


def run_backup(
    pg: Postgres,
    s3: S3,
    bucket: str,
    *,
    database: str,
    name: str = "nightly",
    prefix: str = "",
    retention_days: int | str | None = None,
    requires_verified: str | None = None,
    user: str | None = None,
    password: str | None = None,
    dump_shell: str = "dash",
    upload_shell: str = "bash",
    first: str = "dump",
    stagger: float = 0.0,
    timeout: float = 90,
) -> Run:
    """Starts dump.sh and upload.sh at once, as the pod's two containers.

    Each gets only its own container's environment from job.rs (dump_env,
    upload_env), plus PATH and HOME as its image would. They share only
    WORK_DIR, where they meet on the FIFO. Waits for both, with a timeout.
    """
    base = Path(tempfile.mkdtemp(prefix="run-", dir=SCRATCH))
    work = base / "work"  # the emptyDir mounted at /work in both containers
    work.mkdir()
    dump_home = base / "dump-home"  # the postgres image's HOME: no .pgpass
    dump_home.mkdir()
    dump_cwd = base / "dump-cwd"
    dump_cwd.mkdir()
    upload_cwd = base / "upload-cwd"  # the aws-cli image's WORKDIR
    upload_cwd.mkdir()

    dump_env = {
        "PATH": f"{pg.bin}:{SYSTEM_PATH}",
        "HOME": str(dump_home),
        "WORK_DIR": str(work),
        "PGHOST": pg.host,
        "PGPORT": str(pg.port),
        "PGDATABASE": database,
        "PGUSER": user if user is not None else pg.user,
        "PGPASSWORD": password if password is not None else pg.password,
        "PGCONNECT_TIMEOUT": "30",
    }
    upload_env = {
        "PATH": f"{PY_BIN}:{SYSTEM_PATH}",
        "WORK_DIR": str(work),
        "HOME": str(work),
        "S3_BUCKET": bucket,
        "S3_PREFIX": prefix,
        "BACKUP_NAME": name,
        "AWS_DEFAULT_REGION": "us-east-1",
        "S3_ENDPOINT": s3.endpoint,
        "AWS_ACCESS_KEY_ID": "moto",
        "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
    }
    if retention_days is not None:
        upload_env["RETENTION_DAYS"] = str(retention_days)
    if requires_verified is not None:
        upload_env["RETENTION_REQUIRES_VERIFIED"] = requires_verified

    sides = {
        "dump": (DUMP_SH, dump_shell, dump_env, dump_cwd),
        "upload": (UPLOAD_SH, upload_shell, upload_env, upload_cwd),
    }
    order = [first, "upload" if first == "dump" else "dump"]
    procs: dict[str, subprocess.Popen] = {}
    outputs: dict[str, tuple] = {}
    started = utcnow()
    try:
        for i, side in enumerate(order):
            script, shell, env, cwd = sides[side]
            if i and stagger:
                time.sleep(stagger)
            executable, argv0 = SHELLS[shell]
            out = open(base / f"{side}.out", "w+", encoding="utf-8", errors="replace")
            err = open(base / f"{side}.err", "w+", encoding="utf-8", errors="replace")
            outputs[side] = (out, err)
            procs[side] = subprocess.Popen(
                [*argv0, "-c", script.read_text()],  # /bin/sh -c <script>, as the pod
                executable=executable,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        for side, proc in procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        hung = [side for side, proc in procs.items() if proc.poll() is None]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    finished = utcnow()

    def text(side: str) -> tuple[str, str]:
        out, err = outputs[side]
        out.seek(0)
        err.seek(0)
        result = out.read(), err.read()
        out.close()
        err.close()
        return result

    dump_out, dump_err = text("dump")
    upload_out, upload_err = text("upload")
    run = Run(
        procs["dump"].returncode, dump_out, dump_err,
        procs["upload"].returncode, upload_out, upload_err,
        started, finished, work,
    )
    if hung:
        pytest.fail(f"{' and '.join(hung)} still running after {timeout} s (killed)\n{run}")
    return run


def final_key_re(prefix: str, name: str) -> re.Pattern:
    return re.compile(re.escape(f"{prefix}{name}-") + STAMP_RE + r"\.pgdump")


def assert_published_one(
    s3: S3, bucket: str, run: Run, prefix: str, name: str, seeded: list[str] = ()
) -> str:
    """Exactly one new complete object, named for this run, and no .partial.

    Objects the test put there itself (seeded) do not count.
    """
    assert (run.dump_rc, run.upload_rc) == (0, 0), str(run)
    keys = [k for k in s3.keys(bucket, prefix) if k not in seeded]
    assert not [k for k in keys if k.endswith(".partial")], keys
    finals = [k for k in keys if final_key_re(prefix, name).fullmatch(k)]
    assert len(finals) == 1, keys
    key = finals[0]
    when = dt.datetime.strptime(key[len(prefix) + len(name) + 1 : -len(".pgdump")], "%Y%m%dT%H%M%SZ")
    when = when.replace(tzinfo=dt.timezone.utc)
    assert run.started - dt.timedelta(seconds=2) <= when <= run.finished, (when, run.started)
    assert f"backup: published s3://{bucket}/{key}\n" in run.upload_out, str(run)
    body = s3.get(bucket, key)
    assert body[:5] == b"PGDMP", body[:16]  # pg_dump's custom format
    return key


# --------------------------------------------------------------------------
# Databases to dump

SMALL_TABLES_SQL = r"""
CREATE TABLE customers (
    id integer PRIMARY KEY,
    name text NOT NULL,
    note text,
    born date,
    balance numeric(12, 2)
);
INSERT INTO customers VALUES
    (1, 'Ada', 'first ''quoted'' note', '1815-12-10', 1234.50),
    (2, 'Grace', E'tab\there\nnew line', '1906-12-09', -7.25),
    (3, 'Zoë 🐘', NULL, NULL, 0),
    (4, 'Robert''); DROP TABLE customers;--', '$(touch /tmp/x)', '2000-01-01', 99999.99);
CREATE TABLE orders (
    id bigserial PRIMARY KEY,
    customer integer REFERENCES customers(id),
    placed timestamptz NOT NULL,
    items jsonb,
    payload bytea
);
INSERT INTO orders (customer, placed, items, payload) VALUES
    (1, '2024-02-29 12:00:00+00', '{"sku": "A-1", "qty": 2}', '\x00ff10'),
    (2, '2024-03-01 00:00:01+01', '[1, 2, 3]', ''),
    (4, '1999-12-31 23:59:59.999999+00', NULL, NULL);
CREATE TABLE events AS
    SELECT g AS id, md5(g::text) AS digest FROM generate_series(1, 5000) AS g;
"""

SMALL_TABLES = {
    "customers": "SELECT * FROM customers ORDER BY id",
    "orders": "SELECT id, customer, placed, items, encode(payload, 'hex') FROM orders ORDER BY id",
    "events": "SELECT count(*), md5(string_agg(id || ':' || digest, ',' ORDER BY id)) FROM events",
}


def snapshot(pg: Postgres, database: str, queries: dict[str, str]) -> dict[str, str]:
    return {table: pg.sql(q, database) for table, q in queries.items()}


def new_database(pg: Postgres, name: str | None = None, owner: str | None = None) -> str:
    name = name or f"shop_{uuid.uuid4().hex[:8]}"
    pg.create_database(name, owner)
    return name


@pytest.fixture
def shop(postgres) -> str:
    """A database with a few tables and known rows."""
    db = new_database(postgres)
    postgres.sql(SMALL_TABLES_SQL, db)
    return db


# --------------------------------------------------------------------------
# a. A backup lands as exactly one object, named for its time


@pytest.mark.parametrize(
    "dump_shell, upload_shell, first, stagger",
    [
        ("dash", "bash", "dump", 0.0),  # the pod: Debian postgres image, aws-cli image
        ("dash", "dash", "upload", 1.0),  # upload's FIFO first, dump a second later
        ("busybox", "bash", "dump", 1.0),  # alpine postgres image; dump waits for upload
    ],
)
def test_backup_publishes_exactly_one_final_object(
    postgres, s3, bucket, shop, dump_shell, upload_shell, first, stagger
):
    for shell in (dump_shell, upload_shell):
        if not have_shell(shell):
            pytest.skip(f"{shell} is not installed")
    prefix, name = "nightly/", "orders-db"
    # Something already under the prefix must stay as it is.
    s3.put(bucket, "nightly/README", b"keep me")
    run = run_backup(
        postgres, s3, bucket, database=shop, name=name, prefix=prefix,
        dump_shell=dump_shell, upload_shell=upload_shell, first=first, stagger=stagger,
    )
    key = assert_published_one(s3, bucket, run, prefix, name)
    assert s3.keys(bucket) == sorted([key, "nightly/README"])
    assert s3.get(bucket, "nightly/README") == b"keep me"
    assert run.dump_err == "" and run.upload_err == "", str(run)
    # The FIFO and the verdict are where the two containers met.
    assert (run.work_dir / "dump.fifo").is_fifo()
    assert (run.work_dir / "dump.rc").read_text() == "0\n"


# --------------------------------------------------------------------------
# b. The object restores into an empty database with the same rows

BIG_ROWS = 400_000  # ~13 MB of incompressible bytes: more than the CLI's 8 MB part


def test_published_dump_restores_with_the_same_rows(postgres, s3, bucket, shop, tmp_path):
    # A table big enough that the dump streams through the FIFO in many
    # pipe-fulls and goes up as a multipart upload of unknown size.
    postgres.sql(
        "CREATE TABLE blobs AS SELECT g AS id, "
        "decode(md5(g::text || random()::text) || md5(random()::text), 'hex') AS b "
        f"FROM generate_series(1, {BIG_ROWS}) AS g",
        shop,
    )
    queries = dict(
        SMALL_TABLES,
        blobs="SELECT count(*), md5(string_agg(id || ':' || encode(b, 'hex'), ',' ORDER BY id)) FROM blobs",
    )
    before = snapshot(postgres, shop, queries)
    assert before["blobs"].startswith(f"{BIG_ROWS}|")

    run = run_backup(postgres, s3, bucket, database=shop, prefix="db/", name="shop")
    key = assert_published_one(s3, bucket, run, "db/", "shop")
    body = s3.get(bucket, key)
    assert len(body) > 8 * 1024 * 1024, len(body)

    dump = tmp_path / "restore.pgdump"
    dump.write_bytes(body)
    target = new_database(postgres, f"restored_{uuid.uuid4().hex[:8]}")
    assert postgres.sql("SELECT count(*) FROM pg_class WHERE relname = 'customers'", target).strip() == "0"
    restore = subprocess.run(
        [str(postgres.bin / "pg_restore"), "--no-owner", "--exit-on-error", "-d", target, str(dump)],
        env=postgres.env(target),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert restore.returncode == 0, restore.stderr
    after = snapshot(postgres, target, queries)
    assert after == before
    tables = postgres.sql(
        "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class "
        "WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace",
        target,
    ).strip()
    assert tables == "blobs,customers,events,orders"


# --------------------------------------------------------------------------
# c. Retention removes only this backup's own old dumps


@pytest.mark.parametrize("prefix", ["nightly/", ""])
def test_retention_prunes_only_this_backups_old_dumps(postgres, s3, bucket, shop, prefix):
    name = "shop"
    now = utcnow()
    pruned = [
        f"{prefix}{name}-{stamp(now - dt.timedelta(days=40))}.pgdump",
        f"{prefix}{name}-{stamp(now - dt.timedelta(days=30, hours=2))}.pgdump",
    ]
    kept = [
        f"{prefix}{name}-{stamp(now - dt.timedelta(days=29, hours=22))}.pgdump",
        f"{prefix}{name}-{stamp(now - dt.timedelta(days=10))}.pgdump",
        # Another backup whose name starts with this one's.
        f"{prefix}{name}-other-20200101T000000Z.pgdump",
        f"{prefix}{name}-2-20200101T000000Z.pgdump",
        # Not complete dumps, or not named like one.
        f"{prefix}{name}-20200101T000000Z.pgdump.partial",
        f"{prefix}{name}-20200101T000000Z.sql",
        f"{prefix}{name}-2020010T000000Z.pgdump",
        f"{prefix}{name}-20200101T000000Z.PGDUMP",
        f"{prefix}{name}-notes.txt",
        f"{prefix}{name}20200101T000000Z.pgdump",
        f"{prefix}README",
        # Deeper under the prefix, or outside it.
        f"{prefix}archive/{name}-20200101T000000Z.pgdump",
        f"elsewhere/{name}-20200101T000000Z.pgdump",
    ]
    if prefix:
        kept.append(f"{name}-20200101T000000Z.pgdump")
    for key in pruned + kept:
        s3.put(bucket, key)

    run = run_backup(postgres, s3, bucket, database=shop, name=name, prefix=prefix, retention_days=30)
    key = assert_published_one(s3, bucket, run, prefix, name, seeded=pruned + kept)
    assert s3.keys(bucket) == sorted(kept + [key]), str(run)
    for old in pruned:
        assert f"backup: pruned s3://{bucket}/{old} (older than 30 days)\n" in run.upload_out
    assert run.upload_out.count("backup: pruned") == len(pruned), run.upload_out


def test_retention_reads_every_page_of_the_listing(postgres, s3, bucket, shop):
    """The CLI prints each page of the listing on its own line, its keys
    separated by tabs; upload.sh must see the keys at the page boundaries."""
    prefix, name = "p/", "shop"
    # Keys that sort before the dated ones and are not dumps fill page one
    # but its last key...
    fillers = [f"{prefix}{name}-0filler-{i}" for i in range(PAGE_SIZE - 1)]
    # ...so two old dumps are the last key of page one and the first of page two.
    boundary = [f"{prefix}{name}-20200101T000000Z.pgdump", f"{prefix}{name}-20200102T000000Z.pgdump"]
    for key in fillers + boundary:
        s3.put(bucket, key, b"")
    page = s3.client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}{name}-")
    assert page["IsTruncated"] and page["Contents"][-1]["Key"] == boundary[0]

    run = run_backup(postgres, s3, bucket, database=shop, name=name, prefix=prefix, retention_days=1)
    key = assert_published_one(s3, bucket, run, prefix, name, seeded=fillers + boundary)
    assert s3.keys(bucket) == sorted(fillers + [key]), str(run)


# With RETENTION_REQUIRES_VERIFIED=1, an old dump goes only once a newer one
# verified: mark.sh left <dump>.verified beside it (test_restore_scripts.py
# writes those markers with the real select.sh, verify.sh and mark.sh; here
# they are put by hand). Each case: the dumps' ages in days, "v" for one
# with a marker; which of them go (their markers with them).
VERIFIED_CASES = {
    "nothing verified: every old dump stays": ("1", ["40", "31", "10"], []),
    # 31 failed verification (no marker) and is newer than 40, the newest
    # that verified: both stay, whatever their age.
    "only an old one verified": ("1", ["40v", "31", "10"], []),
    "a newer one verified": ("1", ["40v", "31", "10v"], ["40v", "31"]),
    "the newest verified is past the cutoff too": ("1", ["50v", "45", "40v", "35", "10"], ["50v", "45"]),
    # A marker proves nothing once its dump is gone (no dump "5" below);
    # another backup's verified dump proves nothing about this one's.
    "a marker without its dump": ("1", ["40", "31", "5m"], []),
    "another backup verified": ("1", ["40", "31", "o5v"], []),
    # Without the variable (or with 0): by age alone, as before, markers
    # left alone.
    "unset: by age alone": (None, ["40v", "31", "10v"], ["40", "31"]),
    "0: by age alone": ("0", ["40", "31", "10"], ["40", "31"]),
}


@pytest.mark.parametrize("case", list(VERIFIED_CASES))
def test_retention_requiring_a_newer_verified_dump(postgres, s3, bucket, shop, case):
    requires, seeds, pruned_ages = VERIFIED_CASES[case]
    prefix, name = "db/", "shop"
    now = utcnow()

    def dump_key(age: str) -> str:
        other = "-other" if age.startswith("o") else ""
        days = int(age.strip("ovm"))
        return f"{prefix}{name}{other}-{stamp(now - dt.timedelta(days=days, hours=1))}.pgdump"

    seeded = []
    for age in seeds:
        key = dump_key(age)
        if not age.endswith("m"):
            seeded.append(key)
        if age.endswith(("v", "m")):
            seeded.append(key + ".verified")
    for key in seeded:
        s3.put(bucket, key, b"opshooks verify: verified tables=1 rows=1")
    pruned = []
    for age in pruned_ages:
        pruned.append(dump_key(age))
        # Markers go with their dumps only when retention waits for them.
        if age.endswith("v") and requires == "1":
            pruned.append(dump_key(age) + ".verified")

    run = run_backup(postgres, s3, bucket, database=shop, name=name, prefix=prefix,
                     retention_days=30, requires_verified=requires)
    key = assert_published_one(s3, bucket, run, prefix, name, seeded=seeded)
    assert s3.keys(bucket) == sorted(set(seeded) - set(pruned) | {key}), str(run)
    assert run.upload_out.count("backup: pruned") == len(pruned_ages), run.upload_out
    for age in pruned_ages:
        if requires == "1":
            newest = min((a for a in seeds if a[0].isdigit() and a.endswith("v")), key=lambda a: int(a[:-1]))
            marker = " and its marker" if age.endswith("v") else ""
            line = (f"backup: pruned s3://{bucket}/{dump_key(age)}{marker} (older than 30 days; "
                    f"s3://{bucket}/{dump_key(newest)} has verified since)\n")
        else:
            line = f"backup: pruned s3://{bucket}/{dump_key(age)} (older than 30 days)\n"
        assert line in run.upload_out, run.upload_out
    if requires == "1":
        for age in seeds:
            if age[0].isdigit() and int(age.strip("vm")) > 30 and age not in pruned_ages:
                assert f"backup: kept s3://{bucket}/{dump_key(age)} (older than 30 days, but " in run.upload_out
    else:
        assert "backup: kept" not in run.upload_out, run.upload_out


def test_retention_refuses_an_unknown_requirement(postgres, s3, bucket, shop):
    old = f"{stamp(utcnow() - dt.timedelta(days=40))}"
    s3.put(bucket, f"nightly-{old}.pgdump")
    run = run_backup(postgres, s3, bucket, database=shop, retention_days=30, requires_verified="yes")
    assert run.upload_rc == 1, str(run)
    assert "backup: RETENTION_REQUIRES_VERIFIED must be 1 (or 0, or unset)" in run.upload_err, str(run)
    assert f"nightly-{old}.pgdump" in s3.keys(bucket), "pruned although the requirement was not understood"


# --------------------------------------------------------------------------
# d. A failed dump publishes nothing


def assert_nothing_published(s3: S3, bucket: str, run: Run) -> None:
    assert run.dump_rc != 0, str(run)
    assert run.upload_rc != 0, str(run)
    assert s3.keys(bucket) == [], str(run)
    assert "nothing was published" in run.upload_err, str(run)
    assert "backup: published" not in run.upload_out, str(run)


def versioned(s3: S3, bucket: str) -> None:
    """Versioning keeps what upload.sh removed, to see what it had streamed."""
    s3.client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})


def partial_versions(s3: S3, bucket: str) -> list[dict]:
    out = s3.client.list_object_versions(Bucket=bucket)
    return [v for v in out.get("Versions", []) if v["Key"].endswith(".pgdump.partial")]


def test_wrong_password_publishes_nothing(postgres, s3, bucket, shop):
    versioned(s3, bucket)
    run = run_backup(postgres, s3, bucket, database=shop, prefix="db/", password="not the password")
    assert_nothing_published(s3, bucket, run)
    assert "password authentication failed" in run.dump_err, str(run)
    assert "exit code 1" in run.upload_err, str(run)
    # The upload did start (an empty stream), and was taken back.
    assert len(partial_versions(s3, bucket)) == 1


def test_missing_database_publishes_nothing(postgres, s3, bucket):
    run = run_backup(postgres, s3, bucket, database=f"absent_{uuid.uuid4().hex[:8]}", prefix="db/")
    assert_nothing_published(s3, bucket, run)
    assert "does not exist" in run.dump_err, str(run)


def test_dump_failing_midstream_publishes_nothing(postgres, s3, bucket):
    """pg_dump dies after streaming megabytes: the truncated dump is discarded.

    The owner of a table with FORCE ROW LEVEL SECURITY may not read it with
    row_security off, as pg_dump does, so pg_dump fails when it reaches that
    table's data, after the tables before it went into the FIFO.
    """
    role = f"app_{uuid.uuid4().hex[:8]}"
    secret = "app password"
    postgres.sql(f"CREATE ROLE {role} LOGIN PASSWORD '{secret}'")
    db = new_database(postgres, owner=role)
    postgres.sql(
        "CREATE TABLE aaa_bulk AS SELECT g AS id, "
        "decode(md5(g::text || random()::text) || md5(random()::text), 'hex') AS b "
        "FROM generate_series(1, 100000) AS g;"
        "CREATE TABLE zzz_guarded (id int);"
        "INSERT INTO zzz_guarded VALUES (1);"
        "ALTER TABLE zzz_guarded ENABLE ROW LEVEL SECURITY;"
        "ALTER TABLE zzz_guarded FORCE ROW LEVEL SECURITY;"
        "CREATE POLICY only_none ON zzz_guarded USING (false);",
        db,
        PGUSER=role,
        PGPASSWORD=secret,
    )
    versioned(s3, bucket)
    run = run_backup(postgres, s3, bucket, database=db, prefix="db/", user=role, password=secret)
    assert_nothing_published(s3, bucket, run)
    assert "row-level security" in run.dump_err, str(run)
    # What had been streamed before the failure really reached S3, under .partial.
    partials = partial_versions(s3, bucket)
    assert len(partials) == 1 and partials[0]["Size"] > 1_000_000, partials


def test_failing_upload_does_not_leave_the_dump_hanging(postgres, s3, shop):
    """The bucket is gone: the upload fails and neither side waits forever."""
    run = run_backup(postgres, s3, f"absent-{uuid.uuid4().hex[:8]}", database=shop, timeout=90)
    assert run.upload_rc != 0, str(run)
    assert "NoSuchBucket" in run.upload_err, str(run)
    assert "backup: published" not in run.upload_out


# --------------------------------------------------------------------------
# e. Hostile values are data, not code


def test_hostile_values_are_data_not_code(postgres, s3, bucket):
    marks = Path(tempfile.mkdtemp(prefix="pw", dir="/tmp"))
    try:
        db = f"we'ird db$(touch {marks}/d)"
        assert len(db.encode()) <= 63  # PostgreSQL's limit on names
        pwned = Path("/tmp/pwned")
        pwned_before = pwned.stat().st_mtime_ns if pwned.exists() else None
        prefix = f"it's \"a b\" $(touch {pwned}) $(touch {marks}/p) `touch {marks}/q` ;x*[y]?é/"
        postgres.create_database(db)
        postgres.sql(SMALL_TABLES_SQL, db)
        before = snapshot(postgres, db, SMALL_TABLES)
        name = "shop"
        old = f"{prefix}{name}-20200101T000000Z.pgdump"
        # A key the prefix would match if it were read as a shell pattern.
        lookalike = prefix.replace("*[y]?", "AyZ") + f"{name}-20200101T000000Z.pgdump"
        s3.put(bucket, old)
        s3.put(bucket, lookalike)

        run = run_backup(postgres, s3, bucket, database=db, name=name, prefix=prefix, retention_days=30)
        key = assert_published_one(s3, bucket, run, prefix, name, seeded=[old, lookalike])
        assert key.startswith(prefix)
        assert s3.keys(bucket) == sorted([key, lookalike]), str(run)
        assert list(marks.iterdir()) == []
        assert (pwned.stat().st_mtime_ns if pwned.exists() else None) == pwned_before

        # And the dump is of that database.
        dump = marks / "x.pgdump"
        dump.write_bytes(s3.get(bucket, key))
        target = new_database(postgres, f"restored_{uuid.uuid4().hex[:8]}")
        subprocess.run(
            [str(postgres.bin / "pg_restore"), "--no-owner", "--exit-on-error", "-d", target, str(dump)],
            env=postgres.env(target), check=True, capture_output=True, timeout=120,
        )
        assert snapshot(postgres, target, SMALL_TABLES) == before
    finally:
        shutil.rmtree(marks, ignore_errors=True)


def test_prefix_that_looks_like_a_file_url_is_data(postgres, s3, bucket, shop):
    """BUG: upload.sh passes the prefix to `aws s3api list-objects-v2 --prefix`,
    and the AWS CLI reads any parameter value starting with file:// or
    fileb:// (and, in CLI v1, http(s)://) as a file (URL) to load. The CRD
    allows such a prefix, so retention then lists a local file's contents,
    or fails; the error is swallowed by the pipe and old dumps are never
    pruned. The CLI also expands $VARS in that path, and prints the result
    in its error, so a prefix of file://$AWS_SECRET_ACCESS_KEY/ writes the
    secret key into the pod's log.
    """
    prefix, name = "file://$AWS_SECRET_ACCESS_KEY/", "shop"
    old = f"{prefix}{name}-20200101T000000Z.pgdump"
    s3.put(bucket, old)
    run = run_backup(postgres, s3, bucket, database=shop, name=name, prefix=prefix, retention_days=30)
    key = assert_published_one(s3, bucket, run, prefix, name, seeded=[old])
    assert SECRET_ACCESS_KEY not in run.upload_out + run.upload_err, "secret key in the log:\n" + str(run)
    assert s3.keys(bucket) == [key], "the old dump was not pruned:\n" + str(run)


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_upload_log_shows_the_key_verbatim(postgres, s3, bucket, shop, shell):
    """BUG (logs only, under dash): `echo` of a value with a backslash.

    dash's echo interprets backslash escapes, so a prefix such as
    team\\nightly\\ is logged with a newline, and \\c cuts the line short.
    The object itself is named right; only the log line is wrong. bash (the
    aws-cli image's /bin/sh) prints it as is; an upload image whose /bin/sh
    is dash (Debian, Ubuntu) does not.
    """
    prefix = "team\\nightly\\cut\\"
    run = run_backup(postgres, s3, bucket, database=shop, prefix=prefix, upload_shell=shell)
    key = assert_published_one(s3, bucket, run, prefix, "nightly")
    assert key.startswith("team\\nightly\\cut\\nightly-")


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_dump_log_shows_the_database_verbatim(postgres, s3, bucket, shell):
    """BUG (logs only, under dash, the /bin/sh of the Debian postgres images):
    dump.sh's failure message echoes PGDATABASE, so a name with \\c in it is
    cut short."""
    db = f"no\\cdb_{uuid.uuid4().hex[:6]}"
    run = run_backup(postgres, s3, bucket, database=db, dump_shell=shell)
    assert_nothing_published(s3, bucket, run)
    line = f"backup: pg_dump of database {db} on {postgres.host} failed with exit code 1\n"
    assert line in run.dump_err, str(run)


# --------------------------------------------------------------------------
# f. Static checks


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
@pytest.mark.parametrize("shell", ["dash", "bash", "busybox"])
def test_scripts_parse(script, shell):
    if not have_shell(shell):
        pytest.skip(f"{shell} is not installed")
    executable, argv0 = SHELLS[shell]
    out = subprocess.run([*argv0, "-n", str(script)], executable=executable, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_scripts_pass_shellcheck(script):
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (tests/scripts/setup.sh installs it)")
    out = subprocess.run([shellcheck, "-s", "sh", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
