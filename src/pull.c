/*
** pull.c — receives that read the sender's buffer (--pull).
**
** A send that waits for nothing and that nothing waits for has nothing to
** do that its receiver cannot do, when what it reads
** holds the call's input while the receiver reads it: the receive reads the
** sender's buffer itself (NCCL's DirectRead) and the send goes. A plain
** receive then copies, a reduction reduces, what it reads over the link, in
** one pass: no FIFO, no flag per piece, no landing buffer, and its own waits
** still order it on its rank. A kernel starts a pull once the sender's
** kernel runs the call, and a kernel ends only when every block that pulls
** from it is done (cuda.cuh). On 2xH200 a probe's one-shot all-reduce whose
** 16 blocks pull moved 98-307 GB/s from 1 to 32 MiB (tools/probes/probe-pull.cu),
** and in the runtime 3-11% more than 32 pushing blocks from 2 to 8 MiB
** (docs/journal/gpu-2026-12-01.md, "Pulls").
**
** The source holds the input while it is read when no other primitive of
** its rank writes it, or when every one that does receives what the puller's
** rank sends after the pull (the send waits for it, or follows it in its
** TB): that write comes after the read by causality. In place, a two-rank
** ring all-reduce reduces its own half reading the peer's input, and writes
** the peer's copy of that half only afterwards; so it pulls as out of place.
** Such a writer's wait for the send that went (the hazard it guarded) goes
** with it.
*/
#include <stdlib.h>

#include "core.h"

/* Whether the receive q may read what send p reads, from p's rank. */
static int pullable(const Plan *pl, const Prim *p, const Prim *q) {
  for (int k = pl->rank_off[p->rank]; k < pl->rank_off[p->rank + 1]; k++) {
    const Prim *w = &pl->p[pl->rank_prims[k]];
    if (w == p || !prim_touches(w, p->rbuf, p->ridx, p->cnt, 1)) continue;
    if (w->cin < 0) return 0;
    const Prim *s = &pl->p[pl->task_send[w->tin]];
    if (s->rank != q->rank || !prim_follows(pl, q, s)) return 0;
  }
  /* Only such writers wait for p. */
  for (int i = 0; i < pl->np && p->flag >= 0; i++)
    for (int j = pl->p[i].wait_off; j < pl->p[i].wait_off + pl->p[i].nwaits; j++)
      if (&pl->p[pl->wait[j]] == p && !prim_touches(&pl->p[i], p->rbuf, p->ridx, p->cnt, 1)) return 0;
  return 1;
}

/*
** Then a pulled reduction whose result one send forwards, that waits for it
** alone, to a plain receive (prim_plain_recv) puts it there itself as it stores
** it, and the send and the receive go: nothing waits for the receive, so
** the call's end (which every rank waits for when a plan pulls) is where
** the put lands. A two-rank ring all-reduce then reads half of the peer's
** input, reduces it with its own and writes the sum to both ranks, in one
** pass with no FIFO and no flag, in place too. Not where the receive is its
** rank's last primitive (the rank keeps one), nor where another pull reads
** its destination and the reduction does not follow that pull: the write
** would move before the read that the send's order kept it after.
*/
/* Whether a pull other than q reads what g writes and q does not follow it:
   the write, once q's, would come before that read. */
static int read_before(const Plan *pl, const Prim *q, const Prim *g) {
  for (int i = 0; i < pl->np; i++) {
    const Prim *x = &pl->p[i];
    if (x != q && x->pull && pl->dag.t[x->tin].src == g->rank && x->rbuf == g->wbuf && x->ridx < g->widx + g->cnt &&
        g->widx < x->ridx + x->cnt && !prim_follows(pl, x, q))
      return 1;
  }
  return 0;
}

