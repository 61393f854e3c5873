#!/bin/sh
# Runs the real-server tests of the backup job's scripts: installs what they
# need, then pytest from the repository root. Exits non-zero on any failure.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python}"
command -v "$python" >/dev/null 2>&1 || python=python3
export PYTHON="$python"

sh "$here/setup.sh"
cd "$root"
exec "$python" -m pytest -q tests/scripts "$@"
