#!/usr/bin/env python3
"""A node whose containers are processes: the process kubelet of the e2e
suite (issue 33). kwok plays the kubelet of kwok-node-0 and runs nothing;
this program registers `proc-node-0` and runs for real the pods bound to it.

    procnode.py --dir DIR --bin BIN       (as root; cluster.sh procnode starts it)

The node carries the label and the NoSchedule taint `opshooks.io/e2e-node=proc`,
so only pods that select and tolerate it land there. For each pod bound to
it, as the kubelet does:

- a sandbox: its own network namespace and address (procnet.py), its
  hostname, /etc/hosts, /etc/resolv.conf (cluster DNS, search domains,
  ndots:5), and /etc/passwd and /etc/group naming its user;
- volumes as directories: a claim is its PersistentVolume's hostPath (the
  hostpath provisioner's directory, which outlives the pod and which the
  provisioner deletes with a Delete claim), fsGroup-owned; emptyDir under
  the pod; configMap, secret, downwardAPI and projected volumes (the
  ServiceAccount token by TokenRequest) written with the kubelet's atomic
  `..data` symlink swap and rewritten every VOLUME_REFRESH seconds (the
  kubelet's sync period), never at once; not at all while the pod's
  directory holds `hold-volumes` (a scenario's fault: a kubelet whose
  ConfigMap cache is stale, a mount minutes late);
- each container a process tree: `nsenter` into the pod's network
  namespace, `unshare` a mount and UTS namespace, bind the volumes at their
  mountPaths, then `setpriv` to runAsUser/runAsGroup (fsGroup as a
  supplementary group, no new privileges) and exec command/args with the
  environment (image env, service links, envFrom, env with value,
  secretKeyRef, configMapKeyRef and fieldRef, `$(VAR)` expanded as the
  kubelet does, HOSTNAME); the image mapped to local programs
  (image_config: postgres:<major> to that major's server binaries and
  images/postgres/docker-entrypoint.sh, a kubectl image to the tools'
  kubectl, the postgres-exporter image to the tools' postgres_exporter,
  the aws-cli image to the tools' AWS CLI, CloudNativePG's PostgreSQL
  image (the WAL archiver's) to the tools' barman-cloud); a pod's kubectl reaches the API server through the `kubernetes`
  Service with its projected ServiceAccount token;
- exec probes (startup, liveness, readiness: initialDelay, period on the
  kubelet's ticker, timeout, success and failure thresholds) run in the
  container's namespaces;
  restarts by restartPolicy with the kubelet's back-off (none, 10 s,
  doubling to 300 s); a Job pod ends Succeeded or Failed by exit code;
  terminationMessagePath read back (FallbackToLogsOnError too);
- status as the kubelet writes it: phase, the conditions with their
  lastTransitionTime, container states and lastState, podIP, hostIP;
- deletion: SIGTERM to every process of the pod, SIGKILL after the grace
  period, then the pod deleted with grace 0.

The node's network namespace runs the real kube-proxy (iptables mode) and
the DNS answers (procnet.py); the node keeps its Lease renewed. Each run of
a container keeps its output in DIR/procnode/pods/UID/containers/NAME/RUN/log
(there is no `kubectl logs`). A scenario injects faults from outside: a
container's processes are those in the pod's network namespace
(`ip netns pids`), a pod's link can go down (procnet.Network.link), and a
file DIR/procnode/faults/<namespace>/<pod name prefix> holding "fail" or
"delay" makes each container of those pods fail at its start (exit 1) or
wait to start while the file is there (Container.fault).
"""

import argparse
import base64
import contextlib
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from datetime import datetime, timezone

import procnet
from kube import Kube, KubeError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from kubelet import expand  # noqa: E402 (tests/support)

NODE = "proc-node-0"
POOL_KEY = "opshooks.io/e2e-node"
POOL = "proc"
HERE = os.path.dirname(os.path.abspath(__file__))
# Where an image's files from the checkout or the tools appear inside its
# containers (a mount point on the host's /run, a tmpfs).
IMAGE_DIR = "/run/opshooks-e2e"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
VOLUME_REFRESH = 60
# The tools' directory (--bin): the kubectl, aws-cli and postgres-exporter
# images' stand-ins, and the server binaries of a major this machine lacks.
TOOLS = None
K8S_VERSION = "v1.34.10"


def now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(text):
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


class ImageError(Exception):
    pass


class ConfigError(Exception):
    """A container's environment or a volume that cannot be made yet."""


