-- resccl bench without GPUs: usage errors and the missing runtime.
local h = require "helper"

describe("resccl bench", function()
  -- arguments after "bench", exact message (after "resccl: ")
  local usage = {
    { { "algorithms/allreduce_ring.lua", "-g", "2", "-b", "1X" }, "-b 1X: not a size (examples: 64, 64K, 1MiB, 2G)" },
    { { "algorithms/allreduce_ring.lua", "-g", "2", "-e", "16777216T" }, "-e 16777216T: out of range (1B to 1024TiB)" },
    { { "algorithms/allreduce_ring.lua", "-g", "2", "-b", "8G", "-e", "1M" },
      "-b 8589934592 is larger than -e 1048576" },
    { { "algorithms/allreduce_ring.lua", "-g", "0" }, "-g 0: out of range (1 to 2147483647)" },
    { { "algorithms/allreduce_ring.lua", "-g", "2", "-f", "1" }, "-f 1: out of range (2 to 2147483647)" },
    { { "algorithms/allreduce_ring.lua", "-g", "2", "-G", "-1" }, "-G -1: out of range (0 to 2147483647)" },
    { { "algorithms/allreduce_ring.lua", "-g", "2", "-n", "1e3" }, "-n 1e3: not an integer" },
    { { "algorithms/allreduce_ring.lua", "-g", "2", "--op", "mean" },
      "--op mean: sum, prod, max, min or avg expected" },
    { { "algorithms/allreduce_ring.lua", "-g", "2", "--dtype", "f17" },
      "--dtype f17: i8, u8, i32, u32, i64, u64, f16, f32, f64 or bf16 expected" },
    { { "algorithms/allreduce_ring.lua", "-g", "2", "--nccl", "yes" }, "--nccl needs 0|1" },
    { { "algorithms/allreduce_ring.lua" }, "bench needs -g N (GPUs), or ranks=N with --virtual" },
    { { "algorithms/allreduce_ring.lua", "ranks=4", "-g", "2" },
      "-g 2: the program has 4 ranks, one per GPU (--virtual puts every rank on GPU 0)" },
    { { "--coll", "allgather", "algorithms/allreduce_ring.lua", "-g", "2" },
      "--coll allgather: allreduce_ring implements allreduce" },
    { {}, "'bench' needs a FILE" },
    { { "algorithms/allreduce_allpairs.lua", "-g", "2", "--from", "32M" }, "--from 32M needs a value" },
    { { "algorithms/allreduce_allpairs.lua", "-g", "2", "--from", "32M", "algorithms/allgather_ring.lua" },
      "--coll allreduce: allgather_ring implements allgather" },
    { { "algorithms/allreduce_allpairs.lua", "-g", "2", "--from", "32M", "algorithms/allreduce_ring.lua", "--from",
        "16M", "algorithms/allreduce_ring.lua" }, "--from 16777216: sizes must grow from plan to plan" },
    { { "algorithms/allreduce_allpairs.lua", "-g", "2", "--from", "32M", "algorithms/allreduce_ring.lua",
        "ranks=4" }, "-g 2: the program has 4 ranks, one per GPU (--virtual puts every rank on GPU 0)" },
  }
  for _, c in ipairs(usage) do
    it("exits 2: " .. c[2], function()
      local args = { "bench" }
      for _, a in ipairs(c[1]) do args[#args + 1] = a end
      local code, out, err = h.cli(args)
      assert.equal(2, code)
      assert.equal("", out)
      assert.equal("resccl: " .. c[2] .. "\n(see 'resccl help')\n", err)
    end)
  end

  it("says what is missing where resccl-bench was not built", function()
    -- resccl run from a folder without resccl-bench, with a PATH that has none
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    local real = h.bin:sub(1, 1) == "/" and h.bin or os.getenv "PWD" .. "/" .. h.bin
    assert(os.execute(("ln -s '%s' %s/resccl"):format(real, dir)))
    local bin = h.bin
    h.bin = dir .. "/resccl"
    local code, out, err = h.cli({ "bench", "algorithms/allreduce_ring.lua", "-g", "2", "-b", "1M", "-e", "8G" },
      "PATH=" .. dir)
    h.bin = bin
    os.execute("rm -r " .. dir)
    assert.equal(1, code)
    assert.equal("", out)
    assert.equal("resccl: resccl bench needs the GPU runtime (resccl-bench not built: no CUDA toolkit)\n", err)
  end)
end)
