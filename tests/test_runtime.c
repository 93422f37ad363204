/*
** test_runtime.c — libresccl through its public API.
**
**   test_runtime build PLAN...   build every placement with NVRTC for sm_90 (no GPU needed)
**   test_runtime run DIR         on the GPUs: DIR holds allreduce.plan, allgather.plan,
**                                reducescatter.plan, alltoall.plan compiled for this many ranks
**
** `run` checks each collective out-of-place and in-place on exact data
** against a reference computed here, a second call on the same plan (the
** counters run on), an all-reduce captured into CUDA graphs and replayed
** between direct calls, plans whose copies the copy engine makes
** (allgather-ce.plan, alltoall-ce.plan, and reducescatter-ce.plan and
** allreduce-ce.plan, whose reductions wait for those copies; an all-to-all
** and an all-reduce of them captured and replayed too), bad arguments
** (error codes and messages), all-gathers called outside a group, in a group
** per rank and in groups that hold ranks unevenly (also across two
** communicator groups on shared streams), a one-shot all-reduce
** pulling in a group and pushing apart, a captured call whose scratch would
** have to grow refused with the capture going on, and, with
** two GPUs or more, that a rank left alone times out instead of hanging.
** Exits 77 (skipped) where there is no GPU.
*/
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "resccl.h"
#include "runtime.h"

static int failures;

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      failures++;                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, " [%s]\n", resccl_get_last_error());        \
    }                                                             \
  } while (0)

enum { MAXR = 16 };
static int R;
static resccl_comm_t comm[MAXR];
static cudaStream_t st[MAXR];
static int dev[MAXR];
static int apart; /* collective() calls the ranks in one group (0), one by one outside a group (1), in a group each (2) */

/* Input element i of rank r: small integers, exact in float sums. */
static float val(int r, size_t i) { return (float)((r * 7 + (int)(i % 13)) % 11) - 3; }

/* Rank r's stream is done, with no error from its kernels; its GPU is current. */
static void settle(int r, const char *what) {
  cudaSetDevice(dev[r]);
  cudaStreamSynchronize(st[r]);
  resccl_result_t async;
  resccl_comm_get_async_error(comm[r], &async);
  CHECK(async == resccl_success, "%s: async error %s", what, resccl_get_error_string(async));
}

/* Run `coll` with count elements per block on every rank, grouped as `apart` says, and compare. */
static void collective(const char *coll, size_t count, int inplace, int calls) {
  size_t in_n = count, out_n = count;
  if (!strcmp(coll, "allgather")) out_n = count * R;
  if (!strcmp(coll, "reducescatter") || !strcmp(coll, "alltoall")) in_n = count * R;
  if (!strcmp(coll, "alltoall")) out_n = count * R;
  float *host = malloc(sizeof(float) * (in_n > out_n ? in_n : out_n) * 2);
  float *ibuf[MAXR], *obuf[MAXR];
  for (int r = 0; r < R; r++) {
    cudaSetDevice(dev[r]);
    cudaMalloc((void **)&ibuf[r], sizeof(float) * in_n);
    cudaMalloc((void **)&obuf[r], sizeof(float) * out_n);
    cudaMemset(obuf[r], 0xff, sizeof(float) * out_n); /* poison: NaN */
    for (size_t i = 0; i < in_n; i++) host[i] = val(r, i);
    float *where = ibuf[r];
    if (inplace && !strcmp(coll, "allgather")) where = obuf[r] + (size_t)r * count;
    else if (inplace && strcmp(coll, "reducescatter")) where = obuf[r];
    cudaMemcpy(where, host, sizeof(float) * in_n, cudaMemcpyHostToDevice);
  }
  for (int r = 0; r < R; r++) cudaSetDevice(dev[r]), cudaDeviceSynchronize(); /* before the non-blocking streams */
  for (int k = 0; k < calls; k++) {
    resccl_result_t rc = apart ? resccl_success : resccl_group_start();
    for (int r = 0; r < R && rc == resccl_success; r++) {
      float *in = ibuf[r], *o = obuf[r];
      resccl_stream_t s = (resccl_stream_t)st[r];
      if (apart == 2) resccl_group_start();
      if (!strcmp(coll, "allreduce"))
        rc = resccl_all_reduce(inplace ? o : in, o, count, resccl_float32, resccl_sum, comm[r], s);
      else if (!strcmp(coll, "allgather"))
        rc = resccl_all_gather(inplace ? o + (size_t)r * count : in, o, count, resccl_float32, comm[r], s);
      else if (!strcmp(coll, "reducescatter"))
        rc = resccl_reduce_scatter(in, inplace ? in + (size_t)r * count : o, count, resccl_float32, resccl_sum, comm[r], s);
      else
        rc = resccl_all_to_all(inplace ? o : in, o, count, resccl_float32, comm[r], s);
      if (apart == 2) {
        resccl_result_t e = resccl_group_end();
        rc = rc ? rc : e;
      }
    }
    resccl_result_t end = apart ? resccl_success : resccl_group_end();
    if (inplace && rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "no in-place form")) {
      printf("%-14s in-place      not in this plan: refused with resccl_invalid_usage\n", coll);
      for (int r = 0; r < R; r++) cudaFree(ibuf[r]), cudaFree(obuf[r]);
      free(host);
      return;
    }
    CHECK(rc == resccl_success && end == resccl_success, "%s count %zu: call failed: %s", coll, count,
          resccl_get_error_string(rc ? rc : end));
    /* In place, only an all-gather leaves its input as it was: check the first call of the others. */
    if (inplace && strcmp(coll, "allgather")) break;
  }
  size_t wrong = 0;
  /* Every rank settles before any buffer goes: after a timeout a peer's put may land late. */
  for (int r = 0; r < R; r++) settle(r, coll);
  for (int r = 0; r < R; r++) {
    cudaSetDevice(dev[r]);
    const float *src = (inplace && !strcmp(coll, "reducescatter")) ? ibuf[r] + (size_t)r * count : obuf[r];
    size_t n = !strcmp(coll, "reducescatter") ? count : out_n;
    cudaMemcpy(host, src, sizeof(float) * n, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      if (!strcmp(coll, "allreduce"))
        for (int q = 0; q < R; q++) want += val(q, i);
      else if (!strcmp(coll, "allgather")) want = val((int)(i / count), i % count);
      else if (!strcmp(coll, "reducescatter"))
        for (int q = 0; q < R; q++) want += val(q, (size_t)r * count + i);
      else want = val((int)(i / count), (size_t)r * count + i % count);
      wrong += host[i] != want;
    }
    cudaFree(ibuf[r]), cudaFree(obuf[r]);
  }
  CHECK(wrong == 0, "%s %s count %zu x%d: %zu wrong", coll, inplace ? "in-place" : "out-of-place", count, calls, wrong);
  printf("%-14s %-13s count %-9zu calls %d: %zu wrong\n", coll, inplace ? "in-place" : "out-of-place", count, calls, wrong);
  free(host);
}

