/*
** nccl.c — libresccl-nccl.so: a program that uses NCCL runs its
** collectives on resccl plans, unchanged. Preloaded (LD_PRELOAD), it
** interposes on ncclCommInitAll, which also makes resccl communicators for
** the same GPUs and loads the plans RESCCL_NCCL_PLANS names (as do
** ncclCommInitRank and ncclCommInitRankConfig, for a group's complete sets
** of ranks, and for ranks made one per process or thread, which trade what
** resccl's communicator needs through NCCL's own: exchange below); on
** ncclAllReduce, ncclAllGather and ncclReduceScatter, which run on resccl
** where it has what the call needs (on_resccl), else on NCCL; and on the
** group, destroy and last-error calls that must see both. The communicators the program holds are NCCL's own, so
** every other NCCL call reaches NCCL (libnccl.so.2) untouched; resccl's
** stand beside them in a table.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nccl.h>

#include "resccl.h"
#include "../fnv.h"

#define EXPORT __attribute__((visibility("default")))

/* NCCL's functions that the ones below stand in front of. */
static struct {
  ncclResult_t (*CommInitAll)(ncclComm_t *, int, const int *);
  ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
  ncclResult_t (*CommCuDevice)(const ncclComm_t, int *);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  const char *(*GetLastError)(ncclComm_t);
} nccl;
static const char *nccl_missing; /* why NCCL could not be loaded, once tried */
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;

static void nccl_load(void) {
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    nccl_missing = "libnccl.so.2 not found";
    return;
  }
  static const struct {
    size_t off;
    const char *name;
    int optional; /* newer than the NCCL a program may bring */
  } syms[] = {
#define SYM(f, opt) {offsetof(__typeof__(nccl), f), "nccl" #f, opt}
      SYM(CommInitAll, 0),   SYM(CommInitRank, 0),  SYM(CommInitRankConfig, 1), SYM(CommCuDevice, 0),
      SYM(CommDestroy, 0),   SYM(CommAbort, 0),     SYM(CommGetAsyncError, 0),  SYM(AllReduce, 0),
      SYM(AllGather, 0),     SYM(ReduceScatter, 0), SYM(GroupStart, 0),         SYM(GroupEnd, 0),
      SYM(GetLastError, 1),
#undef SYM
  };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    void *f = dlsym(h, syms[i].name);
    if (!f && !syms[i].optional) {
      nccl_missing = "libnccl.so.2 lacks a function";
      return;
    }
    memcpy((char *)&nccl + syms[i].off, &f, sizeof f);
  }
}

/* NULL when NCCL is there to call. */
static const char *nccl_ready(void) {
  pthread_once(&nccl_once, nccl_load);
  return nccl_missing;
}

static int info(void) {
  const char *d = getenv("RESCCL_DEBUG");
  return d && (!strcmp(d, "INFO") || !strcmp(d, "TRACE"));
}

/* ------------------------------------------------------------ the table */

enum { AR, AG, RS, NCOLL };
static const char *const coll_names[NCOLL] = {"allreduce", "allgather", "reducescatter"};

/* An NCCL communicator with a resccl one beside it. */
typedef struct {
  ncclComm_t nccl;
  resccl_comm_t ours;
  int rank, planned[NCOLL]; /* a plan is loaded for the collective */
  int apart;                /* ours trades through nccl: it goes before NCCL's */
  long on_resccl, on_nccl;  /* calls given to each, reported at destroy */
} Pair;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Pair **pairs; /* each its own allocation, so that it stays put */
static int npairs, cappairs;
static __thread int failed_here; /* this thread's last failure was resccl's */

/* The pair of comm, or NULL; it lives until comm is destroyed, which NCCL
   forbids while calls on comm are made. */
static Pair *find(ncclComm_t comm) {
  Pair *p = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < npairs && !p; i++)
    if (pairs[i]->nccl == comm) p = pairs[i];
  pthread_mutex_unlock(&lock);
  return p;
}

/* Remove comm's pair from the table; NULL if it has none. */
static Pair *take(ncclComm_t comm) {
  Pair *p = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < npairs && !p; i++)
    if (pairs[i]->nccl == comm) p = pairs[i], pairs[i] = pairs[--npairs];
  pthread_mutex_unlock(&lock);
  return p;
}

