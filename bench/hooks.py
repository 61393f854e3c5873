#!/usr/bin/env python3
"""Latency and throughput of the hook server on loopback.

Starts `target/release/opshooks`, then for each case sends N sequential
requests and reports the median, 99th percentile and maximum latency, and
the request body size. Cases: a WebServer with 1000 desired and 1000
observed pods (a large body), a Database in its running phase (the most
complex answer), and a small Memcached.

Usage: python3 bench/hooks.py [N]   (after `cargo build --release`)
The numbers in BENCHMARKS.md come from this script.
"""

import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def webserver_1000():
    pods = {}
    for i in range(1000):
        name = f"big-{i}"
        pods[f"ns/{name}"] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": {"app.kubernetes.io/instance": "big"}},
            "spec": {"containers": [{"name": "web", "image": "nginxdemos/hello", "ports": [{"containerPort": 80}]}]},
            "status": {"phase": "Running", "podIP": f"10.0.{i // 250}.{i % 250}",
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }
    return {"parent": {"apiVersion": "opshooks.io/v1alpha1", "kind": "WebServer",
                       "metadata": {"name": "big", "namespace": "ns", "generation": 1},
                       "spec": {"replicas": 1000, "image": "nginxdemos/hello", "port": 80}},
            "children": {"Pod.v1": pods}}


def fixture(operator, case):
    return json.loads((REPO / "tests/fixtures" / operator / case / "request.json").read_text())


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    port = free_port()
    server = subprocess.Popen(
        [str(REPO / "target/release/opshooks"), "--listen", f"127.0.0.1:{port}", "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        cases = [
            ("webserver/sync, 1000 pods", "webserver", webserver_1000()),
            ("database/sync, running", "database", fixture("database", "v2-running")),
            ("memcached/sync, 3 nodes", "memcached", fixture("memcached", "v2-all-ready")),
        ]
        print(f"{'case':<28} {'body':>9} {'median':>9} {'p99':>9} {'max':>9} {'req/s':>7}")
        for label, op, body in cases:
            data = json.dumps(body).encode()
            times = []
            for _ in range(n):
                req = urllib.request.Request(f"http://127.0.0.1:{port}/{op}/sync", data=data,
                                             headers={"Content-Type": "application/json"})
                t0 = time.perf_counter()
                with urllib.request.urlopen(req) as resp:
                    resp.read()
                    assert resp.status == 200
                times.append(time.perf_counter() - t0)
            times.sort()
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
            ms = lambda t: f"{t * 1000:.2f}ms"
            print(f"{label:<28} {len(data) / 1024:>7.0f}KB {ms(statistics.median(times)):>9} {ms(p99):>9} "
                  f"{ms(times[-1]):>9} {n / sum(times):>7.0f}")
        rss = int(Path(f"/proc/{server.pid}/status").read_text().split("VmRSS:")[1].split()[0])
        print(f"server resident memory after the runs: {rss / 1024:.1f} MiB")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
