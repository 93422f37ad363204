/*
** transport.h — how a group's GPUs reach each other's memory. Today every
** rank is a GPU of this process, and peer access between them is all it
** takes (transport_p2p.c). A communicator spanning processes or hosts
** brings its transport beside it (CUDA IPC, then the network).
**
** Past that connection, peers' memory is used by its address, which one
** process shares across its GPUs; a transport between processes has to
** carry these, none of which passes through this file yet:
** - a plan's FIFOs (slots, tail and taken in the receiver's memory, head
**   and sent in the sender's) and its copy-engine flags, in one table each
**   that every GPU gets (variant.c, variant_build);
** - each rank's words of the calls its kernel started and finished, which
**   peers read (RxRun.started, .finished; variant.c);
** - the ranks' buffers, in a call's kernel argument for direct sends and
**   pulls, and as the copy engine's sources and destinations (launch.c,
**   kernel_args; copyengine.c, ce_copies);
** - every GPU's copy-engine barrier word (copyengine.c, ce_sync);
** - the group's stop flag, mapped host memory every GPU sees (comm.c).
*/
#ifndef RESCCL_TRANSPORT_H
#define RESCCL_TRANSPORT_H

#include "objects.h"

#pragma GCC visibility push(hidden) /* libresccl's own (runtime.h) */

/* Peer access between every pair of the group's GPUs: FIFOs are written across them. */
resccl_result_t p2p_connect(const Group *g);

#pragma GCC visibility pop

#endif
