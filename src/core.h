/*
** core.h — the resccl compiler's internal header, one section per file.
**
** The pipeline (compile.c lists its passes):
**   Program  --prog_tasks-->  Task list (in-place aliasing resolved, ordered by step)
**            --dag_build-->   Dag (data-dependency edges, link set per task)
**            --sched_run-->   Sched (sub-pipelines, one global task pipeline)
**            --lower_run-->   primitives per rank, connections, cross-TB waits
**            --tb_assign-->   TBs per rank (state-based, connection-based or manual)
**            --merge_run, lend_run, offload_run, pull_run-->  the TBs reworked, as options ask
**            --analyse_run--> what emission and the proofs need (symbolic run, accesses)
**            --verify_run-->  post-condition, connection order, no deadlock, no races
**            --emit_rank-->   C/CUDA source per rank from kernels-templates/
** Nothing here includes lua.h: the Lua bindings live in l_*.c.
*/
#ifndef RESCCL_CORE_H
#define RESCCL_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "dtypes.h"

/* ---------------------------------------------------------------- util.c */

typedef enum {
  RC_OK = 0,
  RC_ENOMEM,    /* out of memory */
  RC_EINVAL,    /* bad argument or bad program */
  RC_ETOPO,     /* bad topology specification */
  RC_EVERIFY,   /* the result is not the collective the program claims */
  RC_EDEADLOCK, /* the per-TB programs can block forever */
  RC_ESIZE,     /* a buffer size the program cannot handle */
  RC_EEXEC,     /* the executor failed (compiler, loader, threads) */
  RC_ETIMEOUT,  /* the executor made no progress */
  RC_ETEMPLATE, /* a kernel template is malformed */
} rcStatus;

/* An error: status plus a message that already carries "file:line: " when known. */
typedef struct {
  rcStatus rc;
  char msg[1024];
} Err;

#define RC_CHECK(call)                 \
  do {                                 \
    rcStatus rc_ = (call);             \
    if (rc_ != RC_OK) return rc_;      \
  } while (0)

const char *rc_name(rcStatus rc);
rcStatus err_set(Err *e, rcStatus rc, const char *fmt, ...);
void *xmalloc(size_t n); /* on allocation failure: a message, exit status 4 */
void *xcalloc(size_t n, size_t sz);
void *xrealloc(void *p, size_t n);
double now_ms(void);
int uf_find(int *up, int x); /* union-find root, with path halving */

/* Growable byte buffer, used by the dumps and the emitter. */
typedef struct {
  char *s;
  size_t n, cap;
} Buf;
void buf_init(Buf *b);
void buf_free(Buf *b);
void buf_add(Buf *b, const char *s, size_t n);
void buf_puts(Buf *b, const char *s);
void buf_printf(Buf *b, const char *fmt, ...);
void buf_int(Buf *b, long v); /* decimal, no printf: the emitter's hot path */
void buf_comment(Buf *b, const char *s); /* s as C comment text: ends nothing, opens nothing */

/* Growable array of any element: VEC_PUSH(p, n, cap, value). */
#define VEC_PUSH(p, n, cap, v)                                   \
  do {                                                           \
    if ((n) == (cap)) {                                          \
      (cap) = (cap) ? 2 * (cap) : 16;                            \
      (p) = xrealloc((p), (size_t)(cap) * sizeof *(p));          \
    }                                                            \
    (p)[(n)++] = (v);                                            \
  } while (0)

/* ------------------------------------------------------------- program.c */

typedef enum { COLL_ALLGATHER, COLL_REDUCESCATTER, COLL_ALLREDUCE, COLL_ALLTOALL, NCOLL } Coll;
typedef enum { BUF_INPUT, BUF_OUTPUT, BUF_SCRATCH, NBUF } BufKind;
typedef enum { OP_COPY, OP_REDUCE } XferOp;
/* Chunk indices and counts of a transfer, and every rank's scratch chunks together, stay under this. */
#define MAX_CHUNKS (1 << 24)
/* Transfers of a program, once cut at blocks: 2.1 million for the 1024-rank
   HM all-reduce; each costs some 320 bytes through compilation. */
#define MAX_XFERS (1 << 24)
/* TBs of a rank in a manual placement (a GPU holds fewer resident blocks). */
#define MAX_TBS 1024

/* A position in a source file: index into Program.files, line number. */
typedef struct {
  int file, line;
} Src;

/*
** One recorded transfer: cnt chunks from (src, sbuf, sidx) to (dst, dbuf, didx),
** copied or reduced into the destination (dst = dst (+) src). src == dst is a
** local copy/reduce. step orders transfers (paper style); chunk-style records
** inherit the last step seen, so they keep record order.
*/
typedef struct {
  int src, dst, sidx, didx, cnt, step;
  uint8_t sbuf, dbuf, op;
  Src at;
} Xfer;

