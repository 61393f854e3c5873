"""Real PostgreSQL in the real loop (issue 33): a Database whose instances
and Jobs run as processes on proc-node-0 (procnode.py), not played by kwok.

dbreal: its namespace places every pod on the process node (the
PodNodeSelector and PodTolerationRestriction annotations: the Database
places its instances by spec.affinity, but not its Jobs). A small Database
(one instance, policy Delete) is created with spec.affinity's nodeSelector
and tolerations for that node; the image's entrypoint initializes it, the
real init Job creates the application user and database, and a client on
the node writes through the read-write Service's cluster IP (kube-proxy's
rules) as the application user: every row acknowledged must be there when
read back. Grown to medium, the new standby clones the primary through the
read-write Service's name (DNS, kube-proxy) and streams from it: every
acknowledged row is read back from it through the read-only Service. Its
claims are of the StorageClass `expandable` (a kwok Stage plays the
external resizer, as in dbgrow): raised 1Gi -> 2Gi, the grow Job runs on
the node, its kubectl reaching the API server as the Job's ServiceAccount,
which may patch only those claims; both grow, StorageResized is True, the
Job and its access go, and every row is still served. Then the exporter
(monitored), and the Database is deleted with its volumes.

First a kubectl pod (the kubectl image's stand-in is the tools' kubectl)
runs `kubectl auth whoami` with its projected ServiceAccount token through
the `kubernetes` Service's cluster IP.

Run it with OPSHOOKS_E2E_PROC_NODE=1 tests/e2e/loop.sh --only dbreal."""

import base64
import contextlib
import json
import os
import subprocess
import time

from harness import Failed, need
from kube import condition
from scenarios.database import database, db_gone, db_running
from scenarios.storage import EXPANDABLE, claim_names, grow_job
from scenarios.storage import grown as grown_claims

NODE = "proc-node-0"
POOL_KEY = "opshooks.io/e2e-node"
POOL = "proc"
TOLERATION = {"key": POOL_KEY, "operator": "Equal", "value": POOL, "effect": "NoSchedule"}


def node_ns(s):
    with open(f"{s.suite.dir}/procnode/netns-prefix") as f:
        return f.read().strip() + "-node"


def on_the_node(s, argv, env=None, timeout=30):
    """argv run in the node's network namespace (its traffic to a Service
    goes through kube-proxy's rules): (exit code, output)."""
    proc = subprocess.run(["ip", "netns", "exec", node_ns(s), *argv], env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def app_login(s, name):
    secret = s.k.get("Secret", s.ns, f"{name}-credentials")
    need(secret is not None, f"Secret {name}-credentials missing")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    conn = s.k.get("ConfigMap", s.ns, f"{name}-connection")
    need(conn is not None, f"ConfigMap {name}-connection missing")
    return data["username"], data["password"], conn["data"]["database"]


def psql(s, host, login, sql):
    user, password, dbname = login
    env = {"PATH": "/usr/bin:/bin", "PGHOST": host, "PGUSER": user, "PGPASSWORD": password, "PGDATABASE": dbname, "PGCONNECT_TIMEOUT": "5"}
    return on_the_node(s, ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql], env)


def on_proc_node(s):
    """Every pod of the scenario's namespace placed on the process node."""
    k, ns = s.k, s.ns
    node = k.get("Node", None, NODE)
    if node is None or (condition(node, "Ready") or {}).get("status") != "True":
        raise Failed(f"node {NODE} is not Ready: run with OPSHOOKS_E2E_PROC_NODE=1 (cluster.sh procnode)")
    s.step(f"namespace {ns}: every pod on {NODE}")
    k.patch(
        "Namespace",
        None,
        ns,
        {
            "metadata": {
                "annotations": {
                    "scheduler.alpha.kubernetes.io/node-selector": f"{POOL_KEY}={POOL}",
                    "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps([TOLERATION]),
                }
            }
        },
    )


