/*
** test_bootstrap.c — the rendezvous (src/runtime/bootstrap.c) over the
** loopback interface, no GPU: ranks as threads of this process and as
** processes of their own, each with its Exchange running several rounds of
** different sizes; then every fault a job can make (two ranks claiming one
** rank, counts or sizes that disagree, an id used twice, altered or made
** up, a rank that never comes, a rank that leaves while others wait or
** before they come, a process that ends, an interface that does not exist)
** ends each rank's call with a named error, in time; the server ends once
** every rank has left; and ex_round (src/runtime/exchange.c) tells every
** rank which rank failed.
*/
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bootstrap.h"

#define PAYLOAD 1000 /* bytes per rank: not a multiple of anything */
#define MAXROUNDS 4

/* A rank: its rounds, run on a thread (or in a process of its own), and
   what came of them, for the main thread to check (cmocka's asserts belong
   to it). */
typedef struct {
  const BsId *id;
  int rank, nranks;
  int rounds;            /* how many of n[] it runs; it stops at the first failure */
  size_t n[MAXROUNDS];   /* bytes a rank, per round */
  double timeout_s;
  double pause_s;        /* before each round past the first */
  double linger_s;       /* after its rounds, before it closes */
  resccl_result_t rc;    /* bs_exchange's, else the first failed round's */
  int failed_at;         /* that round, or -1 */
  double took;           /* seconds that round took */
  char err[1024];
  int bad;               /* 1 + the first round whose table was wrong, or 0 */
  resccl_result_t again; /* a round tried after the failure */
  char err_again[1024];
} Rank;

static Rank mk(const BsId *id, int rank, int nranks, size_t n, double timeout_s) {
  return (Rank){.id = id, .rank = rank, .nranks = nranks, .rounds = 1, .n = {n}, .timeout_s = timeout_s};
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (s > 0 && nanosleep(&t, &t)) {}
}

static void fill(unsigned char *p, int rank, int round, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(rank * 131 + round * 71 + i * 7 + 1);
}

/* Every rank's bytes of round k in rank order, and nothing past them. */
static int table_ok(const unsigned char *all, int nranks, int k, size_t n) {
  unsigned char *want = malloc(n + 1);
  int ok = 1;
  for (int q = 0; ok && q < nranks; q++) {
    fill(want, q, k, n);
    ok = !memcmp(all + (size_t)q * n, want, n);
  }
  free(want);
  return ok && all[(size_t)nranks * n] == 0xEE;
}

static void *run_rank(void *arg) {
  Rank *r = arg;
  Exchange *x = NULL;
  r->failed_at = -1;
  r->rc = bs_exchange(r->id, r->rank, r->nranks, r->timeout_s, &x);
  snprintf(r->err, sizeof r->err, "%s", r->rc ? resccl_get_last_error() : "");
  for (int k = 0; !r->rc && k < r->rounds; k++) {
    if (k) sleep_s(r->pause_s);
    size_t n = r->n[k], table = (size_t)r->nranks * n;
    unsigned char *mine = malloc(n + 1), *all = malloc(table + 1);
    fill(mine, r->rank, k, n);
    memset(all, 0xEE, table + 1); /* poisoned: the table must overwrite it */
    double t0 = now_s();
    r->rc = x->allgather(x, mine, n, all);
    r->took = now_s() - t0;
    if (r->rc) r->failed_at = k, snprintf(r->err, sizeof r->err, "%s", resccl_get_last_error());
    else if (!r->bad && !table_ok(all, r->nranks, k, n)) r->bad = 1 + k;
    free(mine), free(all);
  }
  if (r->rc && x) { /* the exchange is spent: a later round fails at once */
    unsigned char b = 1, *all = malloc((size_t)r->nranks);
    r->again = x->allgather(x, &b, 1, all);
    snprintf(r->err_again, sizeof r->err_again, "%s", resccl_get_last_error());
    free(all);
  }
  sleep_s(r->linger_s);
  if (x) x->close(x);
  return NULL;
}

/* Run ranks[0..k) as threads; the caller checks each. */
static void run_threads(Rank *ranks, int k) {
  pthread_t t[64];
  for (int i = 0; i < k; i++) assert_int_equal(pthread_create(&t[i], NULL, run_rank, &ranks[i]), 0);
  for (int i = 0; i < k; i++) pthread_join(t[i], NULL);
}

static void check_ok(const Rank *r) {
  if (r->rc) fail_msg("rank %d: round %d: %s", r->rank, r->failed_at, r->err);
  if (r->bad) fail_msg("rank %d: round %d: a wrong table", r->rank, r->bad - 1);
}

