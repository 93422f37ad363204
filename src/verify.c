/*
** verify.c — prove a plan right before anything runs it.
**
** 1. Post-condition: execute the tasks symbolically in pipeline order (a
**    task may not read chunks it writes, shifted: executors move them side
**    by side). A
**    location holds a multiset of input contributions, kept as (sum of 64-bit
**    hashes, count); copies replace, reductions add. Every output chunk must
**    hold exactly the contributions the collective defines, each once. On
**    the way, note the reductions that complete a value (Plan.complete):
**    where avg divides.
** 2. Connection order: both ends of a connection see its tasks in one order.
** 3. Deadlock: run the per-TB programs abstractly over a few micro-batches
**    with FIFOs too small to hold a tile (the tightest buffering there is), so
**    a plan that passes cannot block at any buffer size; a buffered plan
**    (Plan.buffered) with FIFOs of two tiles, which executors then guarantee.
**    If they stop short, follow who-waits-for-whom to a cycle and name its
**    TBs and primitives.
**    In a plan that pulls, every rank runs a kernel (pulls_served).
** 4. Races: what orders primitives on GPUs orders every two accesses of a
**    location, one a write, as step 1 ran them (see races); and where GPU
**    slices of two ranges would not meet, note the primitives that move
**    chunk by chunk (Plan.split).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

typedef struct {
  uint64_t h;
  int cnt; /* contributions; -1 = never written (garbage) */
} Val;

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t contrib(int rank, int idx) { return mix(((uint64_t)rank << 32) | (uint32_t)idx); }

/* Physical location of (rank, buf, idx) under the plan's placement. */
typedef struct {
  int per, off[NBUF];
} Layout;

static size_t loc(const Layout *l, const Program *p, int inplace, int rank, int buf, int idx) {
  if (inplace) {
    if (p->coll == COLL_ALLGATHER && buf == BUF_INPUT) buf = BUF_OUTPUT, idx += rank * p->chunks;
    else if (p->coll == COLL_REDUCESCATTER && buf == BUF_OUTPUT) buf = BUF_INPUT, idx += rank * p->chunks;
    else if ((p->coll == COLL_ALLREDUCE || p->coll == COLL_ALLTOALL) && buf == BUF_INPUT) buf = BUF_OUTPUT;
  }
  return (size_t)rank * l->per + l->off[buf] + idx;
}

/* Which single contribution is h, if any: "rank R input chunk I". */
static int find_one(const Program *p, uint64_t h, char *out, size_t n) {
  int ni = prog_bufchunks(p, BUF_INPUT);
  for (int r = 0; r < p->nranks; r++)
    for (int i = 0; i < ni; i++)
      if (contrib(r, i) == h) return snprintf(out, n, "rank %d's input chunk %d", r, i), 1;
  return 0;
}

/* Whether n locations from a and from b meet without being the same. */
static int shifted(size_t a, size_t b, int n) { return a != b && a < b + (size_t)n && b < a + (size_t)n; }