/* Add a pair; 0 when out of memory. */
static int add(Pair *p) {
  pthread_mutex_lock(&lock);
  if (npairs == cappairs) {
    int cap = cappairs ? 2 * cappairs : 8;
    Pair **grown = realloc(pairs, (size_t)cap * sizeof *grown);
    if (grown) pairs = grown, cappairs = cap;
  }
  int ok = npairs < cappairs;
  if (ok) pairs[npairs++] = p;
  pthread_mutex_unlock(&lock);
  return ok;
}

/* resccl's code as NCCL's: they agree up to invalid usage; a timeout is a
   peer that made no progress, a remote error one that failed or aborted. */
static ncclResult_t code(resccl_result_t rc) {
  return rc == resccl_timeout || rc == resccl_remote_error ? ncclRemoteError
         : rc == resccl_in_progress                        ? ncclInProgress
                                                           : (ncclResult_t)rc;
}

static ncclResult_t from_resccl(resccl_result_t rc) {
  failed_here = rc != resccl_success;
  return code(rc);
}

/* ------------------------------------------------------------ plans */

extern char **environ;

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Run `resccl compile ALG ranks=N --plan OUT` (bin), its output dropped and
   LD_PRELOAD left out of its environment; 0 when it succeeded. */
static int compile(const char *bin, const char *alg, int n, const char *out) {
  char ranks[32];
  snprintf(ranks, sizeof ranks, "ranks=%d", n);
  char *argv[] = {(char *)bin, "compile", (char *)alg, ranks, "--plan", (char *)out, NULL};
  int ne = 0;
  while (environ[ne]) ne++;
  char **envp = calloc((size_t)ne + 1, sizeof *envp);
  if (!envp) return -1;
  for (int i = 0, k = 0; i < ne; i++)
    if (strncmp(environ[i], "LD_PRELOAD=", 11)) envp[k++] = environ[i];
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int st = -1, rc = posix_spawn(&pid, bin, &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  free(envp);
  if (rc == 0 && waitpid(pid, &st, 0) != pid) st = -1;
  return rc == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* resccl's own plans for n ranks, where RESCCL_NCCL_PLANS is unset: the
   ring all-reduce, all-gather and reduce-scatter, compiled by the resccl
   CLI beside this library (RESCCL_BIN names another) into the plan cache
   ($RESCCL_CACHE or ~/.cache/resccl, under plans/), once per CLI and
   algorithm; a list as RESCCL_NCCL_PLANS holds them, or NULL (said on
   stderr). */
static char *default_plans(int n) {
  static const char *const algs[] = {"allreduce_ring", "allgather_ring", "reducescatter_ring"};
  Dl_info self;
  char here[4096], bin[4200], algdir[4200], cache[4096];
  if (!dladdr((void *)default_plans, &self) || !self.dli_fname) return NULL;
  snprintf(here, sizeof here, "%s", self.dli_fname);
  char *slash = strrchr(here, '/');
  if (slash) *slash = '\0';
  else snprintf(here, sizeof here, ".");
  /* installed (<prefix>/lib beside <prefix>/bin and <prefix>/share), else the build tree */
  const char *env = getenv("RESCCL_BIN");
  snprintf(bin, sizeof bin, "%s/../bin/resccl", here);
  if (env && *env) snprintf(bin, sizeof bin, "%s", env);
  else if (access(bin, X_OK)) snprintf(bin, sizeof bin, "%s/resccl", here);
  snprintf(algdir, sizeof algdir, "%s/../%s", here, RESCCL_ALGORITHMS_INSTALL);
  if (!is_dir(algdir)) snprintf(algdir, sizeof algdir, "%s", RESCCL_ALGORITHMS_BUILD);
  const char *dir = getenv("RESCCL_CACHE"), *home = getenv("HOME");
  int len = dir && *dir ? snprintf(cache, sizeof cache, "%s/plans", dir)
            : home && *home ? snprintf(cache, sizeof cache, "%s/.cache/resccl/plans", home) : -1;
  struct stat sb, sa;
  if (len < 0 || (size_t)len >= sizeof cache || stat(bin, &sb)) {
    fprintf(stderr, "resccl-nccl: no plan cache or no resccl CLI (%s): NCCL runs every call\n", bin);
    return NULL;
  }
  for (char *p = cache + 1; *p; p++)
    if (*p == '/') *p = '\0', mkdir(cache, 0755), *p = '/';
  mkdir(cache, 0755);
  size_t cap = 3 * (sizeof cache + 96);
  char *list = calloc(1, cap);
  for (int i = 0; list && i < 3; i++) {
    char alg[4400], path[4200], tmp[4300];
    snprintf(alg, sizeof alg, "%s/%s.lua", algdir, algs[i]);
    if (stat(alg, &sa)) {
      fprintf(stderr, "resccl-nccl: %s: not found: NCCL runs every call\n", alg);
      return free(list), NULL;
    }
    /* a new CLI or algorithm file makes a new plan */
    unsigned long long key = (unsigned long long)sb.st_size * 1000003u ^ (unsigned long long)sb.st_mtim.tv_sec * 31 ^
                             (unsigned long long)sb.st_mtim.tv_nsec ^ (unsigned long long)sa.st_size << 32 ^
                             (unsigned long long)sa.st_mtim.tv_sec * 7;
    snprintf(path, sizeof path, "%s/%s-r%d-%016llx.plan", cache, algs[i], n, key);
    /* a name of its own (processes of other pid namespaces may share the cache), renamed whole into place */
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = access(path, R_OK) ? mkstemp(tmp) : -2;
    if (fd != -2 && (fd < 0 || close(fd) || compile(bin, alg, n, tmp) || rename(tmp, path))) {
      fprintf(stderr, "resccl-nccl: %s compile %s ranks=%d failed: NCCL runs every call\n", bin, alg, n);
      if (fd >= 0) unlink(tmp);
      return free(list), NULL;
    }
    if (i) strcat(list, ":");
    strcat(list, path);
  }
  return list;
}

/* The plans for n ranks: RESCCL_NCCL_PLANS (`none`: none at all), else
   resccl's own; malloc'd, or NULL. */
static char *plans_for(int n) {
  const char *env = getenv("RESCCL_NCCL_PLANS");
  if (env && !strcmp(env, "none")) return NULL;
  if (env && *env) return strdup(env);
  return n >= 2 ? default_plans(n) : NULL;
}

/* ------------------------------------------------------------ exchange */

/* The CUDA driver, for the device buffers NCCL's all-gather needs (the
   shim links no CUDA runtime of its own), loaded on first use. */
static struct {
  int (*ctx_get)(void **), (*ctx_push)(void *), (*ctx_pop)(void **), (*primary)(void **, int);
  int (*alloc)(unsigned long long *, size_t), (*free)(unsigned long long);
  int (*htod)(unsigned long long, const void *, size_t), (*dtoh)(void *, unsigned long long, size_t);
  int (*stream_new)(void **, unsigned), (*stream_sync)(void *), (*stream_free)(void *);
} cu;
static int cu_ok;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  static const char *const names[] = {"cuCtxGetCurrent", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2",
                                      "cuDevicePrimaryCtxRetain", "cuMemAlloc_v2", "cuMemFree_v2",
                                      "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuStreamCreate",
                                      "cuStreamSynchronize", "cuStreamDestroy_v2"};
  cu_ok = h != NULL;
  for (size_t i = 0; cu_ok && i < sizeof names / sizeof *names; i++) {
    void *f = dlsym(h, names[i]);
    cu_ok = f != NULL;
    memcpy((char *)&cu + i * sizeof f, &f, sizeof f);
  }
}

/* One rank's exchange over its NCCL communicator: rounds are all-gathers of
   bytes on a stream of its own, in the context the communicator was made in. */
typedef struct {
  ncclComm_t comm;
  int nranks;
  void *ctx, *stream;
  unsigned long long buf; /* (nranks + 1) * cap bytes: every rank's, then this one's */
  size_t cap;             /* the most bytes a round may carry */
} Xnccl;

static int xnccl_allgather(void *arg, const void *mine, size_t n, void *all) {
  Xnccl *x = arg;
  if (!n) return 0;
  if (n > x->cap) return -1; /* on every rank alike: rounds have one size everywhere */
  void *popped;
  if (cu.ctx_push(x->ctx)) return -1;
  unsigned long long at = x->buf + (size_t)x->nranks * n;
  int bad = cu.htod(at, mine, n) ||
        nccl.AllGather((void *)at, (void *)x->buf, n, ncclUint8, x->comm, (cudaStream_t)x->stream) != ncclSuccess ||
        cu.stream_sync(x->stream) || cu.dtoh(all, x->buf, (size_t)x->nranks * n);
  cu.ctx_pop(&popped);
  return bad ? -1 : 0;
}

static void xnccl_close(void *arg) {
  Xnccl *x = arg;
  void *popped;
  if (!cu.ctx_push(x->ctx)) {
    if (x->buf) cu.free(x->buf);
    cu.stream_free(x->stream);
    cu.ctx_pop(&popped);
  }
  free(x);
}

/* A resccl communicator beside rank `rank` of NCCL's comm, on its GPU, whose ranks trade through comm;
   NULL where that fails (said on stderr). */
static resccl_comm_t join_through(ncclComm_t comm, int nranks, int rank) {
  pthread_once(&cu_once, cu_load);
  Xnccl *x = cu_ok ? calloc(1, sizeof *x) : NULL;
  int dev = 0;
  if (!x || nccl.CommCuDevice(comm, &dev) != ncclSuccess || cu.primary(&x->ctx, dev) || cu.ctx_push(x->ctx)) {
    fprintf(stderr, "resccl-nccl: rank %d: no CUDA context for the exchange: NCCL runs every call\n", rank);
    return free(x), NULL;
  }
  /* The communicator's GPU is current from here, whatever the thread's was.
     Room for the largest round (under 1 KiB a rank) is taken now, so that
     no round fails here before NCCL's all-gather, which every rank must join. */
  void *popped;
  x->comm = comm, x->nranks = nranks, x->cap = 4096;
  if (cu.stream_new(&x->stream, 1 /* non-blocking */) || cu.alloc(&x->buf, (size_t)(nranks + 1) * x->cap)) {
    fprintf(stderr, "resccl-nccl: rank %d: no stream or device memory for the exchange: NCCL runs every call\n", rank);
    if (x->stream) cu.stream_free(x->stream);
    cu.ctx_pop(&popped);
    return free(x), NULL;
  }
  resccl_exchange_t ex = {x, xnccl_allgather, xnccl_close};
  resccl_comm_t ours = NULL;
  if (resccl_comm_init_rank_exchange(&ours, nranks, rank, &ex) != resccl_success)
    fprintf(stderr, "resccl-nccl: rank %d: NCCL runs every call: %s\n", rank, resccl_get_last_error());
  cu.ctx_pop(&popped);
  return ours;
}

/* ------------------------------------------------------------ init, destroy */

/* Load every plan of RESCCL_NCCL_PLANS (paths separated by ':') on ours;
   plans for another rank count are skipped. Returns how many loaded. */
static int load_plans(resccl_comm_t *ours, const char *list) {
  int loaded = 0;
  char *copy = strdup(list), *save = NULL;
  for (char *path = copy ? strtok_r(copy, ":", &save) : NULL; path; path = strtok_r(NULL, ":", &save)) {
    resccl_result_t rc = resccl_plan_load(ours[0], path);
    if (rc == resccl_success) loaded++;
    else fprintf(stderr, "resccl-nccl: %s not used: %s\n", path, resccl_get_last_error());
  }
  free(copy);
  return loaded;
}

/* Stand ours beside nccl in the table; 0 when out of memory. */
static int pair_new(ncclComm_t theirs, resccl_comm_t ours, int rank, int apart) {
  Pair *p = malloc(sizeof *p);
  if (!p) return 0;
  *p = (Pair){.nccl = theirs, .ours = ours, .rank = rank, .apart = apart};
  for (int c = 0; c < NCOLL; c++) {
    int blocks;
    p->planned[c] = resccl_plan_blocks(ours, coll_names[c], &blocks) == resccl_success;
  }
  if (!add(p)) return free(p), 0;
  return 1;
}

/* Make resccl communicators beside NCCL's comms[0..n-1], rank r on GPU
   devs[r], and load the plans on them; where that fails, NCCL runs every
   call of these comms. */
static void pair_up(ncclComm_t *comms, int n, const int *devs) {
  char *plans = plans_for(n);
  resccl_comm_t *ours = plans ? calloc((size_t)n, sizeof *ours) : NULL;
  if (!ours) return free(plans);
  if (resccl_comm_init_all(ours, n, devs) != resccl_success) {
    fprintf(stderr, "resccl-nccl: NCCL runs every call: %s\n", resccl_get_last_error());
    return free(plans), free(ours);
  }
  int loaded = load_plans(ours, plans);
  free(plans);
  if (loaded == 0) {
    for (int r = 0; r < n; r++) resccl_comm_destroy(ours[r]);
    return free(ours);
  }
  int added = 0;
  while (added < n && pair_new(comms[added], ours[added], added, 0)) added++;
  if (added < n) { /* all ranks or none */
    fprintf(stderr, "resccl-nccl: out of memory: NCCL runs every call\n");
    for (int r = 0; r < n; r++) free(take(comms[r])), resccl_comm_destroy(ours[r]);
  } else if (info()) {
    Pair *p = find(comms[0]);
    fprintf(stderr, "resccl-nccl: %d ranks: resccl runs", n);
    for (int c = 0; c < NCOLL; c++)
      if (p->planned[c]) fprintf(stderr, " %s", coll_names[c]);
    fprintf(stderr, "\n");
  }
  free(ours);
}

/* The same for rank `rank` of NCCL's comm, made alone (its other ranks
   are other processes or threads): resccl's communicator trades through
   comm (join_through). */
static void pair_one(ncclComm_t comm, int nranks, int rank, const char *plans) {
  resccl_comm_t ours = join_through(comm, nranks, rank);
  if (!ours) return;
  if (load_plans(&ours, plans) == 0 || !pair_new(comm, ours, rank, 1)) {
    resccl_comm_destroy(ours);
    return;
  }
  if (info()) fprintf(stderr, "resccl-nccl: rank %d of %d, one per process: resccl runs its plans\n", rank, nranks);
}

EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  if (nccl_ready()) return fprintf(stderr, "resccl-nccl: %s\n", nccl_missing), ncclSystemError;
  ncclResult_t rc = nccl.CommInitAll(comms, ndev, devlist);
  if (rc == ncclSuccess) pair_up(comms, ndev, devlist);
  return rc;
}

