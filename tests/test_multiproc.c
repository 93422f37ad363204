/*
** test_multiproc.c — communicators of one rank per process
** (resccl_comm_init_rank), as torchrun and MPI jobs make them. The processes
** share whatever GPUs there are (rank r on GPU r mod GPUs: several
** processes on one GPU reach each other through CUDA IPC). Rank 0 makes
** each unique id and hands it to the others through shared memory, as a
** launcher's store would.
**
**   test_multiproc N DIR check    every collective, out of place and in place, in four
**                                 dtype/op pairs, on poisoned outputs, against a reference
**   test_multiproc 2 DIR faults   ranks that disagree (plans, rank counts, a rank claimed
**                                 twice, an id used again), an abort, a rank killed mid-call:
**                                 each a named error in bounded time, nothing hung
**   test_multiproc N DIR loop K   K times init, plan load, a call, destroy: no file
**                                 descriptor, thread or GPU memory left behind
**   test_multiproc 4 DIR split DIR2   resccl_comm_split into the even and odd ranks, an
**                                 all-reduce on each (DIR2: plans for 2 ranks)
**
** DIR holds allreduce.plan, allgather.plan, reducescatter.plan and
** alltoall.plan for N ranks, allreduce-other.plan (another all-reduce for N
** ranks) and other-ranks.plan (for N + 1); tests/multiproc.sh compiles them.
** Exits 77 (skipped) where there is no GPU.
*/
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "resccl.h"

enum { MAXP = 16 };

/* What the processes share: the ids rank 0 made, by number. */
typedef struct {
  volatile int seq;
  resccl_unique_id id;
} Box;
static Box *box;
static resccl_unique_id last; /* the id this process took last */

static int me, nproc, failures;
static const char *dir;

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      failures++;                                                           \
      fprintf(stderr, "FAIL rank %d %s:%d: ", me, __FILE__, __LINE__);     \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, " [%s]\n", resccl_get_last_error());                  \
    }                                                                       \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The k-th id (k from 1): rank 0 makes it, the others wait for it. */
static resccl_unique_id id_of(int k) {
  if (me == 0) {
    resccl_unique_id id;
    if (resccl_get_unique_id(&id) != resccl_success) {
      fprintf(stderr, "rank 0: resccl_get_unique_id: %s\n", resccl_get_last_error());
      exit(2);
    }
    box->id = id;
    __sync_synchronize();
    box->seq = k;
  }
  double t0 = now_s();
  while (box->seq < k) {
    if (now_s() - t0 > 60) fprintf(stderr, "rank %d: no id %d from rank 0\n", me, k), exit(2);
    usleep(100);
  }
  __sync_synchronize();
  return last = box->id;
}

static resccl_comm_t join(int k) {
  resccl_comm_t c = NULL;
  resccl_result_t rc = resccl_comm_init_rank(&c, nproc, id_of(k), me);
  if (rc != resccl_success) fprintf(stderr, "rank %d: init: %s\n", me, resccl_get_last_error()), exit(2);
  return c;
}

static void plan(resccl_comm_t c, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (resccl_plan_load(c, path) != resccl_success)
    fprintf(stderr, "rank %d: %s: %s\n", me, path, resccl_get_last_error()), exit(2);
}

/* ------------------------------------------------------------ check */

/* Input element i of rank r: small integers, exact in every dtype here. */
static int val(int r, size_t i) { return (r * 7 + (int)(i % 13)) % 11 - 3; }

static size_t esize(resccl_datatype_t t) {
  return t == resccl_float64 ? 8 : t == resccl_bfloat16 ? 2 : 4;
}

static void put(void *p, resccl_datatype_t t, size_t i, double v) {
  if (t == resccl_float32) ((float *)p)[i] = (float)v;
  else if (t == resccl_float64) ((double *)p)[i] = v;
  else if (t == resccl_int32) ((int *)p)[i] = (int)v;
  else {
    float f = (float)v;
    unsigned u;
    memcpy(&u, &f, 4);
    ((unsigned short *)p)[i] = (unsigned short)(u >> 16); /* exact: small integers */
  }
}

