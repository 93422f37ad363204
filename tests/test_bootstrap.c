/*
** test_bootstrap.c — the rendezvous (src/runtime/bootstrap.c) over the
** loopback interface, no GPU: ranks as threads of this process and as
** processes of their own; then every fault a job can make (two ranks
** claiming one rank, counts or sizes that disagree, an id used twice,
** altered or made up, a rank that never comes, an interface that does not
** exist) ends each rank's call with a named error, in time.
*/
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bootstrap.h"

#define PAYLOAD 1000 /* bytes per rank: not a multiple of anything */

typedef struct {
  const BsId *id;
  int rank, nranks;
  size_t n;
  double timeout_s;
  resccl_result_t rc;
  char err[1024];
  unsigned char *all;
} Rank;

static Rank mk(const BsId *id, int rank, int nranks, size_t n, double timeout_s) {
  return (Rank){.id = id, .rank = rank, .nranks = nranks, .n = n, .timeout_s = timeout_s};
}

static void fill(unsigned char *p, int rank, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(rank * 131 + i * 7 + 1);
}

static void *run_rank(void *arg) {
  Rank *r = arg;
  unsigned char mine[BS_MAX_PAYLOAD];
  fill(mine, r->rank, r->n);
  r->all = malloc((size_t)r->nranks * r->n + 1);
  memset(r->all, 0xEE, (size_t)r->nranks * r->n + 1); /* poisoned: the table must overwrite it */
  r->rc = bs_allgather(r->id, r->rank, r->nranks, mine, r->n, r->all, r->timeout_s);
  snprintf(r->err, sizeof r->err, "%s", resccl_get_last_error());
  return NULL;
}

/* Run ranks[0..k) as threads; the caller checks each. */
static void run_threads(Rank *ranks, int k) {
  pthread_t t[64];
  for (int i = 0; i < k; i++) assert_int_equal(pthread_create(&t[i], NULL, run_rank, &ranks[i]), 0);
  for (int i = 0; i < k; i++) pthread_join(t[i], NULL);
}

static void check_table(const Rank *r) {
  unsigned char want[BS_MAX_PAYLOAD];
  for (int q = 0; q < r->nranks; q++) {
    fill(want, q, r->n);
    assert_memory_equal(r->all + (size_t)q * r->n, want, r->n);
  }
  assert_int_equal(r->all[(size_t)r->nranks * r->n], 0xEE); /* nothing past the table */
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void test_threads(void **state) {
  (void)state;
  for (int nranks = 1; nranks <= 16; nranks *= 4) {
    BsId id;
    assert_int_equal(bs_serve(&id, 10), resccl_success);
    Rank r[16];
    for (int i = 0; i < nranks; i++) r[i] = mk(&id, nranks - 1 - i, nranks, PAYLOAD, 10); /* arrive out of order */
    run_threads(r, nranks);
    for (int i = 0; i < nranks; i++) {
      assert_int_equal(r[i].rc, resccl_success);
      check_table(&r[i]);
      free(r[i].all);
    }
  }
}

static void test_empty_payload(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  Rank r[3];
  for (int i = 0; i < 3; i++) r[i] = mk(&id, i, 3, 0, 10);
  run_threads(r, 3);
  for (int i = 0; i < 3; i++) assert_int_equal(r[i].rc, resccl_success), free(r[i].all);
}

/* Ranks as processes: forked before the server starts (a fork copies one
   thread), told the id through a pipe, as a launcher would. */
static void test_processes(void **state) {
  (void)state;
  enum { N = 4 };
  int fds[N][2];
  pid_t pid[N];
  for (int i = 0; i < N; i++) {
    assert_int_equal(pipe(fds[i]), 0);
    pid[i] = fork();
    assert_true(pid[i] >= 0);
    if (pid[i] == 0) {
      BsId id;
      if (read(fds[i][0], &id, sizeof id) != (ssize_t)sizeof id) _exit(3);
      Rank r = mk(&id, i, N, PAYLOAD, 10);
      run_rank(&r);
      if (r.rc != resccl_success) _exit(1);
      unsigned char want[PAYLOAD];
      for (int q = 0; q < N; q++) {
        fill(want, q, PAYLOAD);
        if (memcmp(r.all + (size_t)q * PAYLOAD, want, PAYLOAD)) _exit(2);
      }
      _exit(0);
    }
  }
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  for (int i = 0; i < N; i++) assert_int_equal(write(fds[i][1], &id, sizeof id), (ssize_t)sizeof id);
  for (int i = 0; i < N; i++) {
    int st;
    assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    close(fds[i][0]), close(fds[i][1]);
  }
}

/* Two ranks whose calls disagree: both fail with code and a message holding `says`. */
static void both_refused(Rank a, Rank b, resccl_result_t code, const char *says) {
  Rank r[2] = {a, b};
  double t0 = now_s();
  run_threads(r, 2);
  assert_true(now_s() - t0 < 5);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(r[i].rc, code);
    if (!strstr(r[i].err, says)) fail_msg("rank %d: \"%s\" does not say \"%s\"", i, r[i].err, says);
    free(r[i].all);
  }
}

