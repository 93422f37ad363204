/*
** dag.c — the dependency DAG: one node per task, data-dependency edges from
** read/write hazards (RAW, WAR, WAW) per rank · buffer · chunk, in task order;
** each task's links (its communication class) come from the topology.
**
** Every edge also records the rank whose memory the hazard is about: lowering
** turns it into a wait between two primitives of that rank.
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"

typedef struct {
  int task, next;
} Reader;

typedef struct {
  int task, rank;
} Edge;

static int edge_cmp(const void *a, const void *b) {
  const Edge *x = a, *y = b;
  if (x->task != y->task) return x->task - y->task;
  return x->rank - y->rank;
}

rcStatus dag_build(Dag *d, const Program *p, const Topo *t, int inplace, int manual, Err *e) {
  memset(d, 0, sizeof *d);
  RC_CHECK(prog_tasks(p, inplace, &d->t, &d->n, e));
  elide_copies(p, d->t, &d->n, manual);
  int n = d->n, R = p->nranks;
  int size[NBUF], off[NBUF], per = 0;
  for (int b = 0; b < NBUF; b++) size[b] = prog_bufchunks(p, b), off[b] = per, per += size[b];
  size_t nloc = (size_t)R * (size_t)per;
  int *lastw = xmalloc(nloc * sizeof *lastw), *head = xmalloc(nloc * sizeof *head);
  int *key = xmalloc(nloc * sizeof *key);
  memset(lastw, 0xff, nloc * sizeof *lastw); /* -1 */
  memset(head, 0xff, nloc * sizeof *head);
  Reader *rd = NULL;
  int nrd = 0, caprd = 0;
  Edge *tmp = NULL;
  int ntmp = 0, captmp = 0;
  d->pred_off = xmalloc(((size_t)n + 1) * sizeof(int));
  int *pred = NULL, *prank = NULL, npred = 0, cappred = 0, cappr = 0, npr = 0;
  d->link = xmalloc((size_t)n * TOPO_MAXHOP * sizeof(int));
  d->nchunk = 0;

  for (int i = 0; i < n; i++) {
    Task *tk = &d->t[i];
    size_t sbase = (size_t)tk->src * per + off[tk->sbuf] + tk->sidx;
    size_t dbase = (size_t)tk->dst * per + off[tk->dbuf] + tk->didx;
    size_t obase = (size_t)tk->dst * per + off[tk->obuf] + tk->oidx;
    ntmp = 0;
    /* RAW on what it reads: the source, and the operand when reducing. */
    for (int c = 0; c < tk->cnt; c++) {
      if (lastw[sbase + c] >= 0) VEC_PUSH(tmp, ntmp, captmp, ((Edge){lastw[sbase + c], tk->src}));
      if (tk->op == OP_REDUCE && lastw[obase + c] >= 0)
        VEC_PUSH(tmp, ntmp, captmp, ((Edge){lastw[obase + c], tk->dst}));
    }
    /* WAW and WAR on what it writes. */
    for (int c = 0; c < tk->cnt; c++) {
      if (lastw[dbase + c] >= 0) VEC_PUSH(tmp, ntmp, captmp, ((Edge){lastw[dbase + c], tk->dst}));
      for (int r = head[dbase + c]; r >= 0; r = rd[r].next)
        if (rd[r].task != i) VEC_PUSH(tmp, ntmp, captmp, ((Edge){rd[r].task, tk->dst}));
    }
    /* The chunk key follows the data: a forwarded chunk keeps its key. */
    if (lastw[sbase] >= 0)
      tk->chunk = key[sbase];
    else if (tk->op == OP_REDUCE && lastw[obase] >= 0)
      tk->chunk = key[obase];
    if (tk->chunk + tk->cnt > d->nchunk) d->nchunk = tk->chunk + tk->cnt;
    /* Update: readers of the source (and operand), then the destination's new writer. */
    for (int c = 0; c < tk->cnt; c++) {
      VEC_PUSH(rd, nrd, caprd, ((Reader){i, head[sbase + c]}));
      head[sbase + c] = nrd - 1;
      if (tk->op == OP_REDUCE && obase != dbase) {
        VEC_PUSH(rd, nrd, caprd, ((Reader){i, head[obase + c]}));
        head[obase + c] = nrd - 1;
      }
    }
    for (int c = 0; c < tk->cnt; c++) {
      lastw[dbase + c] = i;
      head[dbase + c] = -1;
      key[dbase + c] = tk->cnt == 1 ? tk->chunk : tk->didx + c; /* a block copy keeps each chunk's own key */
    }
    if (ntmp) qsort(tmp, (size_t)ntmp, sizeof *tmp, edge_cmp);
    d->pred_off[i] = npred;
    for (int k = 0; k < ntmp; k++) {
      if (k > 0 && tmp[k].task == tmp[k - 1].task && tmp[k].rank == tmp[k - 1].rank) continue;
      VEC_PUSH(pred, npred, cappred, tmp[k].task);
      VEC_PUSH(prank, npr, cappr, tmp[k].rank);
    }
    int *lk = d->link + (size_t)i * TOPO_MAXHOP;
    int nl = topo_route(t, tk->src, tk->dst, lk);
    for (int k = nl; k < TOPO_MAXHOP; k++) lk[k] = -1;
  }
  d->pred_off[n] = npred;
  d->pred = pred;
  d->prank = prank;
  free(lastw), free(head), free(key), free(rd), free(tmp);

  /* Successors: the transposed CSR. */
  d->succ_off = xcalloc((size_t)n + 1, sizeof(int));
  d->succ = xmalloc(((size_t)npred + 1) * sizeof(int));
  for (int k = 0; k < npred; k++) d->succ_off[pred[k] + 1]++;
  for (int i = 0; i < n; i++) d->succ_off[i + 1] += d->succ_off[i];
  int *fill = xmalloc(((size_t)n + 1) * sizeof *fill);
  memcpy(fill, d->succ_off, ((size_t)n + 1) * sizeof *fill);
  for (int i = 0; i < n; i++)
    for (int k = d->pred_off[i]; k < d->pred_off[i + 1]; k++) d->succ[fill[pred[k]]++] = i;
  free(fill);
  return RC_OK;
}

void dag_free(Dag *d) {
  free(d->t), free(d->link), free(d->pred_off), free(d->pred), free(d->prank);
  free(d->succ_off), free(d->succ);
  memset(d, 0, sizeof *d);
}
