/*
** lbind.c — what every binding file (l_*.c) shares: option tables, integer
** arguments, result fields, core errors as nil, message, code, classes, and
** the Lua line a record names. No Lua type lives here.
*/
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "lbind.h"

int l_optenum(lua_State *L, int t, const char *k, const char *dflt, const char *const names[]) {
  lua_getfield(L, t, k);
  const char *v = luaL_optstring(L, -1, dflt);
  for (int i = 0; names[i]; i++)
    if (strcmp(v, names[i]) == 0) return lua_pop(L, 1), i;
  return luaL_error(L, "bad option %s='%s'", k, v);
}

int l_optbool(lua_State *L, int t, const char *k, int dflt) {
  lua_getfield(L, t, k);
  int v = lua_isnil(L, -1) ? dflt : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

double l_optnum(lua_State *L, int t, const char *k, double dflt) {
  lua_getfield(L, t, k);
  double v = luaL_optnumber(L, -1, dflt);
  lua_pop(L, 1);
  return v;
}

lua_Integer l_optrange(lua_State *L, int t, const char *k, lua_Integer dflt, lua_Integer lo, lua_Integer hi) {
  lua_getfield(L, t, k);
  int isint;
  lua_Integer v = lua_isnil(L, -1) ? dflt : lua_tointegerx(L, -1, &isint);
  if (!lua_isnil(L, -1) && (!isint || v < lo || v > hi))
    return luaL_error(L, "option %s must be an integer from %I to %I", k, lo, hi);
  lua_pop(L, 1);
  return v;
}

int l_checkint(lua_State *L, int i) {
  lua_Integer v = luaL_checkinteger(L, i);
  luaL_argcheck(L, v >= INT_MIN && v <= INT_MAX, i, "integer out of range");
  return (int)v;
}

int l_optint(lua_State *L, int i, int dflt) { return lua_isnoneornil(L, i) ? dflt : l_checkint(L, i); }

void l_setnum(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

void l_setint(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

int l_fail(lua_State *L, const Err *e) {
  lua_pushnil(L);
  lua_pushstring(L, e->msg);
  lua_pushstring(L, rc_name(e->rc));
  return 3;
}

void l_newclass(lua_State *L, const char *name, const luaL_Reg *meta, const luaL_Reg *methods) {
  luaL_newmetatable(L, name); /* stack: mt */
  luaL_setfuncs(L, meta, 0);
  lua_newtable(L); /* stack: mt, methods */
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}

void l_where(lua_State *L, int level, char *file, size_t size, int *line) {
  lua_Debug ar;
  snprintf(file, size, "?");
  *line = 0;
  if (lua_getstack(L, level, &ar) && lua_getinfo(L, "Sl", &ar)) {
    snprintf(file, size, "%s", ar.source[0] == '@' ? ar.source + 1 : ar.short_src); /* whole path, not "..." */
    *line = ar.currentline;
  }
}
