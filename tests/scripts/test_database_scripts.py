"""The Database operator's shell scripts, run for real.

src/operators/database/*.sh run here as the pods run them (children.rs):
start.sh as `/bin/sh -c <script text> start <command...>`, init-app.sh,
upgrade.sh and dump-stopped.sh as `/bin/sh -c <script text>`; primary-init.sh from /docker-entrypoint-initdb.d, where the
initdb ConfigMap mounts it with mode 0555, so the official image's
entrypoint executes it (it still works sourced, as from a 0644 file, and
one test runs it that way too). Each is read from its real path in src/
for every run and gets only the environment its container would have (the
variables children.rs sets, plus the PATH and HOME an image supplies):

* primary-init.sh, start.sh, dump-stopped.sh and upgrade.sh act as the
  database server's OS user (`postgres`), against real PostgreSQL clusters
  made with initdb, on loopback ports and private socket directories;
* init-app.sh is a client Job: it talks to the primary over TCP with
  password (SCRAM) authentication;
* dump-stopped.sh (the upgrade Job's init container, old version's image)
  starts the stopped old cluster on a private socket, dumps the app
  database to $DUMP and stops it again; upgrade.sh then restores that dump
  into a new cluster beside the old one.

Every value a user controls is hostile here (quotes, spaces, `$(...)`,
backticks, backslashes, psql meta-commands): it must reach PostgreSQL as
data and never run as shell or SQL.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from pyhelpers import free_port  # tests/support, on sys.path by conftest.py
from reports import report, termination_line  # tests/support: the hook reads each line

import postgres
from postgres import (  # noqa: F401 (scratch: an autouse fixture)
    APP_DATABASE,
    APP_PASSWORD,
    APP_USER,
    BIN,
    PG_PATH,
    PWNED,
    PWNED_APP,
    REPLICATION_PASSWORD,
    SCRIPTS,
    SHELLS,
    SUPERUSER_PASSWORD,
    SYSTEM_PATH,
    Cluster,
    Result,
    SqlError,
    fresh_path,
    pg_dir,
    postgres_ids,
    primary_init_env,
    run,
    run_entrypoint_init,
    run_script,
    script_argv,
    scratch,
    shell_path,
)

REPO = Path(__file__).resolve().parents[2]
# restore.sh runs in test_restore_scripts.py; it is checked here with the rest.
# start.sh, promote.sh and probe.sh run in test_failover_scripts.py too; tls.sh in
# test_tls_scripts.py.
SCRIPT_NAMES = ["primary-init.sh", "start.sh", "promote.sh", "probe.sh", "init-app.sh", "upgrade.sh", "dump-stopped.sh",
                "restore.sh", "tls.sh", "lease.sh", "monitor-role.sh",
                # The WAL archive's, which run in test_archive_scripts.py.
                "archive-wal.sh", "restore-wal.sh", "archiver.sh", "base-backup.sh", "pitr-fetch.sh",
                "pitr-replay.sh"]









def tree_digest(root: Path) -> dict[str, tuple]:
    """Every entry under root: type, mode, and for files the size and SHA-256."""
    entries: dict[str, tuple] = {}
    if not root.exists():
        return entries
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                entries[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                entries[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_size,
                                hashlib.sha256(p.read_bytes()).hexdigest())
    st = root.lstat()
    entries["."] = ("dir", stat.S_IMODE(st.st_mode))
    return entries


# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# 1. primary-init.sh


@dataclasses.dataclass
class Primary:
    cluster: Cluster
    init: Result  # the run of primary-init.sh
    hba_before: str
    hba_after: str




@pytest.fixture(scope="module")
def primary(scratch) -> Primary:
    root = fresh_path("primary")
    cluster = Cluster(root / "data", root / "sock")
    cluster.initdb()
    cluster.image_hba()
    hba_before = (cluster.data / "pg_hba.conf").read_text()
    cluster.start(tcp=False)  # socket only, as the entrypoint's temporary server
    init = run_entrypoint_init(cluster)
    hba_after = (cluster.data / "pg_hba.conf").read_text()
    cluster.stop()
    cluster.start(tcp=True)
    yield Primary(cluster, init, hba_before, hba_after)
    cluster.stop("immediate")




def replication_connect(cluster: Cluster, user: str, password: str) -> Result:
    """A physical replication connection over TCP, as a standby makes."""
    return cluster.psql(
        "IDENTIFY_SYSTEM;",
        user=user,
        password=password,
        conninfo=f"host=127.0.0.1 port={cluster.port} dbname=replication replication=true",
    )


def test_primary_init_creates_replicator(primary: Primary):
    c = primary.cluster
    assert primary.init.rc == 0, str(primary.init)
    assert "running" in primary.init.out  # the ConfigMap's file is executable (0555)
    assert "entrypoint: init process complete" in primary.init.out, str(primary.init)
    assert c.sql("SELECT rolreplication, rolcanlogin, rolsuper FROM pg_roles "
                 "WHERE rolname = 'replicator'") == "t|t|f"
    assert c.sql("SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid "
                 "WHERE rolname = 'replicator'") == "t"
    # Exactly one line appended, and nothing else touched.
    assert primary.hba_after == primary.hba_before + "host replication replicator all scram-sha-256\n"
    assert c.sql("SELECT count(*) FROM pg_hba_file_rules WHERE error IS NOT NULL") == "0"

    # The replicator streams with exactly that password ...
    ok = replication_connect(c, "replicator", REPLICATION_PASSWORD)
    assert ok.rc == 0, str(ok)
    assert ok.out.split("|")[0].strip().isdigit(), ok.out  # IDENTIFY_SYSTEM's systemid
    # ... and with nothing else.
    for wrong in ["", "wrong", REPLICATION_PASSWORD[:-1], REPLICATION_PASSWORD + " "]:
        bad = replication_connect(c, "replicator", wrong)
        assert bad.rc != 0, f"replicator connected with password {wrong!r}"
        expected = "no password supplied" if wrong == "" else "password authentication failed"
        assert expected in bad.err, str(bad)
    # The line is for the replicator only: the superuser gets no replication.
    su = replication_connect(c, "postgres", c.password)
    assert su.rc != 0 and "no pg_hba.conf entry for replication connection" in su.err, str(su)

    # The hostile password ran nowhere.
    assert not PWNED.exists(), "REPLICATION_PASSWORD ran as shell"
    assert c.sql("SELECT count(*) FROM pg_roles WHERE rolname = 'postgres'") == "1"


def test_primary_init_does_not_wait_for_a_standby_under_synchronous_replication(scratch):
    """Issue 32 item 6: the entrypoint's temporary server gets the
    StatefulSet's `-c` arguments, synchronous_standby_names included, before
    any standby exists: primary-init.sh's CREATE ROLE waited for ever, and
    a new synchronous Database never initialized."""
    root = fresh_path("primary-synchronous")
    cluster = Cluster(root / "data", root / "sock")
    cluster.initdb()
    cluster.image_hba()
    names = """-c 'synchronous_standby_names=ANY 1 ("orders-0","orders-1","orders-2")'"""
    options = names + " -c synchronous_commit=on"
    cluster.start(tcp=False, durable=True, extra=options)
    try:
        init = run_entrypoint_init(cluster, timeout=30)
        assert init.rc == 0 and "entrypoint: init process complete" in init.out, str(init)
        cluster.stop()
        cluster.start(tcp=True, durable=True, extra=options)
        assert cluster.sql("SELECT count(*) FROM pg_roles WHERE rolname = 'replicator'") == "1"
        # The server itself still waits for a named standby.
        assert cluster.sql("SHOW synchronous_standby_names") == 'ANY 1 ("orders-0","orders-1","orders-2")'
        assert cluster.sql("SHOW synchronous_commit") == "on"
    finally:
        cluster.stop("immediate")


def test_primary_init_second_run(primary: Primary):
    c = primary.cluster
    assert primary.init.rc == 0, str(primary.init)
    before = c.sql("SELECT oid, rolpassword FROM pg_authid WHERE rolname = 'replicator'")
    # Run again: sourced by the entrypoint (as from a 0644 file), then as
    # `/bin/sh -c <text>`.
    again = run_entrypoint_init(c, mode=0o644)
    assert again.rc == 0 and "entrypoint: init process complete" in again.out, str(again)
    assert "sourcing" in again.out, str(again)
    executed = run_script("primary-init.sh", primary_init_env(c), as_postgres=True)
    assert executed.rc == 0, str(executed)

    assert c.sql("SELECT oid, rolpassword FROM pg_authid WHERE rolname = 'replicator'") == before
    assert c.sql("SELECT count(*) FROM pg_roles WHERE rolname = 'replicator'") == "1"
    hba = (c.data / "pg_hba.conf").read_text()
    # Each run appends the line again (3 runs here, so 3 lines): harmless,
    # the first matching line wins. Appending it only once is fine too.
    assert hba.count("host replication replicator all scram-sha-256\n") in (1, 3)
    assert c.sql("SELECT pg_reload_conf()") == "t"
    time.sleep(0.3)
    assert c.sql("SELECT count(*) FROM pg_hba_file_rules WHERE error IS NOT NULL") == "0"
    ok = replication_connect(c, "replicator", REPLICATION_PASSWORD)
    assert ok.rc == 0, str(ok)
    assert not PWNED.exists()


# --------------------------------------------------------------------------
# 2. start.sh (what clone.sh, the init container it replaced, did; the
# failover paths are in test_failover_scripts.py)

# What start.sh execs once the data directory is ready: in the pod, the
# image's entrypoint and the server; here a marker on stdout.
STARTED = ["echo", "started"]


def role_dir(primary: str | None, initialized: str | None = "true", epoch: str = "1") -> Path:
    """The mounted role ConfigMap: a file per key; None leaves a key out."""
    d = fresh_path("role")
    d.mkdir()
    for key, value in (("primary", primary), ("initialized", initialized), ("epoch", epoch)):
        if value is not None:
            (d / key).write_text(value)
    d.chmod(0o755)
    return d


def start_env(pgdata: Path, hostname: str, port: int, *, primary: str | None = "db-0",
              initialized: str | None = "true", password: str = REPLICATION_PASSWORD,
              path: str = PG_PATH, roles: Path | None = None, log: Path | None = None) -> dict[str, str]:
    """The postgres container's environment (children.rs): the read-write
    Service is 127.0.0.1:port here."""
    return {
        "PATH": path,
        "HOME": str(pgdata.parent),
        "HOSTNAME": hostname,
        "PGDATA": str(pgdata),
        "ROLE_DIR": str(roles or role_dir(primary, initialized)),
        "RW_HOST": "127.0.0.1",
        "RW_PORT": str(port),
        "REPLICATION_PASSWORD": password,
        "POSTGRES_PASSWORD": SUPERUSER_PASSWORD,
        "TERMINATION_LOG": str(log or pgdata.parent / "termination-log"),
    }


def run_start(env: dict[str, str], *, shell: str = "dash", as_postgres: bool = True,
              timeout: float = 120) -> Result:
    return run(script_argv("start.sh") + ["start", *STARTED], env, as_postgres=as_postgres,
               timeout=timeout, executable=shell_path(shell))


@pytest.mark.parametrize("shell", list(SHELLS))
def test_start_first_start_of_the_primary_execs_at_once(shell):
    """The designated primary, never initialized: nothing to prepare, the
    image's entrypoint (initdb) runs. No contact with anything."""
    closed_port = free_port()  # nothing listens: any contact would hang or fail
    missing = fresh_path("c0") / "data"
    pg_dir(missing.parent)
    r = run_start(start_env(missing, "db-0", closed_port, initialized="false"), shell=shell, timeout=20)
    assert r.rc == 0, str(r)
    assert r.out == "started\n", str(r)
    assert not missing.exists(), "the primary created its PGDATA"

    # The volume's root is the server's user's, as fsGroup makes it in a
    # pod: start.sh records the epoch there, beside the data directory.
    empty = pg_dir(pg_dir(fresh_path("c0")) / "data")
    r = run_start(start_env(empty, "my-db-0", closed_port, primary="my-db-0", initialized="false"),
                  shell=shell, timeout=20)
    assert r.rc == 0, str(r)
    assert r.out == "started\n", str(r)
    assert list(empty.iterdir()) == []


