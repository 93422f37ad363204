-- resccl repl: expressions echo, multi-line input, compact object summaries.
local h = require "helper"

-- The REPL on input; its history goes to `history` (a file of its own by default, never ~'s).
local function repl(input, history)
  local path, hist = os.tmpname(), history or os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(input)
  f:close()
  local p = assert(io.popen(("RESCCL_HISTORY=%s %s repl <%s 2>&1"):format(hist, h.bin, path)))
  local out = p:read "a"
  local _, _, code = p:close()
  os.remove(path)
  if not history then os.remove(hist) end
  return code, out
end

describe("resccl repl", function()
  it("echoes expressions and prints Program, Schedule and Plan summaries", function()
    local code, out = repl [[
p = resccl.plan("algorithms/allgather_ring.lua", {ranks=4})
p
p:schedule()
resccl.load("algorithms/allreduce_ring.lua"):program{ranks=3}
core.topo("a100:2x4")
]]
    assert.equal(0, code)
    assert.matches("Plan allgather_ring: out%-of%-place, 4 ranks, 16 tasks, 3 sub%-pipelines %(hpds%), 8 TBs, " ..
      "at most 2 per rank %(state%), verified", out)
    assert.matches("Schedule hpds: 16 tasks in 3 sub%-pipelines", out)
    assert.matches("Program allreduce_ring: allreduce on 3 ranks, 3 chunks per block, 15 transfers", out)
    assert.matches("Topo a100:2x4: 2 nodes x 4 GPUs", out)
  end)

  it("keeps its history across sessions (RESCCL_HISTORY, else ~/.resccl_history)", function()
    local hist = os.tmpname()
    os.remove(hist)
    assert.equal(0, (repl("1 + 1\n'one'\n", hist)))
    assert.equal(0, (repl("'two'\n", hist)))
    local f = io.open(hist)
    local text = f and f:read "a" or ""
    if f then f:close() end
    os.remove(hist)
    assert.equal("1 + 1\n'one'\n'two'\n", text)
  end)

  it("continues incomplete input and survives errors", function()
    local code, out = repl "1 +\n 2\nfor i = 1, 2 do\n print('i' .. i)\nend\nnosuch.x\n'still here'\n"
    assert.equal(0, code)
    assert.matches("\n3\n", out)
    assert.matches("i1\n.*i2\n", out)
    assert.matches("attempt to index a nil value %(global 'nosuch'%)", out)
    assert.matches("still here", out)
  end)
end)
