/*
** transport_ipc.c — processes of one host reach each other's GPU memory:
** each rank's segment of a plan's placement (variant.c) is exported with a
** legacy CUDA IPC handle, the handles go round the group's exchange, and
** every process opens its peers' once per plan load (closed at unload).
** Legacy handles (cudaIpcGetMemHandle) rather than cuMem's shareable ones:
** they name a cudaMalloc allocation in 64 plain bytes, which any exchange
** carries, where a POSIX file descriptor needs a Unix socket between the
** processes; tools/probes/probe-ipc.cu measured opening one at 47-248 us on
** an H200 shared by 2 to 8 processes.
*/
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "exchange.h"
#include "transport.h"

/* A random number naming this process: a pid names none across pid
   namespaces (containers sharing a host's IPC). Made again in a forked
   child, which is another process. */
static unsigned long long self_tag(void) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static unsigned long long tag;
  static pid_t made_in;
  pthread_mutex_lock(&lock);
  if (made_in != getpid()) {
    made_in = getpid();
    if (getrandom(&tag, sizeof tag, 0) != (ssize_t)sizeof tag) tag = (unsigned long long)made_in * 0x9e3779b97f4a7c15ull;
  }
  unsigned long long t = tag;
  pthread_mutex_unlock(&lock);
  return t;
}

/* What a rank says of its segments: one per placement of the plan. */
typedef struct {
  unsigned long long self;
  int nv;
  size_t bytes[6];
  void *base[6];
  cudaIpcMemHandle_t h[6];
} Share;

resccl_result_t ipc_share(Group *g, Variant *const *vs, int nv, resccl_result_t rc) {
  if (!g->x) return rc; /* every segment is this process's */
  Exchange *x = g->x;
  int me = x->rank;
  Share mine;
  memset(&mine, 0, sizeof mine);
  mine.self = self_tag(), mine.nv = nv;
  for (int k = 0; k < nv && rc == resccl_success; k++) {
    mine.bytes[k] = vs[k]->seg_bytes[me], mine.base[k] = vs[k]->seg[me];
    if (cudaSetDevice(g->comms[me].cudev) != cudaSuccess || cudaIpcGetMemHandle(&mine.h[k], vs[k]->seg[me]) != cudaSuccess)
      rc = rt_fail(resccl_unhandled_cuda_error, "rank %d: cannot export its plan memory (cudaIpcGetMemHandle)", me);
  }
  Share *all = calloc((size_t)x->nranks, sizeof *all);
  if (!all) rc = rc ? rc : rt_fail(resccl_system_error, "out of memory");
  rc = ex_round(x, rc, &mine, sizeof mine, all, "plan load");
  for (int r = 0; r < x->nranks && rc == resccl_success; r++) {
    if (r == me) continue;
    for (int k = 0; k < nv && rc == resccl_success; k++) {
      Variant *v = vs[k];
      if (all[r].nv != nv || all[r].bytes[k] != v->seg_bytes[r]) {
        rc = rt_fail(resccl_internal_error, "rank %d laid out plan memory unlike rank %d (%d placements, %zu bytes; "
                     "here %d, %zu)", r, me, all[r].nv, all[r].bytes[k], nv, v->seg_bytes[r]);
      } else if (all[r].self == mine.self) { /* a rank of this process, on another thread */
        v->seg[r] = all[r].base[k];
        int peer = g->comms[r].cudev;
        cudaError_t e = peer == g->comms[me].cudev ? cudaSuccess : cudaDeviceEnablePeerAccess(peer, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
          rc = rt_fail(resccl_invalid_usage, "rank %d: GPU %d cannot reach rank %d's GPU %d (no peer access)", me,
                       g->comms[me].cudev, r, peer);
        cudaGetLastError();
      } else {
        cudaError_t e = cudaIpcOpenMemHandle((void **)&v->seg[r], all[r].h[k], cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess)
          rc = rt_fail(resccl_unhandled_cuda_error, "rank %d: cannot open rank %d's plan memory: %s", me, r,
                       cudaGetErrorString(e));
        else v->opened[r] = 1;
      }
    }
  }
  free(all);
  return rc;
}

void ipc_close(Variant *v) {
  for (int r = 0; v && v->opened && r < v->pf.nranks; r++)
    if (v->opened[r]) cudaIpcCloseMemHandle(v->seg[r]), v->opened[r] = 0;
}
