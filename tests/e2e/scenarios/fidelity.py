"""The simulator against the real loop: one Database's create, upgrade and
delete, run by the real Metacontroller and controllers and by `opshooks
simulate` on the same spec and events, compared.

What must agree:
- the phases the Database goes through, in order. Watching the real parent
  sees every status Metacontroller writes; a phase the simulator holds for a
  single step may be too brief to be written in the real loop (the next sync
  finds its cause gone), so the real sequence may skip those, and only those;
- the objects of the Database (its children and its volumes) each time the
  loop has settled: after the creation, after the upgrade, after the deletion.

A difference means the simulator's model drifted from Kubernetes or
Metacontroller: fix the model (src/simulate/), not the comparison.
"""

import json
import subprocess
import tempfile
import threading

from harness import need
from scenarios.database import database, db_gone, db_running

NAME = "twin"


def dedupe(items):
    out = []
    for item in items:
        if item and (not out or out[-1] != item):
            out.append(item)
    return out


def simulate(opshooks, parent):
    """The simulator's phases (with how many steps each lasted) and its
    settled object sets, for create, upgrade to 17, delete."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(parent, f)
        path = f.name
    proc = subprocess.run(
        [opshooks, "simulate", "database", path, "--then", 'spec.version="17"', "--then", "delete", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise AssertionError(f"opshooks simulate failed: {proc.stderr.strip()}")
    runs, settled = [], []
    for line in proc.stdout.splitlines():
        o = json.loads(line)
        if "settled" in o:
            names = (f'{x["kind"]}/{x["metadata"]["name"]}' for x in o["objects"])
            objects = sorted(x for x in names if not x.startswith("Database/"))
            settled.append(objects)
        elif "step" in o and o.get("phase"):
            if runs and runs[-1][0] == o["phase"]:
                runs[-1][1] += 1
            else:
                runs.append([o["phase"], 1])
    return runs, settled


def real_objects(s, uid):
    """Children of the Database (by owner uid) and its volumes, as `Kind/name`."""
    out = []
    for kind in ("StatefulSet", "Service", "EndpointSlice", "ConfigMap", "Secret", "Job", "CronJob", "PodDisruptionBudget"):
        for obj in s.k.list(kind, s.ns):
            owners = obj["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners) and not obj["metadata"].get("deletionTimestamp"):
                out.append(f"{kind}/{obj['metadata']['name']}")
    for pvc in s.k.list("PersistentVolumeClaim", s.ns):
        name = pvc["metadata"]["name"]
        if name.startswith(f"data-{NAME}-") and not pvc["metadata"].get("deletionTimestamp"):
            out.append(f"PersistentVolumeClaim/{name}")
    return sorted(out)


def wait_settled(s, uid, want, what):
    """Waits until the real objects equal the simulator's settled set."""

    def check():
        got = real_objects(s, uid)
        need(got == want, f"real {got}\n  simulated {want}")

    s.wait(f"objects after {what} as simulated", check, timeout=120)


def scenario_fidelity(s):
    parent = database(s.ns, NAME, "16", "small", backups=True)
    runs, settled = simulate(s.suite.opshooks.argv[0], parent)
    s.expect(len(settled) == 3, f"the simulator settled {len(settled)} times, want 3")
    phases, lock = [], threading.Lock()

    def listen(kind, etype, obj, _at):
        md = obj.get("metadata", {})
        if kind == "Database" and md.get("namespace") == s.ns and md.get("name") == NAME:
            with lock:
                phases.append((obj.get("status") or {}).get("phase"))

    s.rec.add_listener(listen)
    try:
        s.step("create, as simulated")
        s.k.apply(parent)
        db = db_running(s, NAME, 1, "16")
        uid = db["metadata"]["uid"]
        wait_settled(s, uid, settled[0], "the creation")
        s.step("upgrade 16 -> 17, as simulated")
        s.k.patch("Database", s.ns, NAME, {"spec": {"version": "17"}})
        db_running(s, NAME, 1, "17", timeout=240)
        wait_settled(s, uid, settled[1], "the upgrade")
        s.step("delete, as simulated")
        s.k.delete("Database", s.ns, NAME)
        db_gone(s, NAME)
        wait_settled(s, uid, settled[2], "the deletion")
    finally:
        s.rec.remove_listener(listen)
    with lock:
        real = dedupe(phases)
    simulated = [p for p, _ in runs]
    lasting = [p for p, n in runs if n > 1]
    s.step(f"phases: real {real}, simulated {simulated}")
    # The real sequence is the simulated one, less phases the simulator held
    # for one step only.
    i = 0
    for phase in real:
        while i < len(runs) and runs[i][0] != phase:
            s.expect(runs[i][1] == 1, f"real loop skipped phase {runs[i][0]}, which the simulator held {runs[i][1]} steps; real {real}, simulated {simulated}")
            i += 1
        s.expect(i < len(runs), f"real phase {phase} out of the simulated order; real {real}, simulated {simulated}")
        i += 1
    for p, n in runs[i:]:
        s.expect(n == 1, f"real loop never reached {p}; real {real}, simulated {simulated}")
    s.expect(bool(lasting), "the simulator held no phase")
