/*
** test_core.c — unit tests of the C stages, without Lua: topology, program,
** DAG, schedulers, lowering, TB allocation, verifier, templates, emitter,
** dtypes and host executor. Programs are built here with prog_add, as the
** DSL would.
*/
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core.h"
#include "../kernels-templates/tile.h"

/* ------------------------------------------------------------ builders */

static void addn(Program *p, int src, int sb, int si, int dst, int db, int di, int cnt, int op, int step) {
  Err e;
  Xfer x = {.src = src, .sbuf = (uint8_t)sb, .sidx = si, .dst = dst, .dbuf = (uint8_t)db, .didx = di, .cnt = cnt,
            .op = (uint8_t)op, .step = step, .at = {0, 100 + step}};
  assert_int_equal(prog_add(p, &x, &e), RC_OK);
}

static void add(Program *p, int src, int sb, int si, int dst, int db, int di, int op, int step) {
  addn(p, src, sb, si, dst, db, di, 1, op, step);
}

/* Ring all-gather in the paper's style: data buffer = output, plus the input copies. */
static Program *ring_allgather(int n) {
  Program *p = prog_new("ring_ag", COLL_ALLGATHER, n, n, 1);
  prog_file(p, "ring.lua");
  for (int r = 0; r < n; r++) add(p, r, BUF_INPUT, 0, r, BUF_OUTPUT, r, OP_COPY, -1);
  for (int r = 0; r < n; r++)
    for (int s = 0; s < n - 1; s++) add(p, r, BUF_OUTPUT, ((r - s) % n + n) % n, (r + 1) % n, BUF_OUTPUT,
                                        ((r - s) % n + n) % n, OP_COPY, s);
  return p;
}

/* Ring all-reduce: reduce-scatter then all-gather over one output buffer of n chunks. */
static Program *ring_allreduce(int n, int drop_last) {
  Program *p = prog_new("ring_ar", COLL_ALLREDUCE, n, n, n);
  prog_file(p, "ring.lua");
  for (int r = 0; r < n; r++) addn(p, r, BUF_INPUT, 0, r, BUF_OUTPUT, 0, n, OP_COPY, -1); /* one block copy */
  for (int r = 0; r < n; r++) {
    for (int s = 0; s < n - 1; s++) {
      int c = ((r - s - 1) % n + n) % n;
      add(p, r, BUF_OUTPUT, c, (r + 1) % n, BUF_OUTPUT, c, OP_REDUCE, s);
    }
    for (int s = 0; s < n - 1; s++) {
      if (drop_last && r == 0 && s == n - 2) continue;
      int c = ((r - s) % n + n) % n;
      add(p, r, BUF_OUTPUT, c, (r + 1) % n, BUF_OUTPUT, c, OP_COPY, n - 1 + s);
    }
  }
  return p;
}

static const Options default_opts = {.sched = SK_HPDS, .tb = TB_STATE, .fuse = FUSE_AUTO, .stop_after = ST_VERIFY};

/* ---------------------------------------------------------------- topo */

static void test_topo_parse(void **state) {
  (void)state;
  Err e;
  Topo *t = topo_parse("a100:2x4", &e);
  assert_non_null(t);
  assert_int_equal(t->nranks, 8);
  assert_int_equal(t->nnodes, 2);
  assert_int_equal(t->gpn, 4);
  topo_free(t);
  const char *bad[] = {"a100", "a100:2", "a100:0x4", "a100:2x", "v100:8", "h200:4", "a100:129x8", "nvswitch:x"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_null(topo_parse(bad[i], &e));
    assert_int_equal(e.rc, RC_ETOPO);
    assert_non_null(strstr(e.msg, bad[i]));
  }
}

static void test_topo_route(void **state) {
  (void)state;
  Err e;
  Topo *t = topo_parse("a100:2x4", &e);
  int a[TOPO_MAXHOP], b[TOPO_MAXHOP];
  assert_int_equal(topo_route(t, 3, 3, a), 0);
  assert_int_equal(topo_route(t, 0, 1, a), 1); /* NVSwitch pair link */
  assert_int_equal(topo_route(t, 1, 0, b), 1);
  assert_int_not_equal(a[0], b[0]);            /* directions are distinct links */
  assert_int_equal(topo_route(t, 0, 4, a), 2); /* NIC tx, NIC rx */
  assert_int_equal(topo_route(t, 1, 5, b), 2);
  assert_int_equal(a[0], b[0]);                /* GPUs 0 and 1 share a NIC */
  assert_int_equal(a[1], b[1]);
  assert_int_equal(topo_route(t, 2, 6, b), 2);
  assert_int_not_equal(a[0], b[0]);            /* GPU 2 has the next one */
  Link l;
  topo_link(t, a[0], &l);
  assert_int_equal(l.kind, LK_NIC_TX);
  assert_true(l.gbps > 0);
  topo_free(t);
}

/* ------------------------------------------------------------- program */

