#!/bin/sh
# opshooks database, point-in-time recovery, step 1 of 2, in the archiver
# sidecar's image (barman-cloud): checks the target against what the
# archive covers, picks the base backup to start from and downloads it into
# the new Database's empty data directory. pitr-replay.sh (step 2, the
# PostgreSQL image) then replays the archived WAL up to the target.
#
# The target: at most one of RECOVERY_TARGET_TIME (ISO 8601 with its UTC
# offset: 2024-05-01T17:00:00+02:00, ...Z), RECOVERY_TARGET_LSN (0/5000028)
# and RECOVERY_TARGET_NAME (a pg_create_restore_point name); none: the end
# of the archive.
#
# Refused (exit 3), with nothing written:
# - $PGDATA holds anything (a recovery never writes over data);
# - the archive holds no finished base backup;
# - a target time or LSN before the end of the first finished base backup
#   (nothing recovers to it), or a time in the future. The refusal names
#   the window: from the first backup's end to the end of the archive.
# The base backup is the newest finished one that ended at or before the
# target (a time or an LSN); for a name or the end of the archive, the
# newest. A download that fails leaves $PGDATA empty again (exit 1).
#
# Store: ARCHIVE_DESTINATION, ARCHIVE_SERVER (the source's folder in the
# store, <name>-<uid>-pg<major> as archive.rs names it), ARCHIVE_ENDPOINT and the SDK's credentials, as archiver.sh.
# Every value reaches barman-cloud or Python as one argument or in the
# environment, never through a shell.
#
# The outcome is one line in $TERMINATION_LOG (default
# /dev/termination-log):
#   opshooks pitr-fetch: fetched id=<id> end=<lsn> end_time=<ISO 8601>
#       recoverable_from=<ISO 8601> seconds=<n>                  (exit 0)
#   opshooks pitr-fetch: refused <reason>                        (exit 3)
#   opshooks pitr-fetch: skipped <reason>                        (exit 0)
#   opshooks pitr-fetch: failed <reason>                         (exit 1)
set -u
pgdata="${PGDATA:-}"
destination="${ARCHIVE_DESTINATION:-}"
server="${ARCHIVE_SERVER:-}"
endpoint="${ARCHIVE_ENDPOINT:-}"
target_time="${RECOVERY_TARGET_TIME:-}"
target_lsn="${RECOVERY_TARGET_LSN:-}"
target_name="${RECOVERY_TARGET_NAME:-}"

report() {
    printf 'opshooks pitr-fetch: %s\n' "$(printf '%s' "$1" | tr '\n\r' '  ')" 2>/dev/null \
        >"${TERMINATION_LOG:-/dev/termination-log}" || true
}
log() { printf 'pitr-fetch: %s\n' "$*" >&2; }
fail() { log "failed: $1"; report "failed $1"; exit 1; }
refuse() { log "refused: $1"; report "refused $1"; exit 3; }

# In an instance's pod (ROLE_DIR set, the mounted role ConfigMap), this
# runs before every start of every instance for the Database's whole
# life: it fetches only into the designated primary of a Database never
# initialized, with nothing in $PGDATA; otherwise it says why not and
# exits 0 (and removes what a download cut off earlier left beside
# $PGDATA), before any other check, and start.sh judges what the volume
# holds.
if [ -n "${ROLE_DIR:-}" ]; then
    skip() {
        case "$pgdata" in /?*) rm -rf "${pgdata%/}.fetching" ;; esac
        log "skipped: $1"
        report "skipped $1"
        exit 0
    }
    # shellcheck disable=SC3028 # the container runtime sets HOSTNAME to the pod's name
    me="${HOSTNAME:-}"
    designated="$(cat "$ROLE_DIR/primary" 2>/dev/null)" || designated=""
    initialized="$(cat "$ROLE_DIR/initialized" 2>/dev/null)" || initialized=""
    if [ -z "$me" ] || [ "$designated" != "$me" ]; then
        skip "'$me' is not the designated primary ('$designated'): a standby clones the recovered primary"
    fi
    [ "$initialized" = false ] ||
        skip "the role says initialized='$initialized': nothing is recovered over a Database that was initialized"
    if [ -e "$pgdata" ] && [ -n "$(ls -A "$pgdata" 2>/dev/null)" ]; then
        skip "$pgdata holds data already: start.sh judges what"
    fi
fi

case "$destination" in
    s3://?* | azure://?* | gs://?* | https://?*) ;;
    *) fail "ARCHIVE_DESTINATION is '$destination', not an s3://, gs://, azure:// or https:// URL" ;;
esac
case "$server" in
    '' | [!A-Za-z0-9]* | *[!A-Za-z0-9._-]*) fail "ARCHIVE_SERVER is '$server', not a name of letters, digits, '.', '_' and '-'" ;;
esac
case "$endpoint" in
    '' | http://?* | https://?*) ;;
    *) fail "ARCHIVE_ENDPOINT is '$endpoint', not an http:// or https:// URL" ;;
esac
case "$pgdata" in
    /?*) ;;
    *) fail "PGDATA is '$pgdata', not an absolute path" ;;
esac
targets=0
for t in "$target_time" "$target_lsn" "$target_name"; do
    [ -z "$t" ] || targets=$((targets + 1))
done
[ "$targets" -le 1 ] || refuse "more than one of RECOVERY_TARGET_TIME, RECOVERY_TARGET_LSN and RECOVERY_TARGET_NAME is set"

