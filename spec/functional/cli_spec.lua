-- The resccl command: subcommands, options, exit codes, exact error messages.
local h = require "helper"
local cjson = require "cjson"

describe("resccl", function()
  it("prints help and its version", function()
    local code, out = h.cli { "help" }
    assert.equal(0, code)
    assert.matches("usage: resccl <command>", out)
    code, out = h.cli { "--version" }
    assert.equal(0, code)
    assert.matches("^resccl %d+%.%d+%.%d+\n$", out)
  end)

  it("lists every topology preset, and prints a command's own usage for --help after it", function()
    local _, usage = h.cli { "help" }
    assert.matches("\ntopology presets: a100:NxG, nvswitch:G, h200:2, dgx_h100:N or ndv4:N\n", usage)
    -- an option each command takes, and one it does not
    local own = { run = { "--gpu", "--plan" }, compile = { "--plan", "--sweep" }, verify = { "--sched", "--plan" },
      import = { "-o, --output", "--msccl-xml" }, export = { "--msccl-xml", "--sweep" },
      sim = { "--sweep", "--plan" }, bench = { "-g N", "--json" } }
    for cmd, o in pairs(own) do
      local code, out, err = h.cli { cmd, "--help" }
      assert.equal(0, code, cmd)
      assert.equal("", err)
      assert.matches("^usage: resccl " .. cmd .. " FILE", out)
      assert.truthy(out:find("\n  " .. o[1], 1, true), cmd .. " lacks " .. o[1])
      assert.is_nil(out:find("\n  " .. o[2], 1, true), cmd .. " lists " .. o[2])
      assert.matches("\nexit status: ", out, 1, cmd) -- what every command shares
      assert.matches("topology presets: a100:NxG", out, 1, cmd)
    end
    assert.equal(0, (h.cli { "sim", "algorithms/allgather_ring.lua", "--size", "1M", "-h" }))
  end)

  it("finds a shipped algorithm by name from any folder, and takes files named with '='", function()
    local bin = h.bin:sub(1, 1) == "/" and h.bin or os.getenv "PWD" .. "/" .. h.bin
    local function elsewhere(args) -- from /tmp: code, stdout and stderr together
      local p = assert(io.popen(("cd /tmp && '%s' %s 2>&1"):format(bin, args)))
      local out = p:read "a"
      local _, _, code = p:close()
      return code, out
    end
    local code, out = elsewhere "verify allreduce_ring ranks=3"
    assert.equal(0, code, out)
    assert.matches("in%-place +ok", out)
    code, out = elsewhere "verify allreduce_ringg ranks=3"
    assert.equal(1, code)
    assert.matches("allreduce_ringg: no such file, nor a shipped algorithm of that name in /", out)
    -- a TE-CCL export's name holds '=': an existing file is a file; after "--" every argument is
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute(("mkdir -p %q && cp algorithms/allgather_ring.lua %q"):format(dir, dir .. "/ag-fuse=False.lua")))
    code, out = h.cli { "verify", dir .. "/ag-fuse=False.lua", "ranks=2" }
    assert.equal(0, code, out)
    code, out = h.cli { "verify", "ranks=2", "--", dir .. "/ag-fuse=False.lua" }
    assert.equal(0, code, out)
    code = h.cli { "verify", "nothere=1", "ranks=2" } -- no such file: a key=value, and no FILE
    assert.equal(2, code)
    os.execute(("rm -rf %q"):format(dir))
  end)

  it("makes the folders an output file needs", function()
    local dir = os.tmpname()
    os.remove(dir)
    local code, out, err = h.cli { "compile", "algorithms/allgather_ring.lua", "ranks=2", "--plan", dir .. "/a/b/ag.plan" }
    assert.equal(0, code, err)
    local f = assert(io.open(dir .. "/a/b/ag.plan"))
    assert.equal("resccl-plan ", f:read(12))
    f:close()
    code, out = h.cli { "sim", "algorithms/allgather_ring.lua", "ranks=2", "--svg", dir .. "/svg/x.svg" }
    assert.equal(0, code, out)
    assert.truthy(io.open(dir .. "/svg/x.svg"))
    os.execute(("rm -rf %q"):format(dir))
  end)

  it("refuses an option the command does not use", function()
    local cases = {
      { { "run", "algorithms/allgather_ring.lua", "--plan", "x" }, "--plan is an option of compile, not of run" },
      { { "import", "examples/ring_allreduce3.xml", "--msccl-xml", "x" },
        "--msccl-xml is an option of export, not of import" },
      { { "verify", "algorithms/allgather_ring.lua", "--inplace" },
        "--inplace is an option of compile, export, sim, not of verify" },
      { { "bench", "algorithms/allgather_ring.lua", "--json" },
        "--json is an option of run, compile, verify, import, export, sim, not of bench" },
    }
    for _, c in ipairs(cases) do
      local code, out, err = h.cli(c[1])
      assert.equal(2, code)
      -- asked for JSON, a refusal is JSON on stdout too
      if c[1][3] == "--json" then assert.same({ error = { code = 2, message = c[2] } }, cjson.decode(out))
      else assert.equal("", out) end
      assert.equal("resccl: " .. c[2] .. "\n(see 'resccl help')\n", err)
    end
    -- sim --channels without --baseline would be ignored: refused; export needs its output
    local code, _, err = h.cli { "sim", "algorithms/allgather_ring.lua", "--channels", "4" }
    assert.equal(2, code)
    assert.matches("%-%-channels is the baseline's", err)
    code = h.cli { "export", "algorithms/allgather_ring.lua" }
    assert.equal(2, code)
  end)

  it("with --json, prints a failure as JSON on stdout, with the exit code", function()
    local code, out, err = h.cli { "sim", "spec/nothere.lua", "--json" }
    assert.equal(1, code)
    local e = cjson.decode(out).error
    assert.equal(1, e.code)
    assert.matches("spec/nothere.lua", e.message)
    assert.matches("^resccl: .*spec/nothere.lua", err)
    code, out = h.cli { "compile", "--json" }
    assert.equal(2, code)
    assert.same({ code = 2, message = "'compile' needs a FILE" }, cjson.decode(out).error)
  end)

  it("exits 2 on usage errors", function()
    local code, _, err = h.cli { "frobnicate" }
    assert.equal(2, code)
    assert.matches("unknown command 'frobnicate'", err)
    code, _, err = h.cli { "run", "algorithms/allgather_ring.lua", "--sched", "fifo" }
    assert.equal(2, code)
    assert.matches("%-%-sched needs hpds|rr", err)
    code, _, err = h.cli { "compile", "algorithms/allgather_ring.lua", "--bogus" }
    assert.equal(2, code)
    assert.matches("unknown option '%-%-bogus'", err)
    code, _, err = h.cli { "compile" }
    assert.equal(2, code)
    assert.matches("'compile' needs a FILE", err)
    code, _, err = h.cli { "export", "algorithms/allgather_ring.lua", "--ce", "--msccl-xml", "-" }
    assert.equal(2, code)
    assert.matches("%-%-ce has no MSCCL form", err)
  end)

  it("runs on the host executor with --host, whatever RESCCL_RUN says; refuses a RESCCL_RUN it does not know", function()
    local code, out = h.cli({ "run", "algorithms/allgather_ring.lua", "ranks=3", "--host" }, "RESCCL_RUN=gpu")
    assert.equal(0, code)
    assert.matches("exec%s+f32 sum count=%d+ nmicro=4: max error 0, 0 wrong %([%d.]+ ms on the host%)", out)
    local err
    code, out, err = h.cli({ "run", "algorithms/allgather_ring.lua" }, "RESCCL_RUN=cpu")
    assert.equal(2, code)
    assert.equal("", out)
    assert.matches("RESCCL_RUN=cpu: gpu or host expected", err)
    code, _, err = h.cli { "compile", "algorithms/allgather_ring.lua", "--host" }
    assert.equal(2, code)
    assert.matches("%-%-host is an option of run, not of compile", err)
  end)

  it("writes plan files with each placement's copy-engine and pulling forms where they differ", function()
    local path = os.tmpname()
    local function sections(args)
      local code, _, err = h.cli(args)
      assert.equal(0, code, err)
      local f = assert(io.open(path, "rb"))
      local text = f:read "a"
      f:close()
      local found = {}
      for place, copies, pulls in text:gmatch "placement (%S+)\n.-\ncopies (%d+)\n.-\npulls (%d+)\n" do
        found[#found + 1] = place .. " " .. copies .. "/" .. pulls
      end
      return table.concat(found, ", ")
    end
    -- a two-rank all-gather: the TB form, then one with no TB; its pulls would only copy: no third form
    assert.equal("out-of-place 0/0, out-of-place 4/0, in-place 0/0, in-place 2/0",
      sections { "compile", "algorithms/allgather_ring.lua", "ranks=2", "--plan", path })
    -- a reduce-scatter's reductions would wait for whole micro-batches to land: no copy-engine form;
    -- they pull the peer's input, in place too (the sends read chunks their rank never writes)
    assert.equal("out-of-place 0/0, out-of-place 0/2, in-place 0/0, in-place 0/2",
      sections { "compile", "algorithms/reducescatter_ring.lua", "ranks=2", "--plan", path })
    -- --ce or --pull: that form alone
    assert.equal("out-of-place 2/0, in-place 0/0",
      sections { "compile", "algorithms/reducescatter_ring.lua", "ranks=2", "--ce", "--plan", path })
    assert.equal("out-of-place 0/2, in-place 0/2",
      sections { "compile", "algorithms/reducescatter_ring.lua", "ranks=2", "--pull", "--plan", path })
    os.remove(path)
  end)

  it("writes every output whole or not at all", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    local path = dir .. "/out"
    local outputs = {
      { "compile", "algorithms/allreduce_ring.lua", "--plan", path },
      { "export", "algorithms/allreduce_ring.lua", "--msccl-xml", path },
      { "import", "examples/ring_allreduce3.xml", "-o", path },
      { "sim", "algorithms/allreduce_ring.lua", "--trace", path },
      { "sim", "algorithms/allreduce_ring.lua", "--svg", path },
    }
    local function listing()
      local p = assert(io.popen("ls -A " .. dir))
      local names = p:read "a"
      p:close()
      return names
    end
    -- a file that happens to be where a temporary name might go is not touched
    h.write(path .. ".tmp", "mine")
    for _, args in ipairs(outputs) do
      local what = table.concat(args, " ")
      -- writes fail past 1 block (SIGXFSZ ignored: write and close report EFBIG)
      local f = assert(io.open(path, "w"))
      f:write "old"
      f:close()
      local code, _, err = h.cli(args, "trap '' XFSZ; ulimit -f 1;")
      assert.equal(1, code, what)
      assert.equal("resccl: cannot write " .. path .. ": File too large\n", err, what)
      assert.equal("old", h.read(path), what)
      assert.equal("out\nout.tmp\n", listing(), what) -- nothing left behind
      assert.equal("mine", h.read(path .. ".tmp"), what)
      -- a folder that cannot be made (a file is where it would go); a missing one is made
      args[#args] = path .. "/no/out"
      code, _, err = h.cli(args)
      assert.equal(1, code, what)
      assert.equal("resccl: cannot write " .. path .. "/no/out: Not a directory\n", err, what)
    end
    -- what is not a regular file is not replaced
    assert(os.execute("mkfifo " .. path .. ".fifo"))
    for target, kind in pairs { ["/dev/full"] = "other", ["/dev/null"] = "other", [path .. ".fifo"] = "other",
      [dir] = "directory" } do
      local code, _, err = h.cli { "compile", "algorithms/allgather_ring.lua", "ranks=2", "--plan", target }
      assert.equal(1, code, target)
      assert.equal("resccl: cannot write " .. target .. ": not a regular file (" .. kind .. ")\n", err)
    end
    assert(os.execute("test -c /dev/full && test -p " .. path .. ".fifo"))
    os.execute("rm -r " .. dir)
  end)

  it("takes no option for a file name, and fails when standard output cannot be written", function()
    for _, args in ipairs {
      { "compile", "algorithms/allreduce_ring.lua", "--plan", "--json" },
      { "export", "algorithms/allreduce_ring.lua", "--msccl-xml", "--json" },
      { "sim", "algorithms/allreduce_ring.lua", "--trace", "--json" },
      { "import", "examples/ring_allreduce3.xml", "-o", "--json" },
    } do
      local code, _, err = h.cli(args)
      assert.equal(2, code, args[3])
      assert.truthy(err:find(args[3] .. " needs a file name, not --json", 1, true), err)
    end
    assert.is_nil(io.open "--json")
    for _, redirect in ipairs { "exec >/dev/full;", "exec >&-;" } do
      local code, _, err = h.cli({ "compile", "algorithms/allreduce_ring.lua", "--json" }, redirect)
      assert.equal(1, code, redirect)
      assert.matches("^resccl: cannot write to standard output", err)
    end
  end)

  it("stops a script at its budget, whatever it catches", function()
    local path = os.tmpname()
    for _, source in ipairs {
      "while true do pcall(function() while true do end end) end",
      "xpcall(function() while true do end end, function() return 1 end) while true do end",
      "for i = 1, 1e9 do local s = string.rep('x', 1e6) end",
    } do
      h.write(path, source)
      local code, _, err = h.cli({ "verify", path }, "RESCCL_BUDGET=0.5")
      assert.equal(1, code, source)
      assert.matches("script exceeded its budget of 0.5 s", err, source)
    end
    -- stuck in a library function, where no hook runs: the alarm a second later
    h.write(path, "local s = ('a'):rep(5000):find(('a-'):rep(6) .. 'b')")
    local code, _, err = h.cli({ "verify", path }, "RESCCL_BUDGET=0.5")
    assert.equal(1, code)
    assert.equal(("resccl: %s: script exceeded its budget of 0.5 s (in a library function)\n"):format(path), err)
    os.remove(path)
  end)

  it("stops a script at its memory cap, whatever it catches, and lets one near it run", function()
    local path = os.tmpname()
    for _, source in ipairs {
      "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1e5) .. i end",
      "local t = {} while true do pcall(function() for i = 1, 1e9 do t[#t + 1] = {i, i} end end) end",
      "local s = string.rep('x', 1 << 30)",
      -- a handler that allocates once the cap was hit
      "local keep = {} xpcall(function() pcall(string.rep, 'x', 1 << 30) end, function() "
        .. "for i = 1, 100 do keep[#keep + 1] = ('y'):rep(1 << 26) .. i end end)",
    } do
      h.write(path, source)
      local code, _, err = h.cli({ "verify", path }, "RESCCL_MEMORY=64")
      assert.equal(1, code, source)
      assert.equal(("resccl: %s: script ran out of memory (RESCCL_MEMORY caps it at 64 MiB)\n"):format(path), err,
        source)
    end
    -- 40 MiB held and 1 MiB of garbage a step, under a 64 MiB cap: the library's buffers fail
    -- at the cap with no collection first, but the generational collector frees young garbage soon
    h.write(path, [[local keep = {} for i = 1, 40 do keep[i] = ('k'):rep(1 << 20) .. i end
      for i = 1, 200 do local g = ('g'):rep(1 << 20) .. i end
      return resccl.algorithm { name = "held", collective = "allgather", build = function(a)
        a:transfer(0, 1, 0, 0, "recv") a:transfer(1, 0, 0, 1, "recv") end }]])
    local code, out, err = h.cli({ "verify", path, "ranks=2" }, "RESCCL_MEMORY=64")
    assert.equal(0, code, out .. err)
    -- what a script records is bounded: 2048 transfers a MiB of RESCCL_MEMORY (4096: 2^23), here at the second call
    h.write(path, [[return resccl.algorithm { name = "big", collective = "allgather", chunks = 1, build = function(a)
      for k = 1, 3 do a:chunk(0, "scratch", 0, (1 << 24) // a.ranks):copy(1, "scratch", 0) end
    end }]])
    code, _, err = h.cli { "verify", path, "ranks=2" }
    assert.equal(1, code)
    assert.equal(("resccl: %s:2: program has more than 8388608 transfers (cut at blocks of 1 chunks)\n"):format(path), err)
    os.remove(path)
  end)

  it("names a bad RESCCL_BUDGET, RESCCL_MEMORY or RESCCL_RUN, not the script, exit 2", function()
    for _, c in ipairs {
      { "RESCCL_BUDGET=abc", "RESCCL_BUDGET=abc: not a duration (examples: 30, 30s, 500ms, 2m)" },
      { "RESCCL_BUDGET=0", "RESCCL_BUDGET=0: out of range (1ms to 1e+09s)" },
      { "RESCCL_BUDGET=1e10", "RESCCL_BUDGET=1e10: out of range (1ms to 1e+09s)" },
      { "RESCCL_BUDGET=-1", "RESCCL_BUDGET=-1: not a duration (examples: 30, 30s, 500ms, 2m)" },
      { "RESCCL_BUDGET=nan", "RESCCL_BUDGET=nan: not a duration (examples: 30, 30s, 500ms, 2m)" },
      { "RESCCL_MEMORY=1e20", "RESCCL_MEMORY=1e20: not a size (examples: 64, 64K, 1MiB, 2G; 64 means 64MiB)" },
      { "RESCCL_MEMORY=-1", "RESCCL_MEMORY=-1: not a size (examples: 64, 64K, 1MiB, 2G; 64 means 64MiB)" },
      { "RESCCL_MEMORY=0", "RESCCL_MEMORY=0: out of range (1B to 1024TiB)" },
      { "RESCCL_MEMORY=99999999999", "RESCCL_MEMORY=99999999999: out of range (1B to 1024TiB)" },
      { "RESCCL_MEMORY=4G ", "RESCCL_MEMORY=4G : not a size (examples: 64, 64K, 1MiB, 2G; 64 means 64MiB)" },
      { "RESCCL_RUN=cpu", "RESCCL_RUN=cpu: gpu or host expected" },
    } do
      local code, out, err = h.cli({ "run", "algorithms/allreduce_ring.lua", "ranks=2" }, "env '" .. c[1] .. "'")
      assert.equal(2, code, c[1])
      assert.equal("", out, c[1])
      assert.equal("resccl: " .. c[2] .. "\n(see 'resccl help')\n", err, c[1])
    end
    -- with units, and a bare number in the old unit: seconds, MiB; empty is unset
    for _, env in ipairs { "RESCCL_BUDGET=2m RESCCL_MEMORY=512MiB", "RESCCL_BUDGET=90 RESCCL_MEMORY=512",
      "RESCCL_BUDGET= RESCCL_MEMORY=" } do
      local code, out, err = h.cli({ "verify", "algorithms/allreduce_ring.lua", "ranks=2" }, env)
      assert.equal(0, code, env .. out .. err)
    end
    -- a cap with a unit: 8 MiB, not 8 bytes nor 8M MiB
    local path = os.tmpname()
    h.write(path, "local s = string.rep('x', 16 << 20)")
    local code, _, err = h.cli({ "verify", path }, "RESCCL_MEMORY=8MiB")
    os.remove(path)
    assert.equal(1, code)
    assert.equal(("resccl: %s: script ran out of memory (RESCCL_MEMORY caps it at 8 MiB)\n"):format(path), err)
  end)

  it("runs the default job: verified and executed, exit 0", function()
    local code, out = h.cli { "run", "algorithms/allreduce_ring.lua", "ranks=8" }
    assert.equal(0, code)
    assert.matches("collective%s+allreduce, 8 ranks", out)
    assert.matches("TBs/rank%s+state%-based %d+, connection%-based %d+", out)
    assert.matches("verify%s+ok", out)
    assert.matches("exec%s+f32 sum count=4104 nmicro=4: max error 0, 0 wrong", out)
    assert.matches("exec inplace f32 sum", out)
    assert.matches("result%s+PASS", out)
  end)

  it("runs a count that fits the plan by default; a count given is run as it is", function()
    -- 2 chunks a block: the first multiple of 2 from 4099
    local code, out = h.cli { "run", "spec/fixtures/scratch_shift.lua" }
    assert.equal(0, code, out)
    assert.matches("exec inplace f32 sum count=4100 nmicro=4: max error 0, 0 wrong", out)
    code, out = h.cli { "run", "spec/fixtures/scratch_shift.lua", "count=4099" }
    assert.equal(1, code)
    assert.matches("exec inplace FAILED: spec/fixtures/scratch_shift.lua:12: count 4099 does not split evenly " ..
      "into 2 chunks per block, as this transfer needs %(output chunk 0 %-> scratch chunk 1%)", out)
  end)

  it("prints one JSON report with the documented keys", function()
    local code, out = h.cli { "compile", "algorithms/allreduce_hm.lua", "topo=a100:2x4", "--sched", "hpds", "--tb",
      "state", "--json" }
    assert.equal(0, code)
    local r = cjson.decode(out)
    for _, k in ipairs { "algorithm", "collective", "ranks", "tasks", "subpipelines", "sched", "tb_policy",
      "tbs_per_rank_max", "tbs_total", "verify", "compile_ms" } do
      assert.is_not_nil(r[k], k)
    end
    assert.equal("allreduce_hm", r.algorithm)
    assert.equal(8, r.ranks)
    assert.equal("ok", r.verify)
    assert.is_true(r.tbs_per_rank_max <= 8)
  end)

  it("takes options as --flag=value too", function()
    local code, out = h.cli { "compile", "algorithms/allgather_ring.lua", "ranks=4", "--tb=conn", "--json" }
    assert.equal(0, code)
    assert.equal("conn", cjson.decode(out).tb_policy)
  end)

  it("stops after a stage", function()
    local code, out = h.cli { "compile", "algorithms/allgather_ring.lua", "ranks=4", "--stop-after", "sched",
      "--json" }
    assert.equal(0, code)
    local r = cjson.decode(out)
    assert.equal("sched", r.stage)
    assert.is_nil(r.tbs_total)
    assert.equal("not run", r.verify)
  end)

  it("stops early only where no verified plan is needed", function()
    local ring = "algorithms/allreduce_ring.lua"
    for _, cmd in ipairs { "run", "verify", "export", "sim", "bench" } do
      local code, out, err = h.cli { cmd, ring, "--stop-after", "sched" }
      assert.equal(2, code)
      assert.equal("", out)
      assert.matches("^resccl: %-%-stop%-after is an option of compile, not of " .. cmd .. "\n", err)
    end
    local code, _, err = h.cli { "import", "examples/ring_allreduce3.xml", "--stop-after=dag" }
    assert.equal(2, code)
    assert.matches("^resccl: %-%-stop%-after is an option of compile, not of import\n", err)
    local path = os.tmpname()
    os.remove(path)
    code, _, err = h.cli { "compile", ring, "--stop-after", "dag", "--plan", path }
    assert.equal(2, code)
    assert.matches("^resccl: %-%-stop%-after dag: %-%-plan needs a verified plan\n", err)
    assert.is_nil(io.open(path))
    code, _, err = h.cli { "compile", ring, "--stop-after", "tb", "--emit", "host" }
    assert.equal(2, code)
    assert.matches("^resccl: %-%-stop%-after tb: %-%-emit needs a verified plan\n", err)
  end)

  it("emits host C and CUDA-ready source", function()
    local code, out = h.cli { "compile", "algorithms/allgather_ring.lua", "ranks=4", "--emit", "host" }
    assert.equal(0, code)
    assert.matches("RX_TB%(3, 1%)", out)
    assert.matches("RX_PROGRAM_BEGIN%(4, 0%)", out)
    assert.not_matches("%${", out)
  end)
end)

describe("bad input", function()
  -- fixture, arguments, exact message (after "resccl: ")
  local cases = {
    { "bad_unknown_key", "spec/fixtures/bad_unknown_key.lua:1: unknown key 'colective' in resccl.algorithm{} " ..
      "(known: build, chunks, collective, description, inplace, name, params, ranks, supports)" },
    { "bad_collective", "spec/fixtures/bad_collective.lua:1: unknown collective 'allbroadcast' " ..
      "(allgather, reducescatter, allreduce, alltoall)" },
    { "bad_rank", "spec/fixtures/bad_rank.lua:6: destination rank 99 out of range (program has 4 ranks)" },
    { "bad_type", "spec/fixtures/bad_type.lua:5: bad argument #2 to 'transfer' (integer expected, got string)" },
    { "bad_chunk", "spec/fixtures/bad_chunk.lua:5: output chunk 4 out of range (output has 4 chunks per rank)" },
    { "bad_lua_error", "spec/fixtures/bad_lua_error.lua:6: attempt to index a nil value (local 'peers')" },
    { "bad_syntax", "spec/fixtures/bad_syntax.lua:4: '}' expected (to close '{' at line 1) near 'build'" },
    { "bad_empty", "spec/fixtures/bad_empty.lua: no resccl.algorithm{} in this file" },
    { "bad_runaway", "spec/fixtures/bad_runaway.lua:5: script exceeded its budget of 1 s", "RESCCL_BUDGET=1" },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. " names the line and exits 1", function()
      local code, out, err = h.cli({ "run", "spec/fixtures/" .. c[1] .. ".lua", "ranks=4" }, c[3])
      assert.equal(1, code)
      assert.equal("", out)
      assert.equal("resccl: " .. c[2] .. "\n", err)
    end)
  end

  it("reports an incomplete all-reduce with the missing contribution", function()
    local code, out = h.cli { "verify", "spec/fixtures/bad_incomplete.lua", "ranks=4" }
    assert.equal(1, code)
    assert.equal("out-of-place  spec/fixtures/bad_incomplete.lua:8: allreduce result wrong: rank 3 output chunk 0 " ..
      "holds 3 of 4 contributions (missing rank 0's input chunk 0)\n", out:match "^[^\n]*\n")
    code, out = h.cli { "run", "spec/fixtures/bad_incomplete.lua", "ranks=4" }
    assert.equal(1, code)
    assert.matches("result%s+FAIL", out)
  end)

  it("reports a deadlock in a hand-placed program with the TBs and primitives of the cycle", function()
    local code, out = h.cli { "verify", "spec/fixtures/bad_deadlock.lua", "ranks=2", "--tb", "manual" }
    assert.equal(1, code)
    assert.equal("out-of-place  spec/fixtures/bad_deadlock.lua:10: deadlock: rank 0 tb 0 at recv " ..
      "(spec/fixtures/bad_deadlock.lua:10, micro-batch 0) waits for data from rank 1 -> rank 0; rank 1 tb 0 at " ..
      "recv (spec/fixtures/bad_deadlock.lua:9, micro-batch 0) waits for data from rank 0 -> rank 1\n",
      out:match "^[^\n]*\n")
    -- the same transfers scheduled by resccl itself are fine
    assert.equal(0, (h.cli { "run", "spec/fixtures/bad_deadlock.lua", "ranks=2" }))
  end)

  it("runs a hand-placed chain through buffered FIFOs, and refuses FIFOs smaller than two tiles", function()
    local code, out = h.cli { "run", "spec/fixtures/fused_twice.lua", "ranks=3", "--tb", "manual", "--order",
      "algorithm", "nmicro=200" }
    assert.equal(0, code, out)
    code, out = h.cli { "run", "spec/fixtures/fused_twice.lua", "ranks=3", "--tb", "manual", "--order", "algorithm",
      "slots=1", "slot_bytes=64" }
    assert.equal(1, code)
    assert.matches("exec%s+FAILED: hand%-placed TBs need FIFOs of two tiles: a tile of 1364 elements fills 86 " ..
      "slots of 16, a FIFO has 1 %(raise slots or slot_bytes, or nmicro%)", out)
  end)

  it("merges a ring's sends and receives into one TB per rank, run with the FIFOs that needs", function()
    local code, out = h.cli { "run", "algorithms/allreduce_ring.lua", "ranks=5", "--tb", "merge", "nmicro=16" }
    assert.equal(0, code, out)
    assert.matches("TBs/rank%s+merged 1, state%-based 2 %(max over ranks; totals 5 vs 10%)", out)
    code, out = h.cli { "compile", "algorithms/allgather_ring.lua", "ranks=3", "--tb", "merge", "--dump", "tb" }
    assert.equal(0, code)
    assert.equal("tb merge: 3 TBs, at most 1 per rank, buffered FIFOs\nr0 tb0:\n", out:match "^[^\n]*\n[^\n]*\n")
    assert.matches("\n  %+ recv ", out) -- a receive in the loop of the send before it
    code, out = h.cli { "run", "algorithms/allreduce_ring.lua", "ranks=5", "--tb", "merge", "slots=4" }
    assert.equal(1, code)
    assert.matches("exec%s+FAILED: merged TBs need FIFOs of two tiles", out)
  end)

  it("moves chunk by chunk where ranges meet differently, FIFOs of merged TBs sized for it", function()
    local code, out = h.cli { "compile", "spec/fixtures/ranges_ag.lua", "--json" }
    assert.equal(0, code, out)
    assert.equal(4, cjson.decode(out).by_chunk) -- each put and its receive, on both ranks
    code, out = h.cli { "compile", "spec/fixtures/ranges_ag.lua", "--emit", "host" }
    assert.matches("RX_PUT%(0, 1, RX_INPUT, 0, RX_SCRATCH, 0, 1, 0%);\n    RX_PUT%(0, 1, RX_INPUT, 1, RX_SCRATCH, 1, 1, 0%);",
      out)
    assert.matches("RX_COPY%(RX_INPUT, 0, RX_OUTPUT, 0, 2%);", out) -- met by nothing else: whole
    local plan = os.tmpname()
    code, out = h.cli { "compile", "spec/fixtures/ranges_ag.lua", "--tb", "merge", "--plan", plan }
    assert.equal(0, code, out)
    local f = assert(io.open(plan, "rb"))
    local text = f:read "a"
    f:close()
    os.remove(plan)
    assert.matches("\nfifo%-slots 4\n", text) -- two tiles of two chunks' slots
    for _, tb in ipairs { "state", "merge" } do
      code, out = h.cli { "run", "spec/fixtures/ranges_ag.lua", "--tb", tb, "count=4100", "nmicro=3" }
      assert.equal(0, code, out)
      assert.matches("exec inplace f32 sum count=4100 nmicro=3: max error 0, 0 wrong", out)
    end
  end)

  it("finds a deadlock of hand-placed TBs that takes micro-batches to build up", function()
    -- task-level, rank 1 sends its whole chain to rank 2 before taking it back; two tiles of FIFO last 4 micro-batches
    local code, out = h.cli { "verify", "spec/fixtures/fused_twice.lua", "ranks=3", "--tb", "manual" }
    assert.equal(1, code)
    assert.equal("out-of-place  spec/fixtures/fused_twice.lua:10: deadlock: rank 1 tb 0 at rcs " ..
      "(spec/fixtures/fused_twice.lua:10, micro-batch 4) waits for FIFO space on rank 1 -> rank 2; rank 2 tb 0 at rcs " ..
      "(spec/fixtures/fused_twice.lua:11, micro-batch 2) waits for FIFO space on rank 2 -> rank 1\n", out:match "^[^\n]*\n")
  end)

  it("fuses a hand-placed send only with an arrival it comes after", function()
    for _, order in ipairs { "task", "algorithm" } do
      local code, out = h.cli { "run", "--host", "spec/fixtures/manual_war.lua", "ranks=2", "--tb", "manual", "--order",
        order }
      assert.equal(0, code, out)
      assert.matches("exec +f32 sum count=%d+ nmicro=4: max error 0, 0 wrong", out)
    end
  end)

  it("refuses placements past what a plan holds, at the script's line", function()
    local path = os.tmpname()
    for key, max in pairs { ch = 1023, sendstep = 1048575, sendtb = 1023 } do
      h.write(path, ('return resccl.algorithm { name = "x", collective = "allgather", build = function(a)\n' ..
        '  a:chunk(0, "input", 0):copy(1, "output", 0, { sendtb = 0, recvtb = 0, %s = %d })\nend }\n'):format(key, max + 1))
      local code, _, err = h.cli { "verify", path, "ranks=2", "--tb", "manual" }
      assert.equal(1, code, key)
      assert.equal(("resccl: %s:2: placement %s must be an integer from 0 to %d\n"):format(path, key, max), err)
    end
    os.remove(path)
  end)

  it("refuses manual placement when a transfer has none", function()
    local code, _, err = h.cli { "compile", "algorithms/allgather_ring.lua", "ranks=2", "--tb", "manual" }
    assert.equal(1, code)
    assert.equal("resccl: algorithms/allgather_ring.lua:11: manual thread-block placement needs a sending TB and " ..
      "step for this transfer\n", err)
  end)

  it("refuses numbers that are not whole or out of range, exit 2", function()
    local cases = {
      { "count=abc", "argument count=abc: not an integer" },
      { "count=", "argument count=: not an integer" },
      { "count=1.5", "argument count=1.5: not an integer" },
      { "count=-1", "argument count=-1: out of range (1 to 1099511627776)" },
      { "count=99999999999999999999", "argument count=99999999999999999999: out of range (1 to 1099511627776)" },
      { "nmicro=abc", "argument nmicro=abc: not an integer" },
      { "slots=0", "argument slots=0: out of range (1 to 1048576)" },
      { "channels=3000000000", "argument channels=3000000000: out of range (1 to 64)" },
      { "direct=2", "argument direct=2: not a boolean (1/0, true/false, yes/no, on/off)" },
      { "slot_bytes=2G", "argument slot_bytes=2G: out of range (1B to 1GiB)" },
      { "slot_bytes=4294971392", "argument slot_bytes=4294971392: out of range (1B to 1GiB)" },
      { "slot_bytes=1X", "argument slot_bytes=1X: not a size (examples: 64, 64K, 1MiB, 2G)" },
    }
    for _, c in ipairs(cases) do
      local code, out, err = h.cli { "run", "algorithms/allreduce_ring.lua", "ranks=2", c[1] }
      assert.equal(2, code, c[1])
      assert.equal("", out)
      assert.equal("resccl: " .. c[2] .. "\n(see 'resccl help')\n", err)
    end
    local code, _, err = h.cli { "sim", "algorithms/allreduce_ring.lua", "ranks=2", "nmicro=0" }
    assert.equal(2, code)
    assert.matches("argument nmicro=0: out of range %(1 to 65536%)", err)
    code, _, err = h.cli { "sim", "algorithms/allreduce_ring.lua", "ranks=2", "--depth", "0" }
    assert.equal(2, code)
    assert.matches("%-%-depth 0: out of range %(1 to 1024%)", err)
  end)

  it("rejects unknown script arguments and bad topologies", function()
    local code, _, err = h.cli { "run", "algorithms/allgather_ring.lua", "rank=4" }
    assert.equal(1, code)
    assert.equal("resccl: unknown argument 'rank' for algorithm allgather_ring (it takes none)\n", err)
    code, _, err = h.cli { "run", "algorithms/allgather_ring.lua", "topo=a100:0x8" }
    assert.equal(1, code)
    assert.equal("resccl: topology 'a100:0x8': expected a100:NxG, nvswitch:G, h200:2, dgx_h100:N or ndv4:N\n", err)
    code, _, err = h.cli { "run", "algorithms/allreduce_ring.lua", "ranks=4", "dtype=f8" }
    assert.equal(1, code)
    assert.equal("resccl: argument dtype=f8: i8, u8, i32, u32, i64, u64, f16, f32, f64 or bf16 expected\n", err)
    code, _, err = h.cli { "run", "algorithms/allreduce_rd.lua", "ranks=6" }
    assert.equal(1, code)
    assert.matches("allreduce_rd.lua:%d+: algorithm allreduce_rd does not support nvswitch:6: needs a power", err)
  end)
end)

describe("golden dumps", function()
  -- Regenerate with tools/dev/update-golden after an intended change.
  local cases = {
    { "allgather_ring_4", { "algorithms/allgather_ring.lua", "ranks=4" }, { "dag", "sched", "lower", "tb" } },
    { "allreduce_hm_2x2", { "algorithms/allreduce_hm.lua", "topo=a100:2x2" }, { "sched", "tb" } },
  }
  for _, c in ipairs(cases) do
    for _, stage in ipairs(c[3]) do
      it(c[1] .. " --dump " .. stage, function()
        local args = { "compile", c[2][1], c[2][2], "--dump", stage }
        local code, out = h.cli(args)
        assert.equal(0, code)
        assert.equal(h.read("spec/golden/" .. c[1] .. "." .. stage .. ".txt"), out)
      end)
    end
  end
end)
