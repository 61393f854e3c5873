#!/bin/sh
# opshooks database, point-in-time recovery, step 2 of 2, in the new
# Database's PostgreSQL image, with the archiver sidecar (archiver.sh)
# running beside it on the same spool: replays the archived WAL over the
# base backup pitr-fetch.sh downloaded into $PGDATA, up to the target, and
# promotes. The server runs on a private socket only (no client reaches it)
# and is stopped cleanly at the end; the instance then starts on the
# recovered data as a primary, on a new timeline.
#
# The target, as for pitr-fetch.sh: at most one of RECOVERY_TARGET_TIME,
# RECOVERY_TARGET_LSN, RECOVERY_TARGET_NAME; none: the end of the archive.
# Each goes to the server as one argument (`-c recovery_target_time=...`),
# never into a file or through a shell, so none outlives this run (a
# standby cloned later from the recovered server must not stop at it).
# restore_command is restore-wal.sh, read from $ARCHIVE_SCRIPTS (default
# /opshooks/archive); it stops the recovery (FATAL) rather than take a
# store it cannot reach for the end of the archive. archive_mode is off
# meanwhile: the new Database archives from its own first start, under its
# own name.
# hot_standby is off: nobody reads during the replay, and with it on
# PostgreSQL stops the recovery when the source ran with a higher
# max_connections (max_worker_processes, max_wal_senders,
# max_prepared_transactions, max_locks_per_transaction) than the base
# backup's postgresql.conf says ("insufficient parameter settings"). The
# server then refuses connections until it promoted, which is what the
# wait below polls for.
#
# Fails (exit 1) when the server stops before it promotes: the archive ends
# before the target (PostgreSQL: "recovery ended before configured recovery
# target was reached"), a restore point that is not there, the store
# unreachable; or when it has not promoted within RECOVERY_WAIT seconds
# (default 3600). Run again, it goes on from where the replay stopped.
#
# The outcome is one line in $TERMINATION_LOG (default
# /dev/termination-log):
#   opshooks pitr-replay: recovered lsn=<last replayed> last_commit=<ISO 8601>
#       timeline=<n> ready_seconds=<until promoted> seconds=<n>   (exit 0)
#   opshooks pitr-replay: refused <reason>                        (exit 3)
#   opshooks pitr-replay: failed <reason>                         (exit 1)
set -u
pgdata="${PGDATA:-}"
scripts="${ARCHIVE_SCRIPTS:-/opshooks/archive}"
target_time="${RECOVERY_TARGET_TIME:-}"
target_lsn="${RECOVERY_TARGET_LSN:-}"
target_name="${RECOVERY_TARGET_NAME:-}"
wait="${RECOVERY_WAIT:-3600}"

report() {
    printf 'opshooks pitr-replay: %s\n' "$(printf '%s' "$1" | tr '\n\r' '  ')" 2>/dev/null \
        >"${TERMINATION_LOG:-/dev/termination-log}" || true
}
log() { printf 'pitr-replay: %s\n' "$*" >&2; }
fail() { log "failed: $1"; report "failed $1"; exit 1; }
refuse() { log "refused: $1"; report "refused $1"; exit 3; }

