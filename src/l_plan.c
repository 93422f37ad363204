/*
** l_plan.c — compiled plans as Lua userdata.
**   core.compile(prog, topo, {sched=, tb=, inplace=, fuse=, order=, ce=, pull=, stop_after=})
**       -> plan            when every stage passed
**       -> plan, msg, code when a stage failed (plan holds the stages before it)
**       -> nil, msg, code  when nothing could be compiled
**   plan:report() plan:dump(stage) plan:emit(target) plan:exec{...} plan:sim{...}
**   plan:schedule() plan:tbs()
**   core.plan_file(prog, topo, opts) or (plan, ...): the GPU runtime's plan file
**   core.dtype(name), core.redop(name): the names plan:exec takes; core.names
** A Plan keeps its Program and Topo alive through user values.
*/
#include <limits.h>
#include <string.h>

#include "lbind.h"

typedef struct {
  Plan pl;
  HostExec hx; /* its host program, once plan:exec has run */
} PlanBox;

static PlanBox *checkplan(lua_State *L, int i) { return luaL_checkudata(L, i, PLAN_MT); }

/* The targets plan:emit takes; the options' names are plan.c's (core.names lists both). */
static const char *const targets[] = {"host", "cuda", NULL};

/* The options table at index i (nil: every default). */
static Options optarg(lua_State *L, int i) {
  if (lua_isnoneornil(L, i)) lua_newtable(L), lua_replace(L, i);
  luaL_checktype(L, i, LUA_TTABLE);
  return (Options){.sched = (SchedKind)l_optenum(L, i, "sched", "hpds", sched_names()),
                   .tb = (TbPolicy)l_optenum(L, i, "tb", "state", tb_policy_names()), .inplace = l_optbool(L, i, "inplace", 0),
                   .fuse = l_optenum(L, i, "fuse", "auto", fuse_names()),
                   .order = (ExecOrder)l_optenum(L, i, "order", "task", order_names()), .ce = l_optbool(L, i, "ce", 0),
                   .pull = l_optbool(L, i, "pull", 0),
                   .stop_after = (Stage)l_optenum(L, i, "stop_after", "verify", stage_names())};
}

static int l_compile(lua_State *L) {
  Program *p = checkprogram(L, 1);
  Topo *t = checktopo(L, 2);
  lua_settop(L, 3);
  Options o = optarg(L, 3);
  PlanBox *box = lua_newuserdatauv(L, sizeof *box, 2); /* stack: prog, topo, opts, plan */
  memset(box, 0, sizeof *box);
  luaL_setmetatable(L, PLAN_MT);
  lua_pushvalue(L, 1), lua_setiuservalue(L, -2, 1);
  lua_pushvalue(L, 2), lua_setiuservalue(L, -2, 2);
  Err e;
  if (compile(&box->pl, p, t, &o, &e) == RC_OK) return 1;
  if (box->pl.reached > 0) { /* stack: plan: keep it, with the message */
    lua_pushstring(L, e.msg);
    lua_pushstring(L, rc_name(e.rc));
    return 3;
  }
  return l_fail(L, &e);
}

static int l_plan_report(lua_State *L) {
  Plan *pl = &checkplan(L, 1)->pl;
  lua_createtable(L, 0, 16);
  lua_pushstring(L, sched_name(pl->opt.sched)), lua_setfield(L, -2, "sched");
  lua_pushstring(L, tb_policy_name(pl->opt.tb)), lua_setfield(L, -2, "tb_policy");
  lua_pushstring(L, order_name(pl->opt.order)), lua_setfield(L, -2, "order");
  lua_pushboolean(L, pl->opt.inplace), lua_setfield(L, -2, "inplace");
  lua_pushboolean(L, pl->verified), lua_setfield(L, -2, "verified");
  lua_pushboolean(L, pl->opt.fuse != FUSE_NEVER), lua_setfield(L, -2, "fused");
  lua_pushstring(L, pl->reached ? stage_name(pl->reached - 1) : "none"), lua_setfield(L, -2, "stage");
  if (pl->reached > ST_DAG) l_setint(L, "tasks", pl->dag.n), l_setint(L, "chunks", pl->dag.nchunk);
  if (pl->reached > ST_SCHED) l_setint(L, "subpipelines", pl->sched.nslots);
  if (pl->reached > ST_LOWER) l_setint(L, "primitives", pl->np), l_setint(L, "connections", pl->nconn);
  if (pl->reached > ST_TB) {
    l_setint(L, "tbs_total", pl->ntbs);
    lua_pushboolean(L, pl->buffered), lua_setfield(L, -2, "buffered");
    l_setint(L, "tbs_per_rank_max", plan_tbs_max(pl));
    l_setint(L, "flags", pl->nflags);
    l_setint(L, "ce_copies", pl->nce);
    l_setint(L, "pulls", pl->npulls);
    l_setint(L, "pulled_puts", pl->nputs);
    int split = 0;
    for (int i = 0; i < pl->np && pl->split; i++) split += pl->split[i];
    l_setint(L, "by_chunk", split);
    PlanForms f = plan_forms(pl);
    l_setint(L, "ce_ends", f.ce_ends);
    l_setint(L, "pulled_reductions", f.pulled_reductions);
    l_setint(L, "pushes", f.pushes);
    lua_createtable(L, pl->prog->nranks, 0);
    for (int r = 0; r < pl->prog->nranks; r++) lua_pushinteger(L, pl->ntb[r]), lua_rawseti(L, -2, r + 1);
    lua_setfield(L, -2, "tbs_per_rank");
  }
  lua_createtable(L, 0, NSTAGE); /* stage times */
  double total = 0;
  for (int s = 0; s < NSTAGE; s++)
    if (pl->ran & 1u << s) l_setnum(L, stage_name(s), pl->stage_ms[s]), total += pl->stage_ms[s];
  lua_setfield(L, -2, "stage_ms");
  l_setnum(L, "compile_ms", total);
  return 1;
}

