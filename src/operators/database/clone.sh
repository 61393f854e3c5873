#!/bin/sh
# opshooks database, init container of every instance. The first instance
# (ordinal 0) is the primary and initializes itself; every other instance,
# on its first start (an empty data directory), clones the primary with
# pg_basebackup and starts as a streaming standby (-R writes
# standby.signal and primary_conninfo).
#
# Values come from the environment: PGDATA, PRIMARY_HOST,
# REPLICATION_PASSWORD, PRIMARY_PORT (default 5432); the ordinal comes from
# the pod's hostname.
set -eu
# shellcheck disable=SC3028 # the container runtime sets HOSTNAME to the pod's name
host="$HOSTNAME"
ordinal="${host##*-}"
case "$ordinal" in
    '' | *[!0-9]*) echo "clone: cannot read an ordinal from hostname $host" >&2; exit 1 ;;
esac
if [ "$ordinal" = "0" ]; then
    echo "clone: instance 0 is the primary; nothing to clone"
    exit 0
fi
# pg_basebackup writes backup_label first; the server renames it when it
# first starts. A PGDATA that still has it is an unfinished (or never
# started) clone: start over.
if [ -s "$PGDATA/PG_VERSION" ] && [ ! -e "$PGDATA/backup_label" ]; then
    echo "clone: $PGDATA already holds a cluster; starting it as it is"
    exit 0
fi
# A half-finished clone from an earlier attempt is useless: start over.
rm -rf "$PGDATA"
mkdir -p "$PGDATA"
chmod 700 "$PGDATA"
export PGPASSWORD="$REPLICATION_PASSWORD"
until pg_isready -h "$PRIMARY_HOST" -p "${PRIMARY_PORT:-5432}" -U replicator -q; do
    echo "clone: waiting for the primary at $PRIMARY_HOST"
    sleep 2
done
pg_basebackup -h "$PRIMARY_HOST" -p "${PRIMARY_PORT:-5432}" -U replicator -D "$PGDATA" \
    -X stream -R --checkpoint=fast --no-password
echo "clone: cloned the primary into $PGDATA"
