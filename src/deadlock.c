/*
** deadlock.c — the abstract execution of a plan's TB programs, which shows
** whether they can block forever: the verifier proves its plans with it,
** the merge searches with it, and the host executor checks a buffered plan
** at the micro-batches it runs. Its step order (deadlock_step) is the one
** every executor and the simulator follow.
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"

void deadlock_step(const Plan *pl, int b, ExecOrder order, int *k, int *m, int M) {
  const int *prog = pl->tb_prims + pl->tb_off[b];
  int len = pl->tb_off[b + 1] - pl->tb_off[b], lo = 0, hi = len;
  if (order == EX_TASK) {
    for (lo = *k; lo > 0 && pl->p[prog[lo]].join; lo--) {
    }
    for (hi = *k + 1; hi < len && pl->p[prog[hi]].join; hi++) {
    }
  }
  if (*k + 1 < hi) ++*k;
  else if (++*m < M) *k = lo;
  else *m = 0, *k = hi;
}

/*
** The model: FIFOs as small as can be. Then a tile cannot sit in a FIFO; the
** primitives that carry one task's tile (its send, its receive, and through
** fused primitives the tasks they forward) move it together, as one
** rendezvous: a group fires tile m when every member's TB stands at that
** member with its flags satisfied. Any buffering only loosens this, so a plan
** that completes here completes with any FIFO size.
*/
typedef struct {
  const Plan *pl;
  int M;
  int *grp, *goff, *gmem; /* per prim: its group; members of group g: gmem[goff[g] .. goff[g+1]) */
  int *garr;              /* per group: members arrived */
  int *cur, *m;           /* per TB: index into its program, micro-batch */
  char *arrived;          /* per TB: its current primitive has joined its group */
  int *wflag;             /* per TB: the primitive whose flag it waits for, or -1 */
  int *done;              /* per prim: micro-batches finished */
  int *head, *next;       /* per prim: TBs waiting for its flag */
  int *queue, qn;
  char *inq;
} Walk;

static int tb_of(const Plan *pl, int prim) { return pl->tb_base[pl->p[prim].rank] + pl->p[prim].tb; }

static int tb_len(const Plan *pl, int b) { return pl->tb_off[b + 1] - pl->tb_off[b]; }

static int tb_prim(const Plan *pl, const Walk *s, int b) { return pl->tb_prims[pl->tb_off[b] + s->cur[b]]; }

/* Has TB b run its whole program? */
static int finished(const Plan *pl, const Walk *s, int b) { return s->cur[b] >= tb_len(pl, b); }

/* Step TB b past its current (primitive, micro-batch). */
static void advance(const Plan *pl, Walk *s, int b) { deadlock_step(pl, b, pl->opt.order, &s->cur[b], &s->m[b], s->M); }

static void enqueue(Walk *s, int tb) {
  if (!s->inq[tb]) s->inq[tb] = 1, s->queue[s->qn++] = tb;
}

/* Groups: primitives joined by carrying the same task. */
static void make_groups(const Plan *pl, Walk *s) {
  int np = pl->np, ng = 0;
  int *up = xmalloc(((size_t)np + 1) * sizeof *up), *id = xmalloc(((size_t)np + 1) * sizeof *id);
  for (int i = 0; i < np; i++) up[i] = i, id[i] = -1;
  for (int t = 0; t < pl->dag.n; t++) /* copy-engine copies, pulls, puts: one end or none */
    if (pl->task_send[t] >= 0 && pl->task_recv[t] >= 0) up[uf_find(up, pl->task_send[t])] = uf_find(up, pl->task_recv[t]);
  s->grp = xmalloc(((size_t)np + 1) * sizeof(int));
  for (int i = 0; i < np; i++) {
    int r = uf_find(up, i);
    if (id[r] < 0) id[r] = ng++;
    s->grp[i] = id[r];
  }
  s->goff = xcalloc((size_t)ng + 2, sizeof(int));
  s->gmem = xmalloc(((size_t)np + 1) * sizeof(int));
  for (int i = 0; i < np; i++) s->goff[s->grp[i] + 2]++;
  for (int g = 0; g < ng; g++) s->goff[g + 2] += s->goff[g + 1];
  for (int i = 0; i < np; i++) s->gmem[s->goff[s->grp[i] + 1]++] = i;
  s->garr = xcalloc((size_t)ng + 1, sizeof(int));
  free(up), free(id);
}

/* Every member of group g has arrived: tile m moves; members advance. */
static void fire(const Plan *pl, Walk *s, int g) {
  s->garr[g] = 0;
  for (int k = s->goff[g]; k < s->goff[g + 1]; k++) {
    int q = s->gmem[k], b = tb_of(pl, q);
    s->done[q] = s->m[b] + 1;
    s->arrived[b] = 0;
    advance(pl, s, b);
    for (int w = s->head[q]; w >= 0; w = s->next[w]) enqueue(s, w);
    s->head[q] = -1;
    if (!finished(pl, s, b)) enqueue(s, b);
  }
}