static void test_program_bounds(void **state) {
  (void)state;
  Program *p = prog_new("x", COLL_ALLGATHER, 4, 4, 1);
  prog_file(p, "x.lua");
  Err e;
  Xfer x = {.src = 0, .dst = 9, .sbuf = BUF_INPUT, .dbuf = BUF_OUTPUT, .cnt = 1, .at = {0, 7}};
  assert_int_equal(prog_add(p, &x, &e), RC_EINVAL);
  assert_string_equal(e.msg, "x.lua:7: destination rank 9 out of range (program has 4 ranks)");
  x.dst = 1, x.didx = 4;
  assert_int_equal(prog_add(p, &x, &e), RC_EINVAL);
  assert_string_equal(e.msg, "x.lua:7: output chunk 4 out of range (output has 4 chunks per rank)");
  x.didx = 3, x.dbuf = BUF_SCRATCH, x.didx = 5;
  assert_int_equal(prog_add(p, &x, &e), RC_OK); /* scratch grows */
  assert_int_equal(p->scratch_chunks, 6);
  prog_free(p);
}

static void test_program_inplace(void **state) {
  (void)state;
  Program *p = ring_allgather(4);
  Task *t;
  int n;
  Err e;
  assert_int_equal(prog_tasks(p, 0, &t, &n, &e), RC_OK);
  assert_int_equal(n, 4 + 12);
  free(t);
  assert_int_equal(prog_tasks(p, 1, &t, &n, &e), RC_OK);
  assert_int_equal(n, 12); /* input copies alias onto themselves and vanish */
  for (int i = 0; i < n; i++) assert_int_equal(t[i].sbuf, BUF_OUTPUT);
  free(t);
  prog_free(p);
}

/* --------------------------------------------------------- dag / sched */

static void test_dag_ring(void **state) {
  (void)state;
  Err e;
  Program *p = ring_allgather(4);
  Topo *t = topo_flat(4);
  Dag d;
  assert_int_equal(dag_build(&d, p, t, 1, 0, &e), RC_OK);
  assert_int_equal(d.n, 12);
  assert_int_equal(d.nchunk, 4);
  /* Every step after the first forwards what the previous step delivered. */
  for (int i = 0; i < d.n; i++) {
    int step = p->xf[d.t[i].xf].step;
    int raw = 0;
    for (int k = d.pred_off[i]; k < d.pred_off[i + 1]; k++)
      if (d.prank[k] == d.t[i].src && d.t[d.pred[k]].dst == d.t[i].src) raw = 1;
    assert_int_equal(raw, step > 0);
    assert_int_equal(d.t[i].chunk, d.t[i].sidx); /* a forwarded chunk keeps its key */
  }
  dag_free(&d);
  topo_free(t);
  prog_free(p);
}

/* One-shot all-reduce on 2 ranks, c chunks: each rank's whole input into
   the other's scratch, then output = input (+) scratch there. */
static Program *oneshot_allreduce(int c) {
  Program *p = prog_new("oneshot_ar", COLL_ALLREDUCE, 2, 2, c);
  prog_file(p, "oneshot.lua");
  for (int r = 0; r < 2; r++) addn(p, 1 - r, BUF_INPUT, 0, r, BUF_SCRATCH, 0, c, OP_COPY, 0);
  for (int r = 0; r < 2; r++) {
    addn(p, r, BUF_INPUT, 0, r, BUF_OUTPUT, 0, c, OP_COPY, 1);
    addn(p, r, BUF_SCRATCH, 0, r, BUF_OUTPUT, 0, c, OP_REDUCE, 1);
  }
  return p;
}

/* A receive into scratch and its local reduction into the output fold into
   one receive that reduces (out of place), not in place (the operand is the
   destination) nor with TBs placed by hand. */
static void test_dag_fold_reduction(void **state) {
  (void)state;
  Err e;
  Program *p = oneshot_allreduce(2);
  Topo *t = topo_flat(2);
  Dag d;
  assert_int_equal(dag_build(&d, p, t, 0, 0, &e), RC_OK);
  assert_int_equal(d.n, 2);
  for (int i = 0; i < d.n; i++) {
    assert_int_not_equal(d.t[i].src, d.t[i].dst);
    assert_int_equal(d.t[i].op, OP_REDUCE);
    assert_int_equal(d.t[i].sbuf, BUF_INPUT);
    assert_int_equal(d.t[i].dbuf, BUF_OUTPUT);
    assert_int_equal(d.t[i].obuf, BUF_INPUT);
  }
  dag_free(&d);
  for (int inplace = 0; inplace < 2; inplace++) {
    assert_int_equal(dag_build(&d, p, t, inplace, !inplace, &e), RC_OK);
    assert_int_equal(d.n, 4); /* two receives into scratch, two local reductions */
    dag_free(&d);
  }
  prog_free(p);
  /* Not when the copy's source overlaps the reduction's destination, shifted:
     out[0..2) = in[0..2) (+) (a copy of out[1..3)) would read what it writes. */
  p = prog_new("shifted", COLL_ALLREDUCE, 2, 2, 4);
  prog_file(p, "shifted.lua");
  addn(p, 1, BUF_INPUT, 0, 0, BUF_OUTPUT, 1, 2, OP_COPY, 0);
  addn(p, 0, BUF_OUTPUT, 1, 0, BUF_SCRATCH, 0, 2, OP_COPY, 1);
  addn(p, 0, BUF_INPUT, 0, 0, BUF_OUTPUT, 0, 2, OP_COPY, 2);
  addn(p, 0, BUF_SCRATCH, 0, 0, BUF_OUTPUT, 0, 2, OP_REDUCE, 3);
  assert_int_equal(dag_build(&d, p, t, 0, 0, &e), RC_OK);
  assert_int_equal(d.n, 3); /* the receive, the copy into scratch, the reduction */
  dag_free(&d);
  topo_free(t);
  prog_free(p);
}

