#!/usr/bin/env python3
"""The real control loop: Metacontroller, kube-scheduler and kwok drive every
operator's whole life against opshooks, and the cluster's state is asserted.

Run by loop.sh, which brings up the control plane, the fake node and the
chart (its CompositeControllers pointing at http://127.0.0.1:PORT). This
program starts opshooks on PORT and Metacontroller itself (it kills and
restarts both in the fault scenarios), watches the whole cluster for the
invariants in invariants.py from the first second to the last, runs the
scenarios, and prints a table. Exit status 1 on any failed scenario or
violated invariant.

Usage: loop.py --dir DIR --port PORT --opshooks BIN --metacontroller BIN
               [--strategies dynamic-apply,server-side-apply] [--only NAME,...]
               [--opshooks-arg=--FLAG=VALUE ...] [--ca-file PEM [--client-cert CRT,KEY]]
With --ca-file opshooks serves HTTPS (its TLS flags come as --opshooks-arg)
and its readiness is checked with that CA (and that client certificate).
"""

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import traceback
import urllib.request

from invariants import Recorder
from kube import Kube, KubeError, condition, controller_uid, job_outcome, pod_ready

GROUP = "opshooks.io/v1alpha1"
VERSION_ANNOTATION = "opshooks.io/postgres-version"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
NOT_READY_LABEL = "e2e.kwok.x-k8s.io/not-ready"
PRINT_LOCK = threading.Lock()


def say(text):
    with PRINT_LOCK:
        print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


class Failed(Exception):
    pass


class NotYet(Exception):
    pass


def need(ok, detail):
    if not ok:
        raise NotYet(detail)


# ---- processes --------------------------------------------------------------
class Proc:
    """A process the suite starts, kills and restarts; its log is appended to."""

    def __init__(self, name, argv, log, ready_url, tls=None):
        self.name, self.argv, self.log, self.ready_url, self.tls = name, argv, log, ready_url, tls
        self.popen = None

    def start(self, extra=()):
        with open(self.log, "ab") as f:
            f.write(f"===== e2e: {self.name} started {time.strftime('%H:%M:%S')} =====\n".encode())
        out = open(self.log, "ab")
        self.popen = subprocess.Popen(
            [*self.argv, *extra], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        out.close()
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.popen.poll() is not None:
                raise Failed(f"{self.name} exited with {self.popen.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(self.ready_url, timeout=2, context=self.tls) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise Failed(f"{self.name} did not become ready at {self.ready_url}")

    def kill(self, sig=signal.SIGKILL):
        if self.popen and self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        with open(self.log, "ab") as f:
            f.write(f"===== e2e: {self.name} stopped {time.strftime('%H:%M:%S')} =====\n".encode())


# ---- one scenario -----------------------------------------------------------
class Scenario:
    def __init__(self, suite, title, fn, ns, strategy):
        self.suite, self.title, self.fn, self.ns, self.strategy = suite, title, fn, ns, strategy
        self.k = suite.kube
        self.rec = suite.recorder
        self.steps = 0
        self.problems = []  # failed checks that do not stop the scenario
        self.result = "not run"
        self.seconds = 0.0
        self.error = None

    def step(self, text):
        self.steps += 1
        say(f"[{self.title} | {self.strategy}] {self.steps}. {text}")

    def wait(self, what, fn, timeout=120, every=0.5):
        deadline = time.time() + timeout
        last = "no check ran"
        while True:
            try:
                value = fn()
                if value is None:
                    value = True
                return value
            except NotYet as err:
                last = str(err)
            except KubeError as err:
                last = str(err)
            if time.time() > deadline:
                raise Failed(f"timed out after {timeout}s waiting for {what}: {last}")
            time.sleep(every)

    def hold(self, what, fn):
        """fn must keep passing for two resync periods and a second: every
        parent is synced again at least once meanwhile, hook or no hook
        event, so a hold does not end before the loop had its say."""
        deadline = time.time() + 2 * self.suite.resync() + 1
        while time.time() < deadline:
            try:
                fn()
            except NotYet as err:
                raise Failed(f"{what} stopped holding: {err}") from None
            time.sleep(0.5)

    def expect(self, ok, message):
        if not ok:
            raise Failed(message)

    def soft(self, what, fn, timeout=20):
        """A check whose failure fails the scenario at its end but lets it go
        on, so one broken thing does not hide the next."""
        try:
            return self.wait(what, fn, timeout)
        except Failed as err:
            self.problems.append(f"step {self.steps}: {err}")
            say(f"[{self.title} | {self.strategy}] check failed, going on: {err}")
            return None

    def run(self):
        start = time.time()
        say(f"=== {self.title} ({self.strategy}) in namespace {self.ns}")
        try:
            self.suite.namespace(self.ns)
            self.fn(self)
            if self.problems:
                raise Failed("; ".join(self.problems))
            self.result = "PASS"
        except Failed as err:
            self.result, self.error = "FAIL", str(err)
        except Exception as err:  # a bug in the suite is a failure too, with its trace
            self.result, self.error = "FAIL", f"{err!r}\n{traceback.format_exc()}"
        self.seconds = time.time() - start
        if self.error:
            say(f"=== {self.title} ({self.strategy}) FAILED at step {self.steps}: {self.error}")
            self.diagnose()
            if not os.environ.get("OPSHOOKS_E2E_KEEP"):
                self.suite.force_cleanup(self.ns)
        else:
            say(f"=== {self.title} ({self.strategy}) passed in {self.seconds:.0f}s")

    def diagnose(self):
        """What the failure left behind, for a log read after the cluster is gone."""
        try:
            for kind in ("WebServer", "Memcached", "Backup", "Database"):
                for obj in self.k.list(kind, self.ns):
                    md = obj["metadata"]
                    say(
                        f"[{self.title}] {kind} {md['name']} generation {md.get('generation')} "
                        f"deleting={bool(md.get('deletionTimestamp'))} status: {json.dumps(obj.get('status'))[:1500]}"
                    )
            for e in self.k.list("Event", self.ns):
                if e.get("type") == "Warning":
                    io = e.get("involvedObject", {})
                    say(f"[{self.title}] Warning {io.get('kind')}/{io.get('name')} x{e.get('count', 1)}: {e.get('message', '')[:500]}")
        except Exception as err:  # diagnostics must not hide the failure
            say(f"[{self.title}] (diagnostics failed: {err!r})")

    # ---- helpers shared by scenarios ----
    def parent(self, kind, name):
        obj = self.k.get(kind, self.ns, name)
        need(obj is not None, f"{kind} {name} not found")
        return obj

    def children(self, kind, owner_uid, live=True):
        return [
            o
            for o in self.k.list(kind, self.ns)
            if controller_uid(o) == owner_uid and not (live and o["metadata"].get("deletionTimestamp"))
        ]

    def synced(self, obj):
        st = obj.get("status") or {}
        need(
            st.get("observedGeneration") == obj["metadata"]["generation"],
            f"status.observedGeneration {st.get('observedGeneration')} != generation {obj['metadata']['generation']} (status: {st})",
        )
        return st

    def kubectl(self, *args):
        proc = subprocess.run(["kubectl", "-n", self.ns, *args], capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise Failed(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def gone(self, kind, name):
        need(self.k.get(kind, self.ns, name) is None, f"{kind} {name} still exists")

    def job(self, name):
        return self.k.get("Job", self.ns, name)

    def wait_job(self, name, outcome, timeout=120):
        def check():
            j = self.job(name)
            need(j is not None, f"job {name} not created")
            got = job_outcome(j)
            need(got == outcome, f"job {name} is {got}")
            return j

        return self.wait(f"job {name} {outcome}", check, timeout)

    def wait_job_seen(self, name, outcome, timeout=120):
        """Like wait_job, for a Job the loop may delete as soon as it is
        done (a snapshot): what the watch streams saw of it counts."""

        def check():
            seen = self.rec.job_outcomes(self.ns, name)
            need(outcome in seen, f"job {name} seen as {seen or 'nothing yet'}")

        return self.wait(f"job {name} {outcome} (as seen by the watch)", check, timeout)

    def stage(self, job, outcome, delay_ms=0):
        """A kwok Stage that decides how the pods of one Job end."""
        obj = job_stage(self.ns, job, outcome, delay_ms)
        self.k.apply(obj)
        return obj["metadata"]["name"]

    def unstage(self, name):
        self.k.delete("Stage", None, name)


FAIL_TEMPLATE = """{{ $now := Now }}
phase: Failed
startTime: {{ or .status.startTime $now | Quote }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
conditions:
- {type: Ready, status: "False", reason: PodFailed, lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "False", reason: PodFailed, lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state: {terminated: {exitCode: 1, reason: Error, message: "failed by the e2e suite", startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}
{{ end }}
"""

SUCCEED_TEMPLATE = """{{ $now := Now }}
phase: Succeeded
conditions:
- {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}
{{ end }}
"""


def job_stage(ns, job, outcome, delay_ms):
    """Fail (from Pending or Running) or slowly succeed (once Running) the
    pods of Job ns/job. Its weight wins over the shared stages' (weight 0)
    whenever both match a pod."""
    phases = ["Pending", "Running"] if outcome == "fail" else ["Running"]
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": f"e2e-{outcome}-{ns}-{job}"[:63]},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".metadata.namespace", "operator": "In", "values": [ns]},
                    {"key": ".status.phase", "operator": "In", "values": phases},
                    {"key": f'.metadata.labels["{JOB_NAME_LABEL}"]', "operator": "In", "values": [job]},
                ]
            },
            "weight": 100,
            "delay": {"durationMilliseconds": delay_ms},
            "steps": [
                {
                    "patch": {
                        "subresource": "status",
                        "root": "status",
                        "template": FAIL_TEMPLATE if outcome == "fail" else SUCCEED_TEMPLATE,
                    }
                }
            ],
        },
    }