static rcStatus postcondition(Plan *pl, Err *e) {
  const Program *p = pl->prog;
  const Dag *d = &pl->dag;
  int R = p->nranks, C = p->chunks, inplace = pl->opt.inplace;
  Layout L = {0, {0}};
  for (int b = 0; b < NBUF; b++) L.off[b] = L.per, L.per += prog_bufchunks(p, b);
  size_t nloc = (size_t)R * L.per;
  Val *v = xmalloc((nloc + 1) * sizeof *v);
  int *writer = xmalloc((nloc + 1) * sizeof *writer);
  for (size_t i = 0; i < nloc; i++) v[i] = (Val){0, -1}, writer[i] = -1;
  int ni = prog_bufchunks(p, BUF_INPUT);
  for (int r = 0; r < R; r++)
    for (int i = 0; i < ni; i++) v[loc(&L, p, inplace, r, BUF_INPUT, i)] = (Val){contrib(r, i), 1};
  free(pl->complete);
  pl->complete = xcalloc((size_t)d->n + 1, sizeof *pl->complete);

  rcStatus rc = RC_OK;
  for (int k = 0; k < d->n && rc == RC_OK; k++) {
    int t = pl->sched.order[k];
    const Task *tk = &d->t[t];
    /* Executors move a task's chunks side by side: a task must not read a
       location it writes unless it is the same chunk (which it reads first). */
    size_t s0 = loc(&L, p, 0, tk->src, tk->sbuf, tk->sidx), o0 = loc(&L, p, 0, tk->dst, tk->obuf, tk->oidx),
           d0 = loc(&L, p, 0, tk->dst, tk->dbuf, tk->didx);
    if (shifted(s0, d0, tk->cnt) || (tk->op == OP_REDUCE && shifted(o0, d0, tk->cnt))) {
      char at[300];
      plan_task_where(pl, t, at, sizeof at);
      rc = err_set(e, RC_EVERIFY, "%s: a transfer of %d chunks reads chunks it writes, shifted", at, tk->cnt);
    }
    for (int c = 0; c < tk->cnt; c++) {
      /* Task buffers are already placed: index without aliasing. */
      Val s = v[loc(&L, p, 0, tk->src, tk->sbuf, tk->sidx + c)];
      Val o = v[loc(&L, p, 0, tk->dst, tk->obuf, tk->oidx + c)];
      size_t di = loc(&L, p, 0, tk->dst, tk->dbuf, tk->didx + c);
      if (tk->op == OP_COPY) v[di] = s;
      else if (s.cnt < 0 || o.cnt < 0) v[di] = (Val){0, -1};
      else v[di] = (Val){o.h + s.h, o.cnt + s.cnt};
      if (tk->op == OP_REDUCE && v[di].cnt == R) pl->complete[t]++;
      writer[di] = t;
    }
  }

  /* A reduced chunk holds every rank's input chunk of its index, once. */
  uint64_t *colsum = xcalloc((size_t)ni + 1, sizeof *colsum);
  if (p->coll == COLL_ALLREDUCE || p->coll == COLL_REDUCESCATTER)
    for (int i = 0; i < ni; i++)
      for (int b = 0; b < R; b++) colsum[i] += contrib(b, i);
  int no = prog_bufchunks(p, BUF_OUTPUT);
  for (int r = 0; r < R && rc == RC_OK; r++)
    for (int j = 0; j < no && rc == RC_OK; j++) {
      Val want;
      switch (p->coll) {
      case COLL_ALLGATHER: want = (Val){contrib(j / C, j % C), 1}; break;
      case COLL_ALLTOALL: want = (Val){contrib(j / C, r * C + j % C), 1}; break;
      case COLL_REDUCESCATTER: want = (Val){colsum[r * C + j], R}; break;
      default: want = (Val){colsum[j], R}; break;
      }
      size_t li = loc(&L, p, inplace, r, BUF_OUTPUT, j);
      Val got = v[li];
      if (got.cnt == want.cnt && got.h == want.h) continue;
      char at[300], what[200] = "", have[120];
      if (writer[li] >= 0) plan_task_where(pl, writer[li], at, sizeof at);
      else prog_where(p, p->at, at, sizeof at);
      if (got.cnt < 0) {
        snprintf(what, sizeof what, "%s", writer[li] >= 0 ? "data never initialised" : "nothing (never written)");
      } else if (want.cnt == 1) {
        if (got.cnt == 1 && find_one(p, got.h, have, sizeof have))
          snprintf(what, sizeof what, "%s", have);
        else
          snprintf(what, sizeof what, "%d contributions", got.cnt);
        char exp[120];
        find_one(p, want.h, exp, sizeof exp);
        rc = err_set(e, RC_EVERIFY, "%s: %s result wrong: rank %d %s chunk %d holds %s, expected %s", at,
                     coll_name(p->coll), r, "output", j, what, exp);
        break;
      } else if (got.cnt == want.cnt - 1 && find_one(p, want.h - got.h, have, sizeof have)) {
        snprintf(what, sizeof what, "%d of %d contributions (missing %s)", got.cnt, want.cnt, have);
      } else if (got.cnt == want.cnt + 1 && find_one(p, got.h - want.h, have, sizeof have)) {
        snprintf(what, sizeof what, "%d contributions, expected %d (%s twice)", got.cnt, want.cnt, have);
      } else {
        snprintf(what, sizeof what, "%d contributions, expected %d%s", got.cnt, want.cnt,
                 got.cnt == want.cnt ? " (wrong ones)" : "");
      }
      rc = err_set(e, RC_EVERIFY, "%s: %s result wrong: rank %d output chunk %d holds %s", at, coll_name(p->coll),
                   r, j, what);
    }
  free(v), free(writer), free(colsum);
  return rc;
}

