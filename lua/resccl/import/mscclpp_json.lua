--- MSCCL++ execution plans (JSON, the 2025 schema) -> transfers.
--
-- A plan lists, per GPU, thread blocks (TBs) that each run a list of ops in
-- order. Data ops move chunk ranges ({index, size}) of the GPU's own buffers
-- ({type = i|o|s}) or of another GPU's ({buffer_id}: an index into the TB's
-- remote_buffer_refs of the op's channel type, which name entries of the
-- GPU's remote_buffers, each a rank and a buffer). Sync ops signal and wait
-- on channels: a GPU's channels of one type, flattened in connected_to
-- order, are its channel ids, a TB's channel_ids index those, and the k-th
-- channel of a type from A to B is paired with the k-th from B to A. TBs of
-- one GPU also meet at barriers and take and give GPU semaphores, and a read
-- of LL packets waits until the packets are written.
--
-- Import happens in four passes:
--   1. read      cjson decodes; a scan of the text finds each op's line.
--                Channels, remote buffers and chunk ranges are resolved and
--                checked; ops that do not move data as transfers (NVLS
--                multimem, pipelines) are refused, and so are plans in the
--                2024 schema (inputChunks, ops with srcs/dsts).
--   2. normalise in-place aliases become the one buffer the core keeps in
--                place, and tbg_info (a group of TBs sharing an op, each
--                doing a slice) splits every chunk into as many parts as the
--                groups need, so each slice is a transfer.
--   3. run       the executor's semantics at chunk level: per-TB program
--                order; the k-th wait on a channel takes the k-th signal sent
--                on its pair; a barrier opens when num_threadblocks TBs are
--                in it; an acquire takes a release (or an initial count); a
--                packet read waits for the packet write. Each op gets a round
--                (one more than anything it waited for); a TB that never
--                finishes is a deadlock. Vector clocks check that any two
--                accesses to a chunk, one of them a write, are ordered by
--                that synchronisation: if not, the result depends on timing.
--   4. transfers the data ops in round order: a copy moves src[i] to dst[i];
--                a reduction dst[1] = src[1] (+) src[2..] is a copy into
--                dst[1] (none when it is in place) and one reduce per further
--                source, and its result goes on to dst[2..] as copies.
local import = require "resccl.import"

local M = {}

M.format = "MSCCL++ JSON"

local MAX_RANKS = 1024
local MAX_CHUNKS = 1 << 20
local MAX_OPS_PER_TB = 64  -- MAX_OPERATION in the executor
local MAX_SPLIT = 64       -- parts of a chunk that tbg_info may ask for
local MAX_RACE_TBS = 1024  -- TBs the race check keeps vector clocks for
local MAX_TOUCHES = 1 << 22 -- chunk parts the ops read and write, summed

local COLLS = {
  allreduce = "allreduce", allgather = "allgather", alltoall = "alltoall",
  reducescatter = "reducescatter", reduce_scatter = "reducescatter",
}
local BUFS = { i = "input", o = "output", s = "scratch" }
local BUF_CODE = { input = 0, output = 1, scratch = 2 }

