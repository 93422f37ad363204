/*
** l_state.c — the CLI's Lua states: an allocator that counts what a state
** holds, so that core.memory_cap can cap a script's memory, and
** core.alarm, the CPU-time limit on a script stuck where no hook runs
** (lua/resccl/sandbox.lua uses both). In a stock lua5.4 neither applies.
*/
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "lbind.h"

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

void l_state_open(lua_State *L) {
  static const luaL_Reg funcs[] = {{"memory_cap", l_memory_cap}, {"alarm", l_alarm}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0); /* into the module table on top */
}