/* r failed with code at round k, its message holding `says`. */
static void check_failed(const Rank *r, int k, resccl_result_t code, const char *says) {
  if (r->rc != code || r->failed_at != k || !strstr(r->err, says))
    fail_msg("rank %d: round %d failed with %d (\"%s\"); expected round %d with %d, saying \"%s\"", r->rank,
             r->failed_at, r->rc, r->err, k, code, says);
}

static void test_threads(void **state) {
  (void)state;
  for (int nranks = 1; nranks <= 16; nranks *= 4) {
    BsId id;
    assert_int_equal(bs_serve(&id, 10), resccl_success);
    Rank r[16];
    for (int i = 0; i < nranks; i++) r[i] = mk(&id, nranks - 1 - i, nranks, PAYLOAD, 10); /* arrive out of order */
    run_threads(r, nranks);
    for (int i = 0; i < nranks; i++) check_ok(&r[i]);
  }
}

/* Connections that say nothing (a probe, a health check), more of them
   than the server keeps waiting: the ranks join at once all the same. The
   id's address is read from its bytes as bootstrap.c lays them out. */
static void test_silent(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  struct {
    uint32_t magic, len;
    uint64_t tag;
    struct sockaddr_in in;
  } body;
  memcpy(&body, id.bytes, sizeof body);
  assert_int_equal(body.magic, 0x31425852u); /* "RXB1": the layout still holds */
  int quiet[20];
  for (int i = 0; i < 20; i++) {
    quiet[i] = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(quiet[i], (struct sockaddr *)&body.in, sizeof body.in), 0);
  }
  sleep_s(0.1);
  Rank r[2] = {mk(&id, 0, 2, PAYLOAD, 10), mk(&id, 1, 2, PAYLOAD, 10)};
  double t0 = now_s();
  run_threads(r, 2);
  assert_true(now_s() - t0 < 2);
  for (int i = 0; i < 2; i++) check_ok(&r[i]);
  for (int i = 0; i < 20; i++) close(quiet[i]);
}

/* Rounds of different sizes over the same connections, empty ones among them. */
static void test_rounds(void **state) {
  (void)state;
  for (int nranks = 1; nranks <= 16; nranks *= 4) {
    BsId id;
    assert_int_equal(bs_serve(&id, 10), resccl_success);
    Rank r[16];
    for (int i = 0; i < nranks; i++) {
      r[i] = mk(&id, i, nranks, 1000, 10);
      r[i].rounds = 3, r[i].n[1] = 0, r[i].n[2] = 5000;
    }
    run_threads(r, nranks);
    for (int i = 0; i < nranks; i++) check_ok(&r[i]);
  }
}

static void test_empty_payload(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  Rank r[3];
  for (int i = 0; i < 3; i++) r[i] = mk(&id, i, 3, 0, 10);
  run_threads(r, 3);
  for (int i = 0; i < 3; i++) check_ok(&r[i]);
}

/* This process's open descriptors and threads. */
static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

static int threads(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
  if (f) fclose(f);
  return n;
}

/* Wait (3 s at most) until the servers of earlier rounds have ended: this
   thread alone is left. */
static void alone(void) {
  double t0 = now_s();
  while (threads() > 1 && now_s() - t0 < 3) sleep_s(0.01);
  assert_int_equal(threads(), 1);
}

/* Fork n processes, each rank i running body(i, id) and exiting with its
   result; then serve, tell each the id through a pipe (as a launcher
   would), and return in st[] how each exited. Forked before the server
   starts, and once the earlier tests' have ended: a fork copies one thread. */
static void run_processes(int n, int (*body)(int, const BsId *), int *st) {
  int fds[8][2];
  alone();
  pid_t pid[8];
  for (int i = 0; i < n; i++) {
    assert_int_equal(pipe(fds[i]), 0);
    pid[i] = fork();
    assert_true(pid[i] >= 0);
    if (pid[i] == 0) {
      BsId id;
      if (read(fds[i][0], &id, sizeof id) != (ssize_t)sizeof id) _exit(99);
      _exit(body(i, &id));
    }
  }
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  for (int i = 0; i < n; i++) assert_int_equal(write(fds[i][1], &id, sizeof id), (ssize_t)sizeof id);
  for (int i = 0; i < n; i++) {
    int s;
    assert_int_equal(waitpid(pid[i], &s, 0), pid[i]);
    st[i] = WIFEXITED(s) ? WEXITSTATUS(s) : 100 + WTERMSIG(s);
    close(fds[i][0]), close(fds[i][1]);
  }
}