-- Data ops. src/dst: Lua patterns over the kinds of the src_buff and
-- dst_buff entries ("L" a chunk range of the GPU's own buffers, "R" one of
-- another GPU's). pairs: src[i] -> dst[i]; otherwise dst[1] = src[1] (+)
-- src[2..], also written to dst[2..]. fan: pairs, but the one source goes to
-- every destination. port: may reach remote buffers through port channels
-- (the others read and write them through memory channels only). signal:
-- also signals the port channel of each pair. pkt_in/pkt_out: the entries
-- read / written as LL packets, "all" or "rest" (all but the first).
local DATA = {
  copy    = { pairs = true, src = "^L$", dst = "^L$" },
  put     = { pairs = true, src = "^L+$", dst = "^R+$", port = true },
  pws     = { pairs = true, src = "^L+$", dst = "^R+$", port = true, signal = true },
  pwsf    = { pairs = true, src = "^L+$", dst = "^R+$", port = true, signal = true },
  get     = { pairs = true, src = "^R+$", dst = "^L+$" },
  re      = { src = "^L+$", dst = "^L$" },
  res     = { src = "^L+$", dst = "^LR*$" },
  rre     = { src = "^LR+$", dst = "^L$" },
  rres    = { src = "^LR+$", dst = "^LR*$" },
  ppkt    = { pairs = true, src = "^L+$", dst = "^R+$", port = true, pkt_out = "all" },
  rppkt   = { pairs = true, fan = true, src = "^L$", dst = "^R+$", port = true, pkt_in = "all", pkt_out = "all" },
  cpkt    = { pairs = true, src = "^L$", dst = "^L$", pkt_out = "all" },
  upkt    = { pairs = true, src = "^L$", dst = "^L$", pkt_in = "all" },
  repkt   = { src = "^L+$", dst = "^L$", pkt_in = "rest" },
  respkt  = { src = "^L+$", dst = "^LR*$", pkt_in = "rest", pkt_out = "rest" },
  recpkt  = { src = "^L+$", dst = "^LL$", pkt_in = "rest", pkt_out = "rest" },
  recspkt = { src = "^L+$", dst = "^LLR*$", pkt_in = "rest", pkt_out = "rest" },
}
local KINDS = {
  ["^L$"] = "one local chunk range", ["^L+$"] = "local chunk ranges", ["^R+$"] = "remote chunk ranges",
  ["^LR+$"] = "a local chunk range, then remote ones", ["^LR*$"] = "a local chunk range, then any remote ones",
  ["^LL$"] = "two local chunk ranges", ["^LLR*$"] = "two local chunk ranges, then any remote ones",
}

-- Sync ops and what they do; nop (__syncthreads) and flush (completion of
-- the TB's own port puts) order nothing beyond the TB's program order.
local SYNC = {
  nop = "none", flush = "none", signal = "signal", rlxsignal = "signal", wait = "wait", rlxwait = "wait",
  barrier = "barrier", sem_acquire = "acquire", sem_release = "release",
}

-- Ops that are not data movement between chunk ranges.
local REFUSED = {
  glres = "an NVLS multimem load-reduce-store (switch channel)",
  gstore = "an NVLS multimem store (switch channel)",
  gstorepkt = "an NVLS multimem packet store (switch channel)",
  pipeline = "a loop over byte units whose number depends on the message size",
}

-- ------------------------------------------------------------------ lines

--- Byte offsets of the objects and arrays of a JSON text that cjson
--- accepted, in the shape of the decoded value: node.kids[key or index].
---@param text string
---@return table|nil root { at = offset, kids = {...} }
local function positions(text)
  local i = 1
  local function ws() i = text:find("[^ \t\r\n]", i) or #text + 1 end
  local function str() -- at the opening quote; returns the raw contents
    local j = i + 1
    while true do
      local q = text:find('["\\]', j)
      if text:byte(q) == 92 then
        j = q + 2
      else
        local s = text:sub(i + 1, q - 1)
        i = q + 1
        return s
      end
    end
  end
  local function value()
    ws()
    local c = text:sub(i, i)
    if c == '"' then
      str()
      return nil
    elseif c ~= "{" and c ~= "[" then
      i = text:find("[,%]}%s]", i) or #text + 1
      return nil
    end
    local node, close, n = { at = i, kids = {} }, c == "{" and "}" or "]", 0
    i = i + 1
    ws()
    if text:sub(i, i) == close then
      i = i + 1
      return node
    end
    repeat
      local k
      if c == "{" then
        ws()
        k = str()
        ws()
        i = i + 1 -- the colon
      else
        n = n + 1
        k = n
      end
      node.kids[k] = value()
      ws()
      local sep = text:sub(i, i)
      i = i + 1
    until sep == close
    return node
  end
  return value()
end

--- A function from byte offset to line number.
local function liner(text)
  local nl = {}
  for p in text:gmatch "()\n" do nl[#nl + 1] = p end
  return function(at)
    local lo, hi = 1, #nl -- count newlines before `at`
    while lo <= hi do
      local mid = (lo + hi) // 2
      if nl[mid] < at then lo = mid + 1 else hi = mid - 1 end
    end
    return lo
  end
end

-- ------------------------------------------------------------------ read

--- Read and check the plan; returns the plan description.
local function read(text, path)
  local obj, null = import.json_decode(text, path)
  local root, lineof = positions(text), liner(text)
  local function fail(line, fmt, ...) error(("%s:%d: " .. fmt):format(path, line, ...), 0) end
  -- The line of the deepest node that exists along a path of keys.
  local function line_at(...)
    local node, at = root, 1
    for k = 1, select("#", ...) do
      node = node and node.kids[select(k, ...)]
      if not node then break end
      at = node.at
    end
    return lineof(at)
  end
  local function shown(v) return import.shown(v, null) end
  local function int(v, what, line, lo, hi)
    local n = math.type(v) and math.tointeger(v)
    if not n or n < lo or n > hi then fail(line, "%s must be an integer in %d..%d, got %s", what, lo, hi, shown(v)) end
    return n
  end
  local function list(v, what, line, optional)
    if v == nil and optional then return {} end
    local ok = type(v) == "table"
    if ok then
      local n = #v
      for k in pairs(v) do
        if math.type(k) ~= "integer" or k < 1 or k > n then ok = false break end
      end
    end
    if not ok then fail(line, "%s must be a list, got %s", what, shown(v)) end
    return v
  end
  local function object(v, what, line)
    if type(v) ~= "table" then fail(line, "%s must be an object, got %s", what, shown(v)) end
    return v
  end

  if type(obj) ~= "table" then fail(1, "expected a JSON object") end
  local plan = { path = path, warnings = {} }
  local g1 = type(obj.gpus) == "table" and obj.gpus[1]
  if obj.colletive ~= nil or type(g1) == "table" and g1.inputChunks ~= nil then
    fail(line_at("gpus", 1), "an MSCCL++ plan in the 2024 schema (inputChunks, ops with srcs/dsts); resccl reads the "
      .. "current one (input_chunks, src_buff/dst_buff): regenerate the plan with MSCCL++'s DSL")
  end
  if type(obj.collective) ~= "string" then
    fail(line_at "collective", "'collective' must be a string, got %s", shown(obj.collective))
  end
  plan.coll = COLLS[obj.collective:lower()]
  if not plan.coll then
    fail(line_at "collective", "collective '%s' is not supported (allreduce, allgather, reducescatter, alltoall)",
      obj.collective:sub(1, 40))
  end
  if type(obj.inplace) ~= "boolean" then
    fail(line_at "inplace", "'inplace' must be true or false, got %s", shown(obj.inplace))
  end
  plan.inplace = obj.inplace
  plan.protocol = obj.protocol == nil and "Simple" or obj.protocol
  if plan.protocol ~= "Simple" and plan.protocol ~= "LL" then
    fail(line_at "protocol", "'protocol' must be Simple or LL, got %s", shown(obj.protocol))
  end
  plan.name = type(obj.name) == "string" and obj.name or path:match "([^/]+)%.[^.]*$" or "mscclpp"
  local gpus = list(obj.gpus, "'gpus'", line_at "gpus")
  local R = #gpus
  if R < 2 or R > MAX_RANKS then fail(line_at "gpus", "%d GPUs; a plan needs 2..%d", R, MAX_RANKS) end
  plan.ranks = R

  -- Per GPU: buffer sizes, channels, remote buffers, semaphores.
  local G = {}
  for r = 0, R - 1 do
    local gl = line_at("gpus", r + 1)
    local where = ("gpus[%d]"):format(r)
    local g = object(gpus[r + 1], where, gl)
    local id = int(g.id, where .. ".id", gl, 0, MAX_RANKS)
    if id ~= r then fail(gl, "%s has id %d; GPU ids must be 0..%d in order", where, id, R - 1) end
    local gpu = { rank = r, line = gl, size = {}, chan = { memory = {}, port = {} }, back = { memory = {}, port = {} },
      rbuf = {}, sems = {}, tbs = {} }
    for key, buf in pairs { input_chunks = "input", output_chunks = "output", scratch_chunks = "scratch" } do
      gpu.size[buf] = int(g[key], where .. "." .. key, gl, 0, MAX_CHUNKS)
    end
    -- Channel ids per type, in connected_to order; back[type][peer][k] is
    -- the id of the k-th channel of that type to peer.
    for k, c in ipairs(list(g.channels, where .. ".channels", gl, true)) do
      local cl = line_at("gpus", r + 1, "channels", k)
      local cw = ("%s.channels[%d]"):format(where, k - 1)
      local ty = object(c, cw, cl).channel_type
      if ty == nil and c.type ~= nil then
        ty = c.type
        plan.warnings[#plan.warnings + 1] = ("%s:%d: %s names its type with 'type'; the executor reads 'channel_type'")
          :format(path, cl, cw)
      end
      if ty == "memory" or ty == "port" then
        for j, p in ipairs(list(c.connected_to, cw .. ".connected_to", cl)) do
          local peer = int(p, ("%s.connected_to[%d]"):format(cw, j - 1), cl, 0, R - 1)
          if peer == r then fail(cl, "%s connects gpu %d to itself", cw, r) end
          local back = gpu.back[ty][peer] or {}
          gpu.back[ty][peer] = back
          back[#back + 1] = #gpu.chan[ty]
          gpu.chan[ty][#gpu.chan[ty] + 1] = { peer = peer, nth = #back }
        end
      elseif ty ~= "switch" then
        fail(cl, "%s.channel_type must be memory, port or switch, got %s", cw, shown(ty))
      end
    end
    for k, b in ipairs(list(g.remote_buffers, where .. ".remote_buffers", gl, true)) do
      local bl = line_at("gpus", r + 1, "remote_buffers", k)
      local bw = ("%s.remote_buffers[%d]"):format(where, k - 1)
      object(b, bw, bl)
      local rb = { rank = int(b.rank, bw .. ".rank", bl, 0, R - 1), buf = BUFS[b.type], access = {} }
      if not rb.buf then fail(bl, "%s.type must be i, o or s, got %s", bw, shown(b.type)) end
      for j, a in ipairs(list(b.access_channel_types, bw .. ".access_channel_types", bl)) do
        if a ~= "memory" and a ~= "port" then
          fail(bl, "%s.access_channel_types[%d] must be memory or port, got %s", bw, j - 1, shown(a))
        end
        rb.access[a] = true
      end
      gpu.rbuf[k] = rb
    end
    for k, s in ipairs(list(g.semaphores, where .. ".semaphores", gl, true)) do
      local sw = ("%s.semaphores[%d]"):format(where, k - 1)
      gpu.sems[k] = int(object(s, sw, gl).init_value, sw .. ".init_value", gl, 0, 1 << 20)
    end
    G[r] = gpu
  end

  -- A chunk range { type | buffer_id, index, size } of an op, resolved to
  -- { rank, buf, idx, n, remote }.
  local function ref(e, what, ol, tb, ctype)
    object(e, what, ol)
    local x = { idx = int(e.index, what .. ".index", ol, 0, MAX_CHUNKS), n = int(e.size, what .. ".size", ol, 1, MAX_CHUNKS) }
    if e.switch_channel_id ~= nil then
      fail(ol, "%s addresses an NVLS switch channel; multimem access cannot be expressed as transfers", what)
    elseif e.buffer_id ~= nil then
      if ctype ~= "memory" and ctype ~= "port" then
        fail(ol, "%s is a remote buffer, but the op's channel_type is %s (memory or port)", what, shown(ctype))
      end
      local refs = tb.rref[ctype]
      local id = int(e.buffer_id, what .. ".buffer_id", ol, 0, MAX_CHUNKS)
      if id >= #refs then
        fail(ol, "%s.buffer_id=%d, but gpu %d tb %d has %d remote buffer%s for %s channels", what, id, tb.rank, tb.id,
          #refs, #refs == 1 and "" or "s", ctype)
      end
      local rb = G[tb.rank].rbuf[refs[id + 1]]
      x.rank, x.buf, x.remote = rb.rank, rb.buf, true
    else
      x.rank, x.buf = tb.rank, BUFS[e.type]
      if not x.buf then fail(ol, "%s.type must be i, o or s, got %s", what, shown(e.type)) end
    end
    local size = G[x.rank].size[x.buf]
    if x.idx + x.n > size then
      fail(ol, "%s: chunks %d..%d are out of range: gpu %d's %s buffer has %d chunks", what, x.idx, x.idx + x.n - 1,
        x.rank, x.buf, size)
    end
    return x
  end

  -- Channel ids of an op, through its TB's list, as GPU channel ids.
  local function chans(o, what, ol, tb, ctype)
    local ids = {}
    for j, c in ipairs(list(o.channel_ids, what .. " channel_ids", ol)) do
      local k = int(c, ("%s channel_ids[%d]"):format(what, j - 1), ol, 0, MAX_CHUNKS)
      if k >= #tb.chan[ctype] then
        fail(ol, "%s uses %s channel %d, but gpu %d tb %d has %d", what, ctype, k, tb.rank, tb.id, #tb.chan[ctype])
      end
      ids[j] = tb.chan[ctype][k + 1]
    end
    return ids
  end

  local barriers = {} -- "rank:id" -> { n, line }
  local op_types, nops, split = {}, 0, 1
  local function gcd(a, b)
    while b ~= 0 do a, b = b, a % b end
    return a
  end

  --- One op of a TB.
  local function read_op(o, tb, k, ol)
    local what = ("gpu %d tb %d op %d"):format(tb.rank, tb.id, k - 1)
    object(o, what, ol)
    local name = o.name
    if type(name) ~= "string" then fail(ol, "%s has no name", what) end
    what = ("%s (%s)"):format(what, name)
    if REFUSED[name] then fail(ol, "%s is %s; it cannot be expressed as transfers", what, REFUSED[name]) end
    local op = { name = name, line = ol, tb = tb, idx = k - 1, what = what }
    local ctype = o.channel_type
    op_types[name] = (op_types[name] or 0) + 1
    nops = nops + 1
    if SYNC[name] then
      op.sync = SYNC[name]
      if op.sync == "signal" or op.sync == "wait" then
        if ctype ~= "memory" and ctype ~= "port" then
          fail(ol, "%s: channel_type must be memory or port, got %s", what, shown(ctype))
        end
        op.ctype, op.chans = ctype, chans(o, what, ol, tb, ctype)
      elseif op.sync == "barrier" then
        op.barrier = int(o.barrier_id, what .. " barrier_id", ol, 0, MAX_CHUNKS)
        op.n = int(o.num_threadblocks, what .. " num_threadblocks", ol, 1, tb.ntbs)
        local key = tb.rank .. ":" .. op.barrier
        local b = barriers[key]
        if b and b.n ~= op.n then
          fail(ol, "%s: barrier %d of gpu %d has num_threadblocks %d here but %d at line %d", what, op.barrier, tb.rank,
            op.n, b.n, b.line)
        end
        barriers[key] = b or { n = op.n, line = ol }
      elseif op.sync == "acquire" or op.sync == "release" then
        op.sems = {}
        local nsem = #G[tb.rank].sems
        for j, s in ipairs(list(o.semaphore_ids, what .. " semaphore_ids", ol)) do
          op.sems[j] = int(s, ("%s semaphore_ids[%d]"):format(what, j - 1), ol, 0, nsem - 1)
        end
      end
      return op
    end
    local D = DATA[name]
    if not D then fail(ol, "%s: unknown op '%s'", what, name:sub(1, 40)) end
    op.data = D
    if ctype ~= nil and ctype ~= "memory" and ctype ~= "port" and ctype ~= "none" and ctype ~= "switch" then
      fail(ol, "%s: channel_type must be memory, port, switch or none, got %s", what, shown(ctype))
    end
    if ctype == "port" and not D.port then
      fail(ol, "%s: only put, pws, pwsf, ppkt and rppkt use port channels; this op reaches remote buffers through "
        .. "memory channels", what)
    end
    for _, side in ipairs { "src", "dst" } do
      local refs, kinds = {}, {}
      for j, e in ipairs(list(o[side .. "_buff"], ("%s %s_buff"):format(what, side), ol)) do
        refs[j] = ref(e, ("%s %s_buff[%d]"):format(what, side, j - 1), ol, tb, ctype)
        kinds[j] = refs[j].remote and "R" or "L"
      end
      kinds = table.concat(kinds)
      if not kinds:match(D[side]) then
        fail(ol, "%s: %s_buff must be %s, got %s", what, side, KINDS[D[side]],
          #kinds == 0 and "none" or kinds:gsub("L", "local "):gsub("R", "remote "):gsub(" $", ""):gsub(" ", ", "))
      end
      op[side] = refs
    end
    if D.pairs and not D.fan and #op.src ~= #op.dst then
      fail(ol, "%s has %d src_buff and %d dst_buff entries; they go in pairs", what, #op.src, #op.dst)
    end
    for j, x in ipairs(op.dst) do
      local s = D.pairs and not D.fan and op.src[j] or op.src[1]
      if x.n ~= s.n then fail(ol, "%s moves %d chunk%s into %d", what, s.n, s.n == 1 and "" or "s", x.n) end
    end
    for j = 2, D.pairs and 1 or #op.src do
      if op.src[j].n ~= op.src[1].n then fail(ol, "%s reduces ranges of %d and %d chunks", what, op.src[1].n, op.src[j].n) end
    end
    if not D.pairs and o.reduce_op ~= nil and o.reduce_op ~= "sum" then
      plan.warnings[#plan.warnings + 1] = ("%s:%d: %s reduces with %s; resccl reduces with the run's op (op=, sum by "
        .. "default)"):format(path, ol, what, shown(o.reduce_op))
    end
    -- The executor's get copies remote chunk dst.index into local chunk
    -- src.index: the same when the two indices agree, as MSCCL++'s DSL
    -- writes them.
    for j, x in ipairs(name == "get" and op.src or {}) do
      if x.idx ~= op.dst[j].idx then
        plan.warnings[#plan.warnings + 1] = ("%s:%d: %s src_buff[%d] reads chunk %d and dst_buff[%d] writes chunk %d; "
          .. "MSCCL++'s executor (handleGet) swaps the two offsets, imported as written"):format(path, ol, what, j - 1,
          x.idx, j - 1, op.dst[j].idx)
      end
    end
    -- LL packets live in scratch (at twice the offset, with flags).
    for side, which in pairs { src = D.pkt_in, dst = D.pkt_out } do
      for j = which == "rest" and 2 or 1, which and #op[side] or 0 do
        local x = op[side][j]
        if x.buf ~= "scratch" then
          fail(ol, "%s: %s_buff[%d] is LL packets, which live in scratch, not in gpu %d's %s buffer", what, side, j - 1,
            x.rank, x.buf)
        end
        x.pkt = true
      end
    end
    -- Through a port channel, each remote chunk range is reached over the
    -- channel of its pair, whose peer must own it; pws/pwsf signal it.
    if ctype == "port" then
      local ids = chans(o, what, ol, tb, "port")
      for j, x in ipairs(op.dst) do
        local c = ids[j]
        if c == nil then fail(ol, "%s: dst_buff[%d] has no port channel in channel_ids", what, j - 1) end
        local peer = G[tb.rank].chan.port[c + 1].peer
        if peer ~= x.rank then
          fail(ol, "%s writes gpu %d's %s buffer over port channel %d, which connects to gpu %d", what, x.rank, x.buf, c, peer)
        end
      end
      if D.signal then op.ctype, op.chans = "port", ids end
    end
    if o.tbg_info ~= nil then
      local t = object(o.tbg_info, what .. " tbg_info", ol)
      local n = int(t.tbg_size, what .. " tbg_info.tbg_size", ol, 1, MAX_SPLIT)
      op.tbg = { int(t.tb_id, what .. " tbg_info.tb_id", ol, 0, n - 1), n }
      split = split // gcd(split, n) * n
      if split > MAX_SPLIT then
        fail(ol, "%s: the thread-block groups' sizes need every chunk cut into %d parts (at most %d)", what, split,
          MAX_SPLIT)
      end
    end
    return op
  end

  for r = 0, R - 1 do
    local gpu = G[r]
    local where = ("gpus[%d]"):format(r)
    local tbs = list(gpus[r + 1].threadblocks, where .. ".threadblocks", gpu.line)
    for t, b in ipairs(tbs) do
      local tl = line_at("gpus", r + 1, "threadblocks", t)
      local tw = ("%s.threadblocks[%d]"):format(where, t - 1)
      object(b, tw, tl)
      local id = int(b.id, tw .. ".id", tl, 0, MAX_CHUNKS)
      if id ~= t - 1 then fail(tl, "%s has id %d; TB ids must be 0..%d in order", tw, id, #tbs - 1) end
      local tb = { rank = r, id = t - 1, line = tl, ntbs = #tbs, chan = { memory = {}, port = {} },
        rref = { memory = {}, port = {} }, ops = {} }
      for k, c in ipairs(list(b.channels, tw .. ".channels", tl, true)) do
        local cw = ("%s.channels[%d]"):format(tw, k - 1)
        local ty = object(c, cw, tl).channel_type
        if ty == "memory" or ty == "port" then
          for j, v in ipairs(list(c.channel_ids, cw .. ".channel_ids", tl)) do
            local n = #gpu.chan[ty]
            if n == 0 then fail(tl, "%s: gpu %d has no %s channels", cw, r, ty) end
            tb.chan[ty][#tb.chan[ty] + 1] = int(v, ("%s.channel_ids[%d]"):format(cw, j - 1), tl, 0, n - 1)
          end
        elseif ty ~= "switch" then
          fail(tl, "%s.channel_type must be memory, port or switch, got %s", cw, shown(ty))
        end
      end
      for k, c in ipairs(list(b.remote_buffer_refs, tw .. ".remote_buffer_refs", tl, true)) do
        local cw = ("%s.remote_buffer_refs[%d]"):format(tw, k - 1)
        local ty = object(c, cw, tl).access_channel_type
        if ty ~= "memory" and ty ~= "port" then
          fail(tl, "%s.access_channel_type must be memory or port, got %s", cw, shown(ty))
        end
        for j, v in ipairs(list(c.remote_buffer_ids, cw .. ".remote_buffer_ids", tl)) do
          local n = #gpu.rbuf
          if n == 0 then fail(tl, "%s: gpu %d has no remote_buffers", cw, r) end
          local id = int(v, ("%s.remote_buffer_ids[%d]"):format(cw, j - 1), tl, 0, n - 1)
          if not gpu.rbuf[id + 1].access[ty] then
            fail(tl, "%s: remote buffer %d of gpu %d is not reached through %s channels (access_channel_types)", cw, id,
              r, ty)
          end
          tb.rref[ty][#tb.rref[ty] + 1] = id + 1
        end
      end
      local ops = list(b.ops, tw .. ".ops", tl)
      if #ops > MAX_OPS_PER_TB then
        plan.warnings[#plan.warnings + 1] = ("%s:%d: gpu %d tb %d has %d ops, more than the executor's %d"):format(path,
          tl, r, t - 1, #ops, MAX_OPS_PER_TB)
      end
      for k, o in ipairs(ops) do
        tb.ops[k] = read_op(o, tb, k, line_at("gpus", r + 1, "threadblocks", t, "ops", k))
      end
      gpu.tbs[t] = tb
    end
  end

  -- Geometry: chunks per block C from the collective's buffer sizes.
  local function per_block(gpu)
    local nin, nout = gpu.size.input, gpu.size.output
    local c = plan.coll
    if c == "allreduce" then return nin, nin, nin end
    if c == "allgather" then return nin, nin, R * nin end
    if c == "reducescatter" then return nout, R * nout, nout end
    return nin // R, R * (nin // R), R * (nin // R)
  end
  local C, nin, nout = per_block(G[0])
  for r = 0, R - 1 do
    local gpu = G[r]
    local c, i, o = per_block(gpu)
    if c ~= C or c < 1 or gpu.size.input ~= i or (gpu.size.output ~= o and not (plan.inplace and gpu.size.output == 0)) then
      fail(gpu.line, "gpu %d has %d input and %d output chunks; %s on %d GPUs needs %d and %d (as gpu 0)", r,
        gpu.size.input, gpu.size.output, plan.coll, R, nin, nout)
    end
  end
  plan.C, plan.split, plan.G = C, split, G
  plan.details = { protocol = plan.protocol, ops = nops, op_types = op_types, split = split }
  return plan
end

-- ------------------------------------------------------------ normalise

--- An in-place reduce-scatter's buffer is its input, which out of place is
--- the caller's and stays as it was (NCCL's sendbuff is const): such a plan
--- works in scratch after its own, in both placements (the program is one);
--- the chunk there of rank r's (buf, idx), before parts.
local function staged(plan, r, buf, idx)
  return plan.G[r].size.scratch + (buf == "output" and r * plan.C or 0) + idx
end

--- Put every chunk range in resccl's terms: in-place aliases become the one
--- buffer the core keeps in place, indices count parts of chunks, and a TB
--- of a group keeps its own slice.
local function normalise(plan)
  local C, L, coll = plan.C, plan.split, plan.coll
  local function place(x)
    if plan.inplace then
      if coll == "reducescatter" and x.buf ~= "scratch" then return "scratch", staged(plan, x.rank, x.buf, x.idx)
      elseif coll == "allgather" and x.buf == "input" then return "output", x.rank * C + x.idx
      elseif (coll == "allreduce" or coll == "alltoall") and x.buf == "input" then return "output", x.idx end
    end
    return x.buf, x.idx
  end
  local scratch = {} -- rank -> { pkt = line } or { plain = line }: LL packets and plain data do not mix
  local touches = 0
  for r = 0, plan.ranks - 1 do
    for _, tb in ipairs(plan.G[r].tbs) do
      for _, op in ipairs(tb.ops) do
        for _, side in ipairs { "src", "dst" } do
          for _, x in ipairs(op[side] or {}) do
            x.file_buf, x.file_idx = x.buf, x.idx
            local buf, idx = place(x)
            local n = x.n * L
            x.buf, x.idx, x.n = buf, idx * L, n
            touches = touches + n
            if touches > MAX_TOUCHES then
              error(("%s:%d: the plan's ops read and write over %d chunk%s in all; resccl handles at most that many")
                :format(plan.path, op.line, MAX_TOUCHES, L > 1 and " parts" or "s"), 0)
            end
            if op.tbg then
              local k, g = op.tbg[1], op.tbg[2]
              x.idx, x.n = x.idx + k * n // g, n // g
            end
            if x.file_buf == "scratch" then -- (not the staged input: staged)
              local s = scratch[x.rank] or {}
              scratch[x.rank] = s
              local mode, other = x.pkt and "pkt" or "plain", x.pkt and "plain" or "pkt"
              s[mode] = s[mode] or op.line
              if s[other] then
                error(("%s:%d: gpu %d's scratch holds LL packets (line %d) and plain data (line %d)"):format(plan.path,
                  op.line, x.rank, s.pkt, s.plain), 0)
              end
            end
          end
        end
      end
    end
  end
end

-- -------------------------------------------------------------------- run

--- Run the plan's synchronisation; give each op a round, fail on a deadlock
--- or a data race.
local function run(plan)
  local path, G = plan.path, plan.G
  local function fail(line, fmt, ...) error(("%s:%d: " .. fmt):format(path, line, ...), 0) end
  local tbs = {}
  for r = 0, plan.ranks - 1 do
    for _, tb in ipairs(G[r].tbs) do
      tbs[#tbs + 1] = tb
      tb.num, tb.pc, tb.round = #tbs, 1, 0
    end
  end
  local NT = #tbs
  local check = NT <= MAX_RACE_TBS
  if not check then
    plan.warnings[#plan.warnings + 1] = ("%s:1: not checked for data races: %d TBs (the check handles %d)"):format(path,
      NT, MAX_RACE_TBS)
  end
  for _, tb in ipairs(tbs) do
    tb.vc = {}
    for i = 1, check and NT or 0 do tb.vc[i] = 0 end
  end
  local function snapshot(tb) return table.move(tb.vc, 1, #tb.vc, 1, {}) end
  local function join(tb, vc)
    local v = tb.vc
    for i = 1, #vc do
      if vc[i] > v[i] then v[i] = vc[i] end
    end
  end

  -- Tokens: signals sent to a channel, releases of a semaphore, packets
  -- written to a scratch part. Each is { op, vc } of what made it.
  local queue, rq = {}, import.runqueue()
  local ready, wake = rq.ready, rq.wake
  local function push(key, tok)
    local q = queue[key] or { h = 1, t = 0 }
    queue[key] = q
    q.t = q.t + 1
    q[q.t] = tok
    wake(key)
  end
  local function block(tb, key, why)
    rq.block(tb, key)
    tb.blocked = why
  end
  local function chan_key(r, ty, c) return ("c%d:%s:%d"):format(r, ty, c) end
  local function sem_key(r, s) return ("s%d:%d"):format(r, s) end
  local function unit_key(x, u) return ((x.rank * 3 + BUF_CODE[x.buf]) << 40) + u end
  -- A semaphore's initial count is releases nobody made, taken before any
  -- made later; kept as a number (init_value goes to 2^20, for every one of
  -- a GPU's semaphores).
  local INIT = { vc = {} }
  for r = 0, plan.ranks - 1 do
    for s, n in ipairs(G[r].sems) do queue[sem_key(r, s - 1)] = { h = 1, t = 0, init = n } end
  end
  -- The channel a signal on (rank, type, id) arrives on.
  local function partner(op, c)
    local r = op.tb.rank
    local ch = G[r].chan[op.ctype][c + 1]
    local back = G[ch.peer].back[op.ctype][r] or {}
    local id = back[ch.nth]
    if not id then
      fail(op.line, "%s: %s channel %d of gpu %d is its %s channel #%d to gpu %d, but gpu %d has %d %s channel%s back",
        op.what, op.ctype, c, r, op.ctype, ch.nth, ch.peer, ch.peer, #back, op.ctype, #back == 1 and "" or "s")
    end
    return ch.peer, id
  end

  -- Accesses per scratch/input/output part: the last write and the reads
  -- since, each { tb = num, clk, op }.
  local acc = {}
  local L = plan.split
  local function race(a, op, x, u)
    fail(op.line, "%s and %s (line %d) race on gpu %d's %s chunk %d%s: no signal/wait, barrier, semaphore or packet "
      .. "orders them", op.what, a.op.what, a.op.line, x.rank, x.buf, u // L, L > 1 and (" (part %d of %d)"):format(u % L, L)
      or "")
  end
  local function access(tb, op, x, write)
    local clk, vc = tb.vc[tb.num], tb.vc
    for u = x.idx, x.idx + x.n - 1 do
      local k = unit_key(x, u)
      local a = acc[k]
      if not a then
        a = { reads = {} }
        acc[k] = a
      end
      local w = a.write
      if w and w.tb ~= tb.num and w.clk > vc[w.tb] then race(w, op, x, u) end
      if write then
        for t, rd in pairs(a.reads) do
          if t ~= tb.num and rd.clk > vc[t] then race(rd, op, x, u) end
        end
        a.write, a.reads = { tb = tb.num, clk = clk, op = op }, {}
      else
        a.reads[tb.num] = { clk = clk, op = op }
      end
    end
  end

  local barrier_in = {} -- "rank:id" -> TBs in the barrier now
  local done = {}
  -- Try the op at tb's pc: run it, or block and say on what.
  local function step(tb)
    local op = tb.ops[tb.pc]
    local from = {} -- tokens this op waits for
    if op.sync == "wait" then
      for _, c in ipairs(op.chans) do
        local q = queue[chan_key(tb.rank, op.ctype, c)]
        if not q or q.h > q.t then
          local ch = G[tb.rank].chan[op.ctype][c + 1]
          block(tb, chan_key(tb.rank, op.ctype, c), ("%s (line %d) waits for a signal from gpu %d on %s channel %d"):format(
            op.what, op.line, ch.peer, op.ctype, c))
          return false
        end
      end
      for _, c in ipairs(op.chans) do
        local q = queue[chan_key(tb.rank, op.ctype, c)]
        from[#from + 1] = q[q.h]
        q[q.h], q.h = nil, q.h + 1
      end
    elseif op.sync == "acquire" then
      for _, s in ipairs(op.sems) do
        local q = queue[sem_key(tb.rank, s)]
        if not q or q.h > q.t and q.init == 0 then
          block(tb, sem_key(tb.rank, s), ("%s (line %d) waits for a release of gpu %d's semaphore %d"):format(op.what,
            op.line, tb.rank, s))
          return false
        end
      end
      for _, s in ipairs(op.sems) do
        local q = queue[sem_key(tb.rank, s)]
        if q.init > 0 then
          from[#from + 1], q.init = INIT, q.init - 1
        else
          from[#from + 1] = q[q.h]
          q[q.h], q.h = nil, q.h + 1
        end
      end
    elseif op.sync == "barrier" then
      local key = tb.rank .. ":" .. op.barrier
      local inside = barrier_in[key] or {}
      barrier_in[key] = inside
      inside[#inside + 1] = tb
      if #inside < op.n then
        tb.blocked = function()
          return ("%s (line %d) waits at barrier %d for %d TBs, %d there"):format(op.what, op.line, op.barrier, op.n,
            #inside)
        end
        return false
      end
      -- Everyone inside leaves together, after all of them arrived.
      barrier_in[key] = nil
      local round, vc = 0, {}
      for _, t in ipairs(inside) do
        round = math.max(round, t.round)
        if check then t.vc[t.num] = t.vc[t.num] + 1 end
        for i, v in ipairs(t.vc) do vc[i] = math.max(vc[i] or 0, v) end
      end
      for _, t in ipairs(inside) do
        local o = t.ops[t.pc]
        o.round, t.round, t.vc, t.blocked = round + 1, round + 1, table.move(vc, 1, #vc, 1, {}), nil
        t.pc = t.pc + 1
        if t ~= tb then ready(t) end
      end
      return true
    elseif op.data and op.data.pkt_in then
      local D = op.data
      for j = D.pkt_in == "rest" and 2 or 1, #op.src do
        local x = op.src[j]
        for u = x.idx, x.idx + x.n - 1 do
          local q = queue[unit_key(x, u)]
          if not q then
            block(tb, unit_key(x, u), ("%s (line %d) waits for LL packets in gpu %d's scratch chunk %d"):format(op.what,
              op.line, x.rank, u // L))
            return false
          end
          from[#from + 1] = q[q.t] -- the latest write
        end
      end
    end

    -- It runs.
    tb.blocked = nil
    local round = tb.round
    if check then tb.vc[tb.num] = tb.vc[tb.num] + 1 end
    for _, t in ipairs(from) do
      if t.op then round = math.max(round, t.op.round + 1) end
      if check then join(tb, t.vc) end
    end
    op.round, tb.round = round, round
    done[#done + 1] = op
    if op.data then
      if check then
        for _, x in ipairs(op.src) do access(tb, op, x, false) end
        for _, x in ipairs(op.dst) do access(tb, op, x, true) end
      end
      if op.data.pkt_out then
        local tok = { op = op, vc = check and snapshot(tb) or {} }
        for _, x in ipairs(op.dst) do
          if x.pkt then
            for u = x.idx, x.idx + x.n - 1 do push(unit_key(x, u), tok) end
          end
        end
      end
    end
    if op.sync == "signal" or op.chans and op.data then
      local tok = { op = op, vc = check and snapshot(tb) or {} }
      for _, c in ipairs(op.chans) do
        local peer, id = partner(op, c)
        push(chan_key(peer, op.ctype, id), tok)
      end
    elseif op.sync == "release" then
      local tok = { op = op, vc = check and snapshot(tb) or {} }
      for _, s in ipairs(op.sems) do push(sem_key(tb.rank, s), tok) end
    end
    tb.pc = tb.pc + 1
    return true
  end

  for _, tb in ipairs(tbs) do ready(tb) end
  for tb in rq.pop do
    while tb.pc <= #tb.ops and step(tb) do end
  end

  local stuck = {}
  for _, tb in ipairs(tbs) do
    if tb.pc <= #tb.ops then stuck[#stuck + 1] = tb end
  end
  if #stuck > 0 then
    local parts = {}
    for i = 1, math.min(#stuck, 4) do
      local why = stuck[i].blocked
      parts[i] = type(why) == "function" and why() or why
    end
    if #stuck > 4 then parts[#parts + 1] = ("and %d more TBs"):format(#stuck - 4) end
    fail(stuck[1].ops[stuck[1].pc].line, "deadlock in the file's own schedule: %s", table.concat(parts, "; "))
  end
  -- Signals nobody waits for stay in the semaphore, and the next launch
  -- would take them.
  local left = {}
  for key, q in pairs(queue) do
    if type(key) == "string" and key:sub(1, 1) == "c" and q.h <= q.t then
      local r, ty, c = key:match "^c(%d+):(%a+):(%d+)$"
      local n = q.t - q.h + 1
      left[#left + 1] = { q[q.h].op.line, key, ("%s:%d: %d signal%s to gpu %s on %s channel %s %s never waited for")
        :format(path, q[q.h].op.line, n, n == 1 and "" or "s", r, ty, c, n == 1 and "is" or "are") }
    end
  end
  table.sort(left, function(a, b) return a[1] < b[1] or a[1] == b[1] and a[2] < b[2] end)
  for _, w in ipairs(left) do plan.warnings[#plan.warnings + 1] = w[3] end
  table.sort(done, function(a, b)
    if a.round ~= b.round then return a.round < b.round end
    if a.tb.rank ~= b.tb.rank then return a.tb.rank < b.tb.rank end
    if a.tb.id ~= b.tb.id then return a.tb.id < b.tb.id end
    return a.idx < b.idx
  end)
  return done
end

-- -------------------------------------------------------------- transfers

--- The data ops, in round order, as transfers.
local function transfers(plan, ops)
  local xs = {}
  local C, L, R = plan.C, plan.split, plan.ranks
  local function fail(op, fmt, ...) error(("%s:%d: %s " .. fmt):format(plan.path, op.line, op.what, ...), 0) end
  local function xfer(s, d, kind, step, line, what)
    xs[#xs + 1] = { src = s.rank, sbuf = s.buf, sidx = s.idx, dst = d.rank, dbuf = d.buf, didx = d.idx, cnt = s.n,
      op = kind, step = step, line = line, what = what }
  end
  local function same(a, b) return a.rank == b.rank and a.buf == b.buf and a.idx == b.idx end
  local function overlap(a, b)
    return a.rank == b.rank and a.buf == b.buf and a.idx < b.idx + b.n and b.idx < a.idx + a.n
  end
  local function name(x) return ("gpu %d %s %d"):format(x.rank, x.file_buf, x.file_idx) end

  -- In-place plans address one buffer through both names: the input enters
  -- it first (a copy the core drops for in-place calls), and a reduce-scatter's
  -- result leaves it last (its buffer is in scratch: staged).
  local CL = C * L
  if plan.inplace then
    for r = 0, R - 1 do
      local line = plan.G[r].line
      if plan.coll == "reducescatter" then
        xfer({ rank = r, buf = "input", idx = 0, n = R * CL }, { rank = r, buf = "scratch", idx = staged(plan, r, "input", 0) * L },
          "copy", -1, line, "in-place input")
      elseif plan.coll == "allgather" then
        xfer({ rank = r, buf = "input", idx = 0, n = CL }, { rank = r, buf = "output", idx = r * CL }, "copy", -1, line,
          "in-place input")
      elseif plan.coll == "allreduce" or plan.coll == "alltoall" then
        local n = plan.coll == "allreduce" and CL or R * CL
        xfer({ rank = r, buf = "input", idx = 0, n = n }, { rank = r, buf = "output", idx = 0 }, "copy", -1, line,
          "in-place input")
      end
    end
  end
  for _, op in ipairs(ops) do
    local D = op.data
    if D and D.pairs then
      for j, d in ipairs(op.dst) do
        local s = D.fan and op.src[1] or op.src[j]
        if not same(s, d) then
          if overlap(s, d) then fail(op, "copies %s into the overlapping %s", name(s), name(d)) end
          xfer(s, d, "copy", op.round, op.line, op.what)
        end
      end
    elseif D then
      -- dst[1] = src[1] (+) src[2..]: start from the source already in place, if any.
      local out, base = op.dst[1], 1
      for j, s in ipairs(op.src) do
        if same(s, out) then base = j end
      end
      for j, s in ipairs(op.src) do
        if j ~= base and overlap(s, out) then fail(op, "reads %s while it writes %s", name(s), name(out)) end
      end
      if not same(op.src[base], out) then
        if overlap(op.src[base], out) then fail(op, "reads %s while it writes %s", name(op.src[base]), name(out)) end
        xfer(op.src[base], out, "copy", op.round, op.line, op.what)
      end
      for j, s in ipairs(op.src) do
        if j ~= base then xfer(s, out, "reduce", op.round, op.line, op.what) end
      end
      for j = 2, #op.dst do
        if overlap(op.dst[j], out) then fail(op, "writes %s twice", name(out)) end
        xfer(out, op.dst[j], "copy", op.round, op.line, op.what)
      end
    end
  end
  if plan.inplace and plan.coll == "reducescatter" then
    for r = 0, R - 1 do
      xfer({ rank = r, buf = "scratch", idx = staged(plan, r, "output", 0) * L, n = CL }, { rank = r, buf = "output", idx = 0 },
        "copy", 1 << 30, plan.G[r].line, "in-place output")
    end
  end
  return xs
end

-- ------------------------------------------------------------------ entry

--- Is this text an MSCCL++ execution plan?
---@param text string
function M.detect(text)
  return text:match "^%s*{" ~= nil and text:find('"gpus"', 1, true) ~= nil
    and (text:find('"threadblocks"', 1, true) ~= nil or text:find('"ops"', 1, true) ~= nil)
end

--- Import MSCCL++ execution plan text.
---@param text string
---@param path string file name used in messages and source positions
---@return table imp the common import record (see resccl.import)
function M.import(text, path)
  local plan = read(text, path)
  normalise(plan)
  local ops = run(plan)
  local xs = transfers(plan, ops)
  local file_tbs, rounds = {}, 0
  for r = 0, plan.ranks - 1 do file_tbs[r + 1] = #plan.G[r].tbs end
  for _, op in ipairs(ops) do rounds = math.max(rounds, op.round + 1) end
  plan.details.rounds = rounds
  return {
    format = M.format, path = path, line = 1, name = plan.name, collective = plan.coll, ranks = plan.ranks,
    chunks = plan.C * plan.split, inplace = plan.inplace, outofplace = not plan.inplace, xfers = xs,
    file_tbs = file_tbs, warnings = plan.warnings, details = plan.details,
  }
end

return M