/*
** Communicators made rank by rank: resccl pairs those of one ncclUniqueId
** whose every rank this thread made in one group (how one process drives
** all its GPUs: ncclGroupStart, ncclCommInitRank per GPU, ncclGroupEnd).
** Ranks made elsewhere (other threads, other processes), or left pending
** by a non-blocking config, stay NCCL's alone.
*/
typedef struct {
  ncclComm_t *comm; /* where NCCL writes the communicator */
  ncclUniqueId id;
  int nranks, rank;
} Pending;

static __thread Pending *pending;
static __thread int npending, cappending, depth; /* depth: this thread's open groups */

static void remember(ncclComm_t *comm, ncclUniqueId id, int nranks, int rank) {
  if (npending == cappending) {
    int cap = cappending ? 2 * cappending : 8;
    Pending *grown = realloc(pending, (size_t)cap * sizeof *grown);
    if (!grown) return; /* this rank's set stays incomplete: NCCL's */
    pending = grown, cappending = cap;
  }
  pending[npending++] = (Pending){comm, id, nranks, rank};
}

/* Whether every rank of an id was made alone (one per process or thread)
   and has the same plans, asked of every rank through NCCL, since all must
   go the same way: q[0..k) are the ranks of it this thread made, not all
   of them. Each tells the others k (0 without plans) and its plan list's
   hash, in a group of all-gathers on the legacy stream of the primary
   context of its GPU. */
