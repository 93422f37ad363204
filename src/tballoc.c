/*
** tballoc.c — thread-block allocation.
**
** A TB runs its primitives one after another, each over every micro-batch
** (task-level execution). Connections stay on one TB per rank, so both ends
** see a connection's tasks in the same order; a fused primitive ties its two
** connections together. Such a group of connections (or a rank's local
** copies, which use none) is a unit; its activity is the set of sub-pipelines
** in which it has work.
**
** State-based (the paper's §4.4): units whose activities never intersect share
** a TB. Units are coloured greedily in order of their first activity, each
** taking the lowest TB that is idle in all of its sub-pipelines. A TB runs
** its primitives in pipeline order whatever units they come from.
** Connection-based (MSCCL): one TB per unit.
**
** Manual: the TBs and steps the program names (see by_hint).
**
** Merge: state-based, then TBs of a rank merged where connections that
** buffer two tiles keep the plan deadlock-free (see merge).
**
** Then each TB's program is its primitives in order; waits between
** primitives of one TB disappear (program order), the rest get a flag.
** State-based plans then lend idle TBs local copies (see lend), and with
** Options.ce the copy engine takes what needs no TB (see offload), and with
** Options.pull receives read what their sends would have put (see pull_in),
** and pulled reductions put what one send would forward (see put_on).
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"

typedef struct {
  int unit, first;
} Unit;

static int unit_cmp(const void *a, const void *b) {
  const Unit *x = a, *y = b;
  if (x->first != y->first) return x->first - y->first;
  return x->unit - y->unit;
}

/* State-based or connection-based: TB of every primitive by unit activity. */
static void by_activity(Plan *pl, TbPolicy pol) {
  int R = pl->prog->nranks, nc = pl->nconn, np = pl->np;
  /* Unit ids: 2*conn (send end), 2*conn+1 (receive end), 2*nconn + rank (its local copies). */
  int nu = 2 * nc + R;
  int *up = xmalloc(((size_t)nu + 1) * sizeof *up);
  for (int i = 0; i < nu; i++) up[i] = i;
  int *unit = xmalloc(((size_t)np + 1) * sizeof *unit);
  for (int i = 0; i < np; i++) {
    const Prim *p = &pl->p[i];
    int a = p->cin >= 0 ? 2 * p->cin + 1 : -1, b = p->cout >= 0 ? 2 * p->cout : -1;
    if (a >= 0 && b >= 0) up[uf_find(up, a)] = uf_find(up, b);
    unit[i] = a >= 0 ? a : b >= 0 ? b : 2 * nc + p->rank;
  }
  /* Each unit's active sub-pipelines, as a list per unit (CSR, sorted). */
  int *first = xmalloc(((size_t)nu + 1) * sizeof *first), *uoff = xcalloc((size_t)nu + 2, sizeof *uoff);
  for (int i = 0; i < nu; i++) first[i] = -1;
  for (int i = 0; i < np; i++) {
    int u = unit[i] = uf_find(up, unit[i]);
    if (first[u] < 0) first[u] = pl->p[i].slot; /* prims are in pipeline order */
    uoff[u + 2]++;
  }
  for (int i = 0; i < nu; i++) uoff[i + 2] += uoff[i + 1];
  int *uslots = xmalloc(((size_t)np + 1) * sizeof *uslots);
  for (int i = 0; i < np; i++) uslots[uoff[unit[i] + 1]++] = pl->p[i].slot;

  int ns = pl->sched.nslots;
  int *tbof = xmalloc(((size_t)nu + 1) * sizeof *tbof);
  pl->ntb = xcalloc((size_t)R + 1, sizeof(int));
  pl->tb_base = xcalloc((size_t)R + 1, sizeof(int));
  Unit *us = NULL;
  int nus = 0, capus = 0, capbusy = 0;
  int *busy = NULL; /* busy[b * ns + s]: the unit stamp using TB b in sub-pipeline s */
  for (int r = 0; r < R; r++) {
    nus = 0;
    for (int k = pl->rank_off[r]; k < pl->rank_off[r + 1]; k++) {
      int u = unit[pl->rank_prims[k]];
      if (first[u] >= 0) {
        VEC_PUSH(us, nus, capus, ((Unit){u, first[u]}));
        first[u] = -1 - first[u]; /* listed once */
      }
    }
    if (nus) qsort(us, (size_t)nus, sizeof *us, unit_cmp);
    int ntb = 0;
    for (int k = 0; k < nus; k++) {
      int u = us[k].unit, b = -1;
      for (int j = 0; j < ntb && b < 0 && pol == TB_STATE; j++) {
        b = j;
        for (int q = uoff[u]; q < uoff[u + 1]; q++)
          if (busy[(size_t)j * ns + uslots[q]] == r) b = -1;
      }
      if (b < 0) {
        b = ntb++;
        if ((size_t)ntb * ns > (size_t)capbusy) {
          int old = capbusy;
          capbusy = ntb * ns * 2;
          busy = xrealloc(busy, (size_t)capbusy * sizeof *busy);
          for (int q = old; q < capbusy; q++) busy[q] = -1;
        }
        for (int q = b * ns; q < (b + 1) * ns; q++) busy[q] = -1;
      }
      for (int q = uoff[u]; q < uoff[u + 1]; q++) busy[(size_t)b * ns + uslots[q]] = r;
      tbof[u] = b;
    }
    pl->ntb[r] = ntb;
    pl->tb_base[r] = r > 0 ? pl->tb_base[r - 1] + pl->ntb[r - 1] : 0;
  }
  pl->ntbs = R > 0 ? pl->tb_base[R - 1] + pl->ntb[R - 1] : 0;
  for (int i = 0; i < np; i++) pl->p[i].tb = tbof[unit[i]];
  free(us), free(busy), free(first), free(uoff), free(uslots), free(tbof), free(unit), free(up);
}

