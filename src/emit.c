/*
** emit.c — kernels from the TB plan: per rank, per TB, per pipeline entry,
** each entry one loop over micro-batches with constant chunk indices. The
** code is written against the RX_* primitive macros, which
** kernels-templates/host.h implements for the host executor (and cuda.cuh for
** GPUs). There is no step table and no interpreter: the schedule is the code.
*/
#include <stdio.h>
#include <string.h>

#include "core.h"

static const char *const bufc[NBUF] = {"RX_INPUT", "RX_OUTPUT", "RX_SCRATCH"};

static void emit_prim(const Plan *pl, int i, Buf *b) {
  const Prim *p = &pl->p[i];
  char at[300];
  int t = p->tin >= 0 ? p->tin : p->tout;
  plan_task_where(pl, t, at, sizeof at);
  buf_printf(b, "  /* sub-pipeline %d, task %d: %s (%s) */\n", p->slot, t, prim_name(p->kind), at);
  buf_printf(b, "  RX_AT(%d);\n  RX_FOR_M {\n", i);
  for (int j = p->wait_off; j < p->wait_off + p->nwaits; j++)
    buf_printf(b, "    RX_WAIT%s(%d);\n", pl->wait_full[j] ? "_ALL" : "", pl->p[pl->wait[j]].flag);
  switch (p->kind) {
  case PR_SEND: buf_printf(b, "    RX_SEND(%d, %s, %d, %d);\n", p->cout, bufc[p->rbuf], p->ridx, p->cnt); break;
  case PR_RECV: buf_printf(b, "    RX_RECV(%d, %s, %d, %d);\n", p->cin, bufc[p->wbuf], p->widx, p->cnt); break;
  case PR_RRC: buf_printf(b, "    RX_RRC(%d, %s, %d, %d);\n", p->cin, bufc[p->wbuf], p->widx, p->cnt); break;
  case PR_RCS:
  case PR_RRCS:
    buf_printf(b, "    RX_%s(%d, %d, %s, %d, %d);\n", p->kind == PR_RCS ? "RCS" : "RRCS", p->cin, p->cout,
               bufc[p->wbuf], p->widx, p->cnt);
    break;
  case PR_CS:
    buf_printf(b, "    RX_CS(%d, %s, %d, %s, %d, %d);\n", p->cout, bufc[p->rbuf], p->ridx, bufc[p->wbuf], p->widx,
               p->cnt);
    break;
  default:
    buf_printf(b, "    RX_%s(%s, %d, %s, %d, %d);\n", p->kind == PR_COPY ? "COPY" : "REDUCE", bufc[p->rbuf], p->ridx,
               bufc[p->wbuf], p->widx, p->cnt);
    break;
  }
  if (p->flag >= 0) buf_printf(b, "    RX_POST(%d);\n", p->flag);
  buf_puts(b, "  }\n");
}

void emit_rank(const Plan *pl, int r, EmitTarget tg, Buf *b) {
  (void)tg; /* both targets share the macro vocabulary */
  for (int t = 0; t < pl->ntb[r]; t++) {
    int g = pl->tb_base[r] + t;
    buf_printf(b, "\nRX_TB(%d, %d) {\n", r, t);
    for (int k = pl->tb_off[g]; k < pl->tb_off[g + 1]; k++) emit_prim(pl, pl->tb_prims[k], b);
    buf_puts(b, "}\n");
  }
  buf_printf(b, "\nRX_RANK_BEGIN(%d)\n", r);
  for (int t = 0; t < pl->ntb[r]; t++) buf_printf(b, "  RX_RANK_TB(%d, %d)\n", r, t);
  buf_printf(b, "RX_RANK_END(%d)\n", r);
}

void emit_table(const Plan *pl, int externs, Buf *b) {
  int R = pl->prog->nranks;
  if (externs)
    for (int r = 0; r < R; r++) buf_printf(b, "RX_RANK_EXTERN(%d)\n", r);
  buf_printf(b, "\nRX_PROGRAM_BEGIN(%d)\n", R);
  for (int r = 0; r < R; r++) buf_printf(b, "  RX_PROGRAM_RANK(%d, %d)\n", r, pl->ntb[r]);
  buf_puts(b, "RX_PROGRAM_END\n");
}

rcStatus emit_program(const Plan *pl, EmitTarget tg, Buf *out, Err *e) {
  if (!pl->verified) return err_set(e, RC_EINVAL, "plan %s is not verified; refusing to emit", pl->prog->name);
  const Program *p = pl->prog;
  Buf body;
  buf_init(&body);
  for (int r = 0; r < p->nranks; r++) emit_rank(pl, r, tg, &body);
  emit_table(pl, 0, &body);
  char num[6][32], src[300];
  snprintf(num[0], 32, "%d", p->nranks);
  snprintf(num[1], 32, "%d", pl->dag.n);
  snprintf(num[2], 32, "%d", pl->sched.nslots);
  snprintf(num[3], 32, "%d", pl->ntbs);
  snprintf(num[4], 32, "%d", pl->nflags);
  prog_where(p, p->at, src, sizeof src);
  const char *prims_name = tg == EMIT_HOST ? "host.h" : "cuda.cuh", *prims = tpl_text(prims_name);
  if (!prims) {
    buf_free(&body);
    return err_set(e, RC_ETEMPLATE, "%s: no such template", prims_name);
  }
  TplVar v[] = {
    {"name", p->name}, {"collective", coll_name(p->coll)}, {"ranks", num[0]},
    {"placement", pl->opt.inplace ? "in-place" : "out-of-place"}, {"tasks", num[1]}, {"subpipelines", num[2]},
    {"tbs", num[3]}, {"tb_policy", pl->opt.tb == TB_STATE ? "state-based" : "connection-based"},
    {"flags", num[4]}, {"source", src}, {"prims", prims}, {"body", body.s},
  };
  rcStatus rc = tpl_fill(out, "program.c.tpl", tpl_text("program.c.tpl"), v, (int)(sizeof v / sizeof *v), e);
  buf_free(&body);
  return rc;
}