static void put_on(Plan *pl) {
  int R = pl->prog->nranks, n = 0;
  char *out = xcalloc((size_t)pl->np + 1, 1);
  int *left = xcalloc((size_t)R + 1, sizeof *left); /* a rank keeps a primitive (pull_run) */
  for (int r = 0; r < R; r++) left[r] = pl->rank_off[r + 1] - pl->rank_off[r];
  for (int i = 0; i < pl->np; i++) {
    const Prim *f = &pl->p[i], *q = NULL, *g;
    if (f->kind != PR_SEND || f->flag >= 0 || f->join || f->nwaits > 1 || !(g = prim_plain_recv(pl, f)) || left[g->rank] < 2)
      continue;
    for (int k = pl->rank_off[f->rank]; k < pl->rank_off[f->rank + 1]; k++) {
      q = &pl->p[pl->rank_prims[k]];
      int only = f->nwaits ? &pl->p[pl->wait[f->wait_off]] == q : f->tb == q->tb && q->seq < f->seq; /* waits for q alone */
      if (q->pull && q->kind == PR_RRC && q->wbuf == f->rbuf && q->widx == f->ridx && q->cnt == f->cnt && only) break;
      q = NULL;
    }
    /* What the send reads is the reduction's result: nothing else there writes it. */
    for (int k = pl->rank_off[f->rank]; q && k < pl->rank_off[f->rank + 1]; k++) {
      const Prim *w = &pl->p[pl->rank_prims[k]];
      if (w != q && w != f && prim_touches(w, f->rbuf, f->ridx, f->cnt, 1)) q = NULL;
    }
    if (!q || read_before(pl, q, g)) continue;
    Prim *r = &pl->p[q - pl->p];
    r->kind = PR_RRCS, r->tout = f->tout, r->direct = 1;
    pl->task_send[f->tout] = (int)(r - pl->p);
    out[i] = out[g - pl->p] = 1, n++;
    left[f->rank]--, left[g->rank]--;
  }
  pl->nputs = n;
  if (n) tb_drop_prims(pl, out);
  free(out), free(left);
}

void pull_run(Plan *pl) {
  int R = pl->prog->nranks;
  char *out = xcalloc((size_t)pl->np + 1, 1); /* the sends that go */
  for (int i = 0; i < pl->np; i++) {
    const Prim *p = &pl->p[i], *q = p->kind == PR_SEND ? &pl->p[pl->task_recv[p->tout]] : NULL;
    out[i] = q && !p->nwaits && !p->join && !q->join && (q->kind == PR_RECV || q->kind == PR_RRC) && pullable(pl, p, q);
  }
  /* A send whose source's writer is justified by a send that goes too stays:
     that writer would then pull, ordered by nothing on the puller's rank. */
  for (int again = 1; again;) {
    again = 0;
    for (int i = 0; i < pl->np; i++)
      for (int k = pl->rank_off[pl->p[i].rank]; out[i] && k < pl->rank_off[pl->p[i].rank + 1]; k++) {
        const Prim *w = &pl->p[pl->rank_prims[k]], *p = &pl->p[i];
        if (w != p && prim_touches(w, p->rbuf, p->ridx, p->cnt, 1) && out[pl->task_send[w->tin]]) out[i] = 0, again = 1;
      }
  }
  /* A rank keeps a primitive: its kernel tells pullers that its buffers are
     ready, and holds them until they are done. */
  for (int r = 0; r < R; r++) {
    int left = 0;
    for (int k = pl->rank_off[r]; k < pl->rank_off[r + 1]; k++) left += !out[pl->rank_prims[k]];
    for (int k = pl->rank_off[r]; k < pl->rank_off[r + 1] && !left; k++) out[pl->rank_prims[k]] = 0;
  }
  for (int i = 0; i < pl->np; i++) {
    if (!out[i]) continue;
    const Prim *p = &pl->p[i];
    Prim *q = &pl->p[pl->task_recv[p->tout]];
    q->pull = 1, q->direct = 0, q->cin = -1, q->rbuf = p->rbuf, q->ridx = p->ridx;
    pl->npulls++;
  }
  /* Writers that waited for a send that went wait for it no more (their
     lists shrink where they lie; tb_drop_prims packs them). */
  for (int i = 0; i < pl->np && pl->npulls; i++) {
    Prim *w = &pl->p[i];
    int k = 0;
    for (int j = w->wait_off; j < w->wait_off + w->nwaits; j++)
      if (!out[pl->wait[j]]) pl->wait[w->wait_off + k++] = pl->wait[j];
    w->nwaits = k;
  }
  if (pl->npulls) tb_drop_prims(pl, out), put_on(pl);
  free(out);
}
