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

/* The open group of the calling thread (NCCL's groups are per thread too);
   a call refused inside it fails the whole group at resccl_group_end. */
static __thread struct {
  int depth;
  Call *q;
  int n, cap;
  resccl_result_t error;
  char why[1024];
} group;

int group_is_open(void) { return group.depth > 0; }

/* The plan for a call of `bytes` bytes. */
static RtPlan *plan_for(Group *g, const char *coll, size_t bytes) {
  RtPlan *p = g->plans;
  while (p && (strcmp(p->coll, coll) || bytes < p->lo || bytes > p->hi)) p = p->next;
  return p;
}

/* The form of plan p that runs a call of `bytes` (nccl-tests' size) when
   every rank is called together, or NULL; launch() falls back to the first
   form where not (the copy-engine and pulling ones need every rank's
   buffers). */
static Variant *form_for(const RtPlan *p, int inplace, size_t bytes) {
  Variant *const *f = p->v[inplace];
  if (f[1] && bytes >= (f[1]->pf.blockless ? p->conf.ce_from_blockless : p->conf.ce_from)) return f[1];
  return f[2] && bytes >= p->conf.pull_from && bytes < p->conf.pull_below && p->conf.direct ? f[2] : f[0];
}

resccl_result_t resccl_call_blocks(resccl_comm_t comm, const char *coll, size_t bytes, int *blocks) {
  if (!comm || !coll || !blocks) return rt_fail(resccl_invalid_argument, "null argument");
  *blocks = 0;
  const RtPlan *p = plan_for(comm->g, coll, bytes);
  Variant *v = p ? form_for(p, 0, bytes) : NULL;
  if (p && !v) v = form_for(p, 1, bytes);
  if (!v) return rt_fail(resccl_invalid_usage, "no %s plan loaded for %zu bytes", coll, bytes);
  *blocks = v->pf.ntb[comm->rank] * v->nblk;
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

/* ------------------------------------------------------------ calls */

static resccl_result_t launch(Call *calls, int n);

resccl_result_t resccl_group_start(void) {
  group.depth++;
  return resccl_success;
}

resccl_result_t resccl_group_end(void) {
  if (group.depth == 0) return rt_fail(resccl_invalid_usage, "resccl_group_end without resccl_group_start");
  if (--group.depth > 0) return resccl_success;
  resccl_result_t rc = group.error;
  if (rc != resccl_success) rt_fail(rc, "%s (nothing of the group was launched)", group.why);
  else if (group.n) rc = launch(group.q, group.n);
  group.n = 0, group.error = resccl_success;
  return rc;
}

/* Buffers a call needs grow (and allocate) only while no stream of the
   group's calls q[0..n) is captured; `what` says what must grow. */
static resccl_result_t may_grow(const Call *q, int n, const char *what) {
  for (int i = 0; i < n; i++) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    CU(cudaSetDevice(q[i].comm->cudev));
    CU(cudaStreamIsCapturing(q[i].stream, &cap));
    if (cap != cudaStreamCaptureStatusNone)
      return rt_fail(resccl_invalid_usage, "%s, which a CUDA graph capture cannot do: call once at this size before "
                     "capturing", what);
  }
  return resccl_success;
}

/* The scratch buffer of (v, rank) holds at least `bytes`. A smaller one it
   replaces stays allocated until the plan is unloaded: a call queued in a
   group or a captured graph may still use it. It grows at least twofold, so
   that calls growing a little at a time leave at most as much behind. */
static resccl_result_t scratch(Variant *v, resccl_comm_t c, size_t bytes, const Call *q, int n, char **out) {
  if (bytes > v->scratch_bytes[c->rank]) {
    char what[80];
    snprintf(what, sizeof what, "scratch memory must grow to %zu bytes", bytes);
    TRY(may_grow(q, n, what));
    if (v->scratch_bytes[c->rank] && bytes / 2 < v->scratch_bytes[c->rank]) bytes = 2 * v->scratch_bytes[c->rank];
    CU(cudaSetDevice(c->cudev));
    TRY(dev_alloc(v, &v->scratch[c->rank], bytes, NULL));
    v->scratch_bytes[c->rank] = bytes;
  }
  *out = v->scratch[c->rank];
  return resccl_success;
}

