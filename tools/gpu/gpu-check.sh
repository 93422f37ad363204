#!/bin/sh
# On a GPU machine: build resccl and libresccl, run the C API tests (CTest
# label gpu; communicators of one rank per process on their own, and under
# compute-sanitizer), every shipped algorithm and every dtype x op on the GPUs
# (virtual ranks on one GPU, and spread over all of them) checked against the
# reference, compute-sanitizer on a small case, then what blocks push to the
# peer (tools/probes/probe-push.cu), what reading the peer's input gives (tools/probes/probe-pull.cu),
# what a block reduces (tools/probes/probe-reduce.cu), what adding at the destination
# gives (tools/probes/probe-red.cu), processes reading each other through CUDA IPC
# (tools/probes/probe-ipc.cu) and the benchmarks (on two GPUs or more, NCCL
# beside them, and the copy engine against the blocks below 64 MiB; on one
# GPU, a call's fixed cost, on virtual ranks in graphs).
#   tools/gpu/gpu-check.sh [OUTDIR]      CHECKS=0 / BENCH=0 skip a part; BMIN, BMAX sizes;
#                                    LANES parallel lanes for the virtual-rank checks
# Where the machine has no Lua, carry Debian's liblua5.4 debs in .deps/debs
# (`apt-get download liblua5.4-0 liblua5.4-dev`); they are unpacked to /opt/lua.
set -u
out=${1:-${OUT:-/tmp/gpu-check}}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/../.."
. tools/gpu/lua-env.sh
t0=$(date +%s)
took() { echo "($1: $(($(date +%s) - t0)) s since start)"; }
nvidia-smi -L | tee "$out/gpus.txt"
ngpu=$(nvidia-smi -L | grep -c GPU)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${prefix:-} >"$out/build.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
took build
bin=build-gpu/resccl
fail=0
[ -f build-gpu/libresccl.so ] || { echo "libresccl was not built (no CUDA toolkit found)"; exit 1; }
export RESCCL_CACHE="$out/cache" # every kernel built by NVRTC in this run
# The runtime's C API: the collectives on every GPU, then 4 ranks sharing them.
if [ "${CHECKS:-1}" = 1 ]; then
  (cd build-gpu && ctest -L gpu -E gpu_multiproc --output-on-failure) >"$out/ctest-gpu.txt" 2>&1 || fail=1
  # One rank per process (tests/multiproc.sh): 2 and 4 processes sharing the GPUs, the faults,
  # 1000 init/destroy; then 2 processes under compute-sanitizer.
  tests/multiproc.sh "$bin" build-gpu/tests/test_multiproc >"$out/multiproc.txt" 2>&1 || fail=1
  printf '%-44s %s\n' "one rank per process, 2 and 4 processes" "$(tail -1 "$out/multiproc.txt")"
  if command -v compute-sanitizer >/dev/null; then
    MODES=check WRAP="compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9" \
      tests/multiproc.sh "$bin" build-gpu/tests/test_multiproc 2 >"$out/sanitizer-multiproc.txt" 2>&1 || fail=1
    printf '%-44s %s\n' "compute-sanitizer memcheck, 2 processes" "$(grep -E 'ERROR SUMMARY' "$out/sanitizer-multiproc.txt" | tail -1)"
  fi
  RANKS=4 tests/runtime.sh "$bin" build-gpu/tests/test_runtime run >"$out/runtime-r4.txt" 2>&1 || fail=1
  printf '%-44s %s\n' "C API, $ngpu GPUs (ctest -L gpu)" "$(grep -E 'tests passed|tests failed' "$out/ctest-gpu.txt" | tail -1 | cut -c1-60)"
  printf '%-44s %s\n' "C API, 4 ranks on $ngpu GPUs" "$(tail -1 "$out/runtime-r4.txt")"