/* All-gathers x < nx of n[x] elements per rank: rank r's input element i
   is val(r + x, i), its outputs poisoned. */
typedef struct {
  int nx;
  size_t n[3];
  float *in[3][MAXR], *out[3][MAXR];
} Gathers;

static void gathers_make(Gathers *g) {
  for (int x = 0; x < g->nx; x++)
    for (int r = 0; r < R; r++) {
      float *host = malloc(sizeof(float) * g->n[x]);
      for (size_t i = 0; i < g->n[x]; i++) host[i] = val(r + x, i);
      cudaSetDevice(dev[r]);
      cudaMalloc((void **)&g->in[x][r], sizeof(float) * g->n[x]);
      cudaMalloc((void **)&g->out[x][r], sizeof(float) * g->n[x] * R);
      cudaMemset(g->out[x][r], 0xff, sizeof(float) * g->n[x] * R); /* poison: NaN */
      cudaMemcpy(g->in[x][r], host, sizeof(float) * g->n[x], cudaMemcpyHostToDevice);
      free(host);
    }
  for (int r = 0; r < R; r++) cudaSetDevice(dev[r]), cudaDeviceSynchronize(); /* before the non-blocking streams */
}

/* Rank r's wrong output elements, once its stream is done (`what` fails on an error); its buffers go. */
static size_t gathers_wrong(Gathers *g, int r, const char *what) {
  size_t wrong = 0;
  settle(r, what);
  for (int x = 0; x < g->nx; x++) {
    float *host = malloc(sizeof(float) * g->n[x] * R);
    cudaMemcpy(host, g->out[x][r], sizeof(float) * g->n[x] * R, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < g->n[x] * R; i++) wrong += host[i] != val((int)(i / g->n[x]) + x, i % g->n[x]);
    cudaFree(g->in[x][r]), cudaFree(g->out[x][r]), free(host);
  }
  return wrong;
}

/* All-gathers grouped unevenly across ranks, as NCCL allows (a rank's k-th
   collective is every rank's k-th): rank 0's X alone, then the others' X
   with every rank's Y. Both are large enough for the copy-engine form, which
   needs every rank in one group: X runs the first form, Y the copy engine's,
   after X on every rank. */
static void staggered(void) {
  Gathers g = {2, {4099, 4099 * 2}, {{0}}, {{0}}};
  gathers_make(&g);
  resccl_result_t rc = resccl_success;
  for (int step = 0; step < 2; step++) { /* the groups: {0:X}, {1..:X, all:Y} */
    resccl_group_start();
    for (int x = 0; x < 2; x++)
      for (int r = 0; r < R; r++) {
        if (step == 0 ? x || r : !x && !r) continue;
        resccl_result_t e =
            resccl_all_gather(g.in[x][r], g.out[x][r], g.n[x], resccl_float32, comm[r], (resccl_stream_t)st[r]);
        rc = rc ? rc : e;
      }
    resccl_result_t e = resccl_group_end();
    rc = rc ? rc : e;
  }
  CHECK(rc == resccl_success, "staggered groups: %s", resccl_get_last_error());
  size_t wrong = 0;
  for (int r = 0; r < R; r++) wrong += gathers_wrong(&g, r, "staggered groups");
  CHECK(wrong == 0, "staggered groups: %zu wrong", wrong);
  printf("allgather      staggered groups (rank 0's first alone): %zu wrong\n", wrong);
}

/* Two communicator groups over the same GPUs and streams, grouped unevenly:
   all-gathers A and B on comm, C on a second group, called {0:A, 0:C, 0:B},
   {1..:A}, {1..:C, 1..:B}. Every rank's stream gets A, C, B in that order;
   launched in another, two GPUs would wait for each other (until the
   timeout). */
