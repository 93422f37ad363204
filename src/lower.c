/*
** lower.c — tasks to primitives. Each task becomes a send on its source rank
** and a recv (copy) or recvReduceCopy (reduce) on its destination; a local
** task is one copy or reduce. Where a chunk that arrives (by a receive or a
** local copy) is forwarded in the same sub-pipeline, arrival and send fuse
** into recvCopySend, recvReduceCopySend or copySend on one TB, so the chunk
** leaves as it arrives. FUSE_ALWAYS fuses wherever that holds; FUSE_AUTO,
** for a task-level plan, only where the TB it ties together loses nothing
** to running its work in turn (see serialises).
**
** Out: Plan.p (primitives, pipeline order), Plan.conn (one connection per
** ordered rank pair that carries data), per-rank primitive lists, and the
** waits: a primitive waits for another primitive of its rank to finish the
** same micro-batch when a DAG edge says so (a data hazard on that rank).
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* A small open-addressing map from 64-bit keys to ints (-1 when absent). */
typedef struct {
  int64_t *key;
  int *val;
  size_t cap;
} Map;

static Map map_new(int n) {
  Map m = {NULL, NULL, 16};
  while (m.cap < 4 * (size_t)n) m.cap *= 2; /* lookups of absent keys insert too */
  m.key = xmalloc(m.cap * sizeof *m.key);
  m.val = xmalloc(m.cap * sizeof *m.val);
  memset(m.key, 0xff, m.cap * sizeof *m.key);
  return m;
}

/* The value slot of a key, created (-1) when new. Keys are never negative. */
static int *map_slot(Map *m, int64_t k) {
  size_t i = (size_t)((uint64_t)k * 0x9e3779b97f4a7c15ull >> 7) & (m->cap - 1);
  while (m->key[i] != k && m->key[i] != -1) i = (i + 1) & (m->cap - 1);
  if (m->key[i] == -1) m->key[i] = k, m->val[i] = -1;
  return &m->val[i];
}

static void map_free(Map *m) { free(m->key), free(m->val); }

static int64_t hint_key(int rank, int tb, int step) {
  return ((int64_t)rank << 40) ^ ((int64_t)(tb & 0xfffff) << 20) ^ (step & 0xfffff);
}

static int prim_new(Plan *pl, int *cap, Prim p) {
  VEC_PUSH(pl->p, pl->np, *cap, p);
  return pl->np - 1;
}

/* The primitive through which task t touches memory of rank r. */
static int prim_at(const Plan *pl, int t, int r) {
  return pl->dag.t[t].src == r ? pl->task_send[t] : pl->task_recv[t];
}

/* Is u a successor of t in the DAG? */
static int follows(const Dag *d, int t, int u) {
  for (int j = d->succ_off[t]; j < d->succ_off[t + 1]; j++)
    if (d->succ[j] == u) return 1;
  return 0;
}

/* Can the arrival of t (a receive, or a local copy) fuse with the send of u,
   which forwards what t wrote? u must come after t: a send that reads the
   buffer before t overwrites it (placed at t's TB and step by hand) would
   forward t's value instead. `sameslot`: only within one sub-pipeline. */
static int fusable(const Plan *pl, int t, int u, const char *fused, int sameslot) {
  const Dag *d = &pl->dag;
  const Task *a = &d->t[t], *b = &d->t[u];
  if (b->src != a->dst || b->dst == b->src || b->sbuf != a->dbuf || b->sidx != a->didx || b->cnt != a->cnt ||
      !follows(d, t, u))
    return 0;
  if (a->src == a->dst && a->op != OP_COPY) return 0;
  if ((sameslot && pl->sched.slot[u] != pl->sched.slot[t]) || fused[pl->task_send[u]] || fused[pl->task_recv[t]])
    return 0;
  /* Every other predecessor of u on this rank must come before t's receive. */
  for (int k = d->pred_off[u]; k < d->pred_off[u + 1]; k++) {
    int w = d->pred[k];
    if (w != t && d->prank[k] == a->dst && pl->sched.pos[w] >= pl->sched.pos[t]) return 0;
  }
  return 1;
}

