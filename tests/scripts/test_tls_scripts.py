"""TLS on real PostgreSQL (issue 31 item 10): tls.sh, and the server as
the hook starts it.

Each instance's `tls` init container runs tls.sh (children.rs): it copies
spec.tls's Secret (mounted as the kubelet mounts it: root's files, mode
0440, group the pod's fsGroup) into the instance's volume, the key 0600 and
the server's own, or, without a Secret, makes a self-signed certificate
once. The server then starts with the hook's TLS arguments and pg_hba.conf,
read from the golden fixture of a running Database (the hook's real
answer), so a rule changed in the hook is the rule tested here.

A test CA made with openssl signs the server's certificate, for the names
the read-write Service and `localhost` (the standbys' "read-write
Service" here is a proxy on 127.0.0.1).
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from reports import termination_line  # tests/support: the hook reads each line

from pods import Instance, Proxy, RoleConfigMap, template, wait_for  # noqa: F401 (template: a fixture)
from postgres import (  # noqa: F401 (scratch: an autouse fixture)
    PG_PATH,
    SUPERUSER_PASSWORD,
    fresh_path,
    pg_dir,
    postgres_ids,
    run,
    scratch,
    script_argv,
    shell_path,
)

REPO = Path(__file__).resolve().parents[2]
RUNNING = REPO / "tests" / "fixtures" / "database" / "v2-running" / "response.json"
# Where the hook's pod template puts them (children.rs).
TLS_DIR = "/var/lib/postgresql/data/tls"
HBA_FILE = "/etc/opshooks/hba/pg-hba-tls.conf"
NAME = "orders.prod.svc"


def hook_answer() -> tuple[list[str], str]:
    """The TLS arguments of the postgres container (`ssl*` and hba_file)
    and the pg_hba.conf, as the hook answers for a running Database."""
    children = json.loads(RUNNING.read_text())["children"]
    sts = next(c for c in children if c["kind"] == "StatefulSet")
    command = sts["spec"]["template"]["spec"]["containers"][0]["command"]
    args = [a for pair in zip(command, command[1:]) if pair[0] == "-c"
            for a in pair[1:] if a.startswith(("ssl", "hba_file"))]
    hba = next((c for c in children if c["kind"] == "ConfigMap" and c["metadata"]["name"].endswith("-hba")), None)
    assert hba is not None, "the hook answers no pg_hba.conf ConfigMap"
    assert "ssl=on" in args, f"the hook starts the server without TLS: {args}"
    return args, hba["data"]["pg-hba-tls.conf"]


def openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def pki(scratch) -> Path:
    """A CA and a server certificate it signed for NAME and localhost, as
    the files of a kubernetes.io/tls Secret mounted by the kubelet."""
    root = fresh_path("pki")
    root.mkdir()
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-days", "2", "-subj", "/CN=test CA", "-keyout", "ca.key", "-out", "ca.crt", cwd=root)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-subj", f"/CN={NAME}", "-keyout", "tls.key", "-out", "server.csr", cwd=root)
    (root / "san.ext").write_text(f"subjectAltName=DNS:{NAME},DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.ext", "-out", "tls.crt", cwd=root)
    secret = fresh_path("secret")
    secret.mkdir()
    _, gid = postgres_ids()
    for f in ("tls.crt", "tls.key", "ca.crt"):
        (secret / f).write_bytes((root / f).read_bytes())
        os.chown(secret / f, 0, gid)
        (secret / f).chmod(0o440)
    return secret


def run_tls(volume: Path, source: Path | None, shell: str = "dash", trust: Path | None = None):
    env = {"PATH": PG_PATH, "HOME": str(volume), "HOSTNAME": "orders-0", "TLS_DIR": str(volume / "tls"),
           "TERMINATION_LOG": str(volume / "termination-log")}
    if source is not None:
        env["TLS_SOURCE"] = str(source)
    if trust is not None:
        env["TLS_TRUST"] = str(trust)
    return run(script_argv("tls.sh"), env, as_postgres=True, timeout=60, executable=shell_path(shell))


@pytest.mark.parametrize("shell", ["dash", "busybox"])
def test_the_secrets_key_is_copied_for_the_server_alone(pki: Path, shell):
    volume = pg_dir(fresh_path("volume"))
    r = run_tls(volume, pki, shell)
    assert r.rc == 0, str(r)
    uid, _ = postgres_ids()
    for f, source in (("server.crt", "tls.crt"), ("server.key", "tls.key"), ("ca.crt", "ca.crt")):
        st = (volume / "tls" / f).stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o600), f
        assert (volume / "tls" / f).read_bytes() == (pki / source).read_bytes()
    assert stat.S_IMODE((volume / "tls").stat().st_mode) == 0o700


def test_the_ca_bundle_is_trusted_beside_the_secrets_ca(pki: Path):
    """Under spec.tls.issuerRef the instance's own clients trust the
    Secret's CA and the CA bundle (the CAs of cert-manager's issues before),
    so one started on a renewed certificate whose CA changed still
    verifies the instances not yet restarted. An empty or absent bundle
    (the ConfigMap volume is optional) leaves the Secret's CA alone."""
    older = "-----BEGIN CERTIFICATE-----\nT0xERVIgQ0E=\n-----END CERTIFICATE-----\n"
    bundle = fresh_path("bundle")
    bundle.mkdir()
    (bundle / "ca.crt").write_text(older)
    volume = pg_dir(fresh_path("volume"))
    r = run_tls(volume, pki, trust=bundle)
    assert r.rc == 0, str(r)
    assert (volume / "tls" / "ca.crt").read_text() == (pki / "ca.crt").read_text() + "\n" + older
    uid, _ = postgres_ids()
    st = (volume / "tls" / "ca.crt").stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o600)
    # Restarted, the ConfigMap not there (yet): the Secret's CA alone.
    empty = fresh_path("no-bundle")
    empty.mkdir()
    assert run_tls(volume, pki, trust=empty).rc == 0
    assert (volume / "tls" / "ca.crt").read_bytes() == (pki / "ca.crt").read_bytes()


