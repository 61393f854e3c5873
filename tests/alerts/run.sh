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
cleanup() {
  [[ -z $server ]] || kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

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
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$OPSHOOKS" --listen "127.0.0.1:$port" >"$work/opshooks.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do
  if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
    "http://127.0.0.1:$port/metrics" 2>/dev/null; then break; fi
  sleep 0.1
done
python3 - "$work/rules.yaml" "$ROOT/charts/opshooks/files/kube-state-metrics.yaml" "http://127.0.0.1:$port/metrics" <<'PY'
import re
import sys
import urllib.request

rules, ksm, url = sys.argv[1:]
exposed = set()
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
        used.update(re.findall(r"\b(opshooks_[a-z_]+)\b", m[1]))
missing = sorted(used - exposed)
print(f"alerts read {len(used)} metrics: {', '.join(sorted(used))}")
if missing:
    sys.exit(f"FAIL: metrics an alert reads that nothing exposes: {', '.join(missing)}")
PY
echo "alerts: checked, unit-tested, every metric exposed"
