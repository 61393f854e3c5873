#!/bin/sh
# opshooks database, the postgres container's probes: `probe.sh live` and
# `probe.sh ready` (exec probes, `/bin/sh -c <this text> probe <ready|live>`).
#
# live:  the local server answers (pg_isready on 127.0.0.1), and it is not
#        a fenced former primary: a server that answers as a primary while
#        the role ConfigMap ($ROLE_DIR/primary, or the lease when it is
#        newer) names another pod fails, so the kubelet restarts the
#        container and start.sh rejoins it as a standby. Unless the pod the
#        mount names answers, at its address ($ROLE_DIR/host, host[:port];
#        for a newer primary the lease names, that host with the pod's name
#        in place of the mounted one's), in recovery: it is not promoted
#        yet, so this server is still the
#        only primary (a switchover under way, which the promote Job ends
#        by stopping this server, or refuses with nothing stopped; a
#        failover whose old primary came back, which the promote Job
#        refuses). Fencing it then would only turn a refused switchover
#        into a failover. One that does not answer, or answers as a
#        primary, fences it. A standby whose WAL
#        receiver does not stream while the primary (at the read-write
#        Service) is on a newer timeline than its last checkpoint fails too:
#        it may have replayed past the fork, and its restart rewinds it onto
#        the primary's timeline.
# ready: live's checks; then, on a standby:
#        * with MAX_SILENCE_SECONDS set, a standby that has not been current
#          with a primary for longer than that is not ready (it says since
#          when): its data may be that old, and it is no failover candidate;
#        * a standby whose replay position is more than MAX_LAG_BYTES (when
#          set) behind the primary's current WAL position is not ready, so
#          it leaves the read-only endpoints. The primary is asked through
#          the read-write Service ($RW_HOST:$RW_PORT); one that does not
#          answer (or answers in recovery) leaves this lag unjudged, and
#          the silence above decides.
#
# Every probe of a standby (live or ready) records when it was last current
# with a primary: when its WAL receiver streams, the read-write Service
# answers as a primary, and the WAL it received is at most MAX_LAG_BYTES
# (16 MiB when not set) behind that primary's current position, the server
# writes `<its clock, epoch seconds> <primary's lsn> <received lsn>` into
# `opshooks-current` in its data directory (COPY, as the server's user).
# promote.sh reads that record on the candidate: the loss bound is checked
# against what the old primary had, not only against other standbys.
#
# Local SQL goes over TCP to 127.0.0.1 (port PGPORT, default 5432) as
# postgres with POSTGRES_PASSWORD. Each connection gives up after 2 s, so
# the probe's timeoutSeconds must allow some 5 s.
set -u
what="${1:-}"
case "$what" in
    ready | live) ;;
    *) echo "probe: usage: probe.sh ready|live" >&2; exit 2 ;;
esac
# shellcheck disable=SC3028 # the container runtime sets HOSTNAME to the pod's name
me="${HOSTNAME:-}"
primary="$(cat "${ROLE_DIR:-/etc/opshooks/role}/primary" 2>/dev/null)" || primary=""
mounted="$primary"
epoch="$(cat "${ROLE_DIR:-/etc/opshooks/role}/epoch" 2>/dev/null)" || epoch=""
# The lease (LEASE_FILE, `<seconds since boot> <epoch> <primary> <initialized>`, see
# start.sh) names the primary at a newer epoch than the mount, which the
# kubelet updates a minute late: a promoted standby is the primary then.
if [ -n "${LEASE_FILE:-}" ] && read -r _ lease_epoch lease_primary _ 2>/dev/null <"$LEASE_FILE" && [ -n "$lease_primary" ]; then
    case "$lease_epoch:$epoch" in
        *[!0-9:]* | :*) ;;
        *:) primary="$lease_primary" ;;
        *) [ "$lease_epoch" -lt "$epoch" ] || primary="$lease_primary" ;;
    esac
fi

# local_sql SQL [psql arguments...]
local_sql() {
    sql="$1"
    shift
    printf '%s\n' "$sql" | PGHOST=127.0.0.1 PGUSER=postgres PGDATABASE=postgres PGPASSWORD="${POSTGRES_PASSWORD:-}" \
        PGCONNECT_TIMEOUT=2 psql -X -q -A -t -v ON_ERROR_STOP=1 --no-password "$@" 2>&1
}

if ! pg_isready -q -h 127.0.0.1 -t 2; then
    echo "probe: the server does not accept connections on 127.0.0.1"
    exit 1
fi
if ! recovery="$(local_sql 'SELECT pg_is_in_recovery()')"; then
    echo "probe: the server does not answer: $recovery"
    exit 1
fi
if [ "$recovery" = "f" ] && [ "$primary" != "$me" ]; then
    # Whether the designated primary is promoted yet, at the address the
    # mount gives for it. When the lease names a newer primary than the
    # mount, that pod answers at the same name with its own pod name first
    # (`<pod>.<headless Service>.<namespace>.svc`, as the hook writes
    # `host`); a mounted host of another form gives no address for it.
    host="$(cat "${ROLE_DIR:-/etc/opshooks/role}/host" 2>/dev/null)" || host=""
    if [ "$primary" != "$mounted" ]; then
        case "$host" in
            "$mounted".?*) host="$primary.${host#"$mounted".}" ;;
            *) host="" ;;
        esac
    fi
    designated=""
    if [ -n "$primary" ] && [ -n "$host" ]; then
        case "$host" in
            *:*) port="${host##*:}" host="${host%:*}" ;;
            *) port=5432 ;;
        esac
        designated="$(printf '%s\n' "SELECT pg_is_in_recovery()" | PGHOST="$host" PGPORT="$port" PGUSER=postgres \
            PGDATABASE=postgres PGPASSWORD="${POSTGRES_PASSWORD:-}" PGCONNECT_TIMEOUT=2 \
            psql -X -q -A -t -v ON_ERROR_STOP=1 --no-password 2>/dev/null)" || designated=""
    fi
    if [ "$designated" != "t" ]; then
        echo "probe: answers as a primary, but the designated primary is '$primary', not $me: fenced"
        exit 1
    fi
    echo "probe: answers as a primary; the designated primary '$primary' answers in recovery (not promoted yet): still the only primary"
    exit 0
