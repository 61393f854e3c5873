#!/bin/sh
# opshooks restore, selection side. Runs in an image with the AWS CLI, as
# the init container of a restore or verification Job, with an emptyDir at
# WORK_DIR (default /work) shared with the container that reads the dump.
#
# Picks one complete dump and downloads it to $WORK_DIR/dump.pgdump, then
# writes $WORK_DIR/selected: one line `bytes=<n> taken=<time> key=<key>`
# (key last, so it may hold any character but a newline).
#
# Which dump:
# - RESTORE_KEY: exactly that object key; or
# - RESTORE_NAMES: space-separated backup names. The candidates are the
#   objects named <S3_PREFIX><name>-<YYYYMMDDTHHMMSSZ>.pgdump for a name in
#   the list (the name upload.sh publishes under; never a .partial upload),
#   and the newest by that UTC stamp wins. With RESTORE_BEFORE
#   (YYYYMMDDHHMMSS, UTC), the newest taken strictly before that time. Two
#   candidates with the same stamp: the name listed first wins.
#
# A failure exits non-zero with one line, starting `opshooks restore: `,
# on stderr and in the termination log ($TERMINATION_LOG, default
# /dev/termination-log), where Kubernetes shows it in the pod's status.
#
# Every user value arrives in the environment (S3_BUCKET, S3_PREFIX,
# S3_ENDPOINT, RESTORE_KEY, RESTORE_NAMES, RESTORE_BEFORE, AWS_*), never in
# this text.
set -u
# RESTORE_NAMES is split on spaces and never expanded as a pattern.
set -f
work="${WORK_DIR:-/work}"

fail() {
    # One line, whatever the values in it hold.
    line="opshooks restore: $(printf '%s' "$1" | tr '\n\r' '  ')"
    printf '%s\n' "$line" >&2
    printf '%s\n' "$line" 2>/dev/null >"${TERMINATION_LOG:-/dev/termination-log}" || true
    exit 1
}

# The first line of the AWS CLI's complaint, without its "fatal error: ".
first_error() {
    sed -n '/[^[:space:]]/{s/^fatal error: //;p;q;}' "$1"
}

# Why the store refused, in plain words. $1: the CLI's stderr file, $2:
# what was being done.
s3_failure() {
    err="$(first_error "$1")"
    case "$err" in
        *NoSuchBucket* | *"bucket does not exist"*)
            fail "bucket $bucket does not exist (while $2)" ;;
        *"Unable to locate credentials"*)
            fail "no credentials to reach bucket $bucket (while $2): AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set" ;;
        *InvalidAccessKeyId* | *SignatureDoesNotMatch* | *ExpiredToken* | *InvalidToken*)
            fail "the credentials were refused by the store for bucket $bucket (while $2): $err" ;;
        *AccessDenied* | *"(403)"* | *Forbidden*)
            fail "access denied to bucket $bucket (while $2): check the credentials and their permissions: $err" ;;
        *)
            fail "could not reach bucket $bucket (while $2): ${err:-the AWS CLI failed without a message}" ;;
    esac
}

bucket="${S3_BUCKET:-}"
[ -n "$bucket" ] || fail "S3_BUCKET is not set"
prefix="${S3_PREFIX:-}"
# The AWS CLI; an S3-compatible store is reached through its endpoint URL.
s3() {
    if [ -n "${S3_ENDPOINT:-}" ]; then
        aws --endpoint-url "$S3_ENDPOINT" "$@"
    else
        aws "$@"
    fi
}
mkdir -p "$work" || fail "cannot create $work"
rm -f "$work/dump.pgdump" "$work/dump.pgdump.tmp" "$work/selected" "$work/selected.tmp"

# A stamp as upload.sh writes it: YYYYMMDDTHHMMSSZ.
is_stamp() {
    case "$1" in
        [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]T[0-9][0-9][0-9][0-9][0-9][0-9]Z) return 0 ;;
    esac
    return 1
}
# The time in a stamp, as RFC 3339: 20240102T030405Z -> 2024-01-02T03:04:05Z.
rfc3339() {
    printf '%s' "$1" | sed 's/^\(....\)\(..\)\(..\)T\(..\)\(..\)\(..\)Z$/\1-\2-\3T\4:\5:\6Z/'
}

tab="$(printf '\t')"
# Lists the objects whose keys start with $1 into $work/list.out, one a
# line, as the JMESPath $2 of each. The CLI reads a parameter starting
# with file:// as a file: the prefix goes in through a file of our own,
# read literally. The listing goes to a file so that a failed listing
# fails the Job (a pipe would hide it).
list_keys() {
    printf '%s' "$1" >"$work/list.prefix"
    if ! s3 s3api list-objects-v2 --bucket "$bucket" --prefix "file://$work/list.prefix" \
        --query "Contents[].$2" --output text >"$work/list.out" 2>"$work/list.err"; then
        s3_failure "$work/list.err" "$3"
    fi
}

