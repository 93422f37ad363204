/*
** plan.c — what the passes, the dumps and the executors ask of a plan (its
** sizes, where a task was written, freeing it), and the names of the
** compiler's enums, kept once here for dumps, reports and the bindings.
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "../kernels-templates/tile.h"

/* Each table is indexed by its enum and ends with NULL, as bindings take them. */
static const char *const scheds[] = {"hpds", "rr", NULL};
static const char *const tb_policies[] = {"state", "conn", "manual", "merge", NULL};
static const char *const fuses[] = {"never", "auto", "always", NULL};
static const char *const orders[] = {"task", "algorithm", NULL};
/* The passes compile() stops after; emission, on demand, is none of them. */
static const char *const stages[ST_EMIT + 1] = {"dag", "sched", "lower", "tb", "merge", "lend", "offload", "pull",
                                                "analyse", "verify", NULL};
static const char *const prims[NPRIM] = {"send", "recv", "rrc", "rcs", "rrcs", "rrs", "cs", "copy", "reduce"};

const char *const *sched_names(void) { return scheds; }
const char *const *tb_policy_names(void) { return tb_policies; }
const char *const *fuse_names(void) { return fuses; }
const char *const *order_names(void) { return orders; }
const char *const *stage_names(void) { return stages; }

/* Entry i of a NULL-terminated table, "?" past its end. */
#define NAME(tab, i) ((unsigned)(i) < sizeof tab / sizeof *tab - 1 ? tab[i] : "?")

const char *sched_name(SchedKind k) { return NAME(scheds, k); }
const char *tb_policy_name(TbPolicy t) { return NAME(tb_policies, t); }
const char *order_name(ExecOrder o) { return NAME(orders, o); }
const char *prim_name(int k) { return (unsigned)k < NPRIM ? prims[k] : "?"; }
const char *stage_name(int s) { return s == ST_EMIT ? "emit" : NAME(stages, s); }

int stage_parse(const char *s) {
  for (int i = 0; i < ST_EMIT; i++)
    if (strcmp(s, stages[i]) == 0) return i;
  return strcmp(s, "emit") == 0 ? ST_EMIT : -1;
}

void plan_unlower(Plan *pl) {
  free(pl->p), free(pl->conn), free(pl->wait), free(pl->task_send), free(pl->task_recv);
  free(pl->rank_off), free(pl->rank_prims), free(pl->ntb), free(pl->tb_off), free(pl->tb_base), free(pl->tb_prims);
  free(pl->ce);
  facts_free(pl->facts);
  pl->facts = NULL, pl->ce = NULL, pl->nce = pl->nceflags = pl->nceposts = pl->npulls = pl->nputs = 0;
  pl->p = NULL, pl->conn = NULL, pl->wait = NULL, pl->task_send = pl->task_recv = NULL;
  pl->rank_off = pl->rank_prims = pl->ntb = pl->tb_off = pl->tb_base = pl->tb_prims = NULL;
  pl->np = pl->nconn = pl->nwait = pl->nflags = pl->ntbs = 0;
}

void plan_free(Plan *pl) {
  dag_free(&pl->dag);
  sched_free(&pl->sched);
  plan_unlower(pl);
  free(pl->nofuse), free(pl->complete), free(pl->split);
  memset(pl, 0, sizeof *pl);
}

int plan_tbs_max(const Plan *pl) {
  int m = 0;
  for (int r = 0; pl->ntb && r < pl->prog->nranks; r++)
    if (pl->ntb[r] > m) m = pl->ntb[r];
  return m;
}

int plan_maxcnt(const Plan *pl) {
  int m = 1;
  for (int t = 0; t < pl->dag.n; t++) m = pl->dag.t[t].cnt > m ? pl->dag.t[t].cnt : m;
  return m;
}

int plan_fifo_slots(const Plan *pl) {
  int m = 1;
  for (int i = 0; i < pl->np && pl->split; i++) m = pl->split[i] && pl->p[i].cnt > m ? pl->p[i].cnt : m;
  return pl->buffered ? BUFFERED_TILES * m : 0;
}

const char *plan_task_where(const Plan *pl, int task, char *out, size_t n) {
  return prog_where(pl->prog, pl->prog->xf[pl->dag.t[task].xf].at, out, n);
}

size_t plan_nmicro(const Plan *pl, size_t count, size_t esize, size_t nchan, size_t slot, size_t fixed) {
  return rx_nmicro(count, esize, (size_t)pl->prog->chunks, (size_t)plan_maxcnt(pl), nchan, nchan, RX_TILE_BYTES, slot,
                   fixed);
}

/* Whether p reads (or writes, when `writes`) chunks [idx, idx + n) of buf. */
int prim_touches(const Prim *p, int buf, int idx, int n, int writes) {
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
int prim_alone(const Plan *pl, const Prim *p, int reads, int writes) {
  for (int k = pl->rank_off[p->rank]; k < pl->rank_off[p->rank + 1]; k++) {
    const Prim *q = &pl->p[pl->rank_prims[k]];
    if (q != p && ((writes && prim_touches(q, p->wbuf, p->widx, p->cnt, 0)) ||
                   (reads && prim_touches(q, p->rbuf, p->ridx, p->cnt, 1))))
      return 0;
  }
  return 1;
}

/* Whether b comes after a on their rank: it waits for a, or follows it in a's TB. */
int prim_follows(const Plan *pl, const Prim *a, const Prim *b) {
  if (a->tb == b->tb && a->seq < b->seq) return 1;
  for (int j = b->wait_off; j < b->wait_off + b->nwaits; j++)
    if (&pl->p[pl->wait[j]] == a) return 1;
  return 0;
}

/* A plain receive of what p puts, that waits for nothing and that nothing
   waits for, whose destination nothing else of its rank touches; or NULL. */
const Prim *prim_plain_recv(const Plan *pl, const Prim *p) {
  const Prim *q = &pl->p[pl->task_recv[p->tout]];
  return q->kind == PR_RECV && !q->nwaits && q->flag < 0 && !q->join && prim_alone(pl, q, 0, 1) ? q : NULL;
}
