-- Every shipped algorithm at every rank count it supports from 2 to 32:
-- verified (both placements), and the emitted code executed on real data.
-- The hierarchical ones run on a100 nodes of 2, 4 or 8 GPUs where the count
-- allows, else on one flat node. 1024 ranks compile-only: tools/dev/compile-bench.
-- `make test` runs 2, 7 and 12 ranks; the other counts are tagged #slow
-- (`make test-slow`).
local resccl = require "resccl"

local ALGS = require("helper").algorithms

local function args_for(name, n)
  if name:match "_hm$" then
    for _, g in ipairs { 8, 4, 2 } do
      if n % g == 0 and n > g then return { topo = ("a100:%dx%d"):format(n // g, g) } end
    end
  end
  return { ranks = n }
end

local FAST, REST = {}, {}
for n = 2, 32 do
  local counts = (n == 2 or n == 7 or n == 12) and FAST or REST
  counts[#counts + 1] = n
end

for _, name in ipairs(ALGS) do
  local alg = resccl.load("algorithms/" .. name .. ".lua")
  local function sweep(counts)
    local ran, powers = 0, 0
    for _, n in ipairs(counts) do
      if n & (n - 1) == 0 then powers = powers + 1 end
      local ok, prog, topo = pcall(alg.program, alg, args_for(name, n))
      if ok then
        for _, inplace in ipairs(alg.inplace and { false, true } or { false }) do
          local plan, err = resccl.compile(prog, topo, { inplace = inplace })
          assert.is_nil(err, ("%s ranks=%d: %s"):format(name, n, tostring(err)))
          local r, xerr = plan:exec { count = 97 + n, nmicro = 2, slots = 2, slot_bytes = 32 }
          assert.is_nil(xerr, xerr)
          assert.equal(0, r.wrong, ("%s ranks=%d: %s"):format(name, n, tostring(r.first_wrong)))
        end
        ran = ran + 1
      else
        assert.matches("does not support", prog)
      end
    end
    -- recursive doubling takes powers of two, the others every count
    assert.is_true(ran >= (name == "allreduce_rd" and powers or #counts))
  end
  it(name .. " at 2, 7 and 12 ranks", function() sweep(FAST) end)
  it(name .. " at the other counts up to 32 #slow", function() sweep(REST) end)
end
