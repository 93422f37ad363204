#!/bin/sh
# On a 2-GPU machine after tools/gpu/gpu-check.sh built build-gpu/: time this
# tree against another (OLD, a source tree, e.g. `git archive REV | tar -x -C
# out/old` here, carried along), alternating old and new REPS times on one
# machine, so that drift between runs cancels. Out-of-place busbw GB/s of
# `resccl bench` (every size checked), one line per run.
#   ALGS='allreduce_ring' SIZES='1M 8M' REPS=2 tools/gpu/gpu-ab.sh OLD [OUTDIR]
set -u
old=${1:?usage: tools/gpu/gpu-ab.sh OLD_TREE [OUTDIR]}
out=${2:-/tmp/gpu-ab}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
. tools/gpu/lua-env.sh
(cd "$old" && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${prefix:-} &&
  cmake --build build-gpu -j "$(nproc)") >"$out/build-old.log" 2>&1 || { tail -20 "$out/build-old.log"; exit 1; }
printf '%-20s %8s %4s %5s %10s %7s %10s %7s\n' collective bytes run tree out-busbw wrong in-busbw wrong
fail=0
for a in ${ALGS:-allreduce_ring reducescatter_ring allgather_ring}; do
  for s in ${SIZES:-1M 8M 32M 1G}; do
    rep=1
    while [ $rep -le "${REPS:-2}" ]; do
      for tree in old new; do
        bin=build-gpu/resccl
        [ $tree = old ] && bin=$old/build-gpu/resccl
        f="$out/$a-$s-$rep-$tree.txt"
        "$bin" bench "algorithms/$a.lua" -g 2 -b "$s" -e "$s" -n 20 -w 5 --nccl 0 >"$f" 2>&1 || fail=1
        grep -E '^ +[0-9]' "$f" | head -1 | awk -v a="$a" -v s="$s" -v r="$rep" -v t="$tree" \
          '{ printf "%-20s %8s %4s %5s %10s %7s %10s %7s\n", a, s, r, t, $7, $8, $11, $12 }'
      done
      rep=$((rep + 1))
    done
  done
done
exit $fail
