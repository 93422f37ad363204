--- Where scripts run: under a CPU budget and a memory cap, in an environment
--- of the DSL's view and the safe parts of the standard library. Algorithm
--- scripts and topology files run so (resccl.dsl's run_file and load).
local core = require "resccl.core"

local M = {}

-- Run fn under a CPU budget and a memory cap: a script that runs longer than
-- RESCCL_BUDGET seconds of CPU (default 120), or needs more than
-- RESCCL_MEMORY MiB of Lua memory (default 4096; what it records into the
-- program is bounded in C), is stopped with an error instead of hanging or
-- exhausting the machine. Once either is spent, its error is raised again
-- wherever the script is and through its pcalls (the environment's), so
-- that no script catches it for good; the cap stays until fn has unwound.
-- Library functions the hook cannot stop (a pattern match that backtracks
-- for hours) are stopped by an alarm a second after the budget (core.alarm).
local spent  -- the error of a spent budget or cap, while the budgeted call unwinds
local memory -- the cap's message while a script runs
local MEMERR = "not enough memory" -- what Lua raises when an allocation fails
local depth = 0 -- budgeted calls running: 1 while a script runs

--- The budget and the cap: RESCCL_BUDGET (a duration, a bare number in
--- seconds) and RESCCL_MEMORY (a size, a bare number in MiB), each its
--- default where unset or empty; read by core.setting, and an error naming
--- the variable where it is bad.
---@return number seconds, integer bytes
function M.limits()
  local function get(kind, name, default, lo, hi, unit)
    local text = os.getenv(name)
    if text == nil or text == "" then return default end
    local v, err = core.setting(kind, name, text, lo, hi, unit)
    if v == nil then error(err, 0) end
    return v
  end
  return get("duration", "RESCCL_BUDGET", 120, 0.001, 1e9, 1),
    get("size", "RESCCL_MEMORY", 4096 << 20, 1, 1 << 50, 1 << 20)
end

-- After a protected call: a memory error spends the cap (nothing is
-- allocated here, the cap may be full).
local function check(ok, ...)
  if not ok and ... == MEMERR and not spent then spent = memory end
  return ok, ...
end

local where_, mib_, hook_, mask_, count_ -- of the budgeted call running
local function finish(ok, ...)
  check(ok, ...)
  depth = 0
  core.memory_cap()
  collectgarbage "incremental"
  core.alarm()
  debug.sethook(hook_, mask_, count_)
  local over = spent
  spent = nil
  if over then error(over, 0) end
  if not ok then
    -- error(nil), error({}): what is raised says nothing, so say where
    if type((...)) ~= "string" and type((...)) ~= "number" then
      error(("%s: an error with no message (a %s value)"):format(where_, type((...))), 0)
    end
    error((...), 0)
  end
  return ...
end

--- fn(...) under the budget and the cap, `where` naming the script in their
--- errors; inside a budgeted call, fn runs under that call's.
function M.budgeted(where, fn, ...)
  if depth > 0 then return fn(...) end -- already under the outer call's budget and cap
  local budget, bytes = M.limits()
  local mib = bytes / 1048576
  memory = ("%s: script ran out of memory (RESCCL_MEMORY caps it at %g MiB)"):format(where, mib)
  local t0 = os.clock()
  where_, mib_, hook_, mask_, count_ = where, mib, debug.gethook()
  debug.sethook(function()
    if spent or os.clock() - t0 > budget then
      if not spent then -- where the script was, as error(msg, 2) would say
        local at = debug.getinfo(2, "Sl")
        spent = ("%sscript exceeded its budget of %g s"):format(
          at and at.currentline > 0 and ("%s:%d: "):format(at.short_src, at.currentline) or "", budget)
      end
      error(spent, 0)
    end
  end, "", 1000)
  core.alarm(budget + 1, ("resccl: %s: script exceeded its budget of %g s (in a library function)\n"):format(
    where, budget))
  core.memory_cap(bytes)
  -- The library's buffers (string.rep, table.concat) fail at the cap with no
  -- collection first: the generational collector frees young garbage soon.
  collectgarbage "generational"
  depth = 1
  return finish(pcall(fn, ...))
end

--- Is a budgeted call running (a script, or the host on its behalf)?
function M.running() return depth > 0 end

--- The memory cap of the budgeted call running, in MiB.
function M.cap_mib() return mib_ end

-- What a script may see: the DSL and the safe parts of the standard library.
-- Libraries are its own copies and the DSL a view, so that what a script
-- changes stays in it; no require, io, os or debug, no coroutines (the
-- budget's hook is the main thread's), no finalizers (hooks do not run in
-- them).
local SAFE = {
  "assert", "error", "ipairs", "next", "pairs", "rawequal", "rawget", "rawlen", "rawset", "select", "tonumber",
  "tostring", "type",
}
-- No string.dump: a script has no load to run bytecode with, and needs no
-- bytecode of its own. String methods reach the library through the
-- metatable every string shares, so that leads to this copy too; the
-- host's string.dump stays.
local STRING = {}
for k, v in pairs(string) do
  if k ~= "dump" then STRING[k] = v end
end
getmetatable("").__index = STRING
local LIBS = { math = math, string = STRING, table = table, utf8 = utf8 }

-- pcall and xpcall for scripts: a spent budget or cap is not theirs to catch
-- (nor is an xpcall handler run for it: it would run with no hook).
local function after(...)
  if spent then error(spent, 0) end
  return ...
end

local function guarded_pcall(...) return after(check(pcall(...))) end

local function guarded_xpcall(f, handler, ...)
  return after(check(xpcall(f, function(e)
    check(false, e) -- a memory error (the library's buffers raise it as any error)
    if spent then return e end
    return handler(e)
  end, ...)))
end

-- A script's environment: `view` as its read-only `resccl`, and none of the
-- metatables in `hidden` (the DSL's, which are the process's).
local function environment(path, view, hidden)
  local env = { pcall = guarded_pcall, xpcall = guarded_xpcall }
  -- print goes to stderr, named: standard output is the command's report
  env.print = function(...)
    local parts = table.pack(...)
    for i = 1, parts.n do parts[i] = tostring(parts[i]) end
    io.stderr:write(path, ": ", table.concat(parts, "\t", 1, parts.n), "\n")
  end
  for _, k in ipairs(SAFE) do env[k] = _G[k] end
  for name, lib in pairs(LIBS) do
    env[name] = {}
    for k, v in pairs(lib) do env[name][k] = v end
  end
  env.resccl = setmetatable({}, { __index = view, __newindex = function(_, k)
    error(("resccl.%s cannot be set"):format(tostring(k)), 2)
  end, __metatable = false })
  env.getmetatable = function(v)
    local mt = type(v) == "table" and getmetatable(v) or nil
    if hidden[mt] then return nil end
    return mt
  end
  env.setmetatable = function(t, mt)
    if type(t) == "table" and hidden[getmetatable(t)] then error("cannot change a resccl object's metatable", 2) end
    if type(mt) == "table" and rawget(mt, "__gc") ~= nil then error("scripts cannot set finalizers (__gc)", 2) end
    return setmetatable(t, mt)
  end
  env._G = env
  return env
end

--- Run a Lua source file in its environment (view and hidden as above),
--- under the budget; returns what it returns. Errors name the file.
---@param path string
---@param view table what the script sees as `resccl`
---@param hidden table the metatables it may not get or change, as keys
function M.run_file(path, view, hidden)
  local chunk, err = loadfile(path, "t", environment(path, view, hidden))
  if not chunk then
    -- a precompiled chunk is the one thing load reports without the file's name
    error(err:match "^attempt to load" and ("%s: %s"):format(path, err) or err, 0)
  end
  return M.budgeted(path, chunk)
end

return M
