"""Invariants of the control loop, checked continuously while scenarios run.

A Recorder watches every kind of child (and the parents) in every namespace
from the moment the suite starts, keeps what it saw, and audits it once a
second (and once more at the end):

  A. no PersistentVolumeClaim is deleted except by a Database deletion whose
     policy allows it (Delete, or Snapshot after its snapshot Job succeeded),
     or by a scenario that says so; judged at the moment of the deletion,
     not of the audit (see below);
  B. no StatefulSet, volume or Job of a deleting Database is created once the
     deletion started, except the first snapshot Job (and a retry a scenario
     asks for by deleting a failed one) and a promote Job, once each (a
     primary lost while deleting is replaced, so the snapshot reads the
     data);
  C. inside a quiet window (a hook outage, a refused spec) no child of the
     window's parents is created or deleted;
  D. Metacontroller's log has no "can't update status" and no strict-decoding
     error;
  E. every hook call opshooks logged was answered 200, except calls a
     scenario expects to be refused;
  F. nothing serves a Database started from a backup (spec.bootstrap)
     before its restore Job succeeded: its read-write and read-only
     Services and read-only EndpointSlice are written after the Job was
     seen Succeeded (by revision, as rule A), or the Database never
     restores (created over what it holds: Restored False with a reason
     NOT_RESTORING names) and no restore Job of it was ever made; for a
     recovery from an archive (spec.bootstrap.archive), which has no Job,
     after one of its instances was seen Ready (by revision);
  G. the read-write Service of a Database (the Service named after it)
     never selects more than one pod, and only the designated primary: the
     EndpointSlices of that Service (its own, which kube-controller-manager
     writes) never hold more than one ready endpoint at once, and its
     selector's pod-name is the primary the role ConfigMap (<name>-role)
     names whenever both are observed. The hook writes both in one answer,
     which Metacontroller applies one object after the other: a difference
     is a violation once it outlasts RW_GRACE seconds. Except during a
     planned switchover: the role ConfigMap names the candidate (at the
     next epoch) while the read-write Service stays on the old primary
     until the candidate's promote Job succeeded. So a difference is
     excused while the Service selects the primary the role ConfigMap
     named before (its previous value, as watched) and the promote Job of
     the role's epoch and primary (<name>-promote-<epoch>-<ordinal>), owned
     by that Database, has not been seen Succeeded nor seen made without
     MODE=switchover (a failover's Job: its Service moves before the Job is
     made); RW_GRACE runs from the moment any of that stops being true.
     Every fact comes from the watch streams (no status read back, which
     lags the children): a Service selecting a third pod, staying on the
     old primary past the Job's success, or through a failover's Job, is
     still a violation;
  H. a Database's status.primaryEpoch never decreases.

Timestamps are compared on one clock: the API server, the processes and the
suite all run on this machine. Metadata timestamps have one-second
resolution, so windows are shrunk by a second at their edges.

Rule A orders events by resourceVersion instead: every kind is stored in the
one etcd, whose revision orders all writes, while the watch streams (one per
kind) deliver with their own delays. So "had the snapshot succeeded when the
volume was deleted" is decided by the writes' order, not by which stream
came first, nor by what is true seconds later when the audit runs. A fact
first seen in a (re)list is taken as true since before anything else (its
moment is unknown: the lenient side).
"""

import json
import os
import re
import threading
import time
from collections import defaultdict

from kube import condition, controller_uid, job_outcome, parse_time

