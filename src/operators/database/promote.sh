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
# the instances read their role, default /etc/opshooks/role), LEASE_FILE,
# LEASE_SECONDS, LEASE_CHECK_SECONDS, LEASE_MARGIN (1b, 1c), ROLE_WAIT
# (seconds, default 150), CONNECT_TIMEOUT (seconds, default 5),
# TERMINATION_LOG (default /dev/termination-log). Hosts reach libpq through
# PGHOST and PGPORT, never through a connection string.
#
# In order:
# 1. A candidate that answers and is not in recovery was promoted already
#    (an earlier attempt whose pod died after promoting): success.
# 1b. Fencing is read before anything is promoted: every instance that
#    answers must read the published role (pg_read_file), so none that
#    restarts from now on starts as a primary and the candidate's probes
#    take it for the primary. Refused after ROLE_WAIT seconds. With
#    LEASE_FILE set (the instances' lease, which their sidecar rewrites
#    from the API server every few seconds), that file is read; else the
#    mounted ConfigMap (the kubelet updates such volumes a minute or so
#    after the ConfigMap).
# 1c. The lease (failover, LEASE_FILE set): the hook made this Job only
#    once it observed the ConfigMap naming the candidate, so the old
#    primary's last lease naming itself is older than this Job, and its
#    watchdog stops it within LEASE_SECONDS + LEASE_CHECK_SECONDS (+ 1 s
#    of whole seconds) of that lease. The Job waits that long plus
#    LEASE_MARGIN (default 2 s), unless the old primary answers in
#    recovery: then nothing is to fence. One that answers as a primary is
#    refused at once (it came back). A connection that fails (a DNS
#    error, a timeout) proves nothing and is never taken for a stopped
#    primary; the wait is what fences, and step 3 is asked before it too,
#    so a candidate behind another standby is refused without waiting.
#    Without LEASE_FILE, an old primary that does not answer is taken as
#    lost (the kubelet's fence).
# 2. failover: an old primary that still answers as a primary: refused.
#    switchover: the old primary must answer as a primary and the
#    candidate stream from it within MAX_LAG_BYTES of its position (else
#    refused, nothing stopped). Then the old primary is shut down (fast, by
#    a signal to its postmaster through COPY TO PROGRAM: a server that is
#    down takes no write, whatever a session sets; default_transaction_
#    read_only is only a default). Its shutdown checkpoint is its last WAL,
#    which its WAL senders send to every standby connected before it
#    exits; the candidate must have received past the position read before
#    the stop and replayed all it received, so every standby ends the old
#    timeline where the candidate does and follows the new one. Refused
#    (the hook designates the old primary again) when the old primary does
#    not stop or the candidate lacks its end within ROLE_WAIT seconds.
# 3. The candidate must answer and be in recovery. Its position is the
#    greatest of the WAL it received and replayed; every other standby that
#    answers must not be ahead of it, or the promotion would lose what that
#    one holds: refused, naming both positions. A standby that does not
#    answer may hold commits nobody else has: under synchronous
#    replication that refuses (zero loss wins over availability); under
#    asynchronous replication it is noted and skipped. Under synchronous
#    replication the candidate's synchronous_standby_names (the old
#    primary's: every server has the same) must name the instances: `*`
#    lets any WAL receiver acknowledge commits: refused.
# 3b. (checked first, as 1a) failover, with MAX_SILENCE_SECONDS: the loss bound against what the
#    old primary had, not only against other standbys. probe.sh records on
#    each standby when it was last current with a primary (its receiver
#    streaming, at most MAX_LAG_BYTES, default 16 MiB, behind the
#    primary's position) and where that primary was. The candidate is
#    refused when it has no such record, when it was last current longer
#    ago than MAX_SILENCE_SECONDS, or when it is more than MAX_LAG_BYTES
#    behind where any standby that answers last saw the old primary.
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
refuse() { log "refused: $1"; report "refused $1"; exit 3; }
fail() { log "failed: $1"; report "failed $1"; exit 1; }

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

# True when the last q's error ($answer) says no server was reached: no
# address, nothing listening, no route, or no answer in time.
unreached() {
    case "$answer" in
        *"Connection refused"* | *"timeout expired"* | *"could not translate host name"* | \
            *"No route to host"* | *"Network is unreachable"* | *"Connection timed out"* | \
            *"Host is unreachable"*) return 0 ;;
    esac
    return 1
}

