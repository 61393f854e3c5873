"""A Database's instances on loopback, for the failover and TLS script
tests: the read-write Service (Proxy), the role ConfigMap and its
kubelet-mounted copy (RoleConfigMap), the lease sidecar, and `Instance`, a
pod of the StatefulSet running start.sh and the server it execs; wait_for;
the `template` fixture, a primary's data directory to copy.

SYNC_NAMES is read when an instance starts; a test may set it (as
`pods.SYNC_NAMES`)."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from pyhelpers import free_port  # tests/support
from postgres import (
    BIN,
    PG_PATH,
    REPLICATION_PASSWORD,
    SUPERUSER_PASSWORD,
    Cluster,
    SqlError,
    fresh_path,
    pg_dir,
    postgres_ids,
    run_entrypoint_init,
    script_argv,
    shell_path,
)
import postgres

MAJOR = BIN.parts[-2]  # /usr/lib/postgresql/<major>/bin
SYNC_NAMES = ""  # the instances' names; a test sets "*" to reproduce the old setting


# The lease the instances and the promote Job run with. OPSHOOKS_LEASE_SECONDS
# is for the RTO figure at the Database's defaults (15, with the
# OPSHOOKS_RTO_* settings below): run only that test with it.
LEASE_SECONDS = int(os.environ.get("OPSHOOKS_LEASE_SECONDS", "10"))


# --------------------------------------------------------------------------
# The read-write Service


class Proxy:
    """127.0.0.1:<port> forwarded to the selected instance's port, as
    kube-proxy forwards a Service: retarget() (the selector moves) steers
    NEW connections only; an established connection keeps talking to the
    instance it was opened to until one side closes it (that instance's
    server exits, or the client hangs up). No endpoints (None): a new
    connection is closed at once. Only close() (the test's end) cuts what
    is open."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target: int | None = None
        self.lock = threading.Lock()
        self.open: set[socket.socket] = set()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def retarget(self, port: int | None) -> None:
        with self.lock:
            self.target = port

    def close(self) -> None:
        self.closed = True
        self.retarget(None)
        with self.lock:
            cut, self.open = self.open, set()
        for s in cut:
            self._shutdown(s)
        self._shutdown(self.listener)  # shutdown wakes the accepting thread
        self.listener.close()

    @staticmethod
    def _shutdown(s: socket.socket) -> None:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                target = self.target
            if target is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", target), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.open |= {client, upstream}
            for s in (client, upstream):  # no Nagle delays on a proxied protocol
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = {"ends": 0}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b, pair), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair: dict) -> None:
        """One direction; the first to end ends both (a closed server
        closes its client's connection), the second closes the sockets."""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            self._shutdown(s)
        with self.lock:
            pair["ends"] += 1
            last = pair["ends"] == 2
            if last:
                self.open -= {src, dst}
        if last:
            src.close()
            dst.close()


class RoleConfigMap:
    """The role ConfigMap and its kubelet-mounted copy (the directory the
    instances read, ROLE_DIR). publish() changes the ConfigMap at once (the
    hook's answer applied: `published` is what the promote Job expects);
    the mount follows `delay` seconds later, as the kubelet's sync period
    and cache make it (a minute or more in a cluster), and never while the
    node is partitioned (hold()): then it follows once released."""

    def __init__(self, mount: Path, delay: float) -> None:
        self.mount = mount
        self.delay = delay
        self.published: dict[str, str] = {}
        self.lock = threading.Lock()
        self.seq = 0
        self.applied = 0
        self.held = False
        self.database: str | None = None  # the Database's uid, when the test gives one
        self.hosts: dict[str, str] = {}  # where each pod answers (`host`, as the hook writes it)

    def publish(self, primary: str, epoch: int, initialized: str = "true", *, now: bool = False) -> None:
        with self.lock:
            self.seq += 1
            seq = self.seq
            self.published = {"primary": primary, "epoch": str(epoch), "initialized": initialized}
            if primary in self.hosts:
                self.published["host"] = self.hosts[primary]
            if self.database is not None:
                self.published["database"] = self.database
        if now:
            self._apply(seq, dict(self.published))
        else:
            # A daemon: a mount held back for an hour must not keep pytest
            # (and CI) waiting for it after the tests are done.
            timer = threading.Timer(self.delay, self._apply, args=(seq, dict(self.published)))
            timer.daemon = True
            timer.start()

    def hold(self, held: bool = True) -> None:
        """A partition of the node: the kubelet cannot read the ConfigMap."""
        with self.lock:
            self.held = held
        if not held:
            with self.lock:
                seq, data = self.seq, dict(self.published)
            self._apply(seq, data)

    def _apply(self, seq: int, data: dict[str, str]) -> None:
        with self.lock:
            # The test (and its directory) may be gone before a late mount.
            if self.held or seq <= self.applied or not self.mount.is_dir():
                return
            self.applied = seq
            for key, value in data.items():  # the kubelet swaps the whole directory
                tmp = self.mount / f".{key}.tmp"
                tmp.write_text(value)
                tmp.chmod(0o644)
                tmp.rename(self.mount / key)

    def settled(self) -> bool:
        with self.lock:
            return self.applied == self.seq


