--- ReSCCLang: collective algorithms as registration tables.
--
-- A script calls `resccl.algorithm{ name=, collective=, build=function(a) ... end }`.
-- `build` receives a builder `a` that knows the ranks and topology and records
-- transfers into the C program, in either of two styles:
--   a:transfer(src, dst, step, chunk, "recv" | "rrc")      -- the paper's style
--   a:chunk(rank, "input", i, n):copy(peer, "output", j)    -- MSCCLang's style
-- Every transfer remembers the line that recorded it; later stages report
-- their errors at that line. Scripts run in resccl.sandbox.
local core = require "resccl.core"
local sandbox = require "resccl.sandbox"

local M = { version = core.version }

-- The collectives, as core.program takes them.
local COLLECTIVES = {}
for _, c in ipairs(core.names.collective) do COLLECTIVES[c] = true end

local function isint(v) return math.type(v) == "integer" end

-- An algorithm's name: one word, as plan files and libresccl read it (the
-- core checks it again, src/planfile.h rx_name_ok).
local NAME_RULE = "1 to 63 letters, digits and '_.+-', not starting with '.+-'"
local function name_ok(s)
  return #s <= 63 and s:match "^[A-Za-z0-9_][A-Za-z0-9_.+-]*$" ~= nil
end

-- A number key's check: an integer in [lo, hi]; nil, or what is expected.
local function range(lo, hi)
  return function(v)
    if type(v) == "number" and not (isint(v) and v >= lo and v <= hi) then
      return ("an integer from %d to %d"):format(lo, hi)
    end
  end
end

-- Registration keys: the type each must have, and for some a check of the
-- value (nil when it holds, else what is expected). Ranks and chunks per
-- block as core.program takes them.
local KEYS = {
  name = { "string", function(v) if not name_ok(v) then return NAME_RULE end end },
  collective = { "string" }, build = { "function" }, description = { "string" }, params = { "table" },
  chunks = { "number|function", range(1, 65536) }, inplace = { "boolean" }, supports = { "function" },
  ranks = { "number", range(1, 1024) },
}

-- Arguments that belong to the driver, not to the algorithm.
M.RUN_ARGS = {
  ranks = true, topo = true, nmicro = true, count = true, dtype = true, op = true,
  slots = true, slot_bytes = true, timeout_ms = true, ndev = true, iters = true, threads = true, channels = true,
  direct = true,
}

-- Steps before and after any the author can write: placement copies.
local FIRST_STEP, LAST_STEP = -2147483648, 2147483647

local function typeok(v, spec)
  for t in spec:gmatch "[^|]+" do
    if type(v) == t then return true end
  end
  return false
end

-- Each class keeps its methods apart from its metatable, so that no field
-- of an instance a script holds (x.__index) leads to what every script shares.
local Algorithm = {}
local AlgorithmMT = { __index = Algorithm, __name = "resccl.Algorithm" }

function AlgorithmMT:__tostring()
  return ("Algorithm %s: %s (%s:%d)"):format(self.name, self.collective, self.file, self.line)
end

local registered -- the last algorithm a script registered
local loading    -- the script M.load is running
-- What resccl.algorithm{} gave back, and the definition it registered: the
-- host keeps its own copy, of values whose types were checked, so that
-- nothing a script does to what it holds runs as the host reads it.
local issued = setmetatable({}, { __mode = "k" })
-- A script's copy: data and a name, no methods (Algorithm:program would let
-- it load files and compile).
local HandedMT = { __tostring = AlgorithmMT.__tostring, __metatable = false }

local function definition_site()
  local info = debug.getinfo(3, "Sl")
  if info and info.what ~= "C" and not debug.getinfo(2, "t").istailcall then
    return info.source:sub(1, 1) == "@" and info.source:sub(2) or info.short_src, info.currentline
  end
  if loading then
    local n = 0
    for l in io.lines(loading) do
      n = n + 1
      if l:find("resccl.algorithm", 1, true) and not l:match "^%s*%-%-" then return loading, n end
    end
    return loading, 1
  end
  return "?", 0
end

