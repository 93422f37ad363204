-- src/l_program.c and src/l_plan.c: the core as Lua sees it.
local core = require "resccl.core"
local h = require "helper"

local function ring_ag(n)
  local p = core.program { name = "ring", collective = "allgather", ranks = n, chunks = 1, file = "ring.lua", line = 1 }
  for r = 0, n - 1 do p:xfer(r, "input", 0, r, "output", r, 1, "copy", -1, "ring.lua:2") end
  for s = 0, n - 2 do
    for r = 0, n - 1 do
      local c = (r - s) % n
      p:xfer(r, "output", c, (r + 1) % n, "output", c, 1, "copy", s, "ring.lua:" .. (10 + s))
    end
  end
  return p
end

-- An all-reduce of 2 chunks on 3 ranks gathered on rank 0, where one transfer
-- reduces both chunks when chunk 0 already holds rank 2's part and chunk 1
-- does not: it completes chunk 0 only.
local function staggered()
  local p = core.program { name = "staggered", collective = "allreduce", ranks = 3, chunks = 2, file = "m.lua" }
  p:xfer(0, "input", 0, 0, "output", 0, 2, "copy", 0, "m.lua:1")
  p:xfer(2, "input", 0, 0, "output", 0, 1, "reduce", 1, "m.lua:2")
  p:xfer(1, "input", 0, 0, "output", 0, 2, "reduce", 2, "m.lua:3")
  p:xfer(2, "input", 1, 0, "output", 1, 1, "reduce", 3, "m.lua:4")
  for r = 1, 2 do p:xfer(0, "output", 0, r, "output", 0, 2, "copy", 4, "m.lua:5") end
  return p
end

