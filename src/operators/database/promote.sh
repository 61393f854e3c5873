#!/bin/sh
# opshooks database, the promote Job: promotes the standby the hook chose
# ($CANDIDATE) to primary, over the network as the superuser postgres
# ($PGPASSWORD), unless that could lose data or make two primaries. No exec
# into a pod and no API access: everything is a SQL connection.
#
# Values: CANDIDATE, OLD_PRIMARY (host or host:port, port 5432 by default;
# empty when the hook does not know it: then every other instance is in
# STANDBYS), STANDBYS (the other instances, space-separated host[:port],
# may be empty), SYNCHRONOUS ("true" or "false"), MODE ("failover", the
# default, or "switchover"), EXPECT_PRIMARY and EXPECT_EPOCH (the role the
# hook published: the candidate's pod name and the epoch), ROLE_DIR (where
# the instances read their role, default /etc/opshooks/role), ROLE_WAIT
# (seconds, default 150), CONNECT_TIMEOUT (seconds, default 5),
# TERMINATION_LOG (default /dev/termination-log). Hosts reach libpq through
# PGHOST and PGPORT, never through a connection string.
#
# In order:
# 1. A candidate that answers and is not in recovery was promoted already
#    (an earlier attempt whose pod died after promoting): success.
# 1b. Fencing is read before anything is promoted: every instance that
#    answers must read the published role from its mounted ConfigMap
#    (pg_read_file; the kubelet updates such volumes a minute or so after
#    the ConfigMap), so none that restarts from now on starts as a primary
#    and the candidate's probes take it for the primary. Refused after
#    ROLE_WAIT seconds.
# 2. failover: an old primary that still answers as a primary: refused.
#    switchover: the old primary must answer as a primary; its writes stop
#    (default_transaction_read_only by ALTER SYSTEM, its client sessions
#    ended, a checkpoint), and the candidate must replay all of its WAL
#    within ROLE_WAIT seconds, else the old primary takes writes again and
#    the switchover is refused.
# 3. The candidate must answer and be in recovery. Its position is the
#    greatest of the WAL it received and replayed; every other standby that
#    answers must not be ahead of it, or the promotion would lose what that
#    one holds: refused, naming both positions. A standby that does not
#    answer may hold commits nobody else has: under synchronous
#    replication that refuses (zero loss wins over availability); under
#    asynchronous replication it is noted and skipped.
# 4. pg_promote() on the candidate, then wait until it is out of recovery.
#
# The outcome is exactly one line in the termination log, where Kubernetes
# shows it in the Job's pod status:
#   opshooks promote: promoted <candidate> lsn=<position>   (exit 0)
#   opshooks promote: refused <reason>                      (exit 3)
#   opshooks promote: failed <reason>                       (exit 1)
# <position> is the candidate's WAL position when it was promoted (or, when
# it was promoted already, its current one). Details go to stderr.
set -u
timeout="${CONNECT_TIMEOUT:-5}"
case "$timeout" in '' | *[!0-9]*) timeout=5 ;; esac

report() {
    printf 'opshooks promote: %s\n' "$(printf '%s' "$1" | tr '\n\r' '  ')" 2>/dev/null \
        >"${TERMINATION_LOG:-/dev/termination-log}" || true
}
log() { printf 'promote: %s\n' "$*" >&2; }
done_ok() { log "$1"; report "$1"; exit 0; }
# A switchover that stopped the old primary's writes gives them back on
# any way out but success.
fenced=false
refuse() { log "refused: $1"; unfence_old; report "refused $1"; exit 3; }
fail() { log "failed: $1"; unfence_old; report "failed $1"; exit 1; }
unfence_old() {
    [ "$fenced" = true ] || return 0
    fenced=false
    if q "$old" "ALTER SYSTEM RESET default_transaction_read_only" && q "$old" "SELECT pg_reload_conf()"; then
        log "old primary $old takes writes again"
    else
        log "could not take writes again on $old: $answer"
    fi
}

