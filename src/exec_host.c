/*
** exec_host.c — run the emitted program on the CPU: the plan's code is
** emitted for the host target, compiled with the system C compiler into a
** shared object, loaded, and run with one thread per rank·TB over real
** buffers and real bounded FIFOs. Inputs are generated per rank, outputs are
** poisoned first, and every output element is compared with a reference
** computed directly from the collective's definition, not from the plan.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "../kernels-templates/host.h"

static const char *const dtype_names[NDTYPE] = {"f32", "i32", "f64", "i64"};
static const size_t dtype_size[NDTYPE] = {4, 4, 8, 8};
static const char *const redop_names[NREDOP] = {"sum", "max", "min", "prod"};

const char *dtype_name(int d) { return (unsigned)d < NDTYPE ? dtype_names[d] : "?"; }
const char *redop_name(int o) { return (unsigned)o < NREDOP ? redop_names[o] : "?"; }

int dtype_parse(const char *s) {
  for (int i = 0; i < NDTYPE; i++)
    if (strcmp(s, dtype_names[i]) == 0) return i;
  return -1;
}

int redop_parse(const char *s) {
  for (int i = 0; i < NREDOP; i++)
    if (strcmp(s, redop_names[i]) == 0) return i;
  return -1;
}

/* Reductions dst[i] = dst[i] (op) src[i]; integers wrap (unsigned arithmetic). */
#define RED_FN(name, T, U, EXPR)                                    \
  static void name(void *d_, const void *s_, size_t n) {           \
    T *d = d_;                                                      \
    const T *s = s_;                                                \
    for (size_t i = 0; i < n; i++) {                                \
      T a = d[i], b = s[i];                                         \
      (void)sizeof(U);                                              \
      d[i] = (EXPR);                                                \
    }                                                               \
  }
