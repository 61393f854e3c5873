"""The restore and verification scripts, run for real.

src/operators/backup_job/select.sh (the AWS CLI image: picks a dump and
downloads it), src/operators/database/restore.sh (the new Database's
PostgreSQL image: restores it into the application database) and
src/operators/backup_job/verify.sh (a PostgreSQL image: restores it into a
throwaway cluster and counts) and src/operators/backup_job/mark.sh (the AWS
CLI image: records a verified dump in the store, for upload.sh's retention)
run here as the Jobs run them: each as
`/bin/sh -c <script text>` read from its real path in src/, with only its
container's environment, the containers meeting in a shared WORK_DIR.

The dumps are real: taken with dump.sh and upload.sh exactly as
test_backup_job.py runs them, into moto's S3 server, from a real PostgreSQL;
the restores go into another, fresh PostgreSQL instance.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest
from reports import parse, termination_line  # tests/support: the hook reads each line

import backups
from backups import run_backup
from postgres import (  # noqa: F401 (postgres: a fixture)
    SYSTEM_PATH,
    Postgres,
    as_postgres,
    have_shell,
    pg_bin,
    postgres,
    quote_ident,
    running_postgres,
    shell_path,
)
from s3 import PY_BIN, S3, SECRET_ACCESS_KEY, bucket, running_s3, s3  # noqa: F401 (bucket, s3: fixtures)

REPO = Path(__file__).resolve().parents[2]
SELECT_SH = REPO / "src" / "operators" / "backup_job" / "select.sh"
VERIFY_SH = REPO / "src" / "operators" / "backup_job" / "verify.sh"
MARK_SH = REPO / "src" / "operators" / "backup_job" / "mark.sh"
RESTORE_SH = REPO / "src" / "operators" / "database" / "restore.sh"
INIT_APP_SH = REPO / "src" / "operators" / "database" / "init-app.sh"

# The new Database's application user and database: quotes, spaces and
# shell in both, which must stay data.
APP_USER = "new 'app' \"user\" $(touch /tmp/pwned-restore)"
APP_PASSWORD = "app pw 'x' \"y\" `touch /tmp/pwned-restore` \\"
APP_DATABASE = "restored \"db\" it's = $(x)"
PWNED = Path("/tmp/pwned-restore")


# --------------------------------------------------------------------------
# Running the scripts


@dataclasses.dataclass
class Result:
    rc: int
    out: str
    err: str
    log: str  # the termination log
    work: Path

    def __str__(self) -> str:
        return f"rc={self.rc}\n--- stdout\n{self.out}--- stderr\n{self.err}--- termination log\n{self.log}"


ROOT: Path | None = None


@pytest.fixture(scope="module", autouse=True)
def root():
    """One folder for every run's volumes; run_backup's too."""
    global ROOT
    ROOT = Path(tempfile.mkdtemp(prefix="opshooks-restore-"))
    ROOT.chmod(0o755)  # the postgres user reaches the work volumes below
    saved, backups.SCRATCH = backups.SCRATCH, ROOT
    try:
        yield ROOT
    finally:
        backups.SCRATCH = saved
        for pid_file in ROOT.rglob("postmaster.pid"):  # a server a script left running
            subprocess.run(as_postgres([str(pg_bin() / "pg_ctl"), "-D", str(pid_file.parent),
                                               "-m", "immediate", "-w", "stop"]), capture_output=True)
        shutil.rmtree(ROOT, ignore_errors=True)
        ROOT = None


def new_work() -> Path:
    """The Job's emptyDir, writable by the postgres user (verify.sh runs as it)."""
    assert ROOT is not None
    base = Path(tempfile.mkdtemp(prefix="job-", dir=ROOT))
    base.chmod(0o755)
    work = base / "work"
    work.mkdir()
    (base / "home").mkdir()
    if os.geteuid() == 0:
        shutil.chown(work, "postgres", "postgres")
    return work


def run_script(script: Path, env: dict[str, str], work: Path, *, shell: str = "dash",
               user: str | None = None, timeout: float = 180) -> Result:
    """`/bin/sh -c <text>` with exactly env (plus WORK_DIR, HOME and the
    termination log); output to files, so a server left running cannot
    hang the test."""
    if not have_shell(shell):
        pytest.skip(f"{shell} is not installed")
    executable, argv0 = shell_path(shell), ["sh"]
    log = work / "termination-log"
    env = {"HOME": str(work.parent / "home"), "WORK_DIR": str(work), "TERMINATION_LOG": str(log), **env}
    if shell == "busybox":
        # As in the alpine images: busybox's awk, sed, grep and the rest.
        env["PATH"] = f"{busybox_tools()}:{env['PATH']}"
    kwargs: dict = {}
    if user and os.geteuid() == 0:
        pw = pwd.getpwnam(user)
        kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([*argv0, "-c", script.read_text()], executable=executable, env=env,
                                cwd=work.parent, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True, **kwargs)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"{script.name} still running after {timeout} s (killed)")
        out.seek(0)
        err.seek(0)
        return Result(proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                      termination_line(log), work)


BUSYBOX_TOOLS = ["awk", "sed", "grep", "tr", "wc", "head", "cat", "date", "mkdir", "rm", "mv", "chmod",
                 "chown", "id", "mkfifo"]


def busybox_tools() -> Path:
    """A folder of busybox applets, to go first in PATH."""
    assert ROOT is not None
    tools = ROOT / "busybox-bin"
    if not tools.exists():
        tools.mkdir()
        for tool in BUSYBOX_TOOLS:
            (tools / tool).symlink_to(shutil.which("busybox"))
        tools.chmod(0o755)
    return tools


def s3_env(s3: S3, bucket: str, prefix: str = "", **choice: str) -> dict[str, str]:
    """The AWS CLI image's environment: what the Job sets, and its PATH."""
    return {
        "PATH": f"{PY_BIN}:{SYSTEM_PATH}",
        "S3_BUCKET": bucket,
        "S3_PREFIX": prefix,
        "S3_ENDPOINT": s3.endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "moto",
        "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
        **choice,
    }