/*
** Where an imported file put a transfer: its thread block and step on the
** sending and on the receiving rank, and its channel (-1 when unknown). Kept
** so the file's own schedule can be run and simulated as its runtime would.
*/
typedef struct {
  int stb, sstep, rtb, rstep, chan;
} TbHint;

/*
** A program: what moves, not when. Buffers are measured in chunks; a rank's
** buffer is made of blocks of `chunks` chunks each, one block being the
** collective's per-rank count (AllGather input = 1 block, output = ranks blocks).
*/
typedef struct {
  char name[64];
  Coll coll;
  int nranks, gpn;      /* ranks; GPUs per node (for reports) */
  int chunks;           /* chunks per block */
  int scratch_chunks;   /* scratch chunks per rank (max used index + 1) */
  Xfer *xf;
  int nxf, capxf;
  int max_xf;           /* transfers it may hold: MAX_XFERS, or fewer */
  TbHint *hint;         /* NULL, or one per transfer */
  char **files;
  int nfiles;
  Src at;               /* where the algorithm was defined */
} Program;

Program *prog_new(const char *name, Coll coll, int nranks, int gpn, int chunks);
void prog_free(Program *p);
int prog_file(Program *p, const char *file);   /* intern a file name */
const char *prog_where(const Program *p, Src at, char *out, size_t n); /* "file:line" */
int prog_bufchunks(const Program *p, int buf); /* chunks per rank in buffer */
rcStatus prog_add(Program *p, const Xfer *x, Err *e);
void prog_hint(Program *p, int xf, TbHint h);
const char *coll_name(Coll c);
int coll_parse(const char *s);   /* -1 when unknown */
const char *buf_name(int b);
int buf_parse(const char *s);    /* -1 when unknown */

/*
** A task: one transfer after in-place aliasing, in dependency order. `chunk`
** is the HPDS chunk key (the destination chunk index); `xf` points back to the
** Xfer for its source position. A reduction writes dst = operand (+) source;
** the operand is the destination itself unless copy elision moved it.
*/
typedef struct {
  int src, dst, sidx, didx, oidx, cnt, xf, chunk;
  uint8_t sbuf, dbuf, obuf, op;
} Task;

/* Resolve a program for in-place or out-of-place execution. Local copies that
   aliasing turns into self-copies disappear. */
rcStatus prog_tasks(const Program *p, int inplace, Task **out, int *n, Err *e);

/* --------------------------------------------------------------- elide.c */

/* Drop placement copies: forward copies of read-only data into their readers,
   and fold a final copy into the task that produced its value; unless
   `manual`, fold a local reduction of a received value into its receive. */
void elide_copies(const Program *p, Task *t, int *n, int manual);

/* ---------------------------------------------------------------- topo.c */

#define TOPO_MAXHOP 4

typedef enum { LK_NVLINK, LK_NVSWITCH, LK_NIC_TX, LK_NIC_RX, LK_PORT_TX, LK_PORT_RX } LinkKind;

typedef struct {
  char name[48];
  LinkKind kind;
  double gbps, lat_us; /* bandwidth (GB/s per direction) and latency; the simulator's inputs */
  double sat, gamma;   /* TBs that saturate it (0: bandwidth / TB rate) and contention penalty */
} Link;

/*
** A cluster: nnodes nodes of gpn GPUs. Inside a node GPUs meet on an NVSwitch
** (each ordered pair is its own link) or, for two GPUs, on one NVLink bundle
** per direction; across nodes a transfer leaves through the sender's NIC and
** enters through the receiver's (gpus_per_nic GPUs share one). Link ids are
** computed, not stored, so 1024 ranks cost nothing.
*/
typedef struct {
  char spec[64];
  char model[16];       /* "a100", "h200", "nvswitch", "dgx_h100", "ndv4", "custom" */
  int nranks, nnodes, gpn, gpus_per_nic;
  int switched;         /* 1: a node's GPUs meet on an NVSwitch (one port per GPU); 0: NVLink pairs */
  double intra_gbps, intra_lat_us, nic_gbps, nic_lat_us;
  /* The timing model (sim.c); 0 for a rate means unlimited. */
  double alpha_us;               /* startup of one primitive call */
  double tb_gbps, tb_reduce_gbps; /* what one TB moves: copying, reducing */
  double intra_sat, nic_sat;     /* TBs that saturate a link, 0 = bandwidth / tb_gbps */
  double intra_gamma, nic_gamma; /* contention penalty: bandwidth / (1 + gamma log2 z) */
  double ce_gbps, ce_local_gbps; /* copy engine: what copies reach over a link (0: intra_gbps), inside a GPU */
  double ce_lat_us, ce_sync_us;  /* a copy's start on its stream; each barrier of a copy-engine call */
  double read_gbps, tb_read_gbps; /* pulls: what a link delivers to reads (0: intra_gbps), what one TB reads */
  double pull_sync_us;           /* a pulling call's start and end handshakes, together */
  int nlinks;
} Topo;
/* Topo's numbers (doubles: latencies, bandwidths, penalties), for tables of them. */
#define TOPO_FIELDS(X)                                                                                      \
  X(intra_gbps) X(intra_lat_us) X(nic_gbps) X(nic_lat_us) X(alpha_us) X(tb_gbps) X(tb_reduce_gbps) X(intra_sat) \
      X(nic_sat) X(intra_gamma) X(nic_gamma) X(ce_gbps) X(ce_local_gbps) X(ce_lat_us) X(ce_sync_us)            \
          X(read_gbps) X(tb_read_gbps) X(pull_sync_us)

