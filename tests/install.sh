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
# libresccl, where built: a program against it through pkg-config and through find_package(resccl)
pc=$(find "$tmp/b" -name resccl.pc)
if [ -n "$pc" ]; then
  cat >"$tmp/v.c" <<'C'
#include <resccl.h>
#include <stdio.h>
int main(void) {
  int v = 0;
  return resccl_get_version(&v) != resccl_success || v != RESCCL_VERSION_CODE || printf("resccl %d\n", v) < 0;
}
C
  lib=$(dirname "$(dirname "$pc")")
  readelf -d "$lib"/libresccl.so | grep -q "SONAME.*libresccl\.so\.[0-9]"
  # shellcheck disable=SC2046 # pkg-config's flags: several words
  cc "$tmp/v.c" -o "$tmp/v-pc" $(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs resccl)
  LD_LIBRARY_PATH=$lib "$tmp/v-pc" | grep -q "^resccl [0-9]"
  mkdir "$tmp/cm"
  printf 'cmake_minimum_required(VERSION 3.20)\nproject(v C)\nfind_package(resccl 0 REQUIRED)\nadd_executable(v %s/v.c)\ntarget_link_libraries(v resccl::resccl)\n' \
    "$tmp" >"$tmp/cm/CMakeLists.txt"
  cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$tmp/b" >/dev/null && cmake --build "$tmp/cm/b" >/dev/null
  LD_LIBRARY_PATH=$lib "$tmp/cm/b/v" | grep -q "^resccl [0-9]"
  echo "a program builds against the installed libresccl with pkg-config and with find_package(resccl)"
fi
echo "installed resccl runs from a moved prefix"
