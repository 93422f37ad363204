--- resccl bench: compile to plan files and run them on the GPUs with
--- resccl-bench, nccl-tests' table.
local args = require "resccl.cli.args"
local plans = require "resccl.cli.plans"

local M = {}

-- The options resccl bench passes on to resccl-bench, in this order.
local BENCH_PASS = { "-b", "-e", "-f", "-i", "-n", "-w", "-c", "-G", "--dtype", "--op", "--nccl" }

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
    return args.usage_error(("-b %d is larger than -e %d"):format(b["-b"], b["-e"]))
  end
  local given = o.ngpus or o.args.ranks or o.args.topo
  if o.ngpus and not o.args.ranks and not o.args.topo then o.args.ranks = tostring(o.ngpus) end
  local alg, prog, topo = plans.build(o)
  local n = prog:info().ranks
  if not given and not alg.ranks then return args.usage_error("bench needs -g N (GPUs), or ranks=N with --virtual") end
  if o.ngpus and o.ngpus ~= n then
    return args.usage_error(("-g %d: the program has %d ranks%s"):format(o.ngpus, n,
      o.virtual and "" or ", one per GPU (--virtual puts every rank on GPU 0)"))
  end
  local coll = o.coll or alg.collective
  local files = { { alg = alg, prog = prog, topo = topo } }
  for k, m in ipairs(o.more) do
    if m.from <= (k > 1 and o.more[k - 1].from or 0) then
      return args.usage_error(("--from %d: sizes must grow from plan to plan"):format(m.from))
    end
    local a, p, t = plans.build { file = m.file, args = o.args }
    if p:info().ranks ~= n then
      return args.usage_error(("--from %d %s: %d ranks, %s has %d"):format(m.from, m.file, p:info().ranks, o.file, n))
    end
    files[#files + 1] = { alg = a, prog = p, topo = t, from = m.from }
  end
  for _, q in ipairs(files) do
    if coll ~= q.alg.collective then
      return args.usage_error(("--coll %s: %s implements %s"):format(coll, q.alg.name, q.alg.collective))
    end
  end
  local exe = bench_exe(o.argv0)
  if not exe then error("resccl bench needs the GPU runtime (resccl-bench not built: no CUDA toolkit)", 0) end
  local ok, err, inplace = true, nil, true
  for _, q in ipairs(files) do
    q.path = os.tmpname()
    if ok then ok, err = pcall(plans.write, o, q.alg, q.prog, q.topo, q.path) end
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
    for _, q in ipairs(files) do cmd[#cmd + 1] = shell_quote(q.path .. (q.from and "@" .. q.from or "")) end
    io.stdout:flush()
    local _, how, code = os.execute(table.concat(cmd, " "))
    status = how == "exit" and code or 128 + code
  end
  for _, q in ipairs(files) do os.remove(q.path) end
  if not ok then error(err, 0) end
  return status
end

return M
