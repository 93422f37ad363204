/*
** l_sim.c — the simulator's binding: plan:sim's options read from a table
** and its result pushed as tables (l_plan.c lists plan:sim among Plan's methods).
**   plan:sim{size=, tile=, nmicro=, depth=, instances=, rotate=, slowdown=,
**            gpu=, trace=} -> result table (the plan's own execution order; gpu: nmicro
**            as the GPU runtime picks it)
** Sizes are bytes, times microseconds, bandwidths GB/s, fractions 0..1.
*/
#include "lbind.h"

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

int l_sim(lua_State *L, const Plan *pl) {
  lua_settop(L, 2);
  if (lua_isnil(L, 2)) lua_newtable(L), lua_replace(L, 2);
  luaL_checktype(L, 2, LUA_TTABLE);
  if (lua_getfield(L, 2, "order") != LUA_TNIL) /* what the verifier checked is what runs */
    return luaL_error(L, "plan:sim runs the plan's own order; compile with order= to change it");
  lua_pop(L, 1);
  lua_getfield(L, 2, "trace");
  lua_getfield(L, 2, "rotate");
  SimOpts o = {.size = l_optnum(L, 2, "size", 256.0 * (1 << 20)), .tile = l_optnum(L, 2, "tile", L_SIM_TILE),
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
