#!/bin/sh
# Build the fuzz targets (importers, plan-file reader) with clang's libFuzzer, ASan and UBSan:
#   tools/fuzz/build.sh [OUTDIR]        (default build-fuzz/)
# Needs a configured build/ (for the embedded kernel templates) and Debian's
# clang, libclang-rt-dev, liblua5.4-dev, lua-expat and lua-cjson. The core
# and the bindings are compiled once, the harness once per target.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build-fuzz}
tpl=$root/build/templates.c
[ -f "$tpl" ] || { echo "build.sh: $tpl missing; run cmake --build build first" >&2; exit 1; }
mkdir -p "$out/obj"
san="-g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined"
# Every core and binding file; main.c is the CLI, which the harness replaces.
objs=""
for src in $(ls "$root"/src/*.c | grep -v '/main\.c$') "$tpl"; do
  obj=$out/obj/$(basename "$src" .c).o
  # shellcheck disable=SC2086
  clang $san -fsanitize=fuzzer-no-link -I"$root/src" $(pkg-config --cflags lua5.4) -c "$src" -o "$obj"
  objs="$objs $obj"
done
for fmt in xml json; do
  # shellcheck disable=SC2086
  clang $san -fsanitize=fuzzer -I"$root/src" $(pkg-config --cflags lua5.4) \
    -DFUZZ_FORMAT="\"$fmt\"" -DFUZZ_LUA_DIR="\"$root/lua\"" \
    "$root/tools/fuzz/fuzz_import.c" $objs $(pkg-config --libs lua5.4) -lm -lpthread -ldl -o "$out/fuzz_import_$fmt"
done
# libresccl's plan-file reader needs neither Lua nor CUDA.
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/src/runtime" -I"$root/include" \
  "$root/tools/fuzz/fuzz_plan.c" "$root/src/runtime/planfile.c" "$tpl" -o "$out/fuzz_plan"
echo "built $out/fuzz_import_xml $out/fuzz_import_json $out/fuzz_plan"
