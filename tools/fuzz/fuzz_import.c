/*
** fuzz_import.c — libFuzzer target for the importers (lua/resccl/import/).
**
** Each input is handed to resccl.import.from_text() as a file named
** fuzz.xml (FUZZ_FORMAT "xml": the MSCCL XML importer) or fuzz.json
** (FUZZ_FORMAT "json": format detection among the JSON importers). Small
** imports are also compiled and verified by the core, so what an importer
** produces is exercised too.
**
** A diagnosis ("fuzz.xml:12: ...") is the expected outcome for bad input.
** Anything else is a bug and aborts, so libFuzzer records it: a Lua error
** without the file position (an importer bug such as indexing nil), a
** crash in C (ASan), or a hang (-timeout).
**
** libFuzzer only sees coverage of instrumented C code, and Lua is not, so a
** line hook feeds Lua-level edge coverage (source, line, previous line) into
** an extra-counters array that libFuzzer reads.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "lbind.h"

#ifndef FUZZ_FORMAT
#define FUZZ_FORMAT "xml"
#endif
#ifndef FUZZ_LUA_DIR
#define FUZZ_LUA_DIR "lua"
#endif

#define NCOUNTERS (1 << 16)
__attribute__((section("__libfuzzer_extra_counters"))) static uint8_t lua_edges[NCOUNTERS];

static lua_State *L;
static uintptr_t prev_loc;

/* Line hook: count the edge (previous line -> this line) in Lua code. It
   is a Lua hook function (debug.sethook's, called with "line" and the line),
   not a C lua_Hook: lua/resccl/sandbox.lua's budgeted calls save the hook with
   debug.gethook and put it back after, which only a function survives
   (gethook reports a C hook as the string "external hook"). While a
   budgeted call runs, its own hook stands in for this one. */
static int hook(lua_State *l) {
  lua_Debug ar;
  if (!lua_getstack(l, 1, &ar) || !lua_getinfo(l, "S", &ar)) return 0; /* level 1: the running function */
  uintptr_t loc = ((uintptr_t)ar.source * 31u) ^ ((uintptr_t)lua_tointeger(l, 2) * 2654435761u);
  lua_edges[(loc ^ prev_loc) & (NCOUNTERS - 1)]++;
  prev_loc = loc >> 1;
  return 0;
}

/* The Lua side: import, then compile and verify when small enough.
   Returns nothing on success or diagnosis; raises "BUG: ..." otherwise. */
static const char *driver =
  "local import = require 'resccl.import'\n"
  "local resccl = require 'resccl'\n"
  "local path, format = ...\n"
  "return function(data)\n"
  "  local ok, imp = pcall(import.from_text, data, path, format)\n"
  "  if not ok then\n"
  "    if type(imp) ~= 'string' or imp:sub(1, #path + 1) ~= path .. ':' then\n"
  "      error('BUG: importer error without a position: ' .. tostring(imp), 0)\n"
  "    end\n"
  "    return\n"
  "  end\n"
  "  if #imp.xfers > 400 or imp.ranks > 32 then return end\n"
  "  local ok2, alg = pcall(import.algorithm, imp)\n"
  "  if not ok2 then error('BUG: algorithm(): ' .. tostring(alg), 0) end\n"
  "  local ok3, prog, topo = pcall(alg.program, alg, {})\n"
  "  if not ok3 then\n"
  "    if type(prog) ~= 'string' or prog:sub(1, #path + 1) ~= path .. ':' then\n"
  "      error('BUG: program(): ' .. tostring(prog), 0)\n"
  "    end\n"
  "    return\n"
  "  end\n"
  "  for _, inplace in ipairs { false, true } do\n"
  "    if not inplace or alg.inplace then resccl.compile(prog, topo, { inplace = inplace }) end\n"
  "  end\n"
  "  import.to_lua(imp)\n"
  "end\n";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  L = luaL_newstate();
  luaL_openlibs(L);
  l_setup(L, FUZZ_LUA_DIR);
  if (luaL_loadstring(L, driver) != LUA_OK) goto fail;
  lua_pushstring(L, strcmp(FUZZ_FORMAT, "xml") == 0 ? "fuzz.xml" : "fuzz.json");
  if (strcmp(FUZZ_FORMAT, "xml") == 0) lua_pushstring(L, "msccl_xml");
  else lua_pushnil(L);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) goto fail;
  lua_setfield(L, LUA_REGISTRYINDEX, "fuzz.driver");
  if (luaL_dostring(L, "return debug.sethook") != LUA_OK) goto fail;
  lua_pushcfunction(L, hook);
  lua_pushliteral(L, "l");
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) goto fail;
  return 0;
fail:
  fprintf(stderr, "fuzz_import: %s\n", lua_tostring(L, -1));
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int top = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "fuzz.driver");
  lua_pushlstring(L, (const char *)data, size);
  prev_loc = 0;
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    fprintf(stderr, "fuzz_import: %s\n", lua_tostring(L, -1));
    abort();
  }
  lua_settop(L, top);
  lua_gc(L, LUA_GCCOLLECT);
  return 0;
}
