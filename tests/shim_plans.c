/*
** shim_plans.c — the least program written for NCCL: ncclCommInitAll on two
** ranks of GPU 0, then ncclCommDestroy. Run with libresccl-nccl.so preloaded
** and RESCCL_NCCL_PLANS unset (tests/shim_plans.sh), the shim compiles its
** default plans on the way, whether or not a GPU is there to run them.
*/
#include <stdio.h>

#include <nccl.h>

int main(void) {
  ncclComm_t comm[2];
  int dev[2] = {0, 0};
  ncclResult_t rc = ncclCommInitAll(comm, 2, dev);
  for (int r = 0; rc == ncclSuccess && r < 2; r++) ncclCommDestroy(comm[r]);
  printf("ncclCommInitAll: %d\n", (int)rc);
  return rc != ncclSuccess;
}
