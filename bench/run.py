#!/usr/bin/env python3
"""opshooks against the floor and the peers (issue 11), in one command.

Builds opshooks (release), the floor (bench/floor, an axum server that parses
each body into serde_json::Value and writes it back) and the Go net/http peer
(bench/peers/go); installs oha with cargo into the cache if it is not there;
writes the five payloads of bench/payloads.py; then, round after round, for
each payload and concurrency 1 and 4, runs oha for a few seconds against
each server in turn (opshooks, floor, Python, Go: interleaved, so drift in
the machine's load falls on all four alike). Every cell starts its server
afresh, sends one checked call, resets the peak RSS (VmHWM, through
/proc/PID/clear_refs) and reads it after oha. Writes the section
"## Against the floor and the peers (issue 11)" of BENCHMARKS.md (replacing
it if present) and keeps the raw numbers in the cache.

Usage: python3 bench/run.py [--quick] [--seconds S] [--rounds R] [--no-write]
  --quick      1 round of 2 s cells, for checking the harness
  --seconds S  length of one oha run (default 4)
  --rounds R   rounds over every cell (default 3; the table shows medians)
  --no-write   print the section, leave BENCHMARKS.md alone
  --no-build   use the binaries already built
The cache is ~/.cache/opshooks-bench (or $OPSHOOKS_BENCH_CACHE): oha, the
floor's and the Go peer's builds, the payloads, the servers' logs and the
raw results. opshooks builds into its usual target directory.
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.dont_write_bytecode = True  # no __pycache__ in the repo
sys.path.insert(0, str(REPO / "tests" / "support"))
from pyhelpers import ServerProcess, StartFailed, free_port, write_section  # noqa: E402

CACHE = Path(os.environ.get("OPSHOOKS_BENCH_CACHE", Path.home() / ".cache/opshooks-bench"))
SECTION = "## Against the floor and the peers (issue 11)"
SERVERS = ["opshooks", "floor", "Python", "Go"]
CONCURRENCY = [1, 4]
MiB = 1024 * 1024


def log(message):
    print(message, file=sys.stderr, flush=True)


def sh(argv, **kwargs):
    log("$ " + " ".join(str(a) for a in argv))
    subprocess.run([str(a) for a in argv], check=True, **kwargs)


# ---------------------------------------------------------------- building

def opshooks_target_dir():
    meta = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=REPO,
                          check=True, capture_output=True, text=True)
    return Path(json.loads(meta.stdout)["target_directory"])


def build(skip):
    """Builds what is missing (everything unless skip); returns {server: argv with {addr}}."""
    opshooks = opshooks_target_dir() / "release/opshooks"
    floor = CACHE / "floor-target/release/opshooks-bench-floor"
    go_peer = CACHE / "go-peer"
    oha = CACHE / "bin/oha"
    CACHE.mkdir(parents=True, exist_ok=True)
    if not skip or not opshooks.exists():
        sh(["cargo", "build", "--release", "--locked"], cwd=REPO)
    if not skip or not floor.exists():
        sh(["cargo", "build", "--release", "--locked", "--manifest-path", HERE / "floor/Cargo.toml",
            "--target-dir", CACHE / "floor-target"])
    if not skip or not go_peer.exists():
        sh(["go", "build", "-o", go_peer, "."], cwd=HERE / "peers/go", env={**os.environ, "GOTOOLCHAIN": "local"})
    if not oha.exists():
        sh(["cargo", "install", "oha", "--locked", "--root", CACHE])
    commands = {
        "opshooks": [opshooks, "--listen", "{addr}"],
        "floor": [floor, "--listen", "{addr}"],
        "Python": [sys.executable, HERE / "peers/python/hook.py", "--listen", "{addr}"],
        "Go": [go_peer, "--listen", "{addr}"],
    }
    return commands, oha


# ---------------------------------------------------------------- servers

def post(port, route, body, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", route, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class Server:
    """One server process on a free loopback port, up once /readyz answers 200."""

    def __init__(self, name, command):
        self.name, self.command = name, command

    def __enter__(self):
        self.port = free_port()
        argv = [str(a).replace("{addr}", f"127.0.0.1:{self.port}") for a in self.command]
        (CACHE / "logs").mkdir(parents=True, exist_ok=True)
        self.log = open(CACHE / "logs" / f"{self.name}.log", "wb")
        started = time.perf_counter()
        self.proc = ServerProcess(self.name, argv, self.log)
        try:
            self.proc.wait_ready(self.ready, 20, 0.001)
        except StartFailed:
            self.__exit__()
            raise
        self.start_seconds = time.perf_counter() - started
        return self

    def ready(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        finally:
            conn.close()

    def rss(self):
        return self.proc.rss()

    def peak(self):
        return self.proc.peak()

    def reset_peak(self):
        self.proc.reset_peak()

    def __exit__(self, *exc):
        self.proc.stop()
        self.log.close()


def loadavg():
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


# ---------------------------------------------------------------- measuring

def oha_json_flag(oha):
    """oha 1.x says -j; later versions say --output-format json."""
    text = subprocess.run([oha, "--help"], capture_output=True, text=True).stdout
    return ["--output-format", "json"] if "--output-format" in text else ["-j"]


def run_oha(oha, json_flag, port, route, payload, concurrency, seconds):
    argv = [oha, "-z", f"{seconds}s", "-c", str(concurrency), "-m", "POST", "-T", "application/json",
            "-D", payload, "--no-tui", *json_flag, f"http://127.0.0.1:{port}{route}"]
    out = subprocess.run([str(a) for a in argv], check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    codes = report.get("statusCodeDistribution") or {}
    ok = int(codes.get("200", 0))
    wall = report["summary"]["total"]
    p50 = (report.get("latencyPercentiles") or {}).get("p50")
    return {"ok": ok, "wall": wall, "rps": ok / wall if wall else 0.0, "p50": p50,
            "codes": codes, "errors": report.get("errorDistribution") or {}}


def preflight(commands, payloads):
    """Every server answers every payload with 200; returns the answer sizes."""
    answers = {}
    for server, command in commands.items():
        with Server(server, command) as s:
            for name, (label, route, path, size) in payloads.items():
                status, body = post(s.port, route, path.read_bytes())
                if status != 200:
                    sys.exit(f"{server} answered {status} to {name}: {body[:300]!r}")
                answers[(server, name)] = len(body)
    return answers


def startup(commands, starts=3):
    """Median start to /readyz 200 and idle RSS (1 s after), over a few starts."""
    result = {}
    for server, command in commands.items():
        times, idle = [], []
        for _ in range(starts):
            with Server(server, command) as s:
                times.append(s.start_seconds)
                time.sleep(1)
                idle.append(s.rss())
        binary = Path(str(command[0]))
        result[server] = {"start": statistics.median(times), "idle_rss": statistics.median(idle),
                          "binary": binary.stat().st_size if server != "Python" else None}
    return result


def measure(commands, oha, payloads, rounds, seconds):
    json_flag = oha_json_flag(oha)
    cells = []
    total = rounds * len(payloads) * len(CONCURRENCY) * len(SERVERS)
    for r in range(rounds):
        for name, (label, route, path, size) in payloads.items():
            body = path.read_bytes()
            for c in CONCURRENCY:
                for server in SERVERS:
                    with Server(server, commands[server]) as s:
                        status, _ = post(s.port, route, body)
                        assert status == 200, (server, name, status)
                        s.reset_peak()
                        load = loadavg()[0]
                        cell = run_oha(oha, json_flag, s.port, route, path, c, seconds)
                        cell.update(round=r, payload=name, c=c, server=server, peak=s.peak(), load=load)
                    cells.append(cell)
                    bad = {k: v for k, v in cell["codes"].items() if k != "200"}
                    log(f"[{len(cells)}/{total}] round {r + 1} {name} c{c} {server}: {cell['rps']:.1f} req/s, "
                        f"p50 {ms(cell['p50'])} ms, peak {cell['peak'] / MiB:.0f} MiB, load {load:.2f}"
                        + (f", NOT 200: {bad}" if bad else ""))
    return cells


# ---------------------------------------------------------------- reporting

def ms(seconds):
    return "-" if seconds is None else f"{seconds * 1000:.2f}" if seconds < 0.01 else f"{seconds * 1000:.1f}" \
        if seconds < 1 else f"{seconds * 1000:.0f}"


def rate(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.0f}" if x >= 20 else f"{x:.1f}"


def human(size):
    return f"{size / 1e6:.2f} MB" if size >= 100_000 else f"{size / 1e3:.1f} KB"


def summarise(cells, payloads):
    """{(payload, c, server): {rps, p50, peak, spread}}"""
    table = {}
    for name in payloads:
        for c in CONCURRENCY:
            for server in SERVERS:
                mine = [x for x in cells if (x["payload"], x["c"], x["server"]) == (name, c, server)]
                rps = [x["rps"] for x in mine]
                p50s = [x["p50"] for x in mine if x["p50"] is not None]
                med = statistics.median(rps)
                table[(name, c, server)] = {
                    "rps": med,
                    "spread": (max(rps) - min(rps)) / med if med and len(rps) > 1 else 0.0,
                    "p50": statistics.median(p50s) if p50s else None,
                    "peak": max(x["peak"] for x in mine),
                    "not_ok": sum(sum(v for k, v in x["codes"].items() if k != "200") for x in mine),
                }
    return table


def revision():
    """The commit opshooks was built from, and whether its sources differ from it."""
    git = lambda *a: subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True).stdout.strip()
    rev = git("rev-parse", "--short", "HEAD") or "an unknown commit"
    dirty = git("status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock")
    return f"`{rev}`" + (" with uncommitted changes to its sources" if dirty else "")


def section(args, command, started, finished, loads, cells, table, start, payloads, oha_version):
    t = table
    lines = [SECTION, ""]
    lines += [
        "opshooks against the floor (`bench/floor`: axum 0.8 on the same tokio",
        "multi-thread runtime, parsing each body into `serde_json::Value` and writing",
        "it back), a Python stdlib hook in the style of Metacontroller's examples",
        "(`bench/peers/python`: single-threaded `http.server`, HTTP/1.0, `json`) and a",
        "Go `net/http` hook (`bench/peers/go`: standard library, decoding into small",
        "structs). The peers do the WebServer logic, and answer the Database payload",
        "with it too; the floor echoes the whole request. oha runs against each server",
        "in turn (opshooks, floor, Python, Go) for every payload at concurrency 1 and",
        "4, round after round; each cell starts its server afresh, sends one checked",
        "call, resets the peak RSS (`VmHWM`, through `/proc/PID/clear_refs`) and reads",
        "it after oha. Server and client share the machine's 2 cores on loopback.",
        "req/s counts 200 answers over oha's wall time; p50 is oha's.",
        "",
        "```sh",
        command,
        "```",
        "",
        f"opshooks at {args.revision}; run from {started:%Y-%m-%d %H:%M} to {finished:%H:%M} UTC, "
        f"{args.rounds} round(s) of {args.seconds} s cells, {oha_version}. Load average (1, 5, 15 min) {fmt_load(loads[0])} at the start and "
        f"{fmt_load(loads[-1])} at the end; the 1-minute average ranged "
        f"{min(x['load'] for x in cells):.2f} to {max(x['load'] for x in cells):.2f} across cells.",
        "",
        "Throughput, req/s (median of the rounds):",
        "",
        "| payload | body | c | opshooks | floor | Python | Go | opshooks / floor | opshooks / Python |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (label, route, path, size) in payloads.items():
        for c in CONCURRENCY:
            row = [t[(name, c, s)]["rps"] for s in SERVERS]
            lines.append(f"| {label} | {human(size)} | {c} | " + " | ".join(rate(x) for x in row)
                         + f" | {ratio(row[0], row[1])} | {ratio(row[0], row[2])} |")
    lines += ["", "p50 latency, ms (median of the rounds):", "",
              "| payload | c | opshooks | floor | Python | Go |", "|---|---|---|---|---|---|"]
    for name, (label, route, path, size) in payloads.items():
        for c in CONCURRENCY:
            lines.append(f"| {label} | {c} | " + " | ".join(ms(t[(name, c, s)]["p50"]) for s in SERVERS) + " |")
    lines += ["", "Peak RSS, MiB (the highest `VmHWM` of the rounds):", "",
              "| payload | c | opshooks | floor | Python | Go |", "|---|---|---|---|---|---|"]
    for name, (label, route, path, size) in payloads.items():
        for c in CONCURRENCY:
            lines.append(f"| {label} | {c} | "
                         + " | ".join(f"{t[(name, c, s)]['peak'] / MiB:.0f}" for s in SERVERS) + " |")
    lines += ["", "Start (median of 3 starts; idle RSS read 1 s after `/readyz` first answers 200):", "",
              "| server | idle RSS | start to /readyz 200 | binary |", "|---|---|---|---|"]
    for s in SERVERS:
        b = start[s]["binary"]
        lines.append(f"| {s} | {start[s]['idle_rss'] / MiB:.1f} MiB | {start[s]['start'] * 1000:.0f} ms | "
                     + (f"{b / 1e6:.1f} MB" if b else "(script)") + " |")
    # the goals of issue 11, counted
    keys = [(n, c) for n in payloads for c in CONCURRENCY]
    faster = sum(t[(n, c, "opshooks")]["rps"] >= t[(n, c, "floor")]["rps"] for n, c in keys)
    quicker = sum(t[(n, c, "opshooks")]["p50"] is not None and t[(n, c, "floor")]["p50"] is not None
                  and t[(n, c, "opshooks")]["p50"] <= t[(n, c, "floor")]["p50"] for n, c in keys)
    leaner = sum(t[(n, c, "opshooks")]["peak"] <= t[(n, c, "floor")]["peak"] for n, c in keys)
    o = start["opshooks"]
    lines += [
        "",
        f"Against the goals of issue 11: opshooks' throughput at least the floor's in {faster} of "
        f"{len(keys)} cells, its p50 no worse than the floor's in {quicker} of {len(keys)}, its peak RSS "
        f"no more than the floor's in {leaner} of {len(keys)}; idle RSS {o['idle_rss'] / MiB:.1f} MiB "
        f"(goal under 16), start to /readyz {o['start'] * 1000:.0f} ms (goal under 100), binary "
        f"{o['binary'] / 1e6:.1f} MB (goal under 25).",
    ]
    if args.rounds > 1:
        noisy = sum(t[(n, c, s)]["spread"] > 0.2 for n, c in keys for s in SERVERS)
        lines += ["", "Spread of req/s across the rounds, (max - min) / median; where it passes 20% (here "
                  f"{noisy} of {len(keys) * len(SERVERS)} cells) the machine's other load moved that cell, and "
                  "ratios near 1 say little:", "",
                  "| payload | c | opshooks | floor | Python | Go |", "|---|---|---|---|---|---|"]
        for name, (label, route, path, size) in payloads.items():
            for c in CONCURRENCY:
                lines.append(f"| {label} | {c} | "
                             + " | ".join(f"{t[(name, c, s)]['spread']:.0%}" for s in SERVERS) + " |")
    failures = [(n, c, s, t[(n, c, s)]["not_ok"]) for n, c in keys for s in SERVERS if t[(n, c, s)]["not_ok"]]
    if failures:
        lines += ["", "Answers other than 200 (not counted): "
                  + ", ".join(f"{payloads[n][0]} c{c} {s}: {k}" for n, c, s, k in failures) + "."]
    lines += [
        "",
        "Rerun it after a change to decoding, the adapter or an operator's hot path; no",
        "test asserts on these numbers. `--quick` (one round of 2 s cells) checks the",
        "harness in about two minutes; `--no-write` leaves this file alone.",
        "",
    ]
    return "\n".join(lines)


def ratio(a, b):
    return f"{a / b:.2f}" if b else "-"


def fmt_load(load):
    return " / ".join(f"{x:.2f}" for x in load)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--no-build", action="store_true")
    args = parser.parse_args()
    args.seconds = args.seconds or (2 if args.quick else 4)
    args.rounds = args.rounds or (1 if args.quick else 3)
    if args.seconds == int(args.seconds):
        args.seconds = int(args.seconds)
    command = "python3 bench/run.py" + "".join(
        f" {flag}" for flag, on in [("--quick", args.quick), ("--no-build", args.no_build)] if on)
    if not args.quick:
        command += "".join(f" {f} {v}" for f, v, d in [("--seconds", args.seconds, 4), ("--rounds", args.rounds, 3)]
                           if v != d)

    began = time.time()
    commands, oha = build(args.no_build)
    args.revision = revision()
    oha_version = subprocess.run([oha, "--version"], capture_output=True, text=True).stdout.strip()
    sys.path.insert(0, str(HERE))
    import payloads as payload_module
    payloads = payload_module.write(CACHE / "payloads")
    started = datetime.now(timezone.utc)
    loads = [loadavg()]
    log("checking that every server answers every payload with 200")
    preflight(commands, payloads)
    log("measuring start and idle RSS")
    start = startup(commands)
    cells = measure(commands, oha, payloads, args.rounds, args.seconds)
    loads.append(loadavg())
    finished = datetime.now(timezone.utc)
    table = summarise(cells, payloads)
    text = section(args, command, started, finished, loads, cells, table, start, payloads, oha_version)
    raw = CACHE / f"results-{started:%Y%m%dT%H%M%S}.json"
    raw.write_text(json.dumps({"command": command, "loads": loads, "start": start, "cells": cells}, indent=1))
    print(text)
    if not args.no_write:
        write_section(REPO / "BENCHMARKS.md", SECTION, text)
    log(f"raw results in {raw}; {time.time() - began:.0f} s in all")


if __name__ == "__main__":
    main()
