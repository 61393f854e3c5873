#!/bin/sh
# opshooks database, the command of every instance's postgres container:
# `/bin/sh -c <this text> start docker-entrypoint.sh postgres -c ...`. It
# prepares the data directory for the role the instance has now, then
# execs its arguments (the image's entrypoint and the server). It runs on
# every start of the container, so a restart re-judges the role.
#
# The role is a decision of the hook, read from a mounted ConfigMap
# ($ROLE_DIR, default /etc/opshooks/role): `primary` names the pod of the
# designated primary, `initialized` is "true" once the Database was ever
# initialized, `epoch` counts the changes of primary (logged only).
#
# * The designated primary starts what its volume holds. It refuses (exit 1,
#   a termination message beginning `opshooks: `, which the hook reads)
#   when the newest complete cluster on the volume is another major's, or
#   when its data directory is empty although the Database was initialized:
#   initializing a new, empty cluster there would serve it in place of the
#   data the standbys hold; a standby takes over instead. A standby that
#   was designated but not yet promoted starts as a standby: only the
#   promote Job promotes.
# * Re-created over retained volumes, the role may be lost: every start
#   records the role's epoch, primary and Database uid beside the data
#   directories (`opshooks-epoch`; promote.sh records the epoch it promoted
#   at); data that saw a later epoch than the role's, or the same epoch of
#   another Database, does not start, rewind or get rewound, and says what
#   it holds (`opshooks: holds epoch=<e> primary=<pod> database=<uid>
#   timeline=<t> lsn=<position>: ...`): the hook designates the newest.
#   No instance is ever rewound onto a primary on an older timeline than
#   its own newest.
# * Any other instance never starts as a primary. An empty data directory
#   (or an unfinished clone) is cloned from the read-write Service
#   ($RW_HOST:$RW_PORT, which selects the designated primary) with
#   pg_basebackup once that answers as a primary; a standby streams from the
#   Service, so it follows a new primary by itself (one whose last
#   checkpoint is on another timeline than the primary answering now is
#   first rewound onto the primary's, or refused); a former primary is
#   rewound onto the new primary's timeline with pg_rewind and becomes a
#   standby, or, when the rewind fails, is moved aside to $PGDATA.diverged
#   (one copy at most) and cloned afresh.
#
# * Recovering from an archive (RECOVERY_FROM_ARCHIVE, the source's
#   folder): the designated primary of a Database never initialized replays
#   the base backup its init container fetched (pitr-replay.sh, from
#   ARCHIVE_SCRIPTS) before it starts, and never initializes an empty one.
#
# Other values: HOSTNAME (the pod's name), PGDATA, REPLICATION_PASSWORD
# (role replicator), POSTGRES_PASSWORD (the superuser pg_rewind connects
# as), TERMINATION_LOG (default /dev/termination-log), RW_SSLMODE and
# RW_SSLROOTCERT (libpq's sslmode and sslrootcert for every connection to
# the read-write Service, primary_conninfo's too; not exported to the
# server, whose own connections they are not for). Every value is data:
# connections take them from libpq's environment variables, and the one
# value written to a file (primary_conninfo) is quoted for both the
# connection string and the configuration file.
set -eu
say() { printf 'start: %s\n' "$*" >&2; }
refuse() {
    say "$1"
    # Kubernetes shows this in the pod's status, where the hook reads it.
    printf 'opshooks: %s\n' "$(printf '%s' "$1" | tr '\n\r' '  ')" 2>/dev/null \
        >"${TERMINATION_LOG:-/dev/termination-log}" || true
    exit 1
}

# shellcheck disable=SC3028 # the container runtime sets HOSTNAME to the pod's name
me="${HOSTNAME:-}"
role_dir="${ROLE_DIR:-/etc/opshooks/role}"
rw_host="${RW_HOST:-}"
rw_port="${RW_PORT:-5432}"
[ -n "$me" ] || refuse "HOSTNAME is not set: cannot tell whether this instance is the primary"
[ -n "${PGDATA:-}" ] || refuse "PGDATA is not set"
initialized="$(cat "$role_dir/initialized" 2>/dev/null)" || initialized=""

