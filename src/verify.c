/*
** verify.c — prove a plan right before anything runs it.
**
** 1. Post-condition: execute the tasks symbolically in pipeline order. A
**    location holds a multiset of input contributions, kept as (sum of 64-bit
**    hashes, count); copies replace, reductions add. Every output chunk must
**    hold exactly the contributions the collective defines, each once.
** 2. Connection order: both ends of a connection see its tasks in one order.
** 3. Deadlock: run the per-TB programs abstractly with bounded FIFOs (one
**    tile per connection) and a few micro-batches. If they stop short, follow
**    who-waits-for-whom to a cycle and name its TBs and primitives.
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

static rcStatus postcondition(const Plan *pl, Err *e) {
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

  for (int k = 0; k < d->n; k++) {
    int t = pl->sched.order[k];
    const Task *tk = &d->t[t];
    for (int c = 0; c < tk->cnt; c++) {
      /* Task buffers are already placed: index without aliasing. */
      Val s = v[loc(&L, p, 0, tk->src, tk->sbuf, tk->sidx + c)];
      size_t di = loc(&L, p, 0, tk->dst, tk->dbuf, tk->didx + c);
      if (tk->op == OP_COPY) v[di] = s;
      else if (s.cnt < 0 || v[di].cnt < 0) v[di].cnt = -1;
      else v[di].h += s.h, v[di].cnt += s.cnt;
      writer[di] = t;
    }
  }

  rcStatus rc = RC_OK;
  int no = prog_bufchunks(p, BUF_OUTPUT);
  for (int r = 0; r < R && rc == RC_OK; r++)
    for (int j = 0; j < no && rc == RC_OK; j++) {
      Val want = {0, 0};
      switch (p->coll) {
      case COLL_ALLGATHER: want = (Val){contrib(j / C, j % C), 1}; break;
      case COLL_ALLTOALL: want = (Val){contrib(j / C, r * C + j % C), 1}; break;
      case COLL_REDUCESCATTER:
        for (int b = 0; b < R; b++) want.h += contrib(b, r * C + j), want.cnt++;
        break;
      default:
        for (int b = 0; b < R; b++) want.h += contrib(b, j), want.cnt++;
        break;
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
  free(v), free(writer);
  return rc;
}

/* Both ends of every connection must run its tasks in the same order. */
static rcStatus conn_order(const Plan *pl, Err *e) {
  int nc = pl->nconn;
  int *last_s = xmalloc(((size_t)nc + 1) * sizeof(int)), *last_r = xmalloc(((size_t)nc + 1) * sizeof(int));
  for (int c = 0; c < nc; c++) last_s[c] = last_r[c] = -1;
  rcStatus rc = RC_OK;
  /* TB order is pipeline order on each rank, so a connection's task sequence
     is increasing in pipeline position on the sending side; the receiving
     side must see the same sequence. Compare per connection via positions. */
  for (int i = 0; i < pl->np && rc == RC_OK; i++) {
    const Prim *q = &pl->p[i];
    if (q->cout >= 0) {
      int pos = pl->sched.pos[q->tout];
      if (pos < last_s[q->cout]) rc = RC_EDEADLOCK;
      last_s[q->cout] = pos;
    }
    if (q->cin >= 0) {
      int pos = pl->sched.pos[q->tin];
      if (pos < last_r[q->cin]) rc = RC_EDEADLOCK;
      last_r[q->cin] = pos;
    }
    if (rc != RC_OK) {
      char at[300];
      plan_task_where(pl, q->tin >= 0 ? q->tin : q->tout, at, sizeof at);
      err_set(e, rc, "%s: connection rank %d -> rank %d carries tasks out of order", at,
              pl->conn[q->cout >= 0 ? q->cout : q->cin].src, pl->conn[q->cout >= 0 ? q->cout : q->cin].dst);
    }
  }
  free(last_s), free(last_r);
  return rc;
}

/* ------------------------------------------------------------ deadlock */

enum { RES_FLAG, RES_DATA, RES_SPACE };

typedef struct {
  const Plan *pl;
  int M, F;
  int *cur, *m;          /* per TB: index into its program, current micro-batch */
  int *done;             /* per prim: micro-batches finished */
  int *pushed, *popped;  /* per connection, in tiles */
  int *need;             /* per TB: cumulative tile count it waits for on a connection */
  int *wres, *wkind;     /* per TB: what it waits on */
  int *head, *next;      /* waiter lists per resource id */
  int *queue, qn;
  char *inq;
  int nres;
} Sim;

static int tb_of(const Plan *pl, int prim) { return pl->tb_base[pl->p[prim].rank] + pl->p[prim].tb; }

static void enqueue(Sim *s, int tb) {
  if (!s->inq[tb]) s->inq[tb] = 1, s->queue[s->qn++] = tb;
}

static void wake(Sim *s, int res) {
  for (int tb = s->head[res]; tb >= 0;) {
    int nx = s->next[tb];
    enqueue(s, tb);
    tb = nx;
  }
  s->head[res] = -1;
}

/* Tiles that pass over a task's connection before the task's first tile. */
static int *conn_seq(const Plan *pl, int M) {
  int *seq = xcalloc((size_t)pl->dag.n + 1, sizeof *seq), *cntc = xcalloc((size_t)pl->nconn + 1, sizeof(int));
  for (int k = 0; k < pl->dag.n; k++) {
    int t = pl->sched.order[k];
    if (pl->dag.t[t].src == pl->dag.t[t].dst) continue;
    int c = pl->p[pl->task_recv[t]].cin; /* the receiving primitive always carries t in */
    seq[t] = cntc[c];
    cntc[c] += M;
  }
  free(cntc);
  return seq;
}

/* The TB that blocked TB b waits for, or -1 when that TB has finished. */
static int waits_for(const Plan *pl, const Sim *s, int b) {
  int res = s->wres[b], to = -1;
  if (s->wkind[b] == RES_FLAG) {
    to = tb_of(pl, res);
  } else {
    int c = (res - pl->np) / 2;
    for (int i = 0; i < pl->np && to < 0; i++)
      if (s->wkind[b] == RES_DATA ? pl->p[i].cout == c : pl->p[i].cin == c) to = tb_of(pl, i);
  }
  return to >= 0 && s->cur[to] < pl->tb_off[to + 1] - pl->tb_off[to] ? to : -1;
}

rcStatus verify_deadlock(const Plan *pl, int M, int F, Err *e) {
  int nt = pl->ntbs, nc = pl->nconn;
  Sim s = {.pl = pl, .M = M, .F = F};
  s.cur = xcalloc((size_t)nt + 1, sizeof(int));
  s.m = xcalloc((size_t)nt + 1, sizeof(int));
  s.done = xcalloc((size_t)pl->np + 1, sizeof(int));
  s.pushed = xcalloc((size_t)nc + 1, sizeof(int));
  s.popped = xcalloc((size_t)nc + 1, sizeof(int));
  s.wres = xmalloc(((size_t)nt + 1) * sizeof(int));
  s.wkind = xmalloc(((size_t)nt + 1) * sizeof(int));
  s.need = xmalloc(((size_t)nt + 1) * sizeof(int));
  s.nres = pl->np + 2 * nc;
  s.head = xmalloc(((size_t)s.nres + 1) * sizeof(int));
  memset(s.head, 0xff, ((size_t)s.nres + 1) * sizeof(int));
  s.next = xmalloc(((size_t)nt + 1) * sizeof(int));
  s.queue = xmalloc(((size_t)nt + 1) * sizeof(int));
  s.inq = xcalloc((size_t)nt + 1, 1);
  int *seq = conn_seq(pl, M);
  for (int b = 0; b < nt; b++) enqueue(&s, b);
  int finished = 0;
  while (s.qn > 0) {
    int b = s.queue[--s.qn];
    s.inq[b] = 0;
    int len = pl->tb_off[b + 1] - pl->tb_off[b];
    for (;;) {
      if (s.cur[b] >= len) break;
      int pi = pl->tb_prims[pl->tb_off[b] + s.cur[b]], m = s.m[b], res = -1, kind = 0;
      const Prim *p = &pl->p[pi];
      for (int j = p->wait_off; j < p->wait_off + p->nwaits && res < 0; j++)
        if (s.done[pl->wait[j]] < (pl->wait_full[j] ? M : m + 1)) res = pl->wait[j], kind = RES_FLAG;
      if (res < 0 && p->cin >= 0 && s.pushed[p->cin] < seq[p->tin] + m + 1)
        res = pl->np + 2 * p->cin, kind = RES_DATA, s.need[b] = seq[p->tin] + m + 1;
      if (res < 0 && p->cout >= 0 && s.pushed[p->cout] - s.popped[p->cout] >= F)
        res = pl->np + 2 * p->cout + 1, kind = RES_SPACE;
      if (res >= 0) {
        s.wres[b] = res, s.wkind[b] = kind;
        s.next[b] = s.head[res], s.head[res] = b;
        break;
      }
      if (p->cin >= 0) s.popped[p->cin]++, wake(&s, pl->np + 2 * p->cin + 1);
      if (p->cout >= 0) s.pushed[p->cout]++, wake(&s, pl->np + 2 * p->cout);
      s.done[pi] = m + 1;
      if (p->flag >= 0) wake(&s, pi);
      if (++s.m[b] == M) s.m[b] = 0, s.cur[b]++;
      if (s.cur[b] == len) finished++;
    }
  }
  rcStatus rc = RC_OK;
  int allfinished = 1;
  for (int b = 0; b < nt; b++)
    if (s.cur[b] < pl->tb_off[b + 1] - pl->tb_off[b]) allfinished = 0;
  (void)finished;
  if (!allfinished) {
    /* Who does a blocked TB wait for? Follow the chain until it repeats. */
    int *mark = xcalloc((size_t)nt + 1, sizeof(int)), b = 0;
    while (s.cur[b] >= pl->tb_off[b + 1] - pl->tb_off[b]) b++;
    int step = 1;
    while (!mark[b]) {
      mark[b] = step++;
      int to = waits_for(pl, &s, b);
      if (to < 0) break;
      b = to;
    }
    Buf msg;
    buf_init(&msg);
    int start = b, first = 1, len = 0;
    do {
      len++;
      int to = waits_for(pl, &s, b);
      if (to < 0 || !mark[to]) break;
      b = to;
    } while (b != start);
    b = start;
    do {
      const Prim *p = &pl->p[pl->tb_prims[pl->tb_off[b] + s.cur[b]]];
      char at[300];
      plan_task_where(pl, p->tin >= 0 ? p->tin : p->tout, at, sizeof at);
      if (first) buf_printf(&msg, "%s: deadlock, a cycle of %d TBs: ", at, len);
      buf_printf(&msg, "%srank %d tb %d at %s", first ? "" : "; ", p->rank, p->tb, prim_name(p->kind));
      if (p->cin >= 0) buf_printf(&msg, " from rank %d", pl->conn[p->cin].src);
      if (p->cout >= 0) buf_printf(&msg, " to rank %d", pl->conn[p->cout].dst);
      buf_printf(&msg, " (%s, micro-batch %d) waits for ", at, s.m[b]);
      int res = s.wres[b];
      if (s.wkind[b] == RES_FLAG) {
        const Prim *q = &pl->p[res];
        buf_printf(&msg, "tb %d to finish its %s", q->tb, prim_name(q->kind));
      } else {
        const Conn *c = &pl->conn[(res - pl->np) / 2];
        buf_printf(&msg, "%s rank %d -> rank %d", s.wkind[b] == RES_DATA ? "data on" : "FIFO space on", c->src,
                   c->dst);
      }
      first = 0;
      int to = waits_for(pl, &s, b);
      if (to < 0 || !mark[to]) break;
      b = to;
    } while (b != start);
    rc = err_set(e, RC_EDEADLOCK, "%s", msg.s);
    buf_free(&msg);
    free(mark);
  }
  free(s.cur), free(s.m), free(s.done), free(s.pushed), free(s.popped), free(s.wres), free(s.wkind), free(s.need);
  free(s.head), free(s.next), free(s.queue), free(s.inq), free(seq);
  return rc;
}

rcStatus verify_run(Plan *pl, Err *e) {
  RC_CHECK(postcondition(pl, e));
  RC_CHECK(conn_order(pl, e));
  RC_CHECK(verify_deadlock(pl, 3, 1, e));
  pl->verified = 1;
  return RC_OK;
}
