-- lua/resccl/dsl.lua: registration, the builder's two styles, loading.
local resccl = require "resccl"
local h = require "helper"

describe("resccl.algorithm", function()
  local ok_def = { name = "x", collective = "allgather", build = function() end }

  it("registers an algorithm with its definition site", function()
    local alg = resccl.algorithm(ok_def)
    assert.equal("x", alg.name)
    assert.matches("dsl_spec.lua:%d+", alg.file .. ":" .. alg.line)
    assert.is_true(alg.inplace)
  end)

  it("rejects unknown keys with the known ones listed", function()
    local def = { name = "x", collective = "allgather", build = function() end, chunk = 3 }
    assert.matches("dsl_spec.lua:%d+: unknown key 'chunk' in resccl.algorithm{} %(known: build, chunks,",
      h.pcall_err(function() local alg = resccl.algorithm(def) return alg end))
  end)

  it("rejects wrong types, missing keys and unknown collectives", function()
    assert.matches("key 'name' must be a string, got number",
      h.pcall_err(resccl.algorithm, { name = 1, collective = "allgather", build = print }))
    assert.matches("resccl.algorithm{} needs 'build'",
      h.pcall_err(resccl.algorithm, { name = "x", collective = "allgather" }))
    assert.matches("unknown collective 'broadcast'",
      h.pcall_err(resccl.algorithm, { name = "x", collective = "broadcast", build = print }))
  end)

  it("checks every key's value at the call's line: integers, ranges, the name's grammar", function()
    local function def_err(k, v)
      local def = { name = "x", collective = "allgather", build = print }
      def[k] = v
      return h.pcall_err(function() local alg = resccl.algorithm(def) return alg end)
    end
    local line = debug.getinfo(1, "l").currentline - 2 -- the resccl.algorithm call above
    local at = "^spec/unit/dsl_spec.lua:" .. line .. ": "
    assert.matches(at .. "key 'ranks' must be an integer from 1 to 1024, got 2.5$", def_err("ranks", 2.5))
    assert.matches(at .. "key 'ranks' must be an integer from 1 to 1024, got 0$", def_err("ranks", 0))
    assert.matches(at .. "key 'ranks' must be an integer from 1 to 1024, got %-?nan$", def_err("ranks", 0 / 0))
    assert.matches(at .. "key 'chunks' must be an integer from 1 to 65536, got 1e%+100$", def_err("chunks", 1e100))
    assert.matches(at .. "key 'chunks' must be an integer from 1 to 65536, got 1.5$", def_err("chunks", 1.5))
    assert.matches(at .. "key 'chunks' must be a number or function, got string$", def_err("chunks", "2"))
    for _, k in ipairs { "collective", "description" } do
      assert.matches(at .. "key '" .. k .. "' must be a string, got table$", def_err(k, {}))
    end
    assert.matches(at .. "key 'inplace' must be a boolean, got number$", def_err("inplace", 1))
    assert.matches(at .. "key 'supports' must be a function, got boolean$", def_err("supports", true))
    assert.matches(at .. "key 'params' must be a table, got string$", def_err("params", "n=1"))
    -- names: one word of at most 63 bytes; nothing that could end a comment or a line
    for _, bad in ipairs { "", "a b", "a*/b", "a\nb", "a]]b", "--a", "a\0b", "a\255b", ".a", ("n"):rep(64) } do
      assert.matches(at .. "key 'name' must be 1 to 63 letters, digits and '_.+-', not starting with '.+-'$",
        def_err("name", bad))
    end
    for _, good in ipairs { "allreduce_ring", "ring-2.1+x", "_", ("n"):rep(63) } do
      assert.equal(good, resccl.algorithm { name = good, collective = "allgather", build = print }.name)
    end
    -- and where a wrong value used to fail inside resccl: at the script's line
    local err = h.pcall_err(function()
      local alg = resccl.algorithm { name = "x", collective = "allgather", build = print, ranks = 2.5 }
      return alg
    end)
    assert.matches("^spec/unit/dsl_spec.lua:%d+: key 'ranks' must be an integer", err)
  end)

  it("defaults alltoall to out-of-place only", function()
    assert.is_false(resccl.algorithm { name = "a", collective = "alltoall", build = print }.inplace)
  end)
end)

