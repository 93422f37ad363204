/*
** emit.c — kernels from the TB plan: per rank, per TB, per pipeline entry,
** each entry one loop over micro-batches with constant chunk indices (or, in
** algorithm-level order, one loop around the TB's whole list). The
** code is written against the RX_* primitive macros, which
** kernels-templates/host.h implements for the host executor (and cuda.cuh for
** GPUs). There is no step table and no interpreter: the schedule is the code.
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "planfile.h"

/* Append "RX_NAME(a, b, ...);": the statement's arguments as planfile.h
   lists them, buffers by name. Keeps printf off the hot path. */
static void call(Buf *b, RxStatement st, ...) {
  va_list ap;
  va_start(ap, st);
  buf_puts(b, "    ");
  buf_puts(b, rx_statements[st].name);
  buf_puts(b, "(");
  for (const char *f = rx_statements[st].args; *f; f++) {
    if (f > rx_statements[st].args) buf_puts(b, ", ");
    int v = va_arg(ap, int);
    if (*f == 'b') buf_puts(b, rx_buffers[v]);
    else buf_int(b, v);
  }
  buf_puts(b, ");\n");
  va_end(ap);
}

/* A put lands in pieces in a call's last micro-batch where its receive (r)
   reduces it and no other TB waits for that reduction (tile.h rx_piece);
   both ends are emitted from this. */
static int in_pieces(const Prim *r) { return r->kind == PR_RRC && r->flag < 0; }

/* What primitive i moves of chunks [c, c+n) of its range: one macro. */
static void emit_move(const Plan *pl, int i, int c, int n, int done, Buf *b) {
  const Prim *p = &pl->p[i];
  /* where a put lands (a pulled one's has no receive: the task says) */
  const Prim *rp = p->direct && p->tout >= 0 && !p->pull ? &pl->p[pl->task_recv[p->tout]] : NULL;
  int last = rp && in_pieces(rp);
  switch (p->kind) {
  case PR_SEND:
    if (rp) {
      call(b, RXS_PUT, p->cout, rp->rank, p->rbuf, p->ridx + c, rp->wbuf, rp->widx + c, n, last);
    } else {
      call(b, RXS_SEND, p->cout, p->rbuf, p->ridx + c, n);
    }
    break;
  case PR_RECV:
    if (p->pull) call(b, RXS_PULL, pl->dag.t[p->tin].src, p->rbuf, p->ridx + c, p->wbuf, p->widx + c, n);
    else call(b, p->direct ? RXS_RECV_PUT : RXS_RECV, p->cin, p->wbuf, p->widx + c, n);
    break;
  case PR_RRC:
    if (p->pull) { /* reduce what the sender's buffer holds with the operand */
      call(b, RXS_RRC_PULL, pl->dag.t[p->tin].src, p->rbuf, p->ridx + c, p->ubuf, p->uidx + c, p->wbuf, p->widx + c,
           n, done);
    } else if (p->ce) { /* reduce into what the copy engine put there (its operand) */
      call(b, RXS_REDUCE, p->ubuf, p->uidx + c, p->wbuf, p->widx + c, p->wbuf, p->widx + c, n, done);
    } else if (p->direct)
      call(b, RXS_RRC_PUT, p->cin, p->ubuf, p->uidx + c, p->wbuf, p->widx + c, n, in_pieces(p), done);
    else
      call(b, RXS_RRC, p->cin, p->ubuf, p->uidx + c, p->wbuf, p->widx + c, n, done);
    break;
  case PR_RCS: call(b, RXS_RCS, p->cin, p->cout, p->wbuf, p->widx + c, n); break;
  case PR_RRCS:
    if (p->pull) { /* pull and reduce, then store the result here and where task tout lands */
      const Task *o = &pl->dag.t[p->tout];
      call(b, RXS_RRCS_PULL, pl->dag.t[p->tin].src, p->rbuf, p->ridx + c, p->ubuf, p->uidx + c, p->wbuf,
           p->widx + c, o->dst, o->dbuf, o->didx + c, n, done);
    } else {
      call(b, RXS_RRCS, p->cin, p->cout, p->ubuf, p->uidx + c, p->wbuf, p->widx + c, n, done);
    }
    break;
  case PR_RRS: call(b, RXS_RRS, p->cin, p->cout, p->ubuf, p->uidx + c, n, done); break;
  case PR_CS:
    if (rp) {
      call(b, RXS_CS_PUT, p->cout, rp->rank, p->rbuf, p->ridx + c, p->wbuf, p->widx + c, rp->wbuf, rp->widx + c, n,
           last);
    } else {
      call(b, RXS_CS, p->cout, p->rbuf, p->ridx + c, p->wbuf, p->widx + c, n);
    }
    break;
  case PR_COPY: call(b, RXS_COPY, p->rbuf, p->ridx + c, p->wbuf, p->widx + c, n); break;
  default:
    call(b, RXS_REDUCE, p->rbuf, p->ridx + c, p->ubuf, p->uidx + c, p->wbuf, p->widx + c, n, done);
    break;
  }
}

