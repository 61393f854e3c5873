#!/bin/sh
# opshooks database, the WAL archiver sidecar, in an image with barman-cloud
# (the PostgreSQL image has no Python). It mounts the instance's data volume
# at the same path ($PGDATA) and shares the spool directory $WAL_SPOOL with
# the PostgreSQL container, whose archive_command (archive-wal.sh) and
# restore_command (restore-wal.sh) hand it their files there. It runs as
# the same user as the server (it reads pg_wal).
#
# A loop, one request at a time, archive requests first:
# - archive/requests/<f>: uploads $PGDATA/pg_wal/<f> with
#   barman-cloud-wal-archive (gzip), then writes archive/done/<f>, or
#   archive/failed/<f> holding the reason. archive-wal.sh succeeds only on
#   done/<f>.
# - restore/requests/<f>: downloads <f> with barman-cloud-wal-restore to
#   restore/files/<f>, then writes restore/done/<f>; restore/missing/<f>
#   when the archive does not have it (its exit code 1); restore/failed/<f>
#   with the reason for anything else (the store unreachable).
# - recovery/requests/<f>: the same, from the archive of RECOVERY_SERVER
#   (another Database's, which a point-in-time recovery replays:
#   pitr-replay.sh asks there); refused (recovery/failed/<f>) without it.
#   A segment it does not have is "missing" (the end of the archive: the
#   replay promotes) only when no later segment of its timeline or a later
#   one is there;
#   otherwise recovery/failed/<f> names the gap, and the replay stops
#   instead of promoting a server that lacks what came after it.
# A request is claimed (moved to working/) before the tool runs: one that
# archive-wal.sh makes again meanwhile is a new request, served after.
# An outcome nobody collected is removed after ten minutes. SIGTERM ends
# the loop after the file in hand, so a segment being uploaded is finished.
#
# Base backups: the hook lists the ones it asks for in the ConfigMap
# mounted at $ARCHIVE_SCRIPTS, file base-backup, one line each:
#   <name> <pod> <immediate|spread>
# Every 10 s, the first line naming this pod ($HOSTNAME) that is not
# done here yet runs base-backup.sh (same ConfigMap) beside this loop, one
# at a time: a primary's backup waits for its last WAL to be archived by
# this loop. base-backup.sh takes none when the store already has a
# finished backup of that name, so each is taken once, even by a new pod
# or after the ConfigMap's update reached one pod a minute late. One that
# failed is tried again after ten minutes. Without ARCHIVE_SCRIPTS, none.
#
# ARCHIVER_UNTIL (optional; a path): the loop ends once that file exists
# (exit 0): in a verification Job (archive/verification.rs), whose pod is
# done only when every container is, its PostgreSQL container writes it
# when it ends, with the replay's exit code. Then, with RETAIN_SCRIPT set
# (retain.sh's path) and no SIGTERM received, this runs it in its place,
# and the exit code is retain.sh's: it deletes what the recovery window
# no longer needs, only when that file holds 0.
#
# The archive's progress, for the Database's status: with ARCHIVE_REPORT
# set (a ConfigMap's name in NAMESPACE), each archive outcome updates what
# this sidecar reports there, with a JSON merge patch to the API server
# (only the keys below; the hook desires the ConfigMap without data, so
# neither side overwrites the other):
#   lastArchivedWal, lastArchivedTime  the newest file stored, and when;
#   failingSince  when the failures began ("" while archiving succeeds);
#   lastFailedWal, lastFailure, lastFailureTime  the newest failure;
#   pod  this pod ($HOSTNAME), the primary that archives;
#   lastBaseBackup  base-backup.sh's line of the newest base backup this
#     sidecar stored (or found stored), baseBackupFailure that of the
#     newest that failed ("" once one succeeds), baseBackupPod this pod.
# A report carries only the part that changed, the WAL's or the base
# backups': a standby's sidecar sends only its base backups, and one that
# took a base backup never sends it again over another's newer one. A
# backup found already stored (a new pod) is not reported.
# A failure's start and end, and a base backup, are sent at once, a newer file at most every
# REPORT_SECONDS (10 s): a report never holds the loop up (one request at
# a time, beside it, 5 s at most), and one that failed is sent again. The
# token and the cluster's CA are read from ARCHIVER_CREDENTIALS (default
# /var/run/secrets/opshooks/archiver), the server from
# KUBERNETES_SERVICE_HOST and _PORT (set by the kubelet); the server's
# certificate is checked against the CA and the address dialled. Without
# ARCHIVE_REPORT (a verification Job's sidecar), nothing is reported.
#
# Values: PGDATA, WAL_SPOOL (default /var/run/opshooks/wal),
# ARCHIVE_DESTINATION (s3://bucket/prefix, azure://..., gs://...),
# ARCHIVE_SERVER (the name this Database's files go under in the store),
# RECOVERY_SERVER (the archive a point-in-time recovery reads; optional),
# ARCHIVE_ENDPOINT (an S3-compatible store's URL; optional), and the
# store's credentials as its SDK reads them (AWS_ACCESS_KEY_ID, ...).
# Each reaches barman-cloud as one argument, never through a shell.
set -u
spool="${WAL_SPOOL:-/var/run/opshooks/wal}"
pgdata="${PGDATA:-}"
destination="${ARCHIVE_DESTINATION:-}"
server="${ARCHIVE_SERVER:-}"
recovery_server="${RECOVERY_SERVER:-}"
endpoint="${ARCHIVE_ENDPOINT:-}"
scripts="${ARCHIVE_SCRIPTS:-}"
until_file="${ARCHIVER_UNTIL:-}"
retain="${RETAIN_SCRIPT:-}"
# shellcheck disable=SC3028 # the container runtime sets HOSTNAME to the pod's name
pod="${HOSTNAME:-}"
report_to="${ARCHIVE_REPORT:-}"
namespace="${NAMESPACE:-}"
credentials="${ARCHIVER_CREDENTIALS:-/var/run/secrets/opshooks/archiver}"
api_host="${KUBERNETES_SERVICE_HOST:-}"
api_port="${KUBERNETES_SERVICE_PORT:-443}"

