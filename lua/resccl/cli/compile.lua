--- resccl compile and resccl verify.
local core = require "resccl.core"
local args = require "resccl.cli.args"
local plans = require "resccl.cli.plans"
local report = require "resccl.cli.report"

local M = {}

--- Compile one placement and report it: the plan, its statistics, a stage
--- (--dump), the emitted code (--emit), JSON; or write the plan file
--- (--plan), every placement.
function M.compile(o)
  if o.stop_after and o.stop_after ~= "verify" and (o.plan or o.emit) then
    return args.usage_error(("--stop-after %s: %s needs a verified plan"):format(o.stop_after,
      o.plan and "--plan" or "--emit"))
  end
  local alg, prog, topo = plans.build(o)
  if o.plan then
    plans.write(o, alg, prog, topo, o.plan)
    return 0
  end
  local plan, err = plans.compile(o, prog, topo, o.inplace or false)
  if o.json then
    -- what every GPU compiles: each rank's kernel, emitted on its own
    local emitted = plan and o.emit and not err and 0
    for rank = 0, emitted and prog:info().ranks - 1 or -1 do emitted = emitted + #plan:emit(o.emit, rank) end
    local r = report.new(alg, prog, topo, plan, err)
    r.emit_bytes, r.parse_ms = emitted or nil, o.parse_ms
    print(report.json(r))
    return err and 1 or 0
  end
  if o.dump then
    if not plan then error(err, 0) end
    local ok, text = pcall(plan.dump, plan, o.dump)
    if not ok then error(err or text, 0) end
    io.write(text)
    if err then io.stderr:write("resccl: ", err, "\n") end
    return err and 1 or 0
  end
  if err then error(err, 0) end
  if o.emit then
    io.write(plan:emit(o.emit))
    return 0
  end
  print(plan)
  local r = plan:report()
  local ms = {}
  for _, s in ipairs(core.names.stage) do
    if r.stage_ms[s] then ms[#ms + 1] = ("%s %.1f"):format(s, r.stage_ms[s]) end
  end
  print(("compile time %.1f ms (%s)"):format(r.compile_ms, table.concat(ms, ", ")))
  return 0
end

--- Compile and verify each placement the algorithm has.
function M.verify(o)
  local alg, prog, topo = plans.build(o)
  local bad, out = 0, {}
  for _, inplace in ipairs { false, true } do
    if inplace and not alg.inplace then
      out[#out + 1] = { placement = "in-place", verify = "not supported by this algorithm" }
    else
      local plan, err = plans.compile(o, prog, topo, inplace)
      if err then bad = bad + 1 end
      out[#out + 1] = { placement = inplace and "in-place" or "out-of-place", verify = err or "ok",
        tasks = plan and plan:report().tasks }
    end
  end
  if o.json then
    local r = report.new(alg, prog, topo)
    r.verify = bad == 0 and "ok" or (out[1].verify ~= "ok" and out[1].verify or out[2].verify)
    r.placements = out
    print(report.json(r))
  else
    for _, p in ipairs(out) do print(("%-13s %s"):format(p.placement, p.verify)) end
  end
  return bad == 0 and 0 or 1
end

return M
