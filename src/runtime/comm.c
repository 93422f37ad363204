/*
** comm.c — communicators. resccl_comm_init_all makes a group of them over
** the GPUs of this process, connected by peer access; resccl_comm_init_rank
** makes one rank of a group whose other ranks are other processes, joined
** through the rendezvous resccl_get_unique_id names (bootstrap.c) and
** connected through CUDA IPC at each plan load (transport.h). Then the
** queries, abort, and destroying them, whose last unloads the group's plans.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "bootstrap.h"
#include "exchange.h"
#include "objects.h"
#include "transport.h"

enum { STOP_PAGE = 4096 };

/* A group of n ranks, none of them set up yet, or NULL. */
static Group *group_new(int n) {
  Group *g = calloc(1, sizeof *g);
  struct resccl_comm *c = calloc((size_t)n, sizeof *c);
  if (!g || !c) return free(g), free(c), NULL;
  g->n = n, g->comms = c;
  for (int r = 0; r < n; r++) c[r] = (struct resccl_comm){g, r, -1, -1, 0};
  return g;
}

/* Rank r is this process's, on CUDA device dev. */
static resccl_result_t group_add(Group *g, int r, int dev) {
  int k = 0;
  while (k < g->ndevs && g->dev[k] != dev) k++;
  if (k == g->ndevs) {
    if (k == MAXDEV) return rt_fail(resccl_invalid_argument, "more than %d GPUs", MAXDEV);
    g->dev[g->ndevs++] = dev;
  }
  g->comms[r].cudev = dev, g->comms[r].d = k, g->nlocal++, g->live++;
  return resccl_success;
}

/* The stop word of a group on shared memory (g->x) or this process's. */
static void group_free(Group *g) {
  if (g->stop && g->shared) cudaHostUnregister(g->stop), munmap(g->stop, STOP_PAGE);
  else if (g->stop) cudaFreeHost(g->stop);
  if (g->x) g->x->close(g->x);
  free(g->open.a), free(g->comms), free(g);
}

resccl_result_t resccl_comm_init_all(resccl_comm_t *comms, int ndev, const int *devlist) {
  if (!comms || ndev < 1) return rt_fail(resccl_invalid_argument, "resccl_comm_init_all: no communicators asked for");
  if (ndev > RX_MAXRANKS) return rt_fail(resccl_invalid_argument, "resccl_comm_init_all: at most %d ranks", RX_MAXRANKS);
  int count = 0;
  CU(cudaGetDeviceCount(&count));
  TRY(drv_open());
  Group *g = group_new(ndev);
  if (!g) return rt_fail(resccl_system_error, "out of memory");
  resccl_result_t rc = resccl_success;
  for (int r = 0; r < ndev && rc == resccl_success; r++) {
    int d = devlist ? devlist[r] : r;
    if (d < 0 || d >= count) rc = rt_fail(resccl_invalid_argument, "rank %d: no CUDA device %d (%d present)", r, d, count);
    else rc = group_add(g, r, d);
  }
  int dev = -1;
  cudaGetDevice(&dev);
  if (rc == resccl_success) rc = p2p_connect(g);
  if (dev >= 0) cudaSetDevice(dev);
  if (rc == resccl_success && cudaHostAlloc((void **)&g->stop, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable))
    rc = rt_fail(resccl_unhandled_cuda_error, "resccl_comm_init_all: cannot allocate mapped host memory"), g->stop = NULL;
  if (rc != resccl_success) return group_free(g), rc;
  *g->stop = 0;
  for (int r = 0; r < ndev; r++) comms[r] = &g->comms[r];
  INFO("init: %d ranks on %d GPUs", ndev, g->ndevs);
  return resccl_success;
}

resccl_result_t resccl_get_unique_id(resccl_unique_id *id) {
  _Static_assert(sizeof(BsId) <= sizeof(resccl_unique_id), "an id holds the rendezvous's");
  if (!id) return rt_fail(resccl_invalid_argument, "resccl_get_unique_id: id is NULL");
  RtConf c;
  TRY(resccl_x_conf_env(&c));
  BsId b;
  TRY(bs_serve(&b, c.timeout_s));
  memset(id, 0, sizeof *id);
  memcpy(id->internal, b.bytes, sizeof b.bytes);
  return resccl_success;
}