# ---- images: what runs in place of each one --------------------------------------
def image_config(image):
    """The local stand-in for `image`: its entrypoint, cmd, env, user (name, uid)
    and private tmpfs mounts; ImageError when there is none."""
    ref = image.split("@")[0]
    last = ref.rsplit("/", 1)[-1]
    repo, _, tag = last.partition(":")
    if repo == "postgres":
        major = re.match(r"\d+", tag or "")
        bindir = f"/usr/lib/postgresql/{major[0]}/bin" if major else None
        binds = [(f"{HERE}/images/postgres", f"{IMAGE_DIR}/postgres")]
        path = f"{IMAGE_DIR}/postgres:{bindir}:{BASE_PATH}"
        other = os.path.join(TOOLS or "", f"postgresql-{major[0]}") if major else ""
        if bindir and not os.path.isfile(f"{bindir}/postgres") and os.path.isfile(f"{other}/bin/postgres"):
            # A major this machine's packages lack (build-tools.sh's
            # postgres-18): its server binaries, bound, then the machine's
            # own client tools (psql, pg_isready, pg_restore), which talk
            # to a newer server.
            client = max(glob.glob("/usr/lib/postgresql/*/bin/psql"), default="/usr/bin/psql")
            binds.append((other, f"{IMAGE_DIR}/postgresql-{major[0]}"))
            path = f"{IMAGE_DIR}/postgres:{IMAGE_DIR}/postgresql-{major[0]}/bin:{os.path.dirname(client)}:{BASE_PATH}"
        elif not bindir or not os.path.isfile(f"{bindir}/postgres"):
            raise ImageError(f"no PostgreSQL server binaries for {image} (looked for {bindir})")
        return {
            "entrypoint": ["docker-entrypoint.sh"],
            "cmd": ["postgres"],
            "env": {
                "PATH": path,
                "PG_MAJOR": major[0],
                "PGDATA": "/var/lib/postgresql/data",
                # The image says en_US.utf8, which this machine may not have.
                "LANG": "C.UTF-8",
            },
            "user": ("postgres", 999, "/var/lib/postgresql"),
            # The image's STOPSIGNAL: a fast shutdown, not a smart one.
            "stopsignal": signal.SIGINT,
            # Its Unix socket directory, one per pod as in a container.
            "tmpfs": ["/var/run/postgresql"],
            # Bound, not read in place: the checkout may sit under a
            # directory the postgres user cannot enter (mktemp -d is 0700).
            "binds": binds,
        }
    if repo == "kubectl":
        # rancher/kubectl, bitnami/kubectl, ...: the tools' kubectl (the
        # cluster's version, whatever the tag).
        return tool_image(image, "kubectl", ("kubectl", 1001, "/"))
    if repo == "aws-cli":
        # amazon/aws-cli: the AWS CLI v1 build-tools.sh installs for the
        # system Python (the same s3 and s3api commands), with its library.
        return tool_image(image, "aws", ("root", 0, "/root"), "awscli-lib")
    if repo == "postgresql" and "cloudnative-pg" in ref:
        # CloudNativePG's PostgreSQL image, which the Database's archiver
        # sidecar runs for its barman-cloud (spec.backup.archive): the
        # barman-cloud commands build-tools.sh installs, on the system
        # Python, with a shell. Its own server is never started. As in
        # that image (pip3 installs barman-cloud into the system Python),
        # python3 imports barman: archiver.sh's later_segment does.
        lib = os.path.join(TOOLS or "", "barman-lib")
        if not os.path.isdir(f"{lib}/commands"):
            raise ImageError(f"no barman-cloud for {image} (looked for {lib}/commands)")
        return {
            "entrypoint": ["/bin/sh"],
            "cmd": [],
            "env": {"PATH": f"{IMAGE_DIR}/barman-lib/commands:{BASE_PATH}",
                    "PYTHONPATH": f"{IMAGE_DIR}/barman-lib"},
            "user": ("postgres", 26, "/var/lib/postgresql"),
            "tmpfs": [],
            "binds": [(lib, f"{IMAGE_DIR}/barman-lib")],
        }
    if repo == "postgres-exporter":
        # prometheus-community's postgres_exporter, built by build-tools.sh
        # from its module at the version the hook's default image names.
        return tool_image(image, "postgres_exporter", ("nobody", 65534, "/"))
    raise ImageError(f"the process node has no stand-in for image {image}")


def tool_image(image, tool, user, *beside):
    """An image whose entrypoint is one of the tools (--bin), bound into the
    container under /run (its mount point stays on the host's /run, a
    tmpfs) with the tools' entries it needs beside it."""
    path = os.path.join(TOOLS or "", tool)
    if not TOOLS or not os.path.isfile(path):
        raise ImageError(f"no {tool} for {image} (looked for {path})")
    return {
        "entrypoint": [tool],
        "cmd": [],
        "env": {"PATH": f"{IMAGE_DIR}:{BASE_PATH}"},
        "user": user,
        "tmpfs": [],
        "binds": [(os.path.join(TOOLS, name), f"{IMAGE_DIR}/{name}") for name in (tool, *beside)],
    }


# ---- $(VAR) and the environment -----------------------------------------------------
def field_ref(pod, field, pod_ip):
    md, spec = pod["metadata"], pod["spec"]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", field)
    if m:
        return (md.get(m[1]) or {}).get(m[2], "")
    values = {
        "metadata.name": md["name"],
        "metadata.namespace": md["namespace"],
        "metadata.uid": md["uid"],
        "spec.nodeName": NODE,
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": procnet.NODE_IP,
        "status.hostIPs": procnet.NODE_IP,
    }
    if field not in values:
        raise ConfigError(f"fieldRef {field} is not supported by the process node")
    return values[field]


