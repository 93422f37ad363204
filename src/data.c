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

/* Each dtype's names: the short one (dtypes.h) first, then the spellings NCCL users know. */
#define SHORT(e, name, size) [DT_##e][0] = name,
static const char *const dtype_names[NDTYPE][4] = {
  RX_DTYPES(SHORT)
  [DT_I8][1] = "int8", [DT_I8][2] = "char", [DT_U8][1] = "uint8", [DT_I32][1] = "int32", [DT_I32][2] = "int",
  [DT_U32][1] = "uint32", [DT_I64][1] = "int64", [DT_U64][1] = "uint64", [DT_F16][1] = "half",
  [DT_F16][2] = "float16", [DT_F32][1] = "float", [DT_F32][2] = "float32", [DT_F64][1] = "double",
  [DT_F64][2] = "float64", [DT_BF16][1] = "bfloat16",
};
#undef SHORT
#define SIZE(e, name, size) size,
const size_t dtype_size[NDTYPE] = {RX_DTYPES(SIZE)};
#undef SIZE
static const char *const redop_names[NREDOP] = {"sum", "prod", "max", "min", "avg"};

const char *dtype_name(int d) { return (unsigned)d < NDTYPE ? dtype_names[d][0] : "?"; }
const char *redop_name(int o) { return (unsigned)o < NREDOP ? redop_names[o] : "?"; }

int dtype_parse(const char *s) {
  for (int i = 0; i < NDTYPE; i++)
    for (int k = 0; k < 4 && dtype_names[i][k]; k++)
      if (strcmp(s, dtype_names[i][k]) == 0) return i;
  return -1;
}

int redop_parse(const char *s) {
  for (int i = 0; i < NREDOP; i++)
    if (strcmp(s, redop_names[i]) == 0) return i;
  return -1;
}

static uint32_t fbits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static float bitsf(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

float f16_to_float(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = h >> 10 & 0x1f, m = h & 0x3ff;
  if (e == 0) { /* zero or subnormal: m * 2^-24 */
    float v = (float)m / 16777216;
    return s ? -v : v;
  }
  return bitsf(s | (e == 31 ? 0x7f800000 : (e + 112) << 23) | m << 13);
}

/* Keep the 11 significant bits f16 has (fewer for a subnormal), rounding
   the rest to nearest, ties to even; a carry moves into the exponent, up to
   infinity. */
uint16_t f16_from_float(float f) {
  uint32_t x = fbits(f), s = x >> 16 & 0x8000, a = x & 0x7fffffff;
  if (a > 0x7f800000) return (uint16_t)(s | 0x7e00); /* NaN */
  int e = (int)(a >> 23) - 127 + 15;                /* the f16 exponent field, if normal */
  if (e >= 31) return (uint16_t)(s | 0x7c00);
  int drop = e >= 1 ? 13 : 14 - e;                  /* low significand bits that do not fit */
  if (drop > 24) return (uint16_t)s;                /* under half the smallest subnormal */
  uint32_t m = (a & 0x7fffff) | 0x800000, h = m >> drop, rest = m & ((1u << drop) - 1), half = 1u << (drop - 1);
  if (rest > half || (rest == half && (h & 1))) h++;
  return (uint16_t)(s | (((uint32_t)(e >= 1 ? e - 1 : 0) << 10) + h));
}

float bf16_to_float(uint16_t h) { return bitsf((uint32_t)h << 16); }

/* bf16 is the top half of a float: round the bottom half away, ties to even. */
uint16_t bf16_from_float(float f) {
  uint32_t x = fbits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)(x >> 16 | 0x40); /* NaN stays NaN */
  return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16);
}

/* Reductions dst[i] = dst[i] (op) src[i]. */
#define RED_FN(name, T, EXPR)                                       \
  static void name(void *d_, const void *s_, size_t n) {           \
    T *d = d_;                                                      \
    const T *s = s_;                                                \
    for (size_t i = 0; i < n; i++) {                                \
      T a = d[i], b = s[i];                                         \
      d[i] = (EXPR);                                                \
    }                                                               \
  }
/* U: the type sums and products are computed in; integers use their
   unsigned type, so that overflow wraps around, as in NCCL. */
