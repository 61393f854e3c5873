#!/usr/bin/env bash
# Smoke test of the e2e infrastructure: builds (or reuses) the tools, starts a
# real control plane, and checks that the API server enforces our manifests:
# Metacontroller's CRDs and ours install, a valid WebServer is accepted (and
# defaulted), an invalid one is refused, and helm runs.
#
# Usage: tests/e2e/smoke.sh        (from anywhere; exits non-zero on any failure)
#
# Needs ../shared/metacontroller/metacontroller-crds-v1.yaml beside the repo.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
MC_CRDS=$REPO/../shared/metacontroller/metacontroller-crds-v1.yaml
K8S_WANT=$(sed -nE 's/^K8S_VERSION=(.*)/\1/p' "$HERE/build-tools.sh")

step() { printf '\n== %s\n' "$*"; }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

[[ -f $MC_CRDS ]] || fail "$MC_CRDS not found (shared/ must sit beside the repo)"

start=$SECONDS
step "build tools"
"$HERE/build-tools.sh" >/dev/null

dir=$(mktemp -d "${TMPDIR:-/tmp}/opshooks-e2e.XXXXXX")
# On failure the logs are the only evidence, and `down` deletes them
# (`up` prints them itself when it is `up` that fails).
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

step "kubectl version"
kubectl version
server=$(kubectl get --raw /version | sed -nE 's/.*"gitVersion": *"([^"]+)".*/\1/p')
[[ $server == "$K8S_WANT" ]] || fail "server reports gitVersion '$server', want $K8S_WANT"
kube-apiserver --version | grep -qxF "Kubernetes $K8S_WANT" || fail "kube-apiserver --version: $(kube-apiserver --version)"

# Server-side apply everywhere: Metacontroller's CRDs are too big for the
# last-applied annotation of client-side apply, and --validate=strict makes
# the server reject unknown or duplicate fields instead of dropping them.
apply() { kubectl apply --server-side --validate=strict --field-manager=opshooks-e2e "$@"; }

step "Metacontroller CRDs"
apply -f "$MC_CRDS"
kubectl wait --for=condition=Established --timeout=60s crd --all

# The CompositeController in there is checked against Metacontroller's real
# schema, which is what the CRDs above are for.
step "metacontroller/*.yaml"
for f in "$REPO"/metacontroller/*.yaml; do apply -f "$f"; done
kubectl wait --for=condition=Established --timeout=60s crd --all
kubectl get compositecontroller opshooks-webserver >/dev/null

step "valid WebServer is accepted"
apply -f - <<'EOF'
apiVersion: opshooks.io/v1alpha1
kind: WebServer
metadata:
  name: hello
  namespace: default
spec:
  replicas: 2
EOF
got=$(kubectl get webserver hello -n default -o jsonpath='{.spec.replicas} {.spec.image} {.spec.port}')
# The CRD's structural defaults are applied by the API server.
[[ $got == "2 nginxinc/nginx-unprivileged 8080" ]] || fail "stored WebServer spec is '$got'"

step "invalid WebServer is refused"
if out=$(apply -f - 2>&1 <<'EOF'
apiVersion: opshooks.io/v1alpha1
kind: WebServer
metadata:
  name: hello-invalid
  namespace: default
spec:
  replicas: -1
EOF
); then
  fail "replicas: -1 was accepted: $out"
fi
printf '%s\n' "$out"
grep -q 'spec.replicas' <<<"$out" || fail "refused for another reason than spec.replicas"
if kubectl get webserver hello-invalid -n default >/dev/null 2>&1; then
  fail "hello-invalid exists although it was refused"
fi

step "helm version"
helm version

printf '\nsmoke checks done in %ss\n' "$((SECONDS - start))"
# The plain closing line that test-result readers recognise.
echo "smoke: 1 passed, 0 failed"