describe("builder", function()
  local function program(build, args, extra)
    local def = { name = "t", collective = "allgather", build = build }
    for k, v in pairs(extra or {}) do def[k] = v end
    return resccl.algorithm(def):program(args or { ranks = 4 })
  end

  it("records the paper's transfers plus the placement copy", function()
    local prog = program(function(a)
      for r = 0, a.ranks - 1 do a:transfer(r, (r + 1) % a.ranks, 0, r, "recv") end
    end)
    local info = prog:info()
    assert.equal(4 + 4, info.transfers) -- 4 transfers, 4 input-to-output copies
    assert.equal(1, info.chunks)
  end)

  it("gives ranks, nodes and GPUs per node from the topology", function()
    local seen
    program(function(a)
      seen = { a.ranks, a.nodes, a.gpn, a:node(5), a:local_rank(5), a:rank(1, 2) }
      a:transfer(0, 1, 0, 0, "recv")
    end, { topo = "a100:2x4" })
    assert.same({ 8, 2, 4, 1, 1, 6 }, seen)
  end)

  it("checks transfer arguments at the caller's line", function()
    local err = h.pcall_err(program, function(a) a:transfer(0, 1, 0, 0, "send") end)
    assert.matches("dsl_spec.lua:%d+: bad argument #5 to 'transfer' %(\"recv\" or \"rrc\" expected, got send%)", err)
    err = h.pcall_err(program, function(a) a:transfer(0, 1.5, 0, 0, "recv") end)
    assert.matches("bad argument #2 to 'transfer' %(integer expected, got float%)", err)
  end)

  it("reads nothing from fields a script changes, and names the script's line for a bad self", function()
    -- the builder's sizes and a ref's place are the DSL's own
    local prog = program(function(a)
      local r = a:chunk(0, "input", 0)
      r.count, r.rank, r.buf, r.a = 2.5, "x", {}, 5
      a.ranks, a.chunks, a.gpn, a.collective = "x", 2.5, 0, "alltoall"
      r:copy(1, "output", 0)
      assert(a:node(5) == 1 and a:local_rank(5) == 1 and a:rank(1, 1) == 5)
      a:transfer(1, 0, 0, 1, "recv")
    end, { topo = "a100:2x4" })
    assert.equal(1 + 8 + 1, prog:info().transfers) -- the copy, the placement copies, the transfer
    local line = debug.getinfo(1, "l").currentline
    for i, build in ipairs {
      function(a) a.transfer({}, 0, 1, 0, 0, "recv") end,
      function(a) a:chunk(0, "input", 0).copy({}, 1) end,
      function(a) a:chunk(0, "input", 0):reduce({}) end,
      function(a) a:node "x" end,
    } do
      local want = ({ "calling 'transfer' on bad self %(a builder expected%)",
        "calling 'copy' on bad self %(a chunk expected%)", "bad argument #1 to 'reduce' %(chunk expected%)",
        "bad argument #1 to 'node' %(integer expected, got string%)" })[i]
      assert.matches("^spec/unit/dsl_spec.lua:" .. line + 1 + i .. ": " .. want .. "$", h.pcall_err(program, build))
    end
  end)

  it("reports out-of-range ranks and chunks from C at the caller's line", function()
    local err = h.pcall_err(program, function(a) a:transfer(0, 9, 0, 0, "recv") end)
    assert.matches("dsl_spec.lua:%d+: destination rank 9 out of range %(program has 4 ranks%)", err)
    err = h.pcall_err(program, function(a) a:chunk(0, "input", 1):copy(1, "output", 0) end)
    assert.matches("dsl_spec.lua:%d+: input chunk 1 out of range %(input has 1 chunks per rank%)", err)
  end)

  it("reports a program too large for the core at the algorithm's line", function()
    local err = h.pcall_err(program, function(a) a:chunk(0, "input", 0):copy(1, "output", 0) end, { ranks = 64 },
      { chunks = 65536 })
    assert.matches("dsl_spec.lua:%d+: 64 ranks of 65536 chunks per block make 272629760 input and output chunks", err)
    err = h.pcall_err(program, print, { ranks = 4 }, { chunks = function() return 100000 end })
    assert.matches("^[^:]*dsl_spec.lua:%d+: chunks must be 1..65536, got 100000$", err)
  end)

  it("supports MSCCLang-style chunks, copy and reduce", function()
    local alg = resccl.algorithm {
      name = "ar2", collective = "allreduce", chunks = 1,
      build = function(a)
        a:chunk(1, "input", 0):copy(0, "scratch", 0)
        a:chunk(0, "input", 0):copy(0, "output", 0):reduce(a:chunk(0, "scratch", 0))
        a:chunk(0, "output", 0):copy(1, "output", 0)
      end,
    }
    local prog, topo = alg:program { ranks = 2 }
    assert.equal(4, prog:info().transfers)
    assert.equal(1, prog:info().scratch)
    local plan, err = resccl.compile(prog, topo)
    assert.is_nil(err)
    assert.is_true(plan:report().verified)
  end)

  it("validates parameters against their defaults", function()
    local alg = resccl.algorithm {
      name = "p", collective = "alltoall", params = { chunks = 1, fast = false },
      chunks = function(a) return a.args.chunks end,
      build = function(a)
        for r = 0, a.ranks - 1 do
          for q = 0, a.ranks - 1 do
            a:chunk(r, "input", q * a.chunks, a.chunks):copy(q, "output", r * a.chunks)
          end
        end
      end,
    }
    assert.equal(2, alg:program({ ranks = 2, chunks = "2" }):info().chunks)
    assert.matches("unknown argument 'chunk' for algorithm p %(it takes: chunks, fast%)",
      h.pcall_err(alg.program, alg, { ranks = 2, chunk = "2" }))
    assert.matches("argument fast=maybe: true or false expected",
      h.pcall_err(alg.program, alg, { ranks = 2, fast = "maybe" }))
  end)

  it("refuses topologies an algorithm does not support", function()
    local err = h.pcall_err(program, function() end, { ranks = 3 },
      { supports = function(a) return a.ranks % 2 == 0, "needs an even number of ranks" end })
    assert.matches("algorithm t does not support nvswitch:3: needs an even number of ranks", err)
  end)

  it("rejects a program that records nothing", function()
    assert.matches("algorithm t recorded no transfers", h.pcall_err(program, function() end))
  end)
end)

