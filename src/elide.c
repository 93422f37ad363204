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
** in the output buffer instead of in scratch first). Likewise a local
** reduction of what a copy wrote: the copy reduces instead (see
** fold_reductions).
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

/* Every location's accesses by the tasks not dropped, as CSR: location x's
   list is acc[cnt[x] .. cnt[x + 1]). */
static Access *accesses(const Locs *L, size_t nloc, Task *t, int n, const char *drop, int **cntp) {
  int *cnt = xcalloc(nloc + 2, sizeof *cnt);
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
  *cntp = cnt;
  return acc;
}

/* The task whose write location l holds when task e reads it, if e is the
   only reader of that value and it dies after (overwritten, or scratch):
   else -1. */
static int sole_writer(const Access *acc, const int *cnt, size_t l, int e, int scratch) {
  int k = cnt[l], end = cnt[l + 1], w = -1;
  while (k < end && !(acc[k].task == e && !acc[k].write)) {
    w = acc[k].write ? acc[k].task : -2;
    k++;
  }
  if (w < 0 || k == end) return -1;
  if (k + 1 < end && !acc[k + 1].write) return -1;
  return k + 1 < end || scratch ? w : -1;
}

/* Whether a task between w and e (exclusive) accesses location l (writes it,
   when `writes`). */
static int touched(const Access *acc, const int *cnt, size_t l, int w, int e, int writes) {
  for (int j = cnt[l]; j < cnt[l + 1]; j++)
    if (acc[j].task > w && acc[j].task < e && (acc[j].write || !writes)) return 1;
  return 0;
}

static void fold(const Locs *L, size_t nloc, Task *t, int n, char *drop) {
  int *cnt;
  Access *acc = accesses(L, nloc, t, n, drop, &cnt);
  char *moved = xcalloc((size_t)n + 1, 1); /* a producer is retargeted at most once */
  for (int e = 0; e < n; e++) {
    Task *E = &t[e];
    if (drop[e] || !is_copy(E) || E->cnt != 1) continue;
    size_t l = lid(L, E->src, E->sbuf, E->sidx), l2 = lid(L, E->dst, E->dbuf, E->didx);
    int w = sole_writer(acc, cnt, l, e, E->sbuf == BUF_SCRATCH);
    if (w < 0 || t[w].cnt != 1 || t[w].dst != E->src || drop[w] || moved[w] || touched(acc, cnt, l2, w, e, 0)) continue;
    t[w].dbuf = E->dbuf, t[w].didx = E->didx; /* the operand of a reduction stays L */
    drop[e] = moved[w] = 1;
  }
  free(cnt), free(acc), free(moved);
}

/*
** Folding a reduction. A local reduction E: D = O (+) L, where L holds
** exactly what one copy W wrote, nobody else reads that value, D is
** untouched and O unwritten between W and E: W reduces into D with operand O
** directly and E goes away (a receive into scratch, then its reduction into
** the output, becomes one receive that reduces: recvReduceCopy, or a direct
** put reduced where it lands). Not when O overlaps D: data cannot land on
** its operand, so the fold would turn a direct put into scratch and a local
** reduction into a transfer through the FIFO; nor when W's source is D
** shifted, which the reduction would overwrite while reading it.
*/
/* Whether chunks [i, i + n) of buffer a and [j, j + n) of buffer b (one rank) meet. */
static int overlap(int a, int i, int b, int j, int n) { return a == b && i < j + n && j < i + n; }

static void fold_reductions(const Locs *L, size_t nloc, Task *t, int n, char *drop) {
  int *cnt;
  Access *acc = accesses(L, nloc, t, n, drop, &cnt);
  char *moved = xcalloc((size_t)n + 1, 1);
  for (int e = 0; e < n; e++) {
    Task *E = &t[e];
    if (drop[e] || E->src != E->dst || E->op != OP_REDUCE || overlap(E->obuf, E->oidx, E->dbuf, E->didx, E->cnt)) continue;
    size_t l = lid(L, E->src, E->sbuf, E->sidx), d = lid(L, E->dst, E->dbuf, E->didx),
           o = lid(L, E->dst, E->obuf, E->oidx);
    int w = sole_writer(acc, cnt, l, e, E->sbuf == BUF_SCRATCH);
    for (int c = 1; c < E->cnt && w >= 0; c++)
      if (sole_writer(acc, cnt, l + c, e, E->sbuf == BUF_SCRATCH) != w) w = -1;
    if (w < 0 || drop[w] || moved[w] || moved[e]) continue;
    Task *W = &t[w];
    if (W->op != OP_COPY || W->dst != E->src || W->dbuf != E->sbuf || W->didx != E->sidx || W->cnt != E->cnt) continue;
    /* W's source, read in E's place, must not be part of D shifted (element
       for element the same place is fine: each is read before it is written). */
    if (W->src == E->dst && W->sidx != E->didx && overlap(W->sbuf, W->sidx, E->dbuf, E->didx, E->cnt)) continue;
    int busy = 0;
    for (int c = 0; c < E->cnt && !busy; c++) busy = touched(acc, cnt, d + c, w, e, 0) || touched(acc, cnt, o + c, w, e, 1);
    if (busy) continue;
    W->op = OP_REDUCE, W->dbuf = E->dbuf, W->didx = E->didx, W->obuf = E->obuf, W->oidx = E->oidx, W->chunk = E->chunk;
    drop[e] = moved[w] = 1;
  }
  free(cnt), free(acc), free(moved);
}

void elide_copies(const Program *p, Task *t, int *n, int manual) {
  Locs L = {0, {0}};
  for (int b = 0; b < NBUF; b++) L.off[b] = L.per, L.per += prog_bufchunks(p, b);
  size_t nloc = (size_t)p->nranks * L.per;
  char *drop = xcalloc((size_t)*n + 1, 1);
  forward(&L, nloc, t, *n, drop);
  fold(&L, nloc, t, *n, drop);
  if (!manual) fold_reductions(&L, nloc, t, *n, drop); /* it would move work between hand-placed TBs */
  /* A copy that now reads the place it writes (in place, a fold into what
     its writer read) does nothing, as prog_tasks drops such copies. */
  int m = 0;
  for (int i = 0; i < *n; i++)
    if (!drop[i] && !(is_copy(&t[i]) && t[i].sbuf == t[i].dbuf && t[i].sidx == t[i].didx)) t[m++] = t[i];
  *n = m;
  free(drop);
}