/* One pipeline entry. Task-level, each primitive has its own micro-batch loop,
   except that merged TBs run a group of them in one: `open` starts a loop
   before it, `close` ends one after it, `group` says the loop holds others. */
static void emit_prim(const Plan *pl, int i, int open, int close, int group, Buf *b) {
  const Prim *p = &pl->p[i];
  const Program *pg = pl->prog;
  int t = p->tin >= 0 ? p->tin : p->tout, done = pl->complete[t] == pl->dag.t[t].cnt;
  Src at = pg->xf[pl->dag.t[t].xf].at;
  buf_puts(b, group && !open ? "    /* sub-pipeline " : "  /* sub-pipeline ");
  buf_int(b, p->slot);
  buf_puts(b, ", task ");
  buf_int(b, t);
  buf_puts(b, ": ");
  buf_puts(b, prim_name(p->kind));
  buf_puts(b, " (");
  buf_comment(b, at.file >= 0 && at.file < pg->nfiles ? pg->files[at.file] : pg->name);
  buf_puts(b, ":");
  buf_int(b, at.line);
  buf_puts(b, ") */\n");
  if (open && group) buf_puts(b, "  RX_FOR_M {\n");
  buf_puts(b, group ? "    RX_AT(" : "  RX_AT(");
  buf_int(b, i);
  buf_puts(b, open && !group ? ");\n  RX_FOR_M {\n" : ");\n");
  for (int j = p->wait_off; j < p->wait_off + p->nwaits; j++)
    call(b, RXS_WAIT, pl->p[pl->wait[j]].flag);
  if (p->kind == PR_RRC && p->ce && !p->pull) { /* the copy engine put it where it is: wait for the copy */
    int f = 0;
    while (pl->ce[f].task != p->tin) f++;
    call(b, RXS_CE_WAIT, pl->ce[f].flag);
  }
  /* a chunk at a time where it meets another primitive through another range (Plan.split) */
  if (pl->split && pl->split[i])
    for (int c = 0; c < p->cnt; c++) emit_move(pl, i, c, 1, done, b);
  else
    emit_move(pl, i, 0, p->cnt, done, b);
  if (p->flag >= 0) call(b, RXS_POST, p->flag);
  if (p->cepost >= 0) call(b, RXS_CE_POST, p->cepost); /* a copy-engine copy waits for it */
  if (close) buf_puts(b, "  }\n");
}

void emit_rank(const Plan *pl, int r, EmitTarget tg, Buf *b) {
  (void)tg; /* both targets share the macro vocabulary */
  for (int t = 0; t < pl->ntb[r]; t++) {
    int g = pl->tb_base[r] + t;
    int algo = pl->opt.order == EX_ALGO;
    buf_printf(b, "\nRX_TB(%d, %d) {\n", r, t);
    if (algo) buf_puts(b, "  RX_FOR_M { /* algorithm-level: the whole list, once per micro-batch */\n");
    for (int k = pl->tb_off[g]; k < pl->tb_off[g + 1]; k++) {
      int join = pl->p[pl->tb_prims[k]].join, next = k + 1 < pl->tb_off[g + 1] && pl->p[pl->tb_prims[k + 1]].join;
      emit_prim(pl, pl->tb_prims[k], !algo && !join, !algo && !next, !algo && (join || next), b);
    }
    buf_puts(b, algo ? "  }\n}\n" : "}\n");
  }
  /* With each TB, its number of entries: micro-batch loops. */
  buf_printf(b, "\nRX_RANK_BEGIN(%d)\n", r);
  for (int t = 0; t < pl->ntb[r]; t++) {
    int g = pl->tb_base[r] + t, ne = 0;
    for (int k = pl->tb_off[g]; k < pl->tb_off[g + 1]; k++) ne += !pl->p[pl->tb_prims[k]].join;
    buf_printf(b, "  RX_RANK_TB(%d, %d, %d)\n", r, t, pl->opt.order == EX_ALGO ? 1 : ne);
  }
  buf_printf(b, "RX_RANK_END(%d)\n", r);
}