# Issue 18: a Database re-created over retained volumes with a higher
# spec.version started an empty cluster beside the old data. The volume's
# layout is what the primary judges by: pg<major> directories, PG_VERSION,
# and the marker a finished upgrade leaves.
@pytest.mark.parametrize("shell", list(SHELLS))
@pytest.mark.parametrize("mine, layout, refused", [
    ("17", {"16": False}, "holds PostgreSQL 16 data (pg16), not 17"),
    ("16", {"16": False, "17": True}, "holds PostgreSQL 17 data (pg17), not 16"),
    ("16", {"16": False, "17": False}, None),  # 17 is a failed upgrade's
    ("17", {"16": False, "17": True}, None),
    ("17", {"17": False}, None),
    ("17", {}, None),
])
def test_start_primary_never_starts_beside_other_data(shell, mine, layout, refused):
    volume = pg_dir(fresh_path("vol"))
    for major, upgraded in layout.items():
        data = pg_dir(volume / f"pg{major}")
        (data / "PG_VERSION").write_text(major + "\n")
        if upgraded:
            (data / ".opshooks-upgrade-complete").touch()
    log = volume / "termination-log"
    env = start_env(volume / f"pg{mine}", "orders-0", free_port(), primary="orders-0",
                    initialized="false", log=log)
    r = run_start(env, shell=shell, as_postgres=False, timeout=20)
    if refused:
        assert r.rc != 0, str(r)
        assert refused in r.err, str(r)
        assert r.out == "", "refused, and exec'd the server anyway"
        assert termination_line(log) == f"opshooks: volume {refused}: nothing is initialized or served beside it\n"
        assert report(log)["about"] == "otherMajor", "the hook reads it as another major's data"
    else:
        assert r.rc == 0, str(r)
        assert r.out == "started\n", str(r)
        assert not log.exists()