def select(s3: S3, bucket: str, work: Path | None = None, *, prefix: str = "", shell: str = "bash",
           **choice: str) -> Result:
    return run_script(SELECT_SH, s3_env(s3, bucket, prefix, **choice), work or new_work(), shell=shell)


def pg_env(pg: Postgres, database: str, **extra: str) -> dict[str, str]:
    """The PostgreSQL image's environment, connected as the superuser."""
    env = pg.env(database, **extra)
    env["PATH"] = f"{pg.bin}:{SYSTEM_PATH}"
    return env


def restore(pg: Postgres, work: Path, database: str = APP_DATABASE, app_user: str = APP_USER,
            shell: str = "dash") -> Result:
    return run_script(RESTORE_SH, pg_env(pg, database, APP_USER=app_user), work, shell=shell)


def verify(work: Path, shell: str = "dash", path: str | None = None) -> Result:
    env = {"PATH": path or f"{pg_bin()}:{SYSTEM_PATH}", "LANG": "C.UTF-8"}
    return run_script(VERIFY_SH, env, work, shell=shell, user="postgres")


def mark(s3: S3, bucket: str, work: Path, shell: str = "bash") -> Result:
    """The verification Job's last container, on the volume select.sh and
    verify.sh wrote."""
    return run_script(MARK_SH, s3_env(s3, bucket), work, shell=shell)


def selected_line(result: Result) -> dict[str, str]:
    text = (result.work / "selected").read_text()
    assert text.endswith("\n") and text.count("\n") == 1, text
    m = re.fullmatch(r"bytes=(\d+) taken=(\S+) key=(.*)\n", text)
    assert m, text
    return {"bytes": m[1], "taken": m[2], "key": m[3]}


def assert_one_line_failure(r: Result, reason: str, tag: str = "restore") -> None:
    """Non-zero, and one line naming the reason on stderr and in the log."""
    assert r.rc != 0, str(r)
    assert r.log.count("\n") == 1 and r.log.startswith(f"opshooks {tag}: "), str(r)
    assert reason in r.log, f"expected {reason!r} in the termination log\n{r}"
    assert r.log in r.err + r.out, str(r)


# --------------------------------------------------------------------------
# The databases


@pytest.fixture(scope="module")
def target():
    """A second, fresh PostgreSQL instance: the new Database's primary."""
    with running_postgres() as pg:
        yield pg


def init_app(pg: Postgres, user: str = APP_USER, database: str = APP_DATABASE) -> None:
    """The application user and its empty database, made by the Database's
    own init-app.sh."""
    env = pg_env(pg, "postgres", APP_USER=user, APP_PASSWORD=APP_PASSWORD, APP_DATABASE=database)
    work = new_work()
    r = run_script(INIT_APP_SH, env, work)
    assert r.rc == 0, str(r)


def fresh_app(pg: Postgres) -> tuple[str, str]:
    """Another application user and database in pg, each test its own."""
    tag = uuid.uuid4().hex[:6]
    user, database = f"{APP_USER} {tag}", f"{APP_DATABASE} {tag}"
    init_app(pg, user, database)
    return user, database


def user_relations(pg: Postgres, database: str) -> str:
    """Every relation and large object in a database outside the system's."""
    return pg.sql(
        "SELECT coalesce(string_agg(format('%I.%I', n.nspname, c.relname), ',' ORDER BY 1), '') "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'; "
        "SELECT count(*) FROM pg_largeobject_metadata; "
        "SELECT coalesce(string_agg(nspname, ',' ORDER BY 1), '') FROM pg_namespace "
        "WHERE nspname <> 'information_schema' AND nspname NOT LIKE 'pg\\_%' AND nspname <> 'public'",
        database,
    ).strip()


EMPTY = "0"  # user_relations of an empty database: no relation, no large object, no schema


def literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def source_sql(alice: str, bob: str) -> str:
    """Several schemas, two owners, a large object, sequences in use, a view
    and a function, and a few thousand rows."""
    a, b = quote_ident(alice), quote_ident(bob)
    return f"""
CREATE ROLE {a};
CREATE ROLE {b};
CREATE SCHEMA sales AUTHORIZATION {a};
CREATE SCHEMA "stock room" AUTHORIZATION {b};
SET ROLE {a};
CREATE TABLE sales.customers (id serial PRIMARY KEY, name text NOT NULL);
INSERT INTO sales.customers (name) SELECT 'customer ' || g FROM generate_series(1, 2000) g;
INSERT INTO sales.customers (name) VALUES (E'quote '' tab\\t back\\\\slash ünï');
CREATE TABLE sales.orders (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    customer int NOT NULL REFERENCES sales.customers,
    total numeric(10, 2),
    placed timestamptz
);
INSERT INTO sales.orders (customer, total, placed)
    SELECT 1 + g % 2000, (g * 7) % 1000, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute'
    FROM generate_series(1, 3000) g;
CREATE VIEW sales.big_orders AS SELECT * FROM sales.orders WHERE total > 500;
CREATE FUNCTION sales.order_count() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM sales.orders';
CREATE SEQUENCE sales.invoice_no START 1000;
SELECT nextval('sales.invoice_no') FROM generate_series(1, 5);
GRANT SELECT ON sales.orders TO {b};
RESET ROLE;
SET ROLE {b};
CREATE TABLE "stock room"."Items" (sku text PRIMARY KEY, qty int NOT NULL, doc oid);
INSERT INTO "stock room"."Items" SELECT 'sku-' || g, g % 17, NULL FROM generate_series(1, 1500) g;
UPDATE "stock room"."Items" SET doc = lo_from_bytea(0, convert_to('a large object ✓ ' || repeat('x', 5000), 'UTF8'))
    WHERE sku = 'sku-1';
RESET ROLE;
"""


