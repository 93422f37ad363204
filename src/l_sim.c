/*
** l_sim.c — the simulator's bindings, added to the Topo and Plan classes:
**   core.topo_custom{nodes=, gpn=, ...} -> Topo   (fields as topo:params())
**   topo:params() -> { nodes=, gpn=, intra_gbps=, ... }
**   plan:sim{size=, tile=, nmicro=, depth=, instances=, rotate=, slowdown=,
**            gpu=, trace=} -> result table (the plan's own execution order; gpu: nmicro
**            as the GPU runtime picks it)
** Sizes are bytes, times microseconds, bandwidths GB/s, fractions 0..1.
*/
#include <stdio.h>
#include <string.h>

#include "lbind.h"

/* The numeric fields of a Topo a user may set, in topo:params() order. */
static const char *const topo_keys[] = {"name", "model", "nodes", "gpn", "gpus_per_nic", "switched",
#define NAME(f) #f,
                                        TOPO_FIELDS(NAME)
#undef NAME
                                            NULL};

static int l_topo_params(lua_State *L) {
  Topo *t = checktopo(L, 1);
  lua_createtable(L, 0, 24);
  lua_pushstring(L, t->spec), lua_setfield(L, -2, "name");
  lua_pushstring(L, t->model), lua_setfield(L, -2, "model");
  lua_pushinteger(L, t->nnodes), lua_setfield(L, -2, "nodes");
  lua_pushinteger(L, t->gpn), lua_setfield(L, -2, "gpn");
  lua_pushinteger(L, t->gpus_per_nic), lua_setfield(L, -2, "gpus_per_nic");
  lua_pushboolean(L, t->switched), lua_setfield(L, -2, "switched");
#define PUSH(f) lua_pushnumber(L, t->f), lua_setfield(L, -2, #f);
  TOPO_FIELDS(PUSH)
#undef PUSH
  return 1;
}

static double numfield(lua_State *L, const char *k, double dflt) {
  lua_getfield(L, 1, k);
  int isnum;
  double v = lua_tonumberx(L, -1, &isnum);
  if (lua_isnil(L, -1)) v = dflt;
  else if (!isnum) luaL_error(L, "topology field '%s' must be a number, got %s", k, luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

/* core.topo_custom(t): every field is checked; unknown keys are errors. */
static int l_topo_custom(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, 1)) { /* stack: t, key, value */
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    int ok = 0;
    for (int i = 0; k && topo_keys[i]; i++) ok |= strcmp(k, topo_keys[i]) == 0;
    if (!ok)
      return luaL_error(L, "unknown topology field '%s'", k ? k : luaL_typename(L, -2));
    lua_pop(L, 1);
  }
  Topo d = {0};
  lua_getfield(L, 1, "name");
  snprintf(d.spec, sizeof d.spec, "%s", luaL_optstring(L, -1, "custom"));
  lua_pop(L, 1);
  snprintf(d.model, sizeof d.model, "custom");
  d.nnodes = (int)l_optrange(L, 1, "nodes", 0, 0, 1 << 16); /* topo_new checks them further */
  d.gpn = (int)l_optrange(L, 1, "gpn", 0, 0, 1 << 16);
  d.gpus_per_nic = (int)l_optrange(L, 1, "gpus_per_nic", 1, 0, 1 << 16);
  lua_getfield(L, 1, "switched");
  d.switched = lua_isnil(L, -1) ? 1 : lua_toboolean(L, -1);
  lua_pop(L, 1);
#define GET(f) d.f = numfield(L, #f, 0);
  TOPO_FIELDS(GET)
#undef GET
  Topo **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  luaL_setmetatable(L, TOPO_MT);
  Err e;
  *box = topo_new(&d, &e);
  if (!*box) return luaL_error(L, "%s", e.msg);
  return 1;
}

/* Push the per-TB, per-link and per-call tables of a result. */
static void push_details(lua_State *L, const Plan *pl, const SimResult *r) {
  lua_createtable(L, r->ntb, 0);
  for (int i = 0; i < r->ntb; i++) {
    const SimTb *t = &r->tb[i];
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, t->rank), lua_setfield(L, -2, "rank");
    lua_pushinteger(L, t->tb), lua_setfield(L, -2, "tb");
    l_setnum(L, "busy_us", t->busy), l_setnum(L, "idle_us", t->idle), l_setnum(L, "end_us", t->end);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "tbs");
  lua_createtable(L, r->nlink, 0);
  for (int i = 0; i < r->nlink; i++) {
    Link l;
    topo_link(pl->topo, r->link[i].id, &l);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, l.name), lua_setfield(L, -2, "name");
    l_setnum(L, "gbps", l.gbps), l_setnum(L, "bytes", r->link[i].bytes);
    l_setnum(L, "util", r->time_us > 0 ? r->link[i].bytes / (l.gbps * 1e3 * r->time_us) : 0);
    l_setnum(L, "active", r->time_us > 0 ? r->link[i].active / r->time_us : 0);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "links");
  if (!r->slice) return;
  lua_createtable(L, r->nslice, 0);
  for (int i = 0; i < r->nslice; i++) {
    const SimSlice *s = &r->slice[i];
    const Prim *p = &pl->p[s->prim];
    const Conn *c = p->cout >= 0 ? &pl->conn[p->cout] : p->cin >= 0 ? &pl->conn[p->cin] : NULL;
    lua_createtable(L, 0, 8);
    lua_pushinteger(L, s->tb + 1), lua_setfield(L, -2, "tb"); /* index into tbs */
    lua_pushstring(L, prim_name(p->kind)), lua_setfield(L, -2, "kind");
    lua_pushinteger(L, c ? (p->cout >= 0 ? c->dst : c->src) : p->rank), lua_setfield(L, -2, "peer");
    lua_pushinteger(L, p->slot), lua_setfield(L, -2, "slot");
    lua_pushinteger(L, p->widx), lua_setfield(L, -2, "chunk");
    lua_pushinteger(L, s->m), lua_setfield(L, -2, "m");
    l_setnum(L, "t0", s->t0), l_setnum(L, "t1", s->t1);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "slices");
}