# `host[:port]` -> $host and $port.
split_address() {
    case "$1" in
        *:*) host="${1%:*}" port="${1##*:}" ;;
        *) host="$1" port=5432 ;;
    esac
    case "$port" in '' | *[!0-9]*) fail "cannot read a port from '$1'" ;; esac
    [ -n "$host" ] || fail "no host in '$1'"
}

# q ADDRESS SQL [psql arguments...]: one value from the server, in
# $answer; the status is psql's (non-zero: it did not answer, or the query
# failed, and $answer says why).
q() {
    split_address "$1"
    sql="$2"
    shift 2
    # On stdin, where psql interpolates its variables (not in -c).
    answer="$(printf '%s\n' "$sql" | PGHOST="$host" PGPORT="$port" PGUSER=postgres \
        PGDATABASE=postgres PGCONNECT_TIMEOUT="$timeout" \
        psql -X -q -A -t -v ON_ERROR_STOP=1 --no-password "$@" 2>&1)"
    status=$?
    if [ "$status" -ne 0 ]; then
        answer="$(printf '%s' "$answer" | sed -n '/[^[:space:]]/{s/^psql: //;s/^error: //;p;q;}')"
    fi
    return "$status"
}

candidate="${CANDIDATE:-}"
old="${OLD_PRIMARY:-}"
mode="${MODE:-failover}"
[ -n "$candidate" ] || fail "CANDIDATE is not set"
[ -n "${EXPECT_PRIMARY:-}" ] || fail "EXPECT_PRIMARY is not set"
case "${EXPECT_EPOCH:-}" in '' | *[!0-9]*) fail "EXPECT_EPOCH is '${EXPECT_EPOCH:-}', not an epoch" ;; esac
case "$mode" in
    failover) ;;
    switchover) [ -n "$old" ] || fail "a switchover needs OLD_PRIMARY" ;;
    *) fail "MODE is '$mode', not failover or switchover" ;;
esac
role_dir="${ROLE_DIR:-/etc/opshooks/role}"
role_wait="${ROLE_WAIT:-150}"
case "$role_wait" in '' | *[!0-9]*) role_wait=150 ;; esac
case "${SYNCHRONOUS:-false}" in
    true | false) ;;
    *) fail "SYNCHRONOUS is '${SYNCHRONOUS:-}', not true or false" ;;
esac
log "candidate $candidate, old primary $old, other standbys '${STANDBYS:-}', synchronous ${SYNCHRONOUS:-false}"

# 1. Promoted already?
if q "$candidate" "SELECT pg_is_in_recovery()"; then
    if [ "$answer" = "f" ]; then
        q "$candidate" "SELECT pg_current_wal_lsn()" || fail "candidate $candidate: $answer"
        done_ok "promoted $candidate lsn=$answer"
    fi
    [ "$answer" = "t" ] || fail "candidate $candidate answered '$answer' to pg_is_in_recovery()"
else
    refuse "candidate $candidate does not answer: $answer"
fi

# 1b. Every instance that answers reads the published role.
ROLE="SELECT btrim(pg_read_file(:'dir' || '/primary'), E' \\n') || '@' || btrim(pg_read_file(:'dir' || '/epoch'), E' \\n')"
want="$EXPECT_PRIMARY@$EXPECT_EPOCH"
# shellcheck disable=SC2086 # OLD_PRIMARY may be empty; STANDBYS is a list
for instance in "$candidate" $old ${STANDBYS:-}; do
    waited=0
    while q "$instance" "$ROLE" -v "dir=$role_dir" && [ "$answer" != "$want" ]; do
        [ "$waited" -lt "$role_wait" ] ||
            refuse "$instance still reads the role '$answer', not '$want', after ${role_wait}s: the kubelet has not updated its role volume"
        sleep 2
        waited=$((waited + 2))
    done
    if [ "$answer" = "$want" ]; then
        log "$instance reads the role $want"
    else
        log "$instance does not answer ($answer): it reads the role when it starts"
    fi
done

