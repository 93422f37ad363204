--- A compiled plan -> MSCCL XML, for the MSCCL executor (Azure/msccl-executor-nccl) and RCCL.
--
-- Our TBs run primitives in pipeline order and may talk to several peers
-- over time; an MSCCL TB owns at most one send peer and one receive peer
-- (one NCCL connection each). So each of our TBs becomes one or more MSCCL
-- TBs: a primitive goes to the TB that already owns its peers, or to a new
-- one; a fused primitive whose two peers live in different TBs is split into
-- its receive and its send. Order inside our TB that the split would lose,
-- and our cross-TB waits, become depid/deps (extra ones as nop steps, as
-- MSCCL requires one dependency per step). copySend becomes cpy + s.
-- Channels: TBs joined by a connection share one; groups are spread over
-- channels so that no GPU has more than 32 sending or receiving TBs on one.
local M = {}

local MAX_COUNT = 71          -- cnt < 72
local MAX_TBS_PER_CHANNEL = 32
local MAX_STEPS_EXECUTOR = 64
local MAX_CHANNELS = 32

local BUF = { input = "i", output = "o", scratch = "s" }

-- Step shapes per primitive kind: { type, send?, recv?, uses src?, uses dst? }
local SHAPE = {
  send = { { "s", true, false, true, false } },
  recv = { { "r", false, true, false, true } },
  rrc  = { { "rrc", false, true, true, true } },
  rcs  = { { "rcs", true, true, false, true } },
  rrcs = { { "rrcs", true, true, true, true } },
  rrs  = { { "rrs", true, true, true, false } },
  cs   = { { "cpy", false, false, true, true }, { "s", true, false, false, true } },
  copy = { { "cpy", false, false, true, true } },
  reduce = { { "re", false, false, true, true } },
}
-- A fused primitive split in two: its receiving half and its sending half.
local SPLIT = { rcs = { "r", "s" }, rrcs = { "rrc", "s" }, rrs = { "rrc", "s" } }

local function uf_find(up, x)
  while up[x] ~= x do
    up[x] = up[up[x]]
    x = up[x]
  end
  return x
end

