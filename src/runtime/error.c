/*
** error.c — libresccl's errors: the calling thread's last failure and its
** message, the result codes' names, RESCCL_DEBUG, and the version.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

static __thread char last_error[1024];
static __thread int quiet; /* rt_fail records but does not print (resccl_call_supported) */

void rt_quiet(int on) { quiet = on; }

int rt_debug_level(void) {
  static int level = -1; /* RESCCL_DEBUG, read once */
  if (level < 0) {
    const char *d = getenv("RESCCL_DEBUG");
    level = d && !strcmp(d, "TRACE") ? 2 : d && !strcmp(d, "INFO") ? 1 : 0;
  }
  return level;
}

resccl_result_t rt_fail(resccl_result_t rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  if (rt_debug_level() && !quiet) fprintf(stderr, "resccl WARN %s: %s\n", resccl_get_error_string(rc), last_error);
  return rc;
}

resccl_result_t resccl_get_version(int *version) {
  if (!version) return rt_fail(resccl_invalid_argument, "resccl_get_version: version is NULL");
  *version = RESCCL_VERSION_CODE;
  return resccl_success;
}

const char *resccl_get_error_string(resccl_result_t r) {
  static const char *const names[] = {"no error", "unhandled cuda error", "unhandled system error", "internal error",
                                      "invalid argument", "invalid usage", "timeout: no progress", "in progress",
                                      "remote error: another rank failed"};
  return (unsigned)r < resccl_num_results ? names[r] : "unknown result code";
}

const char *resccl_get_last_error(void) { return last_error; }
