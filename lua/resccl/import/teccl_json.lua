--- TE-CCL schedule JSON (`teccl solve` output) -> transfers.
--
-- The schedule is a list of flow strings
--   "Chunk C from S traveled over A->B [with volume V] in epoch E [via switches K]"
-- under a key like "7-Flows" (or "6-Flows"): chunk C of GPU S moves from A to
-- B in epoch E. Who needs which chunk comes from the "Chunk paths" keys
-- ("Demand at D for chunk C from S ...") or, failing those, "Demand_Met".
-- TE-CCL solves AllGather and AllToAll. Node ids that appear after "via
-- switches" are switches; the other ids, sorted, are ranks 0..n-1.
-- Buffers: a source sends from its input; an AllGather destination keeps
-- chunk (S, c) at output block S; an AllToAll destination at output block S,
-- and a GPU that only relays a chunk keeps it in scratch.
--
-- Import happens in six passes, each a function below (M.import calls
-- them in this order), filling in one schedule table:
--   1. find_keys     which keys hold the flows, the chunk paths, the demands.
--   2. read_flows    each flow string read, with its line in the file; the
--                    node ids it names as GPUs or switches.
--   3. read_demands  (destination, chunk, source) from the chunk paths; GPU
--                    ids from them or from Demand_Met.
--   4. number_ranks  the GPU ids, sorted, become ranks 0..n-1.
--   5. blocks        the collective (what the demands ask for) and each
--                    chunk's place in its block; each rank's own block is
--                    copied first.
--   6. transfers     the flows by epoch; inside an epoch a GPU forwards a
--                    chunk only after it has it.
local import = require "resccl.import"

local M = {}

M.format = "TE-CCL JSON"

local FLOW = "^Chunk (%d+) from (%d+) traveled over (%d+)%->(%d+)(.-) in epoch (%d+)(.*)$"
local MAX_ID = 1 << 24

--- Is this text a TE-CCL schedule?
function M.detect(text)
  return text:match "^%s*{" ~= nil and text:find('%d%-[Ff]lows"') ~= nil
end

--- 1. The keys of the flows, the chunk paths and the demands (sch.*_key).
local function find_keys(sch, rd)
  local obj = sch.obj
  if type(obj) ~= "table" then rd.fail(1, "expected a JSON object") end
  for _, k in ipairs(import.sorted_keys(obj)) do
    if type(k) == "string" then
      if k:match "^%d+%-[Ff]lows$" then sch.flows_key = k
      elseif k:lower():match "chunk paths$" then sch.paths_key = k
      elseif k:match "Demand_Met$" then sch.demand_key = k end
    end
  end
  if not sch.flows_key or type(obj[sch.flows_key]) ~= "table" then rd.fail(1, "no 'N-Flows' list of flow strings") end
end

-- Flow i, the string s at `line`: { chunk, source, from, to, epoch, line, where, n }.
local function read_flow(s, i, line, sch, rd)
  local where = ("%s[%d]"):format(sch.flows_key, i - 1)
  local c, src, a, b, mid, e, rest = s:match(FLOW)
  if not c then rd.fail(line, "%s: cannot read flow \"%s\"", where, s) end
  local vol = mid:match "with volume ([%d.eE+-]+)"
  if vol and math.abs((tonumber(vol) or 0) - 1) > 1e-9 then
    rd.fail(line, "%s moves volume %s of a chunk; only whole chunks (volume 1) can be imported", where, vol)
  end
  for sw in (rest:match "via switches ([%d,%s]+)" or ""):gmatch "%d+" do
    local n = math.tointeger(tonumber(sw))
    if not n or n > MAX_ID then rd.fail(line, "%s: switch id out of range", where) end
    sch.switches[n] = true
  end
  local f = { line = line, where = where, n = i }
  for _, kv in ipairs { { "chunk", c }, { "source", src }, { "from", a }, { "to", b }, { "epoch", e } } do
    local v = math.tointeger(tonumber(kv[2]))
    if not v or v > MAX_ID then rd.fail(line, "%s: number out of range", where) end
    f[kv[1]] = v
  end
  if f.from == f.to then rd.fail(line, "%s: a flow from GPU %d to itself", where, f.from) end
  sch.gpus[f.source], sch.gpus[f.from], sch.gpus[f.to] = true, true, true
  return f
end

--- 2. The flows (sch.flows), each with the line of its string in the file;
--- the ids they name as GPUs (sch.gpus) and switches (sch.switches).
local function read_flows(sch, rd)
  local text, line_of, at = sch.text, import.liner(sch.text), 1
  for i, s in ipairs(sch.obj[sch.flows_key]) do
    if type(s) ~= "string" then rd.fail(1, "%s[%d] is not a string", sch.flows_key, i - 1) end
    local p = text:find('"' .. s .. '"', at, true)
    if p then at = p + 1 end
    sch.flows[i] = read_flow(s, i, p and line_of(p) or 1, sch, rd)
  end
  if #sch.flows == 0 then rd.fail(1, "%s is empty", sch.flows_key) end
