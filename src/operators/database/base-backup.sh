#!/bin/sh
# opshooks database, a physical base backup, in the archiver sidecar's image
# (barman-cloud) with the instance's data volume mounted at the same path
# as in its PostgreSQL container: barman-cloud-backup reads the data
# directory the server names (data_directory) from the file system, so it
# runs beside the server it backs up, a primary or a standby (no exec into
# a pod: it is started where the sidecar runs).
#
# barman-cloud-backup opens a concurrent backup (pg_backup_start), uploads
# the data directory as gzip'd tar files with BACKUP_JOBS (default 2)
# parallel uploads, and ends it (pg_backup_stop). On a primary,
# pg_backup_stop waits until the WAL the backup needs is archived (through
# archive-wal.sh and the sidecar's loop, which must run meanwhile); on a
# standby it does not, so the backup is reported stored only once its last
# WAL segment is in the archive (asked every 2 s for up to
# BACKUP_ARCHIVE_WAIT seconds, default 600): a base backup without its WAL
# restores nothing.
#
# Connection: PGHOST, PGPORT, PGUSER (a superuser, or a role allowed to
# run pg_backup_start/stop), PGPASSWORD, read by libpq, never parsed here.
# Store: ARCHIVE_DESTINATION, ARCHIVE_SERVER, ARCHIVE_ENDPOINT and the
# SDK's credentials, as archiver.sh. BACKUP_NAME (optional; letters,
# digits, '.', '_', '-') names the backup in the store, and makes the script
# idempotent: when the store already has a finished backup of that name, it
# takes none and reports that one. BACKUP_IMMEDIATE_CHECKPOINT=true starts
# at once (a checkpoint's worth of I/O at once) instead of at the next
# spread checkpoint.
#
# The outcome is one line in $TERMINATION_LOG (default
# /dev/termination-log):
#   opshooks base-backup: stored id=<id> from=<primary|standby> begin=<lsn>
#       end=<lsn> end_wal=<segment> end_time=<ISO 8601> seconds=<n>
#       [name=<name>] [already=true]                                  (exit 0)
#   opshooks base-backup: failed <reason>                              (exit 1)
set -u
destination="${ARCHIVE_DESTINATION:-}"
server="${ARCHIVE_SERVER:-}"
endpoint="${ARCHIVE_ENDPOINT:-}"
jobs="${BACKUP_JOBS:-2}"
archive_wait="${BACKUP_ARCHIVE_WAIT:-600}"

report() {
    printf 'opshooks base-backup: %s\n' "$(printf '%s' "$1" | tr '\n\r' '  ')" 2>/dev/null \
        >"${TERMINATION_LOG:-/dev/termination-log}" || true
}
log() { printf 'base-backup: %s\n' "$*" >&2; }
fail() { log "failed: $1"; report "failed $1"; exit 1; }

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
name="${BACKUP_NAME:-}"
case "$name" in
    '') ;;
    [!A-Za-z0-9]* | *[!A-Za-z0-9._-]*) fail "BACKUP_NAME is '$name', not a name of letters, digits, '.', '_' and '-'" ;;
esac
case "$jobs" in '' | 0 | *[!0-9]*) fail "BACKUP_JOBS is '$jobs', not a number of uploads" ;; esac
case "$archive_wait" in '' | *[!0-9]*) fail "BACKUP_ARCHIVE_WAIT is '$archive_wait', not a number of seconds" ;; esac
checkpoint=""
case "${BACKUP_IMMEDIATE_CHECKPOINT:-false}" in
    true) checkpoint="--immediate-checkpoint" ;;
    false) ;;
    *) fail "BACKUP_IMMEDIATE_CHECKPOINT is '${BACKUP_IMMEDIATE_CHECKPOINT:-}', not true or false" ;;
esac
if [ -n "$endpoint" ]; then
    set -- --endpoint-url "$endpoint"
else
    set --
fi
work="$(mktemp -d)" || fail "cannot create a temporary directory"
trap 'rm -rf "$work"' EXIT

