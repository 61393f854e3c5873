#!/usr/bin/env bash
# The real control loop: every operator's whole life under the real
# Metacontroller (v4.17.2, built from ../shared/metacontroller/src), the real
# kube-scheduler and kwok's fake node, against opshooks on loopback.
#
#   1. builds (once, cached) the tools, and opshooks in release mode;
#   2. starts a fresh control plane (cluster.sh up) and adds the scheduler,
#      kwok with the stage files from ../shared/kwok, a fake node and a
#      default StorageClass served by the hostpath provisioner (cluster.sh nodes);
#   3. installs Metacontroller's CRDs and the chart with helm, its
#      CompositeControllers pointing at http://127.0.0.1:PORT and a short resync;
#   4. runs loop.py: it starts opshooks on PORT and Metacontroller, drives the
#      scenarios under --apply-strategy=dynamic-apply and again under
#      server-side-apply, checks the invariants the whole time, and prints
#      a table. Torn down on any exit.
#
# Usage: tests/e2e/loop.sh [loop.py options, e.g. --only web,db --strategies dynamic-apply]
#        (exits non-zero on any failed scenario or invariant)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
MC_CRDS=$REPO/../shared/metacontroller/metacontroller-crds-v1.yaml
CHART=$REPO/charts/opshooks
start=$SECONDS

step() { printf '\n== %s (%ss)\n' "$*" "$((SECONDS - start))"; }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}
command -v python3 >/dev/null || fail "python3 is required"
[[ -f $MC_CRDS ]] || fail "$MC_CRDS not found (shared/ must sit beside the repo)"
[[ -f $REPO/../shared/kwok/stages.yaml ]] || fail "../shared/kwok/stages.yaml not found (shared/ must sit beside the repo)"

step "build tools"
BIN=$("$HERE/build-tools.sh" | tail -n 1)
[[ -x $BIN/metacontroller && -x $BIN/kwok && -x $BIN/kube-scheduler ]] || fail "build-tools.sh did not build metacontroller, kwok and kube-scheduler"

step "build opshooks (release)"
(cd "$REPO" && cargo build --release --locked --quiet --bin opshooks)
OPSHOOKS=$REPO/target/release/opshooks

dir=$(mktemp -d "${TMPDIR:-/tmp}/opshooks-loop.XXXXXX")
up_done=0
cleanup() {
  local rc=$?
  ((rc == 0 || up_done == 0)) || "$HERE/cluster.sh" logs "$dir" || true
  "$HERE/cluster.sh" down "$dir" || true
  exit "$rc"
}
trap cleanup EXIT

step "cluster up"
"$HERE/cluster.sh" up "$dir"
up_done=1
# shellcheck source=/dev/null
source "$dir/env"

step "kube-scheduler, kwok and a fake node"
"$HERE/cluster.sh" nodes "$dir"

step "Metacontroller CRDs and the chart"
kubectl apply --server-side --field-manager=opshooks-e2e -f "$MC_CRDS" >/dev/null
read -r port metrics health < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
# A short resync, so a step that waits on time (not on an event) is quick.
helm install opshooks "$CHART" --namespace opshooks --create-namespace \
  --set "controllers.baseUrl=http://127.0.0.1:$port" \
  --set controllers.resyncPeriodSeconds=10 --wait=false >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd --all >/dev/null
kubectl get compositecontrollers

step "control loop"
python3 -B "$HERE/loop.py" --dir "$dir" --port "$port" --opshooks "$OPSHOOKS" \
  --metacontroller "$BIN/metacontroller" --mc-ports "$metrics,$health" "$@"

step "done"
echo "control-loop suite finished in $((SECONDS - start))s"