# await CHECK REASON: runs the function CHECK once a second until it
# succeeds; refused with REASON after ROLE_WAIT seconds.
await() {
    waited=0
    until "$1"; do
        [ "$waited" -lt "$role_wait" ] || refuse "$2"
        sleep 1
        waited=$((waited + 1))
    done
}
# The switchover's checks, for await.
# shellcheck disable=SC2317 # called through await
candidate_keeps_up() {
    q "$old" "SELECT pg_current_wal_flush_lsn()" && head="$answer" &&
        q "$candidate" "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'
            AND pg_wal_lsn_diff(:'head', pg_last_wal_replay_lsn()) <= :bound" -v "head=$head" -v "bound=$max_lag" &&
        [ "$answer" = "1" ]
}
# shellcheck disable=SC2317 # called through await
old_stopped() { ! q "$old" "SELECT 1"; }
# shellcheck disable=SC2317 # called through await
candidate_has_the_end() {
    q "$candidate" "SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(), :'last') > 0
        AND pg_wal_lsn_diff(pg_last_wal_replay_lsn(), pg_last_wal_receive_lsn()) >= 0
        AND NOT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')" -v "last=$last" &&
        [ "$answer" = "t" ]
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
lease_file="${LEASE_FILE:-}"
lease_wait=0
for value in "${LEASE_SECONDS:-10}" "${LEASE_CHECK_SECONDS:-1}" "${LEASE_MARGIN:-2}"; do
    case "$value" in '' | *[!0-9]*) fail "LEASE_SECONDS, LEASE_CHECK_SECONDS, LEASE_MARGIN: '$value' is not a number of seconds" ;; esac
    lease_wait=$((lease_wait + value))
done
lease_wait=$((lease_wait + 1))
case "${SYNCHRONOUS:-false}" in
    true | false) ;;
    *) fail "SYNCHRONOUS is '${SYNCHRONOUS:-}', not true or false" ;;
esac
silence="${MAX_SILENCE_SECONDS:-}"
case "$silence" in *[!0-9]*) fail "MAX_SILENCE_SECONDS is '$silence', not a number of seconds" ;; esac
max_lag="${MAX_LAG_BYTES:-16777216}"
case "$max_lag" in '' | *[!0-9]*) fail "MAX_LAG_BYTES is '$max_lag', not a number of bytes" ;; esac
started="$(date +%s)"
log "candidate $candidate, old primary $old, other standbys '${STANDBYS:-}', synchronous ${SYNCHRONOUS:-false}"

# The candidate records, beside its data directory, the epoch it was
# promoted at, its own name and the Database's uid its role names
# (`opshooks-epoch`, as start.sh records it at each start): re-created
# over retained volumes with the role lost, it says it holds the newest
# data (start.sh).
# The candidate is promoted by then: a failure here must not fail the Job
# (the hook would designate another standby while this one serves), so
# it is tried for some seconds and then only logged; start.sh records the
# epoch again at the instance's next start.
record_epoch() {
    tries=0
    until q "$candidate" "SELECT regexp_replace(current_setting('data_directory'), '/[^/]*$', '') || '/opshooks-epoch' AS file,
        btrim(coalesce(pg_read_file(:'dir' || '/database', 0, 200, true), ''), E' \\n') AS database \\gset
COPY (SELECT :'rec' || ' ' || :'database') TO :'file'" -v "rec=$EXPECT_EPOCH $EXPECT_PRIMARY" -v "dir=$role_dir"; do
        tries=$((tries + 1))
        if [ "$tries" -ge 10 ]; then
            log "candidate $candidate is promoted, but could not record epoch $EXPECT_EPOCH (its next start does): $answer"
            return 0
        fi
        sleep 1
    done
}

