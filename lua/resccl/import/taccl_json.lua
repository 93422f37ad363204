--- TACCL / SCCL algorithm JSON (`taccl solve`, `sccl solve` output) -> transfers.
--
-- The file lists global chunk addresses and, per algorithm step, sends
-- [addr, src, dst, t, link] (a sixth field "rrc" makes the send a reduction).
-- Every send of a step reads what was there before the step. Buffers follow
-- ncclize: on each rank the addresses of input_map and output_map, sorted,
-- are the input and output chunk indices; an address in both lives in the
-- output (after a copy, which the core drops in-place); any other address a
-- rank touches gets a scratch chunk.
--
-- Import happens in six passes, each a function below (M.import calls
-- them in this order):
--   1. collective  from the collective object, its name, or the algorithm's.
--   2. read_maps   input_map and output_map: per rank, its set of addresses.
--   3. read_sends  every send of every step, checked, with the line of its
--                  step; the number of ranks.
--   4. geometry    chunks per block, from rank 0's input addresses.
--   5. locate      per rank, each address's buffer and index, and the copies
--                  of addresses in both maps into the output.
--   6. transfers   the sends by step, then t, then file order, a step's sends
--                  checked not to write a chunk twice nor read one it writes.
local import = require "resccl.import"

local M = {}

M.format = "TACCL JSON"

local COLLS = { "allgather", "alltoall", "allreduce", "reducescatter", "reduce_scatter" }
local MAX_ADDR = 1 << 24 -- addresses and ranks read as integers in 0..MAX_ADDR
local MAX_RANKS = 1024

--- Is this text a TACCL/SCCL algorithm?
function M.detect(text)
  return text:match "^%s*{" ~= nil and text:find('"sends"', 1, true) ~= nil
    and (text:find('"input_map"', 1, true) ~= nil or text:find('"sccl_type"', 1, true) ~= nil)
end