/* No two tasks of a sub-pipeline share a link; predecessors come first. */
static void check_schedule(const Dag *d, const Sched *s) {
  for (int i = 0; i < d->n; i++)
    for (int k = d->pred_off[i]; k < d->pred_off[i + 1]; k++) {
      assert_true(s->pos[d->pred[k]] < s->pos[i]);
      assert_true(s->slot[d->pred[k]] <= s->slot[i]);
    }
  for (int i = 0; i < d->n; i++)
    for (int j = i + 1; j < d->n; j++) {
      if (s->slot[i] != s->slot[j]) continue;
      for (int a = 0; a < TOPO_MAXHOP && d->link[i * TOPO_MAXHOP + a] >= 0; a++)
        for (int b = 0; b < TOPO_MAXHOP && d->link[j * TOPO_MAXHOP + b] >= 0; b++)
          assert_int_not_equal(d->link[i * TOPO_MAXHOP + a], d->link[j * TOPO_MAXHOP + b]);
    }
}

static void test_sched_invariants(void **state) {
  (void)state;
  Err e;
  Program *p = ring_allreduce(6, 0);
  Topo *t = topo_parse("a100:3x2", &e);
  Dag d;
  assert_int_equal(dag_build(&d, p, t, 0, 0, &e), RC_OK);
  for (int k = 0; k < 2; k++) {
    Sched s;
    assert_int_equal(sched_run(&s, &d, k ? SK_RR : SK_HPDS, &e), RC_OK);
    check_schedule(&d, &s);
    assert_true(s.nslots >= 2 * (6 - 1)); /* a ring link carries 2(n-1) chunks */
    sched_free(&s);
  }
  dag_free(&d);
  topo_free(t);
  prog_free(p);
}

static void test_sched_ring_steps(void **state) {
  (void)state;
  Err e;
  Program *p = ring_allgather(5);
  Topo *t = topo_flat(5);
  Dag d;
  Sched s;
  assert_int_equal(dag_build(&d, p, t, 1, 0, &e), RC_OK);
  assert_int_equal(sched_run(&s, &d, SK_HPDS, &e), RC_OK);
  assert_int_equal(s.nslots, 4); /* one sub-pipeline per ring step */
  sched_free(&s);
  dag_free(&d);
  topo_free(t);
  prog_free(p);
}

/* A chunk none of whose tasks is ready when its first sub-pipeline opens
   (its list of ready tasks is still NULL): chunk 1 starts by overwriting
   the scratch chunk that chunk 5 passes through. */
static void test_sched_waiting_chunk(void **state) {
  (void)state;
  Err e;
  Program *p = prog_new("waiting", COLL_ALLGATHER, 2, 2, 1);
  prog_file(p, "waiting.lua");
  add(p, 0, BUF_INPUT, 0, 1, BUF_SCRATCH, 5, OP_COPY, 0);
  add(p, 1, BUF_SCRATCH, 5, 0, BUF_SCRATCH, 1, OP_COPY, 1);
  add(p, 0, BUF_SCRATCH, 1, 1, BUF_OUTPUT, 0, OP_COPY, 2);
  add(p, 1, BUF_INPUT, 0, 0, BUF_SCRATCH, 1, OP_COPY, 3);
  add(p, 0, BUF_SCRATCH, 1, 1, BUF_OUTPUT, 1, OP_COPY, 4);
  Topo *t = topo_flat(2);
  Dag d;
  assert_int_equal(dag_build(&d, p, t, 0, 0, &e), RC_OK);
  assert_int_equal(d.n, 5);
  assert_int_equal(d.t[3].chunk, 1);
  assert_int_equal(d.t[4].chunk, 1);
  assert_int_equal(d.pred_off[4] - d.pred_off[3], 2); /* the second and third transfers */
  for (int k = 0; k < 2; k++) {
    Sched s;
    assert_int_equal(sched_run(&s, &d, k ? SK_RR : SK_HPDS, &e), RC_OK);
    check_schedule(&d, &s);
    assert_int_equal(s.nslots, 3);
    sched_free(&s);
  }
  dag_free(&d);
  topo_free(t);
  prog_free(p);
}

/* ------------------------------------------------- lower / tb / verify */

static void test_plan_ring(void **state) {
  (void)state;
  Err e;
  Program *p = ring_allreduce(4, 0);
  Topo *t = topo_flat(4);
  Plan conn, st;
  Options o = default_opts;
  o.tb = TB_CONN;
  assert_int_equal(compile(&conn, p, t, &o, &e), RC_OK);
  assert_int_equal(compile(&st, p, t, &default_opts, &e), RC_OK);
  assert_true(st.verified);
  assert_true(st.ntbs <= conn.ntbs);
  assert_int_equal(plan_tbs_max(&st), 2); /* sends and receives of a ring */
  /* Each task is one send and one receive, or one fused primitive less. */
  assert_true(st.np <= 2 * st.dag.n);
  for (int i = 0; i < st.np; i++) assert_true(st.p[i].tb < st.ntb[st.p[i].rank]);
  Buf b;
  buf_init(&b);
  dump_stage(&st, ST_TB, &b);
  assert_non_null(strstr(b.s, "tb state:"));
  buf_free(&b);
  plan_free(&conn);
  plan_free(&st);
  topo_free(t);
  prog_free(p);
}

