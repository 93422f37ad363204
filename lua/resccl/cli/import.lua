--- resccl import: read an MSCCL XML, TACCL, TE-CCL or MSCCL++ JSON file,
--- compile it our way and report, beside the file's own schedule; -o writes
--- it as a ReSCCLang program.
local core = require "resccl.core"
local output = require "resccl.output"
local plans = require "resccl.cli.plans"
local report = require "resccl.cli.report"

local M = {}

function M.import(o)
  if not o.file then error("a FILE is needed", 0) end
  local import = require "resccl.import"
  local imp = import.read(o.file)
  local alg = import.algorithm(imp)
  local prog, topo = alg:program(o.args)
  local t = topo:info()
  local r = {
    source = o.file, format = imp.format, name = imp.name, collective = imp.collective, ranks = imp.ranks,
    chunks_per_block = imp.chunks, transfers = #imp.xfers, topo = t.spec, file_tbs_per_rank = imp.file_tbs,
    warnings = imp.warnings, details = imp.details, placements = {},
  }
  local bad = 0
  for _, inplace in ipairs { false, true } do
    local name = inplace and "in-place" or "out-of-place"
    if inplace and not alg.inplace then
      r.placements[#r.placements + 1] = { placement = name, verify = "not supported by the file" }
    else
      local plan, err = plans.compile(o, prog, topo, inplace)
      local rep = plan and plan:report() or {}
      if err then bad = bad + 1 end
      r.placements[#r.placements + 1] = { placement = name, verify = err or "ok", tasks = rep.tasks,
        tbs_per_rank = rep.tbs_per_rank, tbs_per_rank_max = rep.tbs_per_rank_max }
    end
  end
  r.verify = bad == 0 and "ok" or (r.placements[1].verify ~= "ok" and r.placements[1].verify or r.placements[2].verify)
  if imp.hints then
    -- The baseline: the file's own TBs and steps, run algorithm-level as MSCCL does.
    local plan, err = core.compile(prog, topo, { sched = o.sched, tb = "manual", order = "algorithm",
      inplace = not imp.outofplace })
    r.file_schedule = { verify = err or "ok", placement = imp.outofplace and "out-of-place" or "in-place",
      tbs_per_rank = plan and plan:report().tbs_per_rank }
  end
  if o.output then
    output.write(o.output, import.to_lua(imp))
    r.wrote = o.output
  end
  if o.json then
    print(report.json(r))
    return bad == 0 and 0 or 1
  end
  local line = report.line
  local function list(l)
    if not l then return "-" end
    local mx = 0
    for _, v in ipairs(l) do mx = math.max(mx, v) end
    return ("max %d (%s)"):format(mx, report.per_rank(l))
  end
  line("source", ("%s (%s)"):format(o.file, imp.format))
  line("collective", ("%s, %d ranks, %d chunk%s per block; %s"):format(imp.collective, imp.ranks, imp.chunks,
    imp.chunks == 1 and "" or "s", imp.inplace and (imp.outofplace and "in-place and out-of-place" or "in-place")
    or "out-of-place"))
  local oop = r.placements[1]
  line("tasks", ("%d transfers imported; %s tasks after placement (out-of-place)"):format(#imp.xfers, oop.tasks or "-"))
  line("file TBs", imp.file_tbs and list(imp.file_tbs) or "- (the format has no thread blocks)")
  for _, p in ipairs(r.placements) do
    if p.tbs_per_rank then line("our TBs", ("%s, %s, %s on %s"):format(list(p.tbs_per_rank), report.NAMED[o.tb], p.placement, t.spec)) end
  end
  for _, p in ipairs(r.placements) do line("verify", ("%s: %s"):format(p.placement, p.verify)) end
  if r.file_schedule then
    line("file sched", ("the file's own TBs (--tb manual --order algorithm), %s: %s"):format(r.file_schedule.placement,
      r.file_schedule.verify))
  end
  for _, w in ipairs(imp.warnings) do line("warning", w) end
  if r.wrote then line("wrote", r.wrote) end
  return bad == 0 and 0 or 1
end

return M
