/*
** analyse.c — what emission and the proofs need to know of a plan whose
** TBs are final, computed once.
**
** 1. Run the tasks symbolically in pipeline order. A location holds a
**    multiset of input contributions, kept as (sum of 64-bit hashes,
**    count); copies replace, reductions add. On the way, note the
**    reductions that complete a value (Plan.complete): where avg divides.
**    What every output chunk ends up holding is the post-condition's to
**    check (verify.c).
** 2. List what every primitive and copy-engine copy reads and writes, by
**    location, in the order step 1 ran the tasks (Facts.a): what GPUs must
**    order the same way is the race check's to prove (verify.c). Where two
**    of those accesses reach a location through different chunk ranges,
**    note the primitives that move chunk by chunk (Plan.split).
*/
#include <stdlib.h>

#include "core.h"

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t sym_contrib(int rank, int idx) { return mix(((uint64_t)rank << 32) | (uint32_t)idx); }

/* Location of (rank, buf, idx) in buffers already placed. */
static size_t placed(const Layout *l, int rank, int buf, int idx) { return (size_t)rank * l->per + l->off[buf] + idx; }

/* Physical location of (rank, buf, idx) under the plan's placement. */
static size_t loc(const Layout *l, const Program *p, int inplace, int rank, int buf, int idx) {
  if (inplace) {
    if (p->coll == COLL_ALLGATHER && buf == BUF_INPUT) buf = BUF_OUTPUT, idx += rank * p->chunks;
    else if (p->coll == COLL_REDUCESCATTER && buf == BUF_OUTPUT) buf = BUF_INPUT, idx += rank * p->chunks;
    else if ((p->coll == COLL_ALLREDUCE || p->coll == COLL_ALLTOALL) && buf == BUF_INPUT) buf = BUF_OUTPUT;
  }
  return placed(l, rank, buf, idx);
}

size_t facts_loc(const Facts *f, int rank, int buf, int idx) { return placed(&f->L, rank, buf, idx); }

/* Step 1: the outputs' values and last writers, and Plan.complete when asked. */
static void symbolic_run(const Plan *pl, Facts *f, int *complete) {
  const Program *p = pl->prog;
  const Dag *d = &pl->dag;
  int R = p->nranks, inplace = pl->opt.inplace;
  size_t nloc = (size_t)R * f->L.per;
  SymVal *v = xmalloc((nloc + 1) * sizeof *v);
  int *writer = xmalloc((nloc + 1) * sizeof *writer);
  for (size_t i = 0; i < nloc; i++) v[i] = (SymVal){0, -1}, writer[i] = -1;
  int ni = prog_bufchunks(p, BUF_INPUT);
  for (int r = 0; r < R; r++)
    for (int i = 0; i < ni; i++) v[loc(&f->L, p, inplace, r, BUF_INPUT, i)] = (SymVal){sym_contrib(r, i), 1};
  for (int k = 0; k < d->n; k++) {
    int t = pl->sched.order[k];
    const Task *tk = &d->t[t];
    for (int c = 0; c < tk->cnt; c++) {
      /* Task buffers are already placed: index without aliasing. */
      SymVal s = v[loc(&f->L, p, 0, tk->src, tk->sbuf, tk->sidx + c)];
      SymVal o = v[loc(&f->L, p, 0, tk->dst, tk->obuf, tk->oidx + c)];
      size_t di = loc(&f->L, p, 0, tk->dst, tk->dbuf, tk->didx + c);
      if (tk->op == OP_COPY) v[di] = s;
      else if (s.cnt < 0 || o.cnt < 0) v[di] = (SymVal){0, -1};
      else v[di] = (SymVal){o.h + s.h, o.cnt + s.cnt};
      if (complete && tk->op == OP_REDUCE && v[di].cnt == R) complete[t]++;
      writer[di] = t;
    }
  }
  int no = prog_bufchunks(p, BUF_OUTPUT);
  f->out = xmalloc(((size_t)R * no + 1) * sizeof *f->out);
  f->writer = xmalloc(((size_t)R * no + 1) * sizeof *f->writer);
  for (int r = 0; r < R; r++)
    for (int j = 0; j < no; j++) {
      size_t li = loc(&f->L, p, inplace, r, BUF_OUTPUT, j);
      f->out[(size_t)r * no + j] = v[li], f->writer[(size_t)r * no + j] = writer[li];
    }
  free(v), free(writer);
}

/* Phases of a task: its source read, a landing write (a put, a copy
   engine's), what its receiver does. */
enum { PH_READ, PH_LAND, PH_RECV };