static int two_rounds(int rank, const BsId *id) {
  Rank r = mk(id, rank, 4, PAYLOAD, 10);
  r.rounds = 2, r.n[1] = 64;
  run_rank(&r);
  return r.rc ? 1 : r.bad ? 2 : 0;
}

/* Ranks as processes, two rounds each. */
static void test_processes(void **state) {
  (void)state;
  int st[4];
  run_processes(4, two_rounds, st);
  for (int i = 0; i < 4; i++) assert_int_equal(st[i], 0);
}

/* Rank 2 ends its process after round 0, its Exchange left open; the
   others, in round 1, learn that it left. */
static Exchange *kept; /* rank 2's, open as its process ends (reachable: not a leak) */

static int ends_early(int rank, const BsId *id) {
  if (rank == 2) {
    unsigned char mine[PAYLOAD], all[3 * PAYLOAD];
    fill(mine, rank, 0, PAYLOAD);
    return bs_exchange(id, rank, 3, 10, &kept) || kept->allgather(kept, mine, PAYLOAD, all) ? 1 : 0;
  }
  Rank r = mk(id, rank, 3, PAYLOAD, 10);
  r.rounds = 2, r.n[1] = 8, r.pause_s = 0.2;
  run_rank(&r);
  if (r.failed_at != 1 || r.rc != resccl_remote_error) return 1;
  return strstr(r.err, "rank 2 left the communicator") ? 0 : 2;
}

static void test_process_ends(void **state) {
  (void)state;
  int st[3];
  run_processes(3, ends_early, st);
  for (int i = 0; i < 3; i++) assert_int_equal(st[i], 0);
}

/* Two ranks that disagree in round k: both fail there with code and a
   message holding `says`. */
static void both_refused(Rank a, Rank b, int k, resccl_result_t code, const char *says) {
  Rank r[2] = {a, b};
  double t0 = now_s();
  run_threads(r, 2);
  assert_true(now_s() - t0 < 5);
  for (int i = 0; i < 2; i++) check_failed(&r[i], k, code, says);
}

static void test_faults(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  both_refused(mk(&id, 0, 2, 64, 10), mk(&id, 0, 2, 64, 10), 0, resccl_invalid_usage,
               "two processes claim rank 0 of 2");
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  both_refused(mk(&id, 0, 2, 64, 10), mk(&id, 1, 3, 64, 10), 0, resccl_invalid_usage, "counts");
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  both_refused(mk(&id, 0, 2, 64, 10), mk(&id, 1, 2, 65, 10), 0, resccl_invalid_usage, "bytes");
  /* sizes that disagree in a later round */
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  Rank a = mk(&id, 0, 2, 64, 10), b = mk(&id, 1, 2, 64, 10);
  a.rounds = b.rounds = 2, a.n[1] = 64, b.n[1] = 65;
  both_refused(a, b, 1, resccl_invalid_usage, "bytes");
}

/* A rank that never comes: the others fail with resccl_timeout in about the
   timeout, and the server's answer names the rank missing. Where a rank
   gave up, the next to come learns that it left. */
static void test_missing_rank(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 0.5), resccl_success);
  Rank r = mk(&id, 0, 2, 64, 10);
  double t0 = now_s();
  run_threads(&r, 1);
  assert_true(now_s() - t0 < 3);
  check_failed(&r, 0, resccl_timeout, "rank 1 did not");
  /* the rank's own deadline, where the server waits longer */
  assert_int_equal(bs_serve(&id, 30), resccl_success);
  r = mk(&id, 0, 2, 64, 0.3);
  t0 = now_s();
  run_threads(&r, 1);
  assert_true(now_s() - t0 < 3);
  check_failed(&r, 0, resccl_timeout, "RESCCL_TIMEOUT");
  assert_int_equal(r.again, resccl_remote_error);
  assert_non_null(strstr(r.err_again, "the exchange failed earlier: no answer in 0.3 s"));
  r = mk(&id, 1, 2, 64, 10);
  t0 = now_s();
  run_threads(&r, 1);
  assert_true(now_s() - t0 < 3);
  check_failed(&r, 0, resccl_remote_error, "rank 0 left the communicator");
}

/* Rank 1 leaves after round 0 while rank 0 waits in round 1: rank 0 learns
   it at once, and its exchange is spent. */
