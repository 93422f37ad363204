/*
** l_init.c — the resccl.core module: one opener for the CLI (preloaded) and
** for stock lua5.4 (require "resccl.core" finds lib/resccl/core.so). It holds
** the module's own functions (files, settings, the clock) and constants, and
** opens the rest: the CLI's Lua states (l_state.c) and the types
** (l_program.c, l_topo.c, l_plan.c).
*/
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../kernels-templates/tile.h"
#include "lbind.h"
#include "setting.h"
#include "wfile.h"

#ifndef RESCCL_VERSION
#define RESCCL_VERSION "0.1.0"
#endif

/* core.file_kind(path) -> "file" | "directory" | "link" | "other", or nil,
   message when there is nothing at path (lstat: a link is not followed) */
static int l_file_kind(lua_State *L) {
  struct stat st;
  if (lstat(luaL_checkstring(L, 1), &st) != 0) return luaL_fileresult(L, 0, lua_tostring(L, 1));
  lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "directory" : S_ISLNK(st.st_mode) ? "link" : "other");
  return 1;
}

/* core.same_file(a, b) -> true when both paths name one existing file (stat:
   links followed; the same device and inode), else false */
static int l_same_file(lua_State *L) {
  struct stat a, b;
  int same = stat(luaL_checkstring(L, 1), &a) == 0 && stat(luaL_checkstring(L, 2), &b) == 0 && a.st_dev == b.st_dev &&
             a.st_ino == b.st_ino;
  lua_pushboolean(L, same);
  return 1;
}

static mode_t current_umask(void) {
  mode_t m = umask(0);
  umask(m);
  return m;
}

/* core.write_file(path, text) -> true, or nil, message: wfile_write, with
   the mode a created file gets. */
static int l_write_file(lua_State *L) {
  size_t n;
  const char *path = luaL_checkstring(L, 1), *text = luaL_checklstring(L, 2, &n);
  int err = wfile_write(path, text, n, 0666 & ~current_umask());
  if (!err) return lua_pushboolean(L, 1), 1;
  lua_pushnil(L);
  lua_pushstring(L, strerror(err));
  return 2;
}

/* core.setting(kind, name, text [, lo [, hi [, unit [, step]]]]) -> the value of
   setting `name` read from text by setting_parse (kind "int", "real", "size",
   "duration" or "bool"; an integer, a number or a boolean), or nil, message.
   The range defaults to the kind's: integers and sizes within 2^53, reals
   finite, durations from 0 to 2^53 s. */
static int l_setting(lua_State *L) {
  static const char *const kinds[] = {"int", "real", "size", "duration", "bool", NULL};
  static const double lo[] = {-0x1p53, -DBL_MAX, 0, 0, 0}, hi[] = {0x1p53, DBL_MAX, 0x1p53, 0x1p53, 1};
  SetKind k = (SetKind)luaL_checkoption(L, 1, NULL, kinds);
  const char *name = luaL_checkstring(L, 2), *text = luaL_checkstring(L, 3);
  Setting s = {k, luaL_optnumber(L, 4, lo[k]), luaL_optnumber(L, 5, hi[k]), luaL_optnumber(L, 6, 1),
               luaL_optnumber(L, 7, 0)};
  luaL_argcheck(L, s.lo >= lo[k] && s.hi <= hi[k], s.lo < lo[k] ? 4 : 5, "beyond the kind's range");
  luaL_argcheck(L, s.unit > 0 && s.unit <= 0x1p53 && (k != SET_SIZE || s.unit == (lua_Integer)s.unit), 6,
                "not a unit (bytes: a whole number)");
  luaL_argcheck(L, s.step >= 0 && s.step <= 0x1p53, 7, "not a step");
  double x;
  char err[SETTING_ERR];
  if (setting_parse(name, text, &s, &x, err)) return luaL_pushfail(L), lua_pushstring(L, err), 2;
  if (k == SET_BOOL) lua_pushboolean(L, x != 0);
  else if (k == SET_INT || k == SET_SIZE) lua_pushinteger(L, (lua_Integer)x);
  else lua_pushnumber(L, x);
  return 1;
}

/* core.clock() -> milliseconds on a monotonic clock */
static int l_clock(lua_State *L) {
  lua_pushnumber(L, now_ms());
  return 1;
}

void l_setup(lua_State *L, const char *dir) {
  lua_getglobal(L, "package"); /* stack: package */
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", dir, dir);
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_getfield(L, -1, "preload"); /* stack: package, preload */
  lua_pushcfunction(L, luaopen_resccl_core);
  lua_setfield(L, -2, "resccl.core");
  lua_pop(L, 2);
}

int luaopen_resccl_core(lua_State *L) {
  static const luaL_Reg funcs[] = {{"clock", l_clock}, {"file_kind", l_file_kind}, {"write_file", l_write_file},
                                   {"setting", l_setting}, {"same_file", l_same_file}, {NULL, NULL}};
  luaL_newlib(L, funcs); /* stack: module */
  lua_pushliteral(L, RESCCL_VERSION);
  lua_setfield(L, -2, "version");
  lua_pushinteger(L, SIM_MAX_MICRO);
  lua_setfield(L, -2, "sim_max_micro");
  /* the GPU runtime's tile, FIFO slot and slices (tile.h), and the bindings' own defaults (lbind.h) */
  lua_createtable(L, 0, 5);
  l_setint(L, "tile_bytes", (lua_Integer)RX_TILE_BYTES);
  l_setint(L, "slot_bytes", (lua_Integer)RX_SLOT_BYTES);
  l_setint(L, "slices", RX_SLICES);
  l_setint(L, "exec_nmicro", L_EXEC_NMICRO);
  l_setint(L, "sim_tile_bytes", L_SIM_TILE);
  lua_setfield(L, -2, "defaults");
  l_state_open(L);
  l_program_open(L);
  l_topo_open(L);
  l_plan_open(L);
  return 1;
}
