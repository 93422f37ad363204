/*
** variant.c — one placement (form) of a loaded plan on the GPUs of its
** group: its kernel loaded on each, each rank's segment laid out (FIFO
** ends, started and finished words) and this process's allocated, flags,
** counters and block tables allocated, then, once every rank's segment is
** known (transport.h), the FIFO tables filled; its copy-engine streams;
** freed at unload, after RESCCL_TRACE's events of its last call are written.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objects.h"
#include "transport.h"

/* RESCCL_TRACE=FILE: the last call's events of every block, appended as
   lines `gpu placement block rank tb chan slice prim m kind begin end sm`
   (ns from the GPU's first event; kind 0 a flag wait, 1 a primitive's
   micro-batch, 2 a wait for the slice's previous unit; sm the
   multiprocessor the block ran on). */
void trace_write(Group *g, Variant *v, const char *path) {
  FILE *f = NULL;
  for (int d = 0; v && path && d < g->ndevs; d++) {
    int nb = v->dev[d].nblocks;
    size_t words = (size_t)nb * RX_TRACE_WORDS;
    unsigned long long *t = v->dev[d].trace ? malloc(words * sizeof *t) : NULL;
    if (!t || cudaSetDevice(g->dev[d]) != cudaSuccess ||
        cudaMemcpy(t, v->dev[d].trace, words * sizeof *t, cudaMemcpyDeviceToHost) != cudaSuccess ||
        (!f && !(f = fopen(path, "a")))) {
      free(t);
      continue;
    }
    unsigned long long t0 = ~0ull; /* the first event's begin */
    for (int b = 0; b < nb; b++) {
      const unsigned long long *e = t + (size_t)b * RX_TRACE_WORDS;
      for (unsigned long long k = 0; k < (e[0] & 0xffffffffu) && k < RX_TRACE_EVENTS; k++)
        t0 = e[2 + 3 * k] < t0 ? e[2 + 3 * k] : t0;
    }
    for (int b = 0; b < nb; b++) {
      const unsigned long long *e = t + (size_t)b * RX_TRACE_WORDS;
      for (unsigned long long k = 0; k < (e[0] & 0xffffffffu) && k < RX_TRACE_EVENTS; k++) {
        unsigned long long w = e[1 + 3 * k];
        fprintf(f, "%d %s %d %d %d %d %llu %llu %llu %llu %llu %llu %llu\n", g->dev[d], v->pf.inplace ? "in" : "out", b,
                v->dev[d].tab[b].rank, v->dev[d].tab[b].tb, v->dev[d].tab[b].chan, (w >> 24) & 0xffff, w >> 40,
                (w >> 4) & 0xfffff, w & 0xf, e[2 + 3 * k] - t0, e[3 + 3 * k] - t0, e[0] >> 32);
      }
    }
    free(t);
  }
  if (f) fclose(f);
}

void variant_free(Group *g, Variant *v) {
  if (!v) return;
  for (int d = 0; d < MAXDEV; d++) {
    for (int e = 0; g && v->dev[d].ce && e < g->ndevs; e++)
      if (v->dev[d].ce[e]) cudaStreamDestroy(v->dev[d].ce[e]), cudaEventDestroy(v->dev[d].ce_done[e]);
    if (v->dev[d].start) cudaEventDestroy(v->dev[d].start);
    free(v->dev[d].cubin), free(v->dev[d].tab), free(v->dev[d].ce), free(v->dev[d].ce_done), free(v->dev[d].hrun);
  }
  ipc_close(v);
  for (int d = 0; g && d < g->ndevs; d++)
    if (v->dev[d].mod) cudaSetDevice(g->dev[d]), drv.unload(v->dev[d].mod);
  for (int i = 0; i < v->nallocs; i++) cudaFree(v->allocs[i]);
  free(v->allocs), free(v->scratch), free(v->scratch_bytes);
  free(v->seg_bytes), free(v->seg), free(v->opened), free(v->fifo);
  pf_free(&v->pf), free(v->ceflag), free(v);
}

