--- resccl run: compile, verify and execute each placement with real data,
--- checked against a reference, then time the out-of-place plan.
local core = require "resccl.core"
local args = require "resccl.cli.args"
local plans = require "resccl.cli.plans"
local report = require "resccl.cli.report"

local M = {}

-- The short name of a dtype= or op= argument ("half" -> "f16"); nil when absent.
local function exec_name(key, value, parse)
  if value == nil then return nil end
  local name, expected = parse(value)
  if not name then error(("argument %s=%s: %s"):format(key, value, expected), 0) end
  return name
end

-- plan:exec's arguments. The default count is the first multiple of the
-- chunks per block from 4099 (a prime): every chunk then has one size, as a
-- transfer between chunks at different places in a block needs, and the
-- last slab still ends part-way through a vector.
local function exec_args(o, chunks)
  local a = o.args
  return {
    count = a.count or (4099 + chunks - 1) // chunks * chunks, nmicro = a.nmicro or core.defaults.exec_nmicro,
    dtype = exec_name("dtype", a.dtype, core.dtype), op = exec_name("op", a.op, core.redop),
    slots = a.slots, slot_bytes = a.slot_bytes, timeout_ms = a.timeout_ms,
    gpu = o.gpu, ndev = a.ndev, iters = a.iters or (o.gpu and 5 or nil),
    threads = a.threads, channels = a.channels, direct = a.direct ~= false,
  }
end

--- Where `run` executes: --gpu or --host, else RESCCL_RUN, else on the GPUs
--- where the GPU runtime sees one, as the collective would run there. Each
--- placement is compiled once, and the other TB policy's plan once, for its
--- TB counts.
function M.run(o)
  local env = os.getenv "RESCCL_RUN" or ""
  if o.gpu == nil and env ~= "" then
    if env ~= "gpu" and env ~= "host" then
      return args.usage_error(("RESCCL_RUN=%s: gpu or host expected"):format(env))
    end
    o.gpu = env == "gpu"
  elseif o.gpu == nil then
    o.gpu = core.gpus() > 0
  end
  local alg, prog, topo = plans.build(o)
  local p, t = prog:info(), topo:info()
  local plan, err = plans.compile(o, prog, topo, false)
  -- TB counts side by side with another policy: connection-based for state-based, else state-based
  local other_tb = o.tb == "state" and "conn" or "state"
  local other = core.compile(prog, topo, { sched = o.sched, tb = other_tb, fuse = o.fuse, order = o.order })
  local r = report.new(alg, prog, topo, plan, err)
  local ok = err == nil
  local ea = exec_args(o, p.chunks)
  local placed = { [false] = { plan, err } }
  if alg.inplace then placed[true] = { plans.compile(o, prog, topo, true) } end
  r.execute = {}
  for _, inplace in ipairs { false, true } do
    local name = inplace and "in-place" or "out-of-place"
    local e = { placement = name }
    if inplace and not alg.inplace then
      e.skipped = "not supported by this algorithm"
    else
      local pl, perr = placed[inplace][1], placed[inplace][2]
      if perr then
        e.error, ok = perr, false
      else
        e.tasks = pl:report().tasks
        -- on GPUs, the other placement's kernel is built alongside (in parallel, then cached for its run)
        ea.with = o.gpu and placed[not inplace] and placed[not inplace][1] or nil
        local res, xerr = pl:exec(ea)
        if not res then
          e.error, ok = xerr, false
        else
          e.max_err, e.wrong, e.ms, e.first_wrong, e.ndev = res.max_err, res.wrong, res.ms, res.first_wrong, res.ndev
          e.backend = res.ndev and "gpu" or "host"
          if res.wrong > 0 then ok = false end
        end
      end
    end
    r.execute[#r.execute + 1] = e
  end
  local by = { [o.tb] = r, [other_tb] = other and other:report() or {} }
  r["tbs_per_rank_max_" .. other_tb] = by[other_tb].tbs_per_rank_max
  r["tbs_per_rank_max_" .. o.tb] = r.tbs_per_rank_max
  r.result = ok and "pass" or "fail"
  if o.json then
    print(report.json(r))
    return ok and 0 or 1
  end
  local line = report.line
  line("algorithm", ("%s (%s)"):format(alg.name, alg.file))
  line("collective", ("%s, %d ranks on %s (%d x %d), %d chunks per block"):format(p.collective, p.ranks, t.spec,
    t.nodes, t.gpn, p.chunks))
  line("tasks", ("%s (out-of-place); %d transfers recorded"):format(r.tasks or "-", p.transfers))
  line("schedule", ("%s: %s sub-pipelines"):format(o.sched, r.subpipelines or "-"))
  line("TBs/rank", ("%s %s, %s %s (max over ranks; totals %s vs %s)"):format(report.NAMED[o.tb],
    r.tbs_per_rank_max or "-", report.NAMED[other_tb], by[other_tb].tbs_per_rank_max or "-", r.tbs_total or "-",
    by[other_tb].tbs_total or "-"))
  line("verify", err or "ok (post-condition, connection order, no deadlock)")
  for _, e in ipairs(r.execute) do
    local what
    if e.skipped then what = "skipped: " .. e.skipped
    elseif e.error then what = "FAILED: " .. e.error
    else
      what = ("%s %s count=%d nmicro=%d: max error %g, %d wrong (%.3f ms %s)%s"):format(ea.dtype or "f32",
        ea.op or "sum", ea.count, ea.nmicro, e.max_err, e.wrong, e.ms, e.ndev and ("on " .. e.ndev .. " GPU"
        .. (e.ndev > 1 and "s" or "")) or "on the host", e.first_wrong and ("; first: " .. e.first_wrong) or "")
    end
    line(e.placement == "in-place" and "exec inplace" or "exec", what)
  end
  if plan and not err then
    -- the out-of-place plan as it ran, timed on its topology
    local sim = require "resccl.sim"
    local s, serr = sim.run("ours", prog, topo, {}, sim.SIZE, plan)
    line("sim", s and ("%s on %s: %.1f us, algbw %.2f GB/s, busbw %.2f GB/s (tiles of %s, %d micro-batches)"):format(
      sim.fmt_size(sim.SIZE), t.spec, s.time_us, s.algbw_gbps, s.busbw_gbps, sim.fmt_size(s.tile_bytes), s.nmicro)
      or serr)
  end
  line("result", ok and "PASS" or "FAIL")
  return ok and 0 or 1
end

return M
