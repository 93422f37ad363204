/*
** verify.c — prove a plan right before anything runs it, from what
** analyse.c found of it (Plan.facts). Proofs only: it changes nothing.
**
** 1. Post-condition: once the tasks ran symbolically in pipeline order,
**    every output chunk holds exactly the contributions the collective
**    defines, each once; and no task reads chunks it writes, shifted
**    (executors move a task's chunks side by side).
** 2. Connection order: both ends of a connection see its tasks in one order.
** 3. Deadlock: run the per-TB programs abstractly (deadlock.c) over a few
**    micro-batches with FIFOs too small to hold a tile (the tightest
**    buffering there is), so a plan that passes cannot block at any buffer
**    size; a buffered plan (Plan.buffered) with FIFOs of two tiles, which
**    executors then guarantee. In a plan that pulls, every rank runs a
**    kernel (pulls_served).
** 4. Races: what orders primitives on GPUs orders every two accesses of a
**    location, one a write, as step 1 ran them (see races).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* Which single contribution is h, if any: "rank R input chunk I". */
static int find_one(const Program *p, uint64_t h, char *out, size_t n) {
  int ni = prog_bufchunks(p, BUF_INPUT);
  for (int r = 0; r < p->nranks; r++)
    for (int i = 0; i < ni; i++)
      if (sym_contrib(r, i) == h) return snprintf(out, n, "rank %d's input chunk %d", r, i), 1;
  return 0;
}

/* Whether n locations from a and from b meet without being the same. */
static int shifted(size_t a, size_t b, int n) { return a != b && a < b + (size_t)n && b < a + (size_t)n; }

/* Executors move a task's chunks side by side: a task must not read a
   location it writes unless it is the same chunk (which it reads first). */
static rcStatus unshifted(const Plan *pl, const Facts *f, Err *e) {
  for (int k = 0; k < pl->dag.n; k++) {
    int t = pl->sched.order[k];
    const Task *tk = &pl->dag.t[t];
    size_t s0 = facts_loc(f, tk->src, tk->sbuf, tk->sidx), o0 = facts_loc(f, tk->dst, tk->obuf, tk->oidx),
           d0 = facts_loc(f, tk->dst, tk->dbuf, tk->didx);
    if (shifted(s0, d0, tk->cnt) || (tk->op == OP_REDUCE && shifted(o0, d0, tk->cnt))) {
      char at[300];
      plan_task_where(pl, t, at, sizeof at);
      return err_set(e, RC_EVERIFY, "%s: a transfer of %d chunks reads chunks it writes, shifted", at, tk->cnt);
    }
  }
  return RC_OK;
}