/* Every GPU's counters (RxArgs.posts) hold a call of nmicro micro-batches.
   Smaller ones stay allocated until unload, as scratch does. */
static resccl_result_t counters(Variant *v, resccl_comm_t c, size_t nmicro, const Call *q, int n) {
  size_t words = nmicro * (size_t)v->pf.ncounters;
  if (words <= v->post_words) return resccl_success;
  if (words > (size_t)1 << 28)
    return rt_fail(resccl_invalid_usage, "%zu micro-batches of %d copy-engine counters: too many", nmicro, v->pf.ncounters);
  char what[80];
  snprintf(what, sizeof what, "copy-engine counters must grow to %zu micro-batches", nmicro);
  TRY(may_grow(q, n, what));
  words = words < 64 * (size_t)v->pf.ncounters ? 64 * (size_t)v->pf.ncounters : words < 2 * v->post_words ? 2 * v->post_words : words;
  for (int d = 0; d < c->g->ndevs; d++) {
    CU(cudaSetDevice(c->g->dev[d]));
    TRY(dev_alloc(v, &v->dev[d].posts, sizeof(unsigned) * words, NULL));
  }
  v->post_words = words;
  return resccl_success;
}

/* What call c needs of the form it runs, c->v (launch(): after a collective
   called apart fell back to the first form): a count its chunks split where
   the form needs that, micro-batches, slices, counters and scratch. q[0..n):
   the group's calls, c among them. */
static resccl_result_t shape(Call *c, const Call *q, int n) {
  Variant *v = c->v;
  const RtPlan *p = c->plan;
  size_t count = c->count, es = c->esize;
  if (v->pf.even && count % (size_t)v->pf.chunks)
    return rt_fail(resccl_invalid_argument, "%s: count %zu does not split evenly into the %d chunks plan %s needs",
                   p->coll, count, v->pf.chunks, p->name);
  /* Micro-batches: tile.h's rule, the one the simulator follows too. Slices
     taken in turn where the call is long enough for blocks to drift apart:
     at the tile's micro-batches a block would get at least 4 units of each
     entry per slice it has. On 2xH200 turns gained 5-10% from 1 GiB and
     lost 6-7% at 32 MiB (2 micro-batches; BENCHMARKS.md). Smaller calls
     keep one slice per block. With turns a unit fills a slot (a tile of a
     slot per slice of each block): every unit costs a claim, a wait and
     fences, and 2 MiB units moved 5-10% more than 1 MiB from 512 MiB. */
  size_t K = (size_t)v->nblk, V = (size_t)v->nslice;
  size_t nm = rx_nmicro(count, es, (size_t)v->pf.chunks, (size_t)v->pf.maxcnt, K, K, p->conf.tile_bytes, p->conf.slot_bytes,
                        (size_t)p->conf.nmicro);
  c->nslice = (int)K, c->turns = 0;
  if (V > K && nm >= 4 * (V / K)) {
    nm = rx_nmicro(count, es, (size_t)v->pf.chunks, (size_t)v->pf.maxcnt, V, K, p->conf.slot_bytes * K, p->conf.slot_bytes,
                   (size_t)p->conf.nmicro);
    c->nslice = (int)V, c->turns = 1;
  }
  /* A slice of a micro-batch must fit a FIFO slot (rx_nmicro). */
  if (nm > (1u << 20))
    return rt_fail(resccl_invalid_usage, "%s: %zu elements would take %zu micro-batches (at most %u): raise "
                   "RESCCL_SLOT_BYTES", p->coll, count, nm, 1u << 20);
  c->nmicro = (int)(nm < 1 ? 1 : nm);
  if (v->pf.ncounters) TRY(counters(v, c->comm, (size_t)c->nmicro, q, n));
  if (v->pf.bufchunks[2])
    TRY(scratch(v, c->comm, ((size_t)(v->pf.bufchunks[2] + v->pf.chunks - 1) / v->pf.chunks) * count * es, q, n, &c->buf[2]));
  return resccl_success;
}

/* Is a call in place? NCCL's rule: an all-gather's input, or a
   reduce-scatter's output, is the rank's share of the other buffer. */
