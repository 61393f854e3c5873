#!/usr/bin/env python3
"""A WebServer hook in the style of Metacontroller's own Python examples.

The standard library only: http.server's single-threaded HTTPServer with a
BaseHTTPRequestHandler (HTTP/1.0, one connection per request, as in the
examples) and json. Every POST path gets the WebServer logic (desired:
spec.replicas pods <parent>-<i> with the parent's image and port; status:
the observed pods Running or Pending, and those Ready), so a Database
payload is answered with WebServer-style logic too.

Usage: python3 hook.py [--listen HOST:PORT]   (default 127.0.0.1:8080)
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Controller(BaseHTTPRequestHandler):
    def sync(self, parent, children):
        name = parent["metadata"]["name"]
        spec = parent.get("spec", {})
        image = spec.get("image", "nginxdemos/hello")
        port = spec.get("port", 80)
        replicas = spec.get("replicas", 0)
        labels = {
            "app.kubernetes.io/instance": name,
            "app.kubernetes.io/managed-by": "opshooks",
            "app.kubernetes.io/name": "webserver",
            "controller-uid": parent["metadata"].get("uid", ""),
        }
        desired_pods = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": parent["metadata"].get("namespace", ""),
                    "labels": labels,
                },
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": image,
                            "ports": [{"containerPort": port, "name": "http", "protocol": "TCP"}],
                            "readinessProbe": {"periodSeconds": 5, "tcpSocket": {"port": "http"}},
                        }
                    ]
                },
            }
            for i in range(replicas)
        ]
        count = ready = 0
        for pod in children.get("Pod.v1", {}).values():
            status = pod.get("status", {})
            if status.get("phase") in ("Running", "Pending"):
                count += 1
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in status.get("conditions", [])):
                ready += 1
        all_ready = ready >= replicas
        condition = {
            "type": "Ready",
            "status": "True" if all_ready else "False",
            "reason": "AllPodsReady" if all_ready else "PodsNotReady",
            "message": f"{ready} of {replicas} pods are ready",
            "observedGeneration": parent["metadata"].get("generation", 0),
        }
        return {
            "status": {"count": count, "readyReplicas": ready, "conditions": [condition]},
            "children": desired_pods,
        }

    def do_GET(self):
        # /readyz, for the harness to see the server is up
        self.send_response(200)
        self.send_header("Content-type", "text/plain")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def do_POST(self):
        observed = json.loads(self.rfile.read(int(self.headers.get("content-length"))))
        desired = self.sync(observed["parent"], observed["children"])
        self.send_response(200)
        self.send_header("Content-type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(desired).encode())

    def log_message(self, format, *args):
        pass  # the examples log each request to stderr; the benchmark does not read it


def main():
    listen = "127.0.0.1:8080"
    if len(sys.argv) == 3 and sys.argv[1] == "--listen":
        listen = sys.argv[2]
    elif len(sys.argv) != 1:
        sys.exit("usage: hook.py [--listen HOST:PORT]")
    host, _, port = listen.rpartition(":")
    HTTPServer((host, int(port)), Controller).serve_forever()


if __name__ == "__main__":
    main()