#define RED_ALL(T, U, tag)                                          \
  RED_FN(sum_##tag, T, U, (T)((U)a + (U)b))                         \
  RED_FN(max_##tag, T, U, a > b ? a : b)                            \
  RED_FN(min_##tag, T, U, a < b ? a : b)                            \
  RED_FN(prod_##tag, T, U, (T)((U)a * (U)b))
RED_ALL(float, float, f32)
RED_ALL(int32_t, uint32_t, i32)
RED_ALL(double, double, f64)
RED_ALL(int64_t, uint64_t, i64)

typedef void (*RedFn)(void *, const void *, size_t);
static const RedFn reducers[NDTYPE][NREDOP] = {
  {sum_f32, max_f32, min_f32, prod_f32},
  {sum_i32, max_i32, min_i32, prod_i32},
  {sum_f64, max_f64, min_f64, prod_f64},
  {sum_i64, max_i64, min_i64, prod_i64},
};

/* Input element i of rank r: small exact values, so any reduction order agrees. */
static double input_value(int r, size_t i, Dtype dt, RedOp op) {
  uint64_t h = (uint64_t)r * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 32;
  if (op == RED_PROD) {
    static const double fv[] = {0.5, 1, 2, -1}, iv[] = {1, -1, 1, -1};
    return (dt == DT_F32 || dt == DT_F64 ? fv : iv)[h % 4];
  }
  return (double)(int)(h % 61) - 30;
}

static void put(void *base, size_t i, Dtype dt, double v) {
  switch (dt) {
  case DT_F32: ((float *)base)[i] = (float)v; break;
  case DT_I32: ((int32_t *)base)[i] = (int32_t)v; break;
  case DT_F64: ((double *)base)[i] = v; break;
  default: ((int64_t *)base)[i] = (int64_t)v; break;
  }
}

static double get(const void *base, size_t i, Dtype dt) {
  switch (dt) {
  case DT_F32: return ((const float *)base)[i];
  case DT_I32: return ((const int32_t *)base)[i];
  case DT_F64: return ((const double *)base)[i];
  default: return (double)((const int64_t *)base)[i];
  }
}

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

static int write_file(const char *path, const char *s, size_t n) {
  FILE *f = fopen(path, "w");
  if (!f) return 0;
  int ok = fwrite(s, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

/*
** Write the host program and compile it into a shared object: the ranks are
** spread over a few translation units compiled side by side (the compiler,
** not the run, dominates at 32 ranks), plus one holding the rank table.
*/
static rcStatus load_program(const Plan *pl, const ExecOpts *o, const char *dir, void **dl, Err *e) {
  if (!pl->verified) return err_set(e, RC_EINVAL, "plan %s is not verified; refusing to emit", pl->prog->name);
  const char *cc = o->cc ? o->cc : getenv("CC") ? getenv("CC") : "cc";
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int R = pl->prog->nranks, nunits = R < ncpu ? R : ncpu < 1 ? 1 : ncpu > 8 ? 8 : (int)ncpu;
  char path[700];
  Buf cmd, src;
  buf_init(&cmd), buf_init(&src);
  snprintf(path, sizeof path, "%s/host.h", dir);
  const char *prims = tpl_text("host.h");
  rcStatus rc = prims && write_file(path, prims, strlen(prims)) ? RC_OK : err_set(e, RC_EEXEC, "cannot write %s", path);
  for (int u = 0; u <= nunits && rc == RC_OK; u++) {
    src.n = 0;
    buf_puts(&src, "#include \"host.h\"\n");
    if (u < nunits)
      for (int r = u; r < R; r += nunits) emit_rank(pl, r, EMIT_HOST, &src);
    else
      emit_table(pl, 1, &src);
    snprintf(path, sizeof path, "%s/unit%d.c", dir, u);
    if (!write_file(path, src.s, src.n)) rc = err_set(e, RC_EEXEC, "cannot write %s", path);
    buf_printf(&cmd, "%s -std=gnu11 -O0 -fPIC -c -o '%s/unit%d.o' '%s' 2>>'%s/cc.log' & ", cc, dir, u, path, dir);
  }
  buf_printf(&cmd, "wait && %s -shared -o '%s/program.so' '%s'/unit*.o 2>>'%s/cc.log'", cc, dir, dir, dir);
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
  buf_free(&cmd), buf_free(&src);
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
    else buf_printf(&b, "%s on rank %d -> rank %d", x->wait_kind == RX_WAIT_DATA ? "data" : "FIFO space",
                    pl->conn[x->wait_id].src, pl->conn[x->wait_id].dst);
    shown++;
  }
  err_set(e, RC_ETIMEOUT, "%s", b.s);
  buf_free(&b);
}

rcStatus exec_host(const Plan *pl, const ExecOpts *o, ExecResult *res, Err *e) {
  const Program *p = pl->prog;
  int R = p->nranks, C = p->chunks;
  size_t N = o->count, es = dtype_size[o->dtype];
  memset(res, 0, sizeof *res);
  if (N == 0) return err_set(e, RC_ESIZE, "count must be at least 1");
  if (o->nmicro < 1 || o->nslots < 1 || o->slot_bytes < es)
    return err_set(e, RC_EINVAL, "nmicro, slots and slot size must be positive");
  RxRun run = {.nranks = R, .chunks = C, .nmicro = o->nmicro, .nslots = o->nslots, .count = N, .esize = es,
               .slot_bytes = o->slot_bytes / es * es, .timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000,
               .reduce = reducers[o->dtype][o->op]};
  /* Both ends of a transfer must move the same number of elements. */
  for (int t = 0; t < pl->dag.n; t++) {
    const Task *k = &pl->dag.t[t];
    if (!same_size(&run, k->sidx, k->didx, k->cnt)) {
      char at[300];
      return err_set(e, RC_ESIZE, "%s: count %zu does not split evenly into %d chunks per block, as this transfer "
                     "needs (%s chunk %d -> %s chunk %d)", plan_task_where(pl, t, at, sizeof at), N, C,
                     buf_name(k->sbuf), k->sidx, buf_name(k->dbuf), k->didx);
    }
  }

  char dir[] = "/tmp/resccl-XXXXXX";
  if (!mkdtemp(dir)) return err_set(e, RC_EEXEC, "cannot create a temporary directory");
  void *dl = NULL;
  rcStatus rc = load_program(pl, o, dir, &dl, e);
  char path[600];
  snprintf(path, sizeof path, "rm -rf '%s'", dir);
  if (system(path) != 0) { /* leftover temp files are harmless */
  }
  if (rc != RC_OK) return rc;
  const RxRank *prog = dlsym(dl, "rx_program");
  const int *nr = dlsym(dl, "rx_nranks");
  if (!prog || !nr || *nr != R) {
    dlclose(dl);
    return err_set(e, RC_EEXEC, "the emitted program does not match the plan");
  }

  /* Buffers: every rank gets all three; blocks of N elements. */
  size_t elems[NBUF];
  for (int b = 0; b < NBUF; b++) elems[b] = (size_t)((prog_bufchunks(p, b) + C - 1) / C) * N;
  run.buf = xcalloc((size_t)R * 3, sizeof *run.buf);
  for (int r = 0; r < R; r++)
    for (int b = 0; b < NBUF; b++) {
      run.buf[r * 3 + b] = xmalloc(elems[b] * es + 1);
      memset(run.buf[r * 3 + b], 0x7f, elems[b] * es); /* poison */
    }
  /* Inputs, placed where the placement puts them. */
  for (int r = 0; r < R; r++)
    for (size_t i = 0; i < elems[BUF_INPUT]; i++) {
      char *base = run.buf[r * 3 + BUF_INPUT];
      size_t j = i;
      if (pl->opt.inplace) {
        if (p->coll == COLL_ALLGATHER) base = run.buf[r * 3 + BUF_OUTPUT], j = r * N + i;
        else if (p->coll == COLL_ALLREDUCE || p->coll == COLL_ALLTOALL) base = run.buf[r * 3 + BUF_OUTPUT];
      }
      put(base, j, o->dtype, input_value(r, i, o->dtype, o->op));
    }
  run.fifo = xcalloc((size_t)pl->nconn + 1, sizeof *run.fifo);
  for (int c = 0; c < pl->nconn; c++) run.fifo[c].slots = xmalloc((size_t)run.nslots * run.slot_bytes);
  run.flag = xcalloc((size_t)pl->nflags + 1, sizeof *run.flag);

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
  for (int i = 0; i < nw; i++) pthread_join(w[i].th, NULL);
  res->ms = now_ms() - t0;
  pthread_attr_destroy(&attr);
  if (rc == RC_OK && atomic_load(&run.abort)) {
    stuck_report(pl, w, nw, e);
    rc = RC_ETIMEOUT;
  }

  /* Reference: fold the inputs rank by rank, straight from the definition. */
  if (rc == RC_OK) {
    size_t nin = elems[BUF_INPUT], nout = (size_t)(prog_bufchunks(p, BUF_OUTPUT) / C) * N;
    char **in = xmalloc((size_t)R * sizeof *in);
    for (int r = 0; r < R; r++) {
      in[r] = xmalloc(nin * es + 1);
      for (size_t i = 0; i < nin; i++) put(in[r], i, o->dtype, input_value(r, i, o->dtype, o->op));
    }
    char *ref = xmalloc(nout * es + 1);
    for (int r = 0; r < R; r++) {
      switch (p->coll) {
      case COLL_ALLGATHER:
        for (int b = 0; b < R; b++) memcpy(ref + (size_t)b * N * es, in[b], N * es);
        break;
      case COLL_ALLTOALL:
        for (int b = 0; b < R; b++) memcpy(ref + (size_t)b * N * es, in[b] + (size_t)r * N * es, N * es);
        break;
      default: {
        size_t off = p->coll == COLL_REDUCESCATTER ? (size_t)r * N * es : 0;
        memcpy(ref, in[0] + off, nout * es);
        for (int b = 1; b < R; b++) run.reduce(ref, in[b] + off, nout);
      }
      }
      const char *out = run.buf[r * 3 + BUF_OUTPUT];
      if (pl->opt.inplace && p->coll == COLL_REDUCESCATTER) out = run.buf[r * 3 + BUF_INPUT] + (size_t)r * N * es;
      for (size_t i = 0; i < nout; i++) {
        double g = get(out, i, o->dtype), x = get(ref, i, o->dtype), d = fabs(g - x);
        if (g != g) d = INFINITY;
        if (d > res->max_err) res->max_err = d;
        if (d != 0 && res->nwrong++ == 0)
          snprintf(res->first_wrong, sizeof res->first_wrong, "rank %d output element %zu: got %g, expected %g", r,
                   i, g, x);
      }
    }
    for (int r = 0; r < R; r++) free(in[r]);
    free(in), free(ref);
  }
  for (int r = 0; r < R * 3; r++) free(run.buf[r]);
  for (int c = 0; c < pl->nconn; c++) free(run.fifo[c].slots);
  free(run.buf), free(run.fifo), free(run.flag), free(w);
  dlclose(dl);
  return rc;
}