/*
** Both ends of every connection must run its tasks in the same order. Each end
** belongs to one TB; list the tasks each end sees in its TB's order, compare.
*/
static rcStatus conn_order(const Plan *pl, Err *e) {
  int nc = pl->nconn;
  int *off = xcalloc((size_t)nc + 2, sizeof *off), *fill[2], *seq[2];
  for (int i = 0; i < pl->np; i++)
    if (pl->p[i].cout >= 0) off[pl->p[i].cout + 2]++;
  for (int c = 0; c < nc; c++) off[c + 2] += off[c + 1];
  for (int k = 0; k < 2; k++) {
    fill[k] = xmalloc(((size_t)nc + 1) * sizeof(int));
    memcpy(fill[k], off + 1, (size_t)nc * sizeof(int));
    seq[k] = xmalloc(((size_t)off[nc + 1] + 1) * sizeof(int));
  }
  for (int g = 0; g < pl->ntbs; g++)
    for (int j = pl->tb_off[g]; j < pl->tb_off[g + 1]; j++) {
      const Prim *q = &pl->p[pl->tb_prims[j]];
      if (q->cout >= 0) seq[0][fill[0][q->cout]++] = q->tout;
      if (q->cin >= 0) seq[1][fill[1][q->cin]++] = q->tin;
    }
  rcStatus rc = RC_OK;
  for (int c = 0; c < nc && rc == RC_OK; c++)
    for (int j = off[c + 1]; j < off[c + 2] && rc == RC_OK; j++) {
      if (seq[0][j] == seq[1][j]) continue;
      char a[300], b[300];
      plan_task_where(pl, seq[1][j], b, sizeof b);
      rc = err_set(e, RC_EDEADLOCK, "%s: connection rank %d -> rank %d (channel %d) carries transfers in a different "
                   "order at its two ends: the sender's transfer #%d is this one, the receiver's is %s",
                   plan_task_where(pl, seq[0][j], a, sizeof a), pl->conn[c].src, pl->conn[c].dst, pl->conn[c].chan,
                   j - off[c + 1] + 1, b);
    }
  free(off), free(fill[0]), free(fill[1]), free(seq[0]), free(seq[1]);
  return rc;
}

/* --------------------------------------------------------------- races */

/*
** The post-condition runs the tasks one after another; GPUs run them at
** once, ordered only by program order in a TB, a wait for a flag, a
** receive's wait for what its send pushes or puts, and a copy-engine copy's
** counter and flag. A pull reads the sender's buffer and a put writes the
** peer's with none of these: pull.c's rules keep them apart from the
** rest. So every two accesses of one location, one a write, must be
** ordered by these, the way the post-condition ran them. Micro-batch m of
** every chunk lies in one slab (tile.h), so the order is per micro-batch.
** Events are primitives and copy-engine copies. Almost every pair is
** ordered within two steps (before_near); vector clocks settle the rest
** (far_unmet). The deadlock check runs first: the order has no cycle.
*/
typedef struct {
  size_t at;            /* location */
  int pos, ev, task;    /* the task's position in the post-condition's order, the event, the task */
  uint8_t phase, write; /* phase: the order within a task (PH_*) */
  int lo, cnt;          /* the chunk range it is part of, in its buffer */
} Access;

/* Phases of a task: its source read, a landing write (a put, a copy
   engine's), what its receiver does. */
enum { PH_READ, PH_LAND, PH_RECV };

/* Accesses by location, then in the post-condition's order: a counting
   sort (millions of accesses at a thousand ranks), whose first pass only
   counts (a == NULL). */
typedef struct {
  const Plan *pl;
  Layout L;
  size_t *off; /* per location: where its accesses go */
  Access *a;
  int n;
} Accesses;

static void touch(Accesses *x, int ev, int task, int phase, int write, int rank, int buf, int idx, int cnt) {
  for (int c = 0; c < cnt; c++) {
    size_t at = loc(&x->L, x->pl->prog, 0, rank, buf, idx + c);
    if (!x->a) x->off[at + 2]++, x->n++;
    else x->a[x->off[at + 1]++] = (Access){at, x->pl->sched.pos[task], ev, task, (uint8_t)phase, (uint8_t)write, idx, cnt};
  }
}