def container_runs(s, uid, container, name):
    """The file `name` ("log", "termination-log") of each run of a container
    of the pod `uid`, in order (procnode.py keeps every run's; there is no
    `kubectl logs`); a run without it is left out."""
    root = f"{s.suite.dir}/procnode/pods/{uid}/containers/{container}"
    out = []
    for run in sorted(os.listdir(root), key=int) if os.path.isdir(root) else []:
        with contextlib.suppress(OSError), open(f"{root}/{run}/{name}", errors="replace") as f:
            out.append(f.read())
    return out


def container_log(s, uid, container):
    """Every run's output of a container of the pod `uid`."""
    return "".join(container_runs(s, uid, container, "log"))


def fault(s, prefix, what):
    """Every container of the scenario's pods whose name starts with
    `prefix` fails at its start ("fail") or waits to start ("delay") until
    the returned file is removed (procnode.py's Container.fault)."""
    root = f"{s.suite.dir}/procnode/faults/{s.ns}"
    os.makedirs(root, exist_ok=True)
    path = f"{root}/{prefix}"
    with open(path, "w") as f:
        f.write(what + "\n")
    return path


def node_pods_said(s, prefix):
    """What each container of each pod of the scenario's namespace that the
    process node ran, whose name starts with `prefix`, printed, by pod
    name: the node keeps a pod's directory (whose it is, each run's log)
    after the pod is gone."""
    root = f"{s.suite.dir}/procnode/pods"
    said = {}
    for uid in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        with contextlib.suppress(OSError), open(f"{root}/{uid}/pod") as f:
            ns, _, pod = f.read().strip().partition("/")
            if ns == s.ns and pod.startswith(prefix):
                containers = sorted(os.listdir(f"{root}/{uid}/containers"))
                said[pod] = {c: container_log(s, uid, c) for c in containers}
    return said


def kubectl_in_a_pod(s):
    """A kubectl image's container (the tools' kubectl) reaches the API
    server through the `kubernetes` Service with the pod's projected
    ServiceAccount token, as in-cluster kubectl does."""
    s.step("a kubectl pod reaches the API server through the kubernetes Service with its token")
    whoami = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "whoami", "namespace": s.ns},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "kubectl", "image": "rancher/kubectl:v1.34.1", "args": ["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]}],
        },
    }
    # Refused until the namespace's default ServiceAccount exists.
    pod = s.wait("the kubectl pod created", lambda: s.k.create(whoami), 30)

    def done():
        p = s.k.get("Pod", s.ns, "whoami")
        phase = ((p or {}).get("status") or {}).get("phase")
        need(phase in ("Succeeded", "Failed"), f"phase {phase}")
        return phase

    phase = s.wait("the kubectl pod done", done, 60)
    out = container_log(s, pod["metadata"]["uid"], "kubectl").strip()
    want = f"system:serviceaccount:{s.ns}:default"
    s.expect(phase == "Succeeded" and out == want, f"kubectl auth whoami in a pod: {phase}, {out[-300:]!r}, want {want}")
    s.k.delete("Pod", s.ns, "whoami")