# The lease ($LEASE_FILE, when set): one line `<seconds since boot> <epoch>
# <primary> <initialized>`, rewritten atomically by the pod's lease sidecar each time it
# read the role ConfigMap from the API server (not through the kubelet's
# mount, which lags a minute and never changes while the node is cut
# off). A lease at a newer epoch than the mount overrides it. A primary
# serves only while the lease names it and is at most LEASE_SECONDS
# (default 10) old: start.sh waits for such a lease before starting one,
# and the watchdog below stops one whose lease expired or names another
# pod that answers as a primary. Seconds since boot (/proc/uptime) are the node's, shared by the
# pod's containers, and neither a wall-clock step nor a pause stops them.
lease_file="${LEASE_FILE:-}"
lease_seconds="${LEASE_SECONDS:-10}"
case "$lease_seconds" in '' | *[!0-9]*) refuse "LEASE_SECONDS is '$lease_seconds', not a number of seconds" ;; esac
now_s() { read -r up _ </proc/uptime && printf '%s\n' "${up%.*}"; }
# read_lease: $lease_at $lease_epoch $lease_primary $lease_initialized, or
# false.
read_lease() {
    [ -n "$lease_file" ] && read -r lease_at lease_epoch lease_primary lease_initialized 2>/dev/null <"$lease_file" || return 1
    case "$lease_at$lease_epoch" in '' | *[!0-9]*) return 1 ;; esac
    [ -n "$lease_primary" ]
}
# read_role: the designated $primary and $epoch, from the mount, or from
# the lease when it is at the same or a newer epoch ($from_lease says so).
read_role() {
    primary="$(cat "$role_dir/primary" 2>/dev/null)" || primary=""
    epoch="$(cat "$role_dir/epoch" 2>/dev/null)" || epoch="?"
    from_lease=""
    read_lease || return 0
    case "$epoch" in
        '' | *[!0-9]*) newer=true ;;
        *) newer="$([ "$lease_epoch" -ge "$epoch" ] && echo true || echo false)" ;;
    esac
    # The epoch too: a switchover back to the pod the stale mount names
    # is a newer designation, and data that recorded an epoch between the
    # two must not take the mount's for a lost role.
    if [ "$newer" = true ] && { [ "$lease_primary" != "$primary" ] || [ "$lease_epoch" != "$epoch" ]; }; then
        from_lease="the lease (epoch $lease_epoch) names $lease_primary, the mounted role (epoch $epoch) ${primary:-nobody}: the lease is newer"
        primary="$lease_primary" epoch="$lease_epoch"
    fi
}
read_role
[ -n "$primary" ] || refuse "no designated primary in $role_dir/primary: not starting without a role"
[ -z "$from_lease" ] || say "$from_lease"
say "instance $me; designated primary $primary (epoch $epoch); data directory $PGDATA"

# await_fresh_lease WHY: once the lease is at most LEASE_SECONDS old,
# with $lease_* read from it, however long that takes (logging WHY every
# 10 s): an instance cut off from the API server decides nothing.
await_fresh_lease() {
    waited=0
    until read_lease && [ "$(($(now_s) - lease_at))" -le "$lease_seconds" ]; do
        [ $((waited % 10)) -ne 0 ] ||
            say "waiting for a lease younger than ${lease_seconds}s in $lease_file $1"
        sleep 1
        waited=$((waited + 1))
    done
}

# Before a primary starts: a fresh lease naming this pod.
await_lease() {
    [ -n "$lease_file" ] || return 0
    await_fresh_lease "naming $me"
    [ "$lease_primary" = "$me" ] ||
        refuse "the lease (epoch $lease_epoch) names $lease_primary: not starting as the primary"
}

# never_initialized: before an empty data directory is initialized, the
# API server's word that the Database never was (a fresh lease's; the
# mount's without a lease). The mount lags a minute: a primary whose
# volume is lost within a minute of the init Job's success, or that
# started before it, still reads `false` there, and would initialize an
# empty cluster in place of the data its standbys hold.
never_initialized() {
    [ -n "$lease_file" ] || return 0
    await_fresh_lease "to confirm the Database was never initialized"
    case "$lease_initialized" in
        false) ;;
        true) refuse "the data directory $PGDATA is empty although the Database was initialized (the lease says so; the mounted role, older, does not): nothing is initialized over lost data; a standby must take over" ;;
        *) refuse "the lease says initialized='$lease_initialized': not initializing $PGDATA on a guess" ;;
    esac
}

# answers_as_primary POD: true when POD answers as a primary at its
# address: the mounted `host` (the hook's `<pod>.<headless Service>...`),
# with POD's name in place of the mounted primary's when the lease named a
# newer one (as probe.sh finds it). At most a second: the watchdog's
# checks must keep their pace.
answers_as_primary() {
    at="$(cat "$role_dir/host" 2>/dev/null)" || return 1
    named="$(cat "$role_dir/primary" 2>/dev/null)" || return 1
    if [ "$1" != "$named" ]; then
        case "$at" in "$named".?*) at="$1.${at#"$named".}" ;; *) return 1 ;; esac
    fi
    case "$at" in *:*) at_port="${at##*:}" at="${at%:*}" ;; *) at_port=5432 ;; esac
    [ "$(PGHOST="$at" PGPORT="$at_port" PGUSER=postgres PGDATABASE=postgres PGPASSWORD="${POSTGRES_PASSWORD:-}" \
        timeout 1 psql -X -q -A -t --no-password -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = "f" ]
}