/*
** Manual placement: every transfer names its TB and step on both ranks (an
** imported file's own schedule, or MSCCLang-style sendtb/recvtb). A
** connection still belongs to one TB on each side, or its order is lost.
*/
static rcStatus by_hint(Plan *pl, int *key, Err *e) {
  const Program *pg = pl->prog;
  int R = pg->nranks, np = pl->np;
  char at[300];
  for (int i = 0; i < np; i++) {
    Prim *p = &pl->p[i];
    int t = p->tin >= 0 ? p->tin : p->tout;
    const TbHint *h = pg->hint ? &pg->hint[pl->dag.t[t].xf] : NULL;
    int recv_side = p->cin >= 0;
    int tb = !h ? -1 : recv_side ? h->rtb : h->stb, step = !h ? -1 : recv_side ? h->rstep : h->sstep;
    if (tb < 0 || step < 0)
      return err_set(e, RC_EINVAL, "%s: manual thread-block placement needs a %s TB and step for this transfer",
                     plan_task_where(pl, t, at, sizeof at), recv_side ? "receiving" : "sending");
    if (tb >= MAX_TBS)
      return err_set(e, RC_EINVAL, "%s: %s TB %d out of range (at most %d TBs per rank)",
                     plan_task_where(pl, t, at, sizeof at), recv_side ? "receiving" : "sending", tb, MAX_TBS);
    p->tb = tb, key[i] = step;
  }
  int *end[2];
  for (int k = 0; k < 2; k++) {
    end[k] = xmalloc(((size_t)pl->nconn + 1) * sizeof(int));
    for (int c = 0; c < pl->nconn; c++) end[k][c] = -1;
  }
  rcStatus rc = RC_OK;
  for (int i = 0; i < np && rc == RC_OK; i++) {
    const Prim *p = &pl->p[i];
    const int c[2] = {p->cout, p->cin};
    for (int k = 0; k < 2 && rc == RC_OK; k++) {
      if (c[k] < 0) continue;
      if (end[k][c[k]] < 0) end[k][c[k]] = p->tb;
      else if (end[k][c[k]] != p->tb) {
        const Conn *cn = &pl->conn[c[k]];
        rc = err_set(e, RC_EINVAL, "%s: rank %d %s rank %d (channel %d) on two TBs (tb %d and tb %d); a "
                     "connection belongs to one TB", plan_task_where(pl, k ? p->tin : p->tout, at, sizeof at),
                     p->rank, k ? "receives from" : "sends to", k ? cn->src : cn->dst, cn->chan, end[k][c[k]], p->tb);
      }
    }
  }
  free(end[0]), free(end[1]);
  if (rc != RC_OK) return rc;
  pl->ntb = xcalloc((size_t)R + 1, sizeof(int));
  pl->tb_base = xcalloc((size_t)R + 1, sizeof(int));
  for (int i = 0; i < np; i++)
    if (pl->p[i].tb + 1 > pl->ntb[pl->p[i].rank]) pl->ntb[pl->p[i].rank] = pl->p[i].tb + 1;
  for (int r = 1; r <= R; r++) pl->tb_base[r] = pl->tb_base[r - 1] + pl->ntb[r - 1];
  pl->ntbs = pl->tb_base[R];
  return RC_OK;
}