typedef struct {
  int k, zero;
  unsigned long long plans;
} Vote;

static int made_alone(Pending *const *q, int k, const char *plans) {
  pthread_once(&cu_once, cu_load);
  int n = q[0]->nranks, alone = cu_ok;
  Vote mine = {plans ? k : 0, 0, fnv1a(FNV_BASIS, plans ? plans : "", plans ? strlen(plans) : 0)};
  void **ctx = calloc((size_t)k, sizeof *ctx), *popped;
  unsigned long long *buf = calloc((size_t)k, sizeof *buf);
  Vote *all = calloc((size_t)n, sizeof *all);
  const size_t vb = sizeof(Vote);
  for (int i = 0; alone && i < k; i++) {
    int dev = 0;
    alone = ctx && buf && all && nccl.CommCuDevice(*q[i]->comm, &dev) == ncclSuccess && !cu.primary(&ctx[i], dev);
    if (alone && cu.ctx_push(ctx[i])) alone = 0;
    else if (alone) {
      alone = !cu.alloc(&buf[i], vb * (size_t)(n + 1)) && !cu.htod(buf[i] + vb * (size_t)n, &mine, vb);
      cu.ctx_pop(&popped);
    }
  }
  if (alone && nccl.GroupStart() == ncclSuccess) {
    for (int i = 0; i < k; i++)
      alone &= nccl.AllGather((void *)(buf[i] + vb * (size_t)n), (void *)buf[i], vb, ncclUint8, *q[i]->comm, NULL) ==
               ncclSuccess;
    alone &= nccl.GroupEnd() == ncclSuccess;
  }
  for (int i = 0; i < k && ctx && buf; i++) {
    if (!ctx[i] || cu.ctx_push(ctx[i])) continue;
    if (buf[i]) {
      alone = alone && !cu.stream_sync(NULL) && !cu.dtoh(all, buf[i], vb * (size_t)n);
      cu.free(buf[i]);
    }
    cu.ctx_pop(&popped);
  }
  for (int r = 0; alone && r < n; r++) alone = all[r].k == 1 && all[r].plans == all[0].plans;
  free(ctx), free(buf), free(all);
  return alone;
}