log() { printf 'archiver: %s\n' "$*" >&2; }
die() { log "$1"; exit 1; }

# The store's settings, checked as base-backup.sh and pitr-fetch.sh check
# them: nothing a user wrote can be read by barman-cloud as an option.
case "$destination" in
    s3://?* | azure://?* | gs://?* | https://?*) ;;
    *) die "ARCHIVE_DESTINATION is '$destination', not an s3://, gs://, azure:// or https:// URL" ;;
esac
case "$server" in
    '' | [!A-Za-z0-9]* | *[!A-Za-z0-9._-]*) die "ARCHIVE_SERVER is '$server', not a name of letters, digits, '.', '_' and '-'" ;;
esac
case "$recovery_server" in
    '' ) ;;
    [!A-Za-z0-9]* | *[!A-Za-z0-9._-]*) die "RECOVERY_SERVER is '$recovery_server', not a name of letters, digits, '.', '_' and '-'" ;;
esac
case "$endpoint" in
    '' | http://?* | https://?*) ;;
    *) die "ARCHIVE_ENDPOINT is '$endpoint', not an http:// or https:// URL" ;;
esac
[ -n "$pgdata" ] || die "PGDATA is not set"
if [ -n "$report_to" ] && [ -z "$namespace" ]; then
    die "ARCHIVE_REPORT is set but NAMESPACE is not: the report's ConfigMap needs both"
fi
if [ -n "$endpoint" ]; then
    set -- --endpoint-url "$endpoint"
else
    set --
fi

for sub in archive/requests archive/working archive/done archive/failed \
    restore/requests restore/working restore/done restore/missing restore/failed restore/files \
    recovery/requests recovery/working recovery/done recovery/missing recovery/failed recovery/files \
    backup/done backup/failed; do
    mkdir -p "$spool/$sub" || die "cannot create $spool/$sub"
done

# The tool's last complaint, without its timestamp: the reason passed on.
reason() {
    line="$(grep -E 'ERROR|Error|error' "$1" | tail -n 1)"
    [ -n "$line" ] || line="$(grep -v '^[[:space:]]*$' "$1" | tail -n 1)"
    printf '%s' "$line" | sed 's/^.* ERROR: //' | head -c 900
}
# outcome DIR NAME [TEXT]: written whole, then renamed into place.
outcome() {
    printf '%s\n' "${3:-}" >"$1/.$2.tmp" && mv -f "$1/.$2.tmp" "$1/$2"
}

archive_one() {
    f="$1" a="$spool/archive"
    shift
    mv "$a/requests/$f" "$a/working/$f" 2>/dev/null || return 0
    if barman-cloud-wal-archive "$@" --gzip -- "$destination" "$server" "$pgdata/pg_wal/$f" \
        >"$a/working/$f.log" 2>&1; then
        outcome "$a/done" "$f"
        log "archived $f"
        archived="$f" archived_at="$(stamp)" wal_dirty=1
        [ -z "$failing_since" ] || failing_since="" urgent=1
    else
        rc=$?
        why="barman-cloud-wal-archive exited with $rc: $(reason "$a/working/$f.log")"
        outcome "$a/failed" "$f" "$why"
        log "not archived $f: $why"
        failed="$f" failure="$why" failed_at="$(stamp)" wal_dirty=1
        [ -n "$failing_since" ] || failing_since="$failed_at" urgent=1
    fi
    rm -f "$a/working/$f" "$a/working/$f.log"
}

