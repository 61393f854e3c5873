"""lease.sh, each instance's lease sidecar (issue 32 item 5), against an
HTTPS server on loopback that answers as the API server does for
`GET /api/v1/namespaces/NS/configmaps/NAME` (tests/support/apiserver.py):
the role ConfigMap as JSON with a 200, or a Status with the error's code.
What is checked is the script's
side: the file it writes and when it leaves it alone (a partition, a
refusal, a certificate that is not the cluster's, a value that is not a
role). The sidecar against the real API server, through kube-proxy, with a
projected token, runs in the real loop (tests/e2e, `dbreal`: no primary
starts without its lease).
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from apiserver import ApiServer, credentials, make_ca, make_cert  # tests/support
from pods import uptime
from postgres import SYSTEM_PATH, scratch, script_argv, shell_path  # noqa: F401 (scratch: autouse)

NS, NAME = "shop", "orders-role"


def configmap(primary: str, epoch: int, initialized: str = "true") -> dict:
    return {"kind": "ConfigMap", "metadata": {"name": NAME, "namespace": NS},
            "data": {"primary": primary, "epoch": str(epoch), "initialized": initialized}}


class Sidecar:
    def __init__(self, work: Path, port: int, ca: Path, host: str = "127.0.0.1") -> None:
        self.creds = credentials(work / "creds", ca, "token-one")
        (work / "lease").mkdir(exist_ok=True)
        self.file = work / "lease" / "lease"
        self.log = work / "sidecar.log"
        env = {"PATH": SYSTEM_PATH, "NAMESPACE": NS, "CONFIGMAP": NAME, "LEASE_FILE": str(self.file),
               "LEASE_CREDENTIALS": str(self.creds), "LEASE_RENEW_SECONDS": "1",
               "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port)}
        self.proc = subprocess.Popen(script_argv("lease.sh"), env=env, executable=shell_path("dash"),
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), start_new_session=True)

    def lease(self) -> tuple[int, str, str, str] | None:
        try:
            at, epoch, primary, initialized = self.file.read_text().split()
        except (OSError, ValueError):
            return None
        return int(at), epoch, primary, initialized

    def wait(self, want: tuple[str, str, str], timeout: float = 15) -> tuple[int, str, str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.lease()
            if got and got[1:] == want:
                return got
            time.sleep(0.2)
        raise AssertionError(f"lease {self.lease()}, want {want}; log: {self.log.read_text()}")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def pki(scratch: Path):
    ca = make_ca(scratch, "cluster-ca")
    other = make_ca(scratch, "other-ca")
    return {"ca": ca, "server": make_cert(scratch, ca, "apiserver", "127.0.0.1"),
            "forged": make_cert(scratch, other, "forged", "127.0.0.1"),
            "elsewhere": make_cert(scratch, ca, "elsewhere", "10.0.0.1")}


def test_the_lease_follows_the_role_and_ages_when_it_cannot_be_read(scratch: Path, pki):
    api = ApiServer(pki["server"], NS, {NAME: configmap("orders-0", 1)})
    car = Sidecar(scratch / "pod", api.port, pki["ca"][1])
    try:
        before = uptime()
        at, _, _, _ = car.wait(("1", "orders-0", "true"))
        assert before - 1 <= at <= uptime(), f"the lease's time {at} is not the time of its request ({before}..)"
        assert api.tokens and all(t == "Bearer token-one" for t in api.tokens), api.tokens
        # The role changes: the lease follows within a renewal.
        api.configmaps[NAME] = configmap("orders-1", 2, "false")
        car.wait(("2", "orders-1", "false"))
        # The token is read again on each request (the kubelet rotates it).
        (car.creds / "token").write_text("token-two")
        deadline = time.monotonic() + 10
        while api.tokens[-1] != "Bearer token-two" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert api.tokens[-1] == "Bearer token-two", api.tokens[-3:]
        # Refused (RBAC), or an answer that is no role, or no server: the
        # file is left as it was, so it ages.
        for answer in [(403, {"kind": "Status", "message": "configmaps \"orders-role\" is forbidden"}),
                       (200, configmap("orders-1; touch /tmp/x", 3)),
                       (200, configmap("orders-1", "3 orders-9")),
                       (200, configmap("orders-1", 3, "yes")),
                       (200, configmap("orders-1", 3, "true orders-9")),
                       (200, {"kind": "ConfigMap", "data": {"primary": "orders-1", "epoch": "3"}}),
                       (200, {"kind": "ConfigMap", "data": {"primary": "orders-1"}}),
                       (200, {"kind": "ConfigMap"})]:
            api.answer = answer
            # A renewal already in flight may still carry the last answer:
            # the lease is read once one whole request was answered so
            # (the sidecar asks one at a time: the next one has begun).
            api.wait_requests(len(api.tokens) + 2)
            kept = car.lease()
            time.sleep(2.5)
            assert car.lease() == kept, f"{answer}: the lease was rewritten to {car.lease()}"
        assert "HTTP 403" in car.log.read_text(), car.log.read_text()
        api.configmaps[NAME] = configmap("orders-1", 4)
        api.answer = None
        car.wait(("4", "orders-1", "true"))
        api.close()
        kept = car.lease()
        time.sleep(2.5)
        assert car.lease() == kept, "rewritten with no API server"
        assert "no HTTP answer" in car.log.read_text(), car.log.read_text()
    finally:
        car.close()
        api.close()


@pytest.mark.parametrize("cert", ["forged", "elsewhere"])
def test_a_server_that_is_not_the_clusters_api_server_is_not_believed(scratch: Path, pki, cert: str):
    """A certificate from another CA, or the cluster's CA's certificate for
    another address: nothing written, and the token was never sent."""
    api = ApiServer(pki[cert], NS, {NAME: configmap("orders-0", 1)})
    car = Sidecar(scratch / f"pod-{cert}", api.port, pki["ca"][1])
    try:
        time.sleep(3)
        assert car.lease() is None, f"believed a {cert} certificate: {car.lease()}"
        assert api.tokens == [], f"sent its token to a {cert} server"
        assert "no HTTP answer" in car.log.read_text(), car.log.read_text()
    finally:
        car.close()
        api.close()


def test_the_sidecar_refuses_to_start_without_its_values(scratch: Path):
    r = subprocess.run(script_argv("lease.sh"), env={"PATH": SYSTEM_PATH}, executable=shell_path("dash"),
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "NAMESPACE, CONFIGMAP and LEASE_FILE must be set" in r.stderr, r
