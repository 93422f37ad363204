/*
** plan.c — plan files loaded into a group of communicators: read and
** checked (planfile.c), every placement's kernel built for each GPU arch
** at once (kernels.c) and set up on the GPUs (variant.c), then given its
** sizes among the collective's loaded plans; unloading; and building a
** plan file's kernels without a GPU (resccl_x_plan_build).
*/
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exchange.h"
#include "objects.h"
#include "transport.h"
#include "../fnv.h"
#include "../wfile.h"

resccl_result_t pf_read(const char *path, PfSection **out, int *nout, unsigned long long *hash) {
  *out = NULL, *nout = 0;
  size_t n;
  char *text = wfile_read(path, PF_MAXFILE, &n), err[1024];
  if (!text)
    return errno == EFBIG ? rt_fail(resccl_invalid_argument, "%s: over %d bytes: not a plan file", path, PF_MAXFILE)
                          : rt_fail(resccl_system_error, "%s: cannot read (%s)", path, strerror(errno));
  if (hash) *hash = fnv1a(FNV_BASIS, text, n);
  int ok = pf_parse(path, text, n, out, nout, err, sizeof err);
  free(text);
  return ok ? resccl_success : rt_fail(resccl_invalid_argument, "%s", err);
}

void plan_unload(Group *g, RtPlan *p) {
  for (int i = 0; i < 6; i++) {
    Variant *v = p->v[i / 3][i % 3];
    trace_write(g, v, p->conf.trace), variant_free(g, v), gq_open_forget(&g->open, v);
  }
  free(p);
}

/* Every placement's kernel for every GPU arch of the group (Variant.dev[d].cubin),
   built at once. */
static resccl_result_t build_kernels(Group *g, RtPlan *p) {
  int arch[MAXDEV], narch = 0, at[MAXDEV];
  for (int d = 0; d < g->ndevs; d++) {
    int major = 0, minor = 0;
    CU(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, g->dev[d]));
    CU(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, g->dev[d]));
    for (at[d] = 0; at[d] < narch && arch[at[d]] != major * 10 + minor; at[d]++) {
    }
    if (at[d] == narch) arch[narch++] = major * 10 + minor;
  }
  RtBuild *b = calloc(6 * (size_t)narch, sizeof *b);
  if (!b) return rt_fail(resccl_system_error, "out of memory");
  int nb = 0;
  for (int i = 0; i < 6; i++)
    for (int k = 0; k < narch && p->v[i / 3][i % 3]; k++)
      b[nb++] = (RtBuild){.src = p->v[i / 3][i % 3]->pf.src, .arch = arch[k], .threads = p->conf.threads,
                          .dtypes = p->conf.dtypes};
  resccl_result_t rc = rt_build_all(b, nb);
  for (int i = 0, j = 0; i < 6; i++)
    for (int k = 0; k < narch && p->v[i / 3][i % 3]; k++, j++) {
      Variant *v = p->v[i / 3][i % 3];
      for (int d = 0; d < g->ndevs && rc == resccl_success; d++) {
        if (at[d] != k) continue;
        if (!(v->dev[d].cubin = malloc(b[j].n))) {
          rc = rt_fail(resccl_system_error, "out of memory");
          break;
        }
        memcpy(v->dev[d].cubin, b[j].cubin, b[j].n);
      }
      free(b[j].cubin);
    }
  free(b);
  return rc;
}

/* Where the group spans processes: every rank's GPUs finish their earlier
   work (a plan it replaces can go), then the ranks compare their files and
   settings (pf_agree). */
