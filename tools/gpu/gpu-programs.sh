#!/bin/sh
# Run every ReSCCLang program of a folder on the GPU runtime with virtual ranks
# (one GPU), both placements, state-based and merged TBs, each run bounded in
# time; one line per run: PASS, FAIL (its error) or TIMEOUT.
#   tools/gpu/gpu-programs.sh DIR [resccl run arguments...]
# The programs come from anywhere, e.g. random correct collectives:
#   for s in $(seq 1 200); do lua5.4 tools/fuzz/plans.lua --show $s > out/fz/s$s.lua; done
# Env: BIN (build-gpu/resccl), LIMIT (seconds a run may take, 120: NVRTC
# builds a kernel per placement, 10-20 s each for such programs on the H200
# machine), COUNT (1441440: whole chunks for up to 16 ranks and 24 chunks a
# block), TIMEOUT_MS (10000: a stuck collective reports itself after it).
set -u
dir=${1:?usage: tools/gpu/gpu-programs.sh DIR [resccl run arguments...]}
shift
bin=${BIN:-build-gpu/resccl}
pass=0 bad=0
for f in "$dir"/*.lua; do
  for tb in state merge; do
    out=$(timeout -k 5 "${LIMIT:-120}" stdbuf -oL -eL "$bin" run "$f" ndev=1 count="${COUNT:-1441440}" nmicro=3 \
      iters=2 timeout_ms="${TIMEOUT_MS:-10000}" --tb "$tb" --gpu "$@" 2>&1)
    rc=$?
    if [ $rc = 0 ]; then
      pass=$((pass + 1))
      continue
    fi
    bad=$((bad + 1))
    if [ $rc = 124 ] || [ $rc = 137 ]; then what="TIMEOUT after $(echo "$out" | tail -1 | cut -c1-120)"
    else what="FAIL $(echo "$out" | grep -E 'FAILED|rror' | head -1 | cut -c1-200)"; fi
    echo "$f --tb $tb: $what"
  done
done
echo "gpu-programs: $pass passed, $bad not"
[ $bad = 0 ]