key=""
taken=""
if [ -n "${RESTORE_KEY:-}" ]; then
    key="$RESTORE_KEY"
    case "$key" in
        *.partial) fail "s3://$bucket/$key is an unfinished upload (.partial); it is never restored" ;;
    esac
    # The time from the name when it is one of ours, else from the store.
    ts="${key%.pgdump}"
    ts="${ts##*-}"
    if is_stamp "$ts" && [ "$key" = "${key%-"$ts".pgdump}-$ts.pgdump" ]; then
        taken="$(rfc3339 "$ts")"
    fi
    # Listed, not just fetched: a listing tells a missing object from a
    # missing bucket or refused credentials, and gives the object's time.
    # Each line: the time, a tab, then the key (which may hold tabs).
    list_keys "$key" '[LastModified, Key]' "looking for object $key"
    found=""
    while IFS= read -r line; do
        if [ "${line#*"$tab"}" = "$key" ]; then
            found="${line%%"$tab"*}"
            break
        fi
    done <"$work/list.out"
    [ -n "$found" ] || fail "no object $key in bucket $bucket"
    if [ -z "$taken" ]; then
        # 2024-01-02T03:04:05.000Z: the store's time is UTC.
        case "$found" in
            [0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]*)
                taken="$(printf '%.19sZ' "$found")" ;;
            *) taken="unknown" ;;
        esac
    fi
elif [ -n "${RESTORE_NAMES:-}" ]; then
    before="${RESTORE_BEFORE:-}"
    case "$before" in
        '') ;;
        [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]) ;;
        *) fail "RESTORE_BEFORE must be 14 digits, YYYYMMDDHHMMSS in UTC, not $before" ;;
    esac
    best=""
    searched=""
    for name in $RESTORE_NAMES; do
        searched="${searched:+$searched, }$name"
        # Each name's own objects.
        list_keys "${prefix}${name}-" '[Key]' "listing the backups of $name under prefix '$prefix'"
        while IFS= read -r candidate; do
            ts="${candidate#"${prefix}${name}-"}"
            ts="${ts%.pgdump}"
            # Only complete dumps of exactly this name.
            is_stamp "$ts" || continue
            [ "$candidate" = "${prefix}${name}-${ts}.pgdump" ] || continue
            digits="$(printf '%s' "$ts" | tr -d 'TZ')"
            if [ -n "$before" ] && [ "$digits" -ge "$before" ]; then
                continue
            fi
            # Strictly newer only: on a tie the earlier name (or key) stays.
            if [ -z "$best" ] || [ "$digits" -gt "$best" ]; then
                best="$digits"
                key="$candidate"
                taken="$(rfc3339 "$ts")"
            fi
        done <"$work/list.out"
    done
    if [ -z "$key" ]; then
        when=""
        [ -z "$before" ] || when=" taken before $(rfc3339 "$(printf '%sT%sZ' "${before%??????}" "${before#????????}")")"
        fail "no backup$when in bucket $bucket under prefix '$prefix' for the names $searched (objects named <prefix><name>-YYYYMMDDTHHMMSSZ.pgdump)"
    fi
else
    fail "neither RESTORE_KEY nor RESTORE_NAMES is set: nothing to select"
fi

# The high-level copy takes the key as part of a path, literally.
if ! s3 s3 cp --only-show-errors "s3://$bucket/$key" "$work/dump.pgdump.tmp" 2>"$work/cp.err" >/dev/null; then
    case "$(first_error "$work/cp.err")" in
        *NoSuchBucket*) ;;
        *"(404)"* | *NoSuchKey* | *"does not exist"*) fail "no object $key in bucket $bucket" ;;
    esac
    s3_failure "$work/cp.err" "downloading $key"
fi
bytes="$(wc -c <"$work/dump.pgdump.tmp" | tr -d ' ')"
if [ "$bytes" -eq 0 ]; then
    fail "s3://$bucket/$key is empty: not a dump"
fi
mv "$work/dump.pgdump.tmp" "$work/dump.pgdump" || fail "cannot write $work/dump.pgdump"
# Written in two steps so the reader never sees a half-written file.
if ! printf 'bytes=%s taken=%s key=%s\n' "$bytes" "$taken" "$key" >"$work/selected.tmp" ||
    ! mv "$work/selected.tmp" "$work/selected"; then
    fail "cannot write $work/selected"
fi
printf 'restore: selected s3://%s/%s (%s bytes, taken %s)\n' "$bucket" "$key" "$bytes" "$taken"
