/*
** resccl.h — the GPU runtime's C API (libresccl), shaped like NCCL's.
**
** A communicator is one rank on one GPU. resccl_comm_init_all makes one per
** GPU of this process (a device may appear more than once: virtual ranks);
** resccl_comm_init_rank makes one rank of a group whose ranks are processes
** of one host, as ncclCommInitRank does (there plan loads are collective).
** A plan is a compiled collective (`resccl compile ALG.lua --plan FILE`):
** kernel source plus the connections it needs. Loading a plan on a
** communicator loads it for every communicator of the same init_all call,
** builds the kernel (NVRTC, cached on disk by source hash and GPU arch) and
** allocates its FIFOs once. A collective call then enqueues one kernel on
** the caller's stream, asynchronously, as NCCL does; it may be captured into
** a CUDA graph (the kernels count calls in device memory). Calls between resccl_group_start and resccl_group_end are
** launched together: one kernel per GPU holding all of that GPU's ranks, which
** is required when ranks share a GPU and lets one thread drive many GPUs.
**
** Errors: every call returns a resccl_result_t; resccl_get_error_string
** names it and resccl_get_last_error says what went wrong. RESCCL_DEBUG=INFO
** prints setup and launches to stderr. A collective that makes no progress
** for RESCCL_TIMEOUT seconds (default 60; 0 = never) stops its kernel and
** resccl_comm_get_async_error reports resccl_timeout. Tuning: RESCCL_NCHANNELS
** (blocks per TB), RESCCL_THREADS, RESCCL_SLOTS, RESCCL_SLOT_BYTES,
** RESCCL_TILE_BYTES (bytes of a chunk per micro-batch), RESCCL_NMICRO,
** RESCCL_CE_FROM (bytes from which a plan's copy-engine form runs),
** RESCCL_PULL_FROM and RESCCL_PULL_BELOW (the sizes its pulling form runs),
** RESCCL_NVRTC_OPTIONS (extra kernel compiler options), RESCCL_CACHE,
** RESCCL_DTYPES (f32,bf16,...: the dtypes plans loaded after it reduce; the
** others' reductions are refused, and kernels build in about half the time).
*/
#ifndef RESCCL_H
#define RESCCL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RESCCL_MAJOR 0
#define RESCCL_MINOR 1
#define RESCCL_PATCH 0
/* NCCL's encoding: major * 10000 + minor * 100 + patch */
#define RESCCL_VERSION_CODE (RESCCL_MAJOR * 10000 + RESCCL_MINOR * 100 + RESCCL_PATCH)

typedef struct resccl_comm *resccl_comm_t;
typedef struct CUstream_st *resccl_stream_t; /* the same type as cudaStream_t */

typedef enum {
  resccl_success = 0,
  resccl_unhandled_cuda_error = 1, /* a CUDA call failed */
  resccl_system_error = 2,         /* the OS: files, memory, the kernel compiler */
  resccl_internal_error = 3,
  resccl_invalid_argument = 4,     /* a null or misaligned buffer, an unknown dtype or op */
  resccl_invalid_usage = 5,        /* no plan for this collective, a plan for other ranks */
  resccl_timeout = 6,              /* no progress for RESCCL_TIMEOUT seconds */
  resccl_in_progress = 7,
  resccl_remote_error = 8,         /* another rank failed, left or aborted the communicator */
  resccl_num_results
} resccl_result_t;

/* NCCL's order, so ncclDataType_t values convert by cast. */
typedef enum {
  resccl_int8 = 0, resccl_uint8 = 1, resccl_int32 = 2, resccl_uint32 = 3, resccl_int64 = 4,
  resccl_uint64 = 5, resccl_float16 = 6, resccl_float32 = 7, resccl_float64 = 8, resccl_bfloat16 = 9,
  resccl_num_types
} resccl_datatype_t;

typedef enum { resccl_sum = 0, resccl_prod = 1, resccl_max = 2, resccl_min = 3, resccl_avg = 4, resccl_num_ops } resccl_red_op_t;

/* The library's RESCCL_VERSION_CODE, which may differ from the header's. */
resccl_result_t resccl_get_version(int *version);
const char *resccl_get_error_string(resccl_result_t result);
/* The message of this thread's last failed call ("" if none). */
const char *resccl_get_last_error(void);

resccl_result_t resccl_comm_init_all(resccl_comm_t *comms, int ndev, const int *devlist);

/* Communicators of one rank per process, as NCCL's: one process calls
   resccl_get_unique_id and passes the id to the others (MPI, a file, a
   store); each calls resccl_comm_init_rank with it, its rank and the count,
   on its current CUDA device. The id names a rendezvous served by a thread
   of the process that made it, which must live until every rank has
   destroyed its communicator; it listens on RESCCL_SOCKET_IFNAME's address
   (the loopback interface when unset). Every wait of the exchange is
   bounded by RESCCL_TIMEOUT. Ranks must share a host for now (CUDA IPC);
   RESCCL_NODE names a process's host (default: its host name). */