fi
# Checks are queued, then run: those on virtual ranks (ndev=1) in LANES
# parallel lanes (default two per GPU, each lane on one GPU), the others one
# at a time; most of a check's time is starting CUDA, not the GPU.
rm -f "$out/queue.virtual" "$out/queue.gpus"
check() { # name args...
  case " $* " in *" ndev=1 "*) echo "$*" >>"$out/queue.virtual" ;; *) echo "$*" >>"$out/queue.gpus" ;; esac
}
run_check() { # name args...
  name=$1
  shift
  if "$bin" run "$@" --gpu >"$out/$name.txt" 2>&1; then r=PASS; else r=FAIL; fi
  printf '%-44s %s  %s\n' "$name" "$r" "$(grep -E '^exec ' "$out/$name.txt" | sed 's/  */ /g' | cut -c1-100 | head -1)" \
    >"$out/$name.result"
}
run_queue() { # file lanes: lane k runs lines k, k + lanes, ... on GPU k mod ngpu
  [ -f "$1" ] || return 0
  k=0
  while [ $k -lt "$2" ]; do
    (
      [ "$2" -gt 1 ] && export CUDA_VISIBLE_DEVICES=$((k % ngpu))
      i=0
      while read -r line; do
        [ $((i % $2)) = $k ] && run_check $line
        i=$((i + 1))
      done <"$1"
    ) &
    k=$((k + 1))
  done
  wait
  while read -r line; do
    set -- $line
    cat "$out/$1.result"
    grep -q ' FAIL ' "$out/$1.result" && fail=1
  done <"$1"
}
big="count=1048576 nmicro=4 slots=4 slot_bytes=524288 iters=5"
[ "${CHECKS:-1}" = 1 ] && for a in allgather_ring reducescatter_ring allreduce_ring allgather_allpairs alltoall_direct allreduce_rd \
  allreduce_allpairs; do
  check "$a.r4.virtual" "algorithms/$a.lua" ranks=4 ndev=1 count=4099 nmicro=3 slots=2 slot_bytes=4096
  check "$a.r2.gpu$ngpu" "algorithms/$a.lua" ranks=2 ndev="$ngpu" $big
