/*
** cuda.cuh — the primitive macros for GPUs: the same RX_* vocabulary as
** host.h, so the emitted program is the same text for both executors.
**
** One CUDA block is one TB. A connection is a FIFO of `nslots` slots in the
** receiver's memory; `tail` (slots filled) lives with the receiver and is
** written by the sender, `head` (slots drained) lives with the sender and is
** written by the receiver, so each side polls local memory. Thread 0 waits,
** the whole block moves the data (16-byte vectors when aligned), thread 0
** publishes data after a system-scope fence (a count of what was read needs
** none, see rx_pop). Flags order primitives of one rank
** that sit on different TBs. Every TB of a launch must be resident at once.
** Primitives, TB bodies, the data movers (one per dtype), waits, posts and
** the trace are not inlined: a tile is large, a call is cheap, and a program
** stays quick to compile (inlined movers took NVRTC three times as long;
** waits and posts inlined in every TB body, 2.6 times as long on an 8-rank
** ring all-reduce, for no speed).
**
** Channels and slices: one TB cannot fill an NVLink bundle, so every TB of
** the plan runs as `nblk` blocks, and cuts every tile into `nslice` slices
** (a few per block), each with its own FIFOs and flags. Slices never meet,
** so they are independent copies of the verified plan: slice s of two
** ranges is the same elements only where the ranges are the same, so
** primitives that meet others through different ranges move chunk by chunk
** (analyse.c's Plan.split; a chunk's slices are the same in any call). A TB's blocks take
** its units, (entry, micro-batch, slice), in that order from a shared
** counter, each after the slice's previous unit is done: blocks that move
** faster take more, instead of all waiting for the slowest (on 2xH200 one
** slice per block left the last block of a 1 GiB all-reduce ending 40%
** after the first). Taking units in one order in every TB keeps the plan
** deadlock-free: a unit waits only for units of its own slice that come
** before it in the plan's order, or for earlier units of its TB.
**
** Calls follow one another without any reset: FIFO counters run on from
** call to call, and flags count micro-batches from the plan's load (only
** what the copy engine shares is zeroed per call, on the GPU): each
** block keeps its count of calls and of their micro-batches in its RxBlock,
** so a replayed CUDA graph runs right. A wait that lasts past the call's timeout
** raises the plan's stop flag; every TB then skips its remaining waits, so
** the kernel ends and the runtime reports the timeout.
*/
#ifndef RX_CUDA_CUH
#define RX_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef struct {
  const RxRun *run;
  const RxArgs *a;
  int rank, tb, chan;       /* chan: the block's index among its TB's */
  int slice, e, ent, m;     /* the unit running: slice, entry (RX_FOR_M loop) and micro-batch; ent counts loops */
  unsigned next;            /* without turns: the block's next unit of its own slice */
  int stopped;              /* thread 0: a wait gave up, the rest of the call is skipped */
  unsigned long long since; /* thread 0: when the current wait started */
  unsigned long long ready; /* thread 0: peers known to run this call (direct sends, pulls) */
  unsigned base, call;      /* flag counts before this call; this call's number (from its RxBlock) */
  unsigned taken;           /* units its TB's blocks took before this call (its RxBlock) */
  int prim;                 /* the primitive running (RX_AT), for the trace */
  RxGeom g;                 /* the call's layout (tile.h) */
} RxCtx;

__device__ static inline unsigned long long rx_ld(const unsigned long long *p) {
  return *(volatile const unsigned long long *)p;
}

/* Fences for passing messages: release before a store that tells another
   block or GPU that data is there. No message here needs the sequentially
   consistent fence that __threadfence_system() is, which costs more
   (docs/journal/gpu-2026-12-01.md). A wait where reads of another GPU's data follow polls
   with an acquiring load: LDG.STRONG.SYS and an L1 invalidation, where the
   fence after a plain poll is a MEMBAR.ALL.SYS too (up to 0.7 us a call). */