/*
** A chain of fused primitives moves one tile across ranks at once; if it came
** back to a rank it already passes through, that rank would have to hold the
** tile in two places at the same time. Does extending t's chain to rank r
** revisit a rank?
*/
static int revisits(const Dag *d, const int *up, int t, int r) {
  if (d->t[t].dst == r) return 1;
  for (int x = t; x >= 0; x = up[x])
    if (d->t[x].src == r) return 1;
  return 0;
}

static int overlaps(int a, int b, int n) { return a < b + n && b < a + n; }

/*
** After u forwards what t wrote, is that value dead? Nothing but u reads it
** (any later reader depends on t, so it is a successor), and a successor
** overwrites all of it, or it lives in scratch, whose final value nobody
** needs. Then t's receive need not keep it: recvReduceSend.
*/
static int dead_after(const Dag *d, int t, int u) {
  const Task *a = &d->t[t];
  int overwritten = a->dbuf == BUF_SCRATCH;
  for (int j = d->succ_off[t]; j < d->succ_off[t + 1]; j++) {
    const Task *s = &d->t[d->succ[j]];
    if (d->succ[j] == u) continue;
    if (s->src == a->dst && s->sbuf == a->dbuf && overlaps(s->sidx, a->didx, a->cnt)) return 0;
    if (s->op == OP_REDUCE && s->dst == a->dst && s->obuf == a->dbuf && overlaps(s->oidx, a->didx, a->cnt)) return 0;
    if (s->dst == a->dst && s->dbuf == a->dbuf && s->didx <= a->didx && s->didx + s->cnt >= a->didx + a->cnt)
      overwritten = 1;
  }
  return overwritten;
}

/*
** Connection ends that must share a TB (tballoc.c's units), followed as
** lowering fuses: ends 2*conn (sends) and 2*conn+1 (receives), each with the
** sub-pipelines it has work in, ascending. Unfused, an end has at most one
** task per sub-pipeline, because its tasks share links.
*/
typedef struct {
  int *up;     /* union-find over ends */
  int **slots; /* per root: the sub-pipelines it has work in, ascending */
  int *n, *cap;
} Units;

static void units_init(Units *u, const Plan *pl) {
  int nu = 2 * pl->nconn;
  u->up = xmalloc(((size_t)nu + 1) * sizeof *u->up);
  u->slots = xcalloc((size_t)nu + 1, sizeof *u->slots);
  u->n = xcalloc((size_t)nu + 1, sizeof *u->n);
  u->cap = xcalloc((size_t)nu + 1, sizeof *u->cap);
  for (int i = 0; i < nu; i++) u->up[i] = i;
  for (int i = 0; i < pl->np; i++) { /* pipeline order; nothing is fused yet, so one end each */
    const Prim *p = &pl->p[i];
    int e = p->cin >= 0 ? 2 * p->cin + 1 : 2 * p->cout;
    if (p->cin >= 0 || p->cout >= 0) VEC_PUSH(u->slots[e], u->n[e], u->cap[e], p->slot);
  }
}

static int has_slot(const int *v, int n, int slot) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (v[mid] < slot) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && v[lo] == slot;
}

/* Are ends a and b both active in a sub-pipeline other than `slot`? */
static int units_clash(Units *u, int a, int b, int slot) {
  int ra = uf_find(u->up, a), rb = uf_find(u->up, b);
  if (ra == rb) return 0;
  int small = u->n[ra] < u->n[rb] ? ra : rb, large = small == ra ? rb : ra;
  for (int k = 0; k < u->n[small]; k++)
    if (u->slots[small][k] != slot && has_slot(u->slots[large], u->n[large], u->slots[small][k])) return 1;
  return 0;
}

/* Tie ends a and b together, merging their sub-pipelines. */
static void units_join(Units *u, int a, int b) {
  int ra = uf_find(u->up, a), rb = uf_find(u->up, b);
  if (ra == rb) return;
  const int *x = u->slots[ra], *y = u->slots[rb];
  int nx = u->n[ra], ny = u->n[rb], i = 0, j = 0, n = 0;
  int *m = xmalloc(((size_t)nx + ny + 1) * sizeof *m);
  while (i < nx || j < ny) {
    int v = j >= ny || (i < nx && x[i] <= y[j]) ? x[i] : y[j];
    if (i < nx && x[i] == v) i++;
    if (j < ny && y[j] == v) j++;
    m[n++] = v;
  }
  free(u->slots[ra]), free(u->slots[rb]);
  u->slots[ra] = NULL, u->n[ra] = u->cap[ra] = 0;
  u->slots[rb] = m, u->n[rb] = u->cap[rb] = n;
  u->up[ra] = rb;
}