/* A transfer that reads chunks it writes, shifted, is refused: executors
   move its chunks side by side. (Programs cannot say it; a pass could.) */
static void test_verify_shifted(void **state) {
  (void)state;
  Err e;
  Program *p = oneshot_allreduce(4);
  Topo *t = topo_flat(2);
  Plan pl;
  assert_int_equal(compile(&pl, p, t, &default_opts, &e), RC_OK);
  Task *tk = &pl.dag.t[0];
  tk->cnt = 2, tk->obuf = BUF_OUTPUT, tk->oidx = 1, tk->didx = 0;
  assert_int_equal(verify_run(&pl, NULL, NULL, &e), RC_EVERIFY);
  assert_non_null(strstr(e.msg, "reads chunks it writes, shifted"));
  plan_free(&pl);
  topo_free(t);
  prog_free(p);
}

/* On GPUs only program order, waits, arrivals and the copy engine's
   counters and flags order primitives: a plan that loses one of them, or a
   pull of what its peer writes meanwhile, is refused as a race. */
static rcStatus verify_race(Program *p, int ranks, const Options *o, int what, Err *e) {
  Topo *t = topo_flat(ranks);
  Plan pl;
  assert_int_equal(compile(&pl, p, t, o, e), RC_OK);
  int cut = 0;
  for (int i = 0; i < pl.np && what == 0; i++) cut += pl.p[i].nwaits, pl.p[i].nwaits = 0;
  for (int c = 0; c < pl.nce && what == 1; c++)
    if (pl.ce[c].after >= 0) pl.ce[c].after = -1, cut++;
  for (int i = 0; i < pl.np && what == 2; i++)
    if (pl.p[i].pull) pl.p[i].rbuf = BUF_OUTPUT, cut++;
  if (what == 3) pl.ntb[1] = 0, cut++; /* as if rank 1's primitives had all gone */
  assert_true(cut > 0);
  rcStatus rc = verify_run(&pl, NULL, NULL, e);
  plan_free(&pl);
  topo_free(t);
  prog_free(p);
  return rc;
}

static void test_verify_races(void **state) {
  (void)state;
  Err e;
  Options ce = default_opts, pull = default_opts;
  ce.ce = 1, pull.pull = 1;
  assert_int_equal(verify_race(ring_allreduce(4, 0), 4, &default_opts, 0, &e), RC_EVERIFY);
  assert_non_null(strstr(e.msg, "ring.lua:"));
  assert_non_null(strstr(e.msg, "nothing orders this"));
  assert_non_null(strstr(e.msg, "(a race)"));
  assert_int_equal(verify_race(ring_allreduce(2, 0), 2, &ce, 1, &e), RC_EVERIFY);
  assert_non_null(strstr(e.msg, "(a race)"));
  assert_int_equal(verify_race(oneshot_allreduce(2), 2, &pull, 2, &e), RC_EVERIFY);
  assert_non_null(strstr(e.msg, "output chunk"));
  assert_non_null(strstr(e.msg, "(a race)"));
  assert_int_equal(verify_race(oneshot_allreduce(2), 2, &pull, 3, &e), RC_EDEADLOCK);
  assert_non_null(strstr(e.msg, "rank 1 runs no thread block in a plan that pulls"));
}

/* A GPU cuts each primitive's chunk range into slices and orders slice s of
   one only with slice s of another: where ranges differ, both ends of the
   transfer move a chunk at a time. Here each rank puts its two input chunks
   into the peer's scratch in one transfer, which copies them out one each. */
static void test_verify_split(void **state) {
  (void)state;
  Err e;
  Program *p = prog_new("split_ag", COLL_ALLGATHER, 2, 2, 2);
  prog_file(p, "split.lua");
  for (int r = 0; r < 2; r++) {
    addn(p, r, BUF_INPUT, 0, r, BUF_OUTPUT, 2 * r, 2, OP_COPY, 0);
    addn(p, r, BUF_INPUT, 0, 1 - r, BUF_SCRATCH, 0, 2, OP_COPY, 0);
    for (int c = 0; c < 2; c++) add(p, 1 - r, BUF_SCRATCH, c, 1 - r, BUF_OUTPUT, 2 * r + c, OP_COPY, 1);
  }
  Topo *t = topo_flat(2);
  Plan pl;
  Options o = default_opts;
  o.fuse = FUSE_NEVER;
  assert_int_equal(compile(&pl, p, t, &o, &e), RC_OK);
  int split = 0;
  for (int i = 0; i < pl.np; i++) {
    const Prim *q = &pl.p[i];
    int crosses = q->kind == PR_SEND || q->kind == PR_RECV; /* the two-chunk transfers' ends, and nothing else */
    assert_int_equal(pl.split[i], crosses);
    split += pl.split[i];
  }
  assert_int_equal(split, 4);
  Buf b;
  buf_init(&b);
  assert_int_equal(emit_program(&pl, EMIT_HOST, &b, &e), RC_OK);
  assert_non_null(strstr(b.s, "RX_PUT(0, 1, RX_INPUT, 0, RX_SCRATCH, 0, 1, 0);\n    RX_PUT(0, 1, RX_INPUT, 1, RX_SCRATCH, 1, 1, 0);"));
  assert_non_null(strstr(b.s, "RX_RECV_PUT(1, RX_SCRATCH, 0, 1);\n    RX_RECV_PUT(1, RX_SCRATCH, 1, 1);"));
  assert_non_null(strstr(b.s, "RX_COPY(RX_INPUT, 0, RX_OUTPUT, 0, 2);"));
  buf_free(&b);
  plan_free(&pl);
  topo_free(t);
  prog_free(p);
}

