/*
** bench.cu — resccl-bench: nccl-tests' table for a resccl plan, with NCCL
** measured in the same run.
**   resccl-bench --coll allreduce -b 1M -e 8G -f 2 -g 2 PLAN
** One thread drives every rank: resccl through its public API (resccl.h),
** NCCL through dlopen("libnccl.so.2"), so the binary runs where NCCL is
** absent (its columns then print '-'). Sizes, counts, algbw and busbw follow
** nccl-tests. Inputs come from a formula of (rank, index) whose reductions
** are exact in any order; outputs are poisoned before the checked call and
** compared element by element on the GPU with the formula's result, and out
** of place the inputs with what they held (#wrong).
** Exit status: 0 all good, 1 a call failed or an element was wrong, 2 usage,
** 77 no GPU here (CTest's SKIP_RETURN_CODE).
*/
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "resccl.h"
#include "../dtypes.h"
#include "../setting.h"

#define SKIPPED 77

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("resccl-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

#define CUDA_CHECK(call)                                                      \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) die("%s: %s", #call, cudaGetErrorString(e_));      \
  } while (0)

/* "invalid usage: <what the runtime said>" for a failed resccl call. */
static std::string resccl_message(resccl_result_t rc) {
  std::string m = resccl_get_error_string(rc);
  const char *last = resccl_get_last_error();
  if (last && *last) m = m + ": " + last;
  return m;
}

/* ------------------------------------------------------------ options */

enum Coll { ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, NCOLL };
static const char *const coll_names[NCOLL] = {"allreduce", "allgather", "reducescatter", "alltoall"};

/* Indexed by resccl_datatype_t: nccl-tests' names; resccl's short names and sizes are dtypes.h's. */
static const char *const dtype_names[resccl_num_types] = {"int8",  "uint8", "int32",  "uint32", "int64",
                                                          "uint64", "half", "float", "double", "bfloat16"};
#define SHORT(e, name, size) name,
#define SIZE(e, name, size) size,
static const char *const dtype_short[resccl_num_types] = {RX_DTYPES(SHORT)};
static const int dtype_bytes[resccl_num_types] = {RX_DTYPES(SIZE)};
#undef SHORT
#undef SIZE
static const char *const op_names[resccl_num_ops] = {"sum", "prod", "max", "min", "avg"};

struct Plan {
  std::string path;
  size_t from; /* the plan runs sizes from here to the next plan's from */
};

struct Opts {
  std::vector<Plan> plans;
  Coll coll = ALLREDUCE;
  size_t minbytes = 32 << 20, maxbytes = 32 << 20, stepbytes = 1 << 20;
  long stepfactor = 2; /* 1: add stepbytes instead */
  int ngpus = 1, iters = 20, warmup = 5, check = 1, virt = 0, inplace = 1, nccl = 1, graphs = 0;
  resccl_datatype_t dtype = resccl_float32;
  resccl_red_op_t op = resccl_sum;
};

static const char USAGE[] =
    "usage: resccl-bench [options] PLAN [PLAN@SIZE ...]\n"
    "\n"
    "Runs the collective of PLAN (written by `resccl compile ALG.lua --plan PLAN`) on\n"
    "every size from -b to -e; PLAN@SIZE runs sizes from SIZE on instead (each SIZE\n"
    "larger than the last: resccl_plan_load_range). Prints nccl-tests' table: time, algbw, busbw and\n"
    "#wrong out-of-place and in-place, then NCCL's out-of-place busbw measured in the\n"
    "same run, the ratio ours/NCCL and the thread blocks per GPU of both.\n"
    "\n"
    "  --coll NAME           allreduce|allgather|reducescatter|alltoall (allreduce)\n"
    "  -b, --minbytes SIZE   smallest size, nccl-tests' size column (32M); K M G T\n"
    "  -e, --maxbytes SIZE   largest size (32M)\n"
    "  -f, --stepfactor N    multiply the size by N (2)\n"
    "  -i, --stepbytes SIZE  add SIZE instead\n"
    "  -g, --ngpus N         ranks, rank r on GPU r (1)\n"
    "  --virtual             every rank on GPU 0: correctness, not speed; no NCCL\n"
    "  -n, --iters N         timed calls per size (20)\n"
    "  -w, --warmup_iters N  untimed calls before them (5)\n"
    "  -G, --cudagraph N     capture the -n calls into a CUDA graph per rank's stream\n"
    "                        and time N launches of it: no host time between calls;\n"
    "                        -w 1 or more; --virtual ranks share one stream then (0)\n"
    "  -c, --check N         checked calls per size; 0: #wrong is N/A (1)\n"
    "  -d, --dtype TYPE      int8 uint8 int32 uint32 int64 uint64 half bfloat16 float\n"
    "                        double, or i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64 (float)\n"
    "  -o, --op OP           sum prod max min avg (sum)\n"
    "  --inplace 0|1         run the in-place columns (1)\n"
    "  --nccl 0|1            run NCCL side by side, through libnccl.so.2 (1)\n"
    "  -h, --help            this text\n"
    "\n"
    "Times are CUDA events around -n back-to-back calls on every rank's stream (or\n"
    "-G launches of their graph), the slowest rank's average per call. NCCL runs\n"
    "without NVLink multicast (NCCL_NVLS_ENABLE=0 unless set); its TBs are the grid\n"
    "of its kernel, read from a captured call.\n"
    "Exit status: 0 when every column ran and checked correct, 1 when a call failed\n"
    "or an element was wrong, 2 on a usage error, 77 when this machine lacks the GPUs.\n";

