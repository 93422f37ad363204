-- resccl sim: tables, JSON, baselines, sweeps, traces, pictures, errors.
local h = require "helper"
local cjson = require "cjson"

describe("resccl sim", function()
  it("prints an nccl-tests-like table with the baseline and the ratio", function()
    local code, out = h.cli { "sim", "algorithms/allgather_hm.lua", "topo=a100:2x4", "--size", "64M", "--baseline",
      "msccl" }
    assert.equal(0, code)
    assert.matches("# allgather_hm %(allgather%) on a100:2x4, 8 ranks; tile 1 MiB, FIFO depth 4", out)
    assert.matches("\n  ours +64 MiB +[%d.]+ +[%d.]+ +[%d.]+ +8 ", out)
    assert.matches("\n  msccl +64 MiB .- +16 ", out)
    assert.matches("# ours / msccl at 64 MiB: [%d.]+x busbw, 8 vs 16 TBs per rank", out)
  end)

  it("times copy-engine and pulling plans as the GPU runtime runs them", function()
    local function sim(alg, size, flag)
      local code, out, err = h.cli { "sim", "algorithms/" .. alg .. ".lua", "ranks=2", "topo=h200:2", "channels=16",
        "--size", size, "--json", flag }
      assert.equal(0, code, err)
      return cjson.decode(out).sim
    end
    -- 2xH200 measured 382-390 GB/s from 1 GiB with no block; the copy engine's ceiling is 397
    local ce = sim("allgather_ring", "1G", "--ce")
    assert.is_true(ce.busbw_gbps > 370 and ce.busbw_gbps < 397, ce.busbw_gbps)
    assert.equal(0, #ce.tbs)
    -- at 1 MiB its fixed cost (two barriers, a copy's start) dominates: 19 GB/s measured
    local small, blocks = sim("allgather_ring", "1M", "--ce"), sim("allgather_ring", "1M")
    assert.is_true(small.busbw_gbps < blocks.busbw_gbps / 4,
      ("%g vs %g"):format(small.busbw_gbps, blocks.busbw_gbps))
    -- a pulling one-shot all-reduce: one TB per rank, under the link's read ceiling (337)
    local pull = sim("allreduce_allpairs", "1G", "--pull")
    assert.is_true(pull.busbw_gbps > 300 and pull.busbw_gbps < 337, pull.busbw_gbps)
    assert.equal(16, pull.tbs_per_rank_max)
    -- a trace and a timeline with no TB at all
    local trace, svg = os.tmpname(), os.tmpname()
    local code, _, err = h.cli { "sim", "algorithms/allgather_ring.lua", "ranks=2", "--ce", "--trace", trace, "--svg",
      svg }
    assert.equal(0, code, err)
    assert.matches('"name":"end"', h.read(trace))
    assert.matches("^<svg", h.read(svg))
    os.remove(trace)
    os.remove(svg)
  end)

  it("refuses copies and pulls across nodes, which the GPU runtime cannot make", function()
    local cases = {
      { "allgather_ring", "--ce", "allgather_ring.lua:%d+: a copy%-engine copy from rank %d+ to rank %d+ crosses nodes" },
      { "allreduce_allpairs", "--pull", "allreduce_allpairs.lua:%d+: rank %d+ pulls from rank %d+, on another node" },
    }
    for _, c in ipairs(cases) do
      local code, _, err = h.cli { "sim", "algorithms/" .. c[1] .. ".lua", "topo=a100:2x4", c[2] }
      assert.equal(1, code)
      assert.matches(c[3], err)
      assert.not_matches("traceback", err)
    end
  end)

  it("runs ours as the GPU runtime does, each TB as channels=K blocks", function()
    local bw = {}
    for _, k in ipairs { 1, 16 } do
      local code, out = h.cli { "sim", "algorithms/allreduce_ring.lua", "ranks=2", "topo=h200:2", "channels=" .. k,
        "--size", "1G", "--json" }
      assert.equal(0, code, out)
      local r = cjson.decode(out)
      bw[k] = r.sim.busbw_gbps
      assert.equal(2 * k, #r.sim.tbs / 2) -- per rank: 2 TBs x K channels
    end
    -- 16 channels reach the link (about 330 GB/s); one channel's two TBs move a 16th of that or more
    assert.is_true(bw[16] > 6 * bw[1] and bw[16] > 300, ("%g vs %g"):format(bw[16], bw[1]))
  end)

  it("adds a sim object to the JSON report", function()
    local code, out = h.cli { "sim", "algorithms/allreduce_hm.lua", "topo=a100:2x4", "--size", "32M", "--json",
      "--baseline", "nccl" }
    assert.equal(0, code)
    local r = cjson.decode(out)
    assert.equal("allreduce_hm", r.algorithm)
    assert.equal("ok", r.verify) -- only verified plans are simulated
    for _, k in ipairs { "size_bytes", "time_us", "algbw_gbps", "busbw_gbps", "tb_busy_avg", "tb_idle_avg",
      "tb_idle_max", "links", "tbs", "nmicro" } do
      assert.is_not_nil(r.sim[k], k)
    end
    assert.equal(32 * 2 ^ 20, r.sim.size_bytes)
    assert.is_true(#r.sim.links > 0 and r.sim.links[1].util > 0)
    assert.equal("allreduce_ring", r.baseline.algorithm)
  end)

  it("sweeps sizes and draws busbw against size", function()
    local svg = os.tmpname()
    local code, out = h.cli { "sim", "algorithms/allgather_ring.lua", "topo=h200:2", "--sweep", "1M:8M", "--svg",
      svg, "--json" }
    assert.equal(0, code)
    local r = cjson.decode(out)
    assert.equal(4, #r.sweep)
    for i = 2, 4 do assert.is_true(r.sweep[i].busbw_gbps >= r.sweep[i - 1].busbw_gbps) end
    local s = h.read(svg)
    os.remove(svg)
    assert.matches("^<svg", s)
    assert.matches("busbw vs size", s)
    assert.matches("<polyline", s)
  end)

  it("writes a Chrome trace and a TB timeline", function()
    local trace, svg = os.tmpname(), os.tmpname()
    local code = h.cli { "sim", "algorithms/allgather_ring.lua", "ranks=4", "--size", "4M", "--trace", trace, "--svg",
      svg }
    assert.equal(0, code)
    local t = cjson.decode(h.read(trace))
    local slices, names = 0, {}
    for _, e in ipairs(t.traceEvents) do
      if e.ph == "X" then slices = slices + 1 assert.is_true(e.dur >= 0) end
      if e.ph == "M" and e.name == "process_name" then names[#names + 1] = e.args.name end
    end
    assert.equal(4, #names)
    assert.is_true(slices >= 4 * 3) -- 3 steps on each of 4 ranks, at least one micro-batch each
    local s = h.read(svg)
    os.remove(trace)
    os.remove(svg)
    assert.matches("rank 3", s)
    assert.matches(">sp0<", s)
  end)

  it("takes a topology file and meets the closed form on it", function()
    local code, out = h.cli { "sim", "algorithms/allgather_ring.lua", "topo=spec/fixtures/topo_uniform.lua",
      "--inplace", "--size", "64M", "nmicro=1", "--json" }
    assert.equal(0, code)
    local r = cjson.decode(out)
    local want = 3 * (5 + 64 * 2 ^ 20 / (4 * 100e3))
    assert.is_true(math.abs(r.sim.time_us - want) < 0.01 * want)
  end)

  it("calibrates a topology back from the times it simulated (tools/paper/calibrate)", function()
    -- times from h200:2 with alpha 5 us and a 300 GB/s link, ours on 16 channels; the fit must find them
    local tmp = os.tmpname()
    local topo = tmp .. ".lua"
    local f = assert(io.open(topo, "w"))
    f:write 'return { base = "h200:2", alpha_us = 5, intra_gbps = 300 }\n'
    f:close()
    local csv = os.tmpname()
    f = assert(io.open(csv, "w"))
    f:write "size,time_us\n"
    for _, size in ipairs { "8M", "64M", "512M" } do
      local code, out = h.cli { "sim", "algorithms/allreduce_ring.lua", "ranks=2", "topo=" .. topo, "channels=16",
        "--size", size, "--json" }
      assert.equal(0, code, out)
      f:write(("%s,%.3f\n"):format(size, cjson.decode(out).sim.time_us))
    end
    f:close()
    local build = h.bin:gsub("/resccl$", "")
    local p = assert(io.popen(("RESCCL_BUILD=%s tools/paper/calibrate %s algorithms/allreduce_ring.lua h200:2 ranks=2 " ..
      "--channels 16 2>&1"):format(build, csv)))
    local out = p:read "a"
    p:close()
    os.remove(tmp)
    os.remove(topo)
    os.remove(csv)
    local alpha, bw = out:match "fitted: alpha_us = ([%d.]+), intra_gbps = ([%d.]+)"
    assert.is_not_nil(alpha, out)
    assert.is_true(math.abs(tonumber(alpha) - 5) < 0.25 and math.abs(tonumber(bw) - 300) < 15, out)
  end)

  it("names bad sizes, baselines and unreachable topologies", function()
    for _, c in ipairs {
      { { "--size", "lots" }, "--size lots: not a size (examples: 64, 64K, 1MiB, 2G)" },
      { { "--size", "99999999999999999999" }, "--size 99999999999999999999: out of range (1B to 1024TiB)" },
      { { "--tile", "1.5" }, "--tile 1.5: not a whole number of bytes" },
      { { "--sweep", "1M:1X" }, "--sweep 1X: not a size (examples: 64, 64K, 1MiB, 2G)" },
      { { "--sweep", "4M:1M" }, "--sweep 4M:1M: 4 MiB is larger than 1 MiB" },
      { { "--sweep", "4M" }, "--sweep 4M: not A:B (e.g. 1M:8G)" },
    } do
      local args = { "sim", "algorithms/allgather_ring.lua", "ranks=4", c[1][1], c[1][2] }
      local code, _, err = h.cli(args)
      assert.equal(2, code, c[2])
      assert.equal("resccl: " .. c[2] .. "\n(see 'resccl help')\n", err)
    end
    local code, out = h.cli { "sim", "algorithms/allgather_ring.lua", "ranks=4", "--size", "256 MiB", "--json" }
    assert.equal(0, code)
    assert.matches('"size_bytes":268435456', out)
    code, _, err = h.cli { "sim", "algorithms/allgather_ring.lua", "ranks=4", "--baseline", "rccl" }
    assert.equal(2, code)
    assert.matches("%-%-baseline needs msccl|nccl", err)
    code, _, err = h.cli { "sim", "algorithms/allgather_ring.lua", "topo=spec/fixtures/topo_islands.lua" }
    assert.equal(1, code)
    assert.equal("resccl: spec/fixtures/topo_islands.lua: topology 'spec/fixtures/topo_islands.lua': ranks 0 and 4 " ..
      "cannot reach each other (no NIC between nodes)\n", err)
    code, _, err = h.cli { "sim", "algorithms/alltoall_direct.lua", "ranks=4", "--baseline", "nccl" }
    assert.equal(1, code)
    assert.matches("no NCCL ring baseline for alltoall", err)
  end)
end)

describe("topology files", function()
  it("run as algorithm scripts do: the base library, the CPU budget, the file named in errors", function()
    local code, _, err = h.cli { "sim", "algorithms/allgather_ring.lua", "topo=spec/fixtures/topo_error.lua" }
    assert.equal(1, code)
    assert.equal("resccl: spec/fixtures/topo_error.lua:6: 4 GPUs: too few for this cluster\n", err)
    code, _, err = h.cli({ "sim", "algorithms/allgather_ring.lua", "topo=spec/fixtures/topo_runaway.lua" },
      "RESCCL_BUDGET=1")
    assert.equal(1, code)
    assert.equal("resccl: spec/fixtures/topo_runaway.lua:3: script exceeded its budget of 1 s\n", err)
    -- a precompiled file, as a topology and as an algorithm
    local tmp = os.tmpname()
    local path = tmp .. ".lua"
    local f = assert(io.open(path, "wb"))
    f:write(string.dump(load "return { nodes = 1, gpn = 2, intra_gbps = 100 }"))
    f:close()
    for _, args in ipairs { { "sim", "algorithms/allgather_ring.lua", "topo=" .. path }, { "run", path } } do
      code, _, err = h.cli(args)
      assert.equal(1, code)
      assert.equal("resccl: " .. path .. ": attempt to load a binary chunk (mode is 't')\n", err)
    end
    os.remove(tmp)
    os.remove(path)
  end)
end)

describe("resccl sim's limits", function()
  it("refuses more tiles than it runs in a few seconds, before running any", function()
    local cases = {
      { { "ranks=4", "--tile", "1" }, "size 256 MiB is 268435456 tiles of 1 B" },
      { { "--size", "999T" }, "size 999 TiB is 1047527424 tiles of 1 MiB" },
      { { "--size", "4T", "--tile", "2K" }, "size 4 TiB is 2147483648 tiles of 2 KiB" },
      { { "--sweep", "1M:2T" }, "size 2 TiB is 2097152 tiles of 1 MiB" },
      -- as the GPU runtime runs it, no more micro-batches than tiles of 1 MiB
      { { "ranks=2", "channels=4", "--tile", "1G", "--size", "1024T" }, "size 1024 TiB is 1073741824 tiles of 1 MiB" },
    }
    for _, c in ipairs(cases) do
      local args = { "sim", "algorithms/allreduce_ring.lua" }
      table.move(c[1], 1, #c[1], 3, args)
      local code, out, err = h.cli(args)
      assert.equal(1, code)
      assert.equal("", out) -- refused before any run
      assert.equal("resccl: " .. c[2] .. ", more than the simulator runs (1048576)\n", err)
    end
  end)
end)

describe("resccl sim on an imported file's own TBs", function()
  local ring = "spec/fixtures/import/ring_ag4.xml" -- one TB per GPU that sends, then receives

  it("runs them algorithm-level, as MSCCL does and as they were verified", function()
    local code, out = h.cli { "sim", ring, "--tb", "manual", "--order", "algorithm", "--size", "4M" }
    assert.equal(0, code)
    assert.matches("# ours   hpds schedule, manual TBs, algorithm%-level execution", out)
    assert.matches("\n  ours +4 MiB +[%d.]+ ", out)
  end)

  it("runs hand-placed TBs around one that has nothing to run", function()
    local code, out = h.cli { "sim", "spec/fixtures/manual_gap.lua", "ranks=2", "--tb", "manual", "--size", "4M" }
    assert.equal(0, code, out)
    assert.matches("\n  ours +4 MiB +[%d.]+ ", out)
  end)

  it("refuses FIFOs smaller than the verifier's two tiles", function()
    local code, _, err = h.cli { "sim", ring, "--tb", "manual", "--order", "algorithm", "--depth", "1" }
    assert.equal(1, code)
    assert.equal("resccl: hand-placed TBs need connections that buffer two tiles: simulate with depth >= 2\n", err)
  end)
end)

describe("resccl run", function()
  it("prints the simulated time and busbw", function()
    local code, out = h.cli { "run", "algorithms/allreduce_ring.lua", "ranks=4" }
    assert.equal(0, code)
    assert.matches("\nsim +256 MiB on nvswitch:4: [%d.]+ us, algbw [%d.]+ GB/s, busbw [%d.]+ GB/s", out)
  end)
end)
