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
        reason="volume holds PostgreSQL $newest data (pg$newest), not $mine: nothing is initialized or served beside it"
        echo "clone: $reason" >&2
        # Kubernetes shows this in the pod's status, where the hook reads it.
        printf 'opshooks: %s\n' "$reason" 2>/dev/null >"${TERMINATION_LOG:-/dev/termination-log}" || true
        exit 1
    fi
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
