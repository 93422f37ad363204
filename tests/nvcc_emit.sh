#!/bin/sh
# Compiles the emitted CUDA for sm_90 with nvcc (no GPU needed).
#   nvcc_emit.sh RESCCL      a representative few: allreduce_hm whole (-c), every dtype's data movers;
#                            the ring all-gather, the one-shot all-reduce, the all-to-all and merged
#                            TBs (with it, every primitive but the copy engine's and pulls) as device
#                            code (-cubin) with the f32 movers only (-DRX_DTYPES: the movers are most
#                            of a build). The others, and the copy-engine and pulling forms (which
#                            nvrtc_plans builds), are emitted, not compiled.
#   nvcc_emit.sh RESCCL all  every one of them whole, every dtype (label slow)
# Exits 77 (skipped) where there is no nvcc.
set -eu
bin=$1 all=${2:-}
src=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "nvcc not found: CUDA emission not compiled (skipped)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# build NAME.cu [fast|whole|none]: compile as `all` says, else as the second argument says
build() {
  how=$2
  [ -z "$all" ] || how=whole
  case $how in
    whole) "$nvcc" -arch=sm_90 -diag-suppress 177 -c -o "$tmp/$1.o" "$tmp/$1.cu" ;;
    fast) "$nvcc" -arch=sm_90 -diag-suppress 177 -DRX_DTYPES=0x80 -cubin -o "$tmp/$1.cubin" "$tmp/$1.cu" ;;
    none) return ;;
  esac
  echo "compiled $1 ($how) for sm_90"
}
for alg in "$src"/algorithms/*.lua; do
  name=$(basename "$alg" .lua)
  case $name in *_hm) args=topo=a100:2x2 ;; *) args=ranks=4 ;; esac
  "$bin" compile "$alg" $args --emit cuda >"$tmp/$name.cu"
  case $name in
    allreduce_hm) build "$name" whole ;;
    allgather_ring | allreduce_allpairs | alltoall_direct) build "$name" fast ;;
    *) build "$name" none ;;
  esac
done
# Merged TBs run several primitives in one micro-batch loop.
"$bin" compile "$src"/algorithms/allreduce_ring.lua ranks=4 --tb merge --emit cuda >"$tmp/merged.cu"
build merged fast
# The copy engine takes every copy of a two-rank all-gather (ranks with no
# TB) and a reduce-scatter's puts (its reductions wait for them).
for name in allgather_ring reducescatter_ring; do
  "$bin" compile "$src/algorithms/$name.lua" ranks=2 --ce --emit cuda >"$tmp/ce-$name.cu"
  build "ce-$name" none
done
# Pulls: a one-shot all-reduce reads the peer's input; a ring all-reduce
# also puts what it reduces into the peer's output (RX_RRCS_PULL).
for name in allreduce_allpairs allreduce_ring; do
  "$bin" compile "$src/algorithms/$name.lua" ranks=2 --pull --emit cuda >"$tmp/pull-$name.cu"
  grep -q "RX_PROGRAM_BEGIN(2, [12])" "$tmp/pull-$name.cu"
  build "pull-$name" none
done
grep -q "RX_RRCS_PULL" "$tmp/pull-allreduce_ring.cu"