/* Parse a preset "a100:NxG", "nvswitch:G", "h200:2", "dgx_h100:N", "ndv4:N";
   NULL with e set when malformed. */
Topo *topo_parse(const char *spec, Err *e);
/* The presets' spellings, for help: "a100:NxG, nvswitch:G, ... or ndv4:N". */
const char *topo_presets(void);
/* A topology from a filled description (spec, nnodes, gpn, bandwidths...);
   checks that every pair of ranks is reachable. */
Topo *topo_new(const Topo *desc, Err *e);
/* The flat single-node topology used when only ranks= is given. */
Topo *topo_flat(int nranks);
void topo_free(Topo *t);
/* Links a transfer from rank s to rank d occupies; returns how many (0 when s == d). */
int topo_route(const Topo *t, int s, int d, int out[TOPO_MAXHOP]);
/* The physical links the same transfer shares with others (switch ports, NICs). */
int topo_path(const Topo *t, int s, int d, int out[TOPO_MAXHOP]);
void topo_link(const Topo *t, int id, Link *out);

/* ----------------------------------------------------------------- dag.c */

typedef struct {
  Task *t;
  int n;
  int nchunk;              /* chunk keys are 0..nchunk-1 */
  int *link;               /* n * TOPO_MAXHOP, -1 padded */
  int *pred_off, *pred;    /* CSR: predecessors of task i */
  int *prank;              /* rank of the location each pred edge is about */
  int *succ_off, *succ;    /* CSR: successors */
} Dag;

/* `manual`: TBs are placed by hand (no reduction folds a receive into another TB's work). */
rcStatus dag_build(Dag *d, const Program *p, const Topo *t, int inplace, int manual, Err *e);
void dag_free(Dag *d);

/* --------------------------------------------------------------- sched.c */

typedef enum { SK_HPDS, SK_RR } SchedKind;

typedef struct {
  SchedKind kind;
  int *order;   /* task ids, global pipeline order */
  int *slot;    /* per task: its sub-pipeline */
  int *pos;     /* per task: index into order */
  int nslots;
} Sched;

rcStatus sched_run(Sched *s, const Dag *d, SchedKind kind, Err *e);
void sched_free(Sched *s);

/* --------------------------------------------------------------- lower.c */

typedef enum {
  PR_SEND,   /* read src, push to connection */
  PR_RECV,   /* pop, write dst */
  PR_RRC,    /* recvReduceCopy: dst = dst (+) popped */
  PR_RCS,    /* recvCopySend: write dst and forward */
  PR_RRCS,   /* recvReduceCopySend: dst = dst (+) popped, forward dst */
  PR_RRS,    /* recvReduceSend: forward operand (+) popped, keep nothing (dst is dead) */
  PR_CS,     /* copySend: local copy and send of the copied chunk */
  PR_COPY,   /* local copy */
  PR_REDUCE, /* local reduce */
  NPRIM
} PrimKind;

typedef struct {
  int src, dst, chan;
} Conn;

