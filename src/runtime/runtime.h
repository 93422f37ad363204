/*
** runtime.h — libresccl's internals that need no CUDA header, shared by its
** files and by the tools that link the plan-file reader alone (tests/,
** tools/fuzz/): the knobs a plan is loaded with (from the environment for
** API users; set directly by the executor behind `resccl run --gpu`,
** job.c), kernel builds, plan-file sections and the error helpers. The
** objects on the GPUs are objects.h's.
*/
#ifndef RESCCL_RUNTIME_H
#define RESCCL_RUNTIME_H

#include "resccl.h"

/* Everything here stays inside libresccl (hidden) but the two entry points
   marked RX_EXPORT, which its tests call: the library exports resccl_*
   alone (CTest exports). */
#define RX_EXPORT __attribute__((visibility("default")))
#pragma GCC visibility push(hidden)

/* Threads per block by default. On 2xH200, 1024 lost 2-13% on all-reduce and
   all-gather; reduce-scatter gained with it until the tile arithmetic moved to
   one thread, and now loses up to 12% below 32 MiB and is even above
   (docs/journal/gpu-2026-11-30.md). */
#define RT_THREADS 512

typedef struct {
  int nchan;          /* blocks per TB; 0: about 32 blocks on the busiest GPU */
  int slices;         /* slices of a tile per block, taken by the TB's blocks in turn; 0: one, fixed */
  int threads;        /* per block */
  int nslots;         /* FIFO slots per connection and slice */
  size_t slot_bytes;  /* bytes per slot */
  size_t tile_bytes;  /* bytes of one chunk a micro-batch moves (sets nmicro per call) */
  int nmicro;         /* micro-batches per call; 0: from tile_bytes */
  int direct;         /* 1: sends marked direct write into the peer's buffer when they can */
  double timeout_s;   /* a wait longer than this stops the call; 0 = never */
  size_t ce_from;     /* calls of this many bytes or more run a placement's copy-engine form, where the plan has one */
  size_t ce_from_blockless; /* the same for a copy-engine form with no block */
  size_t pull_from, pull_below; /* calls from pull_from bytes and below pull_below run a placement's pulling form,
                                   where the plan has one (and direct) and its copy-engine form does not run them */
  unsigned dtypes;    /* the dtypes the kernels can reduce, a bit per resccl_datatype_t; 0: every one */
  const char *trace;  /* RESCCL_TRACE: the file for the blocks' events of a plan's last call, or NULL */
} RtConf;

/* RESCCL_NCHANNELS, RESCCL_SLICES, RESCCL_THREADS, RESCCL_SLOTS, RESCCL_SLOT_BYTES, RESCCL_TILE_BYTES, RESCCL_NMICRO,
   RESCCL_DIRECT, RESCCL_TIMEOUT, RESCCL_CE_FROM, RESCCL_PULL_FROM, RESCCL_PULL_BELOW, RESCCL_TRACE and RESCCL_DTYPES
   into c (src/setting.c reads them; docs/runtime.md lists them), the defaults where unset or empty; a bad one
   fails with resccl_invalid_argument and `NAME=value: what is wrong`. */
RX_EXPORT resccl_result_t resccl_x_conf_env(RtConf *c);
/* Load a plan for calls of lo to hi bytes (resccl_plan_load_range). */
resccl_result_t rt_plan_load(resccl_comm_t comm, const char *path, const RtConf *conf, size_t lo, size_t hi);
/* The cubin of a kernel source for sm_<arch>, blocks of `threads`, reducing `dtypes` (RtConf.dtypes) (NVRTC,
   cached on disk); no GPU needed (kernels.c). */
resccl_result_t rt_cubin(const char *src, int arch, int threads, unsigned dtypes, char **cubin, size_t *n);
/* One kernel to build: src for sm_<arch>, blocks of `threads`, reducing `dtypes`; then its cubin (malloc'd), or
   rc and err. */