def service_links(kube, ns):
    """The Docker-link variables of the namespace's Services (enableServiceLinks)."""
    env = {}
    for svc in kube.list("Service", ns):
        spec = svc.get("spec") or {}
        cip, ports = spec.get("clusterIP"), spec.get("ports") or []
        if not cip or cip == "None" or not ports:
            continue
        name = svc["metadata"]["name"].upper().replace("-", "_")
        env[f"{name}_SERVICE_HOST"] = cip
        env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        env[f"{name}_PORT"] = f"{ports[0].get('protocol', 'TCP').lower()}://{cip}:{ports[0]['port']}"
        for p in ports:
            proto = p.get("protocol", "TCP")
            if p.get("name"):
                env[f"{name}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
            key = f"{name}_PORT_{p['port']}_{proto}"
            env[key] = f"{proto.lower()}://{cip}:{p['port']}"
            env[key + "_PROTO"] = proto.lower()
            env[key + "_PORT"] = str(p["port"])
            env[key + "_ADDR"] = cip
    return env


class Lookup:
    """ConfigMaps and Secrets of one namespace, read from the API."""

    def __init__(self, kube, ns):
        self.kube, self.ns = kube, ns

    def data(self, kind, name, optional):
        obj = self.kube.get(kind, self.ns, name)
        if obj is None:
            if optional:
                return None
            raise ConfigError(f"{kind.lower()} \"{name}\" not found")
        if kind == "Secret":
            return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        out = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return out

    def key(self, kind, ref):
        data = self.data(kind, ref["name"], ref.get("optional"))
        if data is None:
            return None
        if ref["key"] not in data:
            if ref.get("optional"):
                return None
            raise ConfigError(f"couldn't find key {ref['key']} in {kind} {self.ns}/{ref['name']}")
        return data[ref["key"]].decode()


def container_env(kube, pod, c, image_env, pod_ip):
    ns = pod["metadata"]["namespace"]
    look = Lookup(kube, ns)
    env = dict(image_env)
    env["HOSTNAME"] = pod["spec"].get("hostname") or pod["metadata"]["name"]
    defined = {}
    if pod["spec"].get("enableServiceLinks", True):
        defined.update(service_links(kube, ns))
    kubernetes = kube.get("Service", "default", "kubernetes")
    if kubernetes:
        cip = kubernetes["spec"]["clusterIP"]
        defined.update(
            {
                "KUBERNETES_SERVICE_HOST": cip,
                "KUBERNETES_SERVICE_PORT": "443",
                "KUBERNETES_SERVICE_PORT_HTTPS": "443",
                "KUBERNETES_PORT": f"tcp://{cip}:443",
                "KUBERNETES_PORT_443_TCP": f"tcp://{cip}:443",
                "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
                "KUBERNETES_PORT_443_TCP_PORT": "443",
                "KUBERNETES_PORT_443_TCP_ADDR": cip,
            }
        )
    for src in c.get("envFrom") or []:
        kind, ref = ("ConfigMap", src["configMapRef"]) if "configMapRef" in src else ("Secret", src["secretRef"])
        data = look.data(kind, ref["name"], ref.get("optional")) or {}
        for k, v in data.items():
            defined[src.get("prefix", "") + k] = v.decode()
    for e in c.get("env") or []:
        if "valueFrom" not in e:
            defined[e["name"]] = expand(e.get("value", ""), defined)
            continue
        vf = e["valueFrom"]
        if "secretKeyRef" in vf:
            value = look.key("Secret", vf["secretKeyRef"])
        elif "configMapKeyRef" in vf:
            value = look.key("ConfigMap", vf["configMapKeyRef"])
        elif "fieldRef" in vf:
            value = field_ref(pod, vf["fieldRef"]["fieldPath"], pod_ip)
        else:
            raise ConfigError(f"env {e['name']}: {list(vf)} is not supported by the process node")
        if value is not None:
            defined[e["name"]] = value
    env.update(defined)
    return env


# ---- volumes -------------------------------------------------------------------------
def atomic_write(target, files, gid):
    """The kubelet's AtomicWriter: files (relative path -> (bytes, mode)) in a
    fresh ..<timestamp> directory, ..data swapped to it by rename, one
    symlink per top-level name through ..data. False when nothing changed."""
    os.makedirs(target, exist_ok=True)
    data_link = os.path.join(target, "..data")
    if os.path.islink(data_link):
        old = os.path.join(target, os.readlink(data_link))
        same = True
        for rel, (content, mode) in files.items():
            p = os.path.join(old, rel)
            if not os.path.isfile(p) or open(p, "rb").read() != content or (os.stat(p).st_mode & 0o7777) != mode:
                same = False
        for root, _, names in os.walk(old):
            for n in names:
                if os.path.relpath(os.path.join(root, n), old) not in files:
                    same = False
        if same:
            return False
    else:
        old = None
    stamp = datetime.now(timezone.utc).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    new = os.path.join(target, stamp)
    os.mkdir(new, 0o755)
    os.chown(new, 0, gid)
    for rel, (content, mode) in files.items():
        p = os.path.join(new, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(content)
        os.chown(p, 0, gid)
        os.chmod(p, mode)
    tmp = os.path.join(target, "..data_tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(stamp, tmp)
    os.rename(tmp, data_link)
    tops = {rel.split("/")[0] for rel in files}
    for top in tops:
        link = os.path.join(target, top)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..data", top), link)
    for name in os.listdir(target):
        if not name.startswith("..") and name not in tops:
            os.unlink(os.path.join(target, name))
    if old:
        shutil.rmtree(old, ignore_errors=True)
    return True


def projected_files(kube, pod, sources, default_mode, pod_ip):
    """relative path -> (bytes, mode) of configMap, secret, downwardAPI and
    serviceAccountToken sources (a plain configMap/secret volume is one source)."""
    ns = pod["metadata"]["namespace"]
    look = Lookup(kube, ns)
    files = {}
    for src in sources:
        if "configMap" in src or "secret" in src:
            kind = "ConfigMap" if "configMap" in src else "Secret"
            ref = src.get("configMap") or src.get("secret")
            data = look.data(kind, ref.get("name") or ref.get("secretName"), ref.get("optional"))
            if data is None:
                continue
            items = ref.get("items")
            mode = ref.get("defaultMode", default_mode)
            if items:
                for it in items:
                    if it["key"] not in data:
                        raise ConfigError(f"{kind} {ref.get('name')} has no key {it['key']}")
                    files[it["path"]] = (data[it["key"]], it.get("mode", mode))
            else:
                for k, v in data.items():
                    files[k] = (v, mode)
        elif "downwardAPI" in src:
            for it in src["downwardAPI"].get("items") or []:
                if "fieldRef" not in it:
                    raise ConfigError("downwardAPI resourceFieldRef is not supported by the process node")
                files[it["path"]] = (field_ref(pod, it["fieldRef"]["fieldPath"], pod_ip).encode(), it.get("mode", default_mode))
        elif "serviceAccountToken" in src:
            sat = src["serviceAccountToken"]
            files[sat["path"]] = (sa_token(kube, pod, sat), default_mode)
    return files


# (pod uid, path) -> (token, when to renew it)
TOKENS = {}


def sa_token(kube, pod, sat):
    """The pod's ServiceAccount token by TokenRequest, bound to the pod, renewed
    (as the kubelet) once 80% of its life is over."""
    key = (pod["metadata"]["uid"], sat["path"])
    token, renew = TOKENS.get(key, (None, 0))
    if token and time.time() < renew:
        return token
    ns, seconds = pod["metadata"]["namespace"], sat.get("expirationSeconds", 3600)
    sa = pod["spec"].get("serviceAccountName") or "default"
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": seconds,
            "audiences": [sat["audience"]] if sat.get("audience") else None,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]},
        },
    }
    status, body = kube.call("POST", f"api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", request)
    if status != 201:
        raise ConfigError(f"token for ServiceAccount {ns}/{sa}: HTTP {status}")
    token = body["status"]["token"].encode()
    TOKENS[key] = (token, time.time() + 0.8 * seconds)
    return token


def volume_files(kube, pod, vol, pod_ip):
    if "configMap" in vol:
        return projected_files(kube, pod, [{"configMap": vol["configMap"]}], vol["configMap"].get("defaultMode", 0o644), pod_ip)
    if "secret" in vol:
        return projected_files(kube, pod, [{"secret": vol["secret"]}], vol["secret"].get("defaultMode", 0o644), pod_ip)
    if "downwardAPI" in vol:
        return projected_files(kube, pod, [vol], vol["downwardAPI"].get("defaultMode", 0o644), pod_ip)
    proj = vol["projected"]
    return projected_files(kube, pod, proj.get("sources") or [], proj.get("defaultMode", 0o644), pod_ip)


WRITTEN_KINDS = ("configMap", "secret", "downwardAPI", "projected")


def claim_dir(kube, ns, claim, root):
    """The directory of a bound claim: its PersistentVolume's hostPath (the
    hostpath provisioner's), else one under root named by the claim's uid."""
    pvc = kube.get("PersistentVolumeClaim", ns, claim)
    if pvc is None:
        raise ConfigError(f"persistentvolumeclaim \"{claim}\" not found")
    pv_name = (pvc.get("spec") or {}).get("volumeName")
    if not pv_name or (pvc.get("status") or {}).get("phase") != "Bound":
        raise ConfigError(f"persistentvolumeclaim \"{claim}\" is not bound")
    pv = kube.get("PersistentVolume", None, pv_name)
    host = ((pv or {}).get("spec") or {}).get("hostPath", {}).get("path")
    return host or os.path.join(root, "claims", f"{ns}_{claim}_{pvc['metadata']['uid']}")


