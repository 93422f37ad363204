/*
** tile.h — which elements a primitive moves; host.h and cuda.cuh share it.
** The layout is MSCCL's: a block (count elements) is cut into nmicro slabs,
** and every slab into `chunks` tiles, one per chunk; a transfer never
** crosses a block. So micro-batch m of any chunk range lies in slab m, and a
** primitive that waits for micro-batch m of another waits for exactly what
** it reads. Slabs hold whole units of one 16-byte vector per chunk, so the
** chunks of a slab have one size and start on a vector, and copies stay
** vectorised whatever nmicro is (on 2xH200, cuts off the vector ran at 20
** GB/s). What is left over, less than a unit, is the last slab on its own
** when there are two or more; only its tiny tiles are unaligned.
*/
#ifndef RX_TILE_H
#define RX_TILE_H

#ifndef __CUDACC_RTC__
#include <stddef.h>
#endif

#ifdef __CUDACC__
#define RX_TILE_FN __device__ static inline
#else
#define RX_TILE_FN static inline
#endif

/* Cut k of K across n elements, on whole units of v elements; cut K is n. */
RX_TILE_FN size_t rx_cut(size_t n, size_t v, size_t k, size_t K) { return k >= K ? n : n / v * k / K * v; }

/* Elements per 16-byte vector. */
RX_TILE_FN size_t rx_vec(size_t esize) { return esize && esize < 16 ? 16 / esize : 1; }

/* Where slab k of M starts in a block of N elements (k = M: its end), for
   units of u elements. */
RX_TILE_FN size_t rx_slab(size_t N, size_t u, size_t k, size_t M) {
  size_t A = N / u * u, K = M > 1 && A < N ? M - 1 : M;
  return k >= M ? N : k >= K ? A : rx_cut(A, u, k, K);
}

/* Elements [*lo, *lo + *n) of chunks [idx, idx + cnt) in micro-batch m of M,
   for blocks of N elements cut into C chunks. */
RX_TILE_FN void rx_span(size_t N, size_t C, size_t M, size_t esize, int idx, int cnt, int m, size_t *lo, size_t *n) {
  size_t u = rx_vec(esize) * C, s = (size_t)idx % C, slab = rx_slab(N, u, (size_t)m, M);
  size_t len = rx_slab(N, u, (size_t)m + 1, M) - slab;
  *lo = (size_t)idx / C * N + slab + s * len / C;
  *n = (s + (size_t)cnt) * len / C - s * len / C;
}

#endif