# ---- WebServer ----------------------------------------------------------------
def webserver_converged(s, name, n, image):
    def check():
        ws = s.parent("WebServer", name)
        pods = s.children("Pod", ws["metadata"]["uid"])
        names = sorted(p["metadata"]["name"] for p in pods)
        want = sorted(f"{name}-{i}" for i in range(n))
        need(names == want, f"pods {names}, want {want}")
        images = {p["spec"]["containers"][0]["image"] for p in pods}
        need(images <= {image}, f"pod images {images}, want {image}")
        unready = [p["metadata"]["name"] for p in pods if not pod_ready(p)]
        need(not unready, f"pods not ready: {unready}")
        st = s.synced(ws)
        need(
            st.get("count") == n and st.get("readyReplicas") == n,
            f"status count={st.get('count')} readyReplicas={st.get('readyReplicas')}, want {n}",
        )
        ready = condition(ws, "Ready")
        need(ready and ready.get("status") == "True", f"Ready condition {ready}")
        return ws

    def updated():
        # Metacontroller's own condition (pods roll): once converged it must
        # say so, naming the revision of the current spec.
        ws = s.parent("WebServer", name)
        cond = condition(ws, "Updated")
        need(cond is not None, "no Updated condition from Metacontroller in the status")
        latest = [
            r["metadata"]["name"]
            for r in s.k.list("ControllerRevision", s.ns)
            if (r.get("parentPatch") or {}).get("spec") == ws["spec"]
        ]
        need(
            cond.get("status") == "True" and any(r in cond.get("message", "") for r in latest),
            f"Metacontroller's Updated condition {cond} does not name the current spec's revision {latest}",
        )

    ws = s.wait(f"{n} ready pods of {image}, and the status saying so", check)
    if pods_roll(s):
        s.soft("the Updated condition naming the current revision", updated)
    return ws


def pods_roll(s):
    """Whether the chart's WebServer controller has Metacontroller roll the
    pods (only then does Metacontroller write its Updated condition)."""
    for cc in s.k.list("CompositeController"):
        if cc["spec"]["parentResource"]["resource"] != "webservers":
            continue
        for child in cc["spec"].get("childResources") or []:
            if child["resource"] == "pods":
                method = (child.get("updateStrategy") or {}).get("method", "OnDelete")
                return method in ("RollingRecreate", "RollingInPlace")
    return False


class PodTimeline:
    """Follows one parent's pods through the watch stream: the most pods of
    the desired names that were missing or unready at any one moment, and
    which names were seen replaced (a new pod under the name)."""

    def __init__(self, owner_uid, names, pods):
        self.owner, self.names = owner_uid, set(names)
        self.lock = threading.Lock()
        self.state = {}
        self.replaced = []
        self.max_unavailable = 0
        for p in pods:
            self.state[p["metadata"]["name"]] = (p["metadata"]["uid"], pod_ready(p))

    def __call__(self, kind, etype, obj, _t):
        if kind != "Pod" or controller_uid(obj) != self.owner:
            return
        name, uid = obj["metadata"]["name"], obj["metadata"]["uid"]
        with self.lock:
            if etype == "DELETED":
                if self.state.get(name, (None,))[0] == uid:
                    del self.state[name]
            else:
                if name in self.state and self.state[name][0] != uid:
                    self.replaced.append(name)
                elif name not in self.state and etype == "ADDED":
                    self.replaced.append(name)
                self.state[name] = (uid, pod_ready(obj))
            down = sum(1 for n in self.names if not (n in self.state and self.state[n][1]))
            self.max_unavailable = max(self.max_unavailable, down)


def new_webserver(s, name, replicas):
    s.step(f"create a WebServer of {replicas} replicas")
    s.k.apply(
        {
            "apiVersion": GROUP,
            "kind": "WebServer",
            "metadata": {"name": name, "namespace": s.ns},
            "spec": {"replicas": replicas, "image": "nginxdemos/hello", "port": 80},
        }
    )
    webserver_converged(s, name, replicas, "nginxdemos/hello")


