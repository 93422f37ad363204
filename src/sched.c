/*
** sched.c — scheduling: the DAG's tasks into sub-pipelines, concatenated into
** one global task pipeline.
**
** HPDS (the paper's Algorithm 1). Tasks are grouped by chunk key. A
** sub-pipeline is filled by repeatedly taking the highest-priority chunk that
** is still flagged, and inserting every one of its tasks that is ready (all
** predecessors placed, in an earlier sub-pipeline or this one: a dependant in
** the same sub-pipeline runs one micro-batch behind) and whose links are not
** yet used in this sub-pipeline. A chunk that contributes loses one priority
** point; a chunk that cannot contribute is unflagged until the next
** sub-pipeline. Priorities persist across sub-pipelines.
**
** Initial priority (the paper leaves it open): the length of the chunk's
** longest dependency chain, counted in its own tasks. A contribution usually
** advances a chunk by one level, so the priority tracks the chunk's remaining
** critical path: chunks with the longest way to go start first, and a chunk
** that has been served gives way to under-served ones, as the paper asks.
** Ties go to the lower chunk key.
**
** Round-robin (the paper's baseline): same sub-pipeline rule, but chunks are
** visited from a circular queue in ascending key order, restarted for every
** sub-pipeline, with no memory of earlier contributions. Where every chunk's
** DAG has the same shape and each contributes once per sub-pipeline (HM
** all-gather on two nodes), HPDS's priorities stay equal, ties go to the
** lower key, and the two produce the same pipeline.
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"

typedef struct {
  int *t;
  int n, cap;
} Ready;

typedef struct {
  const int *prio;
  int *h;
  int n;
} Heap;

static int heap_less(const Heap *q, int a, int b) { /* a before b? */
  if (q->prio[a] != q->prio[b]) return q->prio[a] > q->prio[b];
  return a < b;
}

static void heap_push(Heap *q, int c) {
  int i = q->n++;
  q->h[i] = c;
  while (i > 0 && heap_less(q, q->h[i], q->h[(i - 1) / 2])) {
    int p = (i - 1) / 2, tmp = q->h[p];
    q->h[p] = q->h[i], q->h[i] = tmp, i = p;
  }
}

static int heap_pop(Heap *q) {
  int top = q->h[0], i = 0;
  q->h[0] = q->h[--q->n];
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < q->n && heap_less(q, q->h[l], q->h[m])) m = l;
    if (r < q->n && heap_less(q, q->h[r], q->h[m])) m = r;
    if (m == i) break;
    int tmp = q->h[m];
    q->h[m] = q->h[i], q->h[i] = tmp, i = m;
  }
  return top;
}

/* Longest chain of same-chunk tasks ending at each task; max per chunk. */
static void initial_priority(const Dag *d, int *prio) {
  int *depth = xcalloc((size_t)d->n, sizeof *depth);
  for (int i = 0; i < d->n; i++) {
    int best = 0;
    for (int k = d->pred_off[i]; k < d->pred_off[i + 1]; k++) {
      int p = d->pred[k];
      if (d->t[p].chunk == d->t[i].chunk && depth[p] > best) best = depth[p];
    }
    depth[i] = best + 1;
    if (depth[i] > prio[d->t[i].chunk]) prio[d->t[i].chunk] = depth[i];
  }
  free(depth);
}