@pytest.mark.parametrize("case", ["no primary file", "empty primary file", "no HOSTNAME"])
def test_start_refuses_without_a_role(case):
    """Never a guess: without a designated primary (or its own name) an
    instance neither starts nor clones nor initializes."""
    pgdata = fresh_path("cbad") / "data"
    pg_dir(pgdata.parent)
    env = start_env(pgdata, "db-1", free_port(), primary=None if case == "no primary file" else "")
    if case == "no HOSTNAME":
        env = start_env(pgdata, "", free_port())
        del env["HOSTNAME"]
    r = run_start(env, timeout=20)
    assert r.rc != 0, str(r)
    assert r.out == "", "started without a role"
    log = termination_line(pgdata.parent / "termination-log")
    assert log.startswith("opshooks: ") and log.count("\n") == 1, log
    assert not pgdata.exists()


def wait_streaming(primary: Cluster, standby: Cluster, marker_table: str = "stream_check") -> None:
    """The standby streams (as replicator) and a row written on the primary
    reaches it."""
    deadline = time.monotonic() + 20
    while primary.sql("SELECT count(*) FROM pg_stat_replication "
                      "WHERE usename = 'replicator' AND state = 'streaming'") == "0":
        assert time.monotonic() < deadline, primary.sql("SELECT * FROM pg_stat_replication")
        time.sleep(0.2)
    marker = f"row-{uuid.uuid4().hex}"
    primary.sql(f"CREATE TABLE IF NOT EXISTS {marker_table} (v text)")
    primary.sql(f"INSERT INTO {marker_table} VALUES (:'v')", v=marker)
    deadline = time.monotonic() + 30
    seen = ""
    while time.monotonic() < deadline:
        try:
            seen = standby.sql(f"SELECT v FROM {marker_table} WHERE v = :'v'", v=marker)
        except SqlError:
            seen = ""
        if seen == marker:
            break
        time.sleep(0.2)
    assert seen == marker, "the row inserted on the primary never reached the standby"


def test_start_clones_and_streams_from_the_primary(primary: Primary):
    p = primary.cluster
    root = fresh_path("standby")
    standby = Cluster(root / "data", root / "sock", password=p.password)
    pg_dir(root)
    pg_dir(standby.sock)
    pg_dir(standby.data)  # an empty PGDATA: the volume on its first start

    r = run_start(start_env(standby.data, "db-1", p.port))
    assert r.rc == 0, str(r)
    assert "cloned the primary" in r.err, str(r)
    assert r.out == "started\n", str(r)
    assert (standby.data / "standby.signal").exists()
    assert (standby.data / "global" / "pg_control").exists()
    assert stat.S_IMODE(standby.data.stat().st_mode) == 0o700
    auto = (standby.data / "postgresql.auto.conf").read_text()
    assert auto.count("primary_conninfo") == 1, auto

    standby.start()
    try:
        assert standby.sql("SELECT pg_is_in_recovery()") == "t"
        wait_streaming(p, standby)
        # The hostile password reached the server as data: it authenticated.
        assert standby.sql("SELECT status FROM pg_stat_wal_receiver") == "streaming"
    finally:
        standby.stop()
    assert not PWNED.exists(), "REPLICATION_PASSWORD ran as shell"

    # Second start of the pod: PGDATA holds the clone; nothing may change.
    before = tree_digest(standby.data)
    again = run_start(start_env(standby.data, "db-1", p.port), timeout=30)
    assert again.rc == 0, str(again)
    assert "a standby: starting it as it is" in again.err, str(again)
    assert tree_digest(standby.data) == before