static void two_groups(const char *plan) {
  resccl_comm_t other[MAXR];
  resccl_result_t rc = resccl_comm_init_all(other, R, dev);
  CHECK(rc == resccl_success, "a second group: init");
  if (rc) return;
  rc = resccl_plan_load(other[0], plan);
  CHECK(rc == resccl_success, "a second group: load %s", plan);
  if (rc) {
    for (int r = 0; r < R; r++) resccl_comm_destroy(other[r]);
    return;
  }
  Gathers g = {3, {5, 5, 5}, {{0}}, {{0}}};
  gathers_make(&g);
  for (int step = 0; step < 3; step++) {
    resccl_group_start();
    for (int x = 0; x < 3; x++) /* A, C, B: rank 0's in step 0, the others' A in step 1, C and B in step 2 */
      for (int r = 0; r < R; r++) {
        if (r ? step != (x ? 2 : 1) : step) continue;
        resccl_comm_t c = x == 1 ? other[r] : comm[r];
        resccl_result_t e =
            resccl_all_gather(g.in[x][r], g.out[x][r], g.n[x], resccl_float32, c, (resccl_stream_t)st[r]);
        rc = rc ? rc : e;
      }
    resccl_result_t e = resccl_group_end();
    rc = rc ? rc : e;
  }
  CHECK(rc == resccl_success, "two groups: %s", resccl_get_last_error());
  size_t wrong = 0;
  for (int r = 0; r < R; r++) {
    wrong += gathers_wrong(&g, r, "two groups");
    resccl_result_t async;
    resccl_comm_get_async_error(other[r], &async);
    CHECK(async == resccl_success, "two groups: the second's async error %s", resccl_get_error_string(async));
  }
  for (int r = 0; r < R; r++) resccl_comm_destroy(other[r]);
  CHECK(wrong == 0, "two groups: %zu wrong", wrong);
  printf("allgather      two communicator groups on shared streams, grouped unevenly: %zu wrong\n", wrong);
}

/* A group destroyed with a collective launched on one rank only: the rest
   can no longer be launched, so its kernels give up at once and destroy
   does not wait for the timeout (2 s here). */
static void abandoned(const char *plan) {
  resccl_comm_t other[MAXR];
  resccl_result_t rc = resccl_comm_init_all(other, R, dev);
  CHECK(rc == resccl_success, "abandoned: init");
  if (rc) return;
  enum { N = 4099 };
  float *buf = NULL;
  cudaSetDevice(dev[0]), cudaMalloc((void **)&buf, sizeof(float) * N * ((size_t)R + 1));
  rc = resccl_plan_load(other[0], plan);
  if (rc == resccl_success) rc = resccl_all_gather(buf, buf + N, N, resccl_float32, other[0], (resccl_stream_t)st[0]);
  CHECK(rc == resccl_success, "abandoned: %s", resccl_get_last_error());
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < R; r++) resccl_comm_destroy(other[r]);
  cudaSetDevice(dev[0]), cudaStreamSynchronize(st[0]);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  CHECK(s < 1.0, "abandoned: destroy took %.2f s", s);
  cudaFree(buf);
  printf("allgather      launched on rank 0 only, its group destroyed: %.3f s\n", s);
}

/* Every GPU's stream is still capturing after `what`. */
static void capturing(cudaStream_t *gs, int ngpu, const char *what) {
  for (int d = 0; d < ngpu; d++) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaSetDevice(d);
    cudaError_t e = cudaStreamIsCapturing(gs[d], &cs);
    CHECK(cs == cudaStreamCaptureStatusActive, "GPU %d: capture %s after %s (%s)", d,
          cs == cudaStreamCaptureStatusInvalidated ? "invalidated" : "not active", what, cudaGetErrorString(e));
  }
}

/* All-reduce or all-to-all captured once into a CUDA graph per GPU (global
   capture mode), replayed with new inputs, with direct calls before and
   after it: the kernels number the calls themselves, so replays and calls
   mix (and a plan's copy-engine copies join the capture through events).
   `grows` > 0: first, in the capture, a call of that count, whose scratch
   memory would have to grow, is refused, and the capture goes on. */
