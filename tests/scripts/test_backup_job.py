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

import datetime as dt
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from backups import (  # noqa: F401 (scratch: an autouse fixture)
    BACKUP_DIR,
    DUMP_SH,
    UPLOAD_SH,
    Run,
    assert_published_one,
    new_database,
    run_backup,
    scratch,
    stamp,
    utcnow,
)
from postgres import Postgres, have_shell, postgres, shell_path  # noqa: F401 (postgres: a fixture)
from s3 import PAGE_SIZE, S3, SECRET_ACCESS_KEY, bucket, s3  # noqa: F401 (bucket, s3: fixtures)

# The restore and verification Jobs' scripts (test_restore_scripts.py).
SELECT_SH = BACKUP_DIR / "select.sh"
VERIFY_SH = BACKUP_DIR / "verify.sh"
MARK_SH = BACKUP_DIR / "mark.sh"
SCRIPTS = [DUMP_SH, UPLOAD_SH, SELECT_SH, VERIFY_SH, MARK_SH]


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
    executable, argv0 = shell_path(shell), ["sh"]
    out = subprocess.run([*argv0, "-n", str(script)], executable=executable, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_scripts_pass_shellcheck(script):
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (tests/scripts/setup.sh installs it)")
    out = subprocess.run([shellcheck, "-s", "sh", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