SOURCE_QUERIES = {
    "customers": "SELECT count(*), max(id), md5(string_agg(id || ':' || name, ',' ORDER BY id)) FROM sales.customers",
    "orders": "SELECT count(*), max(id), md5(string_agg(format('%s %s %s %s', id, customer, total, placed), ','"
              " ORDER BY id)) FROM sales.orders",
    "items": "SELECT count(*), md5(string_agg(sku || ':' || qty, ',' ORDER BY sku)) FROM \"stock room\".\"Items\"",
    "view": "SELECT count(*) FROM sales.big_orders",
    "function": "SELECT sales.order_count()",
    "sequence": "SELECT last_value, is_called FROM sales.invoice_no",
    "large object": "SELECT encode(lo_get(doc), 'escape') FROM \"stock room\".\"Items\" WHERE sku = 'sku-1'",
}
SOURCE_ROWS = 2001 + 3000 + 1500


def snapshot(pg: Postgres, database: str, **env: str) -> dict[str, str]:
    return {what: pg.sql(q, database, **env) for what, q in SOURCE_QUERIES.items()}


@dataclasses.dataclass
class Source:
    database: str
    owners: tuple[str, str]
    before: dict[str, str]
    bucket: str
    key: str  # the published object, as backed up by dump.sh + upload.sh
    dump: bytes  # its bytes


@pytest.fixture(scope="module")
def source(postgres, s3) -> Source:
    """A database backed up once with the real dump.sh + upload.sh."""
    tag = uuid.uuid4().hex[:6]
    owners = (f"alice {tag}", f"bob's {tag}")
    db = backups.new_database(postgres, f"orders src {tag}")
    postgres.sql(source_sql(*owners), db)
    before = snapshot(postgres, db)
    assert before["customers"].startswith("2001|2001|"), before
    name = f"src-{tag}"
    s3.client.create_bucket(Bucket=name)
    run = run_backup(postgres, s3, name, database=db, name="orders", prefix="db/")
    key = backups.assert_published_one(s3, name, run, "db/", "orders")
    return Source(db, owners, before, name, key, s3.get(name, key))


# --------------------------------------------------------------------------
# 1. The round trip: back up, restore into a fresh instance, read the same rows


@pytest.mark.parametrize("select_shell, restore_shell", [("bash", "dash"), ("dash", "busybox")])
def test_round_trip_into_a_fresh_instance(source, target, s3, select_shell, restore_shell):
    """The source's published backup (dump.sh + upload.sh), selected as the
    newest of its names and restored into a fresh instance under another
    user."""
    before, key, body, tag = source.before, source.key, source.dump, source.owners[0].split()[-1]
    user, database = fresh_app(target)
    assert user_relations(target, database) == EMPTY
    work = new_work()
    sel = select(s3, source.bucket, work, prefix="db/", shell=select_shell,
                 RESTORE_NAMES="orders-snapshot orders orders-pre-upgrade-17")
    assert sel.rc == 0, str(sel)
    assert sel.log == "", "select.sh wrote a termination log on success"
    line = selected_line(sel)
    assert line["key"] == key and line["bytes"] == str(len(body)), line
    assert (work / "dump.pgdump").read_bytes() == body
    stamp = key[len("db/orders-"):-len(".pgdump")]
    assert line["taken"] == f"{stamp[0:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}Z"

    r = restore(target, work, database, user, shell=restore_shell)
    assert r.rc == 0, str(r)
    assert r.log == f"opshooks restore: restored bytes={len(body)} taken={line['taken']} key={key}\n", str(r)
    # The hook reads the same dump from it (the Database's status.restoredFrom).
    assert parse(r.log) == {"report": "restored", "bytes": len(body), "taken": line["taken"], "key": key}
    assert not PWNED.exists()

    # The same rows, objects and large object, read as the superuser ...
    assert snapshot(target, database) == before
    # ... in a fresh instance, where the source's owners do not exist ...
    roles = target.sql("SELECT string_agg(rolname, ',') FROM pg_roles WHERE rolname LIKE '% " + tag + "'")
    assert roles.strip() == "", roles
    # ... every object owned by the new application user ...
    u = literal(user)
    owned = target.sql(
        f"SELECT count(*), count(*) FILTER (WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = {u})) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname IN ('sales', 'stock room');"
        f"SELECT string_agg(nspname || '=' || (nspowner = (SELECT oid FROM pg_roles WHERE rolname = {u}))::text, "
        "',' ORDER BY nspname) FROM pg_namespace WHERE nspname IN ('sales', 'stock room');"
        f"SELECT count(*), count(*) FILTER (WHERE proowner = (SELECT oid FROM pg_roles WHERE rolname = {u})) "
        "FROM pg_proc WHERE pronamespace = 'sales'::regnamespace;"
        f"SELECT count(*), count(*) FILTER (WHERE lomowner = (SELECT oid FROM pg_roles WHERE rolname = {u})) "
        "FROM pg_largeobject_metadata;",
        database,
    ).splitlines()
    # 3 tables, 3 primary keys, 3 sequences, the view: every one, the
    # schemas, the function and the large object are the user's.
    assert owned == ["10|10", "sales=true,stock room=true", "1|1", "1|1"], owned

    # ... who logs in, writes, and continues the sequences past the restored values.
    app = dict(PGUSER=user, PGPASSWORD=APP_PASSWORD)
    assert target.sql("INSERT INTO sales.customers (name) VALUES ('after') RETURNING id", database, **app) == "2002\n"
    assert target.sql("INSERT INTO sales.orders (customer, total) VALUES (2002, 1) RETURNING id", database, **app) == "3001\n"
    assert target.sql("SELECT nextval('sales.invoice_no')", database, **app) == "1005\n"
    assert target.sql("INSERT INTO \"stock room\".\"Items\" VALUES ('new', 1, lo_from_bytea(0, 'x')) RETURNING qty",
                      database, **app) == "1\n"
    assert target.sql(SOURCE_QUERIES["large object"], database, **app) == before["large object"]
    assert target.sql("SELECT sales.order_count(), (SELECT count(*) FROM sales.big_orders)", database, **app) \
        == f"3001|{before['view'].strip()}\n"


# --------------------------------------------------------------------------
# 2. Selection among several dumps of several names


