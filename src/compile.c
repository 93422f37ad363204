/*
** compile.c — the pipeline in one function. Each stage reads the previous
** stage's result from the Plan and adds its own; --stop-after ends early.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

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
      plan_unlower(pl);
      if (!again || round >= 8) pl->opt.fuse = FUSE_NEVER;
      pl->reached = ST_SCHED + 1;
      continue;
    }
    if (rc != RC_OK) return rc;
    pl->reached = ST_VERIFY + 1;
    return RC_OK; /* emission happens on demand, per rank or per target */
  }
}

