-- lua/resccl/cli/: what resccl bench hands to resccl-bench.
local cli = require "resccl.cli"
local h = require "helper"

describe("resccl bench", function()
  -- A folder with a stand-in resccl-bench that records its arguments, checks that the
  -- plan (the last one) was written, and exits 77.
  local dir

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    local f = assert(io.open(dir .. "/resccl-bench", "w"))
    f:write('#!/bin/sh\necho "$@" >"$(dirname "$0")/args"\nfor plan; do :; done\ntest -s "$plan" || exit 3\nexit 77\n')
    f:close()
    assert(os.execute("chmod +x " .. dir .. "/resccl-bench"))
  end)

  teardown(function()
    os.execute("rm -r " .. dir)
  end)

  -- Run `resccl bench args...` as if resccl lived in dir; returns the status and resccl-bench's arguments.
  local function bench(args)
    local argv = { [0] = dir .. "/resccl", "bench" }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    os.remove(dir .. "/args")
    local code = cli.main(argv)
    return code, h.read(dir .. "/args")
  end

  it("passes sizes in bytes, the ranks and the collective, and resccl-bench's status", function()
    local code, args = bench { "algorithms/allreduce_ring.lua", "-g", "2", "-b", "1M", "-e", "8G", "-f", "2",
      "--dtype", "bf16", "--op", "max", "-n", "5", "-w", "1", "-c", "0", "--nccl", "0" }
    assert.equal(77, code)
    local plan = args:match "(%S+)\n$"
    assert.equal("--coll allreduce -g 2 -b 1048576 -e 8589934592 -f 2 -n 5 -w 1 -c 0 --dtype bf16 --op max " ..
      "--nccl 0 " .. plan .. "\n", args)
    assert.is_nil(io.open(plan), "the temporary plan is removed")
  end)

  it("puts virtual ranks on one GPU, skips in-place where the algorithm has none, shortens names", function()
    local _, args = bench { "algorithms/allreduce_hm.lua", "ranks=8", "--virtual" }
    assert.matches("^%-%-coll allreduce %-g 8 %-%-virtual %S+\n$", args)
    _, args = bench { "--coll", "alltoall", "algorithms/alltoall_direct.lua", "-g", "4", "-i", "64K", "-d", "half" }
    assert.matches("^%-%-coll alltoall %-g 4 %-%-inplace 0 %-i 65536 %-%-dtype f16 %S+\n$", args)
  end)
end)

describe("resccl repl", function()
  -- main.c runs a bare `resccl repl`; with arguments it comes here
  it("prints the usage for --help and refuses other arguments", function()
    local path = os.tmpname()
    local out = io.output()
    io.output(path)
    local code = cli.main { [0] = "resccl", "repl", "--help" }
    io.close()
    io.output(out)
    assert.equal(0, code)
    assert.matches("^usage: resccl <command>", h.read(path))
    os.remove(path)
    local err = io.stderr
    io.stderr = assert(io.open("/dev/null", "w"))
    code = cli.main { [0] = "resccl", "repl", "x" }
    io.stderr:close()
    io.stderr = err
    assert.equal(2, code)
  end)
end)

describe("outputs", function()
  local dir
  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    h.write(dir .. "/x.lua", h.read "algorithms/allgather_ring.lua")
    h.write(dir .. "/r.xml", h.read "spec/fixtures/import/ring_ag4.xml")
    h.write(dir .. "/t.lua", h.read "spec/fixtures/topo_uniform.lua")
    assert(os.execute(("ln %s/x.lua %s/hard.lua && ln -s x.lua %s/soft.lua"):format(dir, dir, dir)))
  end)
  teardown(function() os.execute("rm -r " .. dir) end)

  it("never name an input: refused before any work, the input as it was", function()
    local x, r, t = dir .. "/x.lua", dir .. "/r.xml", dir .. "/t.lua"
    local before = { [x] = h.read(x), [r] = h.read(r), [t] = h.read(t) }
    local dot = dir .. "/./x.lua"
    for _, case in ipairs {
      { { "compile", x, "--plan", x }, x }, { { "compile", x, "--plan", dot }, dot },
      { { "compile", x, "--plan", dir .. "/hard.lua" }, dir .. "/hard.lua" },
      { { "compile", x, "--plan", dir .. "/soft.lua" }, dir .. "/soft.lua" },
      { { "compile", dir .. "/soft.lua", "--plan=" .. x }, x },
      { { "import", r, "-o", r }, r }, { { "import", r, "--output", r }, r },
      { { "export", x, "--msccl-xml", x }, x },
      { { "sim", x, "--svg", x }, x }, { { "sim", x, "--trace", x }, x },
    } do
      local code, out, err = h.cli(case[1])
      assert.equal(2, code)
      assert.equal("", out)
      assert.equal(("resccl: %s: is the input; refusing to overwrite it\n"):format(case[2]), err)
    end
    local code, _, err = h.cli { "sim", x, "topo=" .. t, "--svg", t }
    assert.equal(2, code)
    assert.equal(("resccl: %s: is the topology file (topo=); refusing to overwrite it\n"):format(t), err)
    for path, text in pairs(before) do assert.equal(text, h.read(path)) end
    -- another file is written
    assert.equal(0, (h.cli { "compile", x, "--plan", dir .. "/x.plan" }))
    assert.matches("^resccl%-plan ", h.read(dir .. "/x.plan"))
    -- and is no algorithm
    code, _, err = h.cli { "run", dir .. "/x.plan" }
    assert.equal(1, code)
    assert.equal(("resccl: %s/x.plan:1: a resccl plan file (resccl compile --plan), which libresccl and "
      .. "resccl-bench load; not an algorithm\n"):format(dir), err)
  end)
end)

describe("arguments", function()
  it("name their bound: the simulator's micro-batches", function()
    local code, _, err = h.cli { "sim", "algorithms/allgather_ring.lua", "nmicro=1048576" }
    assert.equal(2, code)
    assert.matches("^resccl: argument nmicro=1048576: out of range %(1 to 65536%)\n", err)
    assert.equal(65536, require("resccl.core").sim_max_micro)
  end)
end)