static void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("resccl-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\n(see 'resccl-bench --help')\n", stderr);
  va_end(ap);
  exit(2);
}

/* An integer from lo (src/setting.c). */
static long parse_int(const char *flag, const char *v, long lo) {
  const Setting s = {SET_INT, (double)lo, INT_MAX, 0, 0};
  double x;
  char err[SETTING_ERR];
  if (setting_parse(flag, v, &s, &x, err)) usage_error("%s", err);
  return (long)x;
}

/* nccl-tests' sizes: bytes with an optional K, M, G or T (powers of 1024; KiB and KB too, src/setting.c). */
static size_t parse_size(const char *flag, const char *v) {
  const Setting s = {SET_SIZE, 1, (double)((size_t)1 << 50), 0, 0};
  double x;
  char err[SETTING_ERR];
  if (setting_parse(flag, v, &s, &x, err)) usage_error("%s", err);
  return (size_t)x;
}

static int lookup(const char *flag, const char *v, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(v, names[i]) == 0) return i;
  std::string all;
  for (int i = 0; i < n; i++) all += (i ? "|" : "") + std::string(names[i]);
  usage_error("%s needs %s, got '%s'", flag, all.c_str(), v);
  return -1;
}

static resccl_datatype_t parse_dtype(const char *v) {
  for (int t = 0; t < resccl_num_types; t++)
    if (strcmp(v, dtype_names[t]) == 0 || strcmp(v, dtype_short[t]) == 0) return (resccl_datatype_t)t;
  usage_error("--dtype needs one of int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double "
              "(or i8 ... f64), got '%s'", v);
  return resccl_float32;
}

static Opts parse(int argc, char **argv) {
  enum { O_COLL = 256, O_VIRTUAL, O_INPLACE, O_NCCL };
  static const struct option longs[] = {
      {"coll", required_argument, 0, O_COLL},         {"minbytes", required_argument, 0, 'b'},
      {"maxbytes", required_argument, 0, 'e'},        {"stepfactor", required_argument, 0, 'f'},
      {"stepbytes", required_argument, 0, 'i'},       {"ngpus", required_argument, 0, 'g'},
      {"virtual", no_argument, 0, O_VIRTUAL},         {"iters", required_argument, 0, 'n'},
      {"warmup_iters", required_argument, 0, 'w'},    {"check", required_argument, 0, 'c'},
      {"dtype", required_argument, 0, 'd'},           {"datatype", required_argument, 0, 'd'},
      {"op", required_argument, 0, 'o'},              {"inplace", required_argument, 0, O_INPLACE},
      {"nccl", required_argument, 0, O_NCCL},         {"cudagraph", required_argument, 0, 'G'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  static const char *const onoff[] = {"0", "1"};
  Opts o;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":b:e:f:i:g:n:w:c:d:o:G:h", longs, NULL)) != -1) {
    switch (c) {
    case O_COLL: o.coll = (Coll)lookup("--coll", optarg, coll_names, NCOLL); break;
    case 'b': o.minbytes = parse_size("-b", optarg); break;
    case 'e': o.maxbytes = parse_size("-e", optarg); break;
    case 'f': o.stepfactor = parse_int("-f", optarg, 2); break;
    case 'i': o.stepbytes = parse_size("-i", optarg), o.stepfactor = 1; break;
    case 'g': o.ngpus = (int)parse_int("-g", optarg, 1); break;
    case O_VIRTUAL: o.virt = 1; break;
    case 'n': o.iters = (int)parse_int("-n", optarg, 1); break;
    case 'w': o.warmup = (int)parse_int("-w", optarg, 0); break;
    case 'c': o.check = (int)parse_int("-c", optarg, 0); break;
    case 'G': o.graphs = (int)parse_int("-G", optarg, 0); break;
    case 'd': o.dtype = parse_dtype(optarg); break;
    case 'o': o.op = (resccl_red_op_t)lookup("--op", optarg, op_names, resccl_num_ops); break;
    case O_INPLACE: o.inplace = lookup("--inplace", optarg, onoff, 2); break;
    case O_NCCL: o.nccl = lookup("--nccl", optarg, onoff, 2); break;
    case 'h': fputs(USAGE, stdout), exit(0);
    case ':': usage_error("%s needs a value", argv[optind - 1]); break;
    default:
      if (optopt) usage_error("unknown option '-%c'", optopt);
      usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind == argc) usage_error("a PLAN file is needed");
  for (int i = optind; i < argc; i++) {
    std::string a = argv[i];
    size_t at = a.rfind('@');
    Plan p = {a.substr(0, at), 0};
    if (at != std::string::npos) p.from = parse_size("PLAN@SIZE", a.c_str() + at + 1);
    if (i == optind && p.from) usage_error("the first PLAN runs from the smallest size: no @%s", a.c_str() + at + 1);
    if (i > optind && p.from <= o.plans.back().from) usage_error("%s: sizes must grow from plan to plan", argv[i]);
    o.plans.push_back(p);
  }
  if (o.minbytes > o.maxbytes) usage_error("-b %zu is larger than -e %zu", o.minbytes, o.maxbytes);
  /* A size's first call may allocate, which a capture cannot. */
  if (o.graphs && o.warmup < 1) usage_error("-G needs -w 1 or more: a size's first call may allocate");
  return o;
}

