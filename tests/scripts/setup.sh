#!/bin/sh
# Installs what tests/scripts needs on a fresh Debian (bookworm) machine:
# a PostgreSQL server and client, shellcheck, dash and busybox, and the
# pinned Python packages. Safe to run again: apt-get runs only for a
# missing package, and pip leaves satisfied pins alone.
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

# Besides PostgreSQL: shellcheck to lint the scripts, dash and busybox to
# run them under the /bin/sh of the images; gcc, libc6-dev and libpq-dev to
# build psycopg2 (barman-cloud's driver), which has no wheel. None is
# optional: under CI a check skipped for a missing tool fails (conftest.py).
missing=""
for pkg in postgresql postgresql-client shellcheck dash busybox gcc libc6-dev libpq-dev; do
    installed "$pkg" || missing="$missing $pkg"
done

if [ -n "$missing" ]; then
    echo "setup: installing$missing" >&2
    $sudo apt-get update -qq
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086 # word splitting of the package list is wanted
    $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# Debian's postgresql package creates and starts a cluster on port 5432; the
# tests start their own server on a free port and do not use it.

"$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r "$here/requirements.txt"