# ---- containers ------------------------------------------------------------------------
# Run by `nsenter --net=... unshare --mount --uts`: binds the mounts, then
# becomes the container's user and execs its command. Arguments: the mounts
# file (kind|source|target|ro-or-mode per line), uid, gid, groups,
# working directory, hostname, a file touched once everything is in place.
LAUNCH = r"""set -eu
mounts=$1 uid=$2 gid=$3 groups=$4 workdir=$5 host=$6 ready=$7
shift 7
/usr/bin/hostname "$host"
while IFS='|' read -r kind src dst opt; do
    case "$kind" in
        dir) mkdir -p "$dst"; /usr/bin/mount --bind "$src" "$dst" ;;
        file) [ -e "$dst" ] || { mkdir -p "${dst%/*}"; : >"$dst"; }; /usr/bin/mount --bind "$src" "$dst" ;;
        tmpfs) mkdir -p "$dst"; /usr/bin/mount -t tmpfs -o "mode=$opt,uid=$uid,gid=$gid" tmpfs "$dst" ;;
    esac
    if [ "$kind" != tmpfs ] && [ "$opt" = ro ]; then /usr/bin/mount -o remount,bind,ro "$dst"; fi
done <"$mounts"
cd "$workdir"
: >"$ready"
if [ "$uid" = 0 ]; then exec "$@"; fi
if [ -n "$groups" ]; then set -- --groups="$groups" -- "$@"; else set -- --clear-groups -- "$@"; fi
exec /usr/bin/setpriv --reuid="$uid" --regid="$gid" --no-new-privs "$@"
"""


