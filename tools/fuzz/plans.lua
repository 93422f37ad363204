--- Property-based fuzzing of the compiler: random, correct collectives under every option.
--
-- Each seed makes one program (math.randomseed(seed)): an all-gather, reduce-scatter, all-reduce or
-- all-to-all on 2..6 ranks with 1..4 chunks per rank (flat, one NVSwitch or A100 nodes), whose chunks
-- travel random routes (directly or through scratch on other ranks), are reduced along random trees
-- into random roots (some staged in scratch first) and broadcast along random trees, several chunks at
-- a time where they stay contiguous, with scratch reused and jobs interleaved at random; half of the
-- programs also place every transfer on thread blocks by hand (sendtb/recvtb/ch, some at one step
-- with the receive before them, to fuse), in an order that cannot deadlock. A reference interpreter
-- runs the transfers in record order, as the compiler's semantics define, and proves the program
-- right out of place (always: by construction) and in place (where it is).
--
-- The program then goes through the compiler under an options matrix (default, pull, ce, tb=merge,
-- tb=conn, order=algorithm, sched=rr, fuse=always, fuse=never, tb=manual where the program places its
-- transfers, and six random combinations), in each placement the program is right in, and plans that
-- verify run on the host executor with real data (random dtype, op, count, micro-batches; plans that
-- emit the same code run once).
--
-- A failure is one of:
--   default   the default options do not verify a program the reference interpreter proved right;
--   verify    a compile or verify error under some options where the default verifies (refusals
--             such as pull with ce, and deadlocks under fuse=always, which reports them by design, are
--             counted apart, not as failures);
--   exec      a verified plan whose execution is wrong, stuck or refused;
--   lua       a Lua error in the DSL or the bindings;
--   crash     the process died: the seeds run in a child process, restarted after the one that died;
--   generator the fuzzer's own fault (a program the reference finds wrong): fix the generator.
-- The first failure of each kind, message and mode (pull, ce, manual) is shrunk and written as a
-- ReSCCLang file under --repro, with the error and the resccl command that shows it: the same seed
-- with fewer ranks, chunks, hops and plainer jobs, then transfers that read the same value from an
-- input or output instead, transfers left out, a rank or a chunk left out, while the program stays
-- right and fails the same way.
--
-- From the repository root (modules: lua/ and build/lib/; LUA_PATH and LUA_CPATH come first):
--   lua5.4 tools/fuzz/plans.lua --seeds 1-500       seeds 1 to 500
--   lua5.4 tools/fuzz/plans.lua --time 600          seeds from 1 (or --seeds A-) for ten minutes
--   lua5.4 tools/fuzz/plans.lua --seeds 1234 -v     one seed, with every combination that ran
--   lua5.4 tools/fuzz/plans.lua --show 1234         print seed 1234's program
--   lua5.4 tools/fuzz/plans.lua --file ALG.lua      the options matrix on one algorithm file (a repro;
--                                                  --topo SPEC for its topology)
-- Exit status 1 when a run of several seeds found a failure. Other flags: --exec P (run a share P of the distinct plans, at random: compiling is cheap, running
-- is not, the executor compiles the emitted C), --no-exec, --repro DIR (default /tmp/fz/repro),
-- --no-shrink, --inline (no child process). A failure prints its seed; `--seeds N -v` (with the
-- same --exec) runs that case again, alone.

local root = (arg and arg[0] or ""):match "^(.-)/?tools/fuzz/[^/]*$" or "."
root = root == "" and "." or root
package.path = package.path .. (";%s/lua/?.lua;%s/lua/?/init.lua"):format(root, root)
package.cpath = package.cpath .. (";%s/build/lib/?.so"):format(root)

local resccl = require "resccl"

local COLLS = { "allgather", "reducescatter", "allreduce", "alltoall" }

-- ------------------------------------------------------------ random streams

-- A job draws from its own stream (splitmix64), seeded from the case's
-- math.random: simplifying one job while shrinking leaves the others as
-- they were.
local Rng = {}
Rng.__index = Rng

local function rng(seed) return setmetatable({ s = seed }, Rng) end

function Rng:next()
  self.s = self.s + 0x9e3779b97f4a7c15
  local z = self.s
  z = (z ~ (z >> 30)) * 0xbf58476d1ce4e5b9
  z = (z ~ (z >> 27)) * 0x94d049bb133111eb
  return z ~ (z >> 31)
end

