/*
** probe.cuh — what tools/probes/probe-reduce.cu and tools/probes/probe-red.cu share: the
** error check, a block's slice, a copy (or an add at the destination) with
** loads in flight, and Hopper's bulk copies (sm_90) through shared-memory
** stages that complete on mbarriers.
*/
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* The block's slice of nv vectors: [lo, hi). */
__device__ static void slice(size_t nv, size_t *lo, size_t *hi) {
  *lo = nv * blockIdx.x / gridDim.x, *hi = nv * (blockIdx.x + 1) / gridDim.x;
}

__device__ static inline void red4(float4 *p, float4 x) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(x.x), "f"(x.y), "f"(x.z), "f"(x.w)
               : "memory");
}

/* dst = src (red 0) or dst += src (red 1), U loads in flight per thread. */
template <int U, int RED> __global__ void move_ld(float4 *dst, const float4 *src, size_t nv) {
  size_t lo, hi, step = blockDim.x;
  slice(nv, &lo, &hi);
  size_t i = lo + threadIdx.x;
  for (; i + (U - 1) * step < hi; i += U * step) {
    float4 x[U];
#pragma unroll
    for (int u = 0; u < U; u++) x[u] = __ldcg(src + i + u * step);
#pragma unroll
    for (int u = 0; u < U; u++)
      if (RED) red4(dst + i + u * step, x[u]);
      else dst[i + u * step] = x[u];
  }
  for (; i < hi; i += step)
    if (RED) red4(dst + i, __ldcg(src + i));
    else dst[i] = __ldcg(src + i);
}

__device__ static inline uint32_t sa(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ static inline void bar_init(uint64_t *b) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(b)) : "memory");
}
__device__ static inline void bar_expect(uint64_t *b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(bytes) : "memory");
}
__device__ static inline void bar_wait(uint64_t *b, uint32_t phase) {
  uint32_t ok = 0;
  while (!ok)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok)
                 : "r"(sa(b)), "r"(phase)
                 : "memory");
}
__device__ static inline void bulk_in(void *dst, const void *src, uint32_t bytes, uint64_t *b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(dst)),
               "l"(src), "r"(bytes), "r"(sa(b))
               : "memory");
}
/* Shared memory out to global: stored, or added there (red, f32). */
__device__ static inline void bulk_out(void *dst, const void *src, uint32_t bytes, int red) {
  if (red)
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst), "r"(sa(src)),
                 "r"(bytes)
                 : "memory");
  else
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(sa(src)), "r"(bytes)
                 : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ static inline void bulk_out_drained(void) { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ static inline void bulk_out_done(void) { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

#define MAXS 16
extern __shared__ __align__(128) char smem[];

/* dst = src (red 0) or dst += src (red 1, f32) through S stages of k bytes,
   one thread issuing bulk copies both ways. */
__global__ void move_bulk(float4 *dst, const float4 *src, size_t nv, int S, uint32_t k, int red) {
  __shared__ uint64_t bar[MAXS];
  if (threadIdx.x) return;
  size_t lo, hi;
  slice(nv, &lo, &hi);
  size_t kv = k / 16, nt = (hi - lo + kv - 1) / kv;
  for (int s = 0; s < S; s++) bar_init(&bar[s]);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  auto issue = [&](size_t t) {
    int s = (int)(t % S);
    size_t v0 = lo + t * kv, n = hi - v0 < kv ? hi - v0 : kv;
    bar_expect(&bar[s], (uint32_t)(n * 16));
    bulk_in(smem + (size_t)s * k, src + v0, (uint32_t)(n * 16), &bar[s]);
  };
  for (size_t t = 0; t < (size_t)S && t < nt; t++) issue(t);
  for (size_t t = 0; t < nt; t++) {
    int s = (int)(t % S);
    size_t v0 = lo + t * kv, n = hi - v0 < kv ? hi - v0 : kv;
    bar_wait(&bar[s], (uint32_t)(t / S) & 1);
    bulk_out(dst + v0, smem + (size_t)s * k, (uint32_t)(n * 16), red);
    if (t + S < nt) {
      bulk_out_drained(); /* the stage is read out before it is refilled */
      issue(t + S);
    }
  }
  bulk_out_done();
}
