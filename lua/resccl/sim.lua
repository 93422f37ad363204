--- Timing a compiled plan with the simulator (src/sim.c), the baselines that
--- share it, and what the simulator writes: tables, Chrome traces, SVG.
--
-- A variant is one way to run a program: ours (HPDS, state-based TBs,
-- task-level execution), the MSCCL model (connection-based TBs,
-- algorithm-level execution, several channels, an interpreter), or NCCL's
-- ring (the collective's ring algorithm, one TB per connection per channel,
-- algorithm-level, channels spread over the NICs). Only the plan and the
-- execution order differ; the simulator and the topology are the same. The
-- MSCCL model keeps our schedule's order, so that it differs from ours only
-- in what the runtime does (TBs, execution order, channels, interpreter).
local resccl = require "resccl"
local core = require "resccl.core"
local output = require "resccl.output"

local M = {}

--- Defaults. The paper's Table 2: ChunkSize 1 MB, so a primitive call moves
--- at most 1 MiB of a chunk: the simulator's tile (plan:sim's default), not
--- the GPU runtime's (core.defaults.tile_bytes, 16 MiB), which channels=K
--- simulates. FIFO depth 4 tiles: NCCL's Simple protocol gives a connection
--- NCCL_STEPS = 8 slots of 512 KiB, 4 MiB in all.
M.SIM_TILE = core.defaults.sim_tile_bytes
M.DEPTH = 4
M.SIZE = 256 << 20

