/*
** lower.c — tasks to primitives. Each task becomes a send on its source rank
** and a recv (copy) or recvReduceCopy (reduce) on its destination; a local
** task is one copy or reduce. Where a chunk that arrives (by a receive or a
** local copy) is forwarded in the same sub-pipeline, arrival and send fuse
** into recvCopySend, recvReduceCopySend or copySend on one TB, so the chunk
** leaves as it arrives.
**
** Out: Plan.p (primitives, pipeline order), Plan.conn (one connection per
** ordered rank pair that carries data), per-rank primitive lists, and the
** waits: a primitive waits for another primitive of its rank to finish the
** same micro-batch when a DAG edge says so (a data hazard on that rank).
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"

static int prim_new(Plan *pl, int *cap, Prim p) {
  VEC_PUSH(pl->p, pl->np, *cap, p);
  return pl->np - 1;
}

/* The primitive through which task t touches memory of rank r. */
static int prim_at(const Plan *pl, int t, int r) {
  return pl->dag.t[t].src == r ? pl->task_send[t] : pl->task_recv[t];
}

/* Can the arrival of t (a receive, or a local copy) fuse with the send of u,
   which forwards what t wrote? */
static int fusable(const Plan *pl, int t, int u, const char *fused) {
  const Dag *d = &pl->dag;
  const Task *a = &d->t[t], *b = &d->t[u];
  if (b->src != a->dst || b->dst == b->src || b->sbuf != a->dbuf || b->sidx != a->didx || b->cnt != a->cnt)
    return 0;
  if (a->src == a->dst && a->op != OP_COPY) return 0;
  if (pl->sched.slot[u] != pl->sched.slot[t] || fused[pl->task_send[u]]) return 0;
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

typedef struct {
  int prim, on;
} Wait;

static int wait_cmp(const void *x, const void *y) {
  const Wait *a = x, *b = y;
  return a->prim != b->prim ? a->prim - b->prim : a->on - b->on;
}

rcStatus lower_run(Plan *pl, Err *e) {
  (void)e;
  const Dag *d = &pl->dag;
  const Sched *s = &pl->sched;
  int n = d->n, R = pl->prog->nranks, cap = 0, capc = 0;
  int *connid = xmalloc((size_t)R * (size_t)R * sizeof *connid);
  memset(connid, 0xff, (size_t)R * (size_t)R * sizeof *connid);
  pl->task_send = xmalloc(((size_t)n + 1) * sizeof(int));
  pl->task_recv = xmalloc(((size_t)n + 1) * sizeof(int));

  for (int k = 0; k < n; k++) {
    int t = s->order[k];
    const Task *tk = &d->t[t];
    Prim base = {.tin = t, .tout = t, .cin = -1, .cout = -1, .cnt = tk->cnt, .slot = s->slot[t],
                 .pos = s->pos[t], .flag = -1, .rbuf = tk->sbuf, .ridx = tk->sidx, .ubuf = tk->obuf,
                 .uidx = tk->oidx, .wbuf = tk->dbuf, .widx = tk->didx, .rank = tk->src};
    if (tk->src == tk->dst) {
      base.kind = tk->op == OP_REDUCE ? PR_REDUCE : PR_COPY;
      pl->task_send[t] = pl->task_recv[t] = prim_new(pl, &cap, base);
      continue;
    }
    int *cid = &connid[(size_t)tk->src * R + tk->dst];
    if (*cid < 0) {
      VEC_PUSH(pl->conn, pl->nconn, capc, ((Conn){tk->src, tk->dst}));
      *cid = pl->nconn - 1;
    }
    Prim snd = base, rcv = base;
    snd.kind = PR_SEND, snd.tin = -1, snd.cout = *cid;
    rcv.kind = tk->op == OP_REDUCE ? PR_RRC : PR_RECV, rcv.tout = -1, rcv.cin = *cid, rcv.rank = tk->dst;
    rcv.ubuf = tk->obuf, rcv.uidx = tk->oidx;
    pl->task_send[t] = prim_new(pl, &cap, snd);
    pl->task_recv[t] = prim_new(pl, &cap, rcv);
  }
  free(connid);

  /* Fusion: a receive followed in the same sub-pipeline by the send of the
     same chunk from the same place becomes one forwarding primitive. */
  char *gone = xcalloc((size_t)pl->np + 1, 1), *fused = xcalloc((size_t)pl->np + 1, 1);
  int *up = xmalloc(((size_t)n + 1) * sizeof *up); /* the arrival fused into a task's send */
  for (int t = 0; t < n; t++) up[t] = -1;
  if (pl->opt.fuse)
    for (int k = 0; k < n; k++) {
      int t = s->order[k];
      int best = -1;
      if (pl->nofuse && pl->nofuse[t]) continue;
      for (int j = d->succ_off[t]; j < d->succ_off[t + 1]; j++) {
        int u = d->succ[j];
        if (fusable(pl, t, u, fused) && !revisits(d, up, t, d->t[u].dst) && (best < 0 || s->pos[u] < s->pos[best]))
          best = u;
      }
      if (best < 0) continue;
      up[best] = t;
      Prim *r = &pl->p[pl->task_recv[t]];
      r->kind = r->kind == PR_RRC ? PR_RRCS : r->kind == PR_COPY ? PR_CS : PR_RCS;
      r->tout = best;
      r->cout = pl->p[pl->task_send[best]].cout;
      gone[pl->task_send[best]] = 1;
      fused[pl->task_recv[t]] = fused[pl->task_send[best]] = 1;
      pl->task_send[best] = pl->task_recv[t];
    }

  /* Compact, keeping pipeline order, and renumber the task maps. */
  int *renum = xmalloc(((size_t)pl->np + 1) * sizeof *renum), m = 0;
  for (int i = 0; i < pl->np; i++) {
    renum[i] = gone[i] ? -1 : m;
    if (!gone[i]) pl->p[m++] = pl->p[i];
  }
  for (int t = 0; t < n; t++) pl->task_send[t] = renum[pl->task_send[t]], pl->task_recv[t] = renum[pl->task_recv[t]];
  pl->np = m;
  free(renum), free(gone), free(fused), free(up);

  /* Per-rank lists; pl->p is already in pipeline order. */
  pl->rank_off = xcalloc((size_t)R + 1, sizeof(int));
  pl->rank_prims = xmalloc(((size_t)pl->np + 1) * sizeof(int));
  for (int i = 0; i < pl->np; i++) pl->rank_off[pl->p[i].rank + 1]++;
  for (int r = 0; r < R; r++) pl->rank_off[r + 1] += pl->rank_off[r];
  int *fill = xmalloc(((size_t)R + 1) * sizeof *fill);
  memcpy(fill, pl->rank_off, ((size_t)R + 1) * sizeof *fill);
  for (int i = 0; i < pl->np; i++) pl->rank_prims[fill[pl->p[i].rank]++] = i;
  free(fill);

  /* Waits from DAG edges, on the rank whose memory the hazard is about. */
  Wait *w = NULL;
  int nw = 0, capw = 0;
  for (int b = 0; b < n; b++)
    for (int k = d->pred_off[b]; k < d->pred_off[b + 1]; k++) {
      int a = d->pred[k], r = d->prank[k];
      int pa = prim_at(pl, a, r), pb = prim_at(pl, b, r);
      if (pa != pb) VEC_PUSH(w, nw, capw, ((Wait){pb, pa}));
    }
  qsort(w, (size_t)nw, sizeof *w, wait_cmp);
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
  return RC_OK;
}