# fetch_one KIND SERVER F ARGS...: serves $spool/KIND/requests/F from the
# archive of SERVER.
fetch_one() {
    r="$spool/$1" from="$2" f="$3"
    shift 3
    mv "$r/requests/$f" "$r/working/$f" 2>/dev/null || return 0
    rm -f "$r/files/$f" "$r/files/.$f.part"
    if barman-cloud-wal-restore "$@" --no-partial -- "$destination" "$from" "$f" "$r/files/.$f.part" \
        >"$r/working/$f.log" 2>&1; then
        mv -f "$r/files/.$f.part" "$r/files/$f" && outcome "$r/done" "$f"
        log "restored $f from $from"
    else
        rc=$?
        rm -f "$r/files/.$f.part"
        why=""
        if [ "$rc" -ne 1 ]; then
            why="barman-cloud-wal-restore exited with $rc: $(reason "$r/working/$f.log")"
        elif [ "$r" = "$spool/recovery" ]; then
            # The end of a recovery's archive, or a gap in it: the answer
            # "missing" ends the replay and promotes, so it is given only
            # when nothing later is there.
            if later="$(later_segment "$@" -- "$destination" "$from" "$f" /dev/null 2>"$r/working/$f.log")"; then
                [ -z "$later" ] || why="a gap in the archive $from: $f is not there but $later, after it, is: the WAL cannot be replayed past $f"
            else
                why="$f is not in the archive $from, and whether that is its end or a gap could not be read: $(reason "$r/working/$f.log")"
            fi
        fi
        if [ -z "$why" ]; then
            outcome "$r/missing" "$f"
            log "not in the archive $from: $f"
        else
            outcome "$r/failed" "$f" "$why"
            log "not restored $f from $from: $why"
        fi
    fi
    rm -f "$r/working/$f" "$r/working/$f.log"
}
# later_segment ARGS... (barman-cloud-wal-restore's): the first segment
# (or partial segment) the store holds after ARGS' WAL file, on its
# timeline or a later one; none when that file is there now (archived
# since it was asked for) or is not a segment. A later timeline counts: a
# promoted standby archives only its own timeline, so a hole left by an
# old primary that archived late sits before the old timeline's .partial
# and the new timeline's segments, and PostgreSQL asks for the hole on the
# old one. Only barman's folders (one per timeline and 4 GiB of WAL) that
# can hold a later one are listed, the requested one first: an archive of
# weeks is not read whole within the restore's wait.
later_segment() {
    # shellcheck disable=SC2046 # the interpreter line may be `env python3`
    $(barman_python) -c '
import os
import sys

from barman import xlog
from barman.cloud import CloudBackupCatalog
from barman.cloud_providers import get_cloud_interface
from barman.clients.cloud_walrestore import parse_arguments

config = parse_arguments(sys.argv[1:])
name = config.wal_name
if not xlog.is_wal_file(name):
    sys.exit(0)
tli, log, seg = xlog.decode_segment_name(name)
cloud = get_cloud_interface(config)
root = CloudBackupCatalog(cloud, config.server_name).wal_prefix + "/"


def names(folder):
    """The WAL file names in a folder, without a compression suffix."""
    for key in cloud.list_bucket(folder, delimiter="/"):
        base = key.rsplit("/", 1)[-1]
        if not xlog.is_any_xlog_file(base):
            base = os.path.splitext(base)[0]
        if xlog.is_wal_file(base) or xlog.is_partial_file(base):
            yield base


folders = []
for folder in cloud.list_bucket(root, delimiter="/"):
    h = folder[len(root):].rstrip("/")
    if len(h) == 16 and all(c in "0123456789ABCDEF" for c in h):
        if int(h[:8], 16) >= tli and int(h[8:], 16) >= log:
            folders.append((int(h[8:], 16), int(h[:8], 16), folder))
later = None
for _, _, folder in sorted(folders):
    for n in names(folder):
        if n == name:
            sys.exit(0)
        t, l, s = xlog.decode_segment_name(n)
        if t >= tli and (l, s) > (log, seg) and (later is None or (l, s, t) < later[0]):
            later = ((l, s, t), n)
    if later:
        break
# Its own folder listed again before a gap is named: a listing is read
# page after page, and one racing the uploads of both could see only the
# later one.
if later and name in names(root + name[:16] + "/"):
    later = None
print(later[1] if later else "")
' "$@"
}
# The Python that runs barman-cloud (its commands' interpreter line), so
# that its library imports; python3 when that line names none.
barman_python() {
    line="$(head -n 1 "$(command -v barman-cloud-wal-restore)" 2>/dev/null)"
    case "$line" in
        '#!'*python*) printf '%s' "${line#??}" ;;
        *) printf 'python3' ;;
    esac
}
restore_one() { fetch_one restore "$server" "$@"; }
recovery_one() {
    if [ -z "$recovery_server" ]; then
        mv "$spool/recovery/requests/$1" "$spool/recovery/working/$1" 2>/dev/null || return 0
        outcome "$spool/recovery/failed" "$1" "no RECOVERY_SERVER: this Database recovers from no archive"
        rm -f "$spool/recovery/working/$1"
        return 0
    fi
    fetch_one recovery "$recovery_server" "$@"
}