# 5. The other standbys connect again now, through the read-write Service
# that selects the candidate. A WAL receiver that went on waiting for the
# old primary (a hung one keeps its connections open; one a standby
# opened while the Service still selected it never finishes: the WAL
# receiver heeds no connect_timeout) would keep them off the new primary,
# and every synchronous commit waiting, until the old one came back (the
# real loop's dbrealrto: a minute). A changed primary_conninfo restarts
# the WAL receiver on a reload (PostgreSQL 13 and later), as Patroni and
# CloudNativePG change it on a failover: its connect_timeout is moved
# between 5 and 6 s. Statement logging is off for the session (the value
# holds the replicator's password). Best effort: a standby that does not
# answer reconnects by itself, and a failure here fails nothing.
reconnect_standbys() {
    # shellcheck disable=SC2086 # STANDBYS is a list
    for standby in ${STANDBYS:-}; do
        if q "$standby" "SET log_statement = 'none';
SET log_min_error_statement = 'panic';
SELECT CASE WHEN c LIKE '%connect_timeout=''5''%' THEN replace(c, 'connect_timeout=''5''', 'connect_timeout=''6''')
            WHEN c LIKE '%connect_timeout=''6''%' THEN replace(c, 'connect_timeout=''6''', 'connect_timeout=''5''')
            ELSE c || ' connect_timeout=''5''' END AS next
    FROM (SELECT current_setting('primary_conninfo') AS c) s WHERE pg_is_in_recovery() AND c <> '' \\gset
ALTER SYSTEM SET primary_conninfo = :'next';
SELECT pg_reload_conf();"; then
            log "standby $standby connects again (its primary_conninfo reloaded)"
        else
            log "standby $standby not told to connect again (it does by itself): $answer"
        fi
    done
}

# 3. The candidate must be at least as far as every other standby, its
# position in $mine. A failover waiting out the old primary's lease asks
# this first too, so a candidate behind another standby is refused at
# once and the next one's Job starts without waiting for this one's
# lease (dbrealrto: a 52 s failover when the first candidate was behind,
# 39 s while it was asked only after two timeouts to the hung old
# primary); what decides is the answer after the wait.
check_position() {
    POSITION="SELECT greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()), pg_is_in_recovery()"
    q "$candidate" "$POSITION" || refuse "candidate $candidate does not answer: $answer"
    case "$answer" in
        *"|t") mine="${answer%|t}" ;;
        *"|f") # promoted meanwhile
            lsn="${answer%|f}"
            record_epoch
            reconnect_standbys
            done_ok "promoted $candidate lsn=$lsn"
            ;;
        *) fail "candidate $candidate: cannot read its position from '$answer'" ;;
    esac
    [ -n "$mine" ] || fail "candidate $candidate: no WAL position"
    log "candidate $candidate is at $mine"
    # 3a. Synchronous: a commit was acknowledged once a walsender the old
    # primary's synchronous_standby_names accepts had it. Every server runs
    # with the same setting, so the candidate shows it. Only a list of the
    # instances' names makes "the most advanced instance holds every
    # acknowledged commit" true: `*` accepts any WAL receiver (pg_receivewal,
    # pg_recvlogical, a base backup's stream), which none of the instances is.
    if [ "${SYNCHRONOUS:-false}" = "true" ]; then
        q "$candidate" "SELECT current_setting('synchronous_standby_names')" ||
            refuse "candidate $candidate: cannot read synchronous_standby_names: $answer"
        case "$answer" in
            '') refuse "candidate $candidate runs without synchronous_standby_names: nothing shows the old primary waited for an instance" ;;
            *'*'*) refuse "synchronous_standby_names is '$answer': any WAL receiver (pg_receivewal, pg_recvlogical) acknowledged commits for the old primary, and the instances may hold none of them" ;;
        esac
        log "synchronous_standby_names '$answer' names the instances: the most advanced one holds every acknowledged commit"
    fi
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
        # Where the old primary was when that standby was last current with it.
        if q "$other" "SELECT split_part(btrim(coalesce(pg_read_file('opshooks-current', 0, 200, true), ''), E' \\n'), ' ', 2)" &&
            [ -n "$answer" ]; then
            seen="$answer"
            q "$candidate" "SELECT greatest(pg_wal_lsn_diff(:'seen', :'mine'), 0)::bigint" -v "seen=$seen" -v "mine=$mine" ||
                fail "candidate $candidate: $answer"
            if [ "$answer" -gt "$max_lag" ]; then
                refuse "candidate $candidate is at $mine, $answer bytes behind $seen, where standby $other saw the old primary, more than $max_lag"
            fi
        fi
    done
}

# 1. Promoted already?
if q "$candidate" "SELECT pg_is_in_recovery()"; then
    if [ "$answer" = "f" ]; then
        q "$candidate" "SELECT pg_current_wal_lsn()" || fail "candidate $candidate: $answer"
        lsn="$answer"
        record_epoch
        reconnect_standbys
        done_ok "promoted $candidate lsn=$lsn"
    fi
    [ "$answer" = "t" ] || fail "candidate $candidate answered '$answer' to pg_is_in_recovery()"
