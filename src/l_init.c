/*
** l_init.c — the resccl.core module: one opener for the CLI (preloaded) and
** for stock lua5.4 (require "resccl.core" finds lib/resccl/core.so). It holds
** the module's own functions and constants, the CLI's Lua state, and opens
** the types (l_program.c, l_topo.c, l_plan.c).
*/
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
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

/*
** The CLI's Lua states allocate through l_alloc, which counts what they hold
** so that a script's memory can be capped (core.memory_cap): a script that
** builds strings or tables without end fails with a memory error instead of
** exhausting the machine. Only growth is refused; Lua never lets a shrink fail.
*/
typedef struct {
  size_t used, limit; /* bytes held; growth past limit is refused */
} MemCap;

static void *l_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  MemCap *m = ud;
  if (!ptr) osize = 0; /* osize is then the kind of object, not a size */
  if (nsize == 0) return free(ptr), m->used -= osize, NULL;
  if (nsize > osize && nsize - osize > m->limit - m->used) return NULL;
  void *q = realloc(ptr, nsize);
  if (q) m->used += nsize - osize; /* unsigned: wraps back for a shrink */
  return q;
}

static int l_panic(lua_State *L) {
  const char *msg = lua_tostring(L, -1);
  fprintf(stderr, "resccl: unprotected Lua error: %s\n", msg ? msg : "(not a string)");
  return 0; /* then Lua aborts */
}

lua_State *l_newstate(void) {
  MemCap *m = malloc(sizeof *m);
  if (!m) return NULL;
  *m = (MemCap){0, SIZE_MAX};
  lua_State *L = lua_newstate(l_alloc, m);
  if (!L) return free(m), NULL;
  lua_atpanic(L, l_panic);
  return L;
}

void l_close(lua_State *L) {
  void *m;
  lua_getallocf(L, &m);
  lua_close(L);
  free(m);
}

/* The state's MemCap, or NULL where it does not allocate through l_alloc
   (resccl.core in a stock lua5.4: no caps or alarms in another program). */
static MemCap *memcap(lua_State *L) {
  void *ud;
  return lua_getallocf(L, &ud) == l_alloc ? ud : NULL;
}

/* core.memory_cap(bytes) lets the state hold at most bytes more than it does
   now; core.memory_cap() lifts the cap. Returns false where there is no cap. */
static int l_memory_cap(lua_State *L) {
  lua_Number n = luaL_optnumber(L, 1, -1);
  MemCap *m = memcap(L);
  if (m) m->limit = n < 0 || n >= (lua_Number)(SIZE_MAX - m->used) ? SIZE_MAX : m->used + (size_t)n;
  lua_pushboolean(L, m != NULL);
  return 1;
}

/* core.alarm(seconds, message) ends the process (message on stderr, exit
   status 1) once it has used that much more CPU time, unless core.alarm()
   disarms it first: the last word on a script stuck where no hook runs. */
static char alarm_msg[512];
static size_t alarm_len;

static void on_alarm(int sig) {
  (void)sig;
  ssize_t w = write(2, alarm_msg, alarm_len);
  (void)w;
  _exit(1);
}

static int l_alarm(lua_State *L) {
  lua_Number secs = luaL_optnumber(L, 1, 0);
  struct itimerval t = {{0, 0}, {0, 0}};
  if (!memcap(L)) return lua_pushboolean(L, 0), 1;
  if (secs > 0) {
    const char *msg = luaL_checklstring(L, 2, &alarm_len);
    if (alarm_len >= sizeof alarm_msg) alarm_len = sizeof alarm_msg - 1;
    memcpy(alarm_msg, msg, alarm_len);
    signal(SIGPROF, on_alarm);
    t.it_value.tv_sec = secs > 1e9 ? 1000000000 : (time_t)secs;
    t.it_value.tv_usec = (suseconds_t)((secs - (double)(time_t)secs) * 1e6) % 1000000;
    if (t.it_value.tv_sec == 0 && t.it_value.tv_usec == 0) t.it_value.tv_usec = 1;
  }
  setitimer(ITIMER_PROF, &t, NULL); /* all zero: disarmed */
  lua_pushboolean(L, 1);
  return 1;
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
  static const luaL_Reg funcs[] = {{"clock", l_clock}, {"memory_cap", l_memory_cap}, {"alarm", l_alarm},
                                   {"file_kind", l_file_kind}, {"write_file", l_write_file}, {"setting", l_setting},
                                   {"same_file", l_same_file}, {NULL, NULL}};
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
  l_program_open(L);
  l_topo_open(L);
  l_plan_open(L);
  return 1;
}