/* What primitive i reads and writes, and where (emit.c's macros). */
static void prim_accesses(Accesses *x, int i) {
  const Plan *pl = x->pl;
  const Prim *p = &pl->p[i];
  int r = p->rank, k = p->kind, n = p->cnt, src = p->pull ? pl->dag.t[p->tin].src : r;
  const Prim *rp = (k == PR_SEND || k == PR_CS) && p->direct ? &pl->p[pl->task_recv[p->tout]] : NULL;
  if (k == PR_SEND || k == PR_CS || k == PR_COPY || k == PR_REDUCE)
    touch(x, i, k == PR_SEND ? p->tout : p->tin, PH_READ, 0, r, p->rbuf, p->ridx, n);
  if (rp) touch(x, i, p->tout, PH_LAND, 1, rp->rank, rp->wbuf, rp->widx, n);
  if (p->pull) touch(x, i, p->tin, PH_READ, 0, src, p->rbuf, p->ridx, n);
  if (p->pull && k == PR_RRCS) {
    const Task *o = &pl->dag.t[p->tout];
    touch(x, i, p->tout, PH_LAND, 1, o->dst, o->dbuf, o->didx, n);
  }
  if (k == PR_RRC && ((p->direct && !p->pull) || p->ce)) /* reduces what landed where it landed */
    touch(x, i, p->tin, PH_RECV, 0, r, p->wbuf, p->widx, n);
  if (k == PR_RRC || k == PR_RRCS || k == PR_RRS || k == PR_REDUCE)
    touch(x, i, p->tin, PH_RECV, 0, r, p->ubuf, p->uidx, n);
  /* a direct receive writes too where its put falls back to the FIFO (ranks not called together) */
  if (k != PR_SEND && k != PR_RRS) touch(x, i, p->tin, PH_RECV, 1, r, p->wbuf, p->widx, n);
  /* a fused forward sends what it just wrote, as task tout reads it */
  if (k == PR_RCS || k == PR_RRCS || k == PR_CS) touch(x, i, p->tout, PH_READ, 0, r, p->wbuf, p->widx, n);
}

static int access_cmp(const void *a, const void *b) {
  const Access *x = a, *y = b;
  if (x->at != y->at) return x->at < y->at ? -1 : 1;
  if (x->pos != y->pos) return x->pos - y->pos;
  if (x->phase != y->phase) return x->phase - y->phase;
  if (x->write != y->write) return x->write - y->write;
  return x->ev - y->ev;
}

/* Events: primitives (np of them), then copy-engine copies. A chain (a TB,
   a copy) runs its events in order; pred lists what else each waits for. */
typedef struct {
  int n, nchain, *chain, *idx, *poff, *pred;
} Events;

static void events_build(const Plan *pl, Events *v) {
  int np = pl->np, E = v->n = np + pl->nce, npred = 0, cap = 0;
  v->nchain = pl->ntbs + pl->nce;
  v->chain = xmalloc(((size_t)E + 1) * sizeof(int)), v->idx = xmalloc(((size_t)E + 1) * sizeof(int));
  v->poff = xcalloc((size_t)E + 2, sizeof(int)), v->pred = NULL;
  for (int g = 0; g < pl->ntbs; g++)
    for (int j = pl->tb_off[g]; j < pl->tb_off[g + 1]; j++)
      v->chain[pl->tb_prims[j]] = g, v->idx[pl->tb_prims[j]] = j - pl->tb_off[g];
  for (int j = 0; j < pl->nce; j++) v->chain[np + j] = pl->ntbs + j, v->idx[np + j] = 0;
  for (int i = 0; i < E; i++) {
    v->poff[i] = npred;
    if (i >= np) { /* a copy waits for its source's writer's counter */
      for (int q = 0; q < np && pl->ce[i - np].after >= 0; q++)
        if (pl->p[q].cepost == pl->ce[i - np].after) VEC_PUSH(v->pred, npred, cap, q);
      continue;
    }
    const Prim *q = &pl->p[i];
    if (v->idx[i] > 0) VEC_PUSH(v->pred, npred, cap, pl->tb_prims[pl->tb_off[v->chain[i]] + v->idx[i] - 1]);
    for (int w = q->wait_off; w < q->wait_off + q->nwaits; w++) VEC_PUSH(v->pred, npred, cap, pl->wait[w]);
    if (q->cin >= 0 && pl->task_send[q->tin] >= 0 && pl->task_send[q->tin] != i) /* what its send pushed or put */
      VEC_PUSH(v->pred, npred, cap, pl->task_send[q->tin]);
    for (int c = 0; c < pl->nce && q->ce; c++) /* the copy engine's, by its flag */
      if (pl->ce[c].task == q->tin) VEC_PUSH(v->pred, npred, cap, np + c);
  }
  v->poff[E] = npred;
}