static void test_leave_waiting(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  Rank r[2] = {mk(&id, 0, 2, PAYLOAD, 10), mk(&id, 1, 2, PAYLOAD, 10)};
  r[0].rounds = 2, r[0].n[1] = 16;
  r[1].linger_s = 0.3;
  run_threads(r, 2);
  check_ok(&r[1]);
  check_failed(&r[0], 1, resccl_remote_error, "rank 1 left the communicator");
  if (r[0].took > 1.5) fail_msg("rank 0 waited %.2f s for the news", r[0].took);
  assert_int_equal(r[0].again, resccl_remote_error);
  assert_non_null(strstr(r[0].err_again, "the exchange failed earlier: rank 1 left"));
}

/* Rank 2 leaves after round 0, before the others start round 1: theirs
   fails at once. */
static void test_leave_before(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  Rank r[3];
  for (int i = 0; i < 3; i++) r[i] = mk(&id, i, 3, PAYLOAD, 10), r[i].rounds = 2, r[i].n[1] = 100;
  r[0].pause_s = r[1].pause_s = 0.3, r[2].rounds = 1;
  double t0 = now_s();
  run_threads(r, 3);
  assert_true(now_s() - t0 < 3);
  check_ok(&r[2]);
  for (int i = 0; i < 2; i++) check_failed(&r[i], 1, resccl_remote_error, "rank 2 left the communicator");
}

/* Once every rank has closed, the server ends: its thread and sockets go,
   and the id reaches no one. */
static void test_server_ends(void **state) {
  (void)state;
  int fds0 = open_fds(), threads0 = threads();
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  assert_int_equal(threads(), threads0 + 1);
  Rank r[4];
  for (int i = 0; i < 4; i++) r[i] = mk(&id, i, 4, 8, 10), r[i].rounds = 3, r[i].n[1] = 100, r[i].n[2] = 0;
  run_threads(r, 4);
  for (int i = 0; i < 4; i++) check_ok(&r[i]);
  double t0 = now_s();
  while ((open_fds() > fds0 || threads() > threads0) && now_s() - t0 < 2) sleep_s(0.01);
  assert_true(open_fds() <= fds0);
  assert_true(threads() <= threads0);
  Rank late = mk(&id, 0, 4, 8, 10);
  t0 = now_s();
  run_threads(&late, 1);
  assert_true(now_s() - t0 < 1);
  check_failed(&late, 0, resccl_remote_error, "an id serves one communicator");
}

/* ex_round over the same exchange: one rank's failure, then two ranks',
   then none. */
typedef struct {
  const BsId *id;
  int rank;
  resccl_result_t rc[3];
  char err[3][1024];
  int bad;
} ExRank;

static void *run_ex(void *arg) {
  ExRank *e = arg;
  Exchange *x;
  if (bs_exchange(e->id, e->rank, 4, 10, &x)) {
    e->bad = 1;
    return NULL;
  }
  unsigned char mine[300], all[4 * 300 + 1];
  for (int k = 0; k < 3; k++) {
    resccl_result_t own = resccl_success;
    if ((k == 0 && e->rank == 1) || (k == 1 && e->rank >= 2))
      own = rt_fail(resccl_invalid_argument, "plan hash %x differs", 0x1234 + e->rank);
    fill(mine, e->rank, k, sizeof mine);
    memset(all, 0xEE, sizeof all);
    e->rc[k] = ex_round(x, own, mine, sizeof mine, all, "loading plans");
    snprintf(e->err[k], sizeof e->err[k], "%s", resccl_get_last_error());
    if (k == 2 && !e->rc[k] && !table_ok(all, 4, k, sizeof mine)) e->bad = 2;
  }
  x->close(x);
  return NULL;
}