else
    refuse "candidate $candidate does not answer: $answer"
fi

# 1a. Against what the old primary had, first (before the wait for the
# role, which must not age the record): when the candidate was last
# current with a primary, by its own record (probe.sh writes it).
if [ "$mode" = "failover" ] && [ -n "$silence" ]; then
    q "$candidate" "SELECT extract(epoch FROM now())::bigint - split_part(r, ' ', 1)::bigint || ' ' ||
        split_part(r, ' ', 2) || ' ' || split_part(r, ' ', 3) || ' ' ||
        greatest(pg_wal_lsn_diff(split_part(r, ' ', 2)::pg_lsn, greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())), 0)::bigint
        FROM (SELECT btrim(coalesce(pg_read_file('opshooks-current', 0, 200, true), ''), E' \\n') AS r) f WHERE r <> ''" ||
        fail "candidate $candidate: cannot read when it was last current with a primary: $answer"
    [ -n "$answer" ] ||
        refuse "candidate $candidate has no record of being current with a primary (probe.sh writes it while it streams): promoting it could lose any number of commits"
    # shellcheck disable=SC2086 # four words, split on purpose
    set -- $answer
    [ "$#" -eq 4 ] || fail "candidate $candidate: cannot read its record '$answer'"
    if [ "$1" -gt "$silence" ]; then
        refuse "candidate $candidate was last current with a primary ${1}s ago (the primary at $2, it at $3), more than MAX_SILENCE_SECONDS=$silence: promoting it could lose every commit since"
    fi
    if [ "$4" -gt "$max_lag" ]; then
        refuse "candidate $candidate is $4 bytes behind $2, where the old primary was when it was last current, more than $max_lag"
    fi
    log "candidate $candidate was current with a primary ${1}s ago (the primary at $2), within MAX_SILENCE_SECONDS=$silence"
fi

# 1c, first (a failover with a lease): the old primary is asked once,
# briefly (2 s, libpq's least). One that answers as a primary came back
# (restarted in place while the failover was decided) or never stopped
# serving: refused at once, and the hook designates it again; its lease
# would not stop it (the watchdog stops a primary on a fresh lease only
# once the pod it names answers as one). Otherwise step 3 (below) is
# asked before anything that waits for an old primary that hangs: a
# candidate behind another standby is refused at once.
answered="" old_said=""
if [ "$mode" = "failover" ] && [ -n "$lease_file" ]; then
    waiting="$timeout" timeout=2
    if [ -n "$old" ] && q "$old" "SELECT pg_is_in_recovery()"; then
        answered="$answer"
    fi
    old_said="$answer" timeout="$waiting"
    [ "$answered" != "f" ] ||
        refuse "old primary $old still answers as a primary: it came back or never stopped; nothing was promoted"
    check_position
fi

# 1b. Every instance that answers reads the published role: its lease,
# or its mount.
if [ -n "$lease_file" ]; then
    ROLE="SELECT split_part(l, ' ', 3) || '@' || split_part(l, ' ', 2)
        FROM (SELECT btrim(pg_read_file(:'file'), E' \\n') AS l) f"
    source="file=$lease_file"
    stale="its lease sidecar has not rewritten $lease_file from the API server"
else
    ROLE="SELECT btrim(pg_read_file(:'dir' || '/primary'), E' \\n') || '@' || btrim(pg_read_file(:'dir' || '/epoch'), E' \\n')"
    source="dir=$role_dir"
    stale="the kubelet has not updated its role volume"
