#!/usr/bin/env python3
"""Load test of issue 10: a hook server that holds under abuse.

Starts the server binary on a free loopback port, runs the abuse cases one
after another against it, samples its memory and CPU from /proc, prints one
table and a summary of the musts, and exits 1 if a must fails.

    python3 tests/load/run.py [--binary target/release/opshooks] [--quick]
        [--markdown BENCHMARKS.md] [--server-arg=--max-body-bytes=...]
        [--tls-ca ca.pem --server-arg=--tls-cert-file=... --server-arg=--tls-key-file=...]
        [--token token.txt --server-arg=--auth-token-file=token.txt]

Python 3.11 standard library only. Linux only (reads /proc/PID/status,
/proc/PID/stat and writes /proc/PID/clear_refs). See tests/load/README.md.
"""

import argparse
import collections
import datetime
import json
import os
import re
import resource
import select
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the repo
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from pyhelpers import ServerProcess, StartFailed, free_port, proc_status, reset_peak  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
MiB = 1024 * 1024
SECTION = "## Load test (issue 10)"

# ---------------------------------------------------------------- payloads


def fixture(path):
    return json.loads((FIXTURES / path / "request.json").read_text())


def small_webserver():
    """A small valid WebServer sync (3 replicas, nothing observed), on the
    default image and port, which the observed pods below run too."""
    req = fixture("webserver/v1-first-sync")
    req["parent"]["spec"].update({"image": "nginxinc/nginx-unprivileged", "port": 8080})
    return req


def observed_pod(i, name="hello", ns="shop"):
    """One observed pod as Metacontroller sends it (about 1.4 KB of JSON)."""
    pod = f"{name}-{i}"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "labels": {
                "app.kubernetes.io/instance": name,
                "app.kubernetes.io/managed-by": "opshooks",
                "app.kubernetes.io/name": "webserver",
                "controller-uid": "0b7e6d4a-1111-4222-8333-444455556666",
            },
            "name": pod, "namespace": ns,
            "ownerReferences": [{
                "apiVersion": "opshooks.io/v1alpha1", "blockOwnerDeletion": True,
                "controller": True, "kind": "WebServer", "name": name,
                "uid": "0b7e6d4a-1111-4222-8333-444455556666"}],
            "resourceVersion": str(1000 + i), "uid": f"pod-uid-{i}",
        },
        "spec": {
            "containers": [{
                "image": "nginxinc/nginx-unprivileged", "imagePullPolicy": "Always", "name": "web",
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "resources": {}, "terminationMessagePath": "/dev/termination-log"}],
            "nodeName": "node-1", "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
        },
        "status": {
            "conditions": [
                {"lastProbeTime": None, "lastTransitionTime": "2026-01-01T00:01:00Z",
                 "status": "True", "type": "PodScheduled"},
                {"lastProbeTime": None, "lastTransitionTime": "2026-01-01T00:01:05Z",
                 "status": "True", "type": "Ready"}],
            "phase": "Running", "podIP": f"10.0.{i // 250}.{i % 250}",
            "startTime": "2026-01-01T00:01:00Z",
        },
    }