static void events_free(Events *v) { free(v->chain), free(v->idx), free(v->poff), free(v->pred); }

/* Event a comes before b within two steps: b's chain, or one b waits for,
   or one that waits for. */
static int before_near(const Events *v, int a, int b) {
  if (v->chain[a] == v->chain[b]) return v->idx[a] < v->idx[b];
  for (int k = v->poff[b]; k < v->poff[b + 1]; k++) {
    int q = v->pred[k];
    if (v->chain[q] == v->chain[a] && v->idx[q] >= v->idx[a]) return 1;
    for (int j = v->poff[q]; j < v->poff[q + 1]; j++)
      if (v->chain[v->pred[j]] == v->chain[a] && v->idx[v->pred[j]] >= v->idx[a]) return 1;
  }
  return 0;
}

static rcStatus race_report(const Plan *pl, const Layout *L, const Access *a, const Access *b, Err *e) {
  int rank = (int)(b->at / (size_t)L->per), off = (int)(b->at % (size_t)L->per), buf = NBUF - 1;
  while (off < L->off[buf]) buf--;
  char at[300], other[300];
  plan_task_where(pl, b->task, at, sizeof at);
  plan_task_where(pl, a->task, other, sizeof other);
  return err_set(e, RC_EVERIFY, "%s: rank %d %s chunk %d: nothing orders this %s after the %s at %s (a race)", at, rank,
                 buf_name(buf), off - L->off[buf], b->write ? "write" : "read", a->write ? "write" : "read", other);
}

/* Access a must come before access b (indices of accesses), b's event ev. */
typedef struct {
  int a, b, ev;
} Need;

static int need_cmp(const void *p, const void *q) {
  const Need *x = p, *y = q;
  return x->ev != y->ev ? x->ev - y->ev : x->b - y->b;
}

/* The first need (by b's access) that nothing orders: vector clocks in
   topological order over the chains that needs name, each clock freed
   once its successors have theirs. -1 when all are met, -2 on a cycle. */
static int far_unmet(const Events *v, const Access *x, const Need *nd, int nn) {
  int E = v->n, K = 0, bad = -1, done = 0;
  int *col = xmalloc(((size_t)v->nchain + 1) * sizeof *col);
  for (int c = 0; c < v->nchain; c++) col[c] = -1;
  for (int k = 0; k < nn; k++)
    if (col[v->chain[x[nd[k].a].ev]] < 0) col[v->chain[x[nd[k].a].ev]] = K++;
  int npred = v->poff[E], *left = xcalloc((size_t)E + 1, sizeof *left), *indeg = xcalloc((size_t)E + 1, sizeof *indeg);
  int *soff = xcalloc((size_t)E + 2, sizeof *soff), *succ = xmalloc(((size_t)npred + 1) * sizeof *succ);
  int *noff = xcalloc((size_t)E + 2, sizeof *noff), *fill = xmalloc(((size_t)E + 1) * sizeof *fill);
  for (int k = 0; k < npred; k++) left[v->pred[k]]++, soff[v->pred[k] + 1]++;
  for (int k = 0; k < nn; k++) noff[nd[k].ev + 1]++;
  for (int i = 0; i < E; i++) indeg[i] = v->poff[i + 1] - v->poff[i], soff[i + 1] += soff[i], noff[i + 1] += noff[i];
  memcpy(fill, soff, (size_t)E * sizeof *fill);
  for (int i = 0; i < E; i++)
    for (int k = v->poff[i]; k < v->poff[i + 1]; k++) succ[fill[v->pred[k]]++] = i;
  int **clock = xcalloc((size_t)E + 1, sizeof *clock), *queue = xmalloc(((size_t)E + 1) * sizeof *queue), qn = 0;
  for (int i = 0; i < E; i++)
    if (!indeg[i]) queue[qn++] = i;
  for (; done < qn; done++) {
    int b = queue[done], *c = clock[b] = xcalloc((size_t)K + 1, sizeof *c);
    for (int k = v->poff[b]; k < v->poff[b + 1]; k++) {
      int a = v->pred[k];
      for (int j = 0; j < K; j++)
        if (clock[a][j] > c[j]) c[j] = clock[a][j];
      if (--left[a] == 0) free(clock[a]), clock[a] = NULL;
    }
    if (col[v->chain[b]] >= 0) c[col[v->chain[b]]] = v->idx[b] + 1;
    for (int k = noff[b]; k < noff[b + 1]; k++) {
      int a = x[nd[k].a].ev;
      if (c[col[v->chain[a]]] <= v->idx[a] && (bad < 0 || nd[k].b < nd[bad].b)) bad = k;
    }
    for (int k = soff[b]; k < soff[b + 1]; k++)
      if (--indeg[succ[k]] == 0) queue[qn++] = succ[k];
    if (!left[b]) free(clock[b]), clock[b] = NULL;
  }
  for (int i = 0; i < E; i++) free(clock[i]);
  free(clock), free(queue), free(col), free(left), free(indeg), free(soff), free(succ), free(noff), free(fill);
  return done < E ? -2 : bad;
}

