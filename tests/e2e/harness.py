"""The harness of the control-loop suite: the processes it starts and kills,
the waits and checks a scenario is written with, the kwok stages that decide
how a Job's pods end, and the suite that runs the scenarios and reports.

loop.py lists the scenarios (one file an operator under scenarios/, plus the
faults and the simulator's twin) and calls main(); each scenario is a
function of one Scenario, in its own namespace.
"""

import argparse
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import traceback
import urllib.request

from invariants import RW_GRACE, Recorder
from kube import Kube, KubeError, controller_uid, job_outcome, path as kube_path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from pyhelpers import ServerProcess, StartFailed  # noqa: E402

GROUP = "opshooks.io/v1alpha1"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
NOT_READY_LABEL = "e2e.kwok.x-k8s.io/not-ready"
FAIL_LABEL = "e2e.kwok.x-k8s.io/fail"
# Marks a Job pod whose containers the suite ran (run_job_as_its_pod).
PLAYED_ANNOTATION = "e2e.opshooks.io/played"
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
        self.server = None  # the ServerProcess of the current run

    def start(self, extra=()):
        with open(self.log, "ab") as f:
            f.write(f"===== e2e: {self.name} started {time.strftime('%H:%M:%S')} =====\n".encode())
            f.flush()
            self.server = ServerProcess(self.name, [*self.argv, *extra], f)
        try:
            self.server.wait_ready(self.ready, 60, 0.2)
        except StartFailed as err:
            raise Failed(f"{err} (readiness: {self.ready_url})") from None

    def ready(self):
        with urllib.request.urlopen(self.ready_url, timeout=2, context=self.tls) as r:
            return r.status == 200

    def running(self):
        return self.server is not None and self.server.running()

    def kill(self, sig=signal.SIGKILL):
        if self.server:
            self.server.stop(sig, grace=30)
        with open(self.log, "ab") as f:
            f.write(f"===== e2e: {self.name} stopped {time.strftime('%H:%M:%S')} =====\n".encode())


def kube_for(dir):
    """A client of the cluster that cluster.sh brought up in dir, as its admin."""
    with open(f"{dir}/env") as f:
        for line in f:
            if line.startswith("export OPSHOOKS_E2E_APISERVER="):
                return Kube(line.split("=", 1)[1].strip().strip("'"), f"{dir}/pki")
    raise Failed(f"{dir}/env names no API server")


def metacontroller_proc(args, log, flags):
    """Metacontroller against the cluster in args.dir, its metrics and health
    on args.mc_ports, with `flags` (its client limits, say) on top."""
    return Proc(
        "metacontroller",
        [
            args.metacontroller,
            f"--kubeconfig={args.dir}/kubeconfig",
            "--discovery-interval=2s",
            f"--metrics-address=127.0.0.1:{args.mc_ports[0]}",
            f"--health-probe-bind-address=127.0.0.1:{args.mc_ports[1]}",
            *flags,
        ],
        log,
        f"http://127.0.0.1:{args.mc_ports[1]}/readyz",
    )


def namespace(kube, ns):
    """Creates namespace ns (unless it exists) and waits for its default
    ServiceAccount, without which pods are refused."""
    if kube.get("Namespace", None, ns) is None:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    deadline = time.time() + 60
    while kube.get("ServiceAccount", ns, "default") is None:
        if time.time() > deadline:
            raise Failed(f"namespace {ns} has no default ServiceAccount")
        time.sleep(0.3)


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
            namespace(self.k, self.ns)
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

    def columns(self, resource, name):
        """What `kubectl get RESOURCE NAME -o wide` prints, as {HEADER: cell}:
        the printer columns as the API server computes them from the CRD."""
        lines = self.kubectl("get", resource, name, "-o", "wide").splitlines()
        need(len(lines) == 2, f"kubectl get {resource} {name} printed {lines}")
        # Cells start where their header does; an empty one prints nothing.
        header, row = lines
        starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
        ends = starts[1:] + [None]
        return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, ends)}

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

    def stage(self, job, outcome, delay_ms=0, message=None):
        """A kwok Stage that decides how the pods of one Job end (a pod that
        succeeds leaves `message` in its containers' termination logs)."""
        obj = job_stage(self.ns, job, outcome, delay_ms, message)
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


def job_stage(ns, job, outcome, delay_ms, message=None):
    """Fail (from Pending or Running) or slowly succeed (once Running) the
    pods of Job ns/job, a success leaving `message` as its containers'
    termination message. Its weight wins over the shared stages' (weight 0)
    whenever both match a pod."""
    phases = ["Pending", "Running"] if outcome == "fail" else ["Running"]
    template = FAIL_TEMPLATE if outcome == "fail" else SUCCEED_TEMPLATE
    if message is not None:
        template = template.replace("reason: Completed,", f"reason: Completed, message: {json.dumps(message)},")
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
                        "template": template,
                    }
                }
            ],
        },
    }


