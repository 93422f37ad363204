/*
** test_group.c — the runtime's matching of a group's queued calls across
** ranks and the order their collectives launch in (src/runtime/group.c),
** on queues written out here: one group of every rank, ranks a group ahead
** (on GPUs of their own and as virtual ranks on one stream, every call on
** the default stream), two communicator groups on shared streams, streams
** in no order, and random queues against the rule spelled out over every
** pair of calls; then the records that check a collective's ranks launched
** apart against each other.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "group.h"

enum { N = 16 };
static char rank_[8], group_[2], stream_[8]; /* addresses stand for communicators, groups, streams */

/* A call of rank r (of communicator group g) on stream s of GPU d, after `before` collectives of its rank;
   s < 0: the default stream (NULL). */
static GqCall call(int r, int g, int s, int d, unsigned long long before) {
  return (GqCall){&rank_[r], &group_[g], s < 0 ? NULL : &stream_[s], d, before};
}

/* Match and order q: want_first, and want_order (the first calls of the collectives in launch order, ended by
   -1). */
static void check(const GqCall *q, int n, const int *want_first, const int *want_order) {
  unsigned long long seq[N];
  int first[N], order[N], at[3 * N];
  char ready[N];
  gq_match(q, n, seq, first);
  for (int i = 0; i < n; i++) assert_int_equal(first[i], want_first[i]);
  int m = gq_order(q, n, first, order, ready, at), k = 0;
  for (; want_order[k] >= 0; k++) assert_int_equal(order[k], want_order[k]);
  assert_int_equal(m, k);
}

/* Two ranks, each calling A then B in one group: the k-th calls pair. */
static void test_one_group(void **state) {
  (void)state;
  GqCall q[] = {call(0, 0, 0, 0, 5), call(0, 0, 0, 0, 5), call(1, 0, 1, 1, 5), call(1, 0, 1, 1, 5)};
  check(q, 4, (int[]){0, 1, 0, 1}, (int[]){0, 1, -1});
}

/* Rank 0 a group ahead: its A launched alone before; now the others' A and everyone's B. */
static void test_staggered(void **state) {
  (void)state;
  GqCall q[] = {call(1, 0, 1, 1, 0), call(2, 0, 2, 2, 0), call(0, 0, 0, 0, 1), call(1, 0, 1, 1, 0),
                call(2, 0, 2, 2, 0)};
  check(q, 5, (int[]){0, 0, 2, 2, 2}, (int[]){0, 2, -1});
}

/* Rank 0 a group ahead, queued rank by rank, every call on the default stream of its GPU: rank 0's B comes
   first in the queue, yet the others' A goes first. The same with ranks 1 and 2 virtual, on one stream of
   GPU 1, where that stream's order (rank 1's B before rank 2's A) yields to the ranks'. */
static void test_rank_order(void **state) {
  (void)state;
  GqCall q[] = {call(0, 0, -1, 0, 1), call(1, 0, -1, 1, 0), call(1, 0, -1, 1, 0), call(2, 0, -1, 2, 0),
                call(2, 0, -1, 2, 0)};
  check(q, 5, (int[]){0, 1, 0, 1, 0}, (int[]){1, 0, -1});
  GqCall v[] = {call(0, 0, 0, 0, 1), call(1, 0, 1, 1, 0), call(1, 0, 1, 1, 0), call(2, 0, 1, 1, 0),
                call(2, 0, 1, 1, 0)};
  check(v, 5, (int[]){0, 1, 0, 1, 0}, (int[]){1, 0, -1});
}

/* Two communicator groups (a: ranks 0-1, b: ranks 2-3) on shared streams (GPU 0: ranks 0 and 2, GPU 1: 1 and
   3). The first queue holds GPU 0's A (a), C (b), B (a): ordered by group first, B would go before C on
   GPU 0's stream while GPU 1 runs C before B, and the two would wait for each other. */
static void test_two_groups(void **state) {
  (void)state;
  GqCall first_queue[] = {call(0, 0, 0, 0, 0), call(2, 1, 0, 0, 0), call(0, 0, 0, 0, 0)};
  check(first_queue, 3, (int[]){0, 1, 2}, (int[]){0, 1, 2, -1});
  GqCall last_queue[] = {call(3, 1, 1, 1, 0), call(1, 0, 1, 1, 1)}; /* GPU 1: C, then B (its A went alone) */
  check(last_queue, 2, (int[]){0, 1}, (int[]){0, 1, -1});
}

/* Streams in no order (GPU 0 queues A before C, GPU 1 C before A, A and C of different groups): every
   collective still launches, in the ranks' orders. */
static void test_no_order(void **state) {
  (void)state;
  GqCall q[] = {call(0, 0, 0, 0, 0), call(2, 1, 0, 0, 0), call(3, 1, 1, 1, 0), call(1, 0, 1, 1, 0)};
  check(q, 4, (int[]){0, 1, 1, 0}, (int[]){0, 1, -1});
}

/* The rule spelled out over every pair of calls: collective a must launch before b when a call of a is
   queued before a call of b on the same rank, or on the same stream of one GPU; the first collective in the
   queue with none of those left goes next. Returns how many launched; *cyclic when the calls had no order. */
