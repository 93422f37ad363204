#!/bin/sh
# libresccl-nccl.so preloaded into a program written for NCCL (tests/test_nccl.c).
#   nccl.sh RESCCL SHIM TEST_NCCL FAKE_NCCL_DIR
# 1. Under tests/fake_nccl.c, an NCCL that runs nothing: two ranks on GPU 0 (NCCL itself
#    refuses that), every all-reduce, all-gather and reduce-scatter checked, so run by
#    resccl's plans; fp8 and f16 all-reduces (no kernels for them) left to NCCL.
# 2. Under NCCL itself, on every GPU: with two or more, resccl runs every call; with one,
#    no plan fits (none has one rank) and NCCL runs them, checked the same.
# Each with communicators of ncclCommInitAll, of ncclCommInitRank in a group, and of
# ncclCommInitRank in a process per rank (resccl's ranks trade through NCCL's communicator; under
# NCCL itself on two GPUs or more only: NCCL refuses two processes on one GPU). Then under the fake
# NCCL with RESCCL_NCCL_PLANS unset: resccl's default plans.
# Exits 77 (skipped) where there is no GPU.
set -eu
bin=$1 shim=$2 test=$3 fake=$4
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
[ "${ngpu:-0}" -ge 1 ] || { echo "no GPU: NCCL shim tests skipped"; exit 77; }
# plans N: ring plans for N ranks, as RESCCL_NCCL_PLANS lists them
plans() {
  list=
  for c in allreduce allgather reducescatter; do
    "$bin" compile "$src/algorithms/${c}_ring.lua" ranks="$1" --plan "$tmp/$c-$1.plan" >/dev/null
    list=$list${list:+:}$tmp/$c-$1.plan
  done
  echo "$list"
}
# run LOG N [virtual]: test_nccl with the shim preloaded; fails with its log
run() {
  log=$tmp/$1.log
  shift
  if ! LD_PRELOAD=$shim RESCCL_DEBUG=INFO "$test" "$@" >"$log" 2>&1; then
    cat "$log"
    echo "nccl.sh: test_nccl $* failed"
    exit 1
  fi
  grep -v '^resccl ' "$log"
}
# expect LOG N PATTERN: PATTERN is on N lines of LOG
expect() {
  n=$(grep -c "$3" "$tmp/$1.log" || true)
  [ "$n" = "$2" ] || { cat "$tmp/$1.log"; echo "nccl.sh: '$3' on $n lines of $1, not $2"; exit 1; }
}
plans2=$(plans 2)
# communicators of ncclCommInitAll, of ncclCommInitRank in a group, and of one a process
for how in all rank proc; do
  LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} RESCCL_DTYPES=f32,bf16 RESCCL_NCCL_PLANS=$plans2 run fake-$how 2 virtual $how
  if [ $how = proc ]; then
    expect fake-$how 2 'resccl-nccl: rank [01] of 2, one per process: resccl runs its plans'
  else
    expect fake-$how 1 'resccl-nccl: 2 ranks: resccl runs allreduce allgather reducescatter'
  fi
  expect fake-$how 2 'rank [01]: 13 calls to resccl, 2 to NCCL$'
  if [ $how = proc ] && [ "$ngpu" -lt 2 ]; then
    echo "one GPU: NCCL itself refuses a process per rank on it; skipped"
  elif ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
    echo "no libnccl.so.2 on this machine: the runs under NCCL itself are skipped"
  elif [ "$ngpu" -ge 2 ]; then
    n=$([ "$ngpu" -gt 8 ] && echo 8 || echo "$ngpu") # test_nccl's most
    RESCCL_NCCL_PLANS=$(plans "$n") run nccl-$how "$n" $how
    expect nccl-$how "$n" ': 12 calls to resccl, 0 to NCCL$'
  else
    RESCCL_NCCL_PLANS=$plans2 run nccl-$how 1 $how
    expect nccl-$how 3 'resccl-nccl: .*not used: .*'
    expect nccl-$how 0 'calls to resccl'
  fi
done
# RESCCL_NCCL_PLANS unset: resccl's own ring plans, compiled once by the CLI beside the shim into
# the plan cache, a process per rank.
LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} RESCCL_DTYPES=f32,bf16 run fake-default 2 virtual proc
expect fake-default 2 'rank [01]: 13 calls to resccl, 2 to NCCL$'
n=$(ls "${RESCCL_CACHE:-$HOME/.cache/resccl}"/plans/*_ring-r2-*.plan | wc -l)
[ "$n" -ge 3 ] || { echo "nccl.sh: $n default plans cached, not 3"; exit 1; }
echo "nccl.sh: passed"