static int l_plan_dump(lua_State *L) {
  Plan *pl = &checkplan(L, 1)->pl;
  const char *s = luaL_checkstring(L, 2);
  int st = stage_parse(s);
  if (st < 0 || st > ST_TB) return luaL_argerror(L, 2, "stage must be dag, sched, lower or tb");
  if (pl->reached <= st) return luaL_error(L, "stage %s was not reached", s);
  Buf b;
  buf_init(&b);
  dump_stage(pl, (Stage)st, &b);
  lua_pushlstring(L, b.s ? b.s : "", b.n);
  buf_free(&b);
  return 1;
}

/* plan:emit("host"|"cuda" [, rank]) -> source text */
static int l_plan_emit(lua_State *L) {
  Plan *pl = &checkplan(L, 1)->pl;
  EmitTarget tg = (EmitTarget)luaL_checkoption(L, 2, "host", targets);
  Buf b;
  buf_init(&b);
  Err e;
  rcStatus rc = RC_OK;
  if (lua_isnoneornil(L, 3)) {
    double t0 = now_ms();
    rc = emit_program(pl, tg, &b, &e);
    pl->stage_ms[ST_EMIT] = now_ms() - t0, pl->ran |= 1u << ST_EMIT;
  } else {
    lua_Integer r = luaL_checkinteger(L, 3);
    if (!pl->verified || r < 0 || r >= pl->prog->nranks) return luaL_argerror(L, 3, "no such rank in a verified plan");
    double t0 = now_ms();
    emit_rank(pl, (int)r, tg, &b);
    pl->stage_ms[ST_EMIT] += now_ms() - t0, pl->ran |= 1u << ST_EMIT; /* summed over the ranks emitted */
  }
  if (rc != RC_OK) {
    buf_free(&b);
    lua_pushstring(L, e.msg);
    return lua_error(L);
  }
  lua_pushlstring(L, b.s ? b.s : "", b.n);
  buf_free(&b);
  return 1;
}

/* core.plan_file(prog, topo [, opts]) -> the plan file `resccl compile --plan`
   writes (artifact.c's plan_file_for decides its placements and forms);
   opts as core.compile's, but inplace: the program has an in-place form.
   core.plan_file(plan, ...) -> the file of these plans, a section each, in order.
   Either: nil, message, code when a plan cannot be written. */
static int l_plan_file(lua_State *L) {
  Buf b;
  buf_init(&b);
  Err e;
  rcStatus rc;
  if (luaL_testudata(L, 1, PROGRAM_MT)) {
    Program *p = checkprogram(L, 1);
    Topo *t = checktopo(L, 2);
    lua_settop(L, 3);
    Options o = optarg(L, 3);
    rc = plan_file_for(p, t, &o, o.inplace, &b, &e);
  } else {
    int n = lua_gettop(L);
    luaL_argcheck(L, n >= 1, 1, "a plan or a program expected");
    const Plan **pls = lua_newuserdatauv(L, sizeof *pls * (size_t)n, 0); /* stack: plans..., box */
    for (int i = 0; i < n; i++) pls[i] = &checkplan(L, i + 1)->pl;
    rc = plan_file(pls, n, &b, &e);
  }
  if (rc != RC_OK) {
    buf_free(&b);
    return l_fail(L, &e);
  }
  lua_pushlstring(L, b.s, b.n);
  buf_free(&b);
  return 1;
}