def scenario_webserver(s):
    k, ns, name = s.k, s.ns, "hello"
    new_webserver(s, name, 3)
    s.step("scale up to 5 (spec.replicas)")
    k.patch("WebServer", ns, name, {"spec": {"replicas": 5}})
    webserver_converged(s, name, 5, "nginxdemos/hello")
    s.step("scale down to 3 with kubectl scale (the scale subresource)")
    s.kubectl("scale", f"webserver/{name}", "--replicas=3")
    webserver_converged(s, name, 3, "nginxdemos/hello")
    s.step("image change rolls every pod, one at a time")
    ws = s.parent("WebServer", name)
    pods = s.children("Pod", ws["metadata"]["uid"])
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    timeline = PodTimeline(ws["metadata"]["uid"], before, pods)
    s.rec.add_listener(timeline)
    try:
        k.patch("WebServer", ns, name, {"spec": {"image": "nginx:1.27"}})
        webserver_converged(s, name, 3, "nginx:1.27")
    finally:
        s.rec.remove_listener(timeline)
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in s.children("Pod", ws["metadata"]["uid"])}
    same = [n for n in before if after.get(n) == before[n]]
    s.expect(not same, f"pods not recreated by the image change: {same}")
    # max_unavailable counts only what the stream showed: without every
    # replacement in it (a dead or lagging Pod watch) it proves nothing.
    unseen = sorted(set(before) - set(timeline.replaced))
    s.expect(not unseen, f"the Pod watch did not show these pods replaced during the roll: {unseen}")
    s.expect(
        timeline.max_unavailable <= 1,
        f"{timeline.max_unavailable} pods were unavailable at once during the roll (want at most 1)",
    )
    webserver_zero_and_delete(s, name)


def webserver_zero_and_delete(s, name):
    # The hook, not the garbage collector, removes the pods: nothing is left
    # behind for a later run in this namespace.
    s.step("scale to 0, then delete")
    s.k.patch("WebServer", s.ns, name, {"spec": {"replicas": 0}})

    def zero():
        ws = s.parent("WebServer", name)
        need(not s.children("Pod", ws["metadata"]["uid"], live=False), "pods remain")
        st = s.synced(ws)
        need(st.get("count") == 0, f"status count {st.get('count')}")
        ready = condition(ws, "Ready")
        need(ready and ready.get("status") == "True" and ready.get("reason") == "ScaledToZero", f"Ready {ready}")

    s.wait("no pods and Ready=True ScaledToZero", zero)
    s.k.delete("WebServer", s.ns, name)
    s.wait("WebServer gone", lambda: s.gone("WebServer", name))


def scenario_webserver_brief(s):
    """Create, converge, scale to zero, delete: the least that shows the
    hooks are reached (secure.sh runs it with TLS, a bearer token and client
    certificates)."""
    name = "brief"
    new_webserver(s, name, 2)
    webserver_zero_and_delete(s, name)


# ---- Memcached ------------------------------------------------------------------
def memcached_pods(s, dep):
    sel = ",".join(f"{a}={b}" for a, b in dep["spec"]["selector"]["matchLabels"].items())
    return [p for p in s.k.list("Pod", s.ns, sel) if not p["metadata"].get("deletionTimestamp")]


def memcached_converged(s, name, n, ready=None):
    ready = n if ready is None else ready

    def check():
        mc = s.parent("Memcached", name)
        dep = s.k.get("Deployment", s.ns, name)
        need(dep is not None, "Deployment not created")
        need(controller_uid(dep) == mc["metadata"]["uid"], "Deployment not owned by the Memcached")
        need(dep["spec"]["replicas"] == n, f"Deployment replicas {dep['spec']['replicas']}, want {n}")
        svc = s.k.get("Service", s.ns, name)
        need(svc is not None and svc["spec"].get("clusterIP") == "None", "headless Service missing")
        pods = memcached_pods(s, dep)
        names = sorted(p["metadata"]["name"] for p in pods)
        need(len(names) == n, f"{len(names)} pods, want {n}")
        really_ready = sum(1 for p in pods if pod_ready(p))
        need(really_ready == ready, f"{really_ready} pods ready, want {ready}")
        st = s.synced(mc)
        need(st.get("nodes") == names, f"status.nodes {st.get('nodes')}, real pods {names}")
        need(st.get("readyReplicas") == ready, f"status.readyReplicas {st.get('readyReplicas')}, want {ready}")
        cond = condition(mc, "Ready")
        want = "True" if ready >= n else "False"
        need(cond and cond.get("status") == want, f"Ready condition {cond}, want {want}")
        return mc, dep, pods

    return s.wait(f"{n} memcached nodes ({ready} ready) and status.nodes listing them", check)


def scenario_memcached(s):
    k, ns, name = s.k, s.ns, "cache"
    s.step("create a Memcached of 3 nodes")
    k.apply(
        {
            "apiVersion": GROUP,
            "kind": "Memcached",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"size": 3, "memoryLimit": "64Mi"},
        }
    )
    _, dep, _ = memcached_converged(s, name, 3)
    dep_uid = dep["metadata"]["uid"]
    s.step("resize in place to 5")
    k.patch("Memcached", ns, name, {"spec": {"size": 5}})
    _, dep, _ = memcached_converged(s, name, 5)
    s.expect(dep["metadata"]["uid"] == dep_uid, "the Deployment was replaced, not resized in place")
    s.step("resize to 2 with kubectl scale")
    s.kubectl("scale", f"memcached/{name}", "--replicas=2")
    _, dep, pods = memcached_converged(s, name, 2)
    s.expect(dep["metadata"]["uid"] == dep_uid, "the Deployment was replaced, not resized in place")
    s.step("a pod that becomes not ready shows in the status")
    victim = sorted(p["metadata"]["name"] for p in pods)[0]
    k.patch("Pod", ns, victim, {"metadata": {"labels": {NOT_READY_LABEL: "true"}}})
    mc, _, _ = memcached_converged(s, name, 2, ready=1)
    s.expect(victim in mc["status"]["nodes"], f"the not-ready pod {victim} left status.nodes")
    s.step("it heals, and the status follows")
    k.patch("Pod", ns, victim, {"metadata": {"labels": {NOT_READY_LABEL: None}}})
    memcached_converged(s, name, 2)
    s.step("delete")
    k.delete("Memcached", ns, name)
    s.wait("Memcached and its Deployment gone", lambda: (s.gone("Memcached", name), s.gone("Deployment", name)))


# ---- Backup ---------------------------------------------------------------------
def postgres_statefulset(ns, name, replicas=1):
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "postgres",
                            "image": "postgres:16",
                            "env": [
                                {
                                    "name": "POSTGRES_PASSWORD",
                                    "valueFrom": {"secretKeyRef": {"name": f"{name}-secret", "key": "password"}},
                                },
                                {"name": "POSTGRES_USER", "value": "app"},
                                {"name": "POSTGRES_DB", "value": "app"},
                            ],
                            "ports": [{"name": "postgres", "containerPort": 5432}],
                        }
                    ]
                },
            },
        },
    }