/* ------------------------------------------------------- data on the GPU */

/*
** Inputs are small integers, so every reduction below is exact in any order
** and in every type: sums stay under `limit`, the largest integer the type
** holds exactly (and in range); products are of at most two 2s; for avg the
** values are multiples of nranks, so the mean is exact too.
*/
struct Data {
  int nranks;
  resccl_red_op_t op; /* sum for the collectives that do not reduce */
  unsigned long long limit;
};

__device__ double value(const Data &d, int rank, size_t i) {
  if (d.op == resccl_prod) return i % d.nranks == (size_t)rank || i / d.nranks % d.nranks == (size_t)rank ? 2 : 1;
  unsigned long long span = d.limit / d.nranks / (d.op == resccl_avg ? d.nranks : 1);
  double v = (double)((i * 13 + (size_t)rank * 101) % (span ? span : 1));
  return d.op == resccl_avg ? v * d.nranks : v;
}

/* op over the ranks' values of input element i. */
__device__ double reduce(const Data &d, size_t i) {
  double acc = value(d, 0, i);
  for (int q = 1; q < d.nranks; q++) {
    double v = value(d, q, i);
    switch (d.op) {
    case resccl_prod: acc *= v; break;
    case resccl_max: acc = fmax(acc, v); break;
    case resccl_min: acc = fmin(acc, v); break;
    default: acc += v; break;
    }
  }
  return d.op == resccl_avg ? acc / d.nranks : acc;
}

/* Element j of rank's output; count is the call's count argument. */
__device__ double expected(const Data &d, Coll coll, int rank, size_t count, size_t j) {
  switch (coll) {
  case ALLREDUCE: return reduce(d, j);
  case ALLGATHER: return value(d, (int)(j / count), j % count);
  case REDUCESCATTER: return reduce(d, rank * count + j);
  default: return value(d, (int)(j / count), rank * count + j % count); /* alltoall */
  }
}

template <typename T> __device__ T from_double(double v) { return (T)v; }
template <> __device__ __half from_double<__half>(double v) { return __double2half(v); }
template <> __device__ __nv_bfloat16 from_double<__nv_bfloat16>(double v) { return __double2bfloat16(v); }

template <typename T> __device__ bool same_bits(const T &a, const T &b) {
  const unsigned char *x = (const unsigned char *)&a, *y = (const unsigned char *)&b;
  for (int k = 0; k < (int)sizeof(T); k++)
    if (x[k] != y[k]) return false;
  return true;
}

#define GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

template <typename T> __global__ void fill_kernel(T *buf, size_t n, Data d, int rank) {
  GRID_STRIDE(i, n) buf[i] = from_double<T>(value(d, rank, i));
}

template <typename T>
__global__ void check_kernel(const T *out, size_t n, Data d, Coll coll, int rank, size_t count,
                             unsigned long long *wrong) {
  unsigned long long bad = 0;
  GRID_STRIDE(j, n) bad += !same_bits(out[j], from_double<T>(expected(d, coll, rank, count, j)));
  if (bad) atomicAdd(wrong, bad);
}

/* An out-of-place call leaves its input as it was (NCCL's sendbuff is const). */
template <typename T>
__global__ void intact_kernel(const T *in, size_t n, Data d, int rank, unsigned long long *wrong) {
  unsigned long long bad = 0;
  GRID_STRIDE(i, n) bad += !same_bits(in[i], from_double<T>(value(d, rank, i)));
  if (bad) atomicAdd(wrong, bad);
}

static unsigned grid(size_t n) { return (unsigned)(n / 256 + 1 < 1024 ? n / 256 + 1 : 1024); }

template <typename T> static void fill(void *buf, size_t n, Data d, int rank, cudaStream_t s) {
  fill_kernel<T><<<grid(n), 256, 0, s>>>((T *)buf, n, d, rank);
}

template <typename T>
static void check(const void *out, size_t n, Data d, Coll coll, int rank, size_t count, unsigned long long *wrong,
                  cudaStream_t s) {
  check_kernel<T><<<grid(n), 256, 0, s>>>((const T *)out, n, d, coll, rank, count, wrong);
}

template <typename T>
static void intact(const void *in, size_t n, Data d, int rank, unsigned long long *wrong, cudaStream_t s) {
  intact_kernel<T><<<grid(n), 256, 0, s>>>((const T *)in, n, d, rank, wrong);
}

/* The kernels of each resccl_datatype_t, in its order. */
static const struct {
  void (*fill)(void *, size_t, Data, int, cudaStream_t);
  void (*check)(const void *, size_t, Data, Coll, int, size_t, unsigned long long *, cudaStream_t);
  void (*intact)(const void *, size_t, Data, int, unsigned long long *, cudaStream_t);
} kernels[resccl_num_types] = {
#define K(T) {fill<T>, check<T>, intact<T>}
    K(int8_t), K(uint8_t), K(int32_t), K(uint32_t), K(int64_t), K(uint64_t), K(__half), K(float), K(double),
    K(__nv_bfloat16)
#undef K
};

/* The largest integer each type holds exactly; 2^20 keeps the wide ones small. */
static unsigned long long exact_limit(resccl_datatype_t t) {
  switch (t) {
  case resccl_int8: return 127;
  case resccl_uint8: return 255;
  case resccl_float16: return 2048;
  case resccl_bfloat16: return 256;
  default: return 1 << 20;
  }
}

/* ---------------------------------------------------------------- NCCL */