# 2. The old primary.
if [ "$mode" = "switchover" ]; then
    q "$old" "SELECT pg_is_in_recovery()" ||
        refuse "old primary $old does not answer: a switchover needs it (a failover takes over when it is lost): $answer"
    [ "$answer" = "f" ] || refuse "old primary $old answers in recovery, not as a primary"
    fenced=true
    q "$old" "ALTER SYSTEM SET default_transaction_read_only = on" || fail "old primary $old: $answer"
    q "$old" "SELECT pg_reload_conf()" || fail "old primary $old: $answer"
    q "$old" "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()" ||
        fail "old primary $old: $answer"
    log "old primary $old: writes stopped, $answer sessions ended"
    q "$old" "CHECKPOINT" || fail "old primary $old: $answer"
    q "$old" "SELECT pg_current_wal_lsn()" || fail "old primary $old: $answer"
    last="$answer"
    waited=0
    until q "$candidate" "SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), :'last') >= 0" -v "last=$last" &&
        [ "$answer" = "t" ]; do
        if [ "$waited" -ge "$role_wait" ]; then
            refuse "candidate $candidate did not replay the old primary's WAL up to $last within ${role_wait}s; the old primary takes writes again"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    log "candidate $candidate replayed the old primary's WAL up to $last"
elif [ -n "$old" ] && q "$old" "SELECT pg_is_in_recovery()"; then
    [ "$answer" = "t" ] || refuse "old primary $old still answers as a primary"
    log "old primary $old answers, in recovery"
elif [ -n "$old" ]; then
    log "old primary $old does not answer: $answer"
fi

# 3. The candidate must be at least as far as every other standby.
POSITION="SELECT greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()), pg_is_in_recovery()"
q "$candidate" "$POSITION" || refuse "candidate $candidate does not answer: $answer"
case "$answer" in
    *"|t") mine="${answer%|t}" ;;
    *"|f") done_ok "promoted $candidate lsn=${answer%|f}" ;; # promoted meanwhile
    *) fail "candidate $candidate: cannot read its position from '$answer'" ;;
esac
[ -n "$mine" ] || fail "candidate $candidate: no WAL position"
log "candidate $candidate is at $mine"
for other in ${STANDBYS:-}; do
    if ! q "$other" "$POSITION"; then
        if [ "${SYNCHRONOUS:-false}" = "true" ]; then
            refuse "standby $other does not answer: under synchronous replication it may hold the last acknowledged commits ($answer)"
        fi
        log "standby $other does not answer (asynchronous replication: going on): $answer"
        continue
    fi
    case "$answer" in
        *"|t") theirs="${answer%|t}" ;;
        *"|f") refuse "standby $other answers as a primary" ;;
        *) fail "standby $other: cannot read its position from '$answer'" ;;
    esac
    [ -n "$theirs" ] || fail "standby $other: no WAL position"
    q "$candidate" "SELECT pg_wal_lsn_diff(:'theirs', :'mine') > 0" -v "theirs=$theirs" -v "mine=$mine" \
        || fail "candidate $candidate: $answer"
    if [ "$answer" = "t" ]; then
        refuse "standby $other is ahead of candidate $candidate: $theirs > $mine"
    fi
    log "standby $other is at $theirs, not ahead"
done

# 4. Promote, and see it done.
# From here on the old primary keeps its writes stopped whatever happens:
# a promotion asked for may finish after any error, and two primaries must
# never take writes. Its liveness probe restarts it as a standby.
fenced=false
q "$candidate" "SELECT pg_promote(true, 60)" || fail "pg_promote on $candidate: $answer"
[ "$answer" = "t" ] || fail "pg_promote on $candidate did not finish within 60 s"
tries=0
until q "$candidate" "SELECT pg_is_in_recovery()" && [ "$answer" = "f" ]; do
    tries=$((tries + 1))
    [ "$tries" -lt 60 ] || fail "candidate $candidate is still in recovery after pg_promote: $answer"
    sleep 1
done
# The new timeline reaches the control file at the next checkpoint, which
# pg_rewind reads when a former primary rejoins.
q "$candidate" "CHECKPOINT" || log "checkpoint on $candidate: $answer"
done_ok "promoted $candidate lsn=$mine"
