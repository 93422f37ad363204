/*
** group.h — a group's queued calls (launch.c's launch()): which calls of
** different ranks are one collective, and the order collectives launch in.
** No CUDA, so the rules are tested on the host (tests/test_group.c).
*/
#ifndef RESCCL_GROUP_H
#define RESCCL_GROUP_H

#pragma GCC visibility push(hidden) /* libresccl's own (runtime.h) */

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

/* What a rank launched as one collective: its form (a plan's placement),
   count, datatype and op. */
typedef struct GqSig {
  const void *form;
  unsigned long long count;
  int dtype, op;
} GqSig;

/* A communicator group's collectives that some of their ranks have launched
   (outside a group, or in groups of their own), so that the rest are
   checked against them. */
typedef struct GqOpen {
  unsigned long long seq;
  GqSig sig;
  int seen; /* ranks launched */
} GqOpen;
typedef struct GqOpens {
  GqOpen *a;
  int n, cap;
} GqOpens;

/* 1 when two ranks' calls launch the same collective. */
int gq_sig_same(const GqSig *a, const GqSig *b);
/* 0 when collective seq agrees with what its ranks launched before (or
   none has), else 1. */
int gq_open_differs(const GqOpens *o, unsigned long long seq, const GqSig *s);
/* Room for `more` records, so that gq_open_note cannot fail; -1: out of memory. */
int gq_open_reserve(GqOpens *o, int more);
/* `ranks` more of the collective's `nranks` ranks launched it: kept until
   all have. */
void gq_open_note(GqOpens *o, unsigned long long seq, const GqSig *s, int ranks, int nranks);
/* Forget the records of a form (its plan is unloaded). */
void gq_open_forget(GqOpens *o, const void *form);

#pragma GCC visibility pop

#endif