SEEDED = {
    # key (under the prefix) -> what it holds
    "orders-20240101T000000Z.pgdump": b"orders jan",
    "orders-20240301T000000Z.pgdump": b"orders mar 1",
    "orders-snapshot-20240215T120000Z.pgdump": b"snapshot feb",
    "orders-pre-upgrade-17-20240310T080000Z.pgdump": b"pre-upgrade mar 10",
    "other-20240401T000000Z.pgdump": b"other apr",
    # Never candidates: unfinished, misnamed, deeper, another name's.
    "orders-20240320T000000Z.pgdump.partial": b"partial",
    "orders-pre-upgrade-17-20240322T000000Z.pgdump.partial": b"partial",
    "orders-2024032T000000Z.pgdump": b"bad stamp",
    "orders-20240325T000000Z.sql": b"sql",
    "orders-20240326T000000Z.PGDUMP": b"upper case",
    "orders20240327T000000Z.pgdump": b"no dash",
    "archive/orders-20240330T000000Z.pgdump": b"deeper",
    "orders-x-20240331T000000Z.pgdump": b"orders-x",
}
ALL_ORDERS = "orders orders-snapshot orders-pre-upgrade-17"


@pytest.mark.parametrize("prefix", ["db/orders/", "", "it's \"a b\" $(touch /tmp/pwned-restore) *[x]?/"])
@pytest.mark.parametrize("names, before, expected, taken", [
    (ALL_ORDERS, "", "orders-pre-upgrade-17-20240310T080000Z.pgdump", "2024-03-10T08:00:00Z"),
    ("orders", "", "orders-20240301T000000Z.pgdump", "2024-03-01T00:00:00Z"),
    ("orders-snapshot", "", "orders-snapshot-20240215T120000Z.pgdump", "2024-02-15T12:00:00Z"),
    # Strictly before: the dump taken at that very second is not.
    (ALL_ORDERS, "20240301000000", "orders-snapshot-20240215T120000Z.pgdump", "2024-02-15T12:00:00Z"),
    (ALL_ORDERS, "20240301000001", "orders-20240301T000000Z.pgdump", "2024-03-01T00:00:00Z"),
    (ALL_ORDERS, "20240215120000", "orders-20240101T000000Z.pgdump", "2024-01-01T00:00:00Z"),
    ("other orders", "", "other-20240401T000000Z.pgdump", "2024-04-01T00:00:00Z"),
])
def test_selection_picks_the_newest_candidate(s3, bucket, prefix, names, before, expected, taken):
    for key, body in SEEDED.items():
        s3.put(bucket, prefix + key, body)
    choice = {"RESTORE_NAMES": names}
    if before:
        choice["RESTORE_BEFORE"] = before
    r = select(s3, bucket, prefix=prefix, **choice)
    assert r.rc == 0, str(r)
    body = SEEDED[expected]
    assert selected_line(r) == {"bytes": str(len(body)), "taken": taken, "key": prefix + expected}
    assert (r.work / "dump.pgdump").read_bytes() == body
    assert not PWNED.exists()


@pytest.mark.parametrize("shell", ["bash", "dash", "busybox"])
def test_selection_of_an_exact_key(s3, bucket, shell):
    for key, body in SEEDED.items():
        s3.put(bucket, "p/" + key, body)
    # Not the newest, and of a name nobody asked for: exactly that object.
    r = select(s3, bucket, prefix="p/", shell=shell, RESTORE_KEY="p/orders-20240101T000000Z.pgdump",
               RESTORE_NAMES="other")
    assert r.rc == 0, str(r)
    assert selected_line(r) == {"bytes": "10", "taken": "2024-01-01T00:00:00Z",
                                "key": "p/orders-20240101T000000Z.pgdump"}
    assert (r.work / "dump.pgdump").read_bytes() == b"orders jan"
    # A key not named like ours: its time is the store's.
    s3.put(bucket, "hand made/my dump", b"by hand")
    r = select(s3, bucket, shell=shell, RESTORE_KEY="hand made/my dump")
    assert r.rc == 0, str(r)
    line = selected_line(r)
    assert line["key"] == "hand made/my dump" and line["bytes"] == "7", line
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", line["taken"]), line


@pytest.mark.parametrize("shell", ["bash", "dash", "busybox"])
def test_selection_breaks_ties_by_the_order_of_the_names(s3, bucket, shell):
    s3.put(bucket, "orders-20240501T000000Z.pgdump", b"scheduled")
    s3.put(bucket, "orders-snapshot-20240501T000000Z.pgdump", b"snapshot")
    s3.put(bucket, "orders-20240430T000000Z.pgdump", b"older")
    for names, body in [("orders-snapshot orders", b"snapshot"), ("orders orders-snapshot", b"scheduled")]:
        r = select(s3, bucket, shell=shell, RESTORE_NAMES=names)
        assert r.rc == 0, str(r)
        assert (r.work / "dump.pgdump").read_bytes() == body, names


def test_selection_reads_every_page_of_the_listing(s3, bucket):
    """moto lists 4 keys a page here: the newest is on the last page."""
    for day in range(1, 12):
        s3.put(bucket, f"orders-202406{day:02d}T000000Z.pgdump", f"day {day}".encode())
    r = select(s3, bucket, RESTORE_NAMES="orders")
    assert r.rc == 0, str(r)
    assert selected_line(r)["key"] == "orders-20240611T000000Z.pgdump"


# --------------------------------------------------------------------------
# 3. Failures: one line each, non-zero, nothing restored that would serve