# The watchdog, beside the server this script execs (same pid, $$): each
# LEASE_CHECK_SECONDS (default 1), when the server runs as a primary (no
# standby.signal, its postmaster.pid names $$), it stops the server
# (SIGINT, a fast shutdown; SIGQUIT, immediate, 5 s later) once the lease
# is older than LEASE_SECONDS, or names another pod that answers as a
# primary (not one in recovery: see below). A pause shows as a
# loop that took longer than it slept (logged); the lease's age, in
# seconds since boot, counts the pause. It exits 0 (the postmaster reaps
# it like a backend: another status would restart every session) and
# ignores the signals a shell passes on.
start_watchdog() {
    [ -n "$lease_file" ] || return 0
    every="${LEASE_CHECK_SECONDS:-1}"
    case "$every" in '' | *[!0-9]* | 0) every=1 ;; esac
    server=$$
    (
        trap '' INT TERM HUP QUIT
        last="$(now_s)"
        say "watchdog: watching the lease of server $server every ${every}s"
        while kill -0 "$server" 2>/dev/null; do
            sleep "$every"
            now="$(now_s)"
            [ $((now - last)) -le $((every + 2)) ] || say "watchdog: $((now - last))s since the last check (paused?)"
            last="$now"
            [ ! -e "$PGDATA/standby.signal" ] || continue
            read -r pid 2>/dev/null <"$PGDATA/postmaster.pid" || continue
            [ "$pid" = "$server" ] || continue
            # A fresh lease that names another pod does not stop it while
            # that pod is in recovery: a planned switchover names the
            # candidate before the promote Job checks it and stops this
            # server itself (or refuses, nothing stopped), and a failover's
            # Job refuses while this server answers as a primary. What
            # stops it is a lease it cannot renew, or the pod the lease
            # names answering as a primary (promoted while this server was
            # starting again, unseen by the Job: two primaries otherwise
            # until the liveness probe restarts it, a minute later).
            if ! read_lease; then
                why="no readable lease in $lease_file"
            elif [ $((now - lease_at)) -gt "$lease_seconds" ]; then
                why="the lease is $((now - lease_at))s old, more than LEASE_SECONDS=$lease_seconds"
            elif [ "$lease_primary" != "$me" ] && answers_as_primary "$lease_primary"; then
                why="the lease (epoch $lease_epoch) names $lease_primary, which answers as a primary"
            else
                continue
            fi
            kill -INT "$server" 2>/dev/null
            say "watchdog: $why: stopping the primary (fast shutdown)"
            n=0
            while kill -0 "$server" 2>/dev/null && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
            if kill -QUIT "$server" 2>/dev/null; then
                say "watchdog: still running after 5s: immediate shutdown"
            fi
            exit 0
        done
        say "watchdog: server $server gone"
        exit 0
    ) &
}

# wake_checkpointer: PostgreSQL 15 and later start the checkpointer before
# the server leaves recovery. Its first sleep, computed while recovery still
# ran, is a whole checkpoint_timeout (archive_timeout counts only out of
# recovery), and nothing wakes it when a clean start's recovery ends (a
# promotion's checkpoint request does): a primary
# started again forces no WAL switch for up to checkpoint_timeout (5 min by
# default), so a write is not archived within archive_timeout. Seen on 15.18
# and 18 (no switch in minutes with archive_timeout 2 s; after one SIGHUP,
# one every 2 s). A crash recovery's end-of-recovery checkpoint is taken
# while still in recovery, so it leaves the same long sleep. Once the
# server (same pid, $$) says in postmaster.pid that it is ready (its eighth
# line; a primary is ready out of recovery), this sends it one SIGHUP: a
# reload of the files it started with, which wakes the checkpointer. The
# file must be this server's: in a pod $$ is 1, and so is the pid in a
# postmaster.pid an unclean stop left behind, which may still say `ready`;
# its third line, the postmaster's start time, must not be older than
# this start. Then exits 0 (reaped as the watchdog is), or after 10
# minutes without a ready server.
wake_checkpointer() {
    server=$$
    since="$(date +%s)"
    (
        trap '' INT TERM HUP QUIT PIPE
        n=0
        while [ "$n" -lt 600 ] && kill -0 "$server" 2>/dev/null; do
            sleep 1
            n=$((n + 1))
            [ ! -e "$PGDATA/standby.signal" ] || exit 0
            # The pid, the start time and the status: three words, once
            # the server wrote them all.
            # shellcheck disable=SC2046 # split into those words on purpose
            set -- $(sed -n '1p;3p;8p' "$PGDATA/postmaster.pid" 2>/dev/null)
            [ "$#" -eq 3 ] || continue
            pid="$1" born="$2" status="$3"
            [ "$pid" = "$server" ] || continue
            case "$born" in '' | *[!0-9]*) continue ;; esac
            [ "$born" -ge "$since" ] || continue
            [ "$status" = ready ] || continue
            kill -HUP "$server" 2>/dev/null && say "the server is ready: reloaded once, so that its checkpointer keeps archive_timeout"
            exit 0
        done
        exit 0
    ) &
}

# A data directory holds a cluster once it has PG_VERSION and no
# backup_label: pg_basebackup writes backup_label first and PG_VERSION among
# the first files, and the server renames backup_label when it first
# starts. (pg_rewind writes one too: a rewound instance that dies before its
# first start is cloned afresh, which is always correct for a standby.)
holds_cluster() { [ -s "$PGDATA/PG_VERSION" ] && [ ! -e "$PGDATA/backup_label" ]; }

