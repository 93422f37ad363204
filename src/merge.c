/*
** merge.c — merged TBs (--tb merge).
**
** State-based allocation keeps a rank's connections that are busy in
** the same sub-pipeline on separate TBs, because the plan must not deadlock
** without buffering: a TB that sends a whole task and then receives one
** blocks forever in a ring. MSCCL's connections buffer two steps and one TB
** sends and receives in turn. So here: where two TBs of a rank both have
** work in a sub-pipeline, the merged TB runs that work in one micro-batch
** loop (Prim.join), a tile of each primitive in turn (loop_order), and such
** a loop holds at most one sending and one receiving primitive, like a fused
** primitive (and an MSCCL TB: one send peer, one receive peer). Every TB
** merges into the first earlier one it fits. The merged plan must pass the
** deadlock check with connections of two tiles (deadlock_buffered), which the
** executors then guarantee (Plan.buffered). When it fails, the merged TBs on
** its cycles are split again, no two of their parts merge again, and the
** merge is redone; after MERGE_ROUNDS failures, or merging nothing, the plan
** stays state-based.
**
** What two TBs did side by side one TB now does in turn, so a merged plan is
** slower wherever a TB's rate limits it (docs/journal/import.md): a policy to ask for,
** when TBs are scarcer than time, not the default.
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* A cell: what a TB does in one sub-pipeline. It has work there (C_HAS), so
   many sending and receiving primitives (2 bits each, stopping at 2), and
   whether that work comes from merged TBs and so shares one loop (C_JOIN). */
enum { C_HAS = 1, C_SND = 2, C_RCV = 8, C_JOIN = 32 };
#define SNDS(c) (((c) >> 1) & 3)
#define RCVS(c) (((c) >> 3) & 3)
#define MERGE_ROUNDS 64

typedef struct {
  int *tb, *ntb, *off, *prims; /* the state-based plan: per prim its TB, per rank TBs, TB programs */
  int *wait, *woff, *nw, nwait;  /* waits as lowered, before tb_waits drops those inside a TB */
  int *depth;                    /* per task: the longest chain of tasks it depends on in its sub-pipeline */
  int64_t *ban;                  /* pairs of state TBs (global ids a*ntbs+b, a < b) that never merge */
  int nban, capban;
} Merge;

static int ban_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static int banned(const Merge *m, int ntbs, int a, int b) {
  int64_t k = a < b ? (int64_t)a * ntbs + b : (int64_t)b * ntbs + a;
  return m->nban && bsearch(&k, m->ban, (size_t)m->nban, sizeof k, ban_cmp) != NULL;
}

/* A cell with primitive p added. */
static uint8_t cell_add(uint8_t c, const Prim *p) {
  if (p->cout >= 0 && SNDS(c) < 2) c += C_SND;
  if (p->cin >= 0 && RCVS(c) < 2) c += C_RCV;
  return c | C_HAS;
}

/*
** Inside a loop primitives run in the order of the sub-pipeline's own chains
** of dependencies (Merge.depth): a task's send before its receive, both after
** the receives its data waits for, then pipeline order. Every rank so pushes
** its tile before it waits for its neighbour's, as in an MSCCL step; in
** pipeline order alone, a ring's ranks but one would receive first and wait
** their way around the ring once per micro-batch.
*/
static int loop_key(const Prim *p, const Merge *m) {
  return p->cin >= 0 ? 2 * m->depth[p->tin] + 1 : 2 * m->depth[p->tout];
}

static void loop_order(Plan *pl, const Merge *m) {
  for (int b = 0; b < pl->ntbs; b++)
    for (int k = pl->tb_off[b], hi; k < pl->tb_off[b + 1]; k = hi) {
      int *loop = pl->tb_prims + k;
      for (hi = k + 1; hi < pl->tb_off[b + 1] && pl->p[pl->tb_prims[hi]].join; hi++) {
      }
      for (int i = 1; i < hi - k; i++) /* insertion sort: a loop is a few primitives */
        for (int j = i; j > 0 && loop_key(&pl->p[loop[j]], m) < loop_key(&pl->p[loop[j - 1]], m); j--) {
          int t = loop[j];
          loop[j] = loop[j - 1], loop[j - 1] = t;
        }
      for (int i = 0; i < hi - k; i++) pl->p[loop[i]].seq = k - pl->tb_off[b] + i, pl->p[loop[i]].join = i > 0;
    }
}

