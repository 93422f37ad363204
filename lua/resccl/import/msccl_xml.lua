--- MSCCL XML (MSCCLang, SCCL/TACCL/TE-CCL ncclize output) -> transfers.
--
-- The file describes, per GPU, thread blocks (TBs) that each run a list of
-- steps in document order: sends and receives on the TB's one send peer and
-- one receive peer, local copies and reductions, and `nop`s that only wait.
-- A step may wait for a step of another TB of its GPU (depid/deps).
--
-- Import happens in four passes:
--   1. parse     lua-expat builds a plain element tree with line numbers.
--   2. read      lenient attribute reading, then strict checks (bounds, one
--                peer per TB direction and channel, limits, matching counts).
--   3. order     a chunk-level run of the MSCCL runtime's semantics (per-TB
--                program order, FIFO per sender/receiver/channel, depid/deps
--                waits) gives every step a round; a cycle is a deadlock.
--   4. transfers each send is paired with its receive; the pair becomes one
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

local COLLS = {
  allreduce = "allreduce", allgather = "allgather", alltoall = "alltoall",
  reduce_scatter = "reducescatter", reducescatter = "reducescatter",
}
local UNSUPPORTED_COLLS = {
  reduce = true, broadcast = true, custom = true, send = true, recv = true, gather = true, scatter = true,
  alltoallv = true,
}

local BUFS = { i = "input", o = "output", s = "scratch" }

-- ------------------------------------------------------------------ parse

--- Parse XML text into a tree of { name, attr, line, kids } with expat.
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

