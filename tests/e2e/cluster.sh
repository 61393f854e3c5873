#!/usr/bin/env bash
# A throwaway Kubernetes control plane (etcd + kube-apiserver +
# kube-controller-manager) running as plain processes on loopback, for the
# end-to-end suite. No Docker, no kubelet: objects are stored, validated,
# admitted and reconciled by the built-in controllers. After `up` alone Pods
# stay Pending; `nodes` adds the real kube-scheduler and kwok (which plays the
# kubelet of one fake node, driven by the stage files in ../shared/kwok), and
# kube-controller-manager's hostpath provisioner binds volumes (volumes/ grows some).
#
# Usage (an executable script with subcommands, not a library):
#
#   tests/e2e/cluster.sh up DIR     # start a cluster whose whole state lives in DIR
#   tests/e2e/cluster.sh nodes DIR  # add kube-scheduler, kwok and a fake node to a cluster that is up
#   tests/e2e/cluster.sh procnode DIR  # add proc-node-0, whose containers run as processes (procnode.py)
#   tests/e2e/cluster.sh down DIR   # stop it and delete DIR; idempotent, safe on a half-started DIR
#   tests/e2e/cluster.sh logs DIR   # print the tail of every process log (for failure reports)
#   tests/e2e/cluster.sh chart-crds DIR  # install the CRDs of the chart's optional objects (no controllers)
#   tests/e2e/cluster.sh certmanager DIR  # those CRDs and cert-manager's own controllers (certmanager/)
#
# Typical caller:
#
#   dir=$(mktemp -d)
#   trap 'tests/e2e/cluster.sh down "$dir"' EXIT
#   tests/e2e/cluster.sh up "$dir"
#   source "$dir/env"        # KUBECONFIG=$dir/kubeconfig, PATH gains kubectl and helm
#
# After `up`, DIR holds: kubeconfig (cluster-admin, O=system:masters),
# env (shell exports), pki/ (CA, serving and client certs, SA keys),
# *.log (one per process), pids/, etcd-data/.
#
# Binaries come from build-tools.sh (run here; a no-op once cached).
# Environment: OPSHOOKS_E2E_CACHE (see build-tools.sh),
#              OPSHOOKS_E2E_TIMEOUT (seconds to wait for readiness, default 120),
#              OPSHOOKS_E2E_PROC_NODE=1 (at `up`: the admission plugins that
#              let a namespace place all its pods, for the process node),
#              OPSHOOKS_E2E_KEEP=DIR (at `down`: a copy of the cluster's
#              directory, its logs and the process node's pods, kept in DIR
#              for a look after a failure).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TIMEOUT=${OPSHOOKS_E2E_TIMEOUT:-120}
# Service IPs are only allocated, never routed to: there is no kube-proxy.
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1
# A file that marks DIR as ours, so `down` never deletes a directory that
# some other caller happened to pass by mistake.
MARKER=.opshooks-e2e-cluster
# The cert-manager and Prometheus Operator whose CRDs `chart-crds` installs.
CERT_MANAGER_VERSION=v1.21.2
PROMETHEUS_OPERATOR_VERSION=v0.85.0

log() { printf '[cluster] %s\n' "$*" >&2; }
die() {
  log "$*"
  exit 1
}

# shellcheck source=tests/e2e/pki.sh
source "$HERE/pki.sh"

