/*
** host.h — the primitive macros for the host executor: C11 atomics, one
** thread per rank·TB. The emitted program is written against RX_* macros
** only; kernels-templates/cuda.cuh implements the same macros for GPUs.
**
** A connection is a FIFO of `nslots` slots of `slot_bytes` in the receiver's
** memory with two counters: tail (slots filled, written by the sender) and
** head (slots drained, written by the receiver). A tile larger than a slot
** streams through in pieces. Blocked threads sleep on a futex and give up
** when no thread of the run has made progress for `timeout_ms`.
*/
#ifndef RX_HOST_H
#define RX_HOST_H

#include <linux/futex.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifndef RX_TILE_H /* emitted programs carry tile.h before this file */
#include "tile.h"
#endif

enum { RX_INPUT, RX_OUTPUT, RX_SCRATCH };
enum { RX_WAIT_NONE, RX_WAIT_FLAG, RX_WAIT_DATA, RX_WAIT_SPACE, RX_WAIT_CE };

/* A counter threads wait on; `sleepers` lets the writer skip the wake call. */
typedef struct {
  _Atomic uint32_t v, sleepers;
} RxWord;

typedef struct {
  RxWord tail, head;
  char *slots;
} RxFifo;

typedef struct RxRun {
  int nranks, chunks, nmicro, nslots, timeout_ms;
  int direct;              /* puts write into the peer's buffer; 0: through the FIFOs */
  size_t count, esize, slot_bytes;
  char **buf;              /* buf[rank * 3 + RX_INPUT/OUTPUT/SCRATCH] */
  RxFifo *fifo;            /* per connection */
  RxWord *flag;            /* per flag: micro-batches finished */
  RxWord *ceflag;          /* per copy-engine flag: micro-batches the copy has put */
  RxWord *cepost;          /* per counter a copy-engine copy waits for: micro-batches written */
  void (*reduce)(void *dst, const void *src, size_t n);
  void (*post)(void *dst, size_t n, int nranks); /* avg's division of a completed value, or NULL */
  _Atomic uint32_t progress; /* bumped on every step of every thread */
  _Atomic int abort;
} RxRun;

typedef struct {
  RxRun *run;
  int rank, tb, at, m;      /* where it is: primitive index, micro-batch */
  int wait_kind, wait_id;   /* what it blocks on, for the stuck report */
} RxCtx;

typedef void (*RxTbFn)(RxCtx *);
typedef struct {
  const RxTbFn *tbs;
  int ntb;
} RxRank;