/* Device memory freed at unload; zero: the stream that zeroes it (plan
   load's own, which variant_setup waits for before any call can run), or
   NULL for what is written whole before it is read: by a copy that follows
   on that stream, or by every call (scratch, copy-engine counters). */
resccl_result_t dev_alloc(Variant *v, void *p, size_t bytes, cudaStream_t *zero) {
  void **a = realloc(v->allocs, sizeof *a * ((size_t)v->nallocs + 1));
  if (!a) return rt_fail(resccl_system_error, "out of memory");
  v->allocs = a;
  CU(cudaMalloc((void **)p, bytes ? bytes : 1));
  v->allocs[v->nallocs++] = *(void **)p;
  if (zero) CU(cudaMemsetAsync(*(void **)p, 0, bytes ? bytes : 1, *zero));
  return resccl_success;
}

/* Where each rank's segment holds what peers reach by address: its
   `started` words at 0, its `finished` words at v->fin_at, then its ends of
   the FIFOs (slots, tail and taken where it receives, head and sent where
   it sends), each on a line of its own. v->fifo gets the offsets. Every
   rank works out every rank's layout from the plan file alone, so that
   processes agree on it without trading it. */
static size_t seg_take(size_t *at, size_t bytes) {
  size_t o = *at;
  *at += (bytes + 127) / 128 * 128;
  return o;
}

static resccl_result_t variant_layout(Variant *v, const RtConf *cf, const RxRun *run) {
  int n = v->pf.nranks, nf = v->pf.nconn * v->nslice;
  size_t ns = (size_t)(n > 0 ? n : 1); /* the reader checked: 1 to RX_MAXRANKS */
  v->seg_bytes = calloc(ns, sizeof *v->seg_bytes);
  v->seg = calloc(ns, sizeof *v->seg);
  v->opened = calloc(ns, 1);
  v->fifo = calloc((size_t)nf + 1, sizeof *v->fifo);
  if (!v->seg_bytes || !v->seg || !v->opened || !v->fifo) return rt_fail(resccl_system_error, "out of memory");
  for (int r = 0; r < n; r++) {
    seg_take(&v->seg_bytes[r], sizeof(unsigned) * (size_t)n);
    v->fin_at = seg_take(&v->seg_bytes[r], sizeof(unsigned) * ((size_t)run->first[n] + 1));
  }
  for (int i = 0; i < nf; i++) {
    size_t *dst = &v->seg_bytes[v->pf.cdst[i / v->nslice]], *src = &v->seg_bytes[v->pf.csrc[i / v->nslice]];
    RxFifo *f = &v->fifo[i];
    f->slots = (char *)seg_take(dst, (size_t)v->nslots * cf->slot_bytes);
    f->tail = (unsigned long long *)seg_take(dst, sizeof(unsigned long long));
    f->taken = (unsigned long long *)seg_take(dst, sizeof(unsigned long long));
    f->head = (unsigned long long *)seg_take(src, sizeof(unsigned long long));
    f->sent = (unsigned long long *)seg_take(src, sizeof(unsigned long long));
  }
  return resccl_success;
}