def backup_spec(schedule, target):
    return {
        "schedule": schedule,
        "target": {"kind": "StatefulSet", "name": target},
        "destination": {"s3Bucket": "e2e-backups", "s3Prefix": "nightly/", "credentialsSecret": "s3-creds"},
        "retentionDays": 7,
    }


def make_target(s, name):
    s.k.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-secret", "namespace": s.ns},
            "stringData": {"password": "e2e"},
        }
    )
    s.k.apply(postgres_statefulset(s.ns, name))


def backup_state(s, name, schedule, suspended, target_found, ready_reason):
    def check():
        b = s.parent("Backup", name)
        cron = s.k.get("CronJob", s.ns, f"{name}-backup")
        need(cron is not None, "CronJob not created")
        need(controller_uid(cron) == b["metadata"]["uid"], "CronJob not owned by the Backup")
        need(cron["spec"]["schedule"] == schedule, f"CronJob schedule {cron['spec']['schedule']!r}, want {schedule!r}")
        need(cron["spec"].get("suspend") == suspended, f"CronJob suspend {cron['spec'].get('suspend')}, want {suspended}")
        st = s.synced(b)
        need(st.get("cronJobName") == f"{name}-backup", f"status.cronJobName {st.get('cronJobName')}")
        found = condition(b, "TargetFound")
        need(found and found.get("status") == ("True" if target_found else "False"), f"TargetFound {found}")
        need(target_found or "suspended" in found.get("message", ""), f"TargetFound does not say the CronJob is suspended: {found}")
        ready = condition(b, "Ready")
        need(ready and ready.get("reason") == ready_reason, f"Ready {ready}, want reason {ready_reason}")
        return b, cron

    return s.wait(f"CronJob on {schedule!r} suspend={suspended}, status {ready_reason}", check)


def backup_run(s, name, status, cond_status):
    def check():
        b = s.parent("Backup", name)
        st = s.synced(b)
        need(st.get("lastBackupStatus") == status, f"status.lastBackupStatus {st.get('lastBackupStatus')}, want {status}")
        last = condition(b, "LastBackupSucceeded")
        need(last and last.get("status") == cond_status, f"LastBackupSucceeded {last}")
        return b

    return s.wait(f"status saying the last backup {status}", check)


def scenario_backup(s):
    k, ns, name, target = s.k, s.ns, "nightly", "pg"
    s.step("create a PostgreSQL StatefulSet and a Backup of it")
    make_target(s, target)
    k.apply({"apiVersion": GROUP, "kind": "Backup", "metadata": {"name": name, "namespace": ns}, "spec": backup_spec("0 2 * * *", target)})
    b, cron = backup_state(s, name, "0 2 * * *", False, True, "Scheduled")
    cron_uid = cron["metadata"]["uid"]
    s.expect(b["status"].get("lastBackupStatus") == "None", f"lastBackupStatus {b['status'].get('lastBackupStatus')} before any run")
    s.step("schedule change updates the CronJob in place")
    k.patch("Backup", ns, name, {"spec": {"schedule": "30 3 * * 1-5"}})
    _, cron = backup_state(s, name, "30 3 * * 1-5", False, True, "Scheduled")
    s.expect(cron["metadata"]["uid"] == cron_uid, "the CronJob was replaced")
    s.step("target deleted: CronJob kept, suspended, status says so")
    k.delete("StatefulSet", ns, target)
    _, cron = backup_state(s, name, "30 3 * * 1-5", True, False, "TargetNotFound")
    s.expect(cron["metadata"]["uid"] == cron_uid, "the CronJob was replaced")
    s.step("target recreated: CronJob resumed")
    k.apply(postgres_statefulset(ns, target))
    _, cron = backup_state(s, name, "30 3 * * 1-5", False, True, "Scheduled")
    s.expect(cron["metadata"]["uid"] == cron_uid, "the CronJob was replaced")
    s.step("a backup Job that succeeds shows in the status")
    s.kubectl("create", "job", f"--from=cronjob/{name}-backup", f"{name}-manual-1")
    s.wait_job(f"{name}-manual-1", "Succeeded")
    b = backup_run(s, name, "Succeeded", "True")
    s.expect(b["status"].get("lastBackupTime"), "status.lastBackupTime not set after a successful run")
    s.step("a backup Job that fails shows in the status")
    stage = s.stage(f"{name}-manual-2", "fail")
    try:
        time.sleep(1.1)  # a later creationTimestamp than the first run's
        s.kubectl("create", "job", f"--from=cronjob/{name}-backup", f"{name}-manual-2")
        s.wait_job(f"{name}-manual-2", "Failed", timeout=180)
        backup_run(s, name, "Failed", "False")
    finally:
        s.unstage(stage)
    s.step("delete: the CronJob goes with it")
    k.delete("Backup", ns, name)
    s.wait("Backup and CronJob gone", lambda: (s.gone("Backup", name), s.gone("CronJob", f"{name}-backup")))


# ---- Database -------------------------------------------------------------------
def database(ns, name, version, size="small", policy="Snapshot", backups=False):
    backup = {
        "enabled": backups,
        "destination": {"s3Bucket": "e2e-backups", "s3Prefix": f"{name}/", "credentialsSecret": "s3-creds"},
    }
    if backups:
        backup["schedule"] = "0 3 * * *"
    return {
        "apiVersion": GROUP,
        "kind": "Database",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "version": version,
            "size": size,
            "storage": {"size": "1Gi"},
            "deletionPolicy": policy,
            "backup": backup,
        },
    }


def db_running(s, name, n, version, timeout=180):
    def check():
        db = s.parent("Database", name)
        st = s.synced(db)
        need(st.get("phase") == "Running" and st.get("ready") is True, f"phase {st.get('phase')} ready {st.get('ready')}")
        need(st.get("version") == version, f"status.version {st.get('version')}, want {version}")
        need(st.get("replicas") == n and st.get("readyReplicas") == n, f"replicas {st.get('replicas')}/{st.get('readyReplicas')}, want {n}")
        sts = s.k.get("StatefulSet", s.ns, name)
        need(sts is not None, "StatefulSet missing")
        need(sts["metadata"].get("annotations", {}).get(VERSION_ANNOTATION) == version, "StatefulSet runs another version")
        image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
        need(image == f"postgres:{version}", f"StatefulSet image {image}")
        need(sts["spec"]["replicas"] == n and (sts.get("status") or {}).get("readyReplicas") == n, "StatefulSet not ready")
        init = s.job(f"{name}-init")
        need(job_outcome(init) == "Succeeded", f"init job {job_outcome(init)}")
        initialized = condition(db, "Initialized")
        need(initialized and initialized.get("status") == "True", f"Initialized {initialized}")
        return db

    return s.wait(f"Database {name} Running {version} with {n} ready instances", check, timeout)