static void test_faults(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  both_refused(mk(&id, 0, 2, 64, 10), mk(&id, 0, 2, 64, 10), resccl_invalid_usage,
               "two processes claim rank 0 of 2");
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  both_refused(mk(&id, 0, 2, 64, 10), mk(&id, 1, 3, 64, 10), resccl_invalid_usage, "counts");
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  both_refused(mk(&id, 0, 2, 64, 10), mk(&id, 1, 2, 65, 10), resccl_invalid_usage, "bytes");
}

/* A rank that never comes: the others fail with resccl_timeout in about the
   timeout, and the server's answer names the rank missing. */
static void test_missing_rank(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 0.5), resccl_success);
  Rank r = mk(&id, 0, 2, 64, 10);
  double t0 = now_s();
  run_threads(&r, 1);
  assert_true(now_s() - t0 < 3);
  assert_int_equal(r.rc, resccl_timeout);
  assert_non_null(strstr(r.err, "rank 1 did not"));
  free(r.all);
  /* the rank's own deadline, where the server waits longer */
  assert_int_equal(bs_serve(&id, 30), resccl_success);
  r = mk(&id, 0, 2, 64, 0.3);
  t0 = now_s();
  run_threads(&r, 1);
  assert_true(now_s() - t0 < 3);
  assert_int_equal(r.rc, resccl_timeout);
  assert_non_null(strstr(r.err, "RESCCL_TIMEOUT"));
  free(r.all);
}

static void test_bad_ids(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  Rank r = mk(&id, 0, 1, 8, 10);
  run_threads(&r, 1);
  assert_int_equal(r.rc, resccl_success), free(r.all);
  run_threads(&r, 1); /* an id serves one round */
  assert_int_equal(r.rc, resccl_invalid_usage);
  assert_non_null(strstr(r.err, "an id serves one round"));
  free(r.all);
  BsId made_up;
  memset(&made_up, 0x5A, sizeof made_up);
  r.id = &made_up;
  run_threads(&r, 1);
  assert_int_equal(r.rc, resccl_invalid_argument);
  assert_non_null(strstr(r.err, "not a resccl unique id"));
  free(r.all);
  /* an altered tag reaches a server running another round */
  BsId altered;
  assert_int_equal(bs_serve(&id, 2), resccl_success);
  altered = id;
  altered.bytes[8] ^= 1; /* the tag follows magic and length */
  r.id = &altered;
  run_threads(&r, 1);
  assert_int_equal(r.rc, resccl_invalid_usage);
  assert_non_null(strstr(r.err, "another round"));
  free(r.all);
  r.id = &id; /* the round itself is intact */
  run_threads(&r, 1);
  assert_int_equal(r.rc, resccl_success), free(r.all);
}

static void test_bad_calls(void **state) {
  (void)state;
  BsId id;
  unsigned char b[8], all[16];
  assert_int_equal(bs_serve(NULL, 1), resccl_invalid_argument);
  assert_int_equal(bs_serve(&id, 1), resccl_success);
  assert_int_equal(bs_allgather(&id, 2, 2, b, 8, all, 1), resccl_invalid_argument);
  assert_int_equal(bs_allgather(&id, 0, 0, b, 8, all, 1), resccl_invalid_argument);
  assert_int_equal(bs_allgather(&id, 0, 1, NULL, 8, all, 1), resccl_invalid_argument);
  assert_int_equal(bs_allgather(&id, 0, 1, b, BS_MAX_PAYLOAD + 1, all, 1), resccl_invalid_argument);
  assert_int_equal(bs_allgather(NULL, 0, 1, b, 8, all, 1), resccl_invalid_argument);
  assert_int_equal(bs_allgather(&id, 0, BS_MAX_RANKS, b, BS_MAX_PAYLOAD, all, 1), resccl_invalid_argument);
  setenv("RESCCL_SOCKET_IFNAME", "no-such-if0", 1);
  assert_int_equal(bs_serve(&id, 1), resccl_invalid_argument);
  assert_non_null(strstr(resccl_get_last_error(), "RESCCL_SOCKET_IFNAME=no-such-if0"));
  setenv("RESCCL_SOCKET_IFNAME", "lo", 1); /* named: the loopback interface, as every test here */
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  Rank r = mk(&id, 0, 1, 8, 10);
  run_threads(&r, 1);
  assert_int_equal(r.rc, resccl_success);
  check_table(&r);
  free(r.all);
  unsetenv("RESCCL_SOCKET_IFNAME");
}

int main(void) {
  unsetenv("RESCCL_SOCKET_IFNAME"); /* loopback */
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_threads),    cmocka_unit_test(test_empty_payload), cmocka_unit_test(test_processes),
    cmocka_unit_test(test_faults),     cmocka_unit_test(test_missing_rank),  cmocka_unit_test(test_bad_ids),
    cmocka_unit_test(test_bad_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