def scenario_real_database(s):
    k, ns, name = s.k, s.ns, "real"
    on_proc_node(s)
    kubectl_in_a_pod(s)

    s.step(f"create a small Database (15) placed on the process node, its claims of the StorageClass {EXPANDABLE}")
    db = database(ns, name, "15", "small", policy="Delete")
    db["spec"]["affinity"] = {"nodeSelector": {POOL_KEY: POOL}, "tolerations": [TOLERATION]}
    db["spec"]["storage"] = {"size": "1Gi", "storageClassName": EXPANDABLE}
    k.apply(db)
    db_running(s, name, 1, "15", timeout=300)

    def placed():
        pod = k.get("Pod", ns, f"{name}-0")
        need(pod and pod["spec"].get("nodeName") == NODE, f"{name}-0 on {pod and pod['spec'].get('nodeName')}")
        for p in k.list("Pod", ns, f"batch.kubernetes.io/job-name={name}-init"):
            need(p["spec"].get("nodeName") == NODE, f"init Job pod {p['metadata']['name']} on {p['spec'].get('nodeName')}")
        return pod

    pod = s.wait(f"the instance and the init Job on {NODE}", placed, 30)
    s.expect(pod["status"].get("podIP", "").startswith("10.89."), f"pod IP {pod['status'].get('podIP')} not from the node's range")
    # Run by the process node, not played by kwok: its container ids say so.
    for p in [pod, *k.list("Pod", ns, f"batch.kubernetes.io/job-name={name}-init")]:
        ids = [c.get("containerID", "") for c in p["status"].get("containerStatuses") or []]
        s.expect(ids and all(i.startswith("procnode://") for i in ids), f"pod {p['metadata']['name']} not run by the process node: {ids}")

    s.step("a client writes through the read-write Service as the application user")
    rw = k.get("Service", ns, name)
    cip = rw["spec"]["clusterIP"]
    login = s.wait("the application login", lambda: app_login(s, name), 30)

    def table():
        code, out = psql(s, cip, login, "CREATE TABLE IF NOT EXISTS acked (n int PRIMARY KEY)")
        need(code == 0, f"psql through {cip}: {out}")

    s.wait(f"a connection through {cip}", table, 60, every=1)
    acked = []
    for n in range(1, 51):
        code, out = psql(s, cip, login, f"INSERT INTO acked VALUES ({n}) RETURNING n")
        if code == 0 and out == str(n):
            acked.append(n)
    s.expect(len(acked) == 50, f"only {len(acked)} of 50 inserts acknowledged")
    code, out = psql(s, cip, login, "SELECT n FROM acked ORDER BY n")
    s.expect(code == 0, f"read back: {out}")
    present = {int(x) for x in out.split()}
    lost = [n for n in acked if n not in present]
    s.expect(not lost, f"acknowledged rows missing: {lost}")

    s.step("medium: the standby clones the primary through the read-write Service (DNS, kube-proxy) and streams")
    k.patch("Database", ns, name, {"spec": {"size": "medium"}})
    grown = db_running(s, name, 2, "15", timeout=300)
    # One planned switchover (epoch 0 to 1): a refused one is followed by a
    # re-designation and a failover, which the final state alone hides.
    st = grown.get("status") or {}
    s.expect(st.get("primaryEpoch") == 1, f"primaryEpoch {st.get('primaryEpoch')}, want 1 (one switchover); lastFailover {st.get('lastFailover')}")
    ro = k.get("Service", ns, f"{name}-ro")["spec"]["clusterIP"]

    def replicated():
        code, out = psql(s, ro, login, "SELECT pg_is_in_recovery(), count(*) FROM acked")
        need(code == 0, f"psql through the read-only Service {ro}: {out}")
        need(out == f"t|{len(acked)}", f"the standby answers {out!r}, want t|{len(acked)}")

    s.wait("every acknowledged row on the standby, read through the read-only Service", replicated, 60, every=1)

    s.step("storage 1Gi -> 2Gi: the grow Job's kubectl runs on the node as its ServiceAccount and patches both claims")
    k.patch("Database", ns, name, {"spec": {"storage": {"size": "2Gi"}}})
    job = grow_job(s, name, [f"grow-{i}" for i in range(2)], claim_names(name, 2), "2Gi")
    grown_claims(s, name, 2, "2Gi", job)
    # The Job and its pod are gone by now: the node's record of the pod
    # says what ran, kubectl's own words from each container.
    said = node_pods_said(s, f"{job}-")
    want = {f"grow-{i}": f"persistentvolumeclaim/data-{name}-{i} patched\n" for i in range(2)}
    s.expect(list(said.values()) == [want], f"what the node's runs of {job} said: {said}, want one pod saying {want}")
    db_running(s, name, 2, "15")
    s.wait("every acknowledged row still on the standby after the growth", replicated, 60, every=1)

    monitored(s, name)

    s.step("delete it (policy Delete): the instances stopped, the volumes gone")
    k.delete("Database", ns, name)
    db_gone(s, name, timeout=180)


