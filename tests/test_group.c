/*
** test_group.c — the runtime's matching of a group's queued calls across
** ranks and the order their collectives launch in (src/runtime/group.c),
** on queues written out here: one group of every rank, ranks a group ahead,
** virtual ranks on one stream, two communicator groups on shared streams,
** and random queues against the rule spelled out over every pair of calls.
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

/* A call of rank r (of communicator group g) on stream s, after `before` collectives of its rank. */
static GqCall call(int r, int g, int s, unsigned long long before) {
  return (GqCall){&rank_[r], &group_[g], &stream_[s], before};
}

/* Match and order q; `want` lists the first calls of the collectives in launch order, -1 ended. */
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
  GqCall q[] = {call(0, 0, 0, 5), call(0, 0, 0, 5), call(1, 0, 1, 5), call(1, 0, 1, 5)};
  check(q, 4, (int[]){0, 1, 0, 1}, (int[]){0, 1, -1});
}

/* Rank 0 a group ahead: its A launched alone before; now the others' A and everyone's B. */
static void test_staggered(void **state) {
  (void)state;
  GqCall q[] = {call(1, 0, 1, 0), call(2, 0, 2, 0), call(0, 0, 0, 1), call(1, 0, 1, 0), call(2, 0, 2, 0)};
  /* ranks 1 and 2: A (their 1st) then B (their 2nd); rank 0's call is its 2nd: B */
  check(q, 5, (int[]){0, 0, 2, 2, 2}, (int[]){0, 2, -1});
}

/* A collective whose first call in the queue comes after another rank's later one still launches first. */
static void test_rank_order(void **state) {
  (void)state;
  /* rank 0 did A before this queue; rank 1 queues A, B; rank 0 queues B */
  GqCall q[] = {call(0, 0, 0, 1), call(1, 0, 1, 0), call(1, 0, 1, 0)};
  check(q, 3, (int[]){0, 1, 0}, (int[]){1, 0, -1});
}

/* Virtual ranks on one stream: X of both, then Y of both. */
static void test_shared_stream(void **state) {
  (void)state;
  GqCall q[] = {call(0, 0, 0, 0), call(1, 0, 0, 0), call(0, 0, 0, 0), call(1, 0, 0, 0)};
  check(q, 4, (int[]){0, 0, 2, 2}, (int[]){0, 2, -1});
}

/* Two communicator groups (a: ranks 0-1, b: ranks 2-3) on shared streams (GPU 0: ranks 0 and 2, GPU 1: 1 and
   3). The first queue holds GPU 0's A (a), C (b), B (a): ordered by group first, B would go before C on
   GPU 0's stream while GPU 1 runs C before B, and the two would wait for each other. */
static void test_two_groups(void **state) {
  (void)state;
  GqCall first_queue[] = {call(0, 0, 0, 0), call(2, 1, 0, 0), call(0, 0, 0, 0)};
  check(first_queue, 3, (int[]){0, 1, 2}, (int[]){0, 1, 2, -1});
  GqCall last_queue[] = {call(3, 1, 1, 0), call(1, 0, 1, 1)}; /* GPU 1: C, then B (its A went alone) */
  check(last_queue, 2, (int[]){0, 1}, (int[]){0, 1, -1});
}

/* The rule spelled out over every pair of calls: collective a must launch
   before b when a call of a is queued before a call of b on the same rank or
   stream; the first collective in the queue with none of those left goes
   next. Returns how many launched; *cyclic when the calls had no order. */
static int all_pairs(const GqCall *c, int n, const int *first, int *order, int *cyclic) {
  char before[N][N] = {{0}}, gone[N] = {0};
  for (int j = 0; j < n; j++)
    for (int i = 0; i < j; i++)
      if (first[i] != first[j] && (c[i].rank == c[j].rank || c[i].stream == c[j].stream))
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

/* Random queues of up to 12 calls on 4 ranks of one group and 3 streams: where the calls are in an order
   at all, gq_order launches as the all-pairs rule does. */
static void test_random(void **state) {
  (void)state;
  srand(7);
  int compared = 0;
  for (int t = 0; t < 100000; t++) {
    int n = 1 + rand() % 12, first[N], o1[N], o2[N], at[3 * N], cyclic, bad = 0;
    GqCall q[N];
    char ready[N];
    for (int i = 0; i < n; i++) q[i] = call(rand() % 4, 0, rand() % 3, 0);
    for (int i = 0; i < n; i++) first[i] = i && rand() % 2 ? first[rand() % i] : i;
    for (int i = 0; i < n; i++) /* two calls of one rank in one collective: not a queue match() makes */
      for (int j = 0; j < i; j++) bad |= first[i] == first[j] && q[i].rank == q[j].rank;
    if (bad) continue;
    int m1 = gq_order(q, n, first, o1, ready, at), m2 = all_pairs(q, n, first, o2, &cyclic);
    if (cyclic) continue;
    assert_int_equal(m1, m2);
    assert_memory_equal(o1, o2, sizeof(int) * (size_t)m1);
    compared++;
  }
  assert_true(compared > 10000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_one_group), cmocka_unit_test(test_staggered), cmocka_unit_test(test_rank_order),
    cmocka_unit_test(test_shared_stream), cmocka_unit_test(test_two_groups), cmocka_unit_test(test_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