WATCHED = [
    "WebServer",
    "Memcached",
    "Backup",
    "Database",
    "Pod",
    "PersistentVolumeClaim",
    "StatefulSet",
    "Deployment",
    "Job",
    "CronJob",
    "Service",
    "ConfigMap",
    "Secret",
    "EndpointSlice",
]
PARENTS = ("WebServer", "Memcached", "Backup", "Database")
DB_LABEL = "opshooks.io/database"
# The Restored reasons of a bootstrapped Database that rightly restores
# nothing (no other reason excuses serving before the restore succeeded: a
# Database that once took its own StatefulSet for data served an empty
# cluster).
NOT_RESTORING = ("AlreadyInitialized", "RetainedVolumes")
# How long rule F waits for a Database's status to say it restores nothing.
STATUS_GRACE = 20.0
# How long rule G lets the read-write Service's selector and the role
# ConfigMap differ: the two writes of one answer, far below a resync.
RW_GRACE = 5.0
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
# How old a record must be before rules A and B judge it: the parent's own
# watch stream may deliver its deletion a little after the child's event.
SETTLE = 3.0

METACONTROLLER_BAD = [
    (re.compile(r"can't update status"), "can't update status"),
    (re.compile(r"strict validation failed|strict decoding error|unknown field"), "strict decoding"),
]


def revision(md):
    """An object's resourceVersion as a number: etcd's revision here."""
    try:
        return int(md.get("resourceVersion") or 0)
    except ValueError:
        return 0


