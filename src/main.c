/*
** main.c — the resccl command: a Lua 5.4 state with resccl.core preloaded,
** one protected entry (pmain) with a traceback handler, and the REPL.
** Subcommands are parsed and run by lua/resccl/cli/ (require "resccl.cli"
** finds its init.lua); only the REPL's line editing lives here.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "lbind.h"

#ifdef RESCCL_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#endif

static const char *progname = "resccl";

static void report_error(const char *msg) { fprintf(stderr, "%s: %s\n", progname, msg); }

/* Message handler: keep the message, add a traceback when RESCCL_DEBUG is set. */
static int msghandler(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  if (getenv("RESCCL_DEBUG")) luaL_traceback(L, L, msg, 1);
  return 1;
}

static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  int status = lua_pcall(L, narg, nres, base);
  lua_remove(L, base);
  return status;
}

static int isdir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/*
** package.path: $RESCCL_LUA_DIR; else next to an installed binary
** (<prefix>/bin/../share/resccl/lua, wherever the prefix was moved); else the
** source tree the binary was built from.
*/
static void setpath(lua_State *L) {
  char self[4096], installed[4200];
  const char *dir = getenv("RESCCL_LUA_DIR");
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  installed[0] = '\0';
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(installed, sizeof installed, "%s/../%s", self, RESCCL_LUA_DIR_INSTALL);
  }
  if (!dir || !isdir(dir)) dir = isdir(installed) ? installed : RESCCL_LUA_DIR_BUILD;
  l_setup(L, dir);
}

/* ------------------------------------------------------------------ REPL */

#ifdef RESCCL_READLINE
/* The REPL's history across sessions: $RESCCL_HISTORY, else ~/.resccl_history
   ("" where neither names one). */
static char history[4096];

static void history_open(void) {
  const char *env = getenv("RESCCL_HISTORY"), *home = getenv("HOME");
  int n = env && *env ? snprintf(history, sizeof history, "%s", env)
          : home && *home ? snprintf(history, sizeof history, "%s/.resccl_history", home) : 0;
  if (n <= 0 || (size_t)n >= sizeof history) history[0] = '\0';
  else if (read_history(history) != 0) write_history(history); /* none yet: an empty one, to append to */
}

static void history_close(void) {
  if (history[0]) history_truncate_file(history, 1000);
}
#endif

static char *readline_(const char *prompt) {
#ifdef RESCCL_READLINE
  char *l = readline(prompt);
  if (l && *l) {
    add_history(l);
    if (history[0]) append_history(1, history);
  }
  return l;
#else
  static char buf[4096];
  fputs(prompt, stdout);
  fflush(stdout);
  if (!fgets(buf, sizeof buf, stdin)) return NULL;
  buf[strcspn(buf, "\n")] = '\0';
  char *l = malloc(strlen(buf) + 1);
  return l ? strcpy(l, buf) : NULL;
#endif
}

/* A chunk is incomplete when the parser stopped at the end of input. */
static int incomplete(lua_State *L, int status) {
  if (status == LUA_ERRSYNTAX) {
    size_t lmsg;
    const char *msg = lua_tolstring(L, -1, &lmsg);
    if (lmsg >= 5 && strcmp(msg + lmsg - 5, "<eof>") == 0) return lua_pop(L, 1), 1;
  }
  return 0;
}

