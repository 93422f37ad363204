/*
** test_sim.c — the simulator against closed forms on hand-built programs:
** ring all-gather on uniform links, single transfers, a TB's rate cap, fair
** sharing of a switch port, the contention penalty, instances, copy-engine
** copies and pulls.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core.h"

#define MB (1024.0 * 1024.0)

/* A uniform topology: one node of n GPUs, a link of B GB/s per pair (or a
   switch port per GPU), startup alpha, no latency, unlimited TBs. */
static Topo *uniform(int n, int switched, double gbps, double alpha) {
  Topo d = {0};
  snprintf(d.spec, sizeof d.spec, "uniform:%d", n);
  snprintf(d.model, sizeof d.model, "custom");
  d.nnodes = 1, d.gpn = n, d.switched = switched, d.intra_gbps = gbps, d.alpha_us = alpha;
  Err e;
  Topo *t = topo_new(&d, &e);
  assert_non_null(t);
  return t;
}

static void add_op(Program *p, int src, int sb, int si, int dst, int db, int di, int step, int op) {
  Xfer x = {.src = src, .dst = dst, .sidx = si, .didx = di, .cnt = 1, .step = step, .sbuf = (uint8_t)sb,
            .dbuf = (uint8_t)db, .op = (uint8_t)op};
  Err e;
  assert_int_equal(prog_add(p, &x, &e), RC_OK);
}

static void add(Program *p, int src, int sb, int si, int dst, int db, int di, int step) {
  add_op(p, src, sb, si, dst, db, di, step, OP_COPY);
}

/* The paper's ring all-gather (Fig. 5a) in place, or all-pairs when ring is 0. */
static Program *allgather(int n, int ring) {
  Program *p = prog_new(ring ? "ring" : "allpairs", COLL_ALLGATHER, n, n, 1);
  for (int r = 0; r < n; r++) add(p, r, BUF_INPUT, 0, r, BUF_OUTPUT, r, -1000);
  for (int r = 0; r < n; r++) {
    if (ring)
      for (int s = 0; s < n - 1; s++) add(p, r, BUF_OUTPUT, ((r - s) % n + n) % n, (r + 1) % n, BUF_OUTPUT,
                                          ((r - s) % n + n) % n, s);
    else
      for (int d = 0; d < n; d++)
        if (d != r) add(p, r, BUF_OUTPUT, r, d, BUF_OUTPUT, r, 0);
  }
  return p;
}

/* Compile with these options and simulate; *tbs gets the plan's TBs when not NULL. */
static double simulate_opt(const Program *p, const Topo *t, const SimOpts *o, const Options *opt, int *tbs) {
  Plan pl;
  Err e;
  assert_int_equal(compile(&pl, p, t, opt, &e), RC_OK);
  if (tbs) *tbs = pl.ntbs;
  SimResult r;
  rcStatus rc = sim_run(&pl, o, &r, &e);
  if (rc != RC_OK) fail_msg("%s", e.msg);
  double time = r.time_us;
  for (int i = 0; i < r.ntb; i++) assert_true(fabs(r.tb[i].busy + r.tb[i].idle - r.tb[i].end) < 1e-6 * time);
  assert_true(r.idle_avg >= 0 && r.idle_max <= 1 && r.busy_avg <= 1 + 1e-9);
  sim_free(&r);
  plan_free(&pl);
  return time;
}

/* Compile for one execution order and simulate. */
static double simulate_order(const Program *p, const Topo *t, const SimOpts *o, ExecOrder order) {
  Options opt = {.sched = SK_HPDS, .tb = TB_STATE, .inplace = 1, .fuse = FUSE_AUTO, .order = order,
                 .stop_after = ST_VERIFY};
  return simulate_opt(p, t, o, &opt, NULL);
}

static double simulate(const Program *p, const Topo *t, const SimOpts *o) { return simulate_order(p, t, o, EX_TASK); }

static void near(double got, double want) {
  if (fabs(got - want) > 0.01 * want) fail_msg("simulated %.4f us, closed form %.4f us", got, want);
}

