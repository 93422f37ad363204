#!/bin/sh
# Installs the build into a temporary prefix, moves it, and runs the installed
# resccl from elsewhere: it must find its Lua modules and algorithms there.
set -eu
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/a" >/dev/null
mv "$tmp/a" "$tmp/b"
cd "$tmp"
"$tmp/b/bin/resccl" run "$tmp/b/share/resccl/algorithms/allgather_ring.lua" ranks=3 | grep -q "result *PASS"
"$tmp/b/bin/resccl" run allgather_ring ranks=3 | grep -q "result *PASS" # a shipped algorithm, by name
LUA_CPATH="$tmp/b/lib/lua/5.4/?.so" lua5.4 -e 'assert(require("resccl.core").version)'
[ ! -e "$tmp/b/bin/resccl-bench" ] || "$tmp/b/bin/resccl-bench" --help | grep -q "usage: resccl-bench"
echo "installed resccl runs from a moved prefix"
