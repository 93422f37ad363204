--- Shared spec utilities: run the CLI, strip tracebacks, locate files.
local M = {}

--- Every shipped algorithm, by name (algorithms/NAME.lua).
M.algorithms = { "allgather_ring", "reducescatter_ring", "allreduce_ring", "allgather_hm", "allreduce_hm",
  "allgather_allpairs", "alltoall_direct", "allreduce_rd", "allreduce_allpairs" }

--- The resccl binary under test (CTest sets RESCCL_BIN).
M.bin = os.getenv "RESCCL_BIN" or "build/resccl"

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- Run `resccl args...`; returns exit code, stdout, stderr.
---@param args string[]
---@param env string|nil extra environment, e.g. "RESCCL_BUDGET=1"
function M.cli(args, env)
  local q = {}
  for i, a in ipairs(args) do q[i] = shell_quote(a) end
  local errf = os.tmpname()
  local cmd = ("%s %s %s 2>%s"):format(env or "", shell_quote(M.bin), table.concat(q, " "), errf)
  local p = assert(io.popen(cmd, "r"))
  local out = p:read "a"
  local _, _, code = p:close()
  local f = assert(io.open(errf))
  local err = f:read "a"
  f:close()
  os.remove(errf)
  return code, out, err
end

--- The message of a failed pcall, without a traceback.
function M.pcall_err(fn, ...)
  local ok, err = pcall(fn, ...)
  assert(not ok, "expected an error")
  return (tostring(err):gsub("\nstack traceback:.*", ""))
end

--- Compile every placement an imported algorithm supports and run it on the
--- host executor at `count`: "ok", the verifier's message or "N wrong", comma-separated.
function M.import_verdict(i, count)
  local resccl = require "resccl"
  local alg = require("resccl.import").algorithm(i)
  local prog, topo = alg:program {}
  local out = {}
  for _, inplace in ipairs { false, true } do
    if not inplace or alg.inplace then
      local plan, err = resccl.compile(prog, topo, { inplace = inplace })
      if err then
        out[#out + 1] = err
      else
        local r = assert(plan:exec { count = count, nmicro = 2 })
        out[#out + 1] = r.wrong == 0 and "ok" or (r.wrong .. " wrong")
      end
    end
  end
  return table.concat(out, ",")
end

--- Write a whole file.
function M.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

--- Read a whole file.
function M.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read "a"
  f:close()
  return s
end

return M