@pytest.mark.parametrize("choice, reason", [
    ({"RESTORE_KEY": "db/orders-20990101T000000Z.pgdump"}, "no object db/orders-20990101T000000Z.pgdump in bucket "),
    ({"RESTORE_KEY": "db/orders-20240101T000000Z.pgdump.partial"}, "is an unfinished upload (.partial)"),
    ({"RESTORE_NAMES": "orders orders-snapshot"},
     "no backup in bucket {bucket} under prefix 'db/' for the names orders, orders-snapshot"),
    ({"RESTORE_NAMES": "other", "RESTORE_BEFORE": "20240401000000"},
     "no backup taken before 2024-04-01T00:00:00Z in bucket {bucket} under prefix 'db/' for the names other"),
    ({"RESTORE_NAMES": "other", "RESTORE_BEFORE": "2024-04-01"}, "RESTORE_BEFORE must be 14 digits"),
    ({}, "neither RESTORE_KEY nor RESTORE_NAMES is set"),
], ids=["missing key", "partial key", "no candidate", "none before", "bad time", "no choice"])
def test_selection_failures_say_why(s3, bucket, choice, reason):
    s3.put(bucket, "db/orders-20240101T000000Z.pgdump.partial", b"partial")
    s3.put(bucket, "db/orders-x-20240101T000000Z.pgdump", b"not orders'")
    s3.put(bucket, "db/other-20240401T000000Z.pgdump", b"other")
    # What an earlier, successful attempt left in the volume must not be
    # taken for this one's choice.
    work = new_work()
    (work / "dump.pgdump").write_bytes(b"an earlier dump")
    (work / "selected").write_text("bytes=15 taken=2020-01-01T00:00:00Z key=db/earlier\n")
    r = select(s3, bucket, work, prefix="db/", **choice)
    assert_one_line_failure(r, reason.format(bucket=bucket))
    assert not (work / "dump.pgdump").exists() and not (work / "selected").exists()


def test_selection_in_a_missing_bucket(s3):
    name = f"absent-{uuid.uuid4().hex[:8]}"
    for choice in [{"RESTORE_NAMES": "orders"}, {"RESTORE_KEY": "orders-20240101T000000Z.pgdump"}]:
        r = select(s3, name, **choice)
        assert_one_line_failure(r, f"bucket {name} does not exist")
        assert not (r.work / "dump.pgdump").exists()


