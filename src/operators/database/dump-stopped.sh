#!/bin/sh
# opshooks database, upgrade Job init container, in the OLD version's image
# while every instance is stopped: starts the old cluster on a private
# socket only (no client can reach it), dumps the application database to
# $DUMP and stops it again. Dumping a stopped database is what makes the
# restore complete: nothing can be written after the dump began.
#
# The old data is opened read-write only as PostgreSQL itself does on
# start (crash recovery if the last stop was unclean); nothing else changes.
# Values: OLD_PGDATA, DUMP, PGDATABASE (the application database, read by
# pg_dump from the environment, so any name is just a name).
set -eu
if [ ! -s "$OLD_PGDATA/PG_VERSION" ]; then
    printf 'dump: no cluster in %s; refusing to continue\n' "$OLD_PGDATA" >&2
    exit 1
fi
socket="$(mktemp -d)"
# The port is fixed here too, whatever the old postgresql.conf says.
pg_ctl -D "$OLD_PGDATA" -o "-c listen_addresses='' -c port=5432 -k $socket" -w -t 3600 start
stop() { pg_ctl -D "$OLD_PGDATA" -m fast -w stop >/dev/null 2>&1 || true; }
trap 'stop; rm -f "$DUMP.tmp"' EXIT
rm -f "$DUMP.tmp"
pg_dump -h "$socket" -p 5432 -U postgres --format=custom --no-password --file "$DUMP.tmp"
stop
trap - EXIT
mv "$DUMP.tmp" "$DUMP"
printf 'dump: %s dumped from the stopped cluster in %s\n' "$PGDATABASE" "$OLD_PGDATA"