end

--- 3. The demands (sch.demands: { dst, chunk, source } ids) from the chunk
--- paths, and the GPU ids they name; without them, the ids of Demand_Met.
local function read_demands(sch, rd)
  local obj, paths_key, demand_key = sch.obj, sch.paths_key, sch.demand_key
  if paths_key and type(obj[paths_key]) == "table" then
    for _, k in ipairs(import.sorted_keys(obj[paths_key])) do
      local d, c, s = tostring(k):match "^Demand at (%d+) for chunk (%d+) from (%d+)"
      if d then
        d, c, s = math.tointeger(tonumber(d)), math.tointeger(tonumber(c)), math.tointeger(tonumber(s))
        if not (d and c and s) or math.max(d, c, s) > MAX_ID then
          rd.fail(1, "%s: number out of range in \"%s\"", paths_key, tostring(k))
        end
        sch.demands[#sch.demands + 1] = { dst = d, chunk = c, source = s }
        sch.gpus[d], sch.gpus[s] = true, true
      end
    end
  elseif demand_key and type(obj[demand_key]) == "table" then
    for a, m in pairs(obj[demand_key]) do
      local ga = math.tointeger(tonumber(tostring(a):match "(%d+)"))
      if ga and ga <= MAX_ID then sch.gpus[ga] = true end
      if type(m) == "table" then
        for b in pairs(m) do
          local gb = math.tointeger(tonumber(tostring(b):match "(%d+)"))
          if gb and gb <= MAX_ID then sch.gpus[gb] = true end
        end
      end
    end
  end
end

--- 4. The GPU ids, sorted (sch.ids), as ranks 0..R-1 (sch.rank[id], sch.R).
local function number_ranks(sch, rd)
  for sw in pairs(sch.switches) do
    if sch.gpus[sw] then rd.fail(1, "node %d is a switch in some flows and a GPU in others", sw) end
  end
  sch.ids = import.sorted_keys(sch.gpus)
  sch.R = #sch.ids
  if sch.R < 2 or sch.R > 1024 then rd.fail(1, "%d GPUs; need 2..1024", sch.R) end
  for i, id in ipairs(sch.ids) do sch.rank[id] = i - 1 end
end

-- The collective the demands ask for (sch.coll), each demanded chunk's
-- destinations (sch.dest["s:c"] = set of ranks), and each source's chunk
-- ids (chunks_of[s] = set), which it returns.
local function collective(sch, rd)
  local rank, chunks_of = sch.rank, {}
  local function add(s, c)
    chunks_of[s] = chunks_of[s] or {}
    chunks_of[s][c] = true
  end
  for _, f in ipairs(sch.flows) do add(rank[f.source], f.chunk) end
  for _, d in ipairs(sch.demands) do add(rank[d.source], d.chunk) end
  for _, d in ipairs(sch.demands) do
    local k = rank[d.source] .. ":" .. d.chunk
    sch.dest[k] = sch.dest[k] or {}
    sch.dest[k][rank[d.dst]] = true
  end
  sch.coll = "allgather"
  if #sch.demands > 0 then
    local all, one = true, true
    for _, set in pairs(sch.dest) do
      local n = 0
      for _ in pairs(set) do n = n + 1 end
      if n ~= sch.R - 1 then all = false end
      if n ~= 1 then one = false end
    end
    if one and not all then sch.coll = "alltoall"
    elseif not all then
      rd.fail(1, "the demands are neither an AllGather (every GPU needs every chunk) nor an AllToAll")
    end
  else
    rd.warn(1, "no demands in the file; taken as AllGather")
  end
  return chunks_of
end

--- 5. The collective, chunks per block (sch.C) and each chunk's place in
--- its block (sch.index["s:c"]); every rank's own block enters its output
--- first (sch.xs).
local function blocks(sch, rd)
  local chunks_of = collective(sch, rd)
  local R, ids, C = sch.R, sch.ids, nil
  if sch.coll == "allgather" then
    for s = 0, R - 1 do
      local cs = import.sorted_keys(chunks_of[s] or {})
      if C and #cs ~= C then
        rd.fail(1, "GPU %d has %d chunks, GPU %d has %d: blocks must be equal", ids[s + 1], #cs, ids[1], C)
      end
      C = #cs
      for j, c in ipairs(cs) do sch.index[s .. ":" .. c] = j - 1 end
    end
  else
    local per = {} -- "s:d" -> chunk list
    for k, set in pairs(sch.dest) do
      local s, c = k:match "^(%d+):(%d+)$"
      local pk = s .. ":" .. next(set)
      per[pk] = per[pk] or {}
      table.insert(per[pk], tonumber(c))
    end
    for s = 0, R - 1 do
      for d = 0, R - 1 do
        if d ~= s then
          local l = per[s .. ":" .. d] or {}
          table.sort(l)
          if C and #l ~= C then
            rd.fail(1, "GPU %d sends %d chunks to GPU %d but %d to others: blocks must be equal", ids[s + 1], #l, ids[d + 1], C)
          end
          C = #l
          for j, c in ipairs(l) do sch.index[s .. ":" .. c] = j - 1 end
        end
      end
    end
  end
  if not C or C < 1 then rd.fail(1, "no chunks") end
  sch.C = C
  for r = 0, R - 1 do
    local at = sch.coll == "allgather" and 0 or r * C
    sch.xs[r + 1] = import.xfer(r, "input", at, r, "output", r * C, C, "copy", -1, 1, "own block")
  end
end

-- Where chunk c of source s lives on rank h: buffer, index (a relay's
-- scratch chunk allocated the first time).
local function loc(sch, h, s, c, rd)
  local j = sch.index[s .. ":" .. c]
  if j == nil then rd.fail(1, "chunk %d of GPU %d is moved but nobody needs it", c, sch.ids[s + 1]) end
  local C = sch.C
  if sch.coll == "allgather" then
    if h == s then return "input", j end
    return "output", s * C + j
  end
  local d = next(sch.dest[s .. ":" .. c])
  if h == s then return "input", d * C + j end
  if h == d then return "output", s * C + j end
  local k = h .. ":" .. s .. ":" .. c
  if not sch.slot[k] then
    sch.slot[k] = sch.scratch[h] or 0
    sch.scratch[h] = sch.slot[k] + 1
  end
  return "scratch", sch.slot[k]
end

--- 6. The flows as transfers after sch.xs, in epoch order; inside an epoch
--- a GPU forwards a chunk only after it has it.
local function transfers(sch, rd)
  local flows, rank, has = sch.flows, sch.rank, {}
  table.sort(flows, function(a, b)
    if a.epoch ~= b.epoch then return a.epoch < b.epoch end
    return a.n < b.n
  end)
  local function holds(h, s, c) return h == s or has[h .. ":" .. s .. ":" .. c] end
  local i = 1
  while i <= #flows do
    local j = i
    while j < #flows and flows[j + 1].epoch == flows[i].epoch do j = j + 1 end
    local pending = table.move(flows, i, j, 1, {})
    while #pending > 0 do
      local rest = {}
      for _, f in ipairs(pending) do
        local s, a, b = rank[f.source], rank[f.from], rank[f.to]
        if holds(a, s, f.chunk) then
          local sb, si = loc(sch, a, s, f.chunk, rd)
          local db, di = loc(sch, b, s, f.chunk, rd)
          sch.xs[#sch.xs + 1] = import.xfer(a, sb, si, b, db, di, 1, "copy", f.epoch, f.line, f.where)
          has[b .. ":" .. s .. ":" .. f.chunk] = true
        else
          rest[#rest + 1] = f
        end
      end
      if #rest == #pending then
        local f = rest[1]
        rd.fail(f.line, "%s: GPU %d forwards chunk %d of GPU %d in epoch %d before it has it", f.where, f.from, f.chunk,
          f.source, f.epoch)
      end
      pending = rest
    end
    i = j + 1
  end
end

--- Import TE-CCL JSON text: the passes of the header, in order.
---@param text string
---@param path string
function M.import(text, path)
  local sch = { text = text, obj = import.json_decode(text, path), flows = {}, gpus = {}, switches = {}, demands = {},
    rank = {}, dest = {}, index = {}, xs = {}, scratch = {}, slot = {} }
  local warnings = {}
  local rd = import.checker(path, warnings)
  find_keys(sch, rd)
  read_flows(sch, rd)
  read_demands(sch, rd)
  number_ranks(sch, rd)
  blocks(sch, rd)
  transfers(sch, rd)
  local name = import.base_name(path, "teccl")
  return {
    format = M.format, path = path, line = 1, name = "teccl_" .. name:gsub("[^%w_]", "_"), collective = sch.coll,
    ranks = sch.R, chunks = sch.C, inplace = sch.coll == "allgather", outofplace = true, xfers = sch.xs,
    warnings = warnings,
    details = { flows = #sch.flows, gpu_ids = table.concat(sch.ids, ","), epochs = sch.flows[#sch.flows].epoch + 1 },
  }
end

return M
