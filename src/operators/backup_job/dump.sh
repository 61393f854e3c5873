#!/bin/sh
# opshooks backup, dump side. Runs in the database's own image, so pg_dump
# matches the server's major version.
#
# pg_dump writes the database in custom format (compressed, restorable with
# pg_restore) into a FIFO shared with the upload container, which streams it
# to S3: the dump never needs a disk as large as the database. The exit code
# of pg_dump goes to dump.rc, because the reader of a FIFO only sees its end
# and cannot tell a finished dump from a failed one.
#
# Every user value arrives in the environment (PGHOST, PGPORT, PGDATABASE,
# PGUSER, PGPASSWORD), never in this text, so no value can be read as shell.
set -u
work="${WORK_DIR:-/work}"
fifo="$work/dump.fifo"
mkfifo "$fifo" 2>/dev/null || [ -p "$fifo" ] || {
    echo "backup: cannot create $fifo" >&2
    echo 1 >"$work/dump.rc"
    exit 1
}
rc=0
pg_dump --format=custom --no-password >"$fifo" || rc=$?
# Written in two steps so the reader never sees a half-written file.
echo "$rc" >"$work/dump.rc.tmp" && mv "$work/dump.rc.tmp" "$work/dump.rc"
if [ "$rc" -ne 0 ]; then
    printf 'backup: pg_dump of database %s on %s failed with exit code %s\n' "${PGDATABASE:-?}" "${PGHOST:-?}" "$rc" >&2
fi
exit "$rc"
