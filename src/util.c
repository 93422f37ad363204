/*
** util.c — status names, errors, allocation, growable buffers, a clock.
*/
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

static const char *const rc_names[] = {
  "ok", "out of memory", "invalid argument", "bad topology", "verification failed",
  "deadlock", "bad size", "execution failed", "timeout", "bad template",
};

const char *rc_name(rcStatus rc) {
  return (unsigned)rc < sizeof rc_names / sizeof *rc_names ? rc_names[rc] : "unknown error";
}

/* Record an error; returns rc so callers can `return err_set(...)`. */
rcStatus err_set(Err *e, rcStatus rc, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->rc = rc;
  }
  return rc;
}

/* Out of memory in the compiler: the command fails as a Lua memory error
   does (exit status 4), with no core dump; outputs are written whole or not
   at all (wfile), so nothing is left half-written. _exit: the host
   executor's threads may be running, and may hold stdio's locks. */
static void *checked(void *p) {
  if (!p) {
    fputs("resccl: out of memory\n", stderr);
    _exit(4);
  }
  return p;
}

void *xmalloc(size_t n) { return checked(malloc(n ? n : 1)); }

void *xcalloc(size_t n, size_t sz) { return checked(calloc(n ? n : 1, sz ? sz : 1)); }

void *xrealloc(void *p, size_t n) { return checked(realloc(p, n ? n : 1)); }

double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int uf_find(int *up, int x) {
  while (up[x] != x) x = up[x] = up[up[x]];
  return x;
}

void buf_init(Buf *b) { memset(b, 0, sizeof *b); }

void buf_free(Buf *b) {
  free(b->s);
  buf_init(b);
}

void buf_add(Buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    b->s = xrealloc(b->s, cap);
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = '\0';
}

void buf_puts(Buf *b, const char *s) { buf_add(b, s, strlen(s)); }

void buf_int(Buf *b, long v) {
  char tmp[24], *p = tmp + sizeof tmp;
  unsigned long u = v < 0 ? 0UL - (unsigned long)v : (unsigned long)v;
  do *--p = (char)('0' + u % 10);
  while (u /= 10);
  if (v < 0) *--p = '-';
  buf_add(b, p, (size_t)(tmp + sizeof tmp - p));
}

void buf_printf(Buf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    buf_add(b, small, (size_t)n);
    return;
  }
  char *big = xmalloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  buf_add(b, big, (size_t)n);
  free(big);
}

/* Append s as the text of a C comment, for the host C and the CUDA alike:
   printable ASCII as it is, but a backslash doubled, a '/' next to a '*'
   as backslash-slash, and any other byte as \xNN. So a name from the input
   (a file's, a program's) neither ends the comment, nor opens another, nor
   starts a line. */
void buf_comment(Buf *b, const char *s) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s, *run = p;
  for (; *p; p++) {
    int c = *p, slash = c == '/' && ((p > (const unsigned char *)s && p[-1] == '*') || p[1] == '*');
    if (c >= 0x20 && c < 0x7f && c != '\\' && !slash) continue;
    buf_add(b, (const char *)run, (size_t)(p - run));
    char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
    if (c == '\\' || slash) esc[1] = (char)c;
    buf_add(b, esc, c == '\\' || slash ? 2 : 4);
    run = p + 1;
  }
  buf_add(b, (const char *)run, (size_t)(p - run));
}