# The path goes into restore_command, which a shell runs: ours, and checked.
case "$scripts" in
    /* ) case "$scripts" in *[!A-Za-z0-9/._-]*) fail "ARCHIVE_SCRIPTS is '$scripts': only letters, digits and / . _ - may be in it" ;; esac ;;
    *) fail "ARCHIVE_SCRIPTS is '$scripts', not an absolute path" ;;
esac
[ -r "$scripts/restore-wal.sh" ] || fail "no restore-wal.sh in $scripts"
case "$wait" in '' | *[!0-9]*) fail "RECOVERY_WAIT is '$wait', not a number of seconds" ;; esac
targets=0
for t in "$target_time" "$target_lsn" "$target_name"; do
    [ -z "$t" ] || targets=$((targets + 1))
done
[ "$targets" -le 1 ] || refuse "more than one of RECOVERY_TARGET_TIME, RECOVERY_TARGET_LSN and RECOVERY_TARGET_NAME is set"
[ -s "$pgdata/PG_VERSION" ] || refuse "no data directory in '$pgdata': pitr-fetch.sh runs first"
# A fetched base backup has its backup_label; a replay that stopped half-way
# left recovery.signal (PostgreSQL renames backup_label once it started).
[ -f "$pgdata/backup_label" ] || [ -f "$pgdata/recovery.signal" ] ||
    refuse "$pgdata holds no fetched base backup (no backup_label) and is not recovering (no recovery.signal): nothing to replay over a server's data"
: >"$pgdata/recovery.signal" || fail "cannot write $pgdata/recovery.signal"

socket="$(mktemp -d)" || fail "cannot create a temporary directory"
server=""
stop() {
    if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
        kill -INT "$server" 2>/dev/null
        wait "$server" 2>/dev/null
    fi
    server=""
}
trap 'stop; rm -rf "$socket"' EXIT

set -- -D "$pgdata" -c listen_addresses= -c port=5432 -c "unix_socket_directories=$socket" \
    -c archive_mode=off -c "restore_command=sh $scripts/restore-wal.sh %f %p" \
    -c recovery_target_action=promote -c recovery_target_timeline=latest \
    -c synchronous_standby_names= -c hot_standby=off
if [ -n "$target_time" ]; then
    set -- "$@" -c "recovery_target_time=$target_time"
    target="time $target_time"
elif [ -n "$target_lsn" ]; then
    set -- "$@" -c "recovery_target_lsn=$target_lsn"
    target="LSN $target_lsn"
elif [ -n "$target_name" ]; then
    set -- "$@" -c "recovery_target_name=$target_name"
    target="restore point '$target_name'"
else
    target="the end of the archive"
fi

q() {
    psql -X -q -A -t -v ON_ERROR_STOP=1 --no-password -h "$socket" -p 5432 -U postgres -d postgres -c "$1" 2>/dev/null
}
# What the server said last before it stopped, PostgreSQL's words; when
# restore-wal.sh stopped it, that script's reason (a gap, the store down),
# not the "command not executable" PostgreSQL says after it.
last_words() {
    line="$(grep -E 'restore-wal:' "$socket/server.log" | tail -n 1)"
    [ -n "$line" ] || line="$(grep -E 'FATAL|PANIC' "$socket/server.log" | tail -n 1)"
    printf '%s' "${line:-$(tail -n 1 "$socket/server.log")}" | sed -E 's/^.*(FATAL|PANIC): *//' | head -c 900
}

started="$(date +%s)"
log "replaying to $target"
# restore-wal.sh asks the sidecar for the recovered archive's files
# (RECOVERY_SERVER), never this Database's own.
WAL_RESTORE_FROM=recovery postgres "$@" >"$socket/server.log" 2>&1 &
server=$!
while :; do
    if ! kill -0 "$server" 2>/dev/null; then
        server=""
        cat "$socket/server.log" >&2
        words="$(last_words)"
        case "$words" in
            *"before configured recovery target was reached"*)
                # A name is looked for only in the WAL after the newest
                # base backup, the one pitr-fetch.sh took for it.
                [ -z "$target_name" ] || words="$words (a restore point is looked for after the newest base backup only: one made before it is reached by targetLSN, the LSN pg_create_restore_point answered, when an older base backup ended before that LSN)"
                fail "the archive ends before the target, $target: $words" ;;
        esac
        fail "the server stopped before it reached $target: $words"
    fi
    [ "$(q 'SELECT pg_is_in_recovery()')" = "f" ] && break
    if [ $(($(date +%s) - started)) -ge "$wait" ]; then
        stop
        cat "$socket/server.log" >&2
        fail "not recovered to $target within ${wait}s (RECOVERY_WAIT); run again to go on"
    fi
    sleep 0.2
done
ready=$(($(date +%s) - started))
# The new timeline reaches the control file at this checkpoint.
q 'CHECKPOINT' >/dev/null || log "checkpoint failed (the next start does one)"
info="$(q "SELECT pg_last_wal_replay_lsn() || ' ' || coalesce(to_json(pg_last_xact_replay_timestamp()) #>> '{}', '-')
    || ' ' || (SELECT timeline_id FROM pg_control_checkpoint())")" || fail "recovered, but cannot read where: $(last_words)"
stop
[ -f "$pgdata/recovery.signal" ] && fail "the server promoted but left recovery.signal"
# shellcheck disable=SC2086 # three fields, none empty or spaced
set -- $info
line="recovered lsn=$1 last_commit=$2 timeline=$3 ready_seconds=$ready seconds=$(($(date +%s) - started))"
log "$line"
report "$line"