static int all_pairs(const GqCall *c, int n, const int *first, int *order, int *cyclic) {
  char before[N][N] = {{0}}, gone[N] = {0};
  for (int j = 0; j < n; j++)
    for (int i = 0; i < j; i++)
      if (first[i] != first[j] && (c[i].rank == c[j].rank || (c[i].stream == c[j].stream && c[i].dev == c[j].dev)))
        before[first[i]][first[j]] = 1;
  int m = 0;
  *cyclic = 0;
  for (;;) {
    int next = -1, oldest = -1;
    for (int b = n - 1; b >= 0; b--) {
      if (first[b] != b || gone[b]) continue;
      int waits = 0;
      for (int a = 0; a < n; a++) waits |= before[a][b] && !gone[a];
      oldest = b;
      if (!waits) next = b;
    }
    if (next < 0 && oldest >= 0) next = oldest, *cyclic = 1;
    if (next < 0) return m;
    gone[next] = 1, order[m++] = next;
  }
}

/* Random queues of up to 12 calls of 4 ranks in two communicator groups, each rank on one of 2 GPUs and any
   of 3 streams, matched by gq_match from random counts before: every collective launches once, every
   rank's in its own order, and where the streams are in an order too, as the all-pairs rule launches them. */
static void test_random(void **state) {
  (void)state;
  srand(7);
  int compared = 0, cyclic_seen = 0;
  for (int t = 0; t < 100000; t++) {
    int n = 1 + rand() % 12, first[N], o1[N], o2[N], at[3 * N], where[N], cyclic;
    unsigned long long seq[N], before[4];
    GqCall q[N];
    char ready[N];
    for (int r = 0; r < 4; r++) before[r] = (unsigned long long)(rand() % 2);
    for (int i = 0; i < n; i++) {
      int r = rand() % 4;
      q[i] = call(r, r / 2, rand() % 3, r % 2, before[r]);
    }
    gq_match(q, n, seq, first);
    int m1 = gq_order(q, n, first, o1, ready, at), leaders = 0;
    for (int i = 0; i < n; i++) leaders += first[i] == i;
    assert_int_equal(m1, leaders);
    for (int k = 0; k < m1; k++) where[o1[k]] = k;
    for (int j = 0; j < n; j++) /* each rank's collectives in its order */
      for (int i = 0; i < j; i++)
        if (q[i].rank == q[j].rank) assert_true(where[first[i]] < where[first[j]]);
    int m2 = all_pairs(q, n, first, o2, &cyclic);
    cyclic_seen += cyclic;
    if (cyclic) continue;
    assert_int_equal(m1, m2);
    assert_memory_equal(o1, o2, sizeof(int) * (size_t)m1);
    compared++;
  }
  assert_true(compared > 10000 && cyclic_seen > 100);
}

/* Three ranks launch collective 5 apart, and collective 6 apart too, interleaved: a rank that differs in count,
   datatype, op or form is told, the others agree, and a record goes once all three ranks have launched. A
   collective every rank launches at once leaves none; a plan's unload forgets its form's. */
static void test_open(void **state) {
  (void)state;
  GqOpens o = {0};
  char form[2];
  GqSig a = {&form[0], 1000, 2, 0}, b = {&form[1], 64, 9, 1};
  assert_int_equal(gq_open_reserve(&o, 4), 0);
  assert_false(gq_open_differs(&o, 5, &b)); /* nobody launched 5 yet */
  gq_open_note(&o, 5, &a, 1, 3);
  gq_open_note(&o, 6, &b, 2, 3);
  assert_int_equal(o.n, 2);
  GqSig other[] = {{&form[1], 1000, 2, 0}, {&form[0], 999, 2, 0}, {&form[0], 1000, 3, 0}, {&form[0], 1000, 2, 4}};
  for (int k = 0; k < 4; k++) assert_true(gq_open_differs(&o, 5, &other[k]));
  assert_false(gq_open_differs(&o, 5, &a));
  assert_true(gq_open_differs(&o, 6, &a));
  gq_open_note(&o, 5, &a, 1, 3);
  assert_int_equal(o.n, 2);
  gq_open_note(&o, 6, &b, 1, 3); /* 6 done */
  assert_int_equal(o.n, 1);
  assert_false(gq_open_differs(&o, 6, &a));
  gq_open_note(&o, 7, &a, 3, 3); /* launched at once */
  assert_int_equal(o.n, 1);
  gq_open_note(&o, 5, &a, 1, 3);
  assert_int_equal(o.n, 0);
  assert_int_equal(gq_open_reserve(&o, 2), 0);
  gq_open_note(&o, 8, &a, 1, 2);
  gq_open_note(&o, 9, &b, 1, 2);
  gq_open_forget(&o, &form[0]);
  assert_int_equal(o.n, 1);
  assert_true(gq_open_differs(&o, 9, &a));
  free(o.a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_one_group),  cmocka_unit_test(test_staggered), cmocka_unit_test(test_rank_order),
    cmocka_unit_test(test_two_groups), cmocka_unit_test(test_no_order),  cmocka_unit_test(test_random),
    cmocka_unit_test(test_open),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
