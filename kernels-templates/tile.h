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

/* a / b, in 32 bits where both fit: a GPU divides 64-bit numbers in a long
   subroutine, and a block works out its tiles every unit (on 2xH200 that
   cost 1-3.5 us per unit, docs/journal/gpu-2026-12-01.md). */
RX_TILE_FN size_t rx_udiv(size_t a, size_t b) {
#ifdef __CUDACC__
  if (((a | b) >> 32) == 0) return (unsigned)a / (unsigned)b;
#endif
  return a / b;
}

/* Cut k of K across n elements, on whole units of v elements; cut K is n. */
RX_TILE_FN size_t rx_cut(size_t n, size_t v, size_t k, size_t K) { return k >= K ? n : rx_udiv(rx_udiv(n, v) * k, K) * v; }

/* Elements per 16-byte vector. */
RX_TILE_FN size_t rx_vec(size_t esize) { return esize && esize < 16 ? rx_udiv(16, esize) : 1; }

/* A call's layout: blocks of N elements in C chunks and M slabs, whole
   units of u elements (a vector of v per chunk), `units` of them in the
   first K slabs (the last holds a leftover, if any). Worked out once per
   call: a GPU then finds a tile in a few divisions. */
typedef struct {
  size_t N, C, M, v, u, units, K;
} RxGeom;

RX_TILE_FN RxGeom rx_geom(size_t N, size_t C, size_t M, size_t esize) {
  RxGeom g = {N, C, M, rx_vec(esize), 0, 0, M};
  g.u = g.v * C, g.units = rx_udiv(N, g.u);
  if (M > 1 && g.units * g.u < N) g.K = M - 1;
  return g;
}

/* Where slab k starts (k = M: its end). */
RX_TILE_FN size_t rx_slab(const RxGeom *g, size_t k) {
  return k >= g->M ? g->N : k >= g->K ? g->units * g->u : rx_udiv(g->units * k, g->K) * g->u;
}

/* The GPU runtime's default tile (bytes of a chunk per micro-batch) and FIFO
   slot (RESCCL_TILE_BYTES, RESCCL_SLOT_BYTES; the simulator uses them too). */
#define RX_TILE_BYTES ((size_t)16 << 20)
#define RX_SLOT_BYTES ((size_t)2 << 20)
/* Slices of a tile per block by default (RESCCL_SLICES): the blocks of a TB
   take them in turn, so a slow block holds back no more than a slice. */
#define RX_SLICES 2

/* Elements per piece of a put of n elements in micro-batch m of M, for
   blocks of N elements in C chunks (slot: a FIFO slot's bytes). A put is
   published piece by piece, a slot's worth at most. Where the receiver
   reduces what lands and no other TB waits for that reduction (`last`), the
   put of the call's last micro-batch (and of the one before a leftover
   slab) goes in up to RX_PIECES pieces of whole vectors, none under
   RX_PIECE_MIN bytes but the last, so that the receiver reduces one while
   the next is in flight and the call ends sooner after its data lands: on
   2xH200 the one-shot all-reduce gained 4-13% at 4-8 MiB. Every publish
   waits for the block's stores to reach the peer (a system fence), so
   other puts go a slot at a time: where a reduction is sent on (the ring),
   its sender has the next hop's puts to make and pieces only cost (ring
   all-reduce 4-10% at 16-32 MiB). Both ends cut alike. */
#ifndef RX_PIECES
#define RX_PIECES 4
#endif
#ifndef RX_PIECE_MIN
#define RX_PIECE_MIN (64 << 10)
#endif
#if RX_PIECES < 1 || RX_PIECE_MIN < 16 || RX_PIECE_MIN % 16
#error "RX_PIECES must be at least 1 and RX_PIECE_MIN a positive multiple of 16 bytes"
#endif
RX_TILE_FN size_t rx_piece(size_t n, size_t esize, size_t slot, int last, size_t N, size_t C, size_t m, size_t M) {
  size_t v = rx_vec(esize), per = rx_udiv(slot, esize);
  if (!last || m + 2 < M || (m + 2 == M && rx_udiv(N, v * C) * v * C == N)) return per;
  size_t p = rx_udiv(n + RX_PIECES * v - 1, RX_PIECES * v) * v, min = rx_udiv((size_t)RX_PIECE_MIN, esize);
  p = p < min ? min : p;
  return p < per ? p : per;
}