/* variant_setup's allocations and kernels. */
static resccl_result_t variant_build(Group *g, Variant *v, const RtConf *cf, cudaStream_t *ld) {
  int K = v->nblk, V = v->nslice, nf = v->pf.nconn * V;
  /* Per rank, a word per rank: the call that rank's kernel runs (direct
     sends wait for it); and a word per block of every rank: the last call
     whose reads it ended (pulls wait for them). */
  RxRun run;
  memset(&run, 0, sizeof run);
  run.nranks = v->pf.nranks, run.chunks = v->pf.chunks, run.nslots = v->nslots, run.nslice = V, run.nblk = K;
  run.slot_bytes = cf->slot_bytes;
  for (int r = 0; r < v->pf.nranks; r++) run.first[r + 1] = run.first[r] + v->pf.ntb[r] * K;
  TRY(variant_layout(v, cf, &run));
  for (int r = 0; r < v->pf.nranks; r++) {
    if (g->comms[r].d < 0) continue; /* another process's */
    CU(cudaSetDevice(g->comms[r].cudev));
    TRY(dev_alloc(v, &v->seg[r], v->seg_bytes[r], &ld[g->comms[r].d]));
  }
  /* Copy-engine flags, each in its copy's source GPU: the copy stream posts
     it there, the reducing kernel polls it over the link, and the source's
     barrier before the next call's copies zeroes it (ce_sync). */
  v->ceflag = calloc((size_t)v->pf.nceflags + 1, sizeof *v->ceflag);
  if (!v->ceflag) return rt_fail(resccl_system_error, "out of memory");
  for (int i = 0; i < v->pf.nce; i++)
    if (v->pf.ce[CE_INTS * i + 7] >= 0) v->dev[g->comms[v->pf.ce[CE_INTS * i]].d].nflags++;
  for (int d = 0; d < g->ndevs; d++) {
    if (!v->dev[d].nflags) continue;
    CU(cudaSetDevice(g->dev[d]));
    TRY(dev_alloc(v, &v->dev[d].flags, sizeof(unsigned) * (size_t)v->dev[d].nflags, &ld[d]));
    for (int i = 0, k = 0; i < v->pf.nce; i++)
      if (v->pf.ce[CE_INTS * i + 7] >= 0 && g->comms[v->pf.ce[CE_INTS * i]].d == d) v->ceflag[v->pf.ce[CE_INTS * i + 7]] = v->dev[d].flags + k++;
  }
  resccl_result_t res = resccl_success;
  for (int d = 0; d < g->ndevs && res == resccl_success; d++) {
    CU(cudaSetDevice(g->dev[d]));
    CU(cudaFree(0)); /* the primary context, current for the driver API */
    int sms = 0;
    CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g->dev[d]));
    CUresult cr = drv.load(&v->dev[d].mod, v->dev[d].cubin);
    free(v->dev[d].cubin), v->dev[d].cubin = NULL;
    CUDRV(cr);
    CUDRV(drv.function(&v->dev[d].fn, v->dev[d].mod, "rx_kernel"));
    /* Blocks: every TB of every rank on this GPU, K times. */
    int nb = 0, ntbs = 0;
    for (int r = 0; r < v->pf.nranks; r++)
      if (g->comms[r].d == d) nb += v->pf.ntb[r] * K, ntbs += v->pf.ntb[r];
    RxBlock *tab = v->dev[d].tab = calloc((size_t)nb + 1, sizeof *tab);
    if (!tab) return rt_fail(resccl_system_error, "out of memory");
    for (int r = 0, k = 0, tbi = 0; r < v->pf.nranks; r++)
      if (g->comms[r].d == d)
        for (int b = 0; b < v->pf.ntb[r]; b++, tbi++)
          for (int c = 0; c < K; c++, k++)
            tab[k].rank = r, tab[k].tb = b, tab[k].chan = c, tab[k].tbi = tbi, tab[k].word = run.first[r] + b * K + c;
    int per_sm = 0;
    CUDRV(drv.occupancy(&per_sm, v->dev[d].fn, cf->threads, 0));
    if (nb > per_sm * sms) {
      res = rt_fail(resccl_invalid_usage, "GPU %d would need %d resident blocks (%d TBs x %d channels) and holds %d: "
                    "use fewer channels (RESCCL_NCHANNELS) or more GPUs", g->dev[d], nb, nb / K, K, per_sm * sms);
      break;
    }
    TRY(dev_alloc(v, &v->dev[d].block, sizeof(RxBlock) * (size_t)nb, NULL));
    CU(cudaMemcpyAsync(v->dev[d].block, tab, sizeof(RxBlock) * (size_t)nb, cudaMemcpyHostToDevice, ld[d]));
    TRY(dev_alloc(v, &run.fifo, sizeof(RxFifo) * ((size_t)nf + 1), &ld[d]));
    TRY(dev_alloc(v, &run.flag, sizeof(unsigned) * ((size_t)v->pf.nflags * V + 1), &ld[d]));
    TRY(dev_alloc(v, &run.claim, sizeof(unsigned) * (size_t)ntbs, &ld[d]));
    TRY(dev_alloc(v, &run.done, sizeof(unsigned long long) * (size_t)ntbs * V, &ld[d]));
    unsigned **dceflag;
    TRY(dev_alloc(v, &dceflag, sizeof(unsigned *) * ((size_t)v->pf.nceflags + 1), &ld[d]));
    CU(cudaMemcpyAsync(dceflag, v->ceflag, sizeof(unsigned *) * (size_t)v->pf.nceflags, cudaMemcpyHostToDevice, ld[d]));
    run.ceflag = dceflag;
    if (cf->trace) TRY(dev_alloc(v, &run.trace, sizeof(unsigned long long) * RX_TRACE_WORDS * (size_t)nb, &ld[d]));
    v->dev[d].trace = run.trace;
    CU(cudaHostGetDevicePointer((void **)&run.stop, g->stop, 0));
    v->stop = run.stop;
    TRY(dev_alloc(v, &v->dev[d].run, sizeof run, NULL));
    if (!(v->dev[d].hrun = malloc(sizeof run))) return rt_fail(resccl_system_error, "out of memory");
    *v->dev[d].hrun = run; /* completed and copied by variant_connect */
    v->dev[d].nblocks = nb;
    INFO("plan %s: GPU %d, %d blocks (%d per SM fit), %d channels of %d slices, %d connections",
         v->pf.inplace ? "in-place" : "out-of-place", g->dev[d], nb, per_sm, K, V / K, v->pf.nconn);
  }
  /* Copy-engine copies: a stream for each (source GPU, destination GPU) with
     some, so that copies to different GPUs and local ones overlap; events
     order them with the calls' streams (ce_copies). */
  for (int i = 0; i < v->pf.nce && res == resccl_success; i++) {
    int ds = g->comms[v->pf.ce[CE_INTS * i]].d, dt = g->comms[v->pf.ce[CE_INTS * i + 3]].d;
    if (!v->dev[ds].ce) {
      v->dev[ds].ce = calloc((size_t)g->ndevs, sizeof(cudaStream_t));
      v->dev[ds].ce_done = calloc((size_t)g->ndevs, sizeof(cudaEvent_t));
      if (!v->dev[ds].ce || !v->dev[ds].ce_done) return rt_fail(resccl_system_error, "out of memory");
    }
    if (v->dev[ds].ce[dt]) continue;
    CU(cudaSetDevice(g->dev[ds]));
    CU(cudaStreamCreateWithFlags(&v->dev[ds].ce[dt], cudaStreamNonBlocking));
    CU(cudaEventCreateWithFlags(&v->dev[ds].ce_done[dt], cudaEventDisableTiming));
  }
  for (int d = 0; v->pf.nce && d < g->ndevs && res == resccl_success; d++) {
    CU(cudaSetDevice(g->dev[d]));
    CU(cudaEventCreateWithFlags(&v->dev[d].start, cudaEventDisableTiming));
    CUDRV(drv.function(&v->dev[d].sync, v->dev[d].mod, "rx_ce_sync"));
    TRY(dev_alloc(v, &v->dev[d].word, sizeof(unsigned), &ld[d]));
  }
  if (res == resccl_success) {
    v->scratch = calloc((size_t)v->pf.nranks, sizeof *v->scratch);
    v->scratch_bytes = calloc((size_t)v->pf.nranks, sizeof *v->scratch_bytes);
    if (!v->scratch || !v->scratch_bytes) res = rt_fail(resccl_system_error, "out of memory");
  }
  return res;
}

