/*
** gpu_job.h — what the GPU executor (src/exec_gpu.c) hands the CUDA driver
** (gpu_driver.cu) compiled with an emitted program: sizes, connections, flag
** owners, TBs per rank, and the initial contents of every buffer. Plain C.
*/
#ifndef RX_GPU_JOB_H
#define RX_GPU_JOB_H

#include <stddef.h>

typedef struct {
  int nranks, ndev, chunks, nmicro, nslots, dtype, op, threads, iters, nchan;
  size_t count, esize, slot_bytes;
  size_t elems[3];           /* elements per rank of input, output, scratch */
  int nconn;
  const int *conn_src, *conn_dst;
  int nflags;
  const int *flag_rank;      /* the rank whose memory holds each flag */
  const int *ntb;            /* TBs per rank */
  char **init;               /* [rank*3 + buf]: initial contents, host memory */
  char **result;             /* [rank*3 + buf]: final contents, filled by the driver */
} RxGpuJob;

typedef struct {
  int ndev;                  /* GPUs used */
  double first_ms;           /* the first run, cold */
  double median_ms;          /* median of `iters` timed runs */
  char error[512];
} RxGpuOut;

#endif
