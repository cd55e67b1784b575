#!/bin/sh
# Installs what building, testing and the demo need, once, on Debian/Ubuntu.
# Used by `make test`, `make demo` and `make bench` so that a fresh machine
# needs nothing but this repository. Not root: says in one line what to run.
#
#   tools/deps.sh          build + test + demo packages
#   tools/deps.sh bench    also the peers' runtimes for `make bench`
#   tools/deps.sh loaded   also stress-ng for `make test-loaded`
set -e

# g++ (in build-essential too): tests/trace.test.sh's C++ program.
# python3: the shell tests that read JSON and tests/module_graph.test.sh.
# dpkg-dev, debhelper, fakeroot, lintian: `make deb` (tests/deb.test.sh).
# iptables: the network cuts inside test namespaces (test_etcd, the soak).
# python3-redis, node and npm: test_interop's partners (redis-py's Lock;
# redlock, which it installs into bench/node_modules as `make bench` does).
pkgs="build-essential g++ pkg-config libhiredis-dev libconfig-dev libcmocka-dev
      libelf-dev libdw-dev redis-server redis-tools redis-sentinel iproute2 procps
      clang libclang-rt-14-dev man-db groff-base libssl-dev openssl python3
      etcd-server etcd-client curl dpkg-dev debhelper fakeroot lintian iptables
      python3-redis"
[ "$1" = bench ] && pkgs="$pkgs gnuplot-nox valgrind"
[ "$1" = loaded ] && pkgs="$pkgs stress-ng"

missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing="$missing $p"
    fi
done
# node and npm by command, not by package: a nodejs from another source
# (nodesource's bundles npm) is as good, and Debian's npm conflicts with it.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
[ -z "$missing" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "dmutex: missing packages:$missing (install their equivalents; this script knows apt only)" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "dmutex: missing packages; run: sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "dmutex: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends $missing >/dev/null
# Debian starts the packaged redis-server as a service; nothing here uses it
# (tests and the demo start their own on free ports), so leave it stopped.
# The same for redis-sentinel's service (tests start their own sentinels).
if command -v service >/dev/null 2>&1; then
    service redis-server stop >/dev/null 2>&1 || true
    service redis-sentinel stop >/dev/null 2>&1 || true
    service etcd stop >/dev/null 2>&1 || true     # tests/test_etcd.c starts its own cluster
fi