class Recorder:
    def __init__(self, kube, opshooks_log, metacontroller_log):
        self.kube = kube
        self.lock = threading.RLock()
        self.stop = threading.Event()
        self.opshooks_log = opshooks_log
        self.metacontroller_log = metacontroller_log
        # Only what is logged from now on (a rerun on a kept cluster appends).
        self.log_offsets = {f: os.path.getsize(f) if os.path.exists(f) else 0 for f in (opshooks_log, metacontroller_log)}
        self.objects = {}  # (kind, uid) -> latest object
        self.parents = {}  # uid -> parent record
        self.ready_rv = {}  # (namespace, Database name) -> when an instance was first seen Ready
        self.creations = []  # child creations, in arrival order
        self.deletions = []  # child deletions (first sign of one)
        self.adds = defaultdict(list)  # (kind, ns, name) -> [uid, ...]
        self.deleting_seen = set()
        self.succeeded = {}  # Job uid -> its record, rv: when it was first seen Succeeded
        self.judged = set()
        self.violations = []
        self.violation_keys = set()
        self.repeats = defaultdict(int)
        self.windows = []
        self.allowed_pvc_deletes = set()  # (ns, name) or (ns, None) for a whole namespace
        self.allowed_recreations = defaultdict(int)  # (kind, ns, name) -> extra creations allowed
        self.refusals = []  # dicts: operator, parent, start, end
        self.hook_calls = defaultdict(int)  # (operator, hook, status) -> count
        self.listeners = []
        self.relists = 0
        self.synthesized = 0  # deletions a relist found (not seen as events)
        self.threads = []
        # Rule G: Database uid -> its read-write Service (uid, selected pod)
        # and role ConfigMap (primary) as last seen, and since when they differ.
        self.rw = {}
        self.slices = defaultdict(dict)  # Service uid -> EndpointSlice uid -> ready pods
        self.rw_lags = []  # seconds each difference of rule G lasted, once over
        self.rw_waits = []  # seconds each excused difference (a switchover) lasted
        self.promoted = set()  # (Database uid, Job name) seen Succeeded
        self.promote_modes = {}  # (Database uid, promote Job name) -> its MODE
        self.epochs = {}  # rule H: Database uid -> the highest primaryEpoch seen

    # ---- lifecycle ----
    def start(self):
        for kind in WATCHED:
            t = threading.Thread(target=self.watch, args=(kind,), daemon=True, name=f"watch-{kind}")
            t.start()
            self.threads.append(t)
        t = threading.Thread(target=self.audit_loop, daemon=True, name="audit")
        t.start()
        self.threads.append(t)

    def watch(self, kind):
        """One kind's watch, for the whole run. A watch that ends before the
        run does is a violation: every rule over that kind would pass from
        then on for want of events."""
        try:
            self.kube.watch(kind, lambda et, obj: self.on_event(kind, et, obj), self.stop, self.on_relist)
        except Exception as err:
            self.violate(("watch", kind), f"the {kind} watch died: {err!r}")
            return
        if not self.stop.is_set():
            self.violate(("watch", kind), f"the {kind} watch ended before the run did")

    def on_relist(self, kind, synthesized):
        with self.lock:
            self.relists += 1
            self.synthesized += synthesized
        if synthesized:
            print(f".. the {kind} watch relisted: {synthesized} deletions found in the gap", flush=True)

    def audit_loop(self):
        while not self.stop.wait(1.0):
            try:
                self.audit(final=False)
            except Exception as err:  # an audit bug must not end the suite silently
                self.violate(("audit-error", str(err)), f"invariant audit failed: {err!r}")

    def finish(self):
        time.sleep(SETTLE + 0.5)
        self.audit(final=True)
        self.stop.set()

    # ---- what scenarios tell the recorder ----
    def add_listener(self, fn):
        with self.lock:
            self.listeners.append(fn)

    def remove_listener(self, fn):
        with self.lock:
            self.listeners.remove(fn)

    def quiet(self, name, parent_uids):
        """Opens a window in which no child of these parents may be created
        or deleted; returns it, to pass to close()."""
        w = {"name": name, "parents": set(parent_uids), "start": time.time(), "end": None}
        with self.lock:
            self.windows.append(w)
        return w

    def close(self, window):
        with self.lock:
            window["end"] = time.time()

    def expect_refusal(self, operator, parent):
        r = {"operator": operator, "parent": parent, "start": time.time() - 1, "end": None}
        with self.lock:
            self.refusals.append(r)
        return r

    def allow_pvc_delete(self, ns, name=None):
        with self.lock:
            self.allowed_pvc_deletes.add((ns, name))

    def allow_recreation(self, kind, ns, name):
        with self.lock:
            self.allowed_recreations[(kind, ns, name)] += 1

    def creations_of(self, kind, ns, name):
        with self.lock:
            return list(self.adds[(kind, ns, name)])

    # ---- events ----
    def on_event(self, kind, etype, obj):
        md = obj.get("metadata", {})
        uid = md.get("uid")
        if not uid:
            return
        now = time.time()
        rv = revision(md)
        # When what this object shows became true (0: before we looked).
        fact_rv = 0 if etype == "SYNC" else rv
        with self.lock:
            first = (kind, uid) not in self.objects
            self.objects[(kind, uid)] = obj
            ns, name = md.get("namespace"), md.get("name")
            if kind in PARENTS:
                rec = self.parents.setdefault(
                    uid,
                    {"kind": kind, "ns": ns, "name": name, "uid": uid, "deleting": None, "deleting_rv": None, "gone": None, "policies": []},
                )
                rec["policy"] = (obj.get("spec") or {}).get("deletionPolicy", "Snapshot")
                rec["bootstrap"] = bool((obj.get("spec") or {}).get("bootstrap"))
                rec["archive"] = bool(((obj.get("spec") or {}).get("bootstrap") or {}).get("archive"))
                if not rec["policies"] or rec["policies"][-1][1] != rec["policy"]:
                    rec["policies"].append((fact_rv, rec["policy"]))
                if md.get("deletionTimestamp") and rec["deleting"] is None:
                    rec["deleting"] = parse_time(md["deletionTimestamp"])
                    rec["deleting_rv"] = fact_rv
                if etype == "DELETED":
                    rec["gone"] = now
                if kind == "Database":
                    self.track_epoch(uid, md, obj)
            else:
                labels = md.get("labels") or {}
                record = {
                    "kind": kind,
                    "ns": ns,
                    "name": name,
                    "uid": uid,
                    "owner": controller_uid(obj),
                    "db": labels.get(DB_LABEL),
                    "created": parse_time(md.get("creationTimestamp")),
                    "seen": now,
                    "sync": etype == "SYNC",
                    "rv": rv,
                }
                if first and etype != "DELETED":
                    self.creations.append(record)
                    self.adds[(kind, ns, name)].append(uid)
                if (etype == "DELETED" or md.get("deletionTimestamp")) and uid not in self.deleting_seen:
                    self.deleting_seen.add(uid)
                    self.deletions.append(dict(record, at=now, rv=rv))
                if kind == "Pod" and record["db"] and (condition(obj, "Ready") or {}).get("status") == "True":
                    self.ready_rv.setdefault((ns, record["db"]), fact_rv)
                if kind == "Job" and uid not in self.succeeded and job_outcome(obj) == "Succeeded":
                    self.succeeded[uid] = dict(record, rv=fact_rv)
                    self.promoted.add((record["owner"], name))
                if kind == "Job" and "-promote-" in name and record["owner"] in self.rw:
                    # A promote Job's mode and success end rule G's excuse.
                    containers = ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
                    modes = {e.get("value") for c in containers for e in c.get("env") or [] if e.get("name") == "MODE"}
                    self.promote_modes[(record["owner"], name)] = ",".join(sorted(m or "" for m in modes))
                    self.judge_read_write(record["owner"], now)
                if kind in ("Service", "ConfigMap", "EndpointSlice"):
                    self.track_read_write(kind, etype, obj, now)
            listeners = list(self.listeners)
        for fn in listeners:
            fn(kind, etype, obj, now)

    # ---- rules G and H, judged as events arrive ----
    def track_epoch(self, uid, md, obj):
        """H: primaryEpoch only grows (one stream, in the order of writes)."""
        epoch = (obj.get("status") or {}).get("primaryEpoch")
        if epoch is None:
            return
        highest = self.epochs.get(uid, epoch)
        if epoch < highest:
            self.violate(
                ("H", uid, epoch),
                f"Database {md.get('namespace')}/{md.get('name')} status.primaryEpoch went from {highest} to {epoch}",
            )
        self.epochs[uid] = max(highest, epoch)

    def track_read_write(self, kind, etype, obj, now):
        """G: what the read-write Service, the role ConfigMap and the
        Service's EndpointSlices show, judged at once."""
        md = obj["metadata"]
        labels = md.get("labels") or {}
        gone = etype == "DELETED"
        if kind == "EndpointSlice":
            service = controller_uid(obj)
            if service is None:
                return
            if gone:
                self.slices[service].pop(md["uid"], None)
            else:
                self.slices[service][md["uid"]] = [
                    (e.get("targetRef") or {}).get("name") or ",".join(e.get("addresses") or [])
                    for e in obj.get("endpoints") or []
                    # An unset ready means ready (discovery.k8s.io/v1).
                    if (e.get("conditions") or {}).get("ready") is not False
                ]
            db = next((d for d, rw in self.rw.items() if rw.get("service") == service), None)
        else:
            db, owner_name = controller_uid(obj), labels.get(DB_LABEL)
            if not db or not owner_name:
                return
            rw = self.rw.setdefault(db, {"ns": md.get("namespace"), "name": owner_name, "since": None})
            if kind == "Service" and md["name"] == owner_name:
                rw["service"] = None if gone else md["uid"]
                rw["selected"] = None if gone else ((obj.get("spec") or {}).get("selector") or {}).get(POD_NAME_LABEL, "(no pod-name)")
            elif kind == "ConfigMap" and md["name"] == f"{owner_name}-role":
                data = {} if gone else obj.get("data") or {}
                if rw.get("role") not in (None, data.get("primary")):
                    rw["previous"] = rw["role"]
                rw["role"], rw["epoch"] = data.get("primary"), data.get("epoch")
            else:
                return
        if db is None:
            return
        rw = self.rw[db]
        where = f"{rw['ns']}/{rw['name']}"
        ready = sorted(p for s in self.slices.get(rw.get("service"), {}).values() for p in s) if rw.get("service") else []
        if len(ready) > 1:
            self.violate(("G", db, "endpoints"), f"the read-write Service {where} had {len(ready)} ready endpoints at once: {ready}")
        self.judge_read_write(db, now)

    def judge_read_write(self, db, now):
        """G: whether the read-write Service and the role ConfigMap differ,
        and whether a switchover under way excuses it, from now on."""
        rw = self.rw[db]
        differ = rw.get("selected") is not None and rw.get("role") is not None and rw["selected"] != rw["role"]
        ordinal = (rw.get("role") or "").rsplit("-", 1)[-1]
        job = f"{rw['name']}-promote-{rw.get('epoch')}-{ordinal}"
        planned = self.promote_modes.get((db, job), "switchover") == "switchover"
        excused = differ and planned and rw["selected"] == rw.get("previous") and (db, job) not in self.promoted
        for key, on, spans in (("since", differ and not excused, self.rw_lags), ("waiting", excused, self.rw_waits)):
            if on and rw.get(key) is None:
                rw[key] = now
            elif not on and rw.get(key) is not None:
                spans.append(now - rw[key])
                rw[key] = None
        rw["differ"] = f"selects {rw.get('selected')} while the role ConfigMap names {rw.get('role')} (epoch {rw.get('epoch')}; {job} seen Succeeded: {(db, job) in self.promoted})"

    # ---- rules ----
    def violate(self, key, message):
        """Records a violation once per key; repeats are counted."""
        with self.lock:
            if key in self.violation_keys:
                self.repeats[key] += 1
                return
            self.violation_keys.add(key)
            self.repeats[key] = 1
            stamp = time.strftime("%H:%M:%S")
            self.violations.append((key, f"{stamp} {message}"))
            print(f"!! invariant violated: {message}", flush=True)

    def report_violations(self):
        with self.lock:
            return [
                text + (f" ({self.repeats[key]} times)" if self.repeats[key] > 1 else "")
                for key, text in self.violations
            ]

    def parent_of(self, rec):
        if rec["owner"] in self.parents:
            return self.parents[rec["owner"]]
        if rec["db"]:
            candidates = [
                p
                for p in self.parents.values()
                if p["kind"] == "Database" and p["ns"] == rec["ns"] and p["name"] == rec["db"]
            ]
            # The incarnation that existed when the object's fact was
            # written: a Database deleted and created again under its name
            # is another one, and its predecessor's claims may finish
            # going after the new one appeared.
            before = [p for p in candidates if p["policies"] and p["policies"][0][0] < rec["rv"]]
            if before or candidates:
                return (before or candidates)[-1]
        return None

    def job_outcomes(self, ns, name):
        """Every outcome any Job ns/name was seen in (all its incarnations)."""
        with self.lock:
            return {
                job_outcome(obj)
                for (kind, _), obj in self.objects.items()
                if kind == "Job" and obj["metadata"].get("namespace") == ns and obj["metadata"].get("name") == name
            }

    def volume_deletion_refused(self, d, p):
        """Why the policy did not allow volume deletion d at the moment it
        was written (None when it did), p being its Database."""
        if p is None:
            return "it belongs to no Database"
        at, db = d["rv"], f"its Database {p['name']}"
        if p["deleting_rv"] is None or p["deleting_rv"] > at:
            return f"{db} was not being deleted then"
        # The policy as it stood then: the latest change written before.
        policy = next((pol for rv, pol in reversed(p["policies"]) if rv < at), p["policies"][0][1])
        if policy == "Delete":
            return None
        if policy != "Snapshot":
            return f"{db} was being deleted under {policy}"
        snapshots = [
            j["rv"]
            for j in self.succeeded.values()
            if j["owner"] == p["uid"] and j["name"] == f"{p['name']}-snapshot"
        ]
        if any(rv < at for rv in snapshots):
            return None
        later = " (it succeeded only after)" if snapshots else ""
        return f"{db} was being deleted under Snapshot and its snapshot Job had not succeeded yet{later}"

    def served_before_restore(self, c, p):
        """Why child c of bootstrapped Database p serves too early (None
        when it does not): as of its write, compared with the restore Job's
        success by revision."""
        if p.get("archive"):
            # A recovery from an archive has no Job: an instance is ready
            # only once the replay promoted the recovered primary.
            ready = self.ready_rv.get((p["ns"], p["name"]))
            if ready is not None and ready < c["rv"]:
                return None
            return f"before any instance of Database {p['name']} (spec.bootstrap.archive) was ready"
        job = f"{p['name']}-restore"
        succeeded = [j["rv"] for j in self.succeeded.values() if j["owner"] == p["uid"] and j["name"] == job]
        if any(rv < c["rv"] for rv in succeeded):
            return None
        made = any(j["kind"] == "Job" and j["owner"] == p["uid"] and j["name"] == job for j in self.creations)
        restored = condition(self.objects.get(("Database", p["uid"])), "Restored") or {}
        if not made and restored.get("status") == "False" and restored.get("reason") in NOT_RESTORING:
            return None
        if succeeded:
            return f"before the restore Job {job} of Database {p['name']} succeeded (it did only after)"
        if made:
            return f"while the restore Job {job} of Database {p['name']} had not succeeded"
        return f"for Database {p['name']} (spec.bootstrap) with no restore Job and Restored {restored.get('reason')}"

    def audit(self, final):
        now = time.time()
        with self.lock:
            # A: volumes are deleted only by a deletion whose policy allows it.
            for d in self.deletions:
                if d["kind"] != "PersistentVolumeClaim" or ("A", d["uid"]) in self.judged:
                    continue
                if not final and now - d["at"] < SETTLE:
                    continue
                self.judged.add(("A", d["uid"]))
                if (d["ns"], d["name"]) in self.allowed_pvc_deletes or (d["ns"], None) in self.allowed_pvc_deletes:
                    continue
                # Judged only now, once every stream has had SETTLE seconds
                # to deliver what was written before it, but as of then.
                why = self.volume_deletion_refused(d, self.parent_of(d))
                if why:
                    self.violate(("A", d["uid"]), f"PersistentVolumeClaim {d['ns']}/{d['name']} was deleted: {why}")
            # B: nothing of a deleting Database is created again.
            for c in self.creations:
                if c["kind"] not in ("StatefulSet", "PersistentVolumeClaim", "Job") or ("B", c["uid"]) in self.judged:
                    continue
                if not final and now - c["seen"] < SETTLE:
                    continue
                p = self.parent_of(c)
                if not p or p["kind"] != "Database":
                    if final or now - c["seen"] > 60:
                        self.judged.add(("B", c["uid"]))
                    continue
                if not p["deleting"]:
                    # Judged later if the parent starts deleting: keep it a minute.
                    if final or now - c["seen"] > 60:
                        self.judged.add(("B", c["uid"]))
                    continue
                self.judged.add(("B", c["uid"]))
                if c["created"] is None or c["created"] <= p["deleting"]:
                    continue
                key = (c["kind"], c["ns"], c["name"])
                order = self.adds[key].index(c["uid"])
                if c["kind"] == "Job" and c["name"].startswith(f"{p['name']}-promote-") and order == 0:
                    continue
                if c["kind"] == "Job" and c["name"] == f"{p['name']}-snapshot":
                    if order <= self.allowed_recreations[key]:
                        continue
                    self.violate(
                        ("B", c["kind"], c["ns"], c["name"]),
                        f"snapshot Job {c['ns']}/{c['name']} created again (creation #{order + 1}) while Database {p['name']} is being deleted",
                    )
                    continue
                if order > 0 and order <= self.allowed_recreations[key]:
                    continue
                again = "again " if order > 0 or c["kind"] != "Job" else ""
                self.violate(
                    ("B", c["kind"], c["ns"], c["name"]),
                    f"{c['kind']} {c['ns']}/{c['name']} created {again}(creation #{order + 1}) after Database {p['name']} started deleting",
                )
            # C: quiet windows.
            # creationTimestamp has whole seconds (the true time is within the
            # second after it): only a creation certainly inside the window
            # counts, or a child made just after it closes (opshooks back
            # and answering within the same second) would.
            for w in self.windows:
                start, end = w["start"], w["end"] if w["end"] is not None else now
                for c in self.creations:
                    if c["owner"] in w["parents"] and c["created"] is not None and start + 1 <= c["created"] <= end - 1:
                        self.violate(
                            ("C", w["name"], c["uid"], "create"),
                            f"{c['kind']} {c['ns']}/{c['name']} was created during {w['name']}",
                        )
                for d in self.deletions:
                    if d["owner"] in w["parents"] and start + 1 <= d["at"] <= end:
                        self.violate(
                            ("C", w["name"], d["uid"], "delete"),
                            f"{d['kind']} {d['ns']}/{d['name']} was deleted during {w['name']}",
                        )
            # F: nothing serves a bootstrapped Database before its restore.
            for c in self.creations:
                if c["kind"] not in ("Service", "EndpointSlice") or ("F", c["uid"]) in self.judged:
                    continue
                if not final and now - c["seen"] < SETTLE:
                    continue
                p = self.parents.get(c["owner"])
                if p is None:
                    # Its parent's stream may lag: keep it a minute.
                    if final or now - c["seen"] > 60:
                        self.judged.add(("F", c["uid"]))
                    continue
                if p["kind"] != "Database" or not p.get("bootstrap") or c["name"] not in (p["name"], f"{p['name']}-ro"):
                    self.judged.add(("F", c["uid"]))
                    continue
                why = self.served_before_restore(c, p)
                if why and not final and now - c["seen"] < STATUS_GRACE:
                    continue  # the status saying it restores nothing may be on its way
                self.judged.add(("F", c["uid"]))
                if why:
                    self.violate(("F", c["uid"]), f"{c['kind']} {c['ns']}/{c['name']} was created {why}")
            # G: the read-write Service and the role ConfigMap agree within RW_GRACE.
            for db, rw in self.rw.items():
                if rw["since"] is not None and now - rw["since"] > RW_GRACE:
                    self.violate(
                        ("G", db, "selector", rw["since"]),
                        f"the read-write Service {rw['ns']}/{rw['name']} {rw['differ']}, for {now - rw['since']:.1f}s",
                    )
        # D and E: the logs.
        self.scan_metacontroller()
        self.scan_opshooks()

    def read_new(self, file):
        try:
            with open(file, "rb") as f:
                f.seek(self.log_offsets[file])
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.log_offsets[file] += end + 1
        return data[: end + 1].decode(errors="replace").splitlines()

    def scan_metacontroller(self):
        for line in self.read_new(self.metacontroller_log):
            for pattern, what in METACONTROLLER_BAD:
                if pattern.search(line):
                    try:
                        entry = json.loads(line)
                        text = str(entry.get("error") or entry.get("msg"))
                    except ValueError:
                        text = line
                    # One violation per distinct error (the same one repeats
                    # on every retry), counted.
                    self.violate(("D", what, re.sub(r"\d+", "N", text)[:200]), f"Metacontroller logged {what}: {text[:400]}")

    def scan_opshooks(self):
        for line in self.read_new(self.opshooks_log):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            fields = entry.get("fields", entry)
            if fields.get("message") != "hook call":
                continue
            operator, hook, status = fields.get("operator"), fields.get("hook"), fields.get("status")
            parent = fields.get("parent", "-")
            with self.lock:
                self.hook_calls[(operator, hook, status)] += 1
                if status == 200:
                    continue
                at = parse_time(entry.get("timestamp", "")[:19] + "Z") if entry.get("timestamp") else time.time()
                expected = any(
                    r["operator"] == operator
                    and r["parent"] == parent
                    and r["start"] <= (at or 0) + 1
                    and (r["end"] is None or (at or 0) <= r["end"] + 1)
                    for r in self.refusals
                )
            if not expected:
                self.violate(
                    ("E", operator, hook, parent, status),
                    f"opshooks answered {status} to {operator} {hook} for {parent}: {fields.get('detail', '')}",
                )
