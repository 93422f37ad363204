#!/bin/sh
# Installs what resccl needs to build and test, from Debian's packages, when
# it is missing. Run as root (or with sudo) on Debian 12 or later.
set -eu
pkgs="cmake make gcc libc6-dev pkgconf lua5.4 liblua5.4-dev lua-busted lua-cjson lua-expat libcmocka-dev libreadline-dev"
# tools/dev/install-deps.sh --fuzz adds what tools/fuzz/build.sh needs (libFuzzer).
[ "${1:-}" = "--fuzz" ] && pkgs="$pkgs clang libclang-rt-dev"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