# The tool's last complaint, without its timestamp.
reason() {
    line="$(grep -E 'ERROR|Error|error' "$1" | tail -n 1)"
    [ -n "$line" ] || line="$(grep -v '^[[:space:]]*$' "$1" | tail -n 1)"
    printf '%s' "$line" | sed 's/^.* ERROR: //' | head -c 900
}

# The archive's base backups, oldest first, one line each:
#   <id> <status> <from> <begin lsn> <end lsn> <end wal> <end time> <name>
# ("-" for what a backup that did not finish lacks, and for no name).
catalog() {
    barman-cloud-backup-list "$@" --format json -- "$destination" "$server" >"$work/list.json" \
        2>"$work/list.err" || return 1
    python3 -c '
import json, sys
for b in sorted(json.load(sys.stdin)["backups_list"], key=lambda b: b["backup_id"]):
    label = b.get("backup_label") or ""
    source = "standby" if "BACKUP FROM: standby" in label else "primary"
    fields = [b["backup_id"], b["status"], source, b.get("begin_xlog"), b.get("end_xlog"),
              b.get("end_wal"), b.get("end_time_iso"), "".join((b.get("backup_name") or "-").split())]
    print(" ".join(str(f or "-") for f in fields))
' <"$work/list.json"
}

before="$(catalog "$@")" || fail "cannot list the base backups in $destination: $(reason "$work/list.err")"
started="$(date +%s)"
named="" naming=""
if [ -n "$name" ]; then
    named="$(printf '%s\n' "$before" | awk -v name="$name" '$2 == "DONE" && $8 == name' | tail -n 1)"
    naming="--name $name"
fi
if [ -z "$named" ]; then
    log "backing up $server to $destination${name:+ as $name}"
    # shellcheck disable=SC2086 # $checkpoint and $naming: an option or none, the name checked above
    if ! barman-cloud-backup "$@" --gzip $checkpoint $naming --jobs "$jobs" -- "$destination" "$server" \
        >"$work/backup.log" 2>&1; then
        cat "$work/backup.log" >&2
        fail "barman-cloud-backup: $(reason "$work/backup.log")"
    fi
    after="$(catalog "$@")" || fail "the backup ran, but the archive cannot be listed: $(reason "$work/list.err")"
    printf '%s\n' "$before" | awk '{ print $1 }' >"$work/before"
    # With a name, only a backup of that name: another sidecar's, finished
    # meanwhile, is not this one.
    new="$(printf '%s\n' "$after" | awk -v name="${name:--}" 'NR == FNR { seen[$1] = 1; next }
        !($1 in seen) && $2 == "DONE" && (name == "-" || $8 == name)' "$work/before" - | tail -n 1)"
    [ -n "$new" ] || fail "barman-cloud-backup succeeded, but no new finished backup${name:+ named $name} is listed in $destination"
else
    log "the store has a finished backup named $name already: none taken"
    new="$named"
fi
# shellcheck disable=SC2086 # the line's fields, none of them empty or spaced
set -- $new
id="$1" from="$3" begin="$4" end="$5" end_wal="$6" end_time="$7"
if [ -n "$endpoint" ]; then
    set -- --endpoint-url "$endpoint"
else
    set --
fi

if [ "$from" = "standby" ]; then
    waited=0
    until barman-cloud-wal-restore "$@" -- "$destination" "$server" "$end_wal" "$work/end_wal" \
        >"$work/wal.log" 2>&1; do
        [ "$waited" -lt "$archive_wait" ] ||
            fail "backup $id from a standby is stored, but its last WAL segment $end_wal is not in the archive after ${archive_wait}s: $(reason "$work/wal.log")"
        sleep 2
        waited=$((waited + 2))
    done
    rm -f "$work/end_wal"
fi
seconds=$(($(date +%s) - started))
line="stored id=$id from=$from begin=$begin end=$end end_wal=$end_wal end_time=$end_time seconds=$seconds${name:+ name=$name}${named:+ already=true}"
log "$line"
report "$line"
