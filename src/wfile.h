/*
** wfile.h — a file written whole or not at all, for the CLI's outputs
** (l_init.c) and the runtime's cubin cache (runtime/kernels.c), and a file
** read whole (the cache, plan files). Plain C.
*/
#ifndef RESCCL_WFILE_H
#define RESCCL_WFILE_H

#include <stddef.h>
#include <sys/types.h>

#pragma GCC visibility push(hidden) /* never a library's export */

/* Write n bytes into a new file of its own beside path (mkstemp: never one
   that was there, nor a link's target), with the given mode, then rename it
   over path; the folders above path are made where missing (mkdir -p). 0,
   or the errno of the failure; then path is as it was and no file is left
   behind (folders made stay). */
int wfile_write(const char *path, const void *data, size_t n, mode_t mode);

/* The file at path, whole, in a malloc'd buffer with a NUL after it, its
   size in *n; NULL with errno set where it cannot be read or holds more
   than max bytes (EFBIG). */
char *wfile_read(const char *path, size_t max, size_t *n);

#pragma GCC visibility pop

#endif