# TLS to the read-write Service, for this script's clients.
if [ -n "${RW_SSLMODE:-}" ]; then export PGSSLMODE="$RW_SSLMODE"; fi
if [ -n "${RW_SSLROOTCERT:-}" ]; then export PGSSLROOTCERT="$RW_SSLROOTCERT"; fi

# primary_conninfo's line for postgresql.auto.conf, from the environment
# (CI_HOST, CI_PORT, CI_PASSWORD, CI_NAME, and RW_SSLMODE and
# RW_SSLROOTCERT when set): each value quoted for a libpq
# connection string (\ and ' escaped by \), then the whole quoted for the
# configuration file (\ doubled, ' doubled, a newline as \n, which its
# parser turns back). awk reads ENVIRON byte by byte: every byte is data.
conninfo_line() {
    awk 'BEGIN {
        n = split("host port user password application_name target_session_attrs connect_timeout", keys, " ")
        values[1] = ENVIRON["CI_HOST"]; values[2] = ENVIRON["CI_PORT"]
        values[3] = "replicator"; values[4] = ENVIRON["CI_PASSWORD"]; values[5] = ENVIRON["CI_NAME"]
        values[6] = "read-write"; values[7] = "5"
        if (ENVIRON["RW_SSLMODE"] != "") { n++; keys[n] = "sslmode"; values[n] = ENVIRON["RW_SSLMODE"] }
        if (ENVIRON["RW_SSLROOTCERT"] != "") { n++; keys[n] = "sslrootcert"; values[n] = ENVIRON["RW_SSLROOTCERT"] }
        out = ""
        for (k = 1; k <= n; k++) {
            v = values[k]; q = "\047"
            for (i = 1; i <= length(v); i++) {
                c = substr(v, i, 1)
                if (c == "\\" || c == "\047") q = q "\\"
                q = q c
            }
            out = out (k > 1 ? " " : "") keys[k] "=" q "\047"
        }
        conf = "\047"
        for (i = 1; i <= length(out); i++) {
            c = substr(out, i, 1)
            if (c == "\\") conf = conf "\\\\"
            else if (c == "\047") conf = conf "\047\047"
            else if (c == "\n") conf = conf "\\n"
            else if (c == "\r") conf = conf "\\r"
            else conf = conf c
        }
        print "primary_conninfo = " conf "\047"
    }'
}

# A standby streams from the read-write Service as replicator, from a
# server that is no standby (target_session_attrs=read-write: libpq reads
# the in_hot_standby and default_transaction_read_only a PostgreSQL 14+
# server reports, so it holds on a replication connection). Else a standby
# the Service selects before its promotion streams from itself, and that
# connection outlives the Service's next move. connect_timeout 5 does not
# bound the WAL receiver's own connection (it heeds none: a standby that
# reconnected while the Service still selected a hung primary waited for
# it until it came back, dbrealrto); it is the value promote.sh moves
# between 5 and 6 to make each other standby connect again after a
# promotion, which is what frees such a standby. Its
# primary_conninfo in postgresql.auto.conf (read after postgresql.conf, and
# the last line of a name wins) replaces every earlier one. The password is
# in it, as pg_basebackup -R writes it: the file is the server's own (0600
# in a 0700 directory), and the value is re-written at every start, so a
# changed password is taken up by a restart. (A passfile would be a second
# copy of the same secret on the same volume, and its format cannot hold
# every password.)
follow_rw() {
    auto="$PGDATA/postgresql.auto.conf"
    line="$(CI_HOST="$rw_host" CI_PORT="$rw_port" CI_PASSWORD="${REPLICATION_PASSWORD:-}" CI_NAME="$me" \
        conninfo_line)"
    {
        if [ -f "$auto" ]; then
            grep -v '^[[:space:]]*primary_conninfo[[:space:]]*=' "$auto" || true
        fi
        printf '%s\n' "$line"
    } >"$auto.opshooks"
    chmod 600 "$auto.opshooks"
    mv "$auto.opshooks" "$auto"
    touch "$PGDATA/standby.signal"
    say "standby of the read-write service $rw_host:$rw_port"
}

