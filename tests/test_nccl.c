/*
** test_nccl.c — a program written for NCCL, run with libresccl-nccl.so
** preloaded (tests/nccl.sh): ncclCommInitAll on N ranks (`virtual`: all on
** GPU 0, which only the fake NCCL of tests/fake_nccl.c accepts), then
** all-reduce, all-gather and reduce-scatter of f32 and bf16 data in groups,
** (`rank`: communicators made as one process makes them for its GPUs, by
** ncclCommInitRank in a group),
** (`proc`: one process per rank, each making its communicator alone with
** ncclCommInitRank, as torchrun's do),
** out of place and in place, each checked exactly against a reference
** computed here, outputs poisoned first. Under the fake NCCL, which runs
** nothing, every checked call must have run on resccl, fp8 and f16
** all-reduces (no resccl dtype, no kernels under RESCCL_DTYPES) must have
** reached NCCL, and a misaligned one must fail with resccl's message.
**   test_nccl N [virtual] [rank|proc]   exits 77 where there is no GPU
*/
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nccl.h>

enum { MAXR = 8 };
static int R, lo, hi, failures; /* ranks lo to hi - 1 of R are this process's */
static ncclComm_t comm[MAXR];
static cudaStream_t st[MAXR];
static int dev[MAXR];

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      failures++;                                          \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
    }                                                      \
  } while (0)

/* Input element i of rank r: small integers, exact in f32 and bf16 sums. */
static float val(int r, size_t i) { return (float)((r * 7 + (int)(i % 13)) % 11) - 3; }

static unsigned short to_bf16(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return (unsigned short)(u >> 16); /* exact for these values */
}