/*
** Read one chunk, possibly over several lines. The text is tried first as an
** expression (so results are echoed without `=` or `return`), then as a
** statement; while either form is merely incomplete, read another line.
*/
static int loadline(lua_State *L, char **line) {
  Buf b;
  buf_init(&b);
  buf_puts(&b, *line);
  int status;
  for (;;) {
    const char *expr = lua_pushfstring(L, "return %s", b.s);
    status = luaL_loadbuffer(L, expr, strlen(expr), "=stdin");
    lua_remove(L, -2); /* the return text */
    if (status == LUA_OK) break;
    int more = incomplete(L, status);
    if (!more) lua_pop(L, 1);
    status = luaL_loadbuffer(L, b.s, b.n, "=stdin");
    if (status == LUA_OK || !(incomplete(L, status) || more)) break;
    if (status != LUA_OK && more) lua_pop(L, 1); /* statement error while the expression may go on */
    char *next = readline_(">> ");
    if (!next) {
      lua_pushliteral(L, "stdin: unfinished chunk at end of input");
      status = LUA_ERRSYNTAX;
      break;
    }
    buf_puts(&b, "\n");
    buf_puts(&b, next);
    free(next);
  }
  free(*line);
  *line = b.s; /* the caller frees it */
  return status;
}

static void print_results(lua_State *L, int base) {
  int n = lua_gettop(L) - base;
  if (n == 0) return;
  lua_getglobal(L, "print");
  lua_insert(L, base + 1);
  if (lua_pcall(L, n, 0, 0) != LUA_OK) report_error(lua_tostring(L, -1)), lua_pop(L, 1);
}

static void repl(lua_State *L) {
  printf("resccl %s REPL (Lua 5.4); the DSL is `resccl`, the core `core`; Ctrl-D to leave\n", RESCCL_VERSION);
  /* Globals for the explorer: resccl (the DSL) and core. */
  lua_getglobal(L, "require");
  lua_pushliteral(L, "resccl");
  if (docall(L, 1, 1) == LUA_OK) lua_setglobal(L, "resccl");
  else report_error(lua_tostring(L, -1)), lua_pop(L, 1);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "resccl.core");
  if (docall(L, 1, 1) == LUA_OK) lua_setglobal(L, "core");
  else lua_pop(L, 1);
  char *line;
#ifdef RESCCL_READLINE
  history_open();
#endif
  while ((line = readline_("> ")) != NULL) {
    int base = lua_gettop(L);
    int status = loadline(L, &line);
    free(line);
    if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
    if (status == LUA_OK) print_results(L, base);
    else report_error(lua_tostring(L, -1)), lua_settop(L, base);
  }
#ifdef RESCCL_READLINE
  history_close();
#endif
  putchar('\n');
}

/* ------------------------------------------------------------------ main */

static int pmain(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  luaL_openlibs(L);
  setpath(L);
  if (argc == 2 && strcmp(argv[1], "repl") == 0) { /* repl --help: the CLI's */
    repl(L);
    lua_pushinteger(L, 0);
    return 1;
  }
  lua_getglobal(L, "require");
  lua_pushliteral(L, "resccl.cli");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "main");
  lua_createtable(L, argc, 0); /* argv[0], how resccl was run, at index 0 as in lua.c's arg */
  for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i]), lua_rawseti(L, -2, i);
  lua_call(L, 1, 1); /* errors propagate to docall's handler */
  return 1;
}

int main(int argc, char **argv) {
  if (argv[0] && argv[0][0]) progname = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  lua_State *L = l_newstate();
  if (!L) return report_error("cannot create a Lua state: not enough memory"), 1;
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = docall(L, 2, 1), code = 0;
  if (status != LUA_OK) {
    static const char *const kinds[] = {"", "", "error", "syntax error", "out of memory", "error in error handling"};
    const char *msg = lua_tostring(L, -1);
    report_error(msg ? msg : kinds[status < 6 ? status : 2]);
    code = status == LUA_ERRSYNTAX ? 3 : status == LUA_ERRMEM ? 4 : 1;
  } else {
    code = (int)lua_tointeger(L, -1);
  }
  l_close(L);
  /* Output that did not reach standard output (a full disk, a closed stream) fails the command. */
  errno = 0;
  if ((fflush(stdout) != 0 || ferror(stdout)) && code == 0) {
    fprintf(stderr, "%s: cannot write to standard output%s%s\n", progname, errno ? ": " : "", errno ? strerror(errno) : "");
    code = 1;
  }
  return code;
}