done
if [ "${CHECKS:-1}" = 1 ]; then
  check allreduce_hm.2x2.virtual algorithms/allreduce_hm.lua topo=a100:2x2 ndev=1 count=4099 nmicro=3
  check allgather_hm.2x2.virtual algorithms/allgather_hm.lua topo=a100:2x2 ndev=1 count=4099 nmicro=3
  check allreduce_ring.r8.virtual algorithms/allreduce_ring.lua ranks=8 ndev=1 count=65537 nmicro=4 dtype=i32 op=max
  # Copy-engine copies (--ce): no TB at all on two ranks, virtual ranks sharing a GPU, puts
  # that reductions wait for, and puts that wait for the kernel's counters (a two-rank all-reduce's
  # second hop, a four-rank all-gather's last puts).
  check "allgather_ring.r2.ce.gpu$ngpu" algorithms/allgather_ring.lua ranks=2 ndev="$ngpu" $big --ce
  check alltoall_direct.r4.ce.virtual algorithms/alltoall_direct.lua ranks=4 ndev=1 count=4099 nmicro=3 dtype=f16 --ce
  check "reducescatter_ring.r2.ce.gpu$ngpu" algorithms/reducescatter_ring.lua ranks=2 ndev="$ngpu" $big dtype=bf16 \
    op=avg --ce
  check allreduce_ring.r2.ce.virtual algorithms/allreduce_ring.lua ranks=2 ndev=1 count=4099 nmicro=3 dtype=i8 op=max --ce
  check "allreduce_ring.r2.ce.gpu$ngpu" algorithms/allreduce_ring.lua ranks=2 ndev="$ngpu" $big dtype=f16 op=sum --ce
  check allgather_ring.r4.ce.virtual algorithms/allgather_ring.lua ranks=4 ndev=1 count=4099 nmicro=3 dtype=u8 --ce
  check allreduce_ring.r2.f64prod algorithms/allreduce_ring.lua ranks=2 ndev="$ngpu" count=1001 dtype=f64 op=prod
  # Pulls (--pull): receives read the sender's input: a one-shot all-reduce and a reduce-scatter
  # across the GPUs, an all-gather and recursive doubling on virtual ranks.
  check "allreduce_allpairs.r2.pull.gpu$ngpu" algorithms/allreduce_allpairs.lua ranks=2 ndev="$ngpu" $big dtype=f16 --pull
  check "reducescatter_ring.r2.pull.gpu$ngpu" algorithms/reducescatter_ring.lua ranks=2 ndev="$ngpu" $big dtype=bf16 \
    op=avg --pull
  check allgather_ring.r2.pull.virtual algorithms/allgather_ring.lua ranks=2 ndev=1 count=4099 nmicro=3 dtype=u8 --pull
  # and a ring all-reduce that stores what it reduces on both ranks (put_on), in place too
  check "allreduce_ring.r2.pull.gpu$ngpu" algorithms/allreduce_ring.lua ranks=2 ndev="$ngpu" $big dtype=bf16 op=avg --pull
  check allreduce_ring.r2.pull.virtual algorithms/allreduce_ring.lua ranks=2 ndev=1 count=4099 nmicro=3 dtype=i8 op=max --pull
  check allreduce_rd.r8.pull.virtual algorithms/allreduce_rd.lua ranks=8 ndev=1 count=4099 nmicro=3 dtype=f64 op=prod --pull
  # Ranges that meet differently (a put of two chunks copied out one at a time): they move chunk
  # by chunk, as the GPU slices a range (analyse.c); FIFOs of merged TBs hold that too.
  check ranges_ag.virtual spec/fixtures/ranges_ag.lua ndev=1 count=1048576 nmicro=4 iters=5
  check ranges_ag.merge.virtual spec/fixtures/ranges_ag.lua ndev=1 count=1048576 nmicro=4 iters=5 --tb merge
  # Every dtype with every op on virtual ranks, at an odd count (vector tails);
  # avg also through recvReduceCopySend and recvReduceSend (allreduce_rd on 8
  # ranks), reduce-scatter, and across the GPUs; copies of 1- and 2-byte types.
  for dt in i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64; do
    for op in sum prod max min avg; do
      check "allreduce_ring.r4.$dt.$op" algorithms/allreduce_ring.lua ranks=4 ndev=1 count=4099 nmicro=3 dtype=$dt op=$op
    done
    check "allreduce_rd.r8.$dt.avg" algorithms/allreduce_rd.lua ranks=8 ndev=1 count=4099 nmicro=3 dtype=$dt op=avg
    check "reducescatter_ring.r3.$dt.avg" algorithms/reducescatter_ring.lua ranks=3 ndev=1 count=4099 nmicro=3 \
      dtype=$dt op=avg
    check "allreduce_ring.r2.$dt.avg.gpu$ngpu" algorithms/allreduce_ring.lua ranks=2 ndev="$ngpu" $big dtype=$dt op=avg
    check "allgather_ring.r4.$dt" algorithms/allgather_ring.lua ranks=4 ndev=1 count=4099 nmicro=3 dtype=$dt
  done
  run_queue "$out/queue.virtual" "${LANES:-$((2 * ngpu))}"
  run_queue "$out/queue.gpus" 1