static void test_ex_round(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  ExRank e[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    e[i] = (ExRank){.id = &id, .rank = i};
    assert_int_equal(pthread_create(&t[i], NULL, run_ex, &e[i]), 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(e[i].bad, 0);
    /* round 0: rank 1 failed */
    if (i == 1) {
      assert_int_equal(e[i].rc[0], resccl_invalid_argument);
      assert_string_equal(e[i].err[0], "plan hash 1235 differs");
    } else {
      assert_int_equal(e[i].rc[0], resccl_remote_error);
      assert_string_equal(e[i].err[0], "loading plans: rank 1 failed: plan hash 1235 differs");
    }
    /* round 1: ranks 2 and 3 failed; the others name the first */
    if (i >= 2) {
      assert_int_equal(e[i].rc[1], resccl_invalid_argument);
      assert_non_null(strstr(e[i].err[1], i == 2 ? "1236" : "1237"));
    } else {
      assert_int_equal(e[i].rc[1], resccl_remote_error);
      assert_string_equal(e[i].err[1], "loading plans: rank 2 failed: plan hash 1236 differs");
    }
    /* round 2: none failed, and the tables hold the payloads alone */
    assert_int_equal(e[i].rc[2], resccl_success);
  }
}

static void test_bad_ids(void **state) {
  (void)state;
  BsId id;
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  Rank r = mk(&id, 0, 1, 8, 10);
  run_threads(&r, 1);
  check_ok(&r);
  run_threads(&r, 1); /* an id serves one communicator */
  check_failed(&r, 0, resccl_remote_error, "an id serves one communicator");
  BsId made_up;
  memset(&made_up, 0x5A, sizeof made_up);
  r.id = &made_up;
  run_threads(&r, 1);
  check_failed(&r, -1, resccl_invalid_argument, "not a resccl unique id");
  /* an altered tag reaches a server running another round */
  BsId altered;
  assert_int_equal(bs_serve(&id, 2), resccl_success);
  altered = id;
  altered.bytes[8] ^= 1; /* the tag follows magic and length */
  r.id = &altered;
  run_threads(&r, 1);
  check_failed(&r, 0, resccl_invalid_usage, "another round");
  r.id = &id; /* the round itself is intact */
  run_threads(&r, 1);
  check_ok(&r);
}

static void test_bad_calls(void **state) {
  (void)state;
  BsId id;
  Exchange *x = (Exchange *)&id;
  unsigned char b[8], all[16];
  assert_int_equal(bs_serve(NULL, 1), resccl_invalid_argument);
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  assert_int_equal(bs_exchange(&id, 2, 2, 1, &x), resccl_invalid_argument);
  assert_null(x);
  assert_int_equal(bs_exchange(&id, 0, 0, 1, &x), resccl_invalid_argument);
  assert_int_equal(bs_exchange(NULL, 0, 1, 1, &x), resccl_invalid_argument);
  assert_int_equal(bs_exchange(&id, 0, 1, 1, NULL), resccl_invalid_argument);
  /* bad rounds: each fails, and spends its exchange */
  assert_int_equal(bs_exchange(&id, 0, 1, 1, &x), resccl_success);
  assert_int_equal(x->allgather(x, NULL, 8, all), resccl_invalid_argument);
  assert_int_equal(x->allgather(x, b, 8, all), resccl_remote_error);
  assert_non_null(strstr(resccl_get_last_error(), "the exchange failed earlier: 8 bytes a rank from NULL"));
  x->close(x);
  assert_int_equal(bs_exchange(&id, 0, 1, 1, &x), resccl_success);
  assert_int_equal(x->allgather(x, b, BS_MAX_PAYLOAD + 1, all), resccl_invalid_argument);
  x->close(x);
  assert_int_equal(bs_exchange(&id, 0, BS_MAX_RANKS, 1, &x), resccl_success);
  assert_int_equal(x->allgather(x, b, BS_MAX_PAYLOAD, all), resccl_invalid_argument);
  x->close(x);
  Rank r = mk(&id, 0, 1, 8, 10); /* none of that reached the server */
  run_threads(&r, 1);
  check_ok(&r);
  setenv("RESCCL_SOCKET_IFNAME", "no-such-if0", 1);
  assert_int_equal(bs_serve(&id, 1), resccl_invalid_argument);
  assert_non_null(strstr(resccl_get_last_error(), "RESCCL_SOCKET_IFNAME=no-such-if0"));
  setenv("RESCCL_SOCKET_IFNAME", "lo", 1); /* named: the loopback interface, as every test here */
  assert_int_equal(bs_serve(&id, 10), resccl_success);
  r = mk(&id, 0, 1, 8, 10);
  run_threads(&r, 1);
  check_ok(&r);
  unsetenv("RESCCL_SOCKET_IFNAME");
}

/* Last: every server above has ended, none waits on. */
static void test_all_ended(void **state) {
  (void)state;
  alone();
}

int main(void) {
  unsetenv("RESCCL_SOCKET_IFNAME"); /* loopback */
  const struct CMUnitTest tests[] = {
    /* test_server_ends first: no other test's server is still running */
    cmocka_unit_test(test_server_ends), cmocka_unit_test(test_threads),       cmocka_unit_test(test_rounds),
    cmocka_unit_test(test_empty_payload), cmocka_unit_test(test_processes),   cmocka_unit_test(test_process_ends),
    cmocka_unit_test(test_faults),      cmocka_unit_test(test_leave_waiting), cmocka_unit_test(test_leave_before),
    cmocka_unit_test(test_ex_round),    cmocka_unit_test(test_missing_rank),  cmocka_unit_test(test_bad_ids),
    cmocka_unit_test(test_bad_calls),   cmocka_unit_test(test_silent),        cmocka_unit_test(test_all_ended),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