static const int *sort_key;
static int by_key(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  if (sort_key[x] != sort_key[y]) return sort_key[x] < sort_key[y] ? -1 : 1;
  return x - y; /* then pipeline order */
}

/* TB programs from Prim.tb: pipeline order, or `key` first when not NULL. */
static void tb_programs(Plan *pl, const int *key) {
  int np = pl->np;
  free(pl->tb_off), free(pl->tb_prims);
  pl->tb_off = xcalloc((size_t)pl->ntbs + 1, sizeof(int));
  pl->tb_prims = xmalloc(((size_t)np + 1) * sizeof(int));
  for (int i = 0; i < np; i++) pl->tb_off[pl->tb_base[pl->p[i].rank] + pl->p[i].tb + 1]++;
  for (int b = 0; b < pl->ntbs; b++) pl->tb_off[b + 1] += pl->tb_off[b];
  int *fill = xmalloc(((size_t)pl->ntbs + 1) * sizeof *fill);
  memcpy(fill, pl->tb_off, ((size_t)pl->ntbs + 1) * sizeof *fill);
  for (int i = 0; i < np; i++) pl->tb_prims[fill[pl->tb_base[pl->p[i].rank] + pl->p[i].tb]++] = i;
  sort_key = key;
  for (int b = 0; b < pl->ntbs; b++) {
    int *seg = pl->tb_prims + pl->tb_off[b], len = pl->tb_off[b + 1] - pl->tb_off[b];
    if (key) qsort(seg, (size_t)len, sizeof *seg, by_key);
    for (int k = 0; k < len; k++) pl->p[seg[k]].seq = k;
  }
  free(fill);
}

/* Waits inside one TB are program order; the others need a flag. */
static void tb_waits(Plan *pl) {
  int off = 0, np = pl->np;
  pl->nflags = 0;
  for (int i = 0; i < np; i++) pl->p[i].flag = -1;
  for (int i = 0; i < np; i++) {
    Prim *p = &pl->p[i];
    int beg = p->wait_off, k = 0;
    p->wait_off = off;
    for (int j = beg; j < beg + p->nwaits; j++) {
      const Prim *q = &pl->p[pl->wait[j]];
      if (q->tb == p->tb && q->seq < p->seq) continue;
      pl->wait[off + k++] = pl->wait[j];
    }
    p->nwaits = k;
    off += k;
  }
  pl->nwait = off;
  for (int i = 0; i < np; i++)
    for (int j = pl->p[i].wait_off; j < pl->p[i].wait_off + pl->p[i].nwaits; j++)
      if (pl->p[pl->wait[j]].flag < 0) pl->p[pl->wait[j]].flag = pl->nflags++;
}

