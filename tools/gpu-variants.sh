#!/bin/sh
# On a 2-GPU machine after tools/gpu-check.sh built build-gpu/: time kernel
# variants of the ring collectives side by side (out-of-place busbw, GB/s),
# each run checked correct. A variant is NAME|NVRTC options|run arguments;
# `micro` is the bytes of a chunk per micro-batch; arguments are comma-separated.
#   VARIANTS='base||micro=4194304 unroll8|-DRX_UNROLL=8|micro=4194304' tools/gpu-variants.sh [OUTDIR]
set -u
out=${1:-/tmp/gpu-variants}
mkdir -p "$out"
cd "$(dirname "$0")/.."
bin=build-gpu/resccl
if [ -d /opt/lua/usr/lib/x86_64-linux-gnu ]; then # the Lua gpu-check.sh unpacked
  export LD_LIBRARY_PATH=/opt/lua/usr/lib/x86_64-linux-gnu LUA_CPATH="/opt/lua/usr/lib/x86_64-linux-gnu/lua/5.4/?.so;;"
fi
n=2
sizes=${SIZES:-67108864 536870912}
variants=${VARIANTS:-'base||micro=4194304'}
# NCCL, measured in the same run (tools/nccl-bench.cu), in the last column.
lo=$(echo $sizes | tr ' ' '\n' | sort -n | head -1) hi=$(echo $sizes | tr ' ' '\n' | sort -n | tail -1)
nvcc -O2 -o "$out/nccl-bench" tools/nccl-bench.cu -lnccl >/dev/null 2>&1 && "$out/nccl-bench" "$lo" "$hi" >"$out/nccl.txt" 2>&1
printf '%-14s %10s' collective bytes
for v in $variants; do printf ' %10s' "${v%%|*}"; done
printf ' %10s\n' NCCL
for c in allreduce allgather reducescatter; do
  for bytes in $sizes; do
    elems=$((bytes / 4)) count=$elems factor=1
    [ $c = allreduce ] && factor=2 || count=$((elems / n))
    row=$(printf '%-14s %10s' $c $bytes)
    for v in $variants; do
      name=${v%%|*} rest=${v#*|}
      opts=${rest%%|*} args=${rest#*|}
      micro=$(echo "$args" | sed -n 's/.*micro=\([0-9]*\).*/\1/p')
      args=$(echo "$args" | sed 's/micro=[0-9]*//' | tr ',' ' ')
      chunk=$((bytes / n))
      nmicro=$((chunk / ${micro:-4194304})); [ $nmicro -lt 1 ] && nmicro=1
      log="$out/$c-$bytes-$name.txt"
      RESCCL_NVRTC_OPTIONS="$opts" "$bin" run "algorithms/${c}_ring.lua" ranks=$n ndev=$n count=$count \
        nmicro=$nmicro slots=4 slot_bytes=1048576 channels=16 iters=10 $args --gpu >"$log" 2>&1
      ms=$(sed -n 's/^exec .* 0 wrong (\([0-9.]*\) ms).*/\1/p' "$log" | head -1)
      bw=$(awk -v b=$bytes -v ms="${ms:-0}" -v n=$n -v f=$factor \
        'BEGIN { if (ms > 0) printf "%.1f", b / (ms / 1e3) / 1e9 * f * (n - 1) / n; else print "-" }')
      row="$row $(printf ' %10s' "$bw")"
    done
    col=$([ $c = allreduce ] && echo 2 || ([ $c = allgather ] && echo 3 || echo 4))
    echo "$row $(printf ' %10s' "$(awk -v b=$bytes -v k=$col '$1 == b { print $k }' "$out/nccl.txt" 2>/dev/null)")"
  done
done
