#!/bin/sh
# Run both importer fuzz targets one after the other:
#   tools/fuzz/run.sh [SECONDS_XML] [SECONDS_JSON]     (default 1200 and 900; 0 skips)
# New inputs go to build-fuzz/corpus-*/; crashes, hangs (timeout-*) and
# leaks to build-fuzz/artifacts/. The seed corpus is tools/fuzz/corpus/.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/build-fuzz
mkdir -p "$out/corpus-xml" "$out/corpus-json" "$out/artifacts"
for fmt in xml json; do
  t=${1:-1200}
  [ "$fmt" = json ] && t=${2:-900}
  [ "$t" -gt 0 ] || continue
  "$out/fuzz_import_$fmt" -max_total_time="$t" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -dict="$root/tools/fuzz/$fmt.dict" -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
    "$out/corpus-$fmt" "$root/tools/fuzz/corpus/$fmt"
done