def test_start_starts_over_after_a_killed_clone(primary: Primary):
    """pg_basebackup receives PG_VERSION among the very first files
    (global/pg_control comes last), so a pod killed during its clone
    (eviction, OOM, node loss) comes back with a PGDATA that has a
    PG_VERSION and cannot start: backup_label tells it apart, and the
    clone starts over."""
    p = primary.cluster
    root = fresh_path("killed")
    pg_dir(root)
    data = pg_dir(root / "data")

    # A pg_basebackup throttled to its slowest rate, so the clone is caught
    # in the middle; then the whole pod is killed (SIGKILL).
    slow = root / "slow-bin"
    slow.mkdir()
    (slow / "pg_basebackup").write_text(
        f'#!/bin/sh\nexec {BIN}/pg_basebackup --max-rate=32k "$@"\n'
    )
    (slow / "pg_basebackup").chmod(0o755)
    slow.chmod(0o755)
    uid, gid = postgres_ids()
    proc = subprocess.Popen(
        script_argv("start.sh") + ["start", *STARTED], executable=shell_path("dash"),
        env=start_env(data, "db-2", p.port, path=f"{slow}:{PG_PATH}"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        start_new_session=True, user=uid, group=gid, extra_groups=[], cwd=root,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            version = data / "PG_VERSION"
            if version.exists() and version.stat().st_size > 0:
                break
            assert proc.poll() is None, "the throttled clone ended early"
            time.sleep(0.05)
        else:
            pytest.fail("PG_VERSION never arrived")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (data / "global" / "pg_control").exists(), "the clone finished before the kill"

    # The pod restarts: start.sh runs again.
    r = run_start(start_env(data, "db-2", p.port))
    assert r.rc == 0, str(r)
    assert r.out == "started\n", str(r)
    assert (data / "global" / "pg_control").exists(), (
        f"start.sh kept a half-finished clone; the standby cannot start from it.\n{r}"
    )


# --------------------------------------------------------------------------
# 3. init-app.sh


def init_app_env(cluster: Cluster, **app: str) -> dict[str, str]:
    assert postgres.SCRATCH is not None
    home = postgres.SCRATCH / "init-app-home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": PG_PATH,
        "HOME": str(home),
        "PGHOST": "127.0.0.1",
        "PGPORT": str(cluster.port),
        "PGUSER": "postgres",
        "PGPASSWORD": cluster.password,
        "APP_USER": app.get("user", APP_USER),
        "APP_PASSWORD": app.get("password", APP_PASSWORD),
        "APP_DATABASE": app.get("database", APP_DATABASE),
    }


def catalog(cluster: Cluster) -> str:
    return cluster.sql(
        "SELECT string_agg(format('%s %s %s %s', oid, rolname, rolsuper, rolpassword), E'\\n' ORDER BY oid) "
        "FROM pg_authid; "
        "SELECT string_agg(format('%s %s %s', oid, datname, datdba), E'\\n' ORDER BY oid) FROM pg_database;"
    )


def test_init_app_creates_user_and_database(primary: Primary):
    c = primary.cluster
    assert primary.init.rc == 0, str(primary.init)
    roles = int(c.sql("SELECT count(*) FROM pg_roles"))
    dbs = int(c.sql("SELECT count(*) FROM pg_database"))

    r = run_script("init-app.sh", init_app_env(c))
    assert r.rc == 0, str(r)

    assert c.sql("SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole FROM pg_roles "
                 "WHERE rolname = :'u'", u=APP_USER) == "t|f|f|f"
    assert c.sql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = :'d'",
                 d=APP_DATABASE) == APP_USER
    # Exactly one role and one database more: nothing else was created.
    assert int(c.sql("SELECT count(*) FROM pg_roles")) == roles + 1
    assert int(c.sql("SELECT count(*) FROM pg_database")) == dbs + 1
    assert c.sql("SELECT count(*) FROM pg_roles WHERE rolname = 'evil'") == "0"
    assert not PWNED_APP.exists(), "an APP_* value ran as shell"

    # The user logs in to its database over TCP with exactly that password.
    me = c.sql("SELECT current_user || '|' || current_database()", user=APP_USER,
               password=APP_PASSWORD, database=APP_DATABASE)
    assert me == f"{APP_USER}|{APP_DATABASE}"
    bad = c.psql("SELECT 1", user=APP_USER, password=APP_PASSWORD[:-1], database=APP_DATABASE)
    assert bad.rc != 0 and "password authentication failed" in bad.err, str(bad)
    # As the database's owner it may create in it (public belongs to
    # pg_database_owner since PostgreSQL 15).
    c.sql("CREATE TABLE owned (id int)", user=APP_USER, password=APP_PASSWORD, database=APP_DATABASE)

    # A rerun succeeds and changes nothing but the user's password, which
    # is the Secret's again (a Database created again over retained
    # volumes has a new Secret, and the data the earlier password).
    before = catalog(c)
    again = run_script("init-app.sh", init_app_env(c, password=UPGRADE_APP_PASSWORD))
    assert again.rc == 0, str(again)
    hashes = "SELECT oid, rolpassword FROM pg_authid WHERE rolname = :'u'"
    changed = [(a, b) for a, b in zip(before.splitlines(), catalog(c).splitlines()) if a != b]
    assert len(changed) == 1 and changed[0][0].startswith(c.sql(hashes, u=APP_USER).split("|")[0] + " "), changed
    assert c.sql("SELECT current_user", user=APP_USER, password=UPGRADE_APP_PASSWORD, database=APP_DATABASE) == APP_USER
    old = c.psql("SELECT 1", user=APP_USER, password=APP_PASSWORD, database=APP_DATABASE)
    assert old.rc != 0 and "password authentication failed" in old.err, str(old)
    assert run_script("init-app.sh", init_app_env(c)).rc == 0  # back, for the tests after
    assert not PWNED_APP.exists()


@pytest.mark.parametrize("shell", ["bash", "busybox"])
def test_init_app_under_other_shells(primary: Primary, shell):
    c = primary.cluster
    user = f"u {shell} '\"$(touch /tmp/pwned-app)"
    db = f"d {shell} '\"`touch /tmp/pwned-app`"
    r = run_script("init-app.sh", init_app_env(c, user=user, database=db), shell=shell)
    assert r.rc == 0, str(r)
    assert c.sql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = :'d'", d=db) == user
    assert not PWNED_APP.exists()


def test_monitor_role_reads_statistics_and_nothing_more(primary: Primary):
    """monitor-role.sh (spec.monitoring): the exporters' role logs in, is a
    member of pg_monitor and of nothing else, holds no other power, and a
    rerun with a new password (a new Secret) changes only its password. A
    password with a quote is data."""
    c = primary.cluster
    user = "opshooks_monitor"
    first_password = "mon'; DROP ROLE postgres; --"

    def env(password: str) -> dict[str, str]:
        e = init_app_env(c)
        for k in ("APP_USER", "APP_PASSWORD", "APP_DATABASE"):
            del e[k]
        return {**e, "MONITOR_USER": user, "MONITOR_PASSWORD": password}

    r = run_script("monitor-role.sh", env(first_password))
    assert r.rc == 0, str(r)
    assert c.sql("SELECT format('%s|%s|%s|%s|%s|%s', rolcanlogin, rolsuper, rolreplication, rolcreatedb, "
                 "rolcreaterole, rolbypassrls) FROM pg_roles WHERE rolname = :'u'", u=user) == "t|f|f|f|f|f"
    assert c.sql("SELECT string_agg(b.rolname, ',') FROM pg_auth_members m JOIN pg_roles b ON b.oid = m.roleid "
                 "JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = :'u'", u=user) == "pg_monitor"
    assert c.sql("SELECT count(*) FROM pg_roles WHERE rolname = 'postgres'") == "1"
    # It reads the statistics the exporter reads, and not the catalog's secrets.
    as_monitor = {"user": user, "password": first_password, "database": "postgres"}
    assert c.sql("SELECT pg_is_in_recovery()", **as_monitor) == "f"
    assert int(c.sql("SELECT count(*) FROM pg_stat_activity WHERE query IS NOT NULL", **as_monitor)) >= 1
    denied = c.psql("SELECT rolpassword FROM pg_authid", **as_monitor)
    assert denied.rc != 0 and "permission denied" in denied.err, str(denied)

    before = catalog(c)
    again = run_script("monitor-role.sh", env("a new one"))
    assert again.rc == 0, str(again)
    changed = [(a, b) for a, b in zip(before.splitlines(), catalog(c).splitlines()) if a != b]
    assert len(changed) == 1 and f" {user} " in changed[0][0], changed
    assert c.sql("SELECT current_user", user=user, password="a new one", database="postgres") == user
    old = c.psql("SELECT 1", **as_monitor)
    assert old.rc != 0 and "password authentication failed" in old.err, str(old)


