/*
** gpu_driver.cu — host side of the GPU executor, compiled together with one
** emitted program (cuda.cuh + the rank/TB bodies): spread the ranks over the
** GPUs (rank r on GPU r % ndev; several ranks on one GPU are virtual ranks),
** give every connection its FIFO in the receiver's memory, enable peer
** access, and launch one kernel per GPU holding all of that GPU's TBs, each
** as `nchan` blocks (see cuda.cuh), which must be resident together. Each run starts from the initial buffers and
** zeroed counters; the first run is checked, the others timed.
*/
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define RX_CHECK(call)                                                                                 \
  do {                                                                                                 \
    cudaError_t e_ = (call);                                                                           \
    if (e_ != cudaSuccess) {                                                                           \
      snprintf(out->error, sizeof out->error, "%s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, \
               __LINE__);                                                                              \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)

/* Every allocation, so that a run leaves the GPUs as it found them. */
static std::vector<std::pair<int, void *>> rx_allocs;

static cudaError_t rx_alloc(void *p, size_t bytes) {
  int d;
  cudaGetDevice(&d);
  cudaError_t e = cudaMalloc((void **)p, bytes);
  if (e == cudaSuccess) rx_allocs.push_back({d, *(void **)p});
  return e;
}

static int rx_run(const RxGpuJob *job, RxGpuOut *out);

extern "C" int rx_gpu_run(const RxGpuJob *job, RxGpuOut *out) {
  int rc = rx_run(job, out);
  for (auto &a : rx_allocs) cudaSetDevice(a.first), cudaFree(a.second);
  rx_allocs.clear();
  return rc;
}

static int rx_run(const RxGpuJob *job, RxGpuOut *out) {
  int devcount = 0;
  memset(out, 0, sizeof *out);
  RX_CHECK(cudaGetDeviceCount(&devcount));
  int R = job->nranks, ndev = std::min(std::min(job->ndev > 0 ? job->ndev : devcount, devcount), R);
  if (ndev < 1) return snprintf(out->error, sizeof out->error, "no GPU"), 1;
  out->ndev = ndev;
  for (int a = 0; a < ndev; a++)
    for (int b = 0; b < ndev; b++)
      if (a != b) {
        int ok = 0;
        RX_CHECK(cudaDeviceCanAccessPeer(&ok, a, b));
        if (!ok) return snprintf(out->error, sizeof out->error, "GPU %d cannot reach GPU %d", a, b), 1;
        RX_CHECK(cudaSetDevice(a));
        cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) RX_CHECK(e);
        cudaGetLastError();
      }
  auto dev = [&](int rank) { return rank % ndev; };
  /* Buffers and their pristine copies, on the rank's GPU. */
  std::vector<char *> buf(3 * R), pristine(3 * R);
  for (int r = 0; r < R; r++) {
    RX_CHECK(cudaSetDevice(dev(r)));
    for (int b = 0; b < 3; b++) {
      size_t bytes = job->elems[b] * job->esize + 16;
      RX_CHECK(rx_alloc(&buf[r * 3 + b], bytes));
      RX_CHECK(rx_alloc(&pristine[r * 3 + b], bytes));
      RX_CHECK(cudaMemcpy(pristine[r * 3 + b], job->init[r * 3 + b], job->elems[b] * job->esize,
                          cudaMemcpyHostToDevice));
    }
  }
  /* FIFOs, one per connection and channel: slots and tail with the receiver, head with the sender. */
  int K = job->nchan > 0 ? job->nchan : 1, nf = job->nconn * K;
  std::vector<RxFifo> fifo(nf);
  std::vector<unsigned long long *> counters;
  for (int i = 0; i < nf; i++) {
    int c = i / K;
    RX_CHECK(cudaSetDevice(dev(job->conn_dst[c])));
    RX_CHECK(rx_alloc(&fifo[i].slots, (size_t)job->nslots * job->slot_bytes));
    RX_CHECK(rx_alloc(&fifo[i].tail, sizeof(unsigned long long)));
    RX_CHECK(cudaSetDevice(dev(job->conn_src[c])));
    RX_CHECK(rx_alloc(&fifo[i].head, sizeof(unsigned long long)));
    counters.push_back(fifo[i].tail), counters.push_back(fifo[i].head);
  }
  /* Per GPU: its flags, its blocks, and its copy of the run description. */
  std::vector<unsigned *> flags(ndev);
  std::vector<RxRun *> runs(ndev);
  std::vector<int> nblocks(ndev);
  std::vector<cudaStream_t> streams(ndev);
  std::vector<cudaEvent_t> ev0(ndev), ev1(ndev);
  for (int d = 0; d < ndev; d++) {
    RX_CHECK(cudaSetDevice(d));
    RX_CHECK(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking));
    RX_CHECK(cudaEventCreate(&ev0[d]));
    RX_CHECK(cudaEventCreate(&ev1[d]));
    RX_CHECK(rx_alloc(&flags[d], sizeof(unsigned) * (job->nflags + 1) * K));
    std::vector<int> brank, btb, bchan;
    for (int r = d; r < R; r += ndev)
      for (int b = 0; b < job->ntb[r]; b++)
        for (int k = 0; k < K; k++) brank.push_back(r), btb.push_back(b), bchan.push_back(k);
    nblocks[d] = (int)brank.size();
    int per_sm = 0, sms = 0;
    RX_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rx_kernel, job->threads, 0));
    RX_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d));
    if (nblocks[d] > per_sm * sms)
      return snprintf(out->error, sizeof out->error,
                      "GPU %d would need %d resident TBs and holds %d (%d per SM): use more GPUs", d, nblocks[d],
                      per_sm * sms, per_sm), 1;
    int *d_brank, *d_btb, *d_bchan;
    char **d_buf;
    RxFifo *d_fifo;
    RX_CHECK(rx_alloc(&d_brank, sizeof(int) * (nblocks[d] + 1)));
    RX_CHECK(rx_alloc(&d_btb, sizeof(int) * (nblocks[d] + 1)));
    RX_CHECK(cudaMemcpy(d_brank, brank.data(), sizeof(int) * nblocks[d], cudaMemcpyHostToDevice));
    RX_CHECK(cudaMemcpy(d_btb, btb.data(), sizeof(int) * nblocks[d], cudaMemcpyHostToDevice));
    RX_CHECK(rx_alloc(&d_bchan, sizeof(int) * (nblocks[d] + 1)));
    RX_CHECK(cudaMemcpy(d_bchan, bchan.data(), sizeof(int) * nblocks[d], cudaMemcpyHostToDevice));
    RX_CHECK(rx_alloc(&d_buf, sizeof(char *) * 3 * R));
    RX_CHECK(cudaMemcpy(d_buf, buf.data(), sizeof(char *) * 3 * R, cudaMemcpyHostToDevice));
    RX_CHECK(rx_alloc(&d_fifo, sizeof(RxFifo) * (nf + 1)));
    RX_CHECK(cudaMemcpy(d_fifo, fifo.data(), sizeof(RxFifo) * nf, cudaMemcpyHostToDevice));
    RxRun run = {R, job->chunks, job->nmicro, job->nslots, job->dtype, job->op, K, job->count, job->esize,
                 job->slot_bytes, d_buf, d_fifo, flags[d], d_brank, d_btb, d_bchan};
    RX_CHECK(rx_alloc(&runs[d], sizeof run));
    RX_CHECK(cudaMemcpy(runs[d], &run, sizeof run, cudaMemcpyHostToDevice));
  }
  std::vector<double> times;
  for (int it = 0; it <= job->iters; it++) {
    /* Reset: pristine buffers, zero counters and flags, everything settled. */
    for (int r = 0; r < R; r++) {
      RX_CHECK(cudaSetDevice(dev(r)));
      for (int b = 0; b < 3; b++)
        RX_CHECK(cudaMemcpy(buf[r * 3 + b], pristine[r * 3 + b], job->elems[b] * job->esize,
                            cudaMemcpyDeviceToDevice));
    }
    for (size_t k = 0; k < counters.size(); k++) RX_CHECK(cudaMemset(counters[k], 0, sizeof(unsigned long long)));
    for (int d = 0; d < ndev; d++) {
      RX_CHECK(cudaSetDevice(d));
      RX_CHECK(cudaMemset(flags[d], 0, sizeof(unsigned) * (job->nflags + 1) * K));
      RX_CHECK(cudaDeviceSynchronize());
    }
    for (int d = 0; d < ndev; d++) {
      RX_CHECK(cudaSetDevice(d));
      RX_CHECK(cudaEventRecord(ev0[d], streams[d]));
      rx_kernel<<<nblocks[d], job->threads, 0, streams[d]>>>(runs[d]);
      RX_CHECK(cudaGetLastError());
      RX_CHECK(cudaEventRecord(ev1[d], streams[d]));
    }
    double ms = 0;
    for (int d = 0; d < ndev; d++) {
      RX_CHECK(cudaSetDevice(d));
      RX_CHECK(cudaEventSynchronize(ev1[d]));
      float t = 0;
      RX_CHECK(cudaEventElapsedTime(&t, ev0[d], ev1[d]));
      ms = std::max(ms, (double)t);
    }
    if (it == 0) {
      out->first_ms = ms;
      for (int r = 0; r < R; r++) {
        RX_CHECK(cudaSetDevice(dev(r)));
        for (int b = 0; b < 3; b++)
          RX_CHECK(cudaMemcpy(job->result[r * 3 + b], buf[r * 3 + b], job->elems[b] * job->esize,
                              cudaMemcpyDeviceToHost));
      }
    } else {
      times.push_back(ms);
    }
  }
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    out->median_ms = times[times.size() / 2];
  }
  return 0;
}
