/*
** exec_gpu.c — run the emitted program on GPUs: the plan is emitted for the
** CUDA target, compiled with nvcc for sm_90 together with the host driver
** (kernels-templates/gpu_driver.cu) into a shared object (cached on disk by
** the hash of its source), loaded, and run on
** the inputs data.c makes; the outputs are checked against data.c's
** reference, as on the host. Ranks beyond the GPUs present share GPUs.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "../kernels-templates/gpu_job.h"

static const char *nvcc_path(void) {
  const char *n = getenv("NVCC");
  if (n && *n) return n;
  return access("/usr/local/cuda/bin/nvcc", X_OK) == 0 ? "/usr/local/cuda/bin/nvcc" : "nvcc";
}

/* The cache directory for compiled programs: $RESCCL_CACHE, else ~/.cache/resccl. */
static int cache_dir(char *out, size_t n) {
  const char *env = getenv("RESCCL_CACHE"), *home = getenv("HOME");
  if (env && *env) snprintf(out, n, "%s", env);
  else if (home && *home) snprintf(out, n, "%s/.cache/resccl", home);
  else return 0;
  char cmd[800];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", out);
  return system(cmd) == 0;
}

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/*
** Emit the program for CUDA with the driver, and load its shared object:
** from the cache when this exact source was built before for sm_90, else
** built with nvcc and then cached.
*/
static rcStatus build(const Plan *pl, const char *dir, void **dl, Err *e) {
  Buf src, cmd;
  buf_init(&src), buf_init(&cmd);
  buf_puts(&src, tpl_text("gpu_job.h"));
  rcStatus rc = emit_program(pl, EMIT_CUDA, &src, e);
  buf_puts(&src, tpl_text("gpu_driver.cu"));
  char path[700], cache[600], cached[700] = "";
  if (rc == RC_OK && cache_dir(cache, sizeof cache)) {
    snprintf(cached, sizeof cached, "%s/%016llx-sm_90.so", cache, (unsigned long long)fnv1a(src.s, src.n));
    if (access(cached, R_OK) == 0 && (*dl = dlopen(cached, RTLD_NOW | RTLD_LOCAL))) {
      buf_free(&src), buf_free(&cmd);
      return RC_OK;
    }
  }
  snprintf(path, sizeof path, "%s/program.cu", dir);
  FILE *f = rc == RC_OK ? fopen(path, "w") : NULL;
  if (rc == RC_OK && (!f || fwrite(src.s, 1, src.n, f) != src.n)) rc = err_set(e, RC_EEXEC, "cannot write %s", path);
  if (f) fclose(f);
  buf_printf(&cmd, "%s -arch=sm_90 -O2 -shared -Xcompiler -fPIC -diag-suppress 177 -o '%s/program.so' '%s' "
             ">'%s/nvcc.log' 2>&1", nvcc_path(), dir, path, dir);
  if (rc == RC_OK && system(cmd.s) != 0) {
    char first[400] = "";
    snprintf(path, sizeof path, "%s/nvcc.log", dir);
    FILE *lf = fopen(path, "r");
    if (lf) first[fread(first, 1, sizeof first - 1, lf)] = '\0', fclose(lf);
    rc = err_set(e, RC_EEXEC, "compiling the emitted CUDA failed (%s): %s", nvcc_path(), first);
  }
  buf_free(&src), buf_free(&cmd);
  if (rc != RC_OK) return rc;
  snprintf(path, sizeof path, "%s/program.so", dir);
  if (*cached) { /* into the cache, atomically: a rename within one directory */
    char tmp[720], mv[2200];
    snprintf(tmp, sizeof tmp, "%s.%d", cached, (int)getpid());
    snprintf(mv, sizeof mv, "cp '%s' '%s' && mv '%s' '%s'", path, tmp, tmp, cached);
    if (system(mv) == 0) snprintf(path, sizeof path, "%s", cached);
  }
  *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  return *dl ? RC_OK : err_set(e, RC_EEXEC, "cannot load the emitted CUDA program: %s", dlerror());
}

rcStatus exec_gpu(const Plan *pl, const ExecOpts *o, const GpuOpts *g, ExecResult *res, Err *e) {
  const Program *p = pl->prog;
  int R = p->nranks;
  memset(res, 0, sizeof *res);
  ExecOpts oo = *o;
  RC_CHECK(exec_check_sizes(pl, &oo, e));
  char dir[] = "/tmp/resccl-gpu-XXXXXX";
  if (!mkdtemp(dir)) return err_set(e, RC_EEXEC, "cannot create a temporary directory");
  void *dl = NULL;
  rcStatus rc = build(pl, dir, &dl, e);
  char rm[600];
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  if (system(rm) != 0) { /* leftover temp files are harmless */
  }
  if (rc != RC_OK) return rc;
  int (*run)(const RxGpuJob *, RxGpuOut *) = (int (*)(const RxGpuJob *, RxGpuOut *))dlsym(dl, "rx_gpu_run");
  if (!run) {
    dlclose(dl);
    return err_set(e, RC_EEXEC, "the emitted CUDA program has no driver");
  }
  RxGpuJob job = {.nranks = R, .ndev = g->ndev, .chunks = p->chunks, .nmicro = o->nmicro, .nslots = oo.nslots,
                  .dtype = o->dtype, .op = o->op, .threads = g->threads > 0 ? g->threads : 512, .iters = g->iters,
                  .nchan = g->nchan > 0 ? g->nchan : 1,
                  .count = o->count, .esize = dtype_size[o->dtype],
                  .slot_bytes = o->slot_bytes / dtype_size[o->dtype] * dtype_size[o->dtype], .nconn = pl->nconn,
                  .nflags = pl->nflags, .ntb = pl->ntb};
  data_elems(p, o->count, job.elems);
  int *cs = xmalloc(((size_t)pl->nconn + 1) * sizeof *cs), *cd = xmalloc(((size_t)pl->nconn + 1) * sizeof *cd);
  int *fr = xcalloc((size_t)pl->nflags + 1, sizeof *fr);
  for (int c = 0; c < pl->nconn; c++) cs[c] = pl->conn[c].src, cd[c] = pl->conn[c].dst;
  for (int i = 0; i < pl->np; i++)
    if (pl->p[i].flag >= 0) fr[pl->p[i].flag] = pl->p[i].rank;
  job.conn_src = cs, job.conn_dst = cd, job.flag_rank = fr;
  job.init = data_buffers(pl, o);
  job.result = xcalloc((size_t)R * 3, sizeof *job.result);
  for (int r = 0; r < R; r++)
    for (int b = 0; b < NBUF; b++) job.result[r * 3 + b] = xcalloc(job.elems[b] * job.esize + 1, 1);
  RxGpuOut out;
  if (run(&job, &out) != 0) {
    rc = err_set(e, RC_EEXEC, "GPU run failed: %s", out.error);
  } else {
    data_check(pl, o, job.result, res);
    res->ms = g->iters > 0 ? out.median_ms : out.first_ms;
    res->ndev = out.ndev;
  }
  for (int k = 0; k < R * 3; k++) free(job.init[k]), free(job.result[k]);
  free(job.init), free(job.result), free(cs), free(cd), free(fr);
  dlclose(dl);
  return rc;
}
