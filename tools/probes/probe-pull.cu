/*
** probe-pull.cu — a two-GPU all-reduce in which every block reads the
** peer's input over NVLink and reduces it with its own (c = a + peer's a),
** with no FIFO, no landing buffer and no flag per piece: what reading
** instead of pushing gives, by size and blocks.
**   probe-pull
** Each call is one kernel per GPU: block 0 tells the peer its input is
** ready (its stream reached the call), every block waits for the peer's
** word, reduces its contiguous slice of 16-byte vectors, then counts
** itself done in the peer's memory; block 0 ends only once every block of
** the peer has counted (until then the peer may still read this input).
** Variants (rN xU: N blocks, U loads per operand in flight, 512 threads):
**   rN xU         c = a + peer's a, the one-shot all-reduce
**   nobar         r16 x8 with no barrier (wrong data; what the barriers cost)
**   copy          c = peer's a, an all-gather's pull
**   args          r16 x8 with a kernel argument of the runtime's size (1.7 KB)
**   chase         r16 x8, each block's thread 0 first following 6 pointers
**                 in global memory one after another (a kernel that reads
**                 its tables through its tables)
** Prints busbw (the all-reduce's: bytes / time) and microseconds per call,
** calls launched back to back as a benchmark does; every variant's result
** is checked (but nobar's). A reduce-scatter of S bytes reduces S / 2 the
** same way: its busbw at S is the all-reduce's at S / 2.
*/
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "probe-pull: %s: %s\n", #call, cudaGetErrorString(e_));     \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

enum { REDUCE, NOBAR, COPY, CHASE };

/* A kernel argument as large as the runtime's RxArgs. */
struct Big {
  char pad[1700];
};

__device__ static inline float4 add4(float4 x, float4 y) { return make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w); }
__device__ static inline unsigned ld_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* word[0]: the peer's epoch (its input is ready); word[1]: the peer's
   blocks done reading mine, counted over every call. */
template <int U, typename Arg>
__global__ void __launch_bounds__(512) pull(int variant, float4 *c, const float4 *a, const float4 *b, size_t nv,
                                            unsigned *mine, unsigned *peer, unsigned epoch, const __grid_constant__ Arg arg,
                                            const unsigned *chain) {
  if (variant == CHASE && threadIdx.x == 0) {
    unsigned j = 0;
    for (int k = 0; k < 6; k++) j = __ldcg(chain + j);
    if (j == 1u) c[0] = make_float4(0, 0, 0, 0); /* never: keeps the loads */
  }
  if (sizeof(Arg) > 8 && arg.pad[threadIdx.x % sizeof(Arg)] == 1) c[0] = make_float4(0, 0, 0, 0); /* never */
  if (variant != NOBAR) {
    if (threadIdx.x == 0) {
      if (blockIdx.x == 0) asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(peer), "r"(epoch) : "memory");
      while ((int)(ld_acquire(mine) - epoch) < 0) {
      }
    }
    __syncthreads();
  }
  size_t lo = nv * blockIdx.x / gridDim.x, hi = nv * (blockIdx.x + 1) / gridDim.x, step = blockDim.x;
  size_t i = lo + threadIdx.x;
  for (; i + (U - 1) * step < hi; i += U * step) {
    float4 x[U], y[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      y[u] = __ldcg(b + i + u * step);
      if (variant != COPY) x[u] = __ldcg(a + i + u * step);
    }
#pragma unroll
    for (int u = 0; u < U; u++) c[i + u * step] = variant == COPY ? y[u] : add4(x[u], y[u]);
  }
  for (; i < hi; i += step) c[i] = variant == COPY ? __ldcg(b + i) : add4(__ldcg(a + i), __ldcg(b + i));
  if (variant == NOBAR) return;
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.sys.global.add.u32 [%0], 1;" ::"l"(peer + 1) : "memory");
    if (blockIdx.x == 0)
      while ((int)(ld_acquire(mine + 1) - epoch * gridDim.x) < 0) {
      }
  }
}

__global__ void fill(float *a, size_t n, int g) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    a[i] = (float)(i % 977) * 0.5f + (float)(g + 1) * (float)(i % 13);
}

struct Variant {
  const char *name;
  int kind, blocks, unroll, big;
};

struct Small {
  char pad[8];
};

template <int U>
static void launch(const Variant *x, cudaStream_t st, float4 *c, const float4 *a, const float4 *b, size_t nv, unsigned *mine,
                   unsigned *peer, unsigned epoch, const unsigned *chain) {
  static Big big;
  static Small small;
  if (x->big) pull<U, Big><<<x->blocks, 512, 0, st>>>(x->kind, c, a, b, nv, mine, peer, epoch, big, chain);
  else pull<U, Small><<<x->blocks, 512, 0, st>>>(x->kind, c, a, b, nv, mine, peer, epoch, small, chain);
}

