/*
** l_init.c — the resccl.core module: one opener for the CLI (preloaded) and
** for stock lua5.4 (require "resccl.core" finds lib/resccl/core.so).
*/
#include <string.h>

#include "lbind.h"

#ifndef RESCCL_VERSION
#define RESCCL_VERSION "0.1.0"
#endif

void l_newclass(lua_State *L, const char *name, const luaL_Reg *meta, const luaL_Reg *methods) {
  luaL_newmetatable(L, name); /* stack: mt */
  luaL_setfuncs(L, meta, 0);
  lua_newtable(L); /* stack: mt, methods */
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}

void l_where(lua_State *L, int level, const char **file, int *line) {
  lua_Debug ar;
  *file = "?";
  *line = 0;
  if (lua_getstack(L, level, &ar) && lua_getinfo(L, "Sl", &ar)) {
    *file = ar.source[0] == '@' ? ar.source + 1 : ar.short_src; /* whole path, not "..." */
    *line = ar.currentline;
  }
}

/* core.clock() -> milliseconds on a monotonic clock */
static int l_clock(lua_State *L) {
  lua_pushnumber(L, now_ms());
  return 1;
}

int luaopen_resccl_core(lua_State *L) {
  lua_newtable(L); /* stack: module */
  lua_pushcfunction(L, l_clock);
  lua_setfield(L, -2, "clock");
  lua_pushliteral(L, RESCCL_VERSION);
  lua_setfield(L, -2, "version");
  l_program_open(L);
  l_plan_open(L);
  l_sim_open(L);
  return 1;
}
