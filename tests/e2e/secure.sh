#!/usr/bin/env bash
# The hooks secured, end to end: the real Metacontroller verifies opshooks'
# certificate (the chart's caBundle), sends the bearer token (the chart's
# authorization) and, in the second run, presents a client certificate
# (the chart's clientTLS); strangers are refused.
#
#   1. the control loop's set-up (lib.sh): tools, a control plane with
#      kwok's fake node, Metacontroller's CRDs;
#   2. a CA, opshooks' serving certificate (127.0.0.1 and localhost),
#      Metacontroller's client certificate, a stranger's client certificate
#      from another CA, and a token, all in Secrets in namespace opshooks;
#   3. two runs, "TLS + token" then "mutual TLS + token", each:
#      - helm upgrade --install the chart with values naming those Secrets,
#        and check the CompositeControllers carry them;
#      - opshooks on loopback with its TLS and token flags, probed with curl
#        on every hook route the manifests declare: no token 401, a wrong
#        token 401, the token 200; plain HTTP is refused, and under mutual
#        TLS a client without a certificate, or with the stranger's, is
#        refused at the handshake, each refusal between two accepted calls
#        (a dead server refuses nothing);
#      - loop.py's web-brief scenario: a WebServer created through the real
#        Metacontroller gets its pods and its status, and is deleted; every
#        hook call answered 200.
#
# Usage: tests/e2e/secure.sh    (exits non-zero on any failure)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"
# shellcheck source=tests/e2e/pki.sh
source "$HERE/pki.sh"
need_curl
need_openssl

loop_up
NS=opshooks
REQUEST=$REPO/tests/fixtures/webserver/v2-scale-up/request.json
# Every hook route the manifests declare ("webserver/sync", ...): each one
# must be configured in the chart's controllers and refuse without the token.
mapfile -t ROUTES < <(sed -nE 's|^ *url: http://[^/]+/(.+)$|\1|p' "$REPO"/metacontroller/*-controller.yaml)
((${#ROUTES[@]} > 0)) || fail "no hook routes found in metacontroller/*-controller.yaml"

step "certificates and Secrets"
PKI=$dir/hooks-pki
mkdir -p "$PKI"
gen_ca ca opshooks-hooks-ca
sign server "/CN=opshooks" "$LEAF
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
sign metacontroller "/CN=metacontroller" "$LEAF
extendedKeyUsage=clientAuth"
gen_ca stranger-ca someone-else
sign stranger "/CN=metacontroller" "$LEAF
extendedKeyUsage=clientAuth" stranger-ca
# Trailing newline on purpose: both sides trim it.
python3 -c 'import secrets; print(secrets.token_urlsafe(36))' >"$PKI/token"
token=$(tr -d '[:space:]' <"$PKI/token")
kubectl create namespace "$NS" >/dev/null
kubectl create secret generic hooks-tls -n "$NS" \
  --from-file=tls.crt="$PKI/server.crt" --from-file=tls.key="$PKI/server.key" --from-file=ca.crt="$PKI/ca.crt" >/dev/null
kubectl create secret generic metacontroller-client -n "$NS" \
  --from-file=tls.crt="$PKI/metacontroller.crt" --from-file=tls.key="$PKI/metacontroller.key" >/dev/null
kubectl create secret generic hooks-token -n "$NS" --from-file=token="$PKI/token" >/dev/null

url=https://127.0.0.1:$port
server_pid=""
stop_server() {
  [[ -n $server_pid ]] || return 0
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
on_loop_down() { stop_server; }

# answer URL ARGS...: what came back for one call: "HTTP <status>", or
# "curl <exit code>" when no HTTP answer did (curl.err says why). A dead
# server and a refusing one differ here: 7 is a refused connection, 35 and
# 56 a TLS handshake or connection the server broke off, 52 an empty reply,
# 1 a reply that is not HTTP.
# HTTP/1.1: over HTTP/2 a refusal comes before the request body is read, and
# this curl (7.88) reports the stream's reset instead of the answer (Go's
# client, Metacontroller's, reads the answer).
answer() {
  local target=$1 code rc=0
  shift
  code=$(curl -sS -o "$dir/body" -w '%{http_code}' --max-time 10 --http1.1 --cacert "$PKI/ca.crt" \
    "$@" "$target" 2>"$dir/curl.err") || rc=$?
  if ((rc == 0)); then echo "HTTP $code"; else echo "curl $rc"; fi
}
# hook ROUTE ARGS...: a hook call on ROUTE with a request it answers 200.
hook() {
  local route=$1
  shift
  answer "$url/$route" -H 'Content-Type: application/json' --data "@$(fixture "$route")" "$@"
}
# fixture OPERATOR/HOOK: a golden request that hook answers (response.json),
# the first by name. Keep that one small: a refusal comes before the body
# is read, and curl still sending a 100 KB body gets a broken pipe (curl
# 55) instead of the 401 (CI, 2026-12-07, when v2-archive-failing sorted
# first; it is v2-archive-rolled-out-failing since).
fixture() {
  local op=${1%/*} hook=${1#*/} case
  for case in "$REPO/tests/fixtures/$op/$([[ $hook == sync ]] && echo v2 || echo "$hook")"-*/; do
    [[ -f $case/response.json ]] && { echo "$case/request.json"; return; }
  done
  fail "no fixture answers $1"
}
expect() { # want what got
  [[ $3 == "$1" ]] || fail "$2: got $3, want $1 ($(cat "$dir/curl.err" "$dir/body" 2>/dev/null | head -c 400))"
  echo "ok: $2 -> $1"
}
# alive WHEN: opshooks is running and answers /readyz with the client's own
# credentials (the caller's client array), so a refusal next to it is real.
alive() {
  kill -0 "$server_pid" 2>/dev/null || fail "opshooks exited $1: $(tail -5 "$dir/opshooks-curl.log")"
  expect "HTTP 200" "/readyz $1" "$(answer "$url/readyz" "${client[@]}")"
}
# refused WHAT WANT ARGS...: a call (answer ARGS...) that the live server
# refuses with one of WANT ("curl 35|curl 56"), checked alive before and after.
refused() {
  local what=$1 want=$2 got
  shift 2
  alive "before: $what"
  got=$(answer "$@")
  [[ $got =~ ^($want)$ ]] || fail "$what: got $got, want $want ($(head -c 300 "$dir/curl.err"))"
  echo "ok: $what -> refused, $got: $(head -c 120 "$dir/curl.err")"
  alive "after: $what"
}

