/*
** l_topo.c — Topo as Lua userdata.
**   core.topo("a100:2x4") -> Topo;  core.topo_flat(ranks) -> Topo
**   core.topo_custom{nodes=, gpn=, ...} -> Topo   (fields as topo:params())
**   topo:info() topo:route(s, d) topo:params()
** Bandwidths are GB/s, times microseconds (docs/sim.md).
*/
#include <stdio.h>
#include <string.h>

#include "lbind.h"

Topo *checktopo(lua_State *L, int i) {
  Topo *t = *(Topo **)luaL_checkudata(L, i, TOPO_MT);
  if (!t) luaL_argerror(L, i, "topology is closed");
  return t;
}

static Topo **newtopo(lua_State *L) {
  Topo **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  luaL_setmetatable(L, TOPO_MT);
  return box;
}

static int l_topo_new(lua_State *L) {
  const char *spec = luaL_checkstring(L, 1);
  Topo **box = newtopo(L);
  Err e;
  *box = topo_parse(spec, &e);
  if (!*box) return luaL_error(L, "%s", e.msg);
  return 1;
}

static int l_topo_flat(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 1 && n <= 1024, 1, "ranks must be 1..1024");
  Topo **box = newtopo(L);
  *box = topo_flat((int)n);
  return 1;
}

static int l_topo_info(lua_State *L) {
  Topo *t = checktopo(L, 1);
  lua_createtable(L, 0, 6);
  lua_pushstring(L, t->spec), lua_setfield(L, -2, "spec");
  lua_pushstring(L, t->model), lua_setfield(L, -2, "model");
  lua_pushinteger(L, t->nranks), lua_setfield(L, -2, "ranks");
  lua_pushinteger(L, t->nnodes), lua_setfield(L, -2, "nodes");
  lua_pushinteger(L, t->gpn), lua_setfield(L, -2, "gpn");
  lua_pushinteger(L, t->nlinks), lua_setfield(L, -2, "links");
  return 1;
}

/* topo:route(s, d) -> { "nvl:0->1" } : the links a transfer occupies. */
static int l_topo_route(lua_State *L) {
  Topo *t = checktopo(L, 1);
  lua_Integer s = luaL_checkinteger(L, 2), d = luaL_checkinteger(L, 3);
  luaL_argcheck(L, s >= 0 && s < t->nranks, 2, "rank out of range");
  luaL_argcheck(L, d >= 0 && d < t->nranks, 3, "rank out of range");
  int lk[TOPO_MAXHOP], n = topo_route(t, (int)s, (int)d, lk);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    Link l;
    topo_link(t, lk[i], &l);
    lua_pushstring(L, l.name);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_topo_tostring(lua_State *L) {
  Topo *t = *(Topo **)luaL_checkudata(L, 1, TOPO_MT);
  if (!t) return lua_pushliteral(L, "Topo (closed)"), 1;
  lua_pushfstring(L, "Topo %s: %d nodes x %d GPUs", t->spec, t->nnodes, t->gpn);
  return 1;
}

static int l_topo_gc(lua_State *L) {
  Topo **box = luaL_checkudata(L, 1, TOPO_MT);
  topo_free(*box);
  *box = NULL;
  return 0;
}

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
  Topo **box = newtopo(L);
  Err e;
  *box = topo_new(&d, &e);
  if (!*box) return luaL_error(L, "%s", e.msg);
  return 1;
}

void l_topo_open(lua_State *L) {
  static const luaL_Reg meta[] = {{"__tostring", l_topo_tostring}, {"__gc", l_topo_gc}, {"__close", l_topo_gc},
                                  {NULL, NULL}};
  static const luaL_Reg methods[] = {{"info", l_topo_info}, {"route", l_topo_route}, {"params", l_topo_params},
                                     {NULL, NULL}};
  static const luaL_Reg funcs[] = {{"topo", l_topo_new}, {"topo_flat", l_topo_flat}, {"topo_custom", l_topo_custom},
                                   {NULL, NULL}};
  l_newclass(L, TOPO_MT, meta, methods);
  luaL_setfuncs(L, funcs, 0); /* into the module table on top */
  lua_pushstring(L, topo_presets());
  lua_setfield(L, -2, "topo_presets");
}
