/*
** probe-push.cu — what 4 to 32 blocks move to the peer GPU, by what each
** does per byte: the ceiling the runtime's pushing blocks are measured against.
**   probe-push [MiB per GPU, 1024] [threads per block, 512]
** Two GPUs with peer access push to each other at once; every block moves
** one contiguous slice of 16-byte vectors, in pieces of 2 MiB (the runtime's
** slot). Variants, each with 4, 8, 16 and 32 blocks:
**   remote        loads here, stores to the peer, 8 loads in flight
**   remote x16    the same with 16 loads in flight
**   remote .cs    the same with streaming stores
**   remote+local  8 loads, each vector also stored here (a copy-send)
**   mover         the runtime's own copy (rx_copy16 of cuda.cuh), per piece
**   mover+local   the same as a copy-send calls it: here, and the peer second
**   mover+publish the mover, then per piece what a direct send does after
**                 it: block barrier, system fence, a counter stored to the peer
**   publish 128K  the same in pieces of 128 KiB (a mid-size micro-batch's)
** The kernel is built for at most 512 or 1024 threads (the runtime's launch
** bounds), so at 1024 the x16 variant spills, as the runtime would.
** Prints GB/s per direction (the slower GPU). Built where nvcc is; run on a
** machine with two GPUs (tools/gpu/gpu-check.sh runs it before the benchmarks).
*/
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_abi.h"
#include "tile.h"
#include "cuda.cuh"

#define PIECE ((size_t)2 << 20)

enum { REMOTE, REMOTE16, REMOTE_CS, REMOTE_LOCAL, MOVER, MOVER_LOCAL, MOVER_PUBLISH, PUBLISH_SMALL, NVARIANTS };
static const char *const names[NVARIANTS] = {"remote",      "remote x16",  "remote .cs",    "remote+local",
                                             "mover",       "mover+local", "mover+publish", "publish 128K"};

/* nv vectors of s to d (and l), U loads in flight per thread; CS: streaming
   stores (st.global.cs) to the peer. */
template <int U, bool CS> __device__ static void plain(const int4 *s, int4 *d, int4 *l, size_t nv) {
  size_t step = blockDim.x, i = threadIdx.x;
  for (; i + (U - 1) * step < nv; i += U * step) {
    int4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = __ldcg(s + i + u * step);
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (CS) __stcs(d + i + u * step, v[u]);
      else d[i + u * step] = v[u];
      if (l) l[i + u * step] = v[u];
    }
  }
  for (; i < nv; i += step) {
    int4 x = __ldcg(s + i);
    d[i] = x;
    if (l) l[i] = x;
  }
}

/* Block b moves bytes [b * slice, (b + 1) * slice) of src to dst (the
   peer's), and to mine too where the variant says. Built for at most B
   threads per block, as the runtime builds its kernels for theirs. */
template <int B>
__global__ void __launch_bounds__(B) push(int variant, const char *src, char *dst, char *mine, size_t slice,
                                          unsigned long long *peer_count) {
  size_t lo = (size_t)blockIdx.x * slice;
  const int4 *s = (const int4 *)(src + lo);
  int4 *d = (int4 *)(dst + lo);
  switch (variant) {
  case REMOTE: return plain<8, false>(s, d, NULL, slice / 16);
  case REMOTE16: return plain<16, false>(s, d, NULL, slice / 16);
  case REMOTE_CS: return plain<8, true>(s, d, NULL, slice / 16);
  case REMOTE_LOCAL: return plain<8, false>(s, d, (int4 *)(mine + lo), slice / 16);
  }
  size_t piece = variant == PUBLISH_SMALL ? (size_t)128 << 10 : PIECE;
  for (size_t k = 0; k < slice; k += piece) {
    size_t w = slice - k < piece ? slice - k : piece;
    if (variant == MOVER_LOCAL) rx_copy16(mine + lo + k, src + lo + k, w, dst + lo + k); /* as a copy-send calls it */
    else rx_copy16(dst + lo + k, src + lo + k, w, NULL);
    if (variant >= MOVER_PUBLISH) {
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence_system();
        *(volatile unsigned long long *)&peer_count[blockIdx.x] = k / piece + 1;
      }
    }
  }
}

#define CK(call)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "probe-push: %s: %s\n", #call, cudaGetErrorString(e_));     \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

int main(int argc, char **argv) {
  size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 1024) << 20;
  int threads = argc > 2 ? atoi(argv[2]) : 512, ngpu = 0;
  if (bytes < ((size_t)64 << 20) || threads < 32 || threads > 1024 || threads % 32) {
    fprintf(stderr, "usage: probe-push [MiB per GPU, at least 64] [threads per block, a multiple of 32]\n");
    return 2;
  }
  int peer = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 2 || cudaDeviceCanAccessPeer(&peer, 0, 1) != cudaSuccess || !peer) {
    printf("probe-push: needs two GPUs with peer access; skipped\n");
    return 77;
  }
  char *src[2], *dst[2], *mine[2];
  unsigned long long *count[2];
  cudaStream_t st[2];
  cudaEvent_t ev[2][2];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CK(cudaMalloc(&src[g], bytes));
    CK(cudaMalloc(&dst[g], bytes));
    CK(cudaMalloc(&mine[g], bytes));
    CK(cudaMalloc(&count[g], 64 * sizeof(unsigned long long)));
    CK(cudaMemset(src[g], g + 1, bytes));
    CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
    CK(cudaEventCreate(&ev[g][0]));
    CK(cudaEventCreate(&ev[g][1]));
  }
  static const int blocks[] = {4, 8, 16, 32};
  printf("# GB/s per direction, %zu MiB each way, %d threads per block\n%-14s", bytes >> 20, threads, "variant");
  for (int b = 0; b < 4; b++) printf(" %8d blk", blocks[b]);
  printf("\n");
  for (int v = 0; v < NVARIANTS; v++) {
    printf("%-14s", names[v]);
    for (int b = 0; b < 4; b++) {
      size_t slice = bytes / (size_t)blocks[b] / 16 * 16;
      float best = 0;
      for (int rep = 0; rep < 4; rep++) { /* the first is a warm-up; the best of the rest */
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          CK(cudaDeviceSynchronize());
        }
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          CK(cudaEventRecord(ev[g][0], st[g]));
          if (threads <= 512) push<512><<<blocks[b], threads, 0, st[g]>>>(v, src[g], dst[1 - g], mine[g], slice, count[1 - g]);
          else push<1024><<<blocks[b], threads, 0, st[g]>>>(v, src[g], dst[1 - g], mine[g], slice, count[1 - g]);
          CK(cudaGetLastError());
          CK(cudaEventRecord(ev[g][1], st[g]));
        }
        float slow = 0;
        for (int g = 0; g < 2; g++) {
          float ms = 0;
          CK(cudaSetDevice(g));
          CK(cudaEventSynchronize(ev[g][1]));
          CK(cudaEventElapsedTime(&ms, ev[g][0], ev[g][1]));
          slow = ms > slow ? ms : slow;
        }
        float gbs = (float)(slice * (size_t)blocks[b]) / (slow * 1e6f);
        if (rep && gbs > best) best = gbs;
      }
      printf(" %12.1f", best);
    }
    printf("\n");
  }
  return 0;
}
