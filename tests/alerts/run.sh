#!/usr/bin/env bash
# The chart's alerts, as the real helm renders them, checked and unit-tested
# by the real promtool (both built by tests/e2e/build-tools.sh); the
# chart's Grafana dashboard, rendered the same way, each of its queries
# checked by promtool; and every metric an alert or a dashboard query
# reads, with every label it names, checked against what exposes it:
# opshooks' own metrics as the real binary serves them on /metrics, the
# operators' state as the chart's kube-state-metrics configuration names
# it, PostgreSQL's as a real postgres_exporter serves them.
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

# The dashboard's ConfigMap as helm renders it: only when enabled, in the
# namespace asked for, with the sidecar's label; its JSON the literal block
# under `opshooks.json:` (the last key, 4 spaces in).
echo "== the Grafana dashboard"
if "$BIN/helm" template t "$ROOT/charts/opshooks" | grep -q 'name: t-opshooks-dashboard$'; then
  echo "FAIL: the dashboard's ConfigMap is rendered by default" >&2
  exit 1
fi
"$BIN/helm" template t "$ROOT/charts/opshooks" --set monitoring.grafanaDashboard.enabled=true \
  --set monitoring.grafanaDashboard.namespace=grafana \
  --show-only templates/grafana-dashboard.yaml >"$work/dashboard.yaml"
for want in '^kind: ConfigMap$' '^  name: t-opshooks-dashboard$' '^  namespace: grafana$' \
  '^    grafana_dashboard: "1"$' '^  opshooks.json: [|]$'; do
  grep -q "$want" "$work/dashboard.yaml" || { echo "FAIL: the dashboard's ConfigMap has no line $want" >&2; exit 1; }
done
awk 'on { sub(/^    /, ""); print } /^  opshooks.json: [|]$/ { on = 1 }' "$work/dashboard.yaml" >"$work/dashboard.json"
# Every query of the dashboard (each panel's expr, each variable's
# label_values selector) into queries.json for the metric check below, and
# as a recording rule into dashboard-rules.yaml for promtool: the
# dashboard's variables replaced first, an interval by 5m and any other
# by `.*` (each must be a variable the dashboard defines).
python3 - "$work/dashboard.json" "$work/queries.json" "$work/dashboard-rules.yaml" <<'PY'
import json
import re
import sys

source, queries_out, rules_out = sys.argv[1:]
try:
    dashboard = json.load(open(source))
except ValueError as err:
    sys.exit(f"FAIL: the dashboard's JSON does not parse: {err}")
variables = {v["name"] for v in dashboard["templating"]["list"]}
missing = {"datasource", "namespace", "database"} - variables
if missing:
    sys.exit(f"FAIL: the dashboard lacks the variables {', '.join(sorted(missing))}")
queries, rules = [], []


def promql(where, expr):
    """The query with the dashboard's variables replaced by what PromQL parses."""
    expr = re.sub(r"\$\{?__(rate_interval|interval|range)\}?", "5m", expr)
    for name in re.findall(r"\$\{?(\w+)", expr):
        if name not in variables:
            sys.exit(f"FAIL: {where}: ${name} is no variable of the dashboard")
    return re.sub(r"\$\{(\w+)(:\w+)?\}|\$(\w+)", ".*", expr)


def add(where, record, expr, labels):
    queries.append({"where": where, "expr": expr, "labels": sorted(labels)})
    rules.append({"record": record, "expr": promql(where, expr)})


for v in dashboard["templating"]["list"]:
    if v["type"] != "query":
        continue
    query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
    m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
    if not m:
        sys.exit(f"FAIL: variable {v['name']}: not label_values(selector, label): {query}")
    add(f"variable {v['name']}", f"dashboard:variable_{v['name']}", m[1], {m[2]})
for panel in dashboard["panels"]:
    if panel["type"] == "row":
        continue
    where = f"panel {panel['title']!r}"
    if not panel.get("targets"):
        sys.exit(f"FAIL: {where} has no query")
    for t in panel["targets"]:
        if t.get("datasource", {}).get("uid") != "${datasource}" or not t.get("expr"):
            sys.exit(f"FAIL: {where}: query {t['refId']} needs an expr and the datasource variable")
        legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")))
        add(where, f"dashboard:panel{panel['id']}_{t['refId']}", t["expr"], legend)
json.dump(queries, open(queries_out, "w"))
# JSON is YAML: promtool reads it as a rules file.
json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(rules_out, "w"), indent=1)
print(f"dashboard: the ConfigMap renders, its JSON parses, {len(queries)} queries")
PY
echo "== promtool check rules (the dashboard's queries)"
"$BIN/promtool" check rules "$work/dashboard-rules.yaml"

echo "== every metric an alert or the dashboard reads is exposed"
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

# The kubelet's volume metrics, read from the kubelet's own source at the
# cluster's version (no kubelet here serves them: kwok and the process
# node play it): the names and labels the alerts may read.
k8s_version=$(sed -nE 's/^K8S_VERSION=(.*)/\1/p' "$ROOT/tests/e2e/build-tools.sh")
command -v go >/dev/null 2>&1 || export PATH=/usr/local/go/bin:$PATH
kubelet_src=$(cd /tmp && go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -nE 's/^\s*"Dir": "(.*)",?$/\1/p')
[[ -f $kubelet_src/pkg/kubelet/metrics/collectors/volume_stats.go ]] ||
  { echo "FAIL: the kubelet's source (k8s.io/kubernetes@$k8s_version) has no volume_stats.go (module dir '$kubelet_src')" >&2; exit 1; }

python3 - "$work/rules.yaml" "$work/queries.json" "$ROOT/charts/opshooks/files/kube-state-metrics.yaml" \
  "$kubelet_src" "http://127.0.0.1:$port/metrics" "${metrics[@]}" <<'PY'
