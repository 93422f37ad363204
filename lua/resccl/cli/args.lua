--- The resccl command line's arguments: the usage, the options each
--- command takes, and parsing them into one options table.
local core = require "resccl.core"

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
  --json                 print one machine-readable report (not bench); a
                         failure too: {"error": {"code": N, "message": M}}
  --dump dag|sched|lower|tb   print that stage (compile)
  --stop-after STAGE     stop after a pass: dag|sched|lower|tb|merge|lend|
                         offload|pull|analyse|verify (compile; not with
                         --plan or --emit)
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
default. A name that is no file finds a shipped algorithm (allreduce_ring).
An existing file is a file even with '=' in its name; after --, every
argument is.

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

-- The names an option takes, as sets: the core's (core.names).
local NAMES = {}
for k, list in pairs(core.names) do
  NAMES[k] = {}
  for _, name in ipairs(list) do NAMES[k][name] = true end
end

-- resccl bench's numeric options: sizes, and integers with their minimum.
local BENCH_SIZES = { ["-b"] = true, ["-e"] = true, ["-i"] = true, ["--from"] = true }
local BENCH_INTS = { ["-g"] = 1, ["-f"] = 2, ["-n"] = 1, ["-w"] = 0, ["-c"] = 0, ["-G"] = 0 }

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

--- Report a usage error; returns exit status 2. The message is kept in
--- M.last_usage for --json (resccl.cli.main).
function M.usage_error(msg)
  io.stderr:write("resccl: ", msg, "\n(see 'resccl help')\n")
  M.last_usage = msg
  return 2
end

--- Parse argv (argv[1] the command) into the options table every command
--- takes: o.cmd, o.file, o.args (key=value), a field per option; raises the
--- message of a usage error.
function M.parse(argv)
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
  local files = false -- after "--": every argument is a file
  while i <= #argv do
    local a = argv[i]
    if files or (a:find("=", 1, true) and a:sub(1, 1) ~= "-" and core.file_kind(a)) then -- a file, '=' or not
      if o.file then error(("unexpected argument '%s'"):format(a), 0) end
      o.file = a
    elseif a == "--" then files = true
    elseif FOR[a] and not (" " .. FOR[a] .. " "):find(" " .. o.cmd .. " ", 1, true) then
      error(("%s is an option of %s, not of %s"):format(a, FOR[a]:gsub(" ", ", "), o.cmd), 0)
    elseif a == "--sched" then o.sched = value(a, NAMES.sched)
    elseif a == "--tb" then o.tb = value(a, NAMES.tb)
    elseif a == "--order" then o.order = value(a, NAMES.order)
    elseif a == "--json" then o.json = true
    elseif a == "--dump" then o.dump = value(a, NAMES.dump)
    elseif a == "--stop-after" then o.stop_after = value(a, NAMES.stage)
    elseif a == "--inplace" then o.inplace = true
    elseif a == "--ce" then o.ce = true
    elseif a == "--pull" then o.pull = true
    elseif a == "--fuse" then o.fuse = value(a, NAMES.fuse)
    elseif a == "--emit" then o.emit = value(a, NAMES.emit)
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
    elseif a == "--coll" then o.coll = value(a, NAMES.collective)
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

--- The usage, with the topology presets as src/topo.c lists them.
function M.usage()
  return (USAGE:gsub("TOPOLOGIES", function() return require("resccl.topo").presets() end))
end

--- One command's usage: its entry in the command list, the options it
--- takes (each as the whole usage words it), then what every command shares
--- (FILE, key=value arguments, sizes, exit status).
function M.usage_for(cmd)
  local text, lines, entry, options = M.usage(), {}, {}, {}
  for line in text:gmatch "([^\n]*)\n" do lines[#lines + 1] = line end
  local i = 1
  while i <= #lines do
    local j = i + 1 -- a block: a line at column 2, then the lines indented past it
    while j <= #lines and lines[j]:match "^     " do j = j + 1 end
    local head, into = lines[i], nil
    if head:find("^  " .. cmd .. " ") then into = entry
    elseif head:match "^  %-" then
      for flag in head:gmatch "%f[%w-]%-%-?%a[%w-]*" do
        if FOR[flag] and (" " .. FOR[flag] .. " "):find(" " .. cmd .. " ", 1, true) then into = options end
      end
    end
    for k = i, into and j - 1 or 0 do into[#into + 1] = lines[k] end
    i = j
  end
  return ("usage: resccl %s FILE [key=value ...] [options]\n\n%s\n\noptions:\n%s\n\n%s\n%s"):format(cmd,
    table.concat(entry, "\n"), table.concat(options, "\n"), text:match "\n(FILE may be.-\n)\n",
    text:match "\n(key=value arguments.*)$")
end

-- The options that write a file (--plan, -o, --msccl-xml, --trace, --svg).
local OUTPUTS = { "plan", "output", "msccl_xml", "trace", "svg" }

--- A message when an output names an input: the same file (device and inode,
--- so through a link or another spelling too), which writing would replace.
function M.overwrites(o)
  local inputs = { { o.file, "the input" }, { o.args.topo, "the topology file (topo=)" } }
  for _, m in ipairs(o.more) do inputs[#inputs + 1] = { m.file, "an input (--from)" } end
  for _, k in ipairs(OUTPUTS) do
    local out = o[k]
    for _, i in ipairs(out and out ~= "-" and inputs or {}) do
      if i[1] and core.same_file(out, i[1]) then return ("%s: is %s; refusing to overwrite it"):format(out, i[2]) end
    end
  end
end

return M