static void graph_replay(const char *coll, size_t count, size_t grows) {
  int ngpu = 0, a2a = !strcmp(coll, "alltoall");
  size_t n = a2a ? count * R : count; /* elements of a rank's input and output */
  size_t room = grows > n ? grows : n;
  for (int r = 0; r < R; r++) ngpu = dev[r] + 1 > ngpu ? dev[r] + 1 : ngpu;
  cudaStream_t gs[MAXR];
  cudaGraph_t graph[MAXR] = {0};
  cudaGraphExec_t exec[MAXR] = {0};
  float *ibuf[MAXR], *obuf[MAXR], *host = malloc(sizeof(float) * n);
  for (int d = 0; d < ngpu; d++) cudaSetDevice(d), cudaStreamCreateWithFlags(&gs[d], cudaStreamNonBlocking);
  for (int r = 0; r < R; r++)
    cudaSetDevice(dev[r]), cudaMalloc((void **)&ibuf[r], sizeof(float) * room), cudaMalloc((void **)&obuf[r], sizeof(float) * room);
  collective(coll, 4099, 0, 1);
  for (int d = 0; d < ngpu; d++) cudaSetDevice(d), cudaStreamBeginCapture(gs[d], cudaStreamCaptureModeGlobal);
  capturing(gs, ngpu, "the capture began");
  resccl_result_t rc;
  if (grows) {
    rc = resccl_group_start();
    for (int r = 0; r < R && rc == resccl_success; r++)
      rc = resccl_all_reduce(ibuf[r], obuf[r], grows, resccl_float32, resccl_sum, comm[r], (resccl_stream_t)gs[dev[r]]);
    resccl_result_t end = resccl_group_end();
    CHECK(rc == resccl_success && end == resccl_invalid_usage && strstr(resccl_get_last_error(), "CUDA graph capture"),
          "a captured call whose scratch must grow: %d, %d", rc, end);
    capturing(gs, ngpu, "a refused call");
  }
  rc = resccl_group_start();
  for (int r = 0; r < R && rc == resccl_success; r++)
    rc = a2a ? resccl_all_to_all(ibuf[r], obuf[r], count, resccl_float32, comm[r], (resccl_stream_t)gs[dev[r]])
             : resccl_all_reduce(ibuf[r], obuf[r], count, resccl_float32, resccl_sum, comm[r], (resccl_stream_t)gs[dev[r]]);
  resccl_result_t end = resccl_group_end();
  CHECK(rc == resccl_success && end == resccl_success, "captured %s: %s", coll, resccl_get_error_string(rc ? rc : end));
  capturing(gs, ngpu, coll);
  /* Every capture ends before any graph is instantiated: instantiating is
     not allowed while a global-mode capture is going on. */
  int made = 0;
  for (int d = 0; d < ngpu; d++)
    if (cudaSetDevice(d), cudaStreamEndCapture(gs[d], &graph[d]) != cudaSuccess) graph[d] = NULL;
  for (int d = 0; d < ngpu; d++)
    if (graph[d] && (cudaSetDevice(d), cudaGraphInstantiate(&exec[d], graph[d], 0) == cudaSuccess)) made++;
    else exec[d] = NULL;
  CHECK(made == ngpu, "capture or instantiation failed: %s", cudaGetErrorString(cudaGetLastError()));
  size_t wrong = 0;
  for (int k = 1; k <= 3 && made == ngpu; k++) {
    for (int r = 0; r < R; r++) {
      for (size_t i = 0; i < n; i++) host[i] = (float)k * val(r, i);
      cudaSetDevice(dev[r]);
      cudaMemcpy(ibuf[r], host, sizeof(float) * n, cudaMemcpyHostToDevice);
      cudaMemset(obuf[r], 0xff, sizeof(float) * n);
    }
    for (int d = 0; d < ngpu; d++) cudaSetDevice(d), cudaDeviceSynchronize();
    for (int d = 0; d < ngpu; d++) cudaSetDevice(d), cudaGraphLaunch(exec[d], gs[d]);
    for (int d = 0; d < ngpu; d++) cudaSetDevice(d), cudaStreamSynchronize(gs[d]);
    for (int r = 0; r < R; r++) {
      cudaSetDevice(dev[r]);
      cudaMemcpy(host, obuf[r], sizeof(float) * n, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < n; i++) {
        float want = 0;
        if (a2a) want = (float)k * val((int)(i / count), (size_t)r * count + i % count);
        else
          for (int q = 0; q < R; q++) want += (float)k * val(q, i);
        wrong += host[i] != want;
      }
    }
  }
  CHECK(wrong == 0, "graph replays: %zu wrong", wrong);
  collective(coll, 4099, 0, 2);
  if (made == ngpu) printf("%-14s graph         count %-9zu replays 3: %zu wrong\n", coll, count, wrong);
  for (int d = 0; d < ngpu; d++) {
    cudaSetDevice(d);
    if (exec[d]) cudaGraphExecDestroy(exec[d]);
    if (graph[d]) cudaGraphDestroy(graph[d]);
  }
  for (int r = 0; r < R; r++) cudaSetDevice(dev[r]), cudaFree(ibuf[r]), cudaFree(obuf[r]);
  for (int d = 0; d < ngpu; d++) cudaSetDevice(d), cudaStreamDestroy(gs[d]);
  free(host);
}

/* Plans by size (resccl_plan_load_range), with no plan loaded yet: two sizes
   of one collective with a gap between them; a call runs the plan whose sizes
   hold it, refuses a size none holds, and a plan for every size replaces
   both; a later one for the large sizes leaves it the small ones. */
static void size_ranges(const char *ar) {
  resccl_result_t rc = resccl_plan_load_range(comm[0], ar, 0, 4095);
  CHECK(rc == resccl_success, "load below 4 KiB: %s", resccl_get_error_string(rc));
  rc = resccl_plan_load_range(comm[0], ar, 8192, SIZE_MAX);
  CHECK(rc == resccl_success, "load from 8 KiB: %s", resccl_get_error_string(rc));
  CHECK(resccl_plan_load_range(comm[0], ar, 10, 5) == resccl_invalid_argument, "an empty size range loaded");
  collective("allreduce", 1000, 0, 1);
  collective("allreduce", 1 << 20, 0, 1);
  float *a;
  cudaSetDevice(dev[0]);
  cudaMalloc((void **)&a, 4 * 4096);
  rc = resccl_all_reduce(a, a + 2048, 1536, resccl_float32, resccl_sum, comm[0], NULL);
  CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "6144 bytes"), "a size no plan holds gave %d", rc);
  cudaFree(a);
  rc = resccl_plan_load(comm[0], ar);
  CHECK(rc == resccl_success, "load for every size: %s", resccl_get_error_string(rc));
  collective("allreduce", 1536, 0, 1);
  /* One from 1 MiB leaves the other the sizes below; none may cut one in two, nor load inside a group. */
  rc = resccl_plan_load_range(comm[0], ar, 1 << 20, SIZE_MAX);
  CHECK(rc == resccl_success, "load from 1 MiB: %s", resccl_get_error_string(rc));
  collective("allreduce", 1536, 0, 1);
  collective("allreduce", 1 << 20, 0, 1);
  CHECK(resccl_plan_load_range(comm[0], ar, 100, 200) == resccl_invalid_usage, "a plan cut in two");
  resccl_group_start();
  CHECK(resccl_plan_load(comm[0], ar) == resccl_invalid_usage, "a plan loaded inside a group");
  resccl_group_end();
  printf("plans by size: ran\n");
}

/* Rank 0 launches an all-reduce of 16 elements alone; a plan load is then
   refused, and the others, called apart with 8, too (nothing launched, as
   rank 0's record says 16); called with 16, it completes, and sums right. */
