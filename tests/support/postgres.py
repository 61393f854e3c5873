"""The PostgreSQL harness of the script tests (tests/scripts).

Finding the server binaries (pg_bin, BIN, PG_PATH); the shells the images'
/bin/sh may be (SHELLS, shell_path, have_shell); the hostile passwords every
script must treat as data; running a command with exactly its environment,
as the postgres OS user if asked (run, Result), and a script as the pods run
it (script_argv, run_script); a `Cluster` that initdb's, starts, stops and
queries a server on loopback and a private socket; the `scratch` fixture
(one folder per test module, owned by postgres, every server under it
stopped at the end) and fresh_path in it; the official image's entrypoint
running primary-init.sh (run_entrypoint_init).

For the backup and restore Jobs: `Postgres`, a server to connect to over
TCP with password auth, and running_postgres / the `postgres` fixture that
start one.

A test module that uses `scratch` or `postgres` imports the fixture.
"""
from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from pyhelpers import free_port  # tests/support

REPO = Path(__file__).resolve().parents[2]

# OPSHOOKS_SCRIPTS_DIR: a copy of the scripts, broken on purpose, to see a test fail.
SCRIPTS = Path(os.environ.get("OPSHOOKS_SCRIPTS_DIR") or REPO / "src" / "operators" / "database")


SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# /bin/sh of the images the scripts run in: dash (Debian-based postgres
# images), bash started as `sh`, i.e. in POSIX mode, and
# busybox ash (alpine postgres images). Each runs with argv[0] "sh".
SHELLS = {
    "dash": "dash",
    "bash": "bash",
    "busybox": "busybox",
}


def shell_path(shell: str) -> str:
    found = shutil.which(SHELLS[shell])
    if found is None:
        pytest.skip(f"{shell} is not installed")
    return found


def have_shell(shell: str) -> bool:
    return shutil.which(SHELLS[shell]) is not None


# Hostile values. None may run as shell, as SQL or as a psql meta-command.
PWNED = Path("/tmp/pwned-repl")
PWNED_APP = Path("/tmp/pwned-app")
REPLICATION_PASSWORD = (
    "r'e\"p l $(touch /tmp/pwned-repl) `touch /tmp/pwned-repl` \\'; "
    "DROP ROLE postgres; -- :'x' \\gexec \\! touch /tmp/pwned-repl"
)
SUPERUSER_PASSWORD = "su p'w\"d $(touch /tmp/pwned-repl) \\x"
APP_USER = "o'brien app"
APP_DATABASE = 'we"ird db'
APP_PASSWORD = (
    "a'pp \"pw\" $(touch /tmp/pwned-app) `touch /tmp/pwned-app` \\'; "
    "CREATE ROLE evil SUPERUSER; -- \\! touch /tmp/pwned-app"
)


def pg_bin() -> Path:
    preferred = Path("/usr/lib/postgresql/15/bin")
    if (preferred / "initdb").exists():
        return preferred
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        pytest.fail("no PostgreSQL server found; run tests/scripts/setup.sh")
    return Path(found[-1]).parent


BIN = pg_bin()
PG_PATH = f"{BIN}:{SYSTEM_PATH}"


# --------------------------------------------------------------------------
# Running things


@dataclasses.dataclass
class Result:
    cmd: list[str]
    rc: int
    out: str
    err: str
    seconds: float

    def __str__(self) -> str:
        return f"rc={self.rc} ({self.seconds:.1f}s)\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


SCRATCH: Path | None = None


def postgres_ids() -> tuple[int, int]:
    pw = pwd.getpwnam("postgres")
    return pw.pw_uid, pw.pw_gid


