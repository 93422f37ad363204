/*
** lbind.h — shared declarations of the Lua binding files (l_*.c), the only
** files that touch the Lua stack. They turn Lua values into core calls and
** core errors (already "file:line: message") into Lua errors or nil, msg.
** One Lua type per file (l_program.c, l_topo.c, l_plan.c), plan:sim's
** tables in l_sim.c, their shared helpers in lbind.c; l_init.c is the module
** (resccl.core), which opens the others.
*/
#ifndef RESCCL_LBIND_H
#define RESCCL_LBIND_H

#include <lauxlib.h>
#include <lua.h>

#include "core.h"

#define PROGRAM_MT "resccl.Program"
#define TOPO_MT "resccl.Topo"
#define PLAN_MT "resccl.Plan"
#define SCHEDULE_MT "resccl.Schedule"

/* plan:exec's micro-batches and plan:sim's tile where none is given
   (core.defaults.exec_nmicro, .sim_tile_bytes). The simulator's tile is the
   paper's ChunkSize, 1 MiB, not the GPU runtime's (tile.h's RX_TILE_BYTES). */
#define L_EXEC_NMICRO 4
#define L_SIM_TILE (1 << 20)

/* A Program or Topo is a boxed pointer, freed by __gc (NULL once closed). */
Program *checkprogram(lua_State *L, int i); /* l_program.c */
Topo *checktopo(lua_State *L, int i);       /* l_topo.c */

/* lbind.c. Option tables: read field k of table t, or the default; bad values raise. */
int l_optenum(lua_State *L, int t, const char *k, const char *dflt, const char *const names[]);
int l_optbool(lua_State *L, int t, const char *k, int dflt);
double l_optnum(lua_State *L, int t, const char *k, double dflt);
/* An integer field from lo to hi. */
lua_Integer l_optrange(lua_State *L, int t, const char *k, lua_Integer dflt, lua_Integer lo, lua_Integer hi);
/* Argument i as a C int (out of its range raises). */
int l_checkint(lua_State *L, int i);
int l_optint(lua_State *L, int i, int dflt);
/* Set field k of the table on top. */
void l_setnum(lua_State *L, const char *k, double v);
void l_setint(lua_State *L, const char *k, lua_Integer v);
/* Return nil, message, code for a core error. */
int l_fail(lua_State *L, const Err *e);

/* Make a metatable with __index = methods and the given metamethods. */
void l_newclass(lua_State *L, const char *name, const luaL_Reg *meta, const luaL_Reg *methods);
/* The file (into file[size]) and line of the Lua function `level` levels up (0 = caller). */
void l_where(lua_State *L, int level, char *file, size_t size, int *line);

/* plan:sim's body (l_sim.c): options at index 2, the result or nil, message, code. */
int l_sim(lua_State *L, const Plan *pl);

/* Each type's class and functions, added to the module table on top. */
void l_program_open(lua_State *L);
void l_topo_open(lua_State *L);
void l_plan_open(lua_State *L);

/* l_init.c: the module. */
int luaopen_resccl_core(lua_State *L);
/* l_state.c: a Lua state whose memory core.memory_cap can cap, and its
   closing; core.memory_cap and core.alarm, added to the module on top. */
lua_State *l_newstate(void);
void l_close(lua_State *L);
void l_state_open(lua_State *L);
/* Put dir/?.lua and dir/?/init.lua first on package.path and preload resccl.core. */
void l_setup(lua_State *L, const char *dir);

#endif