static resccl_result_t agree(Group *g, resccl_result_t rc, const char *path, unsigned long long hash, const RtConf *c,
                             size_t lo, size_t hi) {
  /* Every rank's earlier calls are done before any rank unloads what they ran (a new plan replaces them). */
  for (int d = 0; d < g->ndevs && rc == resccl_success; d++)
    if (cudaSetDevice(g->dev[d]) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
      rc = rt_fail(resccl_unhandled_cuda_error, "resccl_plan_load: GPU %d failed before the load", g->dev[d]);
  PfAgree me, *all = calloc((size_t)g->n, sizeof *all);
  memset(&me, 0, sizeof me);
  me = (PfAgree){hash, lo, hi, c->slot_bytes, c->tile_bytes, c->nchan, c->slices, c->nslots, c->nmicro, c->direct,
                 c->dtypes, ""};
  size_t len = strlen(path);
  snprintf(me.file, sizeof me.file, "%s", path + (len < sizeof me.file ? 0 : len - sizeof me.file + 1));
  if (!all) rc = rc ? rc : rt_fail(resccl_system_error, "out of memory");
  rc = ex_round(g->x, rc, &me, sizeof me, all, "resccl_plan_load");
  char err[512];
  if (rc == resccl_success && !pf_agree(all, g->n, err, sizeof err))
    rc = rt_fail(resccl_invalid_usage, "resccl_plan_load: %s", err);
  free(all);
  return rc;
}

/* Whether new plan p's sizes cover loaded plan q's (q goes when p comes). */
static int covers(const RtPlan *p, const RtPlan *q) {
  return !strcmp(q->coll, p->coll) && p->lo <= q->lo && q->hi <= p->hi;
}

/* rc: what the checks before it found; where the group spans processes,
   the load goes through its rounds all the same, so that the other ranks
   fail at once too. */
static resccl_result_t plan_load(resccl_comm_t comm, const char *path, const RtConf *conf, size_t lo, size_t hi,
                                 resccl_result_t rc) {
  Group *g = comm->g;
  PfSection *sec = NULL;
  int nsec = 0;
  unsigned long long hash = 0;
  if (rc == resccl_success) rc = pf_read(path, &sec, &nsec, &hash);
  RtPlan *p = rc == resccl_success ? calloc(1, sizeof *p) : NULL;
  if (rc == resccl_success && !p) rc = rt_fail(resccl_system_error, "out of memory");
  if (p) {
    p->conf = *conf, p->lo = lo, p->hi = hi;
    snprintf(p->name, sizeof p->name, "%s", sec[0].name), snprintf(p->coll, sizeof p->coll, "%s", sec[0].coll);
  }
  for (int i = 0; i < nsec && rc == resccl_success; i++) {
    const PfSection *s = &sec[i];
    if (strcmp(s->name, p->name) || strcmp(s->coll, p->coll))
      rc = rt_fail(resccl_invalid_argument, "%s:%d: name: %s %s, but the file's first plan is %s %s", path, s->line,
                   s->name, s->coll, p->name, p->coll);
    else if (s->nranks != g->n)
      rc = rt_fail(resccl_invalid_usage, "%s:%d: ranks: a plan for %d ranks, the communicator has %d", path, s->line,
                   s->nranks, g->n);
    /* A placement's first section runs the sizes the others leave; then
       come its copy-engine form, its pulling form, or both. */
    Variant **at = p->v[s->inplace];
    int form = !at[0] ? 0 : s->nce ? 1 : s->pulls ? 2 : -1;
    if (rc == resccl_success && (form < 0 || (form && at[form])))
      rc = rt_fail(resccl_invalid_argument, "%s:%d: resccl-plan: a placement holds a first form, then at most one "
                   "with copy-engine copies and one that pulls", path, s->line);
    /* Copies and pulls need every rank's buffers, which processes do not
       share yet: ranks of several processes run a placement's first form. */
    if (rc == resccl_success && g->x && !form && (s->nce || s->pulls))
      rc = rt_fail(resccl_invalid_usage, "%s:%d: its first form %s, which ranks of several processes cannot yet: "
                   "compile it without --ce and --pull", path, s->line,
                   s->nce ? "moves data on the copy engine" : "reads peers' buffers");
    if (rc == resccl_success && form && g->x) continue;
    if (rc == resccl_success && !(at[form] = calloc(1, sizeof *at[form])))
      rc = rt_fail(resccl_system_error, "out of memory");
    if (rc == resccl_success) at[form]->pf = *s, memset(&sec[i], 0, sizeof *s); /* the variant owns it now */
  }
  pf_free_all(sec, nsec);
  /* A loaded plan whose sizes reach past the new one's on both sides would be cut in two. */
  for (RtPlan *q = g->plans; q && rc == resccl_success; q = q->next)
    if (!strcmp(q->coll, p->coll) && q->lo < lo && q->hi > hi)
      rc = rt_fail(resccl_invalid_usage, "%s: sizes %zu to %zu lie inside those of the loaded plan %s (%zu to %zu): "
                   "load that one again for the sizes on each side", path, lo, hi, q->name, q->lo, q->hi);
  if (p && !p->conf.threads) p->conf.threads = RT_THREADS;
  if (g->x) rc = agree(g, rc, path, hash, conf, lo, hi);
  if (rc == resccl_success) rc = build_kernels(g, p);
  Variant *vs[6];
  int nv = 0;
  for (int i = 0; i < 6 && p; i++)
    if (p->v[i / 3][i % 3]) vs[nv++] = p->v[i / 3][i % 3];
  for (int k = 0; k < nv && rc == resccl_success; k++) rc = variant_setup(g, vs[k], &p->conf);
  /* Every rank's memory, then the tables that point into it. */
  if (g->x || rc == resccl_success) rc = ipc_share(g, vs, nv, rc);
  for (int k = 0; k < nv && rc == resccl_success; k++) rc = variant_connect(g, vs[k]);
  if (g->x) rc = ex_round(g->x, rc, NULL, 0, NULL, "resccl_plan_load");
  /* What goes now (the new plan, where the load failed; else the loaded
     ones it covers) is freed by each rank once every peer has closed its
     view of it: one more round between (transport.h, ipc_close). On every
     rank alike: the last round agreed, and so do the loaded plans. A peer
     lost in that round leaves the load done and says so. */
  int replaces = 0;
  for (RtPlan *q = g->plans; q && rc == resccl_success; q = q->next) replaces |= covers(p, q);
  resccl_result_t gone = resccl_success;
  if (g->x && (rc != resccl_success || replaces)) {
    for (int i = 0; i < 6 && p && rc != resccl_success; i++) ipc_close(p->v[i / 3][i % 3]);
    for (RtPlan *q = g->plans; q && rc == resccl_success; q = q->next)
      for (int i = 0; i < 6 && covers(p, q); i++) ipc_close(q->v[i / 3][i % 3]);
    gone = ex_round(g->x, resccl_success, NULL, 0, NULL, "resccl_plan_load");
  }
  if (rc != resccl_success) {
    if (p) plan_unload(g, p);
    return rc;
  }
  /* A new plan for a collective takes its sizes from the loaded ones: those
     it covers go, the others keep the sizes on their side of it. */
  for (RtPlan **q = &g->plans; *q;) {
    RtPlan *old = *q;
    if (strcmp(old->coll, p->coll) || old->hi < lo || hi < old->lo) {
      q = &old->next;
    } else if (covers(p, old)) {
      *q = old->next;
      for (int d = 0; d < g->ndevs; d++) cudaSetDevice(g->dev[d]), cudaDeviceSynchronize();
      plan_unload(g, old);
    } else {
      if (old->lo < lo) old->hi = lo - 1;
      else old->lo = hi + 1;
      q = &old->next;
    }
  }
  p->next = g->plans, g->plans = p;
  INFO("loaded %s (%s, %zu to %zu bytes) from %s", p->name, p->coll, lo, hi, path);
  return gone;
}

/* rt_plan_load, after rc0 (the settings as read: a rank whose settings
   are bad still takes the load's rounds). */
static resccl_result_t load_as(resccl_comm_t comm, const char *path, const RtConf *conf, size_t lo, size_t hi,
                               resccl_result_t rc0) {
  if (!comm || !path) return rt_fail(resccl_invalid_argument, "resccl_plan_load: null argument");
  resccl_result_t rc = rc0;
  if (rc == resccl_success && lo > hi)
    rc = rt_fail(resccl_invalid_argument, "resccl_plan_load_range: %zu bytes > %zu bytes", lo, hi);
  /* Queued calls point at the plans they run. */
  if (rc == resccl_success && group_is_open())
    rc = rt_fail(resccl_invalid_usage, "resccl_plan_load inside a group (before resccl_group_end)");
  if (rc == resccl_success && comm->g->open.n)
    rc = rt_fail(resccl_invalid_usage, "resccl_plan_load: collective number %llu has been launched on some ranks "
                 "only; launch it on the rest first", comm->g->open.a[0].seq + 1);
  if (rc == resccl_success) rc = conf_check(conf);
  if (rc != resccl_success && !comm->g->x) return rc;
  int dev = -1;
  cudaGetDevice(&dev);
  rc = plan_load(comm, path, conf, lo, hi, rc);
  if (dev >= 0) cudaSetDevice(dev);
  return rc;
}

resccl_result_t rt_plan_load(resccl_comm_t comm, const char *path, const RtConf *conf, size_t lo, size_t hi) {
  return load_as(comm, path, conf, lo, hi, resccl_success);
}

resccl_result_t resccl_x_plan_build(const char *path, int arch, int threads) {
  PfSection *sec;
  int n;
  resccl_result_t rc = pf_read(path, &sec, &n, NULL);
  if (rc != resccl_success) return rc;
  RtBuild *b = calloc((size_t)n, sizeof *b);
  if (!b) return pf_free_all(sec, n), rt_fail(resccl_system_error, "out of memory");
  for (int i = 0; i < n; i++) b[i] = (RtBuild){.src = sec[i].src, .arch = arch, .threads = threads ? threads : RT_THREADS};
  rc = rt_build_all(b, n);
  for (int i = 0; i < n; i++) free(b[i].cubin);
  free(b), pf_free_all(sec, n);
  return rc;
}

resccl_result_t resccl_plan_load(resccl_comm_t comm, const char *path) {
  return resccl_plan_load_range(comm, path, 0, SIZE_MAX);
}

resccl_result_t resccl_plan_load_range(resccl_comm_t comm, const char *path, size_t min_bytes, size_t max_bytes) {
  RtConf c;
  memset(&c, 0, sizeof c);
  return load_as(comm, path, &c, min_bytes, max_bytes, resccl_x_conf_env(&c));
}

resccl_result_t resccl_plan_blocks(resccl_comm_t comm, const char *coll, int *blocks) {
  if (!comm || !coll || !blocks) return rt_fail(resccl_invalid_argument, "null argument");
  *blocks = -1;
  for (RtPlan *p = comm->g->plans; p; p = p->next)
    for (int i = 0; i < 6 && !strcmp(p->coll, coll); i++) {
      Variant *v = p->v[i / 3][i % 3];
      if (v && v->pf.ntb[comm->rank] * v->nblk > *blocks) *blocks = v->pf.ntb[comm->rank] * v->nblk;
    }
  if (*blocks >= 0) return resccl_success;
  *blocks = 0;
  return rt_fail(resccl_invalid_usage, "no %s plan loaded", coll);
}