fi
# compute-sanitizer on a small case: memory errors, and shared-memory races.
if [ "${CHECKS:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    if compute-sanitizer --tool $tool --error-exitcode 9 "$bin" run algorithms/allreduce_ring.lua ranks=2 ndev=1 \
      count=4099 nmicro=2 slots=2 slot_bytes=4096 iters=0 --gpu >"$out/sanitizer-$tool.txt" 2>&1; then r=PASS; else r=FAIL fail=1; fi
    printf '%-44s %s  %s\n' "compute-sanitizer $tool" "$r" "$(grep -E 'ERROR SUMMARY' "$out/sanitizer-$tool.txt" | tail -1)"
  done
  if compute-sanitizer --tool memcheck --error-exitcode 9 "$bin" run algorithms/alltoall_direct.lua ranks=2 ndev=1 \
    count=4099 nmicro=2 iters=0 --ce --gpu >"$out/sanitizer-ce.txt" 2>&1; then r=PASS; else r=FAIL fail=1; fi
  printf '%-44s %s  %s\n' "compute-sanitizer memcheck, copy engine" "$r" "$(grep -E 'ERROR SUMMARY' "$out/sanitizer-ce.txt" | tail -1)"
  if compute-sanitizer --tool memcheck --error-exitcode 9 "$bin" run algorithms/allreduce_ring.lua ranks=2 ndev=1 \
    count=4099 nmicro=3 iters=0 --ce --gpu >"$out/sanitizer-ce-ar.txt" 2>&1; then r=PASS; else r=FAIL fail=1; fi
  printf '%-44s %s  %s\n' "compute-sanitizer memcheck, counted copies" "$r" "$(grep -E 'ERROR SUMMARY' "$out/sanitizer-ce-ar.txt" | tail -1)"
  if compute-sanitizer --tool memcheck --error-exitcode 9 "$bin" run algorithms/allreduce_allpairs.lua ranks=2 ndev=1 \
    count=4099 nmicro=3 iters=0 --pull --gpu >"$out/sanitizer-pull.txt" 2>&1; then r=PASS; else r=FAIL fail=1; fi
  printf '%-44s %s  %s\n' "compute-sanitizer memcheck, pulls" "$r" "$(grep -E 'ERROR SUMMARY' "$out/sanitizer-pull.txt" | tail -1)"
fi
# Processes sharing the GPUs read each other's buffers through CUDA IPC, their handles
# traded by resccl's rendezvous over loopback (tools/probes/probe-ipc.cu): what the
# multi-process communicators stand on.
if [ "${CHECKS:-1}" = 1 ] && [ -x build-gpu/probe-ipc ]; then
  if RESCCL_SOCKET_IFNAME=lo build-gpu/probe-ipc 4 256 >"$out/probe-ipc.txt" 2>&1; then r=PASS; else r=FAIL fail=1; fi
  printf '%-44s %s  %s\n' "CUDA IPC, 4 processes (probe-ipc)" "$r" "$(grep -E '^rank 0' "$out/probe-ipc.txt" | cut -c1-100)"
fi
echo "gpu-check: $([ $fail = 0 ] && echo all passed || echo FAILURES), logs in $out"
took checks

# What 4 to 32 blocks push to the peer, by what each does per byte (tools/probes/probe-push.cu).
if [ "${BENCH:-1}" = 1 ] && [ "$ngpu" -ge 2 ] && [ -x build-gpu/probe-push ]; then
  { build-gpu/probe-push 1024 512 && build-gpu/probe-push 1024 1024; } >"$out/probe-push.txt" 2>&1
  case $? in 0 | 77) r=ran ;; *) r=FAILED fail=1 ;; esac
  cat "$out/probe-push.txt"
  echo "probe-push: $r"
  took probe-push
fi
# What reading the peer's input gives a one-shot all-reduce, by size and blocks (tools/probes/probe-pull.cu).
if [ "${BENCH:-1}" = 1 ] && [ "$ngpu" -ge 2 ] && [ -x build-gpu/probe-pull ]; then
  build-gpu/probe-pull >"$out/probe-pull.txt" 2>&1 && r=PASS || { r=FAIL; fail=1; }
  cat "$out/probe-pull.txt"
  echo "probe-pull: $r"
  took probe-pull