/*
** One primitive on one rank. A fused primitive carries two tasks: `tin`
** arrives on `cin`, `tout` leaves on `cout`. Locals have tin == tout.
** Reads (rbuf, ridx) (what a send or local copy reads), reduces with the
** operand (ubuf, uidx), writes (wbuf, widx); cnt chunks.
*/
typedef struct {
  uint8_t kind, rbuf, ubuf, wbuf;
  uint8_t direct; /* a (copy-)send that writes straight into the receiver's buffer, and its receive */
  uint8_t join;   /* 1: runs inside the micro-batch loop of the TB's previous primitive (merge.c) */
  uint8_t ce;     /* 1: a reduction whose input the copy engine puts (offload.c): it waits for the copy */
  uint8_t pull;   /* 1: a receive that reads what it takes from the sender's buffer at (rbuf, ridx), with no
                     send (pull.c); a PR_RRCS one puts its result where task tout lands, with no receive
                     there (pull.c's put_on) */
  int rank, tin, tout, cin, cout, ridx, uidx, widx, cnt;
  int slot, pos;  /* timeline: sub-pipeline, pipeline position */
  int tb, seq;    /* TB on its rank and index within the TB (tballoc) */
  int flag;       /* flag posted after each micro-batch, -1 when nobody waits */
  int cepost;     /* counter a copy-engine copy waits for, posted after each micro-batch; -1 none (offload) */
  int wait_off, nwaits; /* waits: prim ids Plan.wait[wait_off .. wait_off+nwaits) */
} Prim;

/* ------------------------------------------------------------- compile.c */

/* Merge: state-based, then a rank's TBs merged pairwise where connections
   that buffer two tiles keep the plan deadlock-free (merge.c). */
typedef enum { TB_STATE, TB_CONN, TB_MANUAL, TB_MERGE } TbPolicy;
/* Task-level: a TB runs each primitive over every micro-batch before the next
   (ours). Algorithm-level: a TB runs its whole list once per micro-batch (MSCCL). */
typedef enum { EX_TASK, EX_ALGO } ExecOrder;
typedef enum { FUSE_NEVER, FUSE_AUTO, FUSE_ALWAYS } FusePolicy;
/* The passes in pipeline order (compile.c), then emission, which runs on demand. */
typedef enum {
  ST_DAG, ST_SCHED, ST_LOWER, ST_TB, ST_MERGE, ST_LEND, ST_OFFLOAD, ST_PULL, ST_ANALYSE, ST_VERIFY, ST_EMIT, NSTAGE
} Stage;

typedef struct {
  SchedKind sched;
  TbPolicy tb;
  int inplace;
  int fuse;          /* FUSE_NEVER; FUSE_AUTO: at task level only fusions that serialise
                        nothing (lower.c), and none that deadlock; FUSE_ALWAYS */
  ExecOrder order;   /* how each TB loops over micro-batches */
  int ce;            /* 1: copies and puts that wait for nothing (or only for their source's one
                        writer, which counts micro-batches for them) go to the copy engine, where
                        nothing waits for them or only the reduction of what they put (offload.c) */
  int pull;          /* 1: receives of what a send reads while it holds the call's input read it from the
                        sender's buffer themselves, and the send goes (pull.c); not with ce */
  Stage stop_after;  /* last pass to run */
} Options;

/* A copy the copy engine makes instead of a TB (offload.c): cnt
   chunks from (src, rbuf, ridx) to (dst, wbuf, widx) in every micro-batch,
   task `task` of the DAG; src == dst for a local copy. Flags number the
   copies a reduction waits for, from 0; counters the primitives that write
   what a copy reads (Prim.cepost), from 0. */
typedef struct {
  int task, src, dst, ridx, widx, cnt;
  int flag;  /* posted after each micro-batch for the reduction that waits for it (Prim.ce), or -1 */
  int after; /* the counter it waits for before each micro-batch (its source's writer posts it), or -1 */
  uint8_t rbuf, wbuf;
} CeCopy;

/* Tiles a connection of a buffered plan holds: the verifier assumes it
   (MSCCL's two steps per connection), executors and the simulator provide it. */
#define BUFFERED_TILES 2

/* A compiled plan: every stage's result, owned here. */
typedef struct {
  const Program *prog;
  const Topo *topo;
  Options opt;
  Dag dag;
  Sched sched;
  /* lower.c */
  Prim *p;
  int np;
  Conn *conn;
  int nconn;
  int *wait;             /* concatenated wait lists, see Prim.wait_off */
  int nwait;
  int *task_send, *task_recv; /* per task: prim on src rank / on dst rank */
  char *nofuse;          /* per task: its arrival must not fuse (the deadlock check found it stuck: compile.c) */
  int *rank_off;         /* prims of rank r: rank_prims[rank_off[r] .. rank_off[r+1]) */
  int *rank_prims;       /* in pipeline order */
  int nflags;
  /* tballoc.c, reworked by merge.c, lend.c, offload.c, pull.c */
  int *ntb;              /* per rank */
  int *tb_off;           /* TB (r, b) is tb_prims[tb_off[tb_base[r]+b] .. tb_off[tb_base[r]+b+1]) */
  int *tb_base;          /* per rank: index of its first TB */
  int *tb_prims;
  int ntbs;
  int buffered;          /* 1: deadlock-free only if every connection buffers BUFFERED_TILES tiles (hand-placed or
                            merged TBs); executors refuse smaller FIFOs */
  CeCopy *ce;            /* copies on the copy engine, by source rank then pipeline order */
  int nce, nceflags, nceposts;
  int npulls;            /* receives that pull (Prim.pull) */
  int nputs;             /* of those, reductions that also put their result in a peer's buffer, which no receive
                            waits for (pull.c's put_on): the call's end publishes them */
  /* analyse.c */
  int *complete;         /* per task: chunks its reduction completes (every rank's contribution in) */
  char *split;           /* per primitive: 1 when it meets another through a different chunk range, so that
                            executors which cut a range into slices move its chunks one at a time (races) */
  struct Facts *facts;   /* what the proofs read; compile() drops it once they ran */
  int verified;          /* 1 when verify passed (compile.c) */
  int reached;           /* the last stage whose result the plan holds, + 1 (ST_DAG + 1 after the DAG, ...), as
                            reports name it: the passes between tb and verify leave it after tb (compile.c) */
  double stage_ms[NSTAGE];
  unsigned ran;          /* bit s: stage s ran (timed in stage_ms[s]); skipped optional passes have none */
} Plan;