# What this sidecar reports (see the top); which of its two parts, the
# WAL's and the base backups', changed since they were last sent (only
# those are sent: a primary that once took a base backup never sends it
# again over a standby's newer one, nor a standby that once archived its
# old failures); the request sending, and which parts it carries.
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
archived="" archived_at="" failing_since="" failed="" failure="" failed_at=""
base_backup="" base_backup_failure=""
wal_dirty="" backup_dirty="" urgent="" sent_at=0 sender="" sending="" send_failing=""
REPORT_SECONDS=10
report() {
    [ -n "$report_to" ] || return 0
    if [ -n "$sender" ]; then
        kill -0 "$sender" 2>/dev/null && return 0
        if wait "$sender"; then
            [ -z "$send_failing" ] || log "report: sent again to ConfigMap $namespace/$report_to"
            send_failing=""
        else
            [ -n "$send_failing" ] || log "report: not sent to ConfigMap $namespace/$report_to: $(cat "$spool/.report-why" 2>/dev/null); tried again every ${REPORT_SECONDS}s"
            send_failing=1
            # What it carried is sent again.
            case "$sending" in *wal*) wal_dirty=1 ;; esac
            case "$sending" in *backup*) backup_dirty=1 ;; esac
        fi
        sender="" sending=""
    fi
    [ -n "$wal_dirty$backup_dirty" ] || return 0
    at="$(date +%s)"
    [ -n "$urgent" ] || [ "$at" -ge $((sent_at + REPORT_SECONDS)) ] || return 0
    set --
    if [ -n "$wal_dirty" ]; then
        set -- pod "$pod" failingSince "$failing_since"
        [ -z "$archived" ] || set -- "$@" lastArchivedWal "$archived" lastArchivedTime "$archived_at"
        [ -z "$failed" ] || set -- "$@" lastFailedWal "$failed" lastFailure "$failure" lastFailureTime "$failed_at"
        sending="wal"
    fi
    if [ -n "$backup_dirty" ]; then
        set -- "$@" baseBackupPod "$pod" baseBackupFailure "$base_backup_failure"
        [ -z "$base_backup" ] || set -- "$@" lastBaseBackup "$base_backup"
        sending="$sending backup"
    fi
    wal_dirty="" backup_dirty="" urgent="" sent_at="$at"
    send_report "$@" </dev/null 2>"$spool/.report-why" &
    sender=$!
}
# send_report KEY VALUE...: the merge patch, each value one argument.
send_report() {
    # shellcheck disable=SC2046 # the interpreter line may be `env python3`
    $(barman_python) -c '
import json
import ssl
import sys
import urllib.error
import urllib.request

host, port, namespace, name, credentials = sys.argv[1:6]
pairs = sys.argv[6:]
data = dict(zip(pairs[::2], pairs[1::2]))
if not host:
    sys.exit("KUBERNETES_SERVICE_HOST is not set: no API server to report to")
where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
try:
    with open(credentials + "/token") as f:
        token = f.read().strip()
    context = ssl.create_default_context(cafile=credentials + "/ca.crt")
except OSError as e:
    sys.exit(f"no ServiceAccount token or CA in {credentials}: {e}")
request = urllib.request.Request(
    f"https://{where}/api/v1/namespaces/{namespace}/configmaps/{name}?fieldManager=opshooks-archiver",
    data=json.dumps({"data": data}).encode(),
    method="PATCH",
    headers={"Authorization": "Bearer " + token, "Content-Type": "application/merge-patch+json",
             "Accept": "application/json"},
)
# No proxy from the environment: the API server is reached directly.
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
try:
    with opener.open(request, timeout=5) as answer:
        answer.read()
except urllib.error.HTTPError as e:
    try:
        why = json.loads(e.read()).get("message", "")
    except ValueError:
        why = ""
    sys.exit(f"HTTP {e.code} {why[:200]}")
except Exception as e:
    sys.exit(f"no answer from {where}: {e}")
' "$api_host" "$api_port" "$namespace" "$report_to" "$credentials" "$@"
}

