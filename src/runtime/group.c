/*
** group.c — matching a group's queued calls across ranks, and the order
** their collectives launch in (group.h).
*/
#include <stdlib.h>
#include <string.h>

#include "group.h"

void gq_match(const GqCall *c, int n, unsigned long long *seq, int *first) {
  for (int i = 0; i < n; i++) {
    seq[i] = c[i].before;
    for (int j = 0; j < i; j++) seq[i] += c[j].rank == c[i].rank;
    first[i] = i;
    for (int j = 0; j < i; j++)
      if (c[j].comms == c[i].comms && seq[j] == seq[i]) {
        first[i] = j;
        break;
      }
  }
}

/* The first ready collective in the queue's order goes next; it is ready
   once the call queued last before each of its calls, on that call's rank
   and on its stream, has launched (their own predecessors came first). So
   every rank's collectives go in its own order, and a stream's in the
   caller's: with communicator groups grouped unevenly, launching in the
   queue's order of first calls could reorder a stream's calls and leave two
   GPUs waiting for each other. Where the streams' orders and the ranks'
   conflict (virtual ranks queued rank by rank on one stream, or a caller's
   mistake), the first collective whose ranks' orders allow it goes: those
   never conflict with each other. */
int gq_order(const GqCall *c, int n, const int *first, int *order, char *ready, int *at) {
  int *on_rank = at, *on_stream = at + n, *next = at + 2 * n, m = 0; /* next: the collective's next call */
  if (n <= 0) return 0;
  for (int j = n - 1; j >= 0; j--) {
    on_rank[j] = on_stream[j] = next[j] = -1;
    for (int i = j - 1; i >= 0 && (on_rank[j] < 0 || on_stream[j] < 0); i--) {
      if (on_rank[j] < 0 && c[i].rank == c[j].rank) on_rank[j] = i;
      if (on_stream[j] < 0 && c[i].stream == c[j].stream && c[i].dev == c[j].dev) on_stream[j] = i;
    }
    for (int i = j + 1; i < n && next[j] < 0; i++)
      if (first[i] == first[j]) next[j] = i;
  }
  memset(ready, 0, (size_t)n);
  while (m < n) {
    int pick = -1, ranks_allow = -1, any = -1;
    for (int k = 0; k < n && pick < 0; k++) {
      if (first[k] != k || ready[k]) continue;
      any = any < 0 ? k : any;
      int ok[2] = {1, 1}; /* on ranks, on streams */
      for (int j = k; j >= 0; j = next[j])
        for (int e = 0; e < 2; e++) {
          int i = e ? on_stream[j] : on_rank[j];
          ok[e] &= i < 0 || ready[first[i]] || first[i] == k;
        }
      if (ok[0] && ranks_allow < 0) ranks_allow = k;
      if (ok[0] && ok[1]) pick = k;
    }
    if (pick < 0) pick = ranks_allow >= 0 ? ranks_allow : any; /* `any`: never, as the ranks' orders agree */
    if (pick < 0) break;
    ready[pick] = 1, order[m++] = pick;
  }
  return m;
}

static GqOpen *open_find(const GqOpens *o, unsigned long long seq) {
  for (int i = 0; i < o->n; i++)
    if (o->a[i].seq == seq) return &o->a[i];
  return NULL;
}

int gq_sig_same(const GqSig *a, const GqSig *b) {
  return a->form == b->form && a->count == b->count && a->dtype == b->dtype && a->op == b->op;
}

int gq_open_differs(const GqOpens *o, unsigned long long seq, const GqSig *s) {
  const GqOpen *r = open_find(o, seq);
  return r && !gq_sig_same(&r->sig, s);
}

int gq_open_reserve(GqOpens *o, int more) {
  if (o->n + more <= o->cap) return 0;
  int cap = o->n + more > 2 * o->cap ? o->n + more : 2 * o->cap;
  GqOpen *a = realloc(o->a, (size_t)cap * sizeof *a);
  if (!a) return -1;
  o->a = a, o->cap = cap;
  return 0;
}

void gq_open_note(GqOpens *o, unsigned long long seq, const GqSig *s, int ranks, int nranks) {
  GqOpen *r = open_find(o, seq);
  if (!r && ranks >= nranks) return;
  if (!r) r = &o->a[o->n++], *r = (GqOpen){seq, *s, 0};
  if ((r->seen += ranks) >= nranks) *r = o->a[--o->n];
}

void gq_open_forget(GqOpens *o, const void *form) {
  for (int i = 0; i < o->n;)
    if (o->a[i].sig.form == form) o->a[i] = o->a[--o->n];
    else i++;
}
