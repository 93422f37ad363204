/*
** offload.c — copies on the copy engine (--ce).
**
** What lending (lend.c) could run anywhere can run on the copy engine
** instead, with no TB at all: a local copy, and a direct send (or
** copy-send) that waits for nothing, that nothing waits for and that reads
** what no primitive of its rank writes. Its receive, when a plain receive
** that waits for nothing and that nothing waits for, leaves the TBs too (so
** does a TB left empty), and no other primitive of the receiver may touch
** the destination. When a reduction of what lands, it stays and waits for
** the copy instead (a flag the copy stream posts per micro-batch), then
** reduces locally; what else touches the destination must come after it
** (later in its TB, or waiting for its flag). The runtime makes the copies
** beside the kernel and the call ends when both have. A copy engine pushes
** 397 GB/s over 2xH200's NVLink where 8 pushing blocks reach 356 (nccl.md),
** and a block that also copies locally pushes half as fast; an all-gather
** on two ranks then needs no TB, a reduce-scatter only its reducing ones.
**
** Then a direct send whose source one primitive of its rank writes, and
** that waits for nothing else, goes too (with such a receive): the writer
** posts a counter after each micro-batch and the copy waits for it
** (`after`). A ring all-reduce on two ranks then keeps only its reducing
** TBs: the copy engine puts both hops. Nothing waits for such a copy, and
** each copy stream makes them after the others, so the kernel never waits
** for a copy that waits for the kernel.
*/
#include <stdlib.h>

#include "core.h"

static void ce_add(Plan *pl, int *cap, int task, const Prim *from, const Prim *to, int flag, int after) {
  CeCopy c = {.task = task, .src = from->rank, .dst = to->rank, .ridx = from->ridx, .widx = to->widx,
              .cnt = from->cnt, .flag = flag, .after = after, .rbuf = from->rbuf, .wbuf = to->wbuf};
  VEC_PUSH(pl->ce, pl->nce, *cap, c);
}

/* The one primitive of p's rank that writes what p reads, when p waits for
   it and for nothing else (by its flag, or later in its TB); or NULL. */
static const Prim *sole_writer(const Plan *pl, const Prim *p) {
  const Prim *w = NULL;
  for (int k = pl->rank_off[p->rank]; k < pl->rank_off[p->rank + 1]; k++) {
    const Prim *q = &pl->p[pl->rank_prims[k]];
    if (q == p || !prim_touches(q, p->rbuf, p->ridx, p->cnt, 1)) continue;
    if (w) return NULL;
    w = q;
  }
  if (!w || p->nwaits > 1 || (p->nwaits == 1 && &pl->p[pl->wait[p->wait_off]] != w)) return NULL;
  return p->nwaits == 1 || (w->tb == p->tb && w->seq < p->seq) ? w : NULL;
}

/* Whether every other primitive of q's rank that touches what q writes
   runs after q: later in q's TB, or waiting for q's flag. */
static int first_there(const Plan *pl, const Prim *q) {
  for (int k = pl->rank_off[q->rank]; k < pl->rank_off[q->rank + 1]; k++) {
    const Prim *r = &pl->p[pl->rank_prims[k]];
    if (r != q && prim_touches(r, q->wbuf, q->widx, q->cnt, 0) && !prim_follows(pl, q, r)) return 0;
  }
  return 1;
}

void offload_run(Plan *pl) {
  int R = pl->prog->nranks, np = pl->np, cap = 0;
  char *out = xcalloc((size_t)np + 1, 1); /* primitives that leave the TBs */
  for (int r = 0; r < R; r++)
    for (int k = pl->rank_off[r]; k < pl->rank_off[r + 1]; k++) {
      int i = pl->rank_prims[k];
      const Prim *p = &pl->p[i], *q = NULL;
      if (p->nwaits || p->flag >= 0 || p->join) continue;
      int fed = 0; /* q reduces what the copy puts */
      if (p->kind == PR_SEND || p->kind == PR_CS) {
        q = &pl->p[pl->task_recv[p->tout]];
        int plain = prim_plain_recv(pl, p) != NULL;
        fed = q->kind == PR_RRC && first_there(pl, q);
        if (!p->direct || !(plain || fed) || !prim_alone(pl, p, 1, p->kind == PR_CS)) continue;
        if (plain) out[q - pl->p] = 1;
      } else if (p->kind != PR_COPY || !prim_alone(pl, p, 1, 1)) {
        continue;
      }
      if (p->kind != PR_SEND) ce_add(pl, &cap, p->tin, p, p, -1, -1); /* the local copy */
      if (q) ce_add(pl, &cap, p->tout, p, q, fed ? pl->nceflags++ : -1, -1);
      if (fed) pl->p[q - pl->p].ce = 1, pl->p[q - pl->p].cin = -1;
      out[i] = 1;
    }
  /* Sends that wait for their source's one writer, after the others. */
  for (int i = 0; i < np; i++) {
    const Prim *p = &pl->p[i], *q, *w;
    if (out[i] || p->kind != PR_SEND || !p->direct || p->flag >= 0 || p->join || !(q = prim_plain_recv(pl, p)) ||
        !(w = sole_writer(pl, p)) || out[w - pl->p])
      continue;
    Prim *wr = &pl->p[w - pl->p];
    if (wr->cepost < 0) wr->cepost = pl->nceposts++;
    ce_add(pl, &cap, p->tout, p, q, -1, wr->cepost);
    out[i] = out[q - pl->p] = 1;
  }
  if (pl->nce) tb_drop_prims(pl, out);
  free(out);
}