static int in_place(const char *coll, const void *send, const void *recv, size_t count, resccl_datatype_t dt,
                    resccl_comm_t comm) {
  size_t share = comm ? (size_t)comm->rank * count * ((unsigned)dt < resccl_num_types ? dtype_size[dt] : 1) : 0;
  if (!strcmp(coll, "allgather")) return comm && (const char *)send == (const char *)recv + share;
  if (!strcmp(coll, "reducescatter")) return comm && (const char *)recv == (const char *)send + share;
  return send == recv;
}

/* The checks every call passes first, whatever its count: success, or the error it gets. */
static resccl_result_t check_call(const char *coll, resccl_datatype_t dt, resccl_red_op_t op, resccl_comm_t comm) {
  if (!comm) return rt_fail(resccl_invalid_argument, "%s: null communicator", coll);
  if (*(volatile int *)comm->g->stop)
    return rt_fail(resccl_timeout, "%s: an earlier collective of this communicator timed out", coll);
  if ((unsigned)dt >= resccl_num_types)
    return rt_fail(resccl_invalid_argument, "%s: datatype %d is not supported", coll, (int)dt);
  if ((unsigned)op >= resccl_num_ops)
    return rt_fail(resccl_invalid_argument, "%s: reduction op %d is not supported", coll, (int)op);
  return resccl_success;
}

/* What runs a checked call of count > 0 elements, whatever its buffers: its
   plan and form, or the error the call is refused with; the same on every
   rank for the same arguments. */
static resccl_result_t resolve(const char *coll, size_t count, resccl_datatype_t dt, resccl_comm_t comm, int inplace,
                               RtPlan **plan, Variant **form) {
  size_t per = dtype_size[dt] * (strcmp(coll, "allreduce") ? (size_t)comm->g->n : 1);
  if (count > SIZE_MAX / per) return rt_fail(resccl_invalid_argument, "%s: count %zu is too large", coll, count);
  size_t bytes = count * per; /* nccl-tests' size */
  RtPlan *p = plan_for(comm->g, coll, bytes);
  if (!p) return rt_fail(resccl_invalid_usage, "%s: no plan loaded for %zu bytes (resccl_plan_load)", coll, bytes);
  if (p->conf.dtypes && !(p->conf.dtypes >> dt & 1) && (!strcmp(coll, "allreduce") || !strcmp(coll, "reducescatter")))
    return rt_fail(resccl_invalid_usage, "%s: plan %s was loaded without the %s kernels (RESCCL_DTYPES)", coll, p->name,
                   dtype_name[dt]);
  Variant *v = form_for(p, inplace, bytes);
  if (!v) return rt_fail(resccl_invalid_usage, "%s: plan %s has no %s form", coll, p->name, inplace ? "in-place" : "out-of-place");
  *plan = p, *form = v;
  return resccl_success;
}

resccl_result_t resccl_call_supported(const char *coll, const void *send, const void *recv, size_t count,
                                      resccl_datatype_t dt, resccl_red_op_t op, resccl_comm_t comm) {
  if (!coll || (strcmp(coll, "allreduce") && strcmp(coll, "allgather") && strcmp(coll, "reducescatter") &&
                strcmp(coll, "alltoall")))
    return rt_fail(resccl_invalid_argument, "unknown collective %s", coll ? coll : "(null)");
  rt_quiet(1); /* a question, not a failure */
  resccl_result_t rc = check_call(coll, dt, op, comm);
  RtPlan *p;
  Variant *v;
  if (rc == resccl_success && count > 0) rc = resolve(coll, count, dt, comm, in_place(coll, send, recv, count, dt, comm), &p, &v);
  rt_quiet(0);
  return rc;
}

