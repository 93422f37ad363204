/*
** l_program.c — Program as Lua userdata.
**   core.program{name=, collective=, ranks=, gpn=, chunks=, file=, line=} -> Program
**   prog:xfer(src, sbuf, sidx, dst, dbuf, didx, cnt, op, step, level)
*/
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "lbind.h"
#include "planfile.h"

Program *checkprogram(lua_State *L, int i) {
  Program *p = *(Program **)luaL_checkudata(L, i, PROGRAM_MT);
  if (!p) luaL_argerror(L, i, "program is closed");
  return p;
}

static Program **newprogram(lua_State *L) {
  Program **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL; /* a valid empty object first, so __gc is always safe */
  luaL_setmetatable(L, PROGRAM_MT);
  return box;
}

static int field_int(lua_State *L, int t, const char *k, int dflt) {
  lua_getfield(L, t, k);
  int isnum;
  lua_Integer v = lua_tointegerx(L, -1, &isnum);
  if (lua_isnil(L, -1)) v = dflt;
  else if (!isnum || v < INT_MIN || v > INT_MAX) luaL_error(L, "program field '%s' must be an integer", k);
  lua_pop(L, 1);
  return (int)v;
}

static int l_program_new(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "name");
  size_t nlen;
  const char *name = luaL_optlstring(L, -1, "program", &nlen);
  if (!rx_name_ok(name, nlen))
    return luaL_error(L, "program name must be 1 to 63 letters, digits and '_.+-', not starting with '.+-'");
  lua_getfield(L, 1, "collective");
  const char *coll = luaL_checkstring(L, -1);
  lua_getfield(L, 1, "file");
  const char *file = luaL_optstring(L, -1, "?");
  int c = coll_parse(coll), ranks = field_int(L, 1, "ranks", 0);
  int gpn = field_int(L, 1, "gpn", ranks), chunks = field_int(L, 1, "chunks", 1), line = field_int(L, 1, "line", 0);
  if (c < 0) return luaL_error(L, "unknown collective '%s' (allgather, reducescatter, allreduce, alltoall)", coll);
  if (ranks < 1 || ranks > 1024) return luaL_error(L, "ranks must be 1..1024, got %d", ranks);
  if (chunks < 1 || chunks > 1 << 16) return luaL_error(L, "chunks must be 1..65536, got %d", chunks);
  Program **box = newprogram(L); /* stack: def, name, coll, file, prog */
  *box = prog_new(name, (Coll)c, ranks, gpn, chunks);
  /* Later stages keep state per rank and chunk of every buffer (elide.c,
     dag.c, analyse.c): all ranks' input and output chunks together stay under
     MAX_CHUNKS, as their scratch does (prog_add). At 1024 ranks that admits
     every shipped algorithm (all-reduce's 1024 chunks a block: 2^21) and an
     all-to-all of 8 chunks a block. */
  long long n = (long long)ranks * (prog_bufchunks(*box, BUF_INPUT) + prog_bufchunks(*box, BUF_OUTPUT));
  if (n > MAX_CHUNKS)
    return luaL_error(L, "%d ranks of %d chunks per block make %I input and output chunks, more than %d", ranks,
                      chunks, (lua_Integer)n, MAX_CHUNKS);
  (*box)->at = (Src){prog_file(*box, file), line};
  lua_Integer most = l_optrange(L, 1, "max_transfers", MAX_XFERS, 1, LUA_MAXINTEGER);
  (*box)->max_xf = most < MAX_XFERS ? (int)most : MAX_XFERS; /* at most this many, and MAX_XFERS */
  return 1;
}

static int bufarg(lua_State *L, int i) {
  int b = lua_type(L, i) == LUA_TNUMBER ? l_checkint(L, i) : buf_parse(luaL_checkstring(L, i));
  return b < 0 || b >= NBUF ? luaL_argerror(L, i, "buffer must be input, output or scratch") : b;
}