# ---- a Job's pod, played by the suite ---------------------------------------------------
def sa_kubeconfig(s, ns, sa, path, seconds=600):
    """Writes to `path` a kubeconfig that acts as ServiceAccount ns/sa with a
    fresh token (TokenRequest, as `kubectl create token`), its default
    namespace ns as in a pod of that namespace."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}}
    status, body = s.k.call("POST", kube_path("ServiceAccount", ns, sa, sub="token"), request)
    if status != 201:
        raise KubeError(status, body, f"token for ServiceAccount {ns}/{sa}")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": f"https://{s.k.host}:{s.k.port}", "certificate-authority": f"{s.suite.dir}/pki/ca.crt"}}],
        "users": [{"name": sa, "user": {"token": body["status"]["token"]}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": sa, "namespace": ns}}],
        "current-context": "e2e",
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)


def hold_job_pods(s, prefix):
    """A kwok Stage that keeps the running pods of this namespace's Jobs
    named prefix* from finishing until run_job_as_its_pod has played them:
    without it, kwok's shared stage would succeed such a pod a second after
    it runs, before the work it stands for was done. Its weight wins over
    the shared stages' (weight 0); it only emits an event. Returns its name,
    for s.unstage."""
    name = f"e2e-hold-{s.ns}-{prefix}".rstrip("-")[:63]
    s.k.apply(
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": {"name": name},
            "spec": {
                "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                "selector": {
                    "matchExpressions": [
                        {"cel": {"expression": "!has(self.metadata.deletionTimestamp)"}},
                        {"cel": {"expression": f"self.metadata.namespace == {json.dumps(s.ns)}"}},
                        {"cel": {"expression": "has(self.status.phase) && self.status.phase == 'Running'"}},
                        {"cel": {"expression": f"has(self.metadata.labels) && '{JOB_NAME_LABEL}' in self.metadata.labels && self.metadata.labels['{JOB_NAME_LABEL}'].startsWith({json.dumps(prefix)}) && !('{FAIL_LABEL}' in self.metadata.labels)"}},
                        {"cel": {"expression": f"!has(self.metadata.annotations) || !('{PLAYED_ANNOTATION}' in self.metadata.annotations)"}},
                    ]
                },
                "weight": 100,
                "steps": [{"event": {"type": "Normal", "reason": "HeldByTheSuite", "message": "runs until the e2e suite has played its containers"}}],
            },
        }
    )
    return name


def run_job_as_its_pod(s, ns, job_name, timeout=60):
    """kwok runs no containers, so the suite plays the pod of Job ns/job_name
    for real: once the Job has a pod (so its ServiceAccount exists), each of
    its containers (init containers first), in order, runs here as its
    command and args, with the kubectl the suite uses and a kubeconfig of the
    Job's serviceAccountName, so the Job's own RBAC decides what it may do.
    Only kubectl containers can be played. The Job's unfinished pods are then
    marked played (a pod hold_job_pods holds then succeeds) or, on a failure,
    labelled to fail. Returns [(container, output)]; raises Failed at the
    first container that exits non-zero, with its output."""
    job = s.k.get("Job", ns, job_name)
    if job is None:
        raise Failed(f"job {ns}/{job_name} not found")
    spec = job["spec"]["template"]["spec"]
    sa = spec.get("serviceAccountName") or "default"
    containers = [*spec.get("initContainers", []), *spec["containers"]]
    for c in containers:
        if (c.get("command") or [None])[0] != "kubectl":
            raise Failed(f"job {ns}/{job_name}: container {c['name']} runs {c.get('command')}, not kubectl: the suite cannot play it")

    def pods():
        return s.k.list("Pod", ns, f"{JOB_NAME_LABEL}={job_name}")

    deadline = time.time() + timeout
    while not pods():
        if time.time() > deadline:
            raise Failed(f"job {ns}/{job_name} made no pod in {timeout}s")
        time.sleep(0.3)
    kubeconfig = os.path.join(s.suite.dir, f"sa-{ns}-{job_name}.kubeconfig")
    sa_kubeconfig(s, ns, sa, kubeconfig)
    env = {"PATH": os.environ["PATH"], "HOME": s.suite.dir, "KUBECONFIG": kubeconfig}
    outputs, failure = [], None
    try:
        for c in containers:
            argv = [*c["command"], *c.get("args", [])]
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
            output = (proc.stdout + proc.stderr).strip()
            if proc.returncode != 0:
                failure = f"job {ns}/{job_name} container {c['name']} as ServiceAccount {sa} exited {proc.returncode}: {output}"
                break
            outputs.append((c["name"], output))
    finally:
        os.unlink(kubeconfig)
    mark = {"metadata": {"labels": {FAIL_LABEL: "true"}}} if failure else {"metadata": {"annotations": {PLAYED_ANNOTATION: "true"}}}
    for pod in pods():
        if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        try:
            s.k.patch("Pod", ns, pod["metadata"]["name"], mark)
        except KubeError as err:
            if err.status != 404:
                raise
    if failure:
        raise Failed(failure)
    return outputs


# ---- the suite ------------------------------------------------------------------------
class Suite:
    """Runs the scenarios, each a (title, short name, function): the
    lifecycle ones in parallel, then the faults one at a time, under each
    apply strategy; the on-request ones only when --only names them."""

    def __init__(self, args, lifecycle, faults, on_request):
        self.lifecycle, self.faults, self.on_request = lifecycle, faults, on_request
        self.kube = kube_for(args.dir)
        self.dir = args.dir
        # build-tools.sh's bin directory, where Metacontroller is.
        self.tools = os.path.dirname(args.metacontroller)
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
        self.metacontroller = metacontroller_proc(args, mc_log, ["--client-go-qps=100", "--client-go-burst=200"])
        self.results = []
        # Figures a scenario measured (an RTO, commits lost), printed with the table.
        self.figures = []
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
            lifecycle = [sc for sc in self.lifecycle if not only or sc[1] in only]
            lifecycle += [sc for sc in self.on_request if sc[1] in only]
            faults = [sc for sc in self.faults if (not only or sc[1] in only)]
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
        if rec.rw_lags:
            print(
                f"read-write Services apart from their role ConfigMap: {len(rec.rw_lags)} times, "
                f"longest {max(rec.rw_lags):.2f}s (allowed {RW_GRACE:.0f}s)"
            )
        if rec.rw_waits:
            print(
                f"read-write Services on the old primary during a switchover: {len(rec.rw_waits)} times, "
                f"longest {max(rec.rw_waits):.2f}s (until the promote Job succeeded)"
            )
        for figure in self.figures:
            print(f"measured: {figure}")
        verdict = [f"FAIL {sc.title} ({sc.strategy}) at step {sc.steps}: {sc.error}" for sc in self.results if sc.error]
        verdict += [f"INVARIANT {v}" for v in rec.report_violations()]
        failed = sum(1 for sc in self.results if sc.result != "PASS")
        passed = len(self.results) - failed
        ok = failed == 0 and not rec.violations and calls > 0
        verdict.append(f"control loop: {passed} passed, {failed} failed, {len(rec.violations)} invariant violations")
        print("\n".join(verdict))
        # lib.sh's loop_down prints this again after the cluster's logs, so
        # the last lines of a failed run say what failed, not what a log held.
        with open(f"{self.dir}/verdict", "w") as f:
            f.write("\n".join(verdict) + "\n")
        return ok


def loop_parser(description):
    """The options lib.sh's loop_run passes: the cluster's DIR, the port of
    opshooks, both binaries and Metacontroller's metrics and health ports."""
    parser = argparse.ArgumentParser(description=description.split("\n")[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument("--opshooks", required=True)
    parser.add_argument("--metacontroller", required=True)
    parser.add_argument("--mc-ports", required=True, type=lambda v: v.split(","), help="metrics,health ports")
    return parser


def main(description, lifecycle, faults, on_request):
    parser = loop_parser(description)
    parser.add_argument("--strategies", default="dynamic-apply,server-side-apply")
    parser.add_argument("--only", default="", help="comma-separated scenario short names")
    parser.add_argument("--opshooks-arg", action="append", default=[], help="one more opshooks flag, e.g. --opshooks-arg=--tls-cert-file=F")
    parser.add_argument("--ca-file", help="opshooks serves HTTPS with a certificate of this CA")
    parser.add_argument("--client-cert", help="CERT,KEY: the client certificate opshooks requires")
    args = parser.parse_args()
    suite = Suite(args, lifecycle, faults, on_request)
    try:
        ok = suite.run(args.strategies.split(","), set(filter(None, args.only.split(","))))
    finally:
        for proc in (suite.metacontroller, suite.opshooks):
            if proc.running():
                proc.kill(signal.SIGTERM)
    sys.exit(0 if ok else 1)