typedef struct {
  const char *src;
  int arch, threads;
  unsigned dtypes;
  char *cubin;
  size_t n;
  resccl_result_t rc;
  char err[1024];
} RtBuild;
/* Build them all at once (rt_cubin each); the first failure. */
resccl_result_t rt_build_all(RtBuild *b, int n);
/* Build every placement of a plan file for sm_<arch> and `threads` (0: RT_THREADS): the check CI
   can run without a GPU. */
RX_EXPORT resccl_result_t resccl_x_plan_build(const char *path, int arch, int threads);
/* ------------------------------------------------------------ planfile.c */

enum { CE_INTS = 9 };        /* numbers of a copy-engine copy: src rbuf ridx dst wbuf widx cnt flag after */
enum { PF_MAXFILE = 1 << 30 }; /* bytes of a plan file */

/* One section of a plan file (src/planfile.h), checked. */
typedef struct {
  char name[64], coll[32];
  int line;           /* where it starts in its file */
  int inplace, nranks, chunks, bufchunks[3], fifo_slots, maxcnt, even, nconn, nflags;
  int *ntb, *csrc, *cdst, *flag_rank; /* TBs per rank; per connection its ranks; per flag its rank */
  int blockless;      /* no rank has a TB: the copy engine makes every copy */
  int nce, *ce;       /* copy-engine copies, CE_INTS numbers each */
  int nceflags;
  int ncounters;      /* counters copies wait for (RxArgs.posts), per micro-batch */
  int pulls;          /* receives that read the sender's buffer (RX_PULL, RX_RRC_PULL) */
  char *src;          /* the kernel: libresccl's templates and the body's statements as parsed */
} PfSection;
/* The sections of a plan file's n bytes of text, each checked against its
   kernel; 0 with the first fault in err ("path:line: field: what"). */
int pf_parse(const char *path, const char *text, size_t n, PfSection **out, int *nout, char *err, size_t errn);
/* Read and parse the file at `path` (rt_fail's codes; plan.c, so libresccl's alone, not the tools'); *hash (when
   not NULL): its bytes' FNV-1a hash (fnv.h), which ranks in several processes compare. */
resccl_result_t pf_read(const char *path, PfSection **out, int *nout, unsigned long long *hash);
/* What the ranks of several processes agree on before a plan loads (plan.c): the file, the sizes it runs,
   and the settings that shape its FIFOs and calls, each read by its process from its own environment. */
typedef struct {
  unsigned long long hash, lo, hi, slot_bytes, tile_bytes;
  int nchan, slices, nslots, nmicro, direct;
  unsigned dtypes;
  char file[64]; /* the path's last 63 bytes */
} PfAgree;
/* 1 when every rank's all[0..n) agrees with rank 0's, else 0 with err naming the first rank that does not and
   how. */
int pf_agree(const PfAgree *all, int n, char *err, size_t errn);
void pf_free(PfSection *s);
void pf_free_all(PfSection *s, int n);
/* Text of an embedded file of kernels-templates/ (cmake/embed.cmake), NULL when unknown. */
const char *tpl_text(const char *name);

/* Record the message of a failure and return its code. */
resccl_result_t rt_fail(resccl_result_t rc, const char *fmt, ...);
/* RESCCL_DEBUG: 0 off, 1 INFO, 2 TRACE (every launch too). */
int rt_debug_level(void);

#define INFO(...)                                  \
  do {                                             \
    if (rt_debug_level()) {                        \
      fprintf(stderr, "resccl INFO " __VA_ARGS__); \
      fputc('\n', stderr);                         \
    }                                              \
  } while (0)

/* Return the failure of a call that fails. */
#define TRY(call)                          \
  do {                                     \
    resccl_result_t r_ = (call);           \
    if (r_ != resccl_success) return r_;   \
  } while (0)

/* 1: rt_fail records the message but does not print it (error.c). */
void rt_quiet(int on);
/* Element sizes and short names per resccl_datatype_t, as the compiler has them (dtypes.h; config.c). */
extern const size_t rt_dtype_size[resccl_num_types];
extern const char *const rt_dtype_name[resccl_num_types];
/* Every setting of c in its variable's range (config.c; resccl_x_conf_env's are already). */
resccl_result_t conf_check(const RtConf *c);
#pragma GCC visibility pop

#endif
