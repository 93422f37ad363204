/*
** fake_nccl.c — a libnccl.so.2 for testing libresccl-nccl on one GPU: NCCL
** refuses two ranks on one device, this one makes communicators for any
** devices and runs nothing; fake_nccl_calls() counts the collectives that
** reached it. One thing it runs: all-gathers of bytes, which the shim's
** ranks made one per process trade through (nccl.c, exchange), between the
** processes of an id over a shared page; those are not counted.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nccl.h>

enum { MAXR = 64, SLOT = 8192 };

/* What the ranks of one id share: a barrier and a slot each. */
typedef struct {
  int count, gen;
  char slot[MAXR][SLOT];
} World;

struct ncclComm {
  int dev, rank, nranks;
  World *w;
  char page[NCCL_UNIQUE_ID_BYTES];
};

static long calls;

long fake_nccl_calls(void) { return calls; }

static ncclComm_t make(int dev) {
  ncclComm_t c = calloc(1, sizeof *c);
  if (c) c->dev = dev;
  return c;
}

/* The driver's entry point `name` (loaded as the program's CUDA runtime loads it). */
static void *driver(const char *name) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return cuda ? dlsym(cuda, name) : NULL;
}

static void barrier(World *w, int nranks) {
  int gen = __atomic_load_n(&w->gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&w->count, 1, __ATOMIC_ACQ_REL) == nranks) {
    __atomic_store_n(&w->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->gen, gen + 1, __ATOMIC_RELEASE);
  } else {
    while (__atomic_load_n(&w->gen, __ATOMIC_ACQUIRE) == gen) sched_yield();
  }
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  for (int r = 0; r < ndev; r++)
    if (!(comms[r] = make(devlist ? devlist[r] : r))) return ncclSystemError;
  return ncclSuccess;
}

/* The id names its shared page, which its rank 0 removes at its end. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static int n;
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "/fake-nccl-%d-%d", (int)getpid(), ++n);
  int fd = shm_open(id->internal, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, sizeof(World))) return ncclSystemError;
  close(fd);
  return ncclSuccess;
}

/* On the calling thread's current GPU, as NCCL's: the driver's, whichever runtime set it. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  int (*ctx_device)(int *) = (int (*)(int *))driver("cuCtxGetDevice");
  int d = 0;
  if (!ctx_device || ctx_device(&d) != 0 || nranks > MAXR) return ncclSystemError;
  if (!(*comm = make(d))) return ncclSystemError;
  (*comm)->rank = rank, (*comm)->nranks = nranks;
  int fd = shm_open(id.internal, O_RDWR, 0600);
  if (fd < 0) return ncclSuccess; /* an id of no page: nothing to gather */
  void *w = mmap(NULL, sizeof(World), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  (*comm)->w = w == MAP_FAILED ? NULL : w;
  memcpy((*comm)->page, id.internal, sizeof id.internal);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
  (void)config;
  return ncclCommInitRank(comm, nranks, id, rank);
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *dev) { return *dev = comm->dev, ncclSuccess; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e) { return (void)comm, *e = ncclSuccess, ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm->w) munmap(comm->w, sizeof(World));
  if (comm->w && comm->rank == 0) shm_unlink(comm->page);
  return free(comm), ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
const char *ncclGetLastError(ncclComm_t comm) { return (void)comm, ""; }
const char *ncclGetErrorString(ncclResult_t rc) { return rc ? "fake error" : "no error"; }

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)t, (void)op, (void)c, (void)st;
  return calls++, ncclSuccess;
}

/* Bytes between the ranks of a shared page: through the host, in order. */
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
  if (!c->w || t != ncclUint8) return calls++, ncclSuccess;
  int (*sync)(void *) = (int (*)(void *))driver("cuStreamSynchronize");
  int (*dtoh)(void *, const void *, size_t) = (int (*)(void *, const void *, size_t))driver("cuMemcpyDtoH_v2");
  int (*htod)(void *, const void *, size_t) = (int (*)(void *, const void *, size_t))driver("cuMemcpyHtoD_v2");
  if (!sync || !dtoh || !htod || n > SLOT || sync(st) || dtoh(c->w->slot[c->rank], s, n)) return ncclSystemError;
  barrier(c->w, c->nranks);
  for (int q = 0; q < c->nranks; q++)
    if (htod((char *)r + (size_t)q * n, c->w->slot[q], n)) return ncclSystemError;
  barrier(c->w, c->nranks); /* the slots are read before the next round writes them */
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)t, (void)op, (void)c, (void)st;
  return calls++, ncclSuccess;
}