/*
** Merge. State-based allocation keeps a rank's connections that are busy in
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
** slower wherever a TB's rate limits it (BENCHMARKS.md): a policy to ask for,
** when TBs are scarcer than time, not the default.
*/
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

static void merge(Plan *pl) {
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

/*
** Lending. A TB whose primitives are all direct receives that no other TB
** waits for only waits while the peers' puts land. A local copy can run there first, for free, when it
** waits for nothing, nothing waits for it, no other primitive of its rank
** touches its destination and none writes its source: then when it runs
** does not matter. A copy-send's copy may go too; its send then reads the
** same source. Out of place on two ranks this takes all-gather's copy of the
** own chunk off the pushing TBs (a block that also copies locally pushes
** half as fast: tools/probe-push.cu, BENCHMARKS.md), and all-to-all's own
** block off a TB of its own. (Where the runtime cannot put, the host TB's
** receives drain FIFOs after the copy: slower, never stuck.)
*/
/* Whether p reads (or writes, when `writes`) chunks [idx, idx + n) of buf. */
static int prim_touches(const Prim *p, int buf, int idx, int n, int writes) {
  int k = p->kind;
  int rd = k == PR_SEND || k == PR_CS || k == PR_COPY || k == PR_REDUCE;
  int op = k == PR_RRC || k == PR_RRCS || k == PR_RRS || k == PR_REDUCE;
  int wr = k != PR_SEND && k != PR_RRS;
#define MEETS(b, i) ((b) == buf && (i) < idx + n && idx < (i) + p->cnt)
  return (wr && MEETS(p->wbuf, p->widx)) || (!writes && ((rd && MEETS(p->rbuf, p->ridx)) || (op && MEETS(p->ubuf, p->uidx))));
#undef MEETS
}

/* Whether no other primitive of p's rank writes what p reads (`reads`), nor
   touches what p writes there (`writes`). */
static int alone(const Plan *pl, const Prim *p, int reads, int writes) {
  for (int k = pl->rank_off[p->rank]; k < pl->rank_off[p->rank + 1]; k++) {
    const Prim *q = &pl->p[pl->rank_prims[k]];
    if (q != p && ((writes && prim_touches(q, p->wbuf, p->widx, p->cnt, 0)) ||
                   (reads && prim_touches(q, p->rbuf, p->ridx, p->cnt, 1))))
      return 0;
  }
  return 1;
}

/* Whether b comes after a on their rank: it waits for a, or follows it in a's TB. */
static int follows(const Plan *pl, const Prim *a, const Prim *b) {
  if (a->tb == b->tb && a->seq < b->seq) return 1;
  for (int j = b->wait_off; j < b->wait_off + b->nwaits; j++)
    if (&pl->p[pl->wait[j]] == a) return 1;
  return 0;
}

/* Whether every other primitive of q's rank that touches what q writes
   runs after q: later in q's TB, or waiting for q's flag. */
static int first_there(const Plan *pl, const Prim *q) {
  for (int k = pl->rank_off[q->rank]; k < pl->rank_off[q->rank + 1]; k++) {
    const Prim *r = &pl->p[pl->rank_prims[k]];
    if (r != q && prim_touches(r, q->wbuf, q->widx, q->cnt, 0) && !follows(pl, q, r)) return 0;
  }
  return 1;
}

static int lendable(const Plan *pl, int i) {
  const Prim *p = &pl->p[i];
  return (p->kind == PR_COPY || (p->kind == PR_CS && p->direct)) && !p->nwaits && p->flag < 0 && alone(pl, p, 1, 1);
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

/* TB numbers without the TBs `gone` marks (by global id), then the TB
   programs, ordered by `key`. Rank lists must be current. */
static void drop_tbs(Plan *pl, const char *gone, const int *key) {
  int R = pl->prog->nranks;
  int *renum = xmalloc(((size_t)pl->ntbs + 1) * sizeof *renum);
  for (int r = 0; r < R; r++) {
    int n = 0;
    for (int b = 0; b < pl->ntb[r]; b++) renum[b] = gone[pl->tb_base[r] + b] ? -1 : n++;
    for (int k = pl->rank_off[r]; k < pl->rank_off[r + 1]; k++) pl->p[pl->rank_prims[k]].tb = renum[pl->p[pl->rank_prims[k]].tb];
    pl->ntb[r] = n;
  }
  for (int r = 1; r < R; r++) pl->tb_base[r] = pl->tb_base[r - 1] + pl->ntb[r - 1];
  pl->ntbs = R > 0 ? pl->tb_base[R - 1] + pl->ntb[R - 1] : 0;
  tb_programs(pl, key);
  free(renum);
}

static void lend(Plan *pl) {
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
  if (lent) plan_rank_lists(pl), drop_tbs(pl, gone, key); /* lent copies were appended */
  free(key), free(gone);
}

/*
** Offload (Options.ce). What lending could run anywhere can run on the copy
** engine instead, with no TB at all: a local copy, and a direct send (or
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
static void ce_add(Plan *pl, int *cap, int task, const Prim *from, const Prim *to, int flag, int after) {
  CeCopy c = {.task = task, .src = from->rank, .dst = to->rank, .ridx = from->ridx, .widx = to->widx,
              .cnt = from->cnt, .flag = flag, .after = after, .rbuf = from->rbuf, .wbuf = to->wbuf};
  VEC_PUSH(pl->ce, pl->nce, *cap, c);
}

/* A plain receive of what p puts, that waits for nothing and that nothing
   waits for, whose destination nothing else of its rank touches; or NULL. */
static const Prim *plain_recv(const Plan *pl, const Prim *p) {
  const Prim *q = &pl->p[pl->task_recv[p->tout]];
  return q->kind == PR_RECV && !q->nwaits && q->flag < 0 && !q->join && alone(pl, q, 0, 1) ? q : NULL;
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

/* Flags nothing waits for any more are dropped, the others renumbered. */
static void renumber_flags(Plan *pl) {
  int *to = xmalloc(((size_t)pl->nflags + 1) * sizeof *to), n = 0;
  for (int f = 0; f < pl->nflags; f++) to[f] = -1;
  for (int i = 0; i < pl->np; i++)
    for (int j = pl->p[i].wait_off; j < pl->p[i].wait_off + pl->p[i].nwaits; j++) to[pl->p[pl->wait[j]].flag] = 0;
  for (int f = 0; f < pl->nflags; f++)
    if (to[f] == 0) to[f] = n++;
  for (int i = 0; i < pl->np; i++)
    if (pl->p[i].flag >= 0) pl->p[i].flag = to[pl->p[i].flag];
  pl->nflags = n;
  free(to);
}

/* The primitives `out` marks leave the TBs (nothing waits for them); TBs
   left empty go, and flags and connections nothing uses any more (with
   their FIFOs). */
static void drop_prims(Plan *pl, const char *out) {
  int np = pl->np;
  /* A primitive joined to a removed one's micro-batch loop opens its own. */
  for (int k = 0; k + 1 < pl->tb_off[pl->ntbs]; k++)
    if (out[pl->tb_prims[k]] && pl->p[pl->tb_prims[k + 1]].join && pl->p[pl->tb_prims[k + 1]].seq > 0)
      pl->p[pl->tb_prims[k + 1]].join = 0;
  /* Renumber the primitives that stay; waits never name a removed one (nothing waits for it). */
  int *to = xmalloc(((size_t)np + 1) * sizeof *to), *key = xmalloc(((size_t)np + 1) * sizeof *key), n = 0;
  char *gone = xcalloc((size_t)pl->ntbs + 1, 1);
  for (int g = 0; g < pl->ntbs; g++) gone[g] = 1;
  for (int i = 0; i < np; i++) {
    to[i] = out[i] ? -1 : n;
    if (out[i]) continue;
    gone[pl->tb_base[pl->p[i].rank] + pl->p[i].tb] = 0;
    key[n] = pl->p[i].seq, pl->p[n++] = pl->p[i];
  }
  pl->np = n;
  /* The waits of those that stay, renumbered and packed again: a list lies
     in [wait_off, wait_off + nwaits) and may have shrunk (pull_in), and the
     lists lie in primitive order, so packing never overtakes what it reads. */
  int nw = 0;
  for (int i = 0; i < n; i++) {
    Prim *p = &pl->p[i];
    int beg = p->wait_off;
    p->wait_off = nw;
    for (int j = beg; j < beg + p->nwaits; j++) pl->wait[nw++] = to[pl->wait[j]];
  }
  pl->nwait = nw;
  for (int t = 0; t < pl->dag.n; t++) {
    pl->task_send[t] = pl->task_send[t] >= 0 ? to[pl->task_send[t]] : -1;
    pl->task_recv[t] = pl->task_recv[t] >= 0 ? to[pl->task_recv[t]] : -1;
  }
  int *cto = xmalloc(((size_t)pl->nconn + 1) * sizeof *cto), nc = 0;
  for (int c = 0; c < pl->nconn; c++) cto[c] = -1;
  for (int i = 0; i < n; i++) {
    if (pl->p[i].cin >= 0) cto[pl->p[i].cin] = 0;
    if (pl->p[i].cout >= 0) cto[pl->p[i].cout] = 0;
  }
  for (int c = 0; c < pl->nconn; c++)
    if (cto[c] == 0) cto[c] = nc, pl->conn[nc++] = pl->conn[c];
  for (int i = 0; i < n; i++) {
    if (pl->p[i].cin >= 0) pl->p[i].cin = cto[pl->p[i].cin];
    if (pl->p[i].cout >= 0) pl->p[i].cout = cto[pl->p[i].cout];
  }
  pl->nconn = nc;
  plan_rank_lists(pl);
  drop_tbs(pl, gone, key);
  renumber_flags(pl);
  free(to), free(key), free(gone), free(cto);
}

static void offload(Plan *pl) {
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
        int plain = plain_recv(pl, p) != NULL;
        fed = q->kind == PR_RRC && first_there(pl, q);
        if (!p->direct || !(plain || fed) || !alone(pl, p, 1, p->kind == PR_CS)) continue;
        if (plain) out[q - pl->p] = 1;
      } else if (p->kind != PR_COPY || !alone(pl, p, 1, 1)) {
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
    if (out[i] || p->kind != PR_SEND || !p->direct || p->flag >= 0 || p->join || !(q = plain_recv(pl, p)) ||
        !(w = sole_writer(pl, p)) || out[w - pl->p])
      continue;
    Prim *wr = &pl->p[w - pl->p];
    if (wr->cepost < 0) wr->cepost = pl->nceposts++;
    ce_add(pl, &cap, p->tout, p, q, -1, wr->cepost);
    out[i] = out[q - pl->p] = 1;
  }
  if (pl->nce) drop_prims(pl, out);
  free(out);
}

/*
** Pull (Options.pull). A send that waits for nothing and that nothing waits
** for has nothing to do that its receiver cannot do, when what it reads
** holds the call's input while the receiver reads it: the receive reads the
** sender's buffer itself (NCCL's DirectRead) and the send goes. A plain
** receive then copies, a reduction reduces, what it reads over the link, in
** one pass: no FIFO, no flag per piece, no landing buffer, and its own waits
** still order it on its rank. A kernel starts a pull once the sender's
** kernel runs the call, and a kernel ends only when every block that pulls
** from it is done (cuda.cuh). On 2xH200 a probe's one-shot all-reduce whose
** 16 blocks pull moved 98-307 GB/s from 1 to 32 MiB (tools/probe-pull.cu),
** and in the runtime 3-11% more than 32 pushing blocks from 2 to 8 MiB
** (BENCHMARKS.md).
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
/* Whether the receive q may read what send p reads, from p's rank. */
static int pullable(const Plan *pl, const Prim *p, const Prim *q) {
  for (int k = pl->rank_off[p->rank]; k < pl->rank_off[p->rank + 1]; k++) {
    const Prim *w = &pl->p[pl->rank_prims[k]];
    if (w == p || !prim_touches(w, p->rbuf, p->ridx, p->cnt, 1)) continue;
    if (w->cin < 0) return 0;
    const Prim *s = &pl->p[pl->task_send[w->tin]];
    if (s->rank != q->rank || !follows(pl, q, s)) return 0;
  }
  /* Only such writers wait for p. */
  for (int i = 0; i < pl->np && p->flag >= 0; i++)
    for (int j = pl->p[i].wait_off; j < pl->p[i].wait_off + pl->p[i].nwaits; j++)
      if (&pl->p[pl->wait[j]] == p && !prim_touches(&pl->p[i], p->rbuf, p->ridx, p->cnt, 1)) return 0;
  return 1;
}

/*
** Then a pulled reduction whose result one send forwards, that waits for it
** alone, to a plain receive (plain_recv) puts it there itself as it stores
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
        g->widx < x->ridx + x->cnt && !follows(pl, x, q))
      return 1;
  }
  return 0;
}

static void put_on(Plan *pl) {
  int R = pl->prog->nranks, n = 0;
  char *out = xcalloc((size_t)pl->np + 1, 1);
  int *left = xcalloc((size_t)R + 1, sizeof *left); /* a rank keeps a primitive (pull_in) */
  for (int r = 0; r < R; r++) left[r] = pl->rank_off[r + 1] - pl->rank_off[r];
  for (int i = 0; i < pl->np; i++) {
    const Prim *f = &pl->p[i], *q = NULL, *g;
    if (f->kind != PR_SEND || f->flag >= 0 || f->join || f->nwaits > 1 || !(g = plain_recv(pl, f)) || left[g->rank] < 2)
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
  if (n) drop_prims(pl, out);
  free(out), free(left);
}

static void pull_in(Plan *pl) {
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
     lists shrink where they lie; drop_prims packs them). */
  for (int i = 0; i < pl->np && pl->npulls; i++) {
    Prim *w = &pl->p[i];
    int k = 0;
    for (int j = w->wait_off; j < w->wait_off + w->nwaits; j++)
      if (!out[pl->wait[j]]) pl->wait[w->wait_off + k++] = pl->wait[j];
    w->nwaits = k;
  }
  if (pl->npulls) drop_prims(pl, out), put_on(pl);
  free(out);
}

rcStatus tb_assign(Plan *pl, TbPolicy pol, Err *e) {
  int *key = NULL; /* manual: order inside a TB, before pipeline order */
  if (pol == TB_MANUAL) {
    key = xcalloc((size_t)pl->np + 1, sizeof *key);
    rcStatus rc = by_hint(pl, key, e);
    if (rc != RC_OK) return free(key), rc;
  } else {
    by_activity(pl, pol == TB_CONN ? TB_CONN : TB_STATE);
  }
  tb_programs(pl, key);
  free(key);
  tb_waits(pl);
  pl->buffered = pol == TB_MANUAL;
  if (pol == TB_MERGE) merge(pl);
  if (pol == TB_STATE) lend(pl);
  if (pl->opt.ce) offload(pl);
  if (pl->opt.pull) pull_in(pl);
  return RC_OK;
}
