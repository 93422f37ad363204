#!/bin/sh
# On a 2-GPU machine after tools/gpu/gpu-check.sh built build-gpu/: time
# variants of the runtime's settings side by side with `resccl bench` (every
# size checked), out-of-place busbw GB/s (COL=in: in place), NCCL's
# out-of-place busbw from the same run last. A
# variant is NAME|VAR=value,VAR=value[|bench arguments, comma-separated]
# (RESCCL_* knobs, docs/runtime.md; arguments such as --tb,merge).
#   VARIANTS='base| ch16|RESCCL_NCHANNELS=16 merge||--tb,merge' \
#   SIZES='8M 64M 512M' tools/gpu/gpu-variants.sh [OUTDIR]
set -u
out=${1:-/tmp/gpu-variants}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
bin=build-gpu/resccl
. tools/gpu/lua-env.sh
variants=${VARIANTS:-'base|'}
col=7
[ "${COL:-out}" = in ] && col=11
for a in ${ALGS:-allreduce_ring allgather_ring reducescatter_ring}; do
  first=1
  for v in $variants; do
    name=${v%%|*} rest=${v#*|}
    envs=$(echo "${rest%%|*}" | tr ',' ' ') args=
    case $rest in *'|'*) args=$(echo "${rest#*|}" | tr ',' ' ') ;; esac
    for s in ${SIZES:-8M 64M 512M}; do
      env $envs "$bin" bench "algorithms/$a.lua" $args -g 2 -b "$s" -e "$s" -n 10 -w 3 \
        --nccl "$first" >"$out/$a-$name-$s.txt" 2>&1
    done
    first=0
  done
  printf '%-20s %12s' "$a" bytes
  for v in $variants; do printf ' %10s' "${v%%|*}"; done
  printf ' %10s\n' NCCL
  for s in ${SIZES:-8M 64M 512M}; do
    row="" bytes=""
    for v in $variants; do
      line=$(grep -E '^ +[0-9]' "$out/$a-${v%%|*}-$s.txt" | head -1)
      bytes=$(echo "$line" | awk '{ print $1 }')
      row="$row $(printf ' %10s' "$(echo "$line" | awk -v c="$col" '{ print $c }')")"
    done
    nccl=$(grep -E '^ +[0-9]' "$out/$a-${variants%%|*}-$s.txt" | head -1 | awk '{ print $13 }')
    printf '%-20s %12s%s %10s\n' "" "${bytes:--}" "$row" "${nccl:--}"
  done
done
