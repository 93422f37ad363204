/*
** fake_nccl.c — a libnccl.so.2 for testing libresccl-nccl on one GPU: NCCL
** refuses two ranks on one device, this one makes communicators for any
** devices and runs nothing; fake_nccl_calls() counts the collectives that
** reached it.
*/
#include <stdlib.h>

#include <nccl.h>

static long calls;

long fake_nccl_calls(void) { return calls; }

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  (void)devlist;
  for (int r = 0; r < ndev; r++) comms[r] = malloc(1); /* a distinct handle */
  return ncclSuccess;
}

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