/* The names of the dtypes or of the ops: parse() also knows other spellings. */
typedef struct {
  int (*parse)(const char *s);
  const char *(*name)(int i);
  int n;
} Names;

static const Names dtypes = {dtype_parse, dtype_name, NDTYPE}, redops = {redop_parse, redop_name, NREDOP};

/* Push "a, b or c expected", the short names. */
static void push_expected(lua_State *L, const Names *nm) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 0; i < nm->n; i++) {
    luaL_addstring(&b, i == 0 ? "" : i == nm->n - 1 ? " or " : ", ");
    luaL_addstring(&b, nm->name(i));
  }
  luaL_addstring(&b, " expected");
  luaL_pushresult(&b);
}

/* Option k of table t, one of nm, or the default; unknown names raise. */
static int optname(lua_State *L, int t, const char *k, const char *dflt, const Names *nm) {
  lua_getfield(L, t, k);
  const char *v = luaL_optstring(L, -1, dflt);
  int i = nm->parse(v);
  if (i < 0) {
    push_expected(L, nm);
    return luaL_error(L, "bad option %s='%s' (%s)", k, v, lua_tostring(L, -1));
  }
  lua_pop(L, 1);
  return i;
}

/* core.dtype(name), core.redop(name) -> the short name ("half" -> "f16") | nil, "... expected" */
static int l_name(lua_State *L, const Names *nm) {
  int i = nm->parse(luaL_checkstring(L, 1));
  if (i >= 0) return lua_pushstring(L, nm->name(i)), 1;
  lua_pushnil(L);
  push_expected(L, nm);
  return 2;
}

static int l_dtype(lua_State *L) { return l_name(L, &dtypes); }
/* resccl.gpus() -> GPUs plan:exec{gpu = true} can use (0: none, or no GPU runtime) */
static int l_gpus(lua_State *L) { return lua_pushinteger(L, exec_gpu_count()), 1; }
static int l_redop(lua_State *L) { return l_name(L, &redops); }

/* plan:exec{dtype=, op=, count=, nmicro=, slots=, slot_bytes=, timeout_ms=, direct=,
              gpu=, ndev=, threads=, iters=, channels=, with=}: on the host, or on GPUs when gpu is set */
static int l_plan_exec(lua_State *L) {
  PlanBox *box = checkplan(L, 1);
  Plan *pl = &box->pl;
  lua_settop(L, 2);
  if (lua_isnil(L, 2)) lua_newtable(L), lua_replace(L, 2);
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!pl->verified) return luaL_error(L, "plan is not verified; refusing to execute");
  ExecOpts o = {.dtype = (Dtype)optname(L, 2, "dtype", "f32", &dtypes), .op = (RedOp)optname(L, 2, "op", "sum", &redops)};
  o.count = (size_t)l_optrange(L, 2, "count", 1024, 1, (lua_Integer)1 << 40);
  o.nmicro = (int)l_optrange(L, 2, "nmicro", L_EXEC_NMICRO, 1, 1 << 20);
  o.nslots = (int)l_optrange(L, 2, "slots", 0, 0, 1 << 20);
  o.slot_bytes = (size_t)l_optrange(L, 2, "slot_bytes", 256, 1, 1 << 30);
  o.timeout_ms = (int)l_optrange(L, 2, "timeout_ms", 10000, 0, INT_MAX);
  o.direct = l_optbool(L, 2, "direct", 1);
  GpuOpts g = {(int)l_optrange(L, 2, "ndev", 0, 0, 64), (int)l_optrange(L, 2, "threads", 0, 0, 1024),
               (int)l_optrange(L, 2, "iters", 0, 0, 1 << 20), (int)l_optrange(L, 2, "channels", 1, 0, 64), NULL};
  if (lua_getfield(L, 2, "with") != LUA_TNIL) {
    PlanBox *w = luaL_testudata(L, -1, PLAN_MT);
    if (!w) return luaL_error(L, "exec: with must be a plan");
    g.with = &w->pl;
  }
  lua_pop(L, 1);
  ExecResult r;
  Err e;
  if ((l_optbool(L, 2, "gpu", 0) ? exec_gpu(pl, &o, &g, &r, &e) : exec_host(pl, &box->hx, &o, &r, &e)) != RC_OK)
    return l_fail(L, &e);
  lua_createtable(L, 0, 4);
  l_setnum(L, "max_err", r.max_err);
  l_setint(L, "wrong", (lua_Integer)r.nwrong);
  l_setnum(L, "ms", r.ms);
  if (r.ndev) l_setint(L, "ndev", r.ndev);
  if (r.nwrong) lua_pushstring(L, r.first_wrong), lua_setfield(L, -2, "first_wrong");
  return 1;
}