describe("core.program", function()
  it("validates its definition", function()
    assert.matches("unknown collective 'gather'", h.pcall_err(core.program, { collective = "gather", ranks = 2 }))
    assert.matches("ranks must be 1..1024, got 0", h.pcall_err(core.program, { collective = "allgather", ranks = 0 }))
    assert.matches("program field 'chunks' must be an integer",
      h.pcall_err(core.program, { collective = "allgather", ranks = 2, chunks = "x" }))
    -- a name is one word: it reaches the emitted code and the plan file
    for _, bad in ipairs { "", "a b", "a*/b", "a\nb", "a]]b", "-a", "a\0b", "a\200b", ("n"):rep(64) } do
      assert.matches("program name must be 1 to 63 letters, digits and '_.%+%-', not starting with '.%+%-'",
        h.pcall_err(core.program, { name = bad, collective = "allgather", ranks = 2 }))
    end
    assert.equal("a.b+c-d_1", core.program({ name = "a.b+c-d_1", collective = "allgather", ranks = 2 }):info().name)
    assert.equal("program", core.program({ collective = "allgather", ranks = 2 }):info().name)
  end)

  it("refuses buffers later stages cannot hold state for", function()
    -- 64 x (64 + 64) x 65536 = 2^29 input and output chunks: the DAG stage's
    -- per-chunk tables would need gigabytes
    assert.matches("64 ranks of 65536 chunks per block make 536870912 input and output chunks, more than 16777216",
      h.pcall_err(core.program, { collective = "alltoall", ranks = 64, chunks = 65536 }))
    local p = core.program { collective = "alltoall", ranks = 1024, chunks = 8 } -- 2^24: the most there is
    assert.equal(8, p:info().chunks)
  end)

  it("records transfers, split at block boundaries, with their positions", function()
    local p = core.program { name = "rs", collective = "reducescatter", ranks = 2, chunks = 2 }
    local first, n = p:xfer(0, "input", 0, 0, "scratch", 0, 4, "copy", 0, "rs.lua:7")
    assert.same({ 1, 2 }, { first, n }) -- input is 2 blocks of 2 chunks
    assert.equal(2, p:info().transfers)
    assert.equal(4, p:info().scratch)
    assert.equal("rs.lua:9: source rank 2 out of range (program has 2 ranks)",
      h.pcall_err(p.xfer, p, 2, "input", 0, 0, "output", 0, 1, "copy", 0, "rs.lua:9"))
    assert.matches("operation must be copy or reduce", h.pcall_err(p.xfer, p, 0, "input", 0, 1, "output", 0, 1, "move"))
    assert.matches("buffer must be input, output or scratch", h.pcall_err(p.xfer, p, 0, "inbox", 0, 1, "output", 0))
    assert.matches("source and destination overlap", h.pcall_err(p.xfer, p, 0, "input", 0, 0, "input", 1, 2))
    -- Numbers past a C int, or a buffer past scratch, are refused, not wrapped.
    assert.matches("integer out of range", h.pcall_err(p.xfer, p, 2 ^ 32, "input", 0, 1, "output", 0))
    assert.matches("integer out of range", h.pcall_err(p.xfer, p, 0, "input", 2 ^ 32, 1, "output", 0))
    assert.matches("buffer must be input, output or scratch", h.pcall_err(p.xfer, p, 0, 256, 0, 1, "output", 0))
    assert.matches("program field 'ranks' must be an integer",
      h.pcall_err(core.program, { collective = "allgather", ranks = 2 ^ 32 + 2 }))
    -- Scratch grows with use, within bounds.
    assert.equal("rs.lua:9: scratch chunk 2147483647 out of range (scratch has at most 8388608 chunks per rank)",
      h.pcall_err(p.xfer, p, 0, "input", 0, 1, "scratch", 2 ^ 31 - 1, 1, "copy", 0, "rs.lua:9"))
    assert.equal("rs.lua:9: chunk count 2147483647 must be 1..16777216",
      h.pcall_err(p.xfer, p, 0, "input", 0, 1, "scratch", 0, 2 ^ 31 - 1, "copy", 0, "rs.lua:9"))
    -- a position is "file:line" with a decimal line; the file may hold colons
    for _, bad in ipairs { "rs.lua", "rs.lua:", ":3", "rs.lua:3x", "rs.lua: 3", "rs.lua:-3", "rs.lua:99999999999" } do
      assert.matches("bad argument #11 to '.-' %(\"file:line\" expected%)",
        h.pcall_err(p.xfer, p, 0, "input", 0, 1, "output", 0, 1, "copy", 0, bad))
    end
    assert.equal("c:/a:b.xml:12: source rank 2 out of range (program has 2 ranks)",
      h.pcall_err(p.xfer, p, 2, "input", 0, 0, "output", 0, 1, "copy", 0, "c:/a:b.xml:12"))
  end)

  it("keeps 256 file names at most, however many refused transfers name", function()
    local p = core.program { name = "many", collective = "allgather", ranks = 2, chunks = 1 }
    for i = 1, 300 do pcall(p.xfer, p, 9, "input", 0, 0, "output", 0, 1, "copy", 0, ("f%d.lua:1"):format(i)) end
    assert.equal("f3.lua:5: source rank 9 out of range (program has 2 ranks)",
      h.pcall_err(p.xfer, p, 9, "input", 0, 0, "output", 0, 1, "copy", 0, "f3.lua:5"))
    assert.equal("many: source rank 9 out of range (program has 2 ranks)",
      h.pcall_err(p.xfer, p, 9, "input", 0, 0, "output", 0, 1, "copy", 0, "g.lua:7"))
  end)

  it("fails a run when any unit of the emitted program fails to compile", function()
    local cc = os.tmpname()
    local f = assert(io.open(cc, "w"))
    f:write('#!/bin/sh\ncase "$*" in *unit0.c*) echo "unit0: refused" >&2; exit 1;; esac\nexec cc "$@"\n')
    f:close()
    os.execute("chmod +x " .. cc)
    local code, out = h.cli({ "run", "algorithms/allgather_ring.lua", "ranks=4" }, "CC=" .. cc)
    os.remove(cc)
    assert.equal(1, code)
    assert.matches("exec +FAILED: compiling the emitted program failed %(.-%): unit0: refused", out)
  end)

  it("compiles a unit once per process, whatever plans emit it", function()
    -- --tb state and conn place a ring all-gather alike: the second plan only links
    local log, cc, input = os.tmpname(), os.tmpname(), os.tmpname()
    local f = assert(io.open(cc, "w"))
    f:write(('#!/bin/sh\necho "$*" >>%s\nexec cc "$@"\n'):format(log))
    f:close()
    os.execute("chmod +x " .. cc)
    local function run(tbs)
      f = assert(io.open(input, "w"))
      f:write 'prog, topo = resccl.load("algorithms/allgather_ring.lua"):program{ranks=4}\n'
      for _, tb in ipairs(tbs) do
        f:write(('print("wrong", resccl.compile(prog, topo, {tb="%s"}):exec{count=64}.wrong)\n'):format(tb))
      end
      f:close()
      io.open(log, "w"):close()
      local p = assert(io.popen(("CC=%s RESCCL_HISTORY=%s.history %s repl <%s 2>&1"):format(cc, input, h.bin, input)))
      local out = p:read "a"
      p:close()
      assert.equal(#tbs, select(2, out:gsub("wrong\t0", "")), out)
      local units, links = 0, 0
      for l in io.lines(log) do
        if l:match "^%-std=gnu11 .* %-c " then units = units + 1 end
        if l:match "^%-shared " then links = links + 1 end
      end
      return units, links
    end
    local units, links = run { "state" }
    assert.is_true(units >= 2)
    assert.equal(1, links)
    assert.same({ units, 2 }, { run { "state", "conn" } })
    for _, path in ipairs { log, cc, input, input .. ".history" } do os.remove(path) end
  end)

  it("names the chunk that recorded a transfer, as Lua names it", function()
    local p = core.program { collective = "allgather", ranks = 2 }
    local typed = load('local p = ... p:xfer(0, "input", 0, 1, "output", 99)', "=typed")
    assert.matches("^typed:1: output chunk 99 out of range", h.pcall_err(typed, p))
  end)

  it("stores manual placement hints", function()
    local p = ring_ag(2)
    p:hint(1, 0, 0, 0, 0)
    assert.matches("no such transfer", h.pcall_err(p.hint, p, 99, 0, 0, 0, 0))
  end)

  it("prints a summary", function()
    assert.equal("Program ring: allgather on 3 ranks, 1 chunks per block, 9 transfers", tostring(ring_ag(3)))
  end)
end)

describe("core.topo", function()
  it("routes transfers onto links", function()
    local t = core.topo "a100:2x4"
    assert.same({ "nvl:0->1" }, t:route(0, 1))
    assert.same({ "nic0.tx", "nic2.rx" }, t:route(1, 4))
    assert.same({}, t:route(3, 3))
    assert.matches("rank out of range", h.pcall_err(t.route, t, 0, 8))
    assert.equal("Topo a100:2x4: 2 nodes x 4 GPUs", tostring(t))
  end)
end)

describe("core.compile", function()
  local topo = core.topo_flat(4)

  it("compiles, verifies and reports", function()
    local plan, err = core.compile(ring_ag(4), topo, { sched = "hpds", tb = "state" })
    assert.is_nil(err)
    local r = plan:report()
    assert.is_true(r.verified)
    assert.equal(16, r.tasks)
    assert.equal(3, r.subpipelines)
    assert.equal(2, r.tbs_per_rank_max)
    assert.same({ 2, 2, 2, 2 }, r.tbs_per_rank)
    for _, s in ipairs { "dag", "sched", "lower", "tb", "verify" } do assert.is_number(r.stage_ms[s]) end
    assert.matches("^Plan ring: out%-of%-place, 4 ranks, 16 tasks, 3 sub%-pipelines %(hpds%)", tostring(plan))
  end)

  it("rejects bad options and mismatched topologies", function()
    assert.matches("bad option sched='fifo'", h.pcall_err(core.compile, ring_ag(4), topo, { sched = "fifo" }))
    local plan, err, code = core.compile(ring_ag(4), core.topo_flat(8))
    assert.is_nil(plan)
    assert.equal("topology nvswitch:8 has 8 ranks, program ring has 4", err)
    assert.equal("bad topology", code)
  end)

  it("returns the partial plan with the verifier's message", function()
    local p = ring_ag(3)
    p:xfer(0, "output", 1, 1, "output", 2, 1, "copy", 5, "ring.lua:40") -- overwrites rank 1's chunk 2
    local plan, err, code = core.compile(p, core.topo_flat(3))
    assert.equal("verification failed", code)
    assert.equal("ring.lua:40: allgather result wrong: rank 1 output chunk 2 holds rank 1's input chunk 0, " ..
      "expected rank 2's input chunk 0", err)
    assert.equal("tb", plan:report().stage)
    assert.matches("refusing to execute", h.pcall_err(plan.exec, plan))
    assert.matches("not verified; refusing to emit", h.pcall_err(plan.emit, plan, "host"))
  end)

  it("dumps stages it reached, and only those", function()
    local plan = core.compile(ring_ag(4), topo, { stop_after = "sched" })
    assert.matches("^dag ring: 16 tasks, 4 chunks\n", plan:dump "dag")
    assert.matches("^sched hpds: 3 sub%-pipelines\nsub%-pipeline 0:", plan:dump "sched")
    assert.matches("stage tb was not reached", h.pcall_err(plan.dump, plan, "tb"))
    assert.matches("stage must be dag, sched, lower or tb", h.pcall_err(plan.dump, plan, "emit"))
  end)

  it("emits one rank or the whole program", function()
    local plan = core.compile(ring_ag(4), topo)
    local one, all = plan:emit("host", 2), plan:emit "host"
    assert.matches("RX_TB%(2, 0%)", one)
    assert.not_matches("RX_TB%(1, 0%)", one)
    assert.matches("RX_PROGRAM_BEGIN%(4, 0%)", all)
    assert.matches("no such rank", h.pcall_err(plan.emit, plan, "host", 4))
  end)

  it("exposes the schedule's sub-pipelines", function()
    local plan = core.compile(ring_ag(4), topo)
    local sp = plan:schedule():subpipelines()
    assert.equal(3, #sp)
    local n = 0
    for _, tasks in ipairs(sp) do n = n + #tasks end
    assert.equal(16, n)
    assert.equal("Schedule hpds: 16 tasks in 3 sub-pipelines", tostring(plan:schedule()))
  end)

  it("executes and reports bad execution options", function()
    local plan = core.compile(ring_ag(4), topo)
    local r = assert(plan:exec { dtype = "i32", count = 77, nmicro = 2 })
    assert.equal(0, r.wrong)
    assert.matches("bad option dtype='f8' %(i8, u8, i32, u32, i64, u64, f16, f32, f64 or bf16 expected%)",
      h.pcall_err(plan.exec, plan, { dtype = "f8" }))
    assert.equal(0, assert(plan:exec { dtype = "bfloat16", count = 77 }).wrong)
    assert.equal("f16", core.dtype "half")
    assert.same({ nil, "sum, prod, max, min or avg expected" }, { core.redop "mean" })
    for _, bad in ipairs { { count = 0 }, { count = -1 }, { count = 1.5 }, { count = 2 ^ 41 }, { nmicro = 0 },
      { slot_bytes = -5 }, { channels = 3e9 } } do
      local k, v = next(bad)
      assert.matches("option " .. k .. " must be an integer from %-?%d+ to %d+", h.pcall_err(plan.exec, plan, bad))
    end
    -- What the host cannot hold is refused, not allocated.
    local none, err, code = plan:exec { count = 2 ^ 40 }
    assert.is_nil(none)
    assert.matches("count 1099511627776: the 4 ranks' buffers need %d+ MiB of host memory", err)
    assert.equal("bad size", code)
    none, err, code = plan:exec { slots = 2 ^ 20, slot_bytes = 2 ^ 30 } -- 2^50 bytes a connection
    assert.is_nil(none)
    assert.matches("slots=1048576 slot_bytes=1073741824: the %d+ connections' FIFOs need %d+ MiB of host memory", err)
    assert.equal("bad size", code)
  end)

  it("refuses uneven sizes a transfer between different chunk positions cannot split", function()
    -- each rank's chunk 0 reaches the peer's scratch at position 1, then the output at position 0
    local p = core.program { name = "shift", collective = "allgather", ranks = 2, chunks = 2, file = "s.lua" }
    for r = 0, 1 do
      p:xfer(r, "input", 0, r, "output", 2 * r, 2, "copy", 0, "s.lua:3")
      p:xfer(r, "input", 0, 1 - r, "scratch", 1, 1, "copy", 1, "s.lua:4")
      p:xfer(1 - r, "scratch", 1, 1 - r, "output", 2 * r, 1, "copy", 2, "s.lua:5")
      p:xfer(1 - r, "scratch", 1, 1 - r, "scratch", 3, 1, "copy", 2, "s.lua:6")
      p:xfer(r, "input", 1, 1 - r, "output", 2 * r + 1, 1, "copy", 1, "s.lua:7")
    end
    local plan = assert(core.compile(p, core.topo_flat(2)))
    assert.equal(0, assert(plan:exec { count = 8, nmicro = 2 }).wrong)
    local none, err, code = plan:exec { count = 7, nmicro = 1 }
    assert.is_nil(none)
    assert.equal("bad size", code)
    assert.equal("s.lua:4: count 7 does not split evenly into 2 chunks per block, as this transfer needs " ..
      "(input chunk 0 -> scratch chunk 1)", err)
  end)
end)

describe("copy elision", function()
  it("keeps a copy whose value a wider read sees next to another", function()
    -- m.lua:3 reads output chunks 0 and 1: chunk 0 from m.lua:2, chunk 1 still m.lua:1's copy
    local plan, err = core.compile(staggered(), core.topo_flat(3))
    assert.is_nil(err)
    assert.matches("t0 r0%->r0 input%[0%+2%] %-> output%[0%]", plan:dump "dag")
    assert.equal(0, assert(plan:exec { count = 64 }).wrong)
  end)

  it("drops a copy that a fold leaves reading the place it writes (in place)", function()
    -- rank 1 stages its input in scratch and copies it to output chunk 1, its input in place: the fold
    -- makes the staging copy write where it reads, which nothing orders before the send of that chunk
    local p = core.program { name = "stage", collective = "allgather", ranks = 2, chunks = 1, file = "s.lua", line = 1 }
    p:xfer(0, "input", 0, 1, "output", 0, 1, "copy", -1, "s.lua:2")
    p:xfer(0, "input", 0, 0, "output", 0, 1, "copy", -1, "s.lua:3")
    p:xfer(1, "input", 0, 1, "scratch", 0, 1, "copy", -1, "s.lua:4")
    p:xfer(1, "scratch", 0, 1, "output", 1, 1, "copy", -1, "s.lua:5")
    p:xfer(1, "input", 0, 0, "output", 1, 1, "copy", -1, "s.lua:6")
    local plan = assert(core.compile(p, core.topo_flat(2), { inplace = true }))
    assert.not_matches("r1%->r1", plan:dump "dag")
    assert.equal(0, assert(plan:exec { count = 4099, nmicro = 3 }).wrong)
  end)
end)

describe("direct sends", function()
  it("write into the peer's buffer, or go through the FIFOs with direct = false, mixed on one connection", function()
    local resccl = require "resccl"
    for _, name in ipairs { "allreduce_ring", "allgather_ring", "reducescatter_ring" } do
      for _, ranks in ipairs { 2, 4 } do
        local plan = assert(resccl.compile(resccl.load("algorithms/" .. name .. ".lua"):program { ranks = ranks }))
        local code = plan:emit "host"
        assert.matches("RX_[A-Z_]*PUT%(", code) -- some transfer is direct
        for _, direct in ipairs { true, false } do
          assert.equal(0, assert(plan:exec { count = 4099, nmicro = 5, direct = direct, dtype = "f16" }).wrong)
        end
      end
    end
  end)
end)

describe("puts in pieces", function()
  it("cut where the reduction that takes a put in ends its chain, alike at both ends", function()
    local resccl = require "resccl"
    for name, pieces in pairs { allreduce_allpairs = true, reducescatter_ring = true, allreduce_ring = false } do
      local plan = assert(resccl.compile(resccl.load("algorithms/" .. name .. ".lua"):program { ranks = 2 }))
      local code = plan:emit "host"
      -- a put's last argument says so, and the one before `done` of the reduction it lands in
      assert.equal(pieces, code:match("RX_PUT%([^;]*, 1%);") ~= nil)
      assert.equal(pieces, code:match("RX_RRC_PUT%([^;]*, 1, %d%);") ~= nil)
      -- micro-batches of about 150000 f32 or 300000 f16 per tile: the last whole one (before a leftover
      -- of 3 elements in the second count) lands in four pieces, the last one shorter; the run fails
      -- if the two ends count pieces differently
      for _, dtype in ipairs { "f32", "f16" } do
        local even = dtype == "f32" and 300008 or 600016
        for count, nmicro in pairs { [even] = 2, [even + 3] = 3 } do
          local r = assert(plan:exec { count = count, nmicro = nmicro, slot_bytes = 1 << 20, dtype = dtype, direct = true })
          assert.equal(0, r.wrong)
        end
      end
    end
  end)
end)

describe("copy-engine copies", function()
  local resccl = require "resccl"
  local function plan(name, ranks, inplace, ce)
    return assert(resccl.plan("algorithms/" .. name .. ".lua", { ranks = ranks }, { ce = ce ~= false, inplace = inplace }))
  end

  it("take every copy of a two-rank all-gather and of an all-to-all, leaving no TB", function()
    for _, c in ipairs { { "allgather_ring", 2, false, 4 }, { "allgather_ring", 2, true, 2 },
      { "alltoall_direct", 4, false, 16 } } do
      local p = plan(c[1], c[2], c[3])
      local r = p:report()
      assert.equal(0, r.tbs_total)
      assert.equal(c[4], r.ce_copies)
      assert.truthy(p:dump("tb"):find(c[4] .. " copies on the copy engine", 1, true))
      assert.truthy(core.plan_file(p):find("\ncopies " .. c[4] .. "\n", 1, true))
      -- whole blocks and slabs with a leftover; the host executor makes the copies after the TBs
      for _, x in ipairs { { 1, 1, "f32" }, { 4099, 3, "f16" }, { 65536, 4, "i8" } } do
        assert.equal(0, assert(p:exec { count = x[1], nmicro = x[2], dtype = x[3] }).wrong)
      end
    end
  end)

  it("put what a reduction takes in, the reduction waiting for each micro-batch", function()
    -- copies, TBs, and reductions that wait for a copy and that nothing waits for
    for name, c in pairs { reducescatter_ring = { 2, 2, 2 }, allreduce_ring = { 4, 2, 0 }, allreduce_allpairs = { 2, 2, 2 } } do
      for _, inplace in ipairs { false, true } do
        local p = plan(name, 2, inplace)
        local r = p:report()
        if not inplace then -- in place the put cannot land where the reduction writes: its operand is there
          assert.equal(c[1], r.ce_copies)
          assert.equal(c[2], r.tbs_total)
          assert.equal(c[3], r.ce_ends)
          assert.truthy(p:emit("host"):find("RX_CE_WAIT(", 1, true))
        end
        -- the host executor makes these copies beside the TBs, a micro-batch at a time
        for _, x in ipairs { { 1, 1, "f32" }, { 4099, 3, "f16" }, { 65536, 4, "i32" } } do
          assert.equal(0, assert(p:exec { count = x[1], nmicro = x[2], dtype = x[3] }).wrong)
        end
      end
    end
  end)

  it("put what a reduction wrote, each micro-batch once the kernel counted it", function()
    -- a two-rank ring all-reduce: both hops on the copy engine, the reducing TB posts a counter
    local p = plan("allreduce_ring", 2)
    local dump, code, art = p:dump("tb"), p:emit("host"), core.plan_file(p)
    assert.equal(2, select(2, dump:gsub("waits=ce%d", "")))
    assert.equal(2, select(2, code:gsub("RX_CE_POST%(%d%)", "")))
    assert.truthy(art:find("\ncounters 2\n", 1, true))
    assert.equal(0, p:report().flags) -- the reductions' flags had only the sends waiting for them
    -- a copy's line ends with the counter it waits for, -1 for none
    local after = {}
    for last in art:match("\ncopies 4\n(.-)counters"):gmatch("(%-?%d+)\n") do after[#after + 1] = tonumber(last) end
    assert.same({ -1, -1, 0, 1 }, after)
  end)

  it("leave what another primitive waits for on the TBs", function()
    -- a four-rank ring's received chunk is sent on: only each chain's last put leaves, waiting for its
    -- receive's counter; the sends whose receives are waited for stay
    local p = plan("allgather_ring", 4)
    local dump = p:dump("tb")
    assert.equal(4, p:report().ce_copies)
    assert.equal(4, select(2, dump:gsub("waits=ce%d", "")))
    assert.equal(4, select(2, dump:gsub("\n  send ", "")))
    assert.equal(plan("allgather_ring", 4, false, false):report().tbs_total, p:report().tbs_total)
    for _, x in ipairs { { 4099, 3, "f32" }, { 1, 1, "i8" }, { 65536, 4, "f16" } } do
      assert.equal(0, assert(p:exec { count = x[1], nmicro = x[2], dtype = x[3] }).wrong)
    end
  end)
end)

describe("pulls", function()
  local resccl = require "resccl"
  local function plan(name, ranks, inplace)
    return assert(resccl.plan("algorithms/" .. name .. ".lua", { ranks = ranks }, { pull = true, inplace = inplace }))
  end

  it("take a send's work to its receive where the send reads an input the call never changes", function()
    -- plan, ranks, pulls, of them reductions, of those puts, TBs in all; a two-rank one-shot all-reduce
    -- keeps one TB a rank, and so does a two-rank ring all-reduce, whose reductions put their sums
    for _, c in ipairs { { "allreduce_allpairs", 2, 2, 2, 0, 2 }, { "reducescatter_ring", 2, 2, 2, 0, 2 },
      { "allgather_ring", 2, 2, 0, 0, 2 }, { "allreduce_ring", 2, 2, 2, 2, 2 }, { "alltoall_direct", 4, 12, 0, 0, 12 } } do
      local p = plan(c[1], c[2])
      local r, dump, code = p:report(), p:dump("tb"), p:emit("host")
      assert.equal(c[3], r.pulls)
      assert.equal(c[4], r.pulled_reductions)
      assert.equal(c[5], r.pulled_puts)
      assert.equal(c[6], r.tbs_total)
      assert.equal(c[3], select(2, dump:gsub(" pulls r%d ", "")))
      assert.equal(c[5], select(2, dump:gsub(", puts r%d ", "")))
      assert.equal(c[3], select(2, code:gsub("\n    RX_[RCS]*_?PULL%(", "")))
      assert.truthy(code:find("RX_PROGRAM_BEGIN(" .. c[2] .. ", " .. (c[5] > 0 and 2 or 1) .. ")", 1, true))
      assert.truthy(core.plan_file(p):find("\npulls " .. c[3] .. "\n", 1, true))
      -- whole blocks and slabs with a leftover, on the host executor
      for _, x in ipairs { { 1, 1, "f32" }, { 4099, 3, "f16" }, { 65536, 4, "i8" } } do
        assert.equal(0, assert(p:exec { count = x[1], nmicro = x[2], dtype = x[3], op = "max" }).wrong)
      end
    end
  end)

  it("read what a rank writes later only with what the puller sends after the pull", function()
    -- in place a two-rank ring all-reduce reads the peer's half before it writes the sum there: it
    -- pulls and puts as out of place, one TB a rank; a four-rank ring's writers are other ranks
    local p = plan("allreduce_ring", 2, true)
    local r = p:report()
    assert.same({ 2, 2, 2 }, { r.pulls, r.pulled_puts, r.tbs_total })
    assert.matches("rrcs   pulls r1 output%[0%], output%[0%], puts r1 output%[0%]", p:dump("tb"))
    for _, x in ipairs { { 1, 1, "f32" }, { 4099, 3, "f16" }, { 65536, 4, "u8" } } do
      assert.equal(0, assert(p:exec { count = x[1], nmicro = x[2], dtype = x[3], op = "avg" }).wrong)
    end
    assert.equal(0, plan("allreduce_ring", 4, true):report().pulls)
  end)

  it("keep what orders a pulled read before the write it justified", function()
    local function alg(name, build)
      return { resccl.algorithm { name = name, collective = "allreduce", build = build }:program { ranks = 2 } }
    end
    local function run(pt, tb, inplace)
      local p = assert(resccl.compile(pt[1], pt[2], { pull = true, tb = tb, inplace = inplace }))
      for _ = 1, 3 do assert.equal(0, assert(p:exec { count = 4100, nmicro = 3 }).wrong) end
      return p:dump("tb")
    end
    -- rank 0 reduces everything and sends the sum to rank 1: rank 1 keeps its receive (a rank keeps a
    -- primitive, or its kernel would never tell rank 0 its buffers are ready)
    local dump = run(alg("reduce_bcast", function(a)
      a:chunk(0, "input", 0, a.chunks):copy(0, "output", 0):reduce(a:chunk(1, "input", 0, a.chunks)):copy(1, "output", 0)
    end), "state", false)
    assert.matches("r1 tb0:\n  recv   from r0 ", dump)
    -- a second pull of the peer's chunk r (into scratch) that the reduction does not follow: the sum goes back
    -- through a send, after it, not with the reduction
    local function hint(st, rt, ss, rs, ch) return { sendtb = st, recvtb = rt, sendstep = ss, recvstep = rs, ch = ch } end
    dump = run(alg("put_war", function(a)
      for r = 0, 1 do
        local o = 1 - r
        local acc = a:chunk(r, "input", r):copy(r, "scratch", 1, { sendtb = 0, sendstep = 0 })
        acc = acc:reduce(a:chunk(o, "input", r), hint(1, 0, 0, 1))
        a:chunk(o, "input", r):copy(r, "scratch", 0, hint(1, 0, 1, 2))
        acc:copy(o, "output", r, hint(0, 1, 3, 2, 1))
        a:chunk(r, "input", r):copy(r, "output", r, { sendtb = 0, sendstep = 4 }):reduce(a:chunk(r, "scratch", 0),
          { sendtb = 0, sendstep = 5 })
      end
    end), "manual", true)
    assert.not_matches(", puts ", dump)
    -- a write justified by a send that would go too: one of the two stays a send
    dump = run(alg("pull_chain", function(a)
      local s1 = a:chunk(1, "input", 1):copy(1, "output", 1):reduce(a:chunk(0, "input", 1), hint(0, 0, 0, 0))
      a:chunk(1, "input", 0):copy(0, "output", 1, hint(0, 0, 1, 1))
      local s0 = a:chunk(0, "input", 0):copy(0, "output", 0):reduce(a:chunk(1, "input", 0), hint(0, 0, 2, 2))
      s0:copy(1, "output", 0, hint(0, 0, 4, 4))
      s1:copy(0, "output", 1, hint(0, 0, 3, 3))
    end), "manual", true)
    assert.matches("r0 tb0:\n  send   to r1 output%[1%]", dump)
  end)

  it("leave sends whose source a rank writes, and refuse the copy engine beside them", function()
    -- in place the one-shot's input is its output, which its reduction writes: nothing pulls
    local p = plan("allreduce_allpairs", 2, true)
    assert.equal(0, p:report().pulls)
    assert.truthy(p:emit("host"):find("RX_PROGRAM_BEGIN(2, 0)", 1, true))
    assert.equal(0, assert(p:exec { count = 4099, nmicro = 3 }).wrong)
    -- a four-rank ring all-gather forwards what it receives: no send reads an input alone
    assert.equal(0, plan("allgather_ring", 4):report().pulls)
    local _, err = resccl.plan("algorithms/allreduce_allpairs.lua", { ranks = 2 }, { pull = true, ce = true })
    assert.matches("choose one", err)
  end)
end)

describe("avg", function()
  it("divides in the one reduction that completes each value", function()
    local resccl = require "resccl"
    local plan = assert(resccl.compile(resccl.load("algorithms/allreduce_ring.lua"):program { ranks = 4 }))
    local reductions, done, partial = { RRC = true, RRC_PUT = true, RRCS = true, RRS = true, REDUCE = true }, 0, 0
    for name, last in plan:emit("host"):gmatch "\n    RX_([%u_]+)%([^\n]*, (%d)%);" do
      if reductions[name] then
        if last == "1" then done = done + 1 else partial = partial + 1 end
      end
    end
    assert.equal(4, done) -- one per chunk
    assert.equal(8, partial)
    for _, dtype in ipairs { "i8", "u64", "f16", "f32" } do
      assert.equal(0, assert(plan:exec { dtype = dtype, op = "avg", count = 61 }).wrong)
    end
  end)

  it("refuses a plan whose reduction completes only some of its chunks", function()
    local plan = core.compile(staggered(), core.topo_flat(3))
    assert.equal(0, assert(plan:exec { op = "sum", count = 64 }).wrong)
    local none, err, code = plan:exec { op = "avg", count = 64 }
    assert.is_nil(none)
    assert.equal("m.lua:3: op=avg divides each sum in the reduction that completes it, and this one completes 1 " ..
      "of its 2 chunks (record it as separate transfers)", err)
    assert.equal("invalid argument", code)
  end)
end)

describe("lowering", function()
  local resccl = require "resccl"

  -- fused primitives of each kind in a lowering dump
  local function fused(dump)
    local n = {}
    for k in dump:gmatch "\nr%d+ (%a+) " do
      if k == "cs" or k == "rcs" or k == "rrs" or k == "rrcs" then n[k] = (n[k] or 0) + 1 end
    end
    return n
  end

  it("reduce into their own input where copy elision folds the result's copy in (in place)", function()
    -- in place, scratch (+) input -> output folds into output (+) scratch -> output: the input is the destination
    local alg = resccl.algorithm {
      name = "fold", collective = "allreduce", chunks = 1,
      build = function(a)
        for r = 0, 1 do a:chunk(r, "input", 0):copy(1 - r, "scratch", 0) end
        for r = 0, 1 do a:chunk(r, "scratch", 0):reduce(a:chunk(r, "input", 0)):copy(r, "output", 0) end
      end,
    }
    local prog, topo = alg:program { ranks = 2 }
    local plan = assert(resccl.compile(prog, topo, { inplace = true }))
    for _, case in ipairs { { op = "sum" }, { dtype = "i32", op = "max" } } do
      case.count = 1031
      assert.equal(0, assert(plan:exec(case)).wrong)
    end
  end)

  it("leave the input as it was out of place, or the run counts it wrong (NCCL's sendbuff is const)", function()
    -- rank 0 reduces into its input, then copies the sum to both outputs: right in place only
    local alg = resccl.algorithm {
      name = "scribble", collective = "allreduce", chunks = 1,
      build = function(a)
        local sum = a:chunk(0, "input", 0):reduce(a:chunk(1, "input", 0))
        sum:copy(0, "output", 0)
        sum:copy(1, "output", 0)
      end,
    }
    local prog, topo = alg:program { ranks = 2 }
    local r = assert(assert(resccl.compile(prog, topo)):exec { count = 64 })
    assert.equal(64, r.wrong)
    assert.matches("^rank 0 input element 0: written out of place", r.first_wrong)
    assert.equal(0, assert(assert(resccl.compile(prog, topo, { inplace = true })):exec { count = 64 }).wrong)
  end)

  it("forwards a reduced chunk without keeping it when nothing reads it again (rrs)", function()
    local prog, topo = resccl.load("algorithms/allreduce_rd.lua"):program { ranks = 8 }
    local plan = assert(resccl.compile(prog, topo, { fuse = "always" }))
    assert.matches("\nr%d+ rrs +from r%d+ to r%d+ %a+%[%d+%] %(not kept%)", plan:dump "lower")
    assert.equal(0, assert(plan:exec { count = 1031, nmicro = 3 }).wrong)
    local never = assert(resccl.compile(prog, topo, { fuse = "never" }))
    assert.not_matches(" rrs ", never:dump "lower")
  end)

  it("fuses by default only where the TB it ties together runs nothing in turn", function()
    -- HM all-reduce: every fusion would tie connection ends busy in other sub-pipelines to one TB
    local prog, topo = resccl.load("algorithms/allreduce_hm.lua"):program { topo = "a100:2x4" }
    local auto = assert(resccl.compile(prog, topo, { inplace = true }))
    assert.same({}, fused(auto:dump "lower"))
    assert.equal(8, auto:report().tbs_per_rank_max) -- the paper's Table 3, Topo1
    local always = assert(resccl.compile(prog, topo, { fuse = "always", inplace = true }))
    assert.same({ rcs = 4, rrcs = 6 }, fused(always:dump "lower"))
    assert.equal(0, assert(auto:exec { count = 1031, nmicro = 3 }).wrong)
    -- algorithm-level plans fuse wherever they can, as before
    local algo = assert(resccl.compile(prog, topo, { order = "algorithm", inplace = true }))
    always = assert(resccl.compile(prog, topo, { order = "algorithm", inplace = true, fuse = "always" }))
    assert.equal(always:dump "lower", algo:dump "lower")
  end)

  it("copies and sends at once where the copy's other readers lose nothing by it", function()
    -- ring all-gather: the copy into the output fuses with the one send that reads it
    local prog, topo = resccl.load("algorithms/allgather_ring.lua"):program { ranks = 4 }
    assert.same({ cs = 4 }, fused(assert(resccl.compile(prog, topo)):dump "lower"))
    -- HM all-gather on 2x4: the copy would fuse with the NIC send, holding the intra-node sends that
    -- read it, and the later sends on their connections, to the NIC's pace; it fuses with an
    -- intra-node send instead. In place, the forwards that could fuse (of NIC arrivals) would wait
    -- behind the earlier sends of their connections, so nothing fuses.
    prog, topo = resccl.load("algorithms/allgather_hm.lua"):program { topo = "a100:2x4" }
    local out = assert(resccl.compile(prog, topo)):dump "lower"
    assert.same({ cs = 8 }, fused(out))
    assert.matches("\nr0 cs +to r1 ", out)
    assert.matches("\nr0 cs +to r4 ", assert(resccl.compile(prog, topo, { fuse = "always" })):dump "lower")
    assert.same({}, fused(assert(resccl.compile(prog, topo, { inplace = true })):dump "lower"))
    local always = assert(resccl.compile(prog, topo, { inplace = true, fuse = "always" }))
    assert.same({ rcs = 4 }, fused(always:dump "lower"))
  end)
end)

describe("core.setting", function()
  it("reads each kind strictly, in its range, and names the setting where it refuses", function()
    assert.equal(256 << 20, core.setting("size", "S", "256MiB"))
    assert.equal("integer", math.type(core.setting("size", "S", "1.5K")))
    assert.equal(64 << 20, core.setting("size", "RESCCL_MEMORY", "64", 1, 1 << 50, 1 << 20))
    assert.equal(-3, core.setting("int", "N", "-3"))
    assert.equal(0.5, core.setting("duration", "T", "500ms"))
    assert.equal(0.25, core.setting("duration", "T", "250", 0, 10, 0.001))
    assert.equal(1.5, core.setting("real", "R", "1.5"))
    assert.is_false(core.setting("bool", "B", "off"))
    assert.is_true(core.setting("bool", "B", "Yes"))
    assert.equal(64, core.setting("int", "N", "64", 0, 1024, nil, 32))
    for _, c in ipairs {
      { { "duration", "RESCCL_TIMEOUT", "abc" }, "RESCCL_TIMEOUT=abc: not a duration (examples: 30, 30s, 500ms, 2m)" },
      { { "size", "S", "4294971392", 4096, 1 << 30 }, "S=4294971392: out of range (4KiB to 1GiB)" },
      { { "size", "S", "-1" }, "S=-1: not a size (examples: 64, 64K, 1MiB, 2G)" },
      { { "int", "N", "99999999999999999999" }, "N=99999999999999999999: out of range " ..
        "(-9007199254740992 to 9007199254740992)" },
      { { "int", "--depth", "0x10" }, "--depth 0x10: not an integer" },
      { { "real", "R", "nan" }, "R=nan: not a number" },
      { { "real", "R", "1e999" }, "R=1e999: out of range (-1.79769e+308 to 1.79769e+308)" },
      { { "int", "N", "48", 0, 1024, nil, 32 }, "N=48: not a multiple of 32" },
      { { "bool", "B", "maybe" }, "B=maybe: not a boolean (1/0, true/false, yes/no, on/off)" },
    } do
      assert.same({ nil, c[2] }, { core.setting(table.unpack(c[1], 1, 7)) })
    end
    -- the caller's mistakes are errors, not a refused value
    assert.matches("invalid option 'float'", h.pcall_err(core.setting, "float", "X", "1"))
    assert.matches("beyond the kind's range", h.pcall_err(core.setting, "size", "X", "1", -1))
    assert.matches("not a unit", h.pcall_err(core.setting, "size", "X", "1", 0, 10, 0.5))
  end)
end)
