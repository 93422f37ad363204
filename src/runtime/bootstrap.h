/*
** bootstrap.h — resccl's own rendezvous, for communicators whose ranks are
** other processes, on this host or others: the exchange the native API
** needs before any GPU memory is shared (IPC handles, node identity, plan
** hashes). One process serves a round; each rank sends it the same number
** of bytes and gets back every rank's, in rank order. No CUDA: the unit
** tests link it alone (tests/test_bootstrap.c).
*/
#ifndef RESCCL_BOOTSTRAP_H
#define RESCCL_BOOTSTRAP_H

#include <stddef.h>

#include "runtime.h"

#pragma GCC visibility push(hidden) /* libresccl's own (runtime.h) */

/* What names a round: where its server listens and a random tag. It is
   plain bytes, so a program can pass it to its other processes as NCCL's
   unique id is passed (MPI, a file, torch's store). */
#define BS_ID_BYTES 128
typedef struct {
  unsigned char bytes[BS_ID_BYTES];
} BsId;

/* The most bytes one rank may send in a round, the most ranks, and the
   most bytes of a round's table (ranks x bytes): what a hello can make the
   server hold. */
#define BS_MAX_PAYLOAD (64u << 10)
#define BS_MAX_RANKS 4096
#define BS_MAX_TABLE ((size_t)64 << 20)

/* Serve one round from a thread of this process, on the address of the
   interface RESCCL_SOCKET_IFNAME names (the loopback interface when unset:
   a job across hosts names its interface, as with NCCL_SOCKET_IFNAME). The
   round ends when every rank has its answer, at the first fault (sent to
   every rank connected), or after timeout_s seconds (0: never). */
resccl_result_t bs_serve(BsId *id, double timeout_s);

/* Rank `rank` of `nranks`: send n bytes of `mine` (the same n on every rank)
   to the round id names, and receive every rank's into all (nranks * n
   bytes, rank r's at r * n). resccl_timeout when the round did not end
   within timeout_s seconds (0: never); resccl_invalid_usage when the round
   refused this rank or another (its message names why). */
resccl_result_t bs_allgather(const BsId *id, int rank, int nranks, const void *mine, size_t n, void *all,
                             double timeout_s);

#pragma GCC visibility pop

#endif