/*
** plan:tbs() -> { [rank+1] = { [tb+1] = { prim, ... } } }, read-only: every
** TB's primitives in program order, each a table
**   { id, kind, send_peer, recv_peer, rbuf, ridx, ubuf, uidx, wbuf, widx, cnt,
**     waits = { id, ... }, flag, slot, pos, join }
** with id the primitive's plan-wide index (from 0), peers -1 when absent and
** waits the primitives of the same rank it waits for: it reads (rbuf, ridx),
** reduces with the operand (ubuf, uidx), writes (wbuf, widx); join: it runs
** in the previous primitive's micro-batch loop (merged TBs). For exporters.
*/
static int l_plan_tbs(lua_State *L) {
  Plan *pl = &checkplan(L, 1)->pl;
  if (pl->reached <= ST_TB) return luaL_error(L, "plan has no TB allocation (stage tb was not reached)");
  int R = pl->prog->nranks;
  lua_createtable(L, R, 0); /* stack: plan, ranks */
  for (int r = 0; r < R; r++) {
    lua_createtable(L, pl->ntb[r], 0); /* stack: plan, ranks, tbs */
    for (int b = 0; b < pl->ntb[r]; b++) {
      int g = pl->tb_base[r] + b, lo = pl->tb_off[g], hi = pl->tb_off[g + 1];
      lua_createtable(L, hi - lo, 0); /* stack: plan, ranks, tbs, prims */
      for (int k = lo; k < hi; k++) {
        int id = pl->tb_prims[k];
        const Prim *q = &pl->p[id];
        lua_createtable(L, 0, 14); /* stack: plan, ranks, tbs, prims, prim */
        l_setint(L, "id", id);
        lua_pushstring(L, prim_name(q->kind)), lua_setfield(L, -2, "kind");
        l_setint(L, "send_peer", q->cout >= 0 ? pl->conn[q->cout].dst : -1);
        l_setint(L, "recv_peer", q->cin >= 0 ? pl->conn[q->cin].src : -1);
        lua_pushstring(L, buf_name(q->rbuf)), lua_setfield(L, -2, "rbuf");
        l_setint(L, "ridx", q->ridx);
        lua_pushstring(L, buf_name(q->ubuf)), lua_setfield(L, -2, "ubuf");
        l_setint(L, "uidx", q->uidx);
        lua_pushstring(L, buf_name(q->wbuf)), lua_setfield(L, -2, "wbuf");
        l_setint(L, "widx", q->widx);
        l_setint(L, "cnt", q->cnt);
        l_setint(L, "flag", q->flag);
        l_setint(L, "slot", q->slot);
        l_setint(L, "pos", q->pos);
        lua_pushboolean(L, q->join), lua_setfield(L, -2, "join");
        lua_createtable(L, q->nwaits, 0);
        for (int w = 0; w < q->nwaits; w++) lua_pushinteger(L, pl->wait[q->wait_off + w]), lua_rawseti(L, -2, w + 1);
        lua_setfield(L, -2, "waits");
        lua_rawseti(L, -2, k - lo + 1);
      }
      lua_rawseti(L, -2, b + 1);
    }
    lua_rawseti(L, -2, r + 1);
  }
  return 1;
}

/* plan:sim(opts) -> result, or nil, message, code (l_sim.c) */
static int l_plan_sim(lua_State *L) { return l_sim(L, &checkplan(L, 1)->pl); }

static int l_plan_tostring(lua_State *L) {
  Plan *pl = &checkplan(L, 1)->pl;
  if (!pl->prog) return lua_pushliteral(L, "Plan (empty)"), 1;
  lua_pushfstring(L, "Plan %s: %s, %d ranks, %d tasks", pl->prog->name, pl->opt.inplace ? "in-place" : "out-of-place",
                  pl->prog->nranks, pl->reached > ST_DAG ? pl->dag.n : 0);
  if (pl->reached > ST_SCHED) lua_pushfstring(L, ", %d sub-pipelines (%s)", pl->sched.nslots,
                                              sched_name(pl->opt.sched));
  else lua_pushliteral(L, "");
  if (pl->reached > ST_TB) lua_pushfstring(L, ", %d TBs, at most %d per rank (%s)", pl->ntbs, plan_tbs_max(pl),
                                           tb_policy_name(pl->opt.tb));
  else lua_pushliteral(L, "");
  lua_pushstring(L, pl->verified ? ", verified" : ", not verified");
  lua_concat(L, 4);
  return 1;
}

