/*
** planfile.h — the plan file's contract, shared by its writer (artifact.c,
** with emit.c's kernel body) and its reader (src/runtime/planfile.c): the
** version, the kernel's vocabulary and the digest. The file is text:
**
**   resccl-plan 9                  one section per placement and form, each:
**   name allreduce_ring            RX_NAME_OK's grammar
**   collective allreduce           allreduce|allgather|reducescatter|alltoall
**   placement out-of-place         or in-place
**   ranks 2                        1..RX_MAXRANKS
**   chunks 2                       chunks per row of `count` elements
**   bufchunks 2 2 0                chunks per rank of input, output (as the
**                                  collective's buffers have), scratch
**   fifo-slots 0                   slots a FIFO must hold: 0 = any number works
**   maxcnt 1                       most chunks one transfer moves
**   even 0                         1: count must split evenly into chunks
**   tbs 2 2                        TBs per rank
**   conns 2                        then one "src dst" line each
**   flags 2                        then one line each: the rank that holds it
**   copies 0                       copy-engine copies, then one "src rbuf ridx
**                                  dst wbuf widx cnt flag after" line each
**   counters 0                     counters copies wait for (RX_CE_POST's)
**   pulls 0                        receives that read the sender's buffer
**   kernel 1234                    then exactly that many bytes: the kernel's
**                                  body, RX_* statements and comments only
**   digest 0123456789abcdef        last line: rx_digest of every byte before it
**
** The body is not code the runtime trusts: it is parsed with the grammar
** below, every number is checked against the section's header, and the
** runtime builds the kernel from its own templates and the statements it
** parsed, printed anew (nothing of the file's text but numbers and the
** names of this table reaches NVRTC).
*/
#ifndef RESCCL_PLANFILE_H
#define RESCCL_PLANFILE_H

#include <stddef.h>
#include <stdint.h>

#include "fnv.h"

/* Changes whenever the header or the vocabulary does (9: the body alone,
   checked; a digest). */
#define RX_PLAN_VERSION 9

/* The templates, in this order, that make a kernel of a body (emit.c's
   CUDA and the runtime's). */
#define RX_CUDA_PRELUDE {"cuda_abi.h", "tile.h", "cuda.cuh"}

/* A statement's arguments, one letter each:
     o  a connection this rank sends on      I  a connection it receives on
     p  a rank (for an o before it: that connection's receiver)
     b  a buffer (RX_INPUT, RX_OUTPUT, RX_SCRATCH), i: a chunk in it, of n
     n  chunks moved (1..maxcnt)             l  0 or 1
     f  a flag of this rank                  e  a copy-engine flag
     k  a counter                            a  the primitive's number (traces)
   Primitives run inside RX_FOR_M; RX_AT and RX_FOR_M inside RX_TB. */
#define RX_STATEMENTS(X)         \
  X(AT, "a")                     \
  X(WAIT, "f")                   \
  X(POST, "f")                   \
  X(CE_WAIT, "e")                \
  X(CE_POST, "k")                \
  X(SEND, "obin")                \
  X(RECV, "Ibin")                \
  X(PUT, "opbibinl")             \
  X(CS_PUT, "opbibibinl")        \
  X(RECV_PUT, "Ibin")            \
  X(RRC_PUT, "Ibibinll")         \
  X(RRC, "Ibibinl")              \
  X(RCS, "Iobin")                \
  X(RRCS, "Iobibinl")            \
  X(RRS, "Iobinl")               \
  X(CS, "obibin")                \
  X(PULL, "pbibin")              \
  X(RRC_PULL, "pbibibinl")       \
  X(RRCS_PULL, "pbibibipbinl")   \
  X(COPY, "bibin")               \
  X(REDUCE, "bibibinl")

typedef enum {
#define RX_ENUM(name, args) RXS_##name,
  RX_STATEMENTS(RX_ENUM)
#undef RX_ENUM
  RXS_N
} RxStatement;

static const struct {
  const char *name, *args;
} rx_statements[] = {
#define RX_ROW(name, args) {"RX_" #name, args},
  RX_STATEMENTS(RX_ROW)
#undef RX_ROW
};

/* The buffers' names, as RX_INPUT... in cuda_abi.h. */
static const char *const rx_buffers[3] = {"RX_INPUT", "RX_OUTPUT", "RX_SCRATCH"};

/* A plan's name, its n bytes: one word of 1..63 bytes,
   [A-Za-z0-9_][A-Za-z0-9_.+-]*, that the runtime can print and a person can
   type. It reaches the emitted code and the plan file, so nothing else is
   taken (the DSL, core.program and both ends of the plan file check it). */
static inline int rx_name_ok(const char *s, size_t n) {
  if (n < 1 || n > 63) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    int word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!word && (i == 0 || (c != '.' && c != '+' && c != '-'))) return 0;
  }
  return 1;
}

/* The digest (FNV-1a, fnv.h): it finds a file cut short, edited or damaged
   since resccl wrote it; it is no signature. */
static inline uint64_t rx_digest(const char *s, size_t n) { return fnv1a(FNV_BASIS, s, n); }

#endif