static void test_verify_incomplete(void **state) {
  (void)state;
  Err e;
  Program *p = ring_allreduce(4, 1);
  Topo *t = topo_flat(4);
  Plan pl;
  assert_int_equal(compile(&pl, p, t, &default_opts, &e), RC_EVERIFY);
  assert_false(pl.verified);
  assert_non_null(strstr(e.msg, "ring.lua:"));
  assert_non_null(strstr(e.msg, "allreduce result wrong: rank 1 output chunk"));
  assert_non_null(strstr(e.msg, "3 of 4 contributions (missing"));
  plan_free(&pl);
  topo_free(t);
  prog_free(p);
}

static void test_verify_deadlock(void **state) {
  (void)state;
  Err e;
  Program *p = ring_allgather(3);
  Topo *t = topo_flat(3);
  Plan pl;
  Options o = default_opts;
  o.stop_after = ST_TB;
  assert_int_equal(compile(&pl, p, t, &o, &e), RC_OK);
  assert_int_equal(deadlock_check(&pl, 3, NULL, NULL, &e), RC_OK);
  /* Swap two primitives of one TB: a receive now precedes the send it feeds. */
  int swapped = 0;
  for (int g = 0; g < pl.ntbs && !swapped; g++) {
    int n = pl.tb_off[g + 1] - pl.tb_off[g];
    if (n >= 2) {
      int *tp = pl.tb_prims + pl.tb_off[g], tmp = tp[0];
      tp[0] = tp[n - 1], tp[n - 1] = tmp;
      swapped = 1;
    }
  }
  assert_true(swapped);
  assert_int_equal(deadlock_check(&pl, 3, NULL, NULL, &e), RC_EDEADLOCK);
  assert_non_null(strstr(e.msg, "deadlock, a cycle of"));
  plan_free(&pl);
  topo_free(t);
  prog_free(p);
}

/*
** Merged TBs: a ring's sends and receives share one TB per rank, in loops of
** one send and one receive; without buffering that deadlocks, with two tiles
** per connection it does not, at any number of micro-batches.
*/
static void test_tb_merge(void **state) {
  (void)state;
  Err e;
  for (int n = 2; n <= 8; n++)
    for (int ar = 0; ar < 2; ar++) {
      Program *p = ar ? ring_allreduce(n, 0) : ring_allgather(n);
      Topo *t = topo_flat(n);
      Plan pl;
      Options o = default_opts;
      o.tb = TB_MERGE;
      assert_int_equal(compile(&pl, p, t, &o, &e), RC_OK);
      assert_true(pl.verified && pl.buffered);
      assert_int_equal(plan_tbs_max(&pl), 1);
      for (int g = 0; g < pl.ntbs; g++) {
        int snd = 0, rcv = 0;
        for (int k = pl.tb_off[g]; k < pl.tb_off[g + 1]; k++) {
          const Prim *q = &pl.p[pl.tb_prims[k]];
          if (!q->join) snd = rcv = 0;
          else assert_int_equal(q->slot, pl.p[pl.tb_prims[k - 1]].slot);
          snd += q->cout >= 0, rcv += q->cin >= 0;
          assert_true(snd <= 1 && rcv <= 1);
        }
      }
      for (int m = 1; m <= 32; m *= 2) assert_int_equal(deadlock_buffered(&pl, m, NULL, &e), RC_OK);
      assert_int_equal(deadlock_check(&pl, 3, NULL, NULL, &e), RC_EDEADLOCK);
      plan_free(&pl);
      topo_free(t);
      prog_free(p);
    }
}

/* The plan runs right on the host executor: f32 sums, 3 micro-batches,
   FIFOs of two 64-byte slots. */
static void exec_ok(Plan *pl, int direct) {
  Err e;
  ExecOpts x = {.dtype = DT_F32, .op = RED_SUM, .count = 1001, .nmicro = 3, .nslots = 2, .slot_bytes = 64,
                .timeout_ms = 5000, .direct = direct};
  ExecResult r;
  assert_int_equal(exec_host(pl, NULL, &x, &r, &e), RC_OK);
  assert_int_equal(r.nwrong, 0);
}

/* A TB of direct receives only waits: on two ranks it takes the all-gather's
   own-chunk copy first, and the send reads the input; the plan then runs
   right with puts and through FIFOs. On three ranks the receives forward,
   so the copy-send stays. */