/* (n-1)(alpha + S/(nB)) for one micro-batch. */
static void test_ring_allgather_closed_form(void **state) {
  (void)state;
  for (int n = 2; n <= 8; n *= 2) {
    Topo *t = uniform(n, 0, 100, 5);
    Program *p = allgather(n, 1);
    for (double S = 1 * MB; S <= 256 * MB; S *= 16) {
      SimOpts o = {.size = S, .nmicro = 1, .depth = 2, .instances = 1};
      near(simulate(p, t, &o), (n - 1) * (5 + S / (n * 100e3)));
    }
    prog_free(p);
    topo_free(t);
  }
}

/* Two ranks: each sends one block, alpha + (S/2)/B; a TB cap below B wins. */
static void test_single_transfer(void **state) {
  (void)state;
  Program *p = allgather(2, 1);
  Topo *t = uniform(2, 0, 50, 3);
  SimOpts o = {.size = 64 * MB, .nmicro = 1, .depth = 2, .instances = 1};
  near(simulate(p, t, &o), 3 + 32 * MB / 50e3);
  t->tb_gbps = 20;
  near(simulate(p, t, &o), 3 + 32 * MB / 20e3);
  /* two instances drive the link with two TBs: twice the TB rate */
  o.instances = 2;
  near(simulate(p, t, &o), 3 + 32 * MB / 40e3);
  prog_free(p);
  topo_free(t);
}

/* All-pairs on a switch: a GPU's n-1 sends share its port fairly; with more
   TBs than the port needs, the penalty 1 + gamma log2 z slows them all. */
static void test_port_sharing_and_penalty(void **state) {
  (void)state;
  int n = 3;
  Program *p = allgather(n, 0);
  Topo *t = uniform(n, 1, 90, 2);
  double S = 48 * MB, block = S / n;
  SimOpts o = {.size = S, .nmicro = 1, .depth = 2, .instances = 1};
  near(simulate(p, t, &o), 2 + (n - 1) * block / 90e3);
  t->intra_sat = 1, t->intra_gamma = 0.5; /* z = 2 flows / 1 */
  near(simulate(p, t, &o), 2 + (n - 1) * block / (90e3 / 1.5));
  prog_free(p);
  topo_free(t);
}

/* Task-level runs each task over every micro-batch: the ring's link carries
   (n-1) tasks x M calls back to back. */
static void test_task_level_micro_batches(void **state) {
  (void)state;
  int n = 4, M = 4;
  Program *p = allgather(n, 1);
  Topo *t = uniform(n, 0, 100, 5);
  double S = 16 * MB;
  SimOpts o = {.size = S, .nmicro = M, .depth = 2, .instances = 1};
  near(simulate(p, t, &o), (n - 1) * (M * 5 + S / (n * 100e3)));
  /* the same calls in another order: never faster than the link's work */
  assert_true(simulate_order(p, t, &o, EX_ALGO) >= (n - 1) * (M * 5 + S / (n * 100e3)) * 0.999);
  prog_free(p);
  topo_free(t);
}

static void test_bad_input(void **state) {
  (void)state;
  Err e;
  Topo d = {0};
  snprintf(d.spec, sizeof d.spec, "two-islands");
  d.nnodes = 2, d.gpn = 4, d.intra_gbps = 100; /* no NIC */
  assert_null(topo_new(&d, &e));
  assert_string_equal(e.msg, "topology 'two-islands': ranks 0 and 4 cannot reach each other (no NIC between nodes)");
  assert_null(topo_parse("v100:8", &e));
  assert_non_null(strstr(e.msg, "unknown model 'v100'"));
  Program *p = allgather(2, 1);
  Topo *t = uniform(2, 0, 50, 3);
  Plan pl;
  Options opt = {.sched = SK_HPDS, .tb = TB_STATE, .inplace = 1, .fuse = FUSE_AUTO, .stop_after = ST_VERIFY};
  assert_int_equal(compile(&pl, p, t, &opt, &e), RC_OK);
  SimResult r;
  SimOpts o = {.size = 0, .tile = MB, .depth = 2, .instances = 1};
  assert_int_equal(sim_run(&pl, &o, &r, &e), RC_EINVAL);
  plan_free(&pl);
  prog_free(p);
  topo_free(t);
}