rcStatus sched_run(Sched *s, const Dag *d, SchedKind kind, Err *e) {
  (void)e;
  int n = d->n, nc = d->nchunk;
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->order = xmalloc(((size_t)n + 1) * sizeof(int));
  s->slot = xmalloc(((size_t)n + 1) * sizeof(int));
  s->pos = xmalloc(((size_t)n + 1) * sizeof(int));
  int *pending = xmalloc(((size_t)n + 1) * sizeof *pending);
  int *prio = xcalloc((size_t)nc + 1, sizeof *prio), *left = xcalloc((size_t)nc + 1, sizeof *left);
  Ready *ready = xcalloc((size_t)nc + 1, sizeof *ready);
  int maxlink = 0;
  for (int i = 0; i < n * TOPO_MAXHOP; i++)
    if (d->link[i] >= maxlink) maxlink = d->link[i] + 1;
  int *used = xmalloc(((size_t)maxlink + 1) * sizeof *used); /* slot that last used a link */
  memset(used, 0xff, ((size_t)maxlink + 1) * sizeof *used);
  int *queue = xmalloc(((size_t)nc + 1) * sizeof *queue);
  Heap heap = {prio, queue, 0};
  int *rrq = xmalloc(((size_t)nc + 1) * sizeof *rrq);

  for (int i = 0; i < n; i++) {
    pending[i] = d->pred_off[i + 1] - d->pred_off[i];
    left[d->t[i].chunk]++;
    if (pending[i] == 0) {
      Ready *r = &ready[d->t[i].chunk];
      VEC_PUSH(r->t, r->n, r->cap, i);
    }
  }
  if (kind == SK_HPDS) initial_priority(d, prio);

  int placed = 0, slot = 0;
  while (placed < n) {
    /* Open a sub-pipeline: every chunk with work left is flagged. */
    int qh = 0, qn = 0;
    heap.n = 0;
    for (int c = 0; c < nc; c++)
      if (left[c] > 0) {
        if (kind == SK_HPDS) heap_push(&heap, c);
        else rrq[qn++ % nc] = c;
      }
    int before = placed;
    while (kind == SK_HPDS ? heap.n > 0 : qh < qn) {
      int c = kind == SK_HPDS ? heap_pop(&heap) : rrq[qh++ % nc];
      Ready *r = &ready[c];
      int took = 0, keep = 0, end = r->n;
      for (int k = 0; k < end; k++) {
        int t = r->t[k];
        const int *lk = d->link + (size_t)t * TOPO_MAXHOP;
        int free_ = 1;
        for (int h = 0; h < TOPO_MAXHOP && lk[h] >= 0; h++)
          if (used[lk[h]] == slot) free_ = 0;
        if (!free_) {
          r->t[keep++] = t; /* stays ready for a later sub-pipeline */
          continue;
        }
        for (int h = 0; h < TOPO_MAXHOP && lk[h] >= 0; h++) used[lk[h]] = slot;
        s->slot[t] = slot;
        s->pos[t] = placed;
        s->order[placed++] = t;
        left[c]--;
        took++;
        for (int j = d->succ_off[t]; j < d->succ_off[t + 1]; j++) {
          int u = d->succ[j];
          if (--pending[u] == 0) {
            Ready *ru = &ready[d->t[u].chunk];
            VEC_PUSH(ru->t, ru->n, ru->cap, u);
          }
        }
      }
      /* Tasks readied during the scan (appended past `end`) stay queued; a
         chunk with none ever queued has no list (r->t is NULL). */
      if (r->n > end) memmove(r->t + keep, r->t + end, (size_t)(r->n - end) * sizeof *r->t);
      r->n = keep + (r->n - end);
      if (took) {
        if (kind == SK_HPDS) {
          prio[c]--;
          heap_push(&heap, c);
        } else {
          rrq[qn++ % nc] = c; /* circular: each chunk is queued at most once */
        }
      }
    }
    if (placed == before) break; /* cannot happen for a DAG; guards the loop */
    slot++;
  }
  s->nslots = slot;
  free(pending), free(prio), free(left), free(used), free(queue), free(rrq);
  for (int c = 0; c < nc; c++) free(ready[c].t);
  free(ready);
  return placed == n ? RC_OK : err_set(e, RC_EINVAL, "scheduler stalled after %d of %d tasks", placed, n);
}

void sched_free(Sched *s) {
  free(s->order), free(s->slot), free(s->pos);
  memset(s, 0, sizeof *s);
}
