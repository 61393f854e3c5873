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
primary="$(cat "$role_dir/primary" 2>/dev/null)" || primary=""
[ -n "$primary" ] || refuse "no designated primary in $role_dir/primary: not starting without a role"
initialized="$(cat "$role_dir/initialized" 2>/dev/null)" || initialized=""
epoch="$(cat "$role_dir/epoch" 2>/dev/null)" || epoch="?"
say "instance $me; designated primary $primary (epoch $epoch); data directory $PGDATA"

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
        n = split("host port user password application_name", keys, " ")
        values[1] = ENVIRON["CI_HOST"]; values[2] = ENVIRON["CI_PORT"]
        values[3] = "replicator"; values[4] = ENVIRON["CI_PASSWORD"]; values[5] = ENVIRON["CI_NAME"]
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

# A standby streams from the read-write Service as replicator: its
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
wait_for_primary() {
    [ -n "$rw_host" ] || refuse "RW_HOST is not set: no primary to follow"
    until rw_is_primary "$1" "$2"; do
        now="$(cat "$role_dir/primary" 2>/dev/null)" || now=""
        if [ "$now" = "$me" ]; then
            say "designated primary now: restarting to start as the primary"
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

# A standby that replayed WAL past the point where the primary's timeline
# forked from its own (an old primary's last records, streamed after
# another standby was promoted) would start as it is and never follow the
# primary. When the primary answers now on another timeline than this
# standby's last checkpoint, the standby is rewound onto it; when that
# fails it does not start (its message says how to clone it afresh). A
# primary that does not answer leaves the standby to start as it is.
rejoin_timeline() {
    [ -n "$rw_host" ] || return 0
    theirs="$(PGHOST="$rw_host" PGPORT="$rw_port" PGUSER=postgres PGPASSWORD="${POSTGRES_PASSWORD:-}" \
        PGDATABASE=postgres PGCONNECT_TIMEOUT=5 psql -X -q -A -t --no-password \
        -c "SELECT CASE WHEN pg_is_in_recovery() THEN '' ELSE timeline_id::text END FROM pg_control_checkpoint()" \
        2>/dev/null)" || theirs=""
    [ -n "$theirs" ] || return 0
    ours="$(LC_ALL=C pg_controldata "$PGDATA" 2>/dev/null | sed -n "s/^Latest checkpoint's TimeLineID: *//p")" || ours=""
    [ "$ours" != "$theirs" ] || return 0
    say "the primary is on timeline $theirs, this standby's last checkpoint on timeline ${ours:-?}: rewinding it onto the primary's"
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
    if [ ! -s "$PGDATA/PG_VERSION" ]; then
        case "$initialized" in
            false) say "the designated primary's first start: the entrypoint initializes $PGDATA" ;;
            true) refuse "the data directory $PGDATA is empty although the Database was initialized: nothing is initialized over lost data; a standby must take over" ;;
            *) refuse "cannot read whether the Database was initialized ($role_dir/initialized): not initializing $PGDATA on a guess" ;;
        esac
    elif [ -e "$PGDATA/standby.signal" ]; then
        # Designated, not yet promoted: the promote Job promotes it.
        say "designated primary, still a standby: starting it as one until it is promoted"
        follow_rw
    elif [ -e "$PGDATA/backup_label" ]; then
        refuse "the data directory $PGDATA holds an unfinished clone: it cannot serve as the primary; a standby must take over"
    else
        say "the primary: starting $PGDATA as it is"
    fi
    if [ -s "$PGDATA/PG_VERSION" ]; then unfence; fi
    unset PGSSLMODE PGSSLROOTCERT
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
    # pg_rewind finishes an unclean shutdown itself, in single-user mode
    # with postgresql.conf's settings only: not the server's `-c` options,
    # so wal_log_hints (which pg_rewind then checks) goes off, and the
    # checkpoints of that recovery recycle the WAL before it (wal_keep_size
    # 0), where pg_rewind looks for the last checkpoint the two timelines
    # share. Crash recovery runs here first, keeping both.
    state="$(LC_ALL=C pg_controldata "$PGDATA" 2>/dev/null | sed -n 's/^Database cluster state: *//p')" || state=""
    case "$state" in
        "shut down" | "shut down in recovery") ;;
        *)
            say "finishing the unclean shutdown ($state) in single-user mode"
            postgres --single -D "$PGDATA" -c wal_log_hints=on -c wal_keep_size=1000000 template1 </dev/null >&2 || true
            ;;
    esac
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
unset PGSSLMODE PGSSLROOTCERT
exec "$@"
