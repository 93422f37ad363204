/*
** elide.c — remove local copies the data does not need, as NCCL does when it
** reads the send buffer directly and writes results straight to the receive
** buffer. Works on the task list, before the DAG; the verifier checks the
** result like any other.
**
** Forwarding. A local copy P of locations S into D, where S is not written
** while P's values are still read: every later reader of D that sees P's
** value reads S instead. If every location of D is overwritten later (or is
** scratch, whose final value nobody needs), P itself goes away. The
** out-of-place prologue of a paper-style all-reduce is such a copy: the first
** sends and the first reductions read the input directly.
**
** Folding. A local copy E of L into L', where L holds exactly what one task W
** wrote, nobody else reads that value, and L' is untouched between W and E: W
** writes L' directly and E goes away (a reduce-scatter's last reduction lands
** in the output buffer instead of in scratch first).
*/
#include <stdlib.h>
#include <string.h>

#include "core.h"

typedef struct {
  int per, off[NBUF];
} Locs;

static size_t lid(const Locs *l, int rank, int buf, int idx) { return (size_t)rank * l->per + l->off[buf] + idx; }

static int is_copy(const Task *t) { return t->src == t->dst && t->op == OP_COPY; }

/* The read ranges of a task: its source, and its operand when it reduces. */
static int reads(const Task *t, int rank[2], int buf[2], int *idx[2], Task *w) {
  rank[0] = w->src, buf[0] = w->sbuf, idx[0] = &w->sidx;
  if (t->op != OP_REDUCE) return 1;
  rank[1] = w->dst, buf[1] = w->obuf, idx[1] = &w->oidx;
  return 2;
}

static void forward(const Locs *L, size_t nloc, Task *t, int n, char *drop) {
  int *lastw = xmalloc((nloc + 1) * sizeof *lastw), *srcof = xmalloc((nloc + 1) * sizeof *srcof);
  int *live = xcalloc((size_t)n + 1, sizeof *live);   /* candidate: D locations still holding its value */
  char *bad = xcalloc((size_t)n + 1, 1);
  memset(lastw, 0xff, (nloc + 1) * sizeof *lastw);
  memset(srcof, 0xff, (nloc + 1) * sizeof *srcof);
  for (int i = 0; i < n; i++) {
    Task *k = &t[i];
    int rk[2], bf[2], *ix[2], nr = reads(k, rk, bf, ix, k);
    /* A read of a candidate's value must lie inside its destination, all of
       it: a read that also sees other values keeps every copy it sees. */
    for (int r = 0; r < nr; r++) {
      size_t b = lid(L, rk[r], bf[r], *ix[r]);
      int P = lastw[b];
      for (int c = 0; c < k->cnt; c++)
        if (lastw[b + c] != P) {
          for (int j = 0; j < k->cnt; j++)
            if (lastw[b + j] >= 0 && is_copy(&t[lastw[b + j]])) bad[lastw[b + j]] = 1;
          break;
        }
      if (P < 0 || !is_copy(&t[P])) continue;
      if (*ix[r] < t[P].didx || *ix[r] + k->cnt > t[P].didx + t[P].cnt || bf[r] != t[P].dbuf) bad[P] = 1;
    }
    size_t d = lid(L, k->dst, k->dbuf, k->didx);
    for (int c = 0; c < k->cnt; c++) {
      int P = lastw[d + c];
      if (P >= 0 && is_copy(&t[P])) live[P]--;
      /* Writing a copy's source while its destination still holds the copied
         value would change what forwarded readers see. */
      int Q = srcof[d + c];
      if (Q >= 0) {
        size_t dq = lid(L, t[Q].dst, t[Q].dbuf, t[Q].didx) + (d + c - lid(L, t[Q].src, t[Q].sbuf, t[Q].sidx));
        if (lastw[dq] == Q) bad[Q] = 1;
      }
      lastw[d + c] = i;
    }
    if (is_copy(k)) {
      live[i] = k->cnt;
      size_t s = lid(L, k->src, k->sbuf, k->sidx);
      for (int c = 0; c < k->cnt; c++) {
        if (srcof[s + c] >= 0) bad[srcof[s + c]] = bad[i] = 1; /* two copies of one source: keep both */
        srcof[s + c] = i;
      }
    }
  }
  /* Elide what is dead at the end: overwritten, or only ever in scratch. */
  for (int i = 0; i < n; i++)
    if (is_copy(&t[i]) && !bad[i] && (live[i] == 0 || t[i].dbuf == BUF_SCRATCH)) drop[i] = 1;
  /* Second pass: point the readers of elided copies at the copies' sources. */
  memset(lastw, 0xff, (nloc + 1) * sizeof *lastw);
  for (int i = 0; i < n; i++) {
    Task *k = &t[i];
    int rk[2], bf[2], *ix[2], nr = reads(k, rk, bf, ix, k);
    for (int r = 0; r < nr; r++) {
      int P = lastw[lid(L, rk[r], bf[r], *ix[r])];
      if (P < 0 || !drop[P]) continue;
      int off = *ix[r] - t[P].didx;
      if (r == 0) k->sbuf = t[P].sbuf, k->sidx = t[P].sidx + off;
      else k->obuf = t[P].sbuf, k->oidx = t[P].sidx + off;
    }
    size_t d = lid(L, k->dst, k->dbuf, k->didx);
    for (int c = 0; c < k->cnt; c++) lastw[d + c] = i;
  }
  free(lastw), free(srcof), free(live), free(bad);
}