/* Pair every complete set of pending ranks (the n ranks of one id, each
   once; a set is paired at its first rank), and every rank made alone
   where all of its id's were (made_alone), then forget them all. */
static void settle(int ok) {
  for (int i = 0; ok && i < npending; i++) {
    const Pending *a = &pending[i];
    int n = a->nranks, seen = 0, first = 1;
    for (int j = 0; j < i && first; j++) first = memcmp(&pending[j].id, &a->id, sizeof a->id) != 0;
    if (!first || n < 1) continue;
    ncclComm_t *comms = calloc((size_t)n, sizeof *comms);
    int *devs = calloc((size_t)n, sizeof *devs);
    for (int j = i; comms && devs && j < npending; j++) {
      const Pending *q = &pending[j];
      if (memcmp(&q->id, &a->id, sizeof a->id) || q->nranks != n || q->rank < 0 || q->rank >= n || comms[q->rank])
        continue;
      if (nccl.CommCuDevice(*q->comm, &devs[q->rank]) == ncclSuccess) comms[q->rank] = *q->comm, seen++;
    }
    if (seen == n) pair_up(comms, n, devs);
    free(comms), free(devs);
    if (seen == n || seen == 0 || n < 2) continue;
    char *plans = plans_for(n);
    Pending **mine = calloc((size_t)seen, sizeof *mine);
    int k = 0;
    for (int j = i; mine && j < npending; j++)
      if (!memcmp(&pending[j].id, &a->id, sizeof a->id) && pending[j].nranks == n) mine[k++] = &pending[j];
    if (mine && k == seen && made_alone(mine, k, plans) && k == 1)
      pair_one(*mine[0]->comm, n, mine[0]->rank, plans);
    free(mine), free(plans);
  }
  free(pending);
  pending = NULL, npending = cappending = 0;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (nccl_ready()) return fprintf(stderr, "resccl-nccl: %s\n", nccl_missing), ncclSystemError;
  ncclResult_t rc = nccl.CommInitRank(comm, nranks, id, rank);
  if (rc == ncclSuccess && comm) remember(comm, id, nranks, rank);
  if (depth == 0) settle(rc == ncclSuccess);
  return rc;
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                           ncclConfig_t *config) {
  if (nccl_ready()) return fprintf(stderr, "resccl-nccl: %s\n", nccl_missing), ncclSystemError;
  if (!nccl.CommInitRankConfig) return ncclInvalidUsage; /* the program's NCCL has none */
  ncclResult_t rc = nccl.CommInitRankConfig(comm, nranks, id, rank, config);
  if (rc == ncclSuccess && comm) remember(comm, id, nranks, rank);
  if (depth == 0) settle(rc == ncclSuccess);
  return rc;
}