def uptime() -> int:
    """Seconds since boot, the lease's clock (start.sh reads /proc/uptime)."""
    return int(float(Path("/proc/uptime").read_text().split()[0]))


class LeaseSidecar:
    """A pod's lease sidecar: every `every` seconds it reads the role
    ConfigMap from the API server (`configmap.published`, not the kubelet's
    mount) and rewrites the pod's lease file atomically: `<seconds since
    boot> <epoch> <primary> <initialized>`. cut() is a partition between the pod and the
    API server: the file is no longer rewritten. The script tests feed the
    file this way; the sidecar's own `kubectl` against a real API server is
    not part of them."""

    def __init__(self, configmap: "RoleConfigMap", path: Path, every: float = 2.0) -> None:
        self.configmap = configmap
        self.path = path
        self.every = every
        self.is_cut = False
        self.closed = False
        self.write()
        threading.Thread(target=self._loop, daemon=True).start()

    def write(self) -> None:
        with self.configmap.lock:
            data = dict(self.configmap.published)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(f"{uptime()} {data['epoch']} {data['primary']} {data['initialized']}\n")
        tmp.chmod(0o644)
        tmp.rename(self.path)

    def cut(self, is_cut: bool = True) -> None:
        self.is_cut = is_cut

    def _loop(self) -> None:
        while not self.closed:
            time.sleep(self.every)
            if not self.is_cut and not self.closed:
                with contextlib.suppress(OSError):
                    self.write()


# --------------------------------------------------------------------------
# Instances


def resolving(*names: str) -> str:
    """A PATH whose psql reaches the given names at 127.0.0.1 (the
    cluster's DNS for the pods' `<pod>.<headless Service>...` names, which
    loopback has not), and fails on any other name as libpq does on one it
    cannot resolve: a script that derives a wrong name is refused."""
    stub = pg_dir(fresh_path("dns"))
    stub.chmod(0o755)
    known = " | ".join(f'"{n}"' for n in names)
    (stub / "psql").write_text(f"""#!/bin/sh
case "${{PGHOST:-}}" in
    "" | 127.0.0.1 | /*) ;;
    {known}) PGHOST=127.0.0.1 ;;
    *) echo "psql: error: could not translate host name \"$PGHOST\" to address" >&2; exit 2 ;;
esac
exec {BIN / "psql"} "$@"
""")
    (stub / "psql").chmod(0o755)
    return f"{stub}:{PG_PATH}"


def write_roles(roles: Path, primary: str, epoch: int, initialized: str = "true") -> None:
    """What the hook writes into the role ConfigMap."""
    for key, value in (("primary", primary), ("epoch", str(epoch)), ("initialized", initialized)):
        (roles / key).write_text(value)


def default_signals() -> None:
    """A container's processes start with every signal at its default. A
    suite started in the background of a shell without job control
    inherits SIGINT and SIGQUIT ignored, which a shell cannot undo, so
    stopping start.sh while it waits for a primary would depend on how the
    suite was launched. (A CI run launched with `( ... & )` once hung in a
    teardown's SIGQUIT to such a start.sh; not reproduced since.)"""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


