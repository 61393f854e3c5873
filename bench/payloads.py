#!/usr/bin/env python3
"""The five request bodies of issue 11, as Metacontroller v2 sync requests.

Each is a steady-state resync (every desired pod observed, Running and
Ready), built on the shapes and field names of tests/fixtures/webserver/, and
serialised compactly, as Metacontroller sends it:

  webserver-1000    WebServer, 1000 observed pods as the API server returns
                    them (spec defaults, status with conditions and
                    containerStatuses), about 1.1 MB
  webserver-1000-lean
                    WebServer, 1000 observed pods of the lean "bench shape"
                    (name, labels, one container, phase, Ready), about 0.33 MB
  webserver-5000    WebServer, 5000 observed pods as in webserver-1000,
                    about 5.5 MB (replicas above the spec's 1000 are
                    refused, so the parent asks for 1000 and the 4000 others
                    are the pods a scale-down from 5000 leaves behind)
  webserver-3       WebServer, 3 observed pods as in webserver-1000, about 4 KB
  database-running  tests/fixtures/database/v2-running, about 6 KB

Usage:
  python3 bench/payloads.py DIR            write DIR/<name>.json, print sizes

bench/run.py posts every payload to every server before it measures and
stops unless each answers 200 (its preflight).
"""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

NAMESPACE = "shop"
IMAGE = "nginxdemos/hello"
PARENT_UID = "0b7e6d4a-1111-4222-8333-444455556666"


def controller():
    """The CompositeController of the WebServer fixtures."""
    return json.loads((REPO / "tests/fixtures/webserver/v2-scale-up/request.json").read_text())["controller"]


def parent(name, replicas):
    return {
        "apiVersion": "opshooks.io/v1alpha1",
        "kind": "WebServer",
        "metadata": {
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "generation": 3,
            "name": name,
            "namespace": NAMESPACE,
            "resourceVersion": "4711",
            "uid": PARENT_UID,
        },
        "spec": {"image": IMAGE, "port": 80, "replicas": replicas},
        "status": {
            "conditions": [
                {"lastTransitionTime": "2026-01-01T00:02:00Z", "message": f"{replicas} of {replicas} pods are ready",
                 "observedGeneration": 3, "reason": "AllPodsReady", "status": "True", "type": "Ready"},
                {"lastTransitionTime": "2026-01-01T00:02:00Z", "message": f"every pod runs {IMAGE} on port 80",
                 "observedGeneration": 3, "reason": "AllPodsCurrent", "status": "True", "type": "UpToDate"},
            ],
            "count": replicas,
            "observedGeneration": 3,
            "readyReplicas": replicas,
        },
    }


def labels(name):
    return {
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": "opshooks",
        "app.kubernetes.io/name": "webserver",
        "controller-uid": PARENT_UID,
    }


def owner(name):
    return [{"apiVersion": "opshooks.io/v1alpha1", "blockOwnerDeletion": True, "controller": True,
             "kind": "WebServer", "name": name, "uid": PARENT_UID}]


def full_pod(parent_name, i):
    """A running, ready pod as the API server returns it, less the defaults
    and the fields nobody reads (about 1.1 KB)."""
    name = f"{parent_name}-{i}"
    ip = f"10.{i // 65536 + 1}.{i // 256 % 256}.{i % 256}"
    started = f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z"
    cond = lambda kind: {"lastTransitionTime": started, "status": "True", "type": kind}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "labels": labels(parent_name),
            "name": name,
            "namespace": NAMESPACE,
            "ownerReferences": owner(parent_name),
            "resourceVersion": str(100000 + i),
            "uid": f"7c1e{i:04x}-5a0b-4c3d-8e9f-{i:012x}",
        },
        "spec": {
            "containers": [{
                "image": IMAGE,
                "name": "web",
                "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
                "readinessProbe": {"periodSeconds": 5, "tcpSocket": {"port": "http"}},
            }],
            "nodeName": f"node-{i % 7 + 1}",
        },
        "status": {
            "conditions": [cond("Ready"), cond("PodScheduled")],
            "containerStatuses": [{
                "name": "web",
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": started}},
            }],
            "phase": "Running",
            "podIP": ip,
        },
    }


def lean_pod(parent_name, i):
    """The lean "bench shape" pod of the first benchmark (about 0.3 KB)."""
    name = f"{parent_name}-{i}"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/instance": parent_name}},
        "spec": {"containers": [{"name": "web", "image": IMAGE, "ports": [{"containerPort": 80}]}]},
        "status": {"phase": "Running", "podIP": f"10.0.{i // 250}.{i % 250}",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def webserver(name, replicas, observed, pod):
    return {
        "children": {"Pod.v1": {f"{NAMESPACE}/{name}-{i}": pod(name, i) for i in range(observed)}},
        "controller": controller(),
        "finalizing": False,
        "parent": parent(name, replicas),
        "related": {},
    }


def fixture(operator, case):
    return json.loads((REPO / "tests/fixtures" / operator / case / "request.json").read_text())


# name -> (label for the table, route, request)
PAYLOADS = {
    "webserver-1000": ("WebServer, 1000 observed pods", "/webserver/sync",
                       lambda: webserver("web", 1000, 1000, full_pod)),
    "webserver-1000-lean": ("WebServer, 1000 pods (bench shape)", "/webserver/sync",
                            lambda: webserver("big", 1000, 1000, lean_pod)),
    "webserver-5000": ("WebServer, 5000 observed pods", "/webserver/sync",
                       lambda: webserver("web", 1000, 5000, full_pod)),
    "webserver-3": ("WebServer, 3 pods", "/webserver/sync",
                    lambda: webserver("hello", 3, 3, full_pod)),
    "database-running": ("Database, running", "/database/sync",
                         lambda: fixture("database", "v2-running")),
}


def encode(request):
    return json.dumps(request, separators=(",", ":")).encode()


def write(directory):
    """Writes every payload into directory; returns {name: (label, route, path, size)}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (label, route, build) in PAYLOADS.items():
        path = directory / f"{name}.json"
        body = encode(build())
        if not path.exists() or path.read_bytes() != body:
            path.write_bytes(body)
        written[name] = (label, route, path, len(body))
    return written


def human(size):
    return f"{size / 1e6:.2f} MB" if size >= 100_000 else f"{size / 1e3:.1f} KB"


def main():
    args = sys.argv[1:]
    if len(args) != 1:
        sys.exit(__doc__)
    for name, (label, route, path, size) in write(args[0]).items():
        print(f"{name:<20} {human(size):>9}  POST {route:<16} {path}")


if __name__ == "__main__":
    main()