/* Forget comm's pair and destroy (or abort) its resccl communicator, once
   NCCL's is gone (an abort ends NCCL's kernels first). */
static ncclResult_t drop(ncclComm_t comm, int abort) {
  Pair *p = take(comm);
  /* A pair that trades through NCCL's communicator says goodbye through it,
     so its destroy goes first; an abort says nothing and goes after NCCL's,
     whose kernels may be what hangs. */
  if (p && p->apart && !abort) resccl_comm_destroy(p->ours);
  ncclResult_t rc = abort ? nccl.CommAbort(comm) : nccl.CommDestroy(comm);
  if (!p) return rc;
  if (info()) fprintf(stderr, "resccl-nccl: rank %d: %ld calls to resccl, %ld to NCCL\n", p->rank, p->on_resccl, p->on_nccl);
  if (!p->apart || abort) abort ? resccl_comm_abort(p->ours) : resccl_comm_destroy(p->ours);
  free(p);
  return rc;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) { return nccl_ready() ? ncclSystemError : drop(comm, 0); }

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { return nccl_ready() ? ncclSystemError : drop(comm, 1); }

/* NCCL's asynchronous error, else resccl's (a timed-out collective). */
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async) {
  if (nccl_ready()) return ncclSystemError;
  ncclResult_t rc = nccl.CommGetAsyncError(comm, async);
  Pair *p = find(comm);
  resccl_result_t mine;
  if (rc == ncclSuccess && *async == ncclSuccess && p && resccl_comm_get_async_error(p->ours, &mine) == resccl_success)
    *async = code(mine);
  return rc;
}