--- The MSCCL model's defaults: 2 channels reproduce the paper's MSCCL TB
--- counts (Table 3: 14 = 2 x 7 on 2x4); its interpreter costs 17.1% of
--- bandwidth on average (the paper's Fig. 3), a rate factor of 1/1.171.
M.MSCCL_CHANNELS = 2
M.MSCCL_SLOWDOWN = 1 - 1 / 1.171

--- The largest size, and the most tiles of a buffer (size / tile): the
--- simulator runs every micro-batch of every primitive, and 2^20 tiles of a
--- ring all-reduce on 4 ranks take it about 2 s.
M.MAX_SIZE = 1 << 50
M.MAX_TILES = 1 << 20

--- Parse a size: "256M", "256MiB", "4096", "1.5K" (src/setting.c: K, M, G and
--- T are powers of 1024, like nccl-tests'): whole bytes from 1 to MAX_SIZE.
---@param s string
---@param name string|nil what the message calls it (default "size")
---@return integer|nil bytes, string|nil message
function M.parse_size(s, name)
  return core.setting("size", name or "size", tostring(s), 1, M.MAX_SIZE)
end

--- "256 MiB" style, for tables.
function M.fmt_size(b)
  for _, u in ipairs { { 1 << 40, "TiB" }, { 1 << 30, "GiB" }, { 1 << 20, "MiB" }, { 1 << 10, "KiB" } } do
    if b >= u[1] then
      local v = b / u[1]
      return (v == math.floor(v) and "%d %s" or "%.1f %s"):format(v, u[2])
    end
  end
  return ("%d B"):format(b)
end

--- Powers of two from a to b ("1M:8G"), or nil and a message.
---@param name string|nil what the message calls it (default "sweep")
function M.parse_sweep(s, name)
  name = name or "sweep"
  local a, b = tostring(s):match "^([^:]+):([^:]+)$"
  if not a then return nil, ("%s %s: not A:B (e.g. 1M:8G)"):format(name, s) end
  local err
  a, err = M.parse_size(a, name)
  if a then b, err = M.parse_size(b, name) end
  if not b then return nil, err end
  if a > b then return nil, ("%s %s: %s is larger than %s"):format(name, s, M.fmt_size(a), M.fmt_size(b)) end
  local sizes, v = {}, a
  while v <= b do
    sizes[#sizes + 1] = v
    v = v * 2
  end
  return sizes
end

-- The folder of the shipped algorithms (next to lua/ in the source tree and
-- in the install prefix).
local function algorithms_dir()
  local src = debug.getinfo(1, "S").source:sub(2)
  return (src:gsub("[^/]*$", "")) .. "../../algorithms/"
end

--- The default NCCL channel count: 24 on one node (what NCCL chose on the
--- measured 2xH200 server, reference/nccl.md §8.2), else two rings per NIC.
function M.nccl_channels(topo)
  local p = topo:params()
  if p.nodes == 1 then return 24 end
  return 2 * math.ceil(p.gpn / p.gpus_per_nic)
end

--- Compile the plan a variant runs. Returns plan, simulation options, the
--- program it runs, or nil, message.
---@param variant string "ours" | "msccl" | "nccl"
---@param prog userdata the program (its collective picks NCCL's ring)
---@param topo userdata
---@param o table {sched=, tb=, fuse=, inplace=, order=, ce=, pull=, channels=, ours_channels=}
---@param plan userdata|nil ours compiled already (with o's options): not compiled again
function M.plan(variant, prog, topo, o, plan)
  local copts = { sched = o.sched, tb = o.tb, fuse = o.fuse, inplace = o.inplace, order = o.order, ce = o.ce,
    pull = o.pull }
  -- ours: one instance, or as the GPU runtime runs it: its channels (each a
  -- slice of every tile) and its micro-batches
  local sopts = { instances = o.ours_channels or 1, gpu = o.ours_channels ~= nil }
  if variant == "msccl" then
    copts.tb, copts.order, copts.ce, copts.pull = "conn", "algorithm", nil, nil -- MSCCL has neither
    sopts.instances, sopts.slowdown = o.channels or M.MSCCL_CHANNELS, M.MSCCL_SLOWDOWN
  elseif variant == "nccl" then
    local coll = prog:info().collective
    local path = algorithms_dir() .. coll .. "_ring.lua"
    local f = io.open(path)
    if not f then return nil, ("no NCCL ring baseline for %s (%s not found)"):format(coll, path) end
    f:close()
    prog = resccl.load(path):program { topo = topo }
    copts = { sched = "rr", tb = "conn", fuse = o.fuse, inplace = o.inplace, order = "algorithm" }
    sopts = { instances = o.channels or M.nccl_channels(topo), rotate = true }
  end
  if not plan then
    local err
    plan, err = resccl.compile(prog, topo, copts)
    if err then return nil, err end
  end
  return plan, sopts, prog
end

--- Is size at most MAX_TILES tiles for this variant? true, or nil, message.
function M.check_size(variant, o, size)
  -- ours as the GPU runtime runs it (channels=K) has no more micro-batches than tiles of SIM_TILE make
  local tile = o.tile or M.SIM_TILE
  if variant == "ours" and o.ours_channels then tile = math.min(tile, M.SIM_TILE) end
  if size / tile > M.MAX_TILES then
    return nil, ("size %s is %.0f tiles of %s, more than the simulator runs (%d)"):format(M.fmt_size(size),
      size / tile, M.fmt_size(tile), M.MAX_TILES)
  end
  return true
end

--- Simulate a variant's plan at one size that check_size admits: plan,
--- sopts and prog as M.plan returns them.
---@return table|nil result, string|nil error
function M.time(variant, plan, sopts, prog, o, size)
  local r, err = plan:sim { size = size, tile = o.tile or M.SIM_TILE, depth = o.depth or M.DEPTH, nmicro = o.nmicro,
    instances = sopts.instances, rotate = sopts.rotate, slowdown = sopts.slowdown, gpu = sopts.gpu,
    trace = o.trace }
  if not r then return nil, err end
  local rep = plan:report()
  r.variant, r.sched, r.tb_policy, r.fused = variant, rep.sched, rep.tb_policy, rep.fused
  r.ce_copies, r.pulls = rep.ce_copies, rep.pulls
  r.slowdown = sopts.slowdown or 0
  r.algorithm = prog:info().name
  return r
end

--- Simulate one variant at one size (M.plan, then M.time).
---@param plan userdata|nil as M.plan takes it
---@return table|nil result, string|nil error
function M.run(variant, prog, topo, o, size, plan)
  local fits, why = M.check_size(variant, o, size)
  if not fits then return nil, why end
  local sopts
  plan, sopts, prog = M.plan(variant, prog, topo, o, plan)
  if not plan then return nil, sopts end
  return M.time(variant, plan, sopts, prog, o, size)
end

-- ------------------------------------------------------------------ text

local HEAD = "# %-7s %12s %11s %11s %11s %7s %6s %6s %8s"

--- Header and row of the text table (nccl-tests-like columns plus TB use).
function M.header()
  return HEAD:format("variant", "size", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "TB/rank", "busy%", "idle%",
    "maxidle%")
end

function M.row(r)
  return ("  %-7s %12s %11.1f %11.2f %11.2f %7d %6.1f %6.1f %8.1f"):format(r.variant, M.fmt_size(r.size_bytes),
    r.time_us, r.algbw_gbps, r.busbw_gbps, r.tbs_per_rank_max, 100 * r.tb_busy_avg, 100 * r.tb_idle_avg,
    100 * r.tb_idle_max)
end

--- The JSON form of a result: everything but the per-call slices.
function M.json_result(r)
  local t = {}
  for k, v in pairs(r) do
    if k ~= "slices" then t[k] = v end
  end
  return t
end

-- ----------------------------------------------------------------- trace

local function json_str(s)
  return '"' .. tostring(s):gsub('[%c"\\]', function(c) return ("\\u%04x"):format(c:byte()) end) .. '"'
end

--- Chrome trace-event JSON: a process per rank, a thread per TB, a slice per
--- primitive call (one micro-batch). Opens in Perfetto and chrome://tracing.
function M.write_trace(path, r)
  local out = { '{"displayTimeUnit":"ns","traceEvents":[\n' }
  local ranks = {}
  for _, tb in ipairs(r.tbs) do
    if not ranks[tb.rank] then
      ranks[tb.rank] = true
      out[#out + 1] = ('{"ph":"M","name":"process_name","pid":%d,"args":{"name":"rank %d"}},\n'):format(tb.rank,
        tb.rank)
    end
    out[#out + 1] = ('{"ph":"M","name":"thread_name","pid":%d,"tid":%d,"args":{"name":"tb %d"}},\n'):format(tb.rank,
      tb.tb, tb.tb)
  end
  for _, s in ipairs(r.slices or {}) do -- none where no TB runs (copy engine alone)
    local tb = r.tbs[s.tb]
    out[#out + 1] = ('{"ph":"X","name":%s,"pid":%d,"tid":%d,"ts":%.4f,"dur":%.4f,"args":{"peer":%d,"chunk":%d,' ..
      '"micro_batch":%d,"subpipeline":%d}},\n'):format(json_str(s.kind), tb.rank, tb.tb, s.t0, s.t1 - s.t0,
      s.peer, s.chunk, s.m, s.slot)
  end
  out[#out + 1] = ('{"ph":"i","name":"end","s":"g","pid":0,"tid":0,"ts":%.4f}\n]}\n'):format(r.time_us)
  output.write(path, table.concat(out))
end

-- ------------------------------------------------------------------- SVG

local function svg_open(w, h)
  return { ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" ' ..
    'font-size="11">'):format(w, h), ('<rect width="%d" height="%d" fill="white"/>'):format(w, h) }
end

local function esc(s) return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;")) end

local PALETTE = { "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#e377c2", "#7f7f7f" }

-- Close an SVG document and write it out.
local function write_svg(path, out)
  out[#out + 1] = "</svg>\n"
  output.write(path, table.concat(out, "\n"))
end

--- TB timeline of each rank (at most `maxranks`): blocked time in light
--- orange, calls coloured by sub-pipeline, released time grey, and a dashed
--- line where each sub-pipeline's first call starts.
function M.write_timeline(path, r, title, maxranks)
  maxranks = maxranks or 8
  local rows, byrank = {}, {}
  for i, tb in ipairs(r.tbs) do
    if tb.rank < maxranks then
      byrank[tb.rank] = byrank[tb.rank] or {}
      table.insert(byrank[tb.rank], i)
    end
  end
  for rank = 0, maxranks - 1 do
    if byrank[rank] then
      table.sort(byrank[rank], function(a, b) return r.tbs[a].tb < r.tbs[b].tb end)
      rows[#rows + 1] = { label = ("rank %d"):format(rank) }
      for _, i in ipairs(byrank[rank]) do rows[#rows + 1] = { tb = i } end
    end
  end
  local rowof = {}
  for y, row in ipairs(rows) do if row.tb then rowof[row.tb] = y end end
  local W, L, RH, top = 1100, 90, 12, 40
  local H = top + #rows * RH + 50
  local T = r.time_us > 0 and r.time_us or 1
  local function x(t) return L + (W - L - 20) * t / T end
  local out = svg_open(W, H)
  out[#out + 1] = ('<text x="10" y="18" font-size="13">%s</text>'):format(esc(title))
  out[#out + 1] = ('<text x="10" y="32">%.1f us, busbw %.2f GB/s; orange = blocked, colour = sub-pipeline, ' ..
    'grey = released</text>'):format(r.time_us, r.busbw_gbps)
  for y, row in ipairs(rows) do
    local ypx = top + (y - 1) * RH
    if row.label then
      out[#out + 1] = ('<text x="4" y="%d" font-weight="bold">%s</text>'):format(ypx + 10, row.label)
    else
      local tb = r.tbs[row.tb]
      out[#out + 1] = ('<text x="30" y="%d">tb %d</text>'):format(ypx + 10, tb.tb)
      out[#out + 1] = ('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#fdd9a0"/>'):format(x(0), ypx + 1,
        x(tb.end_us) - x(0), RH - 2)
      out[#out + 1] = ('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#dddddd"/>'):format(x(tb.end_us),
        ypx + 1, x(T) - x(tb.end_us), RH - 2)
    end
  end
  -- calls, merged while consecutive calls of one TB stay in one sub-pipeline
  local first = {}
  local open = {}
  local function flush(i)
    local s = open[i]
    if not s then return end
    local ypx = top + (rowof[i] - 1) * RH
    out[#out + 1] = ('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"/>'):format(x(s.t0), ypx + 1,
      math.max(0.5, x(s.t1) - x(s.t0)), RH - 2, PALETTE[s.slot % #PALETTE + 1])
    open[i] = nil
  end
  for _, s in ipairs(r.slices or {}) do
    if not first[s.slot] or s.t0 < first[s.slot] then first[s.slot] = s.t0 end
    if rowof[s.tb] then
      local o = open[s.tb]
      if o and o.slot == s.slot and s.t0 - o.t1 <= 1e-6 * T then
        o.t1 = s.t1
      else
        flush(s.tb)
        open[s.tb] = { t0 = s.t0, t1 = s.t1, slot = s.slot }
      end
    end
  end
  for i in pairs(open) do flush(i) end
  for slot, t in pairs(first) do
    out[#out + 1] = ('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="3,3"/>'):format(x(t),
      top - 4, x(t), H - 40, PALETTE[slot % #PALETTE + 1])
    out[#out + 1] = ('<text x="%.1f" y="%d" fill="%s">sp%d</text>'):format(x(t) + 2, H - 28,
      PALETTE[slot % #PALETTE + 1], slot)
  end
  out[#out + 1] = ('<text x="%d" y="%d">0</text><text x="%d" y="%d" text-anchor="end">%.1f us</text>'):format(L,
    H - 10, W - 20, H - 10, T)
  write_svg(path, out)
end

--- busbw vs size, one line per variant (log2 size axis).
---@param series table { {name=, points={ {size=, busbw=}, ... } }, ... }
function M.write_sweep(path, series, title)
  local W, H, L, B, T, R = 760, 420, 70, 50, 40, 130
  local smin, smax, bmax = math.huge, 0, 0
  for _, s in ipairs(series) do
    for _, p in ipairs(s.points) do
      smin, smax, bmax = math.min(smin, p.size), math.max(smax, p.size), math.max(bmax, p.busbw)
    end
  end
  if bmax <= 0 then bmax = 1 end
  local l0, l1 = math.log(smin, 2), math.max(math.log(smax, 2), math.log(smin, 2) + 1)
  local function x(sz) return L + (W - L - R) * (math.log(sz, 2) - l0) / (l1 - l0) end
  local function y(b) return H - B - (H - B - T) * b / (bmax * 1.1) end
  local out = svg_open(W, H)
  out[#out + 1] = ('<text x="%d" y="22" font-size="13">%s</text>'):format(L, esc(title))
  out[#out + 1] = ('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>'):format(L, H - B, W - R, H - B)
  out[#out + 1] = ('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>'):format(L, T, L, H - B)
  for e = math.ceil(l0), math.floor(l1) do
    local sz = 2 ^ e
    out[#out + 1] = ('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'):format(x(sz), H - B + 16,
      M.fmt_size(sz):gsub(" ", ""))
  end
  for k = 0, 5 do
    local b = bmax * 1.1 * k / 5
    out[#out + 1] = ('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>'):format(L - 6, y(b) + 4, b)
    out[#out + 1] = ('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eeeeee"/>'):format(L, y(b), W - R, y(b))
  end
  out[#out + 1] = ('<text x="14" y="%d" transform="rotate(-90 14 %d)">busbw (GB/s)</text>'):format(H // 2, H // 2)
  for i, s in ipairs(series) do
    local pts = {}
    for _, p in ipairs(s.points) do pts[#pts + 1] = ("%.1f,%.1f"):format(x(p.size), y(p.busbw)) end
    local c = PALETTE[(i - 1) % #PALETTE + 1]
    out[#out + 1] = ('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'):format(c,
      table.concat(pts, " "))
    out[#out + 1] = ('<text x="%d" y="%d" fill="%s">%s</text>'):format(W - R + 10, T + 16 * i, c, esc(s.name))
  end
  write_svg(path, out)
end

return M
