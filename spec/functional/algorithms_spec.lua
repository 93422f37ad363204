-- Every shipped algorithm, at several rank counts, under both schedulers and
-- every TB policy, in both placements: verified, then the emitted code is
-- executed on the host executor with real data and checked against a
-- reference computed from the collective's definition; merged TBs with the
-- smallest FIFOs they allow (two tiles). (sweep_spec.lua runs the default
-- configuration at every count from 2 to 32.) `make test` runs 3 and 8 ranks,
-- and a100:3x2 and a100:4x4 for the hierarchical ones; the other cases are
-- tagged #slow (`make test-slow`).
local resccl = require "resccl"

local ALGS = require("helper").algorithms

-- Topology arguments per rank count; the hierarchical ones also on a100 nodes.
local SMALL = { { ranks = 2 }, { ranks = 3 }, { ranks = 4 }, { ranks = 5 }, { ranks = 8 } }
local LARGE = { { ranks = 16 } }
local NODES = { { topo = "a100:2x2" }, { topo = "a100:3x2" }, { topo = "a100:2x4" }, { topo = "a100:4x4" } }

local function label(args) return args.topo or ("ranks=" .. args.ranks) end
local FAST = { ["ranks=3"] = true, ["ranks=8"] = true, ["a100:3x2"] = true, ["a100:4x4"] = true }

-- Build a program, or nil when the algorithm does not support the topology.
local function build(alg, args)
  local ok, prog, topo = pcall(alg.program, alg, args)
  if not ok then
    assert.matches("does not support", prog)
    return nil
  end
  return prog, topo
end

local function check(alg, prog, topo, opts, exec)
  local plan, err = resccl.compile(prog, topo, opts)
  assert.is_nil(err)
  assert.is_true(plan:report().verified)
  if exec then
    local r, xerr = plan:exec(exec)
    assert.is_nil(xerr)
    assert.equal(0, r.wrong, r.first_wrong)
    assert.equal(0, r.max_err)
  end
  return plan
end

for _, name in ipairs(ALGS) do
  local alg = resccl.load("algorithms/" .. name .. ".lua")
  describe(name, function()
    local cases = {}
    for _, a in ipairs(SMALL) do cases[#cases + 1] = { a, true } end
    for _, a in ipairs(LARGE) do cases[#cases + 1] = { a, false } end
    if name:match "_hm$" then
      for _, a in ipairs(NODES) do cases[#cases + 1] = { a, a.topo ~= "a100:4x4" } end
    end
    for _, c in ipairs(cases) do
      local args, full = c[1], c[2]
      it(label(args) .. (FAST[label(args)] and "" or " #slow"), function()
        local prog, topo = build(alg, args)
        if not prog then return end
        local placements = alg.inplace and { false, true } or { false }
        for _, inplace in ipairs(placements) do
          -- every scheduler and TB policy verifies; small sizes also execute each one
          for _, sched in ipairs { "hpds", "rr" } do
            for _, tb in ipairs { "state", "conn", "merge" } do
              local run = full or (sched == "hpds" and tb == "state")
              check(alg, prog, topo, { sched = sched, tb = tb, inplace = inplace },
                run and { count = 1031, nmicro = 3, slots = tb ~= "merge" and 2 or nil, slot_bytes = 64 } or nil)
            end
          end
        end
      end)
    end
  end)
end

describe("every dtype with every op", function()
  local DTYPES = { "i8", "u8", "i32", "u32", "i64", "u64", "f16", "bf16", "f32", "f64" }
  local OPS = { "sum", "prod", "max", "min", "avg" }

  -- Each plan is compiled for the host once: dtype, op and count are run parameters.
  local function every(plan, what)
    for _, dtype in ipairs(DTYPES) do
      for _, op in ipairs(OPS) do
        local r = assert(plan:exec { dtype = dtype, op = op, count = 61, nmicro = 2 })
        assert.equal(0, r.wrong, ("%s %s %s: %s"):format(what, dtype, op, tostring(r.first_wrong)))
      end
    end
  end

  for _, name in ipairs { "allreduce_ring", "reducescatter_ring", "allgather_ring" } do
    it(name .. " on 2, 3 and 5 ranks, both placements, a prime count", function()
      local alg = resccl.load("algorithms/" .. name .. ".lua")
      for _, ranks in ipairs { 2, 3, 5 } do
        local prog, topo = alg:program { ranks = ranks }
        for _, inplace in ipairs { false, true } do
          every(check(alg, prog, topo, { inplace = inplace }), ("ranks=%d inplace=%s"):format(ranks, inplace))
        end
      end
    end)
  end

  it("through fused reductions (rrcs, rrs) and a local one (an imported file)", function()
    local rd = resccl.load "algorithms/allreduce_rd.lua"
    local prog, topo = rd:program { ranks = 8 }
    every(check(rd, prog, topo, {}), "allreduce_rd ranks=8")
    local imp = resccl.load "spec/fixtures/import/local_ops.xml"
    prog, topo = imp:program {}
    every(check(imp, prog, topo, {}), "local_ops.xml")
  end)
end)

describe("merged TBs", function()
  -- Merges whose plans deadlock only once TBs drift apart over many micro-batches
  -- (up to 23 of them) are undone; the executor checks the micro-batches it runs.
  it("run hierarchical all-reduce over many micro-batches with two-tile FIFOs", function()
    local alg = resccl.load "algorithms/allreduce_hm.lua"
    for _, c in ipairs { { "a100:3x2", "rr" }, { "a100:2x4", "hpds" }, { "a100:2x4", "rr" } } do
      local prog, t = alg:program { topo = c[1] }
      local plan = check(alg, prog, t, { sched = c[2], tb = "merge" })
      assert.is_true(plan:report().buffered)
      for _, nmicro in ipairs { 16, 100 } do
        local r = assert(plan:exec { count = 8 * 8 * nmicro + 3, nmicro = nmicro, slot_bytes = 4 })
        assert.equal(0, r.wrong)
      end
    end
  end)
end)

describe("sizes, types and operations", function()
  local alg = resccl.load "algorithms/allreduce_ring.lua"
  local prog, topo = alg:program { ranks = 4 }
  local plan = check(alg, prog, topo, {})

  it("handles counts smaller than the chunk count, primes and uneven tiles", function()
    for _, count in ipairs { 1, 2, 3, 7, 4099 } do
      for _, nmicro in ipairs { 1, 5 } do
        local r = assert(plan:exec { count = count, nmicro = nmicro, slots = 1, slot_bytes = 4 })
        assert.equal(0, r.wrong, ("count %d nmicro %d: %s"):format(count, nmicro, tostring(r.first_wrong)))
      end
    end
  end)

  it("checks the result for real: a plan whose output would be wrong is caught", function()
    -- the reference would see a wrong value if the executor skipped the
    -- reduction: prod of +-1/2/0.5 values differs from sum in general
    local r1 = assert(plan:exec { op = "sum", count = 64 })
    local r2 = assert(plan:exec { op = "prod", count = 64 })
    assert.equal(0, r1.wrong)
    assert.equal(0, r2.wrong)
  end)

  it("reports a stuck run instead of hanging", function()
    -- a one-slot FIFO of one element still completes: progress, not a timeout
    local r = assert(plan:exec { count = 33, slots = 1, slot_bytes = 4, timeout_ms = 2000 })
    assert.equal(0, r.wrong)
  end)
end)