static inline double rx_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Publish a new value of w and wake whoever sleeps on it. */
static inline void rx_set(RxWord *w, uint32_t v) {
  atomic_store_explicit(&w->v, v, memory_order_seq_cst);
  if (atomic_load_explicit(&w->sleepers, memory_order_seq_cst))
    syscall(SYS_futex, (uint32_t *)&w->v, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

/*
** Sleep until w moves from `seen`; nonzero when the run is aborted. Spins
** briefly first (the common case on an idle core), then sleeps on the futex.
** The sleeper count is raised before the value is re-read, so a writer either
** sees the sleeper and wakes it, or the sleeper sees the new value.
*/
static inline int rx_block(RxCtx *x, RxWord *w, uint32_t seen, int kind, int id) {
  RxRun *r = x->run;
  for (int i = 0; i < 64; i++)
    if (atomic_load_explicit(&w->v, memory_order_acquire) != seen) return 0;
  x->wait_kind = kind, x->wait_id = id;
  uint32_t p0 = atomic_load(&r->progress);
  double t0 = rx_now_ms();
  for (;;) {
    atomic_fetch_add(&w->sleepers, 1);
    if (atomic_load_explicit(&w->v, memory_order_seq_cst) != seen) {
      atomic_fetch_sub(&w->sleepers, 1);
      break;
    }
    struct timespec ts = {0, 50000000}; /* wake now and then to notice a stall */
    syscall(SYS_futex, (uint32_t *)&w->v, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
    atomic_fetch_sub(&w->sleepers, 1);
    if (atomic_load_explicit(&w->v, memory_order_acquire) != seen) break;
    if (atomic_load(&r->abort)) return 1;
    uint32_t p1 = atomic_load(&r->progress);
    if (p1 != p0) p0 = p1, t0 = rx_now_ms();
    else if (rx_now_ms() - t0 > r->timeout_ms) {
      atomic_store(&r->abort, 1);
      return 1;
    }
  }
  x->wait_kind = RX_WAIT_NONE;
  return 0;
}

/* Element range of chunks [idx, idx+cnt) of a buffer in micro-batch m (tile.h). */
static inline void rx_tile(const RxRun *r, int idx, int cnt, int m, size_t *lo, size_t *n) {
  rx_span(r->count, (size_t)r->chunks, (size_t)r->nmicro, r->esize, idx, cnt, m, lo, n);
}

static inline char *rx_at(RxCtx *x, int buf, size_t elem) {
  return x->run->buf[x->rank * 3 + buf] + elem * x->run->esize;
}

/* Wait until counter w (what `kind` `id` names in a stuck report) has
   counted micro-batch m; nonzero when the run is aborted. */
static inline int rx_wait_word(RxCtx *x, RxWord *w, int m, int kind, int id) {
  uint32_t v;
  while ((v = atomic_load_explicit(&w->v, memory_order_acquire)) < (uint32_t)m + 1)
    if (rx_block(x, w, v, kind, id)) return 1;
  return 0;
}

static inline int rx_wait(RxCtx *x, int f, int m) { return rx_wait_word(x, &x->run->flag[f], m, RX_WAIT_FLAG, f); }

static inline void rx_post(RxCtx *x, int f, int m) { rx_set(&x->run->flag[f], (uint32_t)m + 1); }

/* Wait until the copy engine has put micro-batch m of the copy with flag f. */
static inline int rx_ce_wait(RxCtx *x, int f, int m) { return rx_wait_word(x, &x->run->ceflag[f], m, RX_WAIT_CE, f); }

/* Micro-batch m of what a copy-engine copy reads is written (counter k). */
static inline void rx_ce_post(RxCtx *x, int k, int m) { rx_set(&x->run->cepost[k], (uint32_t)m + 1); }

/* Wait for a free slot of connection c; returns its address or NULL on abort. */
static inline char *rx_slot_out(RxCtx *x, int c) {
  RxFifo *f = &x->run->fifo[c];
  uint32_t h, t = atomic_load_explicit(&f->tail.v, memory_order_relaxed);
  while (t - (h = atomic_load_explicit(&f->head.v, memory_order_acquire)) >= (uint32_t)x->run->nslots)
    if (rx_block(x, &f->head, h, RX_WAIT_SPACE, c)) return NULL;
  return f->slots + (size_t)(t % (uint32_t)x->run->nslots) * x->run->slot_bytes;
}

static inline void rx_push(RxCtx *x, int c) {
  RxWord *w = &x->run->fifo[c].tail;
  rx_set(w, atomic_load_explicit(&w->v, memory_order_relaxed) + 1); /* only the sender writes tail */
  atomic_fetch_add_explicit(&x->run->progress, 1, memory_order_relaxed);
}

/* Wait for a filled slot of connection c. */
static inline const char *rx_slot_in(RxCtx *x, int c) {
  RxFifo *f = &x->run->fifo[c];
  uint32_t t, h = atomic_load_explicit(&f->head.v, memory_order_relaxed);
  while ((t = atomic_load_explicit(&f->tail.v, memory_order_acquire)) == h)
    if (rx_block(x, &f->tail, t, RX_WAIT_DATA, c)) return NULL;
  return f->slots + (size_t)(h % (uint32_t)x->run->nslots) * x->run->slot_bytes;
}

static inline void rx_pop(RxCtx *x, int c) {
  RxWord *w = &x->run->fifo[c].head;
  rx_set(w, atomic_load_explicit(&w->v, memory_order_relaxed) + 1); /* only the receiver writes head */
  atomic_fetch_add_explicit(&x->run->progress, 1, memory_order_relaxed);
}

/* Send (buf, idx) on cout; a copy-send (wbuf >= 0) also keeps a copy at (wbuf, widx). */
static inline int rx_send(RxCtx *x, int cout, int buf, int idx, int wbuf, int widx, int cnt, int m) {
  size_t lo, wlo = 0, n, per = x->run->slot_bytes / x->run->esize, es = x->run->esize;
  if (wbuf >= 0) rx_tile(x->run, widx, cnt, m, &wlo, &n);
  rx_tile(x->run, idx, cnt, m, &lo, &n);
  for (size_t k = 0; k < n; k += per) {
    size_t w = n - k < per ? n - k : per;
    char *s = rx_slot_out(x, cout);
    if (!s) return 1;
    const char *from = rx_at(x, buf, lo + k);
    if (wbuf >= 0) from = memmove(rx_at(x, wbuf, wlo + k), from, w * es);
    memcpy(s, from, w * es);
    rx_push(x, cout);
  }
  return 0;
}

/* out = operand (+) in, elementwise; the operand or the input may be out
   itself (copy elision folds a copy of the result into the reduction, whose
   input may then be its destination). The ops commute. `done`: this
   reduction completes the values, so avg divides them here, before they
   are stored or forwarded (see core.h). */
static inline void rx_combine(RxRun *r, char *out, const char *operand, const char *in, size_t n, int done) {
  if (out == in) {
    r->reduce(out, operand, n);
  } else {
    if (out != operand) memmove(out, operand, n * r->esize);
    r->reduce(out, in, n);
  }
  if (done && r->post) r->post(out, n, r->nranks);
}

/*
** Receive into (wbuf, widx): copy, or reduce with the operand (ubuf, uidx)
** when ubuf >= 0; then forward what was written on cout when cout >= 0.
** wbuf < 0 keeps nothing: the result goes straight into the outgoing slot.
*/
static inline int rx_recv(RxCtx *x, int cin, int cout, int ubuf, int uidx, int wbuf, int widx, int cnt, int done,
                          int m) {
  size_t lo = 0, ulo = 0, n, per = x->run->slot_bytes / x->run->esize, es = x->run->esize;
  if (ubuf >= 0) rx_tile(x->run, uidx, cnt, m, &ulo, &n);
  if (wbuf >= 0) rx_tile(x->run, widx, cnt, m, &lo, &n); /* the size of what arrives */
  for (size_t k = 0; k < n; k += per) {
    size_t w = n - k < per ? n - k : per;
    const char *s = rx_slot_in(x, cin);
    if (!s) return 1;
    char *o = cout >= 0 ? rx_slot_out(x, cout) : NULL;
    if (cout >= 0 && !o) return 1;
    char *d = wbuf >= 0 ? rx_at(x, wbuf, lo + k) : o;
    if (ubuf >= 0) rx_combine(x->run, d, rx_at(x, ubuf, ulo + k), s, w, done);
    else memcpy(d, s, w * es);
    if (cout >= 0) {
      if (d != o) memcpy(o, d, w * es);
      rx_push(x, cout);
    }
    rx_pop(x, cin);
  }
  return 0;
}

/* Copy (rbuf, ridx) to (wbuf, widx) and send the same tile on cout. */
/*
** Direct: write the tile straight into the receiver's (peer's) buffer at
** (dbuf, didx) and count it on the connection. A plain send puts what it
** reads; a copy-send (fwd) keeps a copy at (wbuf, widx) too. The receiver's
** RX_RECV_PUT only waits for it, RX_RRC_PUT then reduces it where it landed
** (`last`, where no other TB waits for that reduction: the put of the last
** micro-batch then lands in pieces, tile.h's rx_piece).
** Without `direct` (the runtime's RESCCL_DIRECT=0) they use the FIFOs.
*/
static inline int rx_put(RxCtx *x, int cout, int peer, int buf, int idx, int wbuf, int widx, int dbuf, int didx,
                              int cnt, int last, int m) {
  if (!x->run->direct) return rx_send(x, cout, buf, idx, wbuf, widx, cnt, m);
  size_t lo, wlo = 0, dlo, n, es = x->run->esize;
  if (wbuf >= 0) rx_tile(x->run, widx, cnt, m, &wlo, &n);
  rx_tile(x->run, idx, cnt, m, &lo, &n);
  rx_tile(x->run, didx, cnt, m, &dlo, &n); /* the size of what lands */
  size_t per = rx_piece(n, es, x->run->slot_bytes, last, x->run->count, (size_t)x->run->chunks, (size_t)m,
                        (size_t)x->run->nmicro);
  for (size_t k = 0; k < n; k += per) {
    size_t w = n - k < per ? n - k : per;
    const char *s = rx_at(x, buf, lo + k);
    if (wbuf >= 0) s = memmove(rx_at(x, wbuf, wlo + k), s, w * es);
    memcpy(x->run->buf[peer * 3 + dbuf] + (dlo + k) * es, s, w * es);
    rx_push(x, cout);
  }
  return 0;
}

/* The receiving end of a put: wait for each piece; reduce it in place with
   (ubuf, uidx) when ubuf >= 0 (every op is commutative). */
static inline int rx_recv_put(RxCtx *x, int cin, int ubuf, int uidx, int wbuf, int widx, int cnt, int done, int last,
                              int m) {
  if (!x->run->direct) return rx_recv(x, cin, -1, ubuf, uidx, wbuf, widx, cnt, done, m);
  size_t lo, ulo = 0, n;
  if (ubuf >= 0) rx_tile(x->run, uidx, cnt, m, &ulo, &n);
  rx_tile(x->run, widx, cnt, m, &lo, &n); /* the size of what lands */
  size_t per = rx_piece(n, x->run->esize, x->run->slot_bytes, last, x->run->count, (size_t)x->run->chunks,
                        (size_t)m, (size_t)x->run->nmicro);
  for (size_t k = 0; k < n; k += per) {
    size_t w = n - k < per ? n - k : per;
    if (!rx_slot_in(x, cin)) return 1;
    if (ubuf >= 0) rx_combine(x->run, rx_at(x, wbuf, lo + k), rx_at(x, wbuf, lo + k), rx_at(x, ubuf, ulo + k), w, done);
    rx_pop(x, cin);
  }
  return 0;
}

/* Local copy, or reduce (out = operand (+) source) when ubuf >= 0; the
   source is rank `from`'s (a pull reads the sender's buffer). */
static inline int rx_local(RxCtx *x, int from, int rbuf, int ridx, int ubuf, int uidx, int wbuf, int widx, int cnt,
                           int done, int m) {
  size_t slo, ulo = 0, dlo, n;
  if (ubuf >= 0) rx_tile(x->run, uidx, cnt, m, &ulo, &n);
  rx_tile(x->run, ridx, cnt, m, &slo, &n);
  rx_tile(x->run, widx, cnt, m, &dlo, &n);
  const char *src = x->run->buf[from * 3 + rbuf] + slo * x->run->esize;
  if (ubuf >= 0) {
    rx_combine(x->run, rx_at(x, wbuf, dlo), rx_at(x, ubuf, ulo), src, n, done);
  } else {
    memmove(rx_at(x, wbuf, dlo), src, n * x->run->esize);
  }
  atomic_fetch_add_explicit(&x->run->progress, 1, memory_order_relaxed);
  return 0;
}

/* A pulled reduction that also puts its result at rank to's (dbuf, didx)
   (pull.c's put_on); nothing there waits for it but the run's end. */
static inline int rx_pull_put(RxCtx *x, int from, int rbuf, int ridx, int ubuf, int uidx, int wbuf, int widx, int to,
                              int dbuf, int didx, int cnt, int done, int m) {
  size_t dlo, flo, n;
  rx_local(x, from, rbuf, ridx, ubuf, uidx, wbuf, widx, cnt, done, m);
  rx_tile(x->run, widx, cnt, m, &dlo, &n);
  rx_tile(x->run, didx, cnt, m, &flo, &n);
  memcpy(x->run->buf[to * 3 + dbuf] + flo * x->run->esize, rx_at(x, wbuf, dlo), n * x->run->esize);
  return 0;
}

/* The emitted program's vocabulary. `x` is the TB's context, `m` the
   micro-batch; a reduction's last argument `d` says it completes its values. */
#define RX_TB(r, b) static void rx_tb_##r##_##b(RxCtx *x)
#define RX_FOR_M for (int m = (x->m = 0); m < x->run->nmicro; m = ++x->m)
#define RX_AT(i) (x->at = (i))
#define RX_WAIT(f) do { if (rx_wait(x, f, m)) return; } while (0)
#define RX_CE_WAIT(f) do { if (rx_ce_wait(x, f, m)) return; } while (0)
#define RX_POST(f) rx_post(x, f, m)
#define RX_CE_POST(k) rx_ce_post(x, k, m)
#define RX_SEND(c, b, i, n) do { if (rx_send(x, c, b, i, -1, 0, n, m)) return; } while (0)
#define RX_RECV(c, b, i, n) do { if (rx_recv(x, c, -1, -1, 0, b, i, n, 0, m)) return; } while (0)
#define RX_PUT(c, p, b, i, db, di, n, l) do { if (rx_put(x, c, p, b, i, -1, 0, db, di, n, l, m)) return; } while (0)
#define RX_CS_PUT(c, p, rb, ri, wb, wi, db, di, n, l) \
  do { if (rx_put(x, c, p, rb, ri, wb, wi, db, di, n, l, m)) return; } while (0)
#define RX_RECV_PUT(c, b, i, n) do { if (rx_recv_put(x, c, -1, 0, b, i, n, 0, 0, m)) return; } while (0)
#define RX_RRC_PUT(c, ub, ui, b, i, n, l, d) do { if (rx_recv_put(x, c, ub, ui, b, i, n, d, l, m)) return; } while (0)
#define RX_RRC(c, ub, ui, b, i, n, d) do { if (rx_recv(x, c, -1, ub, ui, b, i, n, d, m)) return; } while (0)
#define RX_RCS(ci, co, b, i, n) do { if (rx_recv(x, ci, co, -1, 0, b, i, n, 0, m)) return; } while (0)
#define RX_RRCS(ci, co, ub, ui, b, i, n, d) do { if (rx_recv(x, ci, co, ub, ui, b, i, n, d, m)) return; } while (0)
#define RX_RRS(ci, co, ub, ui, n, d) do { if (rx_recv(x, ci, co, ub, ui, -1, 0, n, d, m)) return; } while (0)
#define RX_CS(co, rb, ri, wb, wi, n) do { if (rx_send(x, co, rb, ri, wb, wi, n, m)) return; } while (0)
#define RX_COPY(rb, ri, wb, wi, n) rx_local(x, x->rank, rb, ri, -1, 0, wb, wi, n, 0, m)
#define RX_REDUCE(rb, ri, ub, ui, wb, wi, n, d) rx_local(x, x->rank, rb, ri, ub, ui, wb, wi, n, d, m)
/* Pulls: every rank's buffers are in this process, ready before the run
   starts and kept until every thread has ended. */
#define RX_PULL(p, rb, ri, wb, wi, n) rx_local(x, p, rb, ri, -1, 0, wb, wi, n, 0, m)
#define RX_RRC_PULL(p, rb, ri, ub, ui, wb, wi, n, d) rx_local(x, p, rb, ri, ub, ui, wb, wi, n, d, m)
#define RX_RRCS_PULL(p, rb, ri, ub, ui, wb, wi, to, db, di, n, d) \
  rx_pull_put(x, p, rb, ri, ub, ui, wb, wi, to, db, di, n, d, m)
#define RX_RANK_BEGIN(r) const RxTbFn rx_rank_##r[] = {
#define RX_RANK_EXTERN(r) extern const RxTbFn rx_rank_##r[];
#define RX_RANK_TB(r, b, ne) rx_tb_##r##_##b,
#define RX_RANK_END(r) 0};
#define RX_PROGRAM_BEGIN(n, pulls) const int rx_nranks = n; const RxRank rx_program[] = {
#define RX_PROGRAM_RANK(r, ntb) {rx_rank_##r, ntb},
#define RX_PROGRAM_END };

#endif
