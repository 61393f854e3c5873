"""What the Python test programs share: the control-loop suite (tests/e2e),
the load test (tests/load/run.py), the benchmarks (bench/run.py, bench/loop.py) and the
job-script tests (tests/scripts). Standard library only, Linux only (/proc).

Not a package: each program puts this folder on sys.path from its own
location (tests/scripts through its conftest.py) and imports it.
"""

import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now: the kernel's
    pick, free until someone binds it (the caller, or another process first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- memory, from /proc -----------------------------------------------------
def proc_status(pid, field):
    """A field of /proc/PID/status counted in kB (VmRSS, VmHWM, RssAnon), in
    bytes. OSError when the process is gone, KeyError when it has no such field."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_peak(pid):
    """Starts the kernel's RSS high-water mark (VmHWM) of the process again
    from its RSS now. OSError when not allowed (or the process is gone)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


# ---- a server process -------------------------------------------------------
class StartFailed(RuntimeError):
    """A server exited before it was ready, or was not ready in time."""


class ServerProcess:
    """One run of a server: started at once with its stdout and stderr in
    `log` (an open binary file; the child keeps its own copy of it) and
    nothing on its stdin; ready once a probe says so; stopped with a signal,
    a grace period, then SIGKILL. Started with start_new_session=True, it is
    signalled with its whole process group."""

    def __init__(self, name, argv, log, **popen):
        self.name, self.log = name, log
        self.group = bool(popen.get("start_new_session"))
        self.popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **popen)
        self.pid = self.popen.pid

    def wait_ready(self, probe, timeout, every):
        """Calls probe() every `every` seconds until it returns true (an
        OSError from it counts as not yet). StartFailed when the process
        exits first, or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if self.popen.poll() is not None:
                raise StartFailed(f"{self.name} exited with {self.popen.returncode}; see {self.log.name}")
            try:
                if probe():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise StartFailed(f"{self.name} was not ready within {timeout} s; see {self.log.name}")
            time.sleep(every)

    def running(self):
        return self.popen.poll() is None

    def stop(self, sig=signal.SIGTERM, grace=10):
        """Sends sig (when still running) and waits up to `grace` seconds for
        the exit, then kills."""
        if not self.running():
            return
        self._signal(sig)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.popen.wait()

    def _signal(self, sig):
        if self.group:
            os.killpg(self.pid, sig)
        else:
            self.popen.send_signal(sig)

    def rss(self):
        return proc_status(self.pid, "VmRSS")

    def peak(self):
        return proc_status(self.pid, "VmHWM")

    def reset_peak(self):
        reset_peak(self.pid)


# ---- a document's section ------------------------------------------------------
def write_section(path, heading, text):
    """Replaces the section of the Markdown file at path that starts with the
    line `heading` (up to the next `## `) by text; without one, text goes
    before the first `## ` section."""
    doc = path.read_text()
    if heading in doc:
        head, rest = doc.split(heading, 1)
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1:] if nxt >= 0 else ""
    else:
        first = doc.find("\n## ")
        head, tail = (doc[:first + 1], doc[first + 1:]) if first >= 0 else (doc.rstrip("\n") + "\n\n", "")
    path.write_text(head + text + ("\n" + tail if tail else ""))
    print(f"wrote {path}", file=sys.stderr, flush=True)
