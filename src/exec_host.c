/*
** exec_host.c — run the emitted program on the CPU: the plan's code is
** emitted for the host target, compiled with the system C compiler into a
** shared object, loaded (once per plan: the caller keeps it in a HostExec),
** and run with one thread per rank·TB over real buffers and real bounded
** FIFOs. Inputs are generated per rank, outputs are poisoned first, and
** every output element is compared with a reference computed directly from
** the collective's definition, not from the plan.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "fnv.h"
#include "../kernels-templates/host.h"

/* Do both ends of a transfer move the same number of elements in every micro-batch? */
static int same_size(const RxRun *run, int sidx, int didx, int cnt) {
  for (int m = 0; m < run->nmicro; m++) {
    size_t lo, a, b;
    rx_tile(run, sidx, cnt, m, &lo, &a);
    rx_tile(run, didx, cnt, m, &lo, &b);
    if (a != b) return 0;
  }
  return 1;
}

rcStatus exec_check_sizes(const Plan *pl, ExecOpts *o, Err *e) {
  if (!pl->verified) return err_set(e, RC_EINVAL, "plan %s is not verified; refusing to execute", pl->prog->name);
  if (o->count == 0) return err_set(e, RC_ESIZE, "count must be at least 1");
  /* Every rank's three buffers live in host memory (GPU runs start and check
     them there): refuse what would not fit rather than die on it. */
  size_t elems[NBUF];
  data_elems(pl->prog, o->count, elems);
  double bytes = (double)pl->prog->nranks * (double)(elems[0] + elems[1] + elems[2]) * (double)dtype_size[o->dtype];
  double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  if (have > 0 && 2 * bytes > have)
    return err_set(e, RC_ESIZE, "count %zu: the %d ranks' buffers need %.0f MiB of host memory, more than half of "
                   "this machine's %.0f MiB", o->count, pl->prog->nranks, bytes / (1 << 20), have / (1 << 20));
  if (o->nmicro < 1 || o->nslots < 0) return err_set(e, RC_EINVAL, "nmicro and slots must be positive");
  if (o->slot_bytes < dtype_size[o->dtype])
    return err_set(e, RC_EINVAL, "slot_bytes=%zu holds no %s element (%zu bytes)", o->slot_bytes, dtype_name(o->dtype),
                   dtype_size[o->dtype]);
  for (int t = 0; o->op == RED_AVG && t < pl->dag.n; t++)
    if (pl->complete[t] > 0 && pl->complete[t] < pl->dag.t[t].cnt) {
      char at[300];
      return err_set(e, RC_EINVAL, "%s: op=avg divides each sum in the reduction that completes it, and this one "
                     "completes %d of its %d chunks (record it as separate transfers)",
                     plan_task_where(pl, t, at, sizeof at), pl->complete[t], pl->dag.t[t].cnt);
    }
  RxRun run = {.chunks = pl->prog->chunks, .nmicro = o->nmicro, .count = o->count, .esize = dtype_size[o->dtype]};
  /* A buffered plan was verified with FIFOs that hold two tiles (verify.c); a
     tile streams through in slots, its last one maybe part full. */
  size_t per = o->slot_bytes / dtype_size[o->dtype], need = 0, tile = 0;
  for (int t = 0; t < pl->dag.n && pl->buffered; t++) {
    const Task *k = &pl->dag.t[t];
    int s = pl->task_send[t], r = pl->task_recv[t], by = (s >= 0 && pl->split[s]) || (r >= 0 && pl->split[r]);
    for (int m = 0; m < o->nmicro && k->src != k->dst; m++) {
      size_t lo, n, slots = 0, sum = 0; /* a chunk at a time where it moves so (Plan.split) */
      for (int c = 0; c < (by ? k->cnt : 1); c++)
        rx_tile(&run, k->didx + c, by ? 1 : k->cnt, m, &lo, &n), slots += (n + per - 1) / per, sum += n;
      if (BUFFERED_TILES * slots > need) need = BUFFERED_TILES * slots, tile = sum;
    }
  }
  Err dl;
  if (pl->buffered && deadlock_buffered(pl, o->nmicro, NULL, &dl) != RC_OK) /* exactly the run's micro-batches */
    return err_set(e, RC_EDEADLOCK, "%s (with %d micro-batches; compiled plans are checked with %d)", dl.msg, o->nmicro,
                   BUFFERED_MICRO);
  if (o->nslots == 0) o->nslots = need > 2 ? (int)need : 2;
  if ((size_t)o->nslots < need)
    return err_set(e, RC_ESIZE, "%s TBs need FIFOs of two tiles: a tile of %zu elements fills %zu slots of %zu, "
                   "a FIFO has %d (raise slots or slot_bytes, or nmicro)",
                   pl->opt.tb == TB_MANUAL ? "hand-placed" : "merged", tile, need / 2, per, o->nslots);
  for (int t = 0; t < pl->dag.n; t++) {
    const Task *k = &pl->dag.t[t];
    if (!same_size(&run, k->sidx, k->didx, k->cnt) || (k->op != OP_COPY && !same_size(&run, k->oidx, k->didx, k->cnt))) {
      char at[300];
      return err_set(e, RC_ESIZE, "%s: count %zu does not split evenly into %d chunks per block, as this transfer "
                     "needs (%s chunk %d -> %s chunk %d)", plan_task_where(pl, t, at, sizeof at), o->count,
                     pl->prog->chunks, buf_name(k->sbuf), k->sidx, buf_name(k->dbuf), k->didx);
    }
  }
  return RC_OK;
}

