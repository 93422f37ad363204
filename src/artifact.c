/*
** artifact.c — compiled plans as the GPU runtime loads them (src/runtime/
** planfile.c): one section per plan (a placement, or one of its forms), each
** a few lines of numbers then the kernel's body as emit.c writes it, and a
** digest over the whole file at its end. Text, so a person can read what the
** runtime will set up; planfile.h says what each line means.
*/
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "planfile.h"

static rcStatus section(const Plan *pl, Buf *out, Err *e) {
  const Program *p = pl->prog;
  if (!pl->verified) return err_set(e, RC_EINVAL, "plan %s is not verified; refusing to write it", p->name);
  if (!rx_name_ok(p->name, strlen(p->name)))
    return err_set(e, RC_EINVAL, "plan name '%s' is not one word of letters, digits and _.+- (at most 63 bytes)", p->name);
  Buf body;
  buf_init(&body);
  emit_body(pl, EMIT_CUDA, &body);
  buf_printf(out, "resccl-plan %d\nname %s\ncollective %s\nplacement %s\nranks %d\nchunks %d\n", RX_PLAN_VERSION, p->name,
             coll_name(p->coll), pl->opt.inplace ? "in-place" : "out-of-place", p->nranks, p->chunks);
  buf_printf(out, "bufchunks %d %d %d\n", prog_bufchunks(p, BUF_INPUT), prog_bufchunks(p, BUF_OUTPUT),
             prog_bufchunks(p, BUF_SCRATCH));
  /* Buffered plans (hand-placed or merged TBs) were verified with FIFOs that hold two tiles (verify.c). */
  /* A transfer between different chunk positions moves equal tiles only
     when count splits evenly (tile.h; exec_check_sizes on the host). */
  int even = 0, C = p->chunks;
  for (int t = 0; t < pl->dag.n; t++) {
    const Task *k = &pl->dag.t[t];
    even |= k->sidx % C != k->didx % C || (k->op != OP_COPY && k->oidx % C != k->didx % C);
  }
  buf_printf(out, "fifo-slots %d\nmaxcnt %d\neven %d\ntbs", plan_fifo_slots(pl), plan_maxcnt(pl), even);
  for (int r = 0; r < p->nranks; r++) buf_printf(out, " %d", pl->ntb[r]);
  buf_printf(out, "\nconns %d\n", pl->nconn);
  for (int c = 0; c < pl->nconn; c++) buf_printf(out, "%d %d\n", pl->conn[c].src, pl->conn[c].dst);
  int *owner = xcalloc((size_t)pl->nflags + 1, sizeof *owner);
  for (int i = 0; i < pl->np; i++)
    if (pl->p[i].flag >= 0) owner[pl->p[i].flag] = pl->p[i].rank;
  buf_printf(out, "flags %d\n", pl->nflags);
  for (int f = 0; f < pl->nflags; f++) buf_printf(out, "%d\n", owner[f]);
  free(owner);
  buf_printf(out, "copies %d\n", pl->nce);
  for (int i = 0; i < pl->nce; i++) {
    const CeCopy *c = &pl->ce[i];
    buf_printf(out, "%d %d %d %d %d %d %d %d %d\n", c->src, c->rbuf, c->ridx, c->dst, c->wbuf, c->widx, c->cnt, c->flag,
               c->after);
  }
  buf_printf(out, "counters %d\npulls %d\n", pl->nceposts, pl->npulls);
  buf_printf(out, "kernel %zu\n", body.n);
  buf_add(out, body.s, body.n);
  buf_free(&body);
  return RC_OK;
}

PlanForms plan_forms(const Plan *pl) {
  PlanForms f = {0, 0, 0};
  for (int i = 0; i < pl->np; i++) {
    const Prim *q = &pl->p[i];
    f.ce_ends += q->ce && q->flag < 0 && q->cepost < 0;
    f.pulled_reductions += q->pull && (q->kind == PR_RRC || q->kind == PR_RRCS);
    f.pushes += q->cout >= 0;
  }
  return f;
}

rcStatus plan_file(const Plan *const *pls, int n, Buf *out, Err *e) {
  Buf f;
  buf_init(&f);
  for (int i = 0; i < n; i++) {
    rcStatus rc = section(pls[i], &f, e);
    if (rc != RC_OK) return buf_free(&f), rc;
  }
  buf_printf(&f, "digest %016" PRIx64 "\n", rx_digest(f.s, f.n));
  buf_add(out, f.s, f.n);
  buf_free(&f);
  return RC_OK;
}

/* Which forms of a placement a plan file holds: the plan as asked, then,
   where they differ, its copy-engine form (the runtime runs it from
   RESCCL_CE_FROM bytes) and its pulling form (below RESCCL_PULL_BELOW);
   asked for either (ce, pull), that form alone, for every size.
   No copy-engine form where a reduction that waits for the copy engine ends
   its chain: it starts on a micro-batch only once all of it has landed, and
   on 2xH200 such a reduce-scatter lost 5-17% from 256 to 512 MiB. A pulling
   form only where some pull reduces, in one pass with the transfer, and
   nothing is pushed any more: an all-gather whose receives pulled moved
   9-33% less than its pushes from 8 to 64 MiB, and a two-rank ring
   all-reduce pulling its first hop and pushing its second 10-17% less from
   16 to 32 MiB (docs/journal/gpu-2026-12-01.md, "Pulls"); one whose reductions put their sums
   themselves (put_on) pushes nothing. */
static int keep_ce(const Plan *pl) { return pl->nce > 0 && plan_forms(pl).ce_ends == 0; }
static int keep_pull(const Plan *pl) {
  PlanForms f = plan_forms(pl);
  return f.pulled_reductions > 0 && f.pushes == 0;
}

rcStatus plan_file_for(const Program *p, const Topo *t, const Options *o, int inplace, Buf *out, Err *e) {
  static const struct {
    int ce, pull;
    int (*keep)(const Plan *pl); /* NULL: the plan as asked, always kept */
  } forms[] = {{0, 0, NULL}, {1, 0, keep_ce}, {0, 1, keep_pull}};
  int nforms = o->ce || o->pull ? 1 : 3, n = 0;
  Plan *pls = xcalloc(2 * 3, sizeof *pls);
  rcStatus rc = RC_OK;
  for (int place = 0; place <= (inplace != 0) && rc == RC_OK; place++)
    for (int f = 0; f < nforms && rc == RC_OK; f++) {
      Options fo = *o;
      fo.inplace = place;
      if (forms[f].keep) fo.ce = forms[f].ce, fo.pull = forms[f].pull;
      rc = compile(&pls[n], p, t, &fo, e);
      if (rc == RC_OK && (!forms[f].keep || forms[f].keep(&pls[n]))) n++;
      else plan_free(&pls[n]);
    }
  if (rc == RC_OK) {
    const Plan *kept[2 * 3];
    for (int i = 0; i < n; i++) kept[i] = &pls[i];
    rc = plan_file(kept, n, out, e);
  }
  for (int i = 0; i < n; i++) plan_free(&pls[i]);
  free(pls);
  return rc;
}
