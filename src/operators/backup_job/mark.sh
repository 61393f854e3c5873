#!/bin/sh
# opshooks verification, marking side. Runs in an image with the AWS CLI,
# as the last container of a verification Job, after select.sh chose and
# downloaded a dump and verify.sh proved that it restores; with the
# environment select.sh has and the same volume at WORK_DIR (default
# /work).
#
# Records the proof in the store next to the dump: the object
# <key>.verified, holding verify.sh's success line. upload.sh's retention,
# under RETENTION_REQUIRES_VERIFIED=1, prunes an old dump only once a newer
# dump of the same name has such a marker.
#
# It marks only what was verified: $WORK_DIR/verified (written by verify.sh
# on success alone) must be the success line for the dump that
# $WORK_DIR/selected names.
#
# A failure exits non-zero with one line, starting `opshooks mark: `, on
# stderr and in the termination log ($TERMINATION_LOG, default
# /dev/termination-log).
#
# Every user value arrives in the environment (S3_BUCKET, S3_ENDPOINT,
# AWS_*), or in the files select.sh and verify.sh wrote, never in this text.
set -u
work="${WORK_DIR:-/work}"

# One line, whatever the values in it hold, on stdout and in the log.
say() {
    line="opshooks mark: $(printf '%s' "$1" | tr '\n\r' '  ')"
    printf '%s\n' "$line" 2>/dev/null >"${TERMINATION_LOG:-/dev/termination-log}" || true
    printf '%s\n' "$line"
}
fail() {
    say "$1" >&2
    exit 1
}

bucket="${S3_BUCKET:-}"
[ -n "$bucket" ] || fail "S3_BUCKET is not set"
# An S3-compatible store is reached through its endpoint URL.
if [ -n "${S3_ENDPOINT:-}" ]; then
    set -- --endpoint-url "$S3_ENDPOINT"
else
    set --
fi

# `bytes=<n> taken=<time> key=<key>`, the key last.
selected="$(cat "$work/selected" 2>/dev/null)" || selected=""
case "$selected" in
    bytes=*" taken="*" key="?*) ;;
    *) fail "$work/selected does not name a dump (select.sh did not finish): nothing to mark" ;;
esac
key="${selected#*" key="}"
verified="$(cat "$work/verified" 2>/dev/null)" || verified=""
case "$verified" in
    "opshooks verify: verified "*" $selected") ;;
    *) fail "$key was not verified ($work/verified holds no success line of verify.sh for it): not marked" ;;
esac

marker="$key.verified"
printf '%s\n' "$verified" >"$work/marker" || fail "cannot write $work/marker"
# The high-level copy takes the key as part of a path, literally (s3api
# would read a key starting with file:// as a file).
if ! aws "$@" s3 cp --only-show-errors --content-type text/plain \
    "$work/marker" "s3://$bucket/$marker" >/dev/null 2>"$work/mark.err"; then
    err="$(sed -n '/[^[:space:]]/{p;q;}' "$work/mark.err")"
    fail "cannot write the marker s3://$bucket/$marker: ${err:-the AWS CLI failed without a message}"
fi
say "marked s3://$bucket/$marker"
