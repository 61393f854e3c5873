#!/usr/bin/env python3
"""The loop benchmark (issue 22): N parents of each kind under the real loop,
the time from `kubectl apply` to all Ready, and the CPU seconds every process
of the loop spent meanwhile, at a few Metacontroller settings.

Run by bench/loop.sh, which brings the loop up as the e2e suite does
(tests/e2e/lib.sh: the tools, opshooks in release mode, etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kwok's fake node,
the chart with each operator's own resync period) and runs this program with
--dir, --port, --opshooks, --metacontroller and --mc-ports. This program
starts opshooks once, then for every round and every setting in turn
(interleaved: A B C A B C ..., so drift in the machine's load falls on all
alike):

  1. starts the setting's Metacontroller instance (or instances, each
     with its own --target-label-selector) and waits for it;
  2. makes a fresh namespace with the Backups' target (a StatefulSet);
  3. `kubectl apply`s one file of N WebServers (1 pod each), Memcacheds
     (1 node each), Backups (all of that one target) and Databases (small:
     one instance, its init Job, volume, Services, Secrets...), and polls
     once a second until every parent has synced its current generation and
     says Ready=True;
  4. reads utime+stime (and those of waited-for children, cutime+cstime) of
     every process of the loop from /proc/PID/stat at the apply and at all
     Ready, and the whole machine's busy time from /proc/stat (what the loop
     did not spend of it is the rest of the machine: the noise);
  5. stops Metacontroller and deletes the namespace (dropping the
     Databases' finalizers), waiting until it is gone.

A small unrecorded run first warms the caches. Prints a table of medians and
ratios against the first setting, keeps the raw numbers in
$OPSHOOKS_BENCH_CACHE (default ~/.cache/opshooks-bench), and rewrites the
section "## The real loop at scale (issue 22)" of BENCHMARKS.md unless
--no-write or --smoke.

Options (after those bench/loop.sh passes):
  --rounds R        rounds over the settings (default 3)
  --settings A,B..  names from SETTINGS below (default defaults,qps,qps-workers,split;
                    the other: workers)
  --webservers N --memcacheds N --backups N --databases N   parents per kind
  --timeout S       seconds one run may take to all Ready (default 900)
  --smoke           2 of each kind (1 Database), one round (of the setting
                    qps unless --settings), no warm-up, nothing written:
                    checks the harness in about a minute
  --no-write        print the section, leave BENCHMARKS.md alone
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.dont_write_bytecode = True  # no __pycache__ in the repo
sys.path[:0] = [str(REPO / "tests" / "e2e"), str(REPO / "tests" / "support")]
from harness import GROUP, Proc, kube_for, loop_parser, metacontroller_proc, namespace  # noqa: E402
from kube import KubeError, condition  # noqa: E402
from pyhelpers import free_port, write_section  # noqa: E402
from scenarios.backup import backup_spec, make_target  # noqa: E402
from scenarios.database import database  # noqa: E402

SECTION = "## The real loop at scale (issue 22)"
OPERATOR_LABEL = "opshooks.io/operator"  # on each CompositeController (src/manifests.rs)
CACHE = Path(os.environ.get("OPSHOOKS_BENCH_CACHE", Path.home() / ".cache/opshooks-bench"))
# Per setting, the Metacontroller instances and each one's flags; its own
# defaults are --client-go-qps=5 --client-go-burst=10 --workers=5
# (pkg/cmd/metacontroller/main.go). "split": two instances at those defaults,
# each taking the CompositeControllers whose labels its selector matches.
SETTINGS = {
    "defaults": [[]],
    "qps": [["--client-go-qps=100", "--client-go-burst=200"]],
    "qps-workers": [["--client-go-qps=100", "--client-go-burst=200", "--workers=20"]],
    "workers": [["--workers=20"]],
    "split": [
        [f"--target-label-selector={OPERATOR_LABEL} in (webserver,memcached)"],
        [f"--target-label-selector={OPERATOR_LABEL} in (backup,database)"],
    ],
}
DEFAULT_SETTINGS = "defaults,qps,qps-workers,split"
KINDS = ["WebServer", "Memcached", "Backup", "Database"]
# The processes of the loop: cluster.sh's (their PIDs in DIR/pids) and ours.
CLUSTER = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
PROCESSES = ["opshooks", "metacontroller", *CLUSTER]
TICK = os.sysconf("SC_CLK_TCK")
TARGET = "pg"


def say(text):
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


# ---- CPU, from /proc ----------------------------------------------------------
def cpu_seconds(pid):
    """utime+stime+cutime+cstime of the process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3); utime..cstime are fields 14 to 17.
    return sum(int(x) for x in fields[11:15]) / TICK