static double get(const void *p, resccl_datatype_t t, size_t i) {
  if (t == resccl_float32) return ((const float *)p)[i];
  if (t == resccl_float64) return ((const double *)p)[i];
  if (t == resccl_int32) return ((const int *)p)[i];
  unsigned u = (unsigned)((const unsigned short *)p)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static double reduce(resccl_red_op_t op, size_t i, size_t off) {
  double a = val(0, off + i);
  for (int q = 1; q < nproc; q++) {
    double b = val(q, off + i);
    a = op == resccl_sum ? a + b : op == resccl_max ? (a > b ? a : b) : (a < b ? a : b);
  }
  return a;
}

/* One call of coll on count elements (the collective's own count), checked; returns the wrong elements. */
static size_t run_one(resccl_comm_t c, cudaStream_t st, const char *coll, size_t count, int inplace,
                      resccl_datatype_t t, resccl_red_op_t op) {
  int ag = !strcmp(coll, "allgather"), rs = !strcmp(coll, "reducescatter"), a2a = !strcmp(coll, "alltoall");
  size_t in_n = rs || a2a ? count * nproc : count, out_n = ag || a2a ? count * nproc : count, es = esize(t);
  size_t big = in_n > out_n ? in_n : out_n;
  char *host = malloc(big * es), *in = NULL, *out = NULL;
  cudaMalloc((void **)&in, in_n * es);
  cudaMalloc((void **)&out, out_n * es);
  cudaMemset(out, 0xff, out_n * es); /* poison */
  cudaMemset(in, 0xff, in_n * es);
  for (size_t i = 0; i < in_n; i++) put(host, t, i, val(me, i));
  char *src = in, *dst = out;
  if (inplace && ag) src = out + (size_t)me * count * es, dst = out;
  else if (inplace && rs) src = in, dst = in + (size_t)me * count * es;
  else if (inplace) src = dst = out;
  cudaMemcpy(src, host, in_n * es, cudaMemcpyHostToDevice);
  cudaDeviceSynchronize(); /* the copies and sets, on the legacy stream, before the call's non-blocking one */
  resccl_result_t rc;
  if (!strcmp(coll, "allreduce")) rc = resccl_all_reduce(src, dst, count, t, op, c, st);
  else if (ag) rc = resccl_all_gather(src, dst, count, t, c, st);
  else if (rs) rc = resccl_reduce_scatter(src, dst, count, t, op, c, st);
  else rc = resccl_all_to_all(src, dst, count, t, c, st);
  size_t wrong = 0;
  if (rc == resccl_invalid_usage && inplace && strstr(resccl_get_last_error(), "no in-place form")) goto out;
  CHECK(rc == resccl_success, "%s: call failed: %s", coll, resccl_get_error_string(rc));
  cudaStreamSynchronize(st);
  resccl_result_t async;
  resccl_comm_get_async_error(c, &async);
  CHECK(async == resccl_success, "%s: async error %s", coll, resccl_get_error_string(async));
  size_t n = rs ? count : out_n;
  cudaMemcpy(host, dst, n * es, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; i++) {
    double want = !strcmp(coll, "allreduce") ? reduce(op, i, 0)
                  : ag                       ? val((int)(i / count), i % count)
                  : rs                       ? reduce(op, i, (size_t)me * count)
                                             : val((int)(i / count), (size_t)me * count + i % count);
    wrong += get(host, t, i) != want;
  }
out:
  cudaFree(in), cudaFree(out), free(host);
  return wrong;
}

static void check(void) {
  resccl_comm_t c = join(1);
  int n = 0, r = -1;
  CHECK(resccl_comm_count(c, &n) == resccl_success && n == nproc, "count %d", n);
  CHECK(resccl_comm_user_rank(c, &r) == resccl_success && r == me, "rank %d", r);
  const char *colls[] = {"allreduce", "allgather", "reducescatter", "alltoall"};
  for (int k = 0; k < 4; k++) {
    char name[64];
    snprintf(name, sizeof name, "%s.plan", colls[k]);
    plan(c, name);
  }
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  static const struct {
    resccl_datatype_t t;
    resccl_red_op_t op;
    const char *name;
  } kinds[] = {{resccl_float32, resccl_sum, "f32 sum"}, {resccl_int32, resccl_max, "i32 max"},
               {resccl_bfloat16, resccl_sum, "bf16 sum"}, {resccl_float64, resccl_min, "f64 min"}};
  size_t total = 0;
  int calls = 0;
  for (int k = 0; k < 4; k++)
    for (int j = 0; j < 4; j++)
      for (int inplace = 0; inplace < 2; inplace++)
        for (size_t count = 1000; count <= 70000; count *= 70) {
          size_t wrong = run_one(c, st, colls[k], count, inplace, kinds[j].t, kinds[j].op);
          CHECK(wrong == 0, "%s %s %s count %zu: %zu wrong", colls[k], kinds[j].name, inplace ? "in place" : "out of place",
                count, wrong);
          total += wrong, calls++;
        }
  printf("rank %d of %d: %d calls (4 collectives x 4 dtype/op x 2 placements x 2 counts), %zu wrong\n", me, nproc,
         calls, total);
  cudaStreamDestroy(st);
  CHECK(resccl_comm_destroy(c) == resccl_success, "destroy");
}

/* ------------------------------------------------------------ split */

/* resccl_comm_split into the even and the odd ranks, each in reverse
   order (key -rank), then an all-reduce on each half (DIR2: plans for its
   ranks) checked against the sum over the half's old ranks. */
static void split(const char *dir2) {
  resccl_comm_t c = join(1), half = NULL;
  int color = me % 2, n = 0, r = -1, size = (nproc - color + 1) / 2;
  CHECK(resccl_comm_split(c, color, -me, &half) == resccl_success && half, "split");
  CHECK(resccl_comm_count(half, &n) == resccl_success && n == size, "split: %d ranks, not %d", n, size);
  CHECK(resccl_comm_user_rank(half, &r) == resccl_success && r == (nproc - 1 - me) / 2, "split: rank %d", r);
  char path[4096];
  snprintf(path, sizeof path, "%s/allreduce.plan", dir2);
  CHECK(resccl_plan_load(half, path) == resccl_success, "split: load");
  size_t count = 70000;
  float *host = malloc(count * sizeof *host), *buf;
  cudaMalloc((void **)&buf, count * sizeof *buf);
  for (size_t i = 0; i < count; i++) host[i] = (float)val(me, i);
  cudaMemcpy(buf, host, count * sizeof *buf, cudaMemcpyHostToDevice);
  cudaDeviceSynchronize();
  CHECK(resccl_all_reduce(buf, buf, count, resccl_float32, resccl_sum, half, NULL) == resccl_success, "split: call");
  cudaDeviceSynchronize();
  cudaMemcpy(host, buf, count * sizeof *buf, cudaMemcpyDeviceToHost);
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    int want = 0;
    for (int q = color; q < nproc; q += 2) want += val(q, i);
    wrong += host[i] != (float)want;
  }
  CHECK(wrong == 0, "split: %zu wrong", wrong);
  printf("rank %d: split into rank %d of %d (color %d): all-reduce, %zu wrong\n", me, r, n, color, wrong);
  cudaFree(buf), free(host);
  CHECK(resccl_comm_destroy(half) == resccl_success, "destroy the half");
  CHECK(resccl_comm_destroy(c) == resccl_success, "destroy");
}

