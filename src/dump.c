/*
** dump.c — stable text forms of each stage (--dump dag|sched|lower|tb), the
** hooks of the golden tests. One line per item, no addresses, no timings.
*/
#include <stdio.h>
#include <string.h>

#include "core.h"

static void loc(Buf *b, int buf, int idx, int cnt) {
  buf_printf(b, "%s[%d", buf_name(buf), idx);
  if (cnt > 1) buf_printf(b, "+%d", cnt);
  buf_puts(b, "]");
}

static void where(Buf *b, const Plan *pl, int t) {
  char at[300];
  const char *w = plan_task_where(pl, t, at, sizeof at), *slash = strrchr(w, '/');
  buf_printf(b, "  @%s\n", slash ? slash + 1 : w); /* basename: dumps don't depend on the cwd */
}

static void dump_dag(const Plan *pl, Buf *b) {
  const Dag *d = &pl->dag;
  buf_printf(b, "dag %s: %d tasks, %d chunks\n", pl->prog->name, d->n, d->nchunk);
  for (int i = 0; i < d->n; i++) {
    const Task *t = &d->t[i];
    buf_printf(b, "t%d r%d->r%d ", i, t->src, t->dst);
    loc(b, t->sbuf, t->sidx, t->cnt);
    buf_puts(b, t->op == OP_REDUCE ? " +> " : " -> ");
    if (t->op == OP_REDUCE && (t->obuf != t->dbuf || t->oidx != t->didx)) {
      loc(b, t->obuf, t->oidx, 1);
      buf_puts(b, " => ");
    }
    loc(b, t->dbuf, t->didx, 1);
    buf_printf(b, " chunk=%d links=", t->chunk);
    const int *lk = d->link + (size_t)i * TOPO_MAXHOP;
    for (int h = 0; h < TOPO_MAXHOP && lk[h] >= 0; h++) {
      Link l;
      topo_link(pl->topo, lk[h], &l);
      buf_printf(b, "%s%s", h ? "," : "", l.name);
    }
    if (lk[0] < 0) buf_puts(b, "local");
    buf_puts(b, " preds=");
    for (int k = d->pred_off[i]; k < d->pred_off[i + 1]; k++)
      buf_printf(b, "%st%d@r%d", k > d->pred_off[i] ? "," : "", d->pred[k], d->prank[k]);
    if (d->pred_off[i] == d->pred_off[i + 1]) buf_puts(b, "-");
    where(b, pl, i);
  }
}

static void dump_sched(const Plan *pl, Buf *b) {
  const Sched *s = &pl->sched;
  buf_printf(b, "sched %s: %d sub-pipelines\n", sched_name(s->kind), s->nslots);
  for (int k = 0; k < pl->dag.n; k++) {
    int t = s->order[k];
    if (k == 0 || s->slot[t] != s->slot[s->order[k - 1]]) buf_printf(b, "%ssub-pipeline %d:", k ? "\n" : "", s->slot[t]);
    buf_printf(b, " t%d", t);
  }
  if (pl->dag.n) buf_puts(b, "\n");
}

