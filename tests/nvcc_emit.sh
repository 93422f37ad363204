#!/bin/sh
# Compiles the emitted CUDA of every algorithm for sm_90 (no GPU needed).
# Exits 77 (skipped) where there is no nvcc.
set -eu
bin=$1
src=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "nvcc not found: CUDA emission not compiled (skipped)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for alg in "$src"/algorithms/*.lua; do
  name=$(basename "$alg" .lua)
  case $name in *_hm) args=topo=a100:2x2 ;; *) args=ranks=4 ;; esac
  "$bin" compile "$alg" $args --emit cuda >"$tmp/$name.cu"
  "$nvcc" -arch=sm_90 -diag-suppress 177 -c -o "$tmp/$name.o" "$tmp/$name.cu"
  echo "compiled $name ($args) for sm_90"
done
# Merged TBs run several primitives in one micro-batch loop.
"$bin" compile "$src"/algorithms/allreduce_ring.lua ranks=4 --tb merge --emit cuda >"$tmp/merged.cu"
"$nvcc" -arch=sm_90 -diag-suppress 177 -c -o "$tmp/merged.o" "$tmp/merged.cu"
echo "compiled allreduce_ring (ranks=4, --tb merge) for sm_90"
# The copy engine takes every copy of a two-rank all-gather (ranks with no
# TB) and a reduce-scatter's puts (its reductions wait for them).
for name in allgather_ring reducescatter_ring; do
  "$bin" compile "$src/algorithms/$name.lua" ranks=2 --ce --emit cuda >"$tmp/ce-$name.cu"
  "$nvcc" -arch=sm_90 -diag-suppress 177 -c -o "$tmp/ce-$name.o" "$tmp/ce-$name.cu"
  echo "compiled $name (ranks=2, --ce) for sm_90"
done
# Pulls: a one-shot all-reduce reads the peer's input; a ring all-reduce
# also puts what it reduces into the peer's output (RX_RRCS_PULL).
for name in allreduce_allpairs allreduce_ring; do
  "$bin" compile "$src/algorithms/$name.lua" ranks=2 --pull --emit cuda >"$tmp/pull-$name.cu"
  grep -q "RX_PROGRAM_BEGIN(2, [12])" "$tmp/pull-$name.cu"
  "$nvcc" -arch=sm_90 -diag-suppress 177 -c -o "$tmp/pull-$name.o" "$tmp/pull-$name.cu"
  echo "compiled $name (ranks=2, --pull) for sm_90"
done
grep -q "RX_RRCS_PULL" "$tmp/pull-allreduce_ring.cu"
