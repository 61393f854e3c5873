"""A fixed external metric for the HorizontalPodAutoscaler in the real loop.

The HPA controller in the real kube-controller-manager reads External
metrics through the API server's aggregation layer
(`external.metrics.k8s.io/v1beta1`). A real metrics pipeline (Prometheus
and an adapter, or metrics-server scraping kubelets) does not fit the CI
budget and kwok runs no containers to measure, so this serves one metric
whose value the scenario sets per namespace: what KEDA or
prometheus-adapter would answer. Everything else is real: the API server
proxies to it over TLS (its serving certificate is checked against the
APIService's caBundle, and the API server authenticates with its
front-proxy client certificate), and the HPA controller computes and writes
the scale through the parent's scale subresource.

The API server reaches it by the endpoint of a selectorless Service
(`--enable-aggregator-routing`, set by cluster.sh), at the first global
IPv4 address of this machine (endpoints refuse loopback).
"""

import base64
import json
import os
import ssl
import subprocess
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GROUP_VERSION = "external.metrics.k8s.io/v1beta1"
NS = "kube-system"
SERVICE = "opshooks-e2e-metrics"

_lock = threading.Lock()
_values = {}  # (namespace, metric) -> quantity string
_server = None


def set_value(namespace, metric, quantity):
    """The value the metric `metric` has in `namespace` from now on."""
    with _lock:
        _values[(namespace, metric)] = quantity


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *_args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        base = f"/apis/{GROUP_VERSION}"
        if path == base:
            self._send(
                200,
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": GROUP_VERSION,
                    "resources": [
                        {"name": "*", "namespaced": True, "kind": "ExternalMetricValueList", "verbs": ["get"]}
                    ],
                },
            )
            return
        parts = path[len(base) :].strip("/").split("/") if path.startswith(base + "/") else []
        if len(parts) == 3 and parts[0] == "namespaces":
            with _lock:
                value = _values.get((parts[1], parts[2]))
            if value is not None:
                now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                item = {"metricName": parts[2], "metricLabels": {}, "timestamp": now, "value": value}
                self._send(
                    200,
                    {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": [item]},
                )
                return
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})


def host_address():
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True, check=True
    ).stdout
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            return fields[fields.index("inet") + 1].split("/")[0]
    raise RuntimeError("no global IPv4 address on this machine for the metrics endpoint")


def start(kube, workdir):
    """Serves the metric (once per process) and registers it with the API
    server: a serving certificate, a selectorless Service with its
    Endpoints, and the APIService naming the certificate's CA."""
    global _server
    with _lock:
        if _server is not None:
            return
        os.makedirs(workdir, exist_ok=True)
        crt, key = f"{workdir}/metrics.crt", f"{workdir}/metrics.key"
        dns = f"{SERVICE}.{NS}.svc"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-days", "1", "-subj", f"/CN={dns}", "-addext", f"subjectAltName=DNS:{dns}",
             "-keyout", key, "-out", crt],
            check=True, capture_output=True,
        )  # fmt: skip
        address = host_address()
        server = ThreadingHTTPServer(("0.0.0.0", 0), _Handler)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(crt, key)
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, name="metrics-api", daemon=True).start()
        _server = server
    port = server.server_address[1]
    with open(crt, "rb") as f:
        ca_bundle = base64.b64encode(f.read()).decode()
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NS},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
        }
    )
    kube.apply(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": SERVICE,
                "namespace": NS,
                "labels": {"kubernetes.io/service-name": SERVICE},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }
    )
    kube.apply(
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1beta1.external.metrics.k8s.io"},
            "spec": {
                "group": "external.metrics.k8s.io",
                "version": "v1beta1",
                "service": {"name": SERVICE, "namespace": NS, "port": 443},
                "caBundle": ca_bundle,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        }
    )