def monitored(s, name):
    """spec.monitoring: the real postgres_exporter beside each instance,
    under the role the role Job made, scraped on the pod's port 9187 as a
    Prometheus would: pg_up 1 on both, pg_replication_is_replica 0 on the
    primary and 1 on the standby; a PodMonitor where the chart manages them
    (the cert-manager run installs its CRD)."""
    k, ns = s.k, s.ns
    s.step("spec.monitoring: an exporter beside each instance, scraped on port 9187")
    k.patch("Database", ns, name, {"spec": {"monitoring": {"enabled": True, "podMonitor": True}}})
    managed = os.environ.get("OPSHOOKS_E2E_CERT_MANAGER") == "1"

    def exporting():
        db = s.parent("Database", name)
        c = condition(db, "Monitoring") or {}
        want = "Exporting" if managed else "PodMonitorUnavailable"
        need(c.get("reason") == want, f"Monitoring {c.get('reason')}: {c.get('message')}, want {want}")
        return db

    s.wait(f"the Monitoring condition {'Exporting' if managed else 'PodMonitorUnavailable'}", exporting, 300, every=2)

    def scraped():
        # Read on each try: the exporter's rollout may still end with a
        # switchover after Monitoring says Exporting (CI on 4dd65c6: the
        # primary read once, before it, was the standby by then).
        primary = (s.parent("Database", name).get("status") or {}).get("currentPrimary")
        out = {}
        for i in range(2):
            pod = k.get("Pod", ns, f"{name}-{i}")
            statuses = {c["name"]: c for c in (pod or {}).get("status", {}).get("containerStatuses") or []}
            need("exporter" in statuses and statuses["exporter"].get("ready"), f"{name}-{i}: no ready exporter")
            ip = pod["status"].get("podIP")
            get = f"import urllib.request; print(urllib.request.urlopen('http://{ip}:9187/metrics', timeout=5).read().decode())"
            code, text = on_the_node(s, ["python3", "-c", get])
            need(code == 0, f"scrape {name}-{i} at {ip}: {text[-200:]}")
            series = {}
            for line in text.splitlines():
                if line.startswith(("pg_up ", "pg_replication_is_replica ")):
                    key, value = line.split()
                    series[key] = float(value)
            want_replica = 0.0 if pod["metadata"]["name"] == primary else 1.0
            need(series.get("pg_up") == 1.0, f"{name}-{i}: pg_up {series.get('pg_up')}")
            need(series.get("pg_replication_is_replica") == want_replica, f"{name}-{i}: pg_replication_is_replica {series.get('pg_replication_is_replica')}, want {want_replica}")
            out[pod["metadata"]["name"]] = series
        return out

    series = s.wait("each instance's exporter answers pg_up 1 and its role", scraped, 300, every=2)
    print(f"scraped: {series}", flush=True)
    monitor = k.get("PodMonitor", ns, name) if managed else None
    s.expect(not managed or monitor is not None, "no PodMonitor made though the chart manages them")
    if monitor:
        s.expect(monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics"}], f"PodMonitor {monitor['spec']}")


def on_the_node_or_not_yet(s, argv, env=None):
    """on_the_node, a command that timed out (a loaded machine) being one
    to try again."""
    try:
        return on_the_node(s, argv, env)
    except subprocess.TimeoutExpired:
        need(False, f"{argv[0]} on the node timed out")


def served_serial(s, ip):
    """The serial of the certificate the server at ip:5432 presents."""
    code, out = on_the_node_or_not_yet(s, ["sh", "-c", f"openssl s_client -starttls postgres -connect {ip}:5432 </dev/null 2>/dev/null | openssl x509 -noout -serial"])
    need(code == 0 and out.startswith("serial="), f"the certificate served at {ip}: {out}")
    return out


def secret_serial(s, name):
    secret = s.k.get("Secret", s.ns, name)
    need(secret is not None, f"Secret {name} not written yet")
    pem = base64.b64decode(secret["data"]["tls.crt"])
    proc = subprocess.run(["openssl", "x509", "-noout", "-serial"], input=pem, capture_output=True, timeout=10)
    need(proc.returncode == 0, f"Secret {name}'s tls.crt: {proc.stderr.decode()}")
    return proc.stdout.decode().strip(), base64.b64decode(secret["data"]["ca.crt"])


def scenario_real_tls_cert_manager(s):
    """spec.tls.issuerRef with cert-manager's own controllers: a CA Issuer
    (its CA certificate self-signed by cert-manager), a medium Database
    whose Certificate it issues. The init Job and the standby's clone and
    streaming verify the instances' certificate (verify-full) by the
    Services' names; a client on the node does too, and one that dials a
    name the certificate does not carry is refused. A renewal (cert-manager
    issues again, as `cmctl renew` asks) rolls both instances onto the new
    certificate: each serves the Secret's new serial. Needs
    OPSHOOKS_E2E_CERT_MANAGER=1 with OPSHOOKS_E2E_PROC_NODE=1."""
    k, ns, name = s.k, s.ns, "certs"
    on_proc_node(s)

    s.step("a CA Issuer: cert-manager self-signs a CA certificate, an Issuer signs with it")
    k.apply({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "selfsigned", "namespace": ns}, "spec": {"selfSigned": {}}})
    k.apply({
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "ca", "namespace": ns},
        "spec": {"isCA": True, "commonName": "opshooks e2e CA", "secretName": "ca", "privateKey": {"algorithm": "ECDSA", "size": 256}, "issuerRef": {"name": "selfsigned", "kind": "Issuer"}},
    })
    k.apply({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "ca", "namespace": ns}, "spec": {"ca": {"secretName": "ca"}}})

    def issuer_ready():
        issuer = k.get("Issuer", ns, "ca")
        need(issuer and (condition(issuer, "Ready") or {}).get("status") == "True", f"Issuer ca: {issuer and issuer.get('status')}")

    s.wait("the CA Issuer Ready", issuer_ready, 90, every=1)

    s.step("a medium Database (15) whose certificate the CA Issuer issues")
    db = database(ns, name, "15", "medium", policy="Delete")
    db["spec"]["affinity"] = {"nodeSelector": {POOL_KEY: POOL}, "tolerations": [TOLERATION]}
    db["spec"]["tls"] = {"issuerRef": {"name": "ca", "kind": "Issuer"}}
    k.apply(db)
    running = db_running(s, name, 2, "15", timeout=420)
    conds = {c["type"]: c for c in (running.get("status") or {}).get("conditions") or []}
    ready = conds.get("CertificateReady") or {}
    s.expect(ready.get("status") == "True", f"CertificateReady {ready}")
    conn = k.get("ConfigMap", ns, f"{name}-connection")["data"]
    s.expect(conn.get("sslmode") == "verify-full", f"the connection ConfigMap says sslmode {conn.get('sslmode')}")
    first, ca = s.wait(f"Secret {name}-tls", lambda: secret_serial(s, f"{name}-tls"), 30)

    def serving(serial):
        for i in range(2):
            pod = k.get("Pod", ns, f"{name}-{i}")
            need(pod and pod["status"].get("podIP"), f"{name}-{i} has no IP")
            need(served_serial(s, pod["status"]["podIP"]) == serial, f"{name}-{i} serves another certificate than Secret {name}-tls's {serial}")

    s.wait("each instance serves the Secret's certificate", lambda: serving(first), 60, every=2)

    s.step("a client verifies the server by the Service's name (verify-full); a name the certificate lacks is refused")
    with open(f"{s.suite.dir}/{ns}-ca.crt", "wb") as f:
        f.write(ca)
    user, password, dbname = s.wait("the application login", lambda: app_login(s, name), 30)
    cip = k.get("Service", ns, name)["spec"]["clusterIP"]

    def connect(host):
        conninfo = f"host={host} hostaddr={cip} sslmode=verify-full sslrootcert={s.suite.dir}/{ns}-ca.crt user={user} dbname={dbname} connect_timeout=5"
        env = {"PATH": "/usr/bin:/bin", "PGPASSWORD": password}
        return on_the_node_or_not_yet(s, ["psql", "-X", "-A", "-t", "-d", conninfo, "-c", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"], env)

    def verified():
        code, out = connect(f"{name}.{ns}.svc")
        need(code == 0 and out == "t", f"verify-full by {name}.{ns}.svc: {out}")

    def refused():
        code, out = connect(f"{name}.elsewhere.svc")
        need(code != 0 and "does not match" in out, f"a name the certificate lacks: {code} {out}")

    s.wait(f"a verify-full connection by {name}.{ns}.svc", verified, 60, every=2)
    s.wait("a connection by a name the certificate lacks refused", refused, 60, every=2)

    s.step("a renewal (cert-manager issues again) rolls both instances onto the new certificate")
    epoch = (running.get("status") or {}).get("primaryEpoch")
    # As cmctl renew does: the Issuing condition added, the others kept.
    cert = k.get("Certificate", ns, f"{name}-tls")
    kept = [c for c in (cert.get("status") or {}).get("conditions") or [] if c.get("type") != "Issuing"]
    issuing = {"type": "Issuing", "status": "True", "reason": "ManuallyTriggered", "message": "renewal asked by the e2e suite", "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    k.patch("Certificate", ns, f"{name}-tls", {"status": {"conditions": [*kept, issuing]}}, sub="status")

    def renewed():
        cert = k.get("Certificate", ns, f"{name}-tls")
        need((cert.get("status") or {}).get("revision", 0) >= 2, f"Certificate revision {(cert.get('status') or {}).get('revision')}")
        serial, _ = secret_serial(s, f"{name}-tls")
        need(serial != first, "the Secret holds the first certificate still")
        return serial

    second = s.wait("cert-manager issues the certificate again", renewed, 120, every=1)

    def rolled_to(serial):
        db_now = k.get("Database", ns, name)
        st = db_now.get("status") or {}
        need(st.get("phase") == "Running" and st.get("targetPrimary") is None, f"phase {st.get('phase')}, target {st.get('targetPrimary')}")
        serving(serial)
        return st

    st = s.wait("both instances serve the renewed certificate, one switchover", lambda: rolled_to(second), 420, every=5)
    s.expect(st.get("primaryEpoch") == (epoch or 0) + 1, f"primaryEpoch {st.get('primaryEpoch')}, want {(epoch or 0) + 1}: one switchover for the roll")
    s.wait(f"a verify-full connection by {name}.{ns}.svc after the renewal", verified, 60, every=2)

    s.step("the issuer changed to a SelfSigned one: the CA changes, and the roll (standby, switchover, old primary) still verifies every instance")
    epoch = st.get("primaryEpoch")
    k.patch("Database", ns, name, {"spec": {"tls": {"issuerRef": {"name": "selfsigned", "kind": "Issuer"}}}})

    def reissued():
        serial, ca_now = secret_serial(s, f"{name}-tls")
        need(ca_now != ca, "the Secret's ca.crt is the CA Issuer's still")
        return serial, ca_now

    third, self_ca = s.wait("cert-manager issues a self-signed certificate (a new CA)", reissued, 120, every=1)

    def bundled():
        cm = k.get("ConfigMap", ns, f"{name}-ca") or {}
        bundle = ((cm.get("data") or {}).get("ca.crt") or "").encode()
        need(self_ca.strip() in bundle and ca.strip() in bundle, f"ConfigMap {name}-ca does not hold both CAs: {bundle[:120]!r}")
        return bundle

    # The roll first: without the bundle a standby restarted on the new
    # certificate cannot verify the old primary, nor the switchover's
    # promote Job: the roll stops half way (seen so with the bundle left out).
    st = s.wait("both instances serve the self-signed certificate", lambda: rolled_to(third), 420, every=5)
    bundle = s.wait(f"ConfigMap {name}-ca holds the new CA and the CA Issuer's", bundled, 60, every=1)
    # The roll restarts the highest ordinal first: the primary is that one
    # now (the renewal's switchover), so it is moved off first, then back.
    s.expect(st.get("primaryEpoch") in ((epoch or 0) + 1, (epoch or 0) + 2), f"primaryEpoch {st.get('primaryEpoch')}, want {(epoch or 0) + 1} or {(epoch or 0) + 2}: one or two switchovers for the roll")
    conn = k.get("ConfigMap", ns, f"{name}-connection")["data"]
    s.expect(conn.get("sslrootcertConfigMap") == f"{name}-ca", f"the connection ConfigMap names {conn}")
    with open(f"{s.suite.dir}/{ns}-ca.crt", "wb") as f:
        f.write(bundle)
    s.wait(f"a verify-full connection by {name}.{ns}.svc with the bundle", verified, 60, every=2)

    s.step("delete it (policy Delete)")
    k.delete("Database", ns, name)
    db_gone(s, name, timeout=180)