# ---- ports ----------------------------------------------------------------
# Random ports below the kernel's ephemeral range (32768+), so an outgoing
# connection cannot be holding one; checked against every socket the kernel
# knows of (/proc/net/tcp{,6}, any address, any state) and against ports
# already picked for this cluster (in this shell: `free_port VAR` sets VAR,
# never in a command substitution's subshell, whose picks the next call
# would not see). There is still a window before the process binds; a
# clash shows up as a process that dies during `up` (etcd, the first to
# bind, is started again on new ports).
PICKED=" "
port_in_use() {
  local hex
  hex=$(printf ':%04X' "$1")
  awk -v p="$hex" 'NR > 1 && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
free_port() { # VAR
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((10000 + RANDOM % 22000))
    [[ $PICKED == *" $p "* ]] && continue
    port_in_use "$p" && continue
    PICKED+="$p "
    printf -v "$1" '%s' "$p"
    return
  done
  die "no free port found"
}

# ---- certificates (functions in pki.sh) -----------------------------------
gen_pki() {
  mkdir -p "$PKI"
  gen_ca ca opshooks-e2e-ca
  # The names a client inside or outside the cluster would use for the API server.
  sign apiserver "/CN=kube-apiserver" "$LEAF
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:$SERVICE_IP"
  # O=system:masters is cluster-admin without any RBAC object.
  sign admin "/O=system:masters/CN=opshooks-e2e-admin" "$LEAF
extendedKeyUsage=clientAuth"
  # Signed by our CA (instead of the self-signed one kube-controller-manager
  # would make) so its /healthz can be checked with the admin kubeconfig.
  sign controller-manager-serving "/CN=kube-controller-manager" "$LEAF
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
  # The user name the bootstrap RBAC policy grants the controller manager's role to.
  sign controller-manager "/CN=system:kube-controller-manager" "$LEAF
extendedKeyUsage=clientAuth"
  # The user name the bootstrap RBAC policy grants the scheduler's role to.
  sign scheduler "/CN=system:kube-scheduler" "$LEAF
extendedKeyUsage=clientAuth"
  # Front proxy (request-header authentication), as kubeadm sets it up: a
  # CA of its own, so that no cert of the cluster CA can assert identities
  # through X-Remote-* headers. Without it, the controller manager's
  # delegated authentication logs an error about the missing
  # requestheader-client-ca-file every few seconds, and aggregated API
  # servers (should a test ever need one) cannot authenticate requests.
  gen_ca front-proxy-ca opshooks-e2e-front-proxy-ca
  sign front-proxy-client "/CN=front-proxy-client" "$LEAF
extendedKeyUsage=clientAuth" front-proxy-ca
  gen_key "$PKI/sa.key"
  openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
}

# etcd's /health over plain HTTP, with bash's /dev/tcp: no curl needed.
etcd_healthy() { # port
  local reply
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  reply=$(timeout 2 cat <&3) || true
  exec 3<&-
  [[ $reply == *'"health":"true"'* ]]
}

# kubeconfig FILE CLIENT: certificates embedded, so the file stands alone.
write_kubeconfig() {
  local file=$1 client=$2
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: opshooks-e2e
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $client
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$client.crt")
    client-key-data: $(base64 -w0 <"$PKI/$client.key")
contexts:
- name: opshooks-e2e
  context:
    cluster: opshooks-e2e
    user: $client
current-context: opshooks-e2e
EOF
  chmod 600 "$file"
}

# ---- processes ------------------------------------------------------------
start() { # name binary args...
  local name=$1
  shift
  log "starting $name"
  "$@" >"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/pids/$name"
}

# Alive and still the process we started (a recycled PID would not have
# DIR in its command line).
ours() { # name -> pid on stdout
  local f=$DIR/pids/$1 pid state cmdline
  [[ -f $f ]] || return 1
  pid=$(cat "$f")
  [[ -n $pid && -r /proc/$pid/stat ]] || return 1
  # A process that died but is not reaped yet is a zombie: not alive.
  state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]] || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  # Right after the fork the child is still between fork and exec, and its
  # command line can read empty for an instant: that is our process starting.
  [[ -z $cmdline || $cmdline == *"$DIR"* ]] || return 1
  echo "$pid"
}

