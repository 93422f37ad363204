-- MSCCL XML importer (lua/resccl/import/msccl_xml.lua): every step type and
-- quirk on small hand-written files, exact diagnoses, the shared samples.
local h = require "helper"
local import = require "resccl.import"
local resccl = require "resccl"

local FIX = "spec/fixtures/import/"
local SHARED = "../shared/msccl-xml/"
-- The shared MSCCL XML samples and the most <tb>s one of their GPUs has.
local SHARED_FILES = {
  { "64MB.xml", 6 }, { "ag_ring_simple_1_1.xml", 1 }, { "ag-1k-512k.xml", 28 }, { "ag_allpair_LL128_x_4.xml", 28 },
  { "a2a2ll.xml", 28 }, { "allreduce_binary_tree_Simple_gpu2_ins1.xml", 1 },
  { "allreduce_rec_doub_halv_Simple_gpu64_ins1.xml", 6 }, { "ar_hier_12_Simple.xml", 36 },
  { "Allreduce.n16-DistributedRelayedSwitch.localDGX1.copies2-steps42.chunks16-gurobisol-1633806993-allreduce-1633807120_i1_scRemote1.sccl.xml", 8 },
}

local function imp(name) return import.read(FIX .. name) end

-- Import inline XML text (file name t.xml); line 1 is <algo>.
local function text(body, attrs)
  attrs = attrs or 'name="t" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="1" outofplace="0"'
  return import.from_text(("<algo %s>\n%s</algo>\n"):format(attrs, body), "t.xml", "msccl_xml")
end
local function text_err(body, attrs) return h.pcall_err(text, body, attrs) end

local function step(s, ty, extra)
  return ('      <step s="%d" type="%s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" %s/>\n'):format(s, ty,
    extra or 'depid="-1" deps="-1" hasdep="0"')
end

-- Compile every placement the file supports; returns { [placement] = err or "ok" }.
local function verdicts(i, opts)
  local alg = import.algorithm(i)
  local prog, topo = alg:program {}
  local out = {}
  for _, inplace in ipairs { false, true } do
    if not inplace or alg.inplace then
      local o = { inplace = inplace }
      for k, v in pairs(opts or {}) do o[k] = v end
      local plan, err = resccl.compile(prog, topo, o)
      out[inplace and "in-place" or "out-of-place"] = err or "ok"
      out.plan = out.plan or plan
    end
  end
  return out, prog
end

local function count(i, pred)
  local n = 0
  for _, x in ipairs(i.xfers) do
    if pred(x) then n = n + 1 end
  end
  return n
end

