#!/bin/sh
# opshooks backup, upload side. Runs in an image with the AWS CLI.
#
# Streams the dump from the FIFO to S3 under a temporary ".partial" key and
# publishes it under its final name only once pg_dump reported success, so
# a restore or a retention run never sees a truncated dump. Then deletes
# this backup's own objects older than RETENTION_DAYS, judged by the UTC
# timestamp in their names, and nothing else under the prefix.
#
# With RETENTION_REQUIRES_VERIFIED=1, an old dump goes only once a newer
# dump of this backup has verified (mark.sh left <dump>.verified beside
# it): a dump that failed verification, and every older one, stays while
# nothing newer has verified. A pruned dump's marker goes with it.
#
# Every user value arrives in the environment (S3_BUCKET, S3_PREFIX,
# S3_ENDPOINT, BACKUP_NAME, RETENTION_DAYS, RETENTION_REQUIRES_VERIFIED,
# AWS_*), never in this text.
set -eu
work="${WORK_DIR:-/work}"
fifo="$work/dump.fifo"
bucket="${S3_BUCKET:?S3_BUCKET is required}"
name="${BACKUP_NAME:?BACKUP_NAME is required}"
prefix="${S3_PREFIX:-}"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
key="${prefix}${name}-${stamp}.pgdump"

# An S3-compatible store is reached through its endpoint URL.
if [ -n "${S3_ENDPOINT:-}" ]; then
    set -- --endpoint-url "$S3_ENDPOINT"
else
    set --
fi

mkfifo "$fifo" 2>/dev/null || [ -p "$fifo" ] || {
    echo "backup: cannot create $fifo" >&2
    exit 1
}
# A stream of unknown size is uploaded in parts of this size, at most
# 10,000 of them: 64 MiB parts allow dumps of up to 640 GiB.
aws configure set default.s3.multipart_chunksize 64MB
aws "$@" s3 cp --only-show-errors - "s3://$bucket/$key.partial" <"$fifo"

# The writer closed the FIFO; wait (bounded) for its verdict.
waited=0
while [ ! -f "$work/dump.rc" ]; do
    waited=$((waited + 1))
    if [ "$waited" -gt 120 ]; then
        echo "backup: pg_dump gave no exit code within 60 s; discarding the upload" >&2
        aws "$@" s3 rm --only-show-errors "s3://$bucket/$key.partial"
        exit 1
    fi
    sleep 0.5
done
rc="$(cat "$work/dump.rc")"
if [ "$rc" != "0" ]; then
    echo "backup: pg_dump failed (exit code $rc); nothing was published" >&2
    aws "$@" s3 rm --only-show-errors "s3://$bucket/$key.partial"
    exit 1
fi
aws "$@" s3 mv --only-show-errors "s3://$bucket/$key.partial" "s3://$bucket/$key"
# printf, not echo: some shells' echo reads backslashes in user values.
printf 'backup: published s3://%s/%s\n' "$bucket" "$key"

if [ -z "${RETENTION_DAYS:-}" ]; then
    exit 0
fi
case "$RETENTION_DAYS" in
    *[!0-9]*) echo "backup: RETENTION_DAYS must be a whole number" >&2; exit 1 ;;
esac
case "${RETENTION_REQUIRES_VERIFIED:-}" in
    '' | 0) verified_only="" ;;
    1) verified_only=1 ;;
    *) echo "backup: RETENTION_REQUIRES_VERIFIED must be 1 (or 0, or unset)" >&2; exit 1 ;;
esac
# Timestamps compare as 14-digit numbers: YYYYMMDDHHMMSS.
cutoff="$(date -u -d "@$(($(date -u +%s) - RETENTION_DAYS * 86400))" +%Y%m%d%H%M%S)"
# The CLI reads a parameter starting with file:// or http:// from that file
# or URL, so the user's prefix goes in through a file of our own, read
# literally. The listing goes to a file too, so that a failed listing fails
# the job (a pipe would hide it). Each page is a line of tab-separated keys.
own="${prefix}${name}-"
printf '%s' "$own" >"$work/list.prefix"
aws "$@" s3api list-objects-v2 --bucket "$bucket" --prefix "file://$work/list.prefix" \
    --query 'Contents[].Key' --output text >"$work/list.out"
tr '\t' '\n' <"$work/list.out" >"$work/keys"

# The 14 digits of the stamp of $1 when it is one of this backup's own
# objects, <prefix><name>-YYYYMMDDTHHMMSSZ$2; fails for any other key.
stamp_of() {
    ts="${1#"$own"}"
    ts="${ts%"$2"}"
    case "$ts" in
        [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]T[0-9][0-9][0-9][0-9][0-9][0-9]Z) ;;
        *) return 1 ;;
    esac
    [ "$1" = "$own$ts$2" ] || return 1
    printf '%s' "$ts" | tr -d 'TZ'
}

# The newest dump that has a marker (both still stored): only dumps
# older than it may go.
newest=""
if [ -n "$verified_only" ]; then
    : >"$work/dumps"
    : >"$work/markers"
    while IFS= read -r old; do
        if digits="$(stamp_of "$old" .pgdump)"; then
            echo "$digits" >>"$work/dumps"
        elif digits="$(stamp_of "$old" .pgdump.verified)"; then
            echo "$digits" >>"$work/markers"
        fi
    done <"$work/keys"
    # Fixed-width digits: sorted as text, they are sorted by time.
    newest="$(sort "$work/dumps" "$work/markers" | uniq -d | tail -n 1)"
    newest_key="$own${newest%??????}T${newest#????????}Z.pgdump"
fi

while IFS= read -r old; do
    # Only this backup's own complete dumps.
    digits="$(stamp_of "$old" .pgdump)" || continue
    [ "$digits" -lt "$cutoff" ] || continue
    if [ -z "$verified_only" ]; then
        aws "$@" s3 rm --only-show-errors "s3://$bucket/$old" </dev/null
        printf 'backup: pruned s3://%s/%s (older than %s days)\n' "$bucket" "$old" "$RETENTION_DAYS"
        continue
    fi
    if [ -z "$newest" ] || [ "$digits" -ge "$newest" ]; then
        why="no newer backup has verified"
        [ "$digits" != "$newest" ] || why="the newest backup that has verified"
        printf 'backup: kept s3://%s/%s (older than %s days, but %s)\n' "$bucket" "$old" "$RETENTION_DAYS" "$why"
        continue
    fi
    # The marker first: a dump left without its marker by a failed removal
    # is pruned by the next run, a marker without its dump never would be.
    with=""
    if grep -qxF "$digits" "$work/markers"; then
        aws "$@" s3 rm --only-show-errors "s3://$bucket/$old.verified" </dev/null
        with=" and its marker"
    fi
    aws "$@" s3 rm --only-show-errors "s3://$bucket/$old" </dev/null
    printf 'backup: pruned s3://%s/%s%s (older than %s days; s3://%s/%s has verified since)\n' \
        "$bucket" "$old" "$with" "$RETENTION_DAYS" "$bucket" "$newest_key"
done <"$work/keys"