stop_all() {
  local name pid i
  # Reverse start order: clients before the servers they talk to.
  for name in cert-manager procnode kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    pid=$(ours "$name") || continue
    kill -TERM "$pid" 2>/dev/null || true
    # Graceful first (etcd syncs, the apiserver drains); killed after 15s.
    for ((i = 0; i < 150; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name ($pid) ignored SIGTERM, killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    # Reap it if it is our child (it is when `up` itself cleans up).
    wait "$pid" 2>/dev/null || true
    rm -f "$DIR/pids/$name"
  done
}

print_logs() {
  local f
  for f in "$DIR"/*.log; do
    [[ -f $f ]] || continue
    printf '\n===== %s (last 60 lines) =====\n' "$f" >&2
    tail -n 60 "$f" >&2
  done
}

# wait_for WHAT CMD...: polls CMD once a second until it succeeds, failing
# early (with every log) as soon as one of our processes has exited.
wait_for() {
  local what=$1 deadline=$((SECONDS + TIMEOUT)) f
  shift
  # No stdin: kubectl without credentials would prompt for a password.
  until "$@" </dev/null >/dev/null 2>&1; do
    for f in "$DIR"/pids/*; do
      [[ -f $f ]] || continue
      ours "${f##*/}" >/dev/null || fail_up "${f##*/} exited while waiting for $what"
    done
    ((SECONDS < deadline)) || fail_up "timed out after ${TIMEOUT}s waiting for $what"
    sleep 1
  done
  log "$what: ok"
}

# etcd_up PORT: etcd answers healthy (0), or it exited (1).
etcd_up() {
  local deadline=$((SECONDS + TIMEOUT))
  until etcd_healthy "$1" </dev/null >/dev/null 2>&1; do
    ours etcd >/dev/null || return 1
    ((SECONDS < deadline)) || fail_up "timed out after ${TIMEOUT}s waiting for etcd /health"
    sleep 1
  done
}

fail_up() {
  log "up failed: $*"
  print_logs
  stop_all
  exit 1
}

# ---- subcommands ----------------------------------------------------------
cmd_up() {
  need_openssl
  BIN=$("$HERE/build-tools.sh" | tail -n 1)
  [[ -x $BIN/kube-apiserver ]] || die "build-tools.sh did not produce binaries in $BIN"

  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd -P)
  [[ -z "$(ls -A "$DIR")" ]] || die "$DIR is not empty; use a fresh directory (or run 'down' first)"
  touch "$DIR/$MARKER"
  mkdir -p "$DIR/pids"
  PKI=$DIR/pki
  local start_time=$SECONDS

  gen_pki
  local etcd_port peer_port kcm_port try
  free_port API_PORT
  free_port kcm_port
  write_kubeconfig "$DIR/kubeconfig" admin
  write_kubeconfig "$DIR/controller-manager.kubeconfig" controller-manager
  write_kubeconfig "$DIR/scheduler.kubeconfig" scheduler

  # Plain HTTP is acceptable for etcd: it listens on loopback only and lives
  # for one test run. No fsync: the data is thrown away, and fsync dominates
  # etcd latency on shared disks.
  # A port taken between the check and etcd's bind (a CI run saw "bind:
  # address already in use"): new ports, three tries. Any other exit fails
  # fast with etcd's own log, instead of timing out on an API server that
  # keeps retrying etcd.
  for try in 1 2 3; do
    free_port etcd_port
    free_port peer_port
    start etcd "$BIN/etcd" \
      --name=e2e \
      --data-dir="$DIR/etcd-data" \
      --listen-client-urls="http://127.0.0.1:$etcd_port" \
      --advertise-client-urls="http://127.0.0.1:$etcd_port" \
      --listen-peer-urls="http://127.0.0.1:$peer_port" \
      --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
      --initial-cluster="e2e=http://127.0.0.1:$peer_port" \
      --unsafe-no-fsync \
      --log-level=warn
    etcd_up "$etcd_port" && break
    if ((try == 3)) || ! grep -q "address already in use" "$DIR/etcd.log"; then
      fail_up "etcd exited while waiting for etcd /health"
    fi
    log "etcd could not bind ($(grep -o 'listen tcp [^ ]*' "$DIR/etcd.log" | head -n 1)): again on new ports"
    rm -rf "$DIR/etcd-data"
  done
  log "etcd /health: ok"

  # The process node's scenarios place every pod of their namespace on it,
  # the Jobs' too (the Database places only its instances), with the
  # namespace annotations these two in-tree plugins read.
  local admission=()
  [[ ${OPSHOOKS_E2E_PROC_NODE:-} != 1 ]] ||
    admission=(--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction)

  # --advertise-address=127.0.0.1 keeps the apiserver from picking up the
  # host's real interface; a loopback address is not valid in an Endpoints
  # object, hence --endpoint-reconciler-type=none (only pods on the process
  # node reach the apiserver through the `kubernetes` Service: procnode.py
  # publishes its EndpointSlice, the node's relay).
  # --enable-aggregator-routing: an aggregated API (the HPA's external
  # metric, metrics_api.py) is reached at its Service's endpoint address,
  # since no kube-proxy programs ClusterIPs on this host.
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 \
    --secure-port="$API_PORT" \
    --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
    --proxy-client-key-file="$PKI/front-proxy-client.key" \
    --enable-aggregator-routing=true \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --allow-privileged=true \
    --profiling=false \
    "${admission[@]}"

  wait_for "kube-apiserver /readyz" "$BIN/kubectl" --kubeconfig="$DIR/kubeconfig" get --raw /readyz

  # --enable-hostpath-provisioner: the in-tree, test-only provisioner gives
  # every claim of the default StorageClass (`nodes` installs it) a real
  # PersistentVolume, bound, and deleted with its claim, so StatefulSets
  # with volume claim templates behave as on a real cluster.
  # --use-service-account-credentials: each controller acts as its own
  # service account, so the RBAC the cluster enforces is what a real
  # cluster enforces. Leader election is pointless with one instance and
  # would delay a restart by a lease period.
  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$kcm_port" \
    --tls-cert-file="$PKI/controller-manager-serving.crt" \
    --tls-private-key-file="$PKI/controller-manager-serving.key" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" \
    --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --enable-hostpath-provisioner=true \
    --profiling=false

  # Same CA and client cert as the API server, another port.
  wait_for "kube-controller-manager /healthz" "$BIN/kubectl" --kubeconfig="$DIR/kubeconfig" \
    --server="https://127.0.0.1:$kcm_port" get --raw /healthz
  # Pods are refused until their namespace's default ServiceAccount exists;
  # waiting here spares every test that race.
  wait_for "default ServiceAccount" "$BIN/kubectl" --kubeconfig="$DIR/kubeconfig" \
    get serviceaccount default --namespace=default

  cat >"$DIR/env" <<EOF
export KUBECONFIG='$DIR/kubeconfig'
export PATH='$BIN':"\$PATH"
export OPSHOOKS_E2E_APISERVER='https://127.0.0.1:$API_PORT'
EOF
  log "cluster up in $((SECONDS - start_time))s: https://127.0.0.1:$API_PORT"
  log "use it with: source '$DIR/env'"
}

# module_dir MODULE@VERSION: the Go module's source, from the module cache
# (outside the repo; downloaded once).
module_dir() {
  command -v go >/dev/null 2>&1 || export PATH=/usr/local/go/bin:$PATH
  (cd /tmp && go mod download -json "$1" | sed -nE 's/^\s*"Dir": "(.*)",?$/\1/p')
}

# The kwok Stage CRD from kwok's own module (the version build-tools.sh
# pins), so stages can be applied, changed and removed while tests run.
kwok_stage_crd() {
  local version dir
  version=$(sed -nE 's/^KWOK_VERSION=(.*)/\1/p' "$HERE/build-tools.sh")
  dir=$(module_dir "sigs.k8s.io/kwok@$version")
  [[ -f $dir/kustomize/crd/bases/kwok.x-k8s.io_stages.yaml ]] || die "kwok $version's Stage CRD not found (module dir '$dir')"
  echo "$dir/kustomize/crd/bases/kwok.x-k8s.io_stages.yaml"
}

# The CRDs of the chart's optional objects, from their projects' Go modules,
# so those objects are validated by their real schemas: cert-manager's
# (Certificate, Issuer, ...) and the Prometheus Operator's ServiceMonitor,
# PodMonitor and PrometheusRule.
# Only the CRDs: nothing issues certificates or scrapes in this cluster.
cmd_chart_crds() {
  [[ -f $DIR/$MARKER && -f $DIR/env ]] || die "$DIR holds no cluster that is up; run 'up' first"
  local cm po crds=() f
  cm=$(module_dir "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION")/deploy/crds/cert-manager.io
  po=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")/example/prometheus-operator-crd/monitoring.coreos.com
  for f in "${cm}_certificates" "${cm}_issuers" "${cm}_clusterissuers" "${cm}_certificaterequests" "${po}_servicemonitors" "${po}_podmonitors" "${po}_prometheusrules"; do
    [[ -f $f.yaml ]] || die "$f.yaml not found (cert-manager $CERT_MANAGER_VERSION, prometheus-operator $PROMETHEUS_OPERATOR_VERSION)"
    crds+=(-f "$f.yaml")
  done
  BIN=$("$HERE/build-tools.sh" | tail -n 1)
  "$BIN/kubectl" --kubeconfig="$DIR/kubeconfig" apply --server-side --field-manager=opshooks-e2e "${crds[@]}" >/dev/null
  "$BIN/kubectl" --kubeconfig="$DIR/kubeconfig" wait --for=condition=Established --timeout=60s "${crds[@]}" >/dev/null
  log "cert-manager $CERT_MANAGER_VERSION, ServiceMonitor, PodMonitor and PrometheusRule ($PROMETHEUS_OPERATOR_VERSION) CRDs installed"
}

# cert-manager's own controllers (tests/e2e/certmanager: Certificates, the
# approver, CA and SelfSigned issuers), after its CRDs: what issues the
# certificates a Database's spec.tls.issuerRef asks for.
cmd_certmanager() {
  cmd_chart_crds
  DIR=$(cd "$DIR" && pwd -P)
  BIN=$("$HERE/build-tools.sh" | tail -n 1)
  [[ -x $BIN/cert-manager ]] || die "build-tools.sh did not build cert-manager"
  start cert-manager "$BIN/cert-manager" --kubeconfig="$DIR/kubeconfig" --cluster-resource-namespace=kube-system
  log "cert-manager's controllers started"
}

# Nodes without a kubelet (../shared/kwok/README.md): the real kube-scheduler
# binds pods to one fake node that kwok plays the kubelet of. kwok runs with
# --enable-crds=Stage, so its stages are objects: the shared stage file is
# applied as is, and a test can add a stage (fail one Job's pods, say) and
# remove it again.
cmd_nodes() {
  [[ -f $DIR/$MARKER && -f $DIR/env ]] || die "$DIR holds no cluster that is up; run 'up' first"
  DIR=$(cd "$DIR" && pwd -P)
  BIN=$("$HERE/build-tools.sh" | tail -n 1)
  local shared k start_time=$SECONDS crd
  shared=$(cd "$HERE/../../.." && pwd)/shared/kwok
  [[ -f $shared/stages.yaml ]] || die "$shared/stages.yaml not found (shared/ must sit beside the repo)"
  k() { "$BIN/kubectl" --kubeconfig="$DIR/kubeconfig" "$@"; }
  crd=$(kwok_stage_crd)

  # --pod-max-in-unschedulable-pods-duration (deprecated, still in 1.34):
  # kube-scheduler 1.34 sometimes parks a pod whose claim the hostpath
  # provisioner binds a moment after its first try ("pod has unbound
  # immediate PersistentVolumeClaims"), and no later event brings it back:
  # it waits for the flush of unschedulable pods, after 5 minutes by
  # default. The played loop's outage scenario failed so (CI on 9925cfb,
  # and a run here: db-1 unready for 180 s). 30 s bounds that wait to about
  # a minute (the flush runs every 30 s); what the scenarios test is
  # opshooks, not this gap in the scheduler's queue.
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$DIR/scheduler.kubeconfig" \
    --leader-elect=false \
    --secure-port=0 \
    --profiling=false \
    --pod-max-in-unschedulable-pods-duration=30s

  k apply --server-side --field-manager=opshooks-e2e -f "$crd" >/dev/null
  k wait --for=condition=Established --timeout=60s crd/stages.kwok.x-k8s.io >/dev/null
  k apply --server-side --field-manager=opshooks-e2e -f "$shared/stages.yaml" >/dev/null
  k apply --server-side --field-manager=opshooks-e2e -f "$shared/storageclass-hostpath.yaml" >/dev/null
  # A second class whose claims may grow, and the Stage that plays its
  # external volume resizer (both described in their files).
  k apply --server-side --field-manager=opshooks-e2e -f "$HERE/volumes/storageclass-expandable.yaml" \
    -f "$HERE/volumes/stage-volume-resizer.yaml" >/dev/null

  # kwok's default pod CIDR collides with the Service CIDR: another one.
  # HOME=DIR keeps kwok from reading a configuration from the real $HOME.
  start kwok env HOME="$DIR" "$BIN/kwok" \
    --kubeconfig="$DIR/kubeconfig" \
    --enable-crds=Stage \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds=40 \
    --cidr=10.244.0.0/16 \
    --node-ip=10.240.0.1

  k apply --server-side --field-manager=opshooks-e2e -f "$shared/node.yaml" >/dev/null
  wait_for "node kwok-node-0 Ready" k wait --for=condition=Ready --timeout=5s node/kwok-node-0
  log "scheduler, kwok and node up in $((SECONDS - start_time))s"
}

# The process node (procnode.py): proc-node-0, tainted and labelled
# opshooks.io/e2e-node=proc, whose pods run as processes in network
# namespaces of their own, with the real kube-proxy (built here on first
# use) in the node's namespace. Needs root, iproute2, iptables and
# PostgreSQL 15 (installed with apt-get when missing).
cmd_procnode() {
  [[ -f $DIR/$MARKER && -f $DIR/env ]] || die "$DIR holds no cluster that is up; run 'up' first"
  DIR=$(cd "$DIR" && pwd -P)
  ((EUID == 0)) || die "the process node needs root (network and mount namespaces)"
  BIN=$("$HERE/build-tools.sh" proc-node | tail -n 1)
  [[ -x $BIN/kube-proxy ]] || die "build-tools.sh proc-node did not build kube-proxy"
  # What a fresh Debian machine may lack: ip (iproute2), iptables for
  # kube-proxy, and PostgreSQL 15's server binaries and psql (the
  # postgres:15 image's stand-in; tests/scripts/setup.sh installs the same).
  local missing=()
  command -v ip >/dev/null || missing+=(iproute2)
  command -v iptables-restore >/dev/null || missing+=(iptables)
  [[ -x /usr/lib/postgresql/15/bin/postgres ]] || missing+=(postgresql-15)
  command -v psql >/dev/null || missing+=(postgresql-client)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  local start_time=$SECONDS
  start procnode python3 -B "$HERE/procnode.py" --dir "$DIR" --bin "$BIN" --service-cidr "$SERVICE_CIDR"
  wait_for "node proc-node-0 Ready" "$BIN/kubectl" --kubeconfig="$DIR/kubeconfig" wait --for=condition=Ready --timeout=5s node/proc-node-0
  log "process node up in $((SECONDS - start_time))s"
}

# Whatever a process node left behind when it could not stop itself: the
# processes in its network namespaces, and the namespaces.
procnode_leftovers() {
  local prefix ns pid
  [[ -f $DIR/procnode/netns-prefix ]] || return 0
  prefix=$(cat "$DIR/procnode/netns-prefix")
  [[ $prefix == opsh-?* ]] || return 0
  for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }'); do
    [[ $ns == "$prefix"-* ]] || continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}