def machine_busy():
    """Seconds the machine's CPUs were busy (all but idle and iowait)."""
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    return (sum(cpu) - cpu[3] - cpu[4]) / TICK


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


# ---- the parents --------------------------------------------------------------
def parents(ns, counts):
    def meta(i, prefix):
        return {"name": f"{prefix}-{i}", "namespace": ns}

    items = []
    for i in range(counts["WebServer"]):
        items.append({"apiVersion": GROUP, "kind": "WebServer", "metadata": meta(i, "web"),
                      "spec": {"replicas": 1, "image": "nginxdemos/hello", "port": 80}})
    for i in range(counts["Memcached"]):
        items.append({"apiVersion": GROUP, "kind": "Memcached", "metadata": meta(i, "cache"),
                      "spec": {"size": 1, "memoryLimit": "64Mi"}})
    for i in range(counts["Backup"]):
        items.append({"apiVersion": GROUP, "kind": "Backup", "metadata": meta(i, "nightly"),
                      "spec": backup_spec("0 2 * * *", TARGET)})
    for i in range(counts["Database"]):
        items.append(database(ns, f"db-{i}", "16", "small", policy="Delete"))
    return {"apiVersion": "v1", "kind": "List", "items": items}


def ready(obj):
    """Synced at its current generation and Ready=True."""
    st = obj.get("status") or {}
    if st.get("observedGeneration") != obj["metadata"].get("generation"):
        return False
    return (condition(obj, "Ready") or {}).get("status") == "True"


# ---- one run --------------------------------------------------------------------
class Bench:
    def __init__(self, args):
        self.args = args
        self.kube = kube_for(args.dir)
        self.opshooks = Proc(
            "opshooks",
            [args.opshooks, "--listen", f"127.0.0.1:{args.port}", "--log-format", "json"],
            f"{args.dir}/opshooks-bench.log",
            f"http://127.0.0.1:{args.port}/readyz",
        )
        self.mc_log = f"{args.dir}/metacontroller.log"
        self.runs = 0

    def pids(self, mcs):
        pids = {"opshooks": [self.opshooks.server.pid], "metacontroller": [mc.server.pid for mc in mcs]}
        for name in CLUSTER:
            pids[name] = [int(Path(self.args.dir, "pids", name).read_text())]
        return pids

    def snapshot(self, pids):
        return {name: sum(cpu_seconds(pid) for pid in group) for name, group in pids.items()}, machine_busy()

    def metacontrollers(self, setting):
        """The setting's Metacontroller instances, started; the first on the
        ports lib.sh picked, any other on ports of its own."""
        mcs = []
        for i, flags in enumerate(SETTINGS[setting]):
            ports = self.args if i == 0 else SimpleNamespace(**{**vars(self.args), "mc_ports": [free_port(), free_port()]})
            log = self.mc_log if i == 0 else self.mc_log.replace(".log", f"-{i + 1}.log")
            mcs.append(metacontroller_proc(ports, log, flags))
            mcs[-1].start()
        return mcs

    def run(self, setting, counts, timeout):
        """One run at one setting: seconds to all Ready (per kind and in all)
        and CPU seconds per process."""
        self.runs += 1
        ns = f"bench-{self.runs}"
        mcs = self.metacontrollers(setting)
        try:
            namespace(self.kube, ns)
            make_target(SimpleNamespace(k=self.kube, ns=ns), TARGET)
            manifest = Path(self.args.dir, f"{ns}.json")
            manifest.write_text(json.dumps(parents(ns, counts)))
            pids = self.pids(mcs)
            # Metacontroller has just started: let it list what it watches first.
            time.sleep(5)
            load = loadavg()
            before, busy0 = self.snapshot(pids)
            t0 = time.monotonic()
            subprocess.run(["kubectl", "apply", "-f", str(manifest)], check=True, stdout=subprocess.DEVNULL)
            applied = time.monotonic() - t0
            done, left = {}, {}
            while len(done) < len(KINDS):
                for kind in KINDS:
                    if kind in done:
                        continue
                    try:
                        items = self.kube.list(kind, ns)
                    except KubeError as err:
                        left[kind] = str(err)
                        continue
                    n = sum(1 for o in items if ready(o))
                    left[kind] = f"{n}/{counts[kind]}"
                    if n == counts[kind] == len(items):
                        done[kind] = time.monotonic() - t0
                if time.monotonic() - t0 > timeout:
                    raise SystemExit(f"{setting}: not all Ready after {timeout} s: {left}")
                if len(done) < len(KINDS):
                    time.sleep(1)
            seconds = max(done.values())
            after, busy1 = self.snapshot(pids)
        finally:
            for mc in mcs:
                mc.kill(signal.SIGTERM)
        cpu = {name: after[name] - before[name] for name in pids}
        loop = sum(cpu.values())
        other = max(0.0, busy1 - busy0 - loop)
        self.cleanup(ns)
        result = {"setting": setting, "ns": ns, "seconds": seconds, "apply": applied, "kinds": done,
                  "cpu": cpu, "loop_cpu": loop, "other_cpu": other, "load": load}
        say(f"{setting} ({ns}): all Ready in {seconds:.1f} s (apply {applied:.1f} s; "
            + ", ".join(f"{k} {v:.0f} s" for k, v in done.items()) + "); CPU s "
            + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()) + f"; rest of the machine {other:.1f}")
        return result

    def cleanup(self, ns):
        """With Metacontroller stopped: the namespace goes, the Databases'
        finalizers dropped (nothing runs their finalize hook now)."""
        self.kube.delete("Namespace", None, ns)
        for db in self.kube.list("Database", ns):
            if db["metadata"].get("finalizers"):
                self.kube.patch("Database", ns, db["metadata"]["name"], {"metadata": {"finalizers": None}})
        deadline = time.monotonic() + 600
        while self.kube.get("Namespace", None, ns) is not None:
            if time.monotonic() > deadline:
                raise SystemExit(f"namespace {ns} still there after 600 s")
            time.sleep(1)


