/*
** tballoc.c — thread-block allocation, and the tools the passes after it
** rework TB programs with.
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
** Merge: state-based here; merge.c then merges TBs of a rank.
**
** Then each TB's program is its primitives in order; waits between
** primitives of one TB disappear (program order), the rest get a flag.
** The passes after this one rework the TBs: merge.c, lend.c, offload.c,
** pull.c.
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
void tb_programs(Plan *pl, const int *key) {
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
void tb_waits(Plan *pl) {
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
  return RC_OK;
}

/* ------------------------------------------------- reworking TB programs */

/* TB numbers without the TBs `gone` marks (by global id), then the TB
   programs, ordered by `key`. Rank lists must be current. */
void tb_drop(Plan *pl, const char *gone, const int *key) {
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
void tb_drop_prims(Plan *pl, const char *out) {
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
     in [wait_off, wait_off + nwaits) and may have shrunk (pull.c), and the
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
  tb_drop(pl, gone, key);
  renumber_flags(pl);
  free(to), free(key), free(gone), free(cto);
}