typedef struct {
  RxCtx ctx;
  RxTbFn fn;
  pthread_t th;
} Worker;

static void *worker(void *arg) {
  Worker *w = arg;
  w->fn(&w->ctx);
  return NULL;
}

/* Copy-engine copies (offload.c) of one source rank, as the copy
   engine makes them. `beside` the TBs: those a reduction waits for, micro-
   batch by micro-batch, posting the flag after each; then those that wait
   for a TB's counter, each micro-batch once it is counted (as each copy
   stream orders them). Else, after the TBs: the others, whole. */
typedef struct {
  const Plan *pl;
  RxRun *run;
  int src, beside;
  pthread_t th;
} CeWorker;

static void ce_copy(const RxRun *run, const CeCopy *c, size_t m, size_t end) {
  size_t slo, dlo, n, es = run->esize;
  while (rx_ce_run(run->count, (size_t)run->chunks, (size_t)run->nmicro, es, c->ridx, c->widx, c->cnt, &m, end, &slo,
                   &dlo, &n))
    memmove(run->buf[c->dst * 3 + c->wbuf] + dlo * es, run->buf[c->src * 3 + c->rbuf] + slo * es, n * es);
}

static void *ce_worker(void *arg) {
  CeWorker *w = arg;
  RxCtx x = {.run = w->run, .rank = w->src, .tb = -1}; /* waits as a TB would */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < w->pl->nce; i++) {
      const CeCopy *c = &w->pl->ce[i];
      int kind = c->flag >= 0 ? 0 : c->after >= 0 ? 1 : 2; /* flagged, after a counter, free */
      if (c->src != w->src || (w->beside ? kind != pass : kind != 2 || pass)) continue;
      if (kind == 2) {
        ce_copy(w->run, c, 0, (size_t)w->run->nmicro);
        continue;
      }
      for (int m = 0; m < w->run->nmicro; m++) {
        if (kind == 1 && rx_wait_word(&x, &w->run->cepost[c->after], m, RX_WAIT_CE, c->after)) return NULL;
        ce_copy(w->run, c, (size_t)m, (size_t)m + 1);
        if (kind == 0) rx_set(&w->run->ceflag[c->flag], (uint32_t)m + 1);
        atomic_fetch_add(&w->run->progress, 1);
      }
    }
  return NULL;
}

/*
** Compiled units outlive their plans, for the life of the process, in a
** directory of their own named by a hash of the compiler and the unit's
** source: plans that emit the same code for a unit (--tb state and conn
** often do, and so do hpds and rr) compile it once. A unit is reused only
** when its saved source is, byte for byte, the one asked for. Past
** UNIT_CACHE_BYTES of source the directory starts over; exit removes it.
*/
#define UNIT_CACHE_BYTES ((size_t)32 << 20)
static char unit_dir[32];
static size_t unit_bytes;