/* Waits and flags for the TBs as they are now, from the waits as lowered. */
static void rewait(Plan *pl, const Merge *m) {
  memcpy(pl->wait, m->wait, ((size_t)m->nwait + 1) * sizeof *pl->wait);
  for (int i = 0; i < pl->np; i++) pl->p[i].wait_off = m->woff[i], pl->p[i].nwaits = m->nw[i];
  tb_waits(pl);
}

/*
** One round: merge TBs greedily on every rank, set Prim.tb and Prim.join, and
** rebuild the TB programs and waits. Returns how many merges it made.
*/
static int merge_round(Plan *pl, const Merge *m) {
  int R = pl->prog->nranks, ns = pl->sched.nslots, nst = 0, maxnb = 0, merged = 0;
  for (int r = 0; r < R; r++) nst += m->ntb[r], maxnb = m->ntb[r] > maxnb ? m->ntb[r] : maxnb;
  uint8_t *cell = xmalloc((size_t)maxnb * ns + 1); /* cell[b * ns + s]: TB b (merged so far) in sub-pipeline s */
  int *newid = xmalloc(((size_t)maxnb + 1) * sizeof *newid), *lead = xmalloc(((size_t)maxnb + 1) * sizeof *lead);
  for (int r = 0, g0 = 0; r < R; g0 += m->ntb[r++]) {
    int nb = m->ntb[r];
    memset(cell, 0, (size_t)nb * ns);
    for (int b = 0; b < nb; b++) {
      lead[b] = b; /* the TB it merged into */
      for (int k = m->off[g0 + b]; k < m->off[g0 + b + 1]; k++) {
        const Prim *p = &pl->p[m->prims[k]];
        cell[(size_t)b * ns + p->slot] = cell_add(cell[(size_t)b * ns + p->slot], p);
      }
    }
    for (int j = 1; j < nb; j++) {
      const int *pj = m->prims + m->off[g0 + j];
      int nj = m->off[g0 + j + 1] - m->off[g0 + j];
      const uint8_t *cj = cell + (size_t)j * ns;
      for (int i = 0; i < j; i++) {
        if (lead[i] != i) continue;
        uint8_t *ci = cell + (size_t)i * ns;
        int ok = 1;
        for (int k = 0; k < nj && ok; k++) {
          uint8_t c = ci[pl->p[pj[k]].slot], d = cj[pl->p[pj[k]].slot];
          ok = !(c & C_HAS) || (SNDS(c) + SNDS(d) <= 1 && RCVS(c) + RCVS(d) <= 1);
        }
        for (int q = i; q < j && ok; q++)
          ok = lead[q] != i || !banned(m, nst, g0 + q, g0 + j);
        if (!ok) continue;
        for (int k = 0; k < nj; k++) {
          int s = pl->p[pj[k]].slot;
          uint8_t c = ci[s];
          if (k == 0 || s != pl->p[pj[k - 1]].slot)
            ci[s] = (uint8_t)((c + (cj[s] & ~C_HAS)) | C_HAS | (c & C_HAS ? C_JOIN : 0));
        }
        lead[j] = i;
        merged++;
        break;
      }
    }
    /* Merged TBs are numbered in order of their first state TB. */
    int n = 0;
    for (int b = 0; b < nb; b++) newid[b] = lead[b] == b ? n++ : -1;
    pl->ntb[r] = n;
    pl->tb_base[r] = r > 0 ? pl->tb_base[r - 1] + pl->ntb[r - 1] : 0;
    for (int b = 0; b < nb; b++)
      for (int k = m->off[g0 + b]; k < m->off[g0 + b + 1]; k++) {
        Prim *p = &pl->p[m->prims[k]];
        p->tb = newid[lead[b]];
        p->join = (cell[(size_t)lead[b] * ns + p->slot] & C_JOIN) != 0;
      }
  }
  pl->ntbs = R > 0 ? pl->tb_base[R - 1] + pl->ntb[R - 1] : 0;
  tb_programs(pl, NULL);
  /* A loop is a TB's primitives in one sub-pipeline: all but its first join. */
  for (int b = 0; b < pl->ntbs; b++)
    for (int k = pl->tb_off[b]; k < pl->tb_off[b + 1]; k++) {
      Prim *p = &pl->p[pl->tb_prims[k]];
      p->join = p->join && k > pl->tb_off[b] && pl->p[pl->tb_prims[k - 1]].slot == p->slot;
    }
  loop_order(pl, m);
  rewait(pl, m);
  free(cell), free(newid), free(lead);
  return merged;
}

