"""The process node's network (procnode.py): network namespaces, the API
server as seen from the node, and cluster DNS.

Everything lives in network namespaces this module creates, named
PREFIX-node and PREFIX-pN:

- PREFIX-node plays the node's own network stack: the node address NODE_IP
  (10.89.0.1) on its loopback, a /32 route to every pod through its veth,
  the Service range routed to the loopback (so a client on the node has a
  route, and kube-proxy's OUTPUT rules rewrite it), IP forwarding, and nothing else: no default
  route, no link to the host, so no address off the machine is reachable.
  kube-proxy runs there and programs its iptables.
- each pod gets PREFIX-pN: `eth0` with the pod's /32 address, a route to
  NODE_IP on the link and a default route through it (the routed, bridge-less
  layout of Calico: every packet between two pods crosses the node's stack,
  so kube-proxy's DNAT and its hairpin masquerade apply both ways).
- the API server listens on the host's loopback: `ApiProxy` opens a
  listening socket inside PREFIX-node (127.0.0.1:6443) and relays each
  connection to the host's 127.0.0.1:PORT, so kube-proxy reaches it without
  any route between the namespaces; a second one on NODE_IP:6443 is the
  `kubernetes` Service's endpoint (procnode.py publishes its EndpointSlice),
  so a pod reaches the API server through that Service's cluster IP.
- `Dns` answers A queries on NODE_IP:53 from the Services and EndpointSlices
  (`<svc>.<ns>.svc.cluster.local`, `<hostname>.<svc>.<ns>.svc.cluster.local`),
  as CoreDNS's kubernetes plugin does; anything else is NXDOMAIN.

Sockets are created in a namespace by a thread that enters it with setns(2)
(per thread for network namespaces); the socket stays there.
"""

import ctypes
import ipaddress
import os
import socket
import struct
import subprocess
import threading
import time

NODE_IP = "10.89.0.1"
POD_RANGE = ipaddress.ip_network("10.89.0.0/16")
# Pods take 10.89.1.1 on, never the node's address.
FIRST_POD = int(ipaddress.ip_address("10.89.1.1"))
CLUSTER_DOMAIN = "cluster.local"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def ip(*args, check=True):
    """`ip ARGS`; its error as an exception when check."""
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def in_netns(name, fn):
    """fn() run by a thread inside network namespace `name`; its result."""
    out = {}

    def run():
        try:
            fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns {name}")
            finally:
                os.close(fd)
            out["value"] = fn()
        except BaseException as err:  # handed to the caller
            out["error"] = err

    t = threading.Thread(target=run, name=f"netns-{name}")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


class Network:
    """The node namespace and the pods' namespaces under one prefix."""

    def __init__(self, prefix, service_cidr):
        self.prefix = prefix
        self.node = f"{prefix}-node"
        self.service_cidr = service_cidr
        self.lock = threading.Lock()
        self.next = FIRST_POD
        self.free = []

    def up(self):
        self.down()
        ip("netns", "add", self.node)
        n = ["-n", self.node]
        ip(*n, "link", "set", "lo", "up")
        ip(*n, "addr", "add", f"{NODE_IP}/32", "dev", "lo")
        ip(*n, "route", "add", self.service_cidr, "dev", "lo", "src", NODE_IP)
        for key, value in (("net.ipv4.ip_forward", "1"), ("net.ipv4.conf.all.rp_filter", "0"), ("net.ipv4.conf.default.rp_filter", "0")):
            subprocess.run(["ip", "netns", "exec", self.node, "sysctl", "-qw", f"{key}={value}"], check=True)

    def namespaces(self):
        return [n.split()[0] for n in ip("netns", "list").splitlines() if n.split() and n.split()[0].startswith(self.prefix + "-")]

    def down(self):
        """Every namespace of this prefix gone, and whatever still runs in one killed."""
        for ns in self.namespaces():
            for pid in ip("netns", "pids", ns, check=False).split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            ip("netns", "del", ns, check=False)

    def add_pod(self):
        """A new pod namespace wired to the node: (netns name, pod IP)."""
        with self.lock:
            if self.free:
                addr = self.free.pop(0)
            else:
                addr = self.next
                self.next += 1
            if ipaddress.ip_address(addr) not in POD_RANGE:
                raise RuntimeError("the pod range is exhausted")
        pod_ip = str(ipaddress.ip_address(addr))
        index = addr - FIRST_POD
        ns, veth = f"{self.prefix}-p{index}", f"pv{index}"
        ip("netns", "add", ns)
        ip("-n", self.node, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("-n", self.node, "link", "set", veth, "up")
        ip("-n", self.node, "route", "add", f"{pod_ip}/32", "dev", veth)
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "addr", "add", f"{pod_ip}/32", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "route", "add", NODE_IP, "dev", "eth0", "scope", "link")
        ip("-n", ns, "route", "add", "default", "via", NODE_IP, "dev", "eth0")
        return ns, pod_ip

    def remove_pod(self, ns, pod_ip):
        ip("netns", "del", ns, check=False)  # its veth goes with it
        with self.lock:
            self.free.append(int(ipaddress.ip_address(pod_ip)))

    def link(self, ns, up):
        """A pod's eth0 up or down: down, its connections hang (no reset)."""
        ip("-n", ns, "link", "set", "eth0", "up" if up else "down")


