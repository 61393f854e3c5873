#!/bin/sh
# The official postgres image's entrypoint, as far as the process node
# (tests/e2e/procnode.py) needs it: its documented behaviour, minimally.
#
#   docker-entrypoint.sh postgres [ARGS...]
#
# When $PGDATA holds no cluster (no PG_VERSION): creates it (0700), runs
# initdb as $POSTGRES_USER (default postgres) with $POSTGRES_PASSWORD and
# $POSTGRES_INITDB_ARGS, sets listen_addresses = '*' (the image's
# postgresql.conf.sample does), appends `host all all all
# $POSTGRES_HOST_AUTH_METHOD` (default scram-sha-256) to pg_hba.conf, starts
# a temporary server with the same arguments on its Unix socket only,
# creates $POSTGRES_DB when it is not `postgres`, runs every
# /docker-entrypoint-initdb.d file in name order (*.sh: executed when
# executable, else sourced; *.sql: psql), and stops it. Then, in every
# case, execs its arguments. Not done: running as root and dropping to
# postgres (the pods here already run as their user), *.sql.gz and the
# like, POSTGRES_INITDB_WALDIR.
set -eu
if [ "${1#-}" != "$1" ]; then set -- postgres "$@"; fi

if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_USER:=postgres}"
    : "${POSTGRES_DB:=$POSTGRES_USER}"
    : "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
    export POSTGRES_USER POSTGRES_DB
    if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
        echo "Error: Database is uninitialized and superuser password is not specified." >&2
        exit 1
    fi
    mkdir -p "$PGDATA"
    chmod 700 "$PGDATA"
    pwfile="$(mktemp)"
    printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
    # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of words, as the image splits it
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" ${POSTGRES_INITDB_ARGS:-}
    rm -f "$pwfile"
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"

    shift
    # The same arguments, on the socket only, as the image's
    # docker_temp_server_start does.
    options=""
    for a in "$@"; do options="$options '$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'"; done
    PGUSER="$POSTGRES_USER" pg_ctl -D "$PGDATA" -o "$options -c listen_addresses='' -p ${PGPORT:-5432}" -w start
    export PGPASSWORD="${POSTGRES_PASSWORD:-}"
    if [ "$POSTGRES_DB" != postgres ]; then
        psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc --dbname postgres \
            -c "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        [ -e "$f" ] || continue
        case "$f" in
            *.sh)
                if [ -x "$f" ]; then
                    echo "$0: running $f"
                    "$f"
                else
                    echo "$0: sourcing $f"
                    # shellcheck disable=SC1090
                    . "$f"
                fi
                ;;
            *.sql)
                echo "$0: running $f"
                psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc --dbname "$POSTGRES_DB" -f "$f"
                ;;
            *) echo "$0: ignoring $f" ;;
        esac
    done
    PGUSER="$POSTGRES_USER" pg_ctl -D "$PGDATA" -m fast -w stop
    unset PGPASSWORD
    echo
    echo 'PostgreSQL init process complete; ready for start up.'
    echo
    set -- postgres "$@"
fi
exec "$@"