resccl_result_t variant_setup(Group *g, Variant *v, const RtConf *cf) {
  /* A plan verified with connections that hold two tiles (--tb merge, hand-placed TBs) gets the slots for them. */
  v->nslots = v->pf.fifo_slots > cf->nslots ? v->pf.fifo_slots : cf->nslots;
  /* Channels: about 32 blocks on the busiest GPU (on 2xH200, 32 blocks moved
     10-30% more than 24, docs/journal/gpu-2026-11-30.md), 16 where the copy engine makes
     copies: what is left to the blocks then reduces, and a ring all-reduce
     whose hops both go to the copy engine moved 367 GB/s at 256 MiB with 16
     blocks against 301-310 with 32, and as much from 1 GiB. 16 where blocks
     pull: a one-shot all-reduce moved as much with 16 as with 32 and 64
     (tools/probes/probe-pull.cu). Virtual ranks share theirs. */
  int maxtb = 1, budget = v->pf.nce || v->pf.pulls ? 16 : 32;
  for (int d = 0; d < g->ndevs; d++) {
    int tbs = 0;
    for (int r = 0; r < v->pf.nranks; r++) tbs += g->comms[r].d == d ? v->pf.ntb[r] : 0;
    maxtb = tbs > maxtb ? tbs : maxtb;
  }
  /* Ranks of several processes: every rank counts alone, so that all of
     them work out the same channels (their FIFOs must match). */
  for (int r = 0; g->x && r < v->pf.nranks; r++) maxtb = v->pf.ntb[r] > maxtb ? v->pf.ntb[r] : maxtb;
  int K = v->nblk = cf->nchan > 0 ? cf->nchan : (budget / maxtb > 0 ? budget / maxtb : 1);
  v->nslice = K * (cf->slices ? cf->slices : 1);
  /* Plan load zeroes and fills device memory on streams of its own: the
     legacy stream would wait for the user's blocking streams, and a user's
     non-blocking stream would not wait for it. */
  cudaStream_t ld[MAXDEV] = {0};
  resccl_result_t res = resccl_success;
  for (int d = 0; d < g->ndevs && res == resccl_success; d++)
    if (cudaSetDevice(g->dev[d]) != cudaSuccess || cudaStreamCreateWithFlags(&ld[d], cudaStreamNonBlocking) != cudaSuccess)
      res = rt_fail(resccl_unhandled_cuda_error, "GPU %d: cannot create a stream", g->dev[d]);
  if (res == resccl_success) res = variant_build(g, v, cf, ld);
  for (int d = 0; d < g->ndevs; d++)
    if (ld[d]) {
      cudaSetDevice(g->dev[d]);
      cudaError_t e = cudaStreamSynchronize(ld[d]);
      if (e != cudaSuccess && res == resccl_success)
        res = rt_fail(resccl_unhandled_cuda_error, "GPU %d: plan load: %s", g->dev[d], cudaGetErrorString(e));
      cudaStreamDestroy(ld[d]);
    }
  return res;
}

