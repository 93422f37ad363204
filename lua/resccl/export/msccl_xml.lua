--- A compiled plan -> MSCCL XML, for the MSCCL executor (Azure/msccl-executor-nccl) and RCCL.
--
-- Our TBs run primitives in pipeline order and may talk to several peers
-- over time; an MSCCL TB owns at most one send peer and one receive peer
-- (one NCCL connection each). M.write runs four passes, each a function
-- below, in this order:
--   1. build_tbs  each of our TBs becomes one or more MSCCL TBs: a primitive
--                 goes to the TB that already owns its peers, or to a new
--                 one; a fused primitive whose two peers live in different
--                 TBs is split into its receive and its send. copySend
--                 becomes cpy + s, and a step moves at most 71 chunks.
--   2. link_deps  order inside our TB that the split would lose, and our
--                 cross-TB waits, become depid/deps (extra ones as nop
--                 steps, as MSCCL requires one dependency per step).
--   3. channels   TBs joined by a connection share one; groups are spread
--                 over channels so that no GPU has more than 32 sending or
--                 receiving TBs on one.
--   4. text       the XML; then note says what the runtimes may not take.
local import = require "resccl.import"

local M = {}

local MAX_COUNT = 71          -- cnt < 72
local MAX_TBS_PER_CHANNEL = 32
local MAX_STEPS_EXECUTOR = 64
local MAX_CHANNELS = 32

local BUF = { input = "i", output = "o", scratch = "s" }

-- Step shapes per primitive kind: { type, sends?, receives?, source }: a
-- send whose source is false sends the primitive's destination (just
-- written); "operand": the step reads the primitive's reduction operand.
local SHAPE = {
  send = { { "s", true, false, true } },
  recv = { { "r", false, true, false } },
  rrc  = { { "rrc", false, true, true } },
  rcs  = { { "rcs", true, true, false } },
  rrcs = { { "rrcs", true, true, true } },
  rrs  = { { "rrs", true, true, true } },
  cs   = { { "cpy", false, false, true }, { "s", true, false, false } },
  copy = { { "cpy", false, false, true } },
  reduce = { { "re", false, false, true } },
}
-- A fused primitive split in two: its receiving half and its sending half.
local SPLIT = { rcs = { "r", "s" }, rrcs = { "rrc", "s" }, rrs = { "rrc", "s" } }

-- ------------------------------------------------------------------- tbs

-- Can MSCCL TB t of a rank (b: its TBs by send and by receive peer) take
-- send peer sp and receive peer rp (-1: none)?
local function fits(b, t, sp, rp)
  return (sp < 0 or t.send == sp or (t.send < 0 and not b.sendtb[sp]))
    and (rp < 0 or t.recv == rp or (t.recv < 0 and not b.recvtb[rp]))
end