static void test_tb_lend(void **state) {
  (void)state;
  Err e;
  for (int n = 2; n <= 3; n++) {
    Program *p = ring_allgather(n);
    Topo *t = topo_flat(n);
    Plan pl;
    assert_int_equal(compile(&pl, p, t, &default_opts, &e), RC_OK);
    assert_int_equal(plan_tbs_max(&pl), 2);
    int copies = 0, cs = 0;
    for (int i = 0; i < pl.np; i++) {
      const Prim *q = &pl.p[i];
      cs += q->kind == PR_CS;
      if (q->kind == PR_SEND && q->rbuf == BUF_INPUT) assert_true(q->direct);
      if (q->kind != PR_COPY) continue;
      copies++;
      assert_int_equal(q->seq, 0);
      int g = pl.tb_base[q->rank] + q->tb;
      for (int k = pl.tb_off[g] + 1; k < pl.tb_off[g + 1]; k++) {
        assert_int_equal(pl.p[pl.tb_prims[k]].kind, PR_RECV);
        assert_true(pl.p[pl.tb_prims[k]].direct);
      }
    }
    assert_int_equal(copies, n == 2 ? 2 : 0);
    assert_int_equal(cs, n == 2 ? 0 : n);
    for (int direct = 0; direct < 2; direct++) exec_ok(&pl, direct);
    plan_free(&pl);
    topo_free(t);
    prog_free(p);
  }
  /* All-to-all a chunk at a time: both own copies go, and their TB with them. */
  Program *p = prog_new("a2a", COLL_ALLTOALL, 2, 2, 2);
  prog_file(p, "a2a.lua");
  for (int r = 0; r < 2; r++)
    for (int q = 0; q < 2; q++)
      for (int c = 0; c < 2; c++) add(p, r, BUF_INPUT, 2 * q + c, q, BUF_OUTPUT, 2 * r + c, OP_COPY, 0);
  Topo *t = topo_flat(2);
  Plan pl;
  assert_int_equal(compile(&pl, p, t, &default_opts, &e), RC_OK);
  assert_int_equal(plan_tbs_max(&pl), 2);
  for (int g = 0; g < pl.ntbs; g++) assert_true(pl.tb_off[g + 1] > pl.tb_off[g]);
  plan_free(&pl);
  topo_free(t);
  prog_free(p);
}

/* Every primitive's waits lie packed in Plan.wait, in primitive order, and
   name primitives of the plan. */
static void check_waits(const Plan *pl) {
  int off = 0;
  for (int i = 0; i < pl->np; i++) {
    const Prim *q = &pl->p[i];
    if (q->nwaits) assert_int_equal(q->wait_off, off);
    for (int j = q->wait_off; j < q->wait_off + q->nwaits; j++) assert_true(pl->wait[j] >= 0 && pl->wait[j] < pl->np);
    off += q->nwaits;
  }
  assert_int_equal(off, pl->nwait);
}

/* Pulls on a two-rank ring all-reduce: pull_run drops the waits for the
   sends that go, and put_on then drops more primitives (the sends that the
   reductions put themselves), in place too. */
static void test_tb_pull(void **state) {
  (void)state;
  Err e;
  Program *p = ring_allreduce(2, 0);
  Topo *t = topo_flat(2);
  for (int inplace = 0; inplace < 2; inplace++) {
    Plan pl;
    Options o = default_opts;
    o.pull = 1, o.inplace = inplace;
    assert_int_equal(compile(&pl, p, t, &o, &e), RC_OK);
    assert_true(pl.verified);
    assert_int_equal(pl.npulls, 2);
    assert_int_equal(pl.nputs, 2);
    check_waits(&pl);
    exec_ok(&pl, 1);
    plan_free(&pl);
  }
  topo_free(t);
  prog_free(p);
}

/* Copy-engine copies of several chunks: the verifier's events past the
   primitives are the copies, which are not sliced (analyse.c's sliced_alike). */
static void test_ce_verify(void **state) {
  (void)state;
  Err e;
  Program *p = oneshot_allreduce(2);
  Topo *t = topo_flat(2);
  Plan pl;
  Options o = default_opts;
  o.ce = 1;
  assert_int_equal(compile(&pl, p, t, &o, &e), RC_OK);
  assert_true(pl.verified);
  assert_int_equal(pl.nce, 2);
  for (int i = 0; i < pl.nce; i++) assert_int_equal(pl.ce[i].cnt, 2);
  check_waits(&pl);
  exec_ok(&pl, 1);
  plan_free(&pl);
  topo_free(t);
  prog_free(p);
}

/* -------------------------------------------------- template / emitter */

/* Copy-engine copies as contiguous runs (tile.h's rx_ce_run): blocks of 64
   f32 in 2 chunks, 4 micro-batches. */
static int ce_runs(int sidx, int didx, int cnt, size_t *total, size_t *first_n) {
  size_t m = 0, slo, dlo, n;
  int runs = 0;
  *total = 0;
  while (rx_ce_run(64, 2, 4, 4, sidx, didx, cnt, &m, 4, &slo, &dlo, &n)) {
    if (!runs) *first_n = n;
    size_t lo, k;
    rx_span(64, 2, 4, 4, sidx, cnt, 0, &lo, &k);
    if (!runs) assert_int_equal(slo, lo);
    *total += n, runs++;
  }
  return runs;
}

static void test_ce_runs(void **state) {
  (void)state;
  size_t total, n;
  assert_int_equal(ce_runs(0, 2, 2, &total, &n), 1); /* a whole block: one run */
  assert_int_equal(total, 64);
  assert_int_equal(ce_runs(1, 1, 1, &total, &n), 4); /* one chunk: a run per slab */
  assert_int_equal(total, 32);
  assert_int_equal(n, 8);
  assert_int_equal(ce_runs(2, 1, 1, &total, &n), 4); /* another chunk position: runs of either side's slabs */
  assert_int_equal(total, 32);
  /* one micro-batch (a flagged copy's): micro-batch 2 of chunk 2 (block 1, first half) to chunk 1 */
  size_t m = 2, slo, dlo, lo, k;
  assert_true(rx_ce_run(64, 2, 4, 4, 2, 1, 1, &m, 3, &slo, &dlo, &n));
  rx_span(64, 2, 4, 4, 2, 1, 2, &lo, &k);
  assert_int_equal(slo, lo);
  assert_int_equal(n, k);
  rx_span(64, 2, 4, 4, 1, 1, 2, &lo, &k);
  assert_int_equal(dlo, lo);
  assert_int_equal(m, 3);
  assert_false(rx_ce_run(64, 2, 4, 4, 2, 1, 1, &m, 3, &slo, &dlo, &n));
}