def test_init_app_names_longer_than_63_bytes(primary: Primary):
    """The CRD allows names of up to 63 *characters*; PostgreSQL truncates
    identifiers to 63 *bytes*. 40 two-byte characters pass the CRD and are
    truncated: the existence checks must still find them on a rerun.
    (Logging in with such a name fails anyway: the server cuts the startup
    packet's user and database names at byte 63, mid-character, so the
    CRD should count bytes; that is for validate.rs, not this script.)"""
    c = primary.cluster
    user, db = "ü" * 40, "ö" * 40
    env = init_app_env(c, user=user, database=db, password="long-name password")
    first = run_script("init-app.sh", env)
    assert first.rc == 0, str(first)
    again = run_script("init-app.sh", env)
    assert again.rc == 0, f"a rerun fails for names over 63 bytes:\n{again}"
    assert c.sql("SELECT count(*) FROM pg_roles WHERE rolname = :'u'", u="ü" * 31) == "1"
    assert c.sql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = :'d'",
                 d="ö" * 31) == "ü" * 31


# --------------------------------------------------------------------------
# 4. upgrade.sh


@dataclasses.dataclass
class Old:
    volume: Path  # the volume both data directories live on
    cluster: Cluster
    dump: Path
    rows: str
    digest: dict


UPGRADE_POSTGRES_PASSWORD = "new su 'pw' \"$(touch /tmp/pwned-app)\" \\"
UPGRADE_APP_PASSWORD = "new app 'pw' \"$(touch /tmp/pwned-app)\" `id` \\"
ROWS_SQL = "SELECT string_agg(format('%s:%s', id, name), ',' ORDER BY id) FROM items"


@pytest.fixture(scope="module")
def old(scratch) -> Old:
    """The old version's cluster with the app's data, dumped with
    `pg_dump --format=custom` (as the backup job does), then stopped."""
    volume = pg_dir(fresh_path("volume"))
    cluster = Cluster(volume / "old", fresh_path("old-sock"))
    cluster.initdb()
    cluster.start()
    cluster.sql("CREATE ROLE :\"u\" LOGIN PASSWORD 'old password'", u=APP_USER)
    cluster.sql("CREATE DATABASE :\"d\" OWNER :\"u\"", u=APP_USER, d=APP_DATABASE)
    app = dict(user=APP_USER, password="old password", database=APP_DATABASE)
    cluster.sql(
        "CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL UNIQUE);"
        "INSERT INTO items (name) SELECT 'item ' || g FROM generate_series(1, 500) g;"
        "INSERT INTO items (name) VALUES ('quote '' \"dq\" ünïcødé ✓'), (E'back\\\\slash\\ttab');"
        "CREATE VIEW item_names AS SELECT name FROM items;"
        "CREATE FUNCTION item_count() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM items';",
        **app,
    )
    rows = cluster.sql(ROWS_SQL, **app)
    dump = volume.parent / f"{volume.name}.pgdump"
    r = run([str(BIN / "pg_dump"), "--format=custom", "--no-password", "-f", str(dump)],
            {"PATH": PG_PATH, "HOME": str(cluster.sock), "PGHOST": "127.0.0.1",
             "PGPORT": str(cluster.port), "PGUSER": "postgres", "PGPASSWORD": cluster.password,
             "PGDATABASE": APP_DATABASE})
    assert r.rc == 0, str(r)
    dump.chmod(0o644)
    cluster.stop()
    yield Old(volume, cluster, dump, rows, tree_digest(cluster.data))
    dump.unlink(missing_ok=True)


def upgrade_env(old: Old, new: Path, **over: str) -> dict[str, str]:
    env = {
        "PATH": PG_PATH,
        "HOME": str(old.volume),
        "LANG": "C.UTF-8",  # the official image sets LANG=en_US.utf8
        "NEW_PGDATA": str(new),
        "OLD_PGDATA": str(old.cluster.data),
        "DUMP": str(old.dump),
        "POSTGRES_PASSWORD": UPGRADE_POSTGRES_PASSWORD,
        "REPLICATION_PASSWORD": REPLICATION_PASSWORD,
        "APP_USER": APP_USER,
        "APP_PASSWORD": UPGRADE_APP_PASSWORD,
        "APP_DATABASE": APP_DATABASE,
    }
    env.update(over)
    return env


def assert_old_untouched(old: Old) -> None:
    assert tree_digest(old.cluster.data) == old.digest, "OLD_PGDATA changed"


def test_upgrade_restores_into_a_new_cluster(old: Old):
    new = old.volume / f"new-{uuid.uuid4().hex[:6]}"
    r = run_script("upgrade.sh", upgrade_env(old, new), as_postgres=True, timeout=150)
    assert r.rc == 0, str(r)
    assert (new / ".opshooks-upgrade-complete").exists()
    assert not (new / "postmaster.pid").exists(), "upgrade.sh left its server running"
    assert_old_untouched(old)
    assert not PWNED_APP.exists()

    cluster = Cluster(new, fresh_path("new-sock"), password=UPGRADE_POSTGRES_PASSWORD)
    pg_dir(cluster.sock)
    cluster.start()
    try:
        # Password authentication over TCP, for the superuser too; and for
        # every host line (other pods connect from addresses other than the
        # loopback this test uses).
        assert cluster.sql("SELECT current_user") == "postgres"
        assert cluster.sql(
            "SELECT count(*) FROM pg_hba_file_rules WHERE error IS NOT NULL "
            "OR (type LIKE 'host%' AND auth_method <> 'scram-sha-256')") == "0"
        assert cluster.sql(
            "SELECT string_agg(array_to_string(database, ',') || ' ' || array_to_string(user_name, ','), ';' "
            "ORDER BY line_number) FROM pg_hba_file_rules WHERE type = 'host' AND address = 'all'"
        ) == "all all;replication replicator"
        assert cluster.sql("SHOW listen_addresses") == "127.0.0.1"  # our -c; the file says '*'
        assert "\nlisten_addresses = '*'\n" in (new / "postgresql.conf").read_text()
        for user in ["postgres", APP_USER]:
            bad = cluster.psql("SELECT 1", user=user, password="wrong")
            assert bad.rc != 0 and "password authentication failed" in bad.err, str(bad)
        app = dict(user=APP_USER, password=UPGRADE_APP_PASSWORD, database=APP_DATABASE)
        assert cluster.sql(ROWS_SQL, **app) == old.rows
        assert cluster.sql("SELECT item_count(), (SELECT count(*) FROM item_names)", **app) == "502|502"
        assert cluster.sql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = :'d'",
                           d=APP_DATABASE) == APP_USER
        owners = cluster.sql(
            "SELECT string_agg(DISTINCT pg_get_userbyid(relowner), ',') FROM pg_class "
            "WHERE relnamespace = 'public'::regnamespace", database=APP_DATABASE)
        assert owners == APP_USER
        # The app can still write: its sequence and constraints came along.
        assert cluster.sql("INSERT INTO items (name) VALUES ('after') RETURNING id", **app) == "503"
        assert cluster.sql("SELECT rolreplication, rolcanlogin FROM pg_roles WHERE rolname = 'replicator'") == "t|t"
        assert replication_connect(cluster, "replicator", REPLICATION_PASSWORD).rc == 0
        assert cluster.sql("SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = :'d'",
                           d=APP_DATABASE) == "UTF8"
    finally:
        cluster.stop()

    # A second run (the Job retried) is a no-op because of the marker.
    before = tree_digest(new)
    again = run_script("upgrade.sh", upgrade_env(old, new), as_postgres=True, timeout=30)
    assert again.rc == 0, str(again)
    assert "already complete" in again.out
    assert again.seconds < 5, f"the rerun took {again.seconds:.1f}s"
    assert tree_digest(new) == before
    assert_old_untouched(old)