--- Write a plan as MSCCL XML.
---@param plan userdata a verified plan (core.compile)
---@param prog userdata its program
---@param opts table { name=, inplace= }
---@return string xml, table notes { lines, tbs_per_rank, our_tbs_per_rank, steps }
function M.write(plan, prog, opts)
  opts = opts or {}
  local info = prog:info()
  local R, C, coll = info.ranks, info.chunks, info.collective
  local tbs = plan:tbs()
  local notes = { lines = {}, tbs_per_rank = {}, our_tbs_per_rank = {}, steps = 0 }
  local nsplit_tb, nsplit_prim, ncnt = 0, 0, 0

  -- 1. Per rank: MSCCL TBs, each { send, recv, steps = { step ... } }.
  local gpus = {}
  local last_of = {} -- prim id -> its last step (what waiters wait for)
  for r = 0, R - 1 do
    local mtbs, sendtb, recvtb = {}, {}, {}
    local function new_tb()
      local t = { send = -1, recv = -1, steps = {}, rank = r }
      mtbs[#mtbs + 1] = t
      return t
    end
    for _, prims in ipairs(tbs[r + 1]) do
      local mine = {}  -- MSCCL TBs made from this TB of ours
      local prev      -- last step of the previous primitive of our TB
      local function fits(t, sp, rp)
        return (sp < 0 or t.send == sp or (t.send < 0 and not sendtb[sp]))
          and (rp < 0 or t.recv == rp or (t.recv < 0 and not recvtb[rp]))
      end
      local function place(sp, rp)
        local t = (sp >= 0 and sendtb[sp]) or (rp >= 0 and recvtb[rp])
        if t and not fits(t, sp, rp) then return nil end
        if not t then
          if sp < 0 and rp < 0 and prev then return prev.tb end
          for _, c in ipairs(mine) do
            if fits(c, sp, rp) then t = c break end
          end
        end
        if not t then
          t = new_tb()
          mine[#mine + 1] = t
        end
        if sp >= 0 then t.send, sendtb[sp] = sp, t end
        if rp >= 0 then t.recv, recvtb[rp] = rp, t end
        return t
      end
      for _, q in ipairs(prims) do
        local shapes = SHAPE[q.kind]
        -- Reductions: MSCCL's rrc/rrcs write dst = src (+) received, so the
        -- operand is their source; its re writes dst = dst (+) src, so an
        -- operand other than the destination is first copied there (or, when
        -- the read chunk is the destination, becomes re's source).
        local src = { q.rbuf, q.ridx }
        if q.kind == "rrc" or q.kind == "rrcs" or q.kind == "rrs" then src = { q.ubuf, q.uidx } end
        if q.kind == "reduce" and not (q.ubuf == q.wbuf and q.uidx == q.widx) then
          if q.rbuf == q.wbuf and q.ridx == q.widx then src = { q.ubuf, q.uidx }
          else shapes = { { "cpy", false, false, "operand", true }, SHAPE.reduce[1] } end
        end
        local t = place(shapes[1][2] and q.send_peer or (shapes[2] and shapes[2][2] and q.send_peer) or -1,
          shapes[1][3] and q.recv_peer or -1)
        local parts -- { { tb, shape } ... }
        if t then
          parts = {}
          for _, sh in ipairs(shapes) do parts[#parts + 1] = { t, sh } end
        else
          -- The two peers already live in different TBs: split the fusion.
          local names = SPLIT[q.kind]
          local tr, ts = place(-1, q.recv_peer), place(q.send_peer, -1)
          parts = { { tr, { names[1], false, true, names[1] == "rrc", true } }, { ts, { "s", true, false, false, true } } }
          nsplit_prim = nsplit_prim + 1
        end
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
            if n < q.cnt then ncnt = ncnt + 1 end
            local st = {
              type = sh[1], tb = tb, cnt = n, prim = q.id,
              srcbuf = BUF[from[1]], srcoff = from[2] + off, dstbuf = BUF[dst[1]], dstoff = dst[2] + off, deps = {},
            }
            if sh[1] == "s" then st.dstbuf, st.dstoff = st.srcbuf, st.srcoff end
            if sh[1] == "r" or sh[1] == "rcs" then st.srcbuf, st.srcoff = st.dstbuf, st.dstoff end
            if first then
              for _, w in ipairs(q.waits) do st.deps[#st.deps + 1] = { prim = w } end
              if prev and prev.tb ~= tb then st.deps[#st.deps + 1] = { step = prev } end
              first = false
            elseif prev and prev.tb ~= tb then
              st.deps[#st.deps + 1] = { step = prev } -- the send half waits for the receive half
            end
            tb.steps[#tb.steps + 1] = st
            prev = st
            left, off = left - n, off + n
          end
        end
        last_of[q.id] = prev
      end
      if #mine > 1 then nsplit_tb = nsplit_tb + 1 end
    end
    gpus[r] = mtbs
    notes.tbs_per_rank[r + 1] = #mtbs
    notes.our_tbs_per_rank[r + 1] = #tbs[r + 1]
  end

  -- 2. Dependencies: resolve, drop those implied by TB order, keep the
  -- latest per TB, and put all but one on nop steps before the step.
  for r = 0, R - 1 do
    for ti, t in ipairs(gpus[r]) do t.id = ti - 1 end
    for _, t in ipairs(gpus[r]) do
      for i, st in ipairs(t.steps) do st.pos = i end
    end
    for _, t in ipairs(gpus[r]) do
      local out = {}
      for _, st in ipairs(t.steps) do
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

  -- 3. Channels: TBs joined by a connection form a group; groups go to the
  -- lowest channel that keeps every GPU within 32 senders and 32 receivers.
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
    if not groups[g] then groups[g] = {} order[#order + 1] = g end
    table.insert(groups[g], t)
  end
  local load = {} -- [chan][rank] = { s = n, r = n }
  local nchannels, over = 1, false
  for _, g in ipairs(order) do
    local members = groups[g]
    local chan = 0
    while true do
      local ok = true
      local add = {}
      for _, t in ipairs(members) do
        local a = add[t.rank] or { s = 0, r = 0 }
        if t.send >= 0 then a.s = a.s + 1 end
        if t.recv >= 0 then a.r = a.r + 1 end
        add[t.rank] = a
      end
      for rank, a in pairs(add) do
        local l = load[chan] and load[chan][rank] or { s = 0, r = 0 }
        if l.s + a.s > MAX_TBS_PER_CHANNEL or l.r + a.r > MAX_TBS_PER_CHANNEL then ok = false end
      end
      if ok or chan == MAX_CHANNELS - 1 then
        if not ok then over = true end
        load[chan] = load[chan] or {}
        for rank, a in pairs(add) do
          local l = load[chan][rank] or { s = 0, r = 0 }
          l.s, l.r = l.s + a.s, l.r + a.r
          load[chan][rank] = l
        end
        for _, t in ipairs(members) do t.chan = chan end
        if chan + 1 > nchannels then nchannels = chan + 1 end
        break
      end
      chan = chan + 1
    end
  end

  -- 4. Text.
  local sizes = {
    i = (coll == "reducescatter" or coll == "alltoall") and R * C or C,
    o = (coll == "allgather" or coll == "alltoall") and R * C or C,
  }
  local nchunks = math.max(sizes.i, sizes.o)
  local x = {}
  local function w(fmt, ...) x[#x + 1] = fmt:format(...) end
  local inplace = opts.inplace and 1 or 0
  w('<algo name="%s" proto="Simple" nchannels="%d" nchunksperloop="%d" ngpus="%d" coll="%s" inplace="%d" outofplace="%d" minBytes="0" maxBytes="0">',
    (opts.name or info.name):gsub("[<>&\"]", "_"), nchannels, nchunks, R, coll, inplace, 1 - inplace)
  local maxsteps, deep = 0, false
  for r = 0, R - 1 do
    w('  <gpu id="%d" i_chunks="%d" o_chunks="%d" s_chunks="%d">', r, sizes.i, sizes.o, info.scratch)
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

  local L = notes.lines
  if nsplit_tb > 0 then
    L[#L + 1] = ("%d of our TBs talk to more than one send or receive peer and became several MSCCL TBs (one send and one receive peer each)"):format(nsplit_tb)
  end
  if nsplit_prim > 0 then
    L[#L + 1] = ("%d fused primitives were split into a receive and a send in different MSCCL TBs"):format(nsplit_prim)
  end
  if ncnt > 0 then L[#L + 1] = ("%d steps were cut to cnt <= %d"):format(ncnt, MAX_COUNT) end
  if maxsteps > MAX_STEPS_EXECUTOR then
    L[#L + 1] = ("a TB has %d steps; the MSCCL executor's default limit is %d (raise MSCCL_MAX_NUM_STEPS)"):format(maxsteps, MAX_STEPS_EXECUTOR)
  end
  if over then L[#L + 1] = ("some GPU has more than %d sending or receiving TBs on one channel"):format(MAX_TBS_PER_CHANNEL) end
  if deep then L[#L + 1] = "a step depends on a TB with id >= 128, beyond MSCCL's int8 depid" end
  if coll == "reducescatter" then
    L[#L + 1] = "coll=\"reducescatter\" is the executor's spelling; microsoft/msccl v0.7 reads \"reduce_scatter\""
  end
  return table.concat(x, "\n") .. "\n", notes
end

return M