static rcStatus postcondition(const Plan *pl, const Facts *f, Err *e) {
  const Program *p = pl->prog;
  int R = p->nranks, C = p->chunks, ni = prog_bufchunks(p, BUF_INPUT);
  /* A reduced chunk holds every rank's input chunk of its index, once. */
  uint64_t *colsum = xcalloc((size_t)ni + 1, sizeof *colsum);
  if (p->coll == COLL_ALLREDUCE || p->coll == COLL_REDUCESCATTER)
    for (int i = 0; i < ni; i++)
      for (int b = 0; b < R; b++) colsum[i] += sym_contrib(b, i);
  int no = prog_bufchunks(p, BUF_OUTPUT);
  rcStatus rc = RC_OK;
  for (int r = 0; r < R && rc == RC_OK; r++)
    for (int j = 0; j < no && rc == RC_OK; j++) {
      SymVal want;
      switch (p->coll) {
      case COLL_ALLGATHER: want = (SymVal){sym_contrib(j / C, j % C), 1}; break;
      case COLL_ALLTOALL: want = (SymVal){sym_contrib(j / C, r * C + j % C), 1}; break;
      case COLL_REDUCESCATTER: want = (SymVal){colsum[r * C + j], R}; break;
      default: want = (SymVal){colsum[j], R}; break;
      }
      SymVal got = f->out[(size_t)r * no + j];
      int writer = f->writer[(size_t)r * no + j];
      if (got.cnt == want.cnt && got.h == want.h) continue;
      char at[300], what[200] = "", have[120];
      if (writer >= 0) plan_task_where(pl, writer, at, sizeof at);
      else prog_where(p, p->at, at, sizeof at);
      if (got.cnt < 0) {
        snprintf(what, sizeof what, "%s", writer >= 0 ? "data never initialised" : "nothing (never written)");
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
  free(colsum);
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
** Events are primitives and copy-engine copies, the accesses those
** analyse.c listed (Facts.a). Almost every pair is
** ordered within two steps (before_near); vector clocks settle the rest
** (far_unmet). The deadlock check runs first: the order has no cycle.
*/
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

static rcStatus race_report(const Plan *pl, const Layout *L, const LocAccess *a, const LocAccess *b, Err *e) {
  int rank = (int)(b->at / (size_t)L->per), off = (int)(b->at % (size_t)L->per), buf = NBUF - 1;
  while (off < L->off[buf]) buf--;
  char at[300], other[300];
  plan_task_where(pl, b->task, at, sizeof at);
  plan_task_where(pl, a->task, other, sizeof other);
  return err_set(e, RC_EVERIFY, "%s: rank %d %s chunk %d: nothing orders this %s after the %s at %s (a race)", at, rank,
                 buf_name(buf), off - L->off[buf], b->write ? "write" : "read", a->write ? "write" : "read", other);
}

/* LocAccess a must come before access b (indices of accesses), b's event ev. */
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
static int far_unmet(const Events *v, const LocAccess *x, const Need *nd, int nn) {
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

/* What one step does not order, for far_unmet. */
typedef struct {
  const Events *v;
  const LocAccess *a;
  Need *nd;
  int n, cap;
} Needs;

static void need(void *ctx, int i, int j) {
  Needs *x = ctx;
  if (!before_near(x->v, x->a[i].ev, x->a[j].ev)) VEC_PUSH(x->nd, x->n, x->cap, ((Need){i, j, x->a[j].ev}));
}

static rcStatus races(const Plan *pl, const Facts *f, Err *e) {
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
  Events v;
  events_build(pl, &v);
  /* What must be ordered (facts_orders): what one step orders is settled
     here, the rest by far_unmet. */
  Needs x = {&v, f->a, NULL, 0, 0};
  facts_orders(f, need, &x);
  if (x.n) qsort(x.nd, (size_t)x.n, sizeof *x.nd, need_cmp);
  int bad = x.n ? far_unmet(&v, f->a, x.nd, x.n) : -1;
  rcStatus rc = RC_OK;
  if (bad >= 0) rc = race_report(pl, &f->L, &f->a[x.nd[bad].a], &f->a[x.nd[bad].b], e);
  if (bad == -2)
    rc = err_set(e, RC_EDEADLOCK, "%s: the plan's primitives wait for one another in a cycle", pl->prog->name);
  free(x.nd);
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

static rcStatus proofs(const Plan *pl, const Facts *f, char *stuck, int *nstuck, Err *e) {
  RC_CHECK(unshifted(pl, f, e));
  RC_CHECK(postcondition(pl, f, e));
  RC_CHECK(conn_order(pl, e));
  if (pl->buffered) RC_CHECK(deadlock_buffered(pl, BUFFERED_MICRO, NULL, e));
  else RC_CHECK(deadlock_check(pl, 3, stuck, nstuck, e));
  RC_CHECK(pulls_served(pl, e));
  return races(pl, f, e);
}

rcStatus verify_run(const Plan *pl, char *stuck, int *nstuck, Err *e) {
  if (nstuck) *nstuck = 0;
  Facts *own = pl->facts ? NULL : facts_build(pl, NULL);
  rcStatus rc = proofs(pl, pl->facts ? pl->facts : own, stuck, nstuck, e);
  facts_free(own);
  return rc;
}