/* The TB that blocked TB b waits for, or -1 when none is blocked. */
static int waits_for(const Plan *pl, const Walk *s, int b) {
  if (!s->arrived[b]) return s->wflag[b] >= 0 ? tb_of(pl, s->wflag[b]) : -1;
  int g = s->grp[tb_prim(pl, s, b)];
  for (int k = s->goff[g]; k < s->goff[g + 1]; k++) {
    int c = tb_of(pl, s->gmem[k]);
    if (!(s->arrived[c] && tb_prim(pl, s, c) == s->gmem[k])) return c;
  }
  return -1;
}

/* Describe a cycle of blocked TBs starting anywhere on it. */
static rcStatus report_cycle(const Plan *pl, const Walk *s, int start, Err *e) {
  int len = 0, b = start;
  do len++, b = waits_for(pl, s, b);
  while (b != start && len < pl->ntbs);
  Buf msg;
  buf_init(&msg);
  b = start;
  for (int i = 0; i < len; i++) {
    const Prim *p = &pl->p[tb_prim(pl, s, b)];
    char at[300];
    plan_task_where(pl, p->tin >= 0 ? p->tin : p->tout, at, sizeof at);
    if (i == 0) buf_printf(&msg, "%s: deadlock, a cycle of %d TB%s: ", at, len, len > 1 ? "s" : "");
    buf_printf(&msg, "%srank %d tb %d at %s", i ? "; " : "", p->rank, p->tb, prim_name(p->kind));
    if (p->cin >= 0) buf_printf(&msg, " from rank %d", pl->conn[p->cin].src);
    if (p->cout >= 0) buf_printf(&msg, " to rank %d", pl->conn[p->cout].dst);
    buf_printf(&msg, " (%s, micro-batch %d) waits for ", at, s->m[b]);
    int to = waits_for(pl, s, b);
    const Prim *q = &pl->p[tb_prim(pl, s, to)];
    if (!s->arrived[b]) {
      buf_printf(&msg, "its tb %d to finish %s", pl->p[s->wflag[b]].tb, prim_name(pl->p[s->wflag[b]].kind));
    } else {
      /* The member of this tile's group that TB `to` has not reached yet. */
      int g = s->grp[tb_prim(pl, s, b)], cur = tb_prim(pl, s, to), need = -1;
      for (int k = s->goff[g]; k < s->goff[g + 1] && need < 0; k++)
        if (tb_of(pl, s->gmem[k]) == to && s->gmem[k] != cur) need = s->gmem[k];
      if (to == b)
        buf_printf(&msg, "its own later %s to move the same tile", prim_name(pl->p[need].kind));
      else if (s->grp[cur] == g)
        buf_printf(&msg, "rank %d tb %d, at its %s but not ready", q->rank, q->tb, prim_name(q->kind));
      else
        buf_printf(&msg, "rank %d tb %d to reach its %s (it is at %s)", q->rank, q->tb, prim_name(pl->p[need].kind),
                   prim_name(q->kind));
    }
    b = to;
  }
  rcStatus rc = err_set(e, RC_EDEADLOCK, "%s", msg.s);
  buf_free(&msg);
  return rc;
}

/* Mark the fused primitives a blocked TB stands at, or waits with. */
static int mark_stuck(const Plan *pl, const Walk *s, char *unfuse) {
  int n = 0;
  for (int b = 0; b < pl->ntbs; b++) {
    if (finished(pl, s, b)) continue;
    int g = s->grp[tb_prim(pl, s, b)];
    for (int k = s->goff[g]; k < s->goff[g + 1]; k++) {
      const Prim *q = &pl->p[s->gmem[k]];
      if (q->tin >= 0 && q->tout >= 0 && q->tin != q->tout && !unfuse[q->tin]) unfuse[q->tin] = 1, n++;
    }
  }
  return n;
}

