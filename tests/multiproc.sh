#!/bin/sh
# Communicators of one rank per process (tests/test_multiproc.c) on the GPUs
# there are, several processes sharing each through CUDA IPC.
#   multiproc.sh RESCCL TEST_MULTIPROC [NPROC...]   check on each count of processes
#                                                   (default 2 and 4), then faults on 2
#                                                   and LOOP (default 1000) init/destroy,
#                                                   then a split of 4 into two halves
# MODES (default "check faults loop split") picks; WRAP runs the test under a tool
# (compute-sanitizer --target-processes all ...).
# Every rendezvous listens on the loopback interface. Exits 77 (skipped) where
# there is no GPU.
set -eu
bin=$1 test=$2
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
[ "${ngpu:-0}" -ge 1 ] || { echo "no GPU: multi-process tests skipped"; exit 77; }
export RESCCL_SOCKET_IFNAME=lo
plans() { # N: DIR/N holds the plans for N ranks
  d=$tmp/$1
  mkdir -p "$d"
  for c in allreduce allgather reducescatter; do
    "$bin" compile "$src/algorithms/${c}_ring.lua" ranks="$1" --plan "$d/$c.plan"
  done
  "$bin" compile "$src/algorithms/alltoall_direct.lua" ranks="$1" --plan "$d/alltoall.plan"
  "$bin" compile "$src/algorithms/allreduce_rd.lua" ranks="$1" --plan "$d/allreduce-other.plan"
  "$bin" compile "$src/algorithms/allreduce_ring.lua" ranks=$(($1 + 1)) --plan "$d/other-ranks.plan"
}
modes=${MODES:-check faults loop split}
for n in ${@:-2 4}; do
  plans "$n"
  case " $modes " in *" check "*) ${WRAP:-} "$test" "$n" "$tmp/$n" check ;; esac
done
[ -d "$tmp/2" ] || plans 2
# The kernels are in the cache by now (RESCCL_CACHE): a wait of 3 s is ample for every round.
case " $modes " in *" faults "*) RESCCL_TIMEOUT=3 ${WRAP:-} "$test" 2 "$tmp/2" faults ;; esac
case " $modes " in *" loop "*) ${WRAP:-} "$test" 2 "$tmp/2" loop "${LOOP:-1000}" ;; esac
if case " $modes " in *" split "*) true ;; *) false ;; esac; then
  [ -d "$tmp/4" ] || plans 4
  ${WRAP:-} "$test" 4 "$tmp/4" split "$tmp/2"
fi