# True once the read-write Service answers as a primary: connected as
# $1 with password $2, pg_is_in_recovery() is false.
rw_is_primary() {
    answer="$(PGHOST="$rw_host" PGPORT="$rw_port" PGUSER="$1" PGPASSWORD="$2" PGDATABASE=postgres \
        PGCONNECT_TIMEOUT=5 psql -X -q -A -t --no-password -c 'SELECT pg_is_in_recovery()' 2>&1)" || {
        say "waiting for the primary at $rw_host:$rw_port: $(printf '%s' "$answer" | head -n 1)"
        return 1
    }
    [ "$answer" = "f" ] && return 0
    say "waiting for the primary at $rw_host:$rw_port: it answers, but is in recovery"
    return 1
}
# Waits until the read-write Service answers as a primary. Should this
# instance be designated meanwhile (the hook took back a failover that
# promoted nothing), it stops waiting: the restart starts it in its role.
# The role is read as at the start: the mount, or the lease when newer (a
# mount that still names this instance a minute after a failover is not a
# designation, and exiting on it would only restart this container in a
# loop until the kubelet updates the mount). In a subshell: the role this
# start runs under ($primary, $epoch, which record_epoch writes) stays.
wait_for_primary() {
    [ -n "$rw_host" ] || refuse "RW_HOST is not set: no primary to follow"
    until rw_is_primary "$1" "$2"; do
        now="$(read_role && printf '%s@%s' "$primary" "$epoch")"
        if [ "${now%@*}" = "$me" ]; then
            say "designated primary now (epoch ${now##*@}): restarting to start as the primary"
            exit 1
        fi
        sleep 2
    done
}

# A planned switchover stops writes on the old primary with ALTER SYSTEM
# (default_transaction_read_only, in postgresql.auto.conf, which a clone or
# a rewind may carry along): no instance starts with it, so a primary made
# later accepts writes.
unfence() {
    auto="$PGDATA/postgresql.auto.conf"
    [ -f "$auto" ] || return 0
    grep -q '^[[:space:]]*default_transaction_read_only[[:space:]]*=' "$auto" || return 0
    grep -v '^[[:space:]]*default_transaction_read_only[[:space:]]*=' "$auto" >"$auto.opshooks" || true
    chmod 600 "$auto.opshooks"
    mv "$auto.opshooks" "$auto"
    say "dropped the switchover's default_transaction_read_only from $auto"
}

# pg_rewind onto the primary at the read-write Service's timeline (nothing
# to do, and success, when this data stopped before the fork).
rewind() {
    # A primary just promoted writes its new timeline into its control
    # file only at its next checkpoint; before that pg_rewind would find
    # "the same timeline" and rewind nothing.
    PGHOST="$rw_host" PGPORT="$rw_port" PGUSER=postgres PGPASSWORD="${POSTGRES_PASSWORD:-}" \
        PGDATABASE=postgres PGCONNECT_TIMEOUT=10 psql -X -q --no-password -c CHECKPOINT >&2 ||
        say "could not ask the primary for a checkpoint; rewinding all the same"
    PGHOST="$rw_host" PGPORT="$rw_port" PGUSER=postgres PGPASSWORD="${POSTGRES_PASSWORD:-}" \
        PGCONNECT_TIMEOUT=10 pg_rewind --target-pgdata="$PGDATA" --source-server="dbname=postgres" \
        --progress >&2
}

# The primary's timeline, by the WAL it writes now (its latest checkpoint
# still names the old timeline until the first checkpoint after a
# promotion); empty when no primary answers at the read-write Service.
primary_timeline() {
    PGHOST="$rw_host" PGPORT="$rw_port" PGUSER=postgres PGPASSWORD="${POSTGRES_PASSWORD:-}" \
        PGDATABASE=postgres PGCONNECT_TIMEOUT=5 psql -X -q -A -t --no-password \
        -c "SELECT CASE WHEN pg_is_in_recovery() THEN '' ELSE
            (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int)::text END" \
        2>/dev/null
}
# Refuses to be rewound onto a primary on an older timeline ($1) than this
# data's newest: that would throw away the newer timeline's commits.
newer_than() {
    case "$1" in '' | *[!0-9]*) return 0 ;; esac
    newest_timeline
    case "${tli:-}" in '' | *[!0-9]*) return 0 ;; esac
    [ "$tli" -gt "$1" ] || return 0
    refuse "$(holdings): this data is on timeline $tli, newer than the primary's $1: never rewound onto older data; designate the newest data or re-clone this instance"
}

# pg_rewind finishes an unclean shutdown itself, in single-user mode with
# postgresql.conf's settings only: not the server's `-c` options, so
# wal_log_hints (which pg_rewind then checks) goes off, and the checkpoints
# of that recovery recycle the WAL before it (wal_keep_size 0), where
# pg_rewind looks for the last checkpoint the two timelines share; and a
# single-user server refuses standby mode, so a standby killed mid-stream
# could never be rewound. Crash recovery runs here first, keeping both,
# without standby.signal (a plain crash recovery: no new timeline), which
# follow_rw writes again once rewound.
finish_unclean_shutdown() {
    state="$(LC_ALL=C pg_controldata "$PGDATA" 2>/dev/null | sed -n 's/^Database cluster state: *//p')" || state=""
    case "$state" in
        "shut down" | "shut down in recovery") return 0 ;;
    esac
    say "finishing the unclean shutdown ($state) in single-user mode"
    rm -f "$PGDATA/standby.signal"
    postgres --single -D "$PGDATA" -c wal_log_hints=on -c wal_keep_size=1000000 template1 </dev/null >&2 || true
}