# ---- the report -----------------------------------------------------------------
def median(xs):
    return statistics.median(xs) if xs else float("nan")


def num(x):
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def section(args, command, counts, results, started, finished, loads):
    settings = args.settings
    by = {s: [r for r in results if r["setting"] == s] for s in settings}
    base = settings[0]

    def med(s, f):
        return median([f(r) for r in by[s]])

    total = sum(counts.values())
    out = [SECTION, ""]
    out.append(
        f"{counts['WebServer']} WebServers (1 pod each), {counts['Memcached']} Memcacheds (1 node each), "
        f"{counts['Backup']} Backups (of one StatefulSet) and {counts['Database']} Databases (small: 1 instance) "
        f"in one `kubectl apply` ({total} parents), under the real loop of the e2e suite (`tests/e2e/lib.sh`: "
        "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok's fake node, Metacontroller "
        "v4.17.2 built from source, opshooks in release mode; the chart with each operator's own resync "
        "period). Time from the apply to every parent synced at its generation and Ready=True; CPU "
        "seconds (utime+stime, children included) of each process of the loop over that time, from "
        "`/proc/PID/stat`. Each run is a fresh Metacontroller (or two) and a fresh namespace, the settings "
        f"interleaved round after round ({args.rounds} round(s)"
        f"{'' if args.smoke else ', after one small unrecorded warm-up run'}); "
        "medians of the rounds, and the ratio against Metacontroller's defaults."
    )
    out += ["", "```sh", command, "```", ""]
    out.append(
        f"opshooks at `{args.revision}`; run from {started:%Y-%m-%d %H:%M} to {finished:%H:%M} UTC on "
        f"{os.cpu_count()} cores shared with other work. Load average (1, 5, 15 min) "
        f"{fmt_load(loads[0])} at the start and {fmt_load(loads[1])} at the end."
    )
    out += ["", "Metacontroller's flags per setting:", ""]
    for s in settings:
        flags = " and ".join(" ".join(f"`{f}`" for f in inst) or "no flags" for inst in SETTINGS[s])
        if len(SETTINGS[s]) > 1:
            flags = f"{len(SETTINGS[s])} instances: {flags}"
        if not any(SETTINGS[s]):
            flags = "none (its defaults: `--client-go-qps=5 --client-go-burst=10 --workers=5`)"
        out.append(f"- {s}: {flags}")
    out += ["", "| | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]

    def row(label, f, ratio=True, fmt=num):
        cells = []
        for s in settings:
            v = med(s, f)
            cell = fmt(v)
            if ratio and s != base:
                b = med(base, f)
                cell += f" ({v / b:.2f}×)" if b else ""
            cells.append(cell)
        out.append(f"| {label} | " + " | ".join(cells) + " |")

    row("apply to all Ready, s", lambda r: r["seconds"])
    for kind in KINDS:
        if counts[kind]:
            row(f"… all {kind}s Ready, s", lambda r, k=kind: r["kinds"][k])
    row("parents Ready per second", lambda r: total / r["seconds"])
    for name in PROCESSES:
        several = name == "metacontroller" and any(len(SETTINGS[x]) > 1 for x in settings)
        label = "metacontroller (all instances)" if several else name
        row(f"CPU s, {label}", lambda r, n=name: r["cpu"][n])
    row("CPU s, the whole loop", lambda r: r["loop_cpu"])
    row("CPU s, the rest of the machine (noise)", lambda r: r["other_cpu"], ratio=False)
    out += ["", "Every run (seconds to all Ready; CPU seconds of Metacontroller, kube-apiserver, etcd, opshooks; "
            "the rest of the machine; 1-minute load average at the apply):", ""]
    out += ["| round | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]
    for i in range(args.rounds):
        cells = []
        for s in settings:
            r = by[s][i] if i < len(by[s]) else None
            cells.append("-" if r is None else (
                f"{num(r['seconds'])} s; {num(r['cpu']['metacontroller'])} / {num(r['cpu']['kube-apiserver'])} / "
                f"{num(r['cpu']['etcd'])} / {r['cpu']['opshooks']:.2f}; {num(r['other_cpu'])}; {r['load'][0]:.2f}"))
        out.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def fmt_load(load):
    return " / ".join(f"{x:.2f}" for x in load)


def revision():
    proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def main():
    parser = loop_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settings")
    parser.add_argument("--webservers", type=int, default=100)
    parser.add_argument("--memcacheds", type=int, default=40)
    parser.add_argument("--backups", type=int, default=40)
    parser.add_argument("--databases", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.settings = (args.settings or ("qps" if args.smoke else DEFAULT_SETTINGS)).split(",")
    unknown = [s for s in args.settings if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}; known: {sorted(SETTINGS)}")
    counts = {"WebServer": args.webservers, "Memcached": args.memcacheds, "Backup": args.backups, "Database": args.databases}
    if args.smoke:
        counts = {"WebServer": 2, "Memcached": 2, "Backup": 2, "Database": 1}
        args.rounds = 1
    command = "bench/loop.sh" + " ".join([""] + changed_flags(args, counts))

    args.revision = revision()
    bench = Bench(args)
    bench.opshooks.start()
    try:
        if not args.smoke:
            say("warm-up run (not recorded)")
            bench.run("qps", {k: min(n, 5) for k, n in counts.items()}, args.timeout)
        started = datetime.now(timezone.utc)
        loads = [loadavg()]
        results = []
        for i in range(args.rounds):
            for setting in args.settings:
                say(f"round {i + 1}/{args.rounds}, {setting}")
                results.append(bench.run(setting, counts, args.timeout))
        loads.append(loadavg())
        finished = datetime.now(timezone.utc)
    finally:
        bench.opshooks.kill(signal.SIGTERM)
    text = section(args, command, counts, results, started, finished, loads)
    print(text)
    if args.smoke:
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    raw = CACHE / f"loop-{started:%Y%m%dT%H%M%S}.json"
    raw.write_text(json.dumps({"command": command, "counts": counts, "results": results}, indent=1))
    say(f"raw results in {raw}")
    if not args.no_write:
        write_section(REPO / "BENCHMARKS.md", SECTION, text)


def changed_flags(args, counts):
    """The options of this run that differ from the defaults, for the report."""
    settings = "qps" if args.smoke else DEFAULT_SETTINGS
    flags = ["--smoke"] if args.smoke else []
    defaults = {"rounds": 1 if args.smoke else 3, "settings": settings.split(","), "timeout": 900}
    flags += [f"--{k}={','.join(v) if isinstance(v, list) else v}" for k, v in defaults.items() if getattr(args, k) != v]
    if args.smoke:
        return flags
    per_kind = {"webservers": 100, "memcacheds": 40, "backups": 40, "databases": 5}
    flags += [f"--{k}={getattr(args, k)}" for k, v in per_kind.items() if getattr(args, k) != v]
    return flags


if __name__ == "__main__":
    main()
