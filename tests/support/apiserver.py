"""A stand-in for the Kubernetes API server on loopback, for the sidecars
that talk to it themselves: lease.sh (GETs its role ConfigMap) and
archiver.sh (PATCHes its report ConfigMap). `ApiServer` answers over
HTTPS as the API server does for a namespace's ConfigMaps, and records
every request; make_ca, make_cert and credentials make the cluster's CA,
a server certificate and the folder a projected ServiceAccount token is
mounted as. What is checked against it is the script's side; the real
API server, through kube-proxy, is the e2e suite's (tests/e2e).
"""
from __future__ import annotations

import dataclasses
import json
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

# The one content type a merge patch may carry: a JSON patch or a
# strategic one would be read otherwise, and a plain JSON body is refused.
MERGE_PATCH = "application/merge-patch+json"


def make_ca(dir: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA in `dir`: (key, certificate)."""
    key, crt = dir / f"{name}.key", dir / f"{name}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", crt, "-days", "2", "-subj", f"/CN={name}"], check=True, capture_output=True)
    return key, crt


def make_cert(dir: Path, ca: tuple[Path, Path], name: str, ip: str) -> tuple[Path, Path]:
    """A server certificate `ca` signs for `ip` (and the API server's
    in-cluster name): (key, certificate)."""
    key, csr, crt, ext = dir / f"{name}.key", dir / f"{name}.csr", dir / f"{name}.crt", dir / f"{name}.ext"
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", csr, "-subj", f"/CN={name}"], check=True, capture_output=True)
    ext.write_text(f"subjectAltName=IP:{ip},DNS:kubernetes.default.svc\n")
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca[1], "-CAkey", ca[0], "-CAcreateserial",
                    "-out", crt, "-days", "2", "-extfile", ext], check=True, capture_output=True)
    return key, crt


def credentials(dir: Path, ca: Path, token: str) -> Path:
    """`dir` as the kubelet mounts a projected ServiceAccount token: the
    token and the cluster's CA (`ca`, a certificate's path)."""
    dir.mkdir(parents=True, exist_ok=True)
    (dir / "ca.crt").write_bytes(ca.read_bytes())
    (dir / "token").write_text(token)
    return dir


def merged(target: object, patch: object) -> object:
    """`patch` applied to `target` as a JSON merge patch (RFC 7386): an
    object's keys merged, null deleting one, anything else replacing."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


@dataclasses.dataclass
class Request:
    method: str
    path: str  # with its query
    headers: dict[str, str]  # names in lower case (urllib sends "Content-type")
    body: object  # the JSON it carried, parsed; None without one


class ApiServer:
    """HTTPS on 127.0.0.1 (`port`) with `cert`, serving the ConfigMaps of
    `namespace` held in `configmaps` (name to object) at
    /api/v1/namespaces/NS/configmaps/NAME: a GET answers the object; a
    PATCH merges its body into it (merge patch only, 415 otherwise; data
    values strings only, 422 otherwise) and answers the result. A path
    naming no ConfigMap there gets a 404 Status, as a PATCH that would
    create one does. `answer` (status, body), while set, answers every
    request for one instead, touching nothing: a refusal, or a body no
    ConfigMap would be. `requests` holds all it was sent, in order."""

    def __init__(self, cert: tuple[Path, Path], namespace: str, configmaps: dict[str, dict] | None = None) -> None:
        self.namespace = namespace
        self.configmaps: dict[str, dict] = dict(configmaps or {})
        self.answer: tuple[int, dict] | None = None
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server name)
                self.reply(*server.serve(self.record()))

            def do_PATCH(self) -> None:  # noqa: N802
                self.reply(*server.serve(self.record()))

            def record(self) -> Request:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                server.requests.append(request)
                return request

            def reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert[1], cert[0])
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def serve(self, request: Request) -> tuple[int, dict]:
        prefix = f"/api/v1/namespaces/{self.namespace}/configmaps/"
        path = urlsplit(request.path).path
        name = path[len(prefix):] if path.startswith(prefix) else None
        with self.lock:
            if name not in self.configmaps:
                return status_answer(404, "NotFound", f"no {request.path}")
            if self.answer is not None:
                return self.answer
            if request.method == "GET":
                return 200, self.configmaps[name]
            if request.headers.get("content-type") != MERGE_PATCH:
                return status_answer(415, "UnsupportedMediaType", f"the body is {request.headers.get('content-type')}")
            after = merged(self.configmaps[name], request.body)
            if not isinstance(after, dict) or not all(isinstance(v, str) for v in after.get("data", {}).values()):
                return status_answer(422, "Invalid", f"not a ConfigMap's data: {request.body!r}")
            self.configmaps[name] = after
            return 200, after

    @property
    def tokens(self) -> list[str]:
        """The Authorization header of every request ("" without one)."""
        return [r.headers.get("authorization", "") for r in self.requests]

    def wait_requests(self, count: int, timeout: float = 15) -> None:
        """Until the client has sent `count` requests in all."""
        deadline = time.monotonic() + timeout
        while len(self.requests) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(self.requests) >= count, f"{len(self.requests)} requests, want {count}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def status_answer(code: int, reason: str, message: str) -> tuple[int, dict]:
    """An error as the API server answers it: a Status."""
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                  "reason": reason, "code": code}
