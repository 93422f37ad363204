-- resccl import / export, and imported files as input to every command.
local h = require "helper"
local cjson = require "cjson"

local FIX = "spec/fixtures/import/"

describe("resccl import", function()
  it("prints format, collective, ranks, chunks, tasks, the file's TBs and ours, and the verdict", function()
    local code, out = h.cli { "import", "examples/ring_allreduce3.xml" } -- the shipped example
    assert.equal(0, code)
    assert.matches("source%s+examples/ring_allreduce3.xml %(MSCCL XML%)", out)
    assert.matches("collective%s+allreduce, 3 ranks, 3 chunks per block; in%-place", out)
    assert.matches("tasks%s+15 transfers imported; %d+ tasks after placement %(out%-of%-place%)", out)
    assert.matches("file TBs%s+max 1 %(1 1 1%)", out)
    assert.matches("our TBs%s+max %d+ %([%d ]+%), state%-based, out%-of%-place on nvswitch:3", out)
    assert.matches("verify%s+out%-of%-place: ok\nverify%s+in%-place: ok", out)
  end)

  it("--json carries the same facts", function()
    local code, out = h.cli { "import", FIX .. "teccl_a2a3.json", "--json" }
    assert.equal(0, code)
    local r = cjson.decode(out)
    assert.are.same({ "TE-CCL JSON", "alltoall", 3, 1, "ok" }, { r.format, r.collective, r.ranks, r.chunks_per_block, r.verify })
    assert.are.equal("not supported by the file", r.placements[2].verify)
    assert.is_number(r.placements[1].tbs_per_rank_max)
  end)

  it("reads MSCCL++ plans: the file's TBs are counted, its schedule is not run as the file's own", function()
    local code, out = h.cli { "import", FIX .. "mscclpp_get_ag2.json" }
    assert.equal(0, code)
    assert.matches("source%s+" .. FIX .. "mscclpp_get_ag2.json %(MSCCL%+%+ JSON%)", out)
    assert.matches("collective%s+allgather, 2 ranks, 2 chunks per block; in%-place", out)
    assert.matches("file TBs%s+max 2 %(2 2%)", out)
    assert.matches("verify%s+out%-of%-place: ok\nverify%s+in%-place: ok", out)
    assert.not_matches("file sched", out)
    code, out = h.cli { "run", FIX .. "mscclpp_packet_ar2.json", "count=64" }
    assert.equal(0, code)
    assert.matches("result%s+PASS", out)
  end)

  it("exits 1 with the exact problem", function()
    local code, out = h.cli { "import", FIX .. "gather.xml" }
    assert.equal(1, code)
    assert.matches("verify%s+out%-of%-place: " .. FIX .. "gather.xml:2: allgather result wrong: rank 1 output chunk 0 holds nothing", out)
    local err
    code, _, err = h.cli { "import", FIX .. "deadlock.xml" }
    assert.equal(1, code)
    assert.matches("^resccl: " .. FIX .. "deadlock.xml:5: deadlock in the file's own schedule: gpu 0 tb 0 step 0", err)
    code, _, err = h.cli { "import", FIX .. "malformed.xml" }
    assert.equal(1, code)
    assert.equal("resccl: " .. FIX .. "malformed.xml:4: malformed XML: mismatched tag\n", err)
    code, _, err = h.cli { "import", "no/such.xml" }
    assert.equal(1, code)
    assert.matches("^resccl: no/such.xml: cannot read", err)
    code, _, err = h.cli { "import", "spec/fixtures" }
    assert.equal(1, code)
    assert.equal("resccl: spec/fixtures: cannot read: Is a directory\n", err)
  end)

  it("-o writes an editable ReSCCLang program that runs", function()
    local out_lua = os.tmpname() .. ".lua"
    local code = h.cli { "import", FIX .. "local_ops.xml", "-o", out_lua }
    assert.equal(0, code)
    local src = h.read(out_lua)
    assert.matches('collective = "allreduce"', src)
    assert.matches('a:chunk%(0, "output", 0, 2%):reduce%(a:chunk%(0, "scratch", 0, 2%)%)  %-%- local_ops.xml:%d+ re', src)
    local out
    code, out = h.cli { "run", out_lua, "count=64" }
    os.remove(out_lua)
    assert.equal(0, code)
    assert.matches("result%s+PASS", out)
  end)
end)

describe("imported files as input", function()
  it("compile, verify and run take XML and JSON files", function()
    local code, out = h.cli { "compile", FIX .. "ring_ag4.xml", "topo=nvswitch:4", "--json" }
    assert.equal(0, code)
    local r = cjson.decode(out)
    assert.are.same({ "ring_ag4", "allgather", 4, "ok" }, { r.algorithm, r.collective, r.ranks, r.verify })
    code, out = h.cli { "verify", FIX .. "taccl_ar2.json" }
    assert.equal(0, code)
    assert.matches("out%-of%-place%s+ok\nin%-place%s+ok", out)
    code, out = h.cli { "run", FIX .. "quirks_rs.xml", "count=64" }
    assert.equal(0, code)
    assert.matches("result%s+PASS", out)
  end)

  it("an imported file runs on its own number of ranks", function()
    local code, _, err = h.cli { "compile", FIX .. "ring_ag4.xml", "ranks=8" }
    assert.equal(1, code)
    assert.matches("algorithm ring_ag4 is written for 4 ranks; nvswitch:8 has 8", err)
  end)
end)

describe("resccl export", function()
  it("writes MSCCL XML that imports back and verifies", function()
    local xml = os.tmpname() .. ".xml"
    local code, out = h.cli { "export", "algorithms/allreduce_hm.lua", "topo=a100:2x4", "--msccl-xml", xml }
    assert.equal(0, code)
    assert.matches("^wrote " .. xml:gsub("%p", "%%%0") .. ": allreduce, 8 ranks; MSCCL TBs per rank", out)
    code, out = h.cli { "import", xml, "topo=a100:2x4" }
    assert.equal(0, code)
    assert.matches("verify%s+out%-of%-place: ok", out)
    -- many ranks: the range, not a count per rank
    code, out = h.cli { "export", "algorithms/allreduce_ring.lua", "ranks=24", "--msccl-xml", xml }
    os.remove(xml)
    assert.equal(0, code)
    assert.matches("; MSCCL TBs per rank 2 on each of 24 ranks %(ours 2 on each of 24 ranks%)\n$", out)
  end)

  it("needs --msccl-xml and refuses in-place for out-of-place-only algorithms, as compile and sim do", function()
    local code, _, err = h.cli { "export", "algorithms/allgather_ring.lua", "ranks=4" }
    assert.equal(2, code) -- a usage error
    assert.equal("resccl: export needs --msccl-xml OUT.xml\n(see 'resccl help')\n", err)
    -- and so do compile and sim, rather than fail the verifier
    for _, cmd in ipairs { { "export", "--msccl-xml", "-" }, { "compile" }, { "sim" } } do
      local args = { cmd[1], "algorithms/alltoall_direct.lua", "ranks=4", "--inplace", cmd[2], cmd[3] }
      local out
      code, out, err = h.cli(args)
      assert.equal(1, code)
      assert.equal("", out)
      assert.equal("resccl: algorithms/alltoall_direct.lua:3: algorithm alltoall_direct does not support in-place " ..
        "buffers\n", err)
    end
  end)
end)
