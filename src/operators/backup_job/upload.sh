#!/bin/sh
# opshooks backup, upload side. Runs in an image with the AWS CLI.
#
# Streams the dump from the FIFO to S3 under a temporary ".partial" key and
# publishes it under its final name only once pg_dump reported success, so
# a restore or a retention run never sees a truncated dump. Then deletes
# this backup's own objects older than RETENTION_DAYS, judged by the UTC
# timestamp in their names, and nothing else under the prefix.
#
# Every user value arrives in the environment (S3_BUCKET, S3_PREFIX,
# S3_ENDPOINT, BACKUP_NAME, RETENTION_DAYS, AWS_*), never in this text.
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
# Timestamps compare as 14-digit numbers: YYYYMMDDHHMMSS.
cutoff="$(date -u -d "@$(($(date -u +%s) - RETENTION_DAYS * 86400))" +%Y%m%d%H%M%S)"
# The CLI reads a parameter starting with file:// or http:// from that file
# or URL, so the user's prefix goes in through a file of our own, read
# literally. The listing goes to a file too, so that a failed listing fails
# the job (a pipe would hide it).
printf '%s' "${prefix}${name}-" >"$work/list.prefix"
aws "$@" s3api list-objects-v2 --bucket "$bucket" --prefix "file://$work/list.prefix" \
    --query 'Contents[].Key' --output text >"$work/list.out"
tr '\t' '\n' <"$work/list.out" |
    while IFS= read -r old; do
        ts="${old#"${prefix}${name}-"}"
        ts="${ts%.pgdump}"
        # Only this backup's own complete objects: <prefix><name>-YYYYMMDDTHHMMSSZ.pgdump
        case "$ts" in
            [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]T[0-9][0-9][0-9][0-9][0-9][0-9]Z) ;;
            *) continue ;;
        esac
        [ "$old" = "${prefix}${name}-${ts}.pgdump" ] || continue
        digits="$(printf '%s' "$ts" | tr -d 'TZ')"
        if [ "$digits" -lt "$cutoff" ]; then
            aws "$@" s3 rm --only-show-errors "s3://$bucket/$old"
            printf 'backup: pruned s3://%s/%s (older than %s days)\n' "$bucket" "$old" "$RETENTION_DAYS"
        fi
    done