/* What a rank tells the others at init: its host, process and GPU, and
   (rank 0) the name of the shared page that holds the group's stop word. */
typedef struct {
  char node[64], page[48];
  int pid, dev;
} Who;

/* The group's stop word on the shared page `name`, which every rank maps. */
static resccl_result_t stop_map(Group *g, const char *name) {
  int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, STOP_PAGE)) {
    if (fd >= 0) close(fd);
    return rt_fail(resccl_system_error, "shared memory %s: %s", name, strerror(errno));
  }
  void *p = mmap(NULL, STOP_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return rt_fail(resccl_system_error, "shared memory %s: mmap: %s", name, strerror(errno));
  if (cudaHostRegister(p, STOP_PAGE, cudaHostRegisterMapped | cudaHostRegisterPortable) != cudaSuccess) {
    munmap(p, STOP_PAGE);
    return rt_fail(resccl_unhandled_cuda_error, "shared memory %s: cudaHostRegister failed", name);
  }
  g->stop = p;
  return resccl_success;
}

/* Rank x->rank of a group of x->nranks, on CUDA device dev; the others
   are reached through x, which the group owns from here (closed if the
   join fails). Two rounds: who is where, then every rank has mapped the
   stop word (and the page's name can go). */
static resccl_result_t comm_join(resccl_comm_t *out, Exchange *x, int dev) {
  Who me, *all = calloc((size_t)x->nranks, sizeof *all);
  memset(&me, 0, sizeof me);
  me.pid = (int)getpid(), me.dev = dev;
  resccl_result_t rc = all ? resccl_success : rt_fail(resccl_system_error, "out of memory");
  const char *node = getenv("RESCCL_NODE");
  if (node && *node && strlen(node) >= sizeof me.node)
    rc = rt_fail(resccl_invalid_argument, "RESCCL_NODE=%.80s: at most %zu characters", node, sizeof me.node - 1);
  else if (node && *node) snprintf(me.node, sizeof me.node, "%s", node);
  else if (gethostname(me.node, sizeof me.node - 1)) rc = rt_fail(resccl_system_error, "gethostname: %s", strerror(errno));
  if (x->rank == 0) {
    unsigned long long tag = 0;
    if (getrandom(&tag, sizeof tag, 0) != (ssize_t)sizeof tag) tag = (unsigned long long)me.pid * 2654435761u;
    snprintf(me.page, sizeof me.page, "/resccl-%d-%016llx", me.pid, tag);
  }
  rc = ex_round(x, rc, &me, sizeof me, all, "resccl_comm_init_rank");
  int met = rc == resccl_success;
  Group *g = NULL;
  for (int r = 1; r < x->nranks && rc == resccl_success; r++)
    if (strcmp(all[r].node, all[0].node))
      rc = rt_fail(resccl_invalid_usage, "resccl_comm_init_rank: rank 0 is on host %s and rank %d on %s: ranks on "
                   "several hosts need a network transport, which resccl has not yet (RESCCL_NODE names a host)",
                   all[0].node, r, all[r].node);
  if (rc == resccl_success && !(g = group_new(x->nranks))) rc = rt_fail(resccl_system_error, "out of memory");
  if (rc == resccl_success) {
    for (int r = 0; r < x->nranks; r++) g->comms[r].cudev = all[r].dev; /* as its process numbers it */
    g->comms[x->rank].cudev = -1;
    g->x = x, g->shared = 1;
    rc = group_add(g, x->rank, dev);
  }
  if (rc == resccl_success) rc = stop_map(g, all[0].page);
  if (met) rc = ex_round(x, rc, NULL, 0, NULL, "resccl_comm_init_rank"); /* every rank that met takes the second */
  if (all && all[0].page[0]) shm_unlink(all[0].page); /* every rank mapped it, or none will */
  free(all);
  if (rc != resccl_success) {
    if (g) group_free(g);
    else x->close(x);
    return rc;
  }
  *out = &g->comms[x->rank]; /* the stop word: zero, as ftruncate made the page */
  INFO("init: rank %d of %d on GPU %d", x->rank, x->nranks, dev);
  return resccl_success;
}