local function new_reader(path, warnings)
  local R = {}
  function R.fail(line, fmt, ...)
    error(("%s:%d: " .. fmt):format(path, line or 0, ...), 0)
  end
  function R.warn(line, fmt, ...)
    warnings[#warnings + 1] = ("%s:%d: " .. fmt):format(path, line or 0, ...)
  end
  --- An integer attribute; `dflt` when absent (nil = required).
  function R.int(node, key, dflt, lo, hi)
    local v = node.attr[key]
    if v == nil then
      if dflt ~= nil then return dflt end
      R.fail(node.line, "<%s> needs attribute %s", node.name, key)
    end
    local n = math.tointeger(tonumber(v))
    if not n or not v:match "^%s*[-+]?%d+%s*$" then
      R.fail(node.line, "<%s> attribute %s=\"%s\" is not an integer", node.name, key, v)
    end
    if (lo and n < lo) or (hi and n > hi) then
      R.fail(node.line, "<%s> attribute %s=%d out of range (%d..%d)", node.name, key, n, lo or n, hi or n)
    end
    return n
  end
  return R
end

-- Chunks per block and buffer sizes for the collective (MSCCL geometry).
local function geometry(coll, R, nchunks)
  local C
  if coll == "allreduce" then C = nchunks
  else
    if nchunks % R ~= 0 then return nil end
    C = nchunks // R
  end
  local size = {
    input = (coll == "reducescatter" or coll == "alltoall") and R * C or C,
    output = (coll == "allgather" or coll == "alltoall") and R * C or C,
  }
  return C, size
end

--- Read the element tree into an algorithm description, checking it.
local function read(root, path, warnings)
  local rd = new_reader(path, warnings)
  if root.name ~= "algo" then rd.fail(root.line, "root element is <%s>, expected <algo>", root.name) end
  local a = root.attr
  local algo = { line = root.line, name = a.name or path:match "([^/]+)%.[^.]*$" or "imported" }
  algo.ngpus = rd.int(root, "ngpus", nil, 1, MAX_RANKS)
  local coll = a.coll
  if coll == nil then
    -- Some SCCL outputs omit coll; the name usually says it.
    local lname = algo.name:lower()
    for k, v in pairs(COLLS) do
      if lname:find(k, 1, true) then coll = v end
    end
    if not coll then rd.fail(root.line, "<algo> has no coll attribute and its name does not tell the collective") end
    rd.warn(root.line, "<algo> has no coll attribute; taken as %s from its name", coll)
  end
  if UNSUPPORTED_COLLS[coll] then
    rd.fail(root.line, "collective '%s' is not supported (allreduce, allgather, reducescatter, alltoall)", coll)
  end
  algo.coll = COLLS[coll] or rd.fail(root.line, "unknown collective coll=\"%s\"", coll)
  algo.nchunks = rd.int(root, "nchunksperloop", nil, 1, 1 << 20)
  algo.nchannels = rd.int(root, "nchannels", -1, 1, MAX_CHANNELS)
  algo.proto = a.proto or "Simple"
  if not (algo.proto == "Simple" or algo.proto == "LL" or algo.proto == "LL128") then
    rd.warn(root.line, "unknown protocol proto=\"%s\" (Simple, LL, LL128)", algo.proto)
  end
  local inplace = rd.int(root, "inplace", -1, 0, 1)
  local outofplace = rd.int(root, "outofplace", -1, 0, 1)
  if inplace < 0 and outofplace < 0 then
    rd.warn(root.line, "<algo> has neither inplace nor outofplace; taken as in-place")
    inplace = 1
  end
  if inplace < 0 then inplace = outofplace == 1 and 0 or 1 end
  if outofplace < 0 then outofplace = 1 - inplace end
  if inplace == 0 and outofplace == 0 then
    rd.fail(root.line, "<algo> has inplace=0 and outofplace=0: valid for no call")
  end
  algo.inplace, algo.outofplace = inplace == 1, outofplace == 1
  local R = algo.ngpus
  algo.chunks, algo.size = geometry(algo.coll, R, algo.nchunks)
  if not algo.chunks then
    rd.fail(root.line, "nchunksperloop=%d is not a multiple of ngpus=%d, as %s needs", algo.nchunks, R, algo.coll)
  end

  algo.gpus = {}
  for _, g in ipairs(root.kids) do
    if g.name == "gpu" then
      local id = rd.int(g, "id", nil, 0, R - 1)
      if algo.gpus[id] then rd.fail(g.line, "<gpu id=%d> appears twice (first at line %d)", id, algo.gpus[id].line) end
      local gpu = { id = id, line = g.line, tbs = {}, copies = 0, s_chunks = rd.int(g, "s_chunks", 0, 0, 1 << 20) }
      algo.gpus[id] = gpu
      for _, t in ipairs(g.kids) do
        if t.name == "tb" then
          local tb = {
            id = rd.int(t, "id", nil, 0, 1 << 16), line = t.line, gpu = id, steps = {},
            send = rd.int(t, "send", -1, -1, R - 1), recv = rd.int(t, "recv", -1, -1, R - 1),
            chan = rd.int(t, "chan", 0, 0, MAX_CHANNELS - 1),
          }
          if tb.send == id or tb.recv == id then
            rd.fail(t.line, "gpu %d tb %d has itself as a peer (send=%d recv=%d)", id, tb.id, tb.send, tb.recv)
          end
          if algo.nchannels > 0 and tb.chan >= algo.nchannels then
            rd.fail(t.line, "gpu %d tb %d uses channel %d but nchannels=%d", id, tb.id, tb.chan, algo.nchannels)
          end
          gpu.tbs[#gpu.tbs + 1] = tb
          for _, s in ipairs(t.kids) do
            if s.name == "step" then
              local ty = s.attr.type
              if ty == "ra" then rd.fail(s.line, "step type 'ra' is not implemented by any MSCCL runtime") end
              if not TYPES[ty] then rd.fail(s.line, "unknown step type '%s'", tostring(ty)) end
              local st = {
                s = rd.int(s, "s", nil, 0, 1 << 16), type = ty, line = s.line, tb = tb, gpu = id,
                srcbuf = s.attr.srcbuf, dstbuf = s.attr.dstbuf,
                srcoff = rd.int(s, "srcoff", -1, -1, 1 << 20), dstoff = rd.int(s, "dstoff", -1, -1, 1 << 20),
                cnt = rd.int(s, "cnt", ty == "nop" and 0 or 1, 0, 1 << 16),
                depid = rd.int(s, "depid", -1, -1, 1 << 16), deps = rd.int(s, "deps", -1, -1, 1 << 16),
                hasdep = rd.int(s, "hasdep", 0, 0, 1),
              }
              tb.steps[#tb.steps + 1] = st
              st.idx = #tb.steps
            else
              rd.warn(s.line, "ignored element <%s> in <tb>", s.name)
            end
          end
        elseif t.name == "copy" then
          gpu.copies = gpu.copies + 1 -- ncclize pre-copies: every runtime ignores them
        else
          rd.warn(t.line, "ignored element <%s> in <gpu>", t.name)
        end
      end
    else
      rd.warn(g.line, "ignored element <%s> in <algo>", g.name)
    end
  end
  return algo, rd
end

-- Strict checks the runtimes make (and some they should make).
local function check(algo, rd)
  local R = algo.ngpus
  local conns = {} -- "src>dst:chan" -> { sends = {step...}, recvs = {step...} }
  local function conn(s, d, c)
    local k = s * 65536 * 64 + d * 64 + c
    local e = conns[k]
    if not e then e = { src = s, dst = d, chan = c, sends = {}, recvs = {} } conns[k] = e end
    return e
  end
  for r = 0, R - 1 do
    local gpu = algo.gpus[r]
    if not gpu then rd.fail(algo.line, "no <gpu id=%d> (ngpus=%d)", r, R) end
    -- TB ids: 0..n-1, each once; order by id.
    local byid = {}
    for _, tb in ipairs(gpu.tbs) do
      if byid[tb.id] then rd.fail(tb.line, "gpu %d has two <tb id=%d> (lines %d and %d)", r, tb.id, byid[tb.id].line, tb.line) end
      byid[tb.id] = tb
    end
    for i = 0, #gpu.tbs - 1 do
      if not byid[i] then rd.fail(gpu.line, "gpu %d: tb ids must be 0..%d without gaps; tb %d is missing", r, #gpu.tbs - 1, i) end
    end
    gpu.byid = byid
    -- One TB per (channel, send peer) and per (channel, recv peer).
    local sendtb, recvtb, per_chan = {}, {}, {}
    for _, tb in ipairs(gpu.tbs) do
      for dir, peer in pairs { send = tb.send, recv = tb.recv } do
        if peer >= 0 then
          local k = tb.chan * 4096 + peer
          local seen = dir == "send" and sendtb or recvtb
          if seen[k] then
            rd.fail(tb.line, "gpu %d tb %d %ss %s gpu %d on channel %d, as tb %d does: one connection per peer, direction and channel",
              r, tb.id, dir, dir == "send" and "to" or "from", peer, tb.chan, seen[k].id)
          end
          seen[k] = tb
          local pk = tb.chan * 2 + (dir == "send" and 0 or 1)
          per_chan[pk] = (per_chan[pk] or 0) + 1
          if per_chan[pk] == MAX_TBS_PER_CHANNEL + 1 then
            rd.warn(tb.line, "gpu %d has more than %d TBs that %s on channel %d (MSCCL's limit)", r, MAX_TBS_PER_CHANNEL,
              dir, tb.chan)
          end
        end
      end
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
  end
  -- Dependencies name existing steps.
  for r = 0, R - 1 do
    local gpu = algo.gpus[r]
    for _, tb in ipairs(gpu.tbs) do
      for _, st in ipairs(tb.steps) do
        if st.depid >= 0 then
          local dtb = gpu.byid[st.depid]
          if not dtb then rd.fail(st.line, "depid=%d: gpu %d has no tb %d", st.depid, r, st.depid) end
          local dst = dtb.bys[st.deps]
          if not dst then rd.fail(st.line, "deps=%d: gpu %d tb %d has no step s=%d", st.deps, r, st.depid, st.deps) end
          st.dep = dst
          dst.waited = true
        elseif st.type == "nop" then
          rd.warn(st.line, "nop step without a dependency (depid=-1) does nothing")
        end
      end
    end
  end
  for r = 0, R - 1 do
    for _, tb in ipairs(algo.gpus[r].tbs) do
      for _, st in ipairs(tb.steps) do
        if st.waited and st.hasdep == 0 then
          rd.warn(st.line, "gpu %d tb %d step %d is waited on but has hasdep=0 (the MSCCL runtime would hang; recomputed)",
            r, tb.id, st.s)
        end
      end
    end
  end
  -- Sends and receives pair up in FIFO order per connection.
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
      rv.recv_from = s -- the send this receive takes its data from
    end
  end
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

--- Run the file's schedule abstractly; give each step a round, or report the cycle.
local function order(algo, rd)
  local tbs = {}
  for r = 0, algo.ngpus - 1 do
    for _, tb in ipairs(algo.gpus[r].tbs) do
      tbs[#tbs + 1] = tb
      tb.pc = 1
    end
  end
  -- A step waiting for another step: woken when that one completes.
  local rq = import.runqueue()
  for _, tb in ipairs(tbs) do rq.ready(tb) end
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
  -- Stuck TBs: follow who waits for whom to a cycle.
  for _, tb in ipairs(tbs) do
    if tb.pc <= #tb.steps then
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
  end
end

-- -------------------------------------------------------------- transfers

--- Turn the ordered steps into transfers.
local function transfers(algo, rd)
  local R, C = algo.ngpus, algo.chunks
  local coll = algo.coll
  -- In-place-only files address one buffer through both names; map every
  -- reference to the buffer the core aliases in-place (and copy the input
  -- there first, a copy the core drops for in-place calls).
  local normalise = algo.inplace and not algo.outofplace
  -- But a reduce-scatter's in-place buffer is its input, which out of place
  -- is the caller's and stays as it was (NCCL's sendbuff is const): such a
  -- file works in scratch after its own, the input copied there first and
  -- the result copied out last, in both placements (the program is one).
  local staged = normalise and coll == "reducescatter"
  local function place(r, b, off)
    local buf = BUFS[b]
    if staged and buf ~= "scratch" then
      return "scratch", algo.gpus[r].s_chunks + (buf == "output" and r * C or 0) + off
    elseif normalise then
      if coll == "allgather" and buf == "input" then return "output", r * C + off
      elseif (coll == "allreduce" or coll == "alltoall") and buf == "input" then return "output", off end
    end
    return buf, off
  end
  -- Resolve a step's local source/destination and check bounds.
  local function ref(st, which)
    local b, off = st[which .. "buf"], st[which .. "off"]
    if not BUFS[b] then
      rd.fail(st.line, "step '%s' needs %sbuf i, o or s, got %s", st.type, which, b == nil and "nothing" or ("'" .. b .. "'"))
    end
    local size = b == "s" and algo.gpus[st.gpu].s_chunks or algo.size[BUFS[b]]
    if off < 0 or off + st.cnt > size then
      rd.fail(st.line, "%soff=%d cnt=%d out of range: gpu %d's %s buffer has %d chunks", which, off, st.cnt, st.gpu,
        BUFS[b], size)
    end
    local buf, idx = place(st.gpu, b, off)
    return { buf = buf, idx = idx }
  end

  -- Every real step in round order.
  local ev = {}
  for r = 0, R - 1 do
    for _, tb in ipairs(algo.gpus[r].tbs) do
      for _, st in ipairs(tb.steps) do
        if st.type ~= "nop" then
          ev[#ev + 1] = st
          local T = TYPES[st.type]
          if T.send and not T.recv then st.src = ref(st, "src") end
          if T.reduce or T.loc then st.src = ref(st, "src") end
          if T.write then st.dst = ref(st, "dst") end
        end
      end
    end
  end
  table.sort(ev, function(x, y)
    if x.round ~= y.round then return x.round < y.round end
    if x.gpu ~= y.gpu then return x.gpu < y.gpu end
    if x.tb.id ~= y.tb.id then return x.tb.id < y.tb.id end
    return x.idx < y.idx
  end)
  for i, st in ipairs(ev) do st.pos = i end

  -- Temporary scratch chunks go after the file's own.
  local scratch_top = {}
  for r = 0, R - 1 do scratch_top[r] = algo.gpus[r].s_chunks + (staged and algo.size.input or 0) end
  local function tmp(r, cnt)
    local i = scratch_top[r]
    scratch_top[r] = i + cnt
    return { buf = "scratch", idx = i }
  end

  -- Accesses per chunk location, in event order: { pos, write }.
  local acc = {}
  local function key(r, l, c)
    return (r * 3 + (l.buf == "input" and 0 or l.buf == "output" and 1 or 2)) * (1 << 24) + l.idx + c
  end
  local function touch(r, l, cnt, pos, write)
    for c = 0, cnt - 1 do
      local k = key(r, l, c)
      local a = acc[k]
      if not a then a = {} acc[k] = a end
      a[#a + 1] = { pos = pos, write = write }
    end
  end
  for _, st in ipairs(ev) do
    local T = TYPES[st.type]
    if st.src then touch(st.gpu, st.src, st.cnt, st.pos, false) end
    if st.dst and (st.type == "re" or (T.reduce and not T.loc)) then touch(st.gpu, st.dst, st.cnt, st.pos, false) end
    if st.dst then touch(st.gpu, st.dst, st.cnt, st.pos, true) end
  end
  -- Is location l on rank r written (by anything) in positions (a, b)?
  local function written_between(r, l, cnt, a, b)
    for c = 0, cnt - 1 do
      for _, x in ipairs(acc[key(r, l, c)] or {}) do
        if x.write and x.pos > a and x.pos < b then return true end
      end
    end
    return false
  end
  -- After pos, is every chunk of l overwritten before anything reads it?
  local function dead_after(r, l, cnt, pos)
    for c = 0, cnt - 1 do
      local nxt
      for _, x in ipairs(acc[key(r, l, c)] or {}) do
        if x.pos > pos and (not nxt or x.pos < nxt.pos or (x.pos == nxt.pos and not x.write)) then nxt = x end
      end
      if not nxt then
        if l.buf ~= "scratch" then return false end
      elseif not nxt.write then
        return false
      else
        -- a write at the same position that also reads (rrc into itself) reads first
        for _, x in ipairs(acc[key(r, l, c)]) do
          if x.pos == nxt.pos and not x.write then return false end
        end
      end
    end
    return true
  end

  -- rrs keeps no local copy of what it forwards: forward from the source
  -- chunk when that is dead afterwards, else from a temporary.
  for _, st in ipairs(ev) do
    if st.type == "rrs" then
      if dead_after(st.gpu, st.src, st.cnt, st.pos) then
        st.val = st.src
        touch(st.gpu, st.src, st.cnt, st.pos, true)
      else
        st.val = tmp(st.gpu, st.cnt)
        st.val_tmp = true
      end
    elseif TYPES[st.type].send then
      st.val = TYPES[st.type].recv and st.dst or st.src
    end
  end

  -- Records: { pos, sub, x } sorted by (pos, sub); sub: 1 preparation,
  -- 2 the arriving transfer, 3 local operation, 4 staging of outgoing data.
  local recs = {}
  local function rec(pos, sub, x) recs[#recs + 1] = { pos = pos, sub = sub, n = #recs, x = x } end
  local function xfer(src, sl, dst, dl, cnt, op, round, line, hint, what)
    return {
      src = src, sbuf = sl.buf, sidx = sl.idx, dst = dst, dbuf = dl.buf, didx = dl.idx, cnt = cnt, op = op,
      step = round, line = line, hint = hint, what = what,
    }
  end
  local function here(st) return { st.tb.id, st.s, st.tb.id, st.s, -1 } end

  for _, st in ipairs(ev) do
    local T = TYPES[st.type]
    local r = st.gpu
    if T.loc then
      rec(st.pos, 3, xfer(r, st.src, r, st.dst, st.cnt, st.type == "re" and "reduce" or "copy", st.round, st.line,
        here(st), st.type))
    end
    if T.recv then
      local snd = st.recv_from
      -- Where the data lands: rrs into its forwarding value, others into dst.
      local into = st.type == "rrs" and st.val or st.dst
      if T.reduce then
        -- rrc/rrcs/rrs compute dst = src (+) received: start from src.
        local same = st.src.buf == into.buf and st.src.idx == into.idx
        if not same then
          rec(st.pos, 1, xfer(r, st.src, r, into, st.cnt, "copy", st.round, st.line, here(st), st.type .. " operand"))
        end
      end
      -- The sender's value must be unchanged from the send to this receive.
      local from = snd.val
      if written_between(snd.gpu, from, snd.cnt, snd.pos, st.pos) then
        local t = tmp(snd.gpu, snd.cnt)
        rec(snd.pos, 4, xfer(snd.gpu, from, snd.gpu, t, snd.cnt, "copy", snd.round, snd.line, here(snd), "staged send"))
        from = t
      end
      rec(st.pos, 2, xfer(snd.gpu, from, r, into, st.cnt, T.reduce and "reduce" or "copy", st.round, st.line,
        { snd.tb.id, snd.s, st.tb.id, st.s, st.tb.chan }, snd.type .. "/" .. st.type))
    end
  end
  table.sort(recs, function(x, y)
    if x.pos ~= y.pos then return x.pos < y.pos end
    if x.sub ~= y.sub then return x.sub < y.sub end
    return x.n < y.n
  end)

  local xs = {}
  -- Placement copies for in-place-only files, before and after everything.
  if normalise then
    for r = 0, R - 1 do
      local line = algo.gpus[r].line
      if coll == "allgather" then
        xs[#xs + 1] = xfer(r, { buf = "input", idx = 0 }, r, { buf = "output", idx = r * C }, C, "copy", -1, line, nil,
          "in-place input")
      elseif coll == "allreduce" or coll == "alltoall" then
        local n = algo.size.input
        xs[#xs + 1] = xfer(r, { buf = "input", idx = 0 }, r, { buf = "output", idx = 0 }, n, "copy", -1, line, nil,
          "in-place input")
      elseif staged then
        xs[#xs + 1] = xfer(r, { buf = "input", idx = 0 }, r, { buf = "scratch", idx = algo.gpus[r].s_chunks },
          algo.size.input, "copy", -1, line, nil, "in-place input")
      end
    end
  end
  for _, x in ipairs(recs) do xs[#xs + 1] = x.x end
  if staged then
    for r = 0, R - 1 do
      xs[#xs + 1] = xfer(r, { buf = "scratch", idx = algo.gpus[r].s_chunks + r * C }, r, { buf = "output", idx = 0 },
        C, "copy", 1 << 30, algo.gpus[r].line, nil, "in-place output")
    end
  end
  return xs
end

-- ------------------------------------------------------------------ entry

--- Is this text an MSCCL XML file?
---@param text string
function M.detect(text)
  return text:match "^%s*<" ~= nil or text:match "^\239\187\191%s*<" ~= nil
end

--- Import MSCCL XML text.
---@param text string
---@param path string file name used in messages and source positions
---@return table imp the common import record (see resccl.import)
function M.import(text, path)
  local warnings = {}
  local root = M.parse(text, path)
  local algo, rd = read(root, path, warnings)
  check(algo, rd)
  order(algo, rd)
  local xs = transfers(algo, rd)
  local file_tbs, nsteps, ntypes = {}, 0, {}
  for r = 0, algo.ngpus - 1 do
    file_tbs[r + 1] = #algo.gpus[r].tbs
    for _, tb in ipairs(algo.gpus[r].tbs) do
      for _, st in ipairs(tb.steps) do
        nsteps = nsteps + 1
        ntypes[st.type] = (ntypes[st.type] or 0) + 1
      end
    end
  end
  return {
    format = M.format, path = path, name = algo.name, collective = algo.coll, ranks = algo.ngpus,
    chunks = algo.chunks, inplace = algo.inplace, outofplace = algo.outofplace, line = algo.line,
    xfers = xs, file_tbs = file_tbs, hints = true, warnings = warnings,
    details = { proto = algo.proto, nchannels = algo.nchannels, nchunksperloop = algo.nchunks, steps = nsteps,
      step_types = ntypes },
  }
end

return M