/* Back to the state-based plan. */
static void unmerge(Plan *pl, const Merge *m) {
  int R = pl->prog->nranks;
  for (int r = 0; r < R; r++) pl->ntb[r] = m->ntb[r], pl->tb_base[r] = r > 0 ? pl->tb_base[r - 1] + m->ntb[r - 1] : 0;
  pl->ntbs = R > 0 ? pl->tb_base[R - 1] + pl->ntb[R - 1] : 0;
  for (int i = 0; i < pl->np; i++) pl->p[i].tb = m->tb[i], pl->p[i].join = 0;
  tb_programs(pl, NULL);
  rewait(pl, m);
}

/* The TB a state-based TB's primitives are in now. */
static int now_tb(const Plan *pl, const Merge *m, int g) { return pl->p[m->prims[m->off[g]]].tb; }

/* Ban every pair of state TBs merged into a TB on a cycle; returns how many
   pairs are new. */
static int ban_cycles(const Plan *pl, Merge *m, const char *cycle) {
  int R = pl->prog->nranks, nst = 0, added = 0;
  for (int r = 0; r < R; r++) nst += m->ntb[r];
  for (int r = 0, g0 = 0; r < R; g0 += m->ntb[r++])
    for (int a = 0; a < m->ntb[r]; a++)
      for (int b = a + 1; b < m->ntb[r]; b++) {
        int t = now_tb(pl, m, g0 + a);
        if (t != now_tb(pl, m, g0 + b) || !cycle[pl->tb_base[r] + t] || banned(m, nst, g0 + a, g0 + b)) continue;
        VEC_PUSH(m->ban, m->nban, m->capban, (int64_t)(g0 + a) * nst + g0 + b);
        added++;
      }
  if (m->nban) qsort(m->ban, (size_t)m->nban, sizeof *m->ban, ban_cmp);
  return added;
}

void merge_run(Plan *pl) {
  int np = pl->np, R = pl->prog->nranks;
  /* Only a plan that is deadlock-free as it is: otherwise the compiler first
     drops the fusions that block it (compile.c), as for state-based TBs. */
  if (deadlock_check(pl, 3, NULL, NULL, NULL) != RC_OK) return;
  Merge m = {0};
  m.tb = xmalloc(((size_t)np + 1) * sizeof(int));
  m.ntb = xmalloc(((size_t)R + 1) * sizeof(int));
  m.off = xmalloc(((size_t)pl->ntbs + 1) * sizeof(int));
  m.prims = xmalloc(((size_t)np + 1) * sizeof(int));
  for (int i = 0; i < np; i++) m.tb[i] = pl->p[i].tb;
  memcpy(m.ntb, pl->ntb, (size_t)R * sizeof(int));
  memcpy(m.off, pl->tb_off, ((size_t)pl->ntbs + 1) * sizeof(int));
  memcpy(m.prims, pl->tb_prims, (size_t)np * sizeof(int));
  m.nwait = pl->nwait;
  m.wait = xmalloc(((size_t)pl->nwait + 1) * sizeof(int));
  m.woff = xmalloc(((size_t)np + 1) * sizeof(int));
  m.nw = xmalloc(((size_t)np + 1) * sizeof(int));
  memcpy(m.wait, pl->wait, ((size_t)pl->nwait + 1) * sizeof(int));
  for (int i = 0; i < np; i++) m.woff[i] = pl->p[i].wait_off, m.nw[i] = pl->p[i].nwaits;
  const Dag *d = &pl->dag;
  m.depth = xcalloc((size_t)d->n + 1, sizeof(int));
  for (int k = 0; k < d->n; k++) { /* in pipeline order, so predecessors come first */
    int t = pl->sched.order[k];
    for (int j = d->pred_off[t]; j < d->pred_off[t + 1]; j++)
      if (pl->sched.slot[d->pred[j]] == pl->sched.slot[t] && m.depth[d->pred[j]] + 1 > m.depth[t])
        m.depth[t] = m.depth[d->pred[j]] + 1;
  }
  char *cycle = NULL;
  for (int round = 0; round < MERGE_ROUNDS && merge_round(pl, &m) > 0; round++) {
    cycle = xrealloc(cycle, (size_t)pl->ntbs + 1);
    memset(cycle, 0, (size_t)pl->ntbs + 1);
    if (deadlock_buffered(pl, BUFFERED_MICRO, cycle, NULL) == RC_OK) {
      pl->buffered = 1;
      break;
    }
    if (ban_cycles(pl, &m, cycle) == 0) break; /* cycles that no merge made */
  }
  if (!pl->buffered) unmerge(pl, &m);
  free(m.tb), free(m.ntb), free(m.off), free(m.prims), free(m.wait), free(m.woff), free(m.nw), free(m.depth);
  free(m.ban), free(cycle);
}