/* Run the passes (compile.c). */
rcStatus compile(Plan *pl, const Program *p, const Topo *t, const Options *o, Err *e);

/* ---------------------------------------------------------------- plan.c */

/* Names of the enums, indexed by value and NULL-terminated: what the
   bindings take. stage_names() lists what --stop-after takes. */
const char *const *sched_names(void);
const char *const *tb_policy_names(void);
const char *const *fuse_names(void);
const char *const *order_names(void);
const char *const *stage_names(void);
/* One name ("?" when out of range). */
const char *sched_name(SchedKind k);
const char *tb_policy_name(TbPolicy t);
const char *order_name(ExecOrder o);
const char *prim_name(int k);
const char *stage_name(int s);
int stage_parse(const char *s); /* -1 when unknown */

/* Drop what lowering and the passes after it built, keeping the DAG and schedule. */
void plan_unlower(Plan *pl);
void plan_free(Plan *pl);
int plan_tbs_max(const Plan *pl);
/* Most chunks one task moves (at least 1). */
int plan_maxcnt(const Plan *pl);
/* Slots a FIFO of a buffered plan holds (0: any number works): two tiles, a
   slot per primitive's unit, a chunk's where it moves chunk by chunk. */
int plan_fifo_slots(const Plan *pl);
/* The Src of a task, formatted "file:line". */
const char *plan_task_where(const Plan *pl, int task, char *out, size_t n);
/* Micro-batches the GPU runtime cuts a call into (tile.h's rx_nmicro): for
   `count` elements of `esize` bytes per block, on `nchan` channels, in
   tiles of RX_TILE_BYTES or `fixed` of them (0: by tiles), raised where a
   channel's slice would not fit a FIFO slot of `slot` bytes. */
size_t plan_nmicro(const Plan *pl, size_t count, size_t esize, size_t nchan, size_t slot, size_t fixed);

/* Whether p reads (or writes, when `writes`) chunks [idx, idx + n) of buf. */
int prim_touches(const Prim *p, int buf, int idx, int n, int writes);
/* Whether no other primitive of p's rank writes what p reads (`reads`), nor
   touches what p writes there (`writes`). */
int prim_alone(const Plan *pl, const Prim *p, int reads, int writes);
/* Whether b comes after a on their rank: it waits for a, or follows it in a's TB. */
int prim_follows(const Plan *pl, const Prim *a, const Prim *b);
/* A plain receive of what p puts, that waits for nothing and that nothing
   waits for, whose destination nothing else of its rank touches; or NULL. */
const Prim *prim_plain_recv(const Plan *pl, const Prim *p);

/* --------------------------------------------------------------- lower.c */

rcStatus lower_run(Plan *pl, Err *e);
/* (Re)build the per-rank lists of primitives (rank_off, rank_prims) in pl->p's order. */
void plan_rank_lists(Plan *pl);

/* ------------------------------------------------------------- tballoc.c */

rcStatus tb_assign(Plan *pl, TbPolicy pol, Err *e);
/* The TB programs from Prim.tb: pipeline order, or `key` first when not NULL. */
void tb_programs(Plan *pl, const int *key);
/* Waits inside one TB are program order and go; the others get a flag. */
void tb_waits(Plan *pl);
/* TB numbers without the TBs `gone` marks (by global id), then the TB
   programs, ordered by `key`. Rank lists must be current. */
void tb_drop(Plan *pl, const char *gone, const int *key);
/* The primitives `out` marks leave the TBs (nothing waits for them); TBs
   left empty go, and flags and connections nothing uses any more. */
