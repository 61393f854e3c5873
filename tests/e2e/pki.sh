# shellcheck shell=bash
# Certificates with openssl, shared by cluster.sh (the control plane's PKI)
# and secure.sh (the hooks' server and client certificates): sourced, not run.
# Every function writes into the folder $PKI.
#
# P-256 keys: generated instantly, and accepted by every component
# (including ES256 service-account tokens). Valid 7 days: one run only.

need_openssl() {
  command -v openssl >/dev/null 2>&1 && return
  printf 'installing openssl\n' >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
}

gen_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null && chmod 600 "$1"; }

# sign NAME SUBJECT EXTENSIONS [CA]: a leaf cert $PKI/NAME.{key,crt} signed by
# $PKI/CA.{key,crt} (default: ca).
sign() {
  local name=$1 subj=$2 ext=$3 ca=${4:-ca}
  gen_key "$PKI/$name.key"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  # -extfile works on OpenSSL 1.1 and 3 alike (unlike -copy_extensions).
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
    -days 7 -sha256 -out "$PKI/$name.crt" -extfile <(printf '%s\n' "$ext") 2>/dev/null
  rm -f "$PKI/$name.csr"
}

gen_ca() { # name CN
  gen_key "$PKI/$1.key"
  openssl req -x509 -new -key "$PKI/$1.key" -subj "/CN=$2" -days 7 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$PKI/$1.crt" 2>/dev/null
}

# The extensions of every leaf certificate; add extendedKeyUsage (and names).
# shellcheck disable=SC2034 # used by the scripts that source this file
LEAF="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment"
