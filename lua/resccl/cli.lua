--- The resccl command line: parse, then run one subcommand.
-- Every compiling subcommand takes the same key=value arguments; each option
-- names the commands that take it (FOR).
local resccl = require "resccl"
local output = require "resccl.output"
local core = resccl.core

local M = {}

local USAGE = [[
usage: resccl <command> [options] FILE [key=value ...]
       resccl <command> --help     this text

commands:
  run FILE       compile, verify, and execute the emitted code with real data
                 (out-of-place and in-place), checked against a reference: on
                 the GPUs where libresccl sees one, else on the host executor
  compile FILE   compile and report; --dump, --emit and --json show more
  verify FILE    compile and verify both placements
  import FILE    read an MSCCL XML, TACCL JSON, TE-CCL JSON or MSCCL++ JSON
                 (execution plan) file, reschedule it and report: format,
                 collective, ranks, chunks, tasks, the file's TBs per rank and
                 ours, the verifier's verdict; -o OUT.lua writes it as an
                 editable ReSCCLang program
  export FILE    compile and write the schedule as MSCCL XML (--msccl-xml OUT)
  sim FILE       time the plan on its topology with the discrete-event
                 simulator; --baseline adds MSCCL's or NCCL's way to run it
  bench FILE     compile to a plan and run it on the GPUs (resccl-bench):
                 nccl-tests' table, out-of-place and in-place, with NCCL's
                 busbw and thread blocks from the same run
  repl           interactive Lua with the DSL loaded as `resccl`
  help           this text

options (each command refuses those it does not use):
  --sched hpds|rr        scheduler (default hpds)
  --tb state|conn|manual|merge   thread-block allocation (default state);
                         manual keeps the TBs the program names (sendtb/
                         recvtb); merge is state-based with a rank's TBs
                         merged into send/receive pairs, as MSCCL pairs
                         them: fewer TBs, slower, FIFOs of two tiles
  --order task|algorithm how a TB loops over micro-batches: task-level
                         (default) or algorithm-level, as MSCCL runs
  --ce                   copies and direct sends that wait for nothing (or
                         only for their source's one writer) and that nothing
                         waits for run on the copy engine, with no TB (an
                         all-gather on two ranks needs none); plan files hold
                         that form anyway, for large calls
  --pull                 a send that reads the call's input goes: its receive
                         reads the sender's buffer itself, and a reduction
                         so pulled puts what one send would forward (a
                         one-shot or ring all-reduce on two ranks then has
                         one TB per rank); plan files hold that form anyway
                         where a pull reduces and nothing is pushed, for mid
                         sizes
  --json                 print one machine-readable report (not bench)
  --dump dag|sched|lower|tb   print that stage (compile)
  --stop-after STAGE     stop after dag|sched|lower|tb|verify (compile; not
                         with --plan or --emit)
  --inplace              compile for in-place buffers (compile, export, sim)
  --fuse auto|always|never   fuse a receive (or local copy) with the send it
                         feeds: always, never, or auto (default): where the
                         TB it ties together loses nothing by running its work
                         in turn (task-level; algorithm-level plans fuse
                         wherever they can), and never where it would deadlock
  --emit host|cuda       print the emitted program (compile)
  --plan FILE            compile: write the plan the GPU runtime loads
                         (libresccl's resccl_plan_load), every placement
  --gpu, --host          run: execute the emitted CUDA on the GPUs (ndev=N spreads
                         the ranks over N GPUs, iters=N timed runs, channels=K
                         blocks per TB), or the emitted C on the host executor;
                         by default on the GPUs where libresccl sees one
                         (RESCCL_RUN=gpu|host changes that default)
  -o, --output FILE      import: write the ReSCCLang program there
  --msccl-xml FILE       export: write the MSCCL XML there ('-' = stdout)
  --version              print the version

FILE may be a ReSCCLang script (.lua) or an MSCCL XML / TACCL JSON / TE-CCL
JSON / MSCCL++ JSON file; an imported file runs on its own number of ranks by
default.

sim options:
  --size S               buffer size, nccl-tests' size column (default 256M)
  --sweep A:B            every power of two from A to B, e.g. 1M:8G
  --baseline msccl|nccl  also simulate the MSCCL model (connection TBs,
                         algorithm-level, 2 channels, interpreter) or
                         NCCL's ring with its channels
  --channels N           channels of the baseline (channels=K: ours, as the
                         GPU runtime runs each TB as K blocks)
  --tile S               bytes a primitive call moves of one chunk (1M)
  --depth N              FIFO depth of a connection in tiles (4)
  --trace FILE           Chrome trace-event JSON of the run (Perfetto)
  --svg FILE             TB timeline per rank, or busbw vs size with --sweep

bench options (nccl-tests' flags; resccl-bench --help has the defaults):
  -g N                   GPUs, rank r on GPU r (default: the program's ranks;
                         -g N alone compiles for N ranks)
  --virtual              every rank on GPU 0 (ranks=N): correctness, not speed
  -b S, -e S             smallest and largest size, nccl-tests' size column:
                         bytes with K, M, G or T (1M, 8G, 256MiB)
  -f N, -i S             from one size to the next: times N, or plus S
  -n N, -w N, -c N       timed, warm-up and checked calls per size
  -G N                   time N launches of the -n calls captured in a CUDA
                         graph (no host time between calls), as nccl-tests -G
  --coll NAME            the collective (default: the algorithm's)
  -d, --dtype T, --op OP datatype and reduction, named as dtype= and op= below
  --nccl 0|1             NCCL side by side (through libnccl.so.2)
  --from S FILE2         sizes from S on run FILE2's plan instead (repeat with
                         growing sizes; resccl_plan_load_range), as NCCL picks
                         an algorithm by size

key=value arguments go to the program: ranks=N, topo=PRESET or topo=FILE.lua
(a topology file, docs/sim.md), nmicro=N (sim: at most 65536), count=N
(elements; by default the first multiple of the chunks per block from 4099),
dtype=i8|u8|i32|u32|i64|u64|f16|f32|f64|bf16 (NCCL's spellings work too:
half, bfloat16, uint8, ...), op=sum|prod|max|min|avg, direct=0|off (direct
sends through the FIFOs too), and the algorithm's own parameters.
topology presets: TOPOLOGIES

Scripts run in a sandbox, under RESCCL_BUDGET of CPU time (default 120 s; a
bare number is seconds, or 500ms, 90s, 2m, 1h) and RESCCL_MEMORY of Lua memory
(default 4096 MiB; a bare number is MiB, or 512M, 8GiB).
Sizes are bytes with K, M, G or T, powers of 1024 (KiB and KB alike).
An output file that is an input (the same file) is refused.
exit status: 0 when all that was asked held; 1 an error in the input, or a
check that failed; 2 a bad command line or setting; 4 out of memory.
]]

local STAGES = { dag = true, sched = true, lower = true, tb = true, verify = true }
local COLLECTIVES = { allreduce = true, allgather = true, reducescatter = true, alltoall = true }

-- resccl bench's numeric options: sizes, and integers with their minimum.
local BENCH_SIZES = { ["-b"] = true, ["-e"] = true, ["-i"] = true, ["--from"] = true }
local BENCH_INTS = { ["-g"] = 1, ["-f"] = 2, ["-n"] = 1, ["-w"] = 0, ["-c"] = 0, ["-G"] = 0 }
-- The options resccl bench passes on to resccl-bench, in this order.
local BENCH_PASS = { "-b", "-e", "-f", "-i", "-n", "-w", "-c", "-G", "--dtype", "--op", "--nccl" }

-- The driver's numeric key=value arguments: kind and range (the GPU runtime
-- takes at most 64 channels and 1024 threads a block).
local NUM_ARGS = {
  count = { "int", 1, 1 << 40 }, nmicro = { "int", 1, 1 << 20 }, slots = { "int", 1, 1 << 20 },
  slot_bytes = { "size", 1, 1 << 30 }, timeout_ms = { "int", 1, (1 << 31) - 1 }, ndev = { "int", 1, 1024 },
  iters = { "int", 0, 1 << 20 }, threads = { "int", 32, 1024 }, channels = { "int", 1, 64 }, direct = { "bool" },
}

-- v read as setting `name` of this kind and range (core.setting); a usage
-- error naming it otherwise.
local function setting(kind, name, v, lo, hi)
  local n, err = core.setting(kind, name, v, lo, hi)
  if n == nil then error(err, 0) end
  return n
end

-- A size (bytes) of resccl sim or resccl bench.
local function size(flag, v)
  local n, err = require("resccl.sim").parse_size(v, flag)
  if not n then error(err, 0) end
  return n
end

-- A size (bytes) or an integer of a resccl bench option (resccl-bench's ints).
local function bench_number(flag, v)
  if BENCH_SIZES[flag] then return size(flag, v) end
  return setting("int", flag, v, BENCH_INTS[flag], (1 << 31) - 1)
end

-- The commands that take each option; the others refuse it.
local FOR = {}
local function takes(cmds, flags)
  for _, f in ipairs(flags) do FOR[f] = cmds end
end
takes("run compile verify import export sim bench", { "--sched", "--tb", "--order", "--fuse", "--ce", "--pull" })
takes("run compile verify import export sim", { "--json" })
takes("compile", { "--dump", "--stop-after", "--emit", "--plan" })
takes("compile export sim", { "--inplace" })
takes("run", { "--gpu", "--host" })
takes("import", { "-o", "--output" })
takes("export", { "--msccl-xml" })
takes("sim", { "--size", "--tile", "--sweep", "--baseline", "--channels", "--depth", "--trace", "--svg" })
takes("bench", { "-g", "--from", "-b", "-e", "-i", "-f", "-n", "-w", "-c", "-G", "-d", "--dtype", "--op", "--nccl",
  "--coll", "--virtual" })

local NAMED = { state = "state-based", conn = "connection-based", manual = "hand-placed", merge = "merged" }

local function usage_error(msg)
  io.stderr:write("resccl: ", msg, "\n(see 'resccl help')\n")
  return 2
end

-- Parse argv into { cmd, file, opts, args } or nil, message.
local function parse(argv)
  local o = { cmd = argv[1], sched = "hpds", tb = "state", fuse = "auto", args = {}, bench = {}, more = {} }
  local i = 2
  local function value(flag, allowed)
    i = i + 1
    local v = argv[i]
    if v == nil or (allowed and not allowed[v]) then
      local names = {}
      for k in pairs(allowed or {}) do names[#names + 1] = k end
      table.sort(names)
      error(("%s needs %s"):format(flag, #names > 0 and table.concat(names, "|") or "a value"), 0)
    end
    return v
  end
  -- A file name, or "-" where it may be standard output; not the next option.
  local function file(flag)
    local v = value(flag)
    if v:sub(1, 1) == "-" and v ~= "-" then error(("%s needs a file name, not %s"):format(flag, v), 0) end
    return v
  end
  while i <= #argv do
    local a = argv[i]
    if FOR[a] and not (" " .. FOR[a] .. " "):find(" " .. o.cmd .. " ", 1, true) then
      error(("%s is an option of %s, not of %s"):format(a, FOR[a]:gsub(" ", ", "), o.cmd), 0)
    end
    if a == "--sched" then o.sched = value(a, { hpds = true, rr = true })
    elseif a == "--tb" then o.tb = value(a, { state = true, conn = true, manual = true, merge = true })
    elseif a == "--order" then o.order = value(a, { task = true, algorithm = true })
    elseif a == "--json" then o.json = true
    elseif a == "--dump" then o.dump = value(a, { dag = true, sched = true, lower = true, tb = true })
    elseif a == "--stop-after" then o.stop_after = value(a, STAGES)
    elseif a == "--inplace" then o.inplace = true
    elseif a == "--ce" then o.ce = true
    elseif a == "--pull" then o.pull = true
    elseif a == "--fuse" then o.fuse = value(a, { auto = true, always = true, never = true })
    elseif a == "--emit" then o.emit = value(a, { host = true, cuda = true })
    elseif a == "--gpu" or a == "--host" then o.gpu = a == "--gpu"
    elseif a == "-o" or a == "--output" then o.output = file(a)
    elseif a == "--msccl-xml" then o.msccl_xml = file(a)
    elseif a == "--plan" then o.plan = file(a)
    elseif a == "--size" or a == "--tile" then o[a:sub(3)] = size(a, value(a))
    elseif a == "--sweep" then
      local sizes, err = require("resccl.sim").parse_sweep(value(a), a)
      o.sweep = sizes or error(err, 0)
    elseif a == "--baseline" then o.baseline = value(a, { msccl = true, nccl = true })
    elseif a == "--channels" or a == "--depth" then
      o[a:sub(3)] = setting("int", a, value(a), 1, a == "--channels" and 64 or 1024)
    elseif a == "--trace" or a == "--svg" then o[a:sub(3)] = file(a)
    elseif a == "-g" then o.ngpus = bench_number(a, value(a))
    elseif a == "--from" then
      local from = bench_number(a, value(a))
      o.more[#o.more + 1] = { from = from, file = file(a .. " " .. argv[i]) }
    elseif BENCH_SIZES[a] or BENCH_INTS[a] then o.bench[a] = bench_number(a, value(a))
    elseif a == "-d" or a == "--dtype" or a == "--op" then -- the short names plan:exec takes
      local v = value(a)
      local name, expected = (a == "--op" and core.redop or core.dtype)(v)
      if not name then error(("%s %s: %s"):format(a, v, expected), 0) end
      o.bench[a == "--op" and "--op" or "--dtype"] = name
    elseif a == "--nccl" then o.bench["--nccl"] = value(a, { ["0"] = true, ["1"] = true })
    elseif a == "--coll" then o.coll = value(a, COLLECTIVES)
    elseif a == "--virtual" then o.virtual = true
    elseif a:match "^%-%-%w[%w-]*=" then -- --flag=value
      local flag, v = a:match "^(%-%-[%w-]+)=(.*)$"
      table.insert(argv, i + 1, v)
      argv[i] = flag
      i = i - 1
    elseif a:sub(1, 1) == "-" then error(("unknown option '%s'"):format(a), 0)
    elseif a:find("=", 1, true) then
      local k, v = a:match "^([%w_]+)=(.*)$"
      if not k then error(("bad argument '%s' (key=value expected)"):format(a), 0) end
      local num = NUM_ARGS[k]
      if num then
        -- the simulator's micro-batches are bounded apart: its time grows with them
        local hi = k == "nmicro" and o.cmd == "sim" and core.sim_max_micro or num[3]
        v = setting(num[1], "argument " .. k, v, num[2], hi)
      end
      o.args[k] = v
    elseif not o.file then o.file = a
    else error(("unexpected argument '%s'"):format(a), 0) end
    i = i + 1
  end
  return o
end

local function compile_opts(o, inplace)
  return { sched = o.sched, tb = o.tb, fuse = o.fuse, inplace = inplace, stop_after = o.stop_after, order = o.order,
    ce = o.ce, pull = o.pull }
end

-- Load and build the program; errors carry file:line already. --inplace
-- needs an algorithm with an in-place form.
local function build(o)
  if not o.file then error("a FILE is needed", 0) end
  local t0 = core.clock()
  local alg = resccl.load(o.file)
  if o.inplace and not alg.inplace then
    error(("%s:%d: algorithm %s does not support in-place buffers"):format(alg.file, alg.line, alg.name), 0)
  end
  local prog, topo = alg:program(o.args)
  o.parse_ms = core.clock() - t0
  return alg, prog, topo
end

local function json(t)
  return require("cjson").encode(t)
end

-- Base report keys shared by every subcommand.
local function report(alg, prog, topo, plan, err)
  local p, t = prog:info(), topo:info()
  local r = plan and plan:report() or {}
  r.algorithm, r.file, r.collective, r.ranks, r.topo = alg.name, alg.file, p.collective, p.ranks, t.spec
  r.chunks_per_block, r.transfers = p.chunks, p.transfers
  r.verify = err or (r.verified and "ok" or "not run")
  return r
end

-- The short name of a dtype= or op= argument ("half" -> "f16"); nil when absent.
local function exec_name(key, value, parse)
  if value == nil then return nil end
  local name, expected = parse(value)
  if not name then error(("argument %s=%s: %s"):format(key, value, expected), 0) end
  return name
end

-- plan:exec's arguments. The default count is the first multiple of the
-- chunks per block from 4099 (a prime): every chunk then has one size, as a
-- transfer between chunks at different places in a block needs, and the
-- last slab still ends part-way through a vector.
local function exec_args(o, chunks)
  local a = o.args
  return {
    count = a.count or (4099 + chunks - 1) // chunks * chunks, nmicro = a.nmicro or 4,
    dtype = exec_name("dtype", a.dtype, core.dtype), op = exec_name("op", a.op, core.redop),
    slots = a.slots, slot_bytes = a.slot_bytes, timeout_ms = a.timeout_ms,
    gpu = o.gpu, ndev = a.ndev, iters = a.iters or (o.gpu and 5 or nil),
    threads = a.threads, channels = a.channels, direct = a.direct ~= false,
  }
end

-- ---------------------------------------------------------------- compile

-- Write the runtime's plan file: one section per placement the algorithm
-- supports, and after it the placement's copy-engine form and its pulling
-- form where those differ (the runtime runs the first from RESCCL_CE_FROM
-- bytes, the second below RESCCL_PULL_BELOW; --ce or --pull writes that
-- form alone, for every size); written whole or not at all. No copy-engine
-- form where a reduction that waits for the copy engine ends its chain: it
-- starts on a micro-batch only once all of it has landed, and on 2xH200
-- such a reduce-scatter lost 5-17% from 256 to 512 MiB. A pulling form only
-- where some pull reduces, in one pass with the transfer, and nothing is
-- pushed any more: an all-gather whose receives pulled moved 9-33% less than
-- its pushes from 8 to 64 MiB, and a two-rank ring all-reduce pulling its
-- first hop and pushing its second 10-17% less from 16 to 32 MiB
-- (BENCHMARKS.md); one whose reductions put their sums themselves (put_on)
-- pushes nothing.
function M.write_plan(o, alg, prog, topo, path)
  local plans = {}
  local function form(opts, keep)
    local plan, err = resccl.compile(prog, topo, opts)
    if err then error(err, 0) end
    if keep(plan:report()) then plans[#plans + 1] = plan end
  end
  for _, inplace in ipairs { false, true } do
    if not inplace or alg.inplace then
      form(compile_opts(o, inplace), function() return true end)
      if not o.ce and not o.pull then
        local opts = compile_opts(o, inplace)
        opts.ce = true
        form(opts, function(r) return r.ce_copies > 0 and r.ce_ends == 0 end)
        opts.ce, opts.pull = nil, true
        form(opts, function(r) return r.pulled_reductions > 0 and r.pushes == 0 end)
      end
    end
  end
  local text, err = core.plan_file(table.unpack(plans))
  if not text then error(err, 0) end
  output.write(path, text)
end

function M.compile(o)
  if o.stop_after and o.stop_after ~= "verify" and (o.plan or o.emit) then
    return usage_error(("--stop-after %s: %s needs a verified plan"):format(o.stop_after,
      o.plan and "--plan" or "--emit"))
  end
  local alg, prog, topo = build(o)
  if o.plan then
    M.write_plan(o, alg, prog, topo, o.plan)
    return 0
  end
  local plan, err = resccl.compile(prog, topo, compile_opts(o, o.inplace or false))
  if o.json then
    -- what every GPU compiles: each rank's kernel, emitted on its own
    local emitted = plan and o.emit and not err and 0
    for rank = 0, emitted and prog:info().ranks - 1 or -1 do emitted = emitted + #plan:emit(o.emit, rank) end
    local r = report(alg, prog, topo, plan, err)
    r.emit_bytes, r.parse_ms = emitted or nil, o.parse_ms
    print(json(r))
    return err and 1 or 0
  end
  if o.dump then
    if not plan then error(err, 0) end
    local ok, text = pcall(plan.dump, plan, o.dump)
    if not ok then error(err or text, 0) end
    io.write(text)
    if err then io.stderr:write("resccl: ", err, "\n") end
    return err and 1 or 0
  end
  if err then error(err, 0) end
  if o.emit then
    io.write(plan:emit(o.emit))
    return 0
  end
  print(plan)
  local r = plan:report()
  local ms = {}
  for _, s in ipairs { "dag", "sched", "lower", "tb", "verify" } do
    if r.stage_ms[s] then ms[#ms + 1] = ("%s %.1f"):format(s, r.stage_ms[s]) end
  end
  print(("compile time %.1f ms (%s)"):format(r.compile_ms, table.concat(ms, ", ")))
  return 0
end

-- ----------------------------------------------------------------- verify

function M.verify(o)
  local alg, prog, topo = build(o)
  local bad, out = 0, {}
  for _, inplace in ipairs { false, true } do
    if inplace and not alg.inplace then
      out[#out + 1] = { placement = "in-place", verify = "not supported by this algorithm" }
    else
      local plan, err = resccl.compile(prog, topo, compile_opts(o, inplace))
      if err then bad = bad + 1 end
      out[#out + 1] = { placement = inplace and "in-place" or "out-of-place", verify = err or "ok",
        tasks = plan and plan:report().tasks }
    end
  end
  if o.json then
    local r = report(alg, prog, topo)
    r.verify = bad == 0 and "ok" or (out[1].verify ~= "ok" and out[1].verify or out[2].verify)
    r.placements = out
    print(json(r))
  else
    for _, p in ipairs(out) do print(("%-13s %s"):format(p.placement, p.verify)) end
  end
  return bad == 0 and 0 or 1
end

-- -------------------------------------------------------------------- run

-- Where `run` executes: --gpu or --host, else RESCCL_RUN, else on the GPUs
-- where the GPU runtime sees one, as the collective would run there.
function M.run(o)
  local env = os.getenv "RESCCL_RUN" or ""
  if o.gpu == nil and env ~= "" then
    if env ~= "gpu" and env ~= "host" then return usage_error(("RESCCL_RUN=%s: gpu or host expected"):format(env)) end
    o.gpu = env == "gpu"
  elseif o.gpu == nil then
    o.gpu = core.gpus() > 0
  end
  local alg, prog, topo = build(o)
  local p, t = prog:info(), topo:info()
  local plan, err = resccl.compile(prog, topo, compile_opts(o, false))
  -- TB counts side by side with another policy: connection-based for state-based, else state-based
  local other_tb = o.tb == "state" and "conn" or "state"
  local other = resccl.compile(prog, topo, { sched = o.sched, tb = other_tb, fuse = o.fuse, order = o.order })
  local r = report(alg, prog, topo, plan, err)
  local ok = err == nil
  local ea = exec_args(o, p.chunks)
  local plans = { [false] = { plan, err } }
  if alg.inplace then plans[true] = { resccl.compile(prog, topo, compile_opts(o, true)) } end
  r.execute = {}
  for _, inplace in ipairs { false, true } do
    local name = inplace and "in-place" or "out-of-place"
    local e = { placement = name }
    if inplace and not alg.inplace then
      e.skipped = "not supported by this algorithm"
    else
      local pl, perr = plans[inplace][1], plans[inplace][2]
      if perr then
        e.error, ok = perr, false
      else
        e.tasks = pl:report().tasks
        -- on GPUs, the other placement's kernel is built alongside (in parallel, then cached for its run)
        ea.with = o.gpu and plans[not inplace] and plans[not inplace][1] or nil
        local res, xerr = pl:exec(ea)
        if not res then
          e.error, ok = xerr, false
        else
          e.max_err, e.wrong, e.ms, e.first_wrong, e.ndev = res.max_err, res.wrong, res.ms, res.first_wrong, res.ndev
          if res.wrong > 0 then ok = false end
        end
      end
    end
    r.execute[#r.execute + 1] = e
  end
  local by = { [o.tb] = r, [other_tb] = other and other:report() or {} }
  r["tbs_per_rank_max_" .. other_tb] = by[other_tb].tbs_per_rank_max
  r["tbs_per_rank_max_" .. o.tb] = r.tbs_per_rank_max
  r.result = ok and "pass" or "fail"
  if o.json then
    print(json(r))
    return ok and 0 or 1
  end
  local function line(k, v) print(("%-12s %s"):format(k, v)) end
  line("algorithm", ("%s (%s)"):format(alg.name, alg.file))
  line("collective", ("%s, %d ranks on %s (%d x %d), %d chunks per block"):format(p.collective, p.ranks, t.spec,
    t.nodes, t.gpn, p.chunks))
  line("tasks", ("%s (out-of-place); %d transfers recorded"):format(r.tasks or "-", p.transfers))
  line("schedule", ("%s: %s sub-pipelines"):format(o.sched, r.subpipelines or "-"))
  line("TBs/rank", ("%s %s, %s %s (max over ranks; totals %s vs %s)"):format(NAMED[o.tb], r.tbs_per_rank_max or "-",
    NAMED[other_tb], by[other_tb].tbs_per_rank_max or "-", r.tbs_total or "-", by[other_tb].tbs_total or "-"))
  line("verify", err or "ok (post-condition, connection order, no deadlock)")
  for _, e in ipairs(r.execute) do
    local what
    if e.skipped then what = "skipped: " .. e.skipped
    elseif e.error then what = "FAILED: " .. e.error
    else
      what = ("%s%s %s count=%d nmicro=%d: max error %g, %d wrong (%.3f ms)%s"):format(
        e.ndev and ("GPU x" .. e.ndev .. " ") or "", ea.dtype or "f32", ea.op or "sum", ea.count, ea.nmicro,
        e.max_err, e.wrong, e.ms, e.first_wrong and ("; first: " .. e.first_wrong) or "")
    end
    line(e.placement == "in-place" and "exec inplace" or "exec", what)
  end
  if plan and not err then
    local sim = require "resccl.sim"
    local s, serr = sim.run("ours", prog, topo, { sched = o.sched, tb = o.tb, fuse = o.fuse, order = o.order,
      ce = o.ce, pull = o.pull }, sim.SIZE)
    line("sim", s and ("%s on %s: %.1f us, algbw %.2f GB/s, busbw %.2f GB/s (tiles of %s, %d micro-batches)"):format(
      sim.fmt_size(sim.SIZE), t.spec, s.time_us, s.algbw_gbps, s.busbw_gbps, sim.fmt_size(s.tile_bytes), s.nmicro)
      or serr)
  end
  line("result", ok and "PASS" or "FAIL")
  return ok and 0 or 1
end

-- -------------------------------------------------------------------- sim

function M.sim(o)
  local sim = require "resccl.sim"
  local sizes = o.sweep or { o.size or sim.SIZE }
  local tile = o.tile or sim.TILE
  local alg, prog, topo = build(o)
  local so = { sched = o.sched, tb = o.tb, fuse = o.fuse, inplace = o.inplace or false, order = o.order, ce = o.ce,
    pull = o.pull, channels = o.channels, ours_channels = o.args.channels, tile = tile, depth = o.depth,
    nmicro = o.args.nmicro,
    trace = (o.trace or (o.svg and not o.sweep)) and true or nil }
  local variants = { "ours", o.baseline }
  for _, v in ipairs(variants) do -- the largest size, before any run
    local ok, err = sim.check_size(v, so, sizes[#sizes])
    if not ok then error(err, 0) end
  end
  local results, series = {}, {}
  for _, v in ipairs(variants) do
    series[#series + 1] = { name = v, points = {} }
    for _, size in ipairs(sizes) do
      local r, err = sim.run(v, prog, topo, so, size)
      if not r then error(err, 0) end
      results[#results + 1] = r
      table.insert(series[#series].points, { size = size, busbw = r.busbw_gbps })
    end
  end
  local last = {} -- each variant's result at the largest size
  for _, r in ipairs(results) do last[r.variant] = r end
  if o.trace then sim.write_trace(o.trace, last.ours) end
  if o.svg then
    local what = ("%s on %s"):format(alg.name, topo:info().spec)
    if o.sweep then sim.write_sweep(o.svg, series, what .. ": busbw vs size")
    else sim.write_timeline(o.svg, last.ours, ("%s, %s, %s TBs, %s"):format(what, sim.fmt_size(sizes[1]),
      last.ours.tb_policy, last.ours.order == "task" and "task-level" or "algorithm-level")) end
  end
  if o.json then
    local r = report(alg, prog, topo)
    r.verify = "ok" -- the simulator runs verified plans only
    r.sim = sim.json_result(last.ours)
    if o.baseline then r.baseline = sim.json_result(last[o.baseline]) end
    if o.sweep then
      r.sweep = {}
      for _, x in ipairs(results) do
        r.sweep[#r.sweep + 1] = { variant = x.variant, size_bytes = x.size_bytes, time_us = x.time_us,
          algbw_gbps = x.algbw_gbps, busbw_gbps = x.busbw_gbps, tb_busy_avg = x.tb_busy_avg,
          tb_idle_avg = x.tb_idle_avg, tb_idle_max = x.tb_idle_max }
      end
    end
    print(json(r))
    return 0
  end
  local u = last.ours
  print(("# %s (%s) on %s, %d ranks; tile %s, FIFO depth %d"):format(alg.name, prog:info().collective,
    topo:info().spec, prog:info().ranks, sim.fmt_size(tile), u.depth))
  for _, v in ipairs(variants) do
    local x = last[v]
    print(("# %-6s %s schedule, %s TBs, %s execution, %d instance(s)%s%s%s"):format(v, x.sched, x.tb_policy,
      x.order == "task" and "task-level" or "algorithm-level", x.instances,
      x.slowdown > 0 and (", interpreter -%.1f%%"):format(100 * x.slowdown) or "",
      x.ce_copies > 0 and (", %d copies on the copy engine"):format(x.ce_copies) or "",
      x.pulls > 0 and (", %d pulls"):format(x.pulls) or ""))
  end
  print(sim.header())
  for _, r in ipairs(results) do print(sim.row(r)) end
  if o.baseline then
    local b = last[o.baseline]
    print(("# ours / %s at %s: %.2fx busbw, %d vs %d TBs per rank"):format(o.baseline,
      sim.fmt_size(u.size_bytes), u.busbw_gbps / b.busbw_gbps, u.tbs_per_rank_max, b.tbs_per_rank_max))
  end
  return 0
end

-- Counts per rank: each for a few ranks, their range for many.
local function per_rank(l)
  if #l <= 16 then return table.concat(l, " ") end
  local lo, hi = math.huge, -math.huge
  for _, v in ipairs(l) do lo, hi = math.min(lo, v), math.max(hi, v) end
  if lo == hi then return ("%d on each of %d ranks"):format(lo, #l) end
  return ("%d to %d over %d ranks"):format(lo, hi, #l)
end

-- ----------------------------------------------------------------- import

function M.import(o)
  if not o.file then error("a FILE is needed", 0) end
  local import = require "resccl.import"
  local imp = import.read(o.file)
  local alg = import.algorithm(imp)
  local prog, topo = alg:program(o.args)
  local t = topo:info()
  local r = {
    source = o.file, format = imp.format, name = imp.name, collective = imp.collective, ranks = imp.ranks,
    chunks_per_block = imp.chunks, transfers = #imp.xfers, topo = t.spec, file_tbs_per_rank = imp.file_tbs,
    warnings = imp.warnings, details = imp.details, placements = {},
  }
  local bad = 0
  for _, inplace in ipairs { false, true } do
    local name = inplace and "in-place" or "out-of-place"
    if inplace and not alg.inplace then
      r.placements[#r.placements + 1] = { placement = name, verify = "not supported by the file" }
    else
      local plan, err = resccl.compile(prog, topo, compile_opts(o, inplace))
      local rep = plan and plan:report() or {}
      if err then bad = bad + 1 end
      r.placements[#r.placements + 1] = { placement = name, verify = err or "ok", tasks = rep.tasks,
        tbs_per_rank = rep.tbs_per_rank, tbs_per_rank_max = rep.tbs_per_rank_max }
    end
  end
  r.verify = bad == 0 and "ok" or (r.placements[1].verify ~= "ok" and r.placements[1].verify or r.placements[2].verify)
  if imp.hints then
    -- The baseline: the file's own TBs and steps, run algorithm-level as MSCCL does.
    local plan, err = resccl.compile(prog, topo, { sched = o.sched, tb = "manual", order = "algorithm",
      inplace = not imp.outofplace })
    r.file_schedule = { verify = err or "ok", placement = imp.outofplace and "out-of-place" or "in-place",
      tbs_per_rank = plan and plan:report().tbs_per_rank }
  end
  if o.output then
    output.write(o.output, import.to_lua(imp))
    r.wrote = o.output
  end
  if o.json then
    print(json(r))
    return bad == 0 and 0 or 1
  end
  local function line(k, v) print(("%-12s %s"):format(k, v)) end
  local function list(l)
    if not l then return "-" end
    local mx = 0
    for _, v in ipairs(l) do mx = math.max(mx, v) end
    return ("max %d (%s)"):format(mx, per_rank(l))
  end
  line("source", ("%s (%s)"):format(o.file, imp.format))
  line("collective", ("%s, %d ranks, %d chunk%s per block; %s"):format(imp.collective, imp.ranks, imp.chunks,
    imp.chunks == 1 and "" or "s", imp.inplace and (imp.outofplace and "in-place and out-of-place" or "in-place")
    or "out-of-place"))
  local oop = r.placements[1]
  line("tasks", ("%d transfers imported; %s tasks after placement (out-of-place)"):format(#imp.xfers, oop.tasks or "-"))
  line("file TBs", imp.file_tbs and list(imp.file_tbs) or "- (the format has no thread blocks)")
  for _, p in ipairs(r.placements) do
    if p.tbs_per_rank then line("our TBs", ("%s, %s, %s on %s"):format(list(p.tbs_per_rank), NAMED[o.tb], p.placement, t.spec)) end
  end
  for _, p in ipairs(r.placements) do line("verify", ("%s: %s"):format(p.placement, p.verify)) end
  if r.file_schedule then
    line("file sched", ("the file's own TBs (--tb manual --order algorithm), %s: %s"):format(r.file_schedule.placement,
      r.file_schedule.verify))
  end
  for _, w in ipairs(imp.warnings) do line("warning", w) end
  if r.wrote then line("wrote", r.wrote) end
  return bad == 0 and 0 or 1
end

-- ----------------------------------------------------------------- export


function M.export(o)
  if not o.msccl_xml then error("export needs --msccl-xml OUT.xml", 0) end
  if o.ce then return usage_error("export: --ce has no MSCCL form (an MSCCL runtime makes no copy-engine copies)") end
  if o.pull then return usage_error("export: --pull has no MSCCL form (an MSCCL runtime reads no peer's buffer)") end
  local alg, prog, topo = build(o)
  local plan, err = resccl.compile(prog, topo, compile_opts(o, o.inplace or false))
  if err then error(err, 0) end
  local xml, notes = require("resccl.export.msccl_xml").write(plan, prog, { name = alg.name, inplace = o.inplace or false })
  output.write(o.msccl_xml, xml)
  local out = o.msccl_xml == "-" and io.stderr or io.stdout
  if o.json then
    out:write(json { algorithm = alg.name, file = o.msccl_xml, notes = notes.lines, tbs_per_rank = notes.tbs_per_rank,
      our_tbs_per_rank = notes.our_tbs_per_rank, steps = notes.steps }, "\n")
  else
    out:write(("wrote %s: %s, %d ranks; MSCCL TBs per rank %s (ours %s)\n"):format(o.msccl_xml, alg.collective,
      prog:info().ranks, per_rank(notes.tbs_per_rank), per_rank(notes.our_tbs_per_rank)))
    for _, n in ipairs(notes.lines) do out:write("note: ", n, "\n") end
  end
  return 0
end

-- ------------------------------------------------------------------ bench

local function shell_quote(v)
  return "'" .. tostring(v):gsub("'", "'\\''") .. "'"
end

-- resccl-bench next to this resccl (argv[0]), else on PATH; nil when neither has it.
local function bench_exe(argv0)
  local dirs = { argv0 and argv0:match "^(.*)/[^/]*$" }
  for d in (os.getenv "PATH" or ""):gmatch "[^:]+" do dirs[#dirs + 1] = d end
  for _, d in ipairs(dirs) do
    local f = io.open(d .. "/resccl-bench")
    if f then
      f:close()
      return d .. "/resccl-bench"
    end
  end
end

--- Compile FILE (and every --from FILE) for the GPUs asked for, write the
--- plans to temporary files and run resccl-bench on them; returns
--- resccl-bench's exit status.
function M.bench(o)
  local b = o.bench
  if b["-b"] and b["-e"] and b["-b"] > b["-e"] then
    return usage_error(("-b %d is larger than -e %d"):format(b["-b"], b["-e"]))
  end
  local given = o.ngpus or o.args.ranks or o.args.topo
  if o.ngpus and not o.args.ranks and not o.args.topo then o.args.ranks = tostring(o.ngpus) end
  local alg, prog, topo = build(o)
  local n = prog:info().ranks
  if not given and not alg.ranks then return usage_error("bench needs -g N (GPUs), or ranks=N with --virtual") end
  if o.ngpus and o.ngpus ~= n then
    return usage_error(("-g %d: the program has %d ranks%s"):format(o.ngpus, n,
      o.virtual and "" or ", one per GPU (--virtual puts every rank on GPU 0)"))
  end
  local coll = o.coll or alg.collective
  local plans = { { alg = alg, prog = prog, topo = topo } }
  for k, m in ipairs(o.more) do
    if m.from <= (k > 1 and o.more[k - 1].from or 0) then
      return usage_error(("--from %d: sizes must grow from plan to plan"):format(m.from))
    end
    local a, p, t = build { file = m.file, args = o.args }
    if p:info().ranks ~= n then
      return usage_error(("--from %d %s: %d ranks, %s has %d"):format(m.from, m.file, p:info().ranks, o.file, n))
    end
    plans[#plans + 1] = { alg = a, prog = p, topo = t, from = m.from }
  end
  for _, q in ipairs(plans) do
    if coll ~= q.alg.collective then
      return usage_error(("--coll %s: %s implements %s"):format(coll, q.alg.name, q.alg.collective))
    end
  end
  local exe = bench_exe(o.argv0)
  if not exe then error("resccl bench needs the GPU runtime (resccl-bench not built: no CUDA toolkit)", 0) end
  local ok, err, inplace = true, nil, true
  for _, q in ipairs(plans) do
    q.path = os.tmpname()
    if ok then ok, err = pcall(M.write_plan, o, q.alg, q.prog, q.topo, q.path) end
    inplace = inplace and q.alg.inplace
  end
  local status = 1
  if ok then
    local cmd = { shell_quote(exe), "--coll", coll, "-g", n }
    if o.virtual then cmd[#cmd + 1] = "--virtual" end
    if not inplace then cmd[#cmd + 1] = "--inplace 0" end
    for _, flag in ipairs(BENCH_PASS) do
      if b[flag] then cmd[#cmd + 1] = flag .. " " .. shell_quote(b[flag]) end
    end
    for _, q in ipairs(plans) do cmd[#cmd + 1] = shell_quote(q.path .. (q.from and "@" .. q.from or "")) end
    io.stdout:flush()
    local _, how, code = os.execute(table.concat(cmd, " "))
    status = how == "exit" and code or 128 + code
  end
  for _, q in ipairs(plans) do os.remove(q.path) end
  if not ok then error(err, 0) end
  return status
end

-- The usage, with the topology presets as src/topo.c lists them.
local function usage()
  return (USAGE:gsub("TOPOLOGIES", function() return require("resccl.topo").presets() end))
end

function M.help()
  io.write(usage())
  return 0
end

-- The options that write a file (--plan, -o, --msccl-xml, --trace, --svg).
local OUTPUTS = { "plan", "output", "msccl_xml", "trace", "svg" }

-- A message when an output names an input: the same file (device and inode,
-- so through a link or another spelling too), which writing would replace.
local function overwrites(o)
  local inputs = { { o.file, "the input" }, { o.args.topo, "the topology file (topo=)" } }
  for _, m in ipairs(o.more) do inputs[#inputs + 1] = { m.file, "an input (--from)" } end
  for _, k in ipairs(OUTPUTS) do
    local out = o[k]
    for _, i in ipairs(out and out ~= "-" and inputs or {}) do
      if i[1] and core.same_file(out, i[1]) then return ("%s: is %s; refusing to overwrite it"):format(out, i[2]) end
    end
  end
end

--- Entry point from main.c: argv[1..] are the arguments and argv[0] how resccl
--- was run (bench looks for resccl-bench beside it); returns the exit code.
function M.main(argv)
  local cmd = argv[1]
  if cmd == nil then io.stderr:write(usage()) return 2 end
  if cmd == "--version" or cmd == "version" then
    print("resccl " .. core.version)
    return 0
  end
  if cmd == "help" or cmd == "--help" or cmd == "-h" then return M.help() end
  if not (cmd == "run" or cmd == "compile" or cmd == "verify" or cmd == "sim" or cmd == "import" or cmd == "export"
      or cmd == "bench" or cmd == "repl") then
    return usage_error(("unknown command '%s'"):format(cmd))
  end
  for i = 2, #argv do
    if argv[i] == "--help" or argv[i] == "-h" then return M.help() end
  end
  if cmd == "repl" then return usage_error("'repl' takes no arguments") end -- main.c runs a bare `resccl repl`
  local ok, o = pcall(parse, argv)
  if not ok then return usage_error(o) end
  local limits_ok, err = pcall(resccl.limits) -- RESCCL_BUDGET, RESCCL_MEMORY: blamed here, not on the script
  if not limits_ok then return usage_error(err) end
  if not o.file then return usage_error(("'%s' needs a FILE"):format(cmd)) end
  local clash = overwrites(o)
  if clash then
    io.stderr:write("resccl: ", clash, "\n")
    return 2
  end
  o.argv0 = argv[0]
  return M[cmd](o)
end

return M
