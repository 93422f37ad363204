/*
** compile.c — the pipeline in one function. Each stage reads the previous
** stage's result from the Plan and adds its own; --stop-after ends early.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static const char *const stage_names[NSTAGE] = {"dag", "sched", "lower", "tb", "verify", "emit"};

const char *stage_name(int s) { return (unsigned)s < NSTAGE ? stage_names[s] : "?"; }

int stage_parse(const char *s) {
  for (int i = 0; i < NSTAGE; i++)
    if (strcmp(s, stage_names[i]) == 0) return i;
  return -1;
}

const char *tb_policy_name(TbPolicy t) {
  static const char *const names[] = {"state", "conn", "manual", "merge"};
  return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

static void unlower(Plan *pl);

#define STAGE(st, call)                         \
  do {                                          \
    double t0_ = now_ms();                      \
    rcStatus rc_ = (call);                      \
    pl->stage_ms[st] += now_ms() - t0_;         \
    if (rc_ != RC_OK) return rc_;               \
    pl->reached = (st) + 1;                     \
    if (o->stop_after == (st)) return RC_OK;    \
  } while (0)

rcStatus compile(Plan *pl, const Program *p, const Topo *t, const Options *o, Err *e) {
  memset(pl, 0, sizeof *pl);
  pl->prog = p;
  pl->topo = t;
  pl->opt = *o;
  if (o->pull && o->ce) return err_set(e, RC_EINVAL, "pulls and copy-engine copies: choose one (--pull or --ce)");
  if (t->nranks != p->nranks)
    return err_set(e, RC_ETOPO, "topology %s has %d ranks, program %s has %d", t->spec, t->nranks, p->name,
                   p->nranks);
  STAGE(ST_DAG, dag_build(&pl->dag, p, t, o->inplace, o->tb == TB_MANUAL, e));
  STAGE(ST_SCHED, sched_run(&pl->sched, &pl->dag, o->sched, e));
  pl->nofuse = xcalloc((size_t)pl->dag.n + 1, 1);
  for (int round = 0;; round++) {
    STAGE(ST_LOWER, lower_run(pl, e));
    STAGE(ST_TB, tb_assign(pl, o->tb, e));
    int marks = 0;
    for (int k = 0; k < pl->dag.n; k++) marks += pl->nofuse[k];
    double t0 = now_ms();
    rcStatus rc = verify_run(pl, e);
    pl->stage_ms[ST_VERIFY] += now_ms() - t0;
    /* Fusion ties a receive and a send to one TB, which can close a cycle.
       The verifier marks the fused primitives it found stuck; lower again
       without fusing those, and without fusion at all if that persists. */
    if (rc == RC_EDEADLOCK && pl->opt.fuse == FUSE_AUTO && o->tb != TB_MANUAL) {
      int again = -marks;
      for (int k = 0; k < pl->dag.n; k++) again += pl->nofuse[k];
      unlower(pl);
      if (!again || round >= 8) pl->opt.fuse = FUSE_NEVER;
      pl->reached = ST_SCHED + 1;
      continue;
    }
    if (rc != RC_OK) return rc;
    pl->reached = ST_VERIFY + 1;
    return RC_OK; /* emission happens on demand, per rank or per target */
  }
}

/* Drop what lowering and TB allocation built, keeping the DAG and schedule. */
static void unlower(Plan *pl) {
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
  unlower(pl);
  exec_host_unload(pl);
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