/* Accesses by location, then in the post-condition's order: a counting
   sort (millions of accesses at a thousand ranks), whose first pass only
   counts (a == NULL). */
typedef struct {
  const Plan *pl;
  const Layout *L;
  size_t *off; /* per location: where its accesses go */
  LocAccess *a;
  int n;
} Accesses;

static void touch(Accesses *x, int ev, int task, int phase, int write, int rank, int buf, int idx, int cnt) {
  for (int c = 0; c < cnt; c++) {
    size_t at = loc(x->L, x->pl->prog, 0, rank, buf, idx + c);
    if (!x->a) x->off[at + 2]++, x->n++;
    else
      x->a[x->off[at + 1]++] =
          (LocAccess){at, x->pl->sched.pos[task], ev, task, (uint8_t)phase, (uint8_t)write, idx, cnt};
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
  const LocAccess *x = a, *y = b;
  if (x->at != y->at) return x->at < y->at ? -1 : 1;
  if (x->pos != y->pos) return x->pos - y->pos;
  if (x->phase != y->phase) return x->phase - y->phase;
  if (x->write != y->write) return x->write - y->write;
  return x->ev - y->ev;
}

/* Step 2: every access, by location, then in the post-condition's order. */
static void accesses(const Plan *pl, Facts *f) {
  int np = pl->np;
  size_t nloc = (size_t)pl->prog->nranks * (size_t)f->L.per;
  Accesses x = {pl, &f->L, xcalloc(nloc + 2, sizeof(size_t)), NULL, 0};
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
  f->a = x.a, f->na = x.n;
}

Facts *facts_build(const Plan *pl, int *complete) {
  Facts *f = xcalloc(1, sizeof *f);
  for (int b = 0; b < NBUF; b++) f->L.off[b] = f->L.per, f->L.per += prog_bufchunks(pl->prog, b);
  symbolic_run(pl, f, complete);
  accesses(pl, f);
  return f;
}

void facts_orders(const Facts *f, void (*fn)(void *ctx, int a, int b), void *ctx) {
  const LocAccess *a = f->a;
  for (int lo = 0, hi; lo < f->na; lo = hi) {
    int w = -1, rd = lo;
    for (hi = lo; hi < f->na && a[hi].at == a[lo].at; hi++) {
      if (w >= 0 && a[w].ev != a[hi].ev) fn(ctx, w, hi);
      if (!a[hi].write) continue;
      for (; rd < hi; rd++)
        if (!a[rd].write && a[rd].ev != a[hi].ev) fn(ctx, rd, hi);
      w = hi, rd = hi + 1;
    }
  }
}

void facts_free(Facts *f) {
  if (f) free(f->out), free(f->writer), free(f->a);
  free(f);
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
static int sliced_alike(const Plan *pl, const LocAccess *a, const LocAccess *b) {
  if (a->ev >= pl->np || b->ev >= pl->np) return 1; /* a copy: Plan.split has no entry for it */
  int wa = a->cnt == 1 || pl->split[a->ev], wb = b->cnt == 1 || pl->split[b->ev];
  return (wa && wb) || (!wa && !wb && a->lo == b->lo && a->cnt == b->cnt);
}

static void split_ranges(Plan *pl, const LocAccess *x, const int *pair, int npair) {
  for (int again = 1; again;) {
    again = 0;
    for (int k = 0; k < npair; k++) {
      const LocAccess *a = &x[pair[2 * k]], *b = &x[pair[2 * k + 1]];
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

/* Pairs of accesses that must stay in order where one reaches its location
   through a range of several chunks. */
typedef struct {
  const LocAccess *a;
  int *pair, n, cap;
} Ranged;

static void ranged(void *ctx, int i, int j) {
  Ranged *r = ctx;
  if (r->a[i].cnt == 1 && r->a[j].cnt == 1) return;
  VEC_PUSH(r->pair, r->n, r->cap, i);
  VEC_PUSH(r->pair, r->n, r->cap, j);
}

void analyse_run(Plan *pl) {
  free(pl->complete);
  pl->complete = xcalloc((size_t)pl->dag.n + 1, sizeof *pl->complete);
  facts_free(pl->facts);
  pl->facts = facts_build(pl, pl->complete);
  Ranged r = {pl->facts->a, NULL, 0, 0};
  facts_orders(pl->facts, ranged, &r);
  free(pl->split);
  pl->split = xcalloc((size_t)pl->np + 1, 1);
  split_ranges(pl, pl->facts->a, r.pair, r.n / 2);
  free(r.pair);
}
