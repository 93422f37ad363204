/*
** job.h — what the GPU executor behind `resccl run --gpu` (src/exec_gpu.c)
** hands libresccl's job runner (src/runtime/job.c): the plan file, the call,
** the initial contents of every buffer and where to put the results. Plain C.
*/
#ifndef RESCCL_JOB_H
#define RESCCL_JOB_H

#include <stddef.h>

typedef struct {
  const char *plan_path;     /* a plan file with one placement (src/artifact.c) */
  const char *collective;    /* "allreduce", ... */
  int inplace;
  int nranks, ndev;          /* rank r runs on GPU r % ndev; ndev 0 = every GPU */
  int dtype, op;             /* resccl_datatype_t, resccl_red_op_t */
  size_t count, esize;
  size_t elems[3];           /* elements per rank of input, output, scratch */
  int nmicro, nslots, threads, iters, nchan, direct;
  size_t slot_bytes;
  double timeout_s;
  char **init;               /* [rank*3 + buf]: initial contents, host memory */
  char **result;             /* [rank*3 + buf]: final contents, filled by the runner */
} RxGpuJob;

typedef struct {
  int ndev;                  /* GPUs used */
  double first_ms;           /* the checked run, cold */
  double median_ms;          /* median of `iters` timed runs */
  char error[1024];
} RxGpuOut;

#endif
