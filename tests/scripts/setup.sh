#!/bin/sh
# Installs what tests/scripts needs on a fresh Debian (bookworm) machine:
# a PostgreSQL server and client, shellcheck and busybox (when the archive
# has them), and the pinned Python packages. Safe to run again: apt-get runs
# only for a missing package, and pip leaves satisfied pins alone.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python}"
command -v "$python" >/dev/null 2>&1 || python=python3

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

missing=""
for pkg in postgresql postgresql-client; do
    installed "$pkg" || missing="$missing $pkg"
done
# Optional: shellcheck lints the scripts, busybox runs them under a third sh.
optional=""
for pkg in shellcheck busybox; do
    installed "$pkg" || optional="$optional $pkg"
done

if [ -n "$missing$optional" ]; then
    echo "setup: installing$missing$optional" >&2
    $sudo apt-get update -qq
    export DEBIAN_FRONTEND=noninteractive
    if [ -n "$missing" ]; then
        # shellcheck disable=SC2086 # word splitting of the package list is wanted
        $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
    for pkg in $optional; do
        if apt-cache show "$pkg" >/dev/null 2>&1; then
            $sudo apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
        else
            echo "setup: $pkg is not available here; its checks will be skipped" >&2
        fi
    done
fi
# Debian's postgresql package creates and starts a cluster on port 5432; the
# tests start their own server on a free port and do not use it.

"$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r "$here/requirements.txt"