function Rng:int(a, b) return a + (self:next() >> 1) % (b - a + 1) end
function Rng:chance(p) return (self:next() >> 11) < p * (1 << 53) end
function Rng:pick(t) return t[self:int(1, #t)] end

function Rng:shuffle(t)
  for i = #t, 2, -1 do
    local j = self:int(1, i)
    t[i], t[j] = t[j], t[i]
  end
  return t
end

-- ------------------------------------------------------------ the generator

-- A program is a list of transfers {op, s, d, at}: op "copy" (d := s) or
-- "reduce" (d := d + s), s and d chunk references {r, b, i, n}.
local function ref(r, b, i, n) return { r = r, b = b, i = i, n = n } end
local function same(x, y) return x.r == y.r and x.b == y.b and x.i == y.i and x.n == y.n end

-- Record a transfer; then, now and then, let another job record its next one.
local function record(g, op, s, d)
  g.xf[#g.xf + 1] = { op = op, s = s, d = d }
  if g.yield:chance(g.k.switch) then coroutine.yield() end
end

-- Scratch, per rank: first fit (reusing what jobs released) or always fresh.
local function alloc(g, r, n)
  local used, i = g.used[r], g.k.reuse and 0 or g.top[r]
  local function free(at)
    for c = at, at + n - 1 do
      if used[c] then return false end
    end
    return true
  end
  while not free(i) do i = i + 1 end
  for c = i, i + n - 1 do used[c] = true end
  g.top[r] = math.max(g.top[r], i + n)
  return ref(r, "scratch", i, n)
end

local function release(g, x)
  if x.b ~= "scratch" then return end
  for c = x.i, x.i + x.n - 1 do g.used[x.r][c] = nil end
end

--- Bring x to the location dst, directly or through scratch on up to two ranks.
local function move(J, x, dst, depth)
  local g = J.g
  depth = depth or 0
  if not J.simple and depth < 2 and J.rng:chance(g.k.hop) then
    local mid = alloc(g, J.rng:int(0, g.R - 1), x.n)
    record(g, "copy", x, mid)
    local y = move(J, mid, dst, depth + 1)
    release(g, mid)
    return y
  end
  if not same(x, dst) then record(g, "copy", x, dst) end
  return dst
end

--- A random tree over the ranks, rooted at root: the other ranks in an order
--- where every parent comes before its children, and their parents.
local function tree(J, root)
  local g, order = J.g, {}
  for r = 0, g.R - 1 do
    if r ~= root then order[#order + 1] = r end
  end
  J.rng:shuffle(order)
  local shape = J.simple and "star" or g.k.shape
  if shape == "mixed" then shape = J.rng:pick { "star", "chain", "random" } end
  local parent, seen = {}, { root }
  for _, r in ipairs(order) do
    parent[r] = shape == "star" and root or shape == "chain" and seen[#seen] or J.rng:pick(seen)
    seen[#seen + 1] = r
  end
  return order, parent
end

--- Broadcast x from its rank to dest(p) on every rank p, along a random tree.
local function bcast(J, x, dest)
  local order, parent = tree(J, x.r)
  local held, early = { [x.r] = x }, J.rng:chance(0.5)
  if early then
    local y = move(J, x, dest(x.r))
    if J.rng:chance(0.5) then held[x.r] = y end
  end
  for _, c in ipairs(order) do held[c] = move(J, held[parent[c]], dest(c)) end
  if not early then move(J, x, dest(x.r)) end
end

--- Sum contrib(q) of every rank q into a location on root, along a random tree;
--- home(q) is where q may keep its partial sum (else scratch). Returns it.
local function reduce(J, root, contrib, home)
  local g, rn = J.g, J.rng
  local order, parent = tree(J, root)
  local kids = {}
  for _, c in ipairs(order) do
    kids[parent[c]] = kids[parent[c]] or {}
    table.insert(kids[parent[c]], c)
  end
  local function node(q)
    local ks = kids[q] or {}
    if #ks == 0 and q ~= root then return contrib(q) end
    local acc
    -- the first value seeds the sum: in q's home only when it is q's own
    -- contribution (or the job is sloppy), so that in place q's input is
    -- read before its home is overwritten
    local function start(x, own)
      local h = home(q)
      local at = h and (own or g.k.sloppy) and rn:chance(0.7) and h or alloc(g, q, x.n)
      return move(J, x, at)
    end
    local ownat = J.simple and 0 or rn:int(0, #ks)
    for k = 0, #ks do
      if k == ownat then
        if acc then record(g, "reduce", contrib(q), acc) else acc = start(contrib(q), true) end
      end
      if ks[k + 1] then
        local x = node(ks[k + 1])
        if not acc then
          acc = start(x, false)
        elseif J.simple or rn:chance(0.5) then
          record(g, "reduce", x, acc)
        else
          local t = move(J, x, alloc(g, q, x.n))
          record(g, "reduce", t, acc)
          release(g, t)
        end
        release(g, x)
      end
    end
    return acc
  end
  return node(root)
end

--- The same sum, staged: every other contribution lands in root's scratch,
--- and after a barrier (every job has read what it reads) root adds them up.
local function reduce_staged(J, root, contrib, home)
  local g, rn, parts = J.g, J.rng, {}
  for q = 0, g.R - 1 do
    if q ~= root then parts[#parts + 1] = contrib(q) end
  end
  rn:shuffle(parts)
  for k, x in ipairs(parts) do parts[k] = move(J, x, alloc(g, root, x.n)) end
  coroutine.yield "barrier"
  table.insert(parts, rn:int(1, #parts + 1), contrib(root))
  local h, acc = home(root), parts[1]
  if acc.b ~= "scratch" then -- root's own contribution: into its home or scratch
    acc = move(J, acc, h and rn:chance(0.7) and h or alloc(g, root, acc.n))
  elseif h and g.k.sloppy then
    acc = move(J, acc, h)
    release(g, parts[1])
  end
  for k = 2, #parts do
    record(g, "reduce", parts[k], acc)
    release(g, parts[k])
  end
  return acc
end

local function sum(J, root, contrib, home)
  local staged = not J.simple and J.rng:chance(J.g.k.stage)
  return (staged and reduce_staged or reduce)(J, root, contrib, home)
end

-- Contiguous runs {i, n} covering 0..n-1, at most cap long.
local function runs(g, n, cap)
  local out, i = {}, 0
  while i < n do
    local len = g.k.multi and g.rng:int(1, math.min(n - i, cap or n)) or 1
    out[#out + 1] = { i = i, n = len }
    i = i + len
  end
  return out
end

-- Per collective: add(fn) adds a job, fn(J) records its transfers.
local BUILD = {}

-- Jobs that broadcast the hub's output runs `list` to every rank, after every other job.
local function from_hub(add, hub, list)
  for _, s in ipairs(list) do
    add(function(J)
      coroutine.yield "after"
      bcast(J, ref(hub, "output", s.i, s.n), function(p) return ref(p, "output", s.i, s.n) end)
    end)
  end
end

function BUILD.allgather(g, add)
  local R, C = g.R, g.C
  local hub = g.k.style == 1 and g.rng:int(0, R - 1)
  for r = 0, R - 1 do
    for _, s in ipairs(runs(g, C)) do
      local x = ref(r, "input", s.i, s.n)
      if hub then
        add(function(J) move(J, x, ref(hub, "output", r * C + s.i, s.n)) end)
      else
        add(function(J) bcast(J, x, function(p) return ref(p, "output", r * C + s.i, s.n) end) end)
      end
    end
  end
  if hub then from_hub(add, hub, runs(g, R * C, 2 * C)) end -- the hub's output, in runs across blocks
end

function BUILD.reducescatter(g, add)
  local R, C = g.R, g.C
  for r = 0, R - 1 do
    for _, s in ipairs(runs(g, C)) do
      local out = ref(r, "output", s.i, s.n)
      add(function(J)
        local root = (J.simple or J.rng:chance(0.5)) and r or J.rng:int(0, R - 1)
        local acc = sum(J, root, function(q) return ref(q, "input", r * C + s.i, s.n) end,
          function(q) return q == r and out or nil end)
        move(J, acc, out)
        release(g, acc)
      end)
    end
  end
end

function BUILD.allreduce(g, add)
  local R, C = g.R, g.C
  local style = g.k.style -- 1: one root reduces all, then broadcasts runs; 2: every rank reduces all; else trees
  local hub = style == 1 and g.rng:int(0, R - 1)
  for _, s in ipairs(runs(g, C)) do
    local function input(q) return ref(q, "input", s.i, s.n) end
    local function output(q) return ref(q, "output", s.i, s.n) end
    if style == 2 then
      for p = 0, R - 1 do
        add(function(J)
          local acc = sum(J, p, input, function(q) return q == p and output(p) or nil end)
          move(J, acc, output(p))
          release(g, acc)
        end)
      end
    else
      add(function(J)
        local acc = sum(J, hub or J.rng:int(0, R - 1), input, output)
        if hub then move(J, acc, output(hub)) else bcast(J, acc, output) end
        release(g, acc)
      end)
    end
  end
  if hub then from_hub(add, hub, runs(g, C)) end
end

function BUILD.alltoall(g, add)
  local R, C = g.R, g.C
  local style = g.k.style -- 1: through a hub per sender; 2: staged in scratch; else direct (with hops)
  for r = 0, R - 1 do
    if style == 1 then
      local hub = g.rng:int(0, R - 1)
      local block = alloc(g, hub, R * C) -- the sender's input, whole, in the hub's scratch
      for _, s in ipairs(runs(g, R * C, 2 * C)) do
        add(function(J) move(J, ref(r, "input", s.i, s.n), ref(hub, "scratch", block.i + s.i, s.n)) end)
      end
      for p = 0, R - 1 do
        for _, s in ipairs(runs(g, C)) do
          add(function(J)
            coroutine.yield "after"
            move(J, ref(hub, "scratch", block.i + p * C + s.i, s.n), ref(p, "output", r * C + s.i, s.n))
          end)
        end
      end
    else
      for p = 0, R - 1 do
        for _, s in ipairs(runs(g, C)) do
          local x, out = ref(r, "input", p * C + s.i, s.n), ref(p, "output", r * C + s.i, s.n)
          add(function(J)
            if style == 2 and not J.simple then
              local t = move(J, x, alloc(g, J.rng:int(0, R - 1), s.n))
              coroutine.yield "barrier"
              move(J, t, out)
              release(g, t)
            else
              move(J, x, out)
            end
          end)
        end
      end
    end
  end
end

-- Run the jobs as coroutines, interleaved at random (or one after another).
-- A job that yields "barrier" waits until every other job reached as many
-- barriers or finished; one that yields "after", until every job that did
-- not finished.
local function run_jobs(g, jobs, rn)
  local live = {}
  for _, j in ipairs(jobs) do
    live[#live + 1] = { co = coroutine.create(j.fn), J = j, level = 0, late = false }
  end
  while #live > 0 do
    local late, low = true, math.huge
    for _, j in ipairs(live) do late = late and j.late end
    for _, j in ipairs(live) do
      if j.late == late then low = math.min(low, j.level) end
    end
    local ready = {}
    for k, j in ipairs(live) do
      if j.late == late and j.level == low then ready[#ready + 1] = k end
    end
    local k = g.k.interleave and rn:pick(ready) or ready[1]
    local j = live[k]
    local ok, what = coroutine.resume(j.co, j.J)
    if not ok then error(debug.traceback(j.co, what), 0) end
    if coroutine.status(j.co) == "dead" then
      table.remove(live, k)
    elseif what == "barrier" then
      j.level = j.level + 1
    elseif what == "after" then
      j.late = true
    end
  end
end

-- How many transfers the core records for x: it cuts them where either end
-- crosses a block of C chunks.
local function pieces(C, x)
  local n, si, di, k = x.s.n, x.s.i, x.d.i, 0
  while n > 0 do
    local m = math.min(n, C - si % C, C - di % C)
    si, di, n, k = si + m, di + m, n - m, k + 1
  end
  return k
end

-- Hand placement: a few TBs per rank, one TB per connection end, steps in
-- record order, so that every TB runs its transfers in an order the program
-- itself runs them in: no deadlock. With k.fuse, a send that forwards what the
-- transfer just before it received takes that receive's TB and step: the two
-- then run micro-batch by micro-batch, as one step of that order, where no
-- other TB takes part in that step twice.
local function place(c, rn)
  local ntb, send, recv, step, last, prev = {}, {}, {}, {}, {}, nil
  for r = 0, c.R - 1 do ntb[r] = rn:int(1, 3) end
  local function tb(r) return rn:int(0, ntb[r] - 1) end
  local function take(r, t, n)
    local key = r * 64 + t
    local s = step[key] or 0
    step[key], last[key] = s + n, nil
    return s
  end
  for _, x in ipairs(c.xf) do
    local s, d, n = x.s.r, x.d.r, pieces(c.C, x)
    local p = prev
    prev = nil
    if s == d then
      local t = tb(s)
      take(s, t, n)
      x.at = { sendtb = t }
    else
      local ch = rn:chance(0.25) and 1 or 0
      local key = ("%d>%d:%d"):format(s, d, ch)
      send[key], recv[key] = send[key] or tb(s), recv[key] or tb(d)
      local st, rt = send[key], recv[key]
      x.at = { sendtb = st, recvtb = rt, ch = ch > 0 and ch or nil }
      local fuse = c.k.fuse and n == 1 and p and last[s * 64 + st] == p and same(p.x.d, x.s) and
        not p.tbs[d * 64 + rt] and rn:chance(0.7)
      local tbs = fuse and p.tbs or { [s * 64 + st] = true }
      if fuse then
        x.at.sendstep = p.step
        last[s * 64 + st] = nil
      else
        take(s, st, n)
      end
      local rs = take(d, rt, n)
      tbs[d * 64 + rt] = true
      if n == 1 then
        prev = { x = x, step = rs, tbs = tbs }
        last[d * 64 + rt] = prev
      end
    end
  end
end

local STYLES = { allgather = 2, reducescatter = 1, allreduce = 3, alltoall = 3 }

-- A topology for R ranks: flat (nil), one NVSwitch node, or A100 nodes: the
-- how-many-th way to split R into nodes of equal size.
local function topology(R, how)
  if how == "flat" then return nil end
  if how == "nvswitch" then return "nvswitch:" .. R end
  local splits = {}
  for n = 2, R do
    if R % n == 0 then splits[#splits + 1] = ("a100:%dx%d"):format(n, R // n) end
  end
  return #splits > 0 and splits[(how - 1) % #splits + 1] or nil
end

-- Option combinations beyond the matrix, drawn per case.
local function extra_opts(hints)
  local o = {}
  if math.random(2) == 1 then o.sched = "rr" end
  local tb = ({ "state", "conn", "merge", "manual" })[math.random(hints and 4 or 3)]
  if tb ~= "state" then o.tb = tb end
  if math.random(2) == 1 then o.order = "algorithm" end
  local fuse = ({ "auto", "always", "never" })[math.random(3)]
  if fuse ~= "auto" then o.fuse = fuse end
  local mode = math.random(3)
  if mode == 1 then o.pull = true elseif mode == 2 then o.ce = true end
  return o
end

--- The case for a seed; `over` (shrinking) replaces what the seed drew:
--- R, C, topo, the knobs in k, and simple = {[job] = true}.
local function generate(seed, over)
  over = over or {}
  math.randomseed(seed)
  local R = math.random(2, 6)
  local c = {
    seed = seed, coll = COLLS[math.random(#COLLS)], R = R, C = math.random(1, 4),
    k = {
      hop = ({ 0, 0.15, 0.35 })[math.random(3)], reuse = math.random(2) == 1, multi = math.random(3) > 1,
      interleave = math.random(4) > 1, shape = ({ "star", "chain", "random", "mixed" })[math.random(4)],
      stage = ({ 0, 0.3, 1 })[math.random(3)], sloppy = math.random(5) == 1, style = math.random(4),
      hints = math.random(2) == 1, fuse = math.random(2) == 1, switch = ({ 1, 0.5, 0.2 })[math.random(3)],
    },
    exec = {
      count = ({ 1031, 61, math.random(1, 1250), R * 16 * math.random(1, 8) })[math.random(4)], -- per chunk
      nmicro = math.random(1, 4), direct = math.random(4) > 1,
      dtype = ({ "f32", "f32", "f32", "i32", "f16", "bf16", "u8", "f64" })[math.random(8)],
      op = ({ "sum", "sum", "sum", "max", "min", "prod", "avg" })[math.random(7)],
    },
    base = math.random(0, math.maxinteger),
  }
  c.extra = {}
  for k = 1, 6 do c.extra[k] = extra_opts(c.k.hints) end
  c.topo = math.random(2) == 1 and "flat" or math.random(2) == 1 and "nvswitch" or math.random(1, 3)
  for key, v in pairs(over) do
    if c.k[key] ~= nil then c.k[key] = v elseif key ~= "simple" then c[key] = v end
  end
  if c.k.style > STYLES[c.coll] then c.k.style = 0 end
  c.topo = topology(c.R, c.topo)
  c.exec.C = c.C
  c.simple = over.simple or {}
  local g = { R = c.R, C = c.C, k = c.k, xf = {}, used = {}, top = {}, rng = rng(c.base), yield = rng(~c.base) }
  for r = 0, c.R - 1 do g.used[r], g.top[r] = {}, 0 end
  local jobs = {}
  BUILD[c.coll](g, function(fn)
    local n = #jobs + 1
    jobs[n] = { fn = fn, g = g, rng = rng(g.rng:next()), simple = c.simple[n] }
  end)
  run_jobs(g, jobs, rng(g.rng:next()))
  c.xf, c.njobs = g.xf, #jobs
  if c.k.hints then place(c, rng(g.rng:next())) end
  return c
end

-- ------------------------------------------------------ reference semantics

-- Where (r, b, i) lives in a placement: in place, the input is part of the output (or, for a
-- reduce-scatter, the output part of the input), as src/program.c aliases them.
local function alias(c, inplace, b, i, r)
  if inplace then
    if c.coll == "allgather" and b == "input" then return "output", i + r * c.C end
    if c.coll == "reducescatter" and b == "output" then return "input", i + r * c.C end
    if (c.coll == "allreduce" or c.coll == "alltoall") and b == "input" then return "output", i end
  end
  return b, i
end

local function nchunks(c, b)
  local big = b == "input" and (c.coll == "reducescatter" or c.coll == "alltoall")
    or b == "output" and (c.coll == "allgather" or c.coll == "alltoall")
  return big and c.R * c.C or c.C
end

-- A value: {[contribution] = times}, contribution rank * 4096 + input chunk.
local function expected(c, r, j)
  local C, want = c.C, {}
  if c.coll == "allgather" then
    want[j // C * 4096 + j % C] = 1
  elseif c.coll == "alltoall" then
    want[j // C * 4096 + r * C + j % C] = 1
  else
    for q = 0, c.R - 1 do want[q * 4096 + (c.coll == "reducescatter" and r * C + j or j)] = 1 end
  end
  return want
end

local function equal(a, b)
  if not a then return false end
  for k, v in pairs(a) do
    if b[k] ~= v then return false end
  end
  for k in pairs(b) do
    if not a[k] then return false end
  end
  return true
end

--- Run the transfers in record order; true, or false and what is wrong.
--- With upto: what each location holds before transfer upto, by "rank buf index".
local function simulate(c, inplace, upto)
  local mem = {}
  local function key(r, b, i)
    b, i = alias(c, inplace, b, i, r)
    return ("%d %s %d"):format(r, b, i)
  end
  for r = 0, c.R - 1 do
    for i = 0, nchunks(c, "input") - 1 do mem[key(r, "input", i)] = { [r * 4096 + i] = 1 } end
  end
  for t, x in ipairs(c.xf) do
    if t == upto then return mem end
    local vals = {}
    for k = 0, x.s.n - 1 do
      local v = mem[key(x.s.r, x.s.b, x.s.i + k)]
      if x.op == "reduce" then
        local o, w = mem[key(x.d.r, x.d.b, x.d.i + k)], {}
        for a, n in pairs(o or {}) do w[a] = n end
        for a, n in pairs(v or {}) do w[a] = (w[a] or 0) + n end
        v = o and v and w
      end
      vals[k] = v
    end
    for k = 0, x.s.n - 1 do mem[key(x.d.r, x.d.b, x.d.i + k)] = vals[k] end
  end
  for r = 0, c.R - 1 do
    for j = 0, nchunks(c, "output") - 1 do
      if not equal(mem[key(r, "output", j)], expected(c, r, j)) then
        return false, ("rank %d output chunk %d wrong"):format(r, j)
      end
    end
  end
  return true
end

-- ------------------------------------------------------------ ReSCCLang text

local function chunk(x)
  return ("a:chunk(%d, %q, %d%s)"):format(x.r, x.b, x.i, x.n > 1 and ", " .. x.n or "")
end

local function placement(at)
  if not at then return "" end
  local kv = {}
  for _, k in ipairs { "sendtb", "recvtb", "sendstep", "recvstep", "ch" } do
    if at[k] then kv[#kv + 1] = ("%s = %d"):format(k, at[k]) end
  end
  return ", { " .. table.concat(kv, ", ") .. " }"
end

--- The case as an algorithm file; notes become its leading comment.
local function source(c, notes)
  local out = {}
  for _, l in ipairs(notes or {}) do out[#out + 1] = ("-- " .. l):gsub("%s+$", "") end
  out[#out + 1] = "return resccl.algorithm {"
  out[#out + 1] = ("  name = %q, collective = %q, ranks = %d, chunks = %d, inplace = %s,"):format(
    "fuzz_" .. c.seed, c.coll, c.R, c.C, tostring(c.inplace))
  out[#out + 1] = "  build = function(a)"
  for _, x in ipairs(c.xf) do
    if x.op == "copy" then
      out[#out + 1] = ("    %s:copy(%d, %q, %d%s)"):format(chunk(x.s), x.d.r, x.d.b, x.d.i, placement(x.at))
    else
      out[#out + 1] = ("    %s:reduce(%s%s)"):format(chunk(x.d), chunk(x.s), placement(x.at))
    end
  end
  out[#out + 1] = "  end,"
  out[#out + 1] = "}"
  return table.concat(out, "\n") .. "\n"
end

local function load_source(text, name)
  local env = setmetatable({ resccl = resccl }, { __index = _G })
  return assert(load(text, "@" .. name, "t", env))()
end

-- ------------------------------------------------------------ checking

local MATRIX = {
  {}, { pull = true }, { ce = true }, { tb = "merge" }, { tb = "conn" }, { order = "algorithm" }, { sched = "rr" },
  { fuse = "always" }, { fuse = "never" },
}
local MANUAL = { { tb = "manual" }, { tb = "manual", order = "algorithm" } }
local OPT_KEYS = { "sched", "tb", "order", "fuse", "pull", "ce", "inplace" }

local function optstr(o)
  local kv = {}
  for _, k in ipairs(OPT_KEYS) do
    if o[k] ~= nil and k ~= "inplace" then kv[#kv + 1] = k .. "=" .. tostring(o[k]) end
  end
  return #kv > 0 and table.concat(kv, ",") or "default"
end

local function cli_flags(o, inplace)
  local f = {}
  for _, k in ipairs { "sched", "tb", "order", "fuse" } do
    if o[k] then f[#f + 1] = ("--%s %s"):format(k, o[k]) end
  end
  if o.pull then f[#f + 1] = "--pull" end
  if o.ce then f[#f + 1] = "--ce" end
  if inplace then f[#f + 1] = "--inplace" end
  return table.concat(f, " ")
end

-- Answers that are not compiler bugs: options that exclude each other, and
-- what the executor declines (avg where a reduction completes part of its chunks).
local REFUSALS = { "choose one", "does not support", "not supported", "op=avg divides",
  "manual thread-block placement needs" }

local function refused(msg)
  for _, s in ipairs(REFUSALS) do
    if msg:find(s, 1, true) then return true end
  end
  return false
end

-- What kind of message: the shrinker keeps a change while it fails the same way.
local CLASSES = { "race", "cycle", "deadlock", "different order", "result wrong", "never initialised", "stuck",
  "wrong" }

local function class(msg)
  for _, s in ipairs(CLASSES) do
    if msg:find(s, 1, true) then return s end
  end
  return (msg:gsub("[%w_.%-/]+%.lua:%d+:?", "L"):gsub("%d+", "#"))
end

local function compile(prog, topo, o, inplace)
  local opts = {}
  for k, v in pairs(o) do opts[k] = v end
  opts.inplace = inplace
  local ok, plan, msg, code = pcall(resccl.compile, prog, topo, opts)
  if not ok then return nil, "lua", tostring(plan) end
  if msg then return nil, code, msg end
  return plan
end

local function execute(plan, e)
  local ok, r, msg = pcall(plan.exec, plan, { count = e.count * e.C, nmicro = e.nmicro, dtype = e.dtype, op = e.op,
    direct = e.direct, timeout_ms = 20000 })
  if not ok then return "lua", tostring(r) end
  if not r then return refused(msg) and "refused" or "exec", msg end
  if r.wrong > 0 then
    return "exec", ("%d elements wrong (%s), max error %g"):format(r.wrong, tostring(r.first_wrong), r.max_err)
  end
end

-- What a plan is made of: TBs, primitives by kind, copy-engine copies.
local function summary(plan)
  local r, kinds, names = plan:report(), {}, {}
  for _, rank in ipairs(plan:tbs()) do
    for _, tb in ipairs(rank) do
      for _, q in ipairs(tb) do kinds[q.kind] = (kinds[q.kind] or 0) + 1 end
    end
  end
  for k, n in pairs(kinds) do names[#names + 1] = k .. " " .. n end
  table.sort(names)
  return ("%d TBs, %s, %d on the copy engine, %d puts"):format(r.tbs_total, table.concat(names, " "), r.ce_copies,
    r.pulled_puts)
end

-- What verified plans use, counted: plans with pulls, pulled reductions, puts, copy-engine copies.
local COVER = { "pulls", "pulled_reductions", "pulled_puts", "ce_copies", "ce_ends" }

local function covered(st)
  local kv = {}
  for _, k in ipairs(COVER) do kv[#kv + 1] = ("%s=%d"):format(k, st[k] or 0) end
  return "plans_with: " .. table.concat(kv, " ")
end

--- Every combination on one program and placement; calls found(f) per failure,
--- f = {kind, opts, inplace, msg}. st counts what ran.
local function matrix(prog, topo, combos, inplace, e, st, found, verbose)
  local base, _, msg = compile(prog, topo, {}, inplace)
  if not base then
    st.failed = st.failed + 1
    return found { kind = "default", opts = {}, inplace = inplace, msg = msg }
  end
  local seen = {}
  for _, o in ipairs(combos) do
    local plan, code, why = compile(prog, topo, o, inplace)
    st.combos = st.combos + 1
    local kind, text
    if not plan then
      if code == "lua" then
        kind, text = "lua", why
      elseif refused(why) then
        st.refused = st.refused + 1
      elseif o.fuse == "always" and code == "deadlock" then
        st.expected = st.expected + 1
      else
        kind, text = "verify", why
      end
    end
    if plan then
      local r = plan:report()
      for _, k in ipairs(COVER) do
        if r[k] > 0 then st[k] = (st[k] or 0) + 1 end
      end
    end
    if plan and e then
      local key = plan:emit "host" .. plan:dump "tb"
      if not seen[key] and (not e.rate or math.random() < e.rate) then
        seen[key] = true
        st.execs = st.execs + 1
        kind, text = execute(plan, e)
        if kind == "refused" then st.refused, kind = st.refused + 1, nil end
      end
    end
    if verbose then
      print(("  %-40s %s"):format(optstr(o) .. (inplace and " inplace" or ""),
        text and kind .. ": " .. text or plan and "ok: " .. summary(plan) or "refused: " .. tostring(why)))
    end
    if kind then
      st.failed = st.failed + 1
      found { kind = kind, opts = o, inplace = inplace, msg = text }
    end
  end
end

local function combos_of(c)
  local list = {}
  for _, o in ipairs(MATRIX) do list[#list + 1] = o end
  if c.k.hints then
    for _, o in ipairs(MANUAL) do list[#list + 1] = o end
  end
  for _, o in ipairs(c.extra) do
    if not (o.tb == "manual" and not c.k.hints) then list[#list + 1] = o end
  end
  return list
end

-- Build the case's program from its text (what a repro file holds).
local function program(c)
  local alg = load_source(source(c), ("fuzz-%d.lua"):format(c.seed))
  return alg:program { topo = c.topo }
end

--- Check a generated case; returns its failures.
local function check(c, opt, st)
  local fails = {}
  local ok, why = simulate(c, false)
  if not ok then error(("the generator made a wrong program: %s"):format(why), 0) end
  c.inplace = simulate(c, true)
  local pok, prog, topo = pcall(program, c)
  if not pok then
    st.failed = st.failed + 1
    return { { kind = "lua", opts = {}, inplace = false, msg = tostring(prog) } }
  end
  for _, inplace in ipairs { false, true } do
    if not inplace or c.inplace then
      c.exec.rate = opt.rate
      matrix(prog, topo, combos_of(c), inplace, not opt.noexec and c.exec, st,
        function(f) fails[#fails + 1] = f end, opt.verbose)
    end
  end
  return fails
end

-- ------------------------------------------------------------ shrinking

local function signature(f) return f.kind .. "|" .. class(f.msg or "") end

-- Whether case c fails as f did, under f's options and placement.
local function fails_same(c, f)
  local e = c.exec
  e.rate = nil
  if not simulate(c, false) or f.inplace and not simulate(c, true) then return false end
  c.inplace = simulate(c, true)
  local ok, prog, topo = pcall(program, c)
  if not ok then return f.kind == "lua" and class(tostring(prog)) == class(f.msg or "") end
  local hit = false
  local st = { combos = 0, refused = 0, expected = 0, execs = 0, failed = 0 }
  local combos = f.kind == "default" and {} or { f.opts }
  matrix(prog, topo, combos, f.inplace, (f.kind == "exec" or f.kind == "lua") and e,
    st, function(g)
      if not hit and signature(g) == signature(f) and optstr(g.opts) == optstr(f.opts) then hit, c.msg = true, g.msg end
    end)
  return hit
end

--- Leave rank q, or chunk k of every block, out of case d's transfers xf: the
--- buffers shrink, indices after it move down, transfers that lose every chunk
--- go. (Scratch keeps its indices.) The reference then says whether it still holds.
local function without(d, xf, q, k)
  local C = d.C
  local function block(b) return b ~= "scratch" and nchunks(d, b) > C end
  local function gone(r, b, i)
    return r == q or k and b ~= "scratch" and i % C == k or q and block(b) and i // C == q
  end
  local function moved(b, i)
    if b == "scratch" then return i end
    local blk, j = i // C, i % C
    if q and block(b) and blk > q then blk = blk - 1 end
    if k then return blk * (C - 1) + j - (j > k and 1 or 0) end
    return blk * C + j
  end
  local out = {}
  for _, x in ipairs(xf) do
    local first, n = nil, 0
    for c = 0, x.s.n - 1 do
      if not (gone(x.s.r, x.s.b, x.s.i + c) or gone(x.d.r, x.d.b, x.d.i + c)) then
        first, n = first or c, n + 1
      end
    end
    if n > 0 then
      local function map(y)
        return ref(q and y.r > q and y.r - 1 or y.r, y.b, moved(y.b, y.i + first), n)
      end
      out[#out + 1] = { op = x.op, s = map(x.s), d = map(x.d), at = x.at }
    end
  end
  for i = 1, math.max(#xf, #out) do xf[i] = out[i] end
  if q then d.R = d.R - 1 end
  if k then d.C, d.exec = C - 1, setmetatable({ C = C - 1 }, { __index = d.exec }) end
  d.topo = q and nil or d.topo
end

--- The smallest variant of seed's case that still fails as f did, and is still right where it was:
--- greedy, one change at a time (fewer ranks and chunks, plainer knobs, simple jobs, then
--- transfers left out), within a budget of tries.
local function shrink(seed, f)
  local over, c = {}, generate(seed)
  local tries, t0 = 0, os.clock()
  local function try(change)
    if tries >= 300 or os.clock() - t0 > 120 then return false end
    local o = {}
    for k, v in pairs(over) do o[k] = v end
    for k, v in pairs(change) do o[k] = v end
    tries = tries + 1
    local ok, d = pcall(generate, seed, o)
    if ok and fails_same(d, f) then
      over, c = o, d
      return true
    end
    return false
  end
  local plainer = { { hop = 0 }, { multi = false }, { stage = 0 }, { style = 0 }, { interleave = false },
    { shape = "star" }, { sloppy = false }, { reuse = false }, { fuse = false }, { switch = 1 } }
  if f.opts.tb ~= "manual" then plainer[#plainer + 1] = { hints = false } end
  repeat
    local progress = false
    for R = 2, c.R - 1 do
      if try { R = R } then progress = true break end
    end
    for C = 1, c.C - 1 do
      if try { C = C } then progress = true break end
    end
    for _, ch in ipairs(plainer) do
      local k, v = next(ch)
      if c.k[k] ~= v and try(ch) then progress = true end
    end
    if c.topo and try { topo = "flat" } then progress = true end
    local simple = {}
    for j = 1, c.njobs do simple[j] = true end
    if not equal(over.simple or {}, simple) and try { simple = simple } then progress = true end
  until not progress
  for j = 1, c.njobs do -- jobs one by one
    local simple = {}
    for k, v in pairs(over.simple or {}) do simple[k] = v end
    if not simple[j] then
      simple[j] = true
      try { simple = simple }
    end
  end
  -- then on the transfers themselves: read the same value from another place (an input first),
  -- leave out what is no longer needed
  local function edit(fn)
    if tries >= 300 or os.clock() - t0 > 120 then return false end
    local d = {}
    for k, v in pairs(c) do d[k] = v end
    d.xf = {}
    for i, x in ipairs(c.xf) do d.xf[i] = x end
    fn(d.xf, d)
    tries = tries + 1
    if fails_same(d, f) then
      c = d
      return true
    end
    return false
  end
  local ORDER = { input = 1, output = 2, scratch = 3 } -- read from an earlier kind of buffer only
  repeat
    local progress = false
    for i = 1, #c.xf do
      local x, mem = c.xf[i], simulate(c, false, i)
      local tried = 0
      for _, b in ipairs { "input", "output" } do
        for r = 0, ORDER[b] < ORDER[x.s.b] and c.R - 1 or -1 do
          for j = 0, nchunks(c, b) - x.s.n do
            local y, ok = ref(r, b, j, x.s.n), tried < 4
            for k = 0, x.s.n - 1 do
              local here, there = ("%d %s %d"):format(r, b, j + k), ("%d %s %d"):format(x.s.r, x.s.b, x.s.i + k)
              ok = ok and equal(mem[here], mem[there] or {})
            end
            if ok and not same(y, x.s) and not same(y, x.d) then
              tried = tried + 1
              if edit(function(xf) xf[i] = { op = x.op, s = y, d = x.d, at = x.at } end) then
                progress = true
                goto next
              end
            end
          end
        end
      end
      ::next::
    end
    for i = #c.xf, 1, -1 do
      if edit(function(xf) table.remove(xf, i) end) then progress = true end
    end
    -- a rank or a chunk less: what it held leaves every buffer
    for q = c.R - 1, c.R > 2 and 0 or c.R, -1 do
      if edit(function(xf, d) without(d, xf, q, nil) end) then progress = true break end
    end
    for k = c.C - 1, c.C > 1 and 0 or c.C, -1 do
      if edit(function(xf, d) without(d, xf, nil, k) end) then progress = true break end
    end
  until not progress
  if f.opts.tb ~= "manual" then
    edit(function(xf)
      for i, x in ipairs(xf) do xf[i] = { op = x.op, s = x.s, d = x.d } end
    end)
  end
  return c, tries
end

-- ------------------------------------------------------------ reporting

local function describe(c)
  return ("%s R=%d C=%d%s, %d transfers, %d jobs%s%s"):format(c.coll, c.R, c.C, c.topo and " topo=" .. c.topo or "",
    #c.xf, c.njobs,
    c.k.hints and ", placed" or "", c.inplace and ", in place too" or "")
end

local function exec_args(e)
  return ("count=%d nmicro=%d dtype=%s op=%s%s"):format(e.count * e.C, e.nmicro, e.dtype, e.op,
    e.direct and "" or " (direct=false)")
end

local function write_repro(dir, c, f, shrunk)
  local name = ("%s/%s-s%d-%s%s.lua"):format(dir, c.coll, c.seed, optstr(f.opts):gsub("[=,]", "_"),
    f.inplace and "-inplace" or "")
  local e = c.exec
  local topo = c.topo and " topo=" .. c.topo or ""
  local run = f.kind == "exec" and ("  resccl run %s %s%s count=%d nmicro=%d dtype=%s op=%s%s"):format(name,
    cli_flags(f.opts, false), topo, e.count * e.C, e.nmicro, e.dtype, e.op, e.direct and "" or " direct=false")
    or ("  resccl compile %s %s%s"):format(name, cli_flags(f.opts, f.inplace), topo)
  local function write(msg)
    local notes = {
      ("Found by tools/fuzz/plans.lua, seed %d (%s), shrunk to %s."):format(c.seed, f.kind, shrunk),
      ("Options: %s%s."):format(optstr(f.opts), f.inplace and ", in place" or ", out of place"),
      "Error: " .. msg:gsub("\n", " "), run,
      ("  lua5.4 tools/fuzz/plans.lua --file %s%s"):format(name, c.topo and " --topo " .. c.topo or ""),
    }
    os.execute(("mkdir -p '%s'"):format(dir))
    local out = assert(io.open(name, "w"))
    out:write(source(c, notes))
    out:close()
  end
  write(c.msg or f.msg or "")
  -- the file must fail so itself: its own message, at its own lines
  local got
  local ok, alg = pcall(resccl.load, name)
  if ok then
    local prog, topo = alg:program { topo = c.topo }
    e.rate = nil
    matrix(prog, topo, f.kind == "default" and {} or { f.opts }, f.inplace, (f.kind == "exec" or f.kind == "lua") and e,
      { combos = 0, refused = 0, expected = 0, execs = 0, failed = 0 },
      function(g) got = got or signature(g) == signature(f) and g.msg end)
  end
  write(got or (c.msg or f.msg or "") .. " (the file itself did not fail so)")
  return name
end

local function fail_line(c, f)
  return ("FAIL seed=%d %s R=%d C=%d%s | %s%s | %s | %s"):format(c.seed, c.coll, c.R, c.C,
    c.topo and " topo=" .. c.topo or "", optstr(f.opts),
    f.inplace and " inplace" or "", f.kind, (f.msg or ""):gsub("\n", " "))
end

-- ------------------------------------------------------------ driver

local function parse(argv)
  local opt = { repro = "/tmp/fz/repro" }
  local i = 1
  while i <= #argv do
    local a = argv[i]
    local function val()
      i = i + 1
      return argv[i] or error(a .. " needs a value", 0)
    end
    if a == "--seeds" then
      local lo, hi = val():match "^(%d+)%-?(%d*)$"
      if not lo then error("--seeds A-B, A- or N", 0) end
      opt.lo, opt.hi = tonumber(lo), hi == "" and (argv[i]:find "-" and math.maxinteger or tonumber(lo)) or tonumber(hi)
    elseif a == "--time" then opt.time = tonumber(val())
    elseif a == "--until" then opt["until"] = tonumber(val())
    elseif a == "--show" then opt.show = tonumber(val())
    elseif a == "--file" then opt.file = val()
    elseif a == "--topo" then opt.topo = val()
    elseif a == "--repro" then opt.repro = val()
    elseif a == "--no-exec" then opt.noexec = true
    elseif a == "--exec" then opt.rate = tonumber(val())
    elseif a == "--no-shrink" then opt.noshrink = true
    elseif a == "--inline" then opt.inline = true
    elseif a == "--child" then opt.child = true
    elseif a == "-v" then opt.verbose = true
    else error("unknown argument " .. a .. " (see the comment at the top of tools/fuzz/plans.lua)", 0) end
    i = i + 1
  end
  if not opt.lo then opt.lo, opt.hi = 1, opt.time and math.maxinteger or 100 end
  if opt.time and not opt["until"] then opt["until"] = os.time() + opt.time end
  return opt
end

-- Run seeds lo.. in this process; "BEGIN n" before each lets a parent tell
-- which one crashed.
local function run_seeds(opt)
  local st = { programs = 0, combos = 0, refused = 0, expected = 0, execs = 0, failed = 0 }
  local shrunk, t0 = {}, os.time()
  for seed = opt.lo, opt.hi do
    if opt["until"] and os.time() >= opt["until"] then break end
    if opt.child then
      io.write("BEGIN ", seed, "\n")
      io.flush()
    end
    local t1 = resccl.core.clock()
    local ok, c = pcall(generate, seed)
    local fails
    if ok then
      ok, fails = pcall(check, c, opt, st)
    else
      fails, c = c, { seed = seed, coll = "?", R = 0, C = 0, xf = {}, njobs = 0, k = {} }
    end
    if not ok then -- the fuzzer's own error, or one the core raised while checking
      local own = tostring(fails):find("generator", 1, true) or #c.xf == 0
      fails = { { kind = own and "generator" or "lua", opts = {}, inplace = false, msg = tostring(fails) } }
    end
    st.programs = st.programs + 1
    if opt.verbose then print(("seed %d: %s, %.1f s"):format(seed, describe(c), (resccl.core.clock() - t1) / 1000)) end
    for _, f in ipairs(fails) do
      print(fail_line(c, f))
      local sig = ("%s|%s|%s"):format(signature(f), f.opts.pull and "pull" or f.opts.ce and "ce" or "",
        f.opts.tb == "manual" and "manual" or "")
      if not opt.noshrink and not shrunk[sig] and f.kind ~= "generator" then
        shrunk[sig] = true
        local sok, why = pcall(function()
          local d, tries = shrink(seed, f)
          local name = write_repro(opt.repro, d, f, ("R=%d C=%d%s, %d transfers (%d tries)"):format(d.R, d.C,
            d.topo and " topo=" .. d.topo or "", #d.xf, tries))
          print(("  repro: %s (%s)"):format(name, describe(d)))
        end)
        if not sok then print("  shrinking failed: " .. tostring(why)) end
      end
    end
    io.flush()
    if not opt.verbose and (seed - opt.lo + 1) % 25 == 0 then
      print(("... seed %d: %d programs, %d combinations, %d executions, %d failures, %d s"):format(seed, st.programs,
        st.combos, st.execs, st.failed, os.time() - t0))
    end
  end
  print(("STAT programs=%d combinations=%d executions=%d refused=%d fuse_always_deadlocks=%d failures=%d %s"):format(
    st.programs, st.combos, st.execs, st.refused, st.expected, st.failed, covered(st)))
  if opt.child then print "DONE" end
end

local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- The command that started this script, for the child.
local function self_command()
  local lo = 0
  while arg[lo - 1] do lo = lo - 1 end
  local q = {}
  for i = lo, 0 do q[#q + 1] = shell_quote(arg[i]) end
  return table.concat(q, " ")
end

--- Run the seeds in child processes; a child that dies is a crash at the
--- seed it began last, and a new child goes on after it.
local function supervise(opt)
  local lo, total, fails, begun = opt.lo, {}, {}, 0 -- begun: programs started, crashed ones too
  while lo <= opt.hi do
    local cmd = ("%s --child --seeds %d-%s --repro %s%s%s%s%s 2>&1"):format(self_command(), lo,
      opt.hi == math.maxinteger and "" or tostring(opt.hi), shell_quote(opt.repro),
      opt["until"] and " --until " .. opt["until"] or "", opt.noexec and " --no-exec" or
      opt.rate and " --exec " .. opt.rate or "",
      opt.noshrink and " --no-shrink" or "", opt.verbose and " -v" or "")
    local p = assert(io.popen(cmd, "r"))
    local began, done, tail = nil, false, {}
    for line in p:lines() do
      local b = line:match "^BEGIN (%d+)$"
      if b then
        began, tail, begun = tonumber(b), {}, begun + 1
      elseif line == "DONE" then
        done = true
      else
        print(line)
        tail[#tail + 1] = line
        if #tail > 20 then table.remove(tail, 1) end
        local kv = line:match "^STAT (.*)"
        for k, v in (kv or ""):gmatch "([%w_]+)=(%d+)" do total[k] = (total[k] or 0) + tonumber(v) end
        if line:match "^FAIL " then fails[#fails + 1] = line end
      end
      io.flush()
    end
    local _, how, code = p:close()
    if done or not began then break end
    local line = ("FAIL seed=%d | crash | child %s %s; last output: %s"):format(began, how, tostring(code),
      table.concat(tail, " / "))
    print(line)
    fails[#fails + 1] = line
    total.failures = (total.failures or 0) + 1
    lo = began + 1
  end
  -- distinct failures: kind and message class, with the options and seeds that showed them
  local groups, order = {}, {}
  for _, l in ipairs(fails) do
    local seed, opts, kind, msg = l:match "^FAIL seed=(%d+)[^|]*| ([^|]*) | (%w+) | (.*)$"
    if not seed then
      seed, kind, msg = l:match "^FAIL seed=(%d+) | (%w+) | (.*)$"
      opts = ""
    end
    local key = (kind or "?") .. " | " .. class(msg or l)
    if not groups[key] then
      groups[key] = { seeds = {}, opts = {}, msg = msg or l }
      order[#order + 1] = key
    end
    local gr = groups[key]
    if #gr.seeds < 12 then gr.seeds[#gr.seeds + 1] = seed end
    gr.opts[opts or "?"] = true
    gr.n = (gr.n or 0) + 1
  end
  print(("\nTOTAL programs=%d combinations=%d executions=%d refused=%d fuse_always_deadlocks=%d failures=%d %s"):format(
    begun, total.combinations or 0, total.executions or 0, total.refused or 0,
    total.fuse_always_deadlocks or 0, total.failures or 0, covered(total)))
  for _, key in ipairs(order) do
    local gr, opts = groups[key], {}
    for o in pairs(gr.opts) do opts[#opts + 1] = o end
    table.sort(opts)
    print(("%dx %s\n   options: %s\n   seeds: %s\n   e.g. %s"):format(gr.n, key, table.concat(opts, "; "),
      table.concat(gr.seeds, " "), gr.msg))
  end
  return (total.failures or 0) == 0
end

--- The options matrix on an algorithm file (in place too unless it says inplace = false).
local function run_file(opt)
  local alg = resccl.load(opt.file)
  local prog, topo = alg:program { topo = opt.topo }
  local st = { combos = 0, refused = 0, expected = 0, execs = 0, failed = 0 }
  local e = not opt.noexec and { count = 1031, C = prog:info().chunks, nmicro = 3, dtype = "f32", op = "sum",
    direct = true }
  local combos = { MANUAL[1], MANUAL[2] }
  for _, o in ipairs(MATRIX) do combos[#combos + 1] = o end
  for _, inplace in ipairs { false, true } do
    if not inplace or alg.inplace then
      matrix(prog, topo, combos, inplace, e, st, function(f)
        print(("FAIL %s | %s%s | %s | %s"):format(opt.file, optstr(f.opts), f.inplace and " inplace" or "", f.kind,
          f.msg))
      end, true)
    end
  end
  print(("STAT combinations=%d executions=%d refused=%d fuse_always_deadlocks=%d failures=%d"):format(st.combos,
    st.execs, st.refused, st.expected, st.failed))
end

local opt = parse(arg)
if opt.show then
  local c = generate(opt.show)
  c.inplace = simulate(c, true)
  io.write(source(c, { ("seed %d: %s"):format(opt.show, describe(c)) }))
elseif opt.file then
  run_file(opt)
elseif opt.child or opt.inline or opt.lo == opt.hi then
  run_seeds(opt)
elseif not supervise(opt) then
  os.exit(1) -- a failure: CTest's fuzz_plans and scripts see it
end