import json
import re
import sys
import urllib.request

rules, queries, ksm, kubelet, url, *exporters = sys.argv[1:]
# Every exposed metric, with the labels its series carry.
exposed = {}
# The kubelet's volume metrics: each Desc of its volume stats collector,
# its key's value from the kubelet's metrics package.
metrics_go = open(f"{kubelet}/pkg/kubelet/metrics/metrics.go").read()
keys = dict(re.findall(r'(\w+Key)\s*=\s*"(\w+)"', metrics_go))
subsystem = re.search(r'KubeletSubsystem\s*=\s*"(\w+)"', metrics_go)[1]
collector = open(f"{kubelet}/pkg/kubelet/metrics/collectors/volume_stats.go").read()
for key, labels in re.findall(r'BuildFQName\("", kubeletmetrics\.KubeletSubsystem, kubeletmetrics\.(\w+)\),\s*"[^"]*",\s*\[\]string\{([^}]*)\}', collector):
    exposed[f"{subsystem}_{keys[key]}"] = set(re.findall(r'"(\w+)"', labels))
if "kubelet_volume_stats_available_bytes" not in exposed:
    sys.exit(f"FAIL: no kubelet volume metrics read from {kubelet}")


def series(line):
    """A series line's name and label names."""
    name, _, rest = line.partition("{")
    if not rest:
        return line.split()[0], set()
    return name, set(re.findall(r'([a-zA-Z_]\w*)="(?:[^"\\]|\\.)*"', rest))


# PostgreSQL's, as the exporters serve them: a series only (a collector
# that found nothing prints its HELP and TYPE alone), so an alert never
# reads a name that no instance has. Every exporter must reach its server.
# The PodMonitor adds namespace and pod to each.
for exporter in exporters:
    for line in urllib.request.urlopen(exporter, timeout=10).read().decode().splitlines():
        if line.startswith("pg_up "):
            if line.split()[1] != "1":
                sys.exit(f"FAIL: {exporter} cannot query its PostgreSQL (pg_up {line.split()[1]})")
        if line.startswith("pg_"):
            name, labels = series(line)
            exposed.setdefault(name, {"namespace", "pod"}).update(labels)
# opshooks' own, as the binary serves them (a histogram's series too, and
# its name).
for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines():
    if line.startswith("# TYPE "):
        exposed.setdefault(line.split()[2], set())
    elif line and not line.startswith("#"):
        name, labels = series(line)
        exposed.setdefault(name, set()).update(labels)
for name, labels in list(exposed.items()):
    if not labels and f"{name}_bucket" in exposed:
        labels.update(exposed[f"{name}_bucket"])
# kube-state-metrics': <metricNamePrefix>_<name> of each metric, with the
# keys of its resource's labelsFromPath and its own, and a state set's
# labelName.
resources = []  # (prefix, the resource's labels, {metric: its labels})
indent = None  # of the labelsFromPath being read
for line in open(ksm):
    depth = len(line) - len(line.lstrip())
    if indent is not None and line.strip() and depth <= indent:
        indent = None
    m = re.match(r"\s+metricNamePrefix:\s*(\S+)", line)
    if m:
        resources.append((m[1], set(), {}))
        metric = None
    m = re.match(r"\s+- name:\s*(\S+)", line)
    if m and resources:
        metric = m[1]
        resources[-1][2][metric] = set()
    if not resources:
        continue
    into = resources[-1][2][metric] if metric else resources[-1][1]
    m = re.match(r"\s+labelsFromPath:\s*$", line)
    if m:
        indent = depth
        continue
    m = re.match(r"\s+(\w+):", line)
    if m and indent is not None:
        into.add(m[1])
    m = re.match(r"\s+labelName:\s*(\S+)", line)
    if m:
        into.add(m[1])
for prefix, common, metrics in resources:
    for name, labels in metrics.items():
        exposed[f"{prefix}_{name}"] = common | labels


def labels_named(expr):
    """The labels a query names: in matchers and in by, on and the like."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    named = set()
    for inside in re.findall(r"\{([^}]*)\}", expr):
        named.update(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", inside))
    for inside in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        named.update(label.strip() for label in inside.split(",") if label.strip())
    return named


def check(what, queries):
    """The metrics that queries read, each (where, expr, more labels):
    fails on a metric nothing exposes, or a label that none of the metrics
    its query reads has."""
    used, wrong = set(), []
    for where, expr, more in queries:
        names = set(re.findall(r"\b((?:opshooks|pg|kubelet)_[a-z_]+)\b", expr))
        used |= names
        known = set().union(*(exposed.get(name, set()) for name in names))
        wrong += [f"{where}: {label}" for label in sorted((labels_named(expr) | set(more)) - known)]
    missing = sorted(used - set(exposed))
    print(f"{what} read {len(used)} metrics: {', '.join(sorted(used))}")
    if missing:
        sys.exit(f"FAIL: metrics {what} read that nothing exposes: {', '.join(missing)}")
    if wrong:
        sys.exit(f"FAIL: labels {what} name that no metric of the query has: {'; '.join(wrong)}")


alerts = []
for line in open(rules):
    m = re.match(r"\s+- alert:\s*(\S+)", line)
    if m:
        alert = m[1]
    m = re.match(r"\s+expr:\s*(.*)", line)
    if m:
        alerts.append((alert, m[1], ()))
check("the alerts", alerts)
check("the dashboard's queries", [(q["where"], q["expr"], q["labels"]) for q in json.load(open(queries))])
PY
echo "alerts: checked, unit-tested, every metric exposed; dashboard: rendered, every query checked, every metric exposed"
