/*
** fake_nccl.c — a libnccl.so.2 for testing libresccl-nccl on one GPU: NCCL
** refuses two ranks on one device, this one makes communicators for any
** devices and runs nothing; fake_nccl_calls() counts the collectives that
** reached it.
*/
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

struct ncclComm {
  int dev;
};

static long calls;

long fake_nccl_calls(void) { return calls; }

static ncclComm_t make(int dev) {
  ncclComm_t c = malloc(sizeof *c);
  if (c) c->dev = dev;
  return c;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  for (int r = 0; r < ndev; r++)
    if (!(comms[r] = make(devlist ? devlist[r] : r))) return ncclSystemError;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static int n;
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &(int){++n}, sizeof n);
  return ncclSuccess;
}

/* On the calling thread's current GPU, as NCCL's: the driver's (loaded as
   the program's CUDA runtime loads it), whichever runtime set it. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  (void)nranks, (void)id, (void)rank;
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int (*ctx_device)(int *) = cuda ? (int (*)(int *))dlsym(cuda, "cuCtxGetDevice") : NULL;
  int d = 0;
  if (!ctx_device || ctx_device(&d) != 0) return ncclSystemError;
  return (*comm = make(d)) ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
  (void)config;
  return ncclCommInitRank(comm, nranks, id, rank);
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *dev) { return *dev = comm->dev, ncclSuccess; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e) { return (void)comm, *e = ncclSuccess, ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) { return free(comm), ncclSuccess; }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return free(comm), ncclSuccess; }
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
const char *ncclGetLastError(ncclComm_t comm) { return (void)comm, ""; }
const char *ncclGetErrorString(ncclResult_t rc) { return rc ? "fake error" : "no error"; }

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)t, (void)op, (void)c, (void)st;
  return calls++, ncclSuccess;
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)t, (void)c, (void)st;
  return calls++, ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
  (void)s, (void)r, (void)n, (void)t, (void)op, (void)c, (void)st;
  return calls++, ncclSuccess;
}