/* ------------------------------------------------------------ faults */

/* Init with this rank's nranks and rank (for its id k); the result, after at most `within` seconds. */
static resccl_result_t init_as(int k, int nranks, int rank, resccl_comm_t *c, double within) {
  double t0 = now_s();
  resccl_result_t rc = resccl_comm_init_rank(c, nranks, id_of(k), rank);
  CHECK(now_s() - t0 < within, "init took %.1f s", now_s() - t0);
  return rc;
}

static void faults(void) {
  int k = 1;
  resccl_comm_t c;
  resccl_result_t rc;
  /* Ranks that count different ranks, and two that claim one rank. */
  rc = init_as(k++, nproc + me, me, &c, 15);
  CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "counts"), "nranks %d vs %d: %d", nproc,
        nproc + 1, rc);
  rc = init_as(k++, nproc, 0, &c, 15);
  CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "claim rank 0"), "two rank 0: %d", rc);
  printf("rank %d: init with other counts of ranks, or one rank twice: refused\n", me);
  /* Different plans, and a plan for another count of ranks: every rank gets the error. */
  c = join(k);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, me ? "allreduce-other.plan" : "allreduce.plan");
  rc = resccl_plan_load(c, path);
  CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "different plans"), "different plans: %d", rc);
  printf("rank %d: %s\n", me, resccl_get_last_error());
  snprintf(path, sizeof path, "%s/other-ranks.plan", dir);
  rc = resccl_plan_load(c, path);
  CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "ranks"), "other ranks: %d", rc);
  /* It still works after those. */
  plan(c, "allreduce.plan");
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  CHECK(run_one(c, st, "allreduce", 4099, 0, resccl_float32, resccl_sum) == 0, "after refusals");
  CHECK(resccl_comm_destroy(c) == resccl_success, "destroy");
  /* The id of a communicator that ended serves no other. */
  double t0 = now_s();
  rc = resccl_comm_init_rank(&c, nproc, last, me);
  CHECK(rc != resccl_success && now_s() - t0 < 15, "an id used again: %d in %.1f s", rc, now_s() - t0);
  printf("rank %d: an id used again: %s\n", me, resccl_get_last_error());
  /* An abort on rank 1 ends the call rank 0 waits in, long before the timeout. */
  c = join(++k);
  plan(c, "allreduce.plan");
  void *buf;
  cudaMalloc(&buf, 1 << 20);
  if (me == 0) {
    t0 = now_s();
    rc = resccl_all_reduce(buf, buf, 1 << 18, resccl_float32, resccl_sum, c, st);
    cudaStreamSynchronize(st);
    resccl_result_t async;
    resccl_comm_get_async_error(c, &async);
    CHECK(rc == resccl_success && async == resccl_remote_error && now_s() - t0 < 2.5,
          "abort: call %d, async %d after %.1f s", rc, async, now_s() - t0);
    printf("rank 0: peer aborted: async error \"%s\" after %.2f s\n", resccl_get_error_string(async), now_s() - t0);
    rc = resccl_all_reduce(buf, buf, 1 << 18, resccl_float32, resccl_sum, c, st);
    CHECK(rc == resccl_remote_error, "a call after the abort: %d", rc);
    resccl_comm_destroy(c); /* its last round fails: rank 1 left */
  } else {
    usleep(500000);
    CHECK(resccl_comm_abort(c) == resccl_success, "abort");
  }
  /* A rank killed mid-call: the other's call times out (RESCCL_TIMEOUT), its destroy does not hang. */
  c = join(++k);
  plan(c, "allreduce.plan");
  if (me == 1) {
    resccl_all_reduce(buf, buf, 1 << 18, resccl_float32, resccl_sum, c, st);
    usleep(100000);
    raise(SIGKILL);
  }
  usleep(300000);
  t0 = now_s();
  rc = resccl_all_reduce(buf, buf, 1 << 18, resccl_float32, resccl_sum, c, st);
  cudaStreamSynchronize(st);
  resccl_result_t async;
  resccl_comm_get_async_error(c, &async);
  double took = now_s() - t0;
  CHECK(async == resccl_timeout && took < 15, "killed peer: async %d after %.1f s", async, took);
  t0 = now_s();
  rc = resccl_comm_destroy(c);
  CHECK(now_s() - t0 < 15, "destroy after a killed peer took %.1f s", now_s() - t0);
  printf("rank 0: peer killed: \"%s\" after %.1f s; destroy: %s\n", resccl_get_error_string(async), took,
         resccl_get_error_string(rc));
}

