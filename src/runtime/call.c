/*
** call.c — a collective call: checked, resolved to the plan and form that
** run its size, then launched, or queued while the calling thread's group
** is open (resccl_group_start/end); the collectives' entry points.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objects.h"

/* The open group of the calling thread (NCCL's groups are per thread too);
   a call refused inside it fails the whole group at resccl_group_end. */
static __thread struct {
  int depth;
  Call *q;
  int n, cap;
  resccl_result_t error;
  char why[1024];
} group;

int group_is_open(void) { return group.depth > 0; }

resccl_result_t resccl_group_start(void) {
  group.depth++;
  return resccl_success;
}

resccl_result_t resccl_group_end(void) {
  if (group.depth == 0) return rt_fail(resccl_invalid_usage, "resccl_group_end without resccl_group_start");
  if (--group.depth > 0) return resccl_success;
  resccl_result_t rc = group.error;
  if (rc != resccl_success) rt_fail(rc, "%s (nothing of the group was launched)", group.why);
  else if (group.n) rc = launch(group.q, group.n);
  group.n = 0, group.error = resccl_success;
  return rc;
}

/* The plan for a call of `bytes` bytes. */
static RtPlan *plan_for(Group *g, const char *coll, size_t bytes) {
  RtPlan *p = g->plans;
  while (p && (strcmp(p->coll, coll) || bytes < p->lo || bytes > p->hi)) p = p->next;
  return p;
}

/* The form of plan p that runs a call of `bytes` (nccl-tests' size) when
   every rank is called together, or NULL; launch() falls back to the first
   form where not (the copy-engine and pulling ones need every rank's
   buffers). */
static Variant *form_for(const RtPlan *p, int inplace, size_t bytes) {
  Variant *const *f = p->v[inplace];
  if (f[1] && bytes >= (f[1]->pf.blockless ? p->conf.ce_from_blockless : p->conf.ce_from)) return f[1];
  return f[2] && bytes >= p->conf.pull_from && bytes < p->conf.pull_below && p->conf.direct ? f[2] : f[0];
}

resccl_result_t resccl_call_blocks(resccl_comm_t comm, const char *coll, size_t bytes, int *blocks) {
  if (!comm || !coll || !blocks) return rt_fail(resccl_invalid_argument, "null argument");
  *blocks = 0;
  const RtPlan *p = plan_for(comm->g, coll, bytes);
  Variant *v = p ? form_for(p, 0, bytes) : NULL;
  if (p && !v) v = form_for(p, 1, bytes);
  if (!v) return rt_fail(resccl_invalid_usage, "no %s plan loaded for %zu bytes", coll, bytes);
  *blocks = v->pf.ntb[comm->rank] * v->nblk;
  return resccl_success;
}

/* Is a call in place? NCCL's rule: an all-gather's input, or a
   reduce-scatter's output, is the rank's share of the other buffer. */
static int in_place(const char *coll, const void *send, const void *recv, size_t count, resccl_datatype_t dt,
                    resccl_comm_t comm) {
  size_t share = comm ? (size_t)comm->rank * count * ((unsigned)dt < resccl_num_types ? rt_dtype_size[dt] : 1) : 0;
  if (!strcmp(coll, "allgather")) return comm && (const char *)send == (const char *)recv + share;
  if (!strcmp(coll, "reducescatter")) return comm && (const char *)recv == (const char *)send + share;
  return send == recv;
}

/* The checks every call passes first, whatever its count: success, or the error it gets. */
static resccl_result_t check_call(const char *coll, resccl_datatype_t dt, resccl_red_op_t op, resccl_comm_t comm) {
  if (!comm) return rt_fail(resccl_invalid_argument, "%s: null communicator", coll);
  int stop = *(volatile int *)comm->g->stop;
  if (stop == STOP_ABORT)
    return rt_fail(resccl_remote_error, "%s: a rank of this communicator aborted it, or left with collectives "
                   "unfinished", coll);
  if (stop) return rt_fail(resccl_timeout, "%s: an earlier collective of this communicator timed out", coll);
  if ((unsigned)dt >= resccl_num_types)
    return rt_fail(resccl_invalid_argument, "%s: datatype %d is not supported", coll, (int)dt);
  if ((unsigned)op >= resccl_num_ops)
    return rt_fail(resccl_invalid_argument, "%s: reduction op %d is not supported", coll, (int)op);
  return resccl_success;
}

/* What runs a checked call of count > 0 elements, whatever its buffers: its
   plan and form, or the error the call is refused with; the same on every
   rank for the same arguments. */
