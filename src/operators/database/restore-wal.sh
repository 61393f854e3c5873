#!/bin/sh
# opshooks database, restore_command, in the PostgreSQL container:
#   restore_command = 'sh /opshooks/archive/restore-wal.sh %f %p'
# The counterpart of archive-wal.sh: asks the archiver sidecar
# (archiver.sh) for the file %f from the archive (an empty file named
# after it in $WAL_SPOOL/restore/requests) and moves what it downloaded
# (restore/files/<f>) to %p, relative to the data directory, where
# PostgreSQL runs this.
#
# Exit codes, as PostgreSQL reads them:
#   0  the file is at %p.
#   1  the archive does not have it (restore/missing/<f>): the end of the
#      archive, or a history file that was never written.
#   126 the sidecar could not ask the store (restore/failed/<f>, or no
#      answer within RESTORE_WAIT seconds, default 120), during archive
#      recovery (recovery.signal): a failure to fetch must never read as
#      the end of the archive, or recovery would end early and promote a
#      server that lacks commits; above 125, PostgreSQL stops the recovery
#      with a FATAL instead, and a retry goes on from where it was.
#      A standby (standby.signal) gets 1 instead: it streams from its
#      primary meanwhile and asks again later.
#
# Values: WAL_SPOOL (default /var/run/opshooks/wal), RESTORE_WAIT,
# WAL_RESTORE_FROM: `restore` (default: this Database's own archive) or
# `recovery` (the archive a point-in-time recovery replays, which
# pitr-replay.sh sets for its server alone).
set -u
f="${1:-}"
p="${2:-}"
spool="${WAL_SPOOL:-/var/run/opshooks/wal}"
wait="${RESTORE_WAIT:-120}"

say() { printf 'restore-wal: %s\n' "$(printf '%s' "$1" | tr '\n\r' '  ')" >&2; }
# Could not ask: see above.
unknown() {
    if [ -f standby.signal ]; then
        say "$1 (a standby: it streams meanwhile and asks again)"
        exit 1
    fi
    say "$1: recovery stops here rather than take this for the end of the archive"
    exit 126
}

case "$f" in
    '' | .* | *[!0-9A-Za-z.]*) say "'$f' is not the name of a WAL file (the arguments are %f %p)"; exit 126 ;;
esac
[ -n "$p" ] || { say "no destination (the arguments are %f %p)"; exit 126; }
case "$wait" in '' | *[!0-9]*) say "RESTORE_WAIT is '$wait', not a number of seconds"; exit 126 ;; esac
case "${WAL_RESTORE_FROM:-restore}" in
    restore) dir="$spool/restore" ;;
    recovery) dir="$spool/recovery" ;;
    *) say "WAL_RESTORE_FROM is '$WAL_RESTORE_FROM', not restore or recovery"; exit 126 ;;
esac
mkdir -p "$dir/requests" "$dir/done" "$dir/missing" "$dir/failed" "$dir/files" 2>/dev/null
[ -d "$dir/requests" ] || unknown "cannot use the spool $spool (is the archiver's volume mounted?)"

rm -f "$dir/done/$f" "$dir/missing/$f" "$dir/failed/$f" "$dir/files/$f"
true >"$dir/requests/$f" 2>/dev/null || unknown "cannot ask the archiver for $f in $dir/requests"

deadline=$(($(date +%s) + wait))
while :; do
    if [ -e "$dir/done/$f" ]; then
        rm -f "$dir/done/$f"
        # Across volumes mv copies, then removes: PostgreSQL reads %p only
        # once this exits.
        mv -f "$dir/files/$f" "$p" || unknown "$f was fetched but could not be moved to $p"
        exit 0
    fi
    if [ -e "$dir/missing/$f" ]; then
        rm -f "$dir/missing/$f"
        exit 1
    fi
    if [ -e "$dir/failed/$f" ]; then
        reason="$(head -c 1000 "$dir/failed/$f" 2>/dev/null)"
        rm -f "$dir/failed/$f"
        unknown "$f could not be fetched: ${reason:-the archiver gave no reason}"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        rm -f "$dir/requests/$f"
        unknown "$f could not be fetched: the archiver sidecar did not answer within ${wait}s"
    fi
    sleep 0.1
done