static void apart_disagree(void) {
  enum { C = 16 };
  float *b[MAXR], h[2 * C];
  for (int r = 0; r < R; r++) {
    for (int i = 0; i < 2 * C; i++) h[i] = i < C ? val(r, (size_t)i) : -1e9f;
    cudaSetDevice(dev[r]);
    cudaMalloc((void **)&b[r], sizeof h);
    cudaMemcpy(b[r], h, sizeof h, cudaMemcpyHostToDevice);
  }
  for (int r = 0; r < R; r++) cudaSetDevice(dev[r]), cudaDeviceSynchronize(); /* the copies landed before st[r] reads */
  resccl_result_t rc = resccl_all_reduce(b[0], b[0] + C, C, resccl_float32, resccl_sum, comm[0], st[0]);
  CHECK(rc == resccl_success, "rank 0 alone gave %d", rc);
  rc = resccl_plan_load(comm[0], "/nonexistent.plan"); /* refused before the file is opened */
  CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "some ranks"),
        "a plan load with a collective launched on some ranks gave %d", rc);
  for (int r = 1; r < R; r++) {
    rc = resccl_all_reduce(b[r], b[r] + C, C / 2, resccl_float32, resccl_sum, comm[r], st[r]);
    CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "other ranks launched"),
          "rank %d disagreeing apart gave %d", r, rc);
  }
  for (int r = 1; r < R; r++) {
    rc = resccl_all_reduce(b[r], b[r] + C, C, resccl_float32, resccl_sum, comm[r], st[r]);
    CHECK(rc == resccl_success, "rank %d agreeing apart gave %d", r, rc);
  }
  int wrong = 0;
  for (int r = 0; r < R; r++) {
    settle(r, "ranks apart");
    cudaMemcpy(h, b[r], sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 0; i < C; i++) {
      float want = 0;
      for (int q = 0; q < R; q++) want += val(q, (size_t)i);
      wrong += h[C + i] != want;
    }
    cudaFree(b[r]);
  }
  CHECK(!wrong, "ranks apart: %d elements wrong", wrong);
  cudaSetDevice(dev[0]);
  printf("ranks apart that disagree: the later ones refused, then matched\n");
}

static void bad_arguments(void) {
  float *a;
  cudaSetDevice(dev[0]);
  cudaMalloc((void **)&a, 4096);
  resccl_result_t rc = resccl_all_reduce(NULL, a, 16, resccl_float32, resccl_sum, comm[0], NULL);
  CHECK(rc == resccl_invalid_argument, "null buffer gave %d", rc);
  rc = resccl_all_reduce((char *)a + 1, a, 16, resccl_float32, resccl_sum, comm[0], NULL);
  CHECK(rc == resccl_invalid_argument && strstr(resccl_get_last_error(), "aligned"), "misaligned buffer gave %d", rc);
  rc = resccl_all_reduce(a, a + 32, 16, (resccl_datatype_t)42, resccl_sum, comm[0], NULL);
  CHECK(rc == resccl_invalid_argument, "unknown datatype gave %d", rc);
  rc = resccl_all_reduce(a, a + 32, 16, resccl_float32, (resccl_red_op_t)9, comm[0], NULL);
  CHECK(rc == resccl_invalid_argument, "unknown op gave %d", rc);
  rc = resccl_all_reduce(a, a + 32, 16, resccl_float32, resccl_sum, NULL, NULL);
  CHECK(rc == resccl_invalid_argument, "null communicator gave %d", rc);
  CHECK(resccl_group_end() == resccl_invalid_usage, "unmatched group end accepted");
  /* What would run, asked ahead of a call, whatever the buffers; no group fails by it. */
  resccl_group_start();
  rc = resccl_call_supported("allreduce", (char *)a + 1, a, 4099, resccl_float32, resccl_sum, comm[0]);
  CHECK(rc == resccl_success, "supported all-reduce gave %d", rc);
  rc = resccl_call_supported("allreduce", a, a, 16, (resccl_datatype_t)42, resccl_sum, comm[0]);
  CHECK(rc == resccl_invalid_argument, "supported with an unknown datatype gave %d", rc);
  rc = resccl_call_supported("broadcast", a, a, 16, resccl_float32, resccl_sum, comm[0]);
  CHECK(rc == resccl_invalid_argument && strstr(resccl_get_last_error(), "broadcast"), "unknown collective gave %d", rc);
  CHECK(resccl_group_end() == resccl_success, "a group failed by resccl_call_supported");
  if (R > 1) { /* ranks that disagree on a collective's count: refused with nothing launched, and the next match */
    resccl_group_start();
    for (int r = 0; r < R; r++) resccl_all_reduce(a, a + 32, r ? 16 : 8, resccl_float32, resccl_sum, comm[r], NULL);
    rc = resccl_group_end();
    CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "differs"), "disagreeing ranks gave %d", rc);
    collective("allreduce", 4099, 0, 1);
    cudaSetDevice(dev[0]);
  }
  int shared = 0;
  for (int r = 1; r < R; r++) shared |= dev[r] == dev[0];
  if (R > 1 && !shared) apart_disagree();
  if (R > 1) { /* a rank alone outside a group is fine only when it has its GPU to itself */
    rc = resccl_all_reduce(a, a + 32, 16, resccl_float32, resccl_sum, comm[0], NULL);
    if (shared) {
      CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "group"), "lone virtual rank gave %d", rc);
      collective("allreduce", 4099, 0, 1); /* refused at launch, its rank's count of collectives stayed */
      cudaSetDevice(dev[0]);
    } else {
      /* It launches and waits for peers that never come: it must time out, not hang. */
      CHECK(rc == resccl_success, "lone rank launch gave %d", rc);
      cudaDeviceSynchronize();
      resccl_result_t async;
      resccl_comm_get_async_error(comm[0], &async);
      CHECK(async == resccl_timeout, "a lone rank did not time out (%d)", async);
      rc = resccl_all_reduce(a, a + 32, 16, resccl_float32, resccl_sum, comm[0], NULL);
      CHECK(rc == resccl_timeout, "a timed-out communicator accepted a call (%d)", rc);
      printf("lone rank: timed out and reported it\n");
    }
  }
  cudaFree(a);
  printf("bad arguments: %s\n", failures ? "see failures" : "every one refused with its code");
}