static resccl_result_t enqueue_call(const char *coll, const void *send, void *recv, size_t count, resccl_datatype_t dt,
                               resccl_red_op_t op, resccl_comm_t comm, resccl_stream_t stream, int inplace) {
  resccl_result_t rc = check_call(coll, dt, op, comm);
  if (rc != resccl_success || count == 0) return rc;
  size_t es = dtype_size[dt];
  if (!send || !recv) return rt_fail(resccl_invalid_argument, "%s: null buffer", coll);
  if ((uintptr_t)send % es || (uintptr_t)recv % es)
    return rt_fail(resccl_invalid_argument, "%s: buffer not aligned to its %zu-byte elements", coll, es);
  RtPlan *p;
  Variant *v;
  if ((rc = resolve(coll, count, dt, comm, inplace, &p, &v)) != resccl_success) return rc;
  Call c = {comm, v, p, {(char *)send, (char *)recv, NULL}, count, es, 0, (int)dt, (int)op, (cudaStream_t)stream, 0, 0};
  if (group.depth == 0) return launch(&c, 1);
  if (group.n == group.cap) {
    int cap = group.cap ? 2 * group.cap : 16;
    Call *q = realloc(group.q, sizeof *q * (size_t)cap);
    if (!q) return rt_fail(resccl_system_error, "out of memory");
    group.q = q, group.cap = cap;
  }
  group.q[group.n++] = c;
  return resccl_success;
}

/* Queue or launch one call, leaving the caller's current device as it was. */
static resccl_result_t enqueue(const char *coll, const void *send, void *recv, size_t count, resccl_datatype_t dt,
                               resccl_red_op_t op, resccl_comm_t comm, resccl_stream_t stream, int inplace) {
  int dev = -1;
  cudaGetDevice(&dev);
  resccl_result_t rc = enqueue_call(coll, send, recv, count, dt, op, comm, stream, inplace);
  if (dev >= 0) cudaSetDevice(dev);
  if (rc != resccl_success && group.depth > 0 && group.error == resccl_success) {
    group.error = rc;
    snprintf(group.why, sizeof group.why, "%s", resccl_get_last_error());
  }
  return rc;
}

/* The other streams of the ranks that calls[i]'s launch holds (same
   collective, same GPU): `after` 0, the launch's stream waits for them; 1,
   they wait for it. The GPU is current. */
static cudaError_t join_streams(Call *calls, int n, const int *first, int i, int after) {
  Call *c = &calls[i];
  cudaEvent_t ev = NULL;
  cudaError_t ce = cudaSuccess;
  for (int j = i + 1; j < n && ce == cudaSuccess; j++) {
    Call *o = &calls[j];
    if (first[j] != first[i] || o->comm->d != c->comm->d || o->stream == c->stream) continue;
    if (!ev) {
      ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      if (ce == cudaSuccess && after) ce = cudaEventRecord(ev, c->stream);
      if (ce != cudaSuccess) break;
    }
    if (after) ce = cudaStreamWaitEvent(o->stream, ev, 0);
    else if ((ce = cudaEventRecord(ev, o->stream)) == cudaSuccess) ce = cudaStreamWaitEvent(c->stream, ev, 0);
  }
  if (ev) cudaEventDestroy(ev);
  return ce;
}

/* The copy-engine barrier (cuda_abi.h's RxSync) on the stream of
   calls[i]'s launch: every GPU of the call runs one before its copies and
   one after them. Before: a copy lands in a peer's buffer only once the
   peer's stream has reached the call (its earlier work may still use the
   buffer). After: a GPU's stream goes on only once every copy into its
   buffers, and out of them, is done. Kernels, so that GPUs whose streams
   are captured separately still order each other, and the flags and
   counters are zeroed on the GPU; elsewhere events do it (ce_by_events). */
static resccl_result_t ce_sync(const Call *c, int before) {
  Variant *v = c->v;
  Group *g = c->comm->g;
  RxSync s;
  memset(&s, 0, sizeof s);
  for (int d = 0; d < g->ndevs; d++) s.word[d] = v->dev[d].word;
  s.me = c->comm->d, s.ndev = g->ndevs, s.timeout_ns = (unsigned long long)(c->plan->conf.timeout_s * 1e9);
  if (before) {
    s.flags = v->dev[s.me].flags, s.nflags = v->dev[s.me].nflags;
    s.posts = v->dev[s.me].posts, s.nposts = c->nmicro * v->pf.ncounters;
  }
  s.stop = v->stop;
  void *params[] = {&s};
  CUDRV(drv.launch(v->dev[s.me].sync, 1, 1, 1, 1, 1, 1, 0, (CUstream)c->stream, params, NULL));
  return resccl_success;
}

