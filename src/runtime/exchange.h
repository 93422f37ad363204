/*
** exchange.h — what the processes of one communicator trade before they
** share GPU memory (IPC handles, node identity, plan hashes), as rounds of
** an all-gather. One interface, two backends: resccl's own rendezvous
** (bootstrap.c, named by resccl_get_unique_id) and the program's NCCL
** communicator (the shim, nccl.c). No CUDA.
*/
#ifndef RESCCL_EXCHANGE_H
#define RESCCL_EXCHANGE_H

#include <stddef.h>

#include "runtime.h"

#pragma GCC visibility push(hidden) /* libresccl's own (runtime.h) */

typedef struct Exchange Exchange;
struct Exchange {
  int rank, nranks;
  /* One round: n bytes of mine from every rank into all (nranks * n bytes,
     rank r's at r * n). Every rank calls the same rounds in the same order
     with the same n. A failed round leaves the exchange unusable: every
     later round fails at once. */
  resccl_result_t (*allgather)(Exchange *x, const void *mine, size_t n, void *all);
  /* Leave, and free x: the ranks still in a round, or in a later one, fail
     with resccl_remote_error naming this rank. */
  void (*close)(Exchange *x);
};

/* A round that also agrees on failure: this rank's rc (resccl_success or
   what it failed with, resccl_get_last_error's message beside it) goes
   with mine. Returns rc where this rank failed (its message kept); else
   resccl_remote_error where another did, its message saying `what`, the
   first rank that failed and that rank's message; else resccl_success
   (all filled). A rank whose own step failed still calls it, so that the
   others learn of it at once instead of at their timeout. */
resccl_result_t ex_round(Exchange *x, resccl_result_t rc, const void *mine, size_t n, void *all, const char *what);

#pragma GCC visibility pop

#endif
