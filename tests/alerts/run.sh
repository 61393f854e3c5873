#!/usr/bin/env bash
# The chart's alerts, as the real helm renders them, checked and unit-tested
# by the real promtool (both built by tests/e2e/build-tools.sh), and every
# metric an alert reads checked against what exposes it: opshooks' own
# metrics as the real binary serves them on /metrics, the operators' state
# as the chart's kube-state-metrics configuration names it.
#
# Usage: tests/alerts/run.sh BIN OPSHOOKS
#   BIN: the tools' directory (helm, promtool); OPSHOOKS: an opshooks binary.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=$1
OPSHOOKS=$2
work=$(mktemp -d)
server=
exporters=()
cleanup() {
  [[ -z $server ]] || kill "$server" 2>/dev/null || true
  for pid in "${exporters[@]}"; do kill "$pid" 2>/dev/null || true; done
  for d in "$work/pg/standby" "$work/pg/primary"; do
    [[ ! -f $d/postmaster.pid ]] || as_postgres "$PG_BIN/pg_ctl" -D "$d" -m immediate stop >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
# initdb and the server refuse root.
as_postgres() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
trap cleanup EXIT

# Debian's PostgreSQL server (tests/scripts/setup.sh installs it), for the
# exporter to read; the newest major installed.
PG_BIN=${PG_BIN:-$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)}
[[ -x $PG_BIN/initdb ]] || { echo "FAIL: no PostgreSQL server binaries (PG_BIN=$PG_BIN): run tests/scripts/setup.sh" >&2; exit 1; }
[[ -x $BIN/postgres_exporter ]] || { echo "FAIL: no postgres_exporter in $BIN (tests/e2e/build-tools.sh builds it)" >&2; exit 1; }

# The PrometheusRule's groups as a rules file: `groups:` and the lines
# below the rendered `spec.groups` (the rule is the only document shown).
"$BIN/helm" template t "$ROOT/charts/opshooks" --set monitoring.prometheusRule.enabled=true \
  --show-only templates/monitoring.yaml >"$work/rule.yaml"
awk '/^  groups:$/ { on = 1; print "groups:"; next } on' "$work/rule.yaml" >"$work/rules.yaml"
cp "$HERE/alerts_test.yaml" "$work/"
echo "== promtool check rules"
"$BIN/promtool" check rules "$work/rules.yaml"
echo "== promtool test rules"
(cd "$work" && "$BIN/promtool" test rules alerts_test.yaml)

echo "== every metric an alert reads is exposed"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { # url
  for _ in $(seq 1 100); do
    if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$1" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "FAIL: nothing answers at $1" >&2
  return 1
}
port=$(free_port)
"$OPSHOOKS" --listen "127.0.0.1:$port" >"$work/opshooks.log" 2>&1 &
server=$!
wait_for "http://127.0.0.1:$port/metrics"

# PostgreSQL's metrics as the exporter serves them: a real primary and a
# streaming standby (pg_stat_replication has a row only with one), each
# read by its own exporter as a member of pg_monitor (the least privilege
# the exporter documents), with the collectors the alerts need.
echo "== postgres_exporter against a real primary and standby"
mkdir -p "$work/pg"
chmod 755 "$work"
if [[ $(id -u) -eq 0 ]]; then chown postgres "$work/pg"; fi
pg_primary=$(free_port) pg_standby=$(free_port)
while [[ $pg_standby == "$pg_primary" ]]; do pg_standby=$(free_port); done
as_postgres "$PG_BIN/initdb" -D "$work/pg/primary" -U postgres -A trust >/dev/null
printf '%s\n' "port = $pg_primary" "listen_addresses = '127.0.0.1'" "unix_socket_directories = '$work/pg'" \
  >>"$work/pg/primary/postgresql.conf"
