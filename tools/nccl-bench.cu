/*
** nccl-bench.cu — the anchor for GPU benchmarks: NCCL's all-reduce,
** all-gather and reduce-scatter on every GPU of this machine, one process
** (ncclCommInitAll), out-of-place, timed like nccl-tests (median of 20 runs
** after 5 warm-ups), busbw with nccl-tests' factors. NVLS stays off.
**   nvcc -O2 -o nccl-bench tools/nccl-bench.cu -lnccl
**   ./nccl-bench MIN_BYTES MAX_BYTES   (sizes double)
*/
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define CK(c) do { cudaError_t e_ = (c); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #c, cudaGetErrorString(e_)); exit(1); } } while (0)
#define NK(c) do { ncclResult_t r_ = (c); if (r_ != ncclSuccess) { fprintf(stderr, "%s: %s\n", #c, ncclGetErrorString(r_)); exit(1); } } while (0)

int main(int argc, char **argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  size_t lo = argc > 1 ? strtoull(argv[1], 0, 0) : 1 << 20, hi = argc > 2 ? strtoull(argv[2], 0, 0) : 1ull << 30;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  std::vector<ncclComm_t> comm(n);
  std::vector<int> devs(n);
  for (int i = 0; i < n; i++) devs[i] = i;
  NK(ncclCommInitAll(comm.data(), n, devs.data()));
  std::vector<float *> a(n), b(n);
  std::vector<cudaStream_t> s(n);
  for (int i = 0; i < n; i++) {
    CK(cudaSetDevice(i));
    CK(cudaMalloc(&a[i], hi));
    CK(cudaMalloc(&b[i], hi));
    CK(cudaMemset(a[i], 1, hi));
    CK(cudaStreamCreate(&s[i]));
  }
  printf("# NCCL %d GPUs, out-of-place; busbw GB/s (nccl-tests factors)\n", n);
  printf("%12s %12s %12s %12s\n", "bytes", "all_reduce", "all_gather", "reduce_scatter");
  for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
    double bw[3];
    for (int op = 0; op < 3; op++) {
      size_t count = bytes / sizeof(float); /* all-reduce: the buffer; all-gather/reduce-scatter: the whole output/input */
      std::vector<float> t;
      for (int it = 0; it < 25; it++) {
        std::vector<cudaEvent_t> e0(n), e1(n);
        for (int i = 0; i < n; i++) {
          CK(cudaSetDevice(i));
          CK(cudaDeviceSynchronize());
        }
        /* Events go outside the group: NCCL enqueues the collectives at ncclGroupEnd. */
        for (int i = 0; i < n; i++) {
          CK(cudaSetDevice(i));
          CK(cudaEventCreate(&e0[i]));
          CK(cudaEventCreate(&e1[i]));
          CK(cudaEventRecord(e0[i], s[i]));
        }
        NK(ncclGroupStart());
        for (int i = 0; i < n; i++) {
          if (op == 0) NK(ncclAllReduce(a[i], b[i], count, ncclFloat, ncclSum, comm[i], s[i]));
          if (op == 1) NK(ncclAllGather(a[i], b[i], count / n, ncclFloat, comm[i], s[i]));
          if (op == 2) NK(ncclReduceScatter(a[i], b[i], count / n, ncclFloat, ncclSum, comm[i], s[i]));
        }
        NK(ncclGroupEnd());
        for (int i = 0; i < n; i++) {
          CK(cudaSetDevice(i));
          CK(cudaEventRecord(e1[i], s[i]));
        }
        float ms = 0;
        for (int i = 0; i < n; i++) {
          float x;
          CK(cudaSetDevice(i));
          CK(cudaEventSynchronize(e1[i]));
          CK(cudaEventElapsedTime(&x, e0[i], e1[i]));
          ms = std::max(ms, x);
          cudaEventDestroy(e0[i]), cudaEventDestroy(e1[i]);
        }
        if (it >= 5) t.push_back(ms);
      }
      std::sort(t.begin(), t.end());
      double sec = t[t.size() / 2] / 1e3, algbw = bytes / sec / 1e9;
      bw[op] = algbw * (op == 0 ? 2.0 * (n - 1) / n : (double)(n - 1) / n);
    }
    printf("%12zu %12.1f %12.1f %12.1f\n", bytes, bw[0], bw[1], bw[2]);
  }
  for (int i = 0; i < n; i++) ncclCommDestroy(comm[i]);
  return 0;
}