/* With VAR=value, loading path is refused and the message says `says`; then VAR is as it was. */
static void load_refused(const char *path, const char *var, const char *value, const char *says) {
  char old[256];
  const char *was = getenv(var);
  if (was) snprintf(old, sizeof old, "%s", was);
  setenv(var, value, 1);
  resccl_result_t rc = resccl_plan_load(comm[0], path);
  CHECK(rc == resccl_invalid_argument && strstr(resccl_get_last_error(), says), "%s=%s accepted (%d)", var, value, rc);
  if (was) setenv(var, old, 1);
  else unsetenv(var);
}

/* Load DIR/COLL<suffix>.plan and run the collective out of place and in
   place at 1, 4099 and 2^20 elements, repeated. */
static resccl_result_t plan_runs(const char *dir, const char *coll, const char *suffix) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s%s.plan", dir, coll, suffix);
  resccl_result_t rc = resccl_plan_load(comm[0], path);
  CHECK(rc == resccl_success, "load %s: %s", path, resccl_get_error_string(rc));
  if (rc) return rc;
  int blocks = -1;
  resccl_plan_blocks(comm[0], coll, &blocks);
  printf("%s%s: %d blocks per rank\n", coll, suffix, blocks);
  for (int inplace = 0; inplace < 2; inplace++) {
    collective(coll, 1, inplace, 1);
    collective(coll, 4099, inplace, 3);
    collective(coll, 1 << 20, inplace, 2);
  }
  return rc;
}

/* The settings a plan is loaded with, read from the environment (resccl_x_conf_env, which resccl_plan_load
   calls before it needs a GPU): values with units, and bad ones refused with their name and text. */