static resccl_result_t resolve(const char *coll, size_t count, resccl_datatype_t dt, resccl_comm_t comm, int inplace,
                               RtPlan **plan, Variant **form) {
  size_t per = rt_dtype_size[dt] * (strcmp(coll, "allreduce") ? (size_t)comm->g->n : 1);
  if (count > SIZE_MAX / per) return rt_fail(resccl_invalid_argument, "%s: count %zu is too large", coll, count);
  size_t bytes = count * per; /* nccl-tests' size */
  RtPlan *p = plan_for(comm->g, coll, bytes);
  if (!p) return rt_fail(resccl_invalid_usage, "%s: no plan loaded for %zu bytes (resccl_plan_load)", coll, bytes);
  if (p->conf.dtypes && !(p->conf.dtypes >> dt & 1) && (!strcmp(coll, "allreduce") || !strcmp(coll, "reducescatter")))
    return rt_fail(resccl_invalid_usage, "%s: plan %s was loaded without the %s kernels (RESCCL_DTYPES)", coll, p->name,
                   rt_dtype_name[dt]);
  Variant *v = form_for(p, inplace, bytes);
  if (!v) return rt_fail(resccl_invalid_usage, "%s: plan %s has no %s form", coll, p->name, inplace ? "in-place" : "out-of-place");
  *plan = p, *form = v;
  return resccl_success;
}

resccl_result_t resccl_call_supported(const char *coll, const void *send, const void *recv, size_t count,
                                      resccl_datatype_t dt, resccl_red_op_t op, resccl_comm_t comm) {
  if (!coll || (strcmp(coll, "allreduce") && strcmp(coll, "allgather") && strcmp(coll, "reducescatter") &&
                strcmp(coll, "alltoall")))
    return rt_fail(resccl_invalid_argument, "unknown collective %s", coll ? coll : "(null)");
  rt_quiet(1); /* a question, not a failure */
  resccl_result_t rc = check_call(coll, dt, op, comm);
  RtPlan *p;
  Variant *v;
  if (rc == resccl_success && count > 0) rc = resolve(coll, count, dt, comm, in_place(coll, send, recv, count, dt, comm), &p, &v);
  rt_quiet(0);
  return rc;
}

static resccl_result_t enqueue_call(const char *coll, const void *send, void *recv, size_t count, resccl_datatype_t dt,
                               resccl_red_op_t op, resccl_comm_t comm, resccl_stream_t stream, int inplace) {
  resccl_result_t rc = check_call(coll, dt, op, comm);
  if (rc != resccl_success || count == 0) return rc;
  size_t es = rt_dtype_size[dt];
  if (!send || !recv) return rt_fail(resccl_invalid_argument, "%s: null buffer", coll);
  if ((uintptr_t)send % es || (uintptr_t)recv % es)
    return rt_fail(resccl_invalid_argument, "%s: buffer not aligned to its %zu-byte elements", coll, es);
  RtPlan *p;
  Variant *v;
  if ((rc = resolve(coll, count, dt, comm, inplace, &p, &v)) != resccl_success) return rc;
  Call c = {comm, v, p, {(char *)send, (char *)recv, NULL}, count, es, 0, (int)dt, (int)op, (cudaStream_t)stream, 0, 0};
  if (group.depth == 0) return launch(&c, 1);
  if (group.n == group.cap) {
    int cap = group.cap ? 2 * group.cap : 16;
    Call *q = realloc(group.q, sizeof *q * (size_t)cap);
    if (!q) return rt_fail(resccl_system_error, "out of memory");
    group.q = q, group.cap = cap;
  }
  group.q[group.n++] = c;
  return resccl_success;
}

/* Queue or launch one call, leaving the caller's current device as it was. */
static resccl_result_t enqueue(const char *coll, const void *send, void *recv, size_t count, resccl_datatype_t dt,
                               resccl_red_op_t op, resccl_comm_t comm, resccl_stream_t stream, int inplace) {
  int dev = -1;
  cudaGetDevice(&dev);
  resccl_result_t rc = enqueue_call(coll, send, recv, count, dt, op, comm, stream, inplace);
  if (dev >= 0) cudaSetDevice(dev);
  if (rc != resccl_success && group.depth > 0 && group.error == resccl_success) {
    group.error = rc;
    snprintf(group.why, sizeof group.why, "%s", resccl_get_last_error());
  }
  return rc;
}

/* In-place is NCCL's: the input sits where the output wants it. */
resccl_result_t resccl_all_reduce(const void *send, void *recv, size_t count, resccl_datatype_t dt, resccl_red_op_t op,
                                  resccl_comm_t comm, resccl_stream_t stream) {
  return enqueue("allreduce", send, recv, count, dt, op, comm, stream, send == recv);
}

resccl_result_t resccl_all_gather(const void *send, void *recv, size_t count, resccl_datatype_t dt, resccl_comm_t comm,
                                  resccl_stream_t stream) {
  return enqueue("allgather", send, recv, count, dt, resccl_sum, comm, stream,
                 in_place("allgather", send, recv, count, dt, comm));
}

resccl_result_t resccl_reduce_scatter(const void *send, void *recv, size_t count, resccl_datatype_t dt,
                                      resccl_red_op_t op, resccl_comm_t comm, resccl_stream_t stream) {
  return enqueue("reducescatter", send, recv, count, dt, op, comm, stream,
                 in_place("reducescatter", send, recv, count, dt, comm));
}

resccl_result_t resccl_all_to_all(const void *send, void *recv, size_t count, resccl_datatype_t dt, resccl_comm_t comm,
                                  resccl_stream_t stream) {
  return enqueue("alltoall", send, recv, count, dt, resccl_sum, comm, stream, send == recv);
}
