/*
** probe-reduce.cu — what one block moves through its SM in a local
** reduction c = a + b (two reads, one write per element) and a local copy,
** by how its loads are kept in flight: the bound on how few blocks a
** reduce-scatter or all-reduce needs once the copy engine does the pushing.
**   probe-reduce [MiB per array, 256]
** One GPU; every block moves one contiguous slice of 16-byte vectors.
** Variants, each with 1, 4, 8, 16 and 32 blocks:
**   ld xU/T       U 16-byte loads per operand in flight per thread, T
**                 threads (the runtime's rx_move_t: ld x8/512; x4 with
**                 -DRX_UNROLL=8)
**   bulk SxK      Hopper's bulk copy (cp.async.bulk) brings both operands
**                 into S shared-memory stages of K KiB each, completing on
**                 an mbarrier; the block adds them and stores to memory
**   copy ld x8    c = a, 8 loads in flight per thread
**   copy bulk     c = a by bulk copies in and out, one thread issuing
** Prints output GB/s (and, for one block, the memory traffic per SM).
** Built where nvcc is (sm_90); run on a Hopper GPU.
*/
#include "probe.cuh"

__device__ static inline float4 add4(float4 x, float4 y) { return make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w); }

template <int U> __global__ void red_ld(float4 *c, const float4 *a, const float4 *b, size_t nv) {
  size_t lo, hi, step = blockDim.x;
  slice(nv, &lo, &hi);
  size_t i = lo + threadIdx.x;
  for (; i + (U - 1) * step < hi; i += U * step) {
    float4 x[U], y[U];
#pragma unroll
    for (int u = 0; u < U; u++) x[u] = __ldcg(a + i + u * step), y[u] = __ldcg(b + i + u * step);
#pragma unroll
    for (int u = 0; u < U; u++) c[i + u * step] = add4(x[u], y[u]);
  }
  for (; i < hi; i += step) c[i] = add4(__ldcg(a + i), __ldcg(b + i));
}

/* Stage s holds tile t (both operands, k bytes each) for t = s, s + S, ... */
__global__ void red_bulk(float4 *c, const float4 *a, const float4 *b, size_t nv, int S, uint32_t k) {
  __shared__ uint64_t bar[MAXS];
  size_t lo, hi;
  slice(nv, &lo, &hi);
  size_t kv = k / 16, nt = (hi - lo + kv - 1) / kv;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; s++) bar_init(&bar[s]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](size_t t) {
    int s = (int)(t % S);
    size_t v0 = lo + t * kv, n = hi - v0 < kv ? hi - v0 : kv;
    bar_expect(&bar[s], (uint32_t)(2 * n * 16));
    bulk_in(smem + (size_t)s * 2 * k, a + v0, (uint32_t)(n * 16), &bar[s]);
    bulk_in(smem + (size_t)s * 2 * k + k, b + v0, (uint32_t)(n * 16), &bar[s]);
  };
  if (threadIdx.x == 0)
    for (size_t t = 0; t < (size_t)S && t < nt; t++) issue(t);
  for (size_t t = 0; t < nt; t++) {
    int s = (int)(t % S);
    bar_wait(&bar[s], (uint32_t)(t / S) & 1);
    const float4 *x = (const float4 *)(smem + (size_t)s * 2 * k), *y = (const float4 *)(smem + (size_t)s * 2 * k + k);
    size_t v0 = lo + t * kv, n = hi - v0 < kv ? hi - v0 : kv;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) c[v0 + i] = add4(x[i], y[i]);
    __syncthreads();
    if (threadIdx.x == 0 && t + S < nt) issue(t + S);
  }
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256, bytes = mib << 20, nv = bytes / 16;
  float4 *a, *b, *c;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMalloc(&c, bytes));
  CK(cudaMemset(a, 1, bytes));
  CK(cudaMemset(b, 2, bytes));
  CK(cudaFuncSetAttribute(red_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10));
  CK(cudaFuncSetAttribute(move_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int blocks[] = {1, 4, 8, 16, 32};
  printf("%-16s", "variant");
  for (int nb : blocks) printf(" %7d blk", nb);
  printf("   traffic/SM at 1 blk\n");
  for (int v = 0; v < 12; v++) {
    const char *name[] = {"ld x4/512",  "ld x8/512",   "ld x16/512", "ld x4/1024", "ld x8/1024",  "bulk 6x16K/256",
                          "bulk 12x8K/256", "bulk 3x32K/256", "bulk 6x16K/512", "copy ld x8/512", "copy bulk 6x32K",
                          "copy bulk 12x16K"};
    int ops = v < 9 ? 3 : 2;
    printf("%-16s", name[v]);
    double first = 0;
    for (int nb : blocks) {
      float best = 1e30f;
      for (int rep = 0; rep < 3; rep++) {
        CK(cudaEventRecord(e0));
        switch (v) {
        case 0: red_ld<4><<<nb, 512>>>(c, a, b, nv); break;
        case 1: red_ld<8><<<nb, 512>>>(c, a, b, nv); break;
        case 2: red_ld<16><<<nb, 512>>>(c, a, b, nv); break;
        case 3: red_ld<4><<<nb, 1024>>>(c, a, b, nv); break;
        case 4: red_ld<8><<<nb, 1024>>>(c, a, b, nv); break;
        case 5: red_bulk<<<nb, 256, 6 * 2 * 16384>>>(c, a, b, nv, 6, 16384); break;
        case 6: red_bulk<<<nb, 256, 12 * 2 * 8192>>>(c, a, b, nv, 12, 8192); break;
        case 7: red_bulk<<<nb, 256, 3 * 2 * 32768>>>(c, a, b, nv, 3, 32768); break;
        case 8: red_bulk<<<nb, 512, 6 * 2 * 16384>>>(c, a, b, nv, 6, 16384); break;
        case 9: move_ld<8, 0><<<nb, 512>>>(c, a, nv); break;
        case 10: move_bulk<<<nb, 32, 6 * 32768>>>(c, a, nv, 6, 32768, 0); break;
        case 11: move_bulk<<<nb, 32, 12 * 16384>>>(c, a, nv, 12, 16384, 0); break;
        }
        CK(cudaGetLastError());
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        best = ms < best ? ms : best;
      }
      double gbs = bytes / (best * 1e6);
      if (nb == 1) first = gbs;
      printf(" %11.1f", gbs);
    }
    printf("   %.1f\n", first * ops);
  }
  /* The bulk reduction's result, checked whole on poisoned output: a and b
     are byte patterns, so every element of c is the same sum. */
  CK(cudaMemset(c, 0xff, bytes));
  red_bulk<<<8, 256, 6 * 2 * 16384>>>(c, a, b, nv, 6, 16384);
  CK(cudaGetLastError());
  float *h = (float *)malloc(bytes), x, y;
  if (!h) return fprintf(stderr, "out of memory\n"), 1;
  CK(cudaMemcpy(h, c, bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&x, a, 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&y, b, 4, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < bytes / 4; i++) bad += h[i] != x + y;
  printf("bulk reduction: %zu wrong\n", bad);
  free(h);
  return bad != 0;
}
