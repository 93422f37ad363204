--- What the commands share between a FILE and its plans: loading and
--- building the program, the options every compile takes, plan files.
local resccl = require "resccl"
local output = require "resccl.output"
local core = resccl.core

local M = {}

--- Load and build the program; errors carry file:line already. --inplace
--- needs an algorithm with an in-place form.
---@return table alg, userdata prog, userdata topo
function M.build(o)
  if not o.file then error("a FILE is needed", 0) end
  local t0 = core.clock()
  local alg = resccl.load(o.file)
  if o.inplace and not alg.inplace then
    error(("%s:%d: algorithm %s does not support in-place buffers"):format(alg.file, alg.line, alg.name), 0)
  end
  local prog, topo = alg:program(o.args)
  o.parse_ms = core.clock() - t0
  return alg, prog, topo
end

--- core.compile's options from the command line's, for one placement.
function M.options(o, inplace)
  return { sched = o.sched, tb = o.tb, fuse = o.fuse, inplace = inplace, stop_after = o.stop_after, order = o.order,
    ce = o.ce, pull = o.pull }
end

--- Compile one placement: plan | plan, message | nil, message (core.compile).
function M.compile(o, prog, topo, inplace)
  return resccl.compile(prog, topo, M.options(o, inplace))
end

--- Write the plan file the GPU runtime loads: every placement the algorithm
--- has, with the forms src/artifact.c decides (core.plan_file); written
--- whole or not at all.
function M.write(o, alg, prog, topo, path)
  local opts = M.options(o, alg.inplace)
  local text, err = core.plan_file(prog, topo, opts)
  if not text then error(err, 0) end
  output.write(path, text)
end

return M
