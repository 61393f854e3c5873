#!/bin/sh
# opshooks database, the lease sidecar of each instance: every
# LEASE_RENEW_SECONDS (default 2) it reads the role ConfigMap ($CONFIGMAP in
# $NAMESPACE) from the API server itself, not through the kubelet's mount
# (which lags a minute, and never changes while the node is cut off), and
# rewrites LEASE_FILE atomically with one line:
#   `<seconds since boot when the request was sent> <epoch> <primary>
#   <initialized>`.
# start.sh's watchdog stops a primary whose lease is older than
# LEASE_SECONDS or names another pod; promote.sh waits that long after the
# role names the candidate before promoting it (a failover), and reads the
# file on every instance before anything is promoted; start.sh confirms
# with it that a Database was never initialized before a first start
# initializes an empty data directory (the mount may still say so a
# minute after it was).
#
# The time is taken before the request: the API server answers with the
# ConfigMap as it was at some moment after that (a GET reads etcd with a
# quorum read), so a lease naming the old primary always predates the
# change of role, and the watchdog's count starts no later than the truth.
#
# The request: HTTP/1.0 GET over `openssl s_client` (the postgres image has
# openssl and perl, as postgresql-common's dependencies; it has no curl or
# wget), the API server's certificate checked against the projected CA
# (-verify_return_error: s_client otherwise goes on after a failed check)
# and against the address dialled. The ServiceAccount token is read again
# on each request (the kubelet rotates it), and reaches openssl through a
# pipe from the shell's builtin printf, never a command line. The answer
# must be a 200 whose JSON has `data.epoch` (digits), `data.primary` (a
# pod name) and `data.initialized` (true or false); anything else leaves
# the file as it was, so it ages.
#
# Values: NAMESPACE, CONFIGMAP, LEASE_FILE, LEASE_CREDENTIALS (the projected
# token and ca.crt, default /var/run/secrets/opshooks/lease),
# LEASE_RENEW_SECONDS, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT
# (set by the kubelet). Logs only changes: the first lease, a new role,
# failures starting and ending.
set -u
say() { echo "lease: $*" >&2; }
fail() { say "$*"; exit 2; }
namespace="${NAMESPACE:-}"
configmap="${CONFIGMAP:-}"
file="${LEASE_FILE:-}"
creds="${LEASE_CREDENTIALS:-/var/run/secrets/opshooks/lease}"
every="${LEASE_RENEW_SECONDS:-2}"
api_host="${KUBERNETES_SERVICE_HOST:-}"
api_port="${KUBERNETES_SERVICE_PORT:-443}"
if [ -z "$namespace" ] || [ -z "$configmap" ] || [ -z "$file" ]; then
    fail "NAMESPACE, CONFIGMAP and LEASE_FILE must be set"
fi
[ -n "$api_host" ] || fail "KUBERNETES_SERVICE_HOST is not set: no API server to read the role from"
case "$every" in '' | *[!0-9]* | 0) fail "LEASE_RENEW_SECONDS is '$every', not a number of seconds above 0" ;; esac
case "$api_port" in '' | *[!0-9]*) fail "KUBERNETES_SERVICE_PORT is '$api_port', not a port" ;; esac
# An address is checked as one (-verify_ip), a name as one.
case "$api_host" in
    *:*) connect="[$api_host]:$api_port" check="-verify_ip" ;;
    *[!0-9.]*) connect="$api_host:$api_port" check="-verify_hostname" ;;
    *) connect="$api_host:$api_port" check="-verify_ip" ;;
esac
path="/api/v1/namespaces/$namespace/configmaps/$configmap"
dir="$(dirname "$file")"
now_s() { read -r up _ </proc/uptime && printf '%s\n' "${up%.*}"; }

# The answer on stdin: `<epoch> <primary> <initialized>` from a 200, else a reason on
# stderr and a non-zero exit.
# shellcheck disable=SC2016 # perl's own variables
parse='
use strict;
use JSON::PP;
local $/;
my $all = <STDIN> // "";
my ($head, $body) = split /\r?\n\r?\n/, $all, 2;
$head //= "";
my ($status) = $head =~ m{^HTTP/1\.[01] (\d{3})};
if (!defined $status) { print STDERR "no HTTP answer\n"; exit 1; }
if ($status ne "200") {
    my $why = eval { decode_json($body // "")->{message} } // "";
    $why = substr($why, 0, 200);
    print STDERR "HTTP $status $why\n";
    exit 1;
}
my $data = eval { decode_json($body // "")->{data} };
if (ref $data ne "HASH") { print STDERR "the answer is not a ConfigMap with data\n"; exit 1; }
my ($epoch, $primary, $initialized) = map { $data->{$_} // "" } qw(epoch primary initialized);
if ($epoch !~ /\A[0-9]{1,18}\z/ || $primary !~ /\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\z/
    || $initialized !~ /\A(true|false)\z/) {
    print STDERR "no valid epoch, primary and initialized in the ConfigMap\n";
    exit 1;
}
print "$epoch $primary $initialized\n";
'
last=""
failing=""
while :; do
    at="$(now_s)"
    token="$(cat "$creds/token" 2>/dev/null)" || token=""
    if [ -z "$token" ]; then
        why="no ServiceAccount token in $creds/token"
    elif role="$(printf 'GET %s HTTP/1.0\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: application/json\r\n\r\n' \
        "$path" "$connect" "$token" |
        timeout 5 openssl s_client -quiet -connect "$connect" -CAfile "$creds/ca.crt" -verify_return_error \
            "$check" "$api_host" 2>"$dir/.lease-tls" |
        perl -e "$parse" 2>"$dir/.lease-why")"; then
        if ! { printf '%s %s\n' "$at" "$role" >"$file.tmp" && mv -f "$file.tmp" "$file"; }; then
            say "cannot write $file"
        fi
        [ -z "$failing" ] || say "renewed again after failing since ${failing}s since boot"
        [ "$role" = "$last" ] || say "the role names $role (epoch, primary, initialized)"
        last="$role" failing=""
        sleep "$every"
        continue
    else
        why="$(cat "$dir/.lease-why" 2>/dev/null)"
        case "$why" in
            "no HTTP answer") why="no HTTP answer from $connect: $(tail -n 1 "$dir/.lease-tls" 2>/dev/null)" ;;
        esac
    fi
    [ -n "$failing" ] || say "cannot read ConfigMap $namespace/$configmap: $why; the lease ages"
    failing="${failing:-$at}"
    sleep "$every"
done
