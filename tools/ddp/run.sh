#!/bin/sh
# On a GPU machine with PyTorch: tools/ddp/train.py under torchrun twice, on NCCL
# alone and then with libresccl-nccl.so preloaded (resccl's default ring plans for NPROC
# ranks, RESCCL_DEBUG=INFO), one process per GPU, every rendezvous on loopback;
# then tools/ddp/compare.py on the two results, and how many calls each library
# ran (the shim's "resccl-nccl: rank R: X calls to resccl, Y to NCCL" lines).
#   tools/ddp/run.sh [OUTDIR]
# Env: NPROC (processes, default every GPU), DTYPE (f32 or bf16), STEPS (50),
# SIZE (2048), BUCKET_MB (train.py's default by dtype), PORT (29500), TRAIN_ARGS
# (more train.py arguments), COMPARE_ARGS (compare.py's, e.g. --rtol 1e-4 or --exact),
# PYTHON (python3; torchrun is run as PYTHON -m torch.distributed.run).
# Fails when a run fails, the runs differ, or, on two GPUs or more, no call ran on
# resccl. NCCL allows one rank per GPU: on one GPU that is one process (world size
# 1), which no resccl plan fits, so every call stays NCCL's; it still runs, as a check.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-${OUT:-/tmp/ddp}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root" || exit 1
py=${PYTHON:-python3}
"$py" -c 'import torch' 2>/dev/null || { echo "run.sh: $py has no torch"; exit 1; }

# resccl and the shim, as tools/gpu/gpu-check.sh builds them
. tools/gpu/lua-env.sh
# shellcheck disable=SC2086 # prefix: several CMake arguments
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${prefix:-} >"$out/build.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
shim=$root/build-gpu/libresccl-nccl.so
[ -f "$shim" ] || { echo "run.sh: build-gpu/libresccl-nccl.so was not built (no CUDA, or nccl.h before 2.14)"; exit 1; }

ngpu=$(nvidia-smi -L | grep -c GPU)
n=${NPROC:-$ngpu}
[ "$n" -ge 1 ] || { echo "run.sh: no GPU"; exit 1; }
[ "$n" -le "$ngpu" ] || { echo "run.sh: $n processes on $ngpu GPUs: NCCL allows one rank per GPU"; exit 1; }
if [ "$n" = 1 ]; then
  echo "one process: NCCL allows one rank per GPU; no resccl plan has one rank, so every"
  echo "call stays NCCL's; run as a check of the recipe"
fi
dtype=${DTYPE:-f32}
# everything on loopback; NVLS off as in the other GPU scripts
export NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo RESCCL_SOCKET_IFNAME=lo
export RESCCL_CACHE="$out/cache"
unset LD_PRELOAD

# train LIB: train.py under torchrun, static rendezvous on 127.0.0.1; LIB.json, LIB.log
train() {
  # shellcheck disable=SC2086 # TRAIN_ARGS: several arguments
  "$py" -m torch.distributed.run --nnodes=1 --nproc_per_node="$n" --master_addr=127.0.0.1 \
    --master_port="${PORT:-29500}" tools/ddp/train.py --dtype "$dtype" --steps "${STEPS:-50}" \
    --size "${SIZE:-2048}" ${BUCKET_MB:+--bucket-mb "$BUCKET_MB"} ${TRAIN_ARGS:-} --out "$out/$1.json" \
    >"$out/$1.log" 2>&1
}
fail=0
for lib in nccl resccl; do
  log=$out/$lib.log
  rm -f "$out/$lib.json"
  echo "== train.py on $lib: $n processes, $dtype"
  if [ $lib = resccl ]; then
    # the kernels of the run's dtype only (RESCCL_DTYPES): calls of another go to NCCL
    (
      export LD_PRELOAD="$shim" RESCCL_DEBUG=INFO RESCCL_DTYPES="$dtype"
      train $lib
    )
  else
    train $lib
  fi
  rc=$?
  grep -E '^(step|train\.py:)' "$log" | tail -4
  if [ $rc != 0 ] || [ ! -f "$out/$lib.json" ]; then
    tail -30 "$log"
    echo "run.sh: train.py on $lib failed (exit $rc), see $log"
    fail=1
  fi
done
[ $fail = 0 ] || exit 1

echo "== nccl against resccl"
# shellcheck disable=SC2086 # COMPARE_ARGS: several arguments
"$py" tools/ddp/compare.py "$out/nccl.json" "$out/resccl.json" ${COMPARE_ARGS:-} || fail=1
"$py" -c 'import json, sys; r = json.load(open(sys.argv[1])); print("buckets:", r.get("bucket_sizes"))' \
  "$out/resccl.json"
# the shim's count of calls per library, every rank's line summed
grep -h 'resccl-nccl: rank [0-9]*: [0-9]* calls to resccl' "$out/resccl.log" | sort -u
counts=$(grep -h 'resccl-nccl: rank [0-9]*: [0-9]* calls to resccl' "$out/resccl.log" |
  awk '{ r += $4; n += $(NF - 2); k++ } END { printf "%d %d %d", r, n, k }')
# shellcheck disable=SC2086 # three numbers
set -- $counts
grep -h 'resccl-nccl: .*\(not used\|NCCL runs every call\)' "$out/resccl.log" | sort -u | head -3
if [ "$3" = 0 ]; then
  echo "calls: no count from the shim (not preloaded, torch's NCCL linked statically, or its communicators not taken)"
else
  echo "calls: $1 to resccl, $2 to NCCL ($3 ranks)"
fi
if [ "$n" -ge 2 ] && [ "$1" = 0 ]; then
  echo "run.sh: no call ran on resccl"
  fail=1
fi
echo "run.sh: $([ $fail = 0 ] && echo "the runs agree" || echo FAILED), logs in $out"
exit $fail