/* Record one transfer; returns its index and how many transfers it became
   (one per block it spans). Errors name the user's line `where` frames up
   (1 = the direct caller, 0 = the program's definition), or `where` is
   "file:line", a position in an importer's input. Scripts never reach this:
   the DSL keeps the Program from them, and takes positions from debug info. */
static int l_program_xfer(lua_State *L) {
  Program *p = checkprogram(L, 1);
  Xfer x = {.src = l_checkint(L, 2), .sbuf = (uint8_t)bufarg(L, 3), .sidx = l_checkint(L, 4),
            .dst = l_checkint(L, 5), .dbuf = (uint8_t)bufarg(L, 6), .didx = l_checkint(L, 7),
            .cnt = l_optint(L, 8, 1), .step = l_optint(L, 10, 0)};
  const char *op = luaL_optstring(L, 9, "copy");
  if (strcmp(op, "copy") == 0) x.op = OP_COPY;
  else if (strcmp(op, "reduce") == 0) x.op = OP_REDUCE;
  else return luaL_argerror(L, 9, "operation must be copy or reduce");
  if (lua_type(L, 11) == LUA_TSTRING) {
    size_t n;
    const char *w = lua_tolstring(L, 11, &n), *colon = strrchr(w, ':');
    char *end;
    long line = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == w || colon[1] < '0' || colon[1] > '9' || end != w + n || line > INT_MAX)
      return luaL_argerror(L, 11, "\"file:line\" expected");
    lua_pushlstring(L, w, (size_t)(colon - w)); /* stack: ..., where, file */
    x.at = (Src){prog_file(p, lua_tostring(L, -1)), (int)line};
  } else {
    int level = l_optint(L, 11, 1);
    if (level > 0) {
      char file[512];
      l_where(L, level, file, sizeof file, &x.at.line);
      x.at.file = prog_file(p, file);
    } else {
      x.at = p->at; /* recorded by the DSL itself: blame the definition */
    }
  }
  Err e;
  int before = p->nxf;
  if (prog_add(p, &x, &e) != RC_OK) {
    lua_pushstring(L, e.msg);
    return lua_error(L);
  }
  lua_pushinteger(L, before + 1);     /* its index, for prog:hint */
  lua_pushinteger(L, p->nxf - before); /* transfers recorded: one per block it spans */
  return 2;
}

/* Raise "file:line: bad argument #n to 'transfer' (...)" at the user's line. */
static int badarg(lua_State *L, int n, const char *what) {
  luaL_where(L, 2);
  lua_pushfstring(L, "bad argument #%d to 'transfer' (%s)", n, what);
  lua_concat(L, 2);
  return lua_error(L);
}

static int intarg(lua_State *L, int i) {
  int isint;
  lua_Integer v = lua_tointegerx(L, i, &isint);
  if (!isint || lua_type(L, i) != LUA_TNUMBER) {
    const char *got = lua_type(L, i) == LUA_TNUMBER ? "float" : luaL_typename(L, i);
    badarg(L, i - 1, lua_pushfstring(L, "integer expected, got %s", got));
  }
  if (v < INT32_MIN + 1 || v > INT32_MAX - 1) badarg(L, i - 1, "out of range");
  return (int)v;
}

/*
** prog:transfer(src, dst, step, chunk, "recv"|"rrc", buffer): the paper's
** primitive, called by the DSL's Builder:transfer, so the user's line is two
** frames up. Checked here because a 1024-rank program records millions.
*/
static int l_program_transfer(lua_State *L) {
  Program *p = checkprogram(L, 1);
  Xfer x = {.src = intarg(L, 2), .dst = intarg(L, 3), .step = intarg(L, 4), .sidx = intarg(L, 5), .cnt = 1};
  const char *kind = lua_tostring(L, 6);
  if (kind && strcmp(kind, "recv") == 0) x.op = OP_COPY;
  else if (kind && strcmp(kind, "rrc") == 0) x.op = OP_REDUCE;
  else badarg(L, 5, lua_pushfstring(L, "\"recv\" or \"rrc\" expected, got %s", kind ? kind : luaL_typename(L, 6)));
  x.didx = x.sidx;
  x.sbuf = x.dbuf = (uint8_t)buf_parse(luaL_checkstring(L, 7));
  lua_Debug ar;
  if (lua_getstack(L, 2, &ar) && lua_getinfo(L, "Sl", &ar)) {
    /* Sources are interned strings: the same pointer is the same file. */
    static const void *last_src;
    static const Program *last_prog;
    static int last_file;
    if (ar.source != last_src || p != last_prog)
      last_file = prog_file(p, ar.source[0] == '@' ? ar.source + 1 : ar.short_src), last_src = ar.source, last_prog = p;
    x.at = (Src){last_file, ar.currentline};
  }
  Err e;
  if (prog_add(p, &x, &e) != RC_OK) {
    lua_pushstring(L, e.msg);
    return lua_error(L);
  }
  return 0;
}

