/*
** fnv.h — FNV-1a, 64 bits: the one hash of the compiler and the runtime
** (plan files' digest, the host executor's and the cubin cache's keys).
** Plain C.
*/
#ifndef RESCCL_FNV_H
#define RESCCL_FNV_H

#include <stddef.h>
#include <stdint.h>

#define FNV_BASIS 0xcbf29ce484222325ull

/* h with n bytes of s hashed in: FNV_BASIS to start. */
static inline uint64_t fnv1a(uint64_t h, const void *s, size_t n) {
  const unsigned char *p = s;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

#endif
