--- MSCCL XML (MSCCLang, SCCL/TACCL/TE-CCL ncclize output) -> transfers.
--
-- The file describes, per GPU, thread blocks (TBs) that each run a list of
-- steps in document order: sends and receives on the TB's one send peer and
-- one receive peer, local copies and reductions, and `nop`s that only wait.
-- A step may wait for a step of another TB of its GPU (depid/deps).
--
-- Import happens in seven passes, each a function below (M.import calls
-- them in this order):
--   1. parse     lua-expat builds a plain element tree with line numbers.
--   2. read      lenient attribute reading into GPUs, TBs and steps.
--   3. check     strict checks (bounds, one peer per TB direction and channel,
--                limits, matching counts); dependencies are resolved and each
--                receive is paired with its send (FIFO per connection).
--   4. order     a chunk-level run of the MSCCL runtime's semantics (per-TB
--                program order, FIFO per sender/receiver/channel, depid/deps
--                waits) gives every step a round; a cycle is a deadlock.
--   5. locate    the steps that move data, in round order, their local
--                buffers checked and mapped to resccl's (an in-place-only
--                file's aliases to the one buffer the core keeps in place).
--   6. values    what each send sends: its source, or for rrs (which keeps no
--                local copy of what it forwards) the source chunk when nothing
--                reads it afterwards, else a scratch temporary.
--   7. transfers each send is paired with its receive; the pair becomes one
--                transfer (copy, or reduce for rrc/rrs/rrcs) placed at the
--                receive's round, so the core's (step, record order) ordering
--                reproduces the file's data flow. Values that a send reads
--                but that change before the receive are staged in scratch.
-- Every transfer keeps the line of its receiving step and a TB hint (the
-- file's TB and step on both sides) for running the file's own schedule.
local lxp = require "lxp"
local import = require "resccl.import"

local M = {}

M.format = "MSCCL XML"

-- Runtime limits (msccl.md §2.4-2.5, §3.4).
local MAX_COUNT = 72        -- cnt < 72
local MAX_CHANNELS = 32
local MAX_STEPS_EXECUTOR = 64
local MAX_TBS_PER_CHANNEL = 32
local MAX_RANKS = 1024

-- What each step type does: receives, sends, reduces the received data with
-- the local source, writes the local destination.
local TYPES = {
  s    = { send = true },
  r    = { recv = true, write = true },
  rcs  = { recv = true, send = true, write = true },
  rrs  = { recv = true, send = true, reduce = true },
  rrc  = { recv = true, reduce = true, write = true },
  rrcs = { recv = true, send = true, reduce = true, write = true },
  cpy  = { loc = true, write = true },
  re   = { loc = true, reduce = true, write = true },
  nop  = {},
}

local COLLS = import.COLLECTIVES
-- The names looked for in an <algo> name without coll (the last found wins).
local COLL_NAMES = { "allreduce", "allgather", "alltoall", "reduce_scatter", "reducescatter" }
local UNSUPPORTED_COLLS = {
  reduce = true, broadcast = true, custom = true, send = true, recv = true, gather = true, scatter = true,
  alltoallv = true,
}

local BUFS = { i = "input", o = "output", s = "scratch" }

-- ------------------------------------------------------------------ parse

--- 1. Parse XML text into a tree of { name, attr, line, kids } with expat.
---@param text string
---@param path string file name for messages
---@return table root
function M.parse(text, path)
  local stack, root = {}, nil
  local parser
  parser = lxp.new {
    StartElement = function(_, name, attrs)
      local line = parser:pos()
      local node = { name = name, attr = {}, line = line, kids = {} }
      for k, v in pairs(attrs) do
        if type(k) == "string" then node.attr[k] = v end
      end
      local top = stack[#stack]
      if top then top.kids[#top.kids + 1] = node elseif not root then root = node end
      stack[#stack + 1] = node
    end,
    EndElement = function() stack[#stack] = nil end,
  }
  local ok, msg, line = parser:parse(text)
  if ok then ok, msg, line = parser:parse() end
  pcall(parser.close, parser) -- close raises on a document that did not end
  if not ok then
    error(("%s:%s: malformed XML: %s"):format(path, line or "?", msg or "parse error"), 0)
  end
  if not root then error(path .. ":1: malformed XML: no root element", 0) end
  return root
end

-- ------------------------------------------------------------------- read

--- An integer attribute; `dflt` when absent (nil = required).
local function attr_int(rd, node, key, dflt, lo, hi)
  local v = node.attr[key]
  if v == nil then
    if dflt ~= nil then return dflt end
    rd.fail(node.line, "<%s> needs attribute %s", node.name, key)
  end
  local n = math.tointeger(tonumber(v))
  if not n or not v:find "^%s*[-+]?%d+%s*$" then
    rd.fail(node.line, "<%s> attribute %s=\"%s\" is not an integer", node.name, key, v)
  end
  if (lo and n < lo) or (hi and n > hi) then
    rd.fail(node.line, "<%s> attribute %s=%d out of range (%d..%d)", node.name, key, n, lo or n, hi or n)
  end
  return n
end

-- The collective of <algo>: its coll, or a name in its name (with a warning).
local function read_coll(root, name, rd)
  local coll = root.attr.coll
  if coll == nil then
    -- Some SCCL outputs omit coll; the name usually says it.
    local lname = name:lower()
    for _, k in ipairs(COLL_NAMES) do
      if lname:find(k, 1, true) then coll = COLLS[k] end
    end
    if not coll then rd.fail(root.line, "<algo> has no coll attribute and its name does not tell the collective") end
    rd.warn(root.line, "<algo> has no coll attribute; taken as %s from its name", coll)
  end
  if UNSUPPORTED_COLLS[coll] then
    rd.fail(root.line, "collective '%s' is not supported (allreduce, allgather, reducescatter, alltoall)", coll)
  end
  return COLLS[coll] or rd.fail(root.line, "unknown collective coll=\"%s\"", coll)
end

-- The placements of <algo> (inplace, outofplace), defaults filled in.
local function read_placement(root, rd)
  local inplace = attr_int(rd, root, "inplace", -1, 0, 1)
  local outofplace = attr_int(rd, root, "outofplace", -1, 0, 1)
  if inplace < 0 and outofplace < 0 then
    rd.warn(root.line, "<algo> has neither inplace nor outofplace; taken as in-place")
    inplace = 1
  end
  if inplace < 0 then inplace = outofplace == 1 and 0 or 1 end
  if outofplace < 0 then outofplace = 1 - inplace end
  if inplace == 0 and outofplace == 0 then
    rd.fail(root.line, "<algo> has inplace=0 and outofplace=0: valid for no call")
  end
  return inplace == 1, outofplace == 1
end

-- The attributes of <algo>: the algorithm without its GPUs.
local function read_algo(root, path, rd)
  if root.name ~= "algo" then rd.fail(root.line, "root element is <%s>, expected <algo>", root.name) end
  local algo = { line = root.line, name = root.attr.name or import.base_name(path, "imported"), gpus = {} }
  algo.ngpus = attr_int(rd, root, "ngpus", nil, 1, MAX_RANKS)
  algo.coll = read_coll(root, algo.name, rd)
  algo.nchunks = attr_int(rd, root, "nchunksperloop", nil, 1, 1 << 20)
  algo.nchannels = attr_int(rd, root, "nchannels", -1, 1, MAX_CHANNELS)
  algo.proto = root.attr.proto or "Simple"
  if not (algo.proto == "Simple" or algo.proto == "LL" or algo.proto == "LL128") then
    rd.warn(root.line, "unknown protocol proto=\"%s\" (Simple, LL, LL128)", algo.proto)
  end
  algo.inplace, algo.outofplace = read_placement(root, rd)
  -- Chunks per block and buffer sizes (MSCCL geometry).
  local R, coll = algo.ngpus, algo.coll
  if coll ~= "allreduce" and algo.nchunks % R ~= 0 then
    rd.fail(root.line, "nchunksperloop=%d is not a multiple of ngpus=%d, as %s needs", algo.nchunks, R, coll)
  end
  algo.chunks = coll == "allreduce" and algo.nchunks or algo.nchunks // R
  algo.size = {}
  algo.size.input, algo.size.output = import.buffer_sizes(coll, R, algo.chunks)
  return algo
end

-- One <step> of a TB.
local function read_step(s, tb, rd)
  local ty = s.attr.type
  if ty == "ra" then rd.fail(s.line, "step type 'ra' is not implemented by any MSCCL runtime") end
  if not TYPES[ty] then rd.fail(s.line, "unknown step type '%s'", tostring(ty)) end
  local st = {
    s = attr_int(rd, s, "s", nil, 0, 1 << 16), type = ty, line = s.line, tb = tb, gpu = tb.rank,
    srcbuf = s.attr.srcbuf, dstbuf = s.attr.dstbuf,
    srcoff = attr_int(rd, s, "srcoff", -1, -1, 1 << 20), dstoff = attr_int(rd, s, "dstoff", -1, -1, 1 << 20),
    cnt = attr_int(rd, s, "cnt", ty == "nop" and 0 or 1, 0, 1 << 16),
    depid = attr_int(rd, s, "depid", -1, -1, 1 << 16), deps = attr_int(rd, s, "deps", -1, -1, 1 << 16),
    hasdep = attr_int(rd, s, "hasdep", 0, 0, 1),
  }
  tb.steps[#tb.steps + 1] = st
  st.idx = #tb.steps
  st.seq = tb.seq + st.idx
end

-- One <tb> of GPU `id` and its steps.
local function read_tb(t, id, algo, rd)
  local R = algo.ngpus
  local tb = {
    id = attr_int(rd, t, "id", nil, 0, 1 << 16), line = t.line, rank = id, steps = {},
    send = attr_int(rd, t, "send", -1, -1, R - 1), recv = attr_int(rd, t, "recv", -1, -1, R - 1),
    chan = attr_int(rd, t, "chan", 0, 0, MAX_CHANNELS - 1),
  }
  tb.seq = (id << 40) + (tb.id << 20) -- its steps' seq: (rank, TB id, idx) order (ids, idx < 2^17)
  if tb.send == id or tb.recv == id then
    rd.fail(t.line, "gpu %d tb %d has itself as a peer (send=%d recv=%d)", id, tb.id, tb.send, tb.recv)
  end
  if algo.nchannels > 0 and tb.chan >= algo.nchannels then
    rd.fail(t.line, "gpu %d tb %d uses channel %d but nchannels=%d", id, tb.id, tb.chan, algo.nchannels)
  end
  for _, s in ipairs(t.kids) do
    if s.name == "step" then read_step(s, tb, rd) else rd.warn(s.line, "ignored element <%s> in <tb>", s.name) end
  end
  return tb
end

-- One <gpu> and its TBs.
local function read_gpu(g, algo, rd)
  local id = attr_int(rd, g, "id", nil, 0, algo.ngpus - 1)
  if algo.gpus[id] then rd.fail(g.line, "<gpu id=%d> appears twice (first at line %d)", id, algo.gpus[id].line) end
  local gpu = { line = g.line, tbs = {}, s_chunks = attr_int(rd, g, "s_chunks", 0, 0, 1 << 20) }
  algo.gpus[id] = gpu
  for _, t in ipairs(g.kids) do
    if t.name == "tb" then
      gpu.tbs[#gpu.tbs + 1] = read_tb(t, id, algo, rd)
    elseif t.name ~= "copy" then -- (ncclize's pre-copies: every runtime ignores them)
      rd.warn(t.line, "ignored element <%s> in <gpu>", t.name)
    end
  end
end

--- 2. Read the element tree into an algorithm description (algo.gpus[r].tbs[i].steps).
local function read(root, path, rd)
  local algo = read_algo(root, path, rd)
  for _, g in ipairs(root.kids) do
    if g.name == "gpu" then read_gpu(g, algo, rd) else rd.warn(g.line, "ignored element <%s> in <algo>", g.name) end
  end
  return algo
end

-- ------------------------------------------------------------------ check

-- A GPU's TB ids: 0..n-1, each once; gpu.byid maps them to TBs.
local function check_tb_ids(gpu, r, rd)
  local byid = {}
  for _, tb in ipairs(gpu.tbs) do
    if byid[tb.id] then rd.fail(tb.line, "gpu %d has two <tb id=%d> (lines %d and %d)", r, tb.id, byid[tb.id].line, tb.line) end
    byid[tb.id] = tb
  end
  for i = 0, #gpu.tbs - 1 do
    if not byid[i] then rd.fail(gpu.line, "gpu %d: tb ids must be 0..%d without gaps; tb %d is missing", r, #gpu.tbs - 1, i) end
  end
  gpu.byid = byid
end

-- A TB's connections: one TB per (channel, send peer) and per (channel,
-- receive peer) on a GPU (`seen` holds the GPU's), and MSCCL's TBs per channel.
local function check_tb_peers(tb, r, seen, rd)
  for _, dir in ipairs { "send", "recv" } do
    local peer = tb[dir]
    if peer >= 0 then
      local k = tb.chan * 4096 + peer
      local owner = seen[dir]
      if owner[k] then
        rd.fail(tb.line, "gpu %d tb %d %ss %s gpu %d on channel %d, as tb %d does: one connection per peer, direction and channel",
          r, tb.id, dir, dir == "send" and "to" or "from", peer, tb.chan, owner[k].id)
      end
      owner[k] = tb
      local pk = tb.chan * 2 + (dir == "send" and 0 or 1)
      seen.per_chan[pk] = (seen.per_chan[pk] or 0) + 1
      if seen.per_chan[pk] == MAX_TBS_PER_CHANNEL + 1 then
        rd.warn(tb.line, "gpu %d has more than %d TBs that %s on channel %d (MSCCL's limit)", r, MAX_TBS_PER_CHANNEL,
          dir, tb.chan)
      end
    end
  end
end

-- A TB's steps: s unique (tb.bys maps them), peers for what they do, cnt in
-- range; sends and receives join their connection's lists (conn(src, dst, chan)).
local function check_tb_steps(tb, r, conn, rd)
  if #tb.steps > MAX_STEPS_EXECUTOR then
    rd.warn(tb.line, "gpu %d tb %d has %d steps, more than the MSCCL executor's default of %d", r, tb.id, #tb.steps,
      MAX_STEPS_EXECUTOR)
  end
  local bys = {}
  for _, st in ipairs(tb.steps) do
    if bys[st.s] then rd.fail(st.line, "gpu %d tb %d has two steps with s=%d", r, tb.id, st.s) end
    bys[st.s] = st
    local T = TYPES[st.type]
    if T.send and tb.send < 0 then
      rd.fail(st.line, "step '%s' sends but gpu %d tb %d has no send peer (send=-1)", st.type, r, tb.id)
    end
    if T.recv and tb.recv < 0 then
      rd.fail(st.line, "step '%s' receives but gpu %d tb %d has no receive peer (recv=-1)", st.type, r, tb.id)
    end
    if st.type ~= "nop" and (st.cnt < 1 or st.cnt >= MAX_COUNT) then
      rd.fail(st.line, "cnt=%d out of range (1..%d)", st.cnt, MAX_COUNT - 1)
    end
    if T.send then table.insert(conn(r, tb.send, tb.chan).sends, st) end
    if T.recv then table.insert(conn(tb.recv, r, tb.chan).recvs, st) end
  end
  tb.bys = bys
end

-- Dependencies name existing steps: st.dep is the step st waits for.
local function link_deps(algo, rd)
  for _, st in ipairs(algo.steps) do
    local r = st.gpu
    if st.depid >= 0 then
      local dtb = algo.gpus[r].byid[st.depid]
      if not dtb then rd.fail(st.line, "depid=%d: gpu %d has no tb %d", st.depid, r, st.depid) end
      local dst = dtb.bys[st.deps]
      if not dst then rd.fail(st.line, "deps=%d: gpu %d tb %d has no step s=%d", st.deps, r, st.depid, st.deps) end
      st.dep = dst
      dst.waited = true
    elseif st.type == "nop" then
      rd.warn(st.line, "nop step without a dependency (depid=-1) does nothing")
    end
  end
  for _, st in ipairs(algo.steps) do
    if st.waited and st.hasdep == 0 then
      rd.warn(st.line, "gpu %d tb %d step %d is waited on but has hasdep=0 (the MSCCL runtime would hang; recomputed)",
        st.gpu, st.tb.id, st.s)
    end
  end
end

-- Sends and receives pair up in FIFO order per connection: rv.recv_from is
-- the send a receive takes its data from.
local function pair_sends(conns, rd)
  for _, c in pairs(conns) do
    if #c.sends ~= #c.recvs then
      local st = #c.sends > #c.recvs and c.sends[#c.recvs + 1] or c.recvs[#c.sends + 1] -- the first unmatched
      rd.fail(st.line, "gpu %d sends %d time%s to gpu %d on channel %d but gpu %d receives %d time%s",
        c.src, #c.sends, #c.sends == 1 and "" or "s", c.dst, c.chan, c.dst, #c.recvs, #c.recvs == 1 and "" or "s")
    end
    for k = 1, #c.sends do
      local s, rv = c.sends[k], c.recvs[k]
      if s.cnt ~= rv.cnt then
        rd.fail(rv.line, "gpu %d tb %d step %d receives %d chunk%s but the matching send (gpu %d tb %d step %d, line %d) sends %d",
          rv.gpu, rv.tb.id, rv.s, rv.cnt, rv.cnt == 1 and "" or "s", s.gpu, s.tb.id, s.s, s.line, s.cnt)
      end
      rv.recv_from = s
    end
  end
end

--- 3. The strict checks the runtimes make (and some they should make); links
--- each step to the step it depends on and each receive to its send, and
--- lists all TBs and all steps (algo.tbs, algo.steps) in file order.
local function check(algo, rd)
  local conns = {} -- "src>dst:chan" -> { sends = {step...}, recvs = {step...} }
  local function conn(s, d, c)
    local k = s * 65536 * 64 + d * 64 + c
    local e = conns[k]
    if not e then e = { src = s, dst = d, chan = c, sends = {}, recvs = {} } conns[k] = e end
    return e
  end
  for r = 0, algo.ngpus - 1 do
    local gpu = algo.gpus[r]
    if not gpu then rd.fail(algo.line, "no <gpu id=%d> (ngpus=%d)", r, algo.ngpus) end
    check_tb_ids(gpu, r, rd)
    local seen = { send = {}, recv = {}, per_chan = {} }
    for _, tb in ipairs(gpu.tbs) do
      check_tb_peers(tb, r, seen, rd)
      check_tb_steps(tb, r, conn, rd)
    end
  end
  algo.tbs = import.tb_list(algo.gpus, algo.ngpus)
  algo.steps = import.step_list(algo.tbs, "steps")
  link_deps(algo, rd)
  pair_sends(conns, rd)
end

-- ------------------------------------------------------------------ order

local function describe(st)
  local T = TYPES[st.type]
  local what = st.type
  if T.recv and T.send then what = ("%s from gpu %d to gpu %d"):format(st.type, st.tb.recv, st.tb.send)
  elseif T.recv then what = ("%s from gpu %d"):format(st.type, st.tb.recv)
  elseif T.send then what = ("%s to gpu %d"):format(st.type, st.tb.send) end
  return ("gpu %d tb %d step %d (%s, line %d)"):format(st.gpu, st.tb.id, st.s, what, st.line)
end

-- A TB that did not finish: follow who waits for whom to a cycle and report it.
local function deadlock(tb, rd)
  local seen, chain = {}, {}
  local st = tb.steps[tb.pc]
  while st and not seen[st] do
    seen[st] = #chain + 1
    chain[#chain + 1] = st
    local need = st.blocked
    if not need then break end
    -- The TB of the needed step is stuck at its own current step.
    st = need.tb.steps[need.tb.pc]
  end
  local from = st and seen[st] or 1
  local parts = {}
  for i = from, #chain do
    local s = chain[i]
    parts[#parts + 1] = ("%s waits for %s"):format(describe(s), describe(s.blocked))
  end
  rd.fail(chain[from].line, "deadlock in the file's own schedule: %s", table.concat(parts, "; "))
end

--- 4. Run the file's schedule abstractly; give each step a round (st.round),
--- or report the cycle.
local function order(algo, rd)
  -- A step waiting for another step: woken when that one completes.
  local rq = import.runqueue()
  for _, tb in ipairs(algo.tbs) do
    tb.pc = 1
    rq.ready(tb)
  end
  for tb in rq.pop do
    while tb.pc <= #tb.steps do
      local st = tb.steps[tb.pc]
      local need
      if st.dep and not st.dep.done then need = st.dep
      elseif TYPES[st.type].recv and not st.recv_from.done then need = st.recv_from end
      if need then
        st.blocked = need
        rq.block(tb, need)
        break
      end
      st.blocked = nil
      local round = 0
      local prev = tb.steps[tb.pc - 1]
      if prev then round = prev.round end
      if st.dep and st.dep.round + 1 > round then round = st.dep.round + 1 end
      if TYPES[st.type].recv and st.recv_from.round + 1 > round then round = st.recv_from.round + 1 end
      st.round, st.done = round, true
      tb.pc = tb.pc + 1
      rq.wake(st)
    end
  end
  for _, tb in ipairs(algo.tbs) do
    if tb.pc <= #tb.steps then deadlock(tb, rd) end
  end
end

-- ----------------------------------------------------------------- locate

--- 5. The steps that move data, in round order (st.pos), each with its
--- local source and destination (st.src, st.dst: { buf, idx } in resccl's
--- buffers) checked; sets algo.aliased (an in-place-only file) and
--- algo.staged (such a reduce-scatter, which works in scratch).
local function locate(algo, rd)
  algo.aliased = algo.inplace and not algo.outofplace
  algo.staged = algo.aliased and algo.coll == "reducescatter"
  local function ref(st, which)
    local b, off = st[which .. "buf"], st[which .. "off"]
    if not BUFS[b] then
      rd.fail(st.line, "step '%s' needs %sbuf i, o or s, got %s", st.type, which, b == nil and "nothing" or ("'" .. b .. "'"))
    end
    local s_chunks = algo.gpus[st.gpu].s_chunks
    local size = b == "s" and s_chunks or algo.size[BUFS[b]]
    if off < 0 or off + st.cnt > size then
      rd.fail(st.line, "%soff=%d cnt=%d out of range: gpu %d's %s buffer has %d chunks", which, off, st.cnt, st.gpu,
        BUFS[b], size)
    end
    if not algo.aliased then return { buf = BUFS[b], idx = off } end
    local buf, idx = import.inplace_ref(algo.coll, algo.chunks, s_chunks, st.gpu, BUFS[b], off)
    return { buf = buf, idx = idx }
  end
  local ev = {}
  for _, st in ipairs(algo.steps) do
    if st.type ~= "nop" then
      ev[#ev + 1] = st
      local T = TYPES[st.type]
      if T.send and not T.recv then st.src = ref(st, "src") end
      if T.reduce or T.loc then st.src = ref(st, "src") end
      if T.write then st.dst = ref(st, "dst") end
    end
  end
  table.sort(ev, import.by_round)
  for i, st in ipairs(ev) do st.pos = i end
  return ev
end

-- ----------------------------------------------------------------- values

-- Accesses per chunk location, in event order: acc.touch records one;
-- written_between and dead_after ask about a location's later ones.
local function accesses(ev)
  local acc, at = {}, {} -- at[key] = { { pos, write }, ... }
  -- The key of l's first chunk on rank r; the c-th chunk's is c more.
  local function key(r, l)
    return (r * 3 + (l.buf == "input" and 0 or l.buf == "output" and 1 or 2)) * (1 << 24) + l.idx
  end
  function acc.touch(r, l, cnt, pos, write)
    local k0 = key(r, l)
    for k = k0, k0 + cnt - 1 do
      local a = at[k]
      if not a then a = {} at[k] = a end
      a[#a + 1] = { pos = pos, write = write }
    end
  end
  -- Is location l on rank r written (by anything) in positions (a, b)?
  function acc.written_between(r, l, cnt, a, b)
    local k0 = key(r, l)
    for k = k0, k0 + cnt - 1 do
      for _, x in ipairs(at[k] or {}) do
        if x.write and x.pos > a and x.pos < b then return true end
      end
    end
    return false
  end
  -- After pos, is every chunk of l overwritten before anything reads it?
  function acc.dead_after(r, l, cnt, pos)
    local k0 = key(r, l)
    for k = k0, k0 + cnt - 1 do
      local nxt
      for _, x in ipairs(at[k] or {}) do
        if x.pos > pos and (not nxt or x.pos < nxt.pos or (x.pos == nxt.pos and not x.write)) then nxt = x end
      end
      if not nxt then
        if l.buf ~= "scratch" then return false end
      elseif not nxt.write then
        return false
      else
        -- a write at the same position that also reads (rrc into itself) reads first
        for _, x in ipairs(at[k]) do
          if x.pos == nxt.pos and not x.write then return false end
        end
      end
    end
    return true
  end
  for _, st in ipairs(ev) do
    local T = TYPES[st.type]
    if st.src then acc.touch(st.gpu, st.src, st.cnt, st.pos, false) end
    if st.dst and (st.type == "re" or (T.reduce and not T.loc)) then acc.touch(st.gpu, st.dst, st.cnt, st.pos, false) end
    if st.dst then acc.touch(st.gpu, st.dst, st.cnt, st.pos, true) end
  end
  return acc
end

-- A temporary scratch location of cnt chunks on rank r, after the file's
-- own scratch and a staged reduce-scatter's.
local function temporary(algo, r, cnt)
  local top = algo.scratch_top
  if not top[r] then top[r] = algo.gpus[r].s_chunks + (algo.staged and algo.size.input or 0) end
  local i = top[r]
  top[r] = i + cnt
  return { buf = "scratch", idx = i }
end

--- 6. What each sending step sends (st.val); returns the accesses, with
--- those rrs makes by forwarding from its source.
local function values(algo, ev)
  local acc = accesses(ev)
  algo.scratch_top = {}
  for _, st in ipairs(ev) do
    if st.type == "rrs" then
      -- rrs keeps no local copy of what it forwards: forward from the source
      -- chunk when that is dead afterwards, else from a temporary.
      if acc.dead_after(st.gpu, st.src, st.cnt, st.pos) then
        st.val = st.src
        acc.touch(st.gpu, st.src, st.cnt, st.pos, true)
      else
        st.val = temporary(algo, st.gpu, st.cnt)
      end
    elseif TYPES[st.type].send then
      st.val = TYPES[st.type].recv and st.dst or st.src
    end
  end
  return acc
end

-- -------------------------------------------------------------- transfers

-- The file's TB and step on both sides, for a step that is its own pair.
local function here(st) return { st.tb.id, st.s, st.tb.id, st.s, -1 } end

-- A receiving step st and its send: rec(pos, sub, x) the transfers.
local function receive(algo, st, acc, rec)
  local T, r, snd = TYPES[st.type], st.gpu, st.recv_from
  -- Where the data lands: rrs into its forwarding value, others into dst.
  local into = st.type == "rrs" and st.val or st.dst
  if T.reduce and not (st.src.buf == into.buf and st.src.idx == into.idx) then
    -- rrc/rrcs/rrs compute dst = src (+) received: start from src.
    rec(st.pos, 1, import.xfer(r, st.src.buf, st.src.idx, r, into.buf, into.idx, st.cnt, "copy", st.round, st.line,
      st.type .. " operand", here(st)))
  end
  -- The sender's value must be unchanged from the send to this receive.
  local from = snd.val
  if acc.written_between(snd.gpu, from, snd.cnt, snd.pos, st.pos) then
    local t = temporary(algo, snd.gpu, snd.cnt)
    rec(snd.pos, 4, import.xfer(snd.gpu, from.buf, from.idx, snd.gpu, t.buf, t.idx, snd.cnt, "copy", snd.round,
      snd.line, "staged send", here(snd)))
    from = t
  end
  local op = T.reduce and "reduce" or "copy"
  rec(st.pos, 2, import.xfer(snd.gpu, from.buf, from.idx, r, into.buf, into.idx, st.cnt, op, st.round, st.line,
    snd.type .. "/" .. st.type, { snd.tb.id, snd.s, st.tb.id, st.s, st.tb.chan }))
end

--- 7. The transfers, in an order the core's (step, record order) sort keeps:
--- an in-place-only file's placement copies around them.
local function transfers(algo, ev, acc)
  -- Records: { pos, sub, x } sorted by (pos, sub); sub: 1 preparation,
  -- 2 the arriving transfer, 3 local operation, 4 staging of outgoing data.
  local recs = {}
  local function rec(pos, sub, x) recs[#recs + 1] = { pos = pos, sub = sub, n = #recs, x = x } end
  for _, st in ipairs(ev) do
    local T = TYPES[st.type]
    if T.loc then
      rec(st.pos, 3, import.xfer(st.gpu, st.src.buf, st.src.idx, st.gpu, st.dst.buf, st.dst.idx, st.cnt,
        st.type == "re" and "reduce" or "copy", st.round, st.line, st.type, here(st)))
    end
    if T.recv then receive(algo, st, acc, rec) end
  end
  table.sort(recs, function(x, y)
    if x.pos ~= y.pos then return x.pos < y.pos end
    if x.sub ~= y.sub then return x.sub < y.sub end
    return x.n < y.n
  end)
  local xs, after = {}, {}
  if algo.aliased then
    xs, after = import.inplace_copies(algo.coll, algo.ngpus, algo.chunks, function(r) return algo.gpus[r].s_chunks end,
      function(r) return algo.gpus[r].line end)
  end
  for _, x in ipairs(recs) do xs[#xs + 1] = x.x end
  table.move(after, 1, #after, #xs + 1, xs)
  return xs
end

-- ------------------------------------------------------------------ entry

--- Is this text an MSCCL XML file?
---@param text string
function M.detect(text)
  return text:match "^%s*<" ~= nil or text:match "^\239\187\191%s*<" ~= nil
end

-- The import record, with the file's TBs per rank and step counts.
local function record(algo, xs, path, warnings)
  local file_tbs, ntypes = {}, {}
  for r = 0, algo.ngpus - 1 do file_tbs[r + 1] = #algo.gpus[r].tbs end
  for _, st in ipairs(algo.steps) do ntypes[st.type] = (ntypes[st.type] or 0) + 1 end
  return {
    format = M.format, path = path, name = algo.name, collective = algo.coll, ranks = algo.ngpus,
    chunks = algo.chunks, inplace = algo.inplace, outofplace = algo.outofplace, line = algo.line,
    xfers = xs, file_tbs = file_tbs, hints = true, warnings = warnings,
    details = { proto = algo.proto, nchannels = algo.nchannels, nchunksperloop = algo.nchunks, steps = #algo.steps,
      step_types = ntypes },
  }
end

--- Import MSCCL XML text: the passes of the header, in order.
---@param text string
---@param path string file name used in messages and source positions
---@return table imp the common import record (see resccl.import)
function M.import(text, path)
  local warnings = {}
  local rd = import.checker(path, warnings)
  local root = M.parse(text, path)
  local algo = read(root, path, rd)
  check(algo, rd)
  order(algo, rd)
  local ev = locate(algo, rd)
  local acc = values(algo, ev)
  return record(algo, transfers(algo, ev, acc), path, warnings)
end

return M
