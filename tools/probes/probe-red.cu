/*
** probe-red.cu — whether reductions made where the data lands free the
** blocks. A block that reduces c = a + b moves three bytes through its SM
** per byte of output (probe-reduce.cu: at most about 40 GB/s of output a
** block). Hopper can add at the destination instead: `red.global.add` (16
** bytes a thread) and the bulk copy unit's `cp.reduce.async.bulk` add into
** memory at its L2, so a block that adds its input into an output (or into a
** peer's, over NVLink) moves two bytes per byte, like a copy.
**   probe-red [MiB, 256] [peer]
** `peer`: the destination is on GPU 1 (two GPUs, peer access), else on
** GPU 0 beside the source. Variants, each with 1, 4, 8, 16 and 32 blocks:
**   store x8       dst = src, 8 16-byte loads in flight per thread, 512 threads
**   red.v4 x8      dst += src by red.global.add.v4.f32, the same loads
**   bulk store SxK src into S shared-memory stages of K KiB (cp.async.bulk),
**                  out by cp.async.bulk, one thread issuing
**   bulk red SxK   the same, out by cp.reduce.async.bulk .add.f32
** Prints GB/s of destination bytes; the red variants' sums are checked.
** Built where nvcc is (sm_90); run on a Hopper GPU.
*/
#include <string.h>

#include "probe.cuh"

__global__ void fill(float *p, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = v;
}

/* Elements of p (n of them, on the current GPU) that are not v. */
static size_t wrong(const float *p, size_t n, float v) {
  float *h = (float *)malloc(n * sizeof *h);
  CK(cudaMemcpy(h, p, n * sizeof *h, cudaMemcpyDeviceToHost));
  size_t w = 0;
  for (size_t i = 0; i < n; i++) w += h[i] != v;
  free(h);
  return w;
}

static void run(int v, int nb, float4 *dst, const float4 *src, size_t nv) {
  switch (v) {
  case 0: move_ld<8, 0><<<nb, 512>>>(dst, src, nv); break;
  case 1: move_ld<8, 1><<<nb, 512>>>(dst, src, nv); break;
  case 2: move_bulk<<<nb, 32, 6 * 32768>>>(dst, src, nv, 6, 32768, 0); break;
  case 3: move_bulk<<<nb, 32, 6 * 32768>>>(dst, src, nv, 6, 32768, 1); break;
  case 4: move_bulk<<<nb, 32, 12 * 16384>>>(dst, src, nv, 12, 16384, 1); break;
  }
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256, bytes = mib << 20, nv = bytes / 16, n = bytes / 4;
  int peer = argc > 2 && !strcmp(argv[2], "peer"), ngpu = 0;
  CK(cudaGetDeviceCount(&ngpu));
  if (peer && ngpu < 2) return fprintf(stderr, "probe-red: peer needs two GPUs\n"), 2;
  float4 *src, *dst;
  if (peer) {
    CK(cudaSetDevice(1));
    CK(cudaMalloc(&dst, bytes));
    CK(cudaSetDevice(0));
    CK(cudaDeviceEnablePeerAccess(1, 0));
  } else {
    CK(cudaMalloc(&dst, bytes));
  }
  CK(cudaMalloc(&src, bytes));
  CK(cudaFuncSetAttribute(move_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int blocks[] = {1, 4, 8, 16, 32};
  const char *name[] = {"store x8", "red.v4 x8", "bulk store 6x32K", "bulk red 6x32K", "bulk red 12x16K"};
  printf("destination on GPU %d; GB/s of destination bytes, %zu MiB\n%-17s", peer, mib, "variant");
  for (int nb : blocks) printf(" %7d blk", nb);
  printf("  sums\n");
  for (int v = 0; v < 5; v++) {
    printf("%-17s", name[v]);
    for (int nb : blocks) {
      float best = 1e30f;
      for (int rep = 0; rep < 3; rep++) {
        CK(cudaEventRecord(e0));
        run(v, nb, dst, src, nv);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        best = ms < best ? ms : best;
      }
      printf(" %11.1f", bytes / (best * 1e-3) / 1e9);
      fflush(stdout);
    }
    /* One more run on known values: 1 + 2 (or 2 for a store) everywhere. */
    fill<<<264, 512>>>((float *)src, n, 2.0f);
    if (peer) CK(cudaSetDevice(1));
    fill<<<264, 512>>>((float *)dst, n, 1.0f);
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(0));
    run(v, 8, dst, src, nv);
    CK(cudaDeviceSynchronize());
    if (peer) CK(cudaSetDevice(1));
    size_t w = wrong((float *)dst, n, v == 0 || v == 2 ? 2.0f : 3.0f);
    CK(cudaSetDevice(0));
    printf("  %s\n", w ? "WRONG" : "ok");
  }
  return 0;
}