fi
# What one block moves through its SM reducing locally (tools/probes/probe-reduce.cu;
# built for Hopper, sm_90).
if [ "${BENCH:-1}" = 1 ] && [ -x build-gpu/probe-reduce ] &&
  [ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)" = 9.0 ]; then
  build-gpu/probe-reduce 256 >"$out/probe-reduce.txt" 2>&1 || fail=1
  cat "$out/probe-reduce.txt"
  took probe-reduce
  # Adding where the data lands (tools/probes/probe-red.cu): locally, then into the peer.
  { build-gpu/probe-red 256 && { [ "$ngpu" -lt 2 ] || build-gpu/probe-red 256 peer; }; } >"$out/probe-red.txt" 2>&1 ||
    fail=1
  cat "$out/probe-red.txt"
  took probe-red
fi

# Bandwidth: nccl-tests' table for each ring collective and the direct
# all-to-all over every GPU, NCCL measured in the same run (resccl bench).
if [ "${BENCH:-1}" = 1 ] && [ "$ngpu" -ge 2 ]; then
  for a in allreduce_ring allreduce_allpairs allgather_ring reducescatter_ring alltoall_direct; do
    "$bin" bench "algorithms/$a.lua" -g "$ngpu" -b "${BMIN:-1M}" -e "${BMAX:-8G}" -f 2 -n 20 -w 5 \
      >"$out/bench-$a.txt" 2>&1 || fail=1 bfail=1
    cat "$out/bench-$a.txt"
    took "bench $a"
  done
  # All-reduce by size: the one-shot (its pulling form) below 64 MiB, the ring (its copy-engine form) from there.
  "$bin" bench algorithms/allreduce_allpairs.lua --from 64M algorithms/allreduce_ring.lua -g "$ngpu" -b "${BMIN:-1M}" \
    -e "${BMAX:-8G}" -f 2 -n 20 -w 5 >"$out/bench-allreduce.txt" 2>&1 || fail=1 bfail=1
  cat "$out/bench-allreduce.txt"
  # The copy engine against the blocks from 1 to 64 MiB, launched one by one and in CUDA graphs: where
  # it is even, it frees every block of an all-gather and an all-to-all (RESCCL_CE_FROM: 16 MiB for those).
  for a in allgather_ring alltoall_direct; do
    for how in "" "-G 10" "--ce" "--ce -G 10"; do
      f="$out/bench-ce-$a$(echo "$how" | tr -d ' ').txt"
      "$bin" bench "algorithms/$a.lua" $how -g "$ngpu" -b 1M -e 64M -f 2 -n 20 -w 5 --nccl 0 >"$f" 2>&1 ||
        fail=1 bfail=1
      echo "== $a ${how:-(blocks)}: bytes, us and busbw out of place, us in place, TBs"
      grep -E '^ +[0-9]' "$f" | awk '{ print $1, $5, $7, $9, $(NF - 1) }'
    done
  done
  echo "bench: $([ "${bfail:-0}" = 0 ] && echo every size checked correct || echo FAILURES, see $out/bench-*.txt)"
elif [ "${BENCH:-1}" = 1 ]; then
  # One GPU: a call's fixed cost, two virtual ranks in CUDA graphs (no host
  # time between calls, no link): the same start, waits and ends as on two GPUs.
  for a in allreduce_allpairs "allreduce_ring --pull" reducescatter_ring allgather_ring "allgather_ring --ce"; do
    set -- $a
    f="$out/bench-virtual-$1${2:+-${2#--}}.txt"
    "$bin" bench "algorithms/$1.lua" ${2:-} ranks=2 --virtual -b 64K -e 4M -f 4 -n 100 -w 10 -G 10 >"$f" 2>&1 ||
      fail=1 bfail=1
    echo "== $a, 2 virtual ranks, in graphs"
    grep -E '^ +[0-9]' "$f"
  done
  echo "bench: $([ "${bfail:-0}" = 0 ] && echo every size checked correct || echo FAILURES, see $out/bench-*.txt)"
fi
exit $fail
