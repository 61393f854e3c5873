#!/bin/sh
# opshooks database, archive_command, in the PostgreSQL container:
#   archive_command = 'sh /opshooks/archive/archive-wal.sh %f'
# The image has no Python, so barman-cloud runs in the archiver sidecar
# (archiver.sh), which mounts the same data volume (it reads the segment
# from $PGDATA/pg_wal there) and shares the spool directory $WAL_SPOOL
# with this container.
#
# Hands the segment %f to the sidecar (an empty file named after it in
# $WAL_SPOOL/archive/requests) and succeeds ONLY once the sidecar reports
# it stored in the archive (archive/done/<f>). A failure the sidecar
# reports (archive/failed/<f>, its reason) or no answer within ARCHIVE_WAIT
# seconds (default 30) exits 1 with the reason on stderr, which reaches the
# server's log: PostgreSQL keeps the segment, counts the failure in
# pg_stat_archiver and tries again. Never above 125: PostgreSQL takes such
# an exit as a shell error and stops its archiver with a FATAL.
#
# Values: WAL_SPOOL (default /var/run/opshooks/wal), ARCHIVE_WAIT. The
# argument is a name PostgreSQL chose; it is checked all the same before it
# becomes a path.
set -u
f="${1:-}"
spool="${WAL_SPOOL:-/var/run/opshooks/wal}"
wait="${ARCHIVE_WAIT:-30}"

fail() {
    printf 'archive-wal: %s\n' "$(printf '%s' "$1" | tr '\n\r' '  ')" >&2
    exit 1
}

case "$f" in
    '' | .* | *[!0-9A-Za-z.]*) fail "'$f' is not the name of a WAL file (the argument is %f)" ;;
esac
case "$wait" in '' | *[!0-9]*) fail "ARCHIVE_WAIT is '$wait', not a number of seconds" ;; esac
dir="$spool/archive"
mkdir -p "$dir/requests" "$dir/done" "$dir/failed" 2>/dev/null
[ -d "$dir/requests" ] || fail "cannot use the spool $spool (is the archiver's volume mounted?)"

# An outcome left from an earlier attempt at the same segment says nothing
# about this one. (One the sidecar writes later for that earlier attempt is
# still the truth about this segment, whose content never changes until it
# is archived.)
rm -f "$dir/done/$f" "$dir/failed/$f"
true >"$dir/requests/$f" 2>/dev/null || fail "cannot hand $f to the archiver in $dir/requests"

deadline=$(($(date +%s) + wait))
while :; do
    if [ -e "$dir/done/$f" ]; then
        rm -f "$dir/done/$f"
        exit 0
    fi
    if [ -e "$dir/failed/$f" ]; then
        reason="$(head -c 1000 "$dir/failed/$f" 2>/dev/null)"
        rm -f "$dir/failed/$f"
        fail "$f is not archived: ${reason:-the archiver gave no reason}; PostgreSQL keeps it and tries again"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        rm -f "$dir/requests/$f"
        fail "$f is not archived: the archiver sidecar did not answer within ${wait}s (not running, or the store is slow); PostgreSQL keeps it and tries again"
    fi
    sleep 0.1
done