static void units_free(Units *u, int nconn) {
  for (int i = 0; i < 2 * nconn; i++) free(u->slots[i]);
  free(u->up), free(u->slots), free(u->n), free(u->cap);
}

/* GB/s one TB copies task t at: its slowest link, or the TB's rate. */
static double pace(const Plan *pl, int t) {
  int lk[TOPO_MAXHOP], n = topo_route(pl->topo, pl->dag.t[t].src, pl->dag.t[t].dst, lk);
  double r = pl->topo->tb_gbps > 0 ? pl->topo->tb_gbps : 1e300;
  for (int i = 0; i < n; i++) {
    Link l;
    topo_link(pl->topo, lk[i], &l);
    if (l.gbps < r) r = l.gbps;
  }
  return r;
}

/*
** FUSE_AUTO for task-level plans. Fusion saves a pass over memory, but a
** fused primitive ties its two connection ends to one TB, and a TB runs its
** primitives one after another, each over every micro-batch. Fusing the
** arrival of t with the send of u is not worth it when that makes work that
** could run side by side run in turn:
**  - both ends are active in another sub-pipeline: their TB would run those
**    primitives one after the other, where the schedule put them together;
**  - the sending end has work in an earlier sub-pipeline: the arrival would
**    wait behind it, and its sender, ready at once, would stall on a full
**    FIFO;
**  - u leaves over a slower link than t arrives on (or is copied at), and
**    another send of what t wrote has later work on its connection: that
**    send would move at the slow link's pace, and the work behind it wait.
** Measured on the shipped algorithms (docs/journal/simulator.md, "Fusion"), a plan
** fused this way is never much slower than the faster of fusing
** everything and fusing nothing.
*/
static int serialises(const Plan *pl, Units *un, int t, int u) {
  const Dag *d = &pl->dag;
  const Task *a = &d->t[t];
  int slot = pl->sched.slot[t], cin = pl->p[pl->task_recv[t]].cin, b = 2 * pl->p[pl->task_send[u]].cout;
  int rb = uf_find(un->up, b);
  if (un->slots[rb][0] < slot || (cin >= 0 && units_clash(un, 2 * cin + 1, b, slot))) return 1;
  if (pace(pl, u) >= pace(pl, t)) return 0;
  for (int j = d->succ_off[t]; j < d->succ_off[t + 1]; j++) {
    int w = d->succ[j];
    const Task *r = &d->t[w];
    if (w == u || r->src != a->dst || r->dst == r->src || r->sbuf != a->dbuf || !overlaps(r->sidx, a->didx, a->cnt))
      continue;
    int rw = uf_find(un->up, 2 * pl->p[pl->task_send[w]].cout);
    if (un->slots[rw][un->n[rw] - 1] > pl->sched.slot[w]) return 1;
  }
  return 0;
}

typedef struct {
  int prim, on;
} Wait;

static int wait_cmp(const void *x, const void *y) {
  const Wait *a = x, *b = y;
  return a->prim != b->prim ? a->prim - b->prim : a->on - b->on;
}

void plan_rank_lists(Plan *pl) {
  int R = pl->prog->nranks;
  pl->rank_off = xrealloc(pl->rank_off, ((size_t)R + 1) * sizeof(int));
  pl->rank_prims = xrealloc(pl->rank_prims, ((size_t)pl->np + 1) * sizeof(int));
  memset(pl->rank_off, 0, ((size_t)R + 1) * sizeof(int));
  for (int i = 0; i < pl->np; i++) pl->rank_off[pl->p[i].rank + 1]++;
  for (int r = 0; r < R; r++) pl->rank_off[r + 1] += pl->rank_off[r];
  int *fill = xmalloc(((size_t)R + 1) * sizeof *fill);
  memcpy(fill, pl->rank_off, ((size_t)R + 1) * sizeof *fill);
  for (int i = 0; i < pl->np; i++) pl->rank_prims[fill[pl->p[i].rank]++] = i;
  free(fill);
}