def test_a_secret_without_its_ca_is_refused(pki: Path):
    partial = fresh_path("partial")
    partial.mkdir()
    for f in ("tls.crt", "tls.key"):
        (partial / f).write_bytes((pki / f).read_bytes())
    volume = pg_dir(fresh_path("volume"))
    r = run_tls(volume, partial)
    assert r.rc == 1, str(r)
    line = termination_line(volume / "termination-log")
    assert line.startswith("opshooks: the TLS Secret of spec.tls has no ca.crt"), line


def test_without_a_secret_the_instance_makes_its_own_once(pki: Path):
    volume = pg_dir(fresh_path("volume"))
    assert run_tls(volume, None).rc == 0
    key = volume / "tls" / "server.key"
    first = key.read_bytes()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in first
    assert run_tls(volume, None).rc == 0
    assert key.read_bytes() == first, "a restart keeps the instance's certificate"
    # A Secret given later replaces it; taken away again, a new one is made.
    assert run_tls(volume, pki).rc == 0
    assert key.read_bytes() == (pki / "tls.key").read_bytes()
    assert run_tls(volume, None).rc == 0
    assert key.read_bytes() not in (first, (pki / "tls.key").read_bytes())
    assert not (volume / "tls" / "ca.crt").exists()


class TlsInstance(Instance):
    """An instance started with the hook's TLS arguments and pg_hba.conf,
    its certificate put in place by tls.sh from `secret` (None: self-signed),
    and the hook's client settings (RW_SSLMODE, RW_SSLROOTCERT): verify-full
    with the Secret's CA, require without one. The read-write Service is
    `localhost` here, a name in the test certificate."""
    secret: Path | None = None

    def env(self, path: str = PG_PATH) -> dict[str, str]:
        env = dict(super().env(path), RW_HOST="localhost")
        if self.secret is not None:
            env.update(RW_SSLMODE="verify-full", RW_SSLROOTCERT=str(self.volume / "tls" / "ca.crt"))
        else:
            env.update(RW_SSLMODE="require")
        return env

    def server_argv(self) -> list[str]:
        args, hba = hook_answer()
        hba_file = self.volume / "pg_hba.conf"
        hba_file.write_text(hba)
        tls = str(self.volume / "tls")
        argv = super().server_argv()
        for a in args:
            argv += ["-c", a.replace(TLS_DIR, tls).replace(HBA_FILE, str(hba_file))]
        return argv

    def start(self, **kw) -> None:
        r = run_tls(self.volume, self.secret)
        assert r.rc == 0, str(r)
        super().start(**kw)