cmd_down() {
  [[ -d $DIR ]] || return 0
  DIR=$(cd "$DIR" && pwd -P)
  if [[ ! -f $DIR/$MARKER ]]; then
    # Not ours (or already cleaned): touch nothing.
    log "$DIR holds no cluster; nothing to do"
    return 0
  fi
  [[ -d $DIR/pids ]] && stop_all
  procnode_leftovers
  if [[ -n ${OPSHOOKS_E2E_KEEP:-} ]]; then
    cp -a "$DIR" "$OPSHOOKS_E2E_KEEP/$(basename "$DIR")" || log "could not keep a copy of $DIR in $OPSHOOKS_E2E_KEEP"
  fi
  rm -rf "$DIR"
  log "cluster in $DIR stopped and removed"
}

cmd_logs() {
  [[ -d $DIR ]] || return 0
  print_logs
}

usage() { sed -n '12,18p' "${BASH_SOURCE[0]}" >&2; }

[[ $# -eq 2 ]] || {
  usage
  exit 2
}
DIR=$2
[[ -n $DIR ]] || die "DIR must not be empty"
case $1 in
up) cmd_up ;;
nodes) cmd_nodes ;;
procnode) cmd_procnode ;;
down) cmd_down ;;
logs) cmd_logs ;;
chart-crds) cmd_chart_crds ;;
certmanager) cmd_certmanager ;;
*)
  usage
  exit 2
  ;;
esac