def db_services(s, name, n):
    def check():
        headless = s.k.get("Service", s.ns, f"{name}-headless")
        need(headless and headless["spec"].get("clusterIP") == "None", "headless Service")
        rw = s.k.get("Service", s.ns, name)
        need(rw and (rw["spec"].get("selector") or {}).get("statefulset.kubernetes.io/pod-name") == f"{name}-0", "read-write Service does not select the primary")
        ro = s.k.get("Service", s.ns, f"{name}-ro")
        need(ro and not ro["spec"].get("selector"), "read-only Service must have no selector")
        eps = s.k.get("EndpointSlice", s.ns, f"{name}-ro")
        need(eps is not None, "read-only EndpointSlice missing")
        need(eps["metadata"]["labels"].get("kubernetes.io/service-name") == f"{name}-ro", "EndpointSlice not attached to the read-only Service")
        want = []
        for i in range(1, n):
            pod = s.k.get("Pod", s.ns, f"{name}-{i}")
            need(pod and pod_ready(pod) and pod["status"].get("podIP"), f"standby {name}-{i} not ready")
            want.append(pod["status"]["podIP"])
        got = sorted(a for e in eps.get("endpoints") or [] for a in e["addresses"] if (e.get("conditions") or {}).get("ready"))
        need(got == sorted(want), f"read-only endpoints {got}, want the standbys {sorted(want)}")
        for secret in (f"{name}-superuser", f"{name}-credentials"):
            need(s.k.get("Secret", s.ns, secret), f"Secret {secret} missing")
        need(s.k.get("ConfigMap", s.ns, f"{name}-connection"), "connection ConfigMap missing")

    s.wait(f"Services of {name} and read-only endpoints on the {n - 1} standbys", check, timeout=60)


def volumes(s, name):
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in s.k.list("PersistentVolumeClaim", s.ns, f"opshooks.io/database={name}")
        if not p["metadata"].get("deletionTimestamp")
    }


def same_volumes(s, name, before):
    now = volumes(s, name)
    lost = {v for v in before if now.get(v) != before[v]}
    need(not lost, f"volumes replaced or deleted: {sorted(lost)}")


# Children a client holds on to by name and reads once: a new Secret is a new
# password, a new Service a new cluster IP, a new ConfigMap or EndpointSlice
# lost what other writers put there. Made again, they are a failure even when
# their content ends up the same, so they are compared by uid.
HELD_KINDS = ("Service", "Secret", "ConfigMap", "EndpointSlice")


def held_objects(s, owner_uids):
    """(kind, name) -> uid of every child of HELD_KINDS these parents own."""
    return {
        (kind, o["metadata"]["name"]): o["metadata"]["uid"]
        for kind in HELD_KINDS
        for o in s.k.list(kind, s.ns)
        if controller_uid(o) in owner_uids
    }


def same_held_objects(s, before, owner_uids):
    now = held_objects(s, owner_uids)
    changed = sorted(f"{kind} {name}" for (kind, name), uid in before.items() if now.get((kind, name)) != uid)
    need(not changed, f"made again or deleted: {changed}")


def upgrading_reason(s, name, reason, timeout=180):
    def check():
        db = s.parent("Database", name)
        s.synced(db)
        c = condition(db, "Upgrading")
        need(c and c.get("reason") == reason, f"Upgrading {c}")
        return db

    return s.wait(f"Upgrading condition {reason}", check, timeout)


def old_version_serving(s, name, n, version):
    sts = s.k.get("StatefulSet", s.ns, name)
    need(sts is not None, "StatefulSet missing")
    need(sts["metadata"]["annotations"].get(VERSION_ANNOTATION) == version, f"StatefulSet left version {version}")
    need(sts["spec"]["replicas"] == n and (sts.get("status") or {}).get("readyReplicas") == n, f"StatefulSet not serving {n} ready instances")
    db = s.parent("Database", name)
    need((db.get("status") or {}).get("version") == version, f"status.version {(db.get('status') or {}).get('version')}")


def db_gone(s, name, volumes_too=True, timeout=180):
    def check():
        s.gone("Database", name)
        s.gone("StatefulSet", name)
        if volumes_too:
            left = volumes(s, name)
            need(not left, f"volumes left: {sorted(left)}")

    s.wait(f"Database {name} gone" + (" with its volumes" if volumes_too else ""), check, timeout)


def scenario_database(s):
    k, ns, name = s.k, s.ns, "shop"
    s.step("create a Database (15, medium: a primary and a standby, backups on)")
    k.apply(database(ns, name, "15", "medium", backups=True))
    db_running(s, name, 2, "15")
    s.wait("the init Job, run once", lambda: need(len(s.rec.creations_of("Job", ns, f"{name}-init")) == 1, "init job created more than once"))
    db_services(s, name, 2)
    s.wait("backup CronJob", lambda: need(s.k.get("CronJob", ns, f"{name}-backup"), "missing"))
    vols = volumes(s, name)
    owner = [s.parent("Database", name)["metadata"]["uid"]]
    held = held_objects(s, owner)
    s.expect(len(held) >= 7, f"Services, Secrets, ConfigMap and EndpointSlice of {name}: only {sorted(held)}")
    s.expect(sorted(vols) == [f"data-{name}-0", f"data-{name}-1"], f"volumes {sorted(vols)}")
    s.step("scale to large (3 instances)")
    k.patch("Database", ns, name, {"spec": {"size": "large"}})
    db_running(s, name, 3, "15")
    db_services(s, name, 3)
    same_volumes(s, name, vols)
    s.wait("the same Services, Secrets, ConfigMap and EndpointSlice", lambda: same_held_objects(s, held, owner), timeout=1)
    vols = volumes(s, name)
    s.step("upgrade 15 -> 16 succeeds")
    k.patch("Database", ns, name, {"spec": {"version": "16"}})
    db_running(s, name, 3, "16", timeout=240)
    db_services(s, name, 3)
    same_volumes(s, name, vols)
    s.wait("the same Services, Secrets, ConfigMap and EndpointSlice", lambda: same_held_objects(s, held, owner), timeout=1)
    for job in (f"{name}-pre-upgrade-16", f"{name}-upgrade-16"):
        n = len(s.rec.creations_of("Job", ns, job))
        s.expect(n == 1, f"job {job} created {n} times")
    s.step("upgrade 16 -> 17 whose pre-upgrade backup fails: 16 keeps serving")
    fail_pre = s.stage(f"{name}-pre-upgrade-17", "fail")
    k.patch("Database", ns, name, {"spec": {"version": "17"}})
    s.wait_job(f"{name}-pre-upgrade-17", "Failed", timeout=180)
    upgrading_reason(s, name, "PreUpgradeBackupFailed")
    s.hold("the old version serving, data untouched", lambda: (old_version_serving(s, name, 3, "16"), same_volumes(s, name, vols)))
    s.step("retry (delete the failed Job); now the restore fails: 16 serves again")
    s.unstage(fail_pre)
    fail_restore = s.stage(f"{name}-upgrade-17", "fail")
    k.delete("Job", ns, f"{name}-pre-upgrade-17")
    s.wait_job(f"{name}-upgrade-17", "Failed", timeout=240)
    upgrading_reason(s, name, "UpgradeFailed")
    s.wait("the old version serving again", lambda: old_version_serving(s, name, 3, "16"), timeout=120)
    same_volumes(s, name, vols)
    s.hold("the old version serving, data untouched", lambda: (old_version_serving(s, name, 3, "16"), same_volumes(s, name, vols)))
    s.step("retry the restore (delete the failed Job): 17 runs")
    s.unstage(fail_restore)
    k.delete("Job", ns, f"{name}-upgrade-17")
    db_running(s, name, 3, "17", timeout=240)
    db_services(s, name, 3)
    same_volumes(s, name, vols)
    s.wait("the same Services, Secrets, ConfigMap and EndpointSlice", lambda: same_held_objects(s, held, owner), timeout=1)
    s.step("delete under Snapshot: one snapshot, then volumes, StatefulSet and parent gone")
    k.delete("Database", ns, name)
    s.wait_job_seen(f"{name}-snapshot", "Succeeded")
    db_gone(s, name)
    n = len(s.rec.creations_of("Job", ns, f"{name}-snapshot"))
    s.expect(n == 1, f"snapshot job created {n} times")
    n = len(s.rec.creations_of("StatefulSet", ns, name))
    s.expect(n == 1, f"StatefulSet created {n} times")