--- Register an algorithm. Unknown keys and wrong types are errors at the
--- line of the resccl.algorithm{} call.
---@param def table
---@return table algorithm
function M.algorithm(def)
  local file, line = definition_site()
  local function fail(msg) error(("%s:%d: %s"):format(file, line, msg), 0) end
  if type(def) ~= "table" then fail("resccl.algorithm expects a table, got " .. type(def)) end
  local alg = setmetatable({}, AlgorithmMT)
  for k, v in next, def do -- raw: a definition's metatable is not consulted
    local spec = KEYS[k]
    if not spec then
      local known = {}
      for key in pairs(KEYS) do known[#known + 1] = key end
      table.sort(known)
      fail(("unknown key '%s' in resccl.algorithm{} (known: %s)"):format(tostring(k), table.concat(known, ", ")))
    end
    if not typeok(v, spec[1]) then
      fail(("key '%s' must be a %s, got %s"):format(k, spec[1]:gsub("|", " or "), type(v)))
    end
    local expected = spec[2] and spec[2](v)
    if expected then
      fail(("key '%s' must be %s%s"):format(k, expected, type(v) == "number" and ", got " .. tostring(v) or ""))
    end
    alg[k] = v
  end
  for _, k in ipairs { "name", "collective", "build" } do
    if alg[k] == nil then fail(("resccl.algorithm{} needs '%s'"):format(k)) end
  end
  if not COLLECTIVES[alg.collective] then
    fail(("unknown collective '%s' (%s)"):format(alg.collective, table.concat(core.names.collective, ", ")))
  end
  alg.params = {}
  for k, v in next, def.params or {} do
    if type(k) ~= "string" or not typeok(v, "number|string|boolean") then
      fail(("params: %s = %s: a name and a number, string or boolean expected"):format(tostring(k), type(v)))
    end
    alg.params[k] = v
  end
  alg.file, alg.line = file, line
  if alg.inplace == nil then alg.inplace = alg.collective ~= "alltoall" end
  registered = alg
  if not sandbox.running() then return alg end -- the host's own (an importer's)
  local handed = setmetatable({}, HandedMT)
  for k, v in next, alg do handed[k] = v end
  handed.params = {}
  for k, v in next, alg.params do handed.params[k] = v end
  issued[handed] = alg
  return handed
end

-- Convert a key=value string to the type of the parameter's default.
local function convert(name, v, default)
  if type(v) ~= "string" then return v end
  if type(default) == "number" then
    local n = math.tointeger(tonumber(v)) or tonumber(v)
    if n == nil then error(("argument %s=%s: a number expected"):format(name, v), 0) end
    return n
  elseif type(default) == "boolean" then
    if v == "true" or v == "1" then return true end
    if v == "false" or v == "0" then return false end
    error(("argument %s=%s: true or false expected"):format(name, v), 0)
  end
  return v
end

-- ------------------------------------------------------------------ builder

local Builder = {}
local BuilderMT = { __index = Builder }

-- What the DSL reads of a builder, out of the script's reach (it may change
-- the fields it sees): its sizes, and while build runs the core Program and
-- the builder's progress. Keyed by the builder.
--   { ranks, gpn, chunks, collective, prog (only while build runs), step, tbsteps, paper, data }
local private = setmetatable({}, { __mode = "k" })

local function checkint(fn, i, v)
  if not isint(v) then
    error(("bad argument #%d to '%s' (integer expected, got %s)"):format(i, fn, math.type(v) or type(v)), 3)
  end
end

-- The builder's private state; an error at the script's line (`level` up
-- from the caller) when `a` is no builder.
local function state(a, fn, level)
  local s = private[a]
  if not s then error(("calling '%s' on bad self (a builder expected)"):format(fn), level + 1) end
  return s
end

-- The same, for what records: only while the builder's build runs.
local function recording(a, fn, level)
  local s = state(a, fn, level + 1)
  if not s.prog then error("a builder records transfers only while its algorithm's build runs", level + 1) end
  return s
end

-- The buffer the paper's single data buffer maps to, per collective.
local DATA = { allgather = "output", allreduce = "output", reducescatter = "scratch" }

-- Placement copies for the paper's style, recorded once before the first
-- transfer: the input enters the data buffer (a self-copy, dropped, when the
-- call is in-place), and for reduce-scatter the result leaves it at the end.
-- Called by Builder:transfer: the script's line is 3 levels up.
local function prologue(s)
  s.data = DATA[s.collective]
  if not s.data then
    error("transfer() is for allgather, allreduce and reducescatter; use chunk() for " .. s.collective, 3)
  end
  s.paper = true
  local p, R, C = s.prog, s.ranks, s.chunks
  for r = 0, R - 1 do
    if s.collective == "allgather" then
      p:xfer(r, "input", 0, r, "output", r * C, C, "copy", FIRST_STEP, 3)
    elseif s.collective == "allreduce" then
      p:xfer(r, "input", 0, r, "output", 0, C, "copy", FIRST_STEP, 3)
    else
      p:xfer(r, "input", 0, r, "scratch", 0, R * C, "copy", FIRST_STEP, 3)
    end
  end