int main(void) {
  int ngpu = 0, peer = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 2 || cudaDeviceCanAccessPeer(&peer, 0, 1) != cudaSuccess || !peer) {
    printf("probe-pull: needs two GPUs with peer access; skipped\n");
    return 77;
  }
  static const Variant vs[] = {{"r8 x8", REDUCE, 8, 8, 0},        {"r16 x8", REDUCE, 16, 8, 0}, {"r32 x8", REDUCE, 32, 8, 0},
                               {"r16 x16", REDUCE, 16, 16, 0},     {"nobar r16", NOBAR, 16, 8, 0}, {"copy16 x8", COPY, 16, 8, 0},
                               {"args r16", REDUCE, 16, 8, 1},     {"chase r16", CHASE, 16, 8, 0}};
  const int NV = (int)(sizeof vs / sizeof vs[0]);
  const size_t maxb = (size_t)1 << 30;
  float *a[2], *c[2];
  unsigned *word[2], *chain[2];
  cudaStream_t st[2];
  cudaEvent_t ev[2][2];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CK(cudaMalloc(&a[g], maxb));
    CK(cudaMalloc(&c[g], maxb));
    CK(cudaMalloc(&word[g], 64));
    CK(cudaMemset(word[g], 0, 64));
    unsigned hops[6 * 64] = {0}; /* 6 pointers, a cache line or more apart */
    for (int k = 0; k < 6; k++) hops[k * 64] = k < 5 ? (unsigned)(k + 1) * 64 : 2;
    CK(cudaMalloc(&chain[g], sizeof hops));
    CK(cudaMemcpy(chain[g], hops, sizeof hops, cudaMemcpyHostToDevice));
    fill<<<256, 512>>>(a[g], maxb / 4, g);
    CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
    CK(cudaEventCreate(&ev[g][0]));
    CK(cudaEventCreate(&ev[g][1]));
    CK(cudaDeviceSynchronize());
  }
  float *host = (float *)malloc(maxb);
  unsigned epoch = 0;
  int bad = 0;
  printf("# busbw GB/s (bytes / time) and us per call, calls back to back, 512 threads\n%-6s", "bytes");
  for (int v = 0; v < NV; v++) printf(" %16s", vs[v].name);
  printf("\n");
  for (size_t bytes = (size_t)1 << 20; bytes <= maxb; bytes *= bytes < ((size_t)64 << 20) ? 2 : 4) {
    printf("%4zuM ", bytes >> 20);
    size_t nv = bytes / 16;
    int iters = bytes < ((size_t)64 << 20) ? 50 : 10;
    for (int v = 0; v < NV; v++) {
      const Variant *x = &vs[v];
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaMemset(c[g], 0xff, bytes)); /* poison: NaN */
        CK(cudaMemset(word[g], 0, 64));     /* the done count assumes this grid since epoch 0 */
        CK(cudaDeviceSynchronize());
      }
      epoch = 0;
      float best = 1e30f;
      for (int rep = 0; rep < 3; rep++) { /* the first a warm-up; the best of the rest */
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          CK(cudaEventRecord(ev[g][0], st[g]));
        }
        for (int it = 0; it < iters; it++) {
          epoch++;
          for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            float4 *o = (float4 *)c[g];
            const float4 *mine = (const float4 *)a[g], *theirs = (const float4 *)a[1 - g];
            if (x->unroll == 4) launch<4>(x, st[g], o, mine, theirs, nv, word[g], word[1 - g], epoch, chain[g]);
            else if (x->unroll == 16) launch<16>(x, st[g], o, mine, theirs, nv, word[g], word[1 - g], epoch, chain[g]);
            else launch<8>(x, st[g], o, mine, theirs, nv, word[g], word[1 - g], epoch, chain[g]);
            CK(cudaGetLastError());
          }
        }
        float slow = 0;
        for (int g = 0; g < 2; g++) {
          float ms = 0;
          CK(cudaSetDevice(g));
          CK(cudaEventRecord(ev[g][1], st[g]));
          CK(cudaEventSynchronize(ev[g][1]));
          CK(cudaEventElapsedTime(&ms, ev[g][0], ev[g][1]));
          slow = ms > slow ? ms : slow;
        }
        if (rep && slow / iters < best) best = slow / iters;
      }
      if (x->kind != NOBAR) /* check: every element of GPU 1's result */
        for (int g = 1; g < 2; g++) {
          CK(cudaSetDevice(g));
          CK(cudaMemcpy(host, c[g], bytes, cudaMemcpyDeviceToHost));
          for (size_t i = 0; i < bytes / 4; i++) {
            float w = (float)(i % 977) * 0.5f + (float)(i % 13); /* GPU 0's a */
            float want = x->kind == COPY ? w : 2 * w + (float)(i % 13);
            if (host[i] != want) {
              if (!bad++) fprintf(stderr, "probe-pull: %s at %zu bytes: element %zu is %g, not %g\n", x->name, bytes, i, host[i], want);
              break;
            }
          }
        }
      printf(" %7.1f %6.1fus", bytes / (best * 1e6f), best * 1e3f);
    }
    printf("\n");
    fflush(stdout);
  }
  printf("probe-pull: %s\n", bad ? "WRONG results" : "results checked");
  return bad ? 1 : 0;
}
