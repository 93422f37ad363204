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
local import = require "resccl.import"

local M = {}

M.format = "TE-CCL JSON"

local FLOW = "^Chunk (%d+) from (%d+) traveled over (%d+)%->(%d+)(.-) in epoch (%d+)(.*)$"

--- Is this text a TE-CCL schedule?
function M.detect(text)
  return text:match "^%s*{" ~= nil and text:find('%d%-[Ff]lows"') ~= nil
end

--- Import TE-CCL JSON text.
---@param text string
---@param path string
function M.import(text, path)
  local obj = import.json_decode(text, path)
  local function fail(line, fmt, ...) error(("%s:%d: " .. fmt):format(path, line, ...), 0) end
  if type(obj) ~= "table" then fail(1, "expected a JSON object") end
  local warnings = {}
  local flows_key, paths_key, demand_key
  for k in pairs(obj) do
    if type(k) == "string" then
      if k:match "^%d+%-[Ff]lows$" then flows_key = k
      elseif k:lower():match "chunk paths$" then paths_key = k
      elseif k:match "Demand_Met$" then demand_key = k end
    end
  end
  if not flows_key or type(obj[flows_key]) ~= "table" then fail(1, "no 'N-Flows' list of flow strings") end

  -- Flows, each with the line of its string in the file.
  local flows, gpus, switches, at = {}, {}, {}, 1
  for i, s in ipairs(obj[flows_key]) do
    local where = ("%s[%d]"):format(flows_key, i - 1)
    if type(s) ~= "string" then fail(1, "%s is not a string", where) end
    local p = text:find('"' .. s .. '"', at, true)
    local line = p and import.line_of(text, p) or 1
    if p then at = p + 1 end
    local c, src, a, b, mid, e, rest = s:match(FLOW)
    if not c then fail(line, "%s: cannot read flow \"%s\"", where, s) end
    local vol = mid:match "with volume ([%d.eE+-]+)"
    if vol and math.abs((tonumber(vol) or 0) - 1) > 1e-9 then
      fail(line, "%s moves volume %s of a chunk; only whole chunks (volume 1) can be imported", where, vol)
    end
    for sw in (rest:match "via switches ([%d,%s]+)" or ""):gmatch "%d+" do
      local n = math.tointeger(tonumber(sw))
      if not n or n > 1 << 24 then fail(line, "%s: switch id out of range", where) end
      switches[n] = true
    end
    local f = { line = line, where = where, n = i }
    for k, v in pairs { chunk = c, source = src, from = a, to = b, epoch = e } do
      f[k] = math.tointeger(tonumber(v))
      if not f[k] or f[k] > 1 << 24 then fail(line, "%s: number out of range", where) end
    end
    if f.from == f.to then fail(line, "%s: a flow from GPU %d to itself", where, f.from) end
    gpus[f.source], gpus[f.from], gpus[f.to] = true, true, true
    flows[#flows + 1] = f
  end
  if #flows == 0 then fail(1, "%s is empty", flows_key) end

  -- Demands: (dst, chunk, source).
  local demands = {}
  if paths_key and type(obj[paths_key]) == "table" then
    for k in pairs(obj[paths_key]) do
      local d, c, s = tostring(k):match "^Demand at (%d+) for chunk (%d+) from (%d+)"
      if d then
        d, c, s = math.tointeger(tonumber(d)), math.tointeger(tonumber(c)), math.tointeger(tonumber(s))
        if not (d and c and s) or math.max(d, c, s) > 1 << 24 then
          fail(1, "%s: number out of range in \"%s\"", paths_key, tostring(k))
        end
        demands[#demands + 1] = { dst = d, chunk = c, source = s }
        gpus[d], gpus[s] = true, true
      end
    end
  elseif demand_key and type(obj[demand_key]) == "table" then
    for a, m in pairs(obj[demand_key]) do
      local ga = math.tointeger(tonumber(tostring(a):match "(%d+)"))
      if ga and ga <= 1 << 24 then gpus[ga] = true end
      if type(m) == "table" then
        for b in pairs(m) do
          local gb = math.tointeger(tonumber(tostring(b):match "(%d+)"))
          if gb and gb <= 1 << 24 then gpus[gb] = true end
        end
      end
    end
  end
  for sw in pairs(switches) do
    if gpus[sw] then
      fail(1, "node %d is a switch in some flows and a GPU in others", sw)
    end
  end
  local ids = import.sorted_keys(gpus)
  local R = #ids
  if R < 2 or R > 1024 then fail(1, "%d GPUs; need 2..1024", R) end
  local rank = {}
  for i, id in ipairs(ids) do rank[id] = i - 1 end

  -- Collective and chunk geometry.
  local chunks_of = {} -- source rank -> set of chunk ids
  for _, f in ipairs(flows) do
    local s = rank[f.source]
    chunks_of[s] = chunks_of[s] or {}
    chunks_of[s][f.chunk] = true
  end
  for _, d in ipairs(demands) do
    local s = rank[d.source]
    chunks_of[s] = chunks_of[s] or {}
    chunks_of[s][d.chunk] = true
  end
  local dest = {} -- "s:c" -> set of destination ranks
  for _, d in ipairs(demands) do
    local k = rank[d.source] .. ":" .. d.chunk
    dest[k] = dest[k] or {}
    dest[k][rank[d.dst]] = true
  end
  local coll = "allgather"
  if #demands > 0 then
    local all, one = true, true
    for _, set in pairs(dest) do
      local n = 0
      for _ in pairs(set) do n = n + 1 end
      if n ~= R - 1 then all = false end
      if n ~= 1 then one = false end
    end
    if one and not all then coll = "alltoall"
    elseif not all then fail(1, "the demands are neither an AllGather (every GPU needs every chunk) nor an AllToAll") end
  else
    warnings[#warnings + 1] = path .. ":1: no demands in the file; taken as AllGather"
  end

  local C, index = nil, {} -- index["s:c"] = position of chunk c in its block
  local xs = {}
  if coll == "allgather" then
    for s = 0, R - 1 do
      local cs = import.sorted_keys(chunks_of[s] or {})
      if C and #cs ~= C then fail(1, "GPU %d has %d chunks, GPU %d has %d: blocks must be equal", ids[s + 1], #cs, ids[1], C) end
      C = #cs
      for j, c in ipairs(cs) do index[s .. ":" .. c] = j - 1 end
    end
    for r = 0, R - 1 do
      xs[#xs + 1] = { src = r, sbuf = "input", sidx = 0, dst = r, dbuf = "output", didx = r * C, cnt = C, op = "copy",
        step = -1, line = 1, what = "own block" }
    end
  else
    local per = {} -- "s:d" -> sorted chunk list
    for k, set in pairs(dest) do
      local s, c = k:match "^(%d+):(%d+)$"
      local d = next(set)
      local pk = s .. ":" .. d
      per[pk] = per[pk] or {}
      table.insert(per[pk], tonumber(c))
    end
    for s = 0, R - 1 do
      for d = 0, R - 1 do
        if d ~= s then
          local l = per[s .. ":" .. d] or {}
          table.sort(l)
          if C and #l ~= C then
            fail(1, "GPU %d sends %d chunks to GPU %d but %d to others: blocks must be equal", ids[s + 1], #l, ids[d + 1], C)
          end
          C = #l
          for j, c in ipairs(l) do index[s .. ":" .. c] = j - 1 end
        end
      end
    end
    for r = 0, R - 1 do
      xs[#xs + 1] = { src = r, sbuf = "input", sidx = r * C, dst = r, dbuf = "output", didx = r * C, cnt = C,
        op = "copy", step = -1, line = 1, what = "own block" }
    end
  end
  if not C or C < 1 then fail(1, "no chunks") end

  -- Where chunk (s, c) lives on rank h.
  local scratch, slot = {}, {}
  local function loc(h, s, c)
    local j = index[s .. ":" .. c]
    if j == nil then fail(1, "chunk %d of GPU %d is moved but nobody needs it", c, ids[s + 1]) end
    if coll == "allgather" then
      if h == s then return "input", j end
      return "output", s * C + j
    end
    local d = next(dest[s .. ":" .. c])
    if h == s then return "input", d * C + j end
    if h == d then return "output", s * C + j end
    local k = h .. ":" .. s .. ":" .. c
    if not slot[k] then
      slot[k] = scratch[h] or 0
      scratch[h] = slot[k] + 1
    end
    return "scratch", slot[k]
  end

  -- Epoch order; inside an epoch a GPU forwards a chunk only after it has it.
  table.sort(flows, function(a, b)
    if a.epoch ~= b.epoch then return a.epoch < b.epoch end
    return a.n < b.n
  end)
  local has = {}
  local function holds(h, s, c) return h == s or has[h .. ":" .. s .. ":" .. c] end
  local i = 1
  while i <= #flows do
    local j = i
    while j < #flows and flows[j + 1].epoch == flows[i].epoch do j = j + 1 end
    local pending = {}
    for k = i, j do pending[#pending + 1] = flows[k] end
    while #pending > 0 do
      local rest = {}
      for _, f in ipairs(pending) do
        local s, a, b = rank[f.source], rank[f.from], rank[f.to]
        if holds(a, s, f.chunk) then
          local sb, si = loc(a, s, f.chunk)
          local db, di = loc(b, s, f.chunk)
          xs[#xs + 1] = { src = a, sbuf = sb, sidx = si, dst = b, dbuf = db, didx = di, cnt = 1, op = "copy",
            step = f.epoch, line = f.line, what = f.where }
          has[b .. ":" .. s .. ":" .. f.chunk] = true
        else
          rest[#rest + 1] = f
        end
      end
      if #rest == #pending then
        local f = rest[1]
        fail(f.line, "%s: GPU %d forwards chunk %d of GPU %d in epoch %d before it has it", f.where, f.from, f.chunk,
          f.source, f.epoch)
      end
      pending = rest
    end
    i = j + 1
  end
  local name = path:match "([^/]+)%.[^.]*$" or "teccl"
  return {
    format = M.format, path = path, line = 1, name = "teccl_" .. name:gsub("[^%w_]", "_"), collective = coll,
    ranks = R, chunks = C, inplace = coll == "allgather", outofplace = true, xfers = xs, warnings = warnings,
    details = { flows = #flows, gpu_ids = table.concat(ids, ","), epochs = flows[#flows].epoch + 1 },
  }
end

return M
