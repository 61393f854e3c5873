#!/bin/sh
# opshooks database, the postgres container's probes: `probe.sh live` and
# `probe.sh ready` (exec probes, `/bin/sh -c <this text> probe <ready|live>`).
#
# live:  the local server answers (pg_isready on 127.0.0.1), and it is not
#        a fenced former primary: a server that answers as a primary while
#        the role ConfigMap ($ROLE_DIR/primary) names another pod fails, so
#        the kubelet restarts the container and start.sh rejoins it as a
#        standby.
# ready: live's checks, and a standby whose replay position is more than
#        MAX_LAG_BYTES (when set) behind the primary's current WAL position
#        is not ready, so it leaves the read-only endpoints. The primary is
#        asked through the read-write Service ($RW_HOST:$RW_PORT); one that
#        does not answer (or answers in recovery) makes no standby unready:
#        that is when they are needed most.
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
    echo "probe: answers as a primary, but the designated primary is '$primary', not $me: fenced"
    exit 1
fi
[ "$what" = "ready" ] || exit 0
[ "$recovery" = "t" ] || exit 0
max="${MAX_LAG_BYTES:-}"
[ -n "$max" ] || exit 0
case "$max" in *[!0-9]*) echo "probe: MAX_LAG_BYTES is '$max', not a number of bytes"; exit 1 ;; esac
[ -n "${RW_HOST:-}" ] || exit 0

head="$(printf '%s\n' "SELECT CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_current_wal_lsn()::text END" |
    PGHOST="$RW_HOST" PGPORT="${RW_PORT:-5432}" PGUSER=postgres PGDATABASE=postgres \
    PGPASSWORD="${POSTGRES_PASSWORD:-}" PGCONNECT_TIMEOUT=2 \
    psql -X -q -A -t -v ON_ERROR_STOP=1 --no-password 2>/dev/null)" || head=""
if [ -z "$head" ]; then
    echo "probe: no primary answers at $RW_HOST: the lag is not judged"
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
