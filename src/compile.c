/*
** compile.c — the compiler as its list of passes, each in a file of its own:
**
**   dag → sched → lower → tb → merge? → lend? → offload? → pull? → analyse → verify
**
** Each pass reads what the passes before it left in the Plan and adds its
** own; each is timed under its name (Plan.stage_ms) and is a --stop-after
** point. Those marked ? run only where their option asks: merge for --tb
** merge, lend for state-based TBs (the default), offload for --ce, pull for
** --pull. Emission is no pass: it happens on demand, per rank or per
** target (emit.c).
*/
#include <string.h>

#include "core.h"

/* TIME runs pass st, adding its time to Plan.stage_ms and marking it in
   Plan.ran; RUN does the same
   for a pass that can fail, whose failure ends compilation. */
#define TIME(st, call)                  \
  do {                                  \
    double t0_ = now_ms();              \
    call;                               \
    pl->stage_ms[st] += now_ms() - t0_; \
    pl->ran |= 1u << (st);              \
  } while (0)
#define RUN(st, call)                   \
  do {                                  \
    rcStatus rc_ = RC_OK;               \
    TIME(st, rc_ = (call));             \
    if (rc_ != RC_OK) return rc_;       \
  } while (0)
/* --stop-after st ends compilation here. */
#define STOP(st)                                \
  do {                                          \
    if (o->stop_after == (st)) return RC_OK;    \
  } while (0)
/* The plan holds stage st's result (Plan.reached), where --stop-after st ends it. */
#define DONE(st)                  \
  do {                            \
    pl->reached = (st) + 1;       \
    STOP(st);                     \
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
  RUN(ST_DAG, dag_build(&pl->dag, p, t, o->inplace, o->tb == TB_MANUAL, e));
  DONE(ST_DAG);
  RUN(ST_SCHED, sched_run(&pl->sched, &pl->dag, o->sched, e));
  DONE(ST_SCHED);
  pl->nofuse = xcalloc((size_t)pl->dag.n + 1, 1);
  for (int round = 0;; round++) {
    RUN(ST_LOWER, lower_run(pl, e));
    DONE(ST_LOWER);
    /* The TBs, then the passes that rework them: to a report the plan stays
       at tb through them, and --stop-after tb stops after the last of them,
       as when they were one pass (its dumps, and the golden ones made after
       a whole compilation, show the TBs the executors get). */
    RUN(ST_TB, tb_assign(pl, o->tb, e));
    pl->reached = ST_TB + 1;
    if (o->tb == TB_MERGE) TIME(ST_MERGE, merge_run(pl));
    STOP(ST_MERGE);
    if (o->tb == TB_STATE) TIME(ST_LEND, lend_run(pl));
    STOP(ST_LEND);
    if (o->ce) TIME(ST_OFFLOAD, offload_run(pl));
    STOP(ST_OFFLOAD);
    if (o->pull) TIME(ST_PULL, pull_run(pl));
    STOP(ST_PULL);
    STOP(ST_TB);
    TIME(ST_ANALYSE, analyse_run(pl));
    STOP(ST_ANALYSE);
    rcStatus rc = RC_OK;
    int stuck = 0;
    TIME(ST_VERIFY, rc = verify_run(pl, pl->nofuse, &stuck, e));
    facts_free(pl->facts); /* what the proofs read: emission needs none of it */
    pl->facts = NULL;
    /* Fusion ties a receive and a send to one TB, which can close a cycle.
       The deadlock check marks in nofuse the fused primitives it found
       stuck; lower again without fusing those, and without fusion at all
       if that persists. */
    if (rc == RC_EDEADLOCK && pl->opt.fuse == FUSE_AUTO && o->tb != TB_MANUAL) {
      plan_unlower(pl);
      if (!stuck || round >= 8) pl->opt.fuse = FUSE_NEVER;
      pl->reached = ST_SCHED + 1;
      continue;
    }
    if (rc != RC_OK) return rc;
    pl->verified = 1;
    DONE(ST_VERIFY);
    return RC_OK;
  }
}