static void prim_line(Buf *b, const Plan *pl, const Prim *p) {
  buf_printf(b, "%-6s", prim_name(p->kind));
  if (p->cin >= 0) buf_printf(b, " from r%d", pl->conn[p->cin].src);
  if (p->cout >= 0) buf_printf(b, " to r%d", pl->conn[p->cout].dst);
  buf_puts(b, " ");
  if (p->pull) { /* pull.c: it reads the sender's buffer */
    buf_printf(b, "pulls r%d ", pl->dag.t[p->tin].src);
    loc(b, p->rbuf, p->ridx, p->cnt);
    buf_puts(b, ", ");
  }
  if (p->kind == PR_SEND || p->kind == PR_CS || p->kind == PR_COPY || p->kind == PR_REDUCE) {
    loc(b, p->rbuf, p->ridx, p->cnt);
    if (p->kind != PR_SEND) buf_puts(b, p->kind == PR_REDUCE ? " +> " : " -> ");
  }
  if (p->kind == PR_RRS) {
    loc(b, p->ubuf, p->uidx, p->cnt);
    buf_puts(b, " (not kept)");
  } else if ((p->kind == PR_RRC || p->kind == PR_RRCS || p->kind == PR_REDUCE) &&
             (p->ubuf != p->wbuf || p->uidx != p->widx)) {
    loc(b, p->ubuf, p->uidx, p->cnt);
    buf_puts(b, " => ");
  }
  if (p->kind != PR_SEND && p->kind != PR_RRS) loc(b, p->wbuf, p->widx, p->cnt);
  if (p->pull && p->tout >= 0 && p->tout != p->tin) { /* put_on: and where its send would have landed */
    const Task *o = &pl->dag.t[p->tout];
    buf_printf(b, ", puts r%d ", o->dst);
    loc(b, o->dbuf, o->didx, p->cnt);
  }
  buf_printf(b, " slot=%d", p->slot);
  if (p->tin >= 0) buf_printf(b, " in=t%d", p->tin);
  if (p->tout >= 0 && p->tout != p->tin) buf_printf(b, " out=t%d", p->tout);
  if (p->nwaits) {
    buf_puts(b, " waits=");
    for (int j = 0; j < p->nwaits; j++) {
      const Prim *q = &pl->p[pl->wait[p->wait_off + j]];
      buf_printf(b, "%s%s:t%d", j ? "," : "", prim_name(q->kind), q->tin >= 0 ? q->tin : q->tout);
    }
  }
}

static void dump_lower(const Plan *pl, Buf *b) {
  buf_printf(b, "lower: %d primitives, %d connections\n", pl->np, pl->nconn);
  for (int r = 0; r < pl->prog->nranks; r++)
    for (int k = pl->rank_off[r]; k < pl->rank_off[r + 1]; k++) {
      const Prim *p = &pl->p[pl->rank_prims[k]];
      buf_printf(b, "r%d ", r);
      prim_line(b, pl, p);
      buf_puts(b, "\n");
    }
}

static void dump_tb(const Plan *pl, Buf *b) {
  buf_printf(b, "tb %s: %d TBs, at most %d per rank%s%s", tb_policy_name(pl->opt.tb), pl->ntbs, plan_tbs_max(pl),
             pl->opt.order == EX_ALGO ? ", algorithm-level" : "", pl->buffered ? ", buffered FIFOs" : "");
  if (pl->nce) buf_printf(b, ", %d copies on the copy engine", pl->nce);
  if (pl->npulls) buf_printf(b, ", %d pulls", pl->npulls);
  buf_puts(b, "\n");
  for (int r = 0; r < pl->prog->nranks; r++)
    for (int t = 0; t < pl->ntb[r]; t++) {
      int g = pl->tb_base[r] + t;
      buf_printf(b, "r%d tb%d:\n", r, t);
      for (int k = pl->tb_off[g]; k < pl->tb_off[g + 1]; k++) {
        const Prim *p = &pl->p[pl->tb_prims[k]];
        buf_puts(b, p->join ? "  + " : "  "); /* "+": in the previous primitive's micro-batch loop */
        prim_line(b, pl, p);
        if (p->flag >= 0) buf_printf(b, " posts=f%d", p->flag);
        if (p->cepost >= 0) buf_printf(b, " posts=ce%d", p->cepost);
        buf_puts(b, "\n");
      }
    }
  for (int i = 0; i < pl->nce; i++) { /* offload.c */
    const CeCopy *c = &pl->ce[i];
    buf_printf(b, "r%d ce     ", c->src);
    loc(b, c->rbuf, c->ridx, c->cnt);
    buf_puts(b, " -> ");
    if (c->dst != c->src) buf_printf(b, "r%d ", c->dst);
    loc(b, c->wbuf, c->widx, c->cnt);
    buf_printf(b, " t%d", c->task);
    if (c->after >= 0) buf_printf(b, " waits=ce%d", c->after);
    buf_puts(b, "\n");
  }
}

void dump_stage(const Plan *pl, Stage s, Buf *b) {
  switch (s) {
  case ST_DAG: dump_dag(pl, b); break;
  case ST_SCHED: dump_sched(pl, b); break;
  case ST_LOWER: dump_lower(pl, b); break;
  case ST_TB: dump_tb(pl, b); break;
  default: break;
  }
}