@dataclasses.dataclass
class Instance:
    """A pod of the Database's StatefulSet: its volume (PGDATA is
    <volume>/pg<major>), its port, and its postgres container's process."""
    name: str
    volume: Path
    roles: Path
    proxy: Proxy
    sync: bool = False
    # False: under sync, the server starts without synchronous_standby_names
    # on its command line, so it reads postgresql.auto.conf's (ALTER SYSTEM
    # takes; on the command line, ALTER SYSTEM is overridden).
    sync_on_command_line: bool = True
    configmap: RoleConfigMap | None = None
    port: int = dataclasses.field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    starts: int = 0
    lease: LeaseSidecar | None = None
    # Its Database's Secrets (new ones once it is created again).
    superuser_password: str = SUPERUSER_PASSWORD
    replication_password: str = REPLICATION_PASSWORD
    # More of the server's settings (name=value), as the hook adds them.
    settings: list[str] = dataclasses.field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.volume / f"pg{MAJOR}"

    @property
    def cluster(self) -> Cluster:
        return Cluster(self.data, self.volume / "sock", port=self.port, password=self.superuser_password)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.volume / f"container-{self.starts}.log"

    @property
    def termination_log(self) -> Path:
        return self.volume / "termination-log"

    def env(self, path: str = PG_PATH) -> dict[str, str]:
        """The postgres container's environment (children.rs)."""
        return {
            "PATH": path,
            "HOME": str(self.volume),
            "LANG": "C.UTF-8",
            "HOSTNAME": self.name,
            "PGDATA": str(self.data),
            "ROLE_DIR": str(self.roles),
            "RW_HOST": "127.0.0.1",
            "RW_PORT": str(self.proxy.port),
            "REPLICATION_PASSWORD": self.replication_password,
            "POSTGRES_PASSWORD": self.superuser_password,
            "TERMINATION_LOG": str(self.termination_log),
            **({"LEASE_FILE": str(self.lease.path), "LEASE_SECONDS": str(LEASE_SECONDS)} if self.lease else {}),
        }

    def server_argv(self) -> list[str]:
        """The server start.sh execs: as the hook starts it (wal_log_hints
        on), plus what loopback tests need (port, private socket)."""
        argv = [str(BIN / "postgres"), "-c", "listen_addresses=127.0.0.1", "-c", f"port={self.port}",
                "-c", f"unix_socket_directories={self.volume / 'sock'}", "-c", "wal_log_hints=on",
                "-c", "wal_keep_size=128MB", "-c", "fsync=off", "-c", "full_page_writes=on"]
        if self.sync and self.sync_on_command_line:
            # As the hook names them (children.rs); SYNC_NAMES="*" is what it did before.
            names = SYNC_NAMES or ",".join(f'"db-{n}"' for n in range(3))
            argv += ["-c", f"synchronous_standby_names=ANY 1 ({names})"]
        for setting in self.settings:
            argv += ["-c", setting]
        return argv

    def start(self, *, path: str = PG_PATH, wait: bool = True, shell: str = "dash") -> None:
        """Starts the container: start.sh, then the server it execs."""
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} runs already"
        self.starts += 1
        uid, gid = postgres_ids()
        with open(self.log, "wb") as log:
            os.chown(self.log, uid, gid)
            self.proc = subprocess.Popen(
                script_argv("start.sh") + ["start", *self.server_argv()], executable=shell_path(shell),
                env=self.env(path), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, user=uid, group=gid, extra_groups=[], cwd=self.volume,
                preexec_fn=default_signals,
            )
        if wait:
            self.wait_ready()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()}")
            if self.cluster.psql("SELECT 1").rc == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready within {timeout}s:\n{self.output()}")
            time.sleep(0.2)

    def stop(self, how: str = "fast") -> None:
        """fast (SIGINT), immediate (SIGQUIT: no shutdown checkpoint, WAL
        senders cut) or kill (SIGKILL to every process of the container,
        as a node's loss or a cgroup's kill: the postmaster, each of its
        children, which are session leaders of their own, so that a signal
        to the postmaster's process group misses them, the watchdog and
        whatever any of them runs; then waits until all are gone)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        if how == "kill":
            # Frozen first, all of them (a process may fork meanwhile),
            # then killed: none acts after another died (a postmaster that
            # saw a child die would restart; a child that saw the
            # postmaster die would exit by itself), as a cgroup's kill.
            victims = self._freeze()
            for pid in sorted(victims, key=lambda p: p == self.proc.pid):  # the postmaster last
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.wait()
            deadline = time.monotonic() + 20
            for pid, started in victims.items():
                while _alive(pid, started):
                    assert time.monotonic() < deadline, f"process {pid} of {self.name} survived SIGKILL"
                    time.sleep(0.05)
        else:
            self.proc.send_signal(signal.SIGINT if how == "fast" else signal.SIGQUIT)
            self.proc.wait(60)

    def processes(self) -> dict[int, int]:
        """Every live process of the container, as pid: start time: the
        container's first process (start.sh, then the server it execs) and
        everything it started, at any depth. Orphans count too: a process
        whose cwd is the data directory (a backend or auxiliary process of
        this server whose postmaster died: reparented, but the cgroup's)."""
        assert self.proc is not None
        stats: dict[int, tuple[int, int]] = {}  # pid: (parent, start time)
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (st := _stat(int(entry))) is not None:
                stats[int(entry)] = st
        mine: dict[int, int] = {}
        data = os.path.realpath(self.data)
        for pid, (_, started) in stats.items():
            chain, p = set(), pid
            while p in stats and p not in chain and p != self.proc.pid:
                chain.add(p)
                p = stats[p][0]
            if p == self.proc.pid or _cwd(pid) == data:
                mine[pid] = started
        return mine

    def _freeze(self) -> dict[int, int]:
        """SIGSTOP to every process of the container, again until no new
        one appeared (one may fork between the listing and its stop)."""
        frozen: dict[int, int] = {}
        while new := {p: t for p, t in self.processes().items() if frozen.get(p) != t}:
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            frozen |= new
        return frozen

    def pause(self, paused: bool = True) -> None:
        """SIGSTOP (or SIGCONT) to every process of the container: the
        server, its sessions and auxiliary processes (each a session
        leader of its own: a signal to the postmaster's process group
        misses them) and the watchdog, as a frozen node or cgroup."""
        assert self.proc is not None
        if paused:
            self._freeze()
        else:
            for pid in self.processes():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def sql(self, sql: str, **kw) -> str:
        return self.cluster.sql(sql, **kw)

    def in_recovery(self) -> str:
        return self.sql("SELECT pg_is_in_recovery()")


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process; None once it exited (a
    zombie has exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    if fields[0] in "ZX":
        return None
    return int(fields[1]), int(fields[19])


def _cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def _alive(pid: int, started: int) -> bool:
    """The process (this pid and start time: not a new one that reused the
    pid) has not exited."""
    st = _stat(pid)
    return st is not None and st[1] == started


def rw_sql(proxy: Proxy, sql: str) -> str:
    """A statement through the read-write Service, as the application."""
    c = Cluster(Path("/nonexistent"), postgres.SCRATCH, port=proxy.port)
    return c.sql(sql)


def wait_for(what: str, check, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return
        except SqlError as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last})")


def partition_from_standbys(primary: Instance) -> None:
    """The standbys lose their connections to `primary` (a partition; a
    Service that selects another pod or none keeps them open). They cannot
    connect again while the Service does not select it."""
    primary.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'walsender'")
    wait_for("no standby streams from the old primary", lambda: primary.sql(
        "SELECT count(*) FROM pg_stat_replication") == "0")


def has_rows(instance: Instance, table: str, count: int) -> bool:
    return instance.sql(f"SELECT count(*) FROM {table}") == str(count)


@pytest.fixture(scope="module")
def template(scratch) -> Path:
    """A primary's data directory after its first start (the image's initdb,
    then primary-init.sh: the replicator role and its pg_hba line), stopped:
    every Database below starts from a copy of it."""
    root = fresh_path("template")
    cluster = Cluster(root / "data", root / "sock")
    cluster.initdb()
    cluster.image_hba()
    cluster.start(tcp=False)
    init = run_entrypoint_init(cluster)
    assert init.rc == 0, str(init)
    cluster.stop()
    return cluster.data