/* Whether the collective whose first call is calls[k] orders its copies
   by events alone: where it has no flags or counters to zero and none of
   its streams is being captured. A barrier kernel costs the host 3.6 us to
   queue, an event 0.3; events of one GPU's stream that another GPU's
   stream waits for cannot join two captures. */
static int ce_by_events(const Call *calls, int n, const int *first, int k) {
  if (calls[k].v->pf.nceflags || calls[k].v->pf.ncounters) return 0;
  for (int j = k; j < n; j++) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (first[j] == k && (cudaSetDevice(calls[j].comm->cudev) != cudaSuccess ||
                          cudaStreamIsCapturing(calls[j].stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone))
      return 0;
  }
  return 1;
}

/* The copy-engine copies of the collective whose first call is calls[i]
   (every rank is in it: launch checked). Each (source GPU, destination
   GPU) has a stream, forked from the source GPU's launch stream after its
   first barrier and joined back to it before its second (ce_sync); all of
   it is stream-ordered, so CUDA graphs capture it. `events` (ce_by_events):
   with no barriers, a copy stream also waits for its destination GPU's
   launch stream to reach the call, and that stream for the copies. A
   stream queues the copies that wait for the kernel's counters after the
   others: the kernel may wait for those, never for these. */
static resccl_result_t ce_copies(Call *calls, int n, const int *first, int i, int events) {
  Variant *v = calls[i].v;
  Group *g = calls[i].comm->g;
  const Call *of[RX_MAXRANKS];
  cudaStream_t at[MAXDEV] = {0}; /* per GPU: the stream its launch went on */
  for (int j = n - 1; j >= 0; j--)
    if (first[j] == first[i]) of[calls[j].comm->rank] = &calls[j], at[calls[j].comm->d] = calls[j].stream;
  char used[MAXDEV][MAXDEV];
  memset(used, 0, sizeof used);
  size_t es = calls[i].esize, N = calls[i].count, M = (size_t)calls[i].nmicro, C = (size_t)v->pf.chunks;
  for (int k = 0; k < 2 * v->pf.nce; k++) {
    const int *c = &v->pf.ce[CE_INTS * (k % v->pf.nce)];
    if ((c[8] >= 0) != (k >= v->pf.nce)) continue;
    int ds = g->comms[c[0]].d, dt = g->comms[c[3]].d, each = c[7] >= 0 || c[8] >= 0;
    cudaStream_t st = v->dev[ds].ce[dt];
    CU(cudaSetDevice(g->dev[ds]));
    if (!used[ds][dt]) {
      CU(cudaStreamWaitEvent(st, v->dev[ds].start, 0));
      if (events && dt != ds) CU(cudaStreamWaitEvent(st, v->dev[dt].start, 0));
    }
    used[ds][dt] = 1;
    /* One piece, or one per micro-batch: after the kernel counted every
       slice of it, or with the flag a reduction waits for after it (its
       value the count). */
    for (size_t mb = 0; mb < (each ? M : 1); mb++) {
      size_t m = each ? mb : 0, slo, dlo, len;
      if (c[8] >= 0)
        CUDRV(drv.wait_value((CUstream)st, (CUdeviceptr)(v->dev[ds].posts + mb * (size_t)v->pf.ncounters + (size_t)c[8]),
                             (cuuint32_t)calls[i].nslice, CU_STREAM_WAIT_VALUE_GEQ));
      while (rx_ce_run(N, C, M, es, c[2], c[5], c[6], &m, each ? mb + 1 : M, &slo, &dlo, &len))
        CUDRV(drv.copy((CUdeviceptr)(of[c[3]]->buf[c[4]] + dlo * es), (CUdeviceptr)(of[c[0]]->buf[c[1]] + slo * es),
                       len * es, (CUstream)st));
      if (c[7] >= 0) CUDRV(drv.write_value((CUstream)st, (CUdeviceptr)v->ceflag[c[7]], (cuuint32_t)(mb + 1), 0));
    }
  }
  for (int ds = 0; ds < g->ndevs; ds++)
    for (int dt = 0; dt < g->ndevs; dt++) {
      if (!used[ds][dt]) continue;
      CU(cudaSetDevice(g->dev[ds]));
      CU(cudaEventRecord(v->dev[ds].ce_done[dt], v->dev[ds].ce[dt]));
      CU(cudaStreamWaitEvent(at[ds], v->dev[ds].ce_done[dt], 0));
      if (events && dt != ds) {
        CU(cudaSetDevice(g->dev[dt]));
        CU(cudaStreamWaitEvent(at[dt], v->dev[ds].ce_done[dt], 0));
      }
    }
  return resccl_success;
}