# 64-bit LSN arithmetic: X/Y -> X * 2^32 + Y.
lsn_number() {
    case "$1" in
        [0-9A-Fa-f]*/[0-9A-Fa-f]*) ;;
        *) return 1 ;;
    esac
    hi="${1%%/*}" lo="${1#*/}"
    case "$hi$lo" in *[!0-9A-Fa-f]*) return 1 ;; esac
    [ "${#hi}" -le 8 ] && [ "${#lo}" -le 8 ] || return 1
    printf '%s' "$((0x$hi * 4294967296 + 0x$lo))"
}
# ISO 8601 time with an offset -> microseconds since the epoch (Python's
# reading: PostgreSQL reads the same text the same way).
time_number() {
    TIME="$1" python3 -c '
import datetime, os, sys
t = datetime.datetime.fromisoformat(os.environ["TIME"].strip())
if t.tzinfo is None:
    sys.exit(1)
print((t - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(microseconds=1))
' 2>/dev/null
}

if [ -n "$target_time" ]; then
    want="$(time_number "$target_time")" ||
        refuse "RECOVERY_TARGET_TIME is '$target_time', not an ISO 8601 time with its UTC offset (2024-05-01T17:00:00Z, 2024-05-01 19:00:00+02:00)"
    [ "$want" -le "$(($(date +%s) * 1000000))" ] || refuse "RECOVERY_TARGET_TIME $target_time is in the future: the archive cannot reach it"
    target="time $target_time"
elif [ -n "$target_lsn" ]; then
    want="$(lsn_number "$target_lsn")" || refuse "RECOVERY_TARGET_LSN is '$target_lsn', not an LSN such as 0/5000028"
    target="LSN $target_lsn"
elif [ -n "$target_name" ]; then
    target="restore point '$target_name'"
else
    target="the end of the archive"
fi

# Never over data: $PGDATA is absent or empty, checked before anything is
# asked of the store and never written when refused.
if [ -e "$pgdata" ]; then
    [ -d "$pgdata" ] || refuse "$pgdata exists and is not a directory: a recovery never writes over data"
    [ -z "$(ls -A "$pgdata")" ] || refuse "$pgdata is not empty: a recovery never writes over data"
fi

if [ -n "$endpoint" ]; then
    set -- --endpoint-url "$endpoint"
else
    set --
fi
work="$(mktemp -d)" || fail "cannot create a temporary directory"
trap 'rm -rf "$work"' EXIT

reason() {
    line="$(grep -E 'ERROR|Error|error' "$1" | tail -n 1)"
    [ -n "$line" ] || line="$(grep -v '^[[:space:]]*$' "$1" | tail -n 1)"
    printf '%s' "$line" | sed 's/^.* ERROR: //' | head -c 900
}

# The finished base backups, oldest first: <id> <end lsn> <end time>
# <end time in microseconds>.
if ! barman-cloud-backup-list "$@" --format json -- "$destination" "$server" >"$work/list.json" 2>"$work/list.err"; then
    fail "cannot list the base backups in $destination: $(reason "$work/list.err")"
fi
python3 -c '
import datetime, json, sys
epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
for b in sorted(json.load(sys.stdin)["backups_list"], key=lambda b: b["backup_id"]):
    if b["status"] == "DONE" and b.get("end_xlog") and b.get("end_time_iso"):
        end = datetime.datetime.fromisoformat(b["end_time_iso"])
        print(b["backup_id"], b["end_xlog"], b["end_time_iso"], (end - epoch) // datetime.timedelta(microseconds=1))
' <"$work/list.json" >"$work/done" || fail "cannot read the list of base backups"
[ -s "$work/done" ] || refuse "no finished base backup of $server in $destination: nothing to recover from"
first_end="$(head -n 1 "$work/done" | awk '{ print $3 }')"
window="the archive recovers from $first_end (the end of its first base backup) to its last archived WAL"

chosen=""
while read -r id end_lsn end_time end_us; do
    if [ -n "$target_time" ]; then
        [ "$end_us" -le "$want" ] || continue
    elif [ -n "$target_lsn" ]; then
        n="$(lsn_number "$end_lsn")" || fail "backup $id has an unreadable end LSN '$end_lsn'"
        [ "$n" -le "$want" ] || continue
    fi
    chosen="$id $end_lsn $end_time"
done <"$work/done"
[ -n "$chosen" ] || refuse "the target, $target, is before the end of the first base backup: $window"
id="${chosen%% *}"
rest="${chosen#* }"
end_lsn="${rest%% *}"
end_time="${rest#* }"

started="$(date +%s)"
log "recovering to $target from base backup $id (ended $end_time at $end_lsn)"
# Downloaded beside $PGDATA, which gets it whole or not at all: a download
# cut off (the pod killed) leaves no half data directory that a start
# could take for a cluster, only this folder, removed by the next try.
staging="${pgdata%/}.fetching"
rm -rf "$staging" || fail "cannot remove $staging"
mkdir -p "$staging" || fail "cannot create $staging"
if ! barman-cloud-restore "$@" -- "$destination" "$server" "$id" "$staging" >"$work/restore.log" 2>&1; then
    cat "$work/restore.log" >&2
    rm -rf "$staging"
    fail "barman-cloud-restore of backup $id: $(reason "$work/restore.log")"
fi
# PostgreSQL starts only on a data directory no one else may read.
chmod 0700 "$staging" || fail "cannot set the mode of $staging"
# $PGDATA was checked absent or empty; an empty one makes way.
if [ -e "$pgdata" ]; then
    rmdir "$pgdata" || fail "cannot replace the empty $pgdata"
fi
mv "$staging" "$pgdata" || fail "cannot move the fetched base backup to $pgdata"
line="fetched id=$id end=$end_lsn end_time=$end_time recoverable_from=$first_end seconds=$(($(date +%s) - started))"
log "$line"
report "$line"