static void test_template(void **state) {
  (void)state;
  Err e;
  Buf b;
  buf_init(&b);
  TplVar v[] = {{"a", "1"}, {"bb", "two"}};
  assert_int_equal(tpl_fill(&b, "t.tpl", "x ${a} y ${bb}\n", v, 2, &e), RC_OK);
  assert_string_equal(b.s, "x 1 y two\n");
  b.n = 0;
  assert_int_equal(tpl_fill(&b, "t.tpl", "line\n${a}\n${nchunks}\n", v, 2, &e), RC_ETEMPLATE);
  assert_string_equal(e.msg, "t.tpl:3: unknown placeholder ${nchunks}");
  assert_int_equal(tpl_fill(&b, "t.tpl", "${a\n}", v, 2, &e), RC_ETEMPLATE);
  assert_string_equal(e.msg, "t.tpl:1: unterminated placeholder");
  buf_free(&b);
  assert_non_null(tpl_text("host.h"));
  assert_null(tpl_text("nope"));
}

/* Names in comments: nothing ends the comment, opens another or starts a line. */
static void test_comment(void **state) {
  (void)state;
  static const char *const in[] = {"a*/b", "/*x*/", "n\nl\r", "\\", "]]--", "\xff\xc3(", "*", "//", ""};
  static const char *const out[] = {"a*\\/b", "\\/*x*\\/", "n\\x0al\\x0d", "\\\\", "]]--", "\\xff\\xc3(", "*",
                                    "//", ""};
  for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
    Buf b;
    buf_init(&b);
    buf_comment(&b, in[i]);
    assert_string_equal(b.s, out[i]);
    buf_free(&b);
  }
}

static void test_emit(void **state) {
  (void)state;
  Err e;
  Program *p = ring_allgather(3);
  Topo *t = topo_flat(3);
  Plan pl;
  assert_int_equal(compile(&pl, p, t, &default_opts, &e), RC_OK);
  Buf b;
  buf_init(&b);
  assert_int_equal(emit_program(&pl, EMIT_HOST, &b, &e), RC_OK);
  assert_non_null(strstr(b.s, "RX_FOR_M {"));
  assert_non_null(strstr(b.s, "RX_PROGRAM_BEGIN(3, 0)"));
  assert_non_null(strstr(b.s, "(ring.lua:"));
  assert_null(strstr(b.s, "${"));
  buf_free(&b);
  plan_free(&pl);
  topo_free(t);
  prog_free(p);
}

/* --------------------------------------------------------------- data */

static void test_half_conversions(void **state) {
  (void)state;
  /* Every f16 and bf16 that is a number survives the round trip through float. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) != 0x7c00 || (h & 0x3ff) == 0) assert_int_equal(f16_from_float(f16_to_float((uint16_t)h)), h);
    if ((h & 0x7f80) != 0x7f80 || (h & 0x7f) == 0) assert_int_equal(bf16_from_float(bf16_to_float((uint16_t)h)), h);
  }
  assert_int_equal(f16_from_float(1.0f), 0x3c00);
  assert_int_equal(f16_from_float(-2.0f), 0xc000);
  assert_int_equal(f16_from_float(65504.0f), 0x7bff);
  assert_int_equal(f16_from_float(65519.0f), 0x7bff);
  assert_int_equal(f16_from_float(65520.0f), 0x7c00);    /* a tie, to even: infinity */
  assert_int_equal(f16_from_float(1 + 0x1p-11f), 0x3c00); /* ties go to the even neighbour */
  assert_int_equal(f16_from_float(1 + 0x3p-11f), 0x3c02);
  assert_int_equal(f16_from_float(0x1p-24f), 0x0001);     /* subnormals */
  assert_int_equal(f16_from_float(0x1p-25f), 0x0000);
  assert_int_equal(f16_from_float(0x3p-25f), 0x0002);
  assert_int_equal(f16_from_float(0x1p-14f - 0x1p-25f), 0x0400); /* rounds up into the normals */
  assert_true(f16_to_float(0x0001) == 0x1p-24f);
  assert_true(f16_to_float(f16_from_float(NAN)) != f16_to_float(f16_from_float(NAN)));
  assert_int_equal(bf16_from_float(1.0f), 0x3f80);
  assert_int_equal(bf16_from_float(1 + 0x1p-8f), 0x3f80);
  assert_int_equal(bf16_from_float(1 + 0x3p-8f), 0x3f82);
  assert_int_equal(bf16_from_float(FLT_MAX), 0x7f80);
  assert_true(bf16_to_float(bf16_from_float(NAN)) != bf16_to_float(bf16_from_float(NAN)));
}

static void test_dtype_names(void **state) {
  (void)state;
  assert_int_equal(dtype_parse("half"), DT_F16);
  assert_int_equal(dtype_parse("bfloat16"), DT_BF16);
  assert_int_equal(dtype_parse("uint8"), DT_U8);
  assert_int_equal(dtype_parse("double"), DT_F64);
  assert_int_equal(dtype_parse("f8"), -1);
  for (int d = 0; d < NDTYPE; d++) assert_int_equal(dtype_parse(dtype_name(d)), d);
}

