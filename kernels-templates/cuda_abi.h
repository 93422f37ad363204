/*
** cuda_abi.h — what the GPU runtime (src/runtime/runtime.c, plain C) and the
** emitted kernels (cuda.cuh) share: the layout of a loaded plan on one GPU
** and of one call's kernel argument. The emitter puts this file before
** cuda.cuh, so a program stays one self-contained source for NVRTC.
*/
#ifndef RX_CUDA_ABI_H
#define RX_CUDA_ABI_H

#ifdef __CUDACC_RTC__ /* NVRTC has no C library headers */
typedef unsigned long size_t;
typedef unsigned long uintptr_t;
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <stddef.h>
#include <stdint.h>
#endif

enum { RX_INPUT, RX_OUTPUT, RX_SCRATCH };
enum { RX_I8, RX_U8, RX_I32, RX_U32, RX_I64, RX_U64, RX_F16, RX_F32, RX_F64, RX_BF16 }; /* as ncclDataType_t */
enum { RX_SUM, RX_PROD, RX_MAX, RX_MIN, RX_AVG }; /* as ncclRedOp_t */

/* Each side polls and reads its own memory only: the sender keeps its copy
   of tail (sent), the receiver its copy of head (taken). */
typedef struct {
  unsigned long long *tail;  /* receiver's memory, written by the sender */
  unsigned long long *head;  /* sender's memory, written by the receiver */
  unsigned long long *sent;  /* sender's memory: tail as the sender last wrote it */
  unsigned long long *taken; /* receiver's memory: head as the receiver last wrote it */
  char *slots;               /* receiver's memory: nslots * slot_bytes */
} RxFifo;

/* What a loaded plan keeps on one GPU, in its memory, from call to call. */
typedef struct RxRun {
  int nranks, chunks, nslots, nchan;
  size_t slot_bytes;
  RxFifo *fifo;            /* per connection and channel: [conn * nchan + chan] */
  unsigned *flag;          /* per flag and channel: micro-batches finished since the plan was loaded */
  const int *block_rank;   /* per block of the launch: its rank, TB and channel */
  const int *block_tb;
  const int *block_chan;
  unsigned *const *started; /* per rank r, in r's memory: [p] the call rank p's kernel runs (p writes it; direct sends) */
  unsigned *epoch;         /* per block of the launch, [2b]: micro-batches of the calls before, [2b+1]: those calls */
  volatile int *stop;      /* host memory every GPU sees: set when a wait gave up */
  unsigned long long *trace; /* RESCCL_TRACE: per block RX_TRACE_WORDS words, the last call's events; or NULL */
} RxRun;

/* A block's trace: word 0 counts events (its SM above), then 3 words each: what
   (prim << 32 | m << 8 | kind: 0 a flag wait, 1 a primitive), when it began
   and when it ended (%globaltimer, ns). */
#define RX_TRACE_EVENTS 2048
#define RX_TRACE_WORDS (1 + 3 * RX_TRACE_EVENTS)

#define RX_MAXRANKS 64 /* ranks of a plan the runtime runs */

/* One call, passed by value: buffers by rank (this GPU's ranks, or every
   rank when all were called together: then `direct` sends may write into
   peers' buffers) and sizes. Nothing in it counts calls (each block keeps
   its own count in RxRun.epoch), so a captured CUDA graph replays right. */
typedef struct RxArgs {
  const RxRun *run;
  char *buf[RX_MAXRANKS][3];
  size_t count, esize;
  int nranks, nmicro, dtype, op, direct;
  unsigned long long timeout_ns; /* a wait longer than this stops every TB; 0 = never */
} RxArgs;

#endif
