/*
** data.c — what every executor runs on and is checked against: dtypes and
** reduction operators, the input of each rank (small exact values, so any
** reduction order gives the same answer), buffers with the inputs where the
** placement puts them and everything else poisoned, and the reference result
** computed from the collective's definition, never from the plan.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static const char *const dtype_names[NDTYPE] = {"f32", "i32", "f64", "i64"};
const size_t dtype_size[NDTYPE] = {4, 4, 8, 8};
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

RedFn data_reducer(Dtype dt, RedOp op) { return reducers[dt][op]; }

void data_elems(const Program *p, size_t count, size_t elems[NBUF]) {
  for (int b = 0; b < NBUF; b++) elems[b] = (size_t)((prog_bufchunks(p, b) + p->chunks - 1) / p->chunks) * count;
}

char **data_buffers(const Plan *pl, const ExecOpts *o) {
  const Program *p = pl->prog;
  int R = p->nranks;
  size_t N = o->count, es = dtype_size[o->dtype], elems[NBUF];
  data_elems(p, N, elems);
  char **buf = xcalloc((size_t)R * 3, sizeof *buf);
  for (int r = 0; r < R; r++)
    for (int b = 0; b < NBUF; b++) {
      buf[r * 3 + b] = xmalloc(elems[b] * es + 1);
      memset(buf[r * 3 + b], 0x7f, elems[b] * es); /* poison */
    }
  /* Inputs, placed where the placement puts them. */
  for (int r = 0; r < R; r++)
    for (size_t i = 0; i < elems[BUF_INPUT]; i++) {
      char *base = buf[r * 3 + BUF_INPUT];
      size_t j = i;
      if (pl->opt.inplace) {
        if (p->coll == COLL_ALLGATHER) base = buf[r * 3 + BUF_OUTPUT], j = r * N + i;
        else if (p->coll == COLL_ALLREDUCE || p->coll == COLL_ALLTOALL) base = buf[r * 3 + BUF_OUTPUT];
      }
      put(base, j, o->dtype, input_value(r, i, o->dtype, o->op));
    }
  return buf;
}

void data_check(const Plan *pl, const ExecOpts *o, char *const *buf, ExecResult *res) {
  const Program *p = pl->prog;
  int R = p->nranks, C = p->chunks;
  size_t N = o->count, es = dtype_size[o->dtype], elems[NBUF];
  data_elems(p, N, elems);
  RedFn reduce = data_reducer(o->dtype, o->op);
  size_t nin = elems[BUF_INPUT], nout = (size_t)(prog_bufchunks(p, BUF_OUTPUT) / C) * N;
  res->max_err = 0, res->nwrong = 0, res->first_wrong[0] = '\0';
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
      for (int b = 1; b < R; b++) reduce(ref, in[b] + off, nout);
    }
    }
    const char *out = buf[r * 3 + BUF_OUTPUT];
    if (pl->opt.inplace && p->coll == COLL_REDUCESCATTER) out = buf[r * 3 + BUF_INPUT] + (size_t)r * N * es;
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
