#!/bin/sh
# opshooks database, proving a base backup restores (archive/verification.rs),
# in the PostgreSQL image of the Database's major, in a Job's pod beside the
# archiver (archiver.sh, RECOVERY_SERVER: the Database's own archive): after
# pitr-fetch.sh downloaded the newest base backup into an emptyDir, runs
# pitr-replay.sh over it to the end of the archive. That script starts a
# throwaway server on a private socket, replays every archived segment
# after the backup, promotes, and writes the outcome as its line in
# $TERMINATION_LOG (the hook reads it with pitr-fetch.sh's). Then, whatever
# the outcome, this writes pitr-replay.sh's exit code to $ARCHIVER_UNTIL,
# so the archiver's loop ends and the pod with it (and retain.sh, run there
# after the loop, deletes only after a proof: 0); the exit code is
# pitr-replay.sh's.
#
# Values: ARCHIVE_SCRIPTS (the mounted archive ConfigMap), ARCHIVER_UNTIL,
# and what pitr-replay.sh reads (PGDATA, WAL_SPOOL, RECOVERY_WAIT).
set -u
scripts="${ARCHIVE_SCRIPTS:-}"
until_file="${ARCHIVER_UNTIL:-}"
case "$until_file" in
    /?*) ;;
    *) printf 'verify-base: ARCHIVER_UNTIL is %s, not an absolute path\n' "'$until_file'" >&2; exit 1 ;;
esac
sh "$scripts/pitr-replay.sh"
rc=$?
# Whole, then renamed into place: the archiver sees it only complete.
printf '%s\n' "$rc" >"$until_file.tmp" && mv -f "$until_file.tmp" "$until_file"
exit "$rc"