echo "host replication postgres 127.0.0.1/32 trust" >>"$work/pg/primary/pg_hba.conf"
as_postgres "$PG_BIN/pg_ctl" -D "$work/pg/primary" -l "$work/pg/primary.log" -w start >/dev/null
as_postgres "$PG_BIN/psql" -qX -h 127.0.0.1 -p "$pg_primary" -U postgres -d postgres \
  -c "CREATE ROLE opshooks_monitor LOGIN IN ROLE pg_monitor"
as_postgres "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$pg_primary" -U postgres -D "$work/pg/standby" -R
echo "port = $pg_standby" >>"$work/pg/standby/postgresql.conf"
as_postgres "$PG_BIN/pg_ctl" -D "$work/pg/standby" -l "$work/pg/standby.log" -w start >/dev/null
# The standby accepts connections before its WAL receiver has connected:
# pg_stat_replication has its row only then.
for _ in $(seq 1 100); do
  streaming=$(as_postgres "$PG_BIN/psql" -qtAX -h 127.0.0.1 -p "$pg_primary" -U postgres -d postgres \
    -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
  [[ $streaming == 1 ]] && break
  sleep 0.1
done
[[ $streaming == 1 ]] || { echo "FAIL: the standby does not stream from the primary" >&2; exit 1; }
metrics=()
for pg_port in "$pg_primary" "$pg_standby"; do
  exporter_port=$(free_port)
  DATA_SOURCE_NAME="host=127.0.0.1 port=$pg_port user=opshooks_monitor dbname=postgres sslmode=disable" \
    "$BIN/postgres_exporter" --web.listen-address="127.0.0.1:$exporter_port" --collector.database_wraparound \
    >>"$work/exporter.log" 2>&1 &
  exporters+=($!)
  wait_for "http://127.0.0.1:$exporter_port/metrics"
  metrics+=("http://127.0.0.1:$exporter_port/metrics")
done

python3 - "$work/rules.yaml" "$ROOT/charts/opshooks/files/kube-state-metrics.yaml" "http://127.0.0.1:$port/metrics" "${metrics[@]}" <<'PY'
import re
import sys
import urllib.request

rules, ksm, url, *exporters = sys.argv[1:]
exposed = set()
# PostgreSQL's, as the exporters serve them: a series only (a collector
# that found nothing prints its HELP and TYPE alone), so an alert never
# reads a name that no instance has. Every exporter must reach its server.
for exporter in exporters:
    for line in urllib.request.urlopen(exporter, timeout=10).read().decode().splitlines():
        if line.startswith("pg_up "):
            if line.split()[1] != "1":
                sys.exit(f"FAIL: {exporter} cannot query its PostgreSQL (pg_up {line.split()[1]})")
        if line.startswith("pg_"):
            exposed.add(re.split(r"[{ ]", line, maxsplit=1)[0])
# opshooks' own, as the binary serves them (a histogram's series too).
for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines():
    if line.startswith("# TYPE "):
        _, _, name, kind = line.split()
        exposed.add(name)
        if kind == "histogram":
            exposed.update(f"{name}_{s}" for s in ("bucket", "sum", "count"))
# kube-state-metrics': <metricNamePrefix>_<name> of each metric.
prefix = None
for line in open(ksm):
    m = re.match(r"\s+metricNamePrefix:\s*(\S+)", line)
    if m:
        prefix = m[1]
    m = re.match(r"\s+- name:\s*(\S+)", line)
    if m and prefix:
        exposed.add(f"{prefix}_{m[1]}")
used = set()
for line in open(rules):
    m = re.match(r"\s+expr:\s*(.*)", line)
    if m:
        used.update(re.findall(r"\b((?:opshooks|pg)_[a-z_]+)\b", m[1]))
missing = sorted(used - exposed)
print(f"alerts read {len(used)} metrics: {', '.join(sorted(used))}")
if missing:
    sys.exit(f"FAIL: metrics an alert reads that nothing exposes: {', '.join(missing)}")
PY
echo "alerts: checked, unit-tested, every metric exposed"