/* The check compares bits: it finds outputs left poisoned and a single
   flipped bit, in every dtype. All-gather outputs are easy to fill by hand. */
static void test_data_check(void **state) {
  (void)state;
  Program *p = ring_allgather(3);
  Plan pl = {.prog = p};
  for (int dt = 0; dt < NDTYPE; dt++) {
    ExecOpts o = {.dtype = (Dtype)dt, .op = RED_SUM, .count = 5, .direct = 1};
    size_t es = dtype_size[dt], n = o.count * es;
    char **buf = data_buffers(&pl, &o);
    ExecResult r;
    data_check(&pl, &o, buf, &r);
    assert_int_equal(r.nwrong, 3 * 3 * o.count);
    for (int dst = 0; dst < 3; dst++)
      for (int src = 0; src < 3; src++) memcpy(buf[dst * 3 + BUF_OUTPUT] + src * n, buf[src * 3 + BUF_INPUT], n);
    data_check(&pl, &o, buf, &r);
    assert_int_equal(r.nwrong, 0);
    buf[1 * 3 + BUF_OUTPUT][7 * es] ^= 1;
    data_check(&pl, &o, buf, &r);
    assert_int_equal(r.nwrong, 1);
    assert_non_null(strstr(r.first_wrong, "rank 1 output element 7:"));
    for (int k = 0; k < 3 * 3; k++) free(buf[k]);
    free(buf);
  }
  prog_free(p);
}

/* ----------------------------------------------------------- executor */

/* A merged plan runs with the smallest FIFOs it allows (two tiles, the
   default) and is refused anything smaller. */
static void test_exec_merged(void **state) {
  (void)state;
  Err e;
  Program *p = ring_allreduce(5, 0);
  Topo *t = topo_flat(5);
  Plan pl;
  Options o = default_opts;
  o.tb = TB_MERGE;
  assert_int_equal(compile(&pl, p, t, &o, &e), RC_OK);
  for (int nmicro = 1; nmicro <= 64; nmicro *= 4) {
    /* 4-byte slots: a tile streams through element by element */
    ExecOpts x = {.dtype = DT_F32, .count = 1031, .nmicro = nmicro, .slot_bytes = 4, .timeout_ms = 5000, .direct = 1};
    ExecResult r;
    assert_int_equal(exec_host(&pl, NULL, &x, &r, &e), RC_OK);
    assert_int_equal(r.nwrong, 0);
    ExecOpts need = x;
    assert_int_equal(exec_check_sizes(&pl, &need, &e), RC_OK);
    x.nslots = need.nslots - 1;
    assert_int_equal(exec_host(&pl, NULL, &x, &r, &e), RC_ESIZE);
    assert_non_null(strstr(e.msg, "merged TBs need FIFOs of two tiles"));
  }
  plan_free(&pl);
  topo_free(t);
  prog_free(p);
}

static void test_exec_host(void **state) {
  (void)state;
  Err e;
  Program *p = ring_allreduce(4, 0);
  Topo *t = topo_flat(4);
  for (int inplace = 0; inplace < 2; inplace++) {
    Plan pl;
    Options o = default_opts;
    o.inplace = inplace;
    assert_int_equal(compile(&pl, p, t, &o, &e), RC_OK);
    for (int dt = 0; dt < NDTYPE; dt++)
      for (int op = 0; op < NREDOP; op++) {
        ExecOpts x = {.dtype = (Dtype)dt, .op = (RedOp)op, .count = 103, .nmicro = 3, .nslots = 2,
                      .slot_bytes = 32, .timeout_ms = 5000, .direct = 1};
        ExecResult r;
        assert_int_equal(exec_host(&pl, NULL, &x, &r, &e), RC_OK);
        assert_int_equal(r.nwrong, 0);
        assert_true(r.max_err == 0);
      }
    plan_free(&pl);
  }
  topo_free(t);
  prog_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_topo_parse),      cmocka_unit_test(test_topo_route),
    cmocka_unit_test(test_program_bounds),  cmocka_unit_test(test_program_inplace),
    cmocka_unit_test(test_dag_ring),        cmocka_unit_test(test_dag_fold_reduction),        cmocka_unit_test(test_sched_invariants),
    cmocka_unit_test(test_sched_ring_steps), cmocka_unit_test(test_sched_waiting_chunk), cmocka_unit_test(test_plan_ring),
    cmocka_unit_test(test_verify_incomplete), cmocka_unit_test(test_verify_shifted), cmocka_unit_test(test_verify_deadlock),
    cmocka_unit_test(test_tb_merge),        cmocka_unit_test(test_tb_lend),         cmocka_unit_test(test_template),
    cmocka_unit_test(test_ce_runs),         cmocka_unit_test(test_verify_races),       cmocka_unit_test(test_verify_split),
    cmocka_unit_test(test_comment),         cmocka_unit_test(test_emit),            cmocka_unit_test(test_half_conversions),
    cmocka_unit_test(test_dtype_names),     cmocka_unit_test(test_data_check),
    cmocka_unit_test(test_exec_host),       cmocka_unit_test(test_exec_merged),
    cmocka_unit_test(test_tb_pull),         cmocka_unit_test(test_ce_verify),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
