"""A small Kubernetes API client for the control-loop suite (stdlib only).

It talks to the test API server with the admin client certificate that
cluster.sh wrote under DIR/pki: plain JSON over HTTPS, one persistent
connection per thread, and watch streams read line by line.
"""

import http.client
import json
import ssl
import threading
import time
import urllib.parse
from datetime import datetime

FIELD_MANAGER = "opshooks-e2e"

# kind: (group/version path, plural, namespaced)
RESOURCES = {
    "Pod": ("api/v1", "pods", True),
    "PersistentVolumeClaim": ("api/v1", "persistentvolumeclaims", True),
    "PersistentVolume": ("api/v1", "persistentvolumes", False),
    "Service": ("api/v1", "services", True),
    "ConfigMap": ("api/v1", "configmaps", True),
    "Secret": ("api/v1", "secrets", True),
    "Event": ("api/v1", "events", True),
    "Namespace": ("api/v1", "namespaces", False),
    "Node": ("api/v1", "nodes", False),
    "ServiceAccount": ("api/v1", "serviceaccounts", True),
    "Role": ("apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "StatefulSet": ("apis/apps/v1", "statefulsets", True),
    "Deployment": ("apis/apps/v1", "deployments", True),
    "Job": ("apis/batch/v1", "jobs", True),
    "CronJob": ("apis/batch/v1", "cronjobs", True),
    "EndpointSlice": ("apis/discovery.k8s.io/v1", "endpointslices", True),
    "PodDisruptionBudget": ("apis/policy/v1", "poddisruptionbudgets", True),
    "HorizontalPodAutoscaler": ("apis/autoscaling/v2", "horizontalpodautoscalers", True),
    "APIService": ("apis/apiregistration.k8s.io/v1", "apiservices", False),
    "WebServer": ("apis/opshooks.io/v1alpha1", "webservers", True),
    "Memcached": ("apis/opshooks.io/v1alpha1", "memcacheds", True),
    "Backup": ("apis/opshooks.io/v1alpha1", "backups", True),
    "Database": ("apis/opshooks.io/v1alpha1", "databases", True),
    "Stage": ("apis/kwok.x-k8s.io/v1alpha1", "stages", False),
    "Certificate": ("apis/cert-manager.io/v1", "certificates", True),
    "Issuer": ("apis/cert-manager.io/v1", "issuers", True),
    "PodMonitor": ("apis/monitoring.coreos.com/v1", "podmonitors", True),
    "ControllerRevision": ("apis/metacontroller.k8s.io/v1alpha1", "controllerrevisions", True),
    "CompositeController": ("apis/metacontroller.k8s.io/v1alpha1", "compositecontrollers", False),
}


class KubeError(Exception):
    def __init__(self, status, body, what):
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{what}: HTTP {status}: {message}")
        self.status = status
        self.body = body


def path(kind, ns=None, name=None, sub=None, query=None):
    gv, plural, namespaced = RESOURCES[kind]
    p = gv
    if namespaced and ns:
        p += f"/namespaces/{ns}"
    p += f"/{plural}"
    if name:
        p += f"/{name}"
    if sub:
        p += f"/{sub}"
    if query:
        p += "?" + urllib.parse.urlencode(query)
    return p


def parse_time(text):
    """RFC 3339 seconds (what metadata timestamps carry) to a Unix time."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Kube:
    def __init__(self, server, pki):
        url = urllib.parse.urlparse(server)
        self.host, self.port = url.hostname, url.port
        self.ctx = ssl.create_default_context(cafile=f"{pki}/ca.crt")
        self.ctx.load_cert_chain(f"{pki}/admin.crt", f"{pki}/admin.key")
        self.local = threading.local()

    def _connection(self, timeout=30):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def call(self, method, p, body=None, content_type="application/json"):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(4):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = self._connection()
            try:
                conn.request(method, "/" + p, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt == 3:
                    raise
                time.sleep(0.5)
                continue
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = raw.decode(errors="replace")
            return resp.status, parsed
        raise RuntimeError("unreachable")

    # ---- verbs ----
    def get(self, kind, ns, name):
        status, body = self.call("GET", path(kind, ns, name))
        if status == 404:
            return None
        if status != 200:
            raise KubeError(status, body, f"get {kind} {ns}/{name}")
        return body

    def list(self, kind, ns=None, selector=None):
        query = {"labelSelector": selector} if selector else None
        status, body = self.call("GET", path(kind, ns, query=query))
        if status != 200:
            raise KubeError(status, body, f"list {kind} in {ns}")
        return body["items"]

    def create(self, obj):
        kind, ns = obj["kind"], obj["metadata"].get("namespace")
        status, body = self.call("POST", path(kind, ns, query={"fieldManager": FIELD_MANAGER}), obj)
        if status != 201:
            raise KubeError(status, body, f"create {kind} {ns}/{obj['metadata'].get('name')}")
        return body

    def apply(self, obj, force=True):
        """Server-side apply with strict field validation."""
        kind, ns, name = obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]
        query = {"fieldManager": FIELD_MANAGER, "fieldValidation": "Strict"}
        if force:
            query["force"] = "true"
        status, body = self.call(
            "PATCH", path(kind, ns, name, query=query), obj, "application/apply-patch+yaml"
        )
        if status not in (200, 201):
            raise KubeError(status, body, f"apply {kind} {ns}/{name}")
        return body

    def patch(self, kind, ns, name, patch, sub=None):
        status, body = self.call(
            "PATCH",
            path(kind, ns, name, sub=sub, query={"fieldManager": FIELD_MANAGER}),
            patch,
            "application/merge-patch+json",
        )
        if status != 200:
            raise KubeError(status, body, f"patch {kind} {ns}/{name}")
        return body

    def delete(self, kind, ns, name, propagation="Background"):
        status, body = self.call(
            "DELETE",
            path(kind, ns, name),
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation},
        )
        if status not in (200, 202, 404):
            raise KubeError(status, body, f"delete {kind} {ns}/{name}")
        return status != 404

    # ---- watch ----
    def watch(self, kind, handler, stop, on_relist=None):
        """Calls handler(type, obj) for every object (type SYNC on each
        (re)list) and every event, until stop is set. A stream that ends is
        resumed from the last resourceVersion; an expired one relists.

        A relist diffs against what the stream had shown: an object known
        before and absent from the new list was deleted in the gap, and
        handler gets a DELETED for it (its last known state, marked with
        SYNTHESIZED), so no deletion is lost to a relist. on_relist(kind,
        synthesized) is called after each relist but the first.

        A handler that raises ends the watch with WatchDied: an event the
        invariants could not take in must fail the run, not be skipped."""
        rv = None
        known = {}  # uid -> the object as last seen, to diff a relist against
        listed = False

        def deliver(etype, obj):
            uid = obj.get("metadata", {}).get("uid")
            if uid:
                if etype == "DELETED":
                    known.pop(uid, None)
                else:
                    known[uid] = obj
            try:
                handler(etype, obj)
            except Exception as err:
                raise WatchDied(f"the handler of the {kind} watch failed on {etype}: {err!r}") from err

        while not stop.is_set():
            try:
                if rv is None:
                    status, body = self.call("GET", path(kind))
                    if status != 200:
                        raise KubeError(status, body, f"list {kind}")
                    list_rv = body["metadata"]["resourceVersion"]
                    present = set()
                    for item in body["items"]:
                        item.setdefault("kind", kind)
                        present.add(item["metadata"]["uid"])
                        deliver("SYNC", item)
                    gone = [obj for uid, obj in known.items() if uid not in present]
                    for obj in gone:
                        # Its deletion happened at some point up to the list's
                        # resourceVersion: the latest moment it can have had.
                        obj = json.loads(json.dumps(obj))
                        md = obj["metadata"]
                        md.setdefault("annotations", {})[SYNTHESIZED] = md.get("resourceVersion", "")
                        md["resourceVersion"] = list_rv
                        deliver("DELETED", obj)
                    rv = list_rv
                    if listed and on_relist:
                        on_relist(kind, len(gone))
                    listed = True
                conn = self._connection(timeout=40)
                q = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "30", "allowWatchBookmarks": "true"}
                conn.request("GET", "/" + path(kind, query=q), headers={"Accept": "application/json"})
                resp = conn.getresponse()
                if resp.status != 200:
                    resp.read()
                    conn.close()
                    rv = None
                    time.sleep(1)
                    continue
                while not stop.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    obj = ev.get("object", {})
                    if ev["type"] == "ERROR":
                        if obj.get("code") == 410:
                            rv = None
                        break
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if ev["type"] == "BOOKMARK":
                        continue
                    obj.setdefault("kind", kind)
                    deliver(ev["type"], obj)
                conn.close()
            except (http.client.HTTPException, OSError, ValueError):
                # A dropped stream: resume from the last resourceVersion.
                if stop.is_set():
                    return
                time.sleep(0.5)
            except KubeError:
                # An API still starting (a CRD just installed answers 429 for
                # a moment): list again.
                rv = None
                time.sleep(0.5)


class WatchDied(Exception):
    """A watch that cannot go on: its handler failed on an event."""


# The annotation a DELETED made up by a relist carries (on a copy of the
# object's last known state): the resourceVersion it was last seen at. Its
# metadata.resourceVersion is the relist's, the latest its deletion can be.
SYNTHESIZED = "e2e.opshooks.io/synthesized-deletion"


def condition(obj, type_):
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def pod_ready(pod):
    if pod["metadata"].get("deletionTimestamp"):
        return False
    c = condition(pod, "Ready")
    return bool(c and c.get("status") == "True")


def job_outcome(job):
    if not job:
        return None
    if (condition(job, "Complete") or {}).get("status") == "True":
        return "Succeeded"
    if (condition(job, "Failed") or {}).get("status") == "True":
        return "Failed"
    return "Running"


def controller_uid(obj):
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None