resccl_result_t variant_connect(Group *g, Variant *v) {
  int n = v->pf.nranks, nf = v->pf.nconn * v->nslice;
  for (int i = 0; i < nf; i++) {
    RxFifo *f = &v->fifo[i];
    char *dst = v->seg[v->pf.cdst[i / v->nslice]], *src = v->seg[v->pf.csrc[i / v->nslice]];
    f->slots = dst + (uintptr_t)f->slots;
    f->tail = (unsigned long long *)(dst + (uintptr_t)f->tail);
    f->taken = (unsigned long long *)(dst + (uintptr_t)f->taken);
    f->head = (unsigned long long *)(src + (uintptr_t)f->head);
    f->sent = (unsigned long long *)(src + (uintptr_t)f->sent);
  }
  for (int d = 0; d < g->ndevs; d++) {
    RxRun *run = v->dev[d].hrun;
    for (int r = 0; r < n; r++) run->started[r] = (unsigned *)v->seg[r], run->finished[r] = (unsigned *)(v->seg[r] + v->fin_at);
    CU(cudaSetDevice(g->dev[d]));
    CU(cudaMemcpy(run->fifo, v->fifo, sizeof(RxFifo) * (size_t)nf, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(v->dev[d].run, run, sizeof *run, cudaMemcpyHostToDevice));
    free(run), v->dev[d].hrun = NULL;
  }
  free(v->fifo), v->fifo = NULL;
  return resccl_success;
}
