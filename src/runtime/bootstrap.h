/*
** bootstrap.h — resccl's own rendezvous, for communicators whose ranks are
** other processes, on this host or others: the exchange the native API
** needs before any GPU memory is shared (IPC handles, node identity, plan
** hashes). One process serves a communicator: each rank connects once and
** keeps its connection (an Exchange, exchange.h); at each round every rank
** sends the same number of bytes and gets back every rank's, in rank
** order. No CUDA: the unit tests link it alone (tests/test_bootstrap.c).
*/
#ifndef RESCCL_BOOTSTRAP_H
#define RESCCL_BOOTSTRAP_H

#include <stddef.h>

#include "exchange.h"
#include "runtime.h"

#pragma GCC visibility push(hidden) /* libresccl's own (runtime.h) */

/* What names a communicator: where its server listens and a random tag. It is
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

/* Serve a communicator from a thread of this process, on the address of
   the interface RESCCL_SOCKET_IFNAME names (the loopback interface when
   unset: a job across hosts names its interface, as with
   NCCL_SOCKET_IFNAME). Round 0, the join, fails every rank that came at
   the first fault or when not every rank came within timeout_s seconds (0:
   never); later rounds have only the ranks' deadlines. A rank whose
   connection closes has left: the ranks in a round then, or in a later
   one, fail with resccl_remote_error naming it; once every rank has left,
   the thread ends. */
resccl_result_t bs_serve(BsId *id, double timeout_s);

/* Rank `rank` of `nranks` of the communicator id names: *out runs its
   rounds (Exchange.allgather: n bytes a rank, n up to BS_MAX_PAYLOAD and
   the same on every rank of a round), connecting at the first. Each round
   fails with resccl_timeout where it did not end within timeout_s seconds
   (0: never); resccl_invalid_usage where the server refused this rank or
   another (its message names why); resccl_remote_error where a rank left,
   or the server is gone. */
resccl_result_t bs_exchange(const BsId *id, int rank, int nranks, double timeout_s, Exchange **out);

#pragma GCC visibility pop

#endif
