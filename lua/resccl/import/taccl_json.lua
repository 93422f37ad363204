--- TACCL / SCCL algorithm JSON (`taccl solve`, `sccl solve` output) -> transfers.
--
-- The file lists global chunk addresses and, per algorithm step, sends
-- [addr, src, dst, t, link] (a sixth field "rrc" makes the send a reduction).
-- Every send of a step reads what was there before the step. Buffers follow
-- ncclize: on each rank the addresses of input_map and output_map, sorted,
-- are the input and output chunk indices; an address in both lives in the
-- output (after a copy, which the core drops in-place); any other address a
-- rank touches gets a scratch chunk.
local import = require "resccl.import"

local M = {}

M.format = "TACCL JSON"

local COLLS = { "allgather", "alltoall", "allreduce", "reducescatter", "reduce_scatter" }

--- Is this text a TACCL/SCCL algorithm?
function M.detect(text)
  return text:match "^%s*{" ~= nil and text:find('"sends"', 1, true) ~= nil
    and (text:find('"input_map"', 1, true) ~= nil or text:find('"sccl_type"', 1, true) ~= nil)
end

--- Import TACCL JSON text.
---@param text string
---@param path string
function M.import(text, path)
  local obj, null = import.json_decode(text, path)
  local function fail(line, fmt, ...) error(("%s:%d: " .. fmt):format(path, line, ...), 0) end
  if type(obj) ~= "table" then fail(1, "expected a JSON object") end
  local warnings = {}

  -- Line of the k-th "sends" key: where step k starts.
  local step_line, at = {}, 1
  for k = 1, math.huge do
    local i = text:find('"sends"', at, true)
    if not i then break end
    step_line[k] = import.line_of(text, i)
    at = i + 1
    if k > 1 << 20 then break end
  end

  -- Collective: from the collective object, its name, or the algorithm name.
  local names = {}
  if type(obj.collective) == "table" and type(obj.collective.name) == "string" then names[#names + 1] = obj.collective.name end
  if type(obj.collective) == "string" then names[#names + 1] = obj.collective end
  if type(obj.name) == "string" then names[#names + 1] = obj.name end
  local coll
  for _, n in ipairs(names) do
    local l = n:lower()
    for _, c in ipairs(COLLS) do
      if not coll and l:find(c, 1, true) then coll = c == "reduce_scatter" and "reducescatter" or c end
    end
  end
  if not coll then
    fail(1, "cannot tell the collective from %s (allgather, alltoall, allreduce, reducescatter)",
      #names > 0 and ("'" .. table.concat(names, "', '") .. "'") or "the file (no collective or name)")
  end

  local function intval(v, what, line)
    local n = type(v) == "number" and math.tointeger(v)
    if not n or n < 0 or n > 1 << 24 then
      fail(line, "%s must be an integer in 0..%d, got %s", what, 1 << 24, import.shown(v, null))
    end
    return n
  end
  local function rankmap(m, what)
    if type(m) ~= "table" then fail(1, "%s must be an object of rank -> [addresses]", what) end
    local out = {}
    for k, v in pairs(m) do
      local r = math.tointeger(tonumber(k))
      if not r or r < 0 or r >= 1024 then fail(1, "%s has a bad rank key '%s'", what, tostring(k)) end
      if type(v) ~= "table" then fail(1, "%s[%s] must be a list of addresses", what, k) end
      local set = {}
      for i, a in ipairs(v) do set[intval(a, ("%s[%s][%d]"):format(what, k, i), 1)] = true end
      out[r] = set
    end
    return out
  end
  local input_map, output_map = rankmap(obj.input_map, "input_map"), rankmap(obj.output_map, "output_map")
  local known = {} -- the addresses some rank starts or ends with
  for _, m in ipairs { input_map, output_map } do
    for _, set in pairs(m) do
      for a in pairs(set) do known[a] = true end
    end
  end

  -- The sends, with their steps, checked.
  if type(obj.steps) ~= "table" or #obj.steps == 0 then fail(1, "no 'steps' list") end
  local R = 0
  for r in pairs(input_map) do R = math.max(R, r + 1) end
  for r in pairs(output_map) do R = math.max(R, r + 1) end
  local sends = {}
  for k, step in ipairs(obj.steps) do
    local line = step_line[k] or 1
    if type(step) ~= "table" or type(step.sends) ~= "table" then fail(line, "steps[%d] has no 'sends' list", k - 1) end
    for j, s in ipairs(step.sends) do
      local where = ("steps[%d].sends[%d]"):format(k - 1, j - 1)
      if type(s) ~= "table" or #s < 3 then fail(line, "%s must be [chunk, src, dst, ...]", where) end
      local x = {
        addr = intval(s[1], where .. " chunk", line), src = intval(s[2], where .. " src", line),
        dst = intval(s[3], where .. " dst", line), t = s[4] ~= nil and s[4] ~= null and tonumber(s[4]) or 0,
        step = k - 1, line = line, where = where, n = #sends,
      }
      local redop = s[6]
      if redop == nil or redop == null or redop == "nop" or redop == "copy" then x.op = "copy"
      elseif redop == "rrc" or redop == "reduce" or redop == "sum" then x.op = "reduce"
      else fail(line, "%s: unknown reduction '%s' (rrc or none)", where, tostring(redop)) end
      if not known[x.addr] then fail(line, "%s: chunk %d is in no rank's input_map or output_map", where, x.addr) end
      if x.src == x.dst then fail(line, "%s sends from rank %d to itself", where, x.src) end
      if x.src >= 1024 or x.dst >= 1024 then fail(line, "%s: rank out of range", where) end
      R = math.max(R, x.src + 1, x.dst + 1)
      sends[#sends + 1] = x
    end
  end
  if R < 2 then fail(1, "an algorithm needs at least 2 ranks") end

  -- Geometry.
  local nin = 0
  for _ in pairs(input_map[0] or {}) do nin = nin + 1 end
  local C = (coll == "alltoall" or coll == "reducescatter") and nin // R or nin
  if C < 1 or ((coll == "alltoall" or coll == "reducescatter") and nin % R ~= 0) then
    fail(1, "rank 0 holds %d input chunks, which does not fit %s on %d ranks", nin, coll, R)
  end

  -- Address -> (buffer, index) per rank.
  local loc, scratch, xs = {}, {}, {}
  for r = 0, R - 1 do
    loc[r], scratch[r] = {}, 0
    local outs = import.sorted_keys(output_map[r] or {})
    for i, a in ipairs(outs) do loc[r][a] = { buf = "output", idx = i - 1 } end
    for i, a in ipairs(import.sorted_keys(input_map[r] or {})) do
      if loc[r][a] then
        xs[#xs + 1] = { src = r, sbuf = "input", sidx = i - 1, dst = r, dbuf = "output", didx = loc[r][a].idx, cnt = 1,
          op = "copy", step = -1, line = 1, what = ("chunk %d enters the output"):format(a) }
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

  -- Order: by step, then t, then file order. Inside a step every send reads
  -- the state before the step, so no chunk may be written and read in one.
  table.sort(sends, function(a, b)
    if a.step ~= b.step then return a.step < b.step end
    if a.t ~= b.t then return a.t < b.t end
    return a.n < b.n
  end)
  local first = 1
  while first <= #sends do
    local last = first
    while last < #sends and sends[last + 1].step == sends[first].step do last = last + 1 end
    local written = {}
    for i = first, last do
      local x = sends[i]
      local w = written[x.dst * (1 << 24) + x.addr]
      if w and (w.op == "copy" or x.op == "copy") then
        fail(x.line, "%s and %s both write chunk %d on rank %d in step %d", w.where, x.where, x.addr, x.dst, x.step)
      end
      written[x.dst * (1 << 24) + x.addr] = x
    end
    for i = first, last do
      local x = sends[i]
      local w = written[x.src * (1 << 24) + x.addr]
      if w then
        fail(x.line, "%s sends chunk %d from rank %d in the step (%d) that %s writes it", x.where, x.addr, x.src, x.step,
          w.where)
      end
    end
    for i = first, last do
      local x = sends[i]
      local s, d = where(x.src, x.addr), where(x.dst, x.addr)
      xs[#xs + 1] = { src = x.src, sbuf = s.buf, sidx = s.idx, dst = x.dst, dbuf = d.buf, didx = d.idx, cnt = 1,
        op = x.op, step = x.step, line = x.line, what = ("%s chunk %d"):format(x.where, x.addr) }
    end
    first = last + 1
  end
  local name = type(obj.name) == "string" and obj.name or path:match "([^/]+)%.[^.]*$" or "taccl"
  return {
    format = M.format, path = path, line = 1, name = name, collective = coll, ranks = R, chunks = C,
    inplace = coll ~= "alltoall", outofplace = true, xfers = xs, warnings = warnings,
    details = { steps = #obj.steps, sends = #sends },
  }
end

return M
