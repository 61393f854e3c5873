#!/bin/sh
# opshooks database, the instances' `tls` init container: puts the server's
# certificate and key where the server reads them (ssl_cert_file,
# ssl_key_file), in $TLS_DIR on the instance's volume, outside every data
# directory (a clone does not carry it, an upgrade keeps it).
#
# * With $TLS_SOURCE (the mounted Secret of spec.tls: tls.crt, tls.key and
#   ca.crt), they are copied from it on every start: the key 0600, owned by
#   the server's user, as PostgreSQL demands (a Secret volume's files are
#   the kubelet's, with the mode it chose). A renewed certificate is served
#   from the instance's next start. With $TLS_TRUST too (the CA bundle of
#   spec.tls.issuerRef: the CAs of cert-manager's newest issue and the ones
#   before), ca.crt, which the instance's own clients trust, is the
#   Secret's ca.crt followed by the bundle, so an instance started on a
#   renewed certificate whose CA changed still verifies the instances not
#   yet restarted.
# * Without it, the instance makes its own self-signed certificate (an EC
#   P-256 key, valid 10 years, CN the pod's name) with openssl, once, and
#   keeps it on later starts: the connection is encrypted, but a client
#   cannot tell this server from another (sslmode=require).
#
# It refuses (exit 1, a termination message beginning `opshooks: `) when a
# file is missing or empty, or openssl is not in the image.
set -eu
say() { printf 'tls: %s\n' "$*" >&2; }
refuse() {
    say "$1"
    printf 'opshooks: %s\n' "$(printf '%s' "$1" | tr '\n\r' '  ')" 2>/dev/null \
        >"${TERMINATION_LOG:-/dev/termination-log}" || true
    exit 1
}

[ -n "${TLS_DIR:-}" ] || refuse "TLS_DIR is not set"
umask 077
mkdir -p "$TLS_DIR"
chmod 700 "$TLS_DIR"
ours="$TLS_DIR/self-signed"

if [ -n "${TLS_SOURCE:-}" ]; then
    for file in tls.crt tls.key ca.crt; do
        [ -s "$TLS_SOURCE/$file" ] ||
            refuse "the TLS Secret of spec.tls has no $file (mounted at $TLS_SOURCE): it needs tls.crt, tls.key and ca.crt"
    done
    for file in server.crt:tls.crt server.key:tls.key ca.crt:ca.crt; do
        cp "$TLS_SOURCE/${file#*:}" "$TLS_DIR/${file%%:*}.opshooks"
        chmod 600 "$TLS_DIR/${file%%:*}.opshooks"
        mv "$TLS_DIR/${file%%:*}.opshooks" "$TLS_DIR/${file%%:*}"
    done
    if [ -n "${TLS_TRUST:-}" ] && [ -s "$TLS_TRUST/ca.crt" ]; then
        # A line break between them: a ca.crt without a last one would
        # join an END and a BEGIN line, and OpenSSL read neither.
        { cat "$TLS_SOURCE/ca.crt" && echo && cat "$TLS_TRUST/ca.crt"; } >"$TLS_DIR/ca.crt.opshooks"
        chmod 600 "$TLS_DIR/ca.crt.opshooks"
        mv "$TLS_DIR/ca.crt.opshooks" "$TLS_DIR/ca.crt"
        say "trusting the Secret's CA and the CA bundle (mounted at $TLS_TRUST)"
    fi
    rm -f "$ours"
    say "serving the certificate of the TLS Secret (mounted at $TLS_SOURCE)"
    exit 0
fi

if [ -f "$ours" ] && [ -s "$TLS_DIR/server.crt" ] && [ -s "$TLS_DIR/server.key" ]; then
    say "serving this instance's self-signed certificate, made before"
    exit 0
fi
command -v openssl >/dev/null 2>&1 ||
    refuse "openssl is not in this image, so the instance cannot make its own certificate: use an image with openssl, or give spec.tls.secretName or spec.tls.issuerRef"
# shellcheck disable=SC3028 # the container runtime sets HOSTNAME to the pod's name
cn="${HOSTNAME:-postgresql}"
rm -f "$TLS_DIR/ca.crt" "$TLS_DIR/server.key.opshooks" "$TLS_DIR/server.crt.opshooks"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -subj "/CN=$cn" -keyout "$TLS_DIR/server.key.opshooks" -out "$TLS_DIR/server.crt.opshooks" 2>/dev/null ||
    refuse "openssl could not make a self-signed certificate in $TLS_DIR"
chmod 600 "$TLS_DIR/server.key.opshooks" "$TLS_DIR/server.crt.opshooks"
mv "$TLS_DIR/server.key.opshooks" "$TLS_DIR/server.key"
mv "$TLS_DIR/server.crt.opshooks" "$TLS_DIR/server.crt"
: >"$ours"
say "made this instance's self-signed certificate (CN $cn)"
