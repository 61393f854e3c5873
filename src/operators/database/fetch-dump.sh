#!/bin/sh
# opshooks database, upgrade Job init container (AWS CLI image): fetches the
# newest pre-upgrade dump, <prefix><name>-<UTC timestamp>.pgdump, to $DUMP.
# Values: S3_BUCKET, S3_PREFIX, S3_ENDPOINT, DUMP_NAME, DUMP.
set -eu
if [ -n "${S3_ENDPOINT:-}" ]; then
    set -- --endpoint-url "$S3_ENDPOINT"
else
    set --
fi
prefix="${S3_PREFIX:-}${DUMP_NAME}-"
# The CLI would read a value starting with file:// from that file: pass the
# prefix through a file of our own, read literally.
listing="$(mktemp)"
printf '%s' "$prefix" >"$listing.prefix"
aws "$@" s3api list-objects-v2 --bucket "$S3_BUCKET" --prefix "file://$listing.prefix" \
    --query 'Contents[].Key' --output text >"$listing"
# Only this name's complete dumps: <prefix><name>-YYYYMMDDTHHMMSSZ.pgdump
newest="$(tr '\t' '\n' <"$listing" | while IFS= read -r key; do
    case "${key#"$prefix"}" in
        [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]T[0-9][0-9][0-9][0-9][0-9][0-9]Z.pgdump) printf '%s\n' "$key" ;;
    esac
done | sort | tail -n 1)"
if [ -z "$newest" ] || [ "$newest" = "None" ]; then
    printf 'fetch: no dump under s3://%s/%s\n' "$S3_BUCKET" "$prefix" >&2
    exit 1
fi
aws "$@" s3 cp --only-show-errors "s3://$S3_BUCKET/$newest" "$DUMP"
printf 'fetch: s3://%s/%s -> %s\n' "$S3_BUCKET" "$newest" "$DUMP"