# A standby that replayed WAL past the point where the primary's timeline
# forked from its own (an old primary's last records, streamed after
# another standby was promoted) would start as it is and never follow the
# primary. When the primary answers now on another timeline than this
# standby's last checkpoint, the standby is rewound onto it; when that
# fails it does not start (its message says how to clone it afresh). A
# primary that does not answer leaves the standby to start as it is.
rejoin_timeline() {
    [ -n "$rw_host" ] || return 0
    theirs="$(primary_timeline)" || theirs=""
    [ -n "$theirs" ] || return 0
    ours="$(LC_ALL=C pg_controldata "$PGDATA" 2>/dev/null | sed -n "s/^Latest checkpoint's TimeLineID: *//p")" || ours=""
    newer_than "$theirs"
    [ "$ours" != "$theirs" ] || return 0
    say "the primary is on timeline $theirs, this standby's last checkpoint on timeline ${ours:-?}: rewinding it onto the primary's"
    finish_unclean_shutdown
    rewind ||
        refuse "this standby is on timeline ${ours:-?} and the primary on $theirs, and pg_rewind could not bring it over: it may hold WAL past the fork; re-clone it (delete its claim and pod, never the primary's)"
    say "on the primary's timeline $theirs"
}

clone() {
    wait_for_primary replicator "${REPLICATION_PASSWORD:-}"
    rm -rf "$PGDATA"
    mkdir -p "$PGDATA"
    chmod 700 "$PGDATA"
    say "cloning the primary at $rw_host:$rw_port into $PGDATA"
    PGHOST="$rw_host" PGPORT="$rw_port" PGUSER=replicator PGPASSWORD="${REPLICATION_PASSWORD:-}" \
        pg_basebackup -D "$PGDATA" -X stream -R --checkpoint=fast --no-password
    say "cloned the primary into $PGDATA"
    follow_rw
}

# What this volume holds, for the hook to compare the instances when the
# role was lost: the highest role epoch it started under (or was promoted
# at: promote.sh), who was primary then and the Database's uid the role
# named (`opshooks-epoch` beside the data directories, which a clone or a
# rewind never copies, written from the first start on: `<epoch> <pod>
# <uid>`), the newest timeline of its WAL and the start of the last WAL
# record it holds there (pg_waldump reads to the end; the latest
# checkpoint when it cannot).
record="${PGDATA%/*}/opshooks-epoch"
database="$(cat "$role_dir/database" 2>/dev/null)" || database=""
recorded="$(head -n 1 "$record" 2>/dev/null)" || recorded=""
field() { printf '%s\n' "$recorded" | awk -v n="$1" '{ print $n }'; }
recorded_epoch="$(field 1)"
recorded_primary="$(field 2)"
recorded_database="$(field 3)"
case "$recorded_epoch" in '' | *[!0-9]*) recorded_epoch="" ;; esac
# The newest timeline of this data's WAL ($tli) and where to read it from
# ($from); the latest checkpoint's position ($lsn).
newest_timeline() {
    control="$(LC_ALL=C pg_controldata "$PGDATA" 2>/dev/null)" || control=""
    tli="$(printf '%s\n' "$control" | sed -n "s/^Latest checkpoint's TimeLineID: *//p")"
    from="$(printf '%s\n' "$control" | sed -n "s/^Latest checkpoint's REDO location: *//p")"
    lsn="$(printf '%s\n' "$control" | sed -n "s/^Latest checkpoint location: *//p")"
    # A timeline begun after that checkpoint (a promotion, or one a
    # standby followed) has its history file; it starts at the fork.
    for history in "$PGDATA"/pg_wal/*.history; do
        [ -f "$history" ] || continue
        hex="${history##*/}"
        hex="${hex%.history}"
        case "$hex" in '' | *[!0-9A-F]*) continue ;; esac
        if [ "$((0x$hex))" -gt "${tli:-0}" ]; then
            tli="$((0x$hex))"
            from="$(awk 'NF >= 2 && $1 ~ /^[0-9]+$/ { at = $2 } END { print at }' "$history")"
        fi
    done
}
holdings() {
    newest_timeline
    end="$(pg_waldump -q -p "$PGDATA/pg_wal" -t "${tli:-1}" -s "${from:-0/0}" 2>&1 |
        sed -n 's|.*error in WAL record at \([0-9A-F]*/[0-9A-F]*\).*|\1|p' | head -n 1)" || end=""
    printf 'holds epoch=%s primary=%s database=%s timeline=%s lsn=%s' "${recorded_epoch:--}" \
        "${recorded_primary:--}" "${recorded_database:--}" "${tli:-?}" "${end:-${lsn:-?}}"
}
# Records the role, when its epoch is higher than the recorded one or it
# is another Database's (a first start records before initdb).
record_epoch() {
    case "$epoch" in '' | *[!0-9]*) return 0 ;; esac
    if [ -n "$recorded_epoch" ] && [ "$epoch" -le "$recorded_epoch" ] && [ "$database" = "$recorded_database" ]; then
        return 0
    fi
    printf '%s %s %s\n' "$epoch" "$primary" "$database" >"$record.tmp"
    mv "$record.tmp" "$record"
}
# Data that saw a later epoch than the role's, or the same epoch of
# another Database (its uid): the role was lost (the Database re-created
# over retained volumes). Started as the role says, it could serve older
# data or be rewound onto it; it waits, saying what it holds, until the
# hook designates the newest data at an epoch above every one recorded.
if holds_cluster && [ -n "$recorded_epoch" ]; then
    case "$epoch" in
        '' | *[!0-9]*) lost=true ;;
        *)
            lost=false
            if [ "$recorded_epoch" -gt "$epoch" ]; then lost=true; fi
            if [ -n "$database" ] && [ -n "$recorded_database" ] && [ "$database" != "$recorded_database" ] &&
                [ "$recorded_epoch" -ge "$epoch" ]; then lost=true; fi
            ;;
    esac
    if [ "$lost" = true ]; then
        refuse "$(holdings): this data saw epoch $recorded_epoch (primary $recorded_primary, Database ${recorded_database:-?}), not before the role's epoch $epoch (Database ${database:-?}): the role was lost; not starting, rewinding or being rewound until the newest data is designated at a later epoch"
    fi