rcStatus lower_run(Plan *pl, Err *e) {
  (void)e;
  const Dag *d = &pl->dag;
  const Sched *s = &pl->sched;
  int n = d->n, R = pl->prog->nranks, cap = 0, capc = 0, manual = pl->opt.tb == TB_MANUAL && pl->prog->hint;
  const TbHint *hint = pl->prog->hint;
  Map conns = map_new(n);
  pl->task_send = xmalloc(((size_t)n + 1) * sizeof(int));
  pl->task_recv = xmalloc(((size_t)n + 1) * sizeof(int));

  for (int k = 0; k < n; k++) {
    int t = s->order[k];
    const Task *tk = &d->t[t];
    Prim base = {.tin = t, .tout = t, .cin = -1, .cout = -1, .cnt = tk->cnt, .slot = s->slot[t],
                 .pos = s->pos[t], .flag = -1, .cepost = -1, .rbuf = tk->sbuf, .ridx = tk->sidx, .ubuf = tk->obuf,
                 .uidx = tk->oidx, .wbuf = tk->dbuf, .widx = tk->didx, .rank = tk->src};
    if (tk->src == tk->dst) {
      base.kind = tk->op == OP_REDUCE ? PR_REDUCE : PR_COPY;
      pl->task_send[t] = pl->task_recv[t] = prim_new(pl, &cap, base);
      continue;
    }
    int chan = manual && hint[tk->xf].chan > 0 ? hint[tk->xf].chan : 0;
    int *cid = map_slot(&conns, ((int64_t)tk->src * R + tk->dst) * 1024 + chan);
    if (*cid < 0) {
      VEC_PUSH(pl->conn, pl->nconn, capc, ((Conn){tk->src, tk->dst, chan}));
      *cid = pl->nconn - 1;
    }
    Prim snd = base, rcv = base;
    snd.kind = PR_SEND, snd.tin = -1, snd.cout = *cid;
    rcv.kind = tk->op == OP_REDUCE ? PR_RRC : PR_RECV, rcv.tout = -1, rcv.cin = *cid, rcv.rank = tk->dst;
    rcv.ubuf = tk->obuf, rcv.uidx = tk->oidx;
    pl->task_send[t] = prim_new(pl, &cap, snd);
    pl->task_recv[t] = prim_new(pl, &cap, rcv);
  }
  map_free(&conns);

  /* Fusion: an arrival and the send that forwards it become one primitive.
     Placed by hand, they fuse when the hints put them at one TB and step;
     otherwise when they share a sub-pipeline and the chain stays simple,
     and, for FUSE_AUTO at task level, when it serialises nothing. */
  char *gone = xcalloc((size_t)pl->np + 1, 1), *fused = xcalloc((size_t)pl->np + 1, 1);
  int *up = xmalloc(((size_t)n + 1) * sizeof *up); /* the arrival fused into a task's send */
  for (int t = 0; t < n; t++) up[t] = -1;
  Map sends = map_new(manual ? n : 1);
  for (int t = 0; manual && t < n; t++) /* (rank, tb, step) of every send */
    if (d->t[t].src != d->t[t].dst) *map_slot(&sends, hint_key(d->t[t].src, hint[d->t[t].xf].stb, hint[d->t[t].xf].sstep)) = t;
  Units un = {0};
  int guard = pl->opt.fuse == FUSE_AUTO && pl->opt.order == EX_TASK && !manual;
  if (guard) units_init(&un, pl);
  for (int k = 0; k < n && pl->opt.fuse; k++) {
    int t = s->order[k];
    int best = -1;
    if (pl->nofuse && pl->nofuse[t]) continue;
    if (manual) {
      const TbHint *h = &hint[d->t[t].xf];
      int u = *map_slot(&sends, hint_key(d->t[t].dst, d->t[t].src == d->t[t].dst ? h->stb : h->rtb,
                                          d->t[t].src == d->t[t].dst ? h->sstep : h->rstep));
      if (u >= 0 && u != t && fusable(pl, t, u, fused, 0)) best = u;
    } else {
      for (int j = d->succ_off[t]; j < d->succ_off[t + 1]; j++) {
        int u = d->succ[j];
        if (fusable(pl, t, u, fused, 1) && !revisits(d, up, t, d->t[u].dst) && (best < 0 || s->pos[u] < s->pos[best]) &&
            !(guard && serialises(pl, &un, t, u)))
          best = u;
      }
    }
    if (best < 0) continue;
    if (guard && pl->p[pl->task_recv[t]].cin >= 0)
      units_join(&un, 2 * pl->p[pl->task_recv[t]].cin + 1, 2 * pl->p[pl->task_send[best]].cout);
    up[best] = t;
    Prim *r = &pl->p[pl->task_recv[t]];
    r->kind = r->kind == PR_RRC ? (dead_after(d, t, best) ? PR_RRS : PR_RRCS) : r->kind == PR_COPY ? PR_CS : PR_RCS;
    r->tout = best;
    r->cout = pl->p[pl->task_send[best]].cout;
    gone[pl->task_send[best]] = 1;
    fused[pl->task_recv[t]] = fused[pl->task_send[best]] = 1;
    pl->task_send[best] = pl->task_recv[t];
  }
  map_free(&sends);
  if (guard) units_free(&un, pl->nconn);

  /* Compact, keeping pipeline order, and renumber the task maps. */
  int *renum = xmalloc(((size_t)pl->np + 1) * sizeof *renum), m = 0;
  for (int i = 0; i < pl->np; i++) {
    renum[i] = gone[i] ? -1 : m;
    if (!gone[i]) pl->p[m++] = pl->p[i];
  }
  for (int t = 0; t < n; t++) pl->task_send[t] = renum[pl->task_send[t]], pl->task_recv[t] = renum[pl->task_recv[t]];
  pl->np = m;
  free(renum), free(gone), free(fused), free(up);

  plan_rank_lists(pl); /* pl->p is already in pipeline order */

  /* Waits from DAG edges, on the rank whose memory the hazard is about. */
  Wait *w = NULL;
  int nw = 0, capw = 0;
  for (int b = 0; b < n; b++)
    for (int k = d->pred_off[b]; k < d->pred_off[b + 1]; k++) {
      int a = d->pred[k], r = d->prank[k];
      int pa = prim_at(pl, a, r), pb = prim_at(pl, b, r);
      if (pa != pb) VEC_PUSH(w, nw, capw, ((Wait){pb, pa}));
    }
  if (nw) qsort(w, (size_t)nw, sizeof *w, wait_cmp);
  pl->wait = xmalloc(((size_t)nw + 1) * sizeof(int));
  int *cnt = xcalloc((size_t)pl->np + 1, sizeof *cnt);
  pl->nwait = 0;
  for (int i = 0; i < nw; i++) {
    if (i > 0 && w[i].prim == w[i - 1].prim && w[i].on == w[i - 1].on) continue;
    pl->wait[pl->nwait++] = w[i].on;
    cnt[w[i].prim]++;
  }
  for (int i = 0, off = 0; i < pl->np; i++) pl->p[i].wait_off = off, pl->p[i].nwaits = cnt[i], off += cnt[i];
  free(cnt), free(w);

  /* Direct: a send or copy-send to a receive, or a reduction with a
     separate operand, whose destination nothing on the receiver touched
     before may write straight into it; the receive then only waits for it
     (and reduces it where it landed). Executors that reach the peer's
     buffers do (emit.c). Forwarding receives keep their FIFOs. */
  for (int t = 0; t < n; t++) {
    int ps = pl->task_send[t], pr = pl->task_recv[t], first = 1;
    if (ps == pr) continue;
    const Prim *from = &pl->p[ps], *to = &pl->p[pr];
    if (from->kind != PR_SEND && from->kind != PR_CS) continue;
    if (to->kind != PR_RECV && !(to->kind == PR_RRC && (to->ubuf != to->wbuf || to->uidx >= to->widx + to->cnt ||
                                                        to->widx >= to->uidx + to->cnt)))
      continue;
    for (int k = d->pred_off[t]; k < d->pred_off[t + 1] && first; k++) first = d->prank[k] != d->t[t].dst;
    pl->p[ps].direct = pl->p[pr].direct = (uint8_t)first;
  }
  return RC_OK;
}
