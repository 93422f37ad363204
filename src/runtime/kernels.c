/*
** kernels.c — a plan's kernels from their CUDA source: NVRTC for the GPU's
** own arch, cubins cached on disk ($RESCCL_CACHE or ~/.cache/resccl, keyed
** by the source, the options and the arch), several built at once.
*/
#define _GNU_SOURCE
#include <nvrtc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime.h"
#include "../fnv.h"
#include "../wfile.h"

/* Where the cubin of (src, options, arch) is cached, or "" for nowhere (no
   cache directory, or a path too long). NVRTC's version is part of the key:
   a newer one's cubin may not load on an older driver. */
static void cache_path(char *out, size_t n, const char *src, int arch, const char *options) {
  const char *env = getenv("RESCCL_CACHE"), *home = getenv("HOME");
  char dir[512] = "";
  int len = env && *env ? snprintf(dir, sizeof dir, "%s", env)
            : home && *home ? snprintf(dir, sizeof dir, "%s/.cache/resccl", home) : 0;
  *out = '\0';
  if (len <= 0 || (size_t)len >= sizeof dir) return;
  /* mkdir -p, one level at a time */
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') *p = '\0', mkdir(dir, 0755), *p = '/';
  mkdir(dir, 0755);
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  uint64_t h = fnv1a(FNV_BASIS, src, strlen(src)) ^ fnv1a(FNV_BASIS, options, strlen(options)) * 31 ^ (uint64_t)(major * 1000 + minor) << 48;
  if ((size_t)snprintf(out, n, "%s/%016llx-sm_%d.cubin", dir, (unsigned long long)h, arch) >= n) *out = '\0';
}

/* The cubin of `src` for sm_<arch>, blocks of `threads` and `dtypes`: from
   the cache, else from NVRTC (then cached). */
resccl_result_t rt_cubin(const char *src, int arch, int threads, unsigned dtypes, char **cubin, size_t *n) {
  char cached[700], extra[600], archopt[40], inc[600];
  const char *user = getenv("RESCCL_NVRTC_OPTIONS"), *home = getenv("CUDA_HOME");
  /* RESCCL_NVRTC_OPTIONS (space-separated, e.g. -DRX_UNROLL=8), then the
     kernel's launch bound (registers are budgeted for that many threads per
     block) and the dtypes it reduces (their data movers are most of a
     reducing kernel's build), last so that they win. */
  int len = snprintf(extra, sizeof extra, "%s -DRX_THREADS=%d", user ? user : "", threads);
  if (dtypes && len > 0 && (size_t)len < sizeof extra)
    len += snprintf(extra + len, sizeof extra - (size_t)len, " -DRX_DTYPES=0x%x", dtypes);
  if (len < 0 || (size_t)len >= sizeof extra) return rt_fail(resccl_invalid_argument, "RESCCL_NVRTC_OPTIONS is too long");
  len = snprintf(inc, sizeof inc, "--include-path=%s/include", home && *home ? home : "/usr/local/cuda");
  if (len < 0 || (size_t)len >= sizeof inc) return rt_fail(resccl_invalid_argument, "CUDA_HOME is too long");
  snprintf(archopt, sizeof archopt, "--gpu-architecture=sm_%d", arch);
  cache_path(cached, sizeof cached, src, arch, extra);
  /* A cached file that is not a cubin (cut short, or not ours) is built again and replaced. */
  if (*cached && (*cubin = wfile_read(cached, SIZE_MAX, n))) {
    if (*n > 4 && !memcmp(*cubin, "\x7f" "ELF", 4)) return resccl_success;
    free(*cubin);
  }
  const char *opts[32] = {archopt, inc, "--std=c++17", "-default-device", "--diag-suppress=177"};
  int nopt = 5;
  for (char *save = NULL, *tok = strtok_r(extra, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    if (nopt == 32) return rt_fail(resccl_invalid_argument, "RESCCL_NVRTC_OPTIONS has too many options");
    opts[nopt++] = tok;
  }
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src, "plan.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
    return rt_fail(resccl_system_error, "NVRTC cannot create a program");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  nvrtcResult rc = nvrtcCompileProgram(prog, nopt, opts);
  if (rc != NVRTC_SUCCESS) {
    size_t ln = 0;
    nvrtcGetProgramLogSize(prog, &ln);
    char *log = malloc(ln + 1);
    if (log) nvrtcGetProgramLog(prog, log), log[ln] = '\0';
    resccl_result_t r = rt_fail(resccl_system_error, "NVRTC: %s: %.800s", nvrtcGetErrorString(rc), log ? log : "");
    free(log), nvrtcDestroyProgram(&prog);
    return r;
  }
  nvrtcGetCUBINSize(prog, n);
  if (!(*cubin = malloc(*n))) return nvrtcDestroyProgram(&prog), rt_fail(resccl_system_error, "out of memory");
  nvrtcGetCUBIN(prog, *cubin);
  nvrtcDestroyProgram(&prog);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  INFO("NVRTC built sm_%d kernel (%zu bytes of source) in %.0f ms", arch, strlen(src),
       (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
  if (*cached) wfile_write(cached, *cubin, *n, 0644); /* into the cache whole, or not at all */
  return resccl_success;
}

static void *build_one(void *arg) {
  RtBuild *b = arg;
  b->rc = rt_cubin(b->src, b->arch, b->threads, b->dtypes, &b->cubin, &b->n);
  if (b->rc != resccl_success) snprintf(b->err, sizeof b->err, "%s", resccl_get_last_error());
  return NULL;
}

/* A thread each: NVRTC takes seconds a kernel, single-threaded, and a plan
   file has up to six placements and forms. The first failure, recorded
   again in the calling thread (rt_fail's message is per thread). */
resccl_result_t rt_build_all(RtBuild *b, int n) {
  pthread_t *th = calloc((size_t)n + 1, sizeof *th);
  int *up = calloc((size_t)n + 1, sizeof *up); /* a thread runs it; else it ran here */
  for (int i = 0; i < n; i++)
    if (!th || !up || !(up[i] = pthread_create(&th[i], NULL, build_one, &b[i]) == 0)) build_one(&b[i]);
  for (int i = 0; th && up && i < n; i++)
    if (up[i]) pthread_join(th[i], NULL);
  free(th), free(up);
  for (int i = 0; i < n; i++)
    if (b[i].rc != resccl_success) return rt_fail(b[i].rc, "%s", b[i].err);
  return resccl_success;
}