/*
** A plan whose TBs cannot all finish: each rank's send is made to wait for
** the same micro-batch of its own receive, which waits for the other rank's
** send. The simulator must stop and name where it is stuck.
*/
static void test_stall_is_reported(void **state) {
  (void)state;
  Program *p = allgather(2, 1);
  Topo *t = uniform(2, 0, 50, 3);
  Plan pl;
  Options opt = {.sched = SK_HPDS, .tb = TB_STATE, .inplace = 1, .fuse = FUSE_NEVER, .stop_after = ST_VERIFY};
  Err e;
  assert_int_equal(compile(&pl, p, t, &opt, &e), RC_OK);
  int nw = pl.nwait;
  pl.wait = xrealloc(pl.wait, (size_t)(nw + 2) * sizeof *pl.wait);
  for (int r = 0, k = 0; r < 2; r++) {
    int snd = -1, rcv = -1;
    for (int i = 0; i < pl.np; i++)
      if (pl.p[i].rank == r) *(pl.p[i].cout >= 0 ? &snd : &rcv) = i;
    assert_true(snd >= 0 && rcv >= 0 && pl.p[snd].tb != pl.p[rcv].tb);
    pl.wait[nw + k] = rcv;
    pl.p[snd].wait_off = nw + k++, pl.p[snd].nwaits = 1;
  }
  pl.nwait = nw + 2;
  SimResult r;
  SimOpts o = {.size = MB, .nmicro = 2, .depth = 2, .instances = 1};
  assert_int_equal(sim_run(&pl, &o, &r, &e), RC_EDEADLOCK);
  assert_non_null(strstr(e.msg, ": simulation stalled (task-level execution, FIFO depth 2): rank 0 tb "));
  plan_free(&pl);
  prog_free(p);
  topo_free(t);
}

/* Two ranks' ring all-reduce, out of place: chunk c is reduced on rank c, then copied back. */
static Program *allreduce2(void) {
  Program *p = prog_new("ring", COLL_ALLREDUCE, 2, 2, 2);
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 2; c++) add(p, r, BUF_INPUT, c, r, BUF_OUTPUT, c, -1000);
  for (int r = 0; r < 2; r++) add_op(p, r, BUF_INPUT, 1 - r, 1 - r, BUF_OUTPUT, 1 - r, 0, OP_REDUCE);
  for (int r = 0; r < 2; r++) add(p, r, BUF_OUTPUT, r, 1 - r, BUF_OUTPUT, r, 1);
  return p;
}

/*
** Copy engine. A two-rank all-gather needs no TB: each copy is one piece
** (whatever the micro-batches), started in ce_lat and flowing at the link's
** ceiling for copies, between the call's two barriers. A two-rank ring
** all-reduce keeps a reducing TB per rank; its copies go a micro-batch at a
** time, the first hop's before the second's on each stream: 2M pieces, or
** its reductions' pace when they are slower.
*/
static void test_copy_engine(void **state) {
  (void)state;
  Options opt = {.sched = SK_HPDS, .tb = TB_STATE, .inplace = 1, .fuse = FUSE_AUTO, .ce = 1, .stop_after = ST_VERIFY};
  Topo *t = uniform(2, 0, 100, 3);
  t->ce_lat_us = 2, t->ce_sync_us = 5;
  double S = 64 * MB;
  SimOpts o = {.size = S, .nmicro = 4, .depth = 2, .instances = 1};
  Program *p = allgather(2, 1);
  int tbs;
  near(simulate_opt(p, t, &o, &opt, &tbs), 2 * 5 + 2 + S / 2 / 100e3);
  assert_int_equal(tbs, 0);
  t->ce_gbps = 150; /* above what TBs get from the link */
  near(simulate_opt(p, t, &o, &opt, &tbs), 2 * 5 + 2 + S / 2 / 150e3);
  prog_free(p);
  p = allreduce2();
  opt.inplace = 0;
  t->ce_gbps = 0, t->tb_reduce_gbps = 200; /* a reduction keeps up with a piece */
  double piece = 2 + S / 2 / 4 / 100e3;
  near(simulate_opt(p, t, &o, &opt, &tbs), 2 * 5 + 2 * 4 * piece);
  assert_int_equal(tbs, 2);
  /* reductions slower than 3 pieces: the first waits for its piece to land,
     each second-hop piece for its reduction */
  t->tb_reduce_gbps = 25;
  near(simulate_opt(p, t, &o, &opt, &tbs), 2 * 5 + 2 * piece + 4 * (3 + S / 2 / 4 / 25e3));
  prog_free(p);
  topo_free(t);
}