fi

# Data of another Database (created again over the retained volumes of an
# earlier one) keeps that Database's passwords, while this one's Secrets
# hold new ones: its promote Job, standbys, probes and init Job could never
# log in. Before a primary starts on such data, the superuser's and the
# replicator's passwords are set from this Database's Secrets (the
# environment), as CloudNativePG's instance manager sets them from its
# Secrets: in single-user mode, through stdin (never an argument), as E''
# literals (\ and ' doubled, whatever standard_conforming_strings the data
# sets), with statement logging off for the session, in one implicit
# transaction whose last statement prints a marker: no marker, no start
# (single-user mode goes on after an error and exits 0). The standbys
# receive them by replication. The role's Database uid is recorded right
# after (record_epoch), so the next start of the same Database skips this.
other_database() {
    [ -n "$database" ] && [ "$database" != "$recorded_database" ]
}
sql_literal() {
    printf "E'%s'" "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/''/g")"
}
adopt_passwords() {
    other_database || return 0
    case "${POSTGRES_PASSWORD:-}${REPLICATION_PASSWORD:-}" in
        *"
"*) refuse "a password holds a line break: single-user mode cannot take it" ;;
    esac
    say "data of Database ${recorded_database:-?}, not this one ($database): setting the superuser's and the replicator's passwords from its Secrets"
    sql="SET log_statement = 'none'; SET log_min_error_statement = 'panic'; SET log_min_duration_statement = -1;"
    sql="$sql SET pg_stat_statements.track_utility = off;"
    [ -z "${POSTGRES_PASSWORD:-}" ] || sql="$sql ALTER ROLE postgres PASSWORD $(sql_literal "$POSTGRES_PASSWORD");"
    [ -z "${REPLICATION_PASSWORD:-}" ] || sql="$sql ALTER ROLE replicator PASSWORD $(sql_literal "$REPLICATION_PASSWORD");"
    out="$(printf '%s SELECT %s;\n' "$sql" "'opshooks-adopted'" |
        postgres --single -D "$PGDATA" -c log_statement=none -c log_min_duration_statement=-1 \
            -c log_min_error_statement=panic -c wal_log_hints=on -c wal_keep_size=1000000 template1)" || out=""
    case "$out" in
        *opshooks-adopted*) say "the passwords are this Database's" ;;
        *) refuse "could not set this Database's passwords on the data of Database ${recorded_database:-?} (single-user mode failed; its log is above)" ;;
    esac
}