#define RESCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[RESCCL_UNIQUE_ID_BYTES];
} resccl_unique_id;
resccl_result_t resccl_get_unique_id(resccl_unique_id *id);
resccl_result_t resccl_comm_init_rank(resccl_comm_t *comm, int nranks, resccl_unique_id id, int rank);
/* The same over a channel the program already has (an MPI or NCCL communicator, a store): what
   the ranks trade at init, at every plan load and at destroy (a few KiB) goes through
   ex->allgather, which puts n bytes of every rank's `mine` into `all` (rank r's at r * n),
   called on every rank in the same order, and returns 0 on success. ex->close (may be NULL) is
   called with ex->ctx when the communicator is destroyed, or when this call fails. */
typedef struct {
  void *ctx;
  int (*allgather)(void *ctx, const void *mine, size_t n, void *all);
  void (*close)(void *ctx);
} resccl_exchange_t;
resccl_result_t resccl_comm_init_rank_exchange(resccl_comm_t *comm, int nranks, int rank, const resccl_exchange_t *ex);
/* A communicator of the ranks of comm's group that pass the same color, ordered by key (then by
   their rank in comm), as ncclCommSplit does; collective over comm's ranks. A rank passing
   RESCCL_SPLIT_NOCOLOR joins none (*newcomm is NULL). For communicators of resccl_comm_init_rank and
   resccl_comm_init_rank_exchange (the new one trades through a rendezvous its rank 0 serves). */
#define RESCCL_SPLIT_NOCOLOR (-1)
resccl_result_t resccl_comm_split(resccl_comm_t comm, int color, int key, resccl_comm_t *newcomm);
/* Stop comm's collectives at once, on every rank of its group (their kernels give up and
   resccl_comm_get_async_error reports resccl_remote_error), then destroy it. */
resccl_result_t resccl_comm_abort(resccl_comm_t comm);
resccl_result_t resccl_comm_destroy(resccl_comm_t comm);
resccl_result_t resccl_comm_count(resccl_comm_t comm, int *count);
resccl_result_t resccl_comm_user_rank(resccl_comm_t comm, int *rank);
resccl_result_t resccl_comm_cu_device(resccl_comm_t comm, int *device);
resccl_result_t resccl_comm_get_async_error(resccl_comm_t comm, resccl_result_t *async_error);

/* Load a plan file for every communicator of comm's group, for calls of any size; it replaces the
   plans loaded for its collective. */
resccl_result_t resccl_plan_load(resccl_comm_t comm, const char *path);
/* The same for calls of min_bytes to max_bytes bytes (inclusive; nccl-tests' size: an all-reduce's
   count, the others' count times ranks, in bytes), as MSCCL's minBytes and maxBytes: plans of one
   collective for different sizes coexist and a call runs the one whose sizes hold it. A new plan takes
   its sizes from the loaded ones (those it covers are unloaded, the others keep the sizes on their side
   of it); one that would cut a loaded plan in two is refused, and so is a load inside a group. */
resccl_result_t resccl_plan_load_range(resccl_comm_t comm, const char *path, size_t min_bytes, size_t max_bytes);
/* Thread blocks per GPU the loaded plans for `collective` ("allreduce", ...) launch per rank (the most). */
resccl_result_t resccl_plan_blocks(resccl_comm_t comm, const char *collective, int *blocks);
/* Thread blocks per rank a call of `bytes` bytes (nccl-tests' size) launches in a group of every rank,
   out of place where the plan has that form: 0 where the copy engine makes all its copies (plans
   compiled with copy-engine forms run them from RESCCL_CE_FROM bytes). */
resccl_result_t resccl_call_blocks(resccl_comm_t comm, const char *collective, size_t bytes, int *blocks);
/* Would a call of `collective` with these arguments (count as the collective's own) run here: a plan
   for its size, the datatype's kernels, a form for its placement (in place or not, from where the
   buffers lie)? resccl_success, or the code (and resccl_get_last_error's message) such a call gets
   whatever else is true of its buffers; the same on every rank. Nothing is queued or launched, and no
   group fails by it. */
resccl_result_t resccl_call_supported(const char *collective, const void *sendbuff, const void *recvbuff,
                                      size_t count, resccl_datatype_t datatype, resccl_red_op_t op,
                                      resccl_comm_t comm);

resccl_result_t resccl_group_start(void);
resccl_result_t resccl_group_end(void);

resccl_result_t resccl_all_reduce(const void *sendbuff, void *recvbuff, size_t count, resccl_datatype_t datatype,
                                  resccl_red_op_t op, resccl_comm_t comm, resccl_stream_t stream);
resccl_result_t resccl_all_gather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                  resccl_datatype_t datatype, resccl_comm_t comm, resccl_stream_t stream);
resccl_result_t resccl_reduce_scatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                      resccl_datatype_t datatype, resccl_red_op_t op, resccl_comm_t comm,
                                      resccl_stream_t stream);
/* count elements go to each peer: sendbuff and recvbuff hold nranks * count. */
resccl_result_t resccl_all_to_all(const void *sendbuff, void *recvbuff, size_t count, resccl_datatype_t datatype,
                                  resccl_comm_t comm, resccl_stream_t stream);

#ifdef __cplusplus
}
#endif

#endif