void emit_table(const Plan *pl, int externs, Buf *b) {
  int R = pl->prog->nranks;
  if (externs)
    for (int r = 0; r < R; r++) buf_printf(b, "RX_RANK_EXTERN(%d)\n", r);
  /* pulls: every kernel waits at its end for those that read its buffers
     (2: and publishes its puts that no receive waits for) */
  buf_printf(b, "\nRX_PROGRAM_BEGIN(%d, %d)\n", R, pl->nputs ? 2 : pl->npulls > 0);
  for (int r = 0; r < R; r++) buf_printf(b, "  RX_PROGRAM_RANK(%d, %d)\n", r, pl->ntb[r]);
  buf_puts(b, "RX_PROGRAM_END\n");
}

void emit_body(const Plan *pl, EmitTarget tg, Buf *b) {
  for (int r = 0; r < pl->prog->nranks; r++) emit_rank(pl, r, tg, b);
  emit_table(pl, 0, b);
}

rcStatus emit_program(const Plan *pl, EmitTarget tg, Buf *out, Err *e) {
  if (!pl->verified) return err_set(e, RC_EINVAL, "plan %s is not verified; refusing to emit", pl->prog->name);
  const Program *p = pl->prog;
  Buf body;
  buf_init(&body);
  emit_body(pl, tg, &body);
  char num[6][32], at[300];
  snprintf(num[0], 32, "%d", p->nranks);
  snprintf(num[1], 32, "%d", pl->dag.n);
  snprintf(num[2], 32, "%d", pl->sched.nslots);
  snprintf(num[3], 32, "%d", pl->ntbs);
  snprintf(num[4], 32, "%d", pl->nflags);
  /* the header comment's names, escaped as every comment's are */
  Buf name, src;
  buf_init(&name), buf_init(&src);
  buf_comment(&name, p->name);
  buf_comment(&src, prog_where(p, p->at, at, sizeof at));
  /* The primitives: tile.h then host.h, or for CUDA what the runtime puts before a plan file's body. */
  const char *host[3] = {"tile.h", "host.h", NULL}, *cuda[3] = RX_CUDA_PRELUDE, **names = tg == EMIT_HOST ? host : cuda;
  Buf prims;
  buf_init(&prims);
  for (int i = 0; i < 3 && names[i]; i++) {
    const char *t = tpl_text(names[i]);
    if (!t) {
      buf_free(&body), buf_free(&prims), buf_free(&name), buf_free(&src);
      return err_set(e, RC_ETEMPLATE, "%s: no such template", names[i]);
    }
    buf_puts(&prims, t);
  }
  TplVar v[] = {
    {"name", name.s}, {"collective", coll_name(p->coll)}, {"ranks", num[0]},
    {"placement", pl->opt.inplace ? "in-place" : "out-of-place"}, {"tasks", num[1]}, {"subpipelines", num[2]},
    {"tbs", num[3]}, {"tb_policy", tb_policy_name(pl->opt.tb)},
    {"flags", num[4]}, {"source", src.s}, {"prims", prims.s}, {"body", body.s},
  };
  rcStatus rc = tpl_fill(out, "program.c.tpl", tpl_text("program.c.tpl"), v, (int)(sizeof v / sizeof *v), e);
  buf_free(&body), buf_free(&prims), buf_free(&name), buf_free(&src);
  return rc;
}
