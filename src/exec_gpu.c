/*
** exec_gpu.c — run a plan on GPUs: write it as a plan file (artifact.c),
** load the GPU runtime (libresccl, found next to this executable or in its
** ../lib, else by the loader's search), and let its job runner call the
** collective through the public API on the inputs data.c makes; the outputs
** are checked against data.c's reference, as on the host. The CLI itself
** never links CUDA, so it runs where there is none.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "../include/resccl.h"
#include "runtime/job.h"

/* Dtype and RedOp are numbered as resccl_datatype_t and resccl_red_op_t (NCCL's order). */
_Static_assert((int)DT_BF16 == (int)resccl_bfloat16 && (int)NDTYPE == (int)resccl_num_types, "dtype numbering");
_Static_assert((int)RED_AVG == (int)resccl_avg && (int)NREDOP == (int)resccl_num_ops, "op numbering");

static void *open_runtime(char *why, size_t n) {
  char exe[PATH_MAX], path[PATH_MAX + 32];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  /* beside it (a build tree), in its prefix's library folder, then where the loader looks */
  const char *tries[] = {"%s/" RESCCL_SONAME, "%s/../" RESCCL_LIBDIR "/" RESCCL_SONAME};
  if (len > 0) {
    exe[len] = '\0';
    *strrchr(exe, '/') = '\0';
    for (size_t i = 0; i < sizeof tries / sizeof *tries; i++) {
      snprintf(path, sizeof path, tries[i], exe);
      if (access(path, R_OK) != 0) continue;
      void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* the first present is the one to use */
      if (!dl) snprintf(why, n, "%s", dlerror());
      return dl;
    }
  }
  void *dl = dlopen(RESCCL_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!dl) snprintf(why, n, RESCCL_SONAME " not found (built only where the CUDA toolkit is): %s", dlerror());
  return dl;
}

int exec_gpu_count(void) {
  char why[600];
  void *dl = open_runtime(why, sizeof why);
  if (!dl) return 0;
  int (*count)(void) = (int (*)(void))dlsym(dl, "resccl_x_gpu_count");
  int n = count ? count() : 0;
  dlclose(dl);
  return n;
}

rcStatus exec_gpu(const Plan *pl, const ExecOpts *o, const GpuOpts *g, ExecResult *res, Err *e) {
  const Program *p = pl->prog;
  int R = p->nranks;
  memset(res, 0, sizeof *res);
  /* The runtime's smallest slot is 4 KiB of whole 16-byte vectors, and it
     raises nmicro until a channel's slice fits one: check what it will run. */
  ExecOpts oo = *o; /* a buffered plan's slot count is set here too */
  int nchan = g->nchan > 0 ? g->nchan : 1;
  oo.slot_bytes = o->slot_bytes < 4096 ? 4096 : (o->slot_bytes + 15) / 16 * 16;
  oo.nmicro = (int)plan_nmicro(pl, o->count, dtype_size[o->dtype], (size_t)nchan, oo.slot_bytes, (size_t)o->nmicro);
  RC_CHECK(exec_check_sizes(pl, &oo, e));
  char why[600];
  void *dl = open_runtime(why, sizeof why);
  if (!dl) return err_set(e, RC_EEXEC, "no GPU runtime: %s", why);
  int (*run)(const RxGpuJob *, RxGpuOut *) = (int (*)(const RxGpuJob *, RxGpuOut *))dlsym(dl, "resccl_x_run_job");
  if (!run) {
    dlclose(dl);
    return err_set(e, RC_EEXEC, "libresccl has no job runner");
  }
  char path[] = "/tmp/resccl-plan-XXXXXX";
  int fd = mkstemp(path);
  Buf art;
  buf_init(&art);
  const Plan *pls[2] = {pl, g->with};
  int npls = g->with && g->with->verified && g->with->opt.inplace != pl->opt.inplace ? 2 : 1;
  rcStatus rc = fd < 0 ? err_set(e, RC_EEXEC, "cannot create a temporary plan file") : plan_file(pls, npls, &art, e);
  if (rc == RC_OK && write(fd, art.s, art.n) != (ssize_t)art.n) rc = err_set(e, RC_EEXEC, "cannot write %s", path);
  if (fd >= 0) close(fd);
  buf_free(&art);
  RxGpuJob job = {.plan_path = path, .collective = coll_name(p->coll), .inplace = pl->opt.inplace, .nranks = R,
                  .ndev = g->ndev, .dtype = (int)o->dtype, .op = (int)o->op, .count = o->count,
                  .esize = dtype_size[o->dtype], .nmicro = oo.nmicro, .nslots = oo.nslots,
                  .threads = g->threads, .iters = g->iters, .nchan = nchan,
                  .direct = o->direct, .slot_bytes = oo.slot_bytes,
                  .timeout_s = (o->timeout_ms > 0 ? o->timeout_ms : 10000) / 1e3};
  data_elems(p, o->count, job.elems);
  job.init = data_buffers(pl, o);
  job.result = xcalloc((size_t)R * 3, sizeof *job.result);
  for (int r = 0; r < R; r++)
    for (int b = 0; b < NBUF; b++) job.result[r * 3 + b] = xcalloc(job.elems[b] * job.esize + 1, 1);
  RxGpuOut out;
  if (rc == RC_OK && run(&job, &out) != 0) rc = err_set(e, RC_EEXEC, "GPU run failed: %s", out.error);
  if (rc == RC_OK) {
    data_check(pl, o, job.result, res);
    res->ms = g->iters > 0 ? out.median_ms : out.first_ms;
    res->ndev = out.ndev;
  }
  unlink(path);
  for (int k = 0; k < R * 3; k++) free(job.init[k]), free(job.result[k]);
  free(job.init), free(job.result);
  dlclose(dl);
  return rc;
}
