set -u
. tools/gpu/lua-env.sh
export NCCL_NVLS_ENABLE=0 RESCCL_CACHE=$OUT/cache
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${prefix:-} >$OUT/build.log 2>&1 &&
  cmake --build build-gpu -j16 --target resccl test_runtime test_multiproc >>$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo built
timeout 300 env LOOP=100 tests/multiproc.sh build-gpu/resccl build-gpu/tests/test_multiproc 2 4 > $OUT/mp.txt 2>&1; echo "multiproc rc=$?"
tail -40 $OUT/mp.txt
timeout 200 tests/runtime.sh build-gpu/resccl build-gpu/tests/test_runtime run > $OUT/rt.txt 2>&1; echo "runtime rc=$?"
tail -15 $OUT/rt.txt
