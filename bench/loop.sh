#!/usr/bin/env bash
# The loop benchmark (issue 22): N parents of each kind under the real loop
# (Metacontroller, kube-apiserver, etcd, kube-controller-manager,
# kube-scheduler, kwok and opshooks on loopback), the time from `kubectl
# apply` to all Ready and the CPU seconds of every process, at a few
# Metacontroller settings, interleaved round after round. Rewrites the
# section "## The real loop at scale (issue 22)" of BENCHMARKS.md.
#
# The loop comes up as in the e2e suite (tests/e2e/lib.sh loop_up: the tools
# built and cached by tests/e2e/build-tools.sh, opshooks in release mode, a
# fresh control plane torn down on exit; ../shared beside the repo) with the
# chart at each operator's own resync period; bench/loop.py does the rest.
#
# Usage: bench/loop.sh [bench/loop.py options: --rounds R, --settings A,B,
#        --webservers N, --smoke, --no-write, ...]   (about 30 minutes by default)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/e2e" && pwd)
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"

loop_up

step "the chart (each operator's own resync period)"
loop_chart http --set controllers.resyncPeriodSeconds=0

step "benchmark"
LOOP_PY=$REPO/bench/loop.py loop_run "$@"

step "done"