/* NCCL's C ABI, declared here so that building needs no nccl.h. */
typedef struct ncclComm *ncclComm_t;
typedef int ncclResult_t; /* 0: success */

struct Nccl {
  ncclResult_t (*CommInitAll)(ncclComm_t *, int, const int *);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*AllReduce)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void *, void *, size_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Send)(const void *, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void *, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  const char *(*GetErrorString)(ncclResult_t);
  ncclResult_t (*GetVersion)(int *); /* optional */
};

/* Load libnccl.so.2; NULL on success, else why not. */
static const char *nccl_load(Nccl *x) {
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) return dlerror();
  struct {
    void **fn;
    const char *name;
  } syms[] = {{(void **)&x->CommInitAll, "ncclCommInitAll"}, {(void **)&x->CommDestroy, "ncclCommDestroy"},
              {(void **)&x->AllReduce, "ncclAllReduce"},     {(void **)&x->AllGather, "ncclAllGather"},
              {(void **)&x->ReduceScatter, "ncclReduceScatter"}, {(void **)&x->Send, "ncclSend"},
              {(void **)&x->Recv, "ncclRecv"},               {(void **)&x->GroupStart, "ncclGroupStart"},
              {(void **)&x->GroupEnd, "ncclGroupEnd"},       {(void **)&x->GetErrorString, "ncclGetErrorString"}};
  for (auto &s : syms)
    if (!(*s.fn = dlsym(h, s.name))) return "libnccl.so.2 lacks a symbol this benchmark calls";
  *(void **)&x->GetVersion = dlsym(h, "ncclGetVersion");
  return NULL;
}

/* --------------------------------------------------------------- bench */

/* Element counts of one size, as nccl-tests derives them from the size column. */
struct Shape {
  size_t count;      /* the call's count argument */
  size_t send, recv; /* elements in each rank's input and output */
  size_t bytes;      /* the size column: the larger buffer, also algbw's bytes */
};

static Shape shape(Coll c, size_t bytes, int esize, int n) {
  size_t count = bytes / esize, per = count / n;
  per -= per % (16 / esize); /* per-rank pieces stay 16-byte aligned */
  Shape s;
  switch (c) {
  case ALLREDUCE: s = {count, count, count, 0}; break;
  case ALLGATHER: s = {per, per, per * n, 0}; break;
  case REDUCESCATTER: s = {per, per * n, per, 0}; break;
  default: s = {per, per * n, per * n, 0}; break;
  }
  s.bytes = (s.send > s.recv ? s.send : s.recv) * esize;
  return s;
}

/* nccl-tests' busbw factor: what each rank's links carry relative to algbw. */
static double busbw_factor(Coll c, int n) { return (c == ALLREDUCE ? 2.0 : 1.0) * (n - 1) / n; }

struct Bench {
  Opts o;
  int n, esize;
  Data data;
  std::vector<int> dev;
  std::vector<resccl_comm_t> comm;
  std::vector<ncclComm_t> ncomm; /* empty: NCCL does not run */
  Nccl nccl = {};
  std::vector<cudaStream_t> stream;
  std::vector<cudaEvent_t> start, stop;
  std::vector<char *> send, recv;
  std::vector<unsigned long long *> wrong; /* a device counter per rank */
};

/* Rank r's buffers for a placement, with NCCL's in-place conventions. */
static void buffers(const Bench *b, const Shape &s, int r, int inplace, void **send, void **recv) {
  size_t own = (size_t)r * s.count * b->esize; /* rank r's piece */
  *send = b->send[r], *recv = b->recv[r];
  if (!inplace) return;
  switch (b->o.coll) {
  case ALLGATHER: *send = b->recv[r] + own; break;
  case REDUCESCATTER: *recv = b->send[r] + own; break;
  default: *send = b->recv[r]; break;
  }
}

/* A call on every rank: "" when it was enqueued, else the error. */
typedef std::string (*Launch)(Bench *b, const Shape &s, int inplace);

static std::string launch_resccl(Bench *b, const Shape &s, int inplace) {
  resccl_result_t rc = resccl_group_start();
  if (rc != resccl_success) return resccl_message(rc);
  std::string err;
  for (int r = 0; r < b->n; r++) {
    void *sb, *rb;
    buffers(b, s, r, inplace, &sb, &rb);
    resccl_datatype_t t = b->o.dtype;
    switch (b->o.coll) {
    case ALLREDUCE: rc = resccl_all_reduce(sb, rb, s.count, t, b->o.op, b->comm[r], b->stream[r]); break;
    case ALLGATHER: rc = resccl_all_gather(sb, rb, s.count, t, b->comm[r], b->stream[r]); break;
    case REDUCESCATTER: rc = resccl_reduce_scatter(sb, rb, s.count, t, b->o.op, b->comm[r], b->stream[r]); break;
    default: rc = resccl_all_to_all(sb, rb, s.count, t, b->comm[r], b->stream[r]); break;
    }
    if (rc != resccl_success && err.empty()) err = resccl_message(rc);
  }
  rc = resccl_group_end(); /* always: the group must close */
  if (rc != resccl_success && err.empty()) err = resccl_message(rc);
  return err;
}

