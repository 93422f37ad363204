/*
** group.h — a group's queued calls (runtime.c's launch()): which calls of
** different ranks are one collective, and the order collectives launch in.
** No CUDA, so the rules are tested on the host (tests/test_group.c).
*/
#ifndef RESCCL_GROUP_H
#define RESCCL_GROUP_H

typedef struct GqCall {
  const void *rank;          /* its communicator */
  const void *comms;         /* the communicator group that rank belongs to */
  const void *stream;        /* with dev, its stream (a handle such as NULL names one stream per GPU) */
  int dev;
  unsigned long long before; /* the rank's collectives launched before this queue */
} GqCall;

/* Ranks' calls are matched by their order, as in NCCL: a rank's k-th
   collective launched is every rank's k-th. seq[i]: calls[i]'s number on
   its rank; first[i]: the queue's first call of its collective. */
void gq_match(const GqCall *c, int n, unsigned long long *seq, int *first);

/* The order collectives launch in, as indices of their first calls into
   order[]; returns how many. ready: n chars; at: 3n ints. */
int gq_order(const GqCall *c, int n, const int *first, int *order, char *ready, int *at);

#endif