end

--- The paper's primitive: chunk `chunk` of the data buffer moves from src to
--- dst at `step`; "recv" copies, "rrc" reduces into the destination.
--- (Arguments are checked in C: large programs record millions of these.)
function Builder:transfer(src, dst, step, chunk, kind)
  local s = private[self]
  local prog = s and s.prog
  if not prog then recording(self, "transfer", 2) end -- raises
  if not s.paper then prologue(s) end
  prog:transfer(src, dst, step, chunk, kind, s.data)
  s.step = step
end

-- A Ref is an empty table whose place is kept here, so that no field a
-- script sets changes what it moves: { a = builder, rank, buf, index, count }.
local Ref = {}
local RefMT = { __index = Ref }
local places = setmetatable({}, { __mode = "k" })

local function newref(a, rank, buf, index, count)
  local r = setmetatable({}, RefMT)
  places[r] = { a = a, rank = rank, buf = buf, index = index, count = count }
  return r
end

-- A Ref's place; an error at the script's line when r, argument i (0:
-- self), is no Ref.
local function place_of(r, fn, i)
  local p = places[r]
  if not p then
    error(i == 0 and ("calling '%s' on bad self (a chunk expected)"):format(fn)
      or ("bad argument #%d to '%s' (chunk expected)"):format(i, fn), 3)
  end
  return p
end

function RefMT:__tostring()
  local p = places[self]
  return ("chunk(rank %d, %s[%d%s])"):format(p.rank, p.buf, p.index, p.count > 1 and ("+" .. p.count) or "")
end

local BUFS = { input = true, output = true, scratch = true }

local function checkbuf(fn, i, b)
  if not BUFS[b] then
    error(("bad argument #%d to '%s' (input, output or scratch expected, got %s)"):format(i, fn, tostring(b)), 3)
  end
end

--- A reference to `count` chunks of a rank's buffer (MSCCLang's chunk()).
function Builder:chunk(rank, buf, index, count)
  local s = state(self, "chunk", 2)
  checkint("chunk", 1, rank)
  checkbuf("chunk", 2, buf)
  checkint("chunk", 3, index)
  count = count or 1
  checkint("chunk", 4, count)
  if rank < 0 or rank >= s.ranks then
    error(("rank %d out of range (program has %d ranks)"):format(rank, s.ranks), 2)
  end
  return newref(self, rank, buf, index, count)
end