-- The MSCCL TB for a primitive of our TB `ours` ({ mine = MSCCL TBs made
-- from it, prev = its last step }) with peers sp and rp: the TB that owns
-- them, for a local step the previous step's, one of ours that fits, or a
-- new one; nil when the peers are owned by two different TBs.
local function place(b, ours, sp, rp)
  local t = (sp >= 0 and b.sendtb[sp]) or (rp >= 0 and b.recvtb[rp])
  if t and not fits(b, t, sp, rp) then return nil end
  if not t then
    if sp < 0 and rp < 0 and ours.prev then return ours.prev.tb end
    for _, c in ipairs(ours.mine) do
      if fits(b, c, sp, rp) then t = c break end
    end
  end
  if not t then
    t = { send = -1, recv = -1, steps = {}, rank = b.rank }
    b.tbs[#b.tbs + 1] = t
    ours.mine[#ours.mine + 1] = t
  end
  if sp >= 0 then t.send, b.sendtb[sp] = sp, t end
  if rp >= 0 then t.recv, b.recvtb[rp] = rp, t end
  return t
end

-- The parts of primitive q, { { MSCCL TB, step shape }, ... }, and the
-- chunk its steps read. Reductions: MSCCL's rrc/rrcs write dst = src (+)
-- received, so the operand is their source; its re writes dst = dst (+)
-- src, so an operand other than the destination is first copied there (or,
-- when the read chunk is the destination, becomes re's source).
local function parts_of(q, b, ours, stats)
  local shapes = SHAPE[q.kind]
  local src = { q.rbuf, q.ridx }
  if q.kind == "rrc" or q.kind == "rrcs" or q.kind == "rrs" then src = { q.ubuf, q.uidx } end
  if q.kind == "reduce" and not (q.ubuf == q.wbuf and q.uidx == q.widx) then
    if q.rbuf == q.wbuf and q.ridx == q.widx then src = { q.ubuf, q.uidx }
    else shapes = { { "cpy", false, false, "operand" }, SHAPE.reduce[1] } end
  end
  local t = place(b, ours, shapes[1][2] and q.send_peer or (shapes[2] and shapes[2][2] and q.send_peer) or -1,
    shapes[1][3] and q.recv_peer or -1)
  if not t then
    -- The two peers already live in different TBs: split the fusion.
    local names = SPLIT[q.kind]
    local tr, ts = place(b, ours, -1, q.recv_peer), place(b, ours, q.send_peer, -1)
    stats.split_prims = stats.split_prims + 1
    return { { tr, { names[1], false, true, names[1] == "rrc" } }, { ts, { "s", true, false, false } } }, src
  end
  local parts = {}
  for _, sh in ipairs(shapes) do parts[#parts + 1] = { t, sh } end
  return parts, src
end

-- The steps of primitive q's parts, at most MAX_COUNT chunks each, on
-- their TBs; each waits (st.deps) for what q waits for (its first step)
-- and for the previous step of our TB when that is on another MSCCL TB.
local function emit(q, parts, src, ours, stats)
  local first = true
  for _, p in ipairs(parts) do
    local tb, sh = p[1], p[2]
    local from = src
    local dst = { q.wbuf, q.widx }
    if sh[1] == "s" and not sh[4] then from = dst end -- sending what was just written
    if sh[4] == "operand" then from = { q.ubuf, q.uidx } end
    local left, off = q.cnt, 0
    while left > 0 do
      local n = math.min(left, MAX_COUNT)
      if n < q.cnt then stats.cut = stats.cut + 1 end
      local st = {
        type = sh[1], tb = tb, cnt = n,
        srcbuf = BUF[from[1]], srcoff = from[2] + off, dstbuf = BUF[dst[1]], dstoff = dst[2] + off, deps = {},
      }
      if sh[1] == "s" then st.dstbuf, st.dstoff = st.srcbuf, st.srcoff end
      if sh[1] == "r" or sh[1] == "rcs" then st.srcbuf, st.srcoff = st.dstbuf, st.dstoff end
      local prev = ours.prev
      if first then
        for _, w in ipairs(q.waits) do st.deps[#st.deps + 1] = { prim = w } end
        if prev and prev.tb ~= tb then st.deps[#st.deps + 1] = { step = prev } end
        first = false
      elseif prev and prev.tb ~= tb then
        st.deps[#st.deps + 1] = { step = prev } -- the send half waits for the receive half
      end
      tb.steps[#tb.steps + 1] = st
      ours.prev = st
      left, off = left - n, off + n
    end
  end
end

--- 1. Per rank, the MSCCL TBs ({ rank, send, recv, steps }) our TBs become;
--- last_of[prim id] is the primitive's last step (what waiters wait for).
local function build_tbs(R, tbs, notes, stats)
  local gpus, last_of = {}, {}
  for r = 0, R - 1 do
    local b = { rank = r, tbs = {}, sendtb = {}, recvtb = {} }
    for _, prims in ipairs(tbs[r + 1]) do
      local ours = { mine = {} }
      for _, q in ipairs(prims) do
        local parts, src = parts_of(q, b, ours, stats)
        emit(q, parts, src, ours, stats)
        last_of[q.id] = ours.prev
      end
      if #ours.mine > 1 then stats.split_tbs = stats.split_tbs + 1 end
    end
    gpus[r] = b.tbs
    notes.tbs_per_rank[r + 1] = #b.tbs
    notes.our_tbs_per_rank[r + 1] = #tbs[r + 1]
  end
  return gpus, last_of
end

-- ------------------------------------------------------------------ deps

-- The steps st of MSCCL TB t waits for, the latest per other TB, in TB
-- and step order (dependencies within t are its program order).
local function waits(st, t, last_of)
  local latest = {}
  for _, d in ipairs(st.deps) do
    local target = d.step or last_of[d.prim]
    if target and target.tb ~= t then
      local cur = latest[target.tb]
      if not cur or target.pos > cur.pos then latest[target.tb] = target end
    end
  end
  local list = {}
  for _, target in pairs(latest) do list[#list + 1] = target end
  table.sort(list, function(a, b)
    if a.tb.id ~= b.tb.id then return a.tb.id < b.tb.id end
    return a.pos < b.pos
  end)
  return list
end

--- 2. Dependencies: each step's depid/deps (st.dep), all but the last of
--- its waits on nop steps before it; TB ids (t.id), step numbers (st.s) and
--- hasdep on the steps waited for.
local function link_deps(gpus, R, last_of)
  for r = 0, R - 1 do
    for ti, t in ipairs(gpus[r]) do
      t.id = ti - 1
      for i, st in ipairs(t.steps) do st.pos = i end
    end
    for _, t in ipairs(gpus[r]) do
      local out = {}
      for _, st in ipairs(t.steps) do
        local list = waits(st, t, last_of)
        for k = 1, #list - 1 do
          out[#out + 1] = { type = "nop", tb = t, cnt = 0, srcbuf = "i", srcoff = -1, dstbuf = "o", dstoff = -1,
            dep = list[k] }
        end
        st.dep = list[#list]
        out[#out + 1] = st
      end
      t.steps = out
      for i, st in ipairs(out) do st.s = i - 1 end
    end
    for _, t in ipairs(gpus[r]) do
      for _, st in ipairs(t.steps) do
        if st.dep then st.dep.hasdep = true end
      end
    end
  end
end

-- -------------------------------------------------------------- channels

local function uf_find(up, x)
  while up[x] ~= x do
    up[x] = up[up[x]]
    x = up[x]
  end
  return x
end

-- The groups of TBs joined by a connection (a send TB and the receive TB
-- of its peer), in the order of their first TB.
local function connected_groups(gpus, R)
  local all, up = {}, {}
  for r = 0, R - 1 do
    for _, t in ipairs(gpus[r]) do
      all[#all + 1] = t
      t.n = #all
      up[#all] = #all
    end
  end
  for r = 0, R - 1 do
    for _, t in ipairs(gpus[r]) do
      if t.send >= 0 then
        for _, u in ipairs(gpus[t.send]) do
          if u.recv == r then up[uf_find(up, t.n)] = uf_find(up, u.n) end
        end
      end
    end
  end
  local groups, order = {}, {}
  for _, t in ipairs(all) do
    local g = uf_find(up, t.n)
    if not groups[g] then groups[g] = {} order[#order + 1] = groups[g] end
    table.insert(groups[g], t)
  end
  return order
end

-- Does channel load l ([rank] = { s, r }) have room for a group's senders
-- and receivers (add, the same shape)?
local function room(l, add)
  for rank, a in pairs(add) do
    local n = l and l[rank] or { s = 0, r = 0 }
    if n.s + a.s > MAX_TBS_PER_CHANNEL or n.r + a.r > MAX_TBS_PER_CHANNEL then return false end
  end
  return true
end

--- 3. Channels (t.chan): each group goes to the lowest channel that keeps
--- every GPU within 32 senders and 32 receivers (the last one when none
--- does: over); returns the number of channels and over.
local function channels(gpus, R)
  local load = {} -- [chan][rank] = { s = n, r = n }
  local nchannels, over = 1, false
  for _, members in ipairs(connected_groups(gpus, R)) do
    local add = {} -- [rank] = { s = n, r = n }: the group's senders and receivers
    for _, t in ipairs(members) do
      local a = add[t.rank] or { s = 0, r = 0 }
      if t.send >= 0 then a.s = a.s + 1 end
      if t.recv >= 0 then a.r = a.r + 1 end
      add[t.rank] = a
    end
    local chan = 0
    while chan < MAX_CHANNELS - 1 and not room(load[chan], add) do chan = chan + 1 end
    if not room(load[chan], add) then over = true end
    load[chan] = load[chan] or {}
    for rank, a in pairs(add) do
      local l = load[chan][rank] or { s = 0, r = 0 }
      l.s, l.r = l.s + a.s, l.r + a.r
      load[chan][rank] = l
    end
    for _, t in ipairs(members) do t.chan = chan end
    if chan + 1 > nchannels then nchannels = chan + 1 end
  end
  return nchannels, over
end

-- ------------------------------------------------------------------ text

--- 4. The XML text (and notes.steps, the steps in it); the most steps of
--- a TB, and whether a step depends on a TB id beyond MSCCL's int8 depid.
local function text(gpus, info, opts, nchannels, notes)
  local R, C, coll = info.ranks, info.chunks, info.collective
  local nin, nout = import.buffer_sizes(coll, R, C)
  local x = {}
  local function w(fmt, ...) x[#x + 1] = fmt:format(...) end
  local inplace = opts.inplace and 1 or 0
  w('<algo name="%s" proto="Simple" nchannels="%d" nchunksperloop="%d" ngpus="%d" coll="%s" inplace="%d" outofplace="%d" minBytes="0" maxBytes="0">',
    (opts.name or info.name):gsub("[<>&\"]", "_"), nchannels, math.max(nin, nout), R, coll, inplace, 1 - inplace)
  local maxsteps, deep = 0, false
  for r = 0, R - 1 do
    w('  <gpu id="%d" i_chunks="%d" o_chunks="%d" s_chunks="%d">', r, nin, nout, info.scratch)
    for _, t in ipairs(gpus[r]) do
      w('    <tb id="%d" send="%d" recv="%d" chan="%d">', t.id, t.send, t.recv, t.chan)
      if #t.steps > maxsteps then maxsteps = #t.steps end
      for _, st in ipairs(t.steps) do
        local depid, deps = -1, -1
        if st.dep then
          depid, deps = st.dep.tb.id, st.dep.s
          if depid >= 128 then deep = true end
        end
        w('      <step s="%d" type="%s" srcbuf="%s" srcoff="%d" dstbuf="%s" dstoff="%d" cnt="%d" depid="%d" deps="%d" hasdep="%d"/>',
          st.s, st.type, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff, st.cnt, depid, deps, st.hasdep and 1 or 0)
        notes.steps = notes.steps + 1
      end
      w("    </tb>")
    end
    w("  </gpu>")
  end
  w("</algo>")
  return table.concat(x, "\n") .. "\n", maxsteps, deep
end

-- What the runtimes may not take, or read otherwise (notes.lines).
local function note(notes, stats, coll, maxsteps, over, deep)
  local L = notes.lines
  if stats.split_tbs > 0 then
    L[#L + 1] = ("%d of our TBs talk to more than one send or receive peer and became several MSCCL TBs (one send and one receive peer each)"):format(stats.split_tbs)
  end
  if stats.split_prims > 0 then
    L[#L + 1] = ("%d fused primitives were split into a receive and a send in different MSCCL TBs"):format(stats.split_prims)
  end
  if stats.cut > 0 then L[#L + 1] = ("%d steps were cut to cnt <= %d"):format(stats.cut, MAX_COUNT) end
  if maxsteps > MAX_STEPS_EXECUTOR then
    L[#L + 1] = ("a TB has %d steps; the MSCCL executor's default limit is %d (raise MSCCL_MAX_NUM_STEPS)"):format(maxsteps, MAX_STEPS_EXECUTOR)
  end
  if over then L[#L + 1] = ("some GPU has more than %d sending or receiving TBs on one channel"):format(MAX_TBS_PER_CHANNEL) end
  if deep then L[#L + 1] = "a step depends on a TB with id >= 128, beyond MSCCL's int8 depid" end
  if coll == "reducescatter" then
    L[#L + 1] = "coll=\"reducescatter\" is the executor's spelling; microsoft/msccl v0.7 reads \"reduce_scatter\""
  end
end

--- Write a plan as MSCCL XML: the passes of the header, in order.
---@param plan userdata a verified plan (core.compile)
---@param prog userdata its program
---@param opts table { name=, inplace= }
---@return string xml, table notes { lines, tbs_per_rank, our_tbs_per_rank, steps }
function M.write(plan, prog, opts)
  opts = opts or {}
  local info = prog:info()
  local notes = { lines = {}, tbs_per_rank = {}, our_tbs_per_rank = {}, steps = 0 }
  local stats = { split_tbs = 0, split_prims = 0, cut = 0 }
  local gpus, last_of = build_tbs(info.ranks, plan:tbs(), notes, stats)
  link_deps(gpus, info.ranks, last_of)
  local nchannels, over = channels(gpus, info.ranks)
  local xml, maxsteps, deep = text(gpus, info, opts, nchannels, notes)
  note(notes, stats, info.collective, maxsteps, over, deep)
  return xml, notes
end

return M