@pytest.mark.parametrize("case", ["missing dump", "empty dump", "empty old", "missing old"])
def test_upgrade_refuses_without_inputs(old: Old, case):
    new = old.volume / f"new-{uuid.uuid4().hex[:6]}"
    over: dict[str, str] = {}
    old_dir = old.cluster.data
    if case == "missing dump":
        over["DUMP"] = str(old.volume.parent / "no-such.pgdump")
    elif case == "empty dump":
        empty = fresh_path("empty").with_suffix(".pgdump")
        empty.write_bytes(b"")
        empty.chmod(0o644)
        over["DUMP"] = str(empty)
    elif case == "empty old":
        old_dir = pg_dir(old.volume / f"empty-old-{uuid.uuid4().hex[:6]}")
        over["OLD_PGDATA"] = str(old_dir)
    else:
        old_dir = old.volume / f"missing-old-{uuid.uuid4().hex[:6]}"
        over["OLD_PGDATA"] = str(old_dir)
    before = tree_digest(old_dir)
    r = run_script("upgrade.sh", upgrade_env(old, new, **over), as_postgres=True, timeout=30)
    assert r.rc != 0, str(r)
    assert tree_digest(old_dir) == before, "OLD_PGDATA changed"
    assert not new.exists(), "NEW_PGDATA was created anyway"
    assert_old_untouched(old)


def test_upgrade_failed_restore_stops_its_server_and_a_retry_succeeds(old: Old):
    new = old.volume / f"new-{uuid.uuid4().hex[:6]}"
    # A dump cut short (written half-way): pg_restore fails.
    bad = fresh_path("truncated").with_suffix(".pgdump")
    data = old.dump.read_bytes()
    bad.write_bytes(data[: len(data) * 2 // 3])
    bad.chmod(0o644)
    r = run_script("upgrade.sh", upgrade_env(old, new, DUMP=str(bad)), as_postgres=True, timeout=150)
    assert r.rc != 0, str(r)
    assert not (new / ".opshooks-upgrade-complete").exists()
    assert not (new / "postmaster.pid").exists(), "the failed upgrade left its server running"
    assert_old_untouched(old)

    # The Job retries with the good dump: the incomplete new cluster is rebuilt.
    r = run_script("upgrade.sh", upgrade_env(old, new), as_postgres=True, timeout=150)
    assert r.rc == 0, str(r)
    assert (new / ".opshooks-upgrade-complete").exists()
    assert_old_untouched(old)


@pytest.mark.parametrize("database", ["app=db", "o'k \\ d=b", "postgresql://db"])
def test_upgrade_database_name_read_as_connection_string(old: Old, database):
    """BUG pin. pg_restore --dbname "$APP_DATABASE" reads a value with `=`
    (or starting with postgresql://) as a connection string: a database
    that the CRD accepts and init-app.sh creates fine cannot be upgraded."""
    new = old.volume / f"new-{uuid.uuid4().hex[:6]}"
    r = run_script("upgrade.sh", upgrade_env(old, new, APP_DATABASE=database),
                   as_postgres=True, timeout=150)
    assert r.rc == 0, f"upgrade.sh fails for APP_DATABASE={database!r}:\n{r}"
    cluster = Cluster(new, fresh_path("new-sock"), password=UPGRADE_POSTGRES_PASSWORD)
    pg_dir(cluster.sock)
    cluster.start()
    try:
        assert cluster.sql(ROWS_SQL, user=APP_USER, password=UPGRADE_APP_PASSWORD,
                           database=database) == old.rows
    finally:
        cluster.stop()
    assert_old_untouched(old)


# --------------------------------------------------------------------------
# 5. dump-stopped.sh


def dump_env(data: Path, dump: Path, database: str = APP_DATABASE) -> dict[str, str]:
    """The init container's environment: what upgrade_job sets, plus the
    official image's PATH, HOME, LANG and PGDATA (the image's default data
    directory, not the old cluster: the script must use OLD_PGDATA)."""
    return {
        "PATH": PG_PATH,
        "HOME": str(dump.parent),
        "LANG": "C.UTF-8",
        "PGDATA": str(dump.parent / "image-default-pgdata"),
        "OLD_PGDATA": str(data),
        "DUMP": str(dump),
        "PGDATABASE": database,
    }


def work_dir() -> Path:
    """The Job's `work` emptyDir."""
    return pg_dir(fresh_path("work"))


def assert_stopped(cluster: Cluster) -> None:
    assert not (cluster.data / "postmaster.pid").exists(), "dump-stopped.sh left the old cluster running"
    st = cluster.pg("pg_ctl", "-D", str(cluster.data), "status", timeout=20)
    assert st.rc == 3, f"pg_ctl status: {st}"  # 3: no server running


def assert_private_socket_only(r: Result) -> None:
    """The server's own log (on the script's output): no TCP listener."""
    log = r.out + r.err
    assert "listening on Unix socket" in log, str(r)
    assert "listening on IPv" not in log, f"the old cluster listened on TCP:\n{r}"


@dataclasses.dataclass
class Stopped:
    volume: Path
    cluster: Cluster
    rows: str


@pytest.fixture(scope="module")
def stopped(scratch) -> Stopped:
    """The primary's old cluster as the upgrade finds it: the app's role,
    database (hostile name) and rows; every instance stopped cleanly."""
    volume = pg_dir(fresh_path("dvolume"))
    cluster = Cluster(volume / "old", fresh_path("dold-sock"))
    cluster.initdb()
    cluster.image_hba()
    cluster.start()
    cluster.sql("CREATE ROLE :\"u\" LOGIN PASSWORD 'old password'", u=APP_USER)
    cluster.sql("CREATE DATABASE :\"d\" OWNER :\"u\"", u=APP_USER, d=APP_DATABASE)
    app = dict(user=APP_USER, password="old password", database=APP_DATABASE)
    cluster.sql(
        "CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL UNIQUE);"
        "INSERT INTO items (name) SELECT 'item ' || g FROM generate_series(1, 300) g;"
        "INSERT INTO items (name) VALUES ('quote '' \"dq\" ünïcødé ✓'), (E'back\\\\slash\\ttab');",
        **app,
    )
    rows = cluster.sql(ROWS_SQL, **app)
    for name in ["app=db", "postgresql://db"]:  # names libpq could take for connection strings
        cluster.sql("CREATE DATABASE :\"d\"", d=name)
        cluster.sql("CREATE TABLE marker (v text); INSERT INTO marker VALUES (current_database())",
                    database=name)
    cluster.stop()
    assert not (cluster.data / "postmaster.pid").exists()
    yield Stopped(volume, cluster, rows)


def test_dump_stopped_then_upgrade(stopped: Stopped):
    """The whole upgrade path: dump the stopped old cluster, restore it
    into the new one with upgrade.sh, find exactly the same rows."""
    c = stopped.cluster
    dump = work_dir() / "dump.pgdump"
    r = run_script("dump-stopped.sh", dump_env(c.data, dump), as_postgres=True, timeout=60)
    assert r.rc == 0, str(r)
    assert dump.is_file() and dump.stat().st_size > 0, str(r)
    assert not Path(f"{dump}.tmp").exists(), "$DUMP.tmp left behind"
    assert_stopped(c)
    assert_private_socket_only(r)
    assert not (dump.parent / "image-default-pgdata").exists()
    listing = run([str(BIN / "pg_restore"), "--list", str(dump)], {"PATH": PG_PATH}, timeout=20)
    assert listing.rc == 0 and "TABLE DATA public items" in listing.out, str(listing)

    old = Old(stopped.volume, c, dump, stopped.rows, tree_digest(c.data))
    new = stopped.volume / f"new-{uuid.uuid4().hex[:6]}"
    up = run_script("upgrade.sh", upgrade_env(old, new), as_postgres=True, timeout=150)
    assert up.rc == 0, str(up)
    assert (new / ".opshooks-upgrade-complete").exists()
    assert_old_untouched(old)
    cluster = Cluster(new, fresh_path("dnew-sock"), password=UPGRADE_POSTGRES_PASSWORD)
    pg_dir(cluster.sock)
    cluster.start()
    try:
        app = dict(user=APP_USER, password=UPGRADE_APP_PASSWORD, database=APP_DATABASE)
        assert cluster.sql(ROWS_SQL, **app) == stopped.rows
        assert cluster.sql("SELECT count(*) FROM items", **app) == "302"
    finally:
        cluster.stop()
    assert not PWNED_APP.exists()


def kill_9(cluster: Cluster) -> None:
    """SIGKILL the postmaster and all its children at once (a pod killed
    without a clean shutdown), then wait until every one is gone."""
    pid = int((cluster.data / "postmaster.pid").read_text().split()[0])
    pids = [pid]
    for stat_file in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat_file).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # ppid
            pids.append(int(Path(stat_file).parent.name))
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # Gone means reaped too: the postmaster's pid still exists as a zombie
    # until init reaps it, and a new postmaster would take that for a live
    # one holding the lock (in a pod, the killed pod's processes are gone).
    deadline = time.monotonic() + 20
    for p in pids:
        while Path(f"/proc/{p}").exists():
            assert time.monotonic() < deadline, f"process {p} survived SIGKILL (or is never reaped)"
            time.sleep(0.05)


def copy_rows(dump: Path, table: str) -> list[str]:
    """The rows of table's COPY block in the archive, as COPY text lines."""
    r = run([str(BIN / "pg_restore"), "--data-only", "-t", table, "-f", "-", str(dump)],
            {"PATH": PG_PATH}, timeout=20)
    assert r.rc == 0, str(r)
    lines = r.out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"COPY public.{table} "))
    end = lines.index("\\.", start)
    return lines[start + 1:end]


