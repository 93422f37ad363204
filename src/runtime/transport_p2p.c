/*
** transport_p2p.c — the GPUs of one process reach each other's memory:
** peer access, enabled between every pair of a group's GPUs.
*/
#include "transport.h"

resccl_result_t p2p_connect(const Group *g) {
  for (int a = 0; a < g->ndevs; a++) {
    CU(cudaSetDevice(g->dev[a]));
    for (int b = 0; b < g->ndevs; b++) {
      if (a == b) continue;
      int ok = 0;
      CU(cudaDeviceCanAccessPeer(&ok, g->dev[a], g->dev[b]));
      if (!ok) return rt_fail(resccl_invalid_usage, "GPU %d cannot reach GPU %d (no peer access)", g->dev[a], g->dev[b]);
      cudaError_t e = cudaDeviceEnablePeerAccess(g->dev[b], 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CU(e);
      cudaGetLastError();
    }
  }
  return resccl_success;
}