static void unit_cache_remove(void) {
  if (!*unit_dir) return;
  char rm[64];
  snprintf(rm, sizeof rm, "rm -rf '%s'", unit_dir);
  if (system(rm) != 0) { /* leftover temp files are harmless */
  }
  *unit_dir = '\0', unit_bytes = 0;
}

static int write_file(const char *path, const char *s, size_t n) {
  FILE *f = fopen(path, "w");
  if (!f) return 0;
  int ok = fwrite(s, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

/* Does the file hold exactly s[0..n)? */
static int same_file(const char *path, const char *s, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  char b[8192];
  size_t k, at = 0;
  int same = 1;
  while (same && (k = fread(b, 1, sizeof b, f)) > 0) same = at + k <= n && !memcmp(b, s + at, k), at += k;
  fclose(f);
  return same && at == n;
}

/* The unit cache's directory, with the headers the units include. */
static rcStatus unit_cache_open(Err *e) {
  static int registered;
  if (unit_bytes > UNIT_CACHE_BYTES) unit_cache_remove();
  if (*unit_dir) return RC_OK;
  strcpy(unit_dir, "/tmp/resccl-cc-XXXXXX");
  if (!mkdtemp(unit_dir)) return *unit_dir = '\0', err_set(e, RC_EEXEC, "cannot create a temporary directory");
  if (!registered) registered = atexit(unit_cache_remove) == 0;
  static const char *const headers[] = {"tile.h", "host.h"}; /* host.h includes tile.h */
  for (int i = 0; i < 2; i++) {
    const char *text = tpl_text(headers[i]);
    char path[64];
    snprintf(path, sizeof path, "%s/%s", unit_dir, headers[i]);
    if (!text || !write_file(path, text, strlen(text))) {
      unit_cache_remove();
      return err_set(e, RC_EEXEC, "cannot write %s", path);
    }
  }
  return RC_OK;
}

/*
** Write the host program and compile it into a shared object in dir: the
** ranks are spread over a few translation units compiled side by side (the
** compiler, not the run, dominates at 32 ranks), plus one holding the rank
** table; units compiled before come from the cache.
*/
static rcStatus load_program(const Plan *pl, const ExecOpts *o, const char *dir, void **dl, Err *e) {
  if (!pl->verified) return err_set(e, RC_EINVAL, "plan %s is not verified; refusing to emit", pl->prog->name);
  const char *cc = o->cc ? o->cc : getenv("CC") ? getenv("CC") : "cc";
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int R = pl->prog->nranks, nunits = R < ncpu ? R : ncpu < 1 ? 1 : ncpu > 8 ? 8 : (int)ncpu;
  RC_CHECK(unit_cache_open(e));
  char path[700], stem[64];
  Buf cmd, link, src;
  buf_init(&cmd), buf_init(&link), buf_init(&src);
  rcStatus rc = RC_OK;
  /* Every unit by name, so that one that failed to compile fails the link (a bare wait returns 0). */
  buf_printf(&link, "wait && %s -shared -o '%s/program.so'", cc, dir);
  for (int u = 0; u <= nunits; u++) {
    src.n = 0;
    buf_puts(&src, "#include \"host.h\"\n");
    if (u < nunits)
      for (int r = u; r < R; r += nunits) emit_rank(pl, r, EMIT_HOST, &src);
    else
      emit_table(pl, 1, &src);
    uint64_t h = fnv1a(fnv1a(FNV_BASIS, cc, strlen(cc) + 1), src.s, src.n);
    snprintf(stem, sizeof stem, "%s/%016llx-unit%d", unit_dir, (unsigned long long)h, u);
    buf_printf(&link, " '%s.o'", stem);
    snprintf(path, sizeof path, "%s.o", stem);
    int cached = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s.c", stem);
    if (cached && same_file(path, src.s, src.n)) continue;
    if (!write_file(path, src.s, src.n)) {
      rc = err_set(e, RC_EEXEC, "cannot write %s", path);
      break;
    }
    unit_bytes += src.n;
    buf_printf(&cmd, "%s -std=gnu11 -O0 -fPIC -c -o '%s.o' '%s' 2>>'%s/cc.log' & ", cc, stem, path, dir);
  }
  buf_printf(&cmd, "%s 2>>'%s/cc.log'", link.s, dir);
  if (rc == RC_OK && system(cmd.s) != 0) {
    char first[400] = "";
    snprintf(path, sizeof path, "%s/cc.log", dir);
    FILE *lf = fopen(path, "r");
    if (lf) {
      size_t k = fread(first, 1, sizeof first - 1, lf);
      first[k] = '\0';
      fclose(lf);
    }
    rc = err_set(e, RC_EEXEC, "compiling the emitted program failed (%s): %s", cc, first);
  }
  buf_free(&cmd), buf_free(&link), buf_free(&src);
  if (rc != RC_OK) return rc;
  snprintf(path, sizeof path, "%s/program.so", dir);
  *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!*dl) return err_set(e, RC_EEXEC, "cannot load the emitted program: %s", dlerror());
  return RC_OK;
}

/* Describe what every stuck thread waits on. */
static void stuck_report(const Plan *pl, Worker *w, int nw, Err *e) {
  Buf b;
  buf_init(&b);
  buf_puts(&b, "execution stuck (no progress): ");
  int shown = 0;
  for (int i = 0; i < nw && shown < 16; i++) {
    RxCtx *x = &w[i].ctx;
    if (x->wait_kind == RX_WAIT_NONE) continue;
    const Prim *p = &pl->p[x->at];
    char at[300];
    plan_task_where(pl, p->tin >= 0 ? p->tin : p->tout, at, sizeof at);
    buf_printf(&b, "%srank %d tb %d %s (%s) micro-batch %d waits for ", shown ? "; " : "", x->rank, x->tb,
               prim_name(p->kind), at, x->m);
    if (x->wait_kind == RX_WAIT_FLAG) buf_printf(&b, "flag %d", x->wait_id);
    else if (x->wait_kind == RX_WAIT_CE) buf_printf(&b, "copy-engine flag %d", x->wait_id);
    else buf_printf(&b, "%s on rank %d -> rank %d", x->wait_kind == RX_WAIT_DATA ? "data" : "FIFO space",
                    pl->conn[x->wait_id].src, pl->conn[x->wait_id].dst);
    shown++;
  }
  err_set(e, RC_ETIMEOUT, "%s", b.s);
  buf_free(&b);
}

/* The plan's program, compiled and loaded once per HostExec: every run
   after the first (another dtype, op or count) reuses it. */
static rcStatus program(const Plan *pl, HostExec *hx, const ExecOpts *o, Err *e) {
  if (hx->so) return RC_OK;
  char dir[] = "/tmp/resccl-XXXXXX";
  if (!mkdtemp(dir)) return err_set(e, RC_EEXEC, "cannot create a temporary directory");
  rcStatus rc = load_program(pl, o, dir, &hx->so, e);
  char rm[600];
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  if (system(rm) != 0) { /* leftover temp files are harmless */
  }
  return rc;
}

void exec_host_close(HostExec *hx) {
  if (hx->so) dlclose(hx->so);
  hx->so = NULL;
}

static rcStatus run(const Plan *pl, HostExec *hx, const ExecOpts *o, ExecResult *res, Err *e) {
  const Program *p = pl->prog;
  int R = p->nranks, C = p->chunks;
  size_t N = o->count, es = dtype_size[o->dtype];
  memset(res, 0, sizeof *res);
  ExecOpts oo = *o;
  RC_CHECK(exec_check_sizes(pl, &oo, e));
  /* The host's FIFOs are host memory too (up to 2^20 slots of 1 GiB each). */
  double fifos = (double)pl->nconn * (double)oo.nslots * (double)(o->slot_bytes / es * es);
  double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  if (have > 0 && 2 * fifos > have)
    return err_set(e, RC_ESIZE, "slots=%d slot_bytes=%zu: the %d connections' FIFOs need %.0f MiB of host memory, "
                   "more than half of this machine's %.0f MiB", oo.nslots, o->slot_bytes, pl->nconn, fifos / (1 << 20),
                   have / (1 << 20));
  RxRun run = {.nranks = R, .chunks = C, .nmicro = o->nmicro, .nslots = oo.nslots, .count = N, .esize = es,
               .slot_bytes = o->slot_bytes / es * es, .timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000,
               .direct = o->direct,
               .reduce = data_reducer(o->dtype, o->op), .post = data_post(o->dtype, o->op)};
  RC_CHECK(program(pl, hx, o, e));
  const RxRank *prog = dlsym(hx->so, "rx_program");
  const int *nr = dlsym(hx->so, "rx_nranks");
  if (!prog || !nr || *nr != R) return err_set(e, RC_EEXEC, "the emitted program does not match the plan");
  rcStatus rc = RC_OK;

  run.buf = data_buffers(pl, o);
  run.fifo = xcalloc((size_t)pl->nconn + 1, sizeof *run.fifo);
  for (int c = 0; c < pl->nconn; c++) run.fifo[c].slots = xmalloc((size_t)run.nslots * run.slot_bytes);
  run.flag = xcalloc((size_t)pl->nflags + 1, sizeof *run.flag);
  run.ceflag = xcalloc((size_t)pl->nceflags + 1, sizeof *run.ceflag);
  run.cepost = xcalloc((size_t)pl->nceposts + 1, sizeof *run.cepost);

  Worker *w = xcalloc((size_t)pl->ntbs + 1, sizeof *w);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  int nw = 0;
  double t0 = now_ms();
  for (int r = 0; r < R; r++)
    for (int b = 0; b < prog[r].ntb; b++) {
      w[nw].ctx = (RxCtx){.run = &run, .rank = r, .tb = b};
      w[nw].fn = prog[r].tbs[b];
      if (pthread_create(&w[nw].th, &attr, worker, &w[nw]) != 0) {
        atomic_store(&run.abort, 1);
        rc = err_set(e, RC_EEXEC, "cannot start thread %d", nw);
        break;
      }
      nw++;
    }
  /* Those a reduction waits for, or that wait for a TB, beside the TBs. */
  CeWorker *cw = xcalloc((size_t)R, sizeof *cw);
  int ncw = 0;
  for (int r = 0; r < R && rc == RC_OK && (pl->nceflags || pl->nceposts); r++) {
    cw[ncw] = (CeWorker){pl, &run, r, 1, 0};
    if (pthread_create(&cw[ncw].th, &attr, ce_worker, &cw[ncw]) != 0) {
      atomic_store(&run.abort, 1);
      rc = err_set(e, RC_EEXEC, "cannot start a copy thread");
      break;
    }
    ncw++;
  }
  for (int i = 0; i < nw; i++) pthread_join(w[i].th, NULL);
  for (int i = 0; i < ncw; i++) pthread_join(cw[i].th, NULL);
  free(cw);
  res->ms = now_ms() - t0;
  pthread_attr_destroy(&attr);
  if (rc == RC_OK && atomic_load(&run.abort)) {
    stuck_report(pl, w, nw, e);
    rc = RC_ETIMEOUT;
  }
  /* Both ends of a connection cut its tiles alike (slots, a put's pieces):
     at the end every piece sent was taken. */
  for (int c = 0; rc == RC_OK && c < pl->nconn; c++) {
    uint32_t sent = atomic_load(&run.fifo[c].tail.v), taken = atomic_load(&run.fifo[c].head.v);
    if (sent != taken)
      rc = err_set(e, RC_EEXEC, "connection %d: %u pieces sent, %u taken (its two ends cut tiles differently)", c,
                   sent, taken);
  }
  /* The copy-engine copies that wait for nothing and that nothing waits
     for, after the TBs: their conditions make any time as good, and a copy
     whose destination a TB reads or writes, or whose source a TB writes,
     then fails the check. */
  for (int r = 0; rc == RC_OK && r < R; r++) {
    CeWorker after = {pl, &run, r, 0, 0};
    ce_worker(&after);
  }

  if (rc == RC_OK) data_check(pl, o, run.buf, res);
  for (int r = 0; r < R * 3; r++) free(run.buf[r]);
  for (int c = 0; c < pl->nconn; c++) free(run.fifo[c].slots);
  free(run.buf), free(run.fifo), free(run.flag), free(run.ceflag), free(run.cepost), free(w);
  return rc;
}

rcStatus exec_host(const Plan *pl, HostExec *hx, const ExecOpts *o, ExecResult *res, Err *e) {
  HostExec once = {0};
  rcStatus rc = run(pl, hx ? hx : &once, o, res, e);
  exec_host_close(&once);
  return rc;
}