static int l_plan_gc(lua_State *L) {
  PlanBox *box = checkplan(L, 1);
  plan_free(&box->pl);
  exec_host_close(&box->hx);
  return 0;
}

/* -------------------------------------------------------------- Schedule */

/* plan:schedule() -> a Schedule view; it keeps the plan alive. */
static int l_plan_schedule(lua_State *L) {
  Plan *pl = &checkplan(L, 1)->pl;
  if (pl->reached <= ST_SCHED) return luaL_error(L, "plan was not scheduled");
  lua_newuserdatauv(L, 1, 1); /* stack: plan, view */
  luaL_setmetatable(L, SCHEDULE_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  return 1;
}

static Plan *schedplan(lua_State *L) {
  luaL_checkudata(L, 1, SCHEDULE_MT);
  lua_getiuservalue(L, 1, 1);
  Plan *pl = &checkplan(L, -1)->pl;
  lua_pop(L, 1); /* the view's user value keeps it alive */
  return pl;
}

/* schedule:subpipelines() -> { {task, ...}, ... } (task ids from 0) */
static int l_schedule_subpipelines(lua_State *L) {
  Plan *pl = schedplan(L);
  const Sched *s = &pl->sched;
  lua_createtable(L, s->nslots, 0);
  for (int k = 0, n = 0; k < pl->dag.n; k++) {
    int t = s->order[k];
    if (k == 0 || s->slot[t] != s->slot[s->order[k - 1]]) {
      if (k) lua_rawseti(L, -2, s->slot[s->order[k - 1]] + 1);
      lua_newtable(L);
      n = 0;
    }
    lua_pushinteger(L, t), lua_rawseti(L, -2, ++n);
    if (k == pl->dag.n - 1) lua_rawseti(L, -2, s->slot[t] + 1);
  }
  return 1;
}

static int l_schedule_tostring(lua_State *L) {
  Plan *pl = schedplan(L);
  lua_pushfstring(L, "Schedule %s: %d tasks in %d sub-pipelines", sched_name(pl->opt.sched),
                  pl->dag.n, pl->sched.nslots);
  return 1;
}

/* Field k of the table on top: the first n names (n < 0: all of them). */
static void push_names(lua_State *L, const char *k, const char *const names[], int n) {
  lua_newtable(L);
  for (int i = 0; names[i] && i != n; i++) lua_pushstring(L, names[i]), lua_rawseti(L, -2, i + 1);
  lua_setfield(L, -2, k);
}

void l_plan_open(lua_State *L) {
  static const luaL_Reg meta[] = {{"__tostring", l_plan_tostring}, {"__gc", l_plan_gc}, {"__close", l_plan_gc},
                                  {NULL, NULL}};
  static const luaL_Reg methods[] = {{"report", l_plan_report}, {"dump", l_plan_dump}, {"emit", l_plan_emit},
                                     {"exec", l_plan_exec}, {"sim", l_plan_sim}, {"schedule", l_plan_schedule},
                                     {"tbs", l_plan_tbs}, {NULL, NULL}};
  static const luaL_Reg smeta[] = {{"__tostring", l_schedule_tostring}, {NULL, NULL}};
  static const luaL_Reg smethods[] = {{"subpipelines", l_schedule_subpipelines}, {NULL, NULL}};
  static const luaL_Reg funcs[] = {{"compile", l_compile}, {"plan_file", l_plan_file}, {"dtype", l_dtype}, {"redop", l_redop}, {"gpus", l_gpus},
                                    {NULL, NULL}};
  l_newclass(L, PLAN_MT, meta, methods);
  l_newclass(L, SCHEDULE_MT, smeta, smethods);
  luaL_setfuncs(L, funcs, 0);
  /* core.names: what core.program, core.compile, plan:dump and plan:emit take */
  lua_createtable(L, 0, 8);
  lua_createtable(L, NCOLL, 0);
  for (int c = 0; c < NCOLL; c++) lua_pushstring(L, coll_name((Coll)c)), lua_rawseti(L, -2, c + 1);
  lua_setfield(L, -2, "collective");
  push_names(L, "sched", sched_names(), -1);
  push_names(L, "tb", tb_policy_names(), -1);
  push_names(L, "order", order_names(), -1);
  push_names(L, "fuse", fuse_names(), -1);
  push_names(L, "stage", stage_names(), -1);
  push_names(L, "dump", stage_names(), ST_TB + 1);
  push_names(L, "emit", targets, -1);
  lua_setfield(L, -2, "names");
}
