#!/bin/sh
# libresccl-nccl.so's default plans (RESCCL_NCCL_PLANS unset), no GPU needed:
# preloaded into tests/shim_plans.c under the fake NCCL, twice into a fresh
# plan cache, the shim compiles the three ring plans for two ranks with the
# resccl CLI beside it the first time, and only reads them the second;
# RESCCL_NCCL_PLANS=none compiles nothing.
#   shim_plans.sh SHIM PROGRAM FAKE_NCCL_DIR
set -eu
shim=$1 prog=$2 fake=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} LD_PRELOAD=$shim RESCCL_CACHE=$tmp/cache "$@" "$prog" >>"$tmp/log" 2>&1; }
run env -u RESCCL_NCCL_PLANS
set -- "$tmp"/cache/plans/*.plan
[ $# = 3 ] || { cat "$tmp/log"; echo "shim_plans.sh: $# plans cached, not 3"; exit 1; }
for c in allreduce allgather reducescatter; do
  ls "$tmp"/cache/plans/"$c"_ring-r2-*.plan >/dev/null || { echo "shim_plans.sh: no $c plan"; exit 1; }
  grep -q "^resccl-plan " "$tmp"/cache/plans/"$c"_ring-r2-*.plan || { echo "shim_plans.sh: $c: not a plan"; exit 1; }
done
before=$(ls -l --time-style=+%s.%N "$tmp"/cache/plans)
run env -u RESCCL_NCCL_PLANS
[ "$(ls -l --time-style=+%s.%N "$tmp"/cache/plans)" = "$before" ] || { echo "shim_plans.sh: compiled again"; exit 1; }
rm -rf "$tmp/cache"
run env RESCCL_NCCL_PLANS=none
[ ! -d "$tmp/cache/plans" ] || { echo "shim_plans.sh: RESCCL_NCCL_PLANS=none compiled plans"; exit 1; }
echo "shim_plans.sh: three default plans compiled once, read after, none with RESCCL_NCCL_PLANS=none"