# The base backup running beside the loop, and its name.
backup_pid="" backup_name=""
base_backups() {
    b="$spool/backup"
    if [ -n "$backup_pid" ]; then
        kill -0 "$backup_pid" 2>/dev/null && return 0
        said="$(head -n 1 "$b/$backup_name.report" 2>/dev/null)"
        if wait "$backup_pid"; then
            outcome "$b/done" "$backup_name"
            # One found stored (a new pod going through the requests
            # again) was reported by the sidecar that took it, and may be
            # older than the last one reported.
            case "$said" in
                *" already=true"*) ;;
                *) base_backup="$said" base_backup_failure="" backup_dirty=1 urgent=1 ;;
            esac
        else
            outcome "$b/failed" "$backup_name"
            base_backup_failure="${said:-base-backup.sh of $backup_name failed and said nothing}"
            backup_dirty=1 urgent=1
        fi
        log "base backup $backup_name: $said"
        rm -f "$b/$backup_name.report"
        backup_pid="" backup_name=""
    fi
    [ -n "$scripts" ] && [ -n "$pod" ] && [ -r "$scripts/base-backup" ] || return 0
    while read -r name of checkpoint; do
        [ "$of" = "$pod" ] || continue
        case "$name" in '' | .* | *[!A-Za-z0-9._-]*) log "ignored a base backup named '$name'"; continue ;; esac
        [ -e "$b/done/$name" ] && continue
        [ -e "$b/failed/$name" ] && [ -z "$(find "$b/failed/$name" -mmin +10 2>/dev/null)" ] && continue
        rm -f "$b/failed/$name"
        immediate=false
        [ "$checkpoint" = immediate ] && immediate=true
        log "base backup $name: starting (checkpoint: ${checkpoint:-spread})"
        BACKUP_NAME="$name" BACKUP_IMMEDIATE_CHECKPOINT="$immediate" TERMINATION_LOG="$b/$name.report" \
            sh "$scripts/base-backup.sh" </dev/null &
        backup_pid=$! backup_name="$name"
        return 0
    done <"$scripts/base-backup"
}

stopping=""
trap 'stopping=1' TERM INT
log "archiving to $destination as $server from $pgdata; spool $spool"
idle=0 next_check=0
while [ -z "$stopping" ]; do
    if [ -n "$until_file" ] && [ -e "$until_file" ]; then
        log "$until_file exists: the work beside this loop is done"
        break
    fi
    # Every 10 s by the clock, however busy the loop is with segments.
    now="$(date +%s)"
    if [ "$now" -ge "$next_check" ]; then
        next_check=$((now + 10))
        base_backups
        report
    fi
    worked=""
    for kind in archive restore recovery; do
        for request in "$spool/$kind/requests"/*; do
            [ -e "$request" ] || continue
            f="${request##*/}"
            case "$f" in
                .* | *[!0-9A-Za-z.]*) rm -f "$request"; log "ignored a request for '$f'"; continue ;;
            esac
            "${kind}_one" "$f" "$@"
            report
            worked=1
            [ -z "$stopping" ] || break 2
            # Archiving first: a restore waits while segments are handed over.
            [ "$kind" = archive ] || break
        done
    done
    if [ -z "$worked" ]; then
        idle=$((idle + 1))
        if [ "$idle" -ge 3000 ]; then
            idle=0
            find "$spool/archive/done" "$spool/archive/failed" "$spool/restore/done" \
                "$spool/restore/missing" "$spool/restore/failed" "$spool/restore/files" \
                "$spool/recovery/done" "$spool/recovery/missing" "$spool/recovery/failed" "$spool/recovery/files" \
                -type f -mmin +10 -exec rm -f {} + 2>/dev/null
        fi
        sleep 0.1
    fi
done
log "stopped"
if [ -z "$stopping" ] && [ -n "$until_file" ] && [ -e "$until_file" ] && [ -n "$retain" ]; then
    exec sh "$retain"
fi