def test_dump_stopped_after_a_crash(scratch):
    """The old cluster was killed (-9) right after commits that only its
    WAL holds: the script's start runs crash recovery and the dump has
    every committed row."""
    volume = pg_dir(fresh_path("dcrash"))
    c = Cluster(volume / "old", fresh_path("dcrash-sock"))
    c.initdb()
    c.image_hba()
    c.start(durable=True)
    c.sql("CREATE DATABASE :\"d\"", d=APP_DATABASE)
    db = dict(database=APP_DATABASE)
    c.sql("CREATE TABLE t (id int PRIMARY KEY, v text); CHECKPOINT;", **db)
    # After the checkpoint: one big transaction, then 100 small ones.
    c.sql("INSERT INTO t SELECT g, 'bulk ' || g FROM generate_series(1, 1000) g", **db)
    c.sql("".join(f"INSERT INTO t VALUES ({1000 + i}, 'single {i}');\n" for i in range(1, 101)), **db)
    expected = c.sql("SELECT string_agg(id || E'\\t' || v, E'\\n' ORDER BY id) FROM t", **db).splitlines()
    assert len(expected) == 1100
    kill_9(c)
    assert (c.data / "postmaster.pid").exists()  # a stale lock, as a killed pod leaves

    dump = work_dir() / "dump.pgdump"
    r = run_script("dump-stopped.sh", dump_env(c.data, dump), as_postgres=True, timeout=60)
    assert r.rc == 0, str(r)
    assert "automatic recovery in progress" in r.out + r.err, str(r)
    assert dump.is_file() and not Path(f"{dump}.tmp").exists()
    assert_stopped(c)
    assert sorted(copy_rows(dump, "t"), key=lambda line: int(line.split("\t")[0])) == expected


@pytest.mark.parametrize("case", ["missing", "empty"])
def test_dump_stopped_refuses_without_a_cluster(case):
    work = work_dir()
    data = fresh_path("dnone") / "old"
    if case == "empty":
        pg_dir(data.parent)
        pg_dir(data)
    dump = work / "dump.pgdump"
    r = run_script("dump-stopped.sh", dump_env(data, dump), as_postgres=True, timeout=20)
    assert r.rc != 0, str(r)
    assert "no cluster in" in r.err, str(r)
    assert sorted(p.name for p in work.iterdir()) == [], "the refusal left files in the work volume"
    if case == "missing":
        assert not data.exists(), "OLD_PGDATA was created"
    else:
        assert list(data.iterdir()) == []


@pytest.mark.parametrize("shell", list(SHELLS))
def test_dump_stopped_failing_pg_dump(stopped: Stopped, shell):
    """pg_dump fails (no such database): the script fails too, under every
    /bin/sh, with no $DUMP and the old cluster stopped again. A stale
    $DUMP.tmp is tolerated: upgrade.sh reads $DUMP only, a rerun removes
    the .tmp first, and a failed Job pod's emptyDir goes with it."""
    c = stopped.cluster
    dump = work_dir() / "dump.pgdump"
    r = run_script("dump-stopped.sh", dump_env(c.data, dump, database="no such 'db\""),
                   shell=shell, as_postgres=True, timeout=60)
    assert r.rc != 0, f"dump-stopped.sh succeeded although pg_dump failed:\n{r}"
    assert 'database "no such \'db"" does not exist' in r.err, str(r)
    assert not dump.exists(), "a failed dump was left as $DUMP"
    # (pg_dump creates $DUMP.tmp before it connects, so a stale one is left.)
    assert_stopped(c)
    control = c.pg("pg_controldata", str(c.data))
    assert "Database cluster state:               shut down\n" in control.out, str(control)