/* Pulls: each rank's one TB reads the peer's block at the least of its TB's
   read rate and the link's read ceiling; the call pays its handshakes. */
static void test_pull(void **state) {
  (void)state;
  Options opt = {.sched = SK_HPDS, .tb = TB_STATE, .inplace = 1, .fuse = FUSE_AUTO, .pull = 1,
                 .stop_after = ST_VERIFY};
  Topo *t = uniform(2, 0, 100, 3);
  t->tb_read_gbps = 40, t->read_gbps = 60, t->pull_sync_us = 2.5;
  double S = 64 * MB;
  SimOpts o = {.size = S, .nmicro = 2, .depth = 2, .instances = 1};
  Program *p = allgather(2, 1);
  int tbs;
  near(simulate_opt(p, t, &o, &opt, &tbs), 2 * 3 + S / 2 / 40e3 + 2.5);
  assert_int_equal(tbs, 2);
  o.instances = 2; /* two TBs read a link that delivers 60 */
  near(simulate_opt(p, t, &o, &opt, &tbs), 2 * 3 + S / 2 / 60e3 + 2.5);
  prog_free(p);
  topo_free(t);
}

/* The GPU runtime runs on one node: a copy or a pull across nodes is refused. */
static void test_across_nodes(void **state) {
  (void)state;
  Topo d = {0};
  snprintf(d.spec, sizeof d.spec, "two-nodes");
  d.nnodes = 2, d.gpn = 1, d.nic_gbps = 25, d.gpus_per_nic = 1;
  Err e;
  Topo *t = topo_new(&d, &e);
  assert_non_null(t);
  Program *p = allgather(2, 1);
  const char *want[] = {"a copy-engine copy from rank ", "pulls from rank "};
  for (int pull = 0; pull < 2; pull++) {
    Options opt = {.sched = SK_HPDS, .tb = TB_STATE, .inplace = 1, .fuse = FUSE_AUTO, .ce = !pull, .pull = pull,
                   .stop_after = ST_VERIFY};
    Plan pl;
    assert_int_equal(compile(&pl, p, t, &opt, &e), RC_OK);
    SimResult r;
    SimOpts o = {.size = MB, .nmicro = 1, .depth = 2, .instances = 1};
    assert_int_equal(sim_run(&pl, &o, &r, &e), RC_EINVAL);
    assert_non_null(strstr(e.msg, want[pull]));
    assert_non_null(strstr(e.msg, "(two-nodes): the GPU runtime runs on one node"));
    plan_free(&pl);
  }
  prog_free(p);
  topo_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ring_allgather_closed_form), cmocka_unit_test(test_single_transfer),
      cmocka_unit_test(test_port_sharing_and_penalty), cmocka_unit_test(test_task_level_micro_batches),
      cmocka_unit_test(test_bad_input), cmocka_unit_test(test_stall_is_reported),
      cmocka_unit_test(test_copy_engine), cmocka_unit_test(test_pull), cmocka_unit_test(test_across_nodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