def scenario_snapshot_fails(s):
    k, ns, name = s.k, s.ns, "ledger"
    s.step("create a Database (16, small, Snapshot)")
    k.apply(database(ns, name, "16"))
    db_running(s, name, 1, "16")
    vols = volumes(s, name)
    sts_uid = s.k.get("StatefulSet", ns, name)["metadata"]["uid"]
    s.step("delete while its snapshot fails: nothing is deleted")
    fail = s.stage(f"{name}-snapshot", "fail")
    k.delete("Database", ns, name)
    s.wait_job(f"{name}-snapshot", "Failed", timeout=180)

    def intact():
        db = s.parent("Database", name)
        need(db["metadata"].get("deletionTimestamp"), "not deleting")
        sts = s.k.get("StatefulSet", ns, name)
        need(sts and sts["metadata"]["uid"] == sts_uid, "StatefulSet deleted or replaced")
        same_volumes(s, name, vols)
        need((db.get("status") or {}).get("phase") == "Deleting", f"phase {(db.get('status') or {}).get('phase')}")

    s.hold("StatefulSet, volumes and parent intact", intact)
    s.step("retry: delete the failed snapshot Job; the snapshot succeeds and deletion finishes")
    s.unstage(fail)
    s.rec.allow_recreation("Job", ns, f"{name}-snapshot")
    k.delete("Job", ns, f"{name}-snapshot")
    db_gone(s, name)
    n = len(s.rec.creations_of("Job", ns, f"{name}-snapshot"))
    s.expect(n == 2, f"snapshot job created {n} times, want 2 (the failed one and the retry)")


def scenario_retain(s):
    k, ns, name = s.k, s.ns, "archive"
    s.step("create a Database (16, medium, Retain)")
    k.apply(database(ns, name, "16", "medium", policy="Retain"))
    db_running(s, name, 2, "16")
    vols = volumes(s, name)
    s.step("delete: StatefulSet and parent go, volumes stay")
    k.delete("Database", ns, name)
    db_gone(s, name, volumes_too=False)
    s.hold("volumes kept", lambda: same_volumes(s, name, vols))
    s.step("clean up the retained volumes (by hand, as a user would)")
    for v in vols:
        s.rec.allow_pvc_delete(ns, v)
        k.delete("PersistentVolumeClaim", ns, v)


def scenario_delete(s):
    k, ns, name = s.k, s.ns, "scratch"
    s.step("create a Database (16, large, Delete)")
    k.apply(database(ns, name, "16", "large", policy="Delete"))
    db_running(s, name, 3, "16")
    # Issue 18: the StatefulSet controller never hands the claim of an
    # ordinal scaled away to the StatefulSet, so deleting it left
    # data-scratch-2 behind and the Database waited for ever.
    s.step("scale to medium: data-scratch-2 stays, no pod uses it")
    k.apply(database(ns, name, "16", "medium", policy="Delete"))
    db_running(s, name, 2, "16")
    need(len(volumes(s, name)) == 3, f"volumes {sorted(volumes(s, name))}, want 3 after the scale-down")
    s.step("delete: StatefulSet, every volume (the scaled-away one too) and parent gone, no snapshot")
    k.delete("Database", ns, name)
    db_gone(s, name)
    s.expect(not s.rec.creations_of("Job", ns, f"{name}-snapshot"), "a snapshot job was created under Delete")


# ---- Faults -------------------------------------------------------------------------
def scenario_invalid_spec(s):
    k, ns, name = s.k, s.ns, "hourly"
    s.step("a valid Backup and its CronJob")
    make_target(s, "pgx")
    k.apply({"apiVersion": GROUP, "kind": "Backup", "metadata": {"name": name, "namespace": ns}, "spec": backup_spec("15 * * * *", "pgx")})
    b, cron = backup_state(s, name, "15 * * * *", False, True, "Scheduled")
    s.step("a schedule only the hook can refuse (minute 61): Warning event, CronJob untouched")
    refusal = s.rec.expect_refusal("backup", f"{ns}/{name}")
    window = s.rec.quiet(f"the refused spec of Backup {ns}/{name}", [b["metadata"]["uid"]])
    k.patch("Backup", ns, name, {"spec": {"schedule": "61 * * * *"}})

    def warned():
        events = k.list("Event", ns)
        mine = [
            e
            for e in events
            if e.get("involvedObject", {}).get("uid") == b["metadata"]["uid"] and e.get("type") == "Warning"
        ]
        need(mine, "no Warning event on the Backup yet")
        text = " | ".join(e.get("message", "") for e in mine)
        need("spec.schedule" in text and "61" in text, f"Warning events do not carry our message: {text[:300]}")
        return text

    text = s.wait("a Warning event with the hook's message", warned, timeout=60)
    say(f"[{s.title}] event: {text[:240]}")
    now = k.get("CronJob", ns, f"{name}-backup")
    s.expect(now["metadata"]["resourceVersion"] == cron["metadata"]["resourceVersion"], "the CronJob changed while the spec was refused")
    s.step("fix the schedule: the loop resumes")
    k.patch("Backup", ns, name, {"spec": {"schedule": "45 * * * *"}})
    backup_state(s, name, "45 * * * *", False, True, "Scheduled")
    s.rec.close(window)
    refusal["end"] = time.time()
    k.delete("Backup", ns, name)


