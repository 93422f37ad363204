--- resccl sim: time the plan on its topology with the discrete-event
--- simulator, at one size or a sweep, beside a baseline; tables, JSON,
--- traces and pictures. Each variant is compiled once, for every size.
local sim = require "resccl.sim"
local plans = require "resccl.cli.plans"
local report = require "resccl.cli.report"

local M = {}

function M.sim(o)
  local sizes = o.sweep or { o.size or sim.SIZE }
  local tile = o.tile or sim.SIM_TILE
  local alg, prog, topo = plans.build(o)
  local so = { sched = o.sched, tb = o.tb, fuse = o.fuse, inplace = o.inplace or false, order = o.order, ce = o.ce,
    pull = o.pull, channels = o.channels, ours_channels = o.args.channels, tile = tile, depth = o.depth,
    nmicro = o.args.nmicro,
    trace = (o.trace or (o.svg and not o.sweep)) and true or nil }
  local variants = { "ours", o.baseline }
  for _, v in ipairs(variants) do -- the largest size (sizes ascend), before any run
    local ok, err = sim.check_size(v, so, sizes[#sizes])
    if not ok then error(err, 0) end
  end
  local results, series = {}, {}
  for _, v in ipairs(variants) do
    series[#series + 1] = { name = v, points = {} }
    local plan, sopts, p = sim.plan(v, prog, topo, so)
    if not plan then error(sopts, 0) end
    for _, size in ipairs(sizes) do
      local r, err = sim.time(v, plan, sopts, p, so, size)
      if not r then error(err, 0) end
      results[#results + 1] = r
      table.insert(series[#series].points, { size = size, busbw = r.busbw_gbps })
    end
  end
  local last = {} -- each variant's result at the largest size
  for _, r in ipairs(results) do last[r.variant] = r end
  if o.trace then sim.write_trace(o.trace, last.ours) end
  if o.svg then
    local what = ("%s on %s"):format(alg.name, topo:info().spec)
    if o.sweep then sim.write_sweep(o.svg, series, what .. ": busbw vs size")
    else sim.write_timeline(o.svg, last.ours, ("%s, %s, %s TBs, %s"):format(what, sim.fmt_size(sizes[1]),
      last.ours.tb_policy, last.ours.order == "task" and "task-level" or "algorithm-level")) end
  end
  if o.json then
    local r = report.new(alg, prog, topo)
    r.verify = "ok" -- the simulator runs verified plans only
    r.sim = sim.json_result(last.ours)
    if o.baseline then r.baseline = sim.json_result(last[o.baseline]) end
    if o.sweep then
      r.sweep = {}
      for _, x in ipairs(results) do
        r.sweep[#r.sweep + 1] = { variant = x.variant, size_bytes = x.size_bytes, time_us = x.time_us,
          algbw_gbps = x.algbw_gbps, busbw_gbps = x.busbw_gbps, tb_busy_avg = x.tb_busy_avg,
          tb_idle_avg = x.tb_idle_avg, tb_idle_max = x.tb_idle_max }
      end
    end
    print(report.json(r))
    return 0
  end
  local u = last.ours
  print(("# %s (%s) on %s, %d ranks; tile %s, FIFO depth %d"):format(alg.name, prog:info().collective,
    topo:info().spec, prog:info().ranks, sim.fmt_size(tile), u.depth))
  for _, v in ipairs(variants) do
    local x = last[v]
    print(("# %-6s %s schedule, %s TBs, %s execution, %d instance(s)%s%s%s"):format(v, x.sched, x.tb_policy,
      x.order == "task" and "task-level" or "algorithm-level", x.instances,
      x.slowdown > 0 and (", interpreter -%.1f%%"):format(100 * x.slowdown) or "",
      x.ce_copies > 0 and (", %d copies on the copy engine"):format(x.ce_copies) or "",
      x.pulls > 0 and (", %d pulls"):format(x.pulls) or ""))
  end
  print(sim.header())
  for _, r in ipairs(results) do print(sim.row(r)) end
  if o.baseline then
    local b = last[o.baseline]
    print(("# ours / %s at %s: %.2fx busbw, %d vs %d TBs per rank"):format(o.baseline,
      sim.fmt_size(u.size_bytes), u.busbw_gbps / b.busbw_gbps, u.tbs_per_rank_max, b.tbs_per_rank_max))
  end
  return 0
end

return M
