/*
** lend.c — local copies lent to TBs that only wait (state-based TBs).
**
** A TB whose primitives are all direct receives that no other TB waits
** for only waits while the peers' puts land. A local copy can run there
** first, for free, when it waits for nothing, nothing waits for it, no
** other primitive of its rank touches its destination and none writes its
** source: then when it runs does not matter. A copy-send's copy may go too; its send then reads the
** same source. Out of place on two ranks this takes all-gather's copy of the
** own chunk off the pushing TBs (a block that also copies locally pushes
** half as fast: tools/probes/probe-push.cu,
** docs/journal/gpu-2026-11-30.md), and all-to-all's own
** block off a TB of its own. (Where the runtime cannot put, the host TB's
** receives drain FIFOs after the copy: slower, never stuck.)
*/
#include <stdlib.h>

#include "core.h"

static int lendable(const Plan *pl, int i) {
  const Prim *p = &pl->p[i];
  return (p->kind == PR_COPY || (p->kind == PR_CS && p->direct)) && !p->nwaits && p->flag < 0 && prim_alone(pl, p, 1, 1);
}

/* A copy-send in two: the send stays, its copy becomes a prim of its own (returned). */
static int split_cs(Plan *pl, int i, int *cap) {
  Prim c = pl->p[i];
  c.kind = PR_COPY, c.tout = c.tin, c.cout = -1, c.direct = 0;
  VEC_PUSH(pl->p, pl->np, *cap, c);
  Prim *p = &pl->p[i];
  p->kind = PR_SEND, p->tin = -1;
  pl->task_send[c.tin] = pl->task_recv[c.tin] = pl->np - 1;
  return pl->np - 1;
}

void lend_run(Plan *pl) {
  int R = pl->prog->nranks, cap = pl->np, lent = 0;
  int *key = xcalloc((size_t)pl->np * 2 + 1, sizeof *key); /* order in a TB: lent copies first */
  char *gone = xcalloc((size_t)pl->ntbs + 1, 1);       /* TBs left empty */
  int *left = xmalloc(((size_t)pl->ntbs + 1) * sizeof *left); /* primitives a TB keeps */
  for (int g = 0; g < pl->ntbs; g++) left[g] = pl->tb_off[g + 1] - pl->tb_off[g];
  for (int r = 0; r < R; r++) {
    int host = -1;
    for (int b = 0; b < pl->ntb[r] && host < 0; b++) {
      int g = pl->tb_base[r] + b;
      host = b;
      for (int k = pl->tb_off[g]; k < pl->tb_off[g + 1]; k++) {
        const Prim *q = &pl->p[pl->tb_prims[k]];
        if (q->kind != PR_RECV || !q->direct || q->flag >= 0) host = -1;
      }
    }
    for (int k = pl->rank_off[r]; k < pl->rank_off[r + 1] && host >= 0; k++) {
      int i = pl->rank_prims[k];
      if (pl->p[i].tb == host || !lendable(pl, i)) continue;
      Prim *p = &pl->p[i];
      if (p->kind == PR_CS) i = split_cs(pl, i, &cap);
      else if (--left[pl->tb_base[r] + p->tb] == 0) {
        gone[pl->tb_base[r] + p->tb] = 1;
      }
      pl->p[i].tb = host, key[i] = -1, lent++;
    }
  }
  free(left);
  if (lent) plan_rank_lists(pl), tb_drop(pl, gone, key); /* lent copies were appended */
  free(key), free(gone);
}