#define RED_NUM(tag, T, U)                                          \
  RED_FN(sum_##tag, T, (T)((U)a + (U)b))                            \
  RED_FN(max_##tag, T, a > b ? a : b)                               \
  RED_FN(min_##tag, T, a < b ? a : b)                               \
  RED_FN(prod_##tag, T, (T)((U)a * (U)b))
/* f16 and bf16 compute in float and round back. */
#define RED_HALF(tag, TO, FROM)                                     \
  RED_FN(sum_##tag, uint16_t, FROM(TO(a) + TO(b)))                  \
  RED_FN(max_##tag, uint16_t, TO(a) > TO(b) ? a : b)                \
  RED_FN(min_##tag, uint16_t, TO(a) < TO(b) ? a : b)                \
  RED_FN(prod_##tag, uint16_t, FROM(TO(a) * TO(b)))
RED_NUM(i8, int8_t, uint8_t)
RED_NUM(u8, uint8_t, uint8_t)
RED_NUM(i32, int32_t, uint32_t)
RED_NUM(u32, uint32_t, uint32_t)
RED_NUM(i64, int64_t, uint64_t)
RED_NUM(u64, uint64_t, uint64_t)
RED_HALF(f16, f16_to_float, f16_from_float)
RED_NUM(f32, float, float)
RED_NUM(f64, double, double)
RED_HALF(bf16, bf16_to_float, bf16_from_float)

#define RED_ROW(tag) {sum_##tag, prod_##tag, max_##tag, min_##tag, sum_##tag}
static const RedFn reducers[NDTYPE][NREDOP] = {
  RED_ROW(i8), RED_ROW(u8), RED_ROW(i32), RED_ROW(u32), RED_ROW(i64),
  RED_ROW(u64), RED_ROW(f16), RED_ROW(f32), RED_ROW(f64), RED_ROW(bf16),
};

/* avg's division of a completed sum (see core.h): integers truncate, f16
   and bf16 divide in float. */
#define DIV_FN(tag, T, EXPR)                                        \
  static void div_##tag(void *d_, size_t n, int nranks) {           \
    T *d = d_;                                                      \
    for (size_t i = 0; i < n; i++) {                                \
      T a = d[i];                                                   \
      d[i] = (EXPR);                                                \
    }                                                               \
  }
DIV_FN(i8, int8_t, (int8_t)(a / nranks))
DIV_FN(u8, uint8_t, (uint8_t)(a / nranks))
DIV_FN(i32, int32_t, a / nranks)
DIV_FN(u32, uint32_t, a / (uint32_t)nranks)
DIV_FN(i64, int64_t, a / nranks)
DIV_FN(u64, uint64_t, a / (uint64_t)nranks)
DIV_FN(f16, uint16_t, f16_from_float(f16_to_float(a) / (float)nranks))
DIV_FN(f32, float, a / (float)nranks)
DIV_FN(f64, double, a / nranks)
DIV_FN(bf16, uint16_t, bf16_from_float(bf16_to_float(a) / (float)nranks))

static const PostFn divs[NDTYPE] = {div_i8, div_u8, div_i32, div_u32, div_i64, div_u64, div_f16, div_f32, div_f64,
                                    div_bf16};

static int is_float(Dtype dt) { return dt == DT_F16 || dt == DT_F32 || dt == DT_F64 || dt == DT_BF16; }

/*
** Input element i of rank r, chosen so that every partial result of the
** reduction is exact in the dtype: then any reduction order gives the same
** bits, and the check can be exact.
** - sum, max, min, avg: integers in [-a, a]. Integer types wrap around,
**   which is exact in any order, so a = 30 and i8/u8 sums do wrap. In a
**   floating type, nranks * a stays within the integers it holds exactly
**   (bf16: 256, f16: 2048); with more ranks than that, those beyond
**   contribute 0. avg then divides the exact sum once, rounding as the
**   executors do.
** - prod: floats are +-1, 2 or 1/2, so partial products are powers of two,
**   and only ranks below prod_ranks draw 2 or 1/2, so none leaves the
**   exponent range (f16: 2^15 down to 2^-24). Integers are 1, -1 or 3: odd,
**   so a product that wraps around never becomes 0.
*/
static double input_value(int r, int R, size_t i, Dtype dt, RedOp op) {
  static const double exact[NDTYPE] = {[DT_F16] = 2048, [DT_BF16] = 256, [DT_F32] = 0x1p24, [DT_F64] = 0x1p53};
  static const int prod_ranks[NDTYPE] = {[DT_F16] = 15, [DT_BF16] = 127, [DT_F32] = 127, [DT_F64] = 1023};
  uint64_t h = (uint64_t)r * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 32;
  if (op == RED_PROD) {
    static const double fv[] = {0.5, 1, 2, -1}, iv[] = {1, -1, 3, -1};
    if (!is_float(dt)) return iv[h % 4];
    return r < prod_ranks[dt] ? fv[h % 4] : h % 2 ? 1 : -1;
  }
  double a = 30;
  if (exact[dt] && exact[dt] / R < a) a = floor(exact[dt] / R);
  if (a < 1) {
    if (r >= exact[dt]) return 0;
    a = 1;
  }
  return (double)(int64_t)(h % (uint64_t)(2 * a + 1)) - a;
}

/* Store v (an integer or an exact float) as dtype dt; integers wrap around. */
static void put(void *base, size_t i, Dtype dt, double v) {
  switch (dt) {
  case DT_I8: ((int8_t *)base)[i] = (int8_t)(int64_t)v; break;
  case DT_U8: ((uint8_t *)base)[i] = (uint8_t)(int64_t)v; break;
  case DT_I32: ((int32_t *)base)[i] = (int32_t)v; break;
  case DT_U32: ((uint32_t *)base)[i] = (uint32_t)(int64_t)v; break;
  case DT_I64: ((int64_t *)base)[i] = (int64_t)v; break;
  case DT_U64: ((uint64_t *)base)[i] = (uint64_t)(int64_t)v; break;
  case DT_F16: ((uint16_t *)base)[i] = f16_from_float((float)v); break;
  case DT_F32: ((float *)base)[i] = (float)v; break;
  case DT_F64: ((double *)base)[i] = v; break;
  default: ((uint16_t *)base)[i] = bf16_from_float((float)v); break;
  }
}

/* Element i as a double, for reports (64-bit integers may round). */
static double get(const void *base, size_t i, Dtype dt) {
  switch (dt) {
  case DT_I8: return ((const int8_t *)base)[i];
  case DT_U8: return ((const uint8_t *)base)[i];
  case DT_I32: return ((const int32_t *)base)[i];
  case DT_U32: return ((const uint32_t *)base)[i];
  case DT_I64: return (double)((const int64_t *)base)[i];
  case DT_U64: return (double)((const uint64_t *)base)[i];
  case DT_F16: return f16_to_float(((const uint16_t *)base)[i]);
  case DT_F32: return ((const float *)base)[i];
  case DT_F64: return ((const double *)base)[i];
  default: return bf16_to_float(((const uint16_t *)base)[i]);
  }
}

RedFn data_reducer(Dtype dt, RedOp op) { return reducers[dt][op]; }
PostFn data_post(Dtype dt, RedOp op) { return op == RED_AVG ? divs[dt] : NULL; }

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
      put(base, j, o->dtype, input_value(r, R, i, o->dtype, o->op));
    }
  return buf;
}

void data_check(const Plan *pl, const ExecOpts *o, char *const *buf, ExecResult *res) {
  const Program *p = pl->prog;
  int R = p->nranks, C = p->chunks;
  size_t N = o->count, es = dtype_size[o->dtype], elems[NBUF];
  data_elems(p, N, elems);
  RedFn reduce = data_reducer(o->dtype, o->op);
  PostFn post = data_post(o->dtype, o->op);
  size_t nin = elems[BUF_INPUT], nout = (size_t)(prog_bufchunks(p, BUF_OUTPUT) / C) * N;
  res->max_err = 0, res->nwrong = 0, res->first_wrong[0] = '\0';
  char **in = xmalloc((size_t)R * sizeof *in);
  for (int r = 0; r < R; r++) {
    in[r] = xmalloc(nin * es + 1);
    for (size_t i = 0; i < nin; i++) put(in[r], i, o->dtype, input_value(r, R, i, o->dtype, o->op));
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
      if (post) post(ref, nout, R);
    }
    }
    const char *out = buf[r * 3 + BUF_OUTPUT];
    if (pl->opt.inplace && p->coll == COLL_REDUCESCATTER) out = buf[r * 3 + BUF_INPUT] + (size_t)r * N * es;
    for (size_t i = 0; i < nout; i++) {
      if (memcmp(out + i * es, ref + i * es, es) == 0) continue; /* exact inputs: the very same bits */
      double g = get(out, i, o->dtype), x = get(ref, i, o->dtype), d = g != g ? INFINITY : fabs(g - x);
      if (d > res->max_err) res->max_err = d;
      if (res->nwrong++ == 0)
        snprintf(res->first_wrong, sizeof res->first_wrong, "rank %d output element %zu: got %.17g, expected %.17g",
                 r, i, g, x);
    }
  }
  /* Out of place the input is the caller's, and stays as it was (NCCL's sendbuff is const). */
  for (int r = 0; r < R && !pl->opt.inplace; r++) {
    const char *got = buf[r * 3 + BUF_INPUT];
    for (size_t i = 0; i < nin; i++) {
      if (memcmp(got + i * es, in[r] + i * es, es) == 0) continue;
      if (res->nwrong++ == 0)
        snprintf(res->first_wrong, sizeof res->first_wrong, "rank %d input element %zu: written out of place (%.17g, "
                 "was %.17g)", r, i, get(got, i, o->dtype), get(in[r], i, o->dtype));
    }
  }
  for (int r = 0; r < R; r++) free(in[r]);
  free(in), free(ref);
}
