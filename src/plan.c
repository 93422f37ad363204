/*
** plan.c — what the passes, the dumps and the executors ask of a plan (its
** sizes, where a task was written, freeing it), and the names of the
** compiler's enums, kept once here for dumps, reports and the bindings.
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* Each table is indexed by its enum and ends with NULL, as bindings take them. */
static const char *const scheds[] = {"hpds", "rr", NULL};
static const char *const tb_policies[] = {"state", "conn", "manual", "merge", NULL};
static const char *const fuses[] = {"never", "auto", "always", NULL};
static const char *const orders[] = {"task", "algorithm", NULL};
/* The stages compile() stops after; emission, on demand, is none of them. */
static const char *const stages[ST_EMIT + 1] = {"dag", "sched", "lower", "tb", "verify", NULL};
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
  pl->ce = NULL, pl->nce = pl->nceflags = pl->nceposts = pl->npulls = pl->nputs = 0;
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