/* NCCL, out-of-place; all-to-all is grouped send/recv, as nccl-tests does it. */
static std::string launch_nccl(Bench *b, const Shape &s, int inplace) {
  Nccl &x = b->nccl;
  int t = b->o.dtype, op = b->o.op; /* resccl's enums are NCCL's */
  ncclResult_t rc = x.GroupStart();
  for (int r = 0; r < b->n && rc == 0; r++) {
    ncclComm_t c = b->ncomm[r];
    cudaStream_t st = b->stream[r];
    switch (b->o.coll) {
    case ALLREDUCE: rc = x.AllReduce(b->send[r], b->recv[r], s.count, t, op, c, st); break;
    case ALLGATHER: rc = x.AllGather(b->send[r], b->recv[r], s.count, t, c, st); break;
    case REDUCESCATTER: rc = x.ReduceScatter(b->send[r], b->recv[r], s.count, t, op, c, st); break;
    default:
      for (int p = 0; p < b->n && rc == 0; p++) {
        size_t off = (size_t)p * s.count * b->esize;
        rc = x.Send(b->send[r] + off, s.count, t, p, c, st);
        if (rc == 0) rc = x.Recv(b->recv[r] + off, s.count, t, p, c, st);
      }
    }
  }
  ncclResult_t end = x.GroupEnd(); /* always: the group must close */
  return rc ? x.GetErrorString(rc) : end ? x.GetErrorString(end) : "";
}

/* Poison every output, then write every input, on each rank's stream. */
static void prepare(Bench *b, const Shape &s, int inplace) {
  for (int r = 0; r < b->n; r++) {
    void *sb, *rb;
    buffers(b, s, r, inplace, &sb, &rb);
    CUDA_CHECK(cudaSetDevice(b->dev[r]));
    CUDA_CHECK(cudaMemsetAsync(rb, 0xFF, s.recv * b->esize, b->stream[r])); /* NaN, or -1 / the maximum */
    kernels[b->o.dtype].fill(sb, s.send, b->data, r, b->stream[r]);
    CUDA_CHECK(cudaGetLastError());
  }
}

/* Whether rank r's stream is no earlier rank's (captures and graphs go per stream). */
static bool first_on_stream(const Bench *b, int r) {
  for (int j = 0; j < r; j++)
    if (b->stream[j] == b->stream[r]) return false;
  return true;
}

/* Microseconds per call: warm-ups, then iters calls back to back between
   events (or -G launches of them captured, a graph per rank's stream); the
   slowest rank. */
static double time_calls(Bench *b, Launch launch, const Shape &s, int inplace, std::string *err) {
  for (int i = 0; i < b->o.warmup; i++)
    if (!(*err = launch(b, s, inplace)).empty()) return -1;
  int G = b->o.graphs;
  std::vector<cudaGraphExec_t> exec(b->n);
  if (G) {
    for (int r = 0; r < b->n; r++) {
      if (!first_on_stream(b, r)) continue;
      CUDA_CHECK(cudaSetDevice(b->dev[r]));
      CUDA_CHECK(cudaStreamBeginCapture(b->stream[r], cudaStreamCaptureModeThreadLocal));
    }
    for (int i = 0; i < b->o.iters && err->empty(); i++) *err = launch(b, s, inplace);
    /* Every capture ends (also after a failed call) before any graph is
       instantiated, which no capture may be going on for. */
    std::vector<cudaGraph_t> g(b->n);
    cudaError_t ce = cudaSuccess;
    for (int r = 0; r < b->n; r++) {
      if (!first_on_stream(b, r)) continue;
      CUDA_CHECK(cudaSetDevice(b->dev[r]));
      cudaError_t e = cudaStreamEndCapture(b->stream[r], &g[r]);
      if (ce == cudaSuccess) ce = e;
    }
    for (int r = 0; r < b->n && ce == cudaSuccess; r++) {
      if (!g[r]) continue;
      CUDA_CHECK(cudaSetDevice(b->dev[r]));
      ce = cudaGraphInstantiate(&exec[r], g[r], 0);
    }
    for (int r = 0; r < b->n; r++)
      if (g[r]) cudaGraphDestroy(g[r]);
    if (ce != cudaSuccess && err->empty()) *err = std::string("capturing a CUDA graph: ") + cudaGetErrorString(ce);
    if (!err->empty()) {
      for (int r = 0; r < b->n; r++)
        if (exec[r]) cudaGraphExecDestroy(exec[r]);
      return -1;
    }
  }
  for (int r = 0; r < b->n; r++) {
    CUDA_CHECK(cudaSetDevice(b->dev[r]));
    CUDA_CHECK(cudaEventRecord(b->start[r], b->stream[r]));
  }
  for (int i = 0; i < G; i++)
    for (int r = 0; r < b->n; r++) {
      if (!exec[r]) continue;
      CUDA_CHECK(cudaSetDevice(b->dev[r]));
      CUDA_CHECK(cudaGraphLaunch(exec[r], b->stream[r]));
    }
  for (int i = 0; i < (G ? 0 : b->o.iters); i++)
    if (!(*err = launch(b, s, inplace)).empty()) return -1;
  float worst = 0;
  for (int r = 0; r < b->n; r++) {
    float ms;
    CUDA_CHECK(cudaSetDevice(b->dev[r]));
    CUDA_CHECK(cudaEventRecord(b->stop[r], b->stream[r]));
    CUDA_CHECK(cudaEventSynchronize(b->stop[r]));
    CUDA_CHECK(cudaEventElapsedTime(&ms, b->start[r], b->stop[r]));
    if (ms > worst) worst = ms;
    if (exec[r]) CUDA_CHECK(cudaGraphExecDestroy(exec[r]));
  }
  return worst * 1e3 / b->o.iters / (G ? G : 1);
}