# secured NAME MTLS: one run, with client certificates when MTLS is 1.
secured() {
  local name=$1 mtls=$2 client=() flags helm loop_tls
  flags=("--tls-cert-file=$PKI/server.crt" "--tls-key-file=$PKI/server.key" "--auth-token-file=$PKI/token")
  helm=(--set tls.enabled=true --set tls.secretName=hooks-tls
    --set auth.enabled=true --set auth.existingSecret=hooks-token
    --set tls.clientAuth.enabled="$([[ $mtls == 1 ]] && echo true || echo false)"
    --set tls.clientAuth.clientSecretName=metacontroller-client)
  loop_tls=(--ca-file "$PKI/ca.crt")
  if [[ $mtls == 1 ]]; then
    flags+=("--tls-client-ca-file=$PKI/ca.crt")
    client=(--cert "$PKI/metacontroller.crt" --key "$PKI/metacontroller.key")
    loop_tls+=(--client-cert "$PKI/metacontroller.crt,$PKI/metacontroller.key")
  fi

  step "$name: the chart"
  loop_chart https "${helm[@]}"
  kubectl get compositecontrollers -o json >"$dir/controllers.json"
  python3 - "$dir/controllers.json" "$NS" "$mtls" "${ROUTES[@]}" <<'EOF'
import json, sys
from urllib.parse import urlparse
ns, mtls, routes = sys.argv[2], sys.argv[3] == "1", set(sys.argv[4:])
want = {
    "caBundle": {"secretRef": {"name": "hooks-tls", "namespace": ns, "key": "ca.crt"}},
    "authorization": {"type": "Bearer", "secretRef": {"name": "hooks-token", "namespace": ns, "key": "token"}},
}
if mtls:
    want["clientTLS"] = {"secretRef": {"name": "metacontroller-client", "namespace": ns}, "certKey": "tls.crt", "privateKeyKey": "tls.key"}
checked = set()
with open(sys.argv[1]) as f:
    controllers = json.load(f)["items"]
for cc in controllers:
    for hook, spec in cc["spec"]["hooks"].items():
        got = {k: v for k, v in spec["webhook"].items() if k in ("caBundle", "authorization", "clientTLS")}
        if got != want:
            sys.exit(f"{cc['metadata']['name']} {hook}: {got}, want {want}")
        checked.add(urlparse(spec["webhook"]["url"]).path.lstrip("/"))
# No controllers would check nothing and pass: every declared route must be seen.
if checked != routes:
    sys.exit(f"hooks checked {sorted(checked)}, the manifests declare {sorted(routes)}")
print(f"ok: all {len(checked)} hooks carry", ", ".join(want))
EOF

  step "$name: opshooks refuses strangers (curl)"
  "$OPSHOOKS" --listen "127.0.0.1:$port" --log-format json "${flags[@]}" >>"$dir/opshooks-curl.log" 2>&1 &
  server_pid=$!
  local i
  for ((i = 0; i < 100; i++)); do
    curl -fsS --cacert "$PKI/ca.crt" "${client[@]}" "$url/readyz" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || fail "opshooks exited: $(tail -5 "$dir/opshooks-curl.log")"
    sleep 0.1
  done
  [[ $(curl -fsS -o /dev/null -w '%{http_version}' --cacert "$PKI/ca.crt" "${client[@]}" "$url/readyz") == 2 ]] ||
    fail "opshooks did not answer over HTTPS with HTTP/2"
  echo "ok: /readyz over HTTPS, HTTP/2"
  local route routes=0
  for route in "${ROUTES[@]}"; do
    expect "HTTP 401" "$route, no token" "$(hook "$route" "${client[@]}")"
    grep -q '"status":401' "$dir/body" || fail "the 401 is not a problem document: $(cat "$dir/body")"
    expect "HTTP 401" "$route, a wrong token" "$(hook "$route" "${client[@]}" -H 'Authorization: Bearer not-the-token')"
    expect "HTTP 200" "$route, the token" "$(hook "$route" "${client[@]}" -H "Authorization: Bearer $token")"
    routes=$((routes + 1))
  done
  ((routes == ${#ROUTES[@]})) || fail "$routes of ${#ROUTES[@]} hook routes checked"
  curl -sS -o /dev/null -D "$dir/headers" --http1.1 --cacert "$PKI/ca.crt" "${client[@]}" -H 'Content-Type: application/json' \
    --data "@$REQUEST" "$url/webserver/sync"
  grep -qi '^www-authenticate: Bearer' "$dir/headers" || fail "no WWW-Authenticate: Bearer on the 401: $(cat "$dir/headers")"
  # The TLS server answers plain bytes with a TLS alert, which curl reads as
  # an HTTP/0.9 reply it does not accept (exit 1), or closes (52, 56).
  refused "plain HTTP on the HTTPS port" "curl 1|curl 52|curl 56" "http://127.0.0.1:$port/readyz"
  if [[ $mtls == 1 ]]; then
    refused "no client certificate (refused at the handshake)" "curl 35|curl 56" \
      "$url/webserver/sync" -H "Authorization: Bearer $token"
    refused "a client certificate from another CA" "curl 35|curl 56" \
      "$url/webserver/sync" --cert "$PKI/stranger.crt" --key "$PKI/stranger.key" -H "Authorization: Bearer $token"
  fi
  stop_server

  step "$name: a WebServer through the real Metacontroller"
  local args=() f
  for f in "${flags[@]}"; do args+=("--opshooks-arg=$f"); done
  loop_run --only web-brief --strategies dynamic-apply "${loop_tls[@]}" "${args[@]}"
}

secured "TLS + token" 0
secured "mutual TLS + token" 1

step "done"
echo "secured hooks suite finished in $((SECONDS - start))s"