rcStatus deadlock_check(const Plan *pl, int M, char *unfuse, int *nmarked, Err *e) {
  int nt = pl->ntbs, np = pl->np;
  Walk s = {.pl = pl, .M = M};
  make_groups(pl, &s);
  s.cur = xcalloc((size_t)nt + 1, sizeof(int));
  s.m = xcalloc((size_t)nt + 1, sizeof(int));
  s.arrived = xcalloc((size_t)nt + 1, 1);
  s.wflag = xmalloc(((size_t)nt + 1) * sizeof(int));
  s.done = xcalloc((size_t)np + 1, sizeof(int));
  s.head = xmalloc(((size_t)np + 1) * sizeof(int));
  s.next = xmalloc(((size_t)nt + 1) * sizeof(int));
  s.queue = xmalloc(((size_t)nt + 1) * sizeof(int));
  s.inq = xcalloc((size_t)nt + 1, 1);
  memset(s.head, 0xff, ((size_t)np + 1) * sizeof(int));
  for (int b = 0; b < nt; b++) {
    s.wflag[b] = -1;
    if (tb_len(pl, b) > 0) enqueue(&s, b);
  }
  while (s.qn > 0) {
    int b = s.queue[--s.qn];
    s.inq[b] = 0;
    if (s.arrived[b] || finished(pl, &s, b)) continue;
    int pi = tb_prim(pl, &s, b), m = s.m[b], w = -1;
    const Prim *p = &pl->p[pi];
    for (int j = p->wait_off; j < p->wait_off + p->nwaits && w < 0; j++)
      if (s.done[pl->wait[j]] < m + 1) w = pl->wait[j];
    s.wflag[b] = w;
    if (w >= 0) {
      s.next[b] = s.head[w], s.head[w] = b;
      continue;
    }
    s.arrived[b] = 1;
    int g = s.grp[pi];
    if (++s.garr[g] == s.goff[g + 1] - s.goff[g]) fire(pl, &s, g);
  }
  rcStatus rc = RC_OK;
  for (int b = 0; b < nt && rc == RC_OK; b++) {
    if (finished(pl, &s, b)) continue;
    /* Walk the wait-for chain until it repeats: that TB is on a cycle. */
    char *seen = xcalloc((size_t)nt + 1, 1);
    int c = b;
    while (c >= 0 && !seen[c]) seen[c] = 1, c = waits_for(pl, &s, c);
    free(seen);
    if (c < 0) continue; /* blocked behind a cycle found from another TB */
    rc = report_cycle(pl, &s, c, e);
  }
  if (nmarked) *nmarked = rc != RC_OK && unfuse ? mark_stuck(pl, &s, unfuse) : 0;
  free(s.grp), free(s.goff), free(s.gmem), free(s.garr), free(s.cur), free(s.m), free(s.arrived), free(s.wflag);
  free(s.done), free(s.head), free(s.next), free(s.queue), free(s.inq);
  return rc;
}

/*
** Buffered plans (an imported file's own TBs, merged TBs) assume what MSCCL's
** runtime guarantees: a connection's buffer holds two steps (NCCL_STEPS slots
** of which a step takes MSCCL_CHUNKSTEPS, 8 / 4), so sends complete into it
** without their receiver. Each TB steps while it can: its flags are set, its
** input tile has arrived, its output FIFO has room. Executors refuse such a
** plan when its FIFOs would hold less (exec_check_sizes).
**
** Why that suffices at the executors' granularity, where a tile streams
** through in slots: the TBs and connections form a Kahn network (blocking
** reads and writes, one reader and one writer per FIFO, flags that only
** grow), so whether it completes does not depend on timing. One complete
** run is enough: replay this model's steps one at a time, each primitive
** moving its whole tile alone. A step starts with its input tile in the FIFO
** and at most one tile in its output FIFO, so with room for two tiles it
** never blocks.
*/
enum { RES_FLAG, RES_DATA, RES_SPACE }; /* what a blocked TB waits for */

/* The TB a blocked TB waits for: the flag's owner, the connection's sender
   (waiting for data) or its receiver (waiting for space). */
static int blocker(const Plan *pl, int why, int on) {
  if (why == RES_FLAG) return tb_of(pl, on);
  for (int i = 0; i < pl->np; i++)
    if (why == RES_DATA ? pl->p[i].cout == on : pl->p[i].cin == on) return tb_of(pl, i);
  return -1;
}

/* Resources a TB blocks on: a primitive's flag (its id), a connection's data
   (np + c), a connection's space (np + nc + c). Wake whoever waits on r. */
static void wake_all(Walk *s, int r) {
  for (int b = s->head[r], nx; b >= 0; b = nx) nx = s->next[b], enqueue(s, b);
  s->head[r] = -1;
}