if [ "$primary" = "$me" ]; then
    # The primary's volume may hold data already: its own, or that of an
    # earlier Database of the same name whose volumes were retained. Each
    # major lives in pg<major> beside $PGDATA. The data is complete in the
    # oldest (made by the first start) and in every newer one an upgrade
    # finished (its marker); a newer one without the marker is a failed
    # upgrade's. The newest complete one must be this major's: anything
    # else would start an empty cluster beside the data, or serve an older
    # copy of it.
    mine="${PGDATA##*/pg}"
    oldest=""
    newest=""
    for version_file in "${PGDATA%/*}"/pg*/PG_VERSION; do
        [ -s "$version_file" ] || continue
        dir="${version_file%/PG_VERSION}"
        major="${dir##*/pg}"
        case "$major" in '' | *[!0-9]*) continue ;; esac
        if [ -z "$oldest" ] || [ "$major" -lt "$oldest" ]; then oldest="$major"; fi
    done
    for version_file in "${PGDATA%/*}"/pg*/PG_VERSION; do
        [ -s "$version_file" ] || continue
        dir="${version_file%/PG_VERSION}"
        major="${dir##*/pg}"
        case "$major" in '' | *[!0-9]*) continue ;; esac
        if [ "$major" = "$oldest" ] || [ -f "$dir/.opshooks-upgrade-complete" ]; then
            if [ -z "$newest" ] || [ "$major" -gt "$newest" ]; then newest="$major"; fi
        fi
    done
    case "$mine" in '' | *[!0-9]*) newest="" ;; esac
    if [ -n "$newest" ] && [ "$newest" != "$mine" ]; then
        refuse "volume holds PostgreSQL $newest data (pg$newest), not $mine: nothing is initialized or served beside it"
    fi
    # A point-in-time recovery (RECOVERY_FROM_ARCHIVE): the pod's init
    # container (pitr-fetch.sh) put a base backup into the empty data
    # directory of a Database never initialized; pitr-replay.sh replays
    # the archive over it, up to its target, and promotes, before this
    # starts it as the primary (taking this Database's passwords). Never
    # once the Database was initialized: that is the unfinished clone
    # refused below.
    if [ -n "${RECOVERY_FROM_ARCHIVE:-}" ] && [ "$initialized" = false ] && [ ! -e "$PGDATA/standby.signal" ] &&
        { [ -e "$PGDATA/backup_label" ] || [ -e "$PGDATA/recovery.signal" ]; }; then
        never_initialized
        await_lease
        say "recovering $PGDATA from the archive $RECOVERY_FROM_ARCHIVE"
        report="$(mktemp)"
        if ! TERMINATION_LOG="$report" sh "${ARCHIVE_SCRIPTS:-/etc/opshooks/archive}/pitr-replay.sh"; then
            line="$(head -n 1 "$report")"
            refuse "the recovery from the archive $RECOVERY_FROM_ARCHIVE did not finish: ${line#opshooks }"
        fi
        say "$(head -n 1 "$report")"
        rm -f "$report"
    fi
    if [ ! -s "$PGDATA/PG_VERSION" ]; then
        case "$initialized" in
            false)
                [ -z "${RECOVERY_FROM_ARCHIVE:-}" ] ||
                    refuse "the data directory $PGDATA is empty and this Database recovers from the archive $RECOVERY_FROM_ARCHIVE: its init container fetches the base backup (its message says why it did not); nothing is initialized in its place"
                never_initialized
                say "the designated primary's first start: the entrypoint initializes $PGDATA"
                ;;
            true) refuse "the data directory $PGDATA is empty although the Database was initialized: nothing is initialized over lost data; a standby must take over" ;;
            *) refuse "cannot read whether the Database was initialized ($role_dir/initialized): not initializing $PGDATA on a guess" ;;
        esac
    elif [ -e "$PGDATA/standby.signal" ] && [ ! -e "$PGDATA/backup_label" ] && other_database &&
        [ -n "$recorded_database" ]; then
        # Created again over retained volumes, and the newest data is a
        # standby's: no primary of this Database exists yet (every
        # instance waited for this designation), and as a standby it
        # could not take the new passwords, so the promote Job could
        # never log in. It starts as the primary on its own timeline.
        say "designated primary on the data of Database $recorded_database, a standby's: no primary of this Database exists yet; starting it as the primary"
        rm -f "$PGDATA/standby.signal"
    elif [ -e "$PGDATA/standby.signal" ]; then
        # Designated, not yet promoted: the promote Job promotes it.
        say "designated primary, still a standby: starting it as one until it is promoted"
        follow_rw
    elif [ -e "$PGDATA/backup_label" ]; then
        refuse "the data directory $PGDATA holds an unfinished clone: it cannot serve as the primary; a standby must take over"
    else
        say "the primary: starting $PGDATA as it is"
    fi
    if [ -s "$PGDATA/PG_VERSION" ]; then
        unfence
        # A primary on another Database's data takes this one's passwords.
        [ -e "$PGDATA/standby.signal" ] || adopt_passwords
    fi
    record_epoch
    [ -e "$PGDATA/standby.signal" ] || await_lease
    unset PGSSLMODE PGSSLROOTCERT
    start_watchdog
    [ -e "$PGDATA/standby.signal" ] || wake_checkpointer
    exec "$@"
fi

# Not the designated primary: never starts as one.
if ! holds_cluster; then
    say "no finished cluster in $PGDATA: cloning it"
    clone
elif [ -e "$PGDATA/standby.signal" ]; then
    say "a standby: starting it as it is"
    rejoin_timeline
    follow_rw
else
    # A former primary: its timeline may hold commits the new primary never
    # received. It rejoins on the new primary's timeline, or not at all.
    say "a former primary: rewinding it onto the primary at $rw_host:$rw_port"
    wait_for_primary postgres "${POSTGRES_PASSWORD:-}"
    newer_than "$(primary_timeline)"
    finish_unclean_shutdown
    if rewind; then
        say "rewound $PGDATA onto the primary's timeline"
        follow_rw
    else
        say "pg_rewind failed: moving $PGDATA aside to $PGDATA.diverged and cloning afresh"
        rm -rf "$PGDATA.diverged"
        mv "$PGDATA" "$PGDATA.diverged"
        clone
    fi
fi
unfence
record_epoch
unset PGSSLMODE PGSSLROOTCERT
start_watchdog
exec "$@"
