/*
** wfile.h — a file written whole or not at all, for the CLI's outputs
** (l_init.c) and the runtime's cubin cache (runtime/kernels.c). Plain C.
*/
#ifndef RESCCL_WFILE_H
#define RESCCL_WFILE_H

#include <stddef.h>
#include <sys/types.h>

/* Write n bytes into a new file of its own beside path (mkstemp: never one
   that was there, nor a link's target), with the given mode, then rename it
   over path. 0, or the errno of the failure; then path is as it was and
   nothing is left behind. */
int wfile_write(const char *path, const void *data, size_t n, mode_t mode);

#endif