void tb_drop_prims(Plan *pl, const char *out);

/* --------------------------------------- merge.c lend.c offload.c pull.c */

/* The passes that rework the TBs, each described in its file. */
void merge_run(Plan *pl);
void lend_run(Plan *pl);
void offload_run(Plan *pl);
void pull_run(Plan *pl);

/* ------------------------------------------------------------- analyse.c */

/* A symbolic value: input contributions as (sum of 64-bit hashes, count). */
typedef struct {
  uint64_t h;
  int cnt; /* contributions; -1 = never written (garbage) */
} SymVal;
/* The hash of rank's input chunk idx. */
uint64_t sym_contrib(int rank, int idx);

/* Every rank's buffers side by side: (rank, buf, idx) at rank * per + off[buf] + idx. */
typedef struct {
  int per, off[NBUF];
} Layout;

/* An access of a location by an event: a primitive, or copy-engine copy j as np + j. */
typedef struct {
  size_t at;            /* location */
  int pos, ev, task;    /* the task's position in the post-condition's order, the event, the task */
  uint8_t phase, write; /* phase: the order within a task (its source read, a landing write, its receiver) */
  int lo, cnt;          /* the chunk range it is part of, in its buffer */
} LocAccess;

/* What analyse.c found of a plan, for the proofs (verify.c). */
typedef struct Facts {
  Layout L;
  SymVal *out;  /* rank r's output chunk j (at r * output chunks + j) once every task ran */
  int *writer;  /* the task that wrote it last, or -1 */
  LocAccess *a; /* every access, by location, then in the order the tasks ran */
  int na;
} Facts;

/* Plan.complete, Plan.split and Plan.facts. */
void analyse_run(Plan *pl);
/* The facts of the plan as it stands, and `complete` (per task) when not NULL. */
Facts *facts_build(const Plan *pl, int *complete);
void facts_free(Facts *f);
/* Location of (rank, buf, idx) in buffers already placed (no in-place aliasing). */
size_t facts_loc(const Facts *f, int rank, int buf, int idx);
/* Every two accesses of a location that GPUs must order as the tasks ran,
   of two events: each after the location's last write, a write after the
   reads since (earlier ones follow by transitivity); fn(ctx, a, b) for
   access a before access b, indices into Facts.a. */
void facts_orders(const Facts *f, void (*fn)(void *ctx, int a, int b), void *ctx);

/* -------------------------------------------------------------- verify.c */

/* The proofs, from Plan.facts (or facts of its own where the plan has none:
   one changed since it was compiled). On a deadlock, marks in `stuck` (per
   task, may be NULL) the arrivals of fused primitives it found stuck, and
   sets *nstuck (may be NULL) to how many it newly marked. It neither sets
   Plan.verified nor recomputes Plan.complete or Plan.split: compile() does. */
rcStatus verify_run(const Plan *pl, char *stuck, int *nstuck, Err *e);

/* ------------------------------------------------------------ deadlock.c */

/* The position after primitive k of TB b's program in micro-batch m, run in
   `order`: the next primitive of its loop, the loop's first in the next
   micro-batch, or the next loop's first (m back to 0); k reaches the
   program's length when the TB is done. */
void deadlock_step(const Plan *pl, int b, ExecOrder order, int *k, int *m, int M);
/* Whether the TB programs complete over `nmicro` micro-batches with FIFOs too
   small to hold a tile. On a deadlock, marks in `unfuse` (per task, may be
   NULL) the arrivals of fused primitives that are stuck, and returns how
   many it newly marked through *nmarked. */
rcStatus deadlock_check(const Plan *pl, int nmicro, char *unfuse, int *nmarked, Err *e);
/* The same with connections that buffer two tiles each (Plan.buffered). On a
   deadlock, marks in `cycle` (per TB, may be NULL) the TBs of every cycle of
   blocked TBs. */
rcStatus deadlock_buffered(const Plan *pl, int nmicro, char *cycle, Err *e);
/* Micro-batches a buffered plan is checked over when compiled. Its deadlocks
   can need TBs to drift apart over many micro-batches first (up to 23 in the
   shipped algorithms' merged plans); executors check the count they run. */
#define BUFFERED_MICRO 64

/* ---------------------------------------------------------------- dump.c */

/* Stable text dumps, the golden-test hooks. */
void dump_stage(const Plan *pl, Stage s, Buf *b);

/* ---------------------------------------------------------------- emit.c */

typedef enum { EMIT_HOST, EMIT_CUDA } EmitTarget;