rcStatus deadlock_buffered(const Plan *pl, int M, char *cycle, Err *e) {
  int nt = pl->ntbs, nc = pl->nconn, np = pl->np;
  Walk s = {.pl = pl, .M = M};
  s.cur = xcalloc((size_t)nt + 1, sizeof(int));
  s.m = xcalloc((size_t)nt + 1, sizeof(int));
  s.done = xcalloc((size_t)np + 1, sizeof(int));
  s.head = xmalloc(((size_t)np + 2 * nc + 1) * sizeof(int));
  s.next = xmalloc(((size_t)nt + 1) * sizeof(int));
  s.queue = xmalloc(((size_t)nt + 1) * sizeof(int));
  s.inq = xcalloc((size_t)nt + 1, 1);
  memset(s.head, 0xff, ((size_t)np + 2 * nc + 1) * sizeof(int));
  int *pushed = xcalloc((size_t)nc + 1, sizeof(int)), *popped = xcalloc((size_t)nc + 1, sizeof(int));
  int *why = xmalloc(((size_t)nt + 1) * sizeof(int)), *on = xmalloc(((size_t)nt + 1) * sizeof(int));
  for (int b = 0; b < nt; b++) enqueue(&s, b);
  while (s.qn > 0) {
    int b = s.queue[--s.qn], res = -1;
    s.inq[b] = 0;
    while (!finished(pl, &s, b)) {
      int pi = tb_prim(pl, &s, b), m = s.m[b], w = -1;
      const Prim *p = &pl->p[pi];
      for (int j = p->wait_off; j < p->wait_off + p->nwaits && w < 0; j++)
        if (s.done[pl->wait[j]] < m + 1) w = pl->wait[j];
      if (w >= 0) why[b] = RES_FLAG, on[b] = w, res = w;
      else if (p->cin >= 0 && pushed[p->cin] == popped[p->cin]) why[b] = RES_DATA, on[b] = p->cin, res = np + p->cin;
      else if (p->cout >= 0 && pushed[p->cout] - popped[p->cout] >= BUFFERED_TILES)
        why[b] = RES_SPACE, on[b] = p->cout, res = np + nc + p->cout;
      if (res >= 0) break;
      if (p->cin >= 0) popped[p->cin]++, wake_all(&s, np + nc + p->cin);
      if (p->cout >= 0) pushed[p->cout]++, wake_all(&s, np + p->cout);
      s.done[pi] = m + 1;
      wake_all(&s, pi);
      advance(pl, &s, b);
    }
    if (res >= 0) s.next[b] = s.head[res], s.head[res] = b;
  }
  rcStatus rc = RC_OK;
  int b = 0;
  while (b < nt && finished(pl, &s, b)) b++;
  if (b < nt) {
    /* Follow who waits for whom until a TB repeats, then describe that cycle. */
    char *seen = xcalloc((size_t)nt + 1, 1);
    int to = b;
    for (;;) {
      seen[to] = 1;
      int nx = blocker(pl, why[to], on[to]);
      if (nx < 0 || finished(pl, &s, nx) || seen[nx]) {
        to = nx >= 0 && !finished(pl, &s, nx) ? nx : to;
        break;
      }
      to = nx;
    }
    Buf msg;
    buf_init(&msg);
    int start = to, len = 0;
    memset(seen, 0, (size_t)nt + 1);
    do {
      const Prim *p = &pl->p[tb_prim(pl, &s, to)];
      char at[300];
      plan_task_where(pl, p->tin >= 0 ? p->tin : p->tout, at, sizeof at);
      if (len == 0) buf_printf(&msg, "%s: deadlock: ", at);
      buf_printf(&msg, "%srank %d tb %d at %s (%s, micro-batch %d) waits for ", len ? "; " : "", p->rank, p->tb,
                 prim_name(p->kind), at, s.m[to]);
      if (why[to] == RES_FLAG) buf_printf(&msg, "its tb %d to finish %s", pl->p[on[to]].tb, prim_name(pl->p[on[to]].kind));
      else buf_printf(&msg, "%s rank %d -> rank %d", why[to] == RES_DATA ? "data from" : "FIFO space on",
                      pl->conn[on[to]].src, pl->conn[on[to]].dst);
      seen[to] = 1, len++;
      int nx = blocker(pl, why[to], on[to]);
      if (nx < 0 || finished(pl, &s, nx) || seen[nx]) break;
      to = nx;
    } while (to != start);
    rc = err_set(e, RC_EDEADLOCK, "%s", msg.s);
    buf_free(&msg);
    /* Each blocked TB waits for one other: mark every cycle, not only the one described
       (seen: 1 on the walk from a, 2 walked before). */
    memset(seen, 0, (size_t)nt + 1);
    for (int a = 0; a < nt && cycle; a++) {
      int c = a;
      while (c >= 0 && !finished(pl, &s, c) && !seen[c]) seen[c] = 1, c = blocker(pl, why[c], on[c]);
      if (c >= 0 && seen[c] == 1) {
        int d = c;
        do cycle[d] = 1, d = blocker(pl, why[d], on[d]);
        while (d != c);
      }
      for (c = a; c >= 0 && seen[c] == 1; c = blocker(pl, why[c], on[c])) seen[c] = 2;
    }
    free(seen);
  }
  free(s.cur), free(s.m), free(s.done), free(s.head), free(s.next), free(s.queue), free(s.inq);
  free(pushed), free(popped), free(why), free(on);
  return rc;
}
