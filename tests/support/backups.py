"""One run of the backup Job's dump.sh and upload.sh, as the pod runs them
(run_backup, Run), and what every test checks of it (assert_published_one),
for test_backup_job.py and test_restore_scripts.py. `scratch` (autouse in
test_backup_job.py) holds the runs' WORK_DIRs; test_restore_scripts.py
points SCRATCH at its own folder."""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from postgres import SYSTEM_PATH, Postgres, shell_path
from s3 import PY_BIN, S3, SECRET_ACCESS_KEY

REPO = Path(__file__).resolve().parents[2]

BACKUP_DIR = REPO / "src" / "operators" / "backup_job"
DUMP_SH = BACKUP_DIR / "dump.sh"
UPLOAD_SH = BACKUP_DIR / "upload.sh"


STAMP_RE = r"\d{8}T\d{6}Z"


def stamp(when: dt.datetime) -> str:
    return when.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


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
            executable, argv0 = shell_path(shell), ["sh"]
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


def new_database(pg: Postgres, name: str | None = None, owner: str | None = None) -> str:
    name = name or f"shop_{uuid.uuid4().hex[:8]}"
    pg.create_database(name, owner)
    return name