def run(cmd: list[str], env: dict[str, str], *, as_postgres: bool = False, timeout: float = 120,
        stdin: str | None = None, executable: str | None = None) -> Result:
    """Runs cmd with exactly env. Output goes to files, not pipes: a server
    that a script leaves running must not make the test wait forever."""
    kwargs: dict = {}
    if as_postgres and os.geteuid() == 0:
        uid, gid = postgres_ids()
        kwargs = {"user": uid, "group": gid, "extra_groups": []}
    assert SCRATCH is not None
    with tempfile.TemporaryFile(dir=SCRATCH) as out, tempfile.TemporaryFile(dir=SCRATCH) as err:
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=err,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            start_new_session=True, cwd=SCRATCH, executable=executable, **kwargs,
        )
        timed_out = False
        try:
            if stdin is not None:
                proc.communicate(stdin.encode(), timeout=timeout)
            else:
                proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        result = Result(cmd, proc.returncode, out.read().decode(errors="replace"),
                        err.read().decode(errors="replace"), seconds)
    if timed_out:
        raise AssertionError(f"{cmd} timed out after {timeout}s\n{result}")
    return result


def script_argv(name: str) -> list[str]:
    """`/bin/sh -c <text>`, as the pods run it; the text read fresh from src/."""
    return ["sh", "-c", (SCRIPTS / name).read_text()]


def run_script(name: str, env: dict[str, str], *, shell: str = "dash", as_postgres: bool = False,
               timeout: float = 120) -> Result:
    return run(script_argv(name), env, as_postgres=as_postgres, timeout=timeout,
               executable=shell_path(shell))