def client(instance: Instance, conninfo: str, sql: str = "SELECT 1"):
    """psql as an application: only the connection string decides."""
    env = {"PATH": PG_PATH, "HOME": str(instance.volume), "PGPASSWORD": SUPERUSER_PASSWORD,
           "PGCONNECT_TIMEOUT": "10"}
    return run(["psql", "-X", "-q", "-A", "-t", "--no-password",
                f"{conninfo} port={instance.port} user=postgres dbname=postgres", "-c", sql], env, timeout=30)


SSL_OF_ME = "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()"


@pytest.fixture(params=["secret", "self-signed"])
def tls_database(request, template, pki):
    """A primary (the template's cluster) and a standby cloned from it
    through the read-write Service, both serving TLS."""
    roles = fresh_path("role")
    roles.mkdir()
    roles.chmod(0o755)
    configmap = RoleConfigMap(roles, 0)
    configmap.publish("db-0", 1, now=True)
    proxy = Proxy()
    instances = []
    for n in range(2):
        volume = pg_dir(fresh_path(f"db-{n}"))
        pg_dir(volume / "sock")
        i = TlsInstance(f"db-{n}", volume, roles, proxy, configmap=configmap)
        i.secret = pki if request.param == "secret" else None
        instances.append(i)
    primary, standby = instances
    r = run(["cp", "-a", str(template), str(primary.data)], {"PATH": PG_PATH}, timeout=60)
    assert r.rc == 0, str(r)
    proxy.retarget(primary.port)
    try:
        primary.start()
        standby.start()
        wait_for("the standby streams", lambda: primary.sql(
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == "1")
        yield request.param, primary, standby
    finally:
        for i in instances:
            i.stop("immediate")
        proxy.close()


def test_tls_is_served_and_required_over_tcp(tls_database, pki):
    mode, primary, standby = tls_database
    if mode == "secret":
        # A client that verifies the server, by the name in its certificate.
        verified = f"host={NAME} hostaddr=127.0.0.1 sslmode=verify-full sslrootcert={pki / 'ca.crt'}"
        r = client(primary, verified, SSL_OF_ME)
        assert r.rc == 0, str(r)
        assert r.out.strip() in ("t|TLSv1.3", "t|TLSv1.2"), r.out
        # The verification is real: another name is refused.
        r = client(primary, verified.replace(f"host={NAME}", "host=other.example"))
        assert r.rc != 0 and "does not match host name" in r.err, str(r)
    else:
        # Encrypted, not authenticated: require connects, verify-ca cannot.
        r = client(primary, "host=127.0.0.1 sslmode=require", SSL_OF_ME)
        assert r.rc == 0 and r.out.strip().startswith("t|TLSv1."), str(r)
        r = client(primary, f"host=127.0.0.1 sslmode=verify-ca sslrootcert={pki / 'ca.crt'}")
        assert r.rc != 0 and "certificate verify failed" in r.err, str(r)
    # No connection over TCP without TLS: the superuser, any user, replication.
    for who in ("postgres", "replicator"):
        r = client(primary, f"host=127.0.0.1 sslmode=disable user={who}")
        assert r.rc != 0 and "no encryption" in r.err, str(r)
    r = client(primary, "host=127.0.0.1 sslmode=disable replication=true user=replicator")
    assert r.rc != 0 and "no encryption" in r.err, str(r)
    # TLSv1.1 is not accepted.
    r = client(primary, "host=127.0.0.1 sslmode=require ssl_max_protocol_version=TLSv1.1")
    assert r.rc != 0, str(r)
    # The standby streams over TLS, asking for it (verifying the primary
    # with the CA when there is one).
    streams = primary.sql(
        "SELECT s.ssl, r.application_name FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)")
    assert streams == f"t|{standby.name}", streams
    receiver = standby.sql("SELECT conninfo FROM pg_stat_wal_receiver")
    if mode == "secret":
        assert "sslmode=verify-full" in receiver, receiver
        assert f"sslrootcert={standby.volume / 'tls' / 'ca.crt'}" in receiver, receiver
    else:
        assert "sslmode=require" in receiver, receiver
    # The server itself was given no libpq TLS setting (dblink and
    # postgres_fdw connections are the user's).
    environ = Path(f"/proc/{standby.proc.pid}/environ").read_bytes().split(b"\0")
    assert not [v for v in environ if v.startswith(b"PGSSL")], environ
    # The local socket is unchanged: the image's entrypoint and the
    # scripts use it.
    assert primary.cluster.sql("SELECT 1", tcp=False) == "1"
