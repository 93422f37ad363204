/*
** comm.c — communicators: resccl_comm_init_all makes a group of them over
** the GPUs listed, connected (transport.h); the queries; and destroying
** them, whose last unloads the group's plans.
*/
#include <stdio.h>
#include <stdlib.h>

#include "objects.h"
#include "transport.h"

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
  resccl_result_t rc = p2p_connect(g);
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