/* ------------------------------------------------------------ loop */

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

static void loop(int iters) {
  cudaFree(0);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  size_t free0 = 0, free1 = 0, total = 0;
  int fds0 = 0, threads0 = 0;
  double t0 = now_s(), step[3] = {0, 0, 0}; /* init, plan load, destroy */
  for (int i = 1; i <= iters; i++) {
    if (i == 11) { /* after the first ten: caches and the CUDA runtime's own are settled */
      cudaMemGetInfo(&free0, &total);
      fds0 = count_dir("/proc/self/fd"), threads0 = count_dir("/proc/self/task");
    }
    double t = now_s();
    resccl_comm_t c = join(i);
    step[0] += now_s() - t, t = now_s();
    plan(c, "allgather.plan");
    step[1] += now_s() - t;
    if (i % 100 == 0) CHECK(run_one(c, st, "allgather", 4099, 0, resccl_float32, resccl_sum) == 0, "call %d", i);
    t = now_s();
    CHECK(resccl_comm_destroy(c) == resccl_success, "destroy %d", i);
    step[2] += now_s() - t;
  }
  double took = now_s() - t0;
  usleep(200000); /* the last rendezvous thread ends once every rank has left */
  cudaMemGetInfo(&free1, &total);
  int fds = count_dir("/proc/self/fd"), threads = count_dir("/proc/self/task");
  /* Other processes share the GPU: its free memory moves with theirs, by less than a plan's. */
  long long lost = ((long long)free0 - (long long)free1) >> 20;
  CHECK(fds <= fds0 && threads <= threads0 && lost < 64, "after %d: %d fds (were %d), %d threads (were %d), %lld MiB "
        "less free", iters, fds, fds0, threads, threads0, lost);
  printf("rank %d: %d x (init, plan load, destroy) in %.1f s (%.1f, %.1f, %.1f ms each): fds %d -> %d, threads %d -> "
         "%d, GPU free %lld MiB less\n", me, iters, took, step[0] * 1e3 / iters, step[1] * 1e3 / iters,
         step[2] * 1e3 / iters, fds0, fds, threads0, threads, lost);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: test_multiproc N DIR check|faults|loop [K]|split DIR2\n");
    return 2;
  }
  nproc = atoi(argv[1]), dir = argv[2];
  const char *mode = argv[3];
  if (nproc < 1 || nproc > MAXP || (!strcmp(mode, "faults") && nproc != 2))
    return fprintf(stderr, "test_multiproc: 1 to %d processes (faults: 2)\n", MAXP), 2;
  /* No CUDA in this process before the fork: the children make their own. */
  box = mmap(NULL, sizeof *box, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (box == MAP_FAILED) return perror("mmap"), 2;
  memset((void *)box, 0, sizeof *box);
  pid_t pid[MAXP];
  for (int r = 0; r < nproc; r++) {
    pid[r] = fork();
    if (pid[r] < 0) return perror("fork"), 2;
    if (pid[r] == 0) {
      me = r;
      int ngpu = 0;
      if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
        if (r == 0) printf("no GPU: multi-process tests skipped\n");
        _exit(77);
      }
      cudaSetDevice(r % ngpu);
      if (!strcmp(mode, "check")) check();
      else if (!strcmp(mode, "faults")) faults();
      else if (!strcmp(mode, "split")) split(argc > 4 ? argv[4] : dir);
      else loop(argc > 4 ? atoi(argv[4]) : 1000);
      fflush(stdout);
      _exit(failures ? 1 : 0);
    }
  }
  int bad = 0, skipped = 0;
  for (int r = 0; r < nproc; r++) {
    int st;
    waitpid(pid[r], &st, 0);
    int killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && r == 1 && !strcmp(mode, "faults"); /* it was meant to */
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) skipped++;
    else if (!killed && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      fprintf(stderr, "rank %d: %s %d\n", r, WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      bad = 1;
    }
  }
  if (skipped == nproc) return 77;
  printf("test_multiproc %d %s: %s\n", nproc, mode, bad ? "FAILED" : "passed");
  return bad;
}
