"""Failover (issue 21), run for real: start.sh, promote.sh and probe.sh.

Three PostgreSQL instances on loopback play a Database's pods, each started
as its postgres container starts (children.rs): `/bin/sh -c <start.sh>
start postgres -c ...`, so start.sh prepares the data directory and then
execs the server, which runs in the foreground as the container's process.
The role ConfigMap is a directory the test writes (primary, epoch,
initialized); the read-write Service is a small TCP proxy the test
retargets, so standbys really clone from and stream from "the Service" and
follow a new primary by themselves. promote.sh runs as the promote Job
runs, over TCP with the superuser's password; probe.sh as the kubelet's
exec probes.

Every server starts with `-c wal_log_hints=on`, as the hook starts them
(pg_rewind needs it). The passwords are the hostile ones of
tests/support/postgres.py: they must reach libpq and the configuration
files as data.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import types
from pathlib import Path

import pytest
from reports import parse, report, termination_line  # tests/support: the hook reads each line

import pods
from pods import (  # noqa: F401 (template: a fixture)
    LEASE_SECONDS,
    MAJOR,
    Instance,
    LeaseSidecar,
    Proxy,
    RoleConfigMap,
    has_rows,
    partition_from_standbys,
    resolving,
    rw_sql,
    template,
    uptime,
    wait_for,
    write_roles,
)
from postgres import (  # noqa: F401 (scratch: an autouse fixture)
    BIN,
    PG_PATH,
    PWNED,
    REPLICATION_PASSWORD,
    SHELLS,
    SUPERUSER_PASSWORD,
    Result,
    SqlError,
    fresh_path,
    pg_dir,
    postgres_ids,
    run,
    script_argv,
    scratch,
    shell_path,
)
from pyhelpers import free_port  # tests/support





# --------------------------------------------------------------------------
# The Database: a primary and two standbys



@dataclasses.dataclass
class Database:
    roles: Path
    proxy: Proxy
    instances: list[Instance]
    configmap: RoleConfigMap
    epoch: int = 1

    def designate(self, primary: Instance | None) -> None:
        """The hook's decision: the role ConfigMap names the new primary (a
        new epoch; the instances read it once the kubelet updated their
        mount), and the Service selects it for new connections (None:
        nothing, fenced)."""
        if primary is not None:
            self.epoch += 1
            self.configmap.publish(primary.name, self.epoch)
        self.proxy.retarget(primary.port if primary is not None else None)

    def route(self, instance: Instance) -> None:
        """The read-write Service selects `instance` (the role unchanged)."""
        self.proxy.retarget(instance.port)

    def stop(self) -> None:
        for i in self.instances:
            if i.lease is not None:
                i.lease.closed = True
            if i.proc is not None and i.proc.poll() is None:
                i.pause(False)  # a paused instance resumes to shut down
            i.stop("immediate")
        self.proxy.close()


MOUNT_DELAY = 1.0


def new_database(template: Path, *, sync: bool = False, standbys: int = 2,
                 mount_delay: float = MOUNT_DELAY, first_epoch: int = 1, database: str | None = None,
                 lease: bool = False, settings: list[str] | None = None) -> Database:
    """db-0 the primary (its volume holds the template's cluster), and
    standbys that start on empty volumes: start.sh clones them from the
    read-write Service. The role mount follows the ConfigMap `mount_delay`
    seconds late. `settings`: more of every server's settings (name=value)."""
    roles = fresh_path("role")
    roles.mkdir()
    roles.chmod(0o755)
    configmap = RoleConfigMap(roles, mount_delay)
    configmap.database = database
    configmap.publish("db-0", first_epoch, now=True)
    proxy = Proxy()
    instances = []
    for n in range(standbys + 1):
        volume = pg_dir(fresh_path(f"db-{n}"))
        pg_dir(volume / "sock")
        instance = Instance(f"db-{n}", volume, roles, proxy, sync=sync, configmap=configmap,
                            settings=list(settings or []))
        if lease:
            pg_dir(volume / "lease")
            instance.lease = LeaseSidecar(configmap, volume / "lease" / "role")
        instances.append(instance)
    configmap.hosts = {i.name: f"127.0.0.1:{i.port}" for i in instances}
    primary = instances[0]
    r = run(["cp", "-a", str(template), str(primary.data)], {"PATH": PG_PATH}, timeout=60)
    assert r.rc == 0, str(r)
    db = Database(roles, proxy, instances, configmap, epoch=first_epoch)
    proxy.retarget(primary.port)
    primary.start()
    assert primary.in_recovery() == "f"
    for standby in instances[1:]:
        try:
            standby.start()
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- the primary's log\n{primary.output()}") from None
        assert standby.in_recovery() == "t"
    wait_for("every standby streams", lambda: primary.sql(
        "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == str(standbys))
    return db


@pytest.fixture
def database(template):
    db = new_database(template)
    yield db
    db.stop()


# --------------------------------------------------------------------------
# promote.sh


@dataclasses.dataclass
class Promotion:
    rc: int
    out: str
    err: str
    line: str  # the termination log

    def __str__(self) -> str:
        return f"rc={self.rc}\n--- stderr\n{self.err}--- termination log\n{self.line}"


def promote(candidate: Instance, old: Instance, standbys: list[Instance], *, sync: bool = False,
            shell: str = "dash", timeout: str | None = None, mode: str = "failover",
            role_wait: str = "6", **extra: str) -> Promotion:
    """The promote Job's container: its environment, nothing else. The hook
    makes it once the role ConfigMap names the candidate (fencing first):
    it expects the role the roles directory holds now."""
    work = pg_dir(fresh_path("promote"))
    log = work / "termination-log"
    env = {
        "PATH": PG_PATH,
        "HOME": str(work),
        "CANDIDATE": candidate.address,
        "OLD_PRIMARY": old.address,
        "STANDBYS": " ".join(s.address for s in standbys),
        "SYNCHRONOUS": "true" if sync else "false",
        "MODE": mode,
        "EXPECT_PRIMARY": candidate.name,
        "EXPECT_EPOCH": expected_epoch(candidate),
        "ROLE_DIR": str(candidate.roles),
        "ROLE_WAIT": role_wait,
        "PGPASSWORD": SUPERUSER_PASSWORD,
        "TERMINATION_LOG": str(log),
    }
    if timeout is not None:
        env["CONNECT_TIMEOUT"] = timeout
    if candidate.lease is not None:
        # One path in every pod in production; here every server reads the
        # candidate's file (one machine): the Job's read of each instance's
        # lease is modelled by the candidate's only.
        env |= {"LEASE_FILE": str(candidate.lease.path), "LEASE_SECONDS": str(LEASE_SECONDS)}
    env.update(extra)
    r = run(script_argv("promote.sh"), env, as_postgres=True, timeout=180, executable=shell_path(shell))
    return Promotion(r.rc, r.out, r.err, termination_line(log))


def expected_epoch(candidate: Instance) -> str:
    """The epoch the hook published (not the mount, which may lag)."""
    if candidate.configmap is not None:
        return candidate.configmap.published["epoch"]
    return (candidate.roles / "epoch").read_text()


def assert_promoted(p: Promotion, candidate: Instance) -> str:
    """The one success line; returns its LSN."""
    assert p.rc == 0, str(p)
    prefix = f"opshooks promote: promoted {candidate.address} lsn="
    assert p.line.startswith(prefix) and p.line.endswith("\n") and p.line.count("\n") == 1, str(p)
    lsn = p.line[len(prefix):-1]
    assert "/" in lsn, str(p)
    assert parse(p.line) == {"report": "promoted", "pod": candidate.address, "lsn": lsn}, str(p)
    return lsn


def assert_refused(p: Promotion, *needles: str) -> None:
    assert p.rc == 3, str(p)
    assert p.line.startswith("opshooks promote: refused ") and p.line.count("\n") == 1, str(p)
    for n in needles:
        assert n in p.line, f"{n!r} not in the refusal:\n{p}"
    # The hook reads it as a refusal, nothing promoted; and reads whether
    # the old primary answers, which decides who serves next.
    said = parse(p.line)
    assert said["report"] == "promoteRefused", said
    assert said["oldPrimaryAnswers"] == ("still answers as a primary" in p.line), said


# --------------------------------------------------------------------------
# The harness: a paused or killed instance is every process of its container


def state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_pause_and_kill_reach_every_process_of_the_instance(database: Database):
    """A postmaster's children are session leaders of their own: a signal
    to the postmaster's process group reaches none of them. pause() must
    stop each (a frozen cgroup), and stop("kill") kill each (a cgroup's
    kill), also one stopped beforehand, which would otherwise outlive the
    kill and act once resumed: here a standby's WAL receiver."""
    p, b, c = database.instances
    backends = {int(v) for v in b.sql("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()").split()}
    receiver = int(b.sql("SELECT pid FROM pg_stat_wal_receiver"))
    assert receiver in backends and os.getpgid(receiver) != b.proc.pid  # why killpg is not enough
    procs = b.processes()
    assert backends <= procs.keys() and b.proc.pid in procs, (backends, procs)
    # A backend that served a query may end meanwhile: only those that
    # remain are judged.
    b.pause()
    wait_for("every process of b stopped", lambda: all(state(pid) in ("T", "gone", "Z") for pid in procs), timeout=5)
    assert state(receiver) == "T" and state(b.proc.pid) == "T"
    b.pause(False)
    wait_for("every process of b runs again", lambda: all(state(pid) in ("R", "S", "D", "gone", "Z") for pid in procs), timeout=5)
    os.kill(receiver, signal.SIGSTOP)
    b.stop("kill")
    assert all(gone(pid) for pid in procs), {pid: state(pid) for pid in procs}
    assert not b.processes()
    # b starts again on its data and streams: nothing of the old server held it.
    b.start()
    rw_sql(database.proxy, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
    wait_for("b streams again", lambda: has_rows(b, "t", 1))


# --------------------------------------------------------------------------
# start.sh: the designated primary's empty volume


@pytest.mark.parametrize("shell", list(SHELLS))
def test_designated_primary_refuses_an_empty_volume_once_initialized(shell):
    """The data-loss bug of issue 21: the primary's claim lost, its pod
    comes back on an empty volume. It must not start (the image's
    entrypoint would initdb an empty cluster and serve it): a termination
    line for the hook, no exec, nothing written to PGDATA."""
    volume = pg_dir(fresh_path("empty-primary"))
    pgdata = pg_dir(volume / f"pg{MAJOR}")
    roles = fresh_path("role")
    roles.mkdir()
    write_roles(roles, "orders-0", 7, initialized="true")
    log = volume / "termination-log"
    env = {
        "PATH": PG_PATH, "HOME": str(volume), "HOSTNAME": "orders-0", "PGDATA": str(pgdata),
        "ROLE_DIR": str(roles), "RW_HOST": "127.0.0.1", "RW_PORT": str(free_port()),
        "REPLICATION_PASSWORD": REPLICATION_PASSWORD, "POSTGRES_PASSWORD": SUPERUSER_PASSWORD,
        "TERMINATION_LOG": str(log),
    }
    argv = script_argv("start.sh") + ["start", "touch", str(volume / "exec-ran")]
    r = run(argv, env, as_postgres=True, timeout=20, executable=shell_path(shell))
    assert r.rc != 0, str(r)
    assert not (volume / "exec-ran").exists(), f"start.sh exec'd the server on an empty volume:\n{r}"
    assert list(pgdata.iterdir()) == [], "something was written to the empty PGDATA"
    text = termination_line(log)
    assert text.startswith("opshooks: ") and text.count("\n") == 1, text
    assert "empty although the Database was initialized" in text, text
    assert report(log)["about"] == "emptyVolume", "the hook reads it as an empty volume"
    assert "a standby must take over" in text, text

    # Never initialized: the first start, the entrypoint initializes.
    write_roles(roles, "orders-0", 1, initialized="false")
    log.unlink()
    r = run(argv, env, as_postgres=True, timeout=20, executable=shell_path(shell))
    assert r.rc == 0, str(r)
    assert (volume / "exec-ran").exists(), str(r)
    assert not log.exists()

    # Anything else is a guess start.sh does not make.
    (volume / "exec-ran").unlink()
    for garbage in ["", "yes", "True"]:
        (roles / "initialized").write_text(garbage)
        r = run(argv, env, as_postgres=True, timeout=20, executable=shell_path(shell))
        assert r.rc != 0 and not (volume / "exec-ran").exists(), str(r)
    (roles / "initialized").unlink()
    r = run(argv, env, as_postgres=True, timeout=20, executable=shell_path(shell))
    assert r.rc != 0 and not (volume / "exec-ran").exists(), str(r)


@pytest.mark.parametrize("shell", list(SHELLS))
def test_a_stale_mount_that_says_never_initialized_is_confirmed_by_the_lease(shell):
    """The mount lags a minute: a primary whose pod started before the init
    Job succeeded, and whose volume is lost within that minute, still
    reads initialized=false there (the real loop's dbreallostvolume found
    it initialize an empty cluster so). With a lease, a first start waits
    for a fresh one and initializes only when it says false too."""
    volume = pg_dir(fresh_path("stale-mount-primary"))
    pgdata = pg_dir(volume / f"pg{MAJOR}")
    roles = fresh_path("role")
    roles.mkdir()
    write_roles(roles, "orders-0", 1, initialized="false")
    (volume / "lease").mkdir()
    lease = volume / "lease" / "role"
    log = volume / "termination-log"
    env = {
        "PATH": PG_PATH, "HOME": str(volume), "HOSTNAME": "orders-0", "PGDATA": str(pgdata),
        "ROLE_DIR": str(roles), "RW_HOST": "127.0.0.1", "RW_PORT": str(free_port()),
        "REPLICATION_PASSWORD": REPLICATION_PASSWORD, "POSTGRES_PASSWORD": SUPERUSER_PASSWORD,
        "TERMINATION_LOG": str(log), "LEASE_FILE": str(lease), "LEASE_SECONDS": str(LEASE_SECONDS),
    }
    argv = script_argv("start.sh") + ["start", "touch", str(volume / "exec-ran")]
    lease.write_text(f"{uptime()} 1 orders-0 true\n")
    r = run(argv, env, as_postgres=True, timeout=20, executable=shell_path(shell))
    assert r.rc != 0, str(r)
    assert not (volume / "exec-ran").exists(), f"start.sh initialized over lost data on a stale mount:\n{r}"
    assert list(pgdata.iterdir()) == [], "something was written to the empty PGDATA"
    text = termination_line(log)
    assert "empty although the Database was initialized (the lease says so" in text, text
    assert report(log)["about"] == "emptyVolume", "the hook reads it as an empty volume"

    # A lease too old to tell: it waits (the entrypoint never runs).
    log.unlink()
    lease.write_text(f"{uptime() - LEASE_SECONDS - 30} 1 orders-0 false\n")
    with pytest.raises(AssertionError, match="timed out") as waited:
        run(argv, env, as_postgres=True, timeout=4, executable=shell_path(shell))
    assert not (volume / "exec-ran").exists(), "start.sh initialized on an old lease"
    assert "to confirm the Database was never initialized" in str(waited.value)[-600:], str(waited.value)[-600:]

    # A fresh lease that says false too: the first start.
    lease.write_text(f"{uptime()} 1 orders-0 false\n")
    r = run(argv, env, as_postgres=True, timeout=20, executable=shell_path(shell))
    assert r.rc == 0, str(r)
    assert (volume / "exec-ran").exists(), str(r)


# --------------------------------------------------------------------------
# start.sh: a standby clones from the read-write Service, once it is a primary


def test_an_empty_instance_clones_only_from_a_primary(database: Database):
    primary, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE early (id int); INSERT INTO early SELECT generate_series(1, 100)")
    wait_for("b has the rows", lambda: has_rows(b, "early", 100))
    # Both standbys cloned through the Service and stream from it, under
    # their pod names (primary_conninfo's application_name).
    assert primary.sql("SELECT string_agg(application_name || ' ' || usename, ',' ORDER BY application_name) "
                       "FROM pg_stat_replication") == "db-1 replicator,db-2 replicator"
    for s in (b, c):
        assert "cloning the primary at 127.0.0.1:" in s.output(), s.output()
        assert s.sql("SELECT status FROM pg_stat_wal_receiver") == "streaming"
        auto = (s.data / "postgresql.auto.conf").read_text()
        assert auto.count("primary_conninfo") == 1, auto

    # A fourth instance while the Service selects a standby: it waits (a
    # standby's copy may be behind, and a clone of it is no primary).
    volume = pg_dir(fresh_path("db-3"))
    pg_dir(volume / "sock")
    d = Instance("db-3", volume, database.roles, database.proxy)
    database.instances.append(d)
    database.proxy.retarget(b.port)
    d.start(wait=False)
    wait_for("db-3 waits for a primary", lambda: "it answers, but is in recovery" in d.output())
    time.sleep(2)
    assert d.proc is not None and d.proc.poll() is None, d.output()
    assert not (d.data / "PG_VERSION").exists(), "cloned a standby"
    # The Service selects the primary again: db-3 clones it and streams.
    database.proxy.retarget(primary.port)
    d.wait_ready()
    assert d.in_recovery() == "t"
    rw_sql(database.proxy, "INSERT INTO early VALUES (101)")
    wait_for("db-3 streams", lambda: has_rows(d, "early", 101))
    assert not PWNED.exists()


BUSYBOX_TOOLS = ["awk", "sed", "grep", "tr", "cat", "head", "mv", "rm", "mkdir", "chmod", "touch"]


def busybox_path() -> str:
    """PATH of an alpine image: busybox's applets first."""
    tools = fresh_path("busybox-bin")
    tools.mkdir()
    for tool in BUSYBOX_TOOLS:
        (tools / tool).symlink_to(shutil.which(SHELLS["busybox"]) or "busybox")
    tools.chmod(0o755)
    return f"{tools}:{PG_PATH}"


@pytest.mark.parametrize("image", ["debian", "alpine"])
def test_primary_conninfo_is_data(database: Database, image):
    """Every value in primary_conninfo reaches the server as it was given:
    the conninfo the server parses from postgresql.auto.conf, parsed again
    as libpq would, has exactly the environment's values. Under dash with
    Debian's tools (mawk), and under busybox with its own awk, sed, grep."""
    b = database.instances[1]
    b.stop()
    weird = {
        "RW_HOST": "h'o\\st $(touch /tmp/pwned-repl) `id` x=y",
        "RW_PORT": "54'32\\",
        "HOSTNAME": "db-1 'app' \\ \"name\"",
        "REPLICATION_PASSWORD": REPLICATION_PASSWORD + "\nsecond line\r\tand tab",
    }
    shell = "dash" if image == "debian" else "busybox"
    env = {**b.env(PG_PATH if image == "debian" else busybox_path()), **weird}
    r = run(script_argv("start.sh") + ["start", str(BIN / "postgres"), "-C", "primary_conninfo"],
            env, as_postgres=True, timeout=30, executable=shell_path(shell))
    assert r.rc == 0, str(r)
    assert parse_conninfo(r.out.rstrip("\n")) == {
        "host": weird["RW_HOST"], "port": weird["RW_PORT"], "user": "replicator",
        "password": weird["REPLICATION_PASSWORD"], "application_name": weird["HOSTNAME"],
        "target_session_attrs": "read-write", "connect_timeout": "5",
    }
    assert not PWNED.exists()


def parse_conninfo(text: str) -> dict[str, str]:
    """libpq's conninfo_parse: key = value, the value bare or in single
    quotes, a backslash escaping the next character in either."""
    out: dict[str, str] = {}
    i = 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        eq = text.index("=", i)
        key = text[i:eq].strip()
        i = eq + 1
        while text[i].isspace():
            i += 1
        value = []
        if text[i] == "'":
            i += 1
            while text[i] != "'":
                if text[i] == "\\":
                    i += 1
                value.append(text[i])
                i += 1
            i += 1
        else:
            while i < len(text) and not text[i].isspace():
                if text[i] == "\\":
                    i += 1
                value.append(text[i])
                i += 1
        out[key] = "".join(value)
    return out


# --------------------------------------------------------------------------
# Failover, step by step


def test_failover_promotes_the_most_advanced_standby_and_everyone_follows(database: Database):
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int PRIMARY KEY, what text)")
    rw_sql(database.proxy, "INSERT INTO t SELECT g, 'before' FROM generate_series(1, 100) g")
    wait_for("c has the first rows", lambda: has_rows(c, "t", 100))

    # c stops for a while; the primary goes on without it.
    c.stop()
    rw_sql(database.proxy, "INSERT INTO t SELECT g, 'c missed' FROM generate_series(101, 200) g")
    wait_for("b has every row", lambda: has_rows(b, "t", 200))

    # The old primary still answers as one: no promotion, nothing changes,
    # and the hook designates it again.
    database.designate(b)
    refused = promote(b, p, [c])
    assert_refused(refused, f"old primary {p.address} still answers as a primary")
    assert b.in_recovery() == "t"
    database.designate(p)

    # The primary is lost. The hook fences it first (the Service selects
    # nothing), it is cut off from the standbys (a partition: the Service
    # change alone keeps their connections), and it accepts a last write
    # of its own: that one is lost.
    database.designate(None)
    partition_from_standbys(p)
    p.sql("INSERT INTO t VALUES (999, 'diverged')")
    p.stop("immediate")
    c.start()
    assert c.in_recovery() == "t" and has_rows(c, "t", 100)

    # c is behind b: promoting it would lose rows 101-200.
    b_lsn = b.sql("SELECT greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())")
    c_lsn = c.sql("SELECT greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())")
    database.designate(c)
    refused = promote(c, p, [b])
    assert_refused(refused, f"standby {b.address} is ahead of candidate {c.address}", b_lsn, c_lsn)
    assert c.in_recovery() == "t"
    assert f"old primary {p.address} does not answer" in refused.err, str(refused)

    # b is the most advanced: promoted.
    database.designate(b)
    done = promote(b, p, [c])
    lsn = assert_promoted(done, b)
    assert lsn == b_lsn, str(done)
    assert b.in_recovery() == "f"
    # The Job's pod died after promoting and the Job runs again: same answer.
    again = promote(b, p, [c], shell="busybox")
    assert_promoted(again, b)
    assert b.sql("SELECT count(*), max(id) FROM t") == "200|200"
    # Promoted, but the record of the epoch cannot be written (here a
    # directory where the file goes): the Job still succeeds and says so,
    # since a failed Job would make the hook designate another standby
    # while this one serves.
    record = b.volume / "opshooks-epoch"
    saved = record.stat() if record.exists() else None
    kept = record.read_bytes() if saved else b""
    record.unlink(missing_ok=True)
    record.mkdir()
    unrecorded = promote(b, p, [c])
    assert_promoted(unrecorded, b)
    assert "could not record epoch" in unrecorded.err, str(unrecorded)
    record.rmdir()
    if saved:
        record.write_bytes(kept)
        os.chown(record, saved.st_uid, saved.st_gid)

    # c follows the new primary through the Service by itself.
    rw_sql(database.proxy, "INSERT INTO t SELECT g, 'after' FROM generate_series(201, 300) g")
    wait_for("c follows the new primary", lambda: has_rows(c, "t", 300), timeout=60)
    assert c.sql("SELECT count(*) FROM t WHERE what = 'c missed'") == "100"

    # The old primary comes back: start.sh rewinds it onto b's timeline
    # and it follows b; its own last write is gone, it accepts none.
    p.start()
    out = p.output()
    assert "a former primary: rewinding it" in out, out
    assert "rewound" in out and "pg_rewind failed" not in out, out
    assert p.in_recovery() == "t"
    rw_sql(database.proxy, "INSERT INTO t SELECT g, 'after rejoin' FROM generate_series(301, 400) g")
    wait_for("the old primary follows the new one", lambda: has_rows(p, "t", 400), timeout=60)
    assert p.sql("SELECT count(*) FROM t WHERE id = 999") == "0"
    assert b.sql("SELECT count(*) FROM t WHERE id = 999") == "0"
    write = p.cluster.psql("INSERT INTO t VALUES (1000, 'on the old primary')")
    assert write.rc != 0 and "read-only transaction" in write.err, str(write)
    assert b.sql("SELECT string_agg(application_name, ',' ORDER BY application_name) FROM pg_stat_replication "
                 "WHERE state = 'streaming'") == "db-0,db-2"
    assert not (p.volume / f"pg{MAJOR}.diverged").exists()
    assert not PWNED.exists()


def test_promote_refuses_an_unreachable_candidate(database: Database):
    p, b, c = database.instances
    database.designate(None)
    p.stop("immediate")
    b.stop("immediate")
    refused = promote(b, p, [c], timeout="2")
    assert_refused(refused, f"candidate {b.address} does not answer")
    assert c.in_recovery() == "t"


@pytest.mark.parametrize("shell", list(SHELLS))
def test_promote_takes_its_values_as_data(shell):
    """Hostile addresses reach libpq as host names (which do not resolve),
    never shell or SQL; the report stays one line; a bad port or a missing
    value fails (exit 1) before anything is asked."""
    work = pg_dir(fresh_path("promote-hostile"))
    log = work / "termination-log"
    base = {"PATH": PG_PATH, "HOME": str(work), "PGPASSWORD": SUPERUSER_PASSWORD,
            "TERMINATION_LOG": str(log), "CONNECT_TIMEOUT": "2", "SYNCHRONOUS": "false",
            "OLD_PRIMARY": "127.0.0.1:1", "STANDBYS": "", "EXPECT_PRIMARY": "db-1", "EXPECT_EPOCH": "2"}
    hostile = "h'o\"st $(touch /tmp/pwned-repl) `touch /tmp/pwned-repl`\n; SELECT pg_promote() --"
    cases = [
        ({"CANDIDATE": hostile + ":5432"}, 3, "refused candidate h'o\"st $(touch /tmp/pwned-repl)"),
        ({"CANDIDATE": "127.0.0.1:54x"}, 1, "failed cannot read a port from '127.0.0.1:54x'"),
        ({"CANDIDATE": ""}, 1, "failed CANDIDATE is not set"),
        ({"CANDIDATE": "127.0.0.1:1", "OLD_PRIMARY": "", "MODE": "switchover"}, 1,
         "failed a switchover needs OLD_PRIMARY"),
        ({"CANDIDATE": "127.0.0.1:1", "MODE": "takeover"}, 1, "failed MODE is 'takeover'"),
        ({"CANDIDATE": "127.0.0.1:1", "EXPECT_EPOCH": "1; x"}, 1, "failed EXPECT_EPOCH is '1; x'"),
        ({"CANDIDATE": "127.0.0.1:1", "SYNCHRONOUS": "yes"}, 1, "failed SYNCHRONOUS is 'yes'"),
    ]
    for over, rc, start in cases:
        log.unlink(missing_ok=True)
        r = run(script_argv("promote.sh"), {**base, **over}, as_postgres=True, timeout=60,
                executable=shell_path(shell))
        line = termination_line(log)
        assert r.rc == rc, f"{over}: {r}"
        assert line.startswith("opshooks promote: " + start), f"{over}: {line!r}"
        assert line.count("\n") == 1 and line.endswith("\n"), line
    assert not PWNED.exists()


def test_a_rewind_that_fails_moves_the_data_aside_and_clones(database: Database):
    """pg_rewind fails (here a stand-in that exits 1): the former primary's
    data moves to pg<major>.diverged, replacing an earlier copy, and the
    instance is cloned afresh from the new primary."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 50)")
    wait_for("b has the rows", lambda: has_rows(b, "t", 50))
    database.designate(None)
    partition_from_standbys(p)
    p.sql("INSERT INTO t VALUES (999)")  # only the old primary has it
    p.stop("kill")
    database.designate(b)
    assert_promoted(promote(b, p, [c]), b)
    rw_sql(database.proxy, "INSERT INTO t SELECT generate_series(51, 60)")

    diverged = p.volume / f"pg{MAJOR}.diverged"
    pg_dir(diverged)
    (diverged / "an-earlier-copy").write_text("x")
    failing = pg_dir(p.volume / "failing-bin")
    (failing / "pg_rewind").write_text("#!/bin/sh\necho 'pg_rewind: error: made to fail' >&2\nexit 1\n")
    (failing / "pg_rewind").chmod(0o755)
    p.start(path=f"{failing}:{PG_PATH}")
    out = p.output()
    assert "made to fail" in out and "moving" in out and "cloned the primary" in out, out
    assert p.in_recovery() == "t"
    wait_for("the re-cloned instance streams", lambda: has_rows(p, "t", 60))
    assert p.sql("SELECT count(*) FROM t WHERE id = 999") == "0"
    # One copy of the diverged data, the newest: the old primary's cluster.
    assert not (diverged / "an-earlier-copy").exists(), "the earlier copy was kept beside the new one"
    assert (diverged / "PG_VERSION").read_text().strip() == MAJOR
    assert not (diverged / "standby.signal").exists()
    assert sorted(d.name for d in p.volume.iterdir() if d.name.startswith("pg")) == \
        [f"pg{MAJOR}", f"pg{MAJOR}.diverged"]


def test_a_designated_standby_starts_as_a_standby(database: Database):
    """The role ConfigMap names b before the promote Job ran, and b's
    container restarts meanwhile: it starts as a standby, following the
    Service; only the Job promotes."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
    wait_for("b has the row", lambda: has_rows(b, "t", 1))
    database.designate(None)
    p.stop("immediate")
    database.configmap.publish(b.name, 2, now=True)
    b.stop()
    b.start()
    assert "designated primary, still a standby" in b.output(), b.output()
    assert b.in_recovery() == "t"
    assert_promoted(promote(b, p, [c]), b)
    database.designate(b)
    rw_sql(database.proxy, "INSERT INTO t VALUES (2)")
    wait_for("c follows b", lambda: has_rows(c, "t", 2), timeout=60)


def wal_segment(instance: Instance) -> str:
    return instance.cluster.sql("SELECT pg_walfile_name(pg_current_wal_lsn())")


@pytest.mark.parametrize("again", [False, True], ids=["first start", "started again"])
def test_a_primary_started_cleanly_switches_wal_by_archive_timeout(template, again):
    """archive_timeout bounds what a lost volume costs only when the server
    switches segments by it. After a clean start, PostgreSQL 15's
    checkpointer sleeps a whole checkpoint_timeout (5 min) before it first
    looks at archive_timeout; start.sh wakes it once the server is ready.
    Rows written every 0.3 s: two switches within 15 s, with
    archive_timeout 1 s."""
    db = new_database(template, standbys=0, settings=["archive_timeout=1"])
    try:
        primary = db.instances[0]
        if again:
            primary.stop("fast")
            primary.start()
        rw_sql(db.proxy, "CREATE TABLE t (id int)")
        seen = [wal_segment(primary)]
        deadline = time.monotonic() + 15
        while len(seen) < 3 and time.monotonic() < deadline:
            rw_sql(db.proxy, "INSERT INTO t VALUES (1)")
            time.sleep(0.3)
            if (segment := wal_segment(primary)) != seen[-1]:
                seen.append(segment)
        assert len(seen) >= 3, f"WAL segments in 15 s of writes: {seen}\n{primary.output()}"
        assert "reloaded once" in primary.output(), primary.output()
    finally:
        db.stop()



def test_a_standby_the_service_selects_before_its_promotion_does_not_stream_from_itself(database: Database):
    """The hook designates b: the Service selects it before the promote Job
    ran. b's WAL receiver, cut off from the lost primary, reconnects
    through the Service, that is to itself; it must not stream from itself
    (a connection that outlives the Service's next move would keep it on
    the old timeline for good), nor may c stream from a standby there."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
    wait_for("b and c have the row", lambda: has_rows(b, "t", 1) and has_rows(c, "t", 1))
    p.stop("immediate")
    database.designate(b)
    deadline = time.monotonic() + 15  # three of wal_retrieve_retry_interval's retries
    while time.monotonic() < deadline:
        for standby in (b, c):
            streams = standby.sql("SELECT coalesce(string_agg(status, ','), '') FROM pg_stat_wal_receiver")
            assert streams != "streaming", f"{standby.name} streams through the Service from standby b"
        # A connection through the Service to b opens a WAL sender in
        # `startup` for as long as libpq's read-write check takes, then
        # closes it: only one that started replicating streams.
        assert b.sql("SELECT count(*) FROM pg_stat_replication WHERE state <> 'startup'") == "0", \
            b.sql("SELECT string_agg(application_name || ' ' || state, ', ') FROM pg_stat_replication")
        time.sleep(0.5)
    assert_promoted(promote(b, p, [c]), b)
    rw_sql(database.proxy, "INSERT INTO t VALUES (2)")
    wait_for("c follows b on its timeline", lambda: has_rows(c, "t", 2), timeout=60)
    assert b.sql("SELECT string_agg(application_name, ',') FROM pg_stat_replication") == c.name

def test_the_promote_job_moves_the_other_standbys_off_the_old_primary(database: Database):
    """Asynchronous: the old primary is paused past the failover and b
    promoted; c answers, so the promote Job changes its primary_conninfo
    and reloads it, and its WAL receiver connects again through the
    Service, to b. When the old primary resumes and commits once more, c
    never replays that commit, and follows b. Before, its connection to the
    old primary outlived the failover (and, under synchronous replication,
    held every commit on b until it gave up: dbrealrto, a minute)."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
    wait_for("b and c have the row", lambda: has_rows(b, "t", 1) and has_rows(c, "t", 1))
    p.pause()
    try:
        database.designate(b)
        result = promote(b, p, [c])
        assert_promoted(result, b)
        assert f"standby {c.address} connects again" in result.err, str(result)
    finally:
        p.pause(False)
    p.sql("INSERT INTO t VALUES (2)")
    rw_sql(database.proxy, "INSERT INTO t VALUES (3)")
    wait_for("c follows b", lambda: c.sql("SELECT count(*) FROM t WHERE id = 3") == "1", timeout=30)
    assert c.sql("SELECT count(*) FROM t WHERE id = 2") == "0", "c replayed the old primary's commit after the failover"
    p.stop("immediate")


# What promote.sh logs when it waits out the old primary's lease.
WAITED = "s: LEASE_SECONDS + LEASE_CHECK_SECONDS + LEASE_MARGIN + 1 since this Job started"


def test_a_failover_job_refuses_before_the_lease_wait_what_it_would_refuse_after(template):
    """Issue 32, the RTO: with a lease the failover's Job waits it out
    (14 s) before promoting, and what it refused after that wait it now
    refuses before it. An old primary that answers as a primary (it came
    back, restarted in place) is refused at once; a candidate behind
    another standby too, so the next candidate's Job starts some seconds
    later, not one lease later (dbrealrto: a 52 s failover). The most
    advanced candidate is then promoted after the wait."""
    db = new_database(template, lease=True)
    try:
        p, b, c = db.instances
        rw_sql(db.proxy, "CREATE TABLE t (id int PRIMARY KEY)")
        rw_sql(db.proxy, "INSERT INTO t SELECT generate_series(1, 100)")
        wait_for("c has the first rows", lambda: has_rows(c, "t", 100))
        db.designate(b)
        wait_for("b's lease names b", lambda: b.lease is not None and b.name in b.lease.path.read_text())
        back = promote(b, p, [])
        assert_refused(back, f"old primary {p.address} still answers as a primary")
        assert WAITED not in back.err, f"refused only after the lease wait:\n{back}"
        db.designate(p)
        # c misses rows that b has; then the primary is lost.
        c.stop()
        rw_sql(db.proxy, "INSERT INTO t SELECT generate_series(101, 200)")
        wait_for("b has every row", lambda: has_rows(b, "t", 200))
        db.designate(None)
        partition_from_standbys(p)
        p.stop("immediate")
        c.start()
        db.designate(c)
        wait_for("c's lease names c", lambda: c.lease is not None and c.name in c.lease.path.read_text())
        behind = promote(c, p, [b])
        assert_refused(behind, f"standby {b.address} is ahead of candidate {c.address}")
        assert WAITED not in behind.err, f"refused only after the lease wait:\n{behind}"
        db.designate(b)
        wait_for("b's lease names b", lambda: b.lease is not None and b.name in b.lease.path.read_text())
        done = promote(b, p, [c])
        assert_promoted(done, b)
        assert WAITED in done.err, str(done)
        assert b.sql("SELECT count(*) FROM t") == "200"
    finally:
        db.stop()


def test_a_standby_fed_past_the_fork_by_a_resumed_old_primary_is_not_live_and_rejoins(database: Database):
    """Asynchronous: the old primary is paused past the failover, b promoted
    while c does not answer either (paused too, so the promote Job can
    neither compare it nor tell it to connect again), then the old primary
    resumes and commits once more (a client that reaches its pod directly,
    before its fence). c's connection to it outlived the pause, so c
    replays that commit, past where b's timeline forks, and can never
    follow b. It must not stay a live standby of a dead timeline: its
    liveness fails, saying why, and its restart (start.sh) rewinds it onto
    b's timeline."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
    wait_for("b and c have the row", lambda: has_rows(b, "t", 1) and has_rows(c, "t", 1))
    p.pause()
    c.pause()
    try:
        database.designate(b)
        assert_promoted(promote(b, p, [c]), b)
    finally:
        c.pause(False)
        p.pause(False)
    p.sql("INSERT INTO t VALUES (2)")
    wait_for("c replayed the old primary's last commit", lambda: has_rows(c, "t", 2))
    p.stop("immediate")
    rw_sql(database.proxy, "INSERT INTO t VALUES (3)")
    wait_for("c's liveness fails", lambda: probe(c, "live").rc != 0, timeout=30)
    r = probe(c, "live")
    assert "timeline" in r.out, str(r)
    c.stop()
    c.start()
    wait_for("c follows b", lambda: c.sql("SELECT count(*) FROM t WHERE id = 3") == "1", timeout=60)
    assert c.sql("SELECT count(*) FROM t WHERE id = 2") == "0"
    assert probe(c, "live").rc == 0


# --------------------------------------------------------------------------
# probe.sh


def probe(instance: Instance, what: str, *, shell: str = "dash", **extra: str) -> Result:
    """The kubelet's exec probe in the postgres container."""
    env = {**instance.env(), "PGPORT": str(instance.port), **extra}
    for key in ("PGDATA", "REPLICATION_PASSWORD", "TERMINATION_LOG"):
        env.pop(key)
    return run(script_argv("probe.sh") + ["probe", what], env, as_postgres=True, timeout=30,
               executable=shell_path(shell))


def test_probes(database: Database):
    p, b, c = database.instances
    for shell in SHELLS:
        for i in (p, b):
            for what in ("live", "ready"):
                r = probe(i, what, shell=shell)
                assert r.rc == 0, f"{i.name} {what} under {shell}: {r}"

    # A standby that lags: with MAX_LAG_BYTES it is not ready (still live);
    # without, or with the primary out of reach, it is.
    b.sql("SELECT pg_wal_replay_pause()")
    rw_sql(database.proxy, "CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 20000) g")
    wait_for("b received the WAL", lambda: b.sql(
        "SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) > 2000000") == "t")
    lagging = probe(b, "ready", MAX_LAG_BYTES="1000000")
    assert lagging.rc != 0 and "bytes behind the primary, more than 1000000" in lagging.out, str(lagging)
    assert probe(b, "ready", MAX_LAG_BYTES="100000000").rc == 0
    assert probe(b, "ready").rc == 0
    assert probe(b, "live", MAX_LAG_BYTES="1000000").rc == 0
    database.designate(None)
    unjudged = probe(b, "ready", MAX_LAG_BYTES="1000000")
    assert unjudged.rc == 0 and "not judged" in unjudged.out, str(unjudged)
    database.proxy.retarget(p.port)
    b.sql("SELECT pg_wal_replay_resume()")
    wait_for("b caught up", lambda: probe(b, "ready", MAX_LAG_BYTES="1000000").rc == 0)

    # A primary that is not the designated one, while the designated one
    # answers in recovery (a switchover under way, or refused): still the
    # only primary, live and ready, so a refused switchover leaves it
    # serving instead of failing over. Fenced once the designated one does
    # not answer (or the mount gives no address for it).
    database.configmap.publish(b.name, 2, now=True)
    for what in ("live", "ready"):
        r = probe(p, what)
        assert r.rc == 0 and "not promoted yet" in r.out, str(r)
    assert probe(b, "live").rc == 0  # a designated standby waiting for its promotion
    database.configmap.hosts[b.name] = "127.0.0.1:1"
    database.configmap.publish(b.name, 2, now=True)
    for what in ("live", "ready"):
        r = probe(p, what)
        assert r.rc != 0 and "fenced" in r.out, str(r)
    del database.configmap.hosts[b.name]
    (database.roles / "host").unlink()
    database.configmap.publish(b.name, 2, now=True)
    r = probe(p, "live")
    assert r.rc != 0 and "fenced" in r.out, str(r)
    database.configmap.hosts[b.name] = f"127.0.0.1:{b.port}"
    database.configmap.publish(p.name, 3, now=True)
    assert probe(p, "live").rc == 0

    # The lease names b at a newer epoch than the mount, which still names
    # p (the kubelet's minute): b is asked at the mounted host with its
    # name in place of p's (only that name resolves, to 127.0.0.1; the
    # mounted host carries b's port, as every instance here is on loopback).
    # In recovery: p is still the only primary, live and ready, so a
    # primary back during a failover is not restarted by its liveness
    # while the promote Job refuses (found in the real loop, dbrealstall).
    # Before, p was fenced whenever the lease and the mount differed.
    dns = resolving(f"{b.name}.db-headless.ns.svc")
    lease = pg_dir(fresh_path("lease")) / "role"
    lease.write_text(f"{uptime()} 4 {b.name} true\n")
    lease.chmod(0o644)
    database.configmap.hosts[p.name] = f"{p.name}.db-headless.ns.svc:{b.port}"
    database.configmap.publish(p.name, 3, now=True)
    for what in ("live", "ready"):
        r = probe(p, what, LEASE_FILE=str(lease), PATH=dns)
        assert r.rc == 0 and "not promoted yet" in r.out, str(r)
    # A mounted host of another form gives no address for b: fenced.
    database.configmap.hosts[p.name] = f"127.0.0.1:{b.port}"
    database.configmap.publish(p.name, 3, now=True)
    r = probe(p, "live", LEASE_FILE=str(lease), PATH=dns)
    assert r.rc != 0 and "fenced" in r.out, str(r)
    database.configmap.hosts[p.name] = f"{p.name}.db-headless.ns.svc:{b.port}"
    database.configmap.publish(p.name, 3, now=True)

    # No server.
    c.stop()
    for what in ("live", "ready"):
        r = probe(c, what)
        assert r.rc != 0 and "does not accept connections" in r.out, str(r)

    # The designated one promoted: the other primary is fenced.
    database.configmap.publish(b.name, 4, now=True)
    assert b.sql("SELECT pg_promote()") == "t"
    wait_for("b promoted", lambda: b.in_recovery() == "f")
    for what in ("live", "ready"):
        r = probe(p, what)
        assert r.rc != 0 and "fenced" in r.out, str(r)
    assert probe(b, "live").rc == 0
    # So is it when only the lease names b, promoted.
    database.configmap.publish(p.name, 3, now=True)
    r = probe(p, "live", LEASE_FILE=str(lease), PATH=dns)
    assert r.rc != 0 and "fenced" in r.out, str(r)


# --------------------------------------------------------------------------
# What a failover loses


class Writer:
    """The application: one connection through the read-write Service,
    one row per transaction (autocommit), a row counted as acknowledged
    once its INSERT returned (psql runs the \\echo after it only then)."""

    def __init__(self, proxy: Proxy, table: str):
        self.work = pg_dir(fresh_path("writer"))
        self.out = open(self.work / "out", "wb")
        self.err = open(self.work / "err", "wb")
        env = {"PATH": PG_PATH, "HOME": str(self.work), "PGHOST": "127.0.0.1", "PGPORT": str(proxy.port),
               "PGUSER": "postgres", "PGPASSWORD": SUPERUSER_PASSWORD, "PGDATABASE": "postgres"}
        self.proc = subprocess.Popen([str(BIN / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                                      "--no-password"], env=env, stdin=subprocess.PIPE,
                                     stdout=self.out, stderr=self.err, start_new_session=True)
        self.table = table
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._feed, daemon=True)
        self.thread.start()

    def _feed(self) -> None:
        assert self.proc.stdin is not None
        n = 0
        try:
            while self.proc.poll() is None:
                chunk = "".join(f"INSERT INTO {self.table} VALUES ({i});\n\\echo ack {i}\n"
                                for i in range(n + 1, n + 501))
                n += 500
                self.proc.stdin.write(chunk.encode())
                self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def acknowledged(self, *ends: str) -> set[int]:
        """After the server is gone: psql exits at the lost connection (or
        at one of `ends`, the errors that may stop it too)."""
        self.proc.wait(60)
        self.ended = time.monotonic()
        self.out.close()
        self.err.close()
        text = (self.work / "out").read_text()
        err = (self.work / "err").read_text()
        assert any(e in err for e in ("server closed the connection", "connection to server was lost",
                                      "terminating connection", *ends)), err
        return {int(line.split()[1]) for line in text.splitlines() if line.startswith("ack ")}


class AckWriter:
    """Applications through the read-write Service, as they are in
    production: each client holds one connection, commits one row per
    transaction, and when its connection ends it connects again (through
    the Service as it selects then). A row is acknowledged once its INSERT
    returned: its RETURNING line (printed only after the COMMIT came back)
    names the instance that acknowledged it (inet_server_port()) and when
    (clock_timestamp(), this machine's clock)."""

    def __init__(self, proxy: Proxy, table: str, clients: int = 2, first_id: int = 0,
                 reconnect_on_error: bool = False):
        self.proxy = proxy
        self.reconnect_on_error = reconnect_on_error
        self.table = table
        self.work = pg_dir(fresh_path("ackwriter"))
        self.lock = threading.Lock()
        self.next_id = first_id
        self.stopped = False
        self.procs: list[subprocess.Popen] = []
        self.outputs: list[Path] = []
        self.threads = [threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(clients)]
        for t in self.threads:
            t.start()

    def _ids(self, n: int) -> range:
        with self.lock:
            first = self.next_id + 1
            self.next_id += n
        return range(first, first + n)

    def _client(self, n: int) -> None:
        try:
            self._sessions(n)
        except OSError:  # the test ended and its scratch directory is gone
            pass

    def _sessions(self, n: int) -> None:
        env = {"PATH": PG_PATH, "HOME": str(self.work), "PGHOST": "127.0.0.1", "PGPORT": str(self.proxy.port),
               "PGUSER": "postgres", "PGPASSWORD": SUPERUSER_PASSWORD, "PGDATABASE": "postgres",
               "PGCONNECT_TIMEOUT": "2"}
        session = 0
        while not self.stopped:
            session += 1
            out = self.work / f"client-{n}-{session}.out"
            with self.lock:
                self.outputs.append(out)
            with open(out, "wb") as o, open(self.work / f"client-{n}-{session}.err", "wb") as e:
                # reconnect_on_error: a session that lands on a standby (the
                # Service selected a candidate not yet promoted, then
                # refused) ends at its first error and reconnects, as an
                # application does; left open it wrote into read-only
                # errors for ever while the Service had moved on.
                stop_on_error = ["-v", "ON_ERROR_STOP=1"] if self.reconnect_on_error else []
                proc = subprocess.Popen([str(BIN / "psql"), "-X", "-q", "-A", "-t", "--no-password",
                                         *stop_on_error],
                                        env=env, stdin=subprocess.PIPE, stdout=o, stderr=e,
                                        start_new_session=True)
                with self.lock:
                    self.procs.append(proc)
                try:
                    assert proc.stdin is not None
                    while proc.poll() is None and not self.stopped:
                        chunk = "".join(
                            f"INSERT INTO {self.table} VALUES ({i}) RETURNING 'ack ' || id || ' ' || "
                            f"inet_server_port() || ' ' || extract(epoch FROM clock_timestamp());\n"
                            for i in self._ids(50))
                        proc.stdin.write(chunk.encode())
                        proc.stdin.flush()
                    proc.stdin.close()
                except (BrokenPipeError, OSError, ValueError):
                    pass
                proc.wait()
            time.sleep(0.1)

    def stop(self) -> dict[int, tuple[int, float]]:
        """Stops every client; returns the acknowledged rows: id -> (port
        of the instance that acknowledged it, when)."""
        self.stopped = True
        with self.lock:
            procs = list(self.procs)
        for p in procs:
            # Its thread reaps a client that ends by itself, maybe between
            # the poll and the signal: a group already gone is stopped.
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for t in self.threads:
            t.join(30)
        acked: dict[int, tuple[int, float]] = {}
        for out in self.outputs:
            if not out.exists():
                continue
            for line in out.read_text().splitlines():
                parts = line.split()
                if len(parts) == 4 and parts[0] == "ack":
                    acked[int(parts[1])] = (int(parts[2]), float(parts[3]))
        return acked


@dataclasses.dataclass
class Verdict:
    """What the checker found: acknowledged rows missing on each instance
    that answers, and the instances that acknowledged writes during
    overlapping periods (two writable primaries at once)."""
    acknowledged: int
    missing: dict[str, int]
    by_instance: dict[str, int]
    concurrent: list[tuple[str, str]]

    def __str__(self) -> str:
        return (f"{self.acknowledged} acknowledged; by instance {self.by_instance}; missing per instance "
                f"{self.missing}; concurrently writable: {self.concurrent}")


def check(db: Database, table: str, acked: dict[int, tuple[int, float]]) -> Verdict:
    """Compares every acknowledged commit with the final data on every
    instance that answers, and looks for two instances that acknowledged
    commits in overlapping periods."""
    names = {i.port: i.name for i in db.instances}
    periods: dict[str, list[float]] = {}
    by_instance: dict[str, int] = {}
    for port, at in acked.values():
        name = names.get(port, str(port))
        lo_hi = periods.setdefault(name, [at, at])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], at), max(lo_hi[1], at)
        by_instance[name] = by_instance.get(name, 0) + 1
    concurrent = [(a, b) for a in sorted(periods) for b in sorted(periods)
                  if a < b and max(periods[a][0], periods[b][0]) < min(periods[a][1], periods[b][1])]
    missing: dict[str, int] = {}
    for i in db.instances:
        if i.proc is None or i.proc.poll() is not None:
            continue
        try:
            present = {int(v) for v in i.sql(f"SELECT id FROM {table}").split()}
        except SqlError:
            continue
        missing[i.name] = len(set(acked) - present)
    return Verdict(len(acked), missing, by_instance, concurrent)


def promote_the_most_advanced(db: Database, old: Instance, sync: bool) -> Instance:
    """What the hook does: a candidate; when the Job refuses because
    another standby is ahead, the next one."""
    standbys = db.instances[1:]
    for candidate in standbys:
        others = [s for s in standbys if s is not candidate]
        db.designate(candidate)
        p = promote(candidate, old, others, sync=sync)
        if p.rc == 0:
            return candidate
        assert_refused(p, "is ahead of candidate")
    raise AssertionError("no standby could be promoted")


def lose_the_primary(template: Path, sync: bool, seconds: float = 1.5) -> tuple[int, int, float]:
    """A Database under a continuous writer loses its primary (SIGKILL of
    every server process, as a node's loss); the most advanced standby is
    promoted. Returns (acknowledged, lost, seconds of writing)."""
    db = new_database(template, sync=sync)
    try:
        p = db.instances[0]
        rw_sql(db.proxy, "CREATE TABLE w (id int PRIMARY KEY)")
        writer = Writer(db.proxy, "w")
        time.sleep(seconds)
        p.stop("kill")
        db.designate(None)
        acked = writer.acknowledged()
        assert len(acked) > 100, "the writer hardly wrote"
        new = promote_the_most_advanced(db, p, sync)
        present = {int(v) for v in new.sql("SELECT id FROM w").split()}
        lost = acked - present
        return len(acked), len(lost), writer.ended - writer.started
    finally:
        db.stop()


def test_a_planned_switchover_loses_nothing_even_asynchronous(template):
    """The primary shut down cleanly (fast: the WAL senders send every
    record up to the shutdown checkpoint before it exits), a standby
    promoted: every acknowledged commit is there, without synchronous
    replication, and the old primary rejoins (pg_rewind finds nothing to
    undo)."""
    db = new_database(template)
    try:
        p, b, c = db.instances
        rw_sql(db.proxy, "CREATE TABLE w (id int PRIMARY KEY)")
        writer = Writer(db.proxy, "w")
        time.sleep(1)
        p.stop("fast")
        db.designate(None)
        acked = writer.acknowledged()
        assert len(acked) > 100, "the writer hardly wrote"
        new = promote_the_most_advanced(db, p, sync=False)
        present = {int(v) for v in new.sql("SELECT id FROM w").split()}
        assert acked <= present, f"{len(acked - present)} acknowledged commits lost in a switchover"
        p.start()
        out = p.output()
        assert "rewound" in out and "pg_rewind failed" not in out, out
        assert "finishing the unclean shutdown" not in out, out
        assert p.in_recovery() == "t"
        rw_sql(db.proxy, "INSERT INTO w VALUES (-1)")
        wait_for("the old primary follows", lambda: p.sql("SELECT count(*) FROM w WHERE id = -1") == "1")
    finally:
        db.stop()


def test_synchronous_replication_loses_no_acknowledged_commit(template):
    for run_no in range(3):
        acked, lost, seconds = lose_the_primary(template, sync=True)
        print(f"synchronous run {run_no + 1}: {acked} commits acknowledged in {seconds:.1f}s, {lost} lost")
        assert lost == 0, f"{lost} of {acked} acknowledged commits lost under synchronous replication"


def test_synchronous_replication_refuses_without_every_standby(template):
    """Under ANY 1 the last commits may be on one standby only: with a
    standby unreachable, nobody can tell the candidate has them."""
    db = new_database(template, sync=True)
    try:
        p, b, c = db.instances
        rw_sql(db.proxy, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
        db.designate(None)
        p.stop("immediate")
        c.stop("immediate")
        db.designate(b)
        refused = promote(b, p, [c], sync=True, timeout="2")
        assert_refused(refused, f"standby {c.address} does not answer", "synchronous")
        assert b.in_recovery() == "t"
        # Asynchronous: noted, and b is promoted.
        done = promote(b, p, [c], sync=False, timeout="2")
        assert_promoted(done, b)
        assert f"standby {c.address} does not answer" in done.err, str(done)
    finally:
        db.stop()


ASYNC_RUNS = 10


def test_asynchronous_replication_loss_is_measured_and_bounded(template):
    figures = []
    for run_no in range(ASYNC_RUNS):
        acked, lost, seconds = lose_the_primary(template, sync=False)
        figures.append((acked, lost, seconds))
        print(f"asynchronous run {run_no + 1}: {acked} commits acknowledged in {seconds:.1f}s, {lost} lost")
    total = sum(a for a, _, _ in figures)
    lost = sum(x for _, x, _ in figures)
    print(f"asynchronous: {lost} of {total} acknowledged commits lost over {ASYNC_RUNS} failovers; "
          f"per failover at most {max(x for _, x, _ in figures)}")
    for acked, lost_here, seconds in figures:
        rate = acked / seconds
        # Lost is what the primary acknowledged but had not yet sent: the
        # WAL sender is woken at each commit, so on loopback that is the
        # last few milliseconds of commits. Bound: 50 ms of them.
        assert lost_here <= max(5, rate * 0.05), (acked, lost_here, seconds)


# --------------------------------------------------------------------------
# promote.sh, MODE=switchover: a planned change of primary


def test_a_switchover_stops_writes_first_and_loses_nothing(database: Database):
    """A client connected to the primary itself (not through the Service)
    writes throughout; the switchover shuts the old primary down (its
    sessions end), waits until the candidate received and replayed all of
    its WAL, then promotes: every acknowledged commit is on the new
    primary, the old one takes no write any more, and its restart rejoins
    it as a standby."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE w (id int PRIMARY KEY)")
    writer = Writer(types.SimpleNamespace(port=p.port), "w")
    time.sleep(1)
    # The role names b; the Service stays on p, which the standbys stream
    # from, until b is promoted.
    database.designate(b)
    database.route(p)
    done = promote(b, p, [c], mode="switchover")
    assert_promoted(done, b)
    assert "old primary" in done.err and "stopped" in done.err, str(done)
    database.route(b)
    acked = writer.acknowledged()
    assert len(acked) > 100, "the writer hardly wrote"
    present = {int(v) for v in b.sql("SELECT id FROM w").split()}
    assert acked <= present, f"{len(acked - present)} acknowledged commits lost in a switchover"
    write = p.cluster.psql("INSERT INTO w VALUES (-5)")
    assert write.rc != 0, str(write)
    assert p.proc is not None and p.proc.wait(30) == 0, "the old primary did not shut down cleanly"
    rw_sql(database.proxy, "INSERT INTO w VALUES (-1)")
    p.start()
    out = p.output()
    assert "rewound" in out and "pg_rewind failed" not in out, out
    assert "default_transaction_read_only" not in (p.data / "postgresql.auto.conf").read_text()
    assert p.in_recovery() == "t"
    for standby in (p, c):
        wait_for(f"{standby.name} follows b", lambda s=standby: s.sql("SELECT count(*) FROM w WHERE id = -1") == "1",
                 timeout=60)
    assert b.sql("SHOW default_transaction_read_only") == "off"


def test_a_switchover_that_cannot_finish_leaves_the_old_primary_to_take_over_again(database: Database):
    """A candidate that does not stream is refused before anything stops.
    One that does not replay (paused) cannot show it has the old primary's
    end: refused after ROLE_WAIT, nothing promoted; the hook designates the
    old primary again, which starts as the primary when its container
    restarts, and the candidate follows it."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int)")
    wait_for("b has t", lambda: b.sql("SELECT count(*) FROM pg_class WHERE relname = 't'") == "1")
    c.sql("ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 connect_timeout=1'")
    c.sql("SELECT pg_reload_conf()")
    wait_for("c stopped receiving", lambda: c.sql(
        "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'") == "0")
    database.designate(c)
    database.route(p)
    refused = promote(c, p, [b], mode="switchover", role_wait="4")
    assert_refused(refused, f"candidate {c.address} does not stream", "nothing was stopped")
    assert p.in_recovery() == "f"

    b.sql("SELECT pg_wal_replay_pause()")
    rw_sql(database.proxy, "INSERT INTO t VALUES (1)")
    database.designate(b)
    database.route(p)
    refused = promote(b, p, [c], mode="switchover", role_wait="4")
    assert_refused(refused, f"candidate {b.address} did not receive and replay the old primary's last WAL")
    assert b.in_recovery() == "t"
    database.designate(p)
    wait_for("the mount names db-0 again", database.configmap.settled)
    p.stop("fast")
    p.start()
    assert p.in_recovery() == "f"
    p.sql("INSERT INTO t VALUES (2)")
    b.sql("SELECT pg_wal_replay_resume()")
    wait_for("b follows the old primary again", lambda: has_rows(b, "t", 2), timeout=60)


def test_promote_waits_until_every_instance_reads_the_role(database: Database):
    """Fencing first: the role the hook published must be read by every
    instance that answers before anything is promoted; one that still reads
    the old role after ROLE_WAIT refuses the promotion."""
    p, b, c = database.instances
    database.designate(None)
    p.stop("immediate")
    # The kubelet has not updated the volume yet: the files still name db-0.
    refused = promote(b, p, [c], role_wait="2")
    assert_refused(refused, f"{b.address} still reads the role 'db-0@1', not 'db-1@1'")
    assert b.in_recovery() == "t"
    database.designate(b)
    assert_promoted(promote(b, p, [c]), b)


# --------------------------------------------------------------------------
# Issue 32: the loss bound is checked against what the old primary had


SILENCE = 6


def kubelet_probes(instances: list[Instance], seconds: float, **extra: str) -> None:
    """The kubelet's liveness probes, once a second for `seconds`, on every
    instance that runs (each records whether it is current)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for i in instances:
            if i.proc is not None and i.proc.poll() is None:
                probe(i, "live", **extra)
        time.sleep(1)


def test_a_standby_that_stopped_streaming_long_ago_is_not_promoted(template):
    """Issue 32, item 1: b stops receiving (it cannot reach the primary any
    more) while the application goes on writing; then the primary is lost
    together with c. b is the only standby left, and comparing it with
    other standbys finds nothing against it: it must be refused all the
    same, since it was last current with a primary longer ago than the
    bound, and its readiness probe must say so before."""
    db = new_database(template)
    try:
        p, b, c = db.instances
        rw_sql(db.proxy, "CREATE TABLE w (id bigint PRIMARY KEY)")
        rw_sql(db.proxy, "INSERT INTO w SELECT -g FROM generate_series(1, 1000) g")
        wait_for("b has the first rows", lambda: has_rows(b, "w", 1000))
        kubelet_probes([b, c], 2)
        for s in (b, c):
            r = probe(s, "ready", MAX_SILENCE_SECONDS=str(SILENCE))
            assert r.rc == 0, f"{s.name}: {r}"
        b.sql("ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 connect_timeout=1'")
        b.sql("SELECT pg_reload_conf()")
        wait_for("b stopped receiving", lambda: b.sql(
            "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'") == "0")
        writer = AckWriter(db.proxy, "w")
        kubelet_probes([b, c], SILENCE + 2)
        stale = probe(b, "ready", MAX_SILENCE_SECONDS=str(SILENCE))
        assert stale.rc == 1 and "last current with a primary" in stale.out, str(stale)
        assert f"more than MAX_SILENCE_SECONDS={SILENCE}" in stale.out, str(stale)
        assert probe(c, "ready", MAX_SILENCE_SECONDS=str(SILENCE)).rc == 0
        p.stop("kill")
        c.stop("kill")
        db.designate(None)
        acked = writer.stop()
        assert len(acked) > 100, "the writer hardly wrote"
        db.designate(b)
        result = promote(b, p, [c], timeout="2", MAX_SILENCE_SECONDS=str(SILENCE))
        verdict = check(db, "w", acked)
        print(f"stale standby: {verdict}; promote: {result.line.strip()}")
        assert_refused(result, f"candidate {b.address} was last current with a primary",
                       f"more than MAX_SILENCE_SECONDS={SILENCE}")
        assert b.in_recovery() == "t"
    finally:
        db.stop()


def test_a_standby_with_no_record_of_being_current_is_not_promoted(template):
    """docs/failover.md ("Against what the old primary had"): a
    candidate with no record of when it was last current with a primary
    (no probe of it ever found it streaming) is refused, changing nothing:
    how far behind it is cannot be known. Here it streams, and is as
    current as the other standby, but no probe ever ran."""
    db = new_database(template)
    try:
        p, b, c = db.instances
        rw_sql(db.proxy, "CREATE TABLE w (id bigint PRIMARY KEY)")
        rw_sql(db.proxy, "INSERT INTO w SELECT g FROM generate_series(1, 100) g")
        wait_for("b and c have the rows", lambda: has_rows(b, "w", 100) and has_rows(c, "w", 100))
        p.stop("kill")
        db.designate(None)
        db.designate(b)
        result = promote(b, p, [c], timeout="2", MAX_SILENCE_SECONDS=str(SILENCE))
        assert_refused(result, f"candidate {b.address} has no record of being current with a primary")
        assert b.in_recovery() == "t"
    finally:
        db.stop()


# --------------------------------------------------------------------------
# Issue 32: a switchover stops the old primary, and every standby follows


def timeline(instance: Instance) -> str:
    return instance.sql("SELECT timeline_id FROM pg_control_checkpoint()")


def test_a_switchover_stops_the_old_primary_and_no_standby_is_stranded(template):
    """Issue 32, item 2, under the application's load through the
    read-write Service: the role names b while the Service stays on p, the
    promote Job switches over, then the Service moves to b. The old
    primary must take no write once b is promoted (not even `BEGIN READ
    WRITE`), c, which streamed from p over a connection the Service change
    does not cut, must follow b's timeline, and the old primary, restarted
    by the kubelet, rejoins: every acknowledged commit is on every
    instance, and no two instances acknowledged writes at once."""
    db = new_database(template)
    try:
        p, b, c = db.instances
        rw_sql(db.proxy, "CREATE TABLE w (id bigint PRIMARY KEY)")
        writer = AckWriter(db.proxy, "w")
        time.sleep(2)
        db.designate(b)
        db.route(p)
        done = promote(b, p, [c], mode="switchover")
        assert_promoted(done, b)
        db.route(b)
        late = p.cluster.psql("BEGIN READ WRITE; INSERT INTO w VALUES (-7); COMMIT")
        time.sleep(2)
        acked = writer.stop()
        assert len(acked) > 100, "the writer hardly wrote"
        # The kubelet restarts the old primary's container: its process
        # exited (shut down by the Job), or its liveness probe fails.
        p.stop("fast")
        p.start(wait=False)
        rw_sql(db.proxy, "INSERT INTO w VALUES (-1)")
        followed = {}
        for s in (c, p):
            try:
                wait_for(f"{s.name} follows b", lambda s=s: s.sql("SELECT count(*) FROM w WHERE id = -1") == "1",
                         timeout=60)
                followed[s.name] = True
            except AssertionError:
                followed[s.name] = False
        verdict = check(db, "w", acked)
        print(f"switchover: {verdict}; old primary took a READ WRITE commit: {late.rc == 0}; followed: {followed}")
        assert late.rc != 0, f"the old primary committed a write after the promotion:\n{late}"
        assert b.sql("SELECT count(*) FROM w WHERE id = -7") == "0"
        assert followed == {"db-2": True, "db-0": True}, (followed, c.output()[-2000:])
        assert timeline(c) == timeline(b) or c.sql("SELECT received_tli FROM pg_stat_wal_receiver") == timeline(b)
        assert verdict.missing == {"db-0": 0, "db-1": 0, "db-2": 0}, str(verdict)
        assert verdict.concurrent == [], str(verdict)
        assert "rewound" in p.output() and "pg_rewind failed" not in p.output(), p.output()
    finally:
        db.stop()


@pytest.mark.parametrize(("checkpointed", "stopped"), [(True, "fast"), (False, "fast"), (True, "kill")],
                         ids=["checkpointed", "no-checkpoint-yet", "standby-killed"])
def test_a_standby_that_replayed_past_the_fork_is_rewound_when_it_restarts(database: Database, checkpointed, stopped):
    """Issue 32, item 2: b was promoted while c still streamed from p over
    its open connection (a Service change does not cut it), and p wrote on:
    c replayed WAL past the point where b's timeline forked. Restarted as
    it is, c would never follow b; start.sh rewinds it onto b's timeline.
    no-checkpoint-yet: b's checkpointer is paused from before the promotion
    until c has restarted, so b's control file still names the old
    timeline (start.sh once read the primary's timeline from there, found
    it equal to c's and rewound nothing: c never followed b). standby-killed:
    c is SIGKILLed, not stopped (pg_rewind's own crash recovery runs in
    single-user mode, which refuses standby mode: c never started again)."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int)")
    wait_for("c has t", lambda: c.sql("SELECT count(*) FROM pg_class WHERE relname = 't'") == "1")
    database.designate(b)
    database.route(p)
    wait_for("the mount names b", database.configmap.settled)
    checkpointer = int(b.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"))
    if not checkpointed:
        os.kill(checkpointer, signal.SIGSTOP)
    try:
        assert b.sql("SELECT pg_promote(true, 60)") == "t"
        if checkpointed:
            b.sql("CHECKPOINT")
        p.sql("INSERT INTO t SELECT generate_series(1, 1000)")  # only p and c have these
        wait_for("c has p's last rows", lambda: has_rows(c, "t", 1000))
        p.stop("fast")
        database.route(b)
        rw_sql(database.proxy, "INSERT INTO t VALUES (-1)")
        c.stop(stopped)
        if not checkpointed:
            assert b.sql("SELECT timeline_id FROM pg_control_checkpoint()") == "1"
            # The rewind asks b for a checkpoint: the checkpointer resumes
            # once start.sh has read b's timeline.
            timer = threading.Timer(8, os.kill, args=(checkpointer, signal.SIGCONT))
            timer.daemon = True
            timer.start()
        c.start()
    finally:
        os.kill(checkpointer, signal.SIGCONT)
    wait_for("c follows b", lambda: c.sql("SELECT count(*) FROM t") == "1", timeout=45)
    assert c.sql("SELECT max(id) FROM t") == "-1"
    assert "rewinding it onto the primary's" in c.output(), c.output()


def test_an_old_primary_reached_but_not_understood_is_not_taken_for_lost(database: Database):
    """Issue 32, item 5: promote.sh took any failed connection to the old
    primary as its loss. Here what answers at the old primary's address
    takes the connection and cuts it (as a TLS or authentication refusal
    would): a server that may still take writes, so nothing is promoted.
    Nothing listening there is a loss, as before."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int)")
    wait_for("b has t", lambda: b.sql("SELECT count(*) FROM pg_class WHERE relname = 't'") == "1")
    database.designate(b)
    wait_for("the mount names b", database.configmap.settled)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def cut() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = listener.accept()
                conn.sendall(b"X")  # neither 'S' nor 'N' to the SSL request, then closed
                conn.close()

    threading.Thread(target=cut, daemon=True).start()
    try:
        refused = promote(b, p, [c], OLD_PRIMARY=f"127.0.0.1:{listener.getsockname()[1]}")
    finally:
        stop.set()
        listener.close()
    assert_refused(refused, "answers but could not be asked whether it is a primary")
    assert b.in_recovery() == "t"


# --------------------------------------------------------------------------
# Issue 32, item 3: re-created over retained volumes after a failover


@dataclasses.dataclass(frozen=True)
class Holds:
    """What an instance that refuses to start says it holds (start.sh's
    termination line, read by the hook: observed.rs, `Holding`)."""
    name: str
    epoch: int
    primary: str
    database: str
    timeline: int
    lsn: int

    @classmethod
    def read(cls, instance: Instance) -> Holds:
        line = termination_line(instance.termination_log)
        assert line.startswith("opshooks: holds ") and line.count("\n") == 1, line
        # As the hook reads it (report.rs), not by a copy of its grammar.
        said = report(instance.termination_log)
        assert said["report"] == "holds", said
        h = said["holding"]
        return cls(instance.name, h["epoch"], h["primary"], h["database"], h["timeline"], h["lsn"])


def start_or_refuse(instance: Instance) -> Holds | None:
    """Starts the container: None once it serves; what it holds when it
    exits without starting a server."""
    with contextlib.suppress(FileNotFoundError):
        instance.termination_log.unlink()
    instance.start(wait=False)
    assert instance.proc is not None
    deadline = time.monotonic() + 90
    while instance.proc.poll() is None:
        if instance.cluster.psql("SELECT 1").rc == 0:
            return None
        assert time.monotonic() < deadline, f"{instance.name} neither serves nor exits:\n{instance.output()}"
        time.sleep(0.2)
    return Holds.read(instance)


# The Secrets of a Database created again: new, and as hostile as the first.
RECREATED_SUPERUSER_PASSWORD = "again s'u \"pw\" $(touch /tmp/pwned-repl) \\'; DROP ROLE postgres; --"
RECREATED_REPLICATION_PASSWORD = "again r'e \"pl\" `touch /tmp/pwned-repl` \\gexec"


@pytest.mark.parametrize("variant", ["stale", "rejoined", "lost", "standby-designated"])
def test_re_created_after_a_failover_the_newest_data_wins(template, variant):
    """Issue 32, item 3. db-0 is lost under load and db-1 (or db-2) is
    promoted; the application goes on writing to it. Then the Database is
    deleted and created again over its retained volumes: no status, no
    role ConfigMap, no promote Job, so the hook designates instance 0 at
    epoch 0, as at the first creation. Variants: db-0 is the stale former
    primary; db-0 already rejoined as a standby of the new primary; db-0's
    claim is gone (an empty volume). Whatever instance 0 holds, no instance
    starts on the lost role: each says what it holds, the newest data (the
    promoted one) is designated at an epoch above every one recorded, and
    every acknowledged row is on every instance. As the hook does, the
    first designation is at epoch 0 and the role names the Database's uid
    (another one once created again)."""
    db = new_database(template, first_epoch=0, database="uid-earlier")
    try:
        p = db.instances[0]
        rw_sql(db.proxy, "CREATE TABLE w (id int PRIMARY KEY)")
        writer = AckWriter(db.proxy, "w", reconnect_on_error=True)
        time.sleep(1.5)
        p.stop("kill")
        db.designate(None)
        new = promote_the_most_advanced(db, p, sync=False)
        # Rows written by the new primary: more than it had at its promotion
        # (p alone may have written a thousand before it was killed).
        promoted_with = int(new.sql("SELECT count(*) FROM w"))
        wait_for("rows acknowledged by the new primary",
                 lambda: int(new.sql("SELECT count(*) FROM w")) > promoted_with + 500)
        time.sleep(1.0)
        acked = writer.stop()
        by_new = sum(1 for port, _ in acked.values() if port == new.port)
        assert by_new > 100, f"the new primary acknowledged {by_new} rows"
        # What the new primary holds before the Database is deleted (the
        # asynchronous failover may have lost the old primary's last
        # commits: that loss is measured elsewhere).
        held = {int(v) for v in new.sql("SELECT id FROM w").split()}
        if variant in ("rejoined", "standby-designated"):
            wait_for("the role mount names the new primary", db.configmap.settled)
            p.start()
            wait_for("db-0 follows the new primary", lambda: has_rows(p, "w", int(new.sql("SELECT count(*) FROM w"))))
        for i in db.instances:
            i.stop("fast")
        if variant == "lost":
            shutil.rmtree(p.data)

        # Created again: the hook knows of no failover and designates
        # instance 0 at epoch 0; the claims older than the Database say it
        # holds data (initialized=true: plan.rs). Its Secrets are new: the
        # data keeps the earlier passwords until the designated primary
        # takes the new ones (start.sh, adopt_passwords); the standbys
        # following it shows the replicator's, every i.sql the superuser's.
        for i in db.instances:
            i.superuser_password = RECREATED_SUPERUSER_PASSWORD
            i.replication_password = RECREATED_REPLICATION_PASSWORD
        db.configmap.database = "uid-now"
        db.configmap.publish("db-0", 0, "true", now=True)
        db.route(p)
        holding: dict[str, Holds] = {}
        started = []
        for i in db.instances:
            if variant == "lost" and i is p:
                # An empty volume: refused, it holds nothing.
                p.start(wait=False)
                assert p.proc is not None and p.proc.wait(60) != 0, p.output()
                assert "empty although the Database was initialized" in termination_line(p.termination_log)
                assert report(p.termination_log)["about"] == "emptyVolume"
                continue
            h = start_or_refuse(i)
            if h is None:
                started.append(i.name)
            else:
                holding[i.name] = h
        if started:
            time.sleep(5)  # what the others do meanwhile (a rewind onto db-0)
            verdict = check(db, "w", acked)
            raise AssertionError(f"started on the lost role: {started}; {verdict}")
        print(f"re-created ({variant}): {sorted(holding.values(), key=lambda h: h.name)}")
        assert holding[new.name].primary == new.name
        assert all(h.database == "uid-earlier" for h in holding.values()), holding
        # The hook's designation (primary.rs): the newest data at an epoch
        # above every one recorded. Under standby-designated, db-0, a
        # standby that followed the new primary to its end, as the hook
        # designates it when its data ties with the primary's (the lowest
        # ordinal wins): as a standby it could not take the new passwords
        # and no promote Job could log in; it starts as the primary.
        newest = max(holding.values(), key=lambda h: (h.epoch, h.timeline, h.lsn))
        assert newest.name == new.name, holding
        if variant == "standby-designated":
            assert (p.data / "standby.signal").exists()
            new = p
        epoch = max(h.epoch for h in holding.values()) + 1
        db.configmap.publish(new.name, epoch, "true", now=True)
        db.route(new)
        new.start()
        assert new.in_recovery() == "f", new.output()[-2000:]
        for i in db.instances:
            if i is not new:
                i.start()
                assert i.in_recovery() == "t", i.output()
        total = new.sql("SELECT count(*) FROM w")
        for i in db.instances:
            wait_for(f"{i.name} has every row", lambda i=i: i.sql("SELECT count(*) FROM w") == total, timeout=60)
        verdict = check(db, "w", {i: a for i, a in acked.items() if i in held})
        print(f"re-created ({variant}): {verdict}; lost by the failover itself: {len(set(acked) - held)}")
        assert all(m == 0 for m in verdict.missing.values()), str(verdict)
        assert len(verdict.missing) == 3, str(verdict)
        assert all(i.sql("SELECT count(*) FROM w") == str(len(held)) for i in db.instances)
        assert not PWNED.exists(), "a password ran as shell"
    finally:
        db.stop()


# Issue 32, item 5: a primary serves only while its lease is fresh


def stopped_within(instance: Instance, seconds: float) -> float:
    """Waits until the instance's server process exits; the time it took."""
    assert instance.proc is not None
    began = time.monotonic()
    try:
        instance.proc.wait(seconds)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{instance.name} still runs after {seconds}s:\n{instance.output()[-3000:]}") from None
    return time.monotonic() - began


def test_the_watchdog_stops_a_primary_whose_lease_expires_not_one_naming_another(template):
    """The lease sidecar cannot reach the API server (cut): the primary
    stops by itself within LEASE_SECONDS of its last lease plus a check,
    without the kubelet (the mount never changes here). Restarted, it
    waits for a fresh lease before serving. A fresh lease that names
    another pod does not stop it (a planned switchover's promote Job stops
    it itself; found in the real loop, where the watchdog stopping it made
    every switchover refuse)."""
    db = new_database(template, lease=True, mount_delay=3600)
    try:
        p, b, c = db.instances
        assert p.lease is not None
        rw_sql(db.proxy, "CREATE TABLE w (id bigint PRIMARY KEY)")
        writer = AckWriter(db.proxy, "w")
        time.sleep(3)
        assert p.proc is not None and p.proc.poll() is None, p.output()
        p.lease.cut()
        last_lease = int(p.lease.path.read_text().split()[0])
        took = stopped_within(p, LEASE_SECONDS + 10)
        stopped_at = uptime()
        acked = writer.stop()
        print(f"lease cut: the primary stopped {stopped_at - last_lease}s after its last lease")
        assert stopped_at - last_lease <= LEASE_SECONDS + 2, (stopped_at, last_lease, took)
        assert "watchdog: the lease is" in p.output(), p.output()[-2000:]
        assert len(acked) > 100
        # Restarted while still cut off: it waits, serving nothing.
        p.start(wait=False)
        wait_for("it waits for a lease", lambda: "waiting for a lease younger than" in p.output())
        assert p.cluster.psql("SELECT 1").rc != 0
        p.lease.cut(False)
        p.wait_ready()
        assert p.in_recovery() == "f"
        # The ConfigMap names b (a planned switchover names the candidate
        # before its promote Job stops the old primary): a fresh lease that
        # names another pod does not stop p; only one it cannot renew does.
        db.configmap.publish(b.name, 2)
        time.sleep(p.lease.every + 3)
        assert p.proc is not None and p.proc.poll() is None, p.output()[-2000:]
        assert "watchdog: the lease" not in p.output().split("waiting for a lease younger than")[-1], p.output()[-2000:]
        # Stopped and restarted: the lease is newer than the mount and
        # names b, so p does not start as the primary (start.sh takes it as
        # a former primary and waits for b, which is not promoted here).
        p.stop()
        p.start(wait=False)
        wait_for("p starts as a former primary", lambda: "the lease is newer" in p.output()
                 and "a former primary" in p.output())
        # And it waits for b, reading the role as at the start: the mount
        # still naming p (the kubelet's minute) is not a designation. Read
        # from the mount alone, p exited at once to start as the primary,
        # and the kubelet restarted it in a loop until the mount changed.
        wait_for("p waits for the primary", lambda: p.output().count("waiting for the primary at") >= 2)
        assert p.proc is not None and p.proc.poll() is None, p.output()[-2000:]
        assert "designated primary now" not in p.output(), p.output()[-2000:]
        # Designated again (a switchover back): the lease names p at epoch
        # 3, the stale mount p at epoch 0. The lease's epoch is the role's
        # (the real loop found an old primary, restarted after a switchover
        # back to the pod its mount named, refusing its data as "saw epoch
        # 1, not before the role's epoch 0": a standby down for a minute).
        db.configmap.publish(p.name, 3)
        wait_for("p sees itself designated at epoch 3", lambda: "designated primary now (epoch" in p.output())
        assert "designated primary now (epoch 3)" in p.output(), p.output()[-2000:]
    finally:
        db.stop()


def test_the_watchdog_stops_a_primary_once_the_pod_its_lease_names_answers_as_one(template):
    """The role names b (fresh lease; the mount still names p): p serves on while
    b is in recovery (a switchover's Job stops p itself, a failover's
    refuses while p answers). Once b answers as a primary (promoted while p
    was starting again, unseen by the Job), p's watchdog stops p within a
    few checks instead of the liveness probe a minute later. Seen failing
    without the rule: p still ran 10 s after b's promotion."""
    db = new_database(template, lease=True, mount_delay=3600)
    try:
        p, b, _ = db.instances
        assert p.lease is not None
        # The mount keeps naming p (the kubelet's minute, here an hour): b is
        # found at p's mounted host with b's name in place of p's, which
        # only resolves (to 127.0.0.1; the host carries b's port, as every
        # instance here is on loopback) when derived right.
        db.configmap.hosts[p.name] = f"{p.name}.db-headless.ns.svc:{b.port}"
        db.configmap.publish(p.name, 1, now=True)
        p.stop()
        p.start(path=resolving(f"{b.name}.db-headless.ns.svc"))
        db.configmap.publish(b.name, 2)
        time.sleep(p.lease.every + 3)
        assert p.proc is not None and p.proc.poll() is None, p.output()[-2000:]
        assert b.sql("SELECT pg_promote()") == "t"
        wait_for("b promoted", lambda: b.in_recovery() == "f")
        took = stopped_within(p, 10)
        print(f"p stopped {took:.2f}s after b answered as a primary")
        assert "which answers as a primary: stopping the primary" in p.output(), p.output()[-2000:]
    finally:
        db.stop()


def test_a_paused_primary_stops_as_soon_as_it_resumes(template):
    """SIGSTOP of every process of the primary's container (a frozen node)
    for longer than the lease, its sidecar frozen with it: once resumed,
    the watchdog finds the lease expired and stops the server. What the
    server's sessions acknowledge between the resume and the stop (the
    race docs/failover.md states) is counted; the stop itself must follow
    within a check."""
    db = new_database(template, lease=True, mount_delay=3600)
    try:
        p = db.instances[0]
        assert p.lease is not None
        rw_sql(db.proxy, "CREATE TABLE w (id bigint PRIMARY KEY)")
        writer = AckWriter(db.proxy, "w")
        time.sleep(2)
        p.lease.cut()
        p.pause()
        paused = time.time()
        time.sleep(LEASE_SECONDS + 3)
        resumed = time.time()
        p.pause(False)
        took = stopped_within(p, 8)
        acked = writer.stop()
        after = sorted(at - resumed for port, at in acked.values() if port == p.port and at >= resumed)
        # A frozen server runs no statement: none is timed inside the pause
        # (one timed just before it may be acknowledged after the resume).
        during = [at for port, at in acked.values() if port == p.port and paused + 0.1 < at < resumed]
        print(f"paused primary: stopped {took:.2f}s after the resume; {len(after)} commits acknowledged "
              f"after the resume, the last {after[-1] if after else 0:.3f}s after it; {len(during)} ran "
              f"during the pause")
        assert during == [], f"{len(during)} statements ran while every process was stopped"
        assert "paused?" in p.output(), p.output()[-2000:]
        assert took < 3, took
    finally:
        db.stop()


def test_a_partitioned_primary_stops_before_the_candidate_is_promoted(template):
    """Issue 32, item 5: the primary's node is cut off. Its lease is no
    longer rewritten, its role mount never changes (the kubelet there
    cannot read the ConfigMap), its standbys lose it, and clients on its
    node keep writing to it (kube-proxy there keeps its rules: `local`, a
    Service that never moves) while the others follow the Service to b.
    The promote Job cannot reach the old primary (a DNS failure, which
    proves nothing): it waits until the old primary's lease has run out,
    then promotes b. Never two instances acknowledge writes at once.
    With the wait taken out (LEASE_* 0) b is promoted while the old
    primary still takes writes: the test sees it."""
    for wait in (True, False):
        db = new_database(template, lease=True, mount_delay=3600)
        local = Proxy()
        try:
            p, b, c = db.instances
            assert p.lease is not None
            rw_sql(db.proxy, "CREATE TABLE w (id bigint PRIMARY KEY)")
            local.retarget(p.port)
            writers = [AckWriter(db.proxy, "w"), AckWriter(local, "w", first_id=10**8)]
            time.sleep(2)
            p.lease.cut()
            db.proxy.retarget(None)  # the primary is not ready: out of the Service
            partition_from_standbys(p)
            # The hook's candidate is the standby that received most.
            lsn = "SELECT pg_last_wal_receive_lsn() - '0/0'"
            if int(float(c.sql(lsn))) > int(float(b.sql(lsn))):
                b, c = c, b
            db.designate(b)
            extra = {} if wait else {"LEASE_SECONDS": "0", "LEASE_CHECK_SECONDS": "0", "LEASE_MARGIN": "0"}
            old = types.SimpleNamespace(address="db-0.partitioned.invalid:5432")
            began = time.monotonic()
            done = promote(b, old, [c], timeout="2", **extra)
            took = time.monotonic() - began
            assert_promoted(done, b)
            writers.append(AckWriter(db.proxy, "w", first_id=2 * 10**8))  # connects now: reaches b
            time.sleep(3)
            acked = {}
            for w in writers:
                acked |= w.stop()
            verdict = check(db, "w", acked)
            late = [at for port, at in acked.values() if port == p.port]
            first_b = min((at for port, at in acked.values() if port == b.port), default=None)
            watchdog = [line for line in p.output().splitlines() if "watchdog: the lease is" in line]
            print(f"partition (wait {wait}): promote took {took:.1f}s; {verdict}; the old primary's last ack "
                  f"{(max(late) - first_b) if late and first_b else 0:+.2f}s from b's first; "
                  f"its watchdog: {watchdog[-1].strip() if watchdog else 'did not stop it'}")
            if wait:
                # The new primary is live by its lease, its mount still naming db-0.
                assert (db.roles / "primary").read_text() == "db-0"
                wait_for("b's lease names b", lambda: b.lease is not None and b.name in b.lease.path.read_text())
                live = probe(b, "live")
                assert live.rc == 0, str(live)
                assert probe(b, "live", LEASE_FILE="").rc == 1
                assert "waiting until its lease has run out" in done.err, str(done)
                assert p.proc is not None and p.proc.poll() is not None, "the old primary still runs"
                assert verdict.concurrent == [], str(verdict)
            else:
                assert verdict.concurrent != [], f"no overlap without the wait: the test proves nothing\n{verdict}"
        finally:
            local.close()
            db.stop()


# --------------------------------------------------------------------------
# Issue 32, item 6: synchronous mode promotes only a candidate that holds
# every acknowledged commit


@pytest.mark.parametrize("names", ["any", "instances"])
def test_synchronous_promote_refuses_when_a_wal_receiver_stood_in_for_the_standbys(template, names):
    """The standby is stopped and only pg_receivewal --synchronous streams
    from the primary; then the primary is lost and the standby comes back.
    With `ANY 1 (*)` (before) pg_receivewal acknowledged every commit for
    the primary and the standby holds none of them: the promote Job must
    refuse (it promoted it before). With the instances named (the hook's
    setting) nothing was acknowledged meanwhile and the standby is
    promoted with every acknowledged commit."""
    pods.SYNC_NAMES = "*" if names == "any" else ""
    db = None
    receiver = None
    try:
        db = new_database(template, sync=True, standbys=1)
        p, b = db.instances
        rw_sql(db.proxy, "CREATE TABLE w (id bigint PRIMARY KEY)")
        b.stop("fast")
        wal = pg_dir(fresh_path("receivewal"))
        env = {"PATH": PG_PATH, "HOME": str(wal), "PGPASSWORD": REPLICATION_PASSWORD}
        uid, gid = postgres_ids()
        receiver = subprocess.Popen(
            [str(BIN / "pg_receivewal"), "--synchronous", "-D", str(wal), "-h", "127.0.0.1", "-p", str(p.port),
             "-U", "replicator", "--no-password"], env=env, stdout=subprocess.DEVNULL,
            stderr=open(wal / "stderr", "wb"), start_new_session=True, user=uid, group=gid, extra_groups=[])
        wait_for("pg_receivewal streams", lambda: p.sql(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'pg_receivewal'") == "1")
        writer = AckWriter(types.SimpleNamespace(port=p.port), "w")
        time.sleep(2)
        p.stop("kill")
        receiver.kill()
        acked = writer.stop()
        b.start()
        db.designate(b)
        done = promote(b, p, [], sync=True, timeout="2")
        verdict = check(db, "w", acked)
        print(f"synchronous, names {pods.SYNC_NAMES or 'the instances'}: {verdict}; promote: {done.line.strip()}")
        if names == "any":
            assert len(acked) > 100, "pg_receivewal did not acknowledge: the test proves nothing"
            assert_refused(done, "any WAL receiver")
            assert b.in_recovery() == "t"
        else:
            assert_promoted(done, b)
            assert verdict.missing == {"db-1": 0}, str(verdict)
    finally:
        pods.SYNC_NAMES = ""
        if receiver is not None and receiver.poll() is None:
            receiver.kill()
        if db is not None:
            db.stop()


NAMED = 'ANY 1 ("db-0","db-1","db-2")'  # as the hook names the instances (children.rs)


@pytest.mark.parametrize("where", ["candidate", "every-server"])
def test_synchronous_promote_refuses_a_candidate_without_synchronous_standby_names(template, where):
    """docs/failover.md ("What a failover can lose"): "The Job also
    refuses when the candidate's `synchronous_standby_names` (every
    server's, the old primary's too) is empty or holds `*`". Empty:
    candidate: the old primary runs as the hook starts it (the instances
    named); b, the candidate, takes the setting from ALTER SYSTEM (not
    from its command line, which would override it) and ALTER SYSTEM
    RESET empties it: the Job reads the candidate's, finds it empty and
    refuses, b still a standby; set again to the instances' names, the
    same Job promotes b (so the refusal was for the empty setting).
    every-server: the Database's servers all run without the setting (as
    after it was lost from their command lines): the old primary then
    acknowledged commits with no standby at all. b is stopped, the
    primary takes acknowledged commits, is killed, and b comes back
    holding none of them: the Job (SYNCHRONOUS=true) must refuse it."""
    db = new_database(template, sync=where == "candidate", standbys=1)
    try:
        p, b = db.instances
        rw_sql(db.proxy, "CREATE TABLE w (id bigint PRIMARY KEY)")
        wait_for("b has w", lambda: b.sql("SELECT count(*) FROM pg_class WHERE relname = 'w'") == "1")
        if where == "candidate":
            b.stop("fast")
            b.sync_on_command_line = False
            b.start()
            b.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{NAMED.replace(chr(39), chr(39) * 2)}'")
            b.sql("SELECT pg_reload_conf()")
            wait_for("b reads the named setting", lambda: b.sql("SHOW synchronous_standby_names") == NAMED)
            wait_for("b streams", lambda: p.sql(
                "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'db-1' AND state = 'streaming'") == "1")
            assert p.sql("SHOW synchronous_standby_names") == NAMED
            rw_sql(db.proxy, "INSERT INTO w SELECT generate_series(1, 100)")  # waits for b: synchronous
            b.sql("ALTER SYSTEM RESET synchronous_standby_names")
            b.sql("SELECT pg_reload_conf()")
            wait_for("b's setting is empty", lambda: b.sql("SHOW synchronous_standby_names") == "")
            acked: dict[int, tuple[int, float]] = {}
            p.stop("kill")
        else:
            assert p.sql("SHOW synchronous_standby_names") == "" and b.sql("SHOW synchronous_standby_names") == ""
            b.stop("fast")
            writer = AckWriter(types.SimpleNamespace(port=p.port), "w")
            time.sleep(2)
            p.stop("kill")
            acked = writer.stop()
            b.start()
        db.designate(b)
        done = promote(b, p, [], sync=True, timeout="2")
        verdict = check(db, "w", acked)
        print(f"synchronous, empty names ({where}): {verdict}; promote: {done.line.strip()}")
        assert_refused(done, f"candidate {b.address} runs without synchronous_standby_names")
        assert b.in_recovery() == "t"
        if where == "candidate":
            b.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{NAMED.replace(chr(39), chr(39) * 2)}'")
            b.sql("SELECT pg_reload_conf()")
            wait_for("b reads the named setting", lambda: b.sql("SHOW synchronous_standby_names") == NAMED)
            assert_promoted(promote(b, p, [], sync=True, timeout="2"), b)
            assert has_rows(b, "w", 100)
        else:
            # What the refusal keeps from happening: b holds none of them.
            assert len(acked) > 100, "the old primary hardly acknowledged: the test proves nothing"
            assert verdict.missing == {"db-1": len(acked)}, str(verdict)
    finally:
        db.stop()


# --------------------------------------------------------------------------
# Issue 32, item 8: the time from the primary's loss to the first write
# acknowledged through the read-write Service

# Two in CI: each failover is one more check that it ends in an acknowledged
# write; the distribution in BENCHMARKS.md comes from its command, which
# asks for ten.
RTO_RUNS = int(os.environ.get("OPSHOOKS_RTO_RUNS", "2"))
# The Database's defaults (children.rs, lease.rs): readiness every 2 s
# with 2 failures, a 10 s lease; the delay here is dbrealrto's 5 s (the
# Database's default is 30 s, primary.rs). The earlier defaults:
# OPSHOOKS_RTO_READINESS_PERIOD=5 OPSHOOKS_RTO_READINESS_THRESHOLD=3
# OPSHOOKS_RTO_DELAY=30 OPSHOOKS_LEASE_SECONDS=15.
READINESS_PERIOD = int(os.environ.get("OPSHOOKS_RTO_READINESS_PERIOD", "2"))  # seconds between readiness probes
READINESS_THRESHOLD = int(os.environ.get("OPSHOOKS_RTO_READINESS_THRESHOLD", "2"))  # failures before Ready turns False
FAILOVER_DELAY = int(os.environ.get("OPSHOOKS_RTO_DELAY", "5"))  # the hook's spec.failover.delay


def failover_rto(template: Path) -> tuple[float, float, float]:
    """One failover under the application's load: SIGKILL of the primary;
    the kubelet's readiness probes (probe.sh ready every READINESS_PERIOD,
    READINESS_THRESHOLD failures); the hook's delay (FAILOVER_DELAY, then
    the designation of the standby that received most); the promote Job
    with the lease (LEASE_SECONDS). Returns (seconds from the kill to the
    first write the new primary acknowledged through the Service, of which
    until Ready turned False, of which the promote Job)."""
    db = new_database(template, lease=True)
    try:
        p, b, c = db.instances
        rw_sql(db.proxy, "CREATE TABLE w (id bigint PRIMARY KEY)")
        writer = AckWriter(db.proxy, "w")
        time.sleep(1)
        killed = time.time()
        p.stop("kill")
        failures = 0
        while failures < READINESS_THRESHOLD:
            time.sleep(READINESS_PERIOD)
            failures = failures + 1 if probe(p, "ready").rc != 0 else 0
        not_ready = time.time()
        time.sleep(FAILOVER_DELAY)
        lsn = "SELECT pg_last_wal_receive_lsn() - '0/0'"
        new, other = (b, c) if float(b.sql(lsn)) >= float(c.sql(lsn)) else (c, b)
        db.designate(new)
        began = time.time()
        assert_promoted(promote(new, p, [other], timeout="2"), new)
        job = time.time() - began
        time.sleep(1)
        acked = writer.stop()
        first = min(at for port, at in acked.values() if port == new.port)
        return first - killed, not_ready - killed, job
    finally:
        db.stop()


def test_failover_time_from_the_kill_to_the_first_acknowledged_write(template):
    figures = []
    for run_no in range(RTO_RUNS):
        rto, detection, job = failover_rto(template)
        figures.append(rto)
        print(f"failover {run_no + 1}: first acknowledged write {rto:.1f}s after the kill "
              f"(not ready after {detection:.1f}s, the promote Job {job:.1f}s)")
    figures.sort()
    print(f"RTO over {RTO_RUNS} failovers (readiness every {READINESS_PERIOD}s x{READINESS_THRESHOLD}, delay "
          f"{FAILOVER_DELAY}s, lease {LEASE_SECONDS}s): min {figures[0]:.1f}s, median "
          f"{figures[len(figures) // 2]:.1f}s, max {figures[-1]:.1f}s")
    # A figure, not a timed assertion (the machine is noisy: a bound here
    # failed CI once at 30.09 s against 30, the other nine near 25 s):
    # BENCHMARKS.md reports it. What must hold is that every failover
    # ended in a write the new primary acknowledged after the kill.
    assert len(figures) == RTO_RUNS and all(rto > 0 for rto in figures), figures


# --------------------------------------------------------------------------
# docs/failover.md promises that no test checked before


def lsn_bytes(instance: Instance, sql: str) -> int:
    """A pg_lsn the instance answers, in bytes from 0/0."""
    return int(float(instance.sql(f"SELECT ({sql}) - '0/0'::pg_lsn")))


def gone(pid: int) -> bool:
    """The process exited (a zombie is gone too)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def exits_refusing(instance: Instance, *, path: str = PG_PATH, timeout: float = 60) -> str:
    """Starts the container, which must exit without serving: its
    termination line (the hook reads it)."""
    with contextlib.suppress(FileNotFoundError):
        instance.termination_log.unlink()
    instance.start(wait=False, path=path)
    assert instance.proc is not None
    deadline = time.monotonic() + timeout
    while instance.proc.poll() is None:
        assert instance.cluster.psql("SELECT 1").rc != 0, \
            f"{instance.name} started a server:\n{instance.output()[-3000:]}"
        assert time.monotonic() < deadline, f"{instance.name} neither serves nor exits:\n{instance.output()[-3000:]}"
        time.sleep(0.2)
    assert instance.proc.returncode != 0, instance.output()[-3000:]
    line = termination_line(instance.termination_log)
    assert line.startswith("opshooks: ") and line.count("\n") == 1, line
    return line


def test_a_candidate_behind_where_another_standby_saw_the_old_primary_is_refused(database: Database):
    """docs/failover.md ("The loss bound is checked against the old
    primary"): the promote Job refuses a candidate "more than that lag
    behind where any answering standby last saw the old primary". Here c's
    probe recorded the old primary at X while c's own WAL receiver was
    stuck (streaming, but not reading: its process stopped) well behind
    X, within the 16 MiB the probes ran with; b then stopped receiving,
    and the primary wrote on to X. The Job runs with MAX_LAG_BYTES 1 MiB
    (maxStandbyLag just set: the Job has it, the instances' probes only
    once they restarted). b's own record is fresh and close to its
    position, and c is not ahead of b: only c's record shows that b is
    more than 1 MiB behind what the old primary had, and b is refused,
    nothing promoted. (With the same bound in the probes and the Job this
    comparison cannot refuse a candidate the "ahead" comparison lets
    through: c, current at X, received at least X minus the bound.)"""
    p, b, c = database.instances
    lag = 1 << 20
    rw_sql(database.proxy, "CREATE TABLE w (id int, pad text)")
    rw_sql(database.proxy, "INSERT INTO w SELECT g, 'x' FROM generate_series(1, 100) g")
    wait_for("b and c have the rows", lambda: has_rows(b, "w", 100) and has_rows(c, "w", 100))
    kubelet_probes([b, c], 1)
    receiver = int(c.sql("SELECT pid FROM pg_stat_wal_receiver"))
    os.kill(receiver, signal.SIGSTOP)
    try:
        rw_sql(database.proxy, "INSERT INTO w SELECT g, 'x' FROM generate_series(101, 110) g")
        wait_for("b has the rows c did not read", lambda: has_rows(b, "w", 110))
        kubelet_probes([b], 1)  # b's record: current, at the primary's position
        b.sql("ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 connect_timeout=1'")
        b.sql("SELECT pg_reload_conf()")
        wait_for("b stopped receiving", lambda: b.sql(
            "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'") == "0")
        rw_sql(database.proxy, "INSERT INTO w SELECT g, repeat('x', 1000) FROM generate_series(111, 3110) g")
        head = lsn_bytes(p, "pg_current_wal_lsn()")
        # c's probe: its receiver still says streaming, 3 MB behind, within
        # the probes' 16 MiB: it records the old primary at `head`.
        r = probe(c, "live")
        assert r.rc == 0, str(r)
        seen = c.sql("SELECT split_part(pg_read_file('opshooks-current'), ' ', 2)")
        assert lsn_bytes(c, f"'{seen}'::pg_lsn") >= head - 100000, (seen, head)
        p.stop("kill")
        # The stuck receiver never reads what p sent: killed as it is, with
        # every other process of c (stop("kill") once reached only the
        # postmaster, and the test killed the receiver itself).
        c.stop("kill")
        assert gone(receiver), "c's receiver survived the kill"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(receiver, signal.SIGCONT)
    database.designate(None)
    c.start()
    mine = lsn_bytes(b, "greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())")
    theirs = lsn_bytes(c, "greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())")
    assert theirs <= mine < head - lag, (theirs, mine, head)
    database.designate(b)
    refused = promote(b, p, [c], timeout="2", MAX_LAG_BYTES=str(lag), MAX_SILENCE_SECONDS="60")
    assert_refused(refused, f"candidate {b.address} is at", f"where standby {c.address} saw the old primary",
                   f"more than {lag}")
    assert b.in_recovery() == "t" and c.in_recovery() == "t"


def test_an_instance_on_a_newer_timeline_is_never_rewound_onto_older_data(database: Database):
    """docs/failover.md ("Re-created over retained volumes"): "a standby
    or former primary never `pg_rewind`s onto a primary on an older
    timeline than its own newest: it refuses and says what it holds".
    b is promoted at epoch 2 (timeline 2) and takes writes that c
    follows; then the old primary, on timeline 1, is designated at epoch
    3, above every recorded epoch (so the epoch records do not stop it),
    and starts as the primary. b (a former primary) and c (a standby on
    timeline 2) must not rewind onto it: each exits saying what it holds,
    and b's data, designated again, still serves every row it took."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 100)")
    wait_for("b and c have the rows", lambda: has_rows(b, "t", 100) and has_rows(c, "t", 100))
    p.stop("kill")
    database.designate(None)
    database.designate(b)
    assert_promoted(promote(b, p, [c]), b)
    rw_sql(database.proxy, "INSERT INTO t SELECT generate_series(101, 200)")
    wait_for("c follows b", lambda: has_rows(c, "t", 200), timeout=60)
    b.stop("fast")
    c.stop("fast")
    database.designate(p)  # epoch 3: the older data
    wait_for("the mount names db-0", database.configmap.settled)
    p.start()
    assert p.in_recovery() == "f" and has_rows(p, "t", 100)
    # b recorded the epoch it was promoted at; c, not restarted since, epoch 1.
    for i, held in ((b, "holds epoch=2 primary=db-1"), (c, "holds epoch=1 primary=db-0")):
        line = exits_refusing(i)
        assert "newer than the primary's 1: never rewound onto older data" in line, line
        assert line.startswith(f"opshooks: {held} ") and "timeline=2" in line, line
    # b's data is untouched: designated again, it serves all 200 rows.
    p.stop("fast")
    database.designate(b)
    wait_for("the mount names db-1", database.configmap.settled)
    b.start()
    assert b.in_recovery() == "f" and has_rows(b, "t", 200), b.output()[-2000:]


def test_the_lease_wait_is_skipped_when_the_old_primary_answers_in_recovery(template):
    """docs/failover.md ("Fencing first"): "With the lease, a failover's
    Job also waits out the old primary's lease (19 s from its start)
    whatever the old primary answers, unless it answers in recovery".
    The old primary came back as a standby (shut down cleanly, then
    started by start.sh with standby.signal, the role naming b): nothing
    is left to fence, and b is promoted without the lease's wait
    (LEASE_SECONDS + LEASE_CHECK_SECONDS + LEASE_MARGIN + 1 = 14 s here)."""
    db = new_database(template, lease=True)
    try:
        p, b, c = db.instances
        rw_sql(db.proxy, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
        wait_for("b and c have the row", lambda: has_rows(b, "t", 1) and has_rows(c, "t", 1))
        p.stop("fast")
        db.designate(b)
        wait_for("the mount names db-1", db.configmap.settled)
        (p.data / "standby.signal").touch()
        os.chown(p.data / "standby.signal", *postgres_ids())
        p.start()
        assert "a standby: starting it as it is" in p.output(), p.output()
        assert p.in_recovery() == "t"
        began = time.monotonic()
        done = promote(b, p, [c], timeout="2")
        took = time.monotonic() - began
        print(f"old primary in recovery: the promote Job took {took:.1f}s")
        assert_promoted(done, b)
        assert took < 8, f"the Job took {took:.1f}s: it waited for the lease\n{done}"
        assert f"old primary {p.address} answers, in recovery: nothing to fence" in done.err, str(done)
        assert "waiting" not in done.err, str(done)
        assert p.in_recovery() == "t"
    finally:
        db.stop()


def test_a_switchover_without_its_old_primary_is_refused_and_promotes_nothing(database: Database):
    """docs/failover.md ("Minor updates"): "a primary lost ... before its
    promote Job exists still gets a switchover Job, which refuses without
    the old primary". The role names b for a switchover (the Service still
    on p), then p is lost: the switchover Job refuses, saying the old
    primary does not answer, and promotes nothing; every standby stays one
    (the failover that follows is the hook's, after its delay)."""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
    wait_for("b and c have the row", lambda: has_rows(b, "t", 1) and has_rows(c, "t", 1))
    database.designate(b)
    database.route(p)
    wait_for("the mount names db-1", database.configmap.settled)
    p.stop("kill")
    refused = promote(b, p, [c], mode="switchover", timeout="2")
    assert_refused(refused, f"old primary {p.address} does not answer: a switchover needs it")
    assert b.in_recovery() == "t" and c.in_recovery() == "t"
    assert "pg_promote" not in refused.err, str(refused)


def test_a_standby_past_the_fork_whose_rewind_fails_does_not_start_and_says_so(database: Database):
    """docs/failover.md ("Known limits"): a standby that replayed past the
    fork is rewound onto the primary's timeline when it restarts, "and when
    that fails it does not start and says so: re-clone it by deleting that
    standby's claim and pod". pg_rewind fails here (a stand-in that exits
    1): c exits with that message, serving nothing on the dead timeline;
    its volume emptied (the claim deleted), it clones b and follows it.
    (test_a_rewind_that_fails_moves_the_data_aside_and_clones is the
    former primary's case, which moves its data aside and clones.)"""
    p, b, c = database.instances
    rw_sql(database.proxy, "CREATE TABLE t (id int)")
    wait_for("c has t", lambda: c.sql("SELECT count(*) FROM pg_class WHERE relname = 't'") == "1")
    database.designate(b)
    database.route(p)
    wait_for("the mount names b", database.configmap.settled)
    assert b.sql("SELECT pg_promote(true, 60)") == "t"
    b.sql("CHECKPOINT")
    p.sql("INSERT INTO t SELECT generate_series(1, 1000)")  # only p and c have these
    wait_for("c has p's last rows", lambda: has_rows(c, "t", 1000))
    p.stop("fast")
    database.route(b)
    rw_sql(database.proxy, "INSERT INTO t VALUES (-1)")
    c.stop("fast")
    failing = pg_dir(c.volume / "failing-bin")
    (failing / "pg_rewind").write_text("#!/bin/sh\necho 'pg_rewind: error: made to fail' >&2\nexit 1\n")
    (failing / "pg_rewind").chmod(0o755)
    line = exits_refusing(c, path=f"{failing}:{PG_PATH}")
    assert "made to fail" in c.output(), c.output()
    assert "pg_rewind could not bring it over" in line and "re-clone it" in line, line
    assert (c.data / "PG_VERSION").exists() and not (c.volume / f"pg{MAJOR}.diverged").exists()
    # Re-cloned: the claim deleted, the pod made again on an empty volume.
    shutil.rmtree(c.data)
    c.start()
    wait_for("c follows b", lambda: c.sql("SELECT count(*) FROM t") == "1", timeout=60)
    assert c.sql("SELECT max(id) FROM t") == "-1"
