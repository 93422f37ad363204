-- src/sim.c through plan:sim, lua/resccl/sim.lua and lua/resccl/topo.lua.
local resccl = require "resccl"
local sim = require "resccl.sim"
local topo = require "resccl.topo"
local h = require "helper"

local function plan(path, args, opts)
  local p, err = resccl.plan(path, args, opts)
  assert(p and not err, err)
  return p
end

describe("plan:sim", function()
  local p = plan("algorithms/allgather_hm.lua", { topo = "a100:2x4" })

  it("reports time, bandwidths by nccl-tests' formulas and TB fractions", function()
    local r = assert(p:sim { size = 64 << 20 })
    assert.is_true(r.time_us > 0)
    assert.near(r.size_bytes / r.time_us / 1e3, r.algbw_gbps, 1e-9)
    assert.near(r.algbw_gbps * 7 / 8, r.busbw_gbps, 1e-9) -- all-gather: (n-1)/n
    assert.equal(8, r.nmicro) -- 64 MiB / 8 chunks / 1 MiB tiles
    for _, k in ipairs { "tb_busy_avg", "tb_idle_avg", "tb_idle_max", "tb_released_avg" } do
      assert.is_true(r[k] >= 0 and r[k] <= 1, k)
    end
    assert.near(1, r.tb_busy_avg + r.tb_idle_avg, 1e-9)
    for _, tb in ipairs(r.tbs) do
      assert.near(tb.end_us, tb.busy_us + tb.idle_us, 1e-6 * r.time_us)
      assert.is_true(tb.end_us <= r.time_us)
    end
    local nic = 0
    for _, l in ipairs(r.links) do
      assert.is_true(l.util > 0 and l.util <= 1 + 1e-9, l.name)
      if l.name:match "^nic" then nic = nic + 1 end
    end
    assert.equal(8, nic) -- 2 nodes x 2 NICs x (tx, rx)
  end)

  it("uses the all-reduce factor 2(n-1)/n", function()
    local r = assert(plan("algorithms/allreduce_ring.lua", { ranks = 4 }):sim { size = 16 << 20 })
    assert.near(r.algbw_gbps * 1.5, r.busbw_gbps, 1e-9)
  end)

  it("keeps one slice per primitive call when tracing", function()
    local r = assert(p:sim { size = 8 << 20, trace = true })
    local calls = 0
    for _, rep in ipairs { p:report() } do calls = rep.primitives * r.nmicro end
    assert.equal(calls, #r.slices)
    for _, s in ipairs(r.slices) do assert.is_true(s.t1 >= s.t0 and s.t0 >= 0) end
  end)

  it("runs the connection-based plan algorithm-level with instances", function()
    local c = plan("algorithms/allgather_hm.lua", { topo = "a100:2x4" }, { tb = "conn", order = "algorithm" })
    local one = assert(c:sim { size = 64 << 20 })
    local two = assert(c:sim { size = 64 << 20, instances = 2 })
    assert.equal(2 * one.tbs_per_rank_max, two.tbs_per_rank_max)
    assert.equal("algorithm", two.order)
    assert.are_not.equal(one.time_us, two.time_us)
  end)

  it("runs the order the plan was verified for, never another", function()
    assert.equal("task", assert(p:sim { size = 8 << 20 }).order)
    assert.equal("plan:sim runs the plan's own order; compile with order= to change it",
      h.pcall_err(p.sim, p, { order = "algorithm" }))
  end)

  it("rejects bad options", function()
    local _, err = p:sim { size = 0 }
    assert.matches("simulation needs size > 0", err)
    _, err = p:sim { size = 256 << 20, tile = 1 }
    assert.matches("size 268435456 bytes in tiles of 1 makes more than 65536 micro%-batches", err)
    assert.matches("option instances must be an integer from 1 to 1024", h.pcall_err(p.sim, p, { instances = 3e9 }))
    assert.matches("bad argument #1 to '%?' %(resccl.Plan expected, got table%)", h.pcall_err(p.sim, {}, {}))
  end)
end)

describe("baselines", function()
  it("give the MSCCL model 2 channels of connection-based TBs", function()
    local prog, t = resccl.load("algorithms/allgather_hm.lua"):program { topo = "a100:4x8" }
    local r = assert(sim.run("msccl", prog, t, { inplace = true }, 64 << 20))
    assert.equal(30, r.tbs_per_rank_max) -- the paper's Table 3 MSCCL row, Topo4
    local one = resccl.compile(prog, t, { tb = "conn", order = "algorithm", inplace = true })
    assert.equal(2 * one:report().tbs_per_rank_max, r.tbs_per_rank_max)
    assert.equal("conn", r.tb_policy)
    assert.equal("algorithm", r.order)
  end)

  it("run NCCL's ring for the collective, channels spread over the NICs", function()
    local prog, t = resccl.load("algorithms/allgather_hm.lua"):program { topo = "a100:2x8" }
    local r = assert(sim.run("nccl", prog, t, {}, 64 << 20))
    assert.equal("allgather_ring", r.algorithm)
    assert.equal(8, r.instances) -- two rings per NIC, 4 NICs per node
    local nics = {}
    for _, l in ipairs(r.links) do if l.name:match "^nic%d+%.tx" then nics[#nics + 1] = l end end
    assert.equal(8, #nics) -- every NIC carries a ring
  end)
end)

describe("HPDS against round-robin (Fig. 10b)", function()
  local function both(alg, spec)
    local r = {}
    for _, s in ipairs { "rr", "hpds" } do
      local p = plan("algorithms/" .. alg .. ".lua", { topo = spec }, { sched = s, inplace = true })
      r[s] = { sched = p:dump("sched"):gsub("^sched %a+", ""), time = assert(p:sim { size = 32 << 20 }).time_us }
    end
    return r.rr, r.hpds
  end

  it("give one pipeline for HM all-gather on two nodes, whose chunks all have the same DAG", function()
    local rr, hpds = both("allgather_hm", "a100:2x4")
    assert.equal(rr.sched, hpds.sched) -- equal priorities, ties to the lower chunk: round-robin's order
    assert.equal(rr.time, hpds.time)
  end)

  it("part on four nodes and on HM all-reduce, where the order matters", function()
    for _, c in ipairs { { "allgather_hm", "a100:4x4" }, { "allreduce_hm", "a100:2x4" } } do
      local rr, hpds = both(c[1], c[2])
      assert.are_not.equal(rr.sched, hpds.sched)
      assert.are_not.equal(rr.time, hpds.time, c[1] .. " on " .. c[2])
    end
  end)
end)

describe("topologies", function()
  it("document the presets' numbers", function()
    local a = topo.params "a100:2x4"
    assert.same({ 2, 4, 2, 240, 22.5 }, { a.nodes, a.gpn, a.gpus_per_nic, a.intra_gbps, a.nic_gbps })
    local h2 = topo.params "h200:2"
    assert.same({ 370, 46, 24, 8 }, { h2.intra_gbps, h2.tb_gbps, h2.tb_reduce_gbps, h2.intra_sat })
    assert.equal(16, topo.params("dgx_h100:2").gpn * 2)
    assert.equal(1, topo.params("ndv4:2").gpus_per_nic)
  end)

  it("build custom topologies and refuse unreachable pairs", function()
    local t = topo.custom { base = "a100:2x4", nic_gbps = 50 }
    assert.equal(50, t:params().nic_gbps)
    assert.equal(8, t:info().ranks)
    assert.matches("ranks 0 and 4 cannot reach each other %(no NIC between nodes%)",
      h.pcall_err(topo.custom, { nodes = 2, gpn = 4, intra_gbps = 100 }))
    -- numbers first: a bad one is not taken for a missing link
    assert.matches("custom': nic_gbps must be a finite number >= 0, got %-45$",
      h.pcall_err(topo.custom, { base = "a100:2x4", nic_gbps = -45 }))
    assert.matches("option nodes must be an integer from 0 to 65536", h.pcall_err(topo.custom, { nodes = 1e20, gpn = 2 }))
    assert.matches("custom': nic_gbps must be a finite number >= 0, got %-?nan$",
      h.pcall_err(topo.custom, { base = "a100:2x4", nic_gbps = 0 / 0 }))
    assert.matches("custom': alpha_us must be a finite number >= 0, got inf$",
      h.pcall_err(topo.custom, { base = "a100:2x4", alpha_us = math.huge }))
    assert.matches("unknown topology field 'nics'", h.pcall_err(topo.custom, { nodes = 1, gpn = 2, nics = 1 }))
    assert.matches("unknown model 'v100'", h.pcall_err(topo.custom, { base = "v100:8" }))
  end)

  it("route intra-node transfers through switch ports", function()
    local r = assert(plan("algorithms/allgather_allpairs.lua", { ranks = 4 }):sim { size = 64 << 20 })
    for _, l in ipairs(r.links) do assert.matches("^gpu%d+%.[rt]x$", l.name) end
  end)
end)

describe("sizes", function()
  it("parse like nccl-tests and sweep powers of two", function()
    assert.equal(256 << 20, sim.parse_size "256M")
    assert.equal(1536, sim.parse_size "1.5K")
    assert.equal(8, sim.parse_size "8")
    assert.is_nil(sim.parse_size "lots")
    -- what resccl prints reads back; K, KiB and KB alike (src/setting.c)
    assert.equal(256 << 20, sim.parse_size(sim.fmt_size(256 << 20)))
    assert.equal(1 << 30, sim.parse_size "1GiB")
    assert.equal(1 << 30, sim.parse_size "1gb")
    assert.same({ nil, "--size 1X: not a size (examples: 64, 64K, 1MiB, 2G)" }, { sim.parse_size("1X", "--size") })
    -- whole bytes, from 1 to 2^50: no float, no wrap-around
    assert.equal("integer", math.type(sim.parse_size "1.5K"))
    assert.is_nil(sim.parse_size "1.5")
    assert.is_nil(sim.parse_size "0")
    assert.equal(1 << 50, sim.parse_size "1024T")
    assert.is_nil(sim.parse_size "1025T")
    assert.is_nil(sim.parse_size "99999999999999999999")
    assert.is_nil(sim.parse_size "16777216T") -- 2^64 bytes, 0 in integers
    assert.same({ 1 << 20, 2 << 20, 4 << 20 }, sim.parse_sweep "1M:4M")
    assert.is_nil(sim.parse_sweep "4M:1M")
    assert.equal("1.5 GiB", sim.fmt_size(3 << 29))
  end)
end)