/*
** Slices. The GPU cuts each primitive's chunk range into slices, and flags,
** FIFOs and a TB's turns order slice s of one primitive only with slice s
** of another (cuda.cuh): that orders the same elements only where both
** reach them through the same range. Where two primitives that must be
** ordered reach a location through different ranges, both move their
** chunks one at a time (Plan.split: a chunk's slices are the same in every
** range of one chunk); and so do the other ends of their transfers, and
** whatever then meets them through a range of several chunks. Copy-engine
** copies are not sliced: what orders them orders every slice.
*/
static int sliced_alike(const Plan *pl, const Access *a, const Access *b) {
  if (a->ev >= pl->np || b->ev >= pl->np) return 1; /* a copy: Plan.split has no entry for it */
  int wa = a->cnt == 1 || pl->split[a->ev], wb = b->cnt == 1 || pl->split[b->ev];
  return (wa && wb) || (!wa && !wb && a->lo == b->lo && a->cnt == b->cnt);
}

static void split_ranges(Plan *pl, const Access *x, const int *pair, int npair) {
  for (int again = 1; again;) {
    again = 0;
    for (int k = 0; k < npair; k++) {
      const Access *a = &x[pair[2 * k]], *b = &x[pair[2 * k + 1]];
      if (sliced_alike(pl, a, b)) continue;
      pl->split[a->ev] |= a->cnt > 1, pl->split[b->ev] |= b->cnt > 1, again = 1;
    }
    for (int i = 0; i < pl->np; i++) /* both ends of a transfer cut alike */
      for (int k = 0; k < 2 && pl->split[i]; k++) {
        int t = k ? pl->p[i].tout : pl->p[i].tin, ends[2] = {t >= 0 ? pl->task_send[t] : -1, t >= 0 ? pl->task_recv[t] : -1};
        for (int j = 0; j < 2; j++)
          if (ends[j] >= 0 && !pl->split[ends[j]] && pl->p[ends[j]].cnt > 1) pl->split[ends[j]] = 1, again = 1;
      }
  }
}

