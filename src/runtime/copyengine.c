/*
** copyengine.c — the copy-engine copies of a call whose form has them: per
** (source GPU, destination GPU) a stream of copies, and the barriers or
** events that order them with the GPUs' launch streams.
*/
#include <string.h>

#include "objects.h"
#include "../../kernels-templates/tile.h"

/* The copy-engine barrier (cuda_abi.h's RxSync) on the stream of
   calls[i]'s launch: every GPU of the call runs one before its copies and
   one after them. Before: a copy lands in a peer's buffer only once the
   peer's stream has reached the call (its earlier work may still use the
   buffer). After: a GPU's stream goes on only once every copy into its
   buffers, and out of them, is done. Kernels, so that GPUs whose streams
   are captured separately still order each other, and the flags and
   counters are zeroed on the GPU; elsewhere events do it (ce_by_events). */
resccl_result_t ce_sync(const Call *c, int before) {
  Variant *v = c->v;
  Group *g = c->comm->g;
  RxSync s;
  memset(&s, 0, sizeof s);
  for (int d = 0; d < g->ndevs; d++) s.word[d] = v->dev[d].word;
  s.me = c->comm->d, s.ndev = g->ndevs, s.timeout_ns = (unsigned long long)(c->plan->conf.timeout_s * 1e9);
  if (before) {
    s.flags = v->dev[s.me].flags, s.nflags = v->dev[s.me].nflags;
    s.posts = v->dev[s.me].posts, s.nposts = c->nmicro * v->pf.ncounters;
  }
  s.stop = v->stop;
  void *params[] = {&s};
  CUDRV(drv.launch(v->dev[s.me].sync, 1, 1, 1, 1, 1, 1, 0, (CUstream)c->stream, params, NULL));
  return resccl_success;
}

/* Whether the collective whose first call is calls[k] orders its copies
   by events alone: where it has no flags or counters to zero and none of
   its streams is being captured. A barrier kernel costs the host 3.6 us to
   queue, an event 0.3; events of one GPU's stream that another GPU's
   stream waits for cannot join two captures. */
int ce_by_events(const Call *calls, int n, const int *first, int k) {
  if (calls[k].v->pf.nceflags || calls[k].v->pf.ncounters) return 0;
  for (int j = k; j < n; j++) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (first[j] == k && (cudaSetDevice(calls[j].comm->cudev) != cudaSuccess ||
                          cudaStreamIsCapturing(calls[j].stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone))
      return 0;
  }
  return 1;
}

/* The copy-engine copies of the collective whose first call is calls[i]
   (every rank is in it: launch checked). Each (source GPU, destination
   GPU) has a stream, forked from the source GPU's launch stream after its
   first barrier and joined back to it before its second (ce_sync); all of
   it is stream-ordered, so CUDA graphs capture it. `events` (ce_by_events):
   with no barriers, a copy stream also waits for its destination GPU's
   launch stream to reach the call, and that stream for the copies. A
   stream queues the copies that wait for the kernel's counters after the
   others: the kernel may wait for those, never for these. */
resccl_result_t ce_copies(Call *calls, int n, const int *first, int i, int events) {
  Variant *v = calls[i].v;
  Group *g = calls[i].comm->g;
  const Call *of[RX_MAXRANKS];
  cudaStream_t at[MAXDEV] = {0}; /* per GPU: the stream its launch went on */
  for (int j = n - 1; j >= 0; j--)
    if (first[j] == first[i]) of[calls[j].comm->rank] = &calls[j], at[calls[j].comm->d] = calls[j].stream;
  char used[MAXDEV][MAXDEV];
  memset(used, 0, sizeof used);
  size_t es = calls[i].esize, N = calls[i].count, M = (size_t)calls[i].nmicro, C = (size_t)v->pf.chunks;
  for (int k = 0; k < 2 * v->pf.nce; k++) {
    const int *c = &v->pf.ce[CE_INTS * (k % v->pf.nce)];
    if ((c[8] >= 0) != (k >= v->pf.nce)) continue;
    int ds = g->comms[c[0]].d, dt = g->comms[c[3]].d, each = c[7] >= 0 || c[8] >= 0;
    cudaStream_t st = v->dev[ds].ce[dt];
    CU(cudaSetDevice(g->dev[ds]));
    if (!used[ds][dt]) {
      CU(cudaStreamWaitEvent(st, v->dev[ds].start, 0));
      if (events && dt != ds) CU(cudaStreamWaitEvent(st, v->dev[dt].start, 0));
    }
    used[ds][dt] = 1;
    /* One piece, or one per micro-batch: after the kernel counted every
       slice of it, or with the flag a reduction waits for after it (its
       value the count). */
    for (size_t mb = 0; mb < (each ? M : 1); mb++) {
      size_t m = each ? mb : 0, slo, dlo, len;
      if (c[8] >= 0)
        CUDRV(drv.wait_value((CUstream)st, (CUdeviceptr)(v->dev[ds].posts + mb * (size_t)v->pf.ncounters + (size_t)c[8]),
                             (cuuint32_t)calls[i].nslice, CU_STREAM_WAIT_VALUE_GEQ));
      while (rx_ce_run(N, C, M, es, c[2], c[5], c[6], &m, each ? mb + 1 : M, &slo, &dlo, &len))
        CUDRV(drv.copy((CUdeviceptr)(of[c[3]]->buf[c[4]] + dlo * es), (CUdeviceptr)(of[c[0]]->buf[c[1]] + slo * es),
                       len * es, (CUstream)st));
      if (c[7] >= 0) CUDRV(drv.write_value((CUstream)st, (CUdeviceptr)v->ceflag[c[7]], (cuuint32_t)(mb + 1), 0));
    }
  }
  for (int ds = 0; ds < g->ndevs; ds++)
    for (int dt = 0; dt < g->ndevs; dt++) {
      if (!used[ds][dt]) continue;
      CU(cudaSetDevice(g->dev[ds]));
      CU(cudaEventRecord(v->dev[ds].ce_done[dt], v->dev[ds].ce[dt]));
      CU(cudaStreamWaitEvent(at[ds], v->dev[ds].ce_done[dt], 0));
      if (events && dt != ds) {
        CU(cudaSetDevice(g->dev[dt]));
        CU(cudaStreamWaitEvent(at[dt], v->dev[ds].ce_done[dt], 0));
      }
    }
  return resccl_success;
}