/* Wrong elements (out of place, inputs changed too) over -c checked resccl calls on every rank; -1 when a
   call failed. */
static long long count_wrong(Bench *b, const Shape &s, int inplace, std::string *err) {
  long long total = 0;
  for (int c = 0; c < b->o.check; c++) {
    prepare(b, s, inplace);
    if (!(*err = launch_resccl(b, s, inplace)).empty()) return -1;
    for (int r = 0; r < b->n; r++) {
      void *sb, *rb;
      buffers(b, s, r, inplace, &sb, &rb);
      CUDA_CHECK(cudaSetDevice(b->dev[r]));
      CUDA_CHECK(cudaMemsetAsync(b->wrong[r], 0, sizeof *b->wrong[r], b->stream[r]));
      kernels[b->o.dtype].check(rb, s.recv, b->data, b->o.coll, r, s.count, b->wrong[r], b->stream[r]);
      if (!inplace) kernels[b->o.dtype].intact(sb, s.send, b->data, r, b->wrong[r], b->stream[r]);
      CUDA_CHECK(cudaGetLastError());
    }
    for (int r = 0; r < b->n; r++) {
      unsigned long long w;
      CUDA_CHECK(cudaSetDevice(b->dev[r]));
      CUDA_CHECK(cudaMemcpyAsync(&w, b->wrong[r], sizeof w, cudaMemcpyDeviceToHost, b->stream[r]));
      CUDA_CHECK(cudaStreamSynchronize(b->stream[r]));
      total += (long long)w;
    }
  }
  return total;
}

/*
** Thread blocks per GPU of NCCL's kernel for this size: capture one call
** into a CUDA graph per stream and read the grid of its kernel node (NCCL
** runs one block per channel and drops channels for small sizes). The
** driver's getter is used because the runtime's cannot describe a kernel
** that another library loaded. -1 when it cannot be read.
*/
static int nccl_blocks(Bench *b, const Shape &s) {
  static PFN_cuGraphKernelNodeGetParams_v12000 get_params;
  static bool looked;
  if (!looked) {
    cudaDriverEntryPointQueryResult found;
    looked = true;
    if (cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", (void **)&get_params, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      get_params = NULL;
  }
  if (!get_params) return -1;
  std::vector<cudaGraph_t> g(b->n, (cudaGraph_t)NULL);
  bool ok = true;
  for (int r = 0; r < b->n; r++) {
    CUDA_CHECK(cudaSetDevice(b->dev[r]));
    ok &= cudaStreamBeginCapture(b->stream[r], cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  }
  ok = ok && launch_nccl(b, s, 0).empty();
  for (int r = 0; r < b->n; r++) { /* every stream leaves capture, whatever happened */
    CUDA_CHECK(cudaSetDevice(b->dev[r]));
    ok &= cudaStreamEndCapture(b->stream[r], &g[r]) == cudaSuccess;
  }
  int blocks = -1;
  size_t nnodes = 0;
  if (ok && cudaGraphGetNodes(g[0], NULL, &nnodes) == cudaSuccess) {
    std::vector<cudaGraphNode_t> nodes(nnodes);
    cudaGraphGetNodes(g[0], nodes.data(), &nnodes);
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      CUDA_KERNEL_NODE_PARAMS p;
      if (cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel &&
          get_params((CUgraphNode)node, &p) == CUDA_SUCCESS) {
        int grid_blocks = (int)(p.gridDimX * p.gridDimY * p.gridDimZ);
        if (grid_blocks > blocks) blocks = grid_blocks;
      }
    }
  }
  for (cudaGraph_t x : g)
    if (x) cudaGraphDestroy(x);
  cudaGetLastError(); /* a failed capture leaves no sticky error */
  return blocks;
}

/* The channels NCCL was pinned to by NCCL_MIN/MAX_NCHANNELS, or -1. */
static int nccl_env_channels(void) {
  const char *lo = getenv("NCCL_MIN_NCHANNELS"), *hi = getenv("NCCL_MAX_NCHANNELS");
  return lo && hi && atoi(lo) == atoi(hi) && atoi(lo) > 0 ? atoi(lo) : -1;
}

/* ------------------------------------------------------------- output */

/* nccl-tests' time: as many decimals (up to 2) as fit in 7 characters. */
static const char *fmt_time(char *buf, double us) {
  for (int p = 2; p >= 0; p--)
    if (snprintf(buf, 16, "%.*f", p, us) <= 7) break;
  return buf;
}

static const char *fmt_num(char *buf, const char *fmt, double v, bool have) {
  if (!have) return strcpy(buf, "-");
  snprintf(buf, 16, fmt, v);
  return buf;
}

static void print_header(const Bench *b, const char *nccl_state, int blocks) {
  const Opts &o = b->o;
  std::string plans;
  for (const Plan &p : o.plans)
    plans += (plans.empty() ? "" : ", ") + p.path + (p.from ? " from " + std::to_string(p.from) + " B" : "");
  printf("# resccl-bench: %s, %s, %d rank%s %s\n", plans.c_str(), coll_names[o.coll], b->n, b->n == 1 ? "" : "s",
         o.virt ? "on GPU 0 (virtual ranks)" : "one per GPU");
  printf("# minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d\n", o.minbytes,
         o.maxbytes, o.stepfactor > 1 ? (size_t)o.stepfactor : o.stepbytes, o.stepfactor > 1 ? "factor" : "bytes",
         o.warmup, o.iters, o.check);
  printf("# resccl: plan's thread blocks per GPU %s; NCCL: %s\n", blocks >= 0 ? std::to_string(blocks).c_str() : "-",
         nccl_state);
  for (int r = 0; r < b->n; r++) {
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, b->dev[r]));
    printf("#  Rank %2d Pid %6d on device %2d [%04x:%02x:%02x.0] %s\n", r, (int)getpid(), b->dev[r], p.pciDomainID,
           p.pciBusID, p.pciDeviceID, p.name);
  }
  printf("#\n");
  printf("# %10s  %12s  %8s  %6s  %-31s  %-31s  %s\n", "", "", "", "", "out-of-place", "in-place",
         "NCCL out-of-place, TBs per GPU");
  printf("# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %9s  %5s  %5s\n", "size", "count",
         "type", "redop", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "busbw", "ratio",
         "TBs", "TBs");
  printf("# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %9s  %5s  %5s\n", "(B)",
         "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(GB/s)", "ours/NCCL",
         "ours", "NCCL");
}