describe("MSCCL XML import", function()
  describe("step types", function()
    it("s, rcs and r make a ring all-gather with the file's TB hints", function()
      local i = imp "ring_ag4.xml"
      assert.are.same({ "MSCCL XML", "allgather", 4, 1 }, { i.format, i.collective, i.ranks, i.chunks })
      assert.are.same({ 1, 1, 1, 1 }, i.file_tbs)
      -- 4 placement copies + 12 sends, each a copy
      assert.are.equal(16, #i.xfers)
      assert.are.equal(0, count(i, function(x) return x.op == "reduce" end))
      -- the first network transfer: gpu 3 tb 0 step 0 (s) -> gpu 0 tb 0 step 1 (rcs), line 6
      local x = i.xfers[5]
      assert.are.same({ 3, "output", 3, 0, "output", 3, 6 }, { x.src, x.sbuf, x.sidx, x.dst, x.dbuf, x.didx, x.line })
      assert.are.same({ 0, 0, 0, 1, 0 }, x.hint)
      local v = verdicts(i)
      assert.are.equal("ok", v["out-of-place"])
      assert.are.equal("ok", v["in-place"])
      -- in place only, it works in its input: staged in scratch, out of place it leaves the caller's as it was
      assert.are.equal(0, assert(v.plan:exec { count = 96, nmicro = 2 }).wrong)
    end)

    it("s, rrs, rrcs, rcs and r make a ring all-reduce; rrs forwards from its dead source", function()
      local i = import.read "examples/ring_allreduce3.xml"
      assert.are.same({ "allreduce", 3, 3 }, { i.collective, i.ranks, i.chunks })
      assert.are.equal(6, count(i, function(x) return x.op == "reduce" end)) -- rrs and rrcs, 3 chunks each
      local v, prog = verdicts(i)
      assert.are.equal("ok", v["out-of-place"])
      assert.are.equal("ok", v["in-place"])
      assert.are.equal(0, prog:info().scratch) -- no temporary needed
    end)

    it("rrs keeps a live source intact through a scratch temporary", function()
      local i = imp "rrs_live.xml"
      local v, prog = verdicts(i)
      assert.are.equal("ok", v["out-of-place"])
      assert.is_nil(v["in-place"]) -- out-of-place only file
      assert.are.equal(1, prog:info().scratch)
    end)

    it("rrc with a source other than its destination starts from a copy of the source", function()
      local i = imp "rrc_oop.xml"
      assert.are.equal(2, count(i, function(x) return x.what == "rrc operand" end))
      assert.are.equal("ok", verdicts(i)["out-of-place"])
    end)

    it("cpy, re, a nop chain, scratch, cnt=2 and depid/deps", function()
      local i = imp "local_ops.xml"
      assert.are.equal(2, count(i, function(x) return x.what == "cpy" and x.cnt == 2 end))
      assert.are.equal(2, count(i, function(x) return x.what == "re" and x.op == "reduce" and x.sbuf == "scratch" end))
      -- re runs after the receive it waits for (through the nop) and the cpy
      local pos = {}
      for k, x in ipairs(i.xfers) do pos[x.what .. x.dst] = pos[x.what .. x.dst] or k end
      assert.is_true(pos["s/r0"] < pos["re0"] and pos["cpy0"] < pos["re0"])
      assert.are.equal("ok", verdicts(i)["out-of-place"])
    end)

    it("stages a sent value that the sender overwrites before it is received", function()
      local i = imp "staged.xml"
      assert.are.equal(1, count(i, function(x) return x.what == "staged send" end))
      local v, prog = verdicts(i)
      assert.are.equal("ok", v["out-of-place"])
      assert.are.equal(2, prog:info().scratch)
    end)

    it("all-to-all out-of-place with a local cpy on two channels", function()
      local i = imp "a2a_oop.xml"
      assert.are.same({ "alltoall", 2, 2, false }, { i.collective, i.ranks, i.chunks, i.inplace })
      local chan1 = {}
      for _, x in ipairs(i.xfers) do
        if x.hint and x.hint[5] == 1 then chan1[#chan1 + 1] = ("%d->%d %s"):format(x.src, x.dst, table.concat(x.hint, ",")) end
      end
      assert.are.same({ "1->0 1,0,1,1,1", "0->1 1,0,1,1,1" }, chan1) -- the channel-1 TBs: tb 1 step 0 -> tb 1 step 1
      assert.are.equal("ok", verdicts(i)["out-of-place"])
    end)

    it("executes correctly on the host executor", function()
      for _, f in ipairs { "../../../examples/ring_allreduce3.xml", "local_ops.xml", "a2a_oop.xml", "staged.xml",
        "rrs_live.xml" } do
        local plan = verdicts(imp(f)).plan
        local r = assert(plan:exec { count = 96, nmicro = 2 })
        assert.are.equal(0, r.wrong, f)
      end
    end)
  end)

  describe("quirks", function()
    it("reads reduce_scatter, redop, <copy>, comments, unknown attributes and elements, no outofplace", function()
      local i = imp "quirks_rs.xml"
      assert.are.same({ "reducescatter", 2, 1, true, false }, { i.collective, i.ranks, i.chunks, i.inplace, i.outofplace })
      assert.are.same({ FIX .. "quirks_rs.xml:12: ignored element <note> in <gpu>" }, i.warnings)
      local v = verdicts(i)
      assert.are.equal("ok", v["out-of-place"])
      assert.are.equal("ok", v["in-place"])
    end)

    it("reads reducescatter too, and takes a missing coll from the name", function()
      local body = '  <gpu id="0"/>\n  <gpu id="1"/>\n'
      assert.matches("moves no data", text_err(body, 'name="x" ngpus="2" coll="reducescatter" nchunksperloop="2" inplace="1"'))
      assert.are.equal("t.xml:1: <algo> has no coll attribute and its name does not tell the collective",
        text_err(body, 'name="x" ngpus="2" nchunksperloop="2" inplace="1"'))
      assert.matches("moves no data", text_err(body, 'name="Allreduce(n=2)" ngpus="2" nchunksperloop="2" inplace="1"'))
      local i = text('  <gpu id="0">\n    <tb id="0" send="1" recv="1" chan="0">\n' .. step(0, "s") .. step(1, "rrc")
        .. '    </tb>\n  </gpu>\n  <gpu id="1">\n    <tb id="0" send="0" recv="0" chan="0">\n' .. step(0, "s") .. step(1, "rrc")
        .. '    </tb>\n  </gpu>\n', 'name="Allreduce(n=2)" ngpus="2" nchunksperloop="2" inplace="1"')
      assert.are.same({ "allreduce", { "t.xml:1: <algo> has no coll attribute; taken as allreduce from its name" } },
        { i.collective, i.warnings })
    end)

    it("warns about a step others wait on that has hasdep=0", function()
      local i = text([[
  <gpu id="0">
    <tb id="0" send="1" recv="-1" chan="0">
      <step s="0" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="1" chan="0">
      <step s="0" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="0" deps="0" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
]])
      assert.are.same({ "t.xml:4: gpu 0 tb 0 step 0 is waited on but has hasdep=0 (the MSCCL runtime would hang; recomputed)" },
        i.warnings)
    end)
  end)

  describe("diagnoses", function()
    it("malformed XML at its line", function()
      assert.are.equal(FIX .. "malformed.xml:4: malformed XML: mismatched tag", h.pcall_err(import.read, FIX .. "malformed.xml"))
      assert.are.equal("t.xml:1: malformed XML: no element found", h.pcall_err(import.from_text, "", "t.xml", "msccl_xml"))
    end)

    it("a deadlock in the file's own schedule names the GPUs, TBs and steps of the cycle", function()
      assert.are.equal(FIX .. "deadlock.xml:5: deadlock in the file's own schedule: "
        .. "gpu 0 tb 0 step 0 (r from gpu 1, line 5) waits for gpu 1 tb 0 step 1 (s to gpu 0, line 12); "
        .. "gpu 1 tb 0 step 0 (r from gpu 0, line 11) waits for gpu 0 tb 0 step 1 (s to gpu 1, line 6)",
        h.pcall_err(import.read, FIX .. "deadlock.xml"))
    end)

    it("a gather labelled allgather: the first wrong output chunk", function()
      local v = verdicts(imp "gather.xml")
      assert.are.equal(FIX .. "gather.xml:2: allgather result wrong: rank 1 output chunk 0 holds nothing (never written)",
        v["out-of-place"])
    end)

    local gpu1 = '  <gpu id="1">\n    <tb id="0" send="-1" recv="0" chan="0">\n' .. step(0, "r") .. '    </tb>\n  </gpu>\n'
    local function gpu0(tb, steps) return '  <gpu id="0">\n    ' .. tb .. '\n' .. steps .. '    </tb>\n  </gpu>\n' end

    it("strict checks name the line", function()
      local cases = {
        { gpu0('<tb id="0" send="-1" recv="-1" chan="0">', step(0, "s")) .. gpu1,
          "t.xml:4: step 's' sends but gpu 0 tb 0 has no send peer (send=-1)" },
        { gpu0('<tb id="0" send="1" recv="-1" chan="0">', step(0, "s") .. step(1, "s")) .. gpu1,
          "t.xml:5: gpu 0 sends 2 times to gpu 1 on channel 0 but gpu 1 receives 1 time" },
        { gpu0('<tb id="0" send="1" recv="-1" chan="0">', (step(0, "s"):gsub('cnt="1"', 'cnt="two"'))) .. gpu1,
          "t.xml:4: <step> attribute cnt=\"two\" is not an integer" },
        { gpu0('<tb id="0" send="1" recv="-1" chan="0">', step(0, "rra")) .. gpu1, "t.xml:4: unknown step type 'rra'" },
        { gpu0('<tb id="0" send="1" recv="-1" chan="0">', step(0, "ra")) .. gpu1,
          "t.xml:4: step type 'ra' is not implemented by any MSCCL runtime" },
        { gpu0('<tb id="1" send="1" recv="-1" chan="0">', step(0, "s")) .. gpu1,
          "t.xml:2: gpu 0: tb ids must be 0..0 without gaps; tb 0 is missing" },
        { gpu0('<tb id="0" send="0" recv="-1" chan="0">', step(0, "s")) .. gpu1,
          "t.xml:3: gpu 0 tb 0 has itself as a peer (send=0 recv=-1)" },
        { gpu0('<tb id="0" send="1" recv="-1" chan="3">', step(0, "s")) .. gpu1,
          "t.xml:3: gpu 0 tb 0 uses channel 3 but nchannels=1" },
        { gpu0('<tb id="0" send="1" recv="-1" chan="0">', step(0, "s", 'depid="0" deps="5"')) .. gpu1,
          "t.xml:4: deps=5: gpu 0 tb 0 has no step s=5" },
        { gpu0('<tb id="0" send="1" recv="-1" chan="0">', step(0, "s"):gsub('srcoff="0"', 'srcoff="2"')) .. gpu1,
          "t.xml:4: srcoff=2 cnt=1 out of range: gpu 0's output buffer has 2 chunks" },
        { gpu0('<tb id="0" send="1" recv="-1" chan="0">', step(0, "s"):gsub('cnt="1"', 'cnt="72"')) .. gpu1,
          "t.xml:4: cnt=72 out of range (1..71)" },
        { gpu0('<tb id="0" send="1" recv="-1" chan="0">', step(0, "s"):gsub('cnt="1"', 'cnt="2"')) .. gpu1,
          "t.xml:9: gpu 1 tb 0 step 0 receives 1 chunk but the matching send (gpu 0 tb 0 step 0, line 4) sends 2" },
        { gpu0('<tb id="0" send="5" recv="-1" chan="0">', step(0, "s")) .. gpu1,
          "t.xml:3: <tb> attribute send=5 out of range (-1..1)" },
      }
      for _, c in ipairs(cases) do assert.are.equal(c[2], text_err(c[1])) end
      -- the deps case above points at a missing step of an existing TB; ids that do not exist:
      assert.are.equal("t.xml:4: depid=7: gpu 0 has no tb 7",
        text_err(gpu0('<tb id="0" send="1" recv="-1" chan="0">', step(0, "s", 'depid="7" deps="0"')) .. gpu1))
    end)

    it("one connection per peer, direction and channel", function()
      local body = '  <gpu id="0">\n    <tb id="0" send="1" recv="-1" chan="0">\n' .. step(0, "s") ..
        '    </tb>\n    <tb id="1" send="1" recv="-1" chan="0">\n' .. step(0, "s") .. '    </tb>\n  </gpu>\n' .. gpu1
      assert.are.equal("t.xml:6: gpu 0 tb 1 sends to gpu 1 on channel 0, as tb 0 does: one connection per peer, direction and channel",
        text_err(body))
    end)

    it("algo-level checks", function()
      assert.are.equal("t.xml:1: root element is <gpu>, expected <algo>",
        h.pcall_err(import.from_text, '<gpu id="0"/>', "t.xml", "msccl_xml"))
      assert.are.equal("t.xml:1: nchunksperloop=3 is not a multiple of ngpus=2, as allgather needs",
        text_err("", 'ngpus="2" coll="allgather" nchunksperloop="3" inplace="1"'))
      assert.are.equal("t.xml:1: collective 'broadcast' is not supported (allreduce, allgather, reducescatter, alltoall)",
        text_err("", 'ngpus="2" coll="broadcast" nchunksperloop="2" inplace="1"'))
      assert.are.equal("t.xml:1: no <gpu id=1> (ngpus=2)", text_err('  <gpu id="0"/>\n'))
      assert.are.equal("t.xml:1: <algo> needs attribute ngpus", text_err("", 'coll="allgather" nchunksperloop="2"'))
    end)
  end)

  describe("shared samples", function()
    for _, f in ipairs(SHARED_FILES) do
      it("imports and verifies " .. f[1], function()
        local path = SHARED .. f[1]
        if not io.open(path) then return pending(SHARED .. " is not present") end
        local i = import.read(path)
        local mx = 0
        for _, n in ipairs(i.file_tbs) do mx = math.max(mx, n) end
        assert.are.equal(f[2], mx)
        local v = verdicts(i)
        assert.are.equal("ok", v["out-of-place"])
        if i.inplace then assert.are.equal("ok", v["in-place"]) end
      end)

      it("merges TBs to at most the file's on every rank of " .. f[1], function()
        local path = SHARED .. f[1]
        if not io.open(path) then return pending(SHARED .. " is not present") end
        local i = import.read(path)
        local v = verdicts(i, { tb = "merge" })
        assert.are.equal("ok", v["out-of-place"])
        if i.inplace then assert.are.equal("ok", v["in-place"]) end
        for r, n in ipairs(v.plan:report().tbs_per_rank) do assert.is_true(n <= i.file_tbs[r], "rank " .. r - 1) end
      end)
    end
  end)

  describe("file's own TBs", function()
    local function manual(i)
      local alg = import.algorithm(i)
      local prog, topo = alg:program {}
      local plan, err = resccl.compile(prog, topo, { tb = "manual", order = "algorithm", inplace = not i.outofplace })
      return err or "ok", plan
    end

    it("compile with tb='manual' keeps the file's TBs (hints from prog:hint)", function()
      local v, plan = manual(imp "local_ops.xml")
      assert.are.equal("ok", v)
      assert.are.same({ 3, 3 }, plan:report().tbs_per_rank)
      local path = SHARED .. "64MB.xml"
      if not io.open(path) then return pending(SHARED .. " is not present") end
      v, plan = manual(import.read(path))
      assert.are.equal("ok", v)
      assert.are.same({ 6, 6, 6, 6 }, plan:report().tbs_per_rank)
    end)

    it("out-of-place runs of in-place-only files put the input copy on one extra TB", function()
      local alg = import.algorithm(imp "ring_ag4.xml")
      local prog, topo = alg:program {}
      local plan = resccl.compile(prog, topo, { tb = "manual", inplace = false, stop_after = "tb" })
      assert.are.same({ 2, 2, 2, 2 }, plan:report().tbs_per_rank) -- the file's tb 0, and tb 1 for the copy
    end)

    it("a TB that sends before it receives, on every GPU of a ring, runs with the file's TBs", function()
      -- MSCCL's connections buffer two steps; the verifier models that for hand-placed plans
      local alg = import.algorithm(imp "ring_ag4.xml")
      local prog, topo = alg:program {}
      local plan, err = resccl.compile(prog, topo, { tb = "manual", order = "algorithm", inplace = true })
      assert.is_nil(err)
      local r = assert(plan:exec { count = 4096, nmicro = 2, slots = 4, slot_bytes = 8192 })
      assert.equal(0, r.wrong)
      -- and it simulates with the same buffering, not with less
      assert.is_true(assert(plan:sim { size = 1 << 20, nmicro = 2, depth = 2 }).time_us > 0)
      local _, serr = plan:sim { size = 1 << 20, nmicro = 2, depth = 1 }
      assert.equal("hand-placed TBs need connections that buffer two tiles: simulate with depth >= 2", serr)
    end)

    -- every shared file's own schedule: what the verifier passes, the simulator runs to the end
    for _, f in ipairs(SHARED_FILES) do
      it("simulates " .. f[1] .. " with its own TBs", function()
        local path = SHARED .. f[1]
        if not io.open(path) then return pending(SHARED .. " is not present") end
        local i = import.read(path)
        local v, plan = manual(i)
        assert.are.equal("ok", v)
        local r = assert(plan:sim { size = 1 << 20, nmicro = 2, depth = 2 })
        assert.is_true(r.time_us > 0)
        assert.equal("algorithm", r.order)
      end)
    end
  end)
end)
