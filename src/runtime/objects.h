/*
** objects.h — libresccl's objects on the GPUs, shared by its files: a group
** of communicators and the plans it loaded, a plan's placements (variants)
** with what each holds per GPU, a queued call, the CUDA driver's entry
** points, and the functions that pass them between the files.
**
** A group is the set of communicators one resccl_comm_init_all made, or the
** ranks of one resccl_comm_init_rank's job, of which this process holds one
** (comm.c); it owns the loaded plans. Loading a plan (plan.c) reads the plan
** file, builds each placement's kernel for every GPU's arch, all at once
** (kernels.c: NVRTC, cubins cached on disk), and allocates what lives as
** long as the plan (variant.c): per rank one segment of what peers reach
** (its FIFO ends, its started and finished words; shared across processes
** by transport_ipc.c), per GPU the flags, the block tables and each block's
** count of the calls it ran. A call (call.c) is checked, resolved to its
** plan and form, and queued inside resccl_group_start/end; its launch
** (launch.c) only fills the kernel argument (RxArgs,
** kernels-templates/cuda_abi.h) and launches, one kernel per GPU for the
** ranks sharing it, with copy-engine copies where the form has them
** (copyengine.c). Calls are asynchronous, and a CUDA graph that captured one
** replays it right (the kernels count the calls, not the host).
*/
#ifndef RESCCL_OBJECTS_H
#define RESCCL_OBJECTS_H

#include <cuda.h>
#include <cuda_runtime.h>

#include "group.h"
#include "runtime.h"
#include "../../kernels-templates/cuda_abi.h"

#pragma GCC visibility push(hidden) /* libresccl's own (runtime.h) */

#define CU(call)                                                                                    \
  do {                                                                                              \
    cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess)                                                                          \
      return rt_fail(resccl_unhandled_cuda_error, "%s: %s (%s:%d)", #call, cudaGetErrorString(e_), \
                     __FILE__, __LINE__);                                                           \
  } while (0)

