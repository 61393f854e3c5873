#!/usr/bin/env bash
# The real control loop: every operator's whole life under the real
# Metacontroller (v4.17.2, built from ../shared/metacontroller/src), the real
# kube-scheduler and kwok's fake node, against opshooks on loopback.
#
#   1. builds (once, cached) the tools, and opshooks in release mode;
#   2. starts a fresh control plane (cluster.sh up) and adds the scheduler,
#      kwok with the stage files from ../shared/kwok, a fake node and a
#      default StorageClass served by the hostpath provisioner, and a class
#      `expandable` whose claims a kwok Stage grows (cluster.sh nodes);
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
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"

loop_up

step "the chart"
loop_chart http

step "control loop"
loop_run "$@"

step "done"
echo "control-loop suite finished in $((SECONDS - start))s"