@pytest.mark.parametrize("database", ["app=db", "postgresql://db"])
def test_dump_stopped_database_name_is_just_a_name(stopped: Stopped, database):
    """PGDATABASE is read from the environment, where libpq never takes a
    value for a connection string (unlike a --dbname argument)."""
    c = stopped.cluster
    dump = work_dir() / "dump.pgdump"
    r = run_script("dump-stopped.sh", dump_env(c.data, dump, database=database),
                   as_postgres=True, timeout=60)
    assert r.rc == 0, str(r)
    assert copy_rows(dump, "marker") == [database]
    assert_stopped(c)


# --------------------------------------------------------------------------
# 5b. spec.postgresql: the server's arguments and pg_hba.conf, as the hook
# writes them (the golden answer of v2-postgresql-parameters-and-pg-hba),
# taken by a real server.

SETTINGS_ANSWER = REPO / "tests" / "fixtures" / "database" / "v2-postgresql-parameters-and-pg-hba" / "response.json"


def settings_answer() -> tuple[list[str], str, str]:
    """The server's arguments after `postgres`, the pg_hba.conf ConfigMap's
    text, and the path the arguments read it at."""
    answer = json.loads(SETTINGS_ANSWER.read_text())
    sts = next(c for c in answer["children"] if c["kind"] == "StatefulSet")
    hba = next(c for c in answer["children"]
               if c["kind"] == "ConfigMap" and c["metadata"]["name"].endswith("-hba"))
    command = sts["spec"]["template"]["spec"]["containers"][0]["command"]
    args = command[command.index("postgres") + 1:]
    path = next(a.split("=", 1)[1] for a in args if a.startswith("hba_file="))
    return args, hba["data"][path.rsplit("/", 1)[1]], path


def test_the_servers_arguments_and_pg_hba_as_the_hook_writes_them():
    args, hba, path = settings_answer()
    cluster = Cluster(fresh_path("settings") / "pg16", fresh_path("settings-sock"))
    cluster.initdb()
    hba_file = cluster.sock / "pg_hba.conf"
    hba_file.write_text(hba)
    cluster.port = free_port()
    # The server serves TLS (tls.sh puts a certificate beside the data
    # directories): a self-signed one here, owned by the server's user.
    tls = pg_dir(cluster.sock / "tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", str(tls / "server.key"),
                    "-out", str(tls / "server.crt")], check=True, capture_output=True)
    for f in ("server.key", "server.crt"):
        os.chown(tls / f, *postgres_ids())
        (tls / f).chmod(0o600)
    args = [a.replace(path, str(hba_file)).replace("/var/lib/postgresql/data/tls", str(tls)) for a in args]
    # pg_ctl hands -o to a shell: each argument quoted, as the image's
    # entrypoint does for its first-start server.
    opts = " ".join(shlex.quote(a) for a in args) + (
        f" -c listen_addresses=127.0.0.1 -c port={cluster.port}"
        f" -c unix_socket_directories={cluster.sock} -c fsync=off")
    r = cluster.pg("pg_ctl", "-D", str(cluster.data), "-l", str(cluster.sock / "log"),
                   "-w", "-t", "60", "-o", opts, "start", timeout=90)
    log = (cluster.sock / "log").read_text(errors="replace") if (cluster.sock / "log").exists() else ""
    assert r.rc == 0, f"postgres did not start with the hook's arguments: {r}\n--- log\n{log}"
    try:
        show = cluster.sql("SELECT current_setting('max_connections') || '|' || current_setting('search_path')"
                           " || '|' || current_setting('shared_preload_libraries') || '|' || current_setting('hba_file')")
        assert show == f'300|"$user", public|pg_stat_statements|{hba_file}'
        assert cluster.sql("SELECT count(*) FROM pg_hba_file_rules WHERE error IS NOT NULL") == "0"
        # The operator's rule for the superuser comes before the user's
        # `host all all 0.0.0.0/0 reject`, which turns everyone else away.
        cluster.sql("CREATE ROLE app LOGIN PASSWORD 'app-password'")
        refused = cluster.psql("SELECT 1", user="app", password="app-password")
        assert refused.rc != 0 and "rejects connection" in refused.err, str(refused)
        assert cluster.sql("SELECT 1", user="postgres") == "1"
    finally:
        cluster.stop()


# --------------------------------------------------------------------------
# 6. Syntax and lint


@pytest.mark.parametrize("shell", list(SHELLS))
@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_syntax(script, shell):
    r = run(["sh", "-n", str(SCRIPTS / script)], {"PATH": SYSTEM_PATH}, timeout=20,
            executable=shell_path(shell))
    assert r.rc == 0, str(r)


@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_shellcheck(script):
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (tests/scripts/setup.sh installs it)")
    r = run(["shellcheck", "-s", "sh", str(SCRIPTS / script)], {"PATH": SYSTEM_PATH}, timeout=60)
    assert r.rc == 0, str(r)


def test_the_switchovers_stop_writes_nothing_to_its_program(primary):
    """promote.sh stops the old primary with `COPY (...) TO PROGRAM 'kill
    -INT <postmaster>'`. A COPY that writes a row to a program that has
    already exited fails with "Broken pipe" (the write comes at the
    pipe's close). Under load, or once the shutdown it asked for signals
    the session's process group, the program is gone first: the switchover
    was refused ("cannot stop it: ... Broken pipe") while the old primary
    was stopping, and a failover followed (the real loop, in CI). The
    script's query yields no row, so nothing is written, whenever the
    program ends: run here with a row that comes late, after the program
    (`exit 0`) is gone."""
    script = (SCRIPTS / "promote.sh").read_text()
    stops = re.findall(r'"COPY \((SELECT[^"]*)\) TO PROGRAM', script)
    assert len(stops) == 1, stops
    late = "COPY (SELECT * FROM ({}) q, pg_sleep(0.5)) TO PROGRAM 'exit 0'"
    # The failure it guards against: a row written after the program exited.
    broken = primary.cluster.psql(late.format("SELECT 1"))
    assert broken.rc != 0 and "Broken pipe" in broken.err, str(broken)
    ok = primary.cluster.psql(late.format(stops[0]))
    assert ok.rc == 0, f"promote.sh's stop, {stops[0]!r}, writes to its program: {ok}"
