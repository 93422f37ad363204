#!/bin/sh
# Run fuzz targets side by side, each for SECONDS (default 1800):
#   tools/fuzz/run.sh [SECONDS] [xml] [json] [plan]     (no target named: all three)
# Each starts from its seed corpus in tools/fuzz/corpus/ with its dictionary;
# new inputs go to build-fuzz/corpus-*/, crashes, hangs (timeout-*) and leaks
# to build-fuzz/artifacts/, and its log (with libFuzzer's final stats) to
# build-fuzz/TARGET.log. Exits non-zero if any target found a failure.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/build-fuzz
t=${1:-1800}
[ $# -gt 0 ] && shift
targets=${*:-xml json plan}
mkdir -p "$out/artifacts"
pids=""
for fmt in $targets; do
  case $fmt in
  xml | json) bin=$out/fuzz_import_$fmt len=8192 ;;
  plan) bin=$out/fuzz_plan len=16384 ;;
  *) echo "run.sh: unknown target $fmt (xml, json, plan)" >&2; exit 2 ;;
  esac
  mkdir -p "$out/corpus-$fmt"
  "$bin" -max_total_time="$t" -timeout=10 -rss_limit_mb=2048 -max_len=$len \
    -dict="$root/tools/fuzz/$fmt.dict" -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
    "$out/corpus-$fmt" "$root/tools/fuzz/corpus/$fmt" >"$out/$fmt.log" 2>&1 &
  pids="$pids $!"
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
for fmt in $targets; do echo "$fmt: $(grep -E '^(stat::number_of_executed_units|Done)' "$out/$fmt.log" | tr '\n' ' ')"; done
exit $rc