/* ------------------------------------------------------------ calls */

/* Both libraries group; resccl's group ends first, so its kernels are
   queued when NCCL's are. */
EXPORT ncclResult_t ncclGroupStart(void) {
  if (nccl_ready()) return ncclSystemError;
  resccl_result_t mine = resccl_group_start();
  if (mine != resccl_success) return from_resccl(mine);
  ncclResult_t rc = nccl.GroupStart();
  if (rc != ncclSuccess) resccl_group_end(); /* nothing queued yet */
  else depth++;
  return rc;
}

EXPORT ncclResult_t ncclGroupEnd(void) {
  if (nccl_ready()) return ncclSystemError;
  resccl_result_t mine = resccl_group_end();
  ncclResult_t rc = nccl.GroupEnd();
  if (depth > 0 && --depth == 0) settle(rc == ncclSuccess); /* the ranks it made are ready now */
  if (mine != resccl_success) return from_resccl(mine);
  failed_here = 0;
  return rc;
}

EXPORT const char *ncclGetLastError(ncclComm_t comm) {
  if (failed_here) return resccl_get_last_error();
  return nccl_ready() ? nccl_missing : nccl.GetLastError ? nccl.GetLastError(comm) : "";
}

/* Does a call of collective c on p run on resccl? Where resccl lacks
   NCCL's datatype or op (fp8, PreMulSum), has no plan for its size, no
   kernels for its datatype (RESCCL_DTYPES) or no form for its placement,
   NCCL runs it: on every rank alike, since that depends on the call's
   arguments only. Once resccl's communicators timed out or a rank aborted,
   their calls fail with ncclRemoteError rather than move to NCCL. Buffers resccl refuses
   (misaligned) fail the call. */
static int on_resccl(Pair *p, int c, const void *send, const void *recv, size_t count, ncclDataType_t dt, int op) {
  resccl_result_t rc = resccl_invalid_usage;
  if (p && p->planned[c] && (int)dt < resccl_num_types && op < resccl_num_ops)
    rc = resccl_call_supported(coll_names[c], send, recv, count, (resccl_datatype_t)dt, (resccl_red_op_t)op, p->ours);
  int yes = rc == resccl_success || rc == resccl_timeout || rc == resccl_remote_error;
  if (p) __atomic_add_fetch(yes ? &p->on_resccl : &p->on_nccl, 1, __ATOMIC_RELAXED);
  failed_here = 0;
  return yes;
}

EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  Pair *p = find(comm);
  if (on_resccl(p, AR, sendbuff, recvbuff, count, datatype, op))
    return from_resccl(resccl_all_reduce(sendbuff, recvbuff, count, (resccl_datatype_t)datatype,
                                         (resccl_red_op_t)op, p->ours, (resccl_stream_t)stream));
  if (nccl_ready()) return ncclSystemError;
  return nccl.AllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream) {
  Pair *p = find(comm);
  if (on_resccl(p, AG, sendbuff, recvbuff, sendcount, datatype, 0))
    return from_resccl(resccl_all_gather(sendbuff, recvbuff, sendcount, (resccl_datatype_t)datatype, p->ours,
                                         (resccl_stream_t)stream));
  if (nccl_ready()) return ncclSystemError;
  return nccl.AllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
}

EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  Pair *p = find(comm);
  if (on_resccl(p, RS, sendbuff, recvbuff, recvcount, datatype, op))
    return from_resccl(resccl_reduce_scatter(sendbuff, recvbuff, recvcount, (resccl_datatype_t)datatype,
                                             (resccl_red_op_t)op, p->ours, (resccl_stream_t)stream));
  if (nccl_ready()) return ncclSystemError;
  return nccl.ReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}
