-- TACCL and TE-CCL JSON importers (lua/resccl/import/{taccl,teccl}_json.lua).
local h = require "helper"
local import = require "resccl.import"
local resccl = require "resccl"

local FIX = "spec/fixtures/import/"

local function verify(i) return (h.import_verdict(i, 60):gsub("%d+ wrong", "wrong")) end

local function json_err(s, name) return h.pcall_err(import.from_text, s, name or "t.json") end

describe("TACCL JSON import", function()
  it("reads a ring all-gather: steps in order, input_map/output_map buffers", function()
    local i = import.read(FIX .. "taccl_ag3.json")
    assert.are.same({ "TACCL JSON", "allgather", 3, 1 }, { i.format, i.collective, i.ranks, i.chunks })
    assert.is_nil(i.file_tbs)
    -- 3 copies input -> output, then 6 sends; step 1's sends come after step 0's
    assert.are.equal(9, #i.xfers)
    assert.are.same({ -1, 0, 1 }, { i.xfers[1].step, i.xfers[4].step, i.xfers[7].step })
    local x = i.xfers[7] -- steps[1].sends[0]: chunk 2 from rank 0 to 1, at line 9
    assert.are.same({ 0, "output", 2, 1, "output", 2, 9 }, { x.src, x.sbuf, x.sidx, x.dst, x.dbuf, x.didx, x.line })
    assert.are.equal("ok,ok", verify(i))
  end)

  it("reads reductions (a sixth field 'rrc')", function()
    local i = import.read(FIX .. "taccl_ar2.json")
    assert.are.same({ "allreduce", 2, 2 }, { i.collective, i.ranks, i.chunks })
    assert.are.same({ "reduce", "reduce", "copy", "copy" }, { i.xfers[5].op, i.xfers[6].op, i.xfers[7].op, i.xfers[8].op })
    assert.are.equal("ok,ok", verify(i))
  end)

  it("diagnoses", function()
    local base = '{"sccl_type": "algorithm", "name": "Allgather", "input_map": {"0": [0], "1": [1]},\n'
      .. '"output_map": {"0": [0, 1], "1": [0, 1]},\n"steps": [\n'
    assert.are.equal("t.json:4: steps[0].sends[0] sends from rank 1 to itself",
      json_err(base .. '{"sends": [[0, 1, 1, 0, 0]]}]}'))
    assert.are.equal("t.json:4: steps[0].sends[0] sends chunk 1 from rank 0 in the step (0) that steps[0].sends[1] writes it",
      json_err(base .. '{"sends": [[1, 0, 1, 0, 0], [1, 1, 0, 0, 0]]}]}'))
    assert.are.equal("t.json:4: steps[0].sends[0]: unknown reduction 'max' (rrc or none)",
      json_err(base .. '{"sends": [[1, 0, 1, 0, 0, "max"]]}]}'))
    assert.are.equal("t.json:4: steps[0].sends[0] chunk must be an integer in 0..16777216, got 1.5",
      json_err(base .. '{"sends": [[1.5, 0, 1, 0, 0]]}]}'))
    assert.are.equal("t.json:4: steps[0].sends[0] chunk must be an integer in 0..16777216, got 4000000000",
      json_err(base .. '{"sends": [[4000000000, 0, 1, 0, 0]]}]}'))
    assert.are.equal("t.json:4: steps[0].sends[0]: chunk 99 is in no rank's input_map or output_map",
      json_err(base .. '{"sends": [[99, 0, 1, 0, 0]]}]}'))
    assert.are.equal("t.json:2: malformed JSON: Expected comma or array end but found T_OBJ_BEGIN",
      json_err(base:gsub("%[0, 1%]", "[0 {") .. "]}"))
    assert.are.equal("t.json:1: cannot tell the collective from 'Gather' (allgather, alltoall, allreduce, reducescatter)",
      json_err((base:gsub("Allgather", "Gather")) .. '{"sends": [[0, 0, 1, 0, 0]]}]}'))
  end)
end)

describe("TE-CCL JSON import", function()
  it("reads an all-gather from 7-Flows strings; ids that are switches are not ranks", function()
    local i = import.read(FIX .. "teccl_ag3.json")
    assert.are.same({ "TE-CCL JSON", "allgather", 3, 1, true }, { i.format, i.collective, i.ranks, i.chunks, i.inplace })
    -- GPU ids 1..3 become ranks 0..2; the relayed chunk goes output -> output
    local x = i.xfers[7] -- "Chunk 0 from 1 traveled over 2->3 in epoch 1", line 8
    assert.are.same({ 1, "output", 0, 2, "output", 0, 1, 8 }, { x.src, x.sbuf, x.sidx, x.dst, x.dbuf, x.didx, x.step, x.line })
    assert.are.equal("ok,ok", verify(i))
  end)

  it("reads an all-to-all (6-Flows, 'with volume', chunk paths) with a relay through scratch", function()
    local i = import.read(FIX .. "teccl_a2a3.json")
    assert.are.same({ "alltoall", 3, 1, false }, { i.collective, i.ranks, i.chunks, i.inplace })
    local relay = 0
    for _, x in ipairs(i.xfers) do
      if x.dbuf == "scratch" or x.sbuf == "scratch" then relay = relay + 1 end
    end
    assert.are.equal(2, relay) -- chunk 2 of GPU 0 waits on GPU 1 and leaves from there
    assert.are.equal("ok", verify(i))
  end)

  it("diagnoses", function()
    local function flows(list, extra)
      return ('{\n"7-Flows": [\n%s\n]%s\n}'):format(table.concat(list, ",\n"), extra or "")
    end
    assert.are.equal("t.json:3: 7-Flows[0]: cannot read flow \"Chunk 0 from 1 went to 2\"",
      json_err(flows { '"Chunk 0 from 1 went to 2"' }))
    assert.are.equal("t.json:4: 7-Flows[1]: GPU 2 forwards chunk 0 of GPU 0 in epoch 0 before it has it",
      json_err(flows { '"Chunk 0 from 0 traveled over 0->1 in epoch 0"', '"Chunk 0 from 0 traveled over 2->1 in epoch 0"',
        '"Chunk 0 from 1 traveled over 1->0 in epoch 0"', '"Chunk 0 from 2 traveled over 2->0 in epoch 0"' }))
    assert.are.equal("t.json:3: 7-Flows[0] moves volume 0.5 of a chunk; only whole chunks (volume 1) can be imported",
      json_err(flows { '"Chunk 0 from 0 traveled over 0->1 with volume 0.5 in epoch 0"' }))
    assert.are.equal('t.json:1: 8-Chunk paths: number out of range in "Demand at 0 for chunk 99999999999999999999999 from 1"',
      json_err(flows({ '"Chunk 0 from 0 traveled over 0->1 in epoch 0"' },
        ',\n"8-Chunk paths": {"Demand at 0 for chunk 99999999999999999999999 from 1": []}')))
    assert.are.equal("t.json:3: 7-Flows[0]: number out of range",
      json_err(flows { '"Chunk 0 from 0 traveled over 0->1 in epoch 99999999999999999999"' }))
    assert.are.equal("t.json:1: node 1 is a switch in some flows and a GPU in others",
      json_err(flows { '"Chunk 0 from 0 traveled over 0->1 in epoch 0"', '"Chunk 0 from 1 traveled over 2->0 in epoch 0 via switches 1"' }))
  end)
end)

describe("format detection", function()
  it("tells formats apart and names unknown ones", function()
    assert.are.equal("t.json:1: not a known algorithm format (JSON without TACCL 'steps'/'sends', TE-CCL 'Flows' or MSCCL++ 'gpus')",
      json_err '{"a": 1}')
    assert.are.equal("t.json:1: malformed JSON: Expected value but found T_END", json_err '{"a": ')
    assert.are.equal("t.txt:1: not a known algorithm format (MSCCL XML, TACCL JSON, TE-CCL JSON, MSCCL++ JSON)", json_err("hello", "t.txt"))
    assert.is_true(import.claims(FIX .. "ring_ag4.xml"))
    assert.is_false(import.claims "algorithms/allgather_ring.lua")
  end)
end)
