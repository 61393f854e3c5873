#!/bin/sh
# opshooks database, major-version upgrade Job. Runs in the NEW version's
# image while the database is stopped, with the primary's volume mounted and
# the old version dumped to $DUMP by the Job's init container.
#
# Builds the new version's cluster beside the old one: the old data in
# $OLD_PGDATA is only read, never changed, so a failed upgrade leaves the
# old version able to start as it was. Then restores the dump into it.
#
# Values: NEW_PGDATA, OLD_PGDATA, DUMP, POSTGRES_PASSWORD,
# REPLICATION_PASSWORD, APP_USER, APP_PASSWORD, APP_DATABASE.
set -eu
done_marker="$NEW_PGDATA/.opshooks-upgrade-complete"
if [ -f "$done_marker" ]; then
    echo "upgrade: $NEW_PGDATA is already complete"
    exit 0
fi
if [ ! -s "$OLD_PGDATA/PG_VERSION" ]; then
    echo "upgrade: no old cluster in $OLD_PGDATA; refusing to continue" >&2
    exit 1
fi
if [ ! -s "$DUMP" ]; then
    echo "upgrade: the pre-upgrade dump $DUMP is missing or empty" >&2
    exit 1
fi
# Only the new version's directory is ever removed: it is ours and incomplete.
rm -rf "$NEW_PGDATA"
mkdir -p "$NEW_PGDATA"
chmod 700 "$NEW_PGDATA"
pwfile="$(mktemp)"
printf '%s' "$POSTGRES_PASSWORD" >"$pwfile"
initdb -D "$NEW_PGDATA" --username=postgres --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256
rm -f "$pwfile"
{
    echo "host all all all scram-sha-256"
    echo "host replication replicator all scram-sha-256"
} >>"$NEW_PGDATA/pg_hba.conf"
echo "listen_addresses = '*'" >>"$NEW_PGDATA/postgresql.conf"
socket="$(mktemp -d)"
pg_ctl -D "$NEW_PGDATA" -o "-c listen_addresses='' -k $socket" -w start
stop() { pg_ctl -D "$NEW_PGDATA" -m fast -w stop >/dev/null 2>&1 || true; }
trap stop EXIT
psql -v ON_ERROR_STOP=1 -h "$socket" -U postgres --dbname postgres \
    -v repl_password="$REPLICATION_PASSWORD" -v app_user="$APP_USER" \
    -v app_password="$APP_PASSWORD" -v app_db="$APP_DATABASE" <<'SQL'
SELECT format('CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD %L', :'repl_password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'replicator')
\gexec
SELECT format('CREATE ROLE %I WITH LOGIN PASSWORD %L', :'app_user', :'app_password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'app_user')
\gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'app_db', :'app_user')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'app_db')
\gexec
SQL
# --dbname takes a value with "=" for a connection string: pass one, with
# the name quoted as libpq wants (backslash before ' and \).
dbname="dbname='$(printf '%s' "$APP_DATABASE" | sed "s/[\\\\']/\\\\&/g")'"
pg_restore -h "$socket" -U postgres --dbname "$dbname" --exit-on-error --no-password "$DUMP"
# A restored cluster has no planner statistics: gather them before serving.
vacuumdb -h "$socket" -U postgres --all --analyze-only --quiet
stop
trap - EXIT
touch "$done_marker"
echo "upgrade: $NEW_PGDATA restored from $DUMP"
