/*
** cuda_abi.h — what the GPU runtime (src/runtime/, plain C) and the
** emitted kernels (cuda.cuh) share: the layout of a loaded plan on one GPU
** and of one call's kernel argument. The emitter puts this file before
** cuda.cuh, so a program stays one self-contained source for NVRTC (the
** runtime puts its own copy before a plan file's body: src/planfile.h).
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

#define RX_MAXRANKS 64 /* ranks of a plan the runtime runs */

/* Per block of a launch: who it is, read at its start one load away from
   the kernel argument, and its counts of the calls before, written at its
   end (so a replayed CUDA graph counts on). */
typedef struct __attribute__((aligned(16))) RxBlock { /* two 16-byte loads */
  int rank, tb, chan, tbi;    /* its rank, TB, channel (index among the TB's blocks), the TB's index on this GPU */
  unsigned base, call, taken; /* micro-batches of the calls before, those calls, units its TB's blocks took in them */
  int word;                   /* plans that pull: its word in every other rank's `finished` */
} RxBlock;

/* What a loaded plan keeps on one GPU, in its memory, from call to call.
   Every TB runs on nblk blocks (its channels), and cuts each tile into
   nslice slices, more than blocks: a slice has its own FIFO and flags, and
   the blocks take (entry, micro-batch, slice) units in turn, so a faster
   block takes more of them. A call cuts its tiles into RxArgs.nslice of
   them; without turns (a call too small for more units than blocks) that
   is nblk and block k runs slice k of every unit. The words a call's start
   and end pass between ranks are one load away (arrays here, not pointers). */
typedef struct RxRun {
  int nranks, chunks, nslots, nslice, nblk; /* nslice: the most a call may use */
  size_t slot_bytes;       /* of each slice's FIFO */
  RxFifo *fifo;            /* per connection and slice: [conn * nslice + slice] */
  unsigned *flag;          /* per flag and slice: micro-batches finished since the plan was loaded */
  unsigned *claim;         /* per TB of this GPU: units its blocks took since the plan was loaded */
  unsigned long long *done; /* per TB of this GPU and slice: call << 32 | the units of that slice done in it */
  volatile int *stop;      /* host memory every GPU sees: set when a wait gave up */
  unsigned *const *ceflag; /* per copy-engine flag, in its copy's source GPU's memory: micro-batches put in this
                              call (the copy stream posts it; the barrier before the next call zeroes it) */
  unsigned long long *trace; /* RESCCL_TRACE: per block RX_TRACE_WORDS words, the last call's events; or NULL */
  unsigned *started[RX_MAXRANKS];  /* per rank r, in r's memory: [p] the call rank p's kernel runs (p writes it;
                                      direct sends and pulls wait for it) */
  unsigned *finished[RX_MAXRANKS]; /* per rank r, in r's memory, for plans that pull: at first[p] + k, the last
                                      call in which block k of rank p ended its reads (r's kernel ends once every
                                      other rank's blocks have ended theirs) */
  int first[RX_MAXRANKS + 1];      /* per rank: where its blocks' words start in `finished` (then all blocks) */
} RxRun;

/* A block's trace: word 0 counts events (its SM above), then 3 words each:
   what (prim << 40 | slice << 24 | m << 4 | kind: 0 a flag wait, 1 a
   primitive, 2 a wait for the slice's previous unit), when it began and
   when it ended (%globaltimer, ns). */
#define RX_TRACE_EVENTS 2048
#define RX_TRACE_WORDS (1 + 3 * RX_TRACE_EVENTS)

/* One call, passed by value: buffers by rank (this GPU's ranks, or every
   rank when all were called together: then `direct` sends may write into
   peers' buffers) and sizes. Nothing in it counts calls (each block keeps
   its own count in its RxBlock), so a captured CUDA graph replays right. */
typedef struct RxArgs {
  const RxRun *run;
  RxBlock *block;            /* the launch's blocks (RxRun's plan on this GPU), [blockIdx.x] */
  char *buf[RX_MAXRANKS][3];
  size_t count, esize;
  int nranks, nmicro, dtype, op, direct;
  int nslice, turns;         /* slices of this call's tiles; 1: the blocks take them in turn */
  unsigned long long timeout_ns; /* a wait longer than this stops every TB; 0 = never */
  unsigned *posts;           /* [m * ncounters + k]: units of micro-batch m that counter k's writer finished in
                                this call (RX_CE_POST; a copy stream waits for nslice of them; the barrier before
                                the call zeroes them), on this GPU */
  int ncounters;
  /* The call's layout, worked out by the runtime (tile.h's RxGeom): chunks, elements per vector, whole
     units of a vector per chunk in a block, slabs that hold them */
  size_t units;
  int chunks, vec, kslab;
} RxArgs;

/* The barrier around a call's copy-engine copies (src/runtime/copyengine.c):
   every GPU of the call runs rx_ce_sync before its copies and after them.
   Each GPU counts the barriers it reached in a word of its own memory and
   passes when every other GPU's word has come as far: counted on the GPU,
   so a captured CUDA graph replays right, whichever capture each GPU's
   stream is in. */
#define RX_MAXDEVS 64
typedef struct RxSync {
  unsigned *word[RX_MAXDEVS]; /* per GPU of the plan, in its memory */
  unsigned *flags;            /* this GPU's copy-engine flags (RxRun.ceflag), zeroed before a call's copies */
  unsigned *posts;            /* this GPU's counters (RxArgs.posts), nposts words zeroed likewise */
  int me, ndev, nflags, nposts;
  volatile int *stop;         /* RxRun.stop */
  unsigned long long timeout_ns;
} RxSync;

#endif