static void settings(void) {
  static const struct {
    const char *var, *value, *says; /* says NULL: accepted */
  } cases[] = {
      {"RESCCL_TIMEOUT", "abc", "RESCCL_TIMEOUT=abc: not a duration (examples: 30, 30s, 500ms, 2m)"},
      {"RESCCL_TIMEOUT", "1m", NULL},
      {"RESCCL_TIMEOUT", "nan", "RESCCL_TIMEOUT=nan: not a duration"},
      {"RESCCL_TIMEOUT", "-1", "RESCCL_TIMEOUT=-1: not a duration"},
      {"RESCCL_TIMEOUT", "2e9", "RESCCL_TIMEOUT=2e9: out of range (0s to 1e+09s)"},
      {"RESCCL_SLOT_BYTES", "4294971392", "RESCCL_SLOT_BYTES=4294971392: out of range (4KiB to 1GiB)"},
      {"RESCCL_SLOT_BYTES", "4100", "RESCCL_SLOT_BYTES=4100: not a multiple of 16B"},
      {"RESCCL_SLOT_BYTES", "256KiB", NULL},
      {"RESCCL_CE_FROM", "-1", "RESCCL_CE_FROM=-1: not a size"},
      {"RESCCL_CE_FROM", "16777216T", "RESCCL_CE_FROM=16777216T: out of range"},
      {"RESCCL_PULL_FROM", "1X", "RESCCL_PULL_FROM=1X: not a size"},
      {"RESCCL_TILE_BYTES", "2T", "RESCCL_TILE_BYTES=2T: out of range (4KiB to 1TiB)"},
      {"RESCCL_NCHANNELS", "65", "RESCCL_NCHANNELS=65: out of range (0 to 64)"},
      {"RESCCL_NCHANNELS", "8 ", "RESCCL_NCHANNELS=8 : not an integer"},
      {"RESCCL_SLICES", "4294967298", "RESCCL_SLICES=4294967298: out of range (0 to 16)"},
      {"RESCCL_THREADS", "100", "RESCCL_THREADS=100: not a multiple of 32"},
      {"RESCCL_SLOTS", "0", "RESCCL_SLOTS=0: out of range (1 to 2147483647)"},
      {"RESCCL_NMICRO", "-1", "RESCCL_NMICRO=-1: out of range (0 to 2147483647)"},
      {"RESCCL_DIRECT", "2", "RESCCL_DIRECT=2: not a boolean"},
      {"RESCCL_DTYPES", "f32,bf17", "RESCCL_DTYPES=f32,bf17: not a list of dtypes"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    RtConf c;
    setenv(cases[i].var, cases[i].value, 1);
    resccl_result_t rc = resccl_x_conf_env(&c);
    unsetenv(cases[i].var);
    if (cases[i].says)
      CHECK(rc == resccl_invalid_argument && strstr(resccl_get_last_error(), cases[i].says), "%s=%s: %d, '%s'",
            cases[i].var, cases[i].value, rc, resccl_get_last_error());
    else CHECK(rc == resccl_success, "%s=%s refused: %s", cases[i].var, cases[i].value, resccl_get_last_error());
  }
  /* what the accepted ones mean, and the defaults where a variable is empty */
  RtConf c;
  setenv("RESCCL_TIMEOUT", "1m", 1), setenv("RESCCL_SLOT_BYTES", "256KiB", 1), setenv("RESCCL_CE_FROM", "8 MiB", 1);
  setenv("RESCCL_DIRECT", "off", 1), setenv("RESCCL_NCHANNELS", "", 1);
  resccl_result_t rc = resccl_x_conf_env(&c);
  CHECK(rc == resccl_success && c.timeout_s == 60 && c.slot_bytes == 256 << 10 && c.ce_from == 8 << 20 &&
        c.ce_from_blockless == 8 << 20 && c.direct == 0 && c.nchan == 0 && c.threads == RT_THREADS,
        "settings read as %g s, %zu, %zu, %d, %d", c.timeout_s, c.slot_bytes, c.ce_from, c.direct, c.nchan);
  unsetenv("RESCCL_TIMEOUT"), unsetenv("RESCCL_SLOT_BYTES"), unsetenv("RESCCL_CE_FROM"), unsetenv("RESCCL_DIRECT");
  unsetenv("RESCCL_NCHANNELS");
  printf("settings: %zu read, the bad ones refused with their names\n", sizeof cases / sizeof *cases + 1);
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "build")) {
    settings();
    for (int i = 2; i < argc; i++) {
      /* the reduce-scatter plan at RESCCL_THREADS's largest, the others at the default */
      resccl_result_t rc = resccl_x_plan_build(argv[i], 90, strstr(argv[i], "reducescatter") ? 1024 : 0);
      CHECK(rc == resccl_success, "%s: %s", argv[i], resccl_get_error_string(rc));
      if (rc == resccl_success) printf("built %s for sm_90\n", argv[i]);
    }
    /* Compiler options that do not fit are refused, not cut. */
    char opts[2000] = "";
    for (int i = 0; i < 400; i++) strcat(opts, "-DX ");
    setenv("RESCCL_NVRTC_OPTIONS", opts, 1);
    resccl_result_t rc = resccl_x_plan_build(argv[2], 90, 0);
    CHECK(rc == resccl_invalid_argument && strstr(resccl_get_last_error(), "too long"), "1600 bytes of options: %d", rc);
    unsetenv("RESCCL_NVRTC_OPTIONS");
    int version = -1;
    CHECK(resccl_get_version(&version) == resccl_success && version == RESCCL_VERSION_CODE && version == 100,
          "version %d", version);
    CHECK(resccl_get_version(NULL) == resccl_invalid_argument, "NULL version refused");
    return failures ? 1 : 0;
  }
  if (argc != 3 || strcmp(argv[1], "run")) {
    fprintf(stderr, "usage: test_runtime build PLAN... | run DIR\n");
    return 2;
  }
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
    printf("no GPU: runtime tests skipped\n");
    return 77;
  }
  const char *r_env = getenv("RANKS");
  R = r_env ? atoi(r_env) : ngpu;
  if (R < 1 || R > MAXR) return fprintf(stderr, "RANKS out of range\n"), 2;
  for (int r = 0; r < R; r++) dev[r] = r % ngpu;
  setenv("RESCCL_TIMEOUT", "2", 1);
  CHECK(resccl_comm_init_all(comm, R, dev) == resccl_success, "init");
  for (int r = 0; r < R; r++) cudaSetDevice(dev[r]), cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking);
  static const char *const colls[] = {"allreduce", "allgather", "reducescatter", "alltoall"};
  char path[1024];
  snprintf(path, sizeof path, "%s/missing.plan", argv[2]);
  CHECK(resccl_plan_load(comm[0], path) == resccl_system_error, "a missing plan file loaded");
  snprintf(path, sizeof path, "%s/allreduce.plan", argv[2]);
  size_ranges(path); /* first: before any plan covers every size */
  for (int c = 0; c < 4; c++)
    if (plan_runs(argv[2], colls[c], "") == resccl_success && c == 0) graph_replay("allreduce", 1 << 20, 0);
  /* Plans compiled with --ce: what waits for nothing goes to the copy
     engine (all of it, for a two-rank all-gather and any all-to-all; the
     puts that a reduce-scatter's or an all-reduce's reductions wait for); a
     rank called alone is refused, since the copies need every rank's
     buffers and these plans have no other form. */
  static const char *const ce_colls[] = {"allgather", "alltoall", "reducescatter", "allreduce"};
  for (int c = 0; c < 4; c++) {
    if (plan_runs(argv[2], ce_colls[c], "-ce") != resccl_success) continue;
    if (c == 3) graph_replay("allreduce", 1 << 20, 0); /* copy-engine flags zeroed on the GPU between replays */
    if (c == 1) {
      graph_replay("alltoall", 1 << 18, 0);
      float *buf;
      cudaSetDevice(dev[0]), cudaMalloc((void **)&buf, sizeof(float) * 2 * (size_t)R);
      resccl_result_t rc = resccl_all_to_all(buf, buf + R, 1, resccl_float32, comm[0], (resccl_stream_t)st[0]);
      CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "copy engine"),
            "a lone rank of a copy-engine plan: %d", rc);
      cudaFree(buf);
    }
  }
  /* Plans compiled with --pull: receives read the sender's input (a
     one-shot all-reduce, a reduce-scatter, an all-gather), replayed in
     graphs too; a rank called alone is refused, as it has no peer's buffers
     and these plans have no other form to run instead. */
  static const char *const pull_colls[] = {"allreduce", "reducescatter", "allgather"};
  for (int c = 0; c < 3; c++) {
    if (plan_runs(argv[2], pull_colls[c], "-pull") != resccl_success || c) continue;
    graph_replay("allreduce", 1 << 20, 0);
    float *buf;
    cudaSetDevice(dev[0]), cudaMalloc((void **)&buf, sizeof(float) * 2);
    resccl_result_t rc = resccl_all_reduce(buf, buf + 1, 1, resccl_float32, resccl_sum, comm[0], (resccl_stream_t)st[0]);
    CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "peers' buffers"),
          "a lone rank of a pulling plan: %d", rc);
    cudaFree(buf);
  }
  /* A ring all-reduce compiled with --pull: on two ranks each reduces its
     half reading the peer's input and stores the sum on both ranks, in
     place too (pull.c's put_on); replayed in graphs too. */
  if (plan_runs(argv[2], "allreduce", "-ring-pull") == resccl_success) graph_replay("allreduce", 1 << 20, 0);
  /* A plan file holds a placement's copy-engine form after its TB form;
     calls from RESCCL_CE_FROM bytes run it (on two ranks an all-gather's
     has no block). */
  snprintf(path, sizeof path, "%s/allgather.plan", argv[2]);
  load_refused(path, "RESCCL_CE_FROM", "8X", "RESCCL_CE_FROM");
  setenv("RESCCL_CE_FROM", "8K", 1);
  load_refused(path, "RESCCL_TIMEOUT", "nan", "RESCCL_TIMEOUT");
  CHECK(resccl_plan_load(comm[0], path) == resccl_success, "reload %s", path);
  unsetenv("RESCCL_CE_FROM");
  int small = -1, large = -1;
  resccl_call_blocks(comm[0], "allgather", 4 * (size_t)R, &small);
  resccl_call_blocks(comm[0], "allgather", 4099 * 4 * (size_t)R, &large);
  CHECK(small > 0 && (R != 2 || large == 0), "allgather blocks by size: %d, %d", small, large);
  for (int inplace = 0; inplace < 2; inplace++) collective("allgather", 1, inplace, 1), collective("allgather", 4099, inplace, 2);
  printf("allgather      by size       blocks %d below 8 KiB, %d from there\n", small, large);
  /* By default a copy-engine form with no block runs from 16 MiB (others from 64). */
  CHECK(resccl_plan_load(comm[0], path) == resccl_success, "reload %s", path);
  resccl_call_blocks(comm[0], "allgather", 8u << 20, &small);
  resccl_call_blocks(comm[0], "allgather", 16u << 20, &large);
  CHECK(small > 0 && (R != 2 || large == 0), "allgather blocks by default: %d at 8 MiB, %d at 16 MiB", small, large);
  /* Ranks called one by one, outside a group or in a group each, each on a
     GPU of its own: they run the first form (the copy engine's needs every
     rank's buffers). */
  int own = 1;
  for (int r = 0; r < R; r++)
    for (int q = 0; q < r; q++) own &= dev[r] != dev[q];
  if (own) {
    for (apart = 1; apart <= 2; apart++) collective("allgather", 4099, 0, 2);
    apart = 0;
    printf("allgather      outside a group, and a group per rank, from 8 KiB: ran the first form\n");
    staggered();
    two_groups(path);
    abandoned(path);
    /* A one-shot all-reduce pulls from 1 MiB in a group of every rank; apart, it pushes through the
       FIFOs (its first form, with scratch of its own). */
    snprintf(path, sizeof path, "%s/allreduce-allpairs.plan", argv[2]);
    CHECK(resccl_plan_load(comm[0], path) == resccl_success, "load %s", path);
    int pulling = -1, pushing = -1;
    resccl_call_blocks(comm[0], "allreduce", 4u << 20, &pulling);
    resccl_call_blocks(comm[0], "allreduce", 256u << 10, &pushing);
    CHECK(R != 2 || (pulling > 0 && pulling < pushing), "allreduce-allpairs blocks: %d pulling, %d pushing", pulling,
          pushing);
    for (apart = 0; apart <= 2; apart++) collective("allreduce", 1 << 20, 0, 2);
    apart = 0;
    printf("allreduce      4 MiB pulling in one group, pushing outside a group and in a group per rank\n");
  }
  /* A one-shot all-reduce pushing through scratch memory sized by its first
     call: a captured call that needs more is refused, as growing would
     allocate during the capture. */
  snprintf(path, sizeof path, "%s/allreduce-allpairs.plan", argv[2]);
  CHECK(resccl_plan_load(comm[0], path) == resccl_success, "load %s", path);
  graph_replay("allreduce", 4099, 1 << 16);
  resccl_result_t rc;
  /* The plain all-reduce again (the checks below call ranks alone: they
     run its first form). */
  snprintf(path, sizeof path, "%s/allreduce.plan", argv[2]);
  load_refused(path, "RESCCL_PULL_BELOW", "1X", "RESCCL_PULL_BELOW=1X: not a size");
  /* RESCCL_DTYPES: kernels that reduce those dtypes only; the others' calls are refused. */
  load_refused(path, "RESCCL_DTYPES", "f32,bf17", "RESCCL_DTYPES");
  setenv("RESCCL_DTYPES", "i8,f32", 1);
  CHECK(resccl_plan_load(comm[0], path) == resccl_success, "load %s with RESCCL_DTYPES=i8,f32", path);
  unsetenv("RESCCL_DTYPES");
  collective("allreduce", 4099, 0, 1);
  collective("allreduce", 4099, 1, 1);
  void *b16;
  cudaSetDevice(dev[0]), cudaMalloc(&b16, 64);
  resccl_group_start();
  for (int r = 0; r < R; r++) resccl_all_reduce(b16, b16, 16, resccl_bfloat16, resccl_sum, comm[r], NULL);
  rc = resccl_group_end();
  CHECK(rc == resccl_invalid_usage && strstr(resccl_get_last_error(), "bf16 kernels"), "a bf16 call without them: %d", rc);
  cudaFree(b16);
  printf("allreduce      RESCCL_DTYPES=i8,f32: f32 ran, bf16 refused\n");
  CHECK(resccl_plan_load(comm[0], path) == resccl_success, "reload %s", path);
  snprintf(path, sizeof path, "%s/other-ranks.plan", argv[2]);
  rc = resccl_plan_load(comm[0], path);
  CHECK(rc == resccl_invalid_usage, "a plan for another rank count loaded (%d)", rc);
  bad_arguments();
  for (int r = 0; r < R; r++) resccl_comm_destroy(comm[r]);
  printf("%s\n", failures ? "runtime tests FAILED" : "runtime tests passed");
  return failures ? 1 : 0;
}