/* Template filling: ${name} placeholders, unknown ones are errors. */
typedef struct {
  const char *name;
  const char *value;
} TplVar;
rcStatus tpl_fill(Buf *out, const char *tplname, const char *tpl, const TplVar *vars, int nvars, Err *e);
/* Text of an embedded file of kernels-templates/, NULL when unknown. */
const char *tpl_text(const char *name);

/* The whole program, every rank, for the host executor or as one CUDA unit. */
rcStatus emit_program(const Plan *pl, EmitTarget tg, Buf *out, Err *e);
/* One rank's code only (what one GPU needs). */
void emit_rank(const Plan *pl, int rank, EmitTarget tg, Buf *out);
/* The table of ranks and their TBs; `externs` declares ranks emitted elsewhere. */
void emit_table(const Plan *pl, int externs, Buf *out);
/* Every rank's code and the table, without the templates: a plan file's kernel body. */
void emit_body(const Plan *pl, EmitTarget tg, Buf *out);

/* ------------------------------------------------------------ artifact.c */

/* The plan file the GPU runtime loads (planfile.h): a section per plan,
   each a header of numbers and its kernel's body, then the digest. */
rcStatus plan_file(const Plan *const *pls, int n, Buf *out, Err *e);
/* The plan file of program p on t, compiled with o: the out-of-place
   placement, and the in-place one where the program has it (inplace), each
   followed by the forms that differ (artifact.c says which and why). */
rcStatus plan_file_for(const Program *p, const Topo *t, const Options *o, int inplace, Buf *out, Err *e);
/* What decides a placement's further forms; plan:report() shows it too. */
typedef struct {
  int ce_ends;           /* reductions that wait for the copy engine and that nothing waits for */
  int pulled_reductions; /* pulls that reduce what they read */
  int pushes;            /* primitives that still send */
} PlanForms;
PlanForms plan_forms(const Plan *pl);

/* ----------------------------------------------------------------- sim.c */

/* The simulator runs a plan in the execution order it was compiled and
   verified for (Options.order), as the executors do. */

typedef struct {
  double size;      /* bytes: nccl-tests' size column for the collective */
  double tile;      /* target bytes of one primitive call on one chunk (sets nmicro) */
  int nmicro;       /* micro-batches; 0 = enough for tiles of at most `tile` */
  int depth;        /* FIFO depth of a connection, in tiles */
  int instances;    /* copies of the plan side by side (channels), each on 1/instances of every chunk */
  int rotate;       /* instance k shifts GPU indices in a node by k*gpus_per_nic (NCCL's rings) */
  double slowdown;  /* fraction of a TB's rate lost to an interpreter */
  int gpu;          /* nmicro 0: as the GPU runtime picks it (kernels-templates/tile.h), f32, instances = channels */
  int trace;        /* keep one slice per primitive call */
} SimOpts;
#define SIM_MAX_MICRO (1 << 16) /* micro-batches of a simulation: its time grows with them */

typedef struct {
  int rank, tb;            /* tb: instance * ntb[rank] + the plan's TB index */
  double busy, idle, end;  /* us working, us blocked, finishing time; busy + idle = end */
} SimTb;

typedef struct {
  int id;                  /* topology link id */
  double bytes, active;    /* bytes carried, us with at least one transfer */
} SimLink;

typedef struct {
  int tb, prim, m;         /* index into SimResult.tb, primitive, micro-batch */
  double t0, t1;           /* start of the call (its startup included) and end */
} SimSlice;

typedef struct {
  double time_us, algbw, busbw;    /* GB/s by nccl-tests' formulas */
  int nmicro;
  double tile_bytes;               /* bytes of one call on one chunk */
  int tbs_per_rank_max;
  SimTb *tb;
  int ntb;
  double busy_avg, idle_avg, idle_max, released_avg; /* fractions of a TB's lifetime / of time_us */
  SimLink *link;                   /* links that carried data, by id */
  int nlink;
  SimSlice *slice;
  int nslice;
  long events;
} SimResult;

/* Time a verified plan's per-TB programs on its topology. */
rcStatus sim_run(const Plan *pl, const SimOpts *o, SimResult *r, Err *e);
void sim_free(SimResult *r);
/* nccl-tests: algbw = S / t, busbw = algbw * factor. */
double coll_busbw_factor(Coll c, int nranks);

/* ----------------------------------------------------------- exec_host.c */

/* Datatypes and reduction operators, numbered as NCCL's ncclDataType_t and ncclRedOp_t. */
#define RX_DT_ENUM(e, name, size) DT_##e,
typedef enum { RX_DTYPES(RX_DT_ENUM) NDTYPE } Dtype;
#undef RX_DT_ENUM
typedef enum { RED_SUM, RED_PROD, RED_MAX, RED_MIN, RED_AVG, NREDOP } RedOp;