/* One placement's result at one size. */
struct Result {
  double us = -1;       /* < 0: not run or failed */
  long long wrong = -1; /* < 0: not checked */
  std::string err;      /* why the call failed */
};

static void print_placement(const Bench *b, const Shape &s, const Result &x, double *busbw) {
  char t[16], a[16], u[16], w[16];
  if (x.us < 0) {
    printf("  %7s  %6s  %6s  %6s", "n/a", "n/a", "n/a", "n/a");
    return;
  }
  double algbw = x.us > 0 ? s.bytes / x.us / 1e3 : 0; /* bytes/us/1e3 = GB/s */
  *busbw = algbw * busbw_factor(b->o.coll, b->n);
  snprintf(a, sizeof a, "%.2f", algbw), snprintf(u, sizeof u, "%.2f", *busbw);
  if (b->o.check == 0) strcpy(w, "N/A");
  else snprintf(w, sizeof w, "%lld", x.wrong);
  printf("  %7s  %6s  %6s  %6s", fmt_time(t, x.us), a, u, w);
}

/* ---------------------------------------------------------------- main */

static void setup(Bench *b, std::string *nccl_state) {
  const Opts &o = b->o;
  b->n = o.ngpus, b->esize = dtype_bytes[o.dtype];
  b->data = {b->n, o.coll == ALLREDUCE || o.coll == REDUCESCATTER ? o.op : resccl_sum, exact_limit(o.dtype)};
  for (int r = 0; r < b->n; r++) b->dev.push_back(o.virt ? 0 : r);
  b->comm.resize(b->n);
  resccl_result_t rc = resccl_comm_init_all(b->comm.data(), b->n, b->dev.data());
  if (rc != resccl_success) die("resccl_comm_init_all: %s", resccl_message(rc).c_str());
  setenv("RESCCL_DTYPES", dtype_short[o.dtype], 0); /* kernels for the one dtype it runs: a faster first build */
  for (size_t i = 0; i < o.plans.size(); i++) {
    size_t hi = i + 1 < o.plans.size() ? o.plans[i + 1].from - 1 : SIZE_MAX;
    if ((rc = resccl_plan_load_range(b->comm[0], o.plans[i].path.c_str(), o.plans[i].from, hi)) != resccl_success)
      die("cannot load plan %s: %s", o.plans[i].path.c_str(), resccl_message(rc).c_str());
  }

  const char *why = NULL;
  if (!o.nccl) *nccl_state = "off (--nccl 0)";
  else if (o.virt) *nccl_state = "not run (NCCL takes one rank per GPU)";
  else if ((why = nccl_load(&b->nccl))) *nccl_state = std::string("not loaded (") + why + ")";
  else {
    setenv("NCCL_NVLS_ENABLE", "0", 0);    /* the baseline is NCCL without NVLink multicast */
    setenv("NCCL_GRAPH_REGISTER", "0", 0); /* the TB capture then runs as the timed calls do */
    std::vector<ncclComm_t> nc(b->n);
    ncclResult_t nr = b->nccl.CommInitAll(nc.data(), b->n, b->dev.data());
    int v = 0;
    if (nr) *nccl_state = std::string("ncclCommInitAll failed: ") + b->nccl.GetErrorString(nr);
    else {
      b->ncomm = nc;
      if (b->nccl.GetVersion) b->nccl.GetVersion(&v);
      char s[64];
      snprintf(s, sizeof s, "%d.%d.%d, libnccl.so.2, same buffers", v / 10000, v / 100 % 100, v % 100);
      *nccl_state = s;
    }
  }

  /* Buffers for the largest size; in-place calls use pieces of them. */
  Shape big = shape(o.coll, o.maxbytes, b->esize, b->n);
  b->stream.resize(b->n), b->start.resize(b->n), b->stop.resize(b->n);
  b->send.resize(b->n), b->recv.resize(b->n), b->wrong.resize(b->n);
  for (int r = 0; r < b->n; r++) {
    CUDA_CHECK(cudaSetDevice(b->dev[r]));
    /* A capture per stream: with -G, virtual ranks share one (ranks of a GPU on several streams are
       joined by events, which separate captures refuse). */
    if (o.graphs && o.virt && r) b->stream[r] = b->stream[0];
    else CUDA_CHECK(cudaStreamCreateWithFlags(&b->stream[r], cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&b->start[r]));
    CUDA_CHECK(cudaEventCreate(&b->stop[r]));
    /* at least 16 bytes: a size that rounds to no elements still gets real pointers */
    CUDA_CHECK(cudaMalloc(&b->send[r], big.send * b->esize + 16));
    CUDA_CHECK(cudaMalloc(&b->recv[r], big.recv * b->esize + 16));
    CUDA_CHECK(cudaMalloc(&b->wrong[r], sizeof *b->wrong[r]));
  }
}