static float from_bf16(unsigned short h) {
  unsigned u = (unsigned)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Run coll on count elements a rank (its output's share), in one group; compare. */
static void collective(const char *coll, ncclDataType_t dt, size_t count, int inplace) {
  int ag = !strcmp(coll, "allgather"), rs = !strcmp(coll, "reducescatter");
  size_t es = dt == ncclBfloat16 ? 2 : 4, in_n = rs ? count * R : count, out_n = ag ? count * R : count;
  size_t big = (in_n > out_n ? in_n : out_n) * R; /* in place, a buffer holds both */
  unsigned char *host = malloc(big * es);
  char *buf[MAXR];
  for (int r = lo; r < hi; r++) {
    cudaSetDevice(dev[r]);
    cudaMalloc((void **)&buf[r], 2 * big * es);
    cudaMemset(buf[r], 0xff, 2 * big * es); /* poison: NaN */
    for (size_t i = 0; i < in_n; i++) {
      float v = val(r, i);
      if (es == 2) ((unsigned short *)host)[i] = to_bf16(v);
      else ((float *)host)[i] = v;
    }
    char *in = inplace && ag ? buf[r] + (size_t)r * count * es : buf[r];
    cudaMemcpy(in, host, in_n * es, cudaMemcpyHostToDevice);
  }
  for (int r = lo; r < hi; r++) cudaSetDevice(dev[r]), cudaDeviceSynchronize();
  ncclResult_t rc = ncclGroupStart();
  for (int r = lo; r < hi && rc == ncclSuccess; r++) {
    char *b = buf[r], *o = inplace ? b : b + big * es;
    if (ag) rc = ncclAllGather(inplace ? b + (size_t)r * count * es : b, o, count, dt, comm[r], st[r]);
    else if (rs) rc = ncclReduceScatter(b, inplace ? b + (size_t)r * count * es : o, count, dt, ncclSum, comm[r], st[r]);
    else rc = ncclAllReduce(b, o, count, dt, ncclSum, comm[r], st[r]);
  }
  ncclResult_t end = ncclGroupEnd();
  CHECK(rc == ncclSuccess && end == ncclSuccess, "%s: %s", coll, ncclGetErrorString(rc ? rc : end));
  size_t wrong = 0;
  for (int r = lo; r < hi; r++) cudaSetDevice(dev[r]), cudaStreamSynchronize(st[r]);
  for (int r = lo; r < hi; r++) {
    char *o = inplace ? buf[r] + (rs ? (size_t)r * count * es : 0) : buf[r] + big * es;
    cudaSetDevice(dev[r]);
    cudaMemcpy(host, o, out_n * es, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < out_n; i++) {
      float want = 0, got = es == 2 ? from_bf16(((unsigned short *)host)[i]) : ((float *)host)[i];
      if (ag) want = val((int)(i / count), i % count);
      else
        for (int q = 0; q < R; q++) want += val(q, rs ? (size_t)r * count + i : i);
      wrong += got != want;
    }
    cudaFree(buf[r]);
  }
  CHECK(wrong == 0, "%s %s count %zu: %zu wrong", coll, inplace ? "in place" : "out of place", count, wrong);
  printf("%-14s %-5s %-12s count %-8zu %zu wrong\n", coll, es == 2 ? "bf16" : "f32", inplace ? "in place" : "out of place",
         count, wrong);
  free(host);
}

/* This process's ranks: communicators (made as `how` says), then every check. */
static int run(int virt, const char *how, ncclUniqueId *shared) {
  for (int r = 0; r < R; r++) dev[r] = virt ? 0 : r;
  ncclResult_t rc;
  if (!strcmp(how, "proc")) { /* rank 0 makes the id, the others wait for it */
    volatile char *ready = (volatile char *)(shared + 1);
    if (lo == 0) rc = ncclGetUniqueId(shared), __sync_synchronize(), *ready = 1;
    while (!*ready) usleep(100);
    __sync_synchronize();
    cudaSetDevice(dev[lo]);
    rc = ncclCommInitRank(&comm[lo], R, *shared, lo);
  } else if (!strcmp(how, "rank")) {
    ncclUniqueId id;
    rc = ncclGetUniqueId(&id);
    ncclGroupStart();
    for (int r = 0; r < R && rc == ncclSuccess; r++) cudaSetDevice(dev[r]), rc = ncclCommInitRank(&comm[r], R, id, r);
    ncclResult_t end = ncclGroupEnd();
    rc = rc ? rc : end;
  } else {
    rc = ncclCommInitAll(comm, R, dev);
  }
  if (rc != ncclSuccess) return fprintf(stderr, "communicators: %s\n", ncclGetErrorString(rc)), 1;
  for (int r = lo; r < hi; r++) cudaSetDevice(dev[r]), cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking);
  static const char *const colls[] = {"allreduce", "allgather", "reducescatter"};
  for (int c = 0; c < 3; c++)
    for (int inplace = 0; inplace < 2; inplace++) {
      collective(colls[c], ncclFloat32, 4099, inplace);
      collective(colls[c], ncclBfloat16, 1 << 20, inplace);
    }
  /* Under the fake NCCL (and RESCCL_DTYPES=f32,bf16): an fp8 all-reduce (no
     resccl dtype) and an f16 one (no kernels) are NCCL's, one call a rank
     each; a misaligned one fails its group, with resccl's message. */
  long (*fake_calls)(void) = (long (*)(void))dlsym(RTLD_DEFAULT, "fake_nccl_calls");
  if (fake_calls) {
    long before = fake_calls();
    char *b[MAXR];
    CHECK(ncclGroupStart() == ncclSuccess, "group");
    for (int r = lo; r < hi; r++) {
      cudaSetDevice(dev[r]);
      cudaMalloc((void **)&b[r], 1024);
      CHECK(ncclAllReduce(b[r], b[r], 64, (ncclDataType_t)10 /* ncclFloat8e4m3 */, ncclSum, comm[r], st[r]) == ncclSuccess, "fp8");
      CHECK(ncclAllReduce(b[r], b[r], 64, ncclFloat16, ncclSum, comm[r], st[r]) == ncclSuccess, "f16");
    }
    CHECK(ncclGroupEnd() == ncclSuccess, "group end");
    CHECK(before == 0 && fake_calls() == 2 * (hi - lo), "NCCL ran %ld calls before, %ld after", before, fake_calls());
    ncclGroupStart();
    for (int r = lo; r < hi; r++) ncclAllReduce(b[r] + 1, b[r] + 1, 64, ncclFloat32, ncclSum, comm[r], st[r]);
    rc = ncclGroupEnd();
    CHECK(rc == ncclInvalidArgument && strstr(ncclGetLastError(comm[lo]), "aligned"), "misaligned: %d %s", rc,
          ncclGetLastError(comm[lo]));
    for (int r = lo; r < hi; r++) cudaFree(b[r]);
  }
  for (int r = lo; r < hi; r++) CHECK(ncclCommDestroy(comm[r]) == ncclSuccess, "destroy rank %d", r);
  printf("%s%s\n", failures ? "FAILED" : "all checked", strcmp(how, "proc") ? "" : " (one process)");
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  R = argc > 1 ? atoi(argv[1]) : 0;
  int virt = 0;
  const char *how = "all";
  for (int i = 2; i < argc; i++) {
    virt |= !strcmp(argv[i], "virtual");
    if (!strcmp(argv[i], "rank") || !strcmp(argv[i], "proc")) how = argv[i];
  }
  if (strcmp(how, "proc")) { /* one process: every rank */
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) return puts("no GPU: skipped"), 77;
    if (!R) R = ngpu;
    if (R < 1 || R > MAXR || (!virt && R > ngpu)) return fprintf(stderr, "usage: test_nccl N [virtual] [rank|proc]\n"), 2;
    lo = 0, hi = R;
    return run(virt, how, NULL);
  }
  /* A process per rank, forked before any CUDA call (a child cannot use a CUDA its parent started). */
  if (R < 1 || R > MAXR) return fprintf(stderr, "usage: test_nccl N [virtual] proc\n"), 2;
  ncclUniqueId *shared = mmap(NULL, sizeof *shared + 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return perror("mmap"), 2;
  pid_t pid[MAXR];
  for (int r = 0; r < R; r++)
    if ((pid[r] = fork()) == 0) {
      int ngpu = 0;
      if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) _exit(77);
      if (!virt && R > ngpu) fprintf(stderr, "test_nccl: %d ranks, %d GPUs\n", R, ngpu), _exit(2);
      lo = r, hi = r + 1;
      int rc = run(virt, how, shared);
      fflush(stdout);
      _exit(rc);
    }
  int bad = 0, skipped = 0;
  for (int r = 0; r < R; r++) {
    int st_;
    waitpid(pid[r], &st_, 0);
    if (WIFEXITED(st_) && WEXITSTATUS(st_) == 77) skipped++;
    else if (!WIFEXITED(st_) || WEXITSTATUS(st_)) bad = 1, fprintf(stderr, "rank %d failed\n", r);
  }
  if (skipped == R) return puts("no GPU: skipped"), 77;
  return bad;
}
