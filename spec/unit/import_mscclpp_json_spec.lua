-- MSCCL++ execution plan importer (lua/resccl/import/mscclpp_json.lua): every
-- op kind on small plans, channel and buffer resolution, exact diagnoses,
-- and the shared sample.
local h = require "helper"
local import = require "resccl.import"
local resccl = require "resccl"

local FIX = "spec/fixtures/import/"
local SHARED = "../shared/msccl-xml/"

local function verdict(i) return h.import_verdict(i, i.ranks * i.chunks * 16) end

-- Chunk ranges of an op: local {type, index, size} and remote {buffer_id, ...}.
local function L(ty, index, size) return ('{"type": "%s", "index": %d, "size": %d}'):format(ty, index, size or 1) end
local function R(id, index, size) return ('{"buffer_id": %d, "index": %d, "size": %d}'):format(id, index, size or 1) end
local function op(name, src, dst, extra)
  local o = { ('"name": "%s"'):format(name) }
  if src then o[#o + 1] = ('"src_buff": [%s]'):format(table.concat(src, ", ")) end
  if dst then o[#o + 1] = ('"dst_buff": [%s]'):format(table.concat(dst, ", ")) end
  if extra then o[#o + 1] = extra end
  return "{" .. table.concat(o, ", ") .. "}"
end
local MEM, PORT = '"channel_type": "memory"', '"channel_type": "port"'
local function sig(name, ty) return op(name, nil, nil, ('"channel_ids": [0], "channel_type": "%s"'):format(ty or "memory")) end

-- A plan on 2 GPUs as JSON text, one op per line. Each GPU has a memory and a
-- port channel to the other, one semaphore, and reaches the other's input,
-- output and scratch as remote buffers 0, 1 and 2 through either channel
-- type. Line 1 opens the plan, each GPU and TB takes one line, then its ops:
-- with one TB per GPU, gpu 0's ops start at line 4 and gpu 1's after them.
--   p = { coll, inplace, protocol, chunks = {in, out, scratch}, [0] = {tb ops...}, [1] = ... }
local function plan(p)
  local ch = p.chunks or { 2, 2, 0 }
  local o = { ('{"name": "t", "collective": "%s", "protocol": "%s", "inplace": %s, "gpus": ['):format(p.coll or "allreduce",
    p.protocol or "Simple", tostring(p.inplace or false)) }
  for r = 0, 1 do
    local q = 1 - r
    o[#o + 1] = ('{"id": %d, "input_chunks": %d, "output_chunks": %d, "scratch_chunks": %d, '
      .. '"channels": [{"channel_type": "memory", "connected_to": [%d]}, {"channel_type": "port", "connected_to": [%d]}], '
      .. '"remote_buffers": [{"rank": %d, "type": "i", "access_channel_types": ["memory", "port"]}, '
      .. '{"rank": %d, "type": "o", "access_channel_types": ["memory", "port"]}, '
      .. '{"rank": %d, "type": "s", "access_channel_types": ["memory", "port"]}], '
      .. '"semaphores": [{"init_value": 0}], "threadblocks": ['):format(r, ch[1], ch[2], ch[3], q, q, q, q, q)
    for t, ops in ipairs(p[r]) do
      o[#o + 1] = ('{"id": %d, "channels": [{"channel_type": "memory", "channel_ids": [0]}, '
        .. '{"channel_type": "port", "channel_ids": [0]}], "remote_buffer_refs": ['
        .. '{"access_channel_type": "memory", "remote_buffer_ids": [0, 1, 2]}, '
        .. '{"access_channel_type": "port", "remote_buffer_ids": [0, 1, 2]}], "ops": ['):format(t - 1)
      for k, x in ipairs(ops) do o[#o + 1] = x .. (k < #ops and "," or "") end
      o[#o + 1] = "]}" .. (t < #p[r] and "," or "")
    end
    o[#o + 1] = "]}" .. (r == 0 and "," or "")
  end
  o[#o + 1] = "]}"
  return table.concat(o, "\n") .. "\n"
end
local function load(p) return import.from_text(plan(p), "t.json") end
local function err(p) return h.pcall_err(import.from_text, type(p) == "table" and plan(p) or p, "t.json") end

-- Each GPU r reduces chunk r with rres (the shape of the shared sample).
local function rres_ar(r)
  return { { sig "rlxsignal", sig "rlxwait", op("rres", { L("i", r), R(0, r) }, { L("i", r), R(0, r) }, MEM .. ', "reduce_op": "sum"'),
    sig "signal", sig "wait" } }
end

describe("MSCCL++ JSON import", function()
  describe("op kinds", function()
    it("copy, put, signal, wait and nop: a ring all-gather; channel ids resolve through the TB's list", function()
      local i = import.read(FIX .. "mscclpp_ring_ag3.json")
      assert.are.same({ "MSCCL++ JSON", "allgather", 3, 1, false }, { i.format, i.collective, i.ranks, i.chunks, i.inplace })
      assert.are.same({ 1, 1, 1 }, i.file_tbs)
      assert.is_nil(i.hints)
      assert.are.equal(9, #i.xfers)
      -- gpu 1 forwards gpu 0's chunk only after its wait: round 1, line 35
      local x = i.xfers[8]
      assert.are.same({ 1, "output", 0, 2, "output", 0, 1, 35 }, { x.src, x.sbuf, x.sidx, x.dst, x.dbuf, x.didx, x.step, x.line })
      assert.are.equal("ok", verdict(i))
      -- gpu 1's TB lists its channels as [1, 0]: read in file order, it would
      -- signal its predecessor and wait on its successor
      local text = h.read(FIX .. "mscclpp_ring_ag3.json"):gsub('"channel_ids": %[1, 0%]', '"channel_ids": [0, 1]')
      assert.matches("^t%.json:%d+: deadlock in the file's own schedule: ", h.pcall_err(import.from_text, text, "t.json"))
    end)

    it("get, rlxsignal/rlxwait and barrier: an in-place all-gather; two channels to one peer pair in order", function()
      local i = import.read(FIX .. "mscclpp_get_ag2.json")
      assert.are.same({ "allgather", 2, 2, true, false }, { i.collective, i.ranks, i.chunks, i.inplace, i.outofplace })
      -- gpu 0 tb 1 reads gpu 1's output chunk 3
      local x = i.xfers[4]
      assert.are.same({ 1, "output", 3, 0, "output", 3, 24 }, { x.src, x.sbuf, x.sidx, x.dst, x.dbuf, x.didx, x.line })
      assert.are.same({ -1, -1 }, { i.xfers[1].step, i.xfers[2].step }) -- placement: input into output block r
      assert.are.equal("ok,ok", verdict(i))
    end)

    it("pws, flush and re through port channels", function()
      local i = import.read(FIX .. "mscclpp_port_ar2.json")
      assert.are.same({ 0, "input", 1, "scratch", 2, 12 }, { i.xfers[1].src, i.xfers[1].sbuf, i.xfers[1].dst, i.xfers[1].dbuf,
        i.xfers[1].cnt, i.xfers[1].line })
      assert.are.equal("reduce", i.xfers[4].op)
      assert.are.equal("ok", verdict(i))
    end)

    it("rre and res read and write the peer's buffers; get fills scratch", function()
      local i = import.read(FIX .. "mscclpp_reduce_ar2.json")
      local ops = {}
      for _, x in ipairs(i.xfers) do ops[#ops + 1] = x.what:match "%((%a+)%)" .. ":" .. x.op end
      assert.are.same({ "rre:copy", "rre:reduce", "put:copy", "get:copy", "res:copy", "res:reduce", "res:copy" }, ops)
      assert.are.equal("ok", verdict(i))
    end)

    it("rres reduces into its own source and writes the result on", function()
      local i = load { inplace = true, [0] = rres_ar(0), [1] = rres_ar(1) }
      assert.are.same({ "reduce", "copy" }, { i.xfers[3].op, i.xfers[4].op })
      local g1 = rres_ar(1)
      g1[1][3] = g1[1][3]:gsub('"sum"', '"max"')
      local max = load { inplace = true, [0] = rres_ar(0), [1] = g1 }
      assert.are.equal("t.json:15: gpu 1 tb 0 op 2 (rres) reduces with 'max'; resccl reduces with the run's op (op=, sum by "
        .. "default)", max.warnings[1])
      assert.are.same({ 1, 0, "output", 0 }, { i.xfers[3].src, i.xfers[3].dst, i.xfers[3].dbuf, i.xfers[3].didx })
      assert.are.equal("ok,ok", verdict(i))
    end)

    it("an in-place all-gather's input is output block r; a get whose indices differ is imported as written, with a warning",
      function()
        local function g(r) return { { op("put", { L("i", 0) }, { R(1, r) }, MEM), sig "signal", sig "wait" } } end
        local i = load { coll = "allgather", inplace = true, chunks = { 1, 2, 0 }, [0] = g(0), [1] = g(1) }
        assert.are.same({ 1, "output", 1, 0, "output", 1 }, { i.xfers[4].src, i.xfers[4].sbuf, i.xfers[4].sidx, i.xfers[4].dst,
          i.xfers[4].dbuf, i.xfers[4].didx }) -- gpu 1's input chunk 0
        assert.are.equal("ok,ok", verdict(i))
        local function get(r) return { { sig "signal", sig "wait", op("get", { R(0, 0) }, { L("o", 1 - r) }, MEM) } } end
        i = load { coll = "allgather", inplace = true, chunks = { 1, 2, 0 }, [0] = get(0), [1] = get(1) }
        assert.are.equal("t.json:6: gpu 0 tb 0 op 2 (get) src_buff[0] reads chunk 0 and dst_buff[0] writes chunk 1; MSCCL++'s "
          .. "executor (handleGet) swaps the two offsets, imported as written", i.warnings[1])
        assert.are.equal("ok,ok", verdict(i))
      end)

    it("pwsf signals like pws", function()
      local function g(r)
        return { { op("pwsf", { L("i", 0, 2) }, { R(2, 0, 2) }, '"channel_ids": [0], ' .. PORT), sig("wait", "port"),
          op("re", { L("s", 0, 2), L("i", 0, 2) }, { L("o", 0, 2) }) } }
      end
      assert.are.equal("ok", verdict(load { chunks = { 2, 2, 2 }, [0] = g(0), [1] = g(1) }))
    end)

    it("LL packets: ppkt, respkt and upkt; a packet read waits for the packet write", function()
      local i = import.read(FIX .. "mscclpp_packet_ar2.json")
      assert.are.same({ 0, 1, 1, 1, 2, 2 }, { i.xfers[1].step, i.xfers[3].step, i.xfers[4].step, i.xfers[5].step,
        i.xfers[9].step, i.xfers[10].step })
      assert.are.equal("ok", verdict(i))
    end)

    it("LL packets: cpkt, rppkt, recspkt, recpkt and repkt", function()
      -- all-gather: own block into packets, then relayed to the peer
      local function ag(r)
        return { { op("copy", { L("i", 0) }, { L("o", r) }), op("cpkt", { L("i", 0) }, { L("s", 0) }),
          op("rppkt", { L("s", 0) }, { R(2, 1), R(2, 2) }, MEM), op("upkt", { L("s", 1) }, { L("o", 1 - r) }) } }
      end
      local i = load { coll = "allgather", protocol = "LL", chunks = { 1, 2, 3 }, [0] = ag(0), [1] = ag(1) }
      local function at(k) local x = i.xfers[k] return { x.src, x.sbuf, x.sidx, x.dst, x.dbuf, x.didx } end
      -- rppkt's one source goes to both destinations
      assert.are.same({ { 0, "scratch", 0, 1, "scratch", 1 }, { 0, "scratch", 0, 1, "scratch", 2 } }, { at(5), at(6) })
      assert.are.equal("ok", verdict(i))
      -- all-reduce: gpu 0 sends its result with recspkt, gpu 1 keeps it in packets (recpkt) and relays it (rppkt)
      local ar = {
        [0] = { { op("ppkt", { L("i", 1) }, { R(2, 0) }, MEM), op("recspkt", { L("i", 0), L("s", 0) }, { L("o", 0), L("s", 2), R(2, 1) }, MEM),
          op("upkt", { L("s", 1) }, { L("o", 1) }) } },
        [1] = { { op("ppkt", { L("i", 0) }, { R(2, 0) }, MEM), op("recpkt", { L("i", 1), L("s", 0) }, { L("o", 1), L("s", 2) }),
          op("rppkt", { L("s", 2) }, { R(2, 1) }, MEM), op("upkt", { L("s", 1) }, { L("o", 0) }) } },
      }
      assert.are.equal("ok", verdict(load { protocol = "LL", chunks = { 2, 2, 3 }, [0] = ar[0], [1] = ar[1] }))
      -- reduce-scatter: repkt sums the local block with the peer's packets
      local function rs(r)
        return { { op("ppkt", { L("i", 1 - r) }, { R(2, 0) }, MEM), op("repkt", { L("i", r), L("s", 0) }, { L("o", 0) }) } }
      end
      local i = load { coll = "reducescatter", protocol = "LL", chunks = { 2, 1, 1 }, [0] = rs(0), [1] = rs(1) }
      assert.are.same({ "reducescatter", 1 }, { i.collective, i.chunks })
      assert.are.same({}, i.warnings)
      assert.are.equal("ok", verdict(i))
      -- in place it works in its input: staged in scratch after the plan's own, so that out of place the
      -- caller's input stays as it was
      i = load { coll = "reducescatter", inplace = true, protocol = "LL", chunks = { 2, 1, 1 }, [0] = rs(0), [1] = rs(1) }
      assert.are.same({ 0, "input", 0, 0, "scratch", 1 }, { i.xfers[1].src, i.xfers[1].sbuf, i.xfers[1].sidx,
        i.xfers[1].dst, i.xfers[1].dbuf, i.xfers[1].didx })
      local prog, topo = import.algorithm(i):program {}
      for _, inplace in ipairs { false, true } do
        local p = assert(resccl.compile(prog, topo, { inplace = inplace }))
        assert.are.equal(0, assert(p:exec { count = 64 }).wrong)
      end
    end)

    it("sem_release and sem_acquire order TBs of one GPU", function()
      local function g(r, sync)
        return {
          { op("copy", { L("i", 0) }, { L("o", r) }), sync and op("sem_release", nil, nil, '"semaphore_ids": [0]') or op "nop" },
          { sync and op("sem_acquire", nil, nil, '"semaphore_ids": [0]') or op "nop", op("put", { L("o", r) }, { R(1, r) }, MEM),
            sig "signal", sig "wait" },
        }
      end
      assert.are.equal("ok", verdict(load { coll = "allgather", chunks = { 1, 2, 0 }, [0] = g(0, true), [1] = g(1, true) }))
      assert.are.equal("t.json:9: gpu 0 tb 1 op 1 (put) and gpu 0 tb 0 op 0 (copy) (line 4) race on gpu 0's output chunk 0: "
        .. "no signal/wait, barrier, semaphore or packet orders them",
        err { coll = "allgather", chunks = { 1, 2, 0 }, [0] = g(0, false), [1] = g(1, false) })
    end)

    it("a semaphore's initial count lets as many acquires through, at no cost per count", function()
      local function g(r)
        return {
          { op("copy", { L("i", 0) }, { L("o", r) }), op("sem_release", nil, nil, '"semaphore_ids": [0]') },
          { op("sem_acquire", nil, nil, '"semaphore_ids": [0]'), op("put", { L("o", r) }, { R(1, r) }, MEM),
            sig "signal", sig "wait" },
        }
      end
      -- the acquire takes one of the 2^20 initial releases, not the copy's
      local text = plan { coll = "allgather", chunks = { 1, 2, 0 }, [0] = g(0), [1] = g(1) }
        :gsub('"init_value": 0', '"init_value": 1048576')
      collectgarbage "collect"
      collectgarbage "stop" -- what the import allocates stays counted
      local before = collectgarbage "count"
      local e = h.pcall_err(import.from_text, text, "t.json")
      local kib = collectgarbage "count" - before
      collectgarbage "restart"
      assert.matches("^t.json:9: gpu 0 tb 1 op 1 %(put%) and gpu 0 tb 0 op 0 %(copy%) %(line 4%) race", e)
      assert.is_true(kib < 16384, ("the import allocated %.0f KiB"):format(kib))
    end)

    it("tbg_info: each TB of a group moves its slice, so chunks are split", function()
      -- Two TBs copy and put a half each of a 2-chunk block, meet at a
      -- barrier, and TB 0 signals the peer for both.
      local function g(r)
        local barrier = op("barrier", nil, nil, '"barrier_id": 0, "num_threadblocks": 2')
        local tbs = {}
        for t = 0, 1 do
          local tbg = ('"tbg_info": {"tb_id": %d, "tbg_size": 2}'):format(t)
          tbs[t + 1] = { op("copy", { L("i", 0, 2) }, { L("o", 2 * r, 2) }, tbg),
            op("put", { L("i", 0, 2) }, { R(1, 2 * r, 2) }, MEM .. ", " .. tbg), barrier }
        end
        table.move({ sig "signal", sig "wait" }, 1, 2, 4, tbs[1])
        return tbs
      end
      local i = load { coll = "allgather", chunks = { 2, 4, 0 }, [0] = g(0), [1] = g(1) }
      assert.are.same({ 4, 2 }, { i.chunks, i.details.split })
      assert.are.same({ 0, "input", 0, "output", 0, 2 }, { i.xfers[1].src, i.xfers[1].sbuf, i.xfers[1].sidx, i.xfers[1].dbuf,
        i.xfers[1].didx, i.xfers[1].cnt }) -- gpu 0 tb 0: the first half of 2 chunks
      assert.are.equal("ok", verdict(i))
    end)

    it("takes 'type' for a GPU channel's 'channel_type', with a warning", function()
      local function g(r) return { { op("put", { L("i", 0) }, { R(1, r) }, MEM), sig "signal", sig "wait",
        op("copy", { L("i", 0) }, { L("o", r) }) } } end
      local text = plan { coll = "allgather", chunks = { 1, 2, 0 }, [0] = g(0), [1] = g(1) }
      text = text:gsub('{"channel_type": "memory", "connected_to"', '{"type": "memory", "connected_to"')
      local i = import.from_text(text, "t.json")
      assert.are.same({ "t.json:2: gpus[0].channels[0] names its type with 'type'; the executor reads 'channel_type'",
        "t.json:10: gpus[1].channels[0] names its type with 'type'; the executor reads 'channel_type'" }, i.warnings)
      assert.are.equal("ok", verdict(i))
    end)

    it("an in-place all-to-all reaches its own blocks through the input", function()
      local function g(r)
        return { { op("put", { L("i", 1 - r) }, { R(2, 0) }, MEM), sig "signal", sig "wait",
          op("copy", { L("s", 0) }, { L("o", 1 - r) }) } }
      end
      local i = load { coll = "alltoall", inplace = true, chunks = { 2, 2, 1 }, [0] = g(0), [1] = g(1) }
      assert.are.same({ "alltoall", 1, true }, { i.collective, i.chunks, i.inplace })
      assert.are.equal("ok,ok", verdict(i))
    end)
  end)

  describe("diagnoses", function()
    it("refuses ops that are not transfers, naming them", function()
      local nvls = op("glres", { '{"switch_channel_id": 0, "index": 0, "size": 1}' }, { '{"switch_channel_id": 0, "index": 0, "size": 1}' },
        '"channel_type": "switch", "reduce_op": "sum"')
      assert.are.equal("t.json:5: gpu 0 tb 0 op 1 (glres) is an NVLS multimem load-reduce-store (switch channel); "
        .. "it cannot be expressed as transfers", err { [0] = { { op "nop", nvls } }, [1] = { {} } })
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (pipeline) is a loop over byte units whose number depends on the message "
        .. "size; it cannot be expressed as transfers",
        err { [0] = { { op("pipeline", nil, nil, '"iter_context": {"unit_size": 1024, "num_chunks": 1}, "ops": []') } }, [1] = { {} } })
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (copy) src_buff[0] addresses an NVLS switch channel; multimem access "
        .. "cannot be expressed as transfers",
        err { [0] = { { op("copy", { '{"switch_channel_id": 0, "index": 0, "size": 1}' }, { L("o", 0) }) } }, [1] = { {} } })
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (rrcs): unknown op 'rrcs'", err { [0] = { { op "rrcs" } }, [1] = { {} } })
    end)

    it("reports malformed JSON at its line", function()
      local text = plan { [0] = { { op("copy", { L("i", 0) }, { L("o", 0) }) } }, [1] = { {} } }
      assert.are.equal("t.json:4: malformed JSON: Expected comma or object end but found T_STRING",
        err((text:gsub('"index": 0, "size"', '"index": 0 "size"', 1))))
    end)

    it("checks chunk ranges, buffers and channels against the plan", function()
      local function one(o, ch) return err { chunks = ch, [0] = { { o } }, [1] = { {} } } end
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (copy) dst_buff[0]: chunks 1..2 are out of range: gpu 0's output buffer "
        .. "has 2 chunks", one(op("copy", { L("i", 0, 2) }, { L("o", 1, 2) })))
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (get) src_buff[0]: chunks 0..0 are out of range: gpu 1's scratch buffer "
        .. "has 0 chunks", one(op("get", { R(2, 0) }, { L("o", 0) }, MEM)))
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (get) src_buff[0].buffer_id=3, but gpu 0 tb 0 has 3 remote buffers for "
        .. "memory channels", one(op("get", { R(3, 0) }, { L("o", 0) }, MEM)))
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (put) dst_buff[0] is a remote buffer, but the op's channel_type is nothing "
        .. "(memory or port)", one(op("put", { L("i", 0) }, { R(1, 0) })))
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (get): src_buff must be remote chunk ranges, got local",
        one(op("get", { L("i", 0) }, { L("o", 0) }, MEM)))
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (rres): src_buff must be a local chunk range, then remote ones, got local, local",
        one(op("rres", { L("i", 0), L("o", 0) }, { L("i", 0) }, MEM)))
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (put) moves 2 chunks into 1", one(op("put", { L("i", 0, 2) }, { R(1, 0) }, MEM)))
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (rre): only put, pws, pwsf, ppkt and rppkt use port channels; this op "
        .. "reaches remote buffers through memory channels",
        one(op("rre", { L("i", 0), R(0, 0) }, { L("o", 0) }, PORT)))
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (signal) uses memory channel 1, but gpu 0 tb 0 has 1",
        one(op("signal", nil, nil, '"channel_ids": [1], ' .. MEM)))
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (upkt): src_buff[0] is LL packets, which live in scratch, not in gpu 0's "
        .. "input buffer", one(op("upkt", { L("i", 0) }, { L("o", 0) })))
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (barrier) num_threadblocks must be an integer in 1..1, got 2",
        one(op("barrier", nil, nil, '"barrier_id": 0, "num_threadblocks": 2')))
    end)

    it("checks the plan's shape", function()
      local text = plan { [0] = { { op "nop" } }, [1] = { { op "nop" } } }
      assert.are.equal("t.json:1: collective 'broadcast' is not supported (allreduce, allgather, reducescatter, alltoall)",
        err((text:gsub('"allreduce"', '"broadcast"'))))
      assert.are.equal("t.json:1: 'inplace' must be true or false, got 'yes'", err((text:gsub("false", '"yes"', 1))))
      assert.are.equal("t.json:2: gpus[0] has id 1; GPU ids must be 0..1 in order", err((text:gsub('"id": 0', '"id": 1', 1))))
      assert.are.equal("t.json:3: gpus[0].threadblocks[0] has id 3; TB ids must be 0..0 in order",
        err((text:gsub('{"id": 0, "channels"', '{"id": 3, "channels"', 1))))
      assert.are.equal("t.json:7: gpu 1 has 2 input and 4 output chunks; allreduce on 2 GPUs needs 2 and 2 (as gpu 0)",
        err((text:gsub('"output_chunks": 2', '"output_chunks": 4', 2):gsub('"output_chunks": 4', '"output_chunks": 2', 1))))
      assert.are.equal("t.json:1: the file moves no data", err(text))
      assert.are.equal("t.json:3: an MSCCL++ plan in the 2024 schema (inputChunks, ops with srcs/dsts); resccl reads the "
        .. "current one (input_chunks, src_buff/dst_buff): regenerate the plan with MSCCL++'s DSL",
        err '{"name": "t", "colletive": "allreduce", "inplace": true,\n"gpus": [\n{"id": 0, "inputChunks": 1, "threadblocks": []}]}')
      local big = op("copy", { L("i", 0, 1 << 20) }, { L("o", 0, 1 << 20) })
      assert.are.equal("t.json:6: the plan's ops read and write over 4194304 chunks in all; resccl handles at most that many",
        err { chunks = { 1 << 20, 1 << 20, 0 }, [0] = { { big, big, big } }, [1] = { {} } })
    end)

    it("reports a deadlock, a data race and a signal without a channel back", function()
      assert.are.equal("t.json:4: deadlock in the file's own schedule: gpu 0 tb 0 op 0 (wait) (line 4) waits for a signal "
        .. "from gpu 1 on memory channel 0; gpu 1 tb 0 op 0 (wait) (line 11) waits for a signal from gpu 0 on memory channel 0",
        err { [0] = { { sig "wait", sig "signal", op("copy", { L("i", 0) }, { L("o", 0) }) } }, [1] = { { sig "wait", sig "signal" } } })
      local barrier = op("barrier", nil, nil, '"barrier_id": 0, "num_threadblocks": 2')
      local i = load { [0] = { { sig "signal", sig "signal", op("copy", { L("i", 0) }, { L("o", 0) }) } }, [1] = { { sig "wait" } } }
      assert.are.same({ "t.json:5: 1 signal to gpu 1 on memory channel 0 is never waited for" }, i.warnings)
      assert.are.equal("t.json:4: deadlock in the file's own schedule: gpu 0 tb 0 op 0 (barrier) (line 4) waits at barrier 0 "
        .. "for 2 TBs, 1 there; gpu 0 tb 1 op 0 (wait) (line 8) waits for a signal from gpu 1 on memory channel 0", err { [0] = { { barrier, op("copy", { L("i", 0) }, { L("o", 0) }) }, { sig "wait", barrier } },
          [1] = { {} } })
      assert.are.equal("t.json:9: gpu 1 tb 0 op 0 (copy) and gpu 0 tb 0 op 0 (put) (line 4) race on gpu 1's output chunk 0: "
        .. "no signal/wait, barrier, semaphore or packet orders them",
        err { [0] = { { op("put", { L("i", 0) }, { R(1, 0) }, MEM) } }, [1] = { { op("copy", { L("i", 0) }, { L("o", 0) }) } } })
      local text = plan { [0] = { { sig "signal", op("copy", { L("i", 0) }, { L("o", 0) }) } }, [1] = { { sig "wait" } } }
      -- gpu 0 has two memory channels to gpu 1 and signals on the second
      text = text:gsub('"connected_to": %[1%]', '"connected_to": [1, 1]', 1)
      text = text:gsub('{"channel_type": "memory", "channel_ids": %[0%]}', '{"channel_type": "memory", "channel_ids": [1]}', 1)
      assert.are.equal("t.json:4: gpu 0 tb 0 op 0 (signal): memory channel 1 of gpu 0 is its memory channel #2 to gpu 1, "
        .. "but gpu 1 has 1 memory channel back", err(text))
    end)

    it("gives the verifier's verdict on a plan that misses a reduction", function()
      -- gpu r gets the peer's chunk instead of reducing it with rre
      local function g(r)
        return { { sig "rlxsignal", sig "rlxwait", op("get", { R(0, 1 - r) }, { L("o", 1 - r) }, MEM),
          op("copy", { L("i", r) }, { L("o", r) }), sig "signal", sig "wait" } }
      end
      assert.are.equal("t.json:7: allreduce result wrong: rank 0 output chunk 0 holds 1 of 2 contributions "
        .. "(missing rank 1's input chunk 0)", verdict(load { [0] = g(0), [1] = g(1) }))
    end)
  end)

  describe("shared sample", function()
    it("imports, verifies and executes allreduce.json (rres between signal/wait pairs)", function()
      local path = SHARED .. "allreduce.json"
      if not io.open(path) then return pending(SHARED .. " is not present") end
      local i = import.read(path)
      assert.are.same({ "allreduce", 2, 16, true, 34 }, { i.collective, i.ranks, i.chunks, i.inplace, #i.xfers })
      assert.are.same({ 8, 8 }, i.file_tbs)
      assert.are.same({}, i.warnings)
      assert.are.equal("ok,ok", verdict(i))
    end)
  end)
end)
