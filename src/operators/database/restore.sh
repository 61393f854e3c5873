#!/bin/sh
# opshooks database, restore Job. Runs in the PostgreSQL image of the new
# Database, after select.sh downloaded the chosen dump to
# $WORK_DIR/dump.pgdump and described it in $WORK_DIR/selected.
#
# Restores the dump into the application database, which must exist and
# hold no relation yet (a restore never writes over data), as ONE
# transaction: a truncated or corrupt dump, or any statement that fails,
# leaves the database as empty as it was. Every restored object (schemas,
# tables, sequences, functions, large objects) is created by the
# application user (pg_restore --role, with the dump's owners and grants
# left out), so it owns them all, whoever owned them where the dump was
# taken.
#
# Connection: PGHOST, PGPORT, PGUSER (a superuser), PGPASSWORD, PGDATABASE
# (the application database). Values: APP_USER, WORK_DIR (default /work).
# They reach SQL only as psql variables, and pg_restore reads the
# database's name from the environment, so any name is just a name.
#
# The outcome is one line in the termination log ($TERMINATION_LOG,
# default /dev/termination-log), where Kubernetes shows it in the pod's
# status: `opshooks restore: restored bytes=<n> taken=<time> key=<key>`, or
# `opshooks restore: <why not>` with a non-zero exit.
set -u
work="${WORK_DIR:-/work}"
dump="$work/dump.pgdump"

say() {
    line="opshooks restore: $(printf '%s' "$1" | tr '\n\r' '  ')"
    printf '%s\n' "$line" 2>/dev/null >"${TERMINATION_LOG:-/dev/termination-log}" || true
}
fail() {
    say "$1"
    printf 'opshooks restore: %s\n' "$(printf '%s' "$1" | tr '\n\r' '  ')" >&2
    exit 1
}
# The first line of a tool's complaint that says what went wrong.
first_error() {
    line="$(grep -m 1 -E 'error:|ERROR:|FATAL:|fatal:' "$1")" || line="$(sed -n '/[^[:space:]]/{p;q;}' "$1")"
    printf '%s' "$line" | sed 's/^pg_restore: //; s/^psql: //; s/^error: //'
}
sql() {
    psql -X -q -A -t -v ON_ERROR_STOP=1 --no-password -v app_user="${APP_USER:-}" "$@" 2>"$work/psql.err"
}

[ -n "${APP_USER:-}" ] || fail "APP_USER is not set"
[ -s "$dump" ] || fail "no dump was downloaded to $dump"
selected="$(cat "$work/selected" 2>/dev/null)" || selected=""
case "$selected" in
    bytes=*) ;;
    *) fail "$work/selected does not describe the dump (select.sh did not finish)" ;;
esac

# The server: reachable, its version, and a database that is empty.
if ! server_num="$(sql -c 'SHOW server_version_num')"; then
    fail "cannot connect to database ${PGDATABASE:-?} on ${PGHOST:-?}: $(first_error "$work/psql.err")"
fi
case "$server_num" in
    '' | *[!0-9]*) fail "cannot read the server's version from '$server_num'" ;;
esac
server_major="$((server_num / 10000))" # 170002 -> 17

# The archive's table of contents: unreadable means truncated, corrupt, or
# written by a pg_dump newer than this image's pg_restore.
if ! pg_restore --list "$dump" >"$work/toc" 2>"$work/toc.err"; then
    err="$(first_error "$work/toc.err")"
    case "$err" in
        *"unsupported version"*)
            fail "the dump was written by a newer pg_dump than this server's PostgreSQL $server_major reads ($err): restore it into a Database of a newer version" ;;
    esac
    fail "the dump is truncated or corrupt: $err"
fi
# "17.2 (Debian 17.2-1.pgdg120+1)" -> 17; "9.6.24" -> 9, older than any
# server this runs against.
dump_major="$(sed -n 's/^;[[:space:]]*Dumped from database version: \([0-9][0-9]*\).*/\1/p' "$work/toc" | head -n 1)"
[ -n "$dump_major" ] || fail "the dump is truncated or corrupt: its header names no PostgreSQL version"
if [ "$dump_major" -gt "$server_major" ]; then
    fail "the dump is from PostgreSQL $dump_major, newer than this server's $server_major: restore it into a Database of version $dump_major or newer"
fi

# One row: whether the user exists and owns the database, then the large
# objects and relations the database already holds (the first relation's
# name last: it may hold any character).
if ! checks="$(sql <<'SQL'
SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'app_user'),
       (SELECT pg_get_userbyid(datdba) = :'app_user' FROM pg_database WHERE datname = current_database()),
       (SELECT count(*) FROM pg_largeobject_metadata),
       count(*),
       coalesce(min(format('%I.%I', n.nspname, c.relname)), '-')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
  AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\_%'
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                  AND d.objid = c.oid AND d.deptype = 'e');
SQL
)"; then
    fail "cannot inspect database ${PGDATABASE:-?}: $(first_error "$work/psql.err")"
fi
user_exists="${checks%%|*}"
rest="${checks#*|}"
user_owns="${rest%%|*}"
rest="${rest#*|}"
large_objects="${rest%%|*}"
rest="${rest#*|}"
relations="${rest%%|*}"
first_relation="${rest#*|}"
[ "$user_exists" = "t" ] || fail "the application user $APP_USER does not exist in the server; it must exist before the restore"
# The user creates the schemas: it must own the database (init-app.sh
# creates it so).
[ "$user_owns" = "t" ] || fail "database ${PGDATABASE:-?} is not owned by the application user $APP_USER, who must own everything restored"
if [ "$relations" != "0" ]; then
    fail "database ${PGDATABASE:-?} already holds $relations tables, views or sequences (first: $first_relation): a restore never writes over data"
fi
if [ "$large_objects" != "0" ]; then
    fail "database ${PGDATABASE:-?} already holds $large_objects large objects: a restore never writes over data"
fi

# One transaction; the first error ends it and undoes everything. A
# --dbname with "=" is a connection string: this one names no database, so
# libpq takes PGDATABASE from the environment, never parsed.
if ! pg_restore --dbname='application_name=opshooks-restore' --no-password \
    --single-transaction --exit-on-error \
    --no-owner --no-privileges --role="$APP_USER" \
    --no-tablespaces --no-publications --no-subscriptions --no-security-labels \
    "$dump" >"$work/restore.out" 2>"$work/restore.err"; then
    cat "$work/restore.err" >&2
    err="$(first_error "$work/restore.err")"
    case "$err" in
        *"could not execute query"* | *"could not connect"* | *"connection to server"*)
            fail "the restore failed and nothing was restored: $err" ;;
    esac
    fail "the dump is truncated or corrupt, nothing was restored: $err"
fi
# A restored database has no planner statistics: gather them before it serves.
if ! sql -c 'ANALYZE' >/dev/null; then
    printf 'restore: ANALYZE failed (the data is restored): %s\n' "$(first_error "$work/psql.err")" >&2
fi
say "restored $selected"
printf 'restore: restored %s into database %s\n' "$selected" "${PGDATABASE:-?}"
