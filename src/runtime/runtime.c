/*
** runtime.c — libresccl: communicators, plans and collective calls on GPUs
** (API in include/resccl.h).
**
** A group is the set of communicators one resccl_comm_init_all made; it owns
** the loaded plans. Loading a plan reads the plan file (src/artifact.c
** writes it), builds each placement's kernel for every GPU's arch, all at
** once (kernels.c: NVRTC, cubins cached on disk), and allocates what lives
** as long as the plan: per connection and channel a FIFO in the receiver's
** memory, per GPU the flags, the block tables and each block's count of the
** calls it ran. A call only fills the kernel argument (RxArgs,
** kernels-templates/cuda_abi.h) and launches: it is asynchronous, and a CUDA
** graph that captured it replays it right (the kernels count the calls, not
** the host). Inside resccl_group_start/end calls are queued and launched per
** GPU together, so that ranks sharing a GPU run in one kernel.
*/
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objects.h"
#include "../../kernels-templates/cuda_abi.h"
#include "../../kernels-templates/tile.h"

/* ------------------------------------------------------------ init */

/* Peer access between every pair of the group's GPUs: FIFOs are written across them. */
static resccl_result_t peer_access(const Group *g) {
  for (int a = 0; a < g->ndevs; a++) {
    CU(cudaSetDevice(g->dev[a]));
    for (int b = 0; b < g->ndevs; b++) {
      if (a == b) continue;
      int ok = 0;
      CU(cudaDeviceCanAccessPeer(&ok, g->dev[a], g->dev[b]));
      if (!ok) return rt_fail(resccl_invalid_usage, "GPU %d cannot reach GPU %d (no peer access)", g->dev[a], g->dev[b]);
      cudaError_t e = cudaDeviceEnablePeerAccess(g->dev[b], 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CU(e);
      cudaGetLastError();
    }
  }
  return resccl_success;
}

resccl_result_t resccl_comm_init_all(resccl_comm_t *comms, int ndev, const int *devlist) {
  if (!comms || ndev < 1) return rt_fail(resccl_invalid_argument, "resccl_comm_init_all: no communicators asked for");
  if (ndev > RX_MAXRANKS) return rt_fail(resccl_invalid_argument, "resccl_comm_init_all: at most %d ranks", RX_MAXRANKS);
  int count = 0;
  CU(cudaGetDeviceCount(&count));
  TRY(drv_open());
  Group *g = calloc(1, sizeof *g);
  struct resccl_comm *c = calloc((size_t)ndev, sizeof *c);
  if (!g || !c) return free(g), free(c), rt_fail(resccl_system_error, "out of memory");
  g->n = g->live = ndev, g->comms = c;
  for (int r = 0; r < ndev; r++) {
    int d = devlist ? devlist[r] : r;
    if (d < 0 || d >= count) {
      free(g), free(c);
      return rt_fail(resccl_invalid_argument, "rank %d: no CUDA device %d (%d present)", r, d, count);
    }
    int k = 0;
    while (k < g->ndevs && g->dev[k] != d) k++;
    if (k == g->ndevs) {
      if (k == MAXDEV) return free(g), free(c), rt_fail(resccl_invalid_argument, "more than %d GPUs", MAXDEV);
      g->dev[g->ndevs++] = d;
    }
    c[r] = (struct resccl_comm){g, r, d, k, 0};
  }
  int dev = -1;
  cudaGetDevice(&dev);
  resccl_result_t rc = peer_access(g);
  if (dev >= 0) cudaSetDevice(dev);
  if (rc == resccl_success && cudaHostAlloc((void **)&g->stop, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable))
    rc = rt_fail(resccl_unhandled_cuda_error, "resccl_comm_init_all: cannot allocate mapped host memory");
  if (rc != resccl_success) return free(g), free(c), rc;
  *g->stop = 0;
  for (int r = 0; r < ndev; r++) comms[r] = &c[r];
  INFO("init: %d ranks on %d GPUs", ndev, g->ndevs);
  return resccl_success;
}

resccl_result_t resccl_comm_count(resccl_comm_t c, int *n) {
  if (!c || !n) return rt_fail(resccl_invalid_argument, "null argument");
  return *n = c->g->n, resccl_success;
}

resccl_result_t resccl_comm_user_rank(resccl_comm_t c, int *r) {
  if (!c || !r) return rt_fail(resccl_invalid_argument, "null argument");
  return *r = c->rank, resccl_success;
}

resccl_result_t resccl_comm_cu_device(resccl_comm_t c, int *d) {
  if (!c || !d) return rt_fail(resccl_invalid_argument, "null argument");
  return *d = c->cudev, resccl_success;
}

resccl_result_t resccl_comm_get_async_error(resccl_comm_t c, resccl_result_t *err) {
  if (!c || !err) return rt_fail(resccl_invalid_argument, "null argument");
  *err = *(volatile int *)c->g->stop ? resccl_timeout : resccl_success;
  return resccl_success;
}

resccl_result_t resccl_comm_destroy(resccl_comm_t comm) {
  if (!comm) return resccl_success;
  Group *g = comm->g;
  if (--g->live > 0) return resccl_success;
  /* A collective launched on some ranks only can no longer be launched on
     the rest: its kernels give up now, not at the timeout. */
  if (g->open.n) *(volatile int *)g->stop = 1;
  int dev = -1;
  cudaGetDevice(&dev);
  for (int d = 0; d < g->ndevs; d++) cudaSetDevice(g->dev[d]), cudaDeviceSynchronize();
  while (g->plans) {
    RtPlan *p = g->plans;
    g->plans = p->next;
    plan_unload(g, p);
  }
  cudaFreeHost(g->stop);
  free(g->open.a), free(g->comms), free(g);
  if (dev >= 0) cudaSetDevice(dev); /* the caller's, as NCCL leaves it */
  return resccl_success;
}

