#!/bin/sh
# tls-certs.sh DIR: the certificates the TLS tests use, made fresh with the
# openssl command (nothing is kept in the repository):
#   ca.crt           the CA the servers' and the client's certificates come from
#   ca2.crt          another CA (a client trusting it only: "wrong CA")
#   server.crt/.key  for 127.0.0.1 and localhost, from ca
#   both.crt/.key    the same for server and client use: etcd 3.4 with
#                    --client-cert-auth dials its own gRPC with its server
#                    certificate (etcd #9785)
#   other.crt/.key   for other.example only, from ca ("wrong name")
#   expired.crt/.key for 127.0.0.1, from ca, valid in January 2020 only
#   client.crt/.key  a client certificate from ca (mutual TLS)
#   client2.crt/.key a client certificate from ca2 (refused by the servers)
# Keys are unencrypted EC P-256 (fast to make). Exit status 0 or the
# failing command's.
set -e
d=$1
[ -n "$d" ] || { echo "usage: $0 DIR" >&2; exit 2; }
mkdir -p "$d"
cd "$d"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

ca() {   # name subject
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 30 -out "$1.crt" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}

# `openssl ca` signs with explicit dates (the expired certificate); it
# wants a small database of its own.
signer() {   # ca-name
    mkdir -p "db.$1"
    : > "db.$1/index.txt"
    echo 1000 > "db.$1/serial"
    cat > "db.$1/ca.cnf" <<CNF
[ ca ]
default_ca = this
[ this ]
dir = db.$1
database = \$dir/index.txt
serial = \$dir/serial
new_certs_dir = \$dir
certificate = $1.crt
private_key = $1.key
default_md = sha256
policy = any
copy_extensions = copy
unique_subject = no
[ any ]
commonName = supplied
CNF
}

leaf() {   # name ca-name subject SAN startdate enddate [extKeyUsage]
    key "$1.key"
    openssl req -new -key "$1.key" -subj "/CN=$3" -addext "subjectAltName=$4" \
        -addext "extendedKeyUsage=${7:-serverAuth}" -out "$1.csr"
    openssl ca -batch -notext -config "db.$2/ca.cnf" -startdate "$5" -enddate "$6" \
        -in "$1.csr" -out "$1.crt" 2>/dev/null
}

now=$(date -u -d '-1 day' +%Y%m%d%H%M%SZ)
later=$(date -u -d '+30 days' +%Y%m%d%H%M%SZ)
ca ca "dmutex test CA"
ca ca2 "dmutex other CA"
signer ca
signer ca2
leaf server ca 127.0.0.1 "IP:127.0.0.1,DNS:localhost" "$now" "$later"
leaf both ca 127.0.0.1 "IP:127.0.0.1,DNS:localhost" "$now" "$later" "serverAuth,clientAuth"
leaf other ca other.example "DNS:other.example" "$now" "$later"
leaf expired ca 127.0.0.1 "IP:127.0.0.1,DNS:localhost" 20200101000000Z 20200201000000Z
leaf client ca dmutex-client "DNS:dmutex-client" "$now" "$later" clientAuth
leaf client2 ca2 dmutex-client "DNS:dmutex-client" "$now" "$later" clientAuth
chmod 600 ./*.key
