#!/bin/sh
# libresccl through its C API (tests/test_runtime.c).
#   runtime.sh RESCCL TEST_RUNTIME build   plans build with NVRTC for sm_90: all-reduce at 512
#                                          threads, reduce-scatter at 1024 (nvcc_emit.sh
#                                          compiles every algorithm; NVRTC is the runtime's path);
#                                          every dtype's data movers in the copy-engine
#                                          reduce-scatter (nvcc_emit.sh builds them at 512), the
#                                          f32 movers only in the others (-DRX_DTYPES: the movers
#                                          are most of a build)
#   runtime.sh RESCCL TEST_RUNTIME build-all   every dtype in every plan (label slow)
#   runtime.sh RESCCL TEST_RUNTIME run     the collectives on the GPUs (RANKS=N, default
#                                          max(2, GPUs); more ranks than GPUs share them)
# Exits 77 (skipped) where there is no GPU (run).
set -eu
bin=$1 test=$2 mode=$3
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$mode" = build ] || [ "$mode" = build-all ]; then
  export RESCCL_CACHE="$tmp/cache" # build for real, not from an earlier run
  for name in allreduce_ring reducescatter_ring; do
    alg=$src/algorithms/$name.lua
    case $name in *_hm) args=topo=a100:2x2 ;; *) args=ranks=4 ;; esac
    "$bin" compile "$alg" $args --plan "$tmp/$name.plan"
  done
  "$bin" compile "$src/algorithms/allgather_ring.lua" ranks=2 --ce --plan "$tmp/allgather-ce.plan" # no TBs
  "$bin" compile "$src/algorithms/reducescatter_ring.lua" ranks=2 --ce --plan "$tmp/reducescatter-ce.plan"
  # both hops on the copy engine, the second waiting for the reducing TB's counters
  "$bin" compile "$src/algorithms/allreduce_ring.lua" ranks=2 --ce --plan "$tmp/allreduce-ce.plan"
  # a one-shot all-reduce whose receives read the peer's input
  "$bin" compile "$src/algorithms/allreduce_allpairs.lua" ranks=2 --pull --plan "$tmp/allreduce-pull.plan"
  # a ring all-reduce whose kernels put too (RX_PROGRAM_BEGIN(2, 2))
  "$bin" compile "$src/algorithms/allreduce_ring.lua" ranks=2 --pull --plan "$tmp/allreduce-ring-pull.plan"
  # Bad plan files are refused by the reader alone (tests/test_planfile.c).
  [ "$mode" = build-all ] && exec "$test" build "$tmp"/*.plan
  RESCCL_NVRTC_OPTIONS=-DRX_DTYPES=0x80 "$test" build "$tmp/allreduce_ring.plan" "$tmp/reducescatter_ring.plan" \
    "$tmp/allgather-ce.plan" "$tmp/allreduce-ce.plan" "$tmp/allreduce-pull.plan" "$tmp/allreduce-ring-pull.plan"
  exec "$test" build "$tmp/reducescatter-ce.plan"
fi
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
[ "${ngpu:-0}" -ge 1 ] || { echo "no GPU: runtime tests skipped"; exit 77; }
ranks=${RANKS:-$([ "$ngpu" -ge 2 ] && echo "$ngpu" || echo 2)}
for c in allreduce allgather reducescatter; do
  "$bin" compile "$src/algorithms/${c}_ring.lua" ranks="$ranks" --plan "$tmp/$c.plan"
done
"$bin" compile "$src/algorithms/alltoall_direct.lua" ranks="$ranks" --plan "$tmp/alltoall.plan"
# With --ce: on two ranks every copy of an all-gather leaves the TBs (an all-to-all's always do), and
# the reductions of a reduce-scatter and an all-reduce wait for the copy engine's puts.
"$bin" compile "$src/algorithms/allgather_ring.lua" ranks="$ranks" --ce --plan "$tmp/allgather-ce.plan"
"$bin" compile "$src/algorithms/alltoall_direct.lua" ranks="$ranks" --ce --plan "$tmp/alltoall-ce.plan"
"$bin" compile "$src/algorithms/reducescatter_ring.lua" ranks="$ranks" --ce --plan "$tmp/reducescatter-ce.plan"
"$bin" compile "$src/algorithms/allreduce_ring.lua" ranks="$ranks" --ce --plan "$tmp/allreduce-ce.plan"
"$bin" compile "$src/algorithms/allreduce_ring.lua" ranks=$((ranks + 1)) --plan "$tmp/other-ranks.plan"
# With --pull: receives read the sender's input (a one-shot all-reduce, a reduce-scatter, an all-gather,
# a ring all-reduce that puts what it reduces).
"$bin" compile "$src/algorithms/allreduce_allpairs.lua" ranks="$ranks" --pull --plan "$tmp/allreduce-pull.plan"
"$bin" compile "$src/algorithms/reducescatter_ring.lua" ranks="$ranks" --pull --plan "$tmp/reducescatter-pull.plan"
"$bin" compile "$src/algorithms/allgather_ring.lua" ranks="$ranks" --pull --plan "$tmp/allgather-pull.plan"
"$bin" compile "$src/algorithms/allreduce_ring.lua" ranks="$ranks" --pull --plan "$tmp/allreduce-ring-pull.plan"
# A one-shot all-reduce as compiled by default: pushing, and pulling for mid sizes.
"$bin" compile "$src/algorithms/allreduce_allpairs.lua" ranks="$ranks" --plan "$tmp/allreduce-allpairs.plan"
RANKS=$ranks exec "$test" run "$tmp"