__device__ static inline void rx_fence_sys(void) { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ static inline void rx_fence_gpu(void) { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
__device__ static inline unsigned rx_ld_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ static inline unsigned long long rx_ld_acquire_gpu(const unsigned long long *p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ static inline void rx_st(unsigned long long *p, unsigned long long v) {
  rx_fence_sys();
  *(volatile unsigned long long *)p = v;
}

__device__ static inline unsigned long long rx_clock_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Thread 0, with RESCCL_TRACE: one event of this block, begun at t0. */
__device__ static __noinline__ void rx_trace(const RxCtx *x, int kind, unsigned long long t0) {
  unsigned long long *t = x->run->trace;
  if (!t || threadIdx.x) return;
  t += (size_t)blockIdx.x * RX_TRACE_WORDS;
  unsigned long long h = t[0], n = h & 0xffffffffu; /* the block's SM above its event count */
  if (n >= RX_TRACE_EVENTS) return;
  t[1 + 3 * n] = (unsigned long long)x->prim << 40 | (unsigned long long)x->slice << 24 | (unsigned long long)x->m << 4 |
                 (unsigned)kind;
  t[2 + 3 * n] = t0, t[3 + 3 * n] = rx_clock_ns();
  t[0] = h + 1;
}

/* Thread 0, spinning: 1 when it must stop waiting, because another TB gave
   up or this wait has lasted past the timeout. Checked every 1024 spins. */
__device__ static inline int rx_give_up(RxCtx *x, unsigned *spins) {
  if (x->stopped) return 1;
  if (++*spins % 1024) return 0;
  if (*x->run->stop) return x->stopped = 1;
  unsigned long long now = rx_clock_ns();
  if (*spins == 1024) x->since = now;
  else if (x->a->timeout_ns && now - x->since > x->a->timeout_ns) {
    *x->run->stop = 1;
    rx_fence_sys();
    return x->stopped = 1;
  }
  return 0;
}

/* One thread: the copy-engine barrier (cuda_abi.h's RxSync). Stream order
   put everything before it on this GPU done; the fence publishes that, and
   the zeroed flags (the barrier before a call's copies is given them),
   before the count does. Past the timeout it raises the stop flag. */
extern "C" __global__ void rx_ce_sync(const __grid_constant__ RxSync s) {
  volatile unsigned *mine = s.word[s.me];
  unsigned c = *mine + 1, spins = 0;
  unsigned long long t0 = rx_clock_ns();
  for (int f = 0; f < s.nflags; f++) ((volatile unsigned *)s.flags)[f] = 0;
  for (int k = 0; k < s.nposts; k++) ((volatile unsigned *)s.posts)[k] = 0;
  rx_fence_sys();
  *mine = c;
  for (int d = 0; d < s.ndev; d++)
    while (d != s.me && (int)(*(volatile unsigned *)s.word[d] - c) < 0)
      if (++spins % 1024 == 0 && (*s.stop || (s.timeout_ns && rx_clock_ns() - t0 > s.timeout_ns))) {
        if (!*s.stop) *s.stop = 1; /* a timeout; an abort's word stays */
        rx_fence_sys();
        return;
      }
}

/* Element range of chunks [idx, idx+cnt) in micro-batch m (tile.h), then
   the unit's slice of it, on whole vectors too. */
__device__ static inline void rx_tile(const RxCtx *x, int idx, int cnt, int m, size_t *lo, size_t *n) {
  size_t t, v = x->g.v, K = (size_t)x->a->nslice, k = (size_t)x->slice;
  rx_span_g(&x->g, idx, cnt, m, lo, &t);
  size_t b = rx_cut(t, v, k, K);
  *lo += b;
  *n = rx_cut(t, v, k + 1, K) - b;
}

/* rx_tile of up to four chunk ranges (a range < 0 is skipped), one per
   thread of the second warp (while thread 0 may wait for a peer), and
   shared; *n is the size of the last of the first three. The index
   arithmetic is long, and every warp doing it cost each micro-batch
   microseconds. */
__device__ static void rx_tiles4(const RxCtx *x, int cnt, int m, int a, int b, int c, int d, size_t *la, size_t *lb,
                                 size_t *lc, size_t *ld, size_t *n) {
  __shared__ size_t s[5];
  const unsigned i = threadIdx.x - (blockDim.x > 32 ? 32 : 0);
  if (i < 4) {
    const int r = i == 0 ? a : i == 1 ? b : i == 2 ? c : d;
    size_t t;
    if (r >= 0) rx_tile(x, r, cnt, m, &s[i], &t);
    else s[i] = 0;
    if (r >= 0 && (int)i == (c >= 0 ? 2 : b >= 0 ? 1 : 0)) s[4] = t;
  }
  __syncthreads();
  *la = s[0], *lb = s[1], *lc = s[2], *ld = s[3], *n = s[4];
  __syncthreads(); /* read before the next are computed */
}

__device__ static inline void rx_tiles(const RxCtx *x, int cnt, int m, int a, int b, int c, size_t *la, size_t *lb,
                                       size_t *lc, size_t *n) {
  size_t unused;
  rx_tiles4(x, cnt, m, a, b, c, -1, la, lb, lc, &unused, n);
}

__device__ static inline const RxFifo *rx_fifo(const RxCtx *x, int c) { return &x->run->fifo[c * x->run->nslice + x->slice]; }
__device__ static inline unsigned *rx_flag(const RxCtx *x, int f) { return &x->run->flag[f * x->run->nslice + x->slice]; }

__device__ static inline char *rx_at(RxCtx *x, int buf, size_t elem) {
  return x->a->buf[x->rank][buf] + elem * x->a->esize;
}

/* a (op) b, avg adding; rx_div is avg's division of a completed sum (see
   src/core.h). Integers add and multiply in their unsigned type U, so that
   overflow wraps around (NCCL's semantics, and no undefined behaviour), and
   divide truncating. */
#define RX_ARITH(T, U)                                   \
  __device__ static inline T rx_op(int op, T a, T b) {  \
    switch (op) {                                        \
    case RX_PROD: return (T)((U)a * (U)b);               \
    case RX_MAX: return a > b ? a : b;                   \
    case RX_MIN: return a < b ? a : b;                   \
    default: return (T)((U)a + (U)b);                    \
    }                                                    \
  }
RX_ARITH(int8_t, uint8_t)
RX_ARITH(uint8_t, uint8_t)
RX_ARITH(int32_t, uint32_t)
RX_ARITH(uint32_t, uint32_t)
RX_ARITH(int64_t, uint64_t)
RX_ARITH(uint64_t, uint64_t)
RX_ARITH(float, float)
RX_ARITH(double, double)

/* A float over the rank count, a / n rounded to nearest as a division
   rounds it, in three operations where a division takes about ten and a
   branch: q = a (1/n), then Markstein's correction q + (a - qn) (1/n), the
   remainder exact in an fma (1/n is loop-invariant, worked out once a tile).
   Exact unless a / n is subnormal (then within an ulp). */
__device__ static inline float rx_div(float a, int n) {
  const float y = 1.0f / (float)n, q = a * y;
  return fmaf(fmaf(-q, (float)n, a), y, q);
}
__device__ static inline double rx_div(double a, int n) {
  const double y = 1.0 / (double)n, q = a * y;
  return fma(fma(-q, (double)n, a), y, q);
}

/* Integers divide truncating. 8- and 32-bit ones go through float and
   double: the quotient rounded to nearest is off by less than 1/n while
   |a| < 2^24 (2^53), so it truncates to a / n. An integer division by a
   variable is about twenty instructions, and avg's made the i8 and u8
   movers the slowest to build (docs/journal/gpu-2026-12-01.md). 64-bit ones divide. */
#define RX_IDIV(T, F) \
  __device__ static inline T rx_div(T a, int n) { return (T)rx_div((F)a, n); }
RX_IDIV(int8_t, float)
RX_IDIV(uint8_t, float)
RX_IDIV(int32_t, double)
RX_IDIV(uint32_t, double)
__device__ static inline int64_t rx_div(int64_t a, int n) { return a / n; }
__device__ static inline uint64_t rx_div(uint64_t a, int n) { return a / (uint64_t)n; }

/* f16 and bf16 compute in float and round to nearest even, as the host does. */
#define RX_HALF(T, TO, FROM)                                                                   \
  __device__ static inline T rx_op(int op, T a, T b) { return FROM(rx_op(op, TO(a), TO(b))); } \
  __device__ static inline T rx_div(T a, int n) { return FROM(rx_div(TO(a), n)); }
RX_HALF(__half, __half2float, __float2half_rn)
RX_HALF(__nv_bfloat16, __bfloat162float, __float2bfloat16_rn)

/* Loads that bypass L1: FIFO slots are rewritten by the peer GPU, and L1 is not coherent. */
__device__ static inline int4 rx_ld16(const int4 *p) { return __ldcg(p); }

#ifndef RX_THREADS
#define RX_THREADS 512 /* threads per block the kernel is built for (the runtime sets it) */
#endif

/* 16-byte loads in flight per thread, for reductions (two operands) and
   copies. On 2xH200 a block reduces 32 GB/s of output with 8 (4 per
   operand) and 40 with 16, what an SM moves at most (tools/probes/probe-reduce.cu):
   16 for reductions gained 11-15% on reduce-scatter from 128 MiB and 3-6%
   with the copy engine pushing, 16 for copies lost 7% on all-gather
   (docs/journal/gpu-2026-11-30.md). 16 takes NVRTC about 1.4x as long. Blocks of 1024
   threads get 8, the same loads in flight a block: with 16 their 64
   registers a thread spilled, and a bf16 reduce-scatter fell from 269 to
   119 GB/s on one H200. -DRX_UNROLL=8 in RESCCL_NVRTC_OPTIONS asks for
   fewer. */
#ifndef RX_UNROLL
#define RX_UNROLL (RX_THREADS > 512 ? 8 : 16)
#endif
#ifndef RX_UNROLL_COPY
#define RX_UNROLL_COPY 8
#endif

/* Plain copies of aligned data go 16 bytes at a time, several loads in flight. */
__device__ static __noinline__ void rx_copy16(char *out, const char *in, size_t bytes, char *fwd) {
  size_t head = 0;
  if (((uintptr_t)out | (uintptr_t)in | (uintptr_t)fwd) % 16 == 0) {
    int4 *o = (int4 *)out, *f = (int4 *)fwd;
    const int4 *s = (const int4 *)in;
    size_t nv = bytes / 16, i = threadIdx.x, step = blockDim.x;
    for (; i + (RX_UNROLL_COPY - 1) * step < nv; i += RX_UNROLL_COPY * step) {
      int4 v[RX_UNROLL_COPY];
#pragma unroll
      for (int u = 0; u < RX_UNROLL_COPY; u++) v[u] = rx_ld16(s + i + u * step);
#pragma unroll
      for (int u = 0; u < RX_UNROLL_COPY; u++) {
        o[i + u * step] = v[u];
        if (f) f[i + u * step] = v[u];
      }
    }
    for (; i < nv; i += step) {
      int4 v = rx_ld16(s + i);
      o[i] = v;
      if (f) f[i] = v;
    }
    head = nv * 16;
  }
  /* What is left (or everything, when misaligned) byte by byte. */
  for (size_t i = head + threadIdx.x; i < bytes; i += blockDim.x) {
    char v = ((volatile const char *)in)[i];
    out[i] = v;
    if (fwd) fwd[i] = v;
  }
}

/* a (op) b, divided by div unless it is 0. */
template <typename T> __device__ static inline T rx_red(int op, int div, T a, T b) {
  T v = rx_op(op, a, b);
  return div ? rx_div(v, div) : v;
}

/* A 16-byte vector: loaded whole, reduced as words or elements. */
template <typename T> union RxVec {
  int4 raw;
  unsigned u[4];
  T e[16 / sizeof(T)];
};

template <int OP, typename T, int K> __device__ static inline void rx_apply(RxVec<T> (&x)[K], const RxVec<T> (&y)[K]) {
#pragma unroll
  for (int k = 0; k < K; k++)
#pragma unroll
    for (int j = 0; j < (int)(16 / sizeof(T)); j++) x[k].e[j] = rx_op(OP, x[k].e[j], y[k].e[j]);
}

/* Bytes four to a word: modular sums, signed or unsigned max and min in one
   instruction per word, as rx_op gives them element by element. */
__device__ static inline unsigned rx_vmax4(int8_t, unsigned a, unsigned b) { return __vmaxs4(a, b); }
__device__ static inline unsigned rx_vmax4(uint8_t, unsigned a, unsigned b) { return __vmaxu4(a, b); }
__device__ static inline unsigned rx_vmin4(int8_t, unsigned a, unsigned b) { return __vmins4(a, b); }
__device__ static inline unsigned rx_vmin4(uint8_t, unsigned a, unsigned b) { return __vminu4(a, b); }

template <int OP, typename B, int K> __device__ static inline void rx_apply_bytes(RxVec<B> (&x)[K], const RxVec<B> (&y)[K]) {
#pragma unroll
  for (int k = 0; k < K; k++) {
    unsigned *a = x[k].u;
    const unsigned *b = y[k].u;
#pragma unroll
    for (int w = 0; w < 4; w++)
      a[w] = OP == RX_MAX   ? rx_vmax4(B(), a[w], b[w])
             : OP == RX_MIN ? rx_vmin4(B(), a[w], b[w])
             : OP == RX_SUM ? __vadd4(a[w], b[w])
                            : a[w];
    if (OP == RX_PROD)
#pragma unroll
      for (int j = 0; j < 16; j++) x[k].e[j] = rx_op(RX_PROD, x[k].e[j], y[k].e[j]);
  }
}
template <int OP, int K> __device__ static inline void rx_apply(RxVec<int8_t> (&x)[K], const RxVec<int8_t> (&y)[K]) {
  rx_apply_bytes<OP>(x, y);
}
template <int OP, int K> __device__ static inline void rx_apply(RxVec<uint8_t> (&x)[K], const RxVec<uint8_t> (&y)[K]) {
  rx_apply_bytes<OP>(x, y);
}

/* f16 and bf16 two to a word (__half2, __nv_bfloat162), one instruction a
   pair, as NCCL reduces them: a sum rounds once, to nearest even, where
   rx_op's float sum rounded again can differ in the last bit (rarely, and
   never on the checks' exact values); products are the same; max and min of
   a NaN give the other operand. Converting each element to float and
   back, bf16 reduced 12% less per byte than f32 on one H200 (docs/journal/gpu-2026-12-01.md). */
template <int OP, typename P> __device__ static inline P rx_pair(P a, P b) {
  return OP == RX_PROD ? __hmul2(a, b) : OP == RX_MAX ? __hmax2(a, b) : OP == RX_MIN ? __hmin2(a, b) : __hadd2(a, b);
}
__device__ static inline __half2 rx_two(__half a, __half b) { return __halves2half2(a, b); }
__device__ static inline __nv_bfloat162 rx_two(__nv_bfloat16 a, __nv_bfloat16 b) { return __halves2bfloat162(a, b); }
__device__ static inline void rx_untwo(__half2 v, __half *e) { e[0] = __low2half(v), e[1] = __high2half(v); }
__device__ static inline void rx_untwo(__nv_bfloat162 v, __nv_bfloat16 *e) {
  e[0] = __low2bfloat16(v), e[1] = __high2bfloat16(v);
}
template <int OP, typename H, int K>
__device__ static inline void rx_apply_pairs(RxVec<H> (&x)[K], const RxVec<H> (&y)[K]) {
#pragma unroll
  for (int k = 0; k < K; k++)
#pragma unroll
    for (int j = 0; j < 8; j += 2)
      rx_untwo(rx_pair<OP>(rx_two(x[k].e[j], x[k].e[j + 1]), rx_two(y[k].e[j], y[k].e[j + 1])), &x[k].e[j]);
}
template <int OP, int K> __device__ static inline void rx_apply(RxVec<__half> (&x)[K], const RxVec<__half> (&y)[K]) {
  rx_apply_pairs<OP>(x, y);
}
template <int OP, int K>
__device__ static inline void rx_apply(RxVec<__nv_bfloat16> (&x)[K], const RxVec<__nv_bfloat16> (&y)[K]) {
  rx_apply_pairs<OP>(x, y);
}

/* x = x (op) y over K vectors, divided by div unless it is 0: the op is
   chosen once per K vectors, not per element (which made NVRTC six times
   slower and cost registers). */
template <typename T, int K>
__device__ static inline void rx_combine(int op, int div, RxVec<T> (&x)[K], const RxVec<T> (&y)[K]) {
  switch (op) {
  case RX_PROD: rx_apply<RX_PROD>(x, y); break;
  case RX_MAX: rx_apply<RX_MAX>(x, y); break;
  case RX_MIN: rx_apply<RX_MIN>(x, y); break;
  default: rx_apply<RX_SUM>(x, y); break;
  }
  if (div)
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
      for (int j = 0; j < (int)(16 / sizeof(T)); j++) x[k].e[j] = rx_div(x[k].e[j], div);
}

/* out[i] = operand[i] (+) in[i], divided by div unless it is 0; the block
   strides, V elements per 16-byte access when aligned. */
template <typename T>
__device__ static __noinline__ void rx_move_t(T *out, const T *operand, const T *in, size_t n, int op, int div, T *fwd) {
  const int V = 16 / sizeof(T);
  size_t head = 0;
  if (((uintptr_t)out | (uintptr_t)operand | (uintptr_t)in | (uintptr_t)fwd) % 16 == 0) {
    size_t nv = n / V, i = threadIdx.x, step = blockDim.x;
    const int4 *u4 = (const int4 *)operand, *s4 = (const int4 *)in;
    int4 *o4 = (int4 *)out, *f4 = (int4 *)fwd;
    for (; i + (RX_UNROLL / 2 - 1) * step < nv; i += RX_UNROLL / 2 * step) {
      RxVec<T> x[RX_UNROLL / 2], y[RX_UNROLL / 2];
#pragma unroll
      for (int k = 0; k < RX_UNROLL / 2; k++) x[k].raw = rx_ld16(u4 + i + k * step), y[k].raw = rx_ld16(s4 + i + k * step);
      rx_combine(op, div, x, y);
#pragma unroll
      for (int k = 0; k < RX_UNROLL / 2; k++) {
        o4[i + k * step] = x[k].raw;
        if (f4) f4[i + k * step] = x[k].raw;
      }
    }
    for (; i < nv; i += step) {
      RxVec<T> x[1], y[1];
      x[0].raw = rx_ld16(u4 + i), y[0].raw = rx_ld16(s4 + i);
      rx_combine(op, div, x, y);
      o4[i] = x[0].raw;
      if (f4) f4[i] = x[0].raw;
    }
    head = nv * V;
  }
  for (size_t i = head + threadIdx.x; i < n; i += blockDim.x) {
    T v = rx_red(op, div, __ldcg(operand + i), __ldcg(in + i));
    out[i] = v;
    if (fwd) fwd[i] = v;
  }
}

/* The dtypes the kernel reduces, a bit each (RESCCL_DTYPES): their movers
   are most of its build, and the runtime refuses calls of the others. */
#ifndef RX_DTYPES
#define RX_DTYPES 0xffffffffu
#endif
template <int D, typename T>
__device__ static inline void rx_move_d(T *out, const T *operand, const T *in, size_t n, int op, int div, T *fwd) {
  if constexpr ((RX_DTYPES >> D & 1) != 0) rx_move_t<T>(out, operand, in, n, op, div, fwd);
}

/* Move n elements: out = in, or out = operand (+) in; also write them to fwd.
   `done`: the reduction completes the values, so avg divides them here,
   before they are stored or forwarded (see src/core.h). */
__device__ static inline void rx_move(const RxArgs *r, char *out, const char *operand, const char *in, size_t n,
                                      int done, char *fwd) {
  if (!operand) return rx_copy16(out, in, n * r->esize, fwd);
  int div = done && r->op == RX_AVG ? r->nranks : 0;
  switch (r->dtype) {
#define RX_CASE(D, T) \
  case D: return rx_move_d<D, T>((T *)out, (const T *)operand, (const T *)in, n, r->op, div, (T *)fwd);
  RX_CASE(RX_I8, int8_t)
  RX_CASE(RX_U8, uint8_t)
  RX_CASE(RX_I32, int32_t)
  RX_CASE(RX_U32, uint32_t)
  RX_CASE(RX_I64, int64_t)
  RX_CASE(RX_U64, uint64_t)
  RX_CASE(RX_F16, __half)
  RX_CASE(RX_F32, float)
  RX_CASE(RX_F64, double)
  RX_CASE(RX_BF16, __nv_bfloat16)
#undef RX_CASE
  }
}

__device__ static __noinline__ void rx_wait(RxCtx *x, int f, int m) {
  unsigned spins = 0, want = x->base + (unsigned)m + 1;
  unsigned long long t0 = x->run->trace ? rx_clock_ns() : 0;
  if (threadIdx.x == 0)
    while ((int)(*(volatile unsigned *)rx_flag(x, f) - want) < 0 && !rx_give_up(x, &spins)) {
    }
  if (t0) rx_trace(x, 0, t0);
  __syncthreads();
}

/* Wait until the copy engine has put micro-batch m of the copy with flag f
   (offload.c): its stream posts m + 1 after each. */
__device__ static __noinline__ void rx_ce_wait(RxCtx *x, int f, int m) {
  unsigned spins = 0;
  unsigned long long t0 = x->run->trace ? rx_clock_ns() : 0;
  if (threadIdx.x == 0) {
    const unsigned *w = x->run->ceflag[f]; /* the data is read after it (another GPU's copy stream wrote both) */
    while (rx_ld_acquire(w) < (unsigned)m + 1 && !rx_give_up(x, &spins)) {
    }
  }
  if (t0) rx_trace(x, 0, t0);
  __syncthreads();
}

__device__ static __noinline__ void rx_post(RxCtx *x, int f, int m) {
  __syncthreads();
  if (threadIdx.x == 0) {
    rx_fence_gpu();
    *(volatile unsigned *)rx_flag(x, f) = x->base + (unsigned)m + 1;
  }
}

/* The block wrote its unit of micro-batch m of what a copy-engine copy
   reads: count it on counter k; the copy stream waits until every slice is
   counted. The system fence puts the writes before the count for the copy
   engine. Posted even after a wait gave up, so the copy stream ends too. */
__device__ static __noinline__ void rx_ce_post(RxCtx *x, int k, int m) {
  __syncthreads();
  if (threadIdx.x == 0) {
    rx_fence_sys();
    atomicAdd(&x->a->posts[(size_t)m * (unsigned)x->a->ncounters + (unsigned)k], 1u);
  }
}

/* Thread 0 waits until connection c has a free slot; everyone gets its address. */
__device__ static inline char *rx_slot_out(RxCtx *x, int c, unsigned long long *seq) {
  __shared__ unsigned long long s_tail;
  const RxFifo *f = rx_fifo(x, c);
  if (threadIdx.x == 0) {
    unsigned long long t = rx_ld(f->sent);
    unsigned spins = 0;
    while (t - rx_ld(f->head) >= (unsigned long long)x->run->nslots && !rx_give_up(x, &spins)) {
    }
    s_tail = t;
  }
  __syncthreads();
  *seq = s_tail;
  return f->slots + (size_t)(s_tail % x->run->nslots) * x->run->slot_bytes;
}

__device__ static inline const char *rx_slot_in(RxCtx *x, int c, unsigned long long *seq) {
  __shared__ unsigned long long s_head;
  const RxFifo *f = rx_fifo(x, c);
  if (threadIdx.x == 0) {
    unsigned long long h = rx_ld(f->taken);
    unsigned spins = 0;
    while (rx_ld(f->tail) == h && !rx_give_up(x, &spins)) {
    }
    s_head = h;
  }
  __syncthreads();
  *seq = s_head;
  return f->slots + (size_t)(s_head % x->run->nslots) * x->run->slot_bytes;
}

/* Thread 0, after the block's writes to slot (or put) v - 1 of connection c:
   publish it (system-scope fence first), and keep the sender's copy. */
__device__ static inline void rx_push(RxCtx *x, int c, unsigned long long v) {
  const RxFifo *f = rx_fifo(x, c);
  rx_st(f->tail, v);
  *(volatile unsigned long long *)f->sent = v;
}

/* Thread 0, after the block's reads of slot v - 1 of connection c: free it.
   No fence, as a count of what was read needs none (NCCL's receivers post
   theirs so): every read of the slot returned its value before the block's
   barrier (the block stored what it read), so no write after the count
   can change it. Every primitive that reads a slot or a peer's buffer must
   keep that so: store what it read before the barrier ahead of the count
   (rx_recv_put's and rx_pull_end's counts rely on it too). */
__device__ static inline void rx_pop(RxCtx *x, int c, unsigned long long v) {
  const RxFifo *f = rx_fifo(x, c);
  *(volatile unsigned long long *)f->head = v;
  *(volatile unsigned long long *)f->taken = v;
}

/* The whole block, after its writes: publish (see rx_push). */
__device__ static inline void rx_publish(RxCtx *x, int c, unsigned long long v) {
  __syncthreads();
  if (threadIdx.x == 0) rx_push(x, c, v);
}

/* Send (buf, idx) on cout; a copy-send (wbuf >= 0) also keeps a copy at (wbuf, widx). */
__device__ static __noinline__ void rx_send(RxCtx *x, int cout, int buf, int idx, int wbuf, int widx, int cnt, int m) {
  size_t lo, wlo, n, unused, per = x->run->slot_bytes / x->a->esize;
  rx_tiles(x, cnt, m, wbuf >= 0 ? widx : -1, idx, -1, &wlo, &lo, &unused, &n);
  for (size_t k = 0; k < n; k += per) {
    size_t w = n - k < per ? n - k : per;
    unsigned long long seq;
    char *s = rx_slot_out(x, cout, &seq);
    if (wbuf >= 0) rx_move(x->a, rx_at(x, wbuf, wlo + k), NULL, rx_at(x, buf, lo + k), w, 0, s);
    else rx_move(x->a, s, NULL, rx_at(x, buf, lo + k), w, 0, NULL);
    rx_publish(x, cout, seq + 1);
  }
}

/* Receive into (wbuf, widx), reducing with (ubuf, uidx) when ubuf >= 0; forward on cout. */
__device__ static __noinline__ void rx_recv(RxCtx *x, int cin, int cout, int ubuf, int uidx, int wbuf, int widx, int cnt,
                                            int done, int m) {
  size_t lo, ulo, n, unused, per = x->run->slot_bytes / x->a->esize;
  /* n: the size of what arrives */
  rx_tiles(x, cnt, m, ubuf >= 0 ? uidx : -1, wbuf >= 0 ? widx : -1, -1, &ulo, &lo, &unused, &n);
  for (size_t k = 0; k < n; k += per) {
    size_t w = n - k < per ? n - k : per;
    unsigned long long in_seq, out_seq = 0;
    const char *s = rx_slot_in(x, cin, &in_seq);
    char *o = cout >= 0 ? rx_slot_out(x, cout, &out_seq) : NULL;
    /* wbuf < 0 (recvReduceSend) keeps nothing: the result goes straight into the slot. */
    char *d = wbuf >= 0 ? rx_at(x, wbuf, lo + k) : o;
    rx_move(x->a, d, ubuf >= 0 ? rx_at(x, ubuf, ulo + k) : NULL, s, w, done, d == o ? NULL : o);
    __syncthreads();
    if (threadIdx.x == 0) {
      if (cout >= 0) rx_push(x, cout, out_seq + 1);
      rx_pop(x, cin, in_seq + 1);
    }
  }
}

/* The first warp of the rank's first block: the kernel of this rank runs
   call `call`, so peers may now read its input and write into its buffers.
   Told into every rank's memory, a lane a rank, so that a sender waits on
   its own. No fence before: the block did nothing yet, and what a peer may
   then read was written, and what it may write over was read, before this
   kernel began (stream order performs a kernel's memory operations before
   the next starts); a fence here took 1500 cycles of the start (docs/journal/gpu-2026-12-01.md). */
__device__ static inline void rx_started(RxCtx *x) {
  for (int p = (int)threadIdx.x; p < x->a->nranks; p += 32) ((volatile unsigned *)x->run->started[p])[x->rank] = x->call;
}

/* Thread 0: wait until rank `peer`'s kernel runs this call. Its buffers
   then hold the call's input (a pull may read them), and nothing in the
   program touched their destinations yet (a put may write them). Returns 1
   when it gave up. */
__device__ static int rx_peer_runs(RxCtx *x, int peer) {
  if (!(x->ready >> peer & 1)) {
    const unsigned *w = x->run->started[x->rank] + peer; /* what the block reads from the peer comes after it */
    unsigned spins = 0;
    while ((int)(rx_ld_acquire(w) - x->call) < 0 && !rx_give_up(x, &spins)) {
    }
    x->ready |= 1ull << peer;
  }
  return x->stopped;
}

/*
** Direct: write the tile straight into the receiver's buffer at (dbuf, didx)
** and count it on the connection, once the receiver's kernel runs this call
** (its buffer is then free: nothing in the program touched it before). A
** plain send puts what it reads; a copy-send keeps a copy at (wbuf, widx)
** too. A put whose reduction no other TB waits for (`last`) lands in
** pieces in the call's last micro-batch (tile.h's rx_piece), and its
** receiver cuts alike. Without every rank's buffers (ranks not called
** together) it is a plain send or copy-send through the FIFO.
*/
__device__ static __noinline__ void rx_put(RxCtx *x, int cout, int peer, int buf, int idx, int wbuf, int widx, int dbuf,
                                           int didx, int cnt, int last, int m) {
  if (!x->a->direct) return rx_send(x, cout, buf, idx, wbuf, widx, cnt, m);
  __shared__ unsigned long long s_seq;
  __shared__ int s_stop;
  if (threadIdx.x == 0) {
    s_stop = rx_peer_runs(x, peer);
    s_seq = rx_ld(rx_fifo(x, cout)->sent);
  }
  /* n: the size of what lands; the barriers publish s_stop and s_seq */
  size_t lo, wlo, dlo, n;
  rx_tiles(x, cnt, m, wbuf >= 0 ? widx : -1, idx, didx, &wlo, &lo, &dlo, &n);
  size_t per = rx_piece(n, x->a->esize, x->run->slot_bytes, last, x->a->count, (size_t)x->run->chunks, (size_t)m,
                        (size_t)x->a->nmicro);
  const int stop = s_stop;
  unsigned long long seq = s_seq;
  __syncthreads(); /* read before thread 0 writes them for the next put */
  if (stop) return; /* the peer may still be in its previous call: leave its buffers alone */
  char *dst = x->a->buf[peer][dbuf];
  for (size_t k = 0; k < n; k += per, seq++) {
    size_t w = n - k < per ? n - k : per;
    char *d = dst + (dlo + k) * x->a->esize;
    if (wbuf >= 0) rx_move(x->a, rx_at(x, wbuf, wlo + k), NULL, rx_at(x, buf, lo + k), w, 0, d);
    else rx_move(x->a, d, NULL, rx_at(x, buf, lo + k), w, 0, NULL);
    rx_publish(x, cout, seq + 1);
  }
}

/* The receiving end of a put: wait for each piece and count it drained;
   reduce it in place with (ubuf, uidx) when ubuf >= 0 (every op commutes). */
__device__ static __noinline__ void rx_recv_put(RxCtx *x, int cin, int ubuf, int uidx, int wbuf, int widx, int cnt,
                                                int done, int last, int m) {
  if (!x->a->direct) return rx_recv(x, cin, -1, ubuf, uidx, wbuf, widx, cnt, done, m);
  size_t lo, ulo, n, unused;
  rx_tiles(x, cnt, m, ubuf >= 0 ? uidx : -1, widx, -1, &ulo, &lo, &unused, &n); /* n: the size of what lands */
  size_t per = rx_piece(n, x->a->esize, x->run->slot_bytes, last, x->a->count, (size_t)x->run->chunks, (size_t)m,
                        (size_t)x->a->nmicro);
  for (size_t k = 0; k < n; k += per) {
    size_t w = n - k < per ? n - k : per;
    unsigned long long seq;
    rx_slot_in(x, cin, &seq);
    if (ubuf >= 0) {
      char *d = rx_at(x, wbuf, lo + k);
      rx_move(x->a, d, rx_at(x, ubuf, ulo + k), d, w, done, NULL);
    }
    __syncthreads();
    /* Counted drained as rx_pop counts, without a fence. The count frees
       slot index seq % nslots for a later slot send on this connection;
       what was last read from that slot was read before the barrier ahead
       of the count that drained it, in whichever block of the TB did. */
    if (threadIdx.x == 0) {
      const RxFifo *f = rx_fifo(x, cin);
      *(volatile unsigned long long *)f->head = seq + 1;
      *(volatile unsigned long long *)f->taken = seq + 1;
    }
  }
}

__device__ static __noinline__ void rx_local(RxCtx *x, int rbuf, int ridx, int ubuf, int uidx, int wbuf, int widx, int cnt,
                                             int done, int m) {
  size_t slo, ulo, dlo, n;
  rx_tiles(x, cnt, m, ubuf >= 0 ? uidx : -1, ridx, widx, &ulo, &slo, &dlo, &n);
  rx_move(x->a, rx_at(x, wbuf, dlo), ubuf >= 0 ? rx_at(x, ubuf, ulo) : NULL, rx_at(x, rbuf, slo), n, done, NULL);
  __syncthreads();
}

/* A pull (pull.c): once rank `peer`'s kernel runs the call,
   copy what its (rbuf, ridx) holds to (wbuf, widx), or reduce it with
   (ubuf, uidx) when ubuf >= 0: over the link, in one pass. With to >= 0
   (put_on), store the result at rank to's (dbuf, didx) too, once its kernel
   runs the call. The runtime runs a plan that pulls only with every rank's
   buffers (RxArgs.direct). */
__device__ static __noinline__ void rx_pull(RxCtx *x, int peer, int rbuf, int ridx, int ubuf, int uidx, int wbuf,
                                            int widx, int to, int dbuf, int didx, int cnt, int done, int m) {
  __shared__ int s_stop;
  if (threadIdx.x == 0) s_stop = rx_peer_runs(x, peer) || (to >= 0 && rx_peer_runs(x, to));
  size_t slo, ulo, dlo, flo, n;
  rx_tiles4(x, cnt, m, ubuf >= 0 ? uidx : -1, ridx, widx, to >= 0 ? didx : -1, &ulo, &slo, &dlo, &flo, &n);
  if (s_stop) { /* (the barriers above published it) */
    __syncthreads(); /* read before thread 0 writes it for the next pull */
    return;
  }
  rx_move(x->a, rx_at(x, wbuf, dlo), ubuf >= 0 ? rx_at(x, ubuf, ulo) : NULL,
          x->a->buf[peer][rbuf] + slo * x->a->esize, n, done, to >= 0 ? x->a->buf[to][dbuf] + flo * x->a->esize : NULL);
  __syncthreads();
}

/* At the end of a call of a plan that pulls, after the block's barrier:
   thread 0 tells every other rank that the block's reads of their buffers
   in this call are over, in a word of its own in their memory (stores
   only: not every pair of GPUs has atomics across its link). The first
   warp of the rank's first block then waits until every block of every
   other rank has said so (until then they may read its buffers), a lane
   per word. Words count calls, so a replayed CUDA graph runs right. */
__device__ static void rx_pull_end(RxCtx *x, int word, int puts) {
  const RxRun *run = x->run;
  if (threadIdx.x == 0) {
    /* No fence for reads: they returned their values before the block's
       barrier (rx_pop). Puts that no receive waits for (put_on) land before
       the word says so: a release, cumulative over the barrier. */
    if (puts) rx_fence_sys();
    for (int p = 0; p < run->nranks; p++)
      if (p != x->rank) ((volatile unsigned *)run->finished[p])[word] = x->call;
  }
  if (x->tb || x->chan || threadIdx.x >= 32) return;
  const volatile unsigned *fin = run->finished[x->rank];
  for (int p = 0; p < run->nranks; p++) {
    if (p == x->rank) continue;
    for (int j = run->first[p] + (int)threadIdx.x, e = run->first[p + 1]; j < e; j += 32) {
      unsigned spins = 0;
      while ((int)(fin[j] - x->call) < 0 && !rx_give_up(x, &spins)) {
      }
    }
  }
  if (puts) rx_fence_sys(); /* the acquire: what the peers put is here before the kernel ends */
}

/* Thread 0 at the start of a traced call: no events yet, and the block's SM. */
__device__ static inline void rx_trace_start(const RxRun *run) {
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  run->trace[(size_t)blockIdx.x * RX_TRACE_WORDS] = (unsigned long long)sm << 32;
}

/* The slice's count of units done, on this GPU. */
__device__ static inline unsigned long long *rx_done(const RxCtx *x, int tbi) {
  return &x->run->done[(size_t)tbi * (unsigned)x->run->nslice + (unsigned)x->slice];
}

/* The block takes its TB's next unit (of ne entries x nmicro x nslice) and
   waits until the unit before it in its slice is done; 0 when none is left.
   Counted without a reset: every block of the TB takes units until one is
   past the call's last, so a call moves the counter by its units plus
   nblk, and each block counts that too (its RxBlock) to know where this
   call's units start (modulo 2^32 on both sides). Without turns, the
   block's next unit of its own slice. */
__device__ static int rx_claim(RxCtx *x, int ne, int tbi) {
  const RxRun *run = x->run;
  unsigned M = (unsigned)x->a->nmicro, V = (unsigned)x->a->nslice, U = (unsigned)ne * M * V, u;
  if (x->a->turns) {
    __shared__ unsigned s_u;
    if (threadIdx.x == 0) s_u = atomicAdd(&run->claim[tbi], 1u) - x->taken;
    __syncthreads();
    u = s_u;
    __syncthreads(); /* read before thread 0 takes the next */
  } else {
    u = x->next++ * V + (unsigned)x->chan;
  }
  if (u >= U) return 0;
  x->e = (int)(u / (M * V)), x->m = (int)(u / V % M), x->slice = (int)(u % V);
  unsigned step = (unsigned)x->e * M + (unsigned)x->m;
  if (x->a->turns && threadIdx.x == 0 && step) {
    const unsigned long long *d = rx_done(x, tbi);
    unsigned long long want = (unsigned long long)x->call << 32 | step;
    if (rx_ld(d) < want) {
      unsigned spins = 0;
      unsigned long long t0 = run->trace ? rx_clock_ns() : 0;
      while (rx_ld(d) < want && !rx_give_up(x, &spins)) {
      }
      if (t0) rx_trace(x, 2, t0);
    }
    (void)rx_ld_acquire_gpu(d); /* rx_unit_done's release (a fence here cost 0.4-1.5% from 256 MiB) */
  }
  if (x->a->turns) __syncthreads();
  return 1;
}

/* After the block's unit: the slice's next unit may start, on any block.
   A release and rx_claim's acquire, at the GPU's scope (both blocks are on
   it): the next unit's reads and stores, a FIFO's head in the sender's
   memory among them, come after this unit's for every observer. */
__device__ static inline void rx_unit_done(RxCtx *x, int tbi) {
  if (!x->a->turns) return;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned step = (unsigned)x->e * (unsigned)x->a->nmicro + (unsigned)x->m + 1;
    rx_fence_gpu();
    *(volatile unsigned long long *)rx_done(x, tbi) = (unsigned long long)x->call << 32 | step;
  }
}

/* The emitted program's vocabulary, as in host.h. A primitive is one
   traced event per micro-batch (RESCCL_TRACE). */
#define RX_TRACED(call)                                              \
  do {                                                               \
    unsigned long long t0_ = x->run->trace ? rx_clock_ns() : 0;      \
    call;                                                            \
    if (t0_) rx_trace(x, 1, t0_);                                    \
  } while (0)
#define RX_TB(r, b) __device__ static __noinline__ void rx_tb_##r##_##b(RxCtx *x)
/* A TB body is called once per unit and runs the unit's entry, its loop
   number x->e, at its micro-batch. */
#define RX_FOR_M for (int m = x->m, go_ = x->ent++ == x->e; go_; go_ = 0)
#define RX_AT(i) (x->prim = (i))
#define RX_WAIT(f) rx_wait(x, f, m)
#define RX_POST(f) rx_post(x, f, m)
#define RX_CE_WAIT(f) rx_ce_wait(x, f, m)
#define RX_CE_POST(k) rx_ce_post(x, k, m)
#define RX_SEND(c, b, i, n) RX_TRACED(rx_send(x, c, b, i, -1, 0, n, m))
#define RX_RECV(c, b, i, n) RX_TRACED(rx_recv(x, c, -1, -1, 0, b, i, n, 0, m))
#define RX_PUT(c, p, b, i, db, di, n, l) RX_TRACED(rx_put(x, c, p, b, i, -1, 0, db, di, n, l, m))
#define RX_CS_PUT(c, p, rb, ri, wb, wi, db, di, n, l) RX_TRACED(rx_put(x, c, p, rb, ri, wb, wi, db, di, n, l, m))
#define RX_RECV_PUT(c, b, i, n) RX_TRACED(rx_recv_put(x, c, -1, 0, b, i, n, 0, 0, m))
#define RX_RRC_PUT(c, ub, ui, b, i, n, l, d) RX_TRACED(rx_recv_put(x, c, ub, ui, b, i, n, d, l, m))
#define RX_RRC(c, ub, ui, b, i, n, d) RX_TRACED(rx_recv(x, c, -1, ub, ui, b, i, n, d, m))
#define RX_RCS(ci, co, b, i, n) RX_TRACED(rx_recv(x, ci, co, -1, 0, b, i, n, 0, m))
#define RX_RRCS(ci, co, ub, ui, b, i, n, d) RX_TRACED(rx_recv(x, ci, co, ub, ui, b, i, n, d, m))
#define RX_RRS(ci, co, ub, ui, n, d) RX_TRACED(rx_recv(x, ci, co, ub, ui, -1, 0, n, d, m))
#define RX_CS(co, rb, ri, wb, wi, n) RX_TRACED(rx_send(x, co, rb, ri, wb, wi, n, m))
#define RX_PULL(p, rb, ri, wb, wi, n) RX_TRACED(rx_pull(x, p, rb, ri, -1, 0, wb, wi, -1, 0, 0, n, 0, m))
#define RX_RRC_PULL(p, rb, ri, ub, ui, wb, wi, n, d) RX_TRACED(rx_pull(x, p, rb, ri, ub, ui, wb, wi, -1, 0, 0, n, d, m))
#define RX_RRCS_PULL(p, rb, ri, ub, ui, wb, wi, to, db, di, n, d) \
  RX_TRACED(rx_pull(x, p, rb, ri, ub, ui, wb, wi, to, db, di, n, d, m))
#define RX_COPY(rb, ri, wb, wi, n) RX_TRACED(rx_local(x, rb, ri, -1, 0, wb, wi, n, 0, m))
#define RX_REDUCE(rb, ri, ub, ui, wb, wi, n, d) RX_TRACED(rx_local(x, rb, ri, ub, ui, wb, wi, n, d, m))
/* A rank is a switch over its TBs, the program one over its ranks: each
   returns the TB's number of entries, and runs entry x->e unless it is < 0. */
#define RX_RANK_BEGIN(r) __device__ static int rx_rank_##r(RxCtx *x) { switch (x->tb) {
#define RX_RANK_TB(r, b, ne) case b: if (x->e >= 0) rx_tb_##r##_##b(x); return ne;
#define RX_RANK_END(r) default: return 0; } }
#define RX_RANK_EXTERN(r)
#define RX_PROGRAM_BEGIN(n, pulls) enum { rx_pulls = pulls }; __device__ static int rx_program(RxCtx *x) { x->ent = 0; switch (x->rank) {
#define RX_PROGRAM_RANK(r, ntb) case r: return rx_rank_##r(x);
/* The block counts the call (every block of a launch runs every call of its GPU). */
#define RX_PROGRAM_END default: return 0; } } \
  extern "C" __global__ void __launch_bounds__(RX_THREADS) rx_kernel(const __grid_constant__ RxArgs a) { \
    const RxRun *run = a.run; \
    RxBlock *blk = a.block + blockIdx.x; \
    const RxBlock b = *blk; \
    RxCtx ctx = {run, &a, b.rank, b.tb, b.chan}; \
    const int tbi = b.tbi; \
    ctx.base = b.base, ctx.call = b.call + 1, ctx.taken = b.taken; \
    ctx.g = RxGeom{a.count, (size_t)a.chunks, (size_t)a.nmicro, (size_t)a.vec, (size_t)a.vec * (size_t)a.chunks, a.units, \
                   (size_t)a.kslab}; \
    if (ctx.tb == 0 && ctx.chan == 0 && threadIdx.x < 32) rx_started(&ctx); \
    if (run->trace && threadIdx.x == 0) rx_trace_start(run); \
    RxCtx *x = &ctx; \
    x->e = -1; \
    int ne = rx_program(x); \
    while (rx_claim(x, ne, tbi)) { \
      rx_program(x); \
      rx_unit_done(x, tbi); \
    } \
    __syncthreads(); \
    if (rx_pulls) rx_pull_end(x, b.word, rx_pulls > 1); \
    if (threadIdx.x == 0) { \
      blk->base = x->base + (unsigned)a.nmicro, blk->call = x->call; \
      if (a.turns) blk->taken = x->taken + (unsigned)ne * (unsigned)a.nmicro * (unsigned)a.nslice + (unsigned)run->nblk; \
    } }

#endif
