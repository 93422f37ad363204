#!/bin/sh
# libresccl's plan-file reader on plans resccl writes (tests/test_planfile.c).
#   planfile.sh RESCCL TEST_PLANFILE
set -eu
bin=$1 test=$2
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
a=$src/algorithms
"$bin" compile "$a/allreduce_ring.lua" ranks=4 --plan "$tmp/allreduce.plan"
"$bin" compile "$a/reducescatter_ring.lua" ranks=4 --plan "$tmp/reducescatter.plan"
"$bin" compile "$a/alltoall_direct.lua" ranks=4 --plan "$tmp/alltoall.plan"
"$bin" compile "$a/allreduce_hm.lua" topo=a100:2x2 --plan "$tmp/hm.plan"
"$bin" compile "$a/allgather_ring.lua" ranks=4 --tb merge --plan "$tmp/manual.plan" # FIFOs of two tiles
"$bin" compile "$a/allgather_ring.lua" ranks=2 --ce --plan "$tmp/allgather-ce.plan" # no TBs
"$bin" compile "$a/reducescatter_ring.lua" ranks=2 --ce --plan "$tmp/reducescatter-ce.plan"
# both hops on the copy engine, the second waiting for the reducing TB's counters
"$bin" compile "$a/allreduce_ring.lua" ranks=2 --ce --plan "$tmp/allreduce-ce.plan"
# a one-shot all-reduce whose receives read the peer's input
"$bin" compile "$a/allreduce_allpairs.lua" ranks=2 --pull --plan "$tmp/allreduce-pull.plan"
# a ring all-reduce whose kernels put too (RX_PROGRAM_BEGIN(2, 2))
"$bin" compile "$a/allreduce_ring.lua" ranks=2 --pull --plan "$tmp/allreduce-ring-pull.plan"
exec "$test" "$tmp"