/* plan:sim(opts) -> result, or nil, message, code */
static int l_plan_sim(lua_State *L) {
  Plan *pl = luaL_checkudata(L, 1, PLAN_MT); /* a Plan box starts with its Plan */
  lua_settop(L, 2);
  if (lua_isnil(L, 2)) lua_newtable(L), lua_replace(L, 2);
  luaL_checktype(L, 2, LUA_TTABLE);
  if (lua_getfield(L, 2, "order") != LUA_TNIL) /* what the verifier checked is what runs */
    return luaL_error(L, "plan:sim runs the plan's own order; compile with order= to change it");
  lua_pop(L, 1);
  lua_getfield(L, 2, "trace");
  lua_getfield(L, 2, "rotate");
  SimOpts o = {.size = l_optnum(L, 2, "size", 256.0 * (1 << 20)), .tile = l_optnum(L, 2, "tile", 1 << 20),
               .nmicro = (int)l_optrange(L, 2, "nmicro", 0, 0, SIM_MAX_MICRO), .depth = (int)l_optrange(L, 2, "depth", 2, 1, 1024),
               .instances = (int)l_optrange(L, 2, "instances", 1, 1, 1024), .rotate = lua_toboolean(L, -1), .slowdown = l_optnum(L, 2, "slowdown", 0),
               .gpu = l_optbool(L, 2, "gpu", 0), .trace = lua_toboolean(L, -2)};
  lua_pop(L, 2);
  SimResult r;
  Err e;
  if (sim_run(pl, &o, &r, &e) != RC_OK) return l_fail(L, &e);
  lua_createtable(L, 0, 20);
  l_setnum(L, "size_bytes", o.size), l_setnum(L, "time_us", r.time_us);
  l_setnum(L, "algbw_gbps", r.algbw), l_setnum(L, "busbw_gbps", r.busbw);
  lua_pushinteger(L, r.nmicro), lua_setfield(L, -2, "nmicro");
  l_setnum(L, "tile_bytes", r.tile_bytes);
  lua_pushinteger(L, o.instances), lua_setfield(L, -2, "instances");
  lua_pushinteger(L, o.depth), lua_setfield(L, -2, "depth");
  lua_pushstring(L, pl->opt.order == EX_TASK ? "task" : "algorithm"), lua_setfield(L, -2, "order");
  lua_pushinteger(L, r.tbs_per_rank_max), lua_setfield(L, -2, "tbs_per_rank_max");
  lua_pushinteger(L, r.ntb), lua_setfield(L, -2, "tbs_total");
  l_setnum(L, "tb_busy_avg", r.busy_avg), l_setnum(L, "tb_idle_avg", r.idle_avg);
  l_setnum(L, "tb_idle_max", r.idle_max), l_setnum(L, "tb_released_avg", r.released_avg);
  lua_pushinteger(L, r.events), lua_setfield(L, -2, "events");
  push_details(L, pl, &r);
  sim_free(&r);
  return 1;
}

void l_sim_open(lua_State *L) {
  static const luaL_Reg funcs[] = {{"topo_custom", l_topo_custom}, {NULL, NULL}};
  static const luaL_Reg topo_methods[] = {{"params", l_topo_params}, {NULL, NULL}};
  static const luaL_Reg plan_methods[] = {{"sim", l_plan_sim}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0); /* stack: module */
  lua_pushinteger(L, SIM_MAX_MICRO);
  lua_setfield(L, -2, "sim_max_micro");
  luaL_getmetatable(L, TOPO_MT);
  lua_getfield(L, -1, "__index"); /* stack: module, mt, methods */
  luaL_setfuncs(L, topo_methods, 0);
  lua_pop(L, 2);
  luaL_getmetatable(L, PLAN_MT);
  lua_getfield(L, -1, "__index");
  luaL_setfuncs(L, plan_methods, 0);
  lua_pop(L, 2);
}
