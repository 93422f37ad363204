/*
** transport.h — how a group's GPUs reach each other's memory. The GPUs of
** one process: peer access between every pair (transport_p2p.c). Ranks in
** several processes of one host: CUDA IPC (transport_ipc.c). Hosts apart:
** the network, not yet.
**
** Past that connection, peers' memory is used by its address:
** - each rank's segment of a placement (variant.c, variant_layout): its
**   `started` and `finished` words, which peers write, and its ends of the
**   FIFOs (slots, tail and taken where it receives, head and sent where it
**   sends). ipc_share trades these across processes.
** - the group's stop word, host memory every GPU of the group maps: this
**   process's (cudaHostAlloc), or a shared page on the host (comm.c);
** - with every rank in one process only: the ranks' buffers, in a call's
**   kernel argument for direct sends and pulls, and as the copy engine's
**   sources and destinations (launch.c, kernel_args; copyengine.c,
**   ce_copies), its copy-engine flags and every GPU's barrier word
**   (copyengine.c, ce_sync). A group across processes loads no placement
**   that needs them (plan.c) and sends through the FIFOs.
*/
#ifndef RESCCL_TRANSPORT_H
#define RESCCL_TRANSPORT_H

#include "objects.h"

#pragma GCC visibility push(hidden) /* libresccl's own (runtime.h) */

/* Peer access between every pair of the group's GPUs: FIFOs are written across them. */
resccl_result_t p2p_connect(const Group *g);
/* The segments of a plan's placements vs[0..nv) (nv <= 6) of every rank,
   in v->seg: this process's own, and where the group spans processes,
   the others' opened through CUDA IPC after a round of the group's
   exchange that agrees on failure (rc: this process's result so far). */
resccl_result_t ipc_share(Group *g, Variant *const *vs, int nv, resccl_result_t rc);
/* Close the peers' segments of v this process opened. A rank frees its own
   only once every peer has closed it (a round of the exchange between):
   freeing memory another process still maps is undefined in CUDA. */
void ipc_close(Variant *v);

#pragma GCC visibility pop

#endif