def dumps(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def webserver_with_pods(size):
    """A valid-looking WebServer sync of `size` bytes: thousands of observed pods."""
    base = small_webserver()
    pod_json = [dumps(observed_pod(i)) for i in range(2)]
    # Build by string assembly: json.dumps of 20k pods each time would be slow.
    head = dumps(base).replace(b'"Pod.v1":{}', b'"Pod.v1":{@@}')
    one = len(pod_json[0]) + 30

    def body(n):
        pods = b",".join(b'"shop/hello-%d":' % i + dumps(observed_pod(i)) for i in range(n))
        return head.replace(b"@@", pods)

    n = max(1, size // one)
    data = body(n)
    while len(data) > size and n > 1:
        n -= max(1, (len(data) - size) // one)
        data = body(n)
    # Fill the remainder exactly with an annotation so every body is `size` bytes.
    missing = size - len(data)
    if missing > 40:
        data = data.replace(b'"annotations":{', b'"annotations":{"load/pad":"%s",'
                            % (b"p" * (missing - len('"load/pad":"",'))), 1)
    return data, n


def webserver_with_string(size):
    """A WebServer sync of `size` bytes whose bulk is one huge annotation string."""
    req = small_webserver()
    base = len(dumps(req)) + len('"load/blob":"",')
    req["parent"]["metadata"]["annotations"]["load/blob"] = "s" * max(0, size - base)
    data = dumps(req)
    req["parent"]["metadata"]["annotations"]["load/blob"] = "s" * max(0, size - base + size - len(data))
    return dumps(req)


def webserver_replicas_namespace(replicas, ns_bytes):
    req = small_webserver()
    req["parent"]["spec"]["replicas"] = replicas
    req["parent"]["metadata"]["namespace"] = "n" * ns_bytes
    return dumps(req)


def finalize_long_name(name_bytes):
    req = fixture("database/finalize-retain")
    req["parent"]["metadata"]["name"] = "d" * name_bytes
    return dumps(req)


def webserver_long_name(name_bytes):
    """A WebServer whose name is far over 59 characters: answered 422."""
    req = small_webserver()
    req["parent"]["metadata"]["name"] = "w" * name_bytes
    return dumps(req)


# ---------------------------------------------------------------- /proc


class Proc:
    """Memory and CPU of the server process, from /proc."""

    def __init__(self, pid, cap=None):
        self.pid = pid
        self.cap = cap
        self.capped = None  # the RSS at which the sampler killed the server
        self.peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.hwm_reset_ok = True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def status(self, field):
        try:
            return proc_status(self.pid, field)
        except (OSError, ValueError, IndexError, KeyError):
            return 0

    def rss(self):
        return self.status("VmRSS")

    def cpu_ticks(self):
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])  # utime + stime
        except (OSError, ValueError, IndexError):
            return None

    def _sample(self):
        while not self._stop.is_set():
            r = self.rss()
            if self.cap and r > self.cap and self.capped is None:
                self.capped = r
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass
            with self._lock:
                self.peak = max(self.peak, r)
            time.sleep(0.01)

    def reset_peak(self):
        """Start a new per-case peak: reset the sampler and the kernel's VmHWM."""
        try:
            reset_peak(self.pid)
        except OSError:
            self.hwm_reset_ok = False
        with self._lock:
            self.peak = self.rss()

    def case_peak(self):
        with self._lock:
            peak = self.peak
        if self.hwm_reset_ok:
            peak = max(peak, self.status("VmHWM"))
        return peak

    def stop(self):
        self._stop.set()


def readable(sock, timeout):
    """True if `sock` has data (or EOF) within `timeout` s; poll(), so any fd number works."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    p = select.poll()
    p.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(p.poll(max(0, int(timeout * 1000))))


def wait_cpu_idle(proc, since, limit=30.0):
    """Seconds from `since` until the server's CPU time stops growing.

    Polls utime+stime every 100 ms; idle is three polls in a row that grew by
    at most one clock tick (<= ~3% of a core). Returns None if never idle
    within `limit` seconds.
    """
    hz = os.sysconf("SC_CLK_TCK")
    step = 0.1
    quiet = 0
    last = proc.cpu_ticks()
    quiet_start = time.monotonic()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(step)
        now_ticks = proc.cpu_ticks()
        if now_ticks is None or last is None:
            return None
        if now_ticks - last <= max(1, int(hz * step * 0.3)) and now_ticks - last <= 1:
            if quiet == 0:
                quiet_start = time.monotonic() - step
            quiet += 1
            if quiet >= 3:
                return max(0.0, quiet_start - since)
        else:
            quiet = 0
        last = now_ticks
    return None


# ---------------------------------------------------------------- HTTP client


class Target:
    """Where and how to connect: host, port, optional TLS and bearer token."""

    def __init__(self, port, tls_ca=None, servername="localhost", token=None):
        self.host = "127.0.0.1"
        self.port = port
        self.token = token
        self.ctx = None
        self.servername = servername
        if tls_ca:
            self.ctx = ssl.create_default_context(cafile=tls_ca)

    def connect(self, timeout=10.0):
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ctx:
            s = self.ctx.wrap_socket(s, server_hostname=self.servername)
        return s

    def head(self, method, path, length=None, extra=""):
        h = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
        if self.token:
            h += f"Authorization: Bearer {self.token}\r\n"
        if length is not None:
            h += f"Content-Type: application/json\r\nContent-Length: {length}\r\n"
        return (h + extra + "\r\n").encode()


class Answer:
    __slots__ = ("status", "size", "body", "close", "error", "elapsed")

    def __init__(self):
        self.status = None   # int, or None when no answer came
        self.size = 0        # body bytes received
        self.body = b""      # first bytes of the body
        self.close = False   # the server closed (or asked to close) the connection
        self.error = None    # connection error text, when no answer came
        self.elapsed = 0.0


class Reader:
    """Buffered reads from a socket, each bounded by one deadline."""

    def __init__(self, sock, buf, deadline):
        self.sock, self.buf, self.deadline = sock, buf, deadline

    def fill(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("answer deadline")
        self.sock.settimeout(min(left, 30.0))
        chunk = self.sock.recv(256 * 1024)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def until(self, sep, cap):
        while sep not in self.buf:
            if len(self.buf) > cap:
                raise ConnectionError("answer line or headers too long")
            self.fill()
        line, self.buf = self.buf.split(sep, 1)
        return line

    def exactly(self, n, take):
        """Pass the next n bytes to take() without keeping them all."""
        while n > 0:
            if not self.buf:
                self.fill()
            part = self.buf[:n]
            self.buf = self.buf[len(part):]
            take(part)
            n -= len(part)


def read_answer(sock, buf, deadline, keep=512):
    """Read one HTTP/1.1 answer from `sock`; `buf` holds bytes already read.

    Counts the body without keeping more than `keep` bytes of it. Returns
    (Answer, leftover bytes). Raises OSError / TimeoutError on failure.
    """
    a = Answer()
    r = Reader(sock, buf, deadline)
    try:
        head = r.until(b"\r\n\r\n", 1 * MiB)
    except EOFError:
        raise ConnectionError("closed before an answer" if not r.buf else "closed mid-headers")
    lines = head.decode("latin-1").split("\r\n")
    a.status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    a.close = headers.get("connection", "").lower() == "close"
    kept = bytearray()

    def take(data):
        a.size += len(data)
        if len(kept) < keep:
            kept.extend(data[: keep - len(kept)])

    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                n = int(r.until(b"\r\n", 4096).split(b";")[0], 16)
                r.exactly(n, take)
                r.until(b"\r\n", 4096)
                if n == 0:
                    break
        elif "content-length" in headers:
            r.exactly(int(headers["content-length"]), take)
        else:
            take(r.buf)
            r.buf = b""
            a.close = True
            while True:
                r.fill()
                take(r.buf)
                r.buf = b""
    except EOFError:
        if "chunked" in headers.get("transfer-encoding", "").lower() or "content-length" in headers:
            raise ConnectionError(f"closed mid-body after {a.size} bytes (status {a.status})")
    a.body = bytes(kept)
    return a, r.buf


class Conn:
    """One client connection; remembers when it was opened and closed."""

    def __init__(self, target, timeout=10.0):
        self.target = target
        self.opened = time.monotonic()
        self.closed_at = None
        self.closed_by_server = False
        self.gave_up = False  # we closed it while waiting for the server to
        self.buf = b""
        self.sock = target.connect(timeout)

    def request(self, method, path, body=b"", timeout=60.0):
        """Send one request and read its answer; never raises."""
        a = Answer()
        t0 = time.perf_counter()
        deadline = time.monotonic() + timeout
        try:
            head = self.target.head(method, path, len(body) if method == "POST" else None)
            self.sock.settimeout(min(timeout, 30.0))
            self.sock.sendall(head)
            sent_ok = self._send_body(body, deadline)
            a, self.buf = read_answer(self.sock, self.buf, deadline)
            if not sent_ok:
                a.close = True
        except (OSError, ValueError, IndexError, ssl.SSLError) as e:
            a.error = type(e).__name__ + (f": {e}" if str(e) else "")
            a.close = True
            self.closed_by_server = not isinstance(e, TimeoutError)
            self.gave_up = isinstance(e, TimeoutError)
        a.elapsed = time.perf_counter() - t0
        if a.close:
            if a.status is not None:
                self.closed_by_server = True
            self.close()
        return a

    def _send_body(self, body, deadline):
        """Send in 64 KiB pieces; stop early (False) if the server answers first."""
        view = memoryview(body)
        step = 64 * 1024
        for off in range(0, len(view), step):
            if time.monotonic() > deadline:
                raise TimeoutError("send deadline")
            if self.answer_started(0):
                return False
            try:
                self.sock.sendall(view[off:off + step])
            except (BrokenPipeError, ConnectionResetError):
                return False
        return True

    def answer_started(self, timeout):
        """True if the server sent something (kept in self.buf) or closed, within
        `timeout` s. With TLS, readable can mean a session ticket, not data."""
        if not readable(self.sock, timeout):
            return False
        try:
            self.sock.setblocking(False)
            data = self.sock.recv(65536)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return False
        except (OSError, ssl.SSLError):
            self.closed_by_server = True
            return True
        finally:
            try:
                self.sock.setblocking(True)
            except OSError:
                pass
        self.buf += data
        if not data:
            self.closed_by_server = True
        return True

    def wait_closed(self, limit):
        """Wait until the server closes the connection, at most `limit` seconds
        after it was opened. True if the server closed it."""
        try:
            while True:
                left = self.opened + limit - time.monotonic()
                if left <= 0:
                    self.gave_up = True
                    return False
                self.sock.settimeout(min(left, 1.0))
                try:
                    data = self.sock.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
        except (OSError, ssl.SSLError):
            pass
        self.closed_by_server = True
        self.close()
        return True

    def close(self):
        if self.closed_at is None:
            self.closed_at = time.monotonic()
            try:
                self.sock.close()
            except OSError:
                pass

    def open_for(self):
        return (self.closed_at or time.monotonic()) - self.opened


# ---------------------------------------------------------------- results


def fmt_bytes(n):
    if n is None:
        return "-"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    return f"{n / 1024:.1f} KiB"


def fmt_s(s):
    if s is None:
        return "-"
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


class Row:
    def __init__(self, case):
        self.case = case
        self.sent = 0
        self.statuses = collections.Counter()
        self.errors = collections.Counter()
        self.peak = None
        self.idle = None
        self.idle_anon = None
        self.longest = 0.0
        self.longest_open = False  # the longest connection was still open when we gave up
        self.wall = 0.0
        self.notes = []
        self.max_answer = 0
        self.lock = threading.Lock()

    def add(self, a, conn=None):
        with self.lock:
            self.sent += 1
            if a.status is not None:
                self.statuses[a.status] += 1
                self.max_answer = max(self.max_answer, a.size)
            else:
                self.errors[a.error or "error"] += 1
            if conn is not None:
                self.conn(conn)

    def conn(self, conn):
        t = conn.open_for()
        if t >= self.longest:
            self.longest = t
            self.longest_open = conn.gave_up

    def answers(self):
        parts = [f"{k}×{v}" for k, v in sorted(self.statuses.items())]
        return " ".join(parts) or "none"

    def longest_text(self):
        return fmt_s(self.longest) + (" (still open)" if self.longest_open else "")

    def cells(self):
        return [self.case, str(self.sent), self.answers(), str(sum(self.errors.values())),
                fmt_bytes(self.peak), fmt_bytes(self.idle), self.longest_text(),
                fmt_s(self.wall), "; ".join(self.notes)]


COLUMNS = ["case", "sent", "answers", "conn errors", "peak RSS", "idle RSS after",
           "longest open", "wall", "notes"]


def text_table(rows):
    cells = [COLUMNS] + [r.cells() for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS) - 1)]
    out = []
    for c in cells:
        out.append("  ".join(c[i].ljust(widths[i]) for i in range(len(widths))) + "  " + c[-1])
    return "\n".join(out)


def md_table(rows):
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in r.cells()) + " |")
    return "\n".join(out)


# ---------------------------------------------------------------- the run


class Run:
    def __init__(self, args):
        self.args = args
        self.rows = []
        self.musts = []      # (ok, text)
        self.shoulds = []    # (ok, text), reported, never fail the run
        self.process = None  # the server's ServerProcess; self.server its Popen
        self.server = None
        self.proc = None
        self.log = tempfile.NamedTemporaryFile(prefix="opshooks-load-", suffix=".log",
                                               delete=False)
        self.token = Path(args.token).read_text().strip() if args.token else None
        self.deaths = 0
        self.start_idle = None

    # -- server lifecycle

    def start_server(self):
        port = free_port()
        cmd = [self.args.binary, "--listen", f"127.0.0.1:{port}"] + self.args.server_arg
        self.process = ServerProcess("server", cmd, self.log)
        self.server = self.process.popen
        self.target = Target(port, self.args.tls_ca, self.args.tls_servername, self.token)
        if self.proc:
            self.proc.stop()
        self.proc = Proc(self.server.pid, self.args.rss_cap * MiB)
        last = None

        def ready():
            nonlocal last
            last = self.get("/readyz", timeout=2)
            return last.status == 200

        try:
            self.process.wait_ready(ready, 30, 0.1)
        except StartFailed as err:
            seen = f" (last /readyz: {last.status or last.error})" if last else ""
            sys.exit(f"{err}{seen}\n" + self.log_tail())

    def log_tail(self, n=4000):
        try:
            return Path(self.log.name).read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def alive(self):
        return self.server is not None and self.server.poll() is None

    def get(self, path, timeout=5.0):
        try:
            c = Conn(self.target, timeout=timeout)
        except (OSError, ssl.SSLError) as e:
            a = Answer()
            a.error = type(e).__name__
            return a
        a = c.request("GET", path, timeout=timeout)
        c.close()
        return a

    def post_new(self, row, path, body, timeout=60.0):
        """POST on a fresh connection, record it in `row`."""
        try:
            c = Conn(self.target, timeout=min(timeout, 10.0))
        except (OSError, ssl.SSLError) as e:
            a = Answer()
            a.error = type(e).__name__
            row.add(a)
            return a
        a = c.request("POST", path, body, timeout=timeout)
        c.close()
        row.add(a, c)
        return a

    # -- case framing

    def case(self, name, settle=None):
        """Context for one table row: peak RSS, idle RSS after, wall time."""
        run = self

        class Ctx:
            def __enter__(self):
                self.row = Row(name)
                run.proc.reset_peak()
                self.t0 = time.monotonic()
                return self.row

            def __exit__(self, *exc):
                row = self.row
                row.wall = time.monotonic() - self.t0
                row.peak = run.proc.case_peak()
                run.rows.append(row)
                if exc[0] is not None and exc[0] is not KeyboardInterrupt:
                    row.notes.append(f"case crashed: {exc[0].__name__}: {exc[1]}")
                    run.musts.append((False, f"{row.case}: the case could not run to its end: "
                                             f"{exc[0].__name__}: {exc[1]}"))
                if not run.alive() and not run.stopped:
                    run.server_died(row)
                elif not run.alive():
                    pass
                else:
                    time.sleep(run.args.settle if settle is None else settle)
                    row.idle = run.proc.rss()
                    row.idle_anon = run.proc.status("RssAnon")
                print(f"[{time.monotonic() - run.t_start:6.1f} s] {row.case}: {row.answers()}, "
                      f"{sum(row.errors.values())} errors, peak {fmt_bytes(row.peak)}, "
                      f"idle {fmt_bytes(row.idle)} (anonymous {fmt_bytes(row.idle_anon)}), "
                      f"wall {fmt_s(row.wall)}", flush=True)
                return exc[0] is not None and exc[0] is not KeyboardInterrupt

        return Ctx()

    def server_died(self, row):
        code = self.server.returncode
        self.deaths += 1
        if self.proc.capped:
            why = (f"killed by the load test at {fmt_bytes(self.proc.capped)} RSS "
                   f"(over --rss-cap {self.args.rss_cap} MiB)")
        else:
            why = f"exit {code}"
        row.notes.append(f"SERVER DIED ({why})")
        self.musts.append((False, f"{row.case}: the server process died ({why})"))
        print(f"server died during {row.case}; log tail:\n{self.log_tail(1500)}", flush=True)
        self.start_server()

    def concurrent(self, row, jobs, limit):
        """Run `jobs` (callables) at once in threads; returns the time the last finished."""
        done = []
        barrier = threading.Barrier(len(jobs) + 1)

        def wrap(job):
            try:
                barrier.wait(timeout=30)
            except threading.BrokenBarrierError:
                pass
            try:
                job()
            finally:
                done.append(time.monotonic())

        threads = [threading.Thread(target=wrap, args=(j,), daemon=True) for j in jobs]
        for t in threads:
            t.start()
        try:
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            pass
        deadline = time.monotonic() + limit
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = sum(t.is_alive() for t in threads)
        if stuck:
            row.notes.append(f"{stuck} client threads still waiting after {limit:.0f} s")
        return max(done) if done else time.monotonic()

    # -- the cases

    def case1_amplification(self):
        with self.case("1a webserver 1000 replicas, 1 MiB namespace") as row:
            a = self.post_new(row, "/webserver/sync", webserver_replicas_namespace(1000, MiB),
                              timeout=120)
            row.notes.append(f"request 1.0 MiB, answer {fmt_bytes(a.size)}")
            self.note_answer(row, a)
        with self.case("1b database/finalize, 8 MiB name") as row:
            a = self.post_new(row, "/database/finalize", finalize_long_name(8 * MiB), timeout=120)
            row.notes.append(f"request 8.0 MiB, answer {fmt_bytes(a.size)}")
            self.note_answer(row, a)
        with self.case("1c 422 from an 8 MiB webserver name") as row:
            a = self.post_new(row, "/webserver/sync", webserver_long_name(8 * MiB), timeout=120)
            row.notes.append(f"request 8.0 MiB, answer {fmt_bytes(a.size)}")
            self.note_answer(row, a)

    def note_answer(self, row, a):
        limit = 64 * 1024
        if a.status is not None:
            self.shoulds.append((a.size <= limit,
                                 f"{row.case}: answer {fmt_bytes(a.size)} (should stay <= 64 KiB)"))
            if a.size <= 300:
                row.notes.append("body " + a.body.decode(errors="replace")[:120].replace("\n", " ") + "…")
        else:
            row.notes.append(f"no answer: {a.error}")

    def burst(self, row, n, bodies):
        """n concurrent POSTs of the given bodies (cycled); CPU idle time after."""
        jobs = [lambda b=bodies[i % len(bodies)]: self.post_new(row, "/webserver/sync", b,
                                                                 timeout=90)
                for i in range(n)]
        last = self.concurrent(row, jobs, limit=120)
        idle = wait_cpu_idle(self.proc, last, limit=30) if self.alive() else None
        row.notes.append("CPU idle " + idle_text(idle) + " after the last answer")
        self.shoulds.append((idle is not None and idle <= 2.0,
                             f"{row.case}: server CPU idle {idle_text(idle)}"
                             " after the last answer (should be <= 2 s)"))

    def case2_concurrent_big(self):
        n = self.args.burst
        size = 10 * MiB
        pods, count = webserver_with_pods(size)
        string = webserver_with_string(size)
        self.burst_bodies = [pods, string]
        with self.case(f"2a {n}× 10 MiB webserver, {count} observed pods") as row:
            self.burst(row, n, [pods])
        self.check_idle(row)
        with self.case(f"2b {n}× 10 MiB webserver, one huge string") as row:
            self.burst(row, n, [string])
        self.check_idle(row)

    def case3_repeated(self):
        n = self.args.burst
        if not hasattr(self, "burst_bodies"):
            self.burst_bodies = [webserver_with_pods(10 * MiB)[0], webserver_with_string(10 * MiB)]
        for i in range(self.args.bursts):
            with self.case(f"3 burst {i + 1}/{self.args.bursts}: {n}× 10 MiB (pods and string)") as row:
                self.burst(row, n, self.burst_bodies)
            self.check_idle(row)

    def check_idle(self, row):
        if row.idle is None:
            return
        bound = 2 * self.start_idle
        self.musts.append((row.idle <= bound,
                           f"{row.case}: idle RSS after {fmt_bytes(row.idle)} "
                           f"(must be <= 2× the idle RSS at start = {fmt_bytes(bound)})"))

    def case4_one_32mib(self):
        size = self.args.big_body
        body, count = webserver_with_pods(size)
        with self.case(f"4 one {size / MiB:.0f} MiB webserver, {count} observed pods") as row:
            a = self.post_new(row, "/webserver/sync", body, timeout=120)
            if a.status is None:
                row.notes.append(f"no answer: {a.error}")
            else:
                row.notes.append(f"answer {fmt_bytes(a.size)}")
        if row.peak is not None:
            bound = 8 * size
            self.musts.append((row.peak <= bound,
                               f"{row.case}: peak RSS {fmt_bytes(row.peak)} "
                               f"(must be <= 8× the body = {fmt_bytes(bound)})"))
        self.check_idle(row)

    def case5_slow(self):
        bound = self.args.slow_bound
        wait = bound + 1 if self.args.quick else max(bound + 1, self.args.slow_wait)
        small = dumps(small_webserver())
        results = {}

        def headers_then_nothing():
            row = Row("5a slowloris: headers never finished")
            c = Conn(self.target)
            c.sock.sendall(b"POST /webserver/sync HTTP/1.1\r\nHost: x\r\n")
            row.sent = 1
            c.wait_closed(wait)
            row.conn(c)
            results["a"] = row

        def idle_keepalive():
            row = Row("5b idle keep-alive after one answer")
            c = Conn(self.target)
            a = c.request("POST", "/webserver/sync", small, timeout=10)
            row.add(a)
            if c.closed_at is None:
                c.opened = time.monotonic()  # idle time counts from the answer
                c.wait_closed(wait)
            else:
                c.opened = c.closed_at
                row.notes.append("closed right after the answer")
            row.conn(c)
            results["b"] = row

        def trickle():
            row = Row("5c body trickled at 1 byte/s")
            row.sent = 1
            c = Conn(self.target)
            try:
                c.sock.sendall(self.target.head("POST", "/webserver/sync", len(small)))
                buf = b""
                for i in range(len(small)):
                    if c.open_for() > wait:
                        break
                    if c.answer_started(1.0):
                        buf = c.buf
                        break
                    c.sock.settimeout(5)
                    c.sock.sendall(small[i:i + 1])
                if buf:
                    m = re.match(rb"HTTP/1\.1 (\d+)", buf)
                    if m:
                        row.statuses[int(m.group(1))] += 1
                        row.notes.append(f"answered after {fmt_s(c.open_for())}")
                if not c.closed_by_server:
                    c.wait_closed(wait)
            except (OSError, ssl.SSLError):
                c.closed_by_server = True
            c.close()
            row.conn(c)
            results["c"] = row

        with self.case(f"5 slow connections (3 at once, waited up to {wait:.0f} s)") as group:
            threads = [threading.Thread(target=f, daemon=True)
                       for f in (headers_then_nothing, idle_keepalive, trickle)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(wait + 15)
            for key in "abc":
                r = results.get(key)
                if r is None:
                    continue
                group.sent += r.sent
                group.statuses.update(r.statuses)
                group.errors.update(r.errors)
                if r.longest >= group.longest:
                    group.longest, group.longest_open = r.longest, r.longest_open
                group.notes.append(f"{r.case[:2]} open {r.longest_text()}"
                                   + (f", {r.answers()}" if r.statuses else ""))
        for key in "abc":
            r = results.get(key)
            if r is None:
                self.musts.append((False, f"case 5{key}: did not finish"))
                continue
            r.peak, r.idle, r.wall = group.peak, group.idle, group.wall
            ok = r.longest <= bound and not r.longest_open
            what = (f"still open after {fmt_s(r.longest)}" if r.longest_open
                    else f"closed by the server after {fmt_s(r.longest)}")
            self.musts.append((ok, f"{r.case}: {what} (must be closed within {bound:.0f} s)"))
        # Show the three connections as rows of their own under the group row.
        self.rows.remove(group)
        for key in "abc":
            if key in results:
                self.rows.append(results[key])

    def case6_flood(self):
        n = self.args.flood
        hold = self.args.flood_hold
        with self.case(f"6 flood: {n} half-sent connections, /healthz probed") as row:
            conns = []
            open_by = time.monotonic() + 15
            for _ in range(n):
                if time.monotonic() > open_by:
                    row.notes.append(f"gave up opening after 15 s")
                    break
                try:
                    c = Conn(self.target, timeout=2)
                    c.sock.sendall(b"POST /webserver/sync HTTP/1.1\r\nHost: x\r\n")
                    conns.append(c)
                except (OSError, ssl.SSLError) as e:
                    row.errors[type(e).__name__] += 1
                row.sent += 1
            probes = []
            t_end = time.monotonic() + hold
            while True:
                a = self.get("/healthz", timeout=2.0)
                probes.append(a)
                row.sent += 1
                if a.status is not None:
                    row.statuses[a.status] += 1
                else:
                    row.errors[a.error] += 1
                if time.monotonic() >= t_end:
                    break
                time.sleep(0.5)
            closed_early = 0
            for c in conns:
                c.gave_up = True
                try:
                    if readable(c.sock, 0) and not isinstance(c.sock, ssl.SSLSocket) \
                            and not c.sock.recv(1, socket.MSG_PEEK):
                        c.gave_up = False
                        closed_early += 1
                except (OSError, ssl.SSLError):
                    c.gave_up = False
                    closed_early += 1
                c.close()
                row.conn(c)
            ok = [p for p in probes if p.status == 200 and p.elapsed <= 2.0]
            worst = max((p.elapsed for p in probes), default=0)
            row.notes.append(f"/healthz {len(ok)}/{len(probes)} answered 200 within 2 s "
                             f"(slowest {fmt_s(worst)}); {len(conns)} held, "
                             f"{closed_early} closed by the server")
        self.musts.append((bool(probes) and len(ok) == len(probes),
                           f"{row.case}: /healthz answered {len(ok)}/{len(probes)} probes "
                           f"within 2 s (must be all)"))

    def case8_small(self):
        n_seq = self.args.sequential
        small = dumps(small_webserver())
        with self.case(f"8a {n_seq} sequential small requests, keep-alive") as row:
            lat = []
            c = None
            reconnects = 0
            deadline = time.monotonic() + self.args.sequential_limit
            for _ in range(n_seq):
                if time.monotonic() > deadline:
                    row.notes.append(f"stopped after {self.args.sequential_limit:.0f} s")
                    break
                if c is None or c.closed_at is not None:
                    if c is not None:
                        row.conn(c)
                        reconnects += 1
                    try:
                        c = Conn(self.target)
                    except (OSError, ssl.SSLError) as e:
                        a = Answer()
                        a.error = type(e).__name__
                        row.add(a)
                        c = None
                        continue
                a = c.request("POST", "/webserver/sync", small, timeout=10)
                row.add(a)
                if a.status is not None:
                    lat.append(a.elapsed)
            if c is not None:
                c.close()
                row.conn(c)
            row.notes.append(percentiles(lat) + f"; {reconnects} reconnects")
        n_con = self.args.concurrent
        with self.case(f"8b {n_con} concurrent small requests") as row:
            lat = []

            def one():
                a = self.post_new(row, "/webserver/sync", small, timeout=30)
                if a.status is not None:
                    lat.append(a.elapsed)

            self.concurrent(row, [one] * n_con, limit=60)
            row.notes.append(percentiles(lat))

    def case7_shutdown(self):
        grace = self.args.shutdown_bound
        wait = grace + 1 if self.args.quick else max(grace + 1, self.args.shutdown_wait)
        small = dumps(small_webserver())
        with self.case("7 SIGTERM with a half-sent and an idle keep-alive connection",
                       settle=0) as row:
            half = Conn(self.target)
            half.sock.sendall(b"POST /webserver/sync HTTP/1.1\r\nHost: x\r\n")
            idle = Conn(self.target)
            a = idle.request("POST", "/webserver/sync", small, timeout=10)
            row.add(a)
            row.sent += 1
            time.sleep(0.3)
            t0 = time.monotonic()
            self.server.send_signal(signal.SIGTERM)
            try:
                code = self.server.wait(timeout=wait)
                took = time.monotonic() - t0
                row.notes.append(f"exited {code} after {fmt_s(took)}")
            except subprocess.TimeoutExpired:
                took = None
                self.server.kill()
                self.server.wait(10)
                row.notes.append(f"still running {wait:.0f} s after SIGTERM: killed")
            for c in (half, idle):
                c.wait_closed(c.open_for() + 1)
                row.conn(c)
            self.stopped = True
            code = self.server.returncode
        if took is None:
            text = f"still running {wait:.0f} s after SIGTERM"
        else:
            text = f"exited with status {code} {fmt_s(took)} after SIGTERM"
        self.musts.append((took is not None and took <= grace and code == 0,
                           f"{row.case}: {text} (must exit with 0 within {grace:.0f} s)"))

    # -- whole run

    def main(self):
        args = self.args
        t_start = self.t_start = time.monotonic()
        load_before = Path("/proc/loadavg").read_text().split()[:3]
        self.stopped = False
        self.start_server()
        # Warm up once, then measure the idle RSS at start.
        self.get("/healthz")
        warm = Row("warm-up")
        self.post_new(warm, "/webserver/sync", dumps(small_webserver()), timeout=10)
        time.sleep(args.settle)
        self.start_idle = self.proc.rss()
        print(f"server {args.binary} pid {self.server.pid} on 127.0.0.1:{self.target.port}, "
              f"idle RSS at start {fmt_bytes(self.start_idle)} "
              f"(anonymous {fmt_bytes(self.proc.status('RssAnon'))}); log {self.log.name}", flush=True)
        # Case 4 runs on a nearly fresh server, before the bursts, so that its
        # peak is the 32 MiB body's and not what the allocator kept from them.
        # Case 7 stops the server: it runs last.
        order = [("1", self.case1_amplification), ("4", self.case4_one_32mib),
                 ("2", self.case2_concurrent_big), ("3", self.case3_repeated),
                 ("5", self.case5_slow), ("6", self.case6_flood), ("8", self.case8_small),
                 ("7", self.case7_shutdown)]
        cases = [f for key, f in order if key in args.cases]
        for case in cases:
            try:
                case()
            except Exception as e:  # a broken case must not stop the others
                self.musts.append((False, f"{case.__name__} crashed: {type(e).__name__}: {e}"))
                if not self.alive() and not self.stopped:
                    self.start_server()
        self.process.stop(signal.SIGKILL)
        self.proc.stop()
        total = time.monotonic() - t_start
        load_after = Path("/proc/loadavg").read_text().split()[:3]

        # 5xx other than 503, anywhere.
        bad = [(r.case, s, n) for r in self.rows for s, n in r.statuses.items()
               if 500 <= s <= 599 and s != 503]
        self.musts.insert(0, (not bad, "no 5xx other than 503"
                              + ("" if not bad else ": " + ", ".join(f"{s}×{n} in {c}" for c, s, n in bad))))
        if self.deaths == 0:
            self.musts.insert(1, (True, "the server process never died"))

        print()
        print(text_table(self.rows))
        print()
        client = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(f"idle RSS at start {fmt_bytes(self.start_idle)}; total {fmt_s(total)}; "
              f"load test client peak RSS {fmt_bytes(client)}; "
              f"load average before {' '.join(load_before)}, after {' '.join(load_after)}")
        failed = [t for ok, t in self.musts if not ok]
        print("\nmusts:")
        for ok, t in self.musts:
            print(("  ok    " if ok else "  FAIL  ") + t)
        print("shoulds (reported, never fail the run):")
        for ok, t in self.shoulds:
            print(("  ok    " if ok else "  no    ") + t)
        print(f"\n{len(self.musts) - len(failed)}/{len(self.musts)} musts hold"
              + (f"; {len(failed)} FAILED" if failed else ""))
        if args.markdown:
            write_markdown(args.markdown, self, total, load_before, load_after)
            print(f"wrote section '{SECTION}' to {args.markdown}")
        return 1 if failed else 0


def idle_text(idle):
    if idle is None:
        return "not within 30 s"
    return "at once (< 0.1 s)" if idle < 0.1 else fmt_s(idle)


def percentiles(lat):
    if not lat:
        return "no latencies"
    lat = sorted(lat)
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    return f"p50 {p(0.5) * 1000:.2f} ms, p99 {p(0.99) * 1000:.2f} ms, max {lat[-1] * 1000:.1f} ms"


def binary_version(binary):
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, timeout=10, text=True)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_markdown(path, run, total, load_before, load_after):
    args = run.args
    cmd = "python3 tests/load/run.py " + " ".join(
        a for a in sys.argv[1:] if not a.startswith("--markdown") and a != args.markdown)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [SECTION, "",
             f"Measured {date} with `{binary_version(args.binary)}` ({args.binary}) on "
             f"{os.cpu_count()} cores (load average {' '.join(load_before)} before, "
             f"{' '.join(load_after)} after; the machine may be shared), {fmt_s(total)} in all:",
             "", "```sh", cmd.strip(), "```", "",
             f"Idle RSS at start: {fmt_bytes(run.start_idle)}. What each case proves and the "
             "musts: `tests/load/README.md`.", "",
             md_table(run.rows), "", "Musts:", ""]
    lines += [f"- {'ok' if ok else '**FAIL**'}: {t}" for ok, t in run.musts]
    if run.shoulds:
        lines += ["", "Reported, not required:", ""]
        lines += [f"- {'ok' if ok else 'no'}: {t}" for ok, t in run.shoulds]
    section = "\n".join(lines) + "\n"
    p = Path(path)
    text = p.read_text() if p.exists() else ""
    start = text.find(SECTION + "\n")
    if start < 0 and text.endswith(SECTION):
        start = len(text) - len(SECTION)
    if start >= 0:
        m = re.search(r"^## ", text[start + len(SECTION):], re.M)
        end = start + len(SECTION) + m.start() if m else len(text)
        text = text[:start] + section + ("\n" if m else "") + text[end:]
    else:
        text = text.rstrip("\n") + ("\n\n" if text.strip() else "") + section
    p.write_text(text)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "opshooks"))
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra argument for the server (repeat; use --server-arg=--flag=value)")
    ap.add_argument("--quick", action="store_true", help="smaller bursts, under a minute")
    ap.add_argument("--markdown", metavar="FILE",
                    help=f"replace or append the section '{SECTION}' in FILE")
    ap.add_argument("--cases", default="12345678",
                    help="which cases to run, e.g. 145 (default all: 12345678)")
    ap.add_argument("--slow-bound", type=float, default=15.0,
                    help="seconds a slow or idle connection may stay open (must; default 15)")
    ap.add_argument("--slow-wait", type=float, default=30.0,
                    help="seconds to watch slow connections in a full run (default 30)")
    ap.add_argument("--shutdown-bound", type=float, default=5.0,
                    help="seconds the server may take to exit after SIGTERM (must; default 5)")
    ap.add_argument("--shutdown-wait", type=float, default=30.0,
                    help="seconds to wait for the exit before SIGKILL in a full run (default 30)")
    ap.add_argument("--settle", type=float, default=2.0,
                    help="seconds to wait after a case before reading the idle RSS (default 2)")
    ap.add_argument("--big-body", type=int, default=32 * MiB,
                    help="size of case 4's body in bytes (default 32 MiB, the default limit)")
    ap.add_argument("--burst", type=int, metavar="N",
                    help="bodies sent at once in cases 2 and 3 (default 50, 10 with --quick)")
    ap.add_argument("--rss-cap", type=int, default=8192, metavar="MIB",
                    help="kill the server (a failed must) if its RSS passes this, to spare a "
                         "shared machine (default 8192 MiB)")
    ap.add_argument("--tls-ca", metavar="FILE", help="connect with TLS, trusting this CA")
    ap.add_argument("--tls-servername", default="localhost",
                    help="name to verify in the server's certificate (default localhost)")
    ap.add_argument("--token", metavar="FILE", help="send 'Authorization: Bearer <FILE>'")
    args = ap.parse_args()
    args.burst = args.burst or (10 if args.quick else 50)
    args.bursts = 2 if args.quick else 3
    args.flood = 200 if args.quick else 500
    args.flood_hold = 2.0 if args.quick else 4.0
    args.sequential = 2000 if args.quick else 20000
    args.sequential_limit = 20.0 if args.quick else 120.0
    args.concurrent = 200
    if args.quick:
        args.settle = min(args.settle, 1.0)
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"no server binary at {args.binary}: build it with "
                 "`cargo build --release --locked --bin opshooks` or pass --binary")
    return args


def main():
    args = parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.flood + args.concurrent + 100
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(want, soft)), hard))
    run = Run(args)
    try:
        code = run.main()
    finally:
        if run.process is not None:
            run.process.stop(signal.SIGKILL)
    sys.exit(code)


if __name__ == "__main__":
    main()
