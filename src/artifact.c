/*
** artifact.c — a compiled plan as the GPU runtime loads it (src/runtime):
** one section per placement, each a few lines of numbers then the emitted
** CUDA source. Text, so a person can read what the runtime will set up:
**
**   resccl-plan 8                  (RX_PLAN_VERSION, kernels-templates/cuda_abi.h)
**   name allreduce_ring
**   collective allreduce
**   placement out-of-place         (or in-place)
**   ranks 2
**   chunks 2                       (chunks per row of `count` elements)
**   bufchunks 2 2 0                (chunks per rank of input, output, scratch)
**   fifo-slots 0                   (slots a FIFO must hold: 0 = any number works)
**   maxcnt 1                       (most chunks one transfer moves)
**   even 0                         (1: count must split evenly into chunks, as
**                                   a transfer changes chunk position)
**   tbs 2 2                        (TBs per rank)
**   conns 2                        (then one "src dst" line each)
**   flags 2                        (then one line each: the rank that holds it)
**   copies 0                       (copy-engine copies, tballoc.c's offload; then one
**                                   "src rbuf ridx dst wbuf widx cnt flag after" line
**                                   each, flag -1 where no reduction waits for it,
**                                   after the counter it waits for, or -1)
**   counters 0                     (counters copies wait for: RX_CE_POST's)
**   pulls 0                        (receives that read the sender's buffer, tballoc.c's
**                                   pull_in: the runtime runs them only with every
**                                   rank's buffers)
**   source 12345                   (then exactly that many bytes of CUDA)
*/
#include <stdlib.h>

#include "core.h"
#include "../kernels-templates/cuda_abi.h"

rcStatus plan_artifact(const Plan *pl, Buf *out, Err *e) {
  const Program *p = pl->prog;
  Buf src;
  buf_init(&src);
  rcStatus rc = emit_program(pl, EMIT_CUDA, &src, e);
  if (rc != RC_OK) {
    buf_free(&src);
    return rc;
  }
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
  buf_printf(out, "source %zu\n", src.n);
  buf_add(out, src.s, src.n);
  buf_puts(out, "\n");
  buf_free(&src);
  return RC_OK;
}
