/*
** launch.c — launching a group's queued calls (or one call): matched
** across ranks into collectives (group.c's rules), checked whole before
** anything runs, each shaped for the form it runs (micro-batches, slices,
** scratch, counters), then queued collective by collective: per GPU one
** kernel for its ranks on the stream of the first, the others' streams
** joined to it, with the copy-engine copies between (copyengine.c).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objects.h"
#include "../../kernels-templates/tile.h"

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

/* Micro-batches of call c in tiles of at most `tile` bytes cut into nslice
   slices (rx_nmicro: tile.h's rule, the one the simulator follows too),
   or RESCCL_NMICRO's; the runtime's one way to count them. */
static size_t call_nmicro(const Call *c, size_t nslice, size_t tile) {
  const Variant *v = c->v;
  const RtConf *cf = &c->plan->conf;
  return rx_nmicro(c->count, c->esize, (size_t)v->pf.chunks, (size_t)v->pf.maxcnt, nslice, (size_t)v->nblk, tile,
                   cf->slot_bytes, (size_t)cf->nmicro);
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
  /* Micro-batches: call_nmicro. Slices taken in turn where the call is
     long enough for blocks to drift apart: at the tile's micro-batches a
     block would get at least 4 units of each entry per slice it has. On
     2xH200 turns gained 5-10% from 1 GiB and lost 6-7% at 32 MiB (2
     micro-batches; docs/journal/gpu-2026-11-30.md). Smaller calls keep one slice per block.
     With turns a unit fills a slot (a tile of a slot per slice of each
     block): every unit costs a claim, a wait and fences, and 2 MiB units
     moved 5-10% more than 1 MiB from 512 MiB. */
  size_t K = (size_t)v->nblk, V = (size_t)v->nslice;
  size_t nm = call_nmicro(c, K, p->conf.tile_bytes);
  c->nslice = (int)K, c->turns = 0;
  if (V > K && nm >= 4 * (V / K)) {
    nm = call_nmicro(c, V, p->conf.slot_bytes * K);
    c->nslice = (int)V, c->turns = 1;
  }
  /* A slice of a micro-batch must fit a FIFO slot (call_nmicro). */
  if (nm > (1u << 20))
    return rt_fail(resccl_invalid_usage, "%s: %zu elements would take %zu micro-batches (at most %u): raise "
                   "RESCCL_SLOT_BYTES", p->coll, count, nm, 1u << 20);
  c->nmicro = (int)(nm < 1 ? 1 : nm);
  if (v->pf.ncounters) TRY(counters(v, c->comm, (size_t)c->nmicro, q, n));
  if (v->pf.bufchunks[2])
    TRY(scratch(v, c->comm, ((size_t)(v->pf.bufchunks[2] + v->pf.chunks - 1) / v->pf.chunks) * count * es, q, n, &c->buf[2]));
  return resccl_success;
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

/* Whether calls[i] may launch with the calls of its collective in
   calls[0..n) (seq[], first[]: gq_match's): the same collective on every
   rank, in agreement with what its ranks launched before, every rank there
   where its form needs their buffers, and every rank of its GPU there. */
static resccl_result_t check_collective(Call *calls, int n, const unsigned long long *seq, const int *first, int i) {
  Call *c = &calls[i];
  Group *g = c->comm->g;
  int here = 0, want = 0, all = 0;
  GqSig sig = sig_of(c);
  for (int j = 0; j < n; j++) {
    Call *o = &calls[j];
    if (first[j] != first[i]) continue;
    GqSig other = sig_of(o);
    if (!gq_sig_same(&other, &sig))
      return rt_fail(resccl_invalid_usage, "%s: the ranks' collective number %llu differs in collective, count, "
                     "datatype, op or placement (call collectives in the same order on every rank)", c->plan->coll,
                     seq[i] + 1);
    here += o->comm->d == c->comm->d, all++;
  }
  for (int r = 0; r < g->n; r++) want += g->comms[r].d == c->comm->d;
  if (first[i] == i && gq_open_reserve(&g->open, n)) return rt_fail(resccl_system_error, "out of memory");
  if (first[i] == i && gq_open_differs(&g->open, seq[i], &sig))
    return rt_fail(resccl_invalid_usage, "%s: collective number %llu differs in collective, count, datatype, op or "
                   "placement from what its other ranks launched (call collectives in the same order on every rank)",
                   c->plan->coll, seq[i] + 1);
  if ((c->v->pf.nce || c->v->pf.pulls) && all != c->v->pf.nranks)
    return rt_fail(resccl_invalid_usage, "%s: plan %s %s, which needs every rank's buffers: call all %d ranks between "
                   "resccl_group_start and resccl_group_end", c->plan->coll, c->plan->name,
                   c->v->pf.nce ? "moves data on the copy engine" : "reads peers' buffers at this size", c->v->pf.nranks);
  if (c->v->pf.pulls && !c->plan->conf.direct)
    return rt_fail(resccl_invalid_usage, "%s: plan %s reads peers' buffers, which RESCCL_DIRECT=0 forbids",
                   c->plan->coll, c->plan->name);
  if (here != want)
    return rt_fail(resccl_invalid_usage, "%s: %d ranks share GPU %d; call them all between resccl_group_start and "
                   "resccl_group_end", c->plan->coll, want, g->dev[c->comm->d]);
  return resccl_success;
}

/* The kernel argument of calls[i]'s launch on its GPU, which runs every
   rank of its collective there that done[] does not mark yet (then marked);
   returns how many. It holds every rank's buffers where all are called
   together and sends are direct, else its own ranks' only. */
static int kernel_args(Call *calls, int n, const int *first, int i, char *done, RxArgs *a) {
  Call *c = &calls[i];
  int d = c->comm->d;
  memset(a, 0, sizeof *a);
  a->run = c->v->dev[d].run, a->block = c->v->dev[d].block, a->count = c->count, a->esize = c->esize,
  a->nmicro = c->nmicro, a->nslice = c->nslice, a->turns = c->turns, a->dtype = c->dtype, a->op = c->op,
  a->nranks = c->v->pf.nranks;
  RxGeom geom = rx_geom(c->count, (size_t)c->v->pf.chunks, (size_t)c->nmicro, c->esize);
  a->units = geom.units, a->chunks = c->v->pf.chunks, a->vec = (int)geom.v, a->kslab = (int)geom.K;
  int present = 0;
  for (int j = 0; j < n; j++)
    if (first[j] == first[i]) {
      for (int b = 0; b < 3; b++) a->buf[calls[j].comm->rank][b] = calls[j].buf[b];
      present++;
    }
  a->direct = present == c->v->pf.nranks && c->plan->conf.direct;
  a->posts = c->v->dev[d].posts, a->ncounters = c->v->pf.ncounters;
  if (!a->direct) memset(a->buf, 0, sizeof a->buf);
  a->timeout_ns = (unsigned long long)(c->plan->conf.timeout_s * 1e9);
  int ranks = 0;
  for (int j = i; j < n; j++) {
    Call *o = &calls[j];
    if (done[j] || first[j] != first[i] || o->comm->d != d) continue;
    for (int b = 0; b < 3; b++) a->buf[o->comm->rank][b] = o->buf[b];
    done[j] = 1, ranks++;
  }
  return ranks;
}

/* calls[i]'s GPU's share of its collective, on calls[i]'s stream: the
   other streams of its ranks there joined, the copy-engine barrier before
   the copies (none with `events`: ce_by_events), then the kernel. */
static resccl_result_t launch_gpu(Call *calls, int n, const int *first, int i, int events, char *done) {
  Call *c = &calls[i];
  Group *g = c->comm->g;
  int d = c->comm->d;
  RxArgs a;
  int ranks = kernel_args(calls, n, first, i, done, &a);
  if (cudaSetDevice(g->dev[d]) != cudaSuccess)
    return rt_fail(resccl_unhandled_cuda_error, "cannot select GPU %d", g->dev[d]);
  /* Ranks of one GPU on different streams: the launch waits for all of them
     (and they for it, at the end; under capture, the streams must be in one
     capture). */
  cudaError_t ce = join_streams(calls, n, first, i, 0);
  if (ce == cudaSuccess && c->v->pf.nce) {
    if (!events) TRY(ce_sync(c, 1));
    ce = cudaEventRecord(c->v->dev[d].start, c->stream);
  }
  if (ce != cudaSuccess)
    return rt_fail(resccl_unhandled_cuda_error, "%s: ordering the streams of GPU %d: %s", c->plan->coll, g->dev[d],
                   cudaGetErrorString(ce));
  void *params[] = {&a};
  CUresult cr = c->v->dev[d].nblocks == 0 ? CUDA_SUCCESS /* the copy engine does it all */
                                          : drv.launch(c->v->dev[d].fn, (unsigned)c->v->dev[d].nblocks, 1, 1,
                                                       (unsigned)c->plan->conf.threads, 1, 1, 0, (CUstream)c->stream,
                                                       params, NULL);
  if (cr != CUDA_SUCCESS) {
    const char *s = "?";
    drv.error_string(cr, &s);
    return rt_fail(resccl_unhandled_cuda_error, "%s: launch on GPU %d: %s", c->plan->coll, g->dev[d], s);
  }
  if (rt_debug_level() > 1)
    fprintf(stderr, "resccl INFO launch %s on GPU %d: %d ranks, %d blocks, count %zu, %d micro-batches\n",
            c->plan->coll, g->dev[d], ranks, c->v->dev[d].nblocks, c->count, c->nmicro);
  return resccl_success;
}

/* The end of calls[i]'s GPU's share, after the copies: the copy-engine
   barrier after them (none with `events`), and the other streams of its
   ranks there joined back. */
static resccl_result_t end_gpu(Call *calls, int n, const int *first, int i, int events) {
  int gd = calls[i].comm->g->dev[calls[i].comm->d];
  cudaError_t ce = cudaSetDevice(gd);
  if (ce == cudaSuccess && calls[i].v->pf.nce && !events) TRY(ce_sync(&calls[i], 0));
  if (ce == cudaSuccess) ce = join_streams(calls, n, first, i, 1);
  if (ce != cudaSuccess)
    return rt_fail(resccl_unhandled_cuda_error, "%s: ordering the streams of GPU %d: %s", calls[i].plan->coll, gd,
                   cudaGetErrorString(ce));
  return resccl_success;
}

/* The collective whose first call is calls[k], queued whole: a plan's
   copy-engine form has one barrier count, one set of flags and one `start`
   event per GPU, so one call of it is queued (barrier, kernel, copies,
   barrier) before the next. lead[i]: calls[i]'s stream carries its GPU's
   launch. */
static resccl_result_t launch_collective(Call *calls, int n, const int *first, int k, char *done, char *lead) {
  int events = calls[k].v->pf.nce && ce_by_events(calls, n, first, k);
  resccl_result_t rc = resccl_success;
  for (int i = k; i < n && rc == resccl_success; i++)
    if (!done[i] && first[i] == k) lead[i] = 1, rc = launch_gpu(calls, n, first, i, events, done);
  if (rc == resccl_success && calls[k].v->pf.nce) rc = ce_copies(calls, n, first, k, events);
  for (int i = k; i < n && rc == resccl_success; i++)
    if (lead[i] && first[i] == k) rc = end_gpu(calls, n, first, i, events);
  return rc;
}

resccl_result_t launch(Call *calls, int n) {
  int dev = -1;
  cudaGetDevice(&dev); /* shape() may select another */
  /* One allocation: the queue as group.c sees it, the calls' numbers, first call of each one's collective,
     the launch order and gq_order's room (3n), then done, lead and gq_order's ready flags. */
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
  for (int i = 0; i < n && rc == resccl_success; i++) rc = check_collective(calls, n, seq, first, i);
  for (int i = 0; i < n && rc == resccl_success; i++) rc = shape(&calls[i], calls, n);
  for (int i = 0; i < n && rc == resccl_success; i++) {
    if (first[i] != i) continue;
    GqSig sig = sig_of(&calls[i]);
    gq_open_note(&calls[i].comm->g->open, seq[i], &sig, ranks_of(first, n, i), calls[i].comm->g->nlocal);
  }
  for (int i = 0; i < n && rc == resccl_success; i++) calls[i].comm->calls++;
  int nlead = gq_order(q, n, first, order, ready, first + 2 * n);
  for (int t = 0; t < nlead && rc == resccl_success; t++) rc = launch_collective(calls, n, first, order[t], done, lead);
  if (dev >= 0) cudaSetDevice(dev);
  free(q);
  return rc;
}