def scenario_hook_outage(s):
    k, ns, suite = s.k, s.ns, s.suite
    s.step("a WebServer, a Memcached, a Backup and a Database, converged")
    k.apply({"apiVersion": GROUP, "kind": "WebServer", "metadata": {"name": "web", "namespace": ns}, "spec": {"replicas": 2}})
    k.apply({"apiVersion": GROUP, "kind": "Memcached", "metadata": {"name": "mc", "namespace": ns}, "spec": {"size": 2}})
    make_target(s, "pgo")
    k.apply({"apiVersion": GROUP, "kind": "Backup", "metadata": {"name": "bk", "namespace": ns}, "spec": backup_spec("0 2 * * *", "pgo")})
    k.apply(database(ns, "db", "16", "small", policy="Delete"))
    webserver_converged(s, "web", 2, "nginxdemos/hello")
    memcached_converged(s, "mc", 2)
    backup_state(s, "bk", "0 2 * * *", False, True, "Scheduled")
    db_running(s, "db", 1, "16")
    parents = [s.parent(kind, n) for kind, n in (("WebServer", "web"), ("Memcached", "mc"), ("Backup", "bk"), ("Database", "db"))]
    uids = [p["metadata"]["uid"] for p in parents]
    vols = volumes(s, "db")
    held = held_objects(s, uids)
    s.step("opshooks killed; every parent changes meanwhile: nothing created or deleted")
    window = s.rec.quiet("the opshooks outage", uids)
    suite.opshooks.kill()
    k.patch("WebServer", ns, "web", {"spec": {"replicas": 4}})
    k.patch("Memcached", ns, "mc", {"spec": {"size": 3}})
    k.patch("Backup", ns, "bk", {"spec": {"schedule": "0 4 * * *"}})
    k.patch("Database", ns, "db", {"spec": {"size": "medium"}})

    def untouched():
        need(len(s.children("Pod", uids[0])) == 2, "WebServer pods changed")
        need(k.get("Deployment", ns, "mc")["spec"]["replicas"] == 2, "Deployment changed")
        need(k.get("CronJob", ns, "bk-backup")["spec"]["schedule"] == "0 2 * * *", "CronJob changed")
        need(k.get("StatefulSet", ns, "db")["spec"]["replicas"] == 1, "StatefulSet changed")
        same_volumes(s, "db", vols)
        same_held_objects(s, held, uids)

    try:
        s.hold("children untouched during the outage", untouched)
    finally:
        # Back even when the hold failed: every later scenario needs it.
        s.rec.close(window)
        s.step("opshooks back: everything converges within seconds")
        suite.opshooks.start()
    back = time.time()
    webserver_converged(s, "web", 4, "nginxdemos/hello")
    memcached_converged(s, "mc", 3)
    backup_state(s, "bk", "0 4 * * *", False, True, "Scheduled")
    db_running(s, "db", 2, "16")
    took = time.time() - back
    say(f"[{s.title}] converged {took:.1f}s after opshooks came back")
    s.expect(took <= 45, f"took {took:.0f}s to converge after opshooks came back (want <= 45)")
    same_volumes(s, "db", vols)
    s.wait("the same Services, Secrets, ConfigMaps and EndpointSlice after the outage", lambda: same_held_objects(s, held, uids), timeout=1)
    s.step("clean up")
    for kind, n in (("WebServer", "web"), ("Memcached", "mc"), ("Backup", "bk"), ("Database", "db")):
        k.delete(kind, ns, n)
    db_gone(s, "db")


def kill_while_running(s, job):
    """Kills Metacontroller, then starts it again, while Job job runs: the
    Job is checked right before and right after the kill, or the scenario
    would pass having killed it before or after what it is about."""

    def running(when):
        state = job_outcome(s.job(job)) or "gone"
        s.expect(state == "Running", f"job {job} is {state} {when} the kill, want Running")

    running("before")
    s.suite.metacontroller.kill()
    try:
        running("right after")
        time.sleep(3)
    finally:
        s.suite.metacontroller.start(s.suite.mc_extra)


def scenario_metacontroller_restarts(s):
    k, ns, name = s.k, s.ns, "mig"
    s.step("a Database (15, medium, Snapshot)")
    k.apply(database(ns, name, "15", "medium"))
    db_running(s, name, 2, "15")
    vols = volumes(s, name)
    s.step("upgrade to 16; Metacontroller killed while the restore Job runs, then restarted")
    slow = s.stage(f"{name}-upgrade-16", "succeed", delay_ms=10000)
    k.patch("Database", ns, name, {"spec": {"version": "16"}})
    s.wait("the restore Job", lambda: need(s.job(f"{name}-upgrade-16"), "not yet"), timeout=180)
    kill_while_running(s, f"{name}-upgrade-16")
    db_running(s, name, 2, "16", timeout=240)
    s.unstage(slow)
    same_volumes(s, name, vols)
    for job in (f"{name}-pre-upgrade-16", f"{name}-upgrade-16"):
        n = len(s.rec.creations_of("Job", ns, job))
        s.expect(n == 1, f"job {job} created {n} times")
    s.step("delete under Snapshot; Metacontroller killed while the snapshot runs, then restarted")
    slow = s.stage(f"{name}-snapshot", "succeed", delay_ms=10000)
    k.delete("Database", ns, name)
    s.wait("the snapshot Job", lambda: need(s.job(f"{name}-snapshot"), "not yet"), timeout=120)
    kill_while_running(s, f"{name}-snapshot")
    try:
        db_gone(s, name)
    finally:
        s.unstage(slow)
    n = len(s.rec.creations_of("Job", ns, f"{name}-snapshot"))
    s.expect(n == 1, f"snapshot job created {n} times")


def scenario_fidelity(s):
    # The simulator run beside the real loop: tests/e2e/fidelity.py.
    import fidelity

    fidelity.scenario_fidelity(s)


LIFECYCLE = [
    ("WebServer", "web", scenario_webserver),
    ("Memcached", "mc", scenario_memcached),
    ("Backup", "bk", scenario_backup),
    ("Database lifecycle", "db", scenario_database),
    ("Database delete, snapshot fails", "dbsnap", scenario_snapshot_fails),
    ("Database delete, Retain", "dbkeep", scenario_retain),
    ("Database delete, Delete", "dbdrop", scenario_delete),
    ("Invalid spec refused", "invalid", scenario_invalid_spec),
    ("Simulator matches the real loop", "fid", scenario_fidelity),
]
FAULTS = [
    ("opshooks outage", "outage", scenario_hook_outage),
    ("Metacontroller restarts", "restart", scenario_metacontroller_restarts),
]
# Run only when --only names them.
ON_REQUEST = [
    ("WebServer created and deleted", "web-brief", scenario_webserver_brief),
]


