# shellcheck shell=bash
# What the e2e suites share (run.sh, loop.sh, secure.sh): sourced, not run.
# The caller sets `set -euo pipefail` and HERE (this folder).
#
#   REPO, MC_CRDS, CHART; step TEXT (a heading with the seconds so far);
#   fail TEXT; need_curl.
#
# For the control-loop suites (loop.sh, secure.sh):
#   loop_up               tools, opshooks (release, or the binary OPSHOOKS_E2E_OPSHOOKS
#                         names), a fresh control plane with
#                         the scheduler, kwok's fake node and Metacontroller's
#                         CRDs (and, under OPSHOOKS_E2E_PROC_NODE=1, the
#                         process node: cluster.sh procnode, and with
#                         OPSHOOKS_E2E_CERT_MANAGER=1 too cert-manager:
#                         cluster.sh certmanager); torn down on exit (after on_loop_down, when the
#                         caller defines it). Sets BIN, OPSHOOKS, dir (the
#                         cluster's DIR, see cluster.sh) and three free loopback
#                         ports: port (opshooks), metrics and health (Metacontroller).
#   loop_chart SCHEME [helm args...]
#                         installs or upgrades the chart, its CompositeControllers
#                         pointing at SCHEME://127.0.0.1:$port, resync 10 s
#                         (with cert-manager, the Database controller also
#                         manages its Certificates).
#   loop_run [options...] runs loop.py (or the program LOOP_PY names, e.g.
#                         bench/loop.py) against all of it.

REPO=$(cd "$HERE/../.." && pwd)
MC_CRDS=$REPO/../shared/metacontroller/metacontroller-crds-v1.yaml
CHART=$REPO/charts/opshooks
start=$SECONDS

step() { printf '\n== %s (%ss)\n' "$*" "$((SECONDS - start))"; }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}
need_curl() {
  command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
}

loop_up() {
  command -v python3 >/dev/null || fail "python3 is required"
  [[ -f $MC_CRDS ]] || fail "$MC_CRDS not found (shared/ must sit beside the repo)"
  [[ -f $REPO/../shared/kwok/stages.yaml ]] || fail "../shared/kwok/stages.yaml not found (shared/ must sit beside the repo)"

  step "build tools"
  BIN=$("$HERE/build-tools.sh" | tail -n 1)
  [[ -x $BIN/metacontroller && -x $BIN/kwok && -x $BIN/kube-scheduler ]] || fail "build-tools.sh did not build metacontroller, kwok and kube-scheduler"

  if [[ -n ${OPSHOOKS_E2E_OPSHOOKS:-} ]]; then
    # A binary built already (say target/debug/opshooks): the release build
    # (fat LTO) takes many minutes on a busy machine.
    OPSHOOKS=$OPSHOOKS_E2E_OPSHOOKS
  else
    step "build opshooks (release)"
    (cd "$REPO" && cargo build --release --locked --quiet --bin opshooks)
    OPSHOOKS=$REPO/target/release/opshooks
  fi

  dir=$(mktemp -d "${TMPDIR:-/tmp}/opshooks-loop.XXXXXX")
  up_done=0
  trap loop_down EXIT

  step "cluster up"
  "$HERE/cluster.sh" up "$dir"
  up_done=1
  # shellcheck source=/dev/null
  source "$dir/env"

  step "kube-scheduler, kwok and a fake node"
  "$HERE/cluster.sh" nodes "$dir"

  if [[ ${OPSHOOKS_E2E_PROC_NODE:-} == 1 ]]; then
    step "the process node (proc-node-0, kube-proxy)"
    "$HERE/cluster.sh" procnode "$dir"
    if [[ ${OPSHOOKS_E2E_CERT_MANAGER:-} == 1 ]]; then
      step "cert-manager (its CRDs and controllers)"
      "$HERE/cluster.sh" certmanager "$dir"
    fi
  fi

  step "Metacontroller CRDs"
  kubectl apply --server-side --field-manager=opshooks-e2e -f "$MC_CRDS" >/dev/null
  read -r port metrics health < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
}

loop_down() {
  local rc=$?
  [[ $(type -t on_loop_down) != function ]] || on_loop_down
  ((rc == 0 || up_done == 0)) || "$HERE/cluster.sh" logs "$dir" || true
  local verdict=""
  ((rc == 0)) || [[ ! -f $dir/verdict ]] || verdict=$(<"$dir/verdict")
  # OPSHOOKS_E2E_KEEP_LOGS=DIR: every log of the run (the process node's
  # containers too) copied there before the cluster is removed.
  if [[ -n ${OPSHOOKS_E2E_KEEP_LOGS:-} ]]; then
    mkdir -p "$OPSHOOKS_E2E_KEEP_LOGS" && (cd "$dir" && find . -name '*log' -type f -exec cp --parents {} "$OPSHOOKS_E2E_KEEP_LOGS" \;) || true
  fi
  "$HERE/cluster.sh" down "$dir" || true
  # What failed, once more after the logs: a CI log's tail shows it.
  [[ -z $verdict ]] || printf '\n== the control loop failed (as printed above the logs):\n%s\n' "$verdict"
  exit "$rc"
}

loop_chart() {
  local scheme=$1
  shift
  # A short resync, so a step that waits on time (not on an event) is quick.
  local cert_manager=()
  # cert-manager's run installs the chart's optional CRDs (cluster.sh
  # chart-crds): the Prometheus Operator's PodMonitor among them.
  [[ ${OPSHOOKS_E2E_CERT_MANAGER:-} != 1 ]] || cert_manager=(--set operators.database.certManager=true --set operators.database.podMonitor=true)
  helm upgrade --install opshooks "$CHART" --namespace opshooks --create-namespace \
    --set "controllers.baseUrl=$scheme://127.0.0.1:$port" "${cert_manager[@]}" \
    --set controllers.resyncPeriodSeconds=10 --wait=false "$@" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd --all >/dev/null
  kubectl get compositecontrollers
}

loop_run() {
  python3 -B "${LOOP_PY:-$HERE/loop.py}" --dir "$dir" --port "$port" --opshooks "$OPSHOOKS" \
    --metacontroller "$BIN/metacontroller" --mc-ports "$metrics,$health" "$@"
}