/* Micro-batches of a call of count elements, as the GPU runtime picks them:
   tiles of at most `tile` bytes of a chunk, and at least 2 while each still
   moves tile / 4, so that mid sizes pipeline too, or `fixed` when nonzero.
   Not more: each micro-batch costs every block a handshake of about 5 us,
   and on 2xH200 at 16 MiB four micro-batches of tile / 8 moved 162 GB/s of
   all-reduce where two moved 213 (docs/journal/gpu-2026-11-30.md, traced). That is for nblk
   blocks; cut into nslice slices instead (more than blocks, which they
   then share), a tile holds nslice / nblk times as many pieces, so there
   are that many times fewer. Then enough that every slice of a tile fits
   one slot, so that a handshake moves a slice and a FIFO of k slots holds k
   tiles. A slab holds at most ceil(units / slabs) units of a vector per
   chunk (plus one slab for a leftover); a tile of maxcnt chunks is that
   many vectors each, shared by nslice slices. */
RX_TILE_FN size_t rx_nmicro(size_t count, size_t esize, size_t C, size_t maxcnt, size_t nslice, size_t nblk, size_t tile,
                            size_t slot, size_t fixed) {
  size_t chunk = (count * esize + C - 1) / C, quarter = tile / 4 ? tile / 4 : 1;
  size_t nm = (chunk + tile - 1) / tile;
  if (nm < 2 && chunk / quarter >= 2) nm = 2;
  if (nslice > nblk && nblk) nm = (nm * nblk + nslice - 1) / nslice;
  if (fixed) nm = fixed;
  size_t unit = rx_vec(esize) * C, units = count / unit, rest = units * unit < count;
  size_t cap = slot / 16 * nslice / (maxcnt ? maxcnt : 1);
  if (cap < 1) cap = 1;
  size_t whole = (units + cap - 1) / cap + rest;
  return nm < whole ? whole : nm;
}

/* Elements [*lo, *lo + *n) of chunks [idx, idx + cnt) in micro-batch m. */
RX_TILE_FN void rx_span_g(const RxGeom *g, int idx, int cnt, int m, size_t *lo, size_t *n) {
  size_t b = rx_udiv((size_t)idx, g->C), s = (size_t)idx - b * g->C, slab = rx_slab(g, (size_t)m);
  size_t len = rx_slab(g, (size_t)m + 1) - slab, at = rx_udiv(s * len, g->C);
  *lo = b * g->N + slab + at;
  *n = rx_udiv((s + (size_t)cnt) * len, g->C) - at;
}

/* The same for blocks of N elements cut into C chunks and M micro-batches. */
RX_TILE_FN void rx_span(size_t N, size_t C, size_t M, size_t esize, int idx, int cnt, int m, size_t *lo, size_t *n) {
  RxGeom g = rx_geom(N, C, M, esize);
  rx_span_g(&g, idx, cnt, m, lo, n);
}

/* A copy-engine copy of chunks [sidx, sidx + cnt) to [didx, didx + cnt),
   micro-batches *m to end - 1 of M, as contiguous runs: the next run is *n
   elements from *slo to *dlo (whole blocks of chunks make one). Returns 0
   when no run is left. Both ends move as many elements in a micro-batch
   (a plan whose transfers change chunk position runs only counts that
   split evenly: exec_check_sizes, the runtime's `even`). */
RX_TILE_FN int rx_ce_run(size_t N, size_t C, size_t M, size_t esize, int sidx, int didx, int cnt, size_t *m,
                         size_t end, size_t *slo, size_t *dlo, size_t *n) {
  size_t a, b, k;
  for (*n = 0; *m < end && *n == 0; ++*m) {
    rx_span(N, C, M, esize, sidx, cnt, (int)*m, slo, n);
    rx_span(N, C, M, esize, didx, cnt, (int)*m, dlo, &k);
  }
  if (*n == 0) return 0;
  for (; *m < end; ++*m) {
    rx_span(N, C, M, esize, sidx, cnt, (int)*m, &a, &k);
    rx_span(N, C, M, esize, didx, cnt, (int)*m, &b, &k);
    if (k && (a != *slo + *n || b != *dlo + *n)) break;
    *n += k;
  }
  return 1;
}

#endif