--- 1. The collective: from the collective object, its name, or the algorithm name.
local function collective(obj, rd)
  local names = {}
  if type(obj.collective) == "table" and type(obj.collective.name) == "string" then names[#names + 1] = obj.collective.name end
  if type(obj.collective) == "string" then names[#names + 1] = obj.collective end
  if type(obj.name) == "string" then names[#names + 1] = obj.name end
  for _, n in ipairs(names) do
    local l = n:lower()
    for _, c in ipairs(COLLS) do
      if l:find(c, 1, true) then return import.COLLECTIVES[c] end
    end
  end
  rd.fail(1, "cannot tell the collective from %s (allgather, alltoall, allreduce, reducescatter)",
    #names > 0 and ("'" .. table.concat(names, "', '") .. "'") or "the file (no collective or name)")
end

-- A rank -> [addresses] map as rank -> set of addresses.
local function rankmap(m, what, rd)
  if type(m) ~= "table" then rd.fail(1, "%s must be an object of rank -> [addresses]", what) end
  local out = {}
  for _, k in ipairs(import.sorted_keys(m)) do
    local v = m[k]
    local r = math.tointeger(tonumber(k))
    if not r or r < 0 or r >= MAX_RANKS then rd.fail(1, "%s has a bad rank key '%s'", what, tostring(k)) end
    if type(v) ~= "table" then rd.fail(1, "%s[%s] must be a list of addresses", what, k) end
    local set = {}
    for i, a in ipairs(v) do set[rd.int(a, ("%s[%s][%d]"):format(what, k, i), 1, 0, MAX_ADDR)] = true end
    out[r] = set
  end
  return out
end

--- 2. The maps (maps.input[r], maps.output[r]: sets of addresses) and the
--- addresses some rank starts or ends with (maps.known).
local function read_maps(obj, rd)
  local maps = { input = rankmap(obj.input_map, "input_map", rd), output = rankmap(obj.output_map, "output_map", rd),
    known = {} }
  for _, m in ipairs { maps.input, maps.output } do
    for _, set in pairs(m) do
      for a in pairs(set) do maps.known[a] = true end
    end
  end
  return maps
end

-- Send j of step k (at line): { addr, src, dst, t, op, step, line, where, n = its place in the file }.
local function read_send(s, k, j, line, n, maps, null, rd)
  local where = ("steps[%d].sends[%d]"):format(k - 1, j - 1)
  if type(s) ~= "table" or #s < 3 then rd.fail(line, "%s must be [chunk, src, dst, ...]", where) end
  local x = {
    addr = rd.int(s[1], where .. " chunk", line, 0, MAX_ADDR), src = rd.int(s[2], where .. " src", line, 0, MAX_ADDR),
    dst = rd.int(s[3], where .. " dst", line, 0, MAX_ADDR), t = s[4] ~= nil and s[4] ~= null and tonumber(s[4]) or 0,
    step = k - 1, line = line, where = where, n = n,
  }
  local redop = s[6]
  if redop == nil or redop == null or redop == "nop" or redop == "copy" then x.op = "copy"
  elseif redop == "rrc" or redop == "reduce" or redop == "sum" then x.op = "reduce"
  else rd.fail(line, "%s: unknown reduction '%s' (rrc or none)", where, tostring(redop)) end
  if not maps.known[x.addr] then
    rd.fail(line, "%s: chunk %d is in no rank's input_map or output_map", where, x.addr)
  end
  if x.src == x.dst then rd.fail(line, "%s sends from rank %d to itself", where, x.src) end
  if x.src >= MAX_RANKS or x.dst >= MAX_RANKS then rd.fail(line, "%s: rank out of range", where) end
  return x
end

--- 3. The sends of every step, checked, in file order; the number of ranks
--- (the maps' and the sends').
local function read_sends(obj, text, maps, null, rd)
  -- Line of the k-th "sends" key: where step k starts.
  local step_line, at, line_of = {}, 1, import.liner(text)
  for k = 1, math.huge do
    local i = text:find('"sends"', at, true)
    if not i then break end
    step_line[k] = line_of(i)
    at = i + 1
    if k > 1 << 20 then break end
  end
  if type(obj.steps) ~= "table" or #obj.steps == 0 then rd.fail(1, "no 'steps' list") end
  local R = 0
  for r in pairs(maps.input) do R = math.max(R, r + 1) end
  for r in pairs(maps.output) do R = math.max(R, r + 1) end
  local sends = {}
  for k, step in ipairs(obj.steps) do
    local line = step_line[k] or 1
    if type(step) ~= "table" or type(step.sends) ~= "table" then
      rd.fail(line, "steps[%d] has no 'sends' list", k - 1)
    end
    for j, s in ipairs(step.sends) do
      local x = read_send(s, k, j, line, #sends, maps, null, rd)
      R = math.max(R, x.src + 1, x.dst + 1)
      sends[#sends + 1] = x
    end
  end
  if R < 2 then rd.fail(1, "an algorithm needs at least 2 ranks") end
  return sends, R
end

--- 4. Chunks per block, from rank 0's input chunks.
local function geometry(coll, maps, R, rd)
  local nin = 0
  for _ in pairs(maps.input[0] or {}) do nin = nin + 1 end
  local C = (coll == "alltoall" or coll == "reducescatter") and nin // R or nin
  if C < 1 or ((coll == "alltoall" or coll == "reducescatter") and nin % R ~= 0) then
    rd.fail(1, "rank 0 holds %d input chunks, which does not fit %s on %d ranks", nin, coll, R)
  end
  return C
end

--- 5. Where each address lives on each rank: where(r, a) gives { buf, idx }
--- (a scratch chunk, the first time, for an address in neither map); the
--- placement copies of addresses in both maps, which start the transfers.
local function locate(maps, R)
  local loc, scratch, xs = {}, {}, {}
  for r = 0, R - 1 do
    loc[r], scratch[r] = {}, 0
    for i, a in ipairs(import.sorted_keys(maps.output[r] or {})) do loc[r][a] = { buf = "output", idx = i - 1 } end
    for i, a in ipairs(import.sorted_keys(maps.input[r] or {})) do
      if loc[r][a] then
        xs[#xs + 1] = import.xfer(r, "input", i - 1, r, "output", loc[r][a].idx, 1, "copy", -1, 1,
          ("chunk %d enters the output"):format(a))
      else
        loc[r][a] = { buf = "input", idx = i - 1 }
      end
    end
  end
  local function where(r, a)
    local l = loc[r][a]
    if not l then
      l = { buf = "scratch", idx = scratch[r] }
      scratch[r] = scratch[r] + 1
      loc[r][a] = l
    end
    return l
  end
  return where, xs
end

-- The sends of one step (sends[first..last]): inside a step every send reads
-- the state before the step, so no chunk may be written twice (unless both
-- reduce) nor written and read.
local function check_step(sends, first, last, rd)
  local written = {}
  for i = first, last do
    local x = sends[i]
    local w = written[x.dst * (1 << 24) + x.addr]
    if w and (w.op == "copy" or x.op == "copy") then
      rd.fail(x.line, "%s and %s both write chunk %d on rank %d in step %d", w.where, x.where, x.addr, x.dst, x.step)
    end
    written[x.dst * (1 << 24) + x.addr] = x
  end
  for i = first, last do
    local x = sends[i]
    local w = written[x.src * (1 << 24) + x.addr]
    if w then
      rd.fail(x.line, "%s sends chunk %d from rank %d in the step (%d) that %s writes it", x.where, x.addr, x.src, x.step,
        w.where)
    end
  end
end

--- 6. The sends as transfers after xs, by step, t and file order, each
--- step checked.
local function transfers(sends, where, xs, rd)
  table.sort(sends, function(a, b)
    if a.step ~= b.step then return a.step < b.step end
    if a.t ~= b.t then return a.t < b.t end
    return a.n < b.n
  end)
  local first = 1
  while first <= #sends do
    local last = first
    while last < #sends and sends[last + 1].step == sends[first].step do last = last + 1 end
    check_step(sends, first, last, rd)
    for i = first, last do
      local x = sends[i]
      local s, d = where(x.src, x.addr), where(x.dst, x.addr)
      xs[#xs + 1] = import.xfer(x.src, s.buf, s.idx, x.dst, d.buf, d.idx, 1, x.op, x.step, x.line,
        ("%s chunk %d"):format(x.where, x.addr))
    end
    first = last + 1
  end
  return xs
end

--- Import TACCL JSON text: the passes of the header, in order.
---@param text string
---@param path string
function M.import(text, path)
  local obj, null = import.json_decode(text, path)
  local warnings = {}
  local rd = import.checker(path, warnings, null)
  if type(obj) ~= "table" then rd.fail(1, "expected a JSON object") end
  local coll = collective(obj, rd)
  local maps = read_maps(obj, rd)
  local sends, R = read_sends(obj, text, maps, null, rd)
  local C = geometry(coll, maps, R, rd)
  local where, placement = locate(maps, R)
  local xs = transfers(sends, where, placement, rd)
  local name = type(obj.name) == "string" and obj.name or import.base_name(path, "taccl")
  return {
    format = M.format, path = path, line = 1, name = name, collective = coll, ranks = R, chunks = C,
    inplace = coll ~= "alltoall", outofplace = true, xfers = xs, warnings = warnings,
    details = { steps = #obj.steps, sends = #sends },
  }
end

return M