@pytest.fixture(scope="module")
def s3_with_auth():
    """A moto server that checks credentials: an IAM user with a key that
    may read one bucket, then every request authenticated."""
    with running_s3() as server:
        iam = boto3.client("iam", endpoint_url=server.endpoint, region_name="us-east-1",
                           aws_access_key_id="moto", aws_secret_access_key=SECRET_ACCESS_KEY)
        iam.create_user(UserName="restorer")
        key = iam.create_access_key(UserName="restorer")["AccessKey"]
        iam.put_user_policy(UserName="restorer", PolicyName="all", PolicyDocument=(
            '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'))
        iam.create_user(UserName="nobody")  # a known key, allowed nothing
        powerless = iam.create_access_key(UserName="nobody")["AccessKey"]
        iam.create_user(UserName="lister")  # may list, not download
        lister = iam.create_access_key(UserName="lister")["AccessKey"]
        iam.put_user_policy(UserName="lister", PolicyName="list", PolicyDocument=(
            '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:ListBucket", '
            '"Resource": "*"}]}'))
        name = f"auth-{uuid.uuid4().hex[:8]}"
        server.client.create_bucket(Bucket=name)
        server.put(name, "orders-20240101T000000Z.pgdump", b"a dump")
        # From now on every request must be signed with a known key.
        request = urllib.request.Request(f"{server.endpoint}/moto-api/reset-auth", data=b"0", method="POST",
                                         headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(request, timeout=10).read()
        yield server, name, key, powerless, lister


@pytest.mark.parametrize("case", ["good", "unknown key", "wrong secret", "no permission", "list only", "none"])
def test_selection_with_bad_credentials(s3_with_auth, case):
    server, name, key, powerless, lister = s3_with_auth
    key_id, secret = key["AccessKeyId"], key["SecretAccessKey"]
    env = s3_env(server, name, RESTORE_NAMES="orders")
    env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = {
        "good": (key_id, secret),
        "unknown key": ("AKIAUNKNOWN000000000", secret),
        "wrong secret": (key_id, secret[:-1] + ("a" if secret[-1] != "a" else "b")),
        "no permission": (powerless["AccessKeyId"], powerless["SecretAccessKey"]),
        "list only": (lister["AccessKeyId"], lister["SecretAccessKey"]),
        "none": ("", ""),
    }[case]
    if case == "none":
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
        # Nor from an instance's metadata service: no request leaves loopback.
        env["AWS_EC2_METADATA_DISABLED"] = "true"
    for choice in [{"RESTORE_NAMES": "orders"}, {"RESTORE_KEY": "orders-20240101T000000Z.pgdump"}]:
        env.pop("RESTORE_NAMES", None)
        r = run_script(SELECT_SH, {**env, **choice}, new_work(), shell="bash")
        if case == "none":
            assert_one_line_failure(r, f"no credentials to reach bucket {name} (while ")
            continue
        if case == "good":
            assert r.rc == 0, str(r)
            assert (r.work / "dump.pgdump").read_bytes() == b"a dump"
            continue
        if case == "list only":  # found, then the download is refused
            assert_one_line_failure(r, f"access denied to bucket {name} (while downloading orders-20240101T000000Z.pgdump)")
        elif case == "no permission":
            assert_one_line_failure(r, f"access denied to bucket {name} (while ")
        else:
            assert_one_line_failure(r, f"the credentials were refused by the store for bucket {name} (while ")
        assert secret not in r.log + r.err + r.out
        assert not (r.work / "dump.pgdump").exists()


def selected_dump(s3: S3, bucket: str, body: bytes, key: str = "db/orders-20240601T000000Z.pgdump") -> Path:
    """select.sh has downloaded body: the restore's starting point."""
    s3.put(bucket, key, body)
    r = select(s3, bucket, prefix="db/", RESTORE_NAMES="orders")
    assert r.rc == 0, str(r)
    return r.work


@pytest.mark.parametrize("cut", ["two thirds", "last byte", "inside the header"])
def test_truncated_dump_restores_nothing(source, target, s3, bucket, cut):
    size = len(source.dump)
    keep = {"two thirds": size * 2 // 3, "last byte": size - 1, "inside the header": 40}[cut]
    work = selected_dump(s3, bucket, source.dump[:keep])
    user, database = fresh_app(target)
    r = restore(target, work, database, user)
    assert_one_line_failure(r, "the dump is truncated or corrupt")
    assert user_relations(target, database) == EMPTY


def test_restore_refuses_a_database_that_holds_tables(source, target, s3, bucket):
    work = selected_dump(s3, bucket, source.dump)
    user, database = fresh_app(target)
    target.sql("CREATE TABLE public.precious (v text); INSERT INTO public.precious VALUES ('keep me')",
               database, PGUSER=user, PGPASSWORD=APP_PASSWORD)
    r = restore(target, work, database, user)
    assert_one_line_failure(r, "already holds 1 tables, views or sequences (first: public.precious): "
                               "a restore never writes over data")
    assert user_relations(target, database) == "public.precious\n0", user_relations(target, database)
    assert target.sql("SELECT v FROM precious", database) == "keep me\n"


def test_restore_refuses_a_database_that_holds_large_objects(source, target, s3, bucket):
    work = selected_dump(s3, bucket, source.dump)
    user, database = fresh_app(target)
    target.sql("SELECT lo_from_bytea(0, 'x')", database)
    r = restore(target, work, database, user)
    assert_one_line_failure(r, "already holds 1 large objects")
    assert user_relations(target, database) == "1"


def newer_major_dump(dump: bytes, major: int) -> bytes:
    """No newer PostgreSQL here: the dump's header says so instead. The
    archive header holds the server's version string (length-prefixed,
    after the database's name); its major is rewritten to one above ours,
    same length."""
    at = dump[:200].index(f"{major}.".encode())
    newer = str(major + 1).encode()
    assert len(newer) == len(str(major))
    return dump[:at] + newer + dump[at + len(newer):]


def newer_format_dump(dump: bytes) -> bytes:
    """The archive format's version (bytes 5-7 after "PGDMP") set to one no
    pg_restore here reads, as a newer pg_dump's would be."""
    assert dump[:5] == b"PGDMP" and dump[5] == 1
    return dump[:6] + bytes([99]) + dump[7:]


@pytest.mark.parametrize("header", ["server version", "archive format"])
def test_restore_refuses_a_dump_from_a_newer_major(source, target, s3, bucket, header):
    major = int(target.sql("SHOW server_version_num")) // 10000
    if header == "server version":
        body = newer_major_dump(source.dump, major)
        reason = (f"the dump is from PostgreSQL {major + 1}, newer than this server's {major}: "
                  f"restore it into a Database of version {major + 1} or newer")
    else:
        body = newer_format_dump(source.dump)
        reason = (f"the dump was written by a newer pg_dump than this server's PostgreSQL {major} reads "
                  "(unsupported version (1.99) in file header): restore it into a Database of a newer version")
    work = selected_dump(s3, bucket, body)
    if header == "server version":
        listing = subprocess.run([str(target.bin / "pg_restore"), "--list", str(work / "dump.pgdump")],
                                 capture_output=True, text=True)
        assert f"Dumped from database version: {major + 1}." in listing.stdout, listing.stdout[:500]
    user, database = fresh_app(target)
    r = restore(target, work, database, user)
    assert_one_line_failure(r, reason)
    assert user_relations(target, database) == EMPTY


def test_restore_that_fails_midway_leaves_nothing(source, target, s3, bucket):
    """The last statement fails, after tables were created and filled (only
    a superuser may create an event trigger, restored last): the one
    transaction leaves nothing behind."""
    tag = uuid.uuid4().hex[:6]
    db = backups.new_database(target, f"midway {tag}")
    target.sql("CREATE TABLE aaa (id int); INSERT INTO aaa SELECT generate_series(1, 1000);"
               "CREATE FUNCTION on_ddl() RETURNS event_trigger LANGUAGE plpgsql AS 'BEGIN END';"
               "CREATE EVENT TRIGGER zzz ON ddl_command_start EXECUTE FUNCTION on_ddl();", db)
    dump = subprocess.run([str(target.bin / "pg_dump"), "--format=custom"], env=target.env(db),
                          capture_output=True, check=True).stdout
    work = selected_dump(s3, bucket, dump)
    user, database = fresh_app(target)
    r = restore(target, work, database, user)
    assert_one_line_failure(r, "the restore failed and nothing was restored: ")
    assert "event trigger" in r.log, str(r)
    assert user_relations(target, database) == EMPTY


def test_restore_needs_the_application_user(source, target, s3, bucket):
    work = selected_dump(s3, bucket, source.dump)
    _, database = fresh_app(target)
    r = restore(target, work, database, "nobody here")
    assert_one_line_failure(r, "the application user nobody here does not exist")
    assert user_relations(target, database) == EMPTY


def test_restore_needs_a_database_the_user_owns(source, target, s3, bucket):
    work = selected_dump(s3, bucket, source.dump)
    user, _ = fresh_app(target)
    database = backups.new_database(target, f"not theirs {uuid.uuid4().hex[:6]}")  # owned by postgres
    r = restore(target, work, database, user)
    assert_one_line_failure(r, f"database {database} is not owned by the application user {user}")
    assert user_relations(target, database) == EMPTY


def test_restore_without_a_selected_dump(target):
    user, database = fresh_app(target)
    r = restore(target, new_work(), database, user)
    assert_one_line_failure(r, "no dump was downloaded to ")


# --------------------------------------------------------------------------
# 4. Verification


def verify_ok(r: Result, sel: dict[str, str]) -> tuple[int, int]:
    assert r.rc == 0, str(r)
    m = re.fullmatch(r"opshooks verify: verified tables=(\d+) rows=(\d+) seconds=(\d+) (bytes=.*)\n", r.log)
    assert m, str(r)
    assert m[4] == f"bytes={sel['bytes']} taken={sel['taken']} key={sel['key']}"
    # The hook reads the same figures (the Backup's status.lastVerified).
    said = parse(r.log)
    assert (said["report"], said["tables"], said["rows"], said["key"]) == ("verified", int(m[1]), int(m[2]), sel["key"])
    assert r.log in r.out
    # The line mark.sh records.
    assert (r.work / "verified").read_text() == r.log
    return int(m[1]), int(m[2])


def assert_server_gone(r: Result) -> None:
    assert not (r.work / "pgdata" / "postmaster.pid").exists(), "verify.sh left its server running"
    log = (r.work / "server" / "log").read_text()
    assert "listening on Unix socket" in log, log
    assert "listening on IPv" not in log, f"the throwaway server listened on TCP:\n{log}"


@pytest.mark.parametrize("shell", ["dash", "busybox"])
def test_verify_passes_on_a_good_dump(source, s3, bucket, shell):
    work = selected_dump(s3, bucket, source.dump)
    sel = selected_line(Result(0, "", "", "", work))
    r = verify(work, shell)
    assert verify_ok(r, sel) == (3, SOURCE_ROWS)
    assert_server_gone(r)


def test_verify_counts_inheritance_and_partitions(postgres, s3, bucket):
    """A parent's rows are its own (not its children's); with
    --load-via-partition-root every partition's rows go to the root."""
    db = backups.new_database(postgres)
    postgres.sql(
        "CREATE TABLE parent (id int); CREATE TABLE child (extra text) INHERITS (parent);"
        "INSERT INTO parent SELECT generate_series(1, 10); INSERT INTO child SELECT g, 'c' FROM generate_series(1, 25) g;"
        "CREATE TABLE events (id int, at date) PARTITION BY RANGE (at);"
        "CREATE TABLE events_2023 PARTITION OF events FOR VALUES FROM ('2023-01-01') TO ('2024-01-01');"
        "CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');"
        "INSERT INTO events SELECT g, date '2023-06-01' + g FROM generate_series(1, 400) g;"
        "CREATE TABLE \"we\"\"ird . name\" (v text); INSERT INTO \"we\"\"ird . name\" VALUES (E'a\\nb'), ('c');"
        "CREATE TABLE empty (v int);",
        db,
    )
    for options, tables in [([], 6), (["--load-via-partition-root"], 5)]:
        dump = subprocess.run([str(postgres.bin / "pg_dump"), "--format=custom", *options], env=postgres.env(db),
                              capture_output=True, check=True).stdout
        work = selected_dump(s3, bucket, dump)
        r = verify(work)
        assert verify_ok(r, selected_line(Result(0, "", "", "", work))) == (tables, 10 + 25 + 400 + 2), options
        assert_server_gone(r)


def test_verify_as_root_runs_the_server_as_postgres(source, s3, bucket):
    """The official images start as root; verify.sh hands the server to
    postgres through gosu (here a stand-in for it)."""
    work = selected_dump(s3, bucket, source.dump)
    shim = work.parent / "bin"
    shim.mkdir()
    (shim / "gosu").write_text('#!/bin/sh\nuser="$1"; shift\nexec runuser -u "$user" -- "$@"\n')
    (shim / "gosu").chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(work, "root", "root")
        work.chmod(0o755)
    env = {"PATH": f"{shim}:{pg_bin()}:{SYSTEM_PATH}", "LANG": "C.UTF-8"}
    r = run_script(VERIFY_SH, env, work)
    assert verify_ok(r, selected_line(Result(0, "", "", "", work))) == (3, SOURCE_ROWS)
    assert_server_gone(r)


@pytest.mark.parametrize("damage", ["truncated", "flipped bytes"])
def test_verify_fails_on_a_corrupt_dump(source, s3, bucket, damage):
    body = bytearray(source.dump)
    if damage == "truncated":
        body = body[: len(body) * 2 // 3]
    else:
        middle = len(body) * 2 // 3
        body[middle:middle + 64] = bytes(b ^ 0x5A for b in body[middle:middle + 64])
    work = selected_dump(s3, bucket, bytes(body))
    # An earlier attempt's success must not stand for this one.
    (work / "verified").write_text("opshooks verify: verified tables=3 rows=1 seconds=1 "
                                   + (work / "selected").read_text())
    r = verify(work)
    assert_one_line_failure(r, "the dump does not restore: ", "verify")
    assert_server_gone(r)
    assert not (work / "verified").exists()


@pytest.mark.parametrize("effect, reason", [
    ("DELETE FROM public.a_victims WHERE id = v", "public.a_victims has 70 rows, the dump 100"),
    ("DROP TABLE IF EXISTS public.a_victims", "public.a_victims is not a table after the restore"),
])
def test_verify_fails_when_the_restored_rows_disagree(postgres, s3, bucket, effect, reason):
    """A dump that restores (exit 0) with other rows than it holds: a CHECK
    constraint's function deletes rows of (or drops) a table restored
    before it."""
    db = backups.new_database(postgres)
    postgres.sql(
        "CREATE TABLE a_victims (id int); INSERT INTO a_victims SELECT generate_series(1, 100);"
        "CREATE FUNCTION eat(v int) RETURNS boolean LANGUAGE plpgsql AS "
        "$$BEGIN RETURN true; END$$;"
        "CREATE TABLE b_eater (id int CHECK (public.eat(id)));"
        "INSERT INTO b_eater SELECT generate_series(1, 30);"
        f"CREATE OR REPLACE FUNCTION eat(v int) RETURNS boolean LANGUAGE plpgsql AS $$BEGIN {effect}; RETURN true; END$$;",
        db,
    )
    assert postgres.sql("SELECT count(*) FROM a_victims", db) == "100\n"
    dump = subprocess.run([str(postgres.bin / "pg_dump"), "--format=custom"], env=postgres.env(db),
                          capture_output=True, check=True).stdout
    work = selected_dump(s3, bucket, dump)
    r = verify(work)
    assert_one_line_failure(r, f"the restored data disagrees with the dump in 1 of 2 tables: {reason}", "verify")
    assert_server_gone(r)


@pytest.mark.parametrize("header", ["server version", "archive format"])
def test_verify_refuses_a_dump_from_a_newer_major(source, s3, bucket, header):
    version = subprocess.run([str(pg_bin() / "pg_restore"), "--version"], capture_output=True, text=True)
    major = int(re.search(r"\) (\d+)", version.stdout)[1])
    if header == "server version":
        body = newer_major_dump(source.dump, major)
        reason = f"the dump is from PostgreSQL {major + 1}, newer than this image's {major}"
    else:
        body = newer_format_dump(source.dump)
        reason = f"the dump was written by a newer pg_dump than this image's PostgreSQL {major} reads"
    r = verify(selected_dump(s3, bucket, body))
    assert_one_line_failure(r, reason, "verify")


# --------------------------------------------------------------------------
# 5. Marking a verified dump, and retention that waits for one


@pytest.mark.parametrize("shell", ["bash", "dash", "busybox"])
def test_mark_records_the_verified_dump(source, s3, bucket, shell):
    work = selected_dump(s3, bucket, source.dump)
    key = selected_line(Result(0, "", "", "", work))["key"]
    v = verify(work)
    assert v.rc == 0, str(v)
    r = mark(s3, bucket, work, shell)
    assert r.rc == 0, str(r)
    assert r.log == f"opshooks mark: marked s3://{bucket}/{key}.verified\n" and r.out == r.log, str(r)
    assert s3.keys(bucket) == sorted([key, key + ".verified"])
    assert s3.get(bucket, key + ".verified").decode() == v.log


@pytest.mark.parametrize("shell", ["bash", "dash", "busybox"])
def test_mark_takes_the_key_as_data(s3, bucket, shell):
    """A key with quotes, spaces, shell and a file:// start: the marker is
    written under exactly that key plus .verified, and nothing runs."""
    key = "file://it's \"a b\" $(touch /tmp/pwned-restore) `x` *[x]?/orders-20240601T000000Z.pgdump"
    s3.put(bucket, key, b"a dump")
    work = new_work()
    selected = f"bytes=6 taken=2024-06-01T00:00:00Z key={key}"
    (work / "selected").write_text(selected + "\n")
    (work / "verified").write_text(f"opshooks verify: verified tables=1 rows=2 seconds=3 {selected}\n")
    r = mark(s3, bucket, work, shell)
    assert r.rc == 0, str(r)
    assert s3.keys(bucket) == sorted([key, key + ".verified"])
    assert s3.get(bucket, key + ".verified") == (work / "verified").read_bytes()
    assert not PWNED.exists()


MARK_REFUSALS = {
    "nothing selected": "/selected does not name a dump (select.sh did not finish): nothing to mark",
    "not verified": "db/orders-20240601T000000Z.pgdump was not verified (",
    "verified another dump": "db/orders-20240601T000000Z.pgdump was not verified (",
    "verification failed": "db/orders-20240601T000000Z.pgdump was not verified (",
    "missing bucket": "cannot write the marker s3://",
}


@pytest.mark.parametrize("case", list(MARK_REFUSALS))
def test_mark_refuses_to_mark_what_it_cannot_vouch_for(s3, bucket, case):
    reason = MARK_REFUSALS[case]
    key = "db/orders-20240601T000000Z.pgdump"
    s3.put(bucket, key, b"a dump")
    work = new_work()
    selected = f"bytes=6 taken=2024-06-01T00:00:00Z key={key}"
    verified = f"opshooks verify: verified tables=1 rows=2 seconds=3 {selected}\n"
    if case != "nothing selected":
        (work / "selected").write_text(selected + "\n")
    if case == "verified another dump":  # an earlier run's line, in a reused volume
        verified = verified.replace(key, "db/orders-20240501T000000Z.pgdump")
    if case == "verification failed":
        verified = "opshooks verify: the dump does not restore: " + selected + "\n"
    if case != "not verified":
        (work / "verified").write_text(verified)
    target = bucket
    if case == "missing bucket":
        target = f"absent-{uuid.uuid4().hex[:8]}"
        reason += f"{target}/{key}.verified: "
    r = mark(s3, target, work)
    assert_one_line_failure(r, reason, "mark")
    if case == "missing bucket":
        assert "NoSuchBucket" in r.log, str(r)
    assert s3.keys(bucket) == [key]


def test_retention_waits_for_a_newer_verified_dump(postgres, source, s3, bucket):
    """The whole story with the real scripts: a dump that fails verification
    is not marked, and neither it nor anything older goes while no newer dump
    has verified; once the next real backup verified and mark.sh marked it,
    the old dumps go, with their markers."""
    prefix, name = "db/", "orders"
    now = backups.utcnow()
    old_verified = f"{prefix}{name}-{backups.stamp(now - dt.timedelta(days=40))}.pgdump"
    failed = f"{prefix}{name}-{backups.stamp(now - dt.timedelta(days=31))}.pgdump"
    s3.put(bucket, old_verified, source.dump)
    s3.put(bucket, old_verified + ".verified", b"opshooks verify: verified (long ago)\n")
    s3.put(bucket, failed, source.dump[: len(source.dump) // 2])

    def verify_newest() -> tuple[Result, Result]:
        work = select(s3, bucket, prefix=prefix, RESTORE_NAMES=name).work
        return verify(work), mark(s3, bucket, work)

    # The newest dump is truncated: verification fails, nothing is marked.
    v, m = verify_newest()
    assert v.rc != 0 and m.rc != 0, f"{v}\n{m}"
    seeded = [old_verified, old_verified + ".verified", failed]
    assert s3.keys(bucket) == sorted(seeded)

    def backup_run() -> tuple[backups.Run, str]:
        run = run_backup(postgres, s3, bucket, database=source.database, name=name, prefix=prefix,
                         retention_days=30, requires_verified="1")
        return run, backups.assert_published_one(s3, bucket, run, prefix, name, seeded=seeded)

    # Both old dumps are past the cutoff; nothing newer verified: both stay.
    run, first = backup_run()
    assert s3.keys(bucket) == sorted(seeded + [first]), str(run)
    assert "backup: pruned" not in run.upload_out, str(run)
    seeded.append(first)

    # The new dump verifies and is marked...
    v, m = verify_newest()
    assert v.rc == 0 and m.rc == 0, f"{v}\n{m}"
    assert s3.get(bucket, first + ".verified").decode() == v.log
    seeded.append(first + ".verified")
    # ...so the next run prunes the old ones, the verified one's marker with it.
    run, second = backup_run()
    assert s3.keys(bucket) == sorted([first, first + ".verified", second]), str(run)
    assert f"backup: pruned s3://{bucket}/{old_verified} and its marker (older than 30 days; " \
        f"s3://{bucket}/{first} has verified since)\n" in run.upload_out, str(run)
    assert f"backup: pruned s3://{bucket}/{failed} (older than 30 days; " in run.upload_out, str(run)
