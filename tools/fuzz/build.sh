#!/bin/sh
# Build the importer fuzz targets with clang's libFuzzer, ASan and UBSan:
#   tools/fuzz/build.sh [OUTDIR]        (default build-fuzz/)
# Needs a configured build/ (for the embedded kernel templates) and Debian's
# UBSan's nonnull-attribute and pointer-overflow checks are off: the core
# calls qsort/memmove with a NULL pointer and a zero length on empty lists
# (src/dag.c, src/sched.c), harmless with glibc.
# clang, libclang-rt-dev, liblua5.4-dev, lua-expat and lua-cjson.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build-fuzz}
tpl=$root/build/templates.c
[ -f "$tpl" ] || { echo "build.sh: $tpl missing; run cmake --build build first" >&2; exit 1; }
mkdir -p "$out"
core="util program topo dag sched lower tballoc verify compile dump template emit exec_host l_init l_program l_plan"
srcs=""
for f in $core; do srcs="$srcs $root/src/$f.c"; done
for fmt in xml json; do
  # shellcheck disable=SC2086
  clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-sanitize=nonnull-attribute,pointer-overflow \
    -I"$root/src" $(pkg-config --cflags lua5.4) \
    -DFUZZ_FORMAT="\"$fmt\"" -DFUZZ_LUA_DIR="\"$root/lua\"" \
    "$root/tools/fuzz/fuzz_import.c" $srcs "$tpl" \
    $(pkg-config --libs lua5.4) -lm -lpthread -ldl -o "$out/fuzz_import_$fmt"
done
echo "built $out/fuzz_import_xml $out/fuzz_import_json"
