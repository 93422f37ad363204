--- resccl's Lua API (docs/lua-api.md): the DSL (resccl.dsl), the limits
--- scripts run under (resccl.sandbox) and the core (resccl.core), with two
--- shortcuts to compile.
local core = require "resccl.core"
local dsl = require "resccl.dsl"
local sandbox = require "resccl.sandbox"

local M = {
  version = core.version, core = core, limits = sandbox.limits,
  algorithm = dsl.algorithm, builder_program = dsl.builder_program, topology = dsl.topology, load = dsl.load,
  run_file = dsl.run_file, RUN_ARGS = dsl.RUN_ARGS,
}

--- Compile a program for one placement; returns plan or plan/nil, message.
---@param prog userdata
---@param topo userdata
---@param opts table|nil {sched=, tb=, inplace=, fuse=, order=, ce=, pull=, stop_after=}
function M.compile(prog, topo, opts)
  return core.compile(prog, topo, opts or {})
end

--- Load, build and compile in one call (handy in the REPL):
--- resccl.plan("algorithms/allreduce_ring.lua", {ranks=8}, {sched="rr"})
function M.plan(path, args, opts)
  local alg = M.load(path)
  local prog, topo = alg:program(args or {})
  return M.compile(prog, topo, opts)
end

return M