/* prog:hint(i, send_tb, send_step, recv_tb, recv_step, channel): where an
   imported file placed transfer i (1-based); -1 = unknown. */
static int l_program_hint(lua_State *L) {
  Program *p = checkprogram(L, 1);
  lua_Integer i = luaL_checkinteger(L, 2);
  luaL_argcheck(L, i >= 1 && i <= p->nxf, 2, "no such transfer");
  TbHint h = {l_checkint(L, 3), l_checkint(L, 4), l_checkint(L, 5), l_checkint(L, 6), l_optint(L, 7, -1)};
  /* lowering keys TBs and steps by 20 bits and channels by 10 (lower.c) */
  luaL_argcheck(L, h.stb >= -1 && h.stb < 1 << 20 && h.rtb >= -1 && h.rtb < 1 << 20, 3, "TB out of range");
  luaL_argcheck(L, h.sstep >= -1 && h.sstep < 1 << 20 && h.rstep >= -1 && h.rstep < 1 << 20, 4, "step out of range");
  luaL_argcheck(L, h.chan >= -1 && h.chan < 1024, 7, "channel out of range");
  prog_hint(p, (int)i - 1, h);
  return 0;
}

static int l_program_info(lua_State *L) {
  Program *p = checkprogram(L, 1);
  lua_createtable(L, 0, 8);
  lua_pushstring(L, p->name), lua_setfield(L, -2, "name");
  lua_pushstring(L, coll_name(p->coll)), lua_setfield(L, -2, "collective");
  lua_pushinteger(L, p->nranks), lua_setfield(L, -2, "ranks");
  lua_pushinteger(L, p->gpn), lua_setfield(L, -2, "gpn");
  lua_pushinteger(L, p->chunks), lua_setfield(L, -2, "chunks");
  lua_pushinteger(L, p->nxf), lua_setfield(L, -2, "transfers");
  lua_pushinteger(L, p->scratch_chunks), lua_setfield(L, -2, "scratch");
  return 1;
}

static int l_program_tostring(lua_State *L) {
  Program *p = *(Program **)luaL_checkudata(L, 1, PROGRAM_MT);
  if (!p) return lua_pushliteral(L, "Program (closed)"), 1;
  lua_pushfstring(L, "Program %s: %s on %d ranks, %d chunks per block, %d transfers", p->name, coll_name(p->coll),
                  p->nranks, p->chunks, p->nxf);
  return 1;
}

static int l_program_gc(lua_State *L) {
  Program **box = luaL_checkudata(L, 1, PROGRAM_MT);
  prog_free(*box);
  *box = NULL;
  return 0;
}

void l_program_open(lua_State *L) {
  static const luaL_Reg meta[] = {
    {"__tostring", l_program_tostring}, {"__gc", l_program_gc}, {"__close", l_program_gc}, {NULL, NULL}};
  static const luaL_Reg methods[] = {{"xfer", l_program_xfer}, {"transfer", l_program_transfer},
                                     {"hint", l_program_hint}, {"info", l_program_info}, {NULL, NULL}};
  static const luaL_Reg funcs[] = {{"program", l_program_new}, {NULL, NULL}};
  l_newclass(L, PROGRAM_MT, meta, methods);
  luaL_setfuncs(L, funcs, 0); /* into the module table on top */
}