def kill_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Container:
    def __init__(self, pw, spec, init):
        self.pw, self.spec, self.init = pw, spec, init
        self.name = spec["name"]
        self.proc = None
        self.restarts = 0
        self.state = {"waiting": {"reason": "ContainerCreating" if init else "PodInitializing"}}
        self.last_state = {}
        self.ready = self.started = False
        self.gen = 0
        self.next_start = 0.0
        self.pending = True  # to be started at next_start
        self.reaped = True
        self.started_mono = 0.0
        self.backoff = 0
        self.kill_reason = None
        self.exit_code = None  # of the last run, once it ended
        self.env = {}
        self.dir = os.path.join(pw.dir, "containers", self.name)
        os.makedirs(self.dir, exist_ok=True)
        self.log_path = None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self):
        pw, c = self.pw, self.spec
        try:
            img = image_config(c["image"])
        except ImageError as err:
            self.state = {"waiting": {"reason": "ErrImagePull", "message": str(err)}}
            self.next_start = time.time() + 5
            return False
        try:
            env = container_env(pw.kube, pw.pod, c, img["env"], pw.pod_ip)
            mounts = pw.mounts_for(c, img)
        except (ConfigError, KubeError) as err:
            self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(err)}}
            self.next_start = time.time() + 2
            return False
        command = c.get("command") or img["entrypoint"]
        args = c.get("args") if (c.get("command") or c.get("args")) else img["cmd"]
        argv = [expand(a, env) for a in [*command, *(args or [])]]
        fault, fault_file = self.fault()
        if fault == "delay":
            self.state = {"waiting": {"reason": "ContainerCreating", "message": "delayed by a scenario's fault"}}
            self.next_start = time.time() + 1
            return False
        if fault == "fail":
            # Runs, and fails at once, as a program that finds its input bad.
            argv = ["/bin/sh", "-c", f'echo "failed by a scenario\'s fault ({fault_file})" | tee "$1" >&2; exit 1', "fault", c.get("terminationMessagePath") or "/dev/termination-log"]
        if self.gen:
            self.restarts += 1
        self.gen += 1
        self.pending, self.reaped, self.exit_code = False, False, None
        self.started_mono = time.time()
        run_dir = os.path.join(self.dir, str(self.gen))
        os.makedirs(run_dir, exist_ok=True)
        term = os.path.join(run_dir, "termination-log")
        open(term, "w").close()
        os.chmod(term, 0o666)
        mounts.append(("file", term, c.get("terminationMessagePath") or "/dev/termination-log", "rw"))
        mounts_file = os.path.join(run_dir, "mounts")
        # The image's files first (under IMAGE_DIR, where no volume goes): a
        # volume mounted over a directory that holds a bind's source (an
        # emptyDir at /work over a checkout under /work) would hide it. Then
        # parents before children: a mount inside another volume lands on it.
        mounts.sort(key=lambda m: (not m[2].startswith(IMAGE_DIR + "/"), m[2].rstrip("/").count("/")))
        with open(mounts_file, "w") as f:
            for m in mounts:
                f.write("|".join(m) + "\n")
        uid, gid, groups = pw.identity(c, img)
        self.ready_file = os.path.join(run_dir, "ready")
        self.term_file = term
        self.env = env
        self.uid, self.gid, self.groups = uid, gid, groups
        workdir = c.get("workingDir") or "/"
        launch = [
            "/usr/bin/nsenter", f"--net=/run/netns/{pw.netns}", "--",
            "/usr/bin/unshare", "--mount", "--uts", "--propagation", "private", "--",
            "/bin/sh", "-c", LAUNCH, "launch", mounts_file, str(uid), str(gid), groups, workdir, pw.hostname, self.ready_file,
            *argv,
        ]  # fmt: skip
        # Each run's output in its own file, as the runtime keeps it.
        self.log_path = os.path.join(run_dir, "log")
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(launch, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        self.started_at = now()
        self.stopsignal = img.get("stopsignal", signal.SIGTERM)
        self.state = {"running": {"startedAt": self.started_at}}
        self.started = not c.get("startupProbe")
        self.ready = False
        self.kill_reason = None
        gen = self.gen
        if not self.init:
            for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                if c.get(kind):
                    threading.Thread(target=self.probe_loop, args=(kind, c[kind], gen), daemon=True, name=f"{self.name}-{kind}").start()
        log(f"pod {pw.key} container {self.name} started (run {gen}, pid {self.proc.pid})")
        return True

    def fault(self):
        """What a scenario asks of this container's next start: FAULTS/<ns>/<p>
        holding "fail" (it runs and exits 1) or "delay" (it does not start
        while the file is there), for every container of every pod of the
        namespace whose name starts with <p>; with the file's path. (None,
        None) when no file names it."""
        ns, _, name = self.pw.key.partition("/")
        root = os.path.join(os.path.dirname(os.path.dirname(self.pw.dir)), "faults", ns)
        for prefix in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            if name.startswith(prefix):
                path = os.path.join(root, prefix)
                with contextlib.suppress(OSError), open(path) as f:
                    return f.read().strip(), path
        return None, None

    def stop(self, grace, reason=None):
        """The image's stop signal (SIGTERM unless it says otherwise) to the
        container's first process, SIGKILL to all of them after grace seconds."""
        if not self.running():
            return
        pid = self.proc.pid
        kill_group(pid, signal.SIGCONT)
        try:
            os.kill(pid, self.stopsignal)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=max(grace, 0))
        except subprocess.TimeoutExpired:
            pass
        kill_group(pid, signal.SIGKILL)
        self.proc.wait()
        if reason:
            log(f"pod {self.pw.key} container {self.name} killed: {reason}")

    def reap(self):
        """The exit of the current run, recorded as the kubelet records it:
        True when it just ended."""
        if self.reaped or self.proc is None or self.proc.poll() is None:
            return False
        self.reaped = True
        code = self.proc.returncode
        code = 128 - code if code < 0 else code
        kill_group(self.proc.pid, signal.SIGKILL)  # what the container left behind
        message = ""
        try:
            with open(self.term_file, "rb") as f:
                message = f.read(4096).decode(errors="replace")
        except OSError:
            pass
        if not message and code != 0 and self.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            with open(self.log_path, "rb") as f:
                message = b"\n".join(f.read().splitlines()[-80:])[-2048:].decode(errors="replace")
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "startedAt": self.started_at, "finishedAt": now(), "containerID": self.container_id()}
        if message:
            term["message"] = message
        self.state = {"terminated": term}
        self.exit_code = code
        self.ready = False
        log(f"pod {self.pw.key} container {self.name} run {self.gen} exited {code}{': ' + message.strip()[:200] if message else ''}")
        return True

    def is_ready(self):
        """Ready by its readiness probe; without one, once running and started."""
        if not self.running() or not self.started:
            return False
        return self.ready if self.spec.get("readinessProbe") else True

    def container_id(self):
        return f"procnode://{self.pw.uid[:8]}-{self.name}-{self.gen}"

    def schedule_restart(self):
        """The kubelet's back-off: a first restart at once, then 10 s doubling
        to 300 s; reset after 10 minutes of running."""
        if time.time() - self.started_mono > 600:
            self.backoff = 0
        delay = self.backoff
        self.backoff = 10 if self.backoff == 0 else min(self.backoff * 2, 300)
        self.next_start = time.time() + delay
        self.pending = True
        self.last_state = self.state
        if delay:
            msg = f"back-off {delay}s restarting failed container={self.name} pod={self.pw.pod['metadata']['name']}"
            self.state = {"waiting": {"reason": "CrashLoopBackOff", "message": msg}}

    def done(self):
        """Ended, and not to be started again."""
        return not self.pending and self.reaped and self.exit_code is not None

    def status(self):
        st = {
            "name": self.name,
            "image": self.spec["image"],
            "imageID": self.spec["image"],
            "ready": self.is_ready(),
            "started": self.started if "running" in self.state else False,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.gen:
            st["containerID"] = self.container_id()
        return st

    # ---- probes ----
    def probe_loop(self, kind, probe, gen):
        period = probe.get("periodSeconds", 10)
        timeout = probe.get("timeoutSeconds", 1)
        success_needed = probe.get("successThreshold", 1)
        failures_allowed = probe.get("failureThreshold", 3)
        time.sleep(probe.get("initialDelaySeconds", 0))
        successes = failures = 0
        # The kubelet probes on a ticker (prober/worker.go): every period
        # from its first probe, whatever a probe took; a probe longer than
        # the period is followed at once (Go's ticker keeps one tick), the
        # later ticks staying on the schedule.
        first, ticks = None, 0
        while self.gen == gen and self.running() and not self.pw.stopping:
            if kind != "startupProbe" and not self.started:
                time.sleep(0.5)
                continue
            if first is None:
                first = time.monotonic()
            ok, output = self.run_probe(probe, timeout)
            if ok:
                successes, failures = successes + 1, 0
            else:
                successes, failures = 0, failures + 1
            if self.gen != gen:
                return
            if kind == "startupProbe":
                if ok:
                    self.started = True
                    self.pw.poke()
                    return
                if failures >= failures_allowed:
                    self.kill_reason = f"startup probe failed: {output}"
                    self.pw.poke()
                    return
            elif kind == "livenessProbe":
                if failures >= failures_allowed:
                    self.kill_reason = f"liveness probe failed: {output}"
                    self.pw.poke()
                    return
            else:
                ready = self.ready
                if ok and successes >= success_needed:
                    ready = True
                elif not ok and failures >= failures_allowed:
                    ready = False
                elif not ok and not self.ready:
                    ready = False
                if ready != self.ready:
                    self.ready = ready
                    log(f"pod {self.pw.key} container {self.name} ready={ready}{'' if ok else ': ' + output[:200]}")
                    self.pw.poke()
            now = time.monotonic()
            ticks = max(ticks + 1, int((now - first) // period))
            time.sleep(max(0.0, first + ticks * period - now))

    def run_probe(self, probe, timeout):
        if "exec" not in probe:
            return False, "the process node runs exec probes only"
        if not os.path.exists(self.ready_file):
            return False, "container not set up yet"
        # The kubelet expands an exec probe's command too, with the
        # container's variables that have a value written in the spec
        # (ExpandContainerCommandOnlyStatic): `$$` is `$` there as well.
        static = {e["name"]: e["value"] for e in self.spec.get("env") or [] if "value" in e}
        command = [expand(a, static) for a in probe["exec"]["command"]]
        argv = ["/usr/bin/nsenter", "-t", str(self.proc.pid), "-m", "-n", "-u", "--wd=/", "--",
                "/usr/bin/setpriv", f"--reuid={self.uid}", f"--regid={self.gid}",
                *([f"--groups={self.groups}"] if self.groups else ["--clear-groups"]), "--",
                *command]  # fmt: skip
        if self.uid == 0:
            argv = argv[: argv.index("/usr/bin/setpriv")] + command
        try:
            p = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p.pid, signal.SIGKILL)
            p.communicate()
            return False, f"command timed out after {timeout}s"
        return p.returncode == 0, out.decode(errors="replace").strip()


# ---- pods ------------------------------------------------------------------------------
class PodWorker:
    """One pod's whole life on the node, in its own thread."""

    def __init__(self, node, pod):
        self.node, self.kube = node, node.kube
        self.pod = pod
        md = pod["metadata"]
        self.uid, self.key = md["uid"], f"{md['namespace']}/{md['name']}"
        self.dir = os.path.join(node.root, "pods", self.uid)
        os.makedirs(self.dir, exist_ok=True)
        self.stopping = False
        self.wake = threading.Event()
        self.netns = self.pod_ip = None
        self.volumes = {}
        self.written = {}  # volume name -> its spec, for the refresh
        self.next_refresh = 0.0
        spec = pod["spec"]
        self.hostname = spec.get("hostname") or md["name"]
        self.init = [Container(self, c, True) for c in spec.get("initContainers") or []]
        self.main = [Container(self, c, False) for c in spec["containers"]]
        for c in self.main if not self.init else []:
            c.state = {"waiting": {"reason": "ContainerCreating"}}
        self.conditions = {}
        self.last_status = None
        self.start_time = now()
        self.sandbox_ready = False
        self.terminal = False
        self.thread = threading.Thread(target=self.run, name=f"pod-{self.key}", daemon=True)
        self.thread.start()

    def poke(self):
        self.wake.set()

    # ---- sandbox and volumes ----
    def sandbox(self):
        if self.netns is None:
            self.netns, self.pod_ip = self.node.net.add_pod()
        spec, md = self.pod["spec"], self.pod["metadata"]
        ns = md["namespace"]
        fqdn = self.hostname
        if spec.get("subdomain"):
            fqdn = f"{self.hostname}.{spec['subdomain']}.{ns}.svc.{procnet.CLUSTER_DOMAIN}"
        etc = os.path.join(self.dir, "etc")
        os.makedirs(etc, exist_ok=True)
        with open(os.path.join(etc, "hosts"), "w") as f:
            f.write(f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{self.pod_ip}\t{fqdn} {self.hostname}\n")
        with open(os.path.join(etc, "resolv.conf"), "w") as f:
            d = procnet.CLUSTER_DOMAIN
            f.write(f"search {ns}.svc.{d} svc.{d} {d}\nnameserver {procnet.NODE_IP}\noptions ndots:5\n")
        with open(os.path.join(etc, "hostname"), "w") as f:
            f.write(self.hostname + "\n")
        # Whose directory this is, for a scenario that reads what ran
        # after the pod is gone (a finished Job's).
        with open(os.path.join(self.dir, "pod"), "w") as f:
            f.write(f"{ns}/{md['name']}\n")
        for v in spec.get("volumes") or []:
            self.volumes[v["name"]] = self.make_volume(v)
        self.next_refresh = time.time() + VOLUME_REFRESH
        self.sandbox_ready = True

    def fs_group(self):
        return (self.pod["spec"].get("securityContext") or {}).get("fsGroup")

    def make_volume(self, v):
        gid = self.fs_group() or 0
        if "emptyDir" in v:
            path = os.path.join(self.dir, "volumes", v["name"])
            os.makedirs(path, exist_ok=True)
            os.chmod(path, 0o777)
            return path
        if "persistentVolumeClaim" in v:
            path = claim_dir(self.kube, self.pod["metadata"]["namespace"], v["persistentVolumeClaim"]["claimName"], self.node.root)
            os.makedirs(path, exist_ok=True)
            if self.fs_group() is not None:
                # As a CSI driver that supports fsGroup: the volume's root
                # group-owned and setgid (not recursive: a restart keeps the
                # data directory's own modes).
                os.chown(path, 0, gid)
                os.chmod(path, 0o2775)
            return path
        if "hostPath" in v:
            return v["hostPath"]["path"]
        if any(k in v for k in WRITTEN_KINDS):
            path = os.path.join(self.dir, "volumes", v["name"])
            atomic_write(path, volume_files(self.kube, self.pod, v, self.pod_ip), gid)
            self.written[v["name"]] = v
            return path
        raise ConfigError(f"volume {v['name']}: {sorted(k for k in v if k != 'name')} is not supported by the process node")

    def refresh_volumes(self):
        """The kubelet's periodic sync: configMap, secret and projected volumes
        rewritten (atomically) with what the API holds now."""
        if time.time() < self.next_refresh:
            return
        self.next_refresh = time.time() + VOLUME_REFRESH
        if os.path.exists(os.path.join(self.dir, "hold-volumes")):
            log(f"pod {self.key} volumes held (hold-volumes): not refreshed")
            return
        for name, v in self.written.items():
            try:
                if atomic_write(self.volumes[name], volume_files(self.kube, self.pod, v, self.pod_ip), self.fs_group() or 0):
                    log(f"pod {self.key} volume {name} updated")
            except (ConfigError, KubeError) as err:
                log(f"pod {self.key} volume {name} not refreshed: {err}")

    def identity(self, c, img):
        psc = self.pod["spec"].get("securityContext") or {}
        csc = c.get("securityContext") or {}
        default_uid = img["user"][1]
        uid = csc.get("runAsUser", psc.get("runAsUser", default_uid))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", uid))
        groups = [g for g in [psc.get("fsGroup"), *(psc.get("supplementalGroups") or [])] if g is not None]
        return uid, gid, ",".join(str(g) for g in groups)

    def mounts_for(self, c, img):
        if not self.sandbox_ready:
            raise ConfigError("sandbox not ready")
        etc = os.path.join(self.dir, "etc")
        uid, gid, _ = self.identity(c, img)
        name, _, home = img["user"]
        with open(os.path.join(etc, f"passwd-{c['name']}"), "w") as f:
            f.write(f"root:x:0:0:root:/root:/bin/sh\n{name}:x:{uid}:{gid}::{home}:/bin/sh\n")
        with open(os.path.join(etc, f"group-{c['name']}"), "w") as f:
            f.write(f"root:x:0:\n{name}:x:{gid}:\n")
        mounts = [("file", os.path.join(etc, n), f"/etc/{n}", "ro") for n in ("hosts", "resolv.conf", "hostname")]
        mounts += [("file", os.path.join(etc, f"{n}-{c['name']}"), f"/etc/{n}", "ro") for n in ("passwd", "group")]
        mounts += [("dir" if os.path.isdir(src) else "file", src, dst, "ro") for src, dst in img.get("binds", [])]
        for m in c.get("volumeMounts") or []:
            if m["name"] not in self.volumes:
                raise ConfigError(f"volumeMount {m['name']}: no such volume")
            src = self.volumes[m["name"]]
            if m.get("subPath"):
                src = os.path.join(src, m["subPath"])
            kind = "file" if os.path.isfile(src) else "dir"
            mounts.append((kind, src, m["mountPath"], "ro" if m.get("readOnly") else "rw"))
        mounts += [("tmpfs", "tmpfs", t, "2775") for t in img["tmpfs"]]
        return mounts

    # ---- the loop ----
    def run(self):
        while True:
            try:
                if self.step():
                    return
            except Exception:  # an API call that failed: the next round retries
                log(f"pod {self.key}: {traceback.format_exc()}")
                time.sleep(1)

    def step(self):
        """One round of the pod's sync; True once the pod is gone."""
        pod = self.node.pods.get(self.uid)
        if pod is None or pod["metadata"].get("deletionTimestamp") or self.node.stopping:
            self.finish(pod)
            return True
        self.pod = pod
        if not self.sandbox_ready and not self.terminal:
            try:
                self.sandbox()
            except (ConfigError, KubeError) as err:
                self.write_status(waiting_message=str(err))
                time.sleep(2)
                return False
        if not self.terminal:
            self.sync()
            self.refresh_volumes()
        self.write_status()
        self.wake.wait(0.5)
        self.wake.clear()
        return False

    def policy(self):
        return self.pod["spec"].get("restartPolicy", "Always")

    def sync(self):
        policy = self.policy()
        for c in self.init:
            if c.done() and c.exit_code == 0:
                continue
            self.advance(c, "Never" if policy == "Never" else "OnFailure")
            if c.done() and c.exit_code != 0:
                self.terminal = True
                self.teardown_network()
            if not (c.done() and c.exit_code == 0):
                return
        for c in self.main:
            self.advance(c, policy)
        if all(c.done() for c in self.main):
            self.terminal = True
            self.teardown_network()

    def advance(self, c, policy):
        """One container one step on: killed when a probe says so, its exit
        recorded, restarted by policy after the back-off, started when due."""
        if c.running():
            if not c.kill_reason:
                return
            c.stop(self.grace(), c.kill_reason)
        if c.reap() and (policy == "Always" or (policy == "OnFailure" and c.exit_code != 0)):
            c.schedule_restart()
        if c.pending and time.time() >= c.next_start:
            c.start()

    def grace(self):
        md = self.pod["metadata"]
        g = md.get("deletionGracePeriodSeconds")
        return g if g is not None else self.pod["spec"].get("terminationGracePeriodSeconds", 30)

    def teardown_network(self):
        if self.netns:
            self.node.net.remove_pod(self.netns, self.pod_ip)
            self.netns = None

    def finish(self, pod):
        """Deleted (or the node stopping): every container stopped within the
        grace period, the sandbox removed, and the pod deleted for good."""
        self.stopping = True
        grace = 5 if self.node.stopping else self.grace()
        threads = [threading.Thread(target=c.stop, args=(grace,)) for c in self.init + self.main]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for c in self.init + self.main:
            c.reap()
        self.teardown_network()
        if pod is not None and not self.node.stopping:
            self.write_status()
            status, body = self.kube.call(
                "DELETE",
                f"api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
            )
            if status not in (200, 202, 404, 409):
                log(f"pod {self.key}: final delete answered {status}: {body}")
        shutil.rmtree(os.path.join(self.dir, "volumes"), ignore_errors=True)
        log(f"pod {self.key} stopped and removed")

    # ---- status ----
    def phase(self):
        if any(c.done() and c.exit_code != 0 for c in self.init):
            return "Failed"
        if not all(c.done() for c in self.init):
            return "Pending"
        if self.main and all(c.done() for c in self.main):
            return "Succeeded" if all(c.exit_code == 0 for c in self.main) else "Failed"
        if any(c.gen for c in self.main):
            return "Running"
        return "Pending"

    def condition(self, type_, ok, reason=None, message=None):
        status = "True" if ok else "False"
        prev = self.conditions.get(type_)
        c = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": prev["lastTransitionTime"] if prev and prev["status"] == status else now()}
        if not ok and reason:
            c["reason"] = reason
        if not ok and message:
            c["message"] = message
        self.conditions[type_] = c
        return c

    def write_status(self, waiting_message=None):
        phase = self.phase()
        terminal = phase in ("Succeeded", "Failed")
        initialized = all(c.done() and c.exit_code == 0 for c in self.init)
        unready = [c.name for c in self.main if not c.is_ready()]
        if terminal:
            reason, message = "PodCompleted", None
        else:
            reason, message = "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"
        conds = [
            self.condition("PodReadyToStartContainers", self.sandbox_ready and not terminal),
            self.condition("Initialized", initialized, "ContainersNotInitialized", f"containers with incomplete status: [{' '.join(c.name for c in self.init if not (c.done() and c.exit_code == 0))}]"),
            self.condition("Ready", not unready and not terminal, reason, message),
            self.condition("ContainersReady", not unready and not terminal, reason, message),
        ]
        for c in self.pod.get("status", {}).get("conditions") or []:
            if c["type"] == "PodScheduled":
                conds.append(c)
        status = {
            "phase": phase,
            "conditions": conds,
            "hostIP": procnet.NODE_IP,
            "hostIPs": [{"ip": procnet.NODE_IP}],
            "startTime": self.start_time,
            "containerStatuses": [c.status() for c in self.main],
        }
        if self.pod_ip:
            status["podIP"], status["podIPs"] = self.pod_ip, [{"ip": self.pod_ip}]
        if self.init:
            status["initContainerStatuses"] = [c.status() for c in self.init]
        if waiting_message:
            status["message"] = waiting_message
        if status == self.last_status:
            return
        st, body = self.kube.call(
            "PATCH",
            f"api/v1/namespaces/{self.pod['metadata']['namespace']}/pods/{self.pod['metadata']['name']}/status",
            {"status": status},
            "application/merge-patch+json",
        )
        if st == 200:
            self.last_status = status
        elif st != 404:
            log(f"pod {self.key}: status patch answered {st}: {str(body)[:300]}")


# ---- the node ----------------------------------------------------------------------------
class Node:
    def __init__(self, args):
        self.dir = args.dir
        self.root = os.path.join(args.dir, "procnode")
        os.makedirs(self.root, exist_ok=True)
        server = None
        with open(os.path.join(args.dir, "env")) as f:
            for line in f:
                if line.startswith("export OPSHOOKS_E2E_APISERVER="):
                    server = line.split("=", 1)[1].strip().strip("'")
        self.kube = Kube(server, os.path.join(args.dir, "pki"))
        self.api_port = int(server.rsplit(":", 1)[1])
        self.prefix = "opsh-" + os.path.basename(os.path.abspath(args.dir))[-6:].lower()
        with open(os.path.join(self.root, "netns-prefix"), "w") as f:
            f.write(self.prefix + "\n")
        self.net = procnet.Network(self.prefix, args.service_cidr)
        self.bin = args.bin
        self.pods = {}
        self.workers = {}
        self.stopping = False
        self.proxy = None

    def start(self):
        self.net.up()
        procnet.ApiProxy(self.net.node, self.api_port)
        procnet.ApiProxy(self.net.node, self.api_port, host=procnet.NODE_IP)
        procnet.Dns(self.kube, self.net.node)
        self.register()
        threading.Thread(target=self.heartbeat, name="lease", daemon=True).start()
        self.start_kube_proxy()

    def start_kube_proxy(self):
        config = os.path.join(self.root, "kube-proxy.kubeconfig")
        with open(os.path.join(self.dir, "kubeconfig")) as src, open(config, "w") as dst:
            dst.write(re.sub(r"server: https://127\.0\.0\.1:\d+", f"server: https://127.0.0.1:{procnet.ApiProxy.PORT}", src.read()))
        os.chmod(config, 0o600)
        out = open(os.path.join(self.dir, "kube-proxy.log"), "ab")
        self.proxy = subprocess.Popen(
            [
                "ip", "netns", "exec", self.net.node, os.path.join(self.bin, "kube-proxy"),
                f"--kubeconfig={config}", f"--hostname-override={NODE}", "--proxy-mode=iptables",
                f"--cluster-cidr={procnet.POD_RANGE}", "--conntrack-max-per-core=0",
                "--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256",
                "--iptables-min-sync-period=0s", "--v=1",
            ],
            stdout=out, stderr=out, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def register(self):
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "labels": {
                    "kubernetes.io/hostname": NODE,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "process",
                    POOL_KEY: POOL,
                },
            },
            "spec": {"podCIDR": "10.89.1.0/24", "taints": [{"key": POOL_KEY, "value": POOL, "effect": "NoSchedule"}]},
        }
        if self.kube.get("Node", None, NODE) is None:
            self.kube.create(node)
        # The API server publishes no endpoint for the `kubernetes` Service
        # (cluster.sh: its address is loopback, --endpoint-reconciler-type=none):
        # the node's relay is that endpoint, so in-cluster clients (a kubectl
        # image with its projected token) reach it at the Service's cluster IP.
        self.kube.apply(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes-proc-node", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [procnet.NODE_IP], "conditions": {"ready": True}, "nodeName": NODE}],
                "ports": [{"name": "https", "port": procnet.ApiProxy.PORT, "protocol": "TCP"}],
            }
        )
        self.node_status()

    def node_status(self):
        t = now()
        conds = [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "the process kubelet is posting ready status"},
        ]
        for c in conds:
            c.update(lastHeartbeatTime=t, lastTransitionTime=t)
        # As kwok's nodes: room for any size (nothing is enforced).
        resources = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        status = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conds,
            "addresses": [{"type": "InternalIP", "address": procnet.NODE_IP}, {"type": "Hostname", "address": NODE}],
            "nodeInfo": {
                "kubeletVersion": K8S_VERSION, "kubeProxyVersion": K8S_VERSION, "operatingSystem": "linux",
                "architecture": "amd64", "containerRuntimeVersion": "procnode://1", "osImage": "process node",
                "kernelVersion": os.uname().release, "machineID": "", "systemUUID": "", "bootID": "",
            },
        }  # fmt: skip
        self.kube.patch("Node", None, NODE, {"status": status}, sub="status")

    def heartbeat(self):
        """The node's Lease, renewed every 10 s as the kubelet does."""
        path = f"apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
        while not self.stopping:
            micro = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": NODE, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40, "renewTime": micro},
            }
            try:
                status, _ = self.kube.call("PATCH", path + "?fieldManager=procnode&force=true", lease, "application/apply-patch+yaml")
                if status not in (200, 201):
                    log(f"lease renewal answered {status}")
            except Exception as err:  # renewed at the next round
                log(f"lease renewal failed: {err}")
            time.sleep(10)

    def watch_pods(self):
        """The pods bound to this node, listed every half second."""
        query = f"api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}"
        while not self.stopping:
            try:
                status, body = self.kube.call("GET", query)
            except Exception:  # the API server restarting: list again
                time.sleep(1)
                continue
            if status != 200:
                time.sleep(1)
                continue
            seen = {}
            for pod in body["items"]:
                uid = pod["metadata"]["uid"]
                seen[uid] = pod
                if uid not in self.workers:
                    phase = (pod.get("status") or {}).get("phase")
                    if phase in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
                        continue  # ran before this node started: nothing to do
                    self.pods[uid] = pod
                    self.workers[uid] = PodWorker(self, pod)
            for uid in list(self.pods):
                if uid in seen:
                    self.pods[uid] = seen[uid]
                else:
                    del self.pods[uid]
            for uid, w in list(self.workers.items()):
                if not w.thread.is_alive() and uid not in seen:
                    del self.workers[uid]
                elif uid in seen and seen[uid]["metadata"].get("deletionTimestamp"):
                    w.poke()
            time.sleep(0.5)

    def stop(self):
        self.stopping = True
        for w in list(self.workers.values()):
            w.poke()
        for w in list(self.workers.values()):
            w.thread.join(timeout=15)
        if self.proxy:
            self.proxy.terminate()
            try:
                self.proxy.wait(10)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
        self.net.down()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True, help="the cluster's DIR (cluster.sh up)")
    parser.add_argument("--bin", required=True, help="the tools' bin directory (kube-proxy)")
    parser.add_argument("--service-cidr", default="10.0.0.0/24")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("procnode.py needs root (network and mount namespaces)")
    global TOOLS
    TOOLS = args.bin
    node = Node(args)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    node.start()
    threading.Thread(target=node.watch_pods, name="pods", daemon=True).start()
    log(f"node {NODE} up: network namespaces {node.prefix}-*, node address {procnet.NODE_IP}")
    while not done.wait(1):
        if node.proxy.poll() is not None:
            log(f"kube-proxy exited {node.proxy.returncode}: stopping")
            break
    node.stop()
    log(f"node {NODE} stopped")


if __name__ == "__main__":
    main()
