/*
** tballoc.c — thread-block allocation.
**
** A TB runs its primitives one after another, each over every micro-batch
** (task-level execution). Connections stay on one TB per rank, so both ends
** see a connection's tasks in the same order; a fused primitive ties its two
** connections together. Such a group of connections (or one local primitive)
** is a unit; its activity is the interval of sub-pipelines in which it has work.
**
** State-based (the paper's §4.4): units whose intervals never overlap share a
** TB. Greedy colouring by start time is optimal for intervals, so the number
** of TBs on a rank is the largest number of units active in one sub-pipeline.
** Connection-based (MSCCL): one TB per unit, plus one for a rank's local copies.
**
** Then each TB's program is its primitives in pipeline order; waits between
** primitives of one TB disappear (program order), the rest get a flag.
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"

static int uf_find(int *up, int x) {
  while (up[x] != x) x = up[x] = up[up[x]];
  return x;
}

typedef struct {
  int unit, lo, hi;
} Span;

static int span_cmp(const void *a, const void *b) {
  const Span *x = a, *y = b;
  if (x->lo != y->lo) return x->lo - y->lo;
  return x->unit - y->unit;
}

rcStatus tb_assign(Plan *pl, TbPolicy pol, Err *e) {
  (void)e;
  int R = pl->prog->nranks, nc = pl->nconn, np = pl->np;
  /* Unit ids: 2*conn (send end), 2*conn+1 (receive end), 2*nconn + prim (local). */
  int nu = 2 * nc + np;
  int *up = xmalloc(((size_t)nu + 1) * sizeof *up);
  for (int i = 0; i < nu; i++) up[i] = i;
  int *unit = xmalloc(((size_t)np + 1) * sizeof *unit);
  for (int i = 0; i < np; i++) {
    const Prim *p = &pl->p[i];
    int a = p->cin >= 0 ? 2 * p->cin + 1 : -1, b = p->cout >= 0 ? 2 * p->cout : -1;
    if (a >= 0 && b >= 0) up[uf_find(up, a)] = uf_find(up, b);
    unit[i] = a >= 0 ? a : b >= 0 ? b : 2 * nc + i;
  }
  int *lo = xmalloc(((size_t)nu + 1) * sizeof *lo), *hi = xmalloc(((size_t)nu + 1) * sizeof *hi);
  for (int i = 0; i < nu; i++) lo[i] = hi[i] = -1;
  for (int i = 0; i < np; i++) {
    int u = unit[i] = uf_find(up, unit[i]), sl = pl->p[i].slot;
    if (lo[u] < 0 || sl < lo[u]) lo[u] = sl;
    if (sl > hi[u]) hi[u] = sl;
  }

  int *tbof = xmalloc(((size_t)nu + 1) * sizeof *tbof);
  pl->ntb = xcalloc((size_t)R + 1, sizeof(int));
  pl->tb_base = xcalloc((size_t)R + 1, sizeof(int));
  Span *sp = NULL;
  int *tbend = NULL, captb = 0;
  int nsp = 0, capsp = 0;
  for (int r = 0; r < R; r++) {
    nsp = 0;
    for (int k = pl->rank_off[r]; k < pl->rank_off[r + 1]; k++) {
      int i = pl->rank_prims[k], u = unit[i];
      if (lo[u] >= 0) {
        VEC_PUSH(sp, nsp, capsp, ((Span){u, lo[u], hi[u]}));
        lo[u] = -1 - lo[u]; /* mark listed; restored below */
      }
    }
    for (int k = 0; k < nsp; k++) lo[sp[k].unit] = sp[k].lo;
    qsort(sp, (size_t)nsp, sizeof *sp, span_cmp);
    int ntb = 0, localtb = -1;
    for (int k = 0; k < nsp; k++) {
      int b = -1;
      if (pol == TB_STATE) {
        for (int j = 0; j < ntb && b < 0; j++)
          if (tbend[j] < sp[k].lo) b = j;
      } else if (sp[k].unit >= 2 * nc) {
        b = localtb;
      }
      if (b < 0) {
        if (ntb == captb) captb = captb ? 2 * captb : 16, tbend = xrealloc(tbend, (size_t)captb * sizeof *tbend);
        b = ntb++;
        if (pol == TB_CONN && sp[k].unit >= 2 * nc) localtb = b;
      }
      tbend[b] = sp[k].hi;
      tbof[sp[k].unit] = b;
    }
    pl->ntb[r] = ntb;
    pl->tb_base[r] = r > 0 ? pl->tb_base[r - 1] + pl->ntb[r - 1] : 0;
  }
  pl->ntbs = R > 0 ? pl->tb_base[R - 1] + pl->ntb[R - 1] : 0;
  free(sp), free(tbend);

  /* TB programs: primitives in pipeline order. */
  pl->tb_off = xcalloc((size_t)pl->ntbs + 1, sizeof(int));
  pl->tb_prims = xmalloc(((size_t)np + 1) * sizeof(int));
  for (int i = 0; i < np; i++) {
    pl->p[i].tb = tbof[unit[i]];
    pl->tb_off[pl->tb_base[pl->p[i].rank] + pl->p[i].tb + 1]++;
  }
  for (int b = 0; b < pl->ntbs; b++) pl->tb_off[b + 1] += pl->tb_off[b];
  int *fill = xmalloc(((size_t)pl->ntbs + 1) * sizeof *fill);
  memcpy(fill, pl->tb_off, ((size_t)pl->ntbs + 1) * sizeof *fill);
  for (int i = 0; i < np; i++) {
    int g = pl->tb_base[pl->p[i].rank] + pl->p[i].tb;
    pl->p[i].seq = fill[g] - pl->tb_off[g];
    pl->tb_prims[fill[g]++] = i;
  }
  free(fill), free(tbof), free(unit), free(up), free(lo), free(hi);

  /* Waits inside one TB are program order; the others need a flag. */
  int off = 0;
  pl->nflags = 0;
  for (int i = 0; i < np; i++) pl->p[i].flag = -1;
  for (int i = 0; i < np; i++) {
    Prim *p = &pl->p[i];
    int beg = p->wait_off, k = 0;
    p->wait_off = off;
    for (int j = beg; j < beg + p->nwaits; j++) {
      const Prim *q = &pl->p[pl->wait[j]];
      if (q->tb == p->tb && q->seq < p->seq) continue;
      pl->wait_full[off + k] = pl->wait_full[j];
      pl->wait[off + k++] = pl->wait[j];
    }
    p->nwaits = k;
    off += k;
  }
  pl->nwait = off;
  for (int i = 0; i < np; i++)
    for (int j = pl->p[i].wait_off; j < pl->p[i].wait_off + pl->p[i].nwaits; j++)
      if (pl->p[pl->wait[j]].flag < 0) pl->p[pl->wait[j]].flag = pl->nflags++;
  return RC_OK;
}