fi
want="$EXPECT_PRIMARY@$EXPECT_EPOCH"
# shellcheck disable=SC2086 # OLD_PRIMARY may be empty; STANDBYS is a list
for instance in "$candidate" $old ${STANDBYS:-}; do
    waited=0
    while q "$instance" "$ROLE" -v "$source" && [ "$answer" != "$want" ]; do
        [ "$waited" -lt "$role_wait" ] ||
            refuse "$instance still reads the role '$answer', not '$want', after ${role_wait}s: $stale"
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
    # Before anything stops: the candidate streams and keeps up, else the
    # switchover is refused with the old primary untouched.
    await candidate_keeps_up \
        "candidate $candidate does not stream within $max_lag bytes of the old primary after ${role_wait}s: nothing was stopped"
    # The fence: the old primary shuts down (fast: its sessions end, it
    # writes a shutdown checkpoint, and its WAL senders send every record
    # up to that checkpoint to the standbys connected before exiting). A
    # stopped server takes no write, whatever a session asks; its container
    # restarts as a standby (the role names the candidate: read above).
    q "$old" "SELECT pg_current_wal_insert_lsn()" || refuse "old primary $old: $answer"
    last="$answer"
    q "$old" "SELECT split_part(pg_read_file('postmaster.pid', 0, 64), E'\\n', 1)" || refuse "old primary $old: $answer"
    case "$answer" in '' | *[!0-9]*) refuse "old primary $old: cannot read its postmaster's pid from '$answer'" ;; esac
    # The session that asks may be ended by the shutdown before it returns,
    # and its program with it (the postmaster signals each session's
    # process group): whether the server stops is what await sees. The
    # query yields no row: a row written to a program that has already
    # exited fails the COPY with "Broken pipe", though the shutdown was
    # asked.
    if ! q "$old" "COPY (SELECT 1 WHERE false) TO PROGRAM :'stop'" -v "stop=kill -INT $answer"; then
        case "$answer" in
            *"terminating connection"* | *"server closed the connection"* | *"shutting down"* | \
                *"connection to server was lost"* | *"SSL SYSCALL error"* | \
                *"SSL connection has been closed"* | *"unexpected eof"* | \
                *'program "kill -INT'*) ;;
            *) refuse "old primary $old: cannot stop it: $answer" ;;
        esac
    fi
    log "old primary $old: fast shutdown asked (its WAL was at $last)"
    await old_stopped "old primary $old still answers ${role_wait}s after its shutdown was asked: nothing was promoted"
    log "old primary $old stopped"
    # Its last WAL is the shutdown checkpoint, after $last: the candidate
    # has it (its WAL sender ends the stream once the candidate confirmed
    # all) and replayed all it received, else it cannot be told from a
    # standby that missed commits.
    await candidate_has_the_end \
        "candidate $candidate did not receive and replay the old primary's last WAL (its shutdown checkpoint, after $last) within ${role_wait}s; the old primary is stopped and takes over again"
    q "$candidate" "SELECT pg_last_wal_replay_lsn()" || refuse "candidate $candidate does not answer: $answer"
    log "candidate $candidate replayed the old primary's WAL to its end, $answer"
elif [ -n "$lease_file" ]; then
    # 1c. Whatever the old primary answers or not, unless it answered in
    # recovery (asked above), its lease runs out before anything is
    # promoted.
    if [ "$answered" = "t" ]; then
        log "old primary $old answers, in recovery: nothing to fence"
    else
        [ -z "$old" ] || log "old primary $old: ${old_said:-unknown}; waiting until its lease has run out"
        left=$((started + lease_wait - $(date +%s)))
        if [ "$left" -gt 0 ]; then
            log "waiting ${left}s: LEASE_SECONDS + LEASE_CHECK_SECONDS + LEASE_MARGIN + 1 since this Job started"
            sleep "$left"
        fi
        # The lease is what fences; this asks once more, briefly: a hung
        # old primary costs no more.
        waiting="$timeout" timeout=2
        if [ -n "$old" ] && q "$old" "SELECT pg_is_in_recovery()"; then
            [ "$answer" = "t" ] || refuse "old primary $old still answers as a primary after its lease ran out"
        fi
        timeout="$waiting"
        log "the old primary's lease has run out: it takes no write"
    fi
elif [ -n "$old" ] && q "$old" "SELECT pg_is_in_recovery()"; then
    [ "$answer" = "t" ] || refuse "old primary $old still answers as a primary"
    log "old primary $old answers, in recovery"
elif [ -n "$old" ]; then
    # Only a connection that never reached a server counts as lost: one
    # refused by TLS, by authentication, or cut by what answered is a
    # server that may still take writes.
    unreached || refuse "old primary $old answers but could not be asked whether it is a primary ($answer): it may still take writes; nothing was promoted"
    log "old primary $old does not answer: $answer"
fi

check_position

# 4. Promote, and see it done.
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
record_epoch
reconnect_standbys
done_ok "promoted $candidate lsn=$mine"
