#!/usr/bin/env bash
# Makes a CA and the certificates of a pitstop test cluster (mutual TLS,
# docs/reliability.md "Trust"): one controller server certificate, one
# client certificate per agent host and one per API role, plus a tokens
# file. For tests and trials only: the CA key lies next to the certificates.
#
#   tools/gen-dev-certs.sh OUT_DIR [--hosts node1,node2] \
#       [--controller-names ctl.example.org,10.0.0.5] [--days 30]
#
# OUT_DIR gets:
#   ca.pem ca.key                    the cluster CA
#   controller.pem controller.key    SANs: localhost, 127.0.0.1, ::1 and
#                                    --controller-names
#   agent-HOST.pem agent-HOST.key    CN=HOST, SAN DNS:HOST,
#                                    URI:pitstop://role/agent
#   viewer|operator|scheduler.pem/.key   CN=ROLE, URI:pitstop://role/ROLE
#   tokens                           "TOKEN ROLE NAME" lines for
#                                    --auth-tokens-file (random tokens)
set -euo pipefail

usage() {
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

[[ $# -ge 1 ]] || usage
out=$1
shift
hosts="$(hostname)"
names=""
days=30
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --controller-names) names=$2; shift 2 ;;
    --days) days=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "gen-dev-certs.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
command -v openssl >/dev/null || {
  echo "gen-dev-certs.sh: openssl not found (apt-get install openssl)" >&2
  exit 1
}
mkdir -p "$out"
umask 077
cd "$out"

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

newkey ca.key
openssl req -x509 -new -key ca.key -sha256 -days "$days" -subj "/CN=pitstop dev CA" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem 2>/dev/null

# sign NAME CN SAN EKU
sign() {
  local name=$1 cn=$2 san=$3 eku=$4
  newkey "$name.key"
  openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
    "$eku" "$san" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -days "$days" -sha256 -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

san="DNS:localhost,IP:127.0.0.1,IP:::1"
IFS=, read -ra extra <<< "$names"
for n in "${extra[@]}"; do
  [[ -z "$n" ]] && continue
  if [[ "$n" =~ ^[0-9.]+$ || "$n" == *:* ]]; then san+=",IP:$n"; else san+=",DNS:$n"; fi
done
sign controller pitstop-controller "$san" serverAuth,clientAuth

IFS=, read -ra hostlist <<< "$hosts"
for h in "${hostlist[@]}"; do
  [[ -z "$h" ]] && continue
  sign "agent-$h" "$h" "DNS:$h,URI:pitstop://role/agent" clientAuth
done
: > tokens
for role in viewer operator scheduler; do
  sign "$role" "$role" "URI:pitstop://role/$role" clientAuth
  echo "$(openssl rand -hex 24) $role $role-token" >> tokens
done
rm -f ca.srl
chmod 0644 ./*.pem
echo "gen-dev-certs.sh: wrote CA, controller, ${#hostlist[@]} agent and 3 role certificates and tokens to $(pwd)"