#define CUDRV(call)                                                                        \
  do {                                                                                     \
    CUresult e_ = (call);                                                                  \
    if (e_ != CUDA_SUCCESS) {                                                              \
      const char *s_ = "?";                                                                \
      drv.error_string(e_, &s_);                                                           \
      return rt_fail(resccl_unhandled_cuda_error, "%s: %s (%s:%d)", #call, s_, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

/* ------------------------------------------------------------ driver.c */

/* The driver API's entry points, filled by drv_open. */
typedef struct {
  CUresult (*load)(CUmodule *, const void *);
  CUresult (*unload)(CUmodule);
  CUresult (*function)(CUfunction *, CUmodule, const char *);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                     void **, void **);
  CUresult (*occupancy)(int *, CUfunction, int, size_t);
  CUresult (*error_string)(CUresult, const char **);
  CUresult (*write_value)(CUstream, CUdeviceptr, cuuint32_t, unsigned); /* cuStreamWriteValue32 */
  CUresult (*wait_value)(CUstream, CUdeviceptr, cuuint32_t, unsigned);  /* cuStreamWaitValue32 */
  CUresult (*copy)(CUdeviceptr, CUdeviceptr, size_t, CUstream); /* cuMemcpyAsync: 0.7 us less to queue than cudart's */
} RtDriver;
extern RtDriver drv;
/* Fill drv once; fails where the driver lacks an entry point. */
resccl_result_t drv_open(void);

/* ------------------------------------------------------------ the objects */

enum { MAXDEV = 64 };

/* One placement of a plan, as its plan file's section describes it, and what it holds per GPU. */
typedef struct {
  PfSection pf;
  int nslots;         /* FIFO slots: RESCCL_SLOTS, or more where the plan needs them */
  int nblk, nslice;   /* blocks per TB, slices of a tile */
  size_t post_words;  /* words of each GPU's counters: micro-batches they hold x ncounters */
  unsigned **ceflag;  /* per copy-engine flag: where it is (in its copy's source GPU) */
  volatile int *stop; /* the group's stop flag as the GPUs see it */
  struct {
    CUmodule mod;
    CUfunction fn;
    RxRun *run;       /* device copy */
    RxRun *hrun;      /* its host copy, from variant_setup until variant_connect */
    int nblocks;
    cudaStream_t *ce; /* per GPU: the stream of this GPU's copies to it, NULL when none */
    cudaEvent_t start, *ce_done; /* the copies' start on this GPU's stream; a copy stream's end */
    CUfunction sync;  /* rx_ce_sync, and its count of barriers in this GPU's memory */
    unsigned *word;
    unsigned *flags;  /* the copy-engine flags of copies from this GPU */
    int nflags;
    unsigned *posts;  /* the counters of this GPU's kernel, grown with the micro-batches of a call */
    unsigned long long *trace; /* RESCCL_TRACE: the blocks' events of the last call */
    RxBlock *block;   /* the launch's blocks, in its memory (RxArgs.block) */
    RxBlock *tab;     /* host copy of their tables, for the trace */
    char *cubin;      /* its kernel, from build_kernels until loaded */
  } dev[MAXDEV];
  void **allocs;      /* every device allocation, for unloading */
  int nallocs;
  /* Per rank, one allocation in its GPU's memory holds every word peers
     reach by address: its started and finished words, its ends of the
     FIFOs (variant_layout). Shared as a whole (transport.h). */
  size_t *seg_bytes;
  char **seg;         /* as this process sees it: its own ranks' allocations, peers' opened */
  char *opened;       /* per rank: seg[r] is a peer's, opened (closed at unload) */
  RxFifo *fifo;       /* per connection and slice: offsets into the segments, until variant_connect */
  size_t fin_at;      /* where `finished` lies in each segment (`started` at 0) */
  char **scratch;     /* per rank, grown on demand */
  size_t *scratch_bytes;
} Variant;

typedef struct RtPlan {
  char name[64], coll[32];
  size_t lo, hi;      /* the calls it runs: [lo, hi] bytes (nccl-tests' size) */
  Variant *v[2][3];   /* [inplace][form], where the file has it: form 1 makes copies on the copy engine and runs
                         calls from RtConf.ce_from bytes, form 2 pulls and runs those from RtConf.pull_from below
                         RtConf.pull_below that form 1 does not; form 0 the others */
  RtConf conf;
  struct RtPlan *next;
} RtPlan;

typedef struct {
  int n, ndevs;
  struct resccl_comm *comms; /* every rank: this process's (d >= 0), and other processes' (d = -1) */
  int dev[MAXDEV];    /* this process's distinct CUDA devices, in order of first use */
  RtPlan *plans;
  int *stop;          /* mapped host memory every GPU of the group sees: STOP_* */
  int nlocal, live;   /* this process's communicators, and those not yet destroyed */
  GqOpens open;       /* collectives some of whose ranks (of this process) have launched */
  struct Exchange *x; /* rounds with the other processes' ranks; NULL when every rank is this process's */
  int shared;         /* the group spans processes: stop is a shared page, plans' memory is exported */
} Group;

/* What the group's stop word says: a kernel's wait ran past RESCCL_TIMEOUT,
   or a rank aborted the communicator (or left it with calls unfinished). */
enum { STOP_TIMEOUT = 1, STOP_ABORT = 2 };

struct resccl_comm {
  Group *g;
  int rank, cudev, d;       /* d: index into g->dev */
  unsigned long long calls; /* collectives launched (launch() matches ranks' calls by it) */
};

/* One queued collective call. */
typedef struct Call {
  resccl_comm_t comm;
  Variant *v;
  RtPlan *plan;
  char *buf[3];
  size_t count, esize;
  int nmicro, dtype, op;
  cudaStream_t stream;
  int nslice, turns;
} Call;

/* ------------------------------------------------------------ variant.c */

/* Kernels, flags, block tables and this process's ranks' segments of one placement on its GPUs. */
resccl_result_t variant_setup(Group *g, Variant *v, const RtConf *cf);
/* Once every rank's segment is in v->seg (ipc_share): the FIFO tables and run words on each GPU. */
resccl_result_t variant_connect(Group *g, Variant *v);
/* Free v and what it holds, on the host and on g's GPUs. */
void variant_free(Group *g, Variant *v);
/* Device memory at *(void **)p, freed at unload (variant.c says when to pass `zero`). */
resccl_result_t dev_alloc(Variant *v, void *p, size_t bytes, cudaStream_t *zero);
/* RESCCL_TRACE: append v's blocks' events of its last call to the file at path (none: nothing). */
void trace_write(Group *g, Variant *v, const char *path);

/* ------------------------------------------------------------ plan.c */

/* Unload plan p of group g: its trace written, its variants freed. */
void plan_unload(Group *g, RtPlan *p);

/* ------------------------------------------------------------ call.c */

/* 1 while the calling thread's group is open (resccl_group_start). */
int group_is_open(void);

/* ------------------------------------------------------------ launch.c */

/* Launch calls[0..n) (a group's, or one call): one kernel per (variant, GPU), holding every rank of that GPU. */
resccl_result_t launch(Call *calls, int n);

/* ------------------------------------------------------------ copyengine.c */

/* Whether the collective whose first call is calls[k] orders its copies by events alone. */
int ce_by_events(const Call *calls, int n, const int *first, int k);
/* The copy-engine barrier on the stream of c's launch, before its copies (before 1) or after them. */
resccl_result_t ce_sync(const Call *c, int before);
/* The copy-engine copies of the collective whose first call is calls[i]. */
resccl_result_t ce_copies(Call *calls, int n, const int *first, int i, int events);

#pragma GCC visibility pop

#endif
