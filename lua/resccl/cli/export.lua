--- resccl export: compile and write the schedule as MSCCL XML.
local args = require "resccl.cli.args"
local output = require "resccl.output"
local plans = require "resccl.cli.plans"
local report = require "resccl.cli.report"

local M = {}

function M.export(o)
  if o.ce then return args.usage_error("export: --ce has no MSCCL form (an MSCCL runtime makes no copy-engine copies)") end
  if o.pull then return args.usage_error("export: --pull has no MSCCL form (an MSCCL runtime reads no peer's buffer)") end
  local alg, prog, topo = plans.build(o)
  local plan, err = plans.compile(o, prog, topo, o.inplace or false)
  if err then error(err, 0) end
  local xml, notes = require("resccl.export.msccl_xml").write(plan, prog,
    { name = alg.name, inplace = o.inplace or false })
  output.write(o.msccl_xml, xml)
  local out = o.msccl_xml == "-" and io.stderr or io.stdout
  if o.json then
    out:write(report.json { algorithm = alg.name, file = o.msccl_xml, notes = notes.lines,
      tbs_per_rank = notes.tbs_per_rank, our_tbs_per_rank = notes.our_tbs_per_rank, steps = notes.steps }, "\n")
  else
    out:write(("wrote %s: %s, %d ranks; MSCCL TBs per rank %s (ours %s)\n"):format(o.msccl_xml, alg.collective,
      prog:info().ranks, report.per_rank(notes.tbs_per_rank), report.per_rank(notes.our_tbs_per_rank)))
    for _, n in ipairs(notes.lines) do out:write("note: ", n, "\n") end
  end
  return 0
end

return M