resccl_result_t resccl_comm_init_rank(resccl_comm_t *comm, int nranks, resccl_unique_id id, int rank) {
  if (!comm) return rt_fail(resccl_invalid_argument, "resccl_comm_init_rank: comm is NULL");
  *comm = NULL;
  if (nranks < 1 || nranks > RX_MAXRANKS || rank < 0 || rank >= nranks)
    return rt_fail(resccl_invalid_argument, "resccl_comm_init_rank: rank %d of %d ranks (1 to %d ranks)", rank, nranks,
                   RX_MAXRANKS);
  int dev = -1;
  CU(cudaGetDevice(&dev));
  CU(cudaFree(0)); /* the device's primary context, before anything maps into it */
  TRY(drv_open());
  RtConf c;
  TRY(resccl_x_conf_env(&c));
  BsId b;
  memcpy(b.bytes, id.internal, sizeof b.bytes);
  Exchange *x;
  TRY(bs_exchange(&b, rank, nranks, c.timeout_s, &x));
  return comm_join(comm, x, dev);
}

/* A program's own exchange (resccl_exchange_t) as the group's. */
typedef struct {
  Exchange x;
  resccl_exchange_t ex;
  int broken; /* a round failed: the ranks may no longer agree on the rounds */
} Theirs;

static resccl_result_t theirs_allgather(Exchange *x, const void *mine, size_t n, void *all) {
  Theirs *t = (Theirs *)x;
  if (t->broken) return rt_fail(resccl_remote_error, "the program's exchange failed earlier");
  if (t->ex.allgather(t->ex.ctx, mine, n, all))
    return t->broken = 1, rt_fail(resccl_remote_error, "rank %d: the program's exchange failed", x->rank);
  return resccl_success;
}

static void theirs_close(Exchange *x) {
  Theirs *t = (Theirs *)x;
  if (t->ex.close) t->ex.close(t->ex.ctx);
  free(t);
}

resccl_result_t resccl_comm_init_rank_exchange(resccl_comm_t *comm, int nranks, int rank, const resccl_exchange_t *ex) {
  if (!comm || !ex || !ex->allgather)
    return rt_fail(resccl_invalid_argument, "resccl_comm_init_rank_exchange: comm, ex or ex->allgather is NULL");
  *comm = NULL;
  resccl_result_t rc = resccl_success;
  if (nranks < 1 || nranks > RX_MAXRANKS || rank < 0 || rank >= nranks)
    rc = rt_fail(resccl_invalid_argument, "resccl_comm_init_rank_exchange: rank %d of %d ranks (1 to %d ranks)", rank,
                 nranks, RX_MAXRANKS);
  int dev = -1;
  if (rc == resccl_success && (cudaGetDevice(&dev) != cudaSuccess || cudaFree(0) != cudaSuccess))
    rc = rt_fail(resccl_unhandled_cuda_error, "resccl_comm_init_rank_exchange: no current CUDA device");
  if (rc == resccl_success) rc = drv_open();
  Theirs *t = rc == resccl_success ? calloc(1, sizeof *t) : NULL;
  if (rc == resccl_success && !t) rc = rt_fail(resccl_system_error, "out of memory");
  if (rc != resccl_success) {
    if (ex->close) ex->close(ex->ctx);
    return rc;
  }
  *t = (Theirs){{rank, nranks, theirs_allgather, theirs_close}, *ex, 0};
  return comm_join(comm, &t->x, dev);
}

