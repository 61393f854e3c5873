#!/bin/sh
# opshooks database, retention of the WAL archive by recovery window
# (archive/verification.rs), in the archiver's image (barman-cloud): run by
# archiver.sh in a verification Job's pod, and only once the replay there
# proved the newest base backup restores (ARCHIVER_UNTIL holds 0, the
# replay's exit code). So no base backup is ever deleted before a newer one
# was proven.
#
#   barman-cloud-backup-delete --retention-policy "RECOVERY WINDOW OF
#       <RETENTION_DAYS> DAYS" --minimum-redundancy 1
# keeps every base backup that ended within the window and the newest one
# before it (from which any second of the window is reached), and the WAL
# from the oldest kept backup on; it deletes older base backups and the
# WAL before them. The newest base backup is never deleted.
#
# The window is read again when it runs, from RETENTION_FILE (the archive
# ConfigMap's retention-days, which the hook writes only while
# spec.backup.archive.retentionDays is set): a run created before the
# user removed it deletes nothing (refused), and one created before the
# user widened it keeps the wider window (the larger of the two).
#
# Values: RETENTION_DAYS (1 to 3650), RETENTION_FILE, ARCHIVER_UNTIL, and the store's, as
# archiver.sh (ARCHIVE_DESTINATION, ARCHIVE_SERVER, ARCHIVE_ENDPOINT, the
# SDK's credentials). Each reaches barman-cloud as one argument.
#
# The outcome is one line in $TERMINATION_LOG (default
# /dev/termination-log):
#   opshooks retain: kept=<n> deleted=<n> window_days=<n> oldest=<id>
#       oldest_end=<ISO 8601>: the earliest point the archive recovers to  (exit 0)
#   opshooks retain: refused <reason>    (exit 3: no proof, nothing deleted)
#   opshooks retain: failed <reason>     (exit 1)
set -u
destination="${ARCHIVE_DESTINATION:-}"
server="${ARCHIVE_SERVER:-}"
endpoint="${ARCHIVE_ENDPOINT:-}"
days="${RETENTION_DAYS:-}"
file="${RETENTION_FILE:-}"
proof="${ARCHIVER_UNTIL:-}"

report() {
    printf 'opshooks retain: %s\n' "$(printf '%s' "$1" | tr '\n\r' '  ')" 2>/dev/null \
        >"${TERMINATION_LOG:-/dev/termination-log}" || true
}
log() { printf 'retain: %s\n' "$*" >&2; }
fail() { log "failed: $1"; report "failed $1"; exit 1; }
refuse() { log "refused: $1"; report "refused $1"; exit 3; }

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
case "$days" in
    '' | 0* | *[!0-9]* | ?????*) fail "RETENTION_DAYS is '$days', not a number of days from 1 to 3650" ;;
esac
[ "$days" -le 3650 ] || fail "RETENTION_DAYS is '$days', not a number of days from 1 to 3650"
now_days="$(cat "$file" 2>/dev/null)" || now_days=""
case "$now_days" in
    '' | 0* | *[!0-9]* | ?????*) refuse "the archive's ConfigMap ($file) says no retention now ('$now_days'): spec.backup.archive.retentionDays was removed, or its update has not reached this pod" ;;
esac
[ "$now_days" -le "$days" ] || days="$now_days"
said="$(cat "$proof" 2>/dev/null)" || said=""
[ "$said" = 0 ] || refuse "the replay did not prove the newest base backup (it ended with '$said'): nothing is deleted before a newer backup is proven"
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
# The finished base backups, oldest first: <id> <end time>.
finished() {
    barman-cloud-backup-list "$@" --format json -- "$destination" "$server" >"$work/list.json" \
        2>"$work/list.err" || return 1
    python3 -c '
import json, sys
for b in sorted(json.load(sys.stdin)["backups_list"], key=lambda b: b["backup_id"]):
    if b["status"] == "DONE":
        print(b["backup_id"], "".join((b.get("end_time_iso") or "-").split()))
' <"$work/list.json"
}

before="$(finished "$@")" || fail "cannot list the base backups in $destination: $(reason "$work/list.err")"
[ -n "$before" ] || refuse "the store lists no finished base backup: nothing to keep a window from"
log "keeping a recovery window of $days days in $destination/$server"
if ! barman-cloud-backup-delete "$@" --retention-policy "RECOVERY WINDOW OF $days DAYS" --minimum-redundancy 1 \
    -- "$destination" "$server" >"$work/delete.log" 2>&1; then
    cat "$work/delete.log" >&2
    fail "barman-cloud-backup-delete: $(reason "$work/delete.log")"
fi
after="$(finished "$@")" || fail "retention ran, but the archive cannot be listed: $(reason "$work/list.err")"
kept=$(printf '%s\n' "$after" | grep -c .)
# The ids listed before and not after (a backup the live Database finished
# meanwhile is listed after only).
printf '%s\n' "$after" | cut -d' ' -f1 | grep . >"$work/after.ids"
deleted=$(printf '%s\n' "$before" | cut -d' ' -f1 | grep . | grep -cvxFf "$work/after.ids")
oldest="$(printf '%s\n' "$after" | head -n 1)"
[ -n "$oldest" ] || oldest="- -"
line="kept=$kept deleted=$deleted window_days=$days oldest=${oldest%% *} oldest_end=${oldest#* }"
log "$line"
report "$line"
