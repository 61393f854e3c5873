#!/bin/sh
# opshooks backup verification Job. Runs in a PostgreSQL image of the
# dump's major version or newer, after select.sh downloaded the newest dump
# to $WORK_DIR/dump.pgdump and described it in $WORK_DIR/selected.
#
# Proves the dump restores: initdb a throwaway cluster in $WORK_DIR/pgdata
# (the Job's emptyDir), start it on a unix socket in $WORK_DIR only (no
# TCP: nothing outside the container can reach it), restore the dump the
# way the restore Job does (as a non-superuser that owns everything, the
# dump's owners and grants left out), then check it: the restore exits 0,
# every TABLE DATA entry of the table of contents is a table, and each
# table holds exactly as many rows as the dump's data for it. The server
# is stopped on every exit.
#
# The outcome is one line on stdout and in the termination log
# ($TERMINATION_LOG, default /dev/termination-log):
# `opshooks verify: verified tables=<n> rows=<n> seconds=<n> bytes=<n>
# taken=<time> key=<key>`, or `opshooks verify: <why not>` with a
# non-zero exit. The success line is also left in $WORK_DIR/verified, for
# mark.sh to record in the store; only a success leaves that file.
#
# It must run as a user other than root (PostgreSQL refuses root); as root,
# it runs the server as `postgres` through gosu or su-exec (the official
# images carry one of them).
set -u
work="${WORK_DIR:-/work}"
dump="$work/dump.pgdump"
pgdata="$work/pgdata"
server="$work/server" # the socket and the server's log
started="$(date +%s)"
# An earlier attempt's success is not this one's.
rm -f "$work/verified" "$work/verified.tmp"

say() {
    line="opshooks verify: $(printf '%s' "$1" | tr '\n\r' '  ')"
    printf '%s\n' "$line" 2>/dev/null >"${TERMINATION_LOG:-/dev/termination-log}" || true
    printf '%s\n' "$line"
}
fail() {
    say "$1" >&2
    exit 1
}
first_error() {
    line="$(grep -m 1 -E 'error:|ERROR:|FATAL:|fatal:' "$1")" || line="$(sed -n '/[^[:space:]]/{p;q;}' "$1")"
    printf '%s' "$line" | sed 's/^pg_restore: //; s/^psql: //; s/^error: //'
}

[ -s "$dump" ] || fail "no dump was downloaded to $dump"
selected="$(cat "$work/selected" 2>/dev/null)" || selected=""
case "$selected" in
    bytes=*) ;;
    *) fail "$work/selected does not describe the dump (select.sh did not finish)" ;;
esac

# The server's own programs run as a user other than root.
runas=""
if [ "$(id -u)" = "0" ]; then
    if command -v gosu >/dev/null 2>&1; then
        runas="gosu"
    elif command -v su-exec >/dev/null 2>&1; then
        runas="su-exec"
    else
        fail "running as root, and neither gosu nor su-exec is here to run PostgreSQL as postgres: run the Job as a user other than root"
    fi
fi
as_server() {
    if [ -n "$runas" ]; then
        "$runas" postgres "$@"
    else
        "$@"
    fi
}
client() {
    psql -X -q -A -t -v ON_ERROR_STOP=1 --no-password -h "$server" -p 5432 -U postgres "$@"
}

# This image's major and the dump's: the dump must not be newer.
image="$(pg_restore --version)" || fail "pg_restore does not run in this image"
image="${image#*) }"
image_major="${image%%[!0-9]*}"
[ -n "$image_major" ] || fail "cannot read this image's PostgreSQL version from '$image'"
if ! pg_restore --list "$dump" >"$work/toc" 2>"$work/toc.err"; then
    err="$(first_error "$work/toc.err")"
    case "$err" in
        *"unsupported version"*)
            fail "the dump was written by a newer pg_dump than this image's PostgreSQL $image_major reads ($err): verify it with a newer image" ;;
    esac
    fail "the dump is truncated or corrupt: $err"
fi
# "17.2 (Debian 17.2-1.pgdg120+1)" -> 17; "9.6.24" -> 9 (older than any image).
dump_major="$(sed -n 's/^;[[:space:]]*Dumped from database version: \([0-9][0-9]*\).*/\1/p' "$work/toc" | head -n 1)"
[ -n "$dump_major" ] || fail "the dump is truncated or corrupt: its header names no PostgreSQL version"
if [ "$dump_major" -gt "$image_major" ]; then
    fail "the dump is from PostgreSQL $dump_major, newer than this image's $image_major: verify it with an image of version $dump_major or newer"
fi

# The throwaway cluster, in the Job's own volume.
rm -rf "$pgdata" "$server"
mkdir -p "$pgdata" "$server" || fail "cannot create $pgdata"
chmod 700 "$pgdata"
if [ -n "$runas" ]; then
    chown postgres "$pgdata" "$server" || fail "cannot hand $pgdata to postgres"
fi
stop() {
    if [ -f "$pgdata/postmaster.pid" ]; then
        as_server pg_ctl -D "$pgdata" -m immediate -w stop >/dev/null 2>&1 || true
    fi
}
trap stop EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
if ! as_server initdb -D "$pgdata" -U postgres --auth=trust --encoding=UTF8 --no-sync \
    >"$work/initdb.log" 2>&1; then
    fail "initdb of the throwaway cluster failed: $(first_error "$work/initdb.log")"
fi
# No TCP listener: the socket in $WORK_DIR is the only way in. Durability
# is not wanted for a cluster that is thrown away.
socket_dir="$(printf '%s' "$server" | sed "s/'/''/g")"
{
    echo "listen_addresses = ''"
    echo "port = 5432"
    printf "unix_socket_directories = '%s'\n" "$socket_dir"
    echo "fsync = off"
    echo "full_page_writes = off"
    echo "synchronous_commit = off"
} >>"$pgdata/postgresql.conf"
if ! as_server pg_ctl -D "$pgdata" -l "$server/log" -w -t 300 start >/dev/null 2>&1; then
    fail "the throwaway PostgreSQL did not start: $(first_error "$server/log")"