static rcStatus races(Plan *pl, Err *e) {
  const Program *p = pl->prog;
  int np = pl->np;
  /* A fused primitive forwards what it just received or copied: the task it
     forwards must read that value, after the arrival in the post-condition's order. */
  for (int i = 0; i < np; i++) {
    const Prim *q = &pl->p[i];
    int fused = q->kind == PR_RCS || q->kind == PR_RRCS || q->kind == PR_RRS || q->kind == PR_CS;
    if (fused && pl->sched.pos[q->tout] < pl->sched.pos[q->tin]) {
      char at[300];
      return err_set(e, RC_EVERIFY, "%s: its send is fused with a later arrival, whose value it would forward",
                     plan_task_where(pl, q->tout, at, sizeof at));
    }
  }
  Accesses x = {pl, {0, {0}}, NULL, NULL, 0};
  for (int b = 0; b < NBUF; b++) x.L.off[b] = x.L.per, x.L.per += prog_bufchunks(p, b);
  size_t nloc = (size_t)p->nranks * (size_t)x.L.per;
  x.off = xcalloc(nloc + 2, sizeof *x.off);
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < np; i++) prim_accesses(&x, i);
    for (int j = 0; j < pl->nce; j++) {
      const CeCopy *c = &pl->ce[j];
      touch(&x, np + j, c->task, PH_READ, 0, c->src, c->rbuf, c->ridx, c->cnt);
      touch(&x, np + j, c->task, PH_LAND, 1, c->dst, c->wbuf, c->widx, c->cnt);
    }
    if (pass) break;
    for (size_t l = 0; l < nloc; l++) x.off[l + 2] += x.off[l + 1];
    x.a = xmalloc(((size_t)x.n + 1) * sizeof *x.a);
  }
  for (size_t l = 0; l < nloc; l++)
    if (x.off[l + 1] - x.off[l] > 1) qsort(x.a + x.off[l], x.off[l + 1] - x.off[l], sizeof *x.a, access_cmp);
  free(x.off);
  Events v;
  events_build(pl, &v);

  /* What must be ordered: each access after the location's last write, a
     write after the reads since (earlier ones follow by transitivity). What
     one step orders is settled here, the rest by far_unmet. */
  Need *nd = NULL;
  int nn = 0, cap = 0, *pair = NULL, npair = 0, cappair = 0;
#define NEED(i, j)                                                                                   \
  do {                                                                                               \
    if (x.a[i].ev == x.a[j].ev) break;                                                               \
    if (x.a[i].cnt > 1 || x.a[j].cnt > 1) {                                                          \
      VEC_PUSH(pair, npair, cappair, i);                                                             \
      VEC_PUSH(pair, npair, cappair, j);                                                             \
    }                                                                                                \
    if (!before_near(&v, x.a[i].ev, x.a[j].ev)) VEC_PUSH(nd, nn, cap, ((Need){i, j, x.a[j].ev}));     \
  } while (0)
  for (int lo = 0, hi; lo < x.n; lo = hi) {
    int w = -1, rd = lo;
    for (hi = lo; hi < x.n && x.a[hi].at == x.a[lo].at; hi++) {
      if (w >= 0) NEED(w, hi);
      if (!x.a[hi].write) continue;
      for (; rd < hi; rd++)
        if (!x.a[rd].write) NEED(rd, hi);
      w = hi, rd = hi + 1;
    }
  }
#undef NEED
  free(pl->split);
  pl->split = xcalloc((size_t)np + 1, 1);
  split_ranges(pl, x.a, pair, npair / 2);
  free(pair);
  if (nn) qsort(nd, (size_t)nn, sizeof *nd, need_cmp);
  int bad = nn ? far_unmet(&v, x.a, nd, nn) : -1;
  rcStatus rc = RC_OK;
  if (bad >= 0) rc = race_report(pl, &x.L, &x.a[nd[bad].a], &x.a[nd[bad].b], e);
  if (bad == -2) rc = err_set(e, RC_EDEADLOCK, "%s: the plan's primitives wait for one another in a cycle", p->name);
  free(x.a), free(nd);
  events_free(&v);
  return rc;
}

/* A plan that pulls starts a pull once the sender's kernel says its buffers
   are ready, and ends a rank's call once its peers are done with them
   (pull.c): every rank must run a kernel. */
static rcStatus pulls_served(const Plan *pl, Err *e) {
  for (int r = 0; r < pl->prog->nranks && pl->npulls; r++)
    if (!pl->ntb[r])
      return err_set(e, RC_EDEADLOCK, "%s: rank %d runs no thread block in a plan that pulls: its peers would wait for "
                     "its kernel forever", pl->prog->name, r);
  return RC_OK;
}

rcStatus verify_run(Plan *pl, Err *e) {
  RC_CHECK(postcondition(pl, e));
  RC_CHECK(conn_order(pl, e));
  int marked;
  if (pl->buffered) RC_CHECK(deadlock_buffered(pl, BUFFERED_MICRO, NULL, e));
  else RC_CHECK(deadlock_check(pl, 3, pl->nofuse, &marked, e));
  RC_CHECK(pulls_served(pl, e));
  RC_CHECK(races(pl, e));
  pl->verified = 1;
  return RC_OK;
}