/* Calls of the collective whose first call is calls[k]. */
static int ranks_of(const int *first, int n, int k) {
  int all = 0;
  for (int j = k; j < n; j++) all += first[j] == k;
  return all;
}

static GqSig sig_of(const Call *c) { return (GqSig){c->v, c->count, c->dtype, c->op}; }

/* Where a collective's group holds only some of its ranks (called outside a
   group, or in groups of their own), it runs its plan's first form in place
   of one that needs every rank's buffers (copy-engine copies, pulls) where
   the first does not; its other ranks, called likewise, do the same. */
static void fall_back(Call *calls, int n, const int *first) {
  for (int k = 0; k < n; k++) {
    Variant *v = calls[k].v, *f = calls[k].plan->v[v->pf.inplace][0];
    if (first[k] != k || !(v->pf.nce || v->pf.pulls) || !f || f->pf.nce || f->pf.pulls) continue;
    int all = ranks_of(first, n, k);
    if (all == v->pf.nranks) continue;
    INFO("%s: %d of plan %s's %d ranks called together: its first form runs", calls[k].plan->coll, all,
         calls[k].plan->name, v->pf.nranks);
    for (int j = k; j < n; j++)
      if (first[j] == k && calls[j].v == v) calls[j].v = f;
  }
}

/* One kernel per (variant, GPU), holding every rank of that GPU. */
static resccl_result_t launch(Call *calls, int n) {
  int dev = -1;
  cudaGetDevice(&dev); /* shape() may select another */
  /* One allocation: the queue as group.c sees it, the calls' numbers, first call of each one's collective,
     the launch order and gq_order's room (3n), then done, lead (calls[i]'s stream carries its GPU's launch
     of the collective) and gq_order's ready flags. */
  GqCall *q = calloc((size_t)n, sizeof *q + sizeof(unsigned long long) + 5 * sizeof(int) + 3);
  if (!q) return rt_fail(resccl_system_error, "out of memory");
  unsigned long long *seq = (unsigned long long *)(q + n);
  int *first = (int *)(seq + n), *order = first + n;
  char *done = (char *)(first + 5 * n), *lead = done + n, *ready = lead + n;
  for (int i = 0; i < n; i++)
    q[i] = (GqCall){calls[i].comm, calls[i].comm->g, calls[i].stream, calls[i].comm->cudev, calls[i].comm->calls};
  gq_match(q, n, seq, first);
  fall_back(calls, n, first);
  resccl_result_t rc = resccl_success;
  /* Everything is checked before anything is launched: a half-launched call
     would leave its kernels waiting for peers that never come (a CUDA error
     while queueing still can; the timeout then ends the kernels). */
  for (int i = 0; i < n && rc == resccl_success; i++) {
    Call *c = &calls[i];
    Group *g = c->comm->g;
    int here = 0, want = 0, all = 0;
    GqSig sig = sig_of(c);
    for (int j = 0; j < n && rc == resccl_success; j++) {
      Call *o = &calls[j];
      if (first[j] != first[i]) continue;
      GqSig other = sig_of(o);
      if (!gq_sig_same(&other, &sig))
        rc = rt_fail(resccl_invalid_usage, "%s: the ranks' collective number %llu differs in collective, count, "
                     "datatype, op or placement (call collectives in the same order on every rank)", c->plan->coll,
                     seq[i] + 1);
      here += o->comm->d == c->comm->d, all++;
    }
    for (int r = 0; r < g->n; r++) want += g->comms[r].d == c->comm->d;
    if (rc == resccl_success && first[i] == i && gq_open_reserve(&g->open, n))
      rc = rt_fail(resccl_system_error, "out of memory");
    if (rc == resccl_success && first[i] == i && gq_open_differs(&g->open, seq[i], &sig))
      rc = rt_fail(resccl_invalid_usage, "%s: collective number %llu differs in collective, count, datatype, op or "
                   "placement from what its other ranks launched (call collectives in the same order on every rank)",
                   c->plan->coll, seq[i] + 1);
    if (rc == resccl_success && (c->v->pf.nce || c->v->pf.pulls) && all != c->v->pf.nranks)
      rc = rt_fail(resccl_invalid_usage, "%s: plan %s %s, which needs every rank's buffers: call all %d ranks between "
                   "resccl_group_start and resccl_group_end", c->plan->coll, c->plan->name,
                   c->v->pf.nce ? "moves data on the copy engine" : "reads peers' buffers at this size", c->v->pf.nranks);
    if (rc == resccl_success && c->v->pf.pulls && !c->plan->conf.direct)
      rc = rt_fail(resccl_invalid_usage, "%s: plan %s reads peers' buffers, which RESCCL_DIRECT=0 forbids",
                   c->plan->coll, c->plan->name);
    if (rc == resccl_success && here != want)
      rc = rt_fail(resccl_invalid_usage, "%s: %d ranks share GPU %d; call them all between resccl_group_start and "
                   "resccl_group_end", c->plan->coll, want, g->dev[c->comm->d]);
  }
  for (int i = 0; i < n && rc == resccl_success; i++) rc = shape(&calls[i], calls, n);
  for (int i = 0; i < n && rc == resccl_success; i++) {
    if (first[i] != i) continue;
    GqSig sig = sig_of(&calls[i]);
    gq_open_note(&calls[i].comm->g->open, seq[i], &sig, ranks_of(first, n, i), calls[i].v->pf.nranks);
  }
  for (int i = 0; i < n && rc == resccl_success; i++) calls[i].comm->calls++;
  int nlead = gq_order(q, n, first, order, ready, first + 2 * n);
  /* Collective by collective: a plan's copy-engine form has one barrier
     count, one set of flags and one `start` event per GPU, so one call of it
     is queued whole (barrier, kernel, copies, barrier) before the next. */
  for (int t = 0; t < nlead && rc == resccl_success; t++) {
    int k = order[t], events = calls[k].v->pf.nce && ce_by_events(calls, n, first, k);
    for (int i = k; i < n && rc == resccl_success; i++) {
      if (done[i] || first[i] != k) continue;
      Call *c = &calls[i];
      Group *g = c->comm->g;
      int d = c->comm->d;
      RxArgs a;
      memset(&a, 0, sizeof a);
      a.run = c->v->dev[d].run, a.block = c->v->dev[d].block, a.count = c->count, a.esize = c->esize, a.nmicro = c->nmicro, a.nslice = c->nslice, a.turns = c->turns, a.dtype = c->dtype,
      a.op = c->op, a.nranks = c->v->pf.nranks;
      RxGeom geom = rx_geom(c->count, (size_t)c->v->pf.chunks, (size_t)c->nmicro, c->esize);
      a.units = geom.units, a.chunks = c->v->pf.chunks, a.vec = (int)geom.v, a.kslab = (int)geom.K;
      int present = 0;
      for (int j = 0; j < n; j++)
        if (first[j] == first[i]) {
          for (int b = 0; b < 3; b++) a.buf[calls[j].comm->rank][b] = calls[j].buf[b];
          present++;
        }
      a.direct = present == c->v->pf.nranks && c->plan->conf.direct;
      a.posts = c->v->dev[d].posts, a.ncounters = c->v->pf.ncounters;
      if (!a.direct) memset(a.buf, 0, sizeof a.buf);
      a.timeout_ns = (unsigned long long)(c->plan->conf.timeout_s * 1e9);
      int ranks = 0;
      for (int j = i; j < n; j++) {
        Call *o = &calls[j];
        if (done[j] || first[j] != first[i] || o->comm->d != d) continue;
        for (int b = 0; b < 3; b++) a.buf[o->comm->rank][b] = o->buf[b];
        done[j] = 1, ranks++;
      }
      lead[i] = 1;
      if (cudaSetDevice(g->dev[d]) != cudaSuccess) {
        rc = rt_fail(resccl_unhandled_cuda_error, "cannot select GPU %d", g->dev[d]);
        break;
      }
      /* Ranks of one GPU on different streams: the launch waits for all of them
         (and they for it, at the end; under capture, the streams must be in one
         capture). */
      cudaError_t ce = join_streams(calls, n, first, i, 0);
      if (ce == cudaSuccess && c->v->pf.nce) {
        if (!events && (rc = ce_sync(c, 1)) != resccl_success) break;
        ce = cudaEventRecord(c->v->dev[d].start, c->stream);
      }
      if (ce != cudaSuccess) {
        rc = rt_fail(resccl_unhandled_cuda_error, "%s: ordering the streams of GPU %d: %s", c->plan->coll, g->dev[d],
                     cudaGetErrorString(ce));
        break;
      }
      void *params[] = {&a};
      CUresult cr = c->v->dev[d].nblocks == 0 ? CUDA_SUCCESS /* the copy engine does it all */
                                              : drv.launch(c->v->dev[d].fn, (unsigned)c->v->dev[d].nblocks, 1, 1,
                                                           (unsigned)c->plan->conf.threads, 1, 1, 0, (CUstream)c->stream,
                                                           params, NULL);
      if (cr != CUDA_SUCCESS) {
        const char *s = "?";
        drv.error_string(cr, &s);
        rc = rt_fail(resccl_unhandled_cuda_error, "%s: launch on GPU %d: %s", c->plan->coll, g->dev[d], s);
        break;
      }
      if (rt_debug_level() > 1)
        fprintf(stderr, "resccl INFO launch %s on GPU %d: %d ranks, %d blocks, count %zu, %d micro-batches\n",
                c->plan->coll, g->dev[d], ranks, c->v->dev[d].nblocks, c->count, c->nmicro);
    }
    if (rc == resccl_success && calls[k].v->pf.nce) rc = ce_copies(calls, n, first, k, events);
    for (int i = k; i < n && rc == resccl_success; i++) {
      if (!lead[i] || first[i] != k) continue;
      int gd = calls[i].comm->g->dev[calls[i].comm->d];
      cudaError_t ce = cudaSetDevice(gd);
      if (ce == cudaSuccess && calls[i].v->pf.nce && !events && (rc = ce_sync(&calls[i], 0)) != resccl_success) break;
      if (ce == cudaSuccess) ce = join_streams(calls, n, first, i, 1);
      if (ce != cudaSuccess)
        rc = rt_fail(resccl_unhandled_cuda_error, "%s: ordering the streams of GPU %d: %s", calls[i].plan->coll, gd,
                     cudaGetErrorString(ce));
    }
  }
  if (dev >= 0) cudaSetDevice(dev);
  free(q);
  return rc;
}