fi

# A database owned by a user that is not a superuser, restored into as
# that user: the restore Job's way (restore.sh).
if ! client -d postgres >/dev/null 2>"$work/psql.err" <<'SQL'
CREATE ROLE opshooks_verify NOLOGIN;
CREATE DATABASE opshooks_verify OWNER opshooks_verify;
SQL
then
    fail "cannot prepare the throwaway cluster: $(first_error "$work/psql.err")"
fi
if ! pg_restore -h "$server" -p 5432 -U postgres --dbname=opshooks_verify --no-password \
    --single-transaction --exit-on-error \
    --no-owner --no-privileges --role=opshooks_verify \
    --no-tablespaces --no-publications --no-subscriptions --no-security-labels \
    "$dump" >"$work/restore.out" 2>"$work/restore.err"; then
    cat "$work/restore.err" >&2
    fail "the dump does not restore: $(first_error "$work/restore.err")"
fi

# What the dump promises: one COPY block per TABLE DATA entry, and in each
# block one line per row (COPY's text format escapes newlines in values).
# Each block's target is named as pg_dump wrote it; the rows of blocks with
# the same target add up (--load-via-partition-root). Read back by the
# server as tab-separated values with no quoting and no escapes (a quote
# character that no name holds), so a name reaches it as written.
entries="$(grep -c '^[0-9][0-9]*; [0-9][0-9]* [0-9][0-9]* TABLE DATA ' "$work/toc")" || entries=0
{
    pg_restore --data-only -f - "$dump" 2>"$work/data.err"
    echo "$?" >"$work/data.rc"
} | awk '
    function ident(s,    i, c, out) {
        # One identifier from the start of s: "quoted ""like"" this" or plain.
        if (substr(s, 1, 1) != "\"") {
            match(s, /^[^. (]*/)
            return substr(s, 1, RLENGTH)
        }
        out = "\""
        for (i = 2; i <= length(s); i++) {
            c = substr(s, i, 1)
            out = out c
            if (c == "\"") {
                if (substr(s, i + 1, 1) == "\"") { out = out "\""; i++ } else { return out }
            }
        }
        return out
    }
    in_block && $0 == "\\." { printf "%s\t%d\n", name, rows; in_block = 0; next }
    in_block { rows++; next }
    /^COPY / {
        rest = substr($0, 6)
        schema = ident(rest)
        rest = substr(rest, length(schema) + 1)
        name = schema
        if (substr(rest, 1, 1) == ".") { table = ident(substr(rest, 2)); name = schema "." table }
        in_block = 1
        rows = 0
    }
' >"$work/expected.tsv"
if [ "$(cat "$work/data.rc" 2>/dev/null)" != "0" ]; then
    fail "the dump's data cannot be read: $(first_error "$work/data.err")"
fi
blocks="$(wc -l <"$work/expected.tsv" | tr -d ' ')"
if [ "$blocks" != "$entries" ]; then
    fail "the table of contents lists $entries TABLE DATA entries but the dump holds $blocks blocks of rows"
fi

# The restored tables, counted as the superuser (row security does not
# hide rows from it). ONLY: a parent's count must not include its
# children's rows; a partitioned table holds its partitions' rows.
if ! result="$(client -d opshooks_verify 2>"$work/psql.err" \
    -c 'CREATE TEMP TABLE expected (name text, rows bigint)' \
    -c "\\copy expected FROM pstdin WITH (FORMAT csv, DELIMITER E'\\t', QUOTE E'\\x01')" \
    -c "
WITH e AS (SELECT name, sum(rows) AS rows FROM expected GROUP BY name),
r AS (SELECT e.name, e.rows, c.oid AS rel, c.relkind FROM e
      LEFT JOIN pg_class c ON c.oid = to_regclass(e.name)),
a AS (SELECT r.*, CASE WHEN r.relkind IN ('r', 'p', 'f') THEN
        (xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM %s %s',
            CASE WHEN r.relkind = 'p' THEN '' ELSE 'ONLY' END, r.rel::regclass),
            false, true, '')))[1]::text::bigint END AS actual
      FROM r),
bad AS (SELECT * FROM a WHERE actual IS DISTINCT FROM rows ORDER BY name LIMIT 3)
SELECT (SELECT count(*) FROM a), (SELECT coalesce(sum(rows), 0) FROM a),
       (SELECT count(*) FROM a WHERE actual IS DISTINCT FROM rows),
       coalesce((SELECT string_agg(CASE WHEN actual IS NULL
                    THEN format('%s is not a table after the restore', name)
                    ELSE format('%s has %s rows, the dump %s', name, actual, rows) END, '; ')
                 FROM bad), '')
" <"$work/expected.tsv")"; then
    fail "cannot count the restored rows: $(first_error "$work/psql.err")"
fi
tables="${result%%|*}"
rest="${result#*|}"
rows="${rest%%|*}"
rest="${rest#*|}"
wrong="${rest%%|*}"
details="${rest#*|}"
if [ "$wrong" != "0" ]; then
    fail "the restored data disagrees with the dump in $wrong of $tables tables: $details"
fi
stop
trap - EXIT
# Written in two steps so mark.sh never reads half of it.
if say "verified tables=$tables rows=$rows seconds=$(($(date +%s) - started)) $selected" \
    >"$work/verified.tmp" && mv "$work/verified.tmp" "$work/verified"; then
    cat "$work/verified"
else
    fail "cannot write $work/verified"
fi
