/*
** probe-ipc.cu — what CUDA IPC gives processes that share GPUs, as the
** multi-process communicators will use it: NPROC processes (forked before
** CUDA starts, each on GPU rank % ngpu) allocate a buffer, fill it, and
** trade cudaIpc handles through resccl's rendezvous (src/runtime/bootstrap.c,
** over loopback: one id, one Exchange a process); each opens every peer's
** buffer, reads it whole with a kernel and checks it, then a second round
** keeps every buffer alive until all have read. Prints per rank the time to open the peers' handles and
** what the reads moved.
**   probe-ipc [NPROC [MiB]]      (default 4 processes, 256 MiB each)
*/
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern "C" {
#include "bootstrap.h"
}

#define CK(x)                                                                                                \
  do {                                                                                                       \
    cudaError_t e_ = (x);                                                                                    \
    if (e_ != cudaSuccess) {                                                                                 \
      fprintf(stderr, "rank %d: %s:%d: %s\n", rank, __FILE__, __LINE__, cudaGetErrorString(e_));             \
      _exit(1);                                                                                              \
    }                                                                                                        \
  } while (0)
#define BS(x)                                                                       \
  do {                                                                              \
    if ((x) != resccl_success) {                                                    \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #x, resccl_get_last_error());      \
      _exit(1);                                                                     \
    }                                                                               \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

__global__ void fill(unsigned *p, size_t n, unsigned rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = rank * 2654435761u ^ (unsigned)i;
}

/* dst = src, and count the words that are not what rank `from` wrote. */
__global__ void read_check(unsigned *dst, const unsigned *src, size_t n, unsigned from, unsigned long long *bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned x = __ldcg(src + i);
    dst[i] = x;
    b += x != (from * 2654435761u ^ (unsigned)i);
  }
  if (b) atomicAdd(bad, b);
}

static int run(int rank, int nproc, size_t bytes, const BsId *id) {
  int ngpu = 0;
  CK(cudaGetDeviceCount(&ngpu));
  CK(cudaSetDevice(rank % ngpu));
  size_t n = bytes / sizeof(unsigned);
  unsigned *mine, *dst;
  unsigned long long *bad;
  CK(cudaMalloc(&mine, bytes));
  CK(cudaMalloc(&dst, bytes));
  CK(cudaMalloc(&bad, sizeof *bad));
  CK(cudaMemset(bad, 0, sizeof *bad));
  fill<<<264, 512>>>(mine, n, (unsigned)rank);
  CK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h, *all = (cudaIpcMemHandle_t *)malloc(nproc * sizeof h);
  CK(cudaIpcGetMemHandle(&h, mine));
  Exchange *x;
  BS(bs_exchange(id, rank, nproc, 60, &x));
  BS(x->allgather(x, &h, sizeof h, all));
  double open_s = 0, read_s = 0;
  for (int q = 0; q < nproc; q++) {
    if (q == rank) continue;
    void *peer;
    double t0 = now_s();
    CK(cudaIpcOpenMemHandle(&peer, all[q], cudaIpcMemLazyEnablePeerAccess));
    open_s += now_s() - t0;
    t0 = now_s();
    read_check<<<264, 512>>>(dst, (const unsigned *)peer, n, (unsigned)q, bad);
    CK(cudaDeviceSynchronize());
    read_s += now_s() - t0;
    CK(cudaIpcCloseMemHandle(peer));
  }
  unsigned long long wrong = 0;
  CK(cudaMemcpy(&wrong, bad, sizeof wrong, cudaMemcpyDeviceToHost));
  char done = 1, alldone[4096];
  BS(x->allgather(x, &done, 1, alldone)); /* peers may still be reading mine */
  x->close(x);
  printf("rank %d (GPU %d): opened %d peers' buffers in %.1f us each; read %.0f MiB each at %.1f GB/s; %llu wrong\n",
         rank, rank % ngpu, nproc - 1, nproc > 1 ? open_s / (nproc - 1) * 1e6 : 0, bytes / 1048576.0,
         nproc > 1 ? (nproc - 1) * bytes / read_s / 1e9 : 0, wrong);
  free(all);
  return wrong != 0;
}

int main(int argc, char **argv) {
  int rank = -1, nproc = argc > 1 ? atoi(argv[1]) : 4;
  size_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 256;
  if (nproc < 1 || nproc > 64 || mib < 1 || mib > 16384) {
    fprintf(stderr, "usage: probe-ipc [NPROC (1-64) [MiB (1-16384)]]\n");
    return 2;
  }
  int fds[64][2];
  pid_t pid[64];
  for (int i = 0; i < nproc; i++) { /* before CUDA starts in this process */
    if (pipe(fds[i])) return perror("pipe"), 1;
    pid[i] = fork();
    if (pid[i] < 0) return perror("fork"), 1;
    if (pid[i] == 0) {
      BsId id;
      if (read(fds[i][0], &id, sizeof id) != (ssize_t)sizeof id) _exit(3);
      int rc = run(i, nproc, mib << 20, &id);
      fflush(stdout); /* _exit flushes nothing */
      _exit(rc);
    }
  }
  BsId id;
  BS(bs_serve(&id, 120));
  for (int i = 0; i < nproc; i++)
    if (write(fds[i][1], &id, sizeof id) != (ssize_t)sizeof id) return perror("write"), 1;
  int failed = 0;
  for (int i = 0; i < nproc; i++) {
    int st;
    waitpid(pid[i], &st, 0);
    failed += !WIFEXITED(st) || WEXITSTATUS(st);
  }
  printf("probe-ipc: %d processes, %s\n", nproc, failed ? "FAILED" : "all read their peers right");
  return failed != 0;
}