fi
[ "$recovery" = "t" ] || exit 0

max="${MAX_LAG_BYTES:-}"
case "$max" in *[!0-9]*) echo "probe: MAX_LAG_BYTES is '$max', not a number of bytes"; exit 1 ;; esac
silence="${MAX_SILENCE_SECONDS:-}"
case "$silence" in *[!0-9]*) echo "probe: MAX_SILENCE_SECONDS is '$silence', not a number of seconds"; exit 1 ;; esac

# The primary's current position, through the read-write Service; empty
# when none answers as a primary.
head=""
if [ -n "${RW_HOST:-}" ]; then
    head="$(printf '%s\n' "SELECT CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_current_wal_lsn()::text || ' ' ||
            ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END" |
        PGHOST="$RW_HOST" PGPORT="${RW_PORT:-5432}" PGUSER=postgres PGDATABASE=postgres \
        PGPASSWORD="${POSTGRES_PASSWORD:-}" PGCONNECT_TIMEOUT=2 \
        psql -X -q -A -t -v ON_ERROR_STOP=1 --no-password 2>/dev/null)" || head=""
fi
# The primary's timeline, beside its position.
head_tl="${head#* }"
head="${head%% *}"
# Current with that primary: record it (the received position is read
# after the primary's, so a standby keeping up is never behind by more
# than what the primary wrote in between).
if [ -n "$head" ]; then
    recorded="$(local_sql "SELECT r.lsn FROM (SELECT pg_last_wal_receive_lsn() AS lsn) r, pg_stat_wal_receiver w
        WHERE w.status = 'streaming' AND pg_wal_lsn_diff(:'head', r.lsn) <= :bound" \
        -v "head=$head" -v "bound=${max:-16777216}")" || recorded=""
    if [ -n "$recorded" ]; then
        local_sql "SELECT current_setting('data_directory') || '/opshooks-current' AS file \\gset
COPY (SELECT extract(epoch FROM now())::bigint || ' ' || :'head' || ' ' || :'lsn') TO :'file'" \
            -v "head=$head" -v "lsn=$recorded" >/dev/null || true
    fi
fi
# A standby (never the primary: a promoted one's checkpoint stays on the
# old timeline until its first checkpoint ends) whose last checkpoint is on
# an older timeline than the primary's, and whose WAL receiver does not
# stream, may have replayed past the fork (a former primary's last WAL)
# and can never follow: not live, so the kubelet restarts it and start.sh
# rewinds it onto the primary's.
if [ -n "$head" ]; then
    stuck="$(local_sql "SELECT timeline_id FROM pg_control_checkpoint() WHERE timeline_id < :tl
        AND pg_is_in_recovery() AND NOT EXISTS (SELECT FROM pg_stat_wal_receiver WHERE status = 'streaming')" -v "tl=$head_tl")" || stuck=""
    if [ -n "$stuck" ]; then
        echo "probe: the primary is on timeline $head_tl, this standby's last checkpoint on timeline $stuck, and its WAL receiver does not stream: it may be past the fork; a restart rewinds it"
        exit 1
    fi
fi
[ "$what" = "ready" ] || exit 0

if [ -n "$silence" ]; then
    # Seconds since the record, by the server's own clock; empty: none.
    age="$(local_sql "SELECT extract(epoch FROM now())::bigint - split_part(r, ' ', 1)::bigint || ' ' || split_part(r, ' ', 3)
        FROM (SELECT btrim(pg_read_file('opshooks-current', 0, 200, true), E' \\n') AS r) f WHERE r <> ''")" || {
        echo "probe: cannot read when it was last current with a primary: $age"
        exit 1
    }
    if [ -z "$age" ]; then
        echo "probe: no record that this standby was ever current with a primary (received within ${max:-16777216} bytes of it): not ready"
        exit 1
    fi
    if [ "${age%% *}" -gt "$silence" ]; then
        echo "probe: last current with a primary ${age%% *}s ago (received up to ${age#* }), more than MAX_SILENCE_SECONDS=$silence: its data may be that old"
        exit 1
    fi
fi

[ -n "$max" ] || exit 0
if [ -z "$head" ]; then
    echo "probe: no primary answers at ${RW_HOST:-}: the lag is not judged"
    exit 0
fi
# What a read here sees: the replayed position.
lag="$(local_sql "SELECT greatest(pg_wal_lsn_diff(:'head', pg_last_wal_replay_lsn()), 0)::bigint" -v "head=$head")" || {
    echo "probe: cannot compute the lag: $lag"
    exit 1
}
case "$lag" in '' | *[!0-9]*) echo "probe: cannot read the lag from '$lag'"; exit 1 ;; esac
if [ "$lag" -gt "$max" ]; then
    echo "probe: $lag bytes behind the primary, more than $max"
    exit 1
fi
exit 0
