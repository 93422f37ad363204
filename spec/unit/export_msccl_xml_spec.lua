-- MSCCL XML export (lua/resccl/export/msccl_xml.lua) and plan:tbs().
local import = require "resccl.import"
local export = require "resccl.export.msccl_xml"
local resccl = require "resccl"

local function algorithms()
  local l = {}
  local p = assert(io.popen "ls algorithms/*.lua")
  for f in p:lines() do l[#l + 1] = f end
  p:close()
  return l
end

-- Export one placement, import the text back, verify every placement it claims.
local function round_trip(path, args, inplace)
  local alg = resccl.load(path)
  local prog, topo = alg:program(args)
  local plan, err = resccl.compile(prog, topo, { inplace = inplace })
  assert(not err, err)
  local xml, notes = export.write(plan, prog, { name = alg.name, inplace = inplace })
  local imp = import.from_text(xml, path .. ".xml", "msccl_xml")
  local back = import.algorithm(imp)
  local p2, t2 = back:program(args)
  local res = {}
  for _, ip in ipairs { false, true } do
    if not ip or back.inplace then
      local pl, e2 = resccl.compile(p2, t2, { inplace = ip })
      res[#res + 1] = e2 or "ok"
      assert.is_not_nil(pl)
    end
  end
  return table.concat(res, ","), imp, notes, xml
end

describe("plan:tbs()", function()
  it("lists every TB's primitives in program order with peers, buffers and waits", function()
    local plan = resccl.plan("algorithms/allgather_ring.lua", { ranks = 3 })
    local tbs = plan:tbs()
    assert.are.equal(3, #tbs)
    local seen, n = {}, 0
    for r, list in ipairs(tbs) do
      for _, prims in ipairs(list) do
        for _, q in ipairs(prims) do
          n = n + 1
          seen[q.id] = true
          assert.is_true(q.send_peer ~= r - 1 and q.recv_peer ~= r - 1)
          for _, w in ipairs(q.waits) do assert.is_number(w) end
        end
      end
    end
    assert.are.equal(plan:report().primitives, n)
    local q = tbs[1][1][1] -- rank 0 starts by sending its own chunk (copySend)
    assert.are.same({ "cs", 1, -1, "input", 0, "output", 0, 1 },
      { q.kind, q.send_peer, q.recv_peer, q.rbuf, q.ridx, q.wbuf, q.widx, q.cnt })
  end)

  it("refuses a plan that stopped before TB allocation", function()
    local alg = resccl.load "algorithms/allgather_ring.lua"
    local prog, topo = alg:program { ranks = 3 }
    local plan = resccl.compile(prog, topo, { stop_after = "sched" })
    assert.has_error(function() plan:tbs() end, "plan has no TB allocation (stage tb was not reached)")
  end)
end)

describe("MSCCL XML export", function()
  it("writes every attribute the newer executor requires", function()
    local _, _, _, xml = round_trip("algorithms/allreduce_ring.lua", { ranks = 4 }, false)
    local algo = xml:match "^<algo [^>]*>"
    for _, a in ipairs { "name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
      "minBytes", "maxBytes" } do
      assert.matches(" " .. a .. '="[^"]*"', algo)
    end
    assert.matches('nchunksperloop="4" ngpus="4" coll="allreduce" inplace="0" outofplace="1"', algo)
    for tb in xml:gmatch "<tb [^>]*>" do assert.matches('send="%-?%d+" recv="%-?%d+" chan="%d+"', tb) end
  end)

  it("splits TBs that talk to several peers, and says so", function()
    local v, imp, notes = round_trip("algorithms/allgather_allpairs.lua", { topo = "a100:2x4" }, false)
    assert.are.equal("ok", v)
    assert.matches("became several MSCCL TBs", notes.lines[1])
    for r = 1, 8 do assert.is_true(notes.tbs_per_rank[r] >= notes.our_tbs_per_rank[r]) end
    assert.are.same(notes.tbs_per_rank, imp.file_tbs)
  end)

  for _, path in ipairs(algorithms()) do
    it("round-trips " .. path .. " (export, import, verify)", function()
      local args = { topo = "a100:2x4" }
      -- an out-of-place export claims out-of-place only; an in-place one is
      -- in-place only, and the importer also runs it out-of-place
      assert.are.equal("ok", (round_trip(path, args, false)))
      if resccl.load(path).inplace then
        assert.are.equal("ok,ok", (round_trip(path, args, true)))
      end
    end)
  end
end)