/* Accesses of one location, in task order. */
typedef struct {
  int task;
  char write;
} Access;

static void fold(const Locs *L, size_t nloc, Task *t, int n, char *drop) {
  /* Per-location access lists (CSR), in task order. */
  int *cnt = xcalloc(nloc + 2, sizeof *cnt);
  char *moved = xcalloc((size_t)n + 1, 1); /* a producer is retargeted at most once */
  for (int i = 0; i < n; i++) {
    if (drop[i]) continue;
    Task *k = &t[i];
    int rk[2], bf[2], *ix[2], nr = reads(k, rk, bf, ix, k);
    for (int r = 0; r < nr; r++)
      for (int c = 0; c < k->cnt; c++) cnt[lid(L, rk[r], bf[r], *ix[r]) + c + 2]++;
    for (int c = 0; c < k->cnt; c++) cnt[lid(L, k->dst, k->dbuf, k->didx) + c + 2]++;
  }
  for (size_t x = 0; x < nloc; x++) cnt[x + 2] += cnt[x + 1];
  Access *acc = xmalloc(((size_t)cnt[nloc + 1] + 1) * sizeof *acc);
  for (int i = 0; i < n; i++) {
    if (drop[i]) continue;
    Task *k = &t[i];
    int rk[2], bf[2], *ix[2], nr = reads(k, rk, bf, ix, k);
    for (int r = 0; r < nr; r++)
      for (int c = 0; c < k->cnt; c++) acc[cnt[lid(L, rk[r], bf[r], *ix[r]) + c + 1]++] = (Access){i, 0};
    for (int c = 0; c < k->cnt; c++) acc[cnt[lid(L, k->dst, k->dbuf, k->didx) + c + 1]++] = (Access){i, 1};
  }
  /* cnt[x] .. cnt[x+1] is now location x's list. */
  for (int e = 0; e < n; e++) {
    Task *E = &t[e];
    if (drop[e] || !is_copy(E) || E->cnt != 1) continue;
    size_t l = lid(L, E->src, E->sbuf, E->sidx), l2 = lid(L, E->dst, E->dbuf, E->didx);
    /* Find E's read of L, and the write W just before it. */
    int k = cnt[l], end = cnt[l + 1], w = -1;
    while (k < end && !(acc[k].task == e && !acc[k].write)) {
      w = acc[k].write ? acc[k].task : -2;
      k++;
    }
    if (w < 0 || k == end || t[w].cnt != 1 || t[w].dst != E->src || drop[w] || moved[w]) continue;
    /* Nobody else reads W's value; L is overwritten afterwards or is scratch. */
    int after = k + 1;
    if (after < end && !acc[after].write) continue;
    if (after == end && E->sbuf != BUF_SCRATCH) continue;
    /* L' untouched between W and E. */
    int touched = 0;
    for (int j = cnt[l2]; j < cnt[l2 + 1]; j++)
      if (acc[j].task > w && acc[j].task < e) touched = 1;
    if (touched) continue;
    t[w].dbuf = E->dbuf, t[w].didx = E->didx; /* the operand of a reduction stays L */
    drop[e] = moved[w] = 1;
  }
  free(cnt), free(acc), free(moved);
}

void elide_copies(const Program *p, Task *t, int *n) {
  Locs L = {0, {0}};
  for (int b = 0; b < NBUF; b++) L.off[b] = L.per, L.per += prog_bufchunks(p, b);
  size_t nloc = (size_t)p->nranks * L.per;
  char *drop = xcalloc((size_t)*n + 1, 1);
  forward(&L, nloc, t, *n, drop);
  fold(&L, nloc, t, *n, drop);
  int m = 0;
  for (int i = 0; i < *n; i++)
    if (!drop[i]) t[m++] = t[i];
  *n = m;
  free(drop);
}