/* In-place is NCCL's: the input sits where the output wants it. */
resccl_result_t resccl_all_reduce(const void *send, void *recv, size_t count, resccl_datatype_t dt, resccl_red_op_t op,
                                  resccl_comm_t comm, resccl_stream_t stream) {
  return enqueue("allreduce", send, recv, count, dt, op, comm, stream, send == recv);
}

resccl_result_t resccl_all_gather(const void *send, void *recv, size_t count, resccl_datatype_t dt, resccl_comm_t comm,
                                  resccl_stream_t stream) {
  return enqueue("allgather", send, recv, count, dt, resccl_sum, comm, stream,
                 in_place("allgather", send, recv, count, dt, comm));
}

resccl_result_t resccl_reduce_scatter(const void *send, void *recv, size_t count, resccl_datatype_t dt,
                                      resccl_red_op_t op, resccl_comm_t comm, resccl_stream_t stream) {
  return enqueue("reducescatter", send, recv, count, dt, op, comm, stream,
                 in_place("reducescatter", send, recv, count, dt, comm));
}

resccl_result_t resccl_all_to_all(const void *send, void *recv, size_t count, resccl_datatype_t dt, resccl_comm_t comm,
                                  resccl_stream_t stream) {
  return enqueue("alltoall", send, recv, count, dt, resccl_sum, comm, stream, send == recv);
}