def pg_dir(path: Path) -> Path:
    """A directory owned by the postgres OS user."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        uid, gid = postgres_ids()
        os.chown(path, uid, gid)
    path.chmod(0o700)
    return path


# PostgreSQL clusters


class SqlError(AssertionError):
    pass


@dataclasses.dataclass
class Cluster:
    data: Path
    sock: Path  # the unix socket directory (private to this cluster)
    port: int = 0
    password: str = SUPERUSER_PASSWORD

    def pg(self, *args: str, timeout: float = 120) -> Result:
        env = {"PATH": PG_PATH, "HOME": str(self.sock), "LANG": "C.UTF-8"}
        return run([str(BIN / args[0]), *args[1:]], env, as_postgres=True, timeout=timeout)

    def initdb(self) -> None:
        pg_dir(self.data.parent)
        pg_dir(self.sock)
        pwfile = self.sock / "pwfile"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            os.chown(pwfile, *postgres_ids())
        r = self.pg("initdb", "-D", str(self.data), "-U", "postgres", f"--pwfile={pwfile}",
                    "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
                    "--locale=C.UTF-8", "-N")
        pwfile.unlink()
        assert r.rc == 0, f"initdb failed: {r}"

    def image_hba(self) -> None:
        """pg_hba.conf as in the official image, minus initdb's loopback-only
        lines: the standbys and the app reach the primary from other pods,
        not from 127.0.0.1, so only the lines the image and the scripts add
        may let them in."""
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\nhost all all all scram-sha-256\n"
        )

    def start(self, port: int | None = None, *, tcp: bool = True, durable: bool = False,
              extra: str = "") -> None:
        """durable: commits reach the kernel (WAL written at commit) so they
        survive a kill -9 of the server; fsync stays off (no OS crash here).
        extra: more server options, as the StatefulSet's `-c` arguments."""
        self.port = port or self.port or free_port()
        listen = "127.0.0.1" if tcp else ""
        sync = "on" if durable else "off"
        opts = (f"-c listen_addresses='{listen}' -c port={self.port} "
                f"-c unix_socket_directories={self.sock} -c fsync=off "
                f"-c full_page_writes=off -c synchronous_commit={sync} {extra}")
        r = self.pg("pg_ctl", "-D", str(self.data), "-l", str(self.sock / "log"),
                    "-w", "-t", "60", "-o", opts, "start", timeout=90)
        if r.rc != 0:
            log = (self.sock / "log").read_text(errors="replace") if (self.sock / "log").exists() else ""
            raise AssertionError(f"postgres did not start: {r}\n--- log\n{log}")

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            self.pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", timeout=60)

    def psql(self, sql: str, *, user: str = "postgres", password: str | None = None,
             database: str = "postgres", conninfo: str | None = None, tcp: bool = True,
             **variables: str) -> Result:
        env = {
            "PATH": PG_PATH,
            "HOME": str(self.sock),
            "PGHOST": "127.0.0.1" if tcp else str(self.sock),
            "PGPORT": str(self.port),
            "PGUSER": user,
            "PGDATABASE": database,
            "PGPASSWORD": self.password if password is None else password,
            "PGCONNECT_TIMEOUT": "10",
        }
        cmd = [str(BIN / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "--no-password"]
        for k, v in variables.items():
            cmd += ["-v", f"{k}={v}"]
        if conninfo:
            cmd += ["-d", conninfo]
        return run(cmd, env, stdin=sql, timeout=60)

    def sql(self, sql: str, **kwargs) -> str:
        r = self.psql(sql, **kwargs)
        if r.rc != 0:
            raise SqlError(f"psql failed: {r}")
        return r.out.strip()


@pytest.fixture(scope="module", autouse=True)
def scratch():
    """One folder for everything, owned by postgres; every server still
    running under it at the end is stopped, then it is removed."""
    global SCRATCH
    SCRATCH = Path(tempfile.mkdtemp(prefix="opshooks-dbscripts-"))
    if os.geteuid() == 0:
        os.chown(SCRATCH, *postgres_ids())
    SCRATCH.chmod(0o755)
    try:
        yield SCRATCH
    finally:
        for pid_file in SCRATCH.rglob("postmaster.pid"):
            run([str(BIN / "pg_ctl"), "-D", str(pid_file.parent), "-m", "immediate", "-w", "stop"],
                {"PATH": PG_PATH, "HOME": str(SCRATCH)}, as_postgres=True, timeout=60)
        shutil.rmtree(SCRATCH, ignore_errors=True)
        SCRATCH = None


def fresh_path(name: str) -> Path:
    assert SCRATCH is not None
    return SCRATCH / f"{name}-{uuid.uuid4().hex[:8]}"


def primary_init_env(cluster: Cluster) -> dict[str, str]:
    """The official image's entrypoint environment while it runs
    /docker-entrypoint-initdb.d: the temporary server listens on its socket
    only (PGHOST/PGPORT stand for the image's default socket)."""
    return {
        "PATH": PG_PATH,
        "HOME": str(cluster.sock),
        "PGDATA": str(cluster.data),
        "POSTGRES_USER": "postgres",
        "POSTGRES_PASSWORD": cluster.password,
        "PGPASSWORD": cluster.password,
        "REPLICATION_PASSWORD": REPLICATION_PASSWORD,
        "PGHOST": str(cluster.sock),
        "PGPORT": str(cluster.port),
    }


# What the official image's docker-entrypoint.sh does with the file (its
# docker_process_init_files and what follows it in _main), in its bash with
# `set -Eeo pipefail`: an executable *.sh is run, any other *.sh is sourced.
ENTRYPOINT = r"""
set -Eeo pipefail
for f in "$INITDB_D"/*; do
    case "$f" in
        *.sh)
            if [ -x "$f" ]; then
                printf '%s: running %s\n' "$0" "$f"
                "$f"
            else
                printf '%s: sourcing %s\n' "$0" "$f"
                . "$f"
            fi
            ;;
    esac
    printf '\n'
done
unset PGPASSWORD
echo "entrypoint: init process complete"
"""


def run_entrypoint_init(cluster: Cluster, mode: int = 0o555, timeout: float = 120) -> Result:
    """Mounts the script as the initdb ConfigMap does (10-replication.sh,
    read-only, defaultMode 0555) and runs the entrypoint's init-file loop
    on it. mode=0o644 gets it sourced instead."""
    initdb_d = fresh_path("docker-entrypoint-initdb.d")
    initdb_d.mkdir()
    script = initdb_d / "10-replication.sh"
    script.write_bytes((SCRIPTS / "primary-init.sh").read_bytes())
    script.chmod(mode)
    initdb_d.chmod(0o555)
    env = dict(primary_init_env(cluster), INITDB_D=str(initdb_d))
    return run(["/usr/local/bin/docker-entrypoint.sh", "-c", ENTRYPOINT], env,
               as_postgres=True, executable=shutil.which("bash"), timeout=timeout)


# --------------------------------------------------------------------------
# A server for the backup and restore Jobs


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
