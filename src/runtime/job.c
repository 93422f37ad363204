/*
** job.c — the executor behind `resccl run --gpu`, inside libresccl: run one
** plan once through the public API on buffers the caller filled, hand the
** results back for checking, then time `iters` more calls. exec_gpu.c
** loads this library and calls resccl_x_run_job (and resccl_x_gpu_count,
** to choose where `resccl run` runs).
*/
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "runtime.h"

#define OK(call)                                                                            \
  do {                                                                                      \
    resccl_result_t r_ = (call);                                                            \
    if (r_ != resccl_success) {                                                             \
      snprintf(out->error, sizeof out->error, "%s: %s", resccl_get_error_string(r_), resccl_get_last_error()); \
      goto done;                                                                            \
    }                                                                                       \
  } while (0)

#define CUOK(call) OK((call) == cudaSuccess ? resccl_success : rt_fail(resccl_unhandled_cuda_error, "%s: %s", #call, \
                                                                     cudaGetErrorString(cudaGetLastError())))

/* One call on every rank, launched together. */
static resccl_result_t call_all(const RxGpuJob *j, resccl_comm_t *comm, char **buf, cudaStream_t *st) {
  resccl_result_t rc = resccl_group_start();
  for (int r = 0; r < j->nranks && rc == resccl_success; r++) {
    char *in = buf[r * 3], *o = buf[r * 3 + 1];
    size_t shift = (size_t)r * j->count * j->esize;
    resccl_stream_t s = (resccl_stream_t)st[r];
    if (!strcmp(j->collective, "allreduce"))
      rc = resccl_all_reduce(j->inplace ? o : in, o, j->count, j->dtype, j->op, comm[r], s);
    else if (!strcmp(j->collective, "allgather"))
      rc = resccl_all_gather(j->inplace ? o + shift : in, o, j->count, j->dtype, comm[r], s);
    else if (!strcmp(j->collective, "reducescatter"))
      rc = resccl_reduce_scatter(in, j->inplace ? in + shift : o, j->count, j->dtype, j->op, comm[r], s);
    else
      rc = resccl_all_to_all(j->inplace ? o : in, o, j->count, j->dtype, comm[r], s);
  }
  resccl_result_t end = resccl_group_end();
  return rc != resccl_success ? rc : end;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* GPUs CUDA sees here; 0 where there is none or no driver. */
int resccl_x_gpu_count(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

int resccl_x_run_job(const RxGpuJob *j, RxGpuOut *out) {
  int R = j->nranks, devcount = 0, rc = 1;
  memset(out, 0, sizeof *out);
  resccl_comm_t *comm = calloc((size_t)R, sizeof *comm);
  int *devs = calloc((size_t)R, sizeof *devs);
  char **buf = calloc((size_t)R * 3, sizeof *buf);
  cudaStream_t *st = calloc((size_t)R, sizeof *st);
  cudaEvent_t *ev = calloc((size_t)R * 2, sizeof *ev);
  double *times = calloc((size_t)j->iters + 1, sizeof *times);
  if (!comm || !devs || !buf || !st || !ev || !times) {
    free(comm), free(devs), free(buf), free(st), free(ev), free(times);
    snprintf(out->error, sizeof out->error, "out of memory");
    return 1;
  }
  cudaError_t ce = cudaGetDeviceCount(&devcount);
  if (ce != cudaSuccess || devcount < 1)
    OK(rt_fail(resccl_system_error, "no CUDA GPU on this machine (%s)", ce != cudaSuccess ? cudaGetErrorString(ce) : "none found"));
  int ndev = j->ndev > 0 && j->ndev < devcount ? j->ndev : devcount;
  ndev = ndev < R ? ndev : R;
  if (ndev < 1) OK(rt_fail(resccl_invalid_usage, "no GPU"));
  out->ndev = ndev;
  for (int r = 0; r < R; r++) devs[r] = r % ndev;
  OK(resccl_comm_init_all(comm, R, devs));
  RtConf conf;
  OK(resccl_x_conf_env(&conf));
  conf.nchan = j->nchan, conf.threads = j->threads ? j->threads : conf.threads, conf.nslots = j->nslots, conf.slot_bytes = j->slot_bytes;
  conf.nmicro = j->nmicro, conf.timeout_s = j->timeout_s, conf.direct = j->direct;
  conf.dtypes = conf.dtypes ? conf.dtypes : 1u << j->dtype; /* the one it runs: built in about half the time */
  OK(rt_plan_load(comm[0], j->plan_path, &conf, 0, SIZE_MAX));
  for (int r = 0; r < R; r++) {
    CUOK(cudaSetDevice(devs[r]));
    CUOK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
    CUOK(cudaEventCreate(&ev[2 * r]));
    CUOK(cudaEventCreate(&ev[2 * r + 1]));
    for (int b = 0; b < 2; b++) {
      CUOK(cudaMalloc((void **)&buf[r * 3 + b], j->elems[b] * j->esize + 16));
      CUOK(cudaMemcpy(buf[r * 3 + b], j->init[r * 3 + b], j->elems[b] * j->esize, cudaMemcpyHostToDevice));
    }
    /* A copy from pageable memory may return before it lands, and st[r]
       does not wait for the legacy stream: a late poison would overwrite
       results. */
    CUOK(cudaDeviceSynchronize());
  }
  for (int it = 0; it <= j->iters; it++) {
    for (int r = 0; r < R; r++) {
      CUOK(cudaSetDevice(devs[r]));
      CUOK(cudaEventRecord(ev[2 * r], st[r]));
    }
    OK(call_all(j, comm, buf, st));
    for (int r = 0; r < R; r++) {
      CUOK(cudaSetDevice(devs[r]));
      CUOK(cudaEventRecord(ev[2 * r + 1], st[r]));
    }
    double ms = 0;
    for (int r = 0; r < R; r++) {
      float t = 0;
      CUOK(cudaSetDevice(devs[r]));
      CUOK(cudaEventSynchronize(ev[2 * r + 1]));
      CUOK(cudaEventElapsedTime(&t, ev[2 * r], ev[2 * r + 1]));
      ms = t > ms ? t : ms;
    }
    resccl_result_t async;
    OK(resccl_comm_get_async_error(comm[0], &async));
    if (async != resccl_success) OK(rt_fail(async, "no progress for %g s: a TB waited too long (stuck run)", j->timeout_s));
    times[it] = ms;
    if (it == 0)
      for (int r = 0; r < R; r++)
        for (int b = 0; b < 2; b++)
          CUOK(cudaMemcpy(j->result[r * 3 + b], buf[r * 3 + b], j->elems[b] * j->esize, cudaMemcpyDeviceToHost));
  }
  out->first_ms = times[0];
  if (j->iters > 0) {
    qsort(times + 1, (size_t)j->iters, sizeof *times, cmp);
    out->median_ms = times[1 + j->iters / 2];
  }
  rc = 0;
done:
  /* On an error every GPU finishes first: a peer's kernel or copies may still use these buffers. */
  for (int d = 0; d < out->ndev; d++) cudaSetDevice(d), cudaDeviceSynchronize();
  for (int r = 0; r < R; r++) {
    if (st[r]) cudaSetDevice(devs[r]), cudaStreamDestroy(st[r]), cudaEventDestroy(ev[2 * r]),
                       cudaEventDestroy(ev[2 * r + 1]);
    for (int b = 0; b < 2; b++) cudaFree(buf[r * 3 + b]);
  }
  for (int r = 0; r < R; r++) resccl_comm_destroy(comm[r]);
  free(comm), free(devs), free(buf), free(st), free(ev), free(times);
  return rc;
}