resccl_result_t resccl_comm_split(resccl_comm_t comm, int color, int key, resccl_comm_t *newcomm) {
  if (!comm || !newcomm) return rt_fail(resccl_invalid_argument, "resccl_comm_split: comm or newcomm is NULL");
  *newcomm = NULL;
  Group *g = comm->g;
  if (!g->x)
    return rt_fail(resccl_invalid_usage, "resccl_comm_split: comm's ranks are one process's (resccl_comm_init_all): "
                   "make the subset with resccl_comm_init_all");
  if (color < RESCCL_SPLIT_NOCOLOR)
    return rt_fail(resccl_invalid_argument, "resccl_comm_split: color %d (at least 0, or RESCCL_SPLIT_NOCOLOR)", color);
  /* Round one: every rank's color and key; the new ranks follow from them. */
  int me[2] = {color, key}, *all = calloc((size_t)g->n * 2, sizeof *all);
  resccl_result_t rc = all ? resccl_success : rt_fail(resccl_system_error, "out of memory");
  rc = ex_round(g->x, rc, me, sizeof me, all, "resccl_comm_split");
  int nranks = 0, rank = 0, root = -1; /* root: the new rank 0's old rank */
  for (int r = 0; r < g->n && rc == resccl_success && color >= 0; r++) {
    if (all[2 * r] != color) continue;
    nranks++;
    /* before me: a smaller key, or the same key and a smaller old rank */
    if (all[2 * r + 1] < key || (all[2 * r + 1] == key && r < comm->rank)) rank++;
    if (root < 0 || all[2 * r + 1] < all[2 * root + 1]) root = r;
  }
  free(all);
  /* Round two: each new rank 0 serves a rendezvous for its color and tells its id. */
  resccl_unique_id id, *ids = calloc((size_t)g->n, sizeof *ids);
  memset(&id, 0, sizeof id);
  if (!ids && rc == resccl_success) rc = rt_fail(resccl_system_error, "out of memory");
  if (rc == resccl_success && color >= 0 && rank == 0) rc = resccl_get_unique_id(&id);
  if (g->x) rc = ex_round(g->x, rc, &id, sizeof id, ids, "resccl_comm_split");
  if (rc == resccl_success && color >= 0) {
    int dev = -1;
    cudaGetDevice(&dev);
    cudaSetDevice(comm->cudev);
    rc = resccl_comm_init_rank(newcomm, nranks, ids[root], rank);
    if (dev >= 0) cudaSetDevice(dev);
  }
  free(ids);
  return rc;
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
  int stop = *(volatile int *)c->g->stop;
  *err = stop == STOP_ABORT ? resccl_remote_error : stop ? resccl_timeout : resccl_success;
  return resccl_success;
}

/* Destroy comm; abort: stop the group's collectives first, and leave its exchange without the last round. */
static resccl_result_t comm_end(resccl_comm_t comm, int abort) {
  if (!comm) return resccl_success;
  Group *g = comm->g;
  /* A collective launched on some ranks only can no longer be launched on
     the rest: its kernels give up now, not at the timeout. */
  if (abort || (g->live == 1 && g->open.n)) *(volatile int *)g->stop = STOP_ABORT;
  /* Leaving the exchange tells ranks waiting in a round at once. */
  if (abort && g->x) g->x->close(g->x), g->x = NULL;
  if (--g->live > 0) return resccl_success;
  /* An aborted group across processes keeps its GPU memory and stop word
     until the process ends: peers' kernels may still write into them, and
     waiting for this process's own would wait for whatever else hangs on
     the GPU (the reason to abort). */
  if (abort && g->shared) return resccl_success;
  int dev = -1;
  cudaGetDevice(&dev);
  for (int d = 0; d < g->ndevs; d++) cudaSetDevice(g->dev[d]), cudaDeviceSynchronize();
  /* This process's memory goes once every peer has closed its view of it
     (ipc_close), and so is done with it. */
  for (RtPlan *p = g->plans; p; p = p->next)
    for (int i = 0; i < 6; i++) ipc_close(p->v[i / 3][i % 3]);
  resccl_result_t rc = g->x ? ex_round(g->x, resccl_success, NULL, 0, NULL, "resccl_comm_destroy") : resccl_success;
  while (g->plans) {
    RtPlan *p = g->plans;
    g->plans = p->next;
    plan_unload(g, p);
  }
  group_free(g);
  if (dev >= 0) cudaSetDevice(dev); /* the caller's, as NCCL leaves it */
  return rc;
}

resccl_result_t resccl_comm_destroy(resccl_comm_t comm) { return comm_end(comm, 0); }

resccl_result_t resccl_comm_abort(resccl_comm_t comm) { return comm_end(comm, 1); }