# ---- the API server, seen from the node namespace ----------------------------
class ApiProxy:
    """HOST:6443 inside the node namespace (127.0.0.1 unless told), relayed
    to the host's API server."""

    PORT = 6443

    def __init__(self, node_ns, api_port, host="127.0.0.1"):
        self.api_port, self.host = api_port, host
        self.listener = in_netns(node_ns, self._listen)
        threading.Thread(target=self._accept, name="api-proxy", daemon=True).start()

    def _listen(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.host, self.PORT))
        s.listen(64)
        return s

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.api_port), timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


# ---- cluster DNS ----------------------------------------------------------------
class Dns:
    """A records for Services and their endpoints' hostnames, from the API,
    refreshed every second, served on NODE_IP:53 (UDP) in the node namespace."""

    def __init__(self, kube, node_ns):
        self.kube = kube
        self.names = {}
        self.sock = in_netns(node_ns, self._bind)
        threading.Thread(target=self._refresh, name="dns-refresh", daemon=True).start()
        threading.Thread(target=self._serve, name="dns", daemon=True).start()

    @staticmethod
    def _bind():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((NODE_IP, 53))
        return s

    def _refresh(self):
        while True:
            try:
                names, headless, unready_too = {}, set(), set()
                for svc in self.kube.list("Service"):
                    md, spec = svc["metadata"], svc.get("spec") or {}
                    base = f"{md['name']}.{md['namespace']}.svc.{CLUSTER_DOMAIN}"
                    cip = spec.get("clusterIP")
                    if spec.get("publishNotReadyAddresses"):
                        unready_too.add(base)
                    if cip == "None":
                        headless.add(base)
                    elif cip:
                        names[base] = [cip]
                for eps in self.kube.list("EndpointSlice"):
                    md = eps["metadata"]
                    svc = (md.get("labels") or {}).get("kubernetes.io/service-name")
                    base = f"{svc}.{md['namespace']}.svc.{CLUSTER_DOMAIN}"
                    for e in eps.get("endpoints") or [] if svc else []:
                        # As CoreDNS: ready endpoints only, unless the Service publishes the others.
                        if not ((e.get("conditions") or {}).get("ready") or base in unready_too):
                            continue
                        if e.get("hostname"):
                            names[f"{e['hostname']}.{base}"] = e["addresses"][:1]
                        if base in headless:
                            names.setdefault(base, []).extend(e["addresses"])
                self.names = names
            except Exception:  # the API restarting: keep the last answers
                pass
            time.sleep(1)

    def _serve(self):
        while True:
            try:
                data, peer = self.sock.recvfrom(2048)
                reply = self.answer(data)
                if reply:
                    self.sock.sendto(reply, peer)
            except OSError:
                return
            except Exception:  # a malformed query: no answer
                continue

    def answer(self, query):
        qid, flags, qd = struct.unpack("!HHH", query[:6])
        if qd != 1:
            return None
        labels, i = [], 12
        while query[i]:
            n = query[i]
            labels.append(query[i + 1 : i + 1 + n].decode("ascii", "replace").lower())
            i += 1 + n
        qtype, _ = struct.unpack("!HH", query[i + 1 : i + 5])
        question = query[12 : i + 5]
        name = ".".join(labels)
        addrs = self.names.get(name)
        rd = flags & 0x0100
        if addrs is None:
            # NXDOMAIN, authoritative for the cluster domain (the resolver
            # then tries its next search domain).
            return struct.pack("!HHHHHH", qid, 0x8400 | rd | 3, 1, 0, 0, 0) + question
        answers = b""
        count = 0
        if qtype == 1:
            for a in addrs:
                answers += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton(a)
                count += 1
        return struct.pack("!HHHHHH", qid, 0x8400 | rd, 1, count, 0, 0) + question + answers