/*
** avg is NCCL's ncclAvg: a sum, then the reduced value divided by nranks
** (integers: the wrapped sum's integer division, truncating, as NCCL's
** SumPostDiv; f16 and bf16 in float). NCCL premultiplies floats by 1/nranks
** instead; dividing the exact sum once is what the reference matches bit
** for bit. The division runs once per value, in the reduction that
** completes it (every rank's contribution in: Plan.complete, from the
** verifier's symbolic run), before that reduction stores or forwards it;
** copies then carry the quotient. The verifier proves every output element
** holds each contribution once, so it descends from exactly one completing
** reduction, whatever the algorithm: it is divided exactly once. A
** reduction that completes only some of its chunks cannot divide just
** those, and avg refuses such a plan.
*/

typedef struct {
  Dtype dtype;
  RedOp op;
  size_t count;      /* elements per block (NCCL's count for the collective) */
  int nmicro;        /* micro-batches */
  int nslots;        /* FIFO slots per connection; 0: two, or for a buffered plan the fewest that hold two tiles */
  size_t slot_bytes; /* bytes per FIFO slot */
  int timeout_ms;    /* no progress for this long = stuck */
  int direct;        /* 1: direct sends write into the peer's buffer; 0: they use the FIFOs too */
  const char *cc;    /* C compiler, default $CC or "cc" */
} ExecOpts;

typedef struct {
  double max_err;    /* largest |out - ref| over every checked element */
  size_t nwrong;     /* elements that differ from the reference */
  double ms;         /* wall time of the run, compile excluded (GPU: median of the timed runs) */
  int ndev;          /* GPUs used (exec_gpu) */
  char first_wrong[256];
} ExecResult;

/* A plan's host program, compiled and loaded by its first run and kept
   for the next: one per plan, zeroed before the first run. */
typedef struct {
  void *so;
} HostExec;
/* Runs the plan's host program, from hx or into it (NULL: for this run only). */
rcStatus exec_host(const Plan *pl, HostExec *hx, const ExecOpts *o, ExecResult *r, Err *e);
void exec_host_close(HostExec *hx);
/* The options make sense (avg: every reduction completes all of its chunks
   or none), a buffered plan's FIFOs hold two tiles (nslots 0 is set to what
   it needs) and it completes over nmicro micro-batches, and both ends of
   every transfer move the same number of elements at this count. */
rcStatus exec_check_sizes(const Plan *pl, ExecOpts *o, Err *e);

/* ------------------------------------------------------------ exec_gpu.c */

typedef struct {
  int ndev;     /* GPUs to spread the ranks over; 0 = all */
  int threads;  /* per block; 0: the runtime's default for the plan */
  int iters;    /* timed runs after the checked one */
  int nchan;    /* blocks per TB, each moving a slice of every tile; 0 = 1 */
  const Plan *with; /* or NULL: the program's other placement, whose kernel the runtime builds (and caches)
                       alongside, so that its own run finds it built */
} GpuOpts;

rcStatus exec_gpu(const Plan *pl, const ExecOpts *o, const GpuOpts *g, ExecResult *r, Err *e);
/* GPUs the runtime (libresccl) sees; 0 where it is not built or sees none. */
int exec_gpu_count(void);

/* ---------------------------------------------------------------- data.c */

typedef void (*RedFn)(void *dst, const void *src, size_t n); /* dst[i] = dst[i] (op) src[i] */
typedef void (*PostFn)(void *dst, size_t n, int nranks);     /* dst[i] = dst[i] / nranks */
extern const size_t dtype_size[NDTYPE];
const char *dtype_name(int d);   /* the short name: "f16" */
int dtype_parse(const char *s);  /* also NCCL's spellings ("half", "float16"); -1 when unknown */
const char *redop_name(int o);
int redop_parse(const char *s);
RedFn data_reducer(Dtype dt, RedOp op);          /* avg: the sum */
PostFn data_post(Dtype dt, RedOp op);            /* avg: its division; NULL for the other ops */
/* f16 and bf16 are kept as their bits; arithmetic converts to float and back,
   rounding to nearest even. */
float f16_to_float(uint16_t h);
uint16_t f16_from_float(float f);
float bf16_to_float(uint16_t h);
uint16_t bf16_from_float(float f);
/* Elements per rank of each buffer for this count. */
void data_elems(const Program *p, size_t count, size_t elems[NBUF]);
/* Per rank, three buffers (rank*3 + BUF_*): inputs where the placement puts them, the rest poisoned. */
char **data_buffers(const Plan *pl, const ExecOpts *o);
/* Compare every output element with the reference; fills max_err, nwrong, first_wrong. */
void data_check(const Plan *pl, const ExecOpts *o, char *const *buf, ExecResult *res);

#endif
