/*
** exchange.c — ex_round: a round of an Exchange in which the ranks also
** learn whether each other's step failed, so that one rank's failure ends
** every rank's call at once, named, instead of at their timeouts.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exchange.h"

/* What goes before each rank's payload. */
typedef struct {
  int32_t rc;
  char msg[256]; /* resccl_get_last_error's, where rc != 0 */
} Head;

/* Set the message without printing it again (RESCCL_DEBUG did at the failure). */
static resccl_result_t keep(resccl_result_t rc, const char *msg) {
  rt_quiet(1);
  rt_fail(rc, "%s", msg);
  rt_quiet(0);
  return rc;
}

resccl_result_t ex_round(Exchange *x, resccl_result_t rc, const void *mine, size_t n, void *all, const char *what) {
  Head h;
  memset(&h, 0, sizeof h);
  if (!rc && n && (!mine || !all))
    rc = rt_fail(resccl_invalid_argument, "%s: %zu bytes a rank from %s to %s", what, n, mine ? "mine" : "NULL",
                 all ? "all" : "NULL");
  char own[1024];
  snprintf(own, sizeof own, "%s", rc ? resccl_get_last_error() : "");
  h.rc = rc;
  snprintf(h.msg, sizeof h.msg, "%.255s", own); /* what fits */
  size_t m = sizeof h + n;
  char *buf = m >= n && (size_t)x->nranks <= SIZE_MAX / m ? malloc(m) : NULL;
  char *table = buf ? malloc((size_t)x->nranks * m) : NULL;
  if (!table) {
    free(buf);
    return rc ? keep(rc, own) : rt_fail(resccl_system_error, "%s: out of memory for %d ranks of %zu bytes", what,
                                        x->nranks, n);
  }
  memcpy(buf, &h, sizeof h);
  if (n && mine) memcpy(buf + sizeof h, mine, n);
  else memset(buf + sizeof h, 0, n);
  resccl_result_t got = x->allgather(x, buf, m, table);
  if (rc) got = keep(rc, own); /* this rank's own failure comes first */
  for (int q = 0; !got && q < x->nranks; q++) {
    memcpy(&h, table + (size_t)q * m, sizeof h);
    if (!h.rc) continue;
    h.msg[sizeof h.msg - 1] = 0;
    got = rt_fail(resccl_remote_error, "%s: rank %d failed: %s", what, q, h.msg);
  }
  for (int q = 0; !got && n && q < x->nranks; q++)
    memcpy((char *)all + (size_t)q * n, table + (size_t)q * m + sizeof h, n);
  free(buf), free(table);
  return got;
}