-- Placement keys and their largest values (a plan has at most 1024 TBs a rank, core.h's MAX_TBS).
local PLACE = { sendtb = 1023, recvtb = 1023, ch = 1023, sendstep = (1 << 20) - 1, recvstep = (1 << 20) - 1 }

-- Manual placement, as MSCCLang's sendtb/recvtb/ch: record where the sending
-- and receiving ranks run this transfer. Steps default to the next free step
-- of that TB, in record order. Used by --tb manual.
local function place(s, fn, first, n, src, dst, at)
  if at == nil then return end
  if type(at) ~= "table" then error(("bad placement to '%s' (table expected, got %s)"):format(fn, type(at)), 3) end
  for k, v in pairs(at) do
    if not PLACE[k] then
      error(("unknown placement key '%s' (sendtb, recvtb, ch, sendstep, recvstep)"):format(tostring(k)), 3)
    end
    if not isint(v) or v < 0 or v > PLACE[k] then
      error(("placement %s must be an integer from 0 to %d"):format(k, PLACE[k]), 3)
    end
  end
  if at.sendtb == nil or (src ~= dst and at.recvtb == nil) then
    error(("placement needs sendtb%s"):format(src ~= dst and " and recvtb" or ""), 3)
  end
  local steps = s.tbsteps
  local function step(rank, tb, explicit)
    local key = rank * 65536 + tb
    local k = explicit or steps[key] or 0
    if k > PLACE.sendstep then error(("rank %d tb %d: more than %d steps"):format(rank, tb, PLACE.sendstep + 1), 4) end
    steps[key] = math.max(steps[key] or 0, k + 1)
    return k
  end
  for i = first, first + n - 1 do
    local ss = step(src, at.sendtb, at.sendstep)
    local rs = src == dst and ss or step(dst, at.recvtb, at.recvstep)
    s.prog:hint(i, at.sendtb, ss, src == dst and at.sendtb or at.recvtb, rs, at.ch or 0)
  end
end

--- Copy these chunks to (rank, buf, index); buf and index default to the
--- same place. `at` optionally places it: {sendtb=, recvtb=, ch=}.
function Ref:copy(rank, buf, index, at)
  local p = place_of(self, "copy", 0)
  checkint("copy", 1, rank)
  buf = buf or p.buf
  checkbuf("copy", 2, buf)
  index = index or p.index
  checkint("copy", 3, index)
  local s = private[p.a]
  if not (s and s.prog) then recording(p.a, "copy", 2) end -- raises
  local first, n = s.prog:xfer(p.rank, p.buf, p.index, rank, buf, index, p.count, "copy", s.step, 2)
  place(s, "copy", first, n, p.rank, rank, at)
  return newref(p.a, rank, buf, index, p.count)
end

--- Reduce `other` into these chunks: self = self (+) other. `at` as for copy.
function Ref:reduce(other, at)
  local p, q = place_of(self, "reduce", 0), place_of(other, "reduce", 1)
  if q.count ~= p.count then error("reduce: chunk counts differ", 2) end
  local s = private[p.a]
  if not (s and s.prog) then recording(p.a, "reduce", 2) end -- raises
  local first, n = s.prog:xfer(q.rank, q.buf, q.index, p.rank, p.buf, p.index, p.count, "reduce", s.step, 2)
  place(s, "reduce", first, n, q.rank, p.rank, at)
  return self
end

--- The Program a builder records into, for resccl's importers, which record
--- transfers themselves (prog:xfer with their input's "file:line", prog:hint
--- with its TBs). Not in the sandbox: a script holds no core object.
---@param a table a builder, while its algorithm's build runs
---@return userdata program
function M.builder_program(a) return recording(a, "builder_program", 2).prog end

--- Topology helpers: node of a rank, its index inside the node, and back.
function Builder:node(rank)
  local s = state(self, "node", 2)
  checkint("node", 1, rank)
  return rank // s.gpn
end

function Builder:local_rank(rank)
  local s = state(self, "local_rank", 2)
  checkint("local_rank", 1, rank)
  return rank % s.gpn
end

function Builder:rank(node, g)
  local s = state(self, "rank", 2)
  checkint("rank", 1, node)
  checkint("rank", 2, g)
  return node * s.gpn + g
end

-- -------------------------------------------------------------- programs

--- Resolve the topology from args: topo= wins (a preset name, a topology
--- file ending in .lua, or a Topo), ranks= makes a flat node.
---@return userdata topo
function M.topology(args)
  local spec, ranks = args.topo, args.ranks
  local topo
  if type(spec) == "userdata" then
    topo = spec
  elseif spec and spec:match "%.lua$" then
    topo = require("resccl.topo").load(spec)
  elseif spec then
    local ok, t = pcall(core.topo, spec)
    if not ok then error(t, 0) end
    topo = t
  end
  if topo then
    local n = ranks and convert("ranks", ranks, 0)
    if n and n ~= topo:info().ranks then
      error(("ranks=%s does not match topo=%s (%d ranks)"):format(tostring(ranks), topo:info().spec,
        topo:info().ranks), 0)
    end
  else
    local n = convert("ranks", ranks or 8, 0)
    if not isint(n) or n < 1 or n > 1024 then error("ranks must be an integer 1..1024", 0) end
    topo = core.topo_flat(n)
  end
  return topo
end

--- Build the algorithm's program for the given arguments.
---@param args table key=value arguments (strings or values)
---@return userdata program, userdata topo
local function program(self, args)
  if self.ranks and args.ranks == nil and args.topo == nil then
    local fixed = { ranks = self.ranks } -- an algorithm written for one size runs on it by default
    for k, v in pairs(args) do fixed[k] = v end
    args = fixed
  end
  local topo = M.topology(args)
  local t = topo:info()
  if self.ranks and t.ranks ~= self.ranks then
    error(("%s:%d: algorithm %s is written for %d ranks; %s has %d"):format(self.file, self.line, self.name,
      self.ranks, t.spec, t.ranks), 0)
  end
  local params = {}
  for k, v in pairs(self.params) do params[k] = v end
  for k, v in pairs(args) do
    if not M.RUN_ARGS[k] then
      if self.params[k] == nil then
        local known = {}
        for name in pairs(self.params) do known[#known + 1] = name end
        table.sort(known)
        error(("unknown argument '%s' for algorithm %s (%s)"):format(k, self.name,
          #known > 0 and ("it takes: " .. table.concat(known, ", ")) or "it takes none"), 0)
      end
      params[k] = convert(k, v, self.params[k])
    end
  end
  local ranks = t.ranks -- the script gets t as a.topo
  local a = setmetatable({
    ranks = t.ranks, nodes = t.nodes, gpn = t.gpn, topo = t, args = params,
    collective = self.collective, name = self.name,
  }, BuilderMT)
  local s = { ranks = ranks, gpn = t.gpn, collective = self.collective, step = 0, tbsteps = {} }
  private[a] = s
  if self.supports then
    local ok, why = self.supports(a)
    if not ok then
      error(("%s:%d: algorithm %s does not support %s: %s"):format(self.file, self.line, self.name, t.spec,
        type(why) == "string" and why or "unsupported"), 0)
    end
  end
  local chunks = self.chunks
  if type(chunks) == "function" then chunks = chunks(a) end
  if chunks == nil then chunks = self.collective == "allreduce" and ranks or 1 end
  if not isint(chunks) or chunks < 1 then
    error(("%s:%d: chunks must be a positive integer"):format(self.file, self.line), 0)
  end
  a.chunks, s.chunks = chunks, chunks
  -- what a program costs through compilation (some 500 bytes a transfer) stays within RESCCL_MEMORY
  local ok, prog = pcall(core.program, {
    name = self.name, collective = self.collective, ranks = ranks, gpn = t.gpn, chunks = chunks,
    file = self.file, line = self.line, max_transfers = math.max(1, math.floor(sandbox.cap_mib() * 2048)),
  })
  if not ok then error(("%s:%d: %s"):format(self.file, self.line, tostring(prog):gsub("^[^:]*:%d+: ", "")), 0) end
  s.prog = prog
  self.build(a)
  s.prog = nil -- a builder the script kept records no more
  if s.paper and self.collective == "reducescatter" then
    for r = 0, ranks - 1 do
      prog:xfer(r, "scratch", r * chunks, r, "output", 0, chunks, "copy", LAST_STEP, 0)
    end
  end
  if prog:info().transfers == 0 then
    error(("%s:%d: algorithm %s recorded no transfers"):format(self.file, self.line, self.name), 0)
  end
  return prog, topo
end

function Algorithm:program(args)
  return sandbox.budgeted(self.file, program, self, args or {})
end

-- ---------------------------------------------------------------- loading

--- Run a Lua source file in the sandbox, under the budget, with
--- resccl.algorithm and resccl.version in view; returns what it returns.
--- Algorithm scripts and topology files (topo=FILE.lua) run so.
---@param path string
function M.run_file(path)
  return sandbox.run_file(path, { algorithm = M.algorithm, version = M.version },
    { [AlgorithmMT] = true, [BuilderMT] = true, [RefMT] = true })
end

-- Does path hold a plan file (what `resccl compile --plan` writes)?
local function plan_file(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local head = f:read(12)
  f:close()
  return head == "resccl-plan "
end

-- The shipped algorithms: beside these modules (the source tree's
-- algorithms/, or <prefix>/share/resccl/algorithms installed), or nil.
local function shipped()
  local here = package.searchpath("resccl.dsl", package.path)
  return here and here:gsub("/resccl/dsl%.lua$", ""):gsub("/[^/]*$", "") .. "/algorithms"
end

-- path, or where a bare name (no file of that name, no '/') finds a
-- shipped algorithm: NAME or NAME.lua there; nil and a message where it
-- finds none.
local function find(path)
  if core.file_kind(path) or path:find("/", 1, true) then return path end
  local dir = shipped()
  for _, f in ipairs(dir and { dir .. "/" .. path, dir .. "/" .. path .. ".lua" } or {}) do
    if core.file_kind(f) then return f end
  end
  return nil, ("%s: no such file, nor a shipped algorithm of that name%s"):format(path,
    dir and " in " .. dir or "")
end

--- Load an algorithm script: a file, or the name of a shipped algorithm
--- (allreduce_ring).
---@param path string
---@return table algorithm
function M.load(path)
  local found, err = find(path)
  if not found then error(err, 0) end
  path = found
  if plan_file(path) then
    error(("%s:1: a resccl plan file (resccl compile --plan), which libresccl and resccl-bench load; "
      .. "not an algorithm"):format(path), 0)
  end
  if not path:match "%.lua$" then
    local import = require "resccl.import"
    if import.claims(path) then return import.load(path) end -- MSCCL XML, TACCL / TE-CCL / MSCCL++ JSON
  end
  registered, loading = nil, path
  local ok, ret = pcall(M.run_file, path)
  loading = nil
  if not ok then error(ret, 0) end
  local alg = issued[ret] or registered
  if not alg then error(path .. ": no resccl.algorithm{} in this file", 0) end
  return alg
end

return M