int main(int argc, char **argv) {
  Bench b;
  b.o = parse(argc, argv);
  const Opts &o = b.o;
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev == 0) {
    fprintf(stderr, "resccl-bench: no CUDA GPU on this machine (%s): skipped\n",
            ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
    return SKIPPED;
  }
  if (!o.virt && ndev < o.ngpus) {
    fprintf(stderr, "resccl-bench: -g %d needs %d GPUs, this machine has %d (--virtual puts every rank on GPU 0): "
            "skipped\n", o.ngpus, o.ngpus, ndev);
    return SKIPPED;
  }

  std::string nccl_state;
  setup(&b, &nccl_state);
  int blocks = -1;
  if (resccl_plan_blocks(b.comm[0], coll_names[o.coll], &blocks) != resccl_success) blocks = -1;
  print_header(&b, nccl_state.c_str(), blocks);

  const char *redop = o.coll == ALLREDUCE || o.coll == REDUCESCATTER ? op_names[o.op] : "none";
  int failed = 0;
  long long wrong = 0;
  double busbw_sum = 0, nccl_sum = 0;
  int busbw_n = 0, nccl_n = 0;
  std::string last_err[2];
  for (size_t bytes = o.minbytes; bytes <= o.maxbytes;
       bytes = o.stepfactor > 1 ? bytes * o.stepfactor : bytes + o.stepbytes) {
    Shape s = shape(o.coll, bytes, b.esize, b.n);
    Result ours[2];
    for (int ip = 0; ip <= o.inplace; ip++) {
      Result &x = ours[ip];
      prepare(&b, s, ip);
      x.us = time_calls(&b, launch_resccl, s, ip, &x.err);
      if (x.us >= 0 && o.check) x.wrong = count_wrong(&b, s, ip, &x.err);
      if (!x.err.empty()) {
        x.us = -1, failed = 1;
        if (x.err != last_err[ip]) /* once while it repeats */
          fprintf(stderr, "resccl-bench: %s, %zu B: %s\n", ip ? "in-place" : "out-of-place", s.bytes, x.err.c_str());
        last_err[ip] = x.err;
      }
      if (x.wrong > 0) wrong += x.wrong, failed = 1;
    }
    double nccl_us = -1;
    int nccl_tb = nccl_env_channels();
    if (!b.ncomm.empty()) {
      std::string err;
      prepare(&b, s, 0);
      nccl_us = time_calls(&b, launch_nccl, s, 0, &err);
      if (!err.empty()) fprintf(stderr, "resccl-bench: NCCL, %zu B: %s\n", s.bytes, err.c_str());
      int tb = nccl_blocks(&b, s);
      if (tb > 0) nccl_tb = tb;
    }
    for (int r = 0; r < b.n; r++) {
      resccl_result_t ae = resccl_success, rc = resccl_comm_get_async_error(b.comm[r], &ae);
      if (rc == resccl_success) rc = ae;
      if (rc != resccl_success) die("rank %d after %zu B: %s", r, s.bytes, resccl_message(rc).c_str());
    }

    char c[4][16];
    double bus[2] = {-1, -1};
    printf("%12zu  %12zu  %8s  %6s", s.bytes, s.count, dtype_names[o.dtype], redop);
    for (int ip = 0; ip < 2; ip++) {
      print_placement(&b, s, ours[ip], &bus[ip]);
      if (bus[ip] >= 0) busbw_sum += bus[ip], busbw_n++;
    }
    double nccl_bus = nccl_us > 0 ? s.bytes / nccl_us / 1e3 * busbw_factor(o.coll, b.n) : -1;
    if (nccl_bus >= 0) nccl_sum += nccl_bus, nccl_n++;
    int tbs = -1; /* this size's: a plan's copy-engine form has fewer */
    if (resccl_call_blocks(b.comm[0], coll_names[o.coll], s.bytes, &tbs) != resccl_success) tbs = -1;
    printf("  %7s  %9s  %5s  %5s\n", fmt_num(c[0], "%.2f", nccl_bus, nccl_bus >= 0),
           fmt_num(c[1], "%.2f", bus[0] / nccl_bus, bus[0] >= 0 && nccl_bus > 0),
           fmt_num(c[2], "%.0f", tbs, tbs >= 0), fmt_num(c[3], "%.0f", nccl_tb, nccl_tb > 0));
    fflush(stdout);
  }
  printf("# Out of bounds values : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
  if (nccl_n) printf("# NCCL avg bus bandwidth (out-of-place) : %g\n", nccl_sum / nccl_n);
  printf("# Avg bus bandwidth    : %g\n#\n", busbw_n ? busbw_sum / busbw_n : 0.0);

  for (int r = 0; r < b.n; r++) resccl_comm_destroy(b.comm[r]);
  for (ncclComm_t c : b.ncomm) b.nccl.CommDestroy(c);
  return failed ? 1 : 0;
}