# ---- the suite ------------------------------------------------------------------------
class Suite:
    def __init__(self, args):
        env = {}
        with open(f"{args.dir}/env") as f:
            for line in f:
                if line.startswith("export OPSHOOKS_E2E_APISERVER="):
                    env["server"] = line.split("=", 1)[1].strip().strip("'")
        self.kube = Kube(env["server"], f"{args.dir}/pki")
        self.dir = args.dir
        ops_log = f"{args.dir}/opshooks-loop.log"
        mc_log = f"{args.dir}/metacontroller.log"
        self.recorder = Recorder(self.kube, ops_log, mc_log)
        tls = None
        if args.ca_file:
            tls = ssl.create_default_context(cafile=args.ca_file)
            if args.client_cert:
                tls.load_cert_chain(*args.client_cert.split(","))
        self.opshooks = Proc(
            "opshooks",
            [args.opshooks, "--listen", f"127.0.0.1:{args.port}", "--log-format", "json", *args.opshooks_arg],
            ops_log,
            f"{'https' if tls else 'http'}://127.0.0.1:{args.port}/readyz",
            tls,
        )
        self.mc_extra = []
        self.metacontroller = Proc(
            "metacontroller",
            [
                args.metacontroller,
                f"--kubeconfig={args.dir}/kubeconfig",
                "--discovery-interval=2s",
                f"--metrics-address=127.0.0.1:{args.mc_ports[0]}",
                f"--health-probe-bind-address=127.0.0.1:{args.mc_ports[1]}",
                "--client-go-qps=100",
                "--client-go-burst=200",
            ],
            mc_log,
            f"http://127.0.0.1:{args.mc_ports[1]}/readyz",
        )
        self.results = []
        self.resync_seconds = None

    def resync(self):
        """The longest resyncPeriodSeconds of the chart's CompositeControllers
        (loop_chart in lib.sh sets it): how long a parent can go unsynced."""
        if self.resync_seconds is None:
            periods = [cc["spec"].get("resyncPeriodSeconds") or 0 for cc in self.kube.list("CompositeController")]
            if not periods or not all(periods):
                raise Failed(f"a CompositeController without a resync period: {periods}")
            self.resync_seconds = max(periods)
        return self.resync_seconds

    def namespace(self, ns):
        if self.kube.get("Namespace", None, ns) is None:
            self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        deadline = time.time() + 60
        while self.kube.get("ServiceAccount", ns, "default") is None:
            if time.time() > deadline:
                raise Failed(f"namespace {ns} has no default ServiceAccount")
            time.sleep(0.3)

    def force_cleanup(self, ns):
        """After a failed scenario: drop its parents (finalizers too), so a
        stuck one stops driving the loop; what that deletes is on us."""
        self.recorder.allow_pvc_delete(ns)
        for kind in ("WebServer", "Memcached", "Backup", "Database"):
            try:
                for obj in self.kube.list(kind, ns):
                    name = obj["metadata"]["name"]
                    self.kube.delete(kind, ns, name)
                    if obj["metadata"].get("finalizers") or kind == "Database":
                        self.kube.patch(kind, ns, name, {"metadata": {"finalizers": None}})
            except KubeError:
                pass

    def run_batch(self, batch, strategy, suffix):
        scenarios = [Scenario(self, title, fn, f"{short}-{suffix}", strategy) for title, short, fn in batch]
        threads = [threading.Thread(target=sc.run, name=sc.title) for sc in scenarios]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.results.extend(scenarios)

    def run(self, strategies, only):
        self.recorder.start()
        self.opshooks.start()
        total = time.time()
        for strategy in strategies:
            self.mc_extra = [f"--apply-strategy={strategy}"]
            self.metacontroller.start(self.mc_extra)
            suffix = "dyn" if strategy == "dynamic-apply" else "ssa"
            lifecycle = [sc for sc in LIFECYCLE if not only or sc[1] in only]
            lifecycle += [sc for sc in ON_REQUEST if sc[1] in only]
            faults = [sc for sc in FAULTS if (not only or sc[1] in only)]
            say(f"##### Metacontroller --apply-strategy={strategy}: {len(lifecycle)} scenarios in parallel")
            self.run_batch(lifecycle, strategy, suffix)
            # One at a time: each kills a process every scenario depends on.
            for sc in faults:
                self.run_batch([sc], strategy, suffix)
            self.metacontroller.kill(signal.SIGTERM)
        self.recorder.finish()
        self.opshooks.kill(signal.SIGTERM)
        return self.report(time.time() - total)

    def report(self, seconds):
        rec = self.recorder
        print()
        print(f"{'scenario':<34} {'apply strategy':<18} {'steps':>5} {'seconds':>8}  result")
        for sc in self.results:
            print(f"{sc.title:<34} {sc.strategy:<18} {sc.steps:>5} {sc.seconds:>8.0f}  {sc.result}")
        inv = "PASS" if not rec.violations else f"FAIL ({len(rec.violations)})"
        print(f"{'invariants (whole run)':<34} {'both' if len(set(s.strategy for s in self.results)) > 1 else '':<18} {'':>5} {seconds:>8.0f}  {inv}")
        calls = sum(rec.hook_calls.values())
        refused = sum(n for (_, _, status), n in rec.hook_calls.items() if status != 200)
        print(
            f"\nhook calls logged by opshooks: {calls} ({refused} not 200); "
            f"watch relists: {rec.relists} ({rec.synthesized} deletions found by them)"
        )
        for sc in self.results:
            if sc.error:
                print(f"FAIL {sc.title} ({sc.strategy}) at step {sc.steps}: {sc.error}")
        for v in rec.report_violations():
            print(f"INVARIANT {v}")
        failed = sum(1 for sc in self.results if sc.result != "PASS")
        passed = len(self.results) - failed
        ok = failed == 0 and not rec.violations and calls > 0
        print(f"control loop: {passed} passed, {failed} failed, {len(rec.violations)} invariant violations")
        return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument("--opshooks", required=True)
    parser.add_argument("--metacontroller", required=True)
    parser.add_argument("--mc-ports", required=True, help="metrics,health ports")
    parser.add_argument("--strategies", default="dynamic-apply,server-side-apply")
    parser.add_argument("--only", default="", help="comma-separated scenario short names")
    parser.add_argument("--opshooks-arg", action="append", default=[], help="one more opshooks flag, e.g. --opshooks-arg=--tls-cert-file=F")
    parser.add_argument("--ca-file", help="opshooks serves HTTPS with a certificate of this CA")
    parser.add_argument("--client-cert", help="CERT,KEY: the client certificate opshooks requires")
    args = parser.parse_args()
    args.mc_ports = args.mc_ports.split(",")
    suite = Suite(args)
    try:
        ok = suite.run(args.strategies.split(","), set(filter(None, args.only.split(","))))
    finally:
        for proc in (suite.metacontroller, suite.opshooks):
            if proc.popen and proc.popen.poll() is None:
                proc.kill(signal.SIGTERM)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