describe("resccl.topology", function()
  it("reads topo= and ranks=", function()
    assert.equal(32, resccl.topology({ topo = "a100:4x8" }):info().ranks)
    assert.equal(5, resccl.topology({ ranks = "5" }):info().ranks)
    assert.equal(8, resccl.topology({}):info().ranks)
  end)

  it("rejects disagreeing and malformed topologies", function()
    assert.matches("ranks=4 does not match topo=a100:2x4 %(8 ranks%)",
      h.pcall_err(resccl.topology, { topo = "a100:2x4", ranks = "4" }))
    assert.matches("topology 'a100:2': expected a100:NxG", h.pcall_err(resccl.topology, { topo = "a100:2" }))
    assert.matches("unknown model 'v100'", h.pcall_err(resccl.topology, { topo = "v100:8" }))
    assert.matches("at most 128 nodes", h.pcall_err(resccl.topology, { topo = "a100:129x8" }))
  end)
end)

describe("resccl.load", function()
  it("loads every shipped algorithm", function()
    for _, f in ipairs(h.algorithms) do
      local alg = resccl.load("algorithms/" .. f .. ".lua")
      assert.equal(f, alg.name)
    end
    -- and the specs' list names every file there
    local files, p = {}, assert(io.popen "ls algorithms/*.lua")
    for line in p:lines() do files[#files + 1] = line:match "([%w_]+)%.lua$" end
    p:close()
    local listed = { table.unpack(h.algorithms) }
    table.sort(files)
    table.sort(listed)
    assert.same(files, listed)
  end)

  it("runs scripts in a sandbox", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write 'os.exit(3)\n'
    f:close()
    local err = h.pcall_err(resccl.load, path)
    os.remove(path)
    assert.matches(":1: attempt to index a nil value %(global 'os'%)", err)
  end)

  -- Run `source` as a script; its error.
  local function script_err(source)
    local path = os.tmpname()
    h.write(path, source)
    local ok, err = pcall(resccl.run_file, path)
    os.remove(path)
    assert.is_false(ok)
    return err
  end

  it("gives scripts no way out of the sandbox, and their own copies of the libraries", function()
    assert.matches("attempt to call a nil value %(global 'require'%)", script_err 'require("os")')
    assert.matches("attempt to index a nil value", script_err 'getmetatable("").__index.format = nil')
    assert.matches("resccl.load cannot be set", script_err "resccl.load = nil")
    -- of resccl, the DSL: no core, no loading, no tables the host reads
    assert.matches("x nil nil nil nil$",
      script_err "error(('x %s %s %s %s'):format(resccl.core, resccl.load, resccl.run_file, resccl.RUN_ARGS))")
    -- the DSL's metatables: none to get or change, no method table behind an instance
    -- what resccl.algorithm{} gives a script: data, no methods, a metatable it cannot get or change
    assert.matches("x nil nil nil$", script_err [[local alg = resccl.algorithm { name = "g", collective = "allgather",
      build = function() end }
      error(("x %s %s %s"):format(getmetatable(alg), alg.__index, alg.program))]])
    assert.matches("protected metatable", script_err [[setmetatable(resccl.algorithm {
      name = "g", collective = "allgather", build = function() end }, {})]])
    -- the builder's and a Ref's: hidden
    local path = os.tmpname()
    h.write(path, [[return resccl.algorithm { name = "g", collective = "allgather",
      build = function(a) error(("x %s %s"):format(getmetatable(a), getmetatable(a:chunk(0, "input", 0)))) end }]])
    local alg = resccl.load(path)
    local err = h.pcall_err(alg.program, alg, { ranks = 2 })
    os.remove(path)
    assert.matches("x nil nil$", err)
    assert.matches("x true$", script_err "local mt = {} error('x ' .. tostring(getmetatable(setmetatable({}, mt)) == mt))")
    -- finalizers run with no hook: none for scripts
    assert.matches("scripts cannot set finalizers", script_err "setmetatable({}, { __gc = function() end })")
    script_err "string.format, table.concat, math.floor = nil, nil, nil error 'x'"
    assert.equal("1.5", string.format("%.1f", 1.5))
    assert.is_function(table.concat)
    assert.is_function(math.floor)
  end)

  it("gives scripts no core object, and no string.dump", function()
    -- everything a script reaches from its builder and its refs is Lua data and the DSL's functions
    local path = os.tmpname()
    h.write(path, [[return resccl.algorithm { name = "g", collective = "allgather",
      build = function(a)
        local seen, found = {}, {}
        local function walk(v, at)
          if type(v) == "userdata" then found[#found + 1] = at end
          if type(v) ~= "table" or seen[v] then return end
          seen[v] = true
          for k, x in pairs(v) do walk(x, at .. "." .. tostring(k)) end
          local mt = getmetatable(v)
          if mt then walk(mt, at .. "<mt>") end
        end
        walk(a, "a")
        walk(a:chunk(0, "input", 0):copy(1, "output", 0), "ref")
        walk(_G, "_G")
        error(("x %d %s %s %s %s"):format(#found, table.concat(found, " "), a.program, a._prog, a.transfer))
      end }]])
    local alg = resccl.load(path)
    local err = h.pcall_err(alg.program, alg, { ranks = 2 })
    os.remove(path)
    assert.matches("x 0  nil nil function", err)
    assert.matches("x nil nil nil$", script_err "error(('x %s %s %s'):format(string.dump, ('').dump, resccl.builder_program))")
    assert.is_function(string.dump) -- the host's stays
    -- a builder records nothing before its build, nor once it is over
    local want = ":%d: a builder records transfers only while its algorithm's build runs$"
    h.write(path, [[return resccl.algorithm { name = "g", collective = "allgather", build = print,
      supports = function(a) a:transfer(0, 1, 0, 0, "recv") return true end }]])
    alg = resccl.load(path)
    assert.matches(want:format(2), h.pcall_err(alg.program, alg, { ranks = 2 }))
    h.write(path, [[local kept
      return resccl.algorithm { name = "g", collective = "allgather", build = function(a)
        if kept then kept:chunk(0, "input", 0):copy(1, "output", 0) end
        kept = a
        a:transfer(0, 1, 0, 0, "recv")
      end }]])
    alg = resccl.load(path)
    assert.equal(3, alg:program({ ranks = 2 }):info().transfers)
    err = h.pcall_err(alg.program, alg, { ranks = 2 })
    os.remove(path)
    assert.matches(want:format(3), err)
  end)

  it("refuses a plan file as a script, saying what it is", function()
    local alg = resccl.load "algorithms/allgather_ring.lua"
    local prog, topo = alg:program { ranks = 2 }
    local path = os.tmpname()
    h.write(path, resccl.core.plan_file((assert(resccl.compile(prog, topo)))))
    local err = h.pcall_err(resccl.load, path)
    os.remove(path)
    assert.equal(path .. ":1: a resccl plan file (resccl compile --plan), which libresccl and resccl-bench load; "
      .. "not an algorithm", err)
  end)

  it("names a script that raises no message", function()
    assert.matches(": an error with no message %(a table value%)$", script_err "error({})")
  end)
end)

describe("manual placement", function()
  -- Ring all-gather, MSCCLang style: tb 0 of every rank sends to the next
  -- rank, tb 1 receives from the previous one; local copies on tb 2.
  local ring = resccl.algorithm {
    name = "ring_manual", collective = "allgather",
    build = function(a)
      local N = a.ranks
      for r = 0, N - 1 do a:chunk(r, "input", 0):copy(r, "output", r, { sendtb = 2 }) end
      for step = 0, N - 2 do
        for r = 0, N - 1 do
          local c = (r - step) % N
          a:chunk(r, "output", c):copy((r + 1) % N, "output", c, { sendtb = 0, recvtb = 1 })
        end
      end
    end,
  }

  it("keeps the named TBs and runs in both execution orders", function()
    local prog, topo = ring:program { ranks = 4 }
    for _, order in ipairs { "task", "algorithm" } do
      local plan, err = resccl.compile(prog, topo, { tb = "manual", order = order })
      assert.is_nil(err)
      local rep = plan:report()
      assert.equal("manual", rep.tb_policy)
      assert.equal(order, rep.order)
      assert.equal(3, rep.tbs_per_rank_max)
      local r = assert(plan:exec { count = 515, nmicro = 3, slots = 4, slot_bytes = 1024 })
      assert.equal(0, r.wrong)
    end
  end)

  it("checks placement keys", function()
    local bad = resccl.algorithm {
      name = "bad_place", collective = "allgather",
      build = function(a) a:chunk(0, "input", 0):copy(1, "output", 0, { sendtb = 0, recvbt = 1 }) end,
    }
    assert.matches("dsl_spec.lua:%d+: unknown placement key 'recvbt'", h.pcall_err(bad.program, bad, { ranks = 2 }))
    bad = resccl.algorithm {
      name = "bad_place2", collective = "allgather",
      build = function(a) a:chunk(0, "input", 0):copy(1, "output", 0, { sendtb = 0 }) end,
    }
    assert.matches("placement needs sendtb and recvtb", h.pcall_err(bad.program, bad, { ranks = 2 }))
    bad = resccl.algorithm {
      name = "bad_place3", collective = "allgather",
      build = function(a) a:chunk(0, "input", 0):copy(1, "output", 0, { sendtb = 2000000000, recvtb = 0 }) end,
    }
    assert.matches("dsl_spec.lua:%d+: placement sendtb must be an integer from 0 to 1023",
      h.pcall_err(bad.program, bad, { ranks = 2 }))
  end)
end)
