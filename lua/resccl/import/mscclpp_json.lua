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
-- Import happens in four passes, each a function below (M.import calls
-- them in this order):
--   1. read      cjson decodes; a scan of the text finds each op's line.
--                The plan's header, then per GPU its buffers, channels,
--                remote buffers and semaphores, then per TB its channels,
--                remote buffer references and ops: channels, remote buffers
--                and chunk ranges are resolved and checked; ops that do not
--                move data as transfers (NVLS multimem, pipelines) are
--                refused, and so are plans in the 2024 schema (inputChunks,
--                ops with srcs/dsts). Last, the chunks per block.
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

local COLLS = import.COLLECTIVES
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

-- ------------------------------------------------------------------- read

-- The reader of one plan: import.checker's messages and checks, and
-- rd.line_at(keys...), the line of the deepest node that exists along a
-- path of keys in the text.
local function reader(text, path, warnings, null)
  local rd = import.checker(path, warnings, null)
  local root, lineof = positions(text), import.liner(text)
  function rd.line_at(...)
    local node, at = root, 1
    for k = 1, select("#", ...) do
      node = node and node.kids[select(k, ...)]
      if not node then break end
      at = node.at
    end
    return lineof(at)
  end
  return rd
end

-- The plan's own keys: collective, placement, protocol, name, GPU count.
local function read_header(obj, plan, rd)
  if type(obj) ~= "table" then rd.fail(1, "expected a JSON object") end
  local g1 = type(obj.gpus) == "table" and obj.gpus[1]
  if obj.colletive ~= nil or type(g1) == "table" and g1.inputChunks ~= nil then
    rd.fail(rd.line_at("gpus", 1), "an MSCCL++ plan in the 2024 schema (inputChunks, ops with srcs/dsts); resccl reads "
      .. "the current one (input_chunks, src_buff/dst_buff): regenerate the plan with MSCCL++'s DSL")
  end
  if type(obj.collective) ~= "string" then
    rd.fail(rd.line_at "collective", "'collective' must be a string, got %s", rd.shown(obj.collective))
  end
  plan.coll = COLLS[obj.collective:lower()]
  if not plan.coll then
    rd.fail(rd.line_at "collective", "collective '%s' is not supported (allreduce, allgather, reducescatter, alltoall)",
      obj.collective:sub(1, 40))
  end
  if type(obj.inplace) ~= "boolean" then
    rd.fail(rd.line_at "inplace", "'inplace' must be true or false, got %s", rd.shown(obj.inplace))
  end
  plan.inplace = obj.inplace
  plan.protocol = obj.protocol == nil and "Simple" or obj.protocol
  if plan.protocol ~= "Simple" and plan.protocol ~= "LL" then
    rd.fail(rd.line_at "protocol", "'protocol' must be Simple or LL, got %s", rd.shown(obj.protocol))
  end
  plan.name = type(obj.name) == "string" and obj.name or import.base_name(plan.path, "mscclpp")
  local R = #rd.list(obj.gpus, "'gpus'", rd.line_at "gpus")
  if R < 2 or R > MAX_RANKS then rd.fail(rd.line_at "gpus", "%d GPUs; a plan needs 2..%d", R, MAX_RANKS) end
  plan.ranks = R
end

-- A GPU's channels: per type, ids in connected_to order; back[type][peer][k]
-- is the id of the k-th channel of that type to peer.
local function read_channels(gpu, g, where, R, rd)
  local r = gpu.rank
  for k, c in ipairs(rd.list(g.channels, where .. ".channels", gpu.line, true)) do
    local cl = rd.line_at("gpus", r + 1, "channels", k)
    local cw = ("%s.channels[%d]"):format(where, k - 1)
    local ty = rd.object(c, cw, cl).channel_type
    if ty == nil and c.type ~= nil then
      ty = c.type
      rd.warn(cl, "%s names its type with 'type'; the executor reads 'channel_type'", cw)
    end
    if ty == "memory" or ty == "port" then
      for j, p in ipairs(rd.list(c.connected_to, cw .. ".connected_to", cl)) do
        local peer = rd.int(p, ("%s.connected_to[%d]"):format(cw, j - 1), cl, 0, R - 1)
        if peer == r then rd.fail(cl, "%s connects gpu %d to itself", cw, r) end
        local back = gpu.back[ty][peer] or {}
        gpu.back[ty][peer] = back
        back[#back + 1] = #gpu.chan[ty]
        gpu.chan[ty][#gpu.chan[ty] + 1] = { peer = peer, nth = #back }
      end
    elseif ty ~= "switch" then
      rd.fail(cl, "%s.channel_type must be memory, port or switch, got %s", cw, rd.shown(ty))
    end
  end
end

-- A GPU's remote buffers ({ rank, buf, access = set of channel types }).
local function read_remote_buffers(gpu, g, where, R, rd)
  for k, b in ipairs(rd.list(g.remote_buffers, where .. ".remote_buffers", gpu.line, true)) do
    local bl = rd.line_at("gpus", gpu.rank + 1, "remote_buffers", k)
    local bw = ("%s.remote_buffers[%d]"):format(where, k - 1)
    rd.object(b, bw, bl)
    local rb = { rank = rd.int(b.rank, bw .. ".rank", bl, 0, R - 1), buf = BUFS[b.type], access = {} }
    if not rb.buf then rd.fail(bl, "%s.type must be i, o or s, got %s", bw, rd.shown(b.type)) end
    for j, a in ipairs(rd.list(b.access_channel_types, bw .. ".access_channel_types", bl)) do
      if a ~= "memory" and a ~= "port" then
        rd.fail(bl, "%s.access_channel_types[%d] must be memory or port, got %s", bw, j - 1, rd.shown(a))
      end
      rb.access[a] = true
    end
    gpu.rbuf[k] = rb
  end
end

-- GPU r without its TBs: buffer sizes, channels, remote buffers, semaphores.
local function read_gpu(g, r, R, rd)
  local gl = rd.line_at("gpus", r + 1)
  local where = ("gpus[%d]"):format(r)
  rd.object(g, where, gl)
  local id = rd.int(g.id, where .. ".id", gl, 0, MAX_RANKS)
  if id ~= r then rd.fail(gl, "%s has id %d; GPU ids must be 0..%d in order", where, id, R - 1) end
  local gpu = { rank = r, line = gl, size = {}, chan = { memory = {}, port = {} }, back = { memory = {}, port = {} },
    rbuf = {}, sems = {}, tbs = {} }
  for _, buf in ipairs { "input", "output", "scratch" } do
    gpu.size[buf] = rd.int(g[buf .. "_chunks"], where .. "." .. buf .. "_chunks", gl, 0, MAX_CHUNKS)
  end
  read_channels(gpu, g, where, R, rd)
  read_remote_buffers(gpu, g, where, R, rd)
  for k, s in ipairs(rd.list(g.semaphores, where .. ".semaphores", gl, true)) do
    local sw = ("%s.semaphores[%d]"):format(where, k - 1)
    gpu.sems[k] = rd.int(rd.object(s, sw, gl).init_value, sw .. ".init_value", gl, 0, 1 << 20)
  end
  return gpu
end

-- A chunk range { type | buffer_id, index, size } of an op, resolved to
-- { rank, buf, idx, n, remote }.
local function ref(e, what, ol, tb, ctype, G, rd)
  rd.object(e, what, ol)
  local x = { idx = rd.int(e.index, what .. ".index", ol, 0, MAX_CHUNKS),
    n = rd.int(e.size, what .. ".size", ol, 1, MAX_CHUNKS) }
  if e.switch_channel_id ~= nil then
    rd.fail(ol, "%s addresses an NVLS switch channel; multimem access cannot be expressed as transfers", what)
  elseif e.buffer_id ~= nil then
    if ctype ~= "memory" and ctype ~= "port" then
      rd.fail(ol, "%s is a remote buffer, but the op's channel_type is %s (memory or port)", what, rd.shown(ctype))
    end
    local refs = tb.rref[ctype]
    local id = rd.int(e.buffer_id, what .. ".buffer_id", ol, 0, MAX_CHUNKS)
    if id >= #refs then
      rd.fail(ol, "%s.buffer_id=%d, but gpu %d tb %d has %d remote buffer%s for %s channels", what, id, tb.rank, tb.id,
        #refs, #refs == 1 and "" or "s", ctype)
    end
    local rb = G[tb.rank].rbuf[refs[id + 1]]
    x.rank, x.buf, x.remote = rb.rank, rb.buf, true
  else
    x.rank, x.buf = tb.rank, BUFS[e.type]
    if not x.buf then rd.fail(ol, "%s.type must be i, o or s, got %s", what, rd.shown(e.type)) end
  end
  local size = G[x.rank].size[x.buf]
  if x.idx + x.n > size then
    rd.fail(ol, "%s: chunks %d..%d are out of range: gpu %d's %s buffer has %d chunks", what, x.idx, x.idx + x.n - 1,
      x.rank, x.buf, size)
  end
  return x
end

-- Channel ids of an op, through its TB's list, as GPU channel ids.
local function chans(o, what, ol, tb, ctype, rd)
  local ids = {}
  for j, c in ipairs(rd.list(o.channel_ids, what .. " channel_ids", ol)) do
    local k = rd.int(c, ("%s channel_ids[%d]"):format(what, j - 1), ol, 0, MAX_CHUNKS)
    if k >= #tb.chan[ctype] then
      rd.fail(ol, "%s uses %s channel %d, but gpu %d tb %d has %d", what, ctype, k, tb.rank, tb.id, #tb.chan[ctype])
    end
    ids[j] = tb.chan[ctype][k + 1]
  end
  return ids
end

-- A sync op's channels, barrier (the same size wherever a GPU uses it:
-- plan.barriers) or semaphores.
local function read_sync_op(op, o, plan, rd)
  local tb, ol, what, ctype = op.tb, op.line, op.what, o.channel_type
  if op.sync == "signal" or op.sync == "wait" then
    if ctype ~= "memory" and ctype ~= "port" then
      rd.fail(ol, "%s: channel_type must be memory or port, got %s", what, rd.shown(ctype))
    end
    op.ctype, op.chans = ctype, chans(o, what, ol, tb, ctype, rd)
  elseif op.sync == "barrier" then
    op.barrier = rd.int(o.barrier_id, what .. " barrier_id", ol, 0, MAX_CHUNKS)
    op.n = rd.int(o.num_threadblocks, what .. " num_threadblocks", ol, 1, tb.ntbs)
    local key = tb.rank .. ":" .. op.barrier
    local b = plan.barriers[key]
    if b and b.n ~= op.n then
      rd.fail(ol, "%s: barrier %d of gpu %d has num_threadblocks %d here but %d at line %d", what, op.barrier, tb.rank,
        op.n, b.n, b.line)
    end
    plan.barriers[key] = b or { n = op.n, line = ol }
  elseif op.sync == "acquire" or op.sync == "release" then
    op.sems = {}
    local nsem = #plan.G[tb.rank].sems
    for j, s in ipairs(rd.list(o.semaphore_ids, what .. " semaphore_ids", ol)) do
      op.sems[j] = rd.int(s, ("%s semaphore_ids[%d]"):format(what, j - 1), ol, 0, nsem - 1)
    end
  end
end

-- A data op's src_buff and dst_buff (op.src, op.dst), of the kinds it takes
-- and of matching sizes; warnings for what resccl or the executor does
-- otherwise than the plan says.
local function read_buffs(op, o, plan, rd)
  local D, ol, what = op.data, op.line, op.what
  for _, side in ipairs { "src", "dst" } do
    local refs, kinds = {}, {}
    for j, e in ipairs(rd.list(o[side .. "_buff"], ("%s %s_buff"):format(what, side), ol)) do
      refs[j] = ref(e, ("%s %s_buff[%d]"):format(what, side, j - 1), ol, op.tb, o.channel_type, plan.G, rd)
      kinds[j] = refs[j].remote and "R" or "L"
    end
    kinds = table.concat(kinds)
    if not kinds:match(D[side]) then
      rd.fail(ol, "%s: %s_buff must be %s, got %s", what, side, KINDS[D[side]],
        #kinds == 0 and "none" or kinds:gsub("L", "local "):gsub("R", "remote "):gsub(" $", ""):gsub(" ", ", "))
    end
    op[side] = refs
  end
  if D.pairs and not D.fan and #op.src ~= #op.dst then
    rd.fail(ol, "%s has %d src_buff and %d dst_buff entries; they go in pairs", what, #op.src, #op.dst)
  end
  for j, x in ipairs(op.dst) do
    local s = D.pairs and not D.fan and op.src[j] or op.src[1]
    if x.n ~= s.n then rd.fail(ol, "%s moves %d chunk%s into %d", what, s.n, s.n == 1 and "" or "s", x.n) end
  end
  for j = 2, D.pairs and 1 or #op.src do
    if op.src[j].n ~= op.src[1].n then rd.fail(ol, "%s reduces ranges of %d and %d chunks", what, op.src[1].n, op.src[j].n) end
  end
  if not D.pairs and o.reduce_op ~= nil and o.reduce_op ~= "sum" then
    rd.warn(ol, "%s reduces with %s; resccl reduces with the run's op (op=, sum by default)", what, rd.shown(o.reduce_op))
  end
  -- The executor's get copies remote chunk dst.index into local chunk
  -- src.index: the same when the two indices agree, as MSCCL++'s DSL
  -- writes them.
  for j, x in ipairs(op.name == "get" and op.src or {}) do
    if x.idx ~= op.dst[j].idx then
      rd.warn(ol, "%s src_buff[%d] reads chunk %d and dst_buff[%d] writes chunk %d; MSCCL++'s executor (handleGet) "
        .. "swaps the two offsets, imported as written", what, j - 1, x.idx, j - 1, op.dst[j].idx)
    end
  end
end

local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end

-- A data op's LL packets (x.pkt: in scratch), port channels (each remote
-- range over the channel of its pair; pws/pwsf signal it) and tbg_info
-- (op.tbg; plan.split, the parts a chunk is cut into, grows to fit it).
local function read_data_links(op, o, plan, rd)
  local D, ol, what, tb = op.data, op.line, op.what, op.tb
  -- LL packets live in scratch (at twice the offset, with flags).
  for _, side in ipairs { "src", "dst" } do
    local which = D[side == "src" and "pkt_in" or "pkt_out"]
    for j = which == "rest" and 2 or 1, which and #op[side] or 0 do
      local x = op[side][j]
      if x.buf ~= "scratch" then
        rd.fail(ol, "%s: %s_buff[%d] is LL packets, which live in scratch, not in gpu %d's %s buffer", what, side, j - 1,
          x.rank, x.buf)
      end
      x.pkt = true
    end
  end
  if o.channel_type == "port" then
    local ids = chans(o, what, ol, tb, "port", rd)
    for j, x in ipairs(op.dst) do
      local c = ids[j]
      if c == nil then rd.fail(ol, "%s: dst_buff[%d] has no port channel in channel_ids", what, j - 1) end
      local peer = plan.G[tb.rank].chan.port[c + 1].peer
      if peer ~= x.rank then
        rd.fail(ol, "%s writes gpu %d's %s buffer over port channel %d, which connects to gpu %d", what, x.rank, x.buf, c,
          peer)
      end
    end
    if D.signal then op.ctype, op.chans = "port", ids end
  end
  if o.tbg_info ~= nil then
    local t = rd.object(o.tbg_info, what .. " tbg_info", ol)
    local n = rd.int(t.tbg_size, what .. " tbg_info.tbg_size", ol, 1, MAX_SPLIT)
    op.tbg = { rd.int(t.tb_id, what .. " tbg_info.tb_id", ol, 0, n - 1), n }
    plan.split = plan.split // gcd(plan.split, n) * n
    if plan.split > MAX_SPLIT then
      rd.fail(ol, "%s: the thread-block groups' sizes need every chunk cut into %d parts (at most %d)", what, plan.split,
        MAX_SPLIT)
    end
  end
end

-- Op k of a TB, at line ol.
local function read_op(o, tb, k, ol, plan, rd)
  local what = ("gpu %d tb %d op %d"):format(tb.rank, tb.id, k - 1)
  rd.object(o, what, ol)
  local name = o.name
  if type(name) ~= "string" then rd.fail(ol, "%s has no name", what) end
  what = ("%s (%s)"):format(what, name)
  if REFUSED[name] then rd.fail(ol, "%s is %s; it cannot be expressed as transfers", what, REFUSED[name]) end
  local details = plan.details
  details.op_types[name] = (details.op_types[name] or 0) + 1
  details.ops = details.ops + 1
  local op = { name = name, line = ol, tb = tb, idx = k - 1, seq = details.ops, what = what }
  if SYNC[name] then
    op.sync = SYNC[name]
    read_sync_op(op, o, plan, rd)
    return op
  end
  local D = DATA[name]
  if not D then rd.fail(ol, "%s: unknown op '%s'", what, name:sub(1, 40)) end
  op.data = D
  local ctype = o.channel_type
  if ctype ~= nil and ctype ~= "memory" and ctype ~= "port" and ctype ~= "none" and ctype ~= "switch" then
    rd.fail(ol, "%s: channel_type must be memory, port, switch or none, got %s", what, rd.shown(ctype))
  end
  if ctype == "port" and not D.port then
    rd.fail(ol, "%s: only put, pws, pwsf, ppkt and rppkt use port channels; this op reaches remote buffers through "
      .. "memory channels", what)
  end
  read_buffs(op, o, plan, rd)
  read_data_links(op, o, plan, rd)
  return op
end

-- A TB's channels: per type, its channel ids index the GPU's.
local function read_tb_channels(tb, b, tw, gpu, rd)
  local tl, r = tb.line, tb.rank
  for k, c in ipairs(rd.list(b.channels, tw .. ".channels", tl, true)) do
    local cw = ("%s.channels[%d]"):format(tw, k - 1)
    local ty = rd.object(c, cw, tl).channel_type
    if ty == "memory" or ty == "port" then
      for j, v in ipairs(rd.list(c.channel_ids, cw .. ".channel_ids", tl)) do
        local n = #gpu.chan[ty]
        if n == 0 then rd.fail(tl, "%s: gpu %d has no %s channels", cw, r, ty) end
        tb.chan[ty][#tb.chan[ty] + 1] = rd.int(v, ("%s.channel_ids[%d]"):format(cw, j - 1), tl, 0, n - 1)
      end
    elseif ty ~= "switch" then
      rd.fail(tl, "%s.channel_type must be memory, port or switch, got %s", cw, rd.shown(ty))
    end
  end
end

-- A TB's remote buffer references: per channel type, indices into the
-- GPU's remote buffers (tb.rref[type], 1-based), reachable through that type.
local function read_tb_refs(tb, b, tw, gpu, rd)
  local tl, r = tb.line, tb.rank
  for k, c in ipairs(rd.list(b.remote_buffer_refs, tw .. ".remote_buffer_refs", tl, true)) do
    local cw = ("%s.remote_buffer_refs[%d]"):format(tw, k - 1)
    local ty = rd.object(c, cw, tl).access_channel_type
    if ty ~= "memory" and ty ~= "port" then
      rd.fail(tl, "%s.access_channel_type must be memory or port, got %s", cw, rd.shown(ty))
    end
    for j, v in ipairs(rd.list(c.remote_buffer_ids, cw .. ".remote_buffer_ids", tl)) do
      local n = #gpu.rbuf
      if n == 0 then rd.fail(tl, "%s: gpu %d has no remote_buffers", cw, r) end
      local id = rd.int(v, ("%s.remote_buffer_ids[%d]"):format(cw, j - 1), tl, 0, n - 1)
      if not gpu.rbuf[id + 1].access[ty] then
        rd.fail(tl, "%s: remote buffer %d of gpu %d is not reached through %s channels (access_channel_types)", cw, id,
          r, ty)
      end
      tb.rref[ty][#tb.rref[ty] + 1] = id + 1
    end
  end
end

-- TB t of GPU r (of ntbs): its channels, remote buffer references and ops.
local function read_tb(b, t, ntbs, gpu, plan, rd)
  local r = gpu.rank
  local tl = rd.line_at("gpus", r + 1, "threadblocks", t)
  local tw = ("gpus[%d].threadblocks[%d]"):format(r, t - 1)
  rd.object(b, tw, tl)
  local id = rd.int(b.id, tw .. ".id", tl, 0, MAX_CHUNKS)
  if id ~= t - 1 then rd.fail(tl, "%s has id %d; TB ids must be 0..%d in order", tw, id, ntbs - 1) end
  local tb = { rank = r, id = t - 1, line = tl, ntbs = ntbs, chan = { memory = {}, port = {} },
    rref = { memory = {}, port = {} }, ops = {} }
  read_tb_channels(tb, b, tw, gpu, rd)
  read_tb_refs(tb, b, tw, gpu, rd)
  local ops = rd.list(b.ops, tw .. ".ops", tl)
  if #ops > MAX_OPS_PER_TB then
    rd.warn(tl, "gpu %d tb %d has %d ops, more than the executor's %d", r, t - 1, #ops, MAX_OPS_PER_TB)
  end
  for k, o in ipairs(ops) do
    tb.ops[k] = read_op(o, tb, k, rd.line_at("gpus", r + 1, "threadblocks", t, "ops", k), plan, rd)
  end
  return tb
end

-- Chunks per block (plan.C), from the collective's buffer sizes on every GPU.
local function read_geometry(plan, rd)
  local R, coll = plan.ranks, plan.coll
  local function per_block(gpu)
    local nin, nout = gpu.size.input, gpu.size.output
    local c = coll == "reducescatter" and nout or coll == "alltoall" and nin // R or nin
    return c, import.buffer_sizes(coll, R, c)
  end
  local C, nin, nout = per_block(plan.G[0])
  for r = 0, R - 1 do
    local gpu = plan.G[r]
    local c, i, o = per_block(gpu)
    if c ~= C or c < 1 or gpu.size.input ~= i or (gpu.size.output ~= o and not (plan.inplace and gpu.size.output == 0)) then
      rd.fail(gpu.line, "gpu %d has %d input and %d output chunks; %s on %d GPUs needs %d and %d (as gpu 0)", r,
        gpu.size.input, gpu.size.output, coll, R, nin, nout)
    end
  end
  plan.C = C
end

--- 1. Read and check the plan: the plan description (plan.G[r]: GPU r, its
--- TBs and their ops), and the reader (rd) whose messages the later passes use.
local function read(text, path)
  local obj, null = import.json_decode(text, path)
  local plan = { path = path, warnings = {}, split = 1, barriers = {}, G = {} }
  local rd = reader(text, path, plan.warnings, null)
  read_header(obj, plan, rd)
  plan.details = { protocol = plan.protocol, ops = 0, op_types = {} }
  for r = 0, plan.ranks - 1 do plan.G[r] = read_gpu(obj.gpus[r + 1], r, plan.ranks, rd) end
  for r = 0, plan.ranks - 1 do
    local gpu = plan.G[r]
    local tbs = rd.list(obj.gpus[r + 1].threadblocks, ("gpus[%d].threadblocks"):format(r), gpu.line)
    for t, b in ipairs(tbs) do gpu.tbs[t] = read_tb(b, t, #tbs, gpu, plan, rd) end
  end
  read_geometry(plan, rd)
  plan.details.split = plan.split
  return plan, rd
end

-- ------------------------------------------------------------ normalise

--- 2. Put every chunk range in resccl's terms: in-place aliases become the
--- one buffer the core keeps in place (an in-place reduce-scatter works in
--- scratch after the plan's own: import.inplace_ref), indices count parts
--- of chunks, and a TB of a group keeps its own slice. Keeps the file's
--- (x.file_buf, x.file_idx) for messages.
local function normalise(plan, rd)
  local C, L = plan.C, plan.split
  local scratch = {} -- rank -> { pkt = line } or { plain = line }: LL packets and plain data do not mix
  local touches = 0
  for _, op in ipairs(import.step_list(import.tb_list(plan.G, plan.ranks), "ops")) do
    for _, side in ipairs { "src", "dst" } do
      for _, x in ipairs(op[side] or {}) do
        x.file_buf, x.file_idx = x.buf, x.idx
        local buf, idx = x.buf, x.idx
        if plan.inplace then
          buf, idx = import.inplace_ref(plan.coll, C, plan.G[x.rank].size.scratch, x.rank, buf, idx)
        end
        local n = x.n * L
        x.buf, x.idx, x.n = buf, idx * L, n
        touches = touches + n
        if touches > MAX_TOUCHES then
          rd.fail(op.line, "the plan's ops read and write over %d chunk%s in all; resccl handles at most that many",
            MAX_TOUCHES, L > 1 and " parts" or "s")
        end
        if op.tbg then
          local k, g = op.tbg[1], op.tbg[2]
          x.idx, x.n = x.idx + k * n // g, n // g
        end
        if x.file_buf == "scratch" then -- (not the staged input)
          local s = scratch[x.rank] or {}
          scratch[x.rank] = s
          local mode, other = x.pkt and "pkt" or "plain", x.pkt and "plain" or "pkt"
          s[mode] = s[mode] or op.line
          if s[other] then
            rd.fail(op.line, "gpu %d's scratch holds LL packets (line %d) and plain data (line %d)", x.rank, s.pkt,
              s.plain)
          end
        end
      end
    end
  end
end

-- -------------------------------------------------------------------- run

-- Keys of token queues: signals arriving on a channel, releases of a
-- semaphore, LL packets written to a scratch part.
local function chan_key(r, ty, c) return ("c%d:%s:%d"):format(r, ty, c) end
local function sem_key(r, s) return ("s%d:%d"):format(r, s) end
local function unit_key(x, u) return ((x.rank * 3 + BUF_CODE[x.buf]) << 40) + u end

-- A semaphore's initial count is releases nobody made, taken before any
-- made later; kept as a number (init_value goes to 2^20, for every one of
-- a GPU's semaphores), and this token stands for one of them.
local INIT = { vc = {} }

-- The executor's state for one run of the plan: TBs (tb.num, tb.pc,
-- tb.round, tb.vc: a vector clock when m.check), token queues (m.queue[key]
-- = { h, t, [h..t] = { op, vc } }), the run queue, the ops done, and per
-- scratch/input/output part its last write and the reads since (m.acc).
local function machine(plan, rd)
  local m = { plan = plan, G = plan.G, L = plan.split, rd = rd, queue = {}, rq = import.runqueue(), barrier_in = {},
    done = {}, acc = {} }
  m.tbs = import.tb_list(plan.G, plan.ranks)
  local NT = #m.tbs
  for i, tb in ipairs(m.tbs) do tb.num, tb.pc, tb.round = i, 1, 0 end
  m.check = NT <= MAX_RACE_TBS
  if not m.check then rd.warn(1, "not checked for data races: %d TBs (the check handles %d)", NT, MAX_RACE_TBS) end
  for _, tb in ipairs(m.tbs) do
    tb.vc = {}
    for i = 1, m.check and NT or 0 do tb.vc[i] = 0 end
  end
  for r = 0, plan.ranks - 1 do
    for s, n in ipairs(plan.G[r].sems) do m.queue[sem_key(r, s - 1)] = { h = 1, t = 0, init = n } end
  end
  return m
end

-- A token of what tb just did (op), with its clock.
local function token(m, tb, op) return { op = op, vc = m.check and table.move(tb.vc, 1, #tb.vc, 1, {}) or {} } end

local function push(m, key, tok)
  local q = m.queue[key] or { h = 1, t = 0 }
  m.queue[key] = q
  q.t = q.t + 1
  q[q.t] = tok
  m.rq.wake(key)
end

local function take(q)
  local tok = q[q.h]
  q[q.h], q.h = nil, q.h + 1
  return tok
end

local function block(m, tb, key, why)
  m.rq.block(tb, key)
  tb.blocked = why
end

-- The channel a signal on op's channel c arrives on: its peer and id there.
local function partner(m, op, c)
  local r, G = op.tb.rank, m.G
  local ch = G[r].chan[op.ctype][c + 1]
  local back = G[ch.peer].back[op.ctype][r] or {}
  local id = back[ch.nth]
  if not id then
    m.rd.fail(op.line, "%s: %s channel %d of gpu %d is its %s channel #%d to gpu %d, but gpu %d has %d %s channel%s back",
      op.what, op.ctype, c, r, op.ctype, ch.nth, ch.peer, ch.peer, #back, op.ctype, #back == 1 and "" or "s")
  end
  return ch.peer, id
end

-- op's access to part u of range x and an earlier one (a = { tb = num,
-- clk, op }) that nothing orders before it.
local function race(m, a, op, x, u)
  local L = m.L
  m.rd.fail(op.line, "%s and %s (line %d) race on gpu %d's %s chunk %d%s: no signal/wait, barrier, semaphore or "
    .. "packet orders them", op.what, a.op.what, a.op.line, x.rank, x.buf, u // L,
    L > 1 and (" (part %d of %d)"):format(u % L, L) or "")
end

-- The race check: tb's op reads or writes range x; an earlier access that
-- tb's clock does not cover is a race.
local function access(m, tb, op, x, write)
  local clk, vc = tb.vc[tb.num], tb.vc
  for u = x.idx, x.idx + x.n - 1 do
    local k = unit_key(x, u)
    local a = m.acc[k]
    if not a then
      a = { reads = {} }
      m.acc[k] = a
    end
    local w = a.write
    if w and w.tb ~= tb.num and w.clk > vc[w.tb] then race(m, w, op, x, u) end
    if write then
      for t, rd in pairs(a.reads) do
        if t ~= tb.num and rd.clk > vc[t] then race(m, rd, op, x, u) end
      end
      a.write, a.reads = { tb = tb.num, clk = clk, op = op }, {}
    else
      a.reads[tb.num] = { clk = clk, op = op }
    end
  end
end

-- A wait takes a signal from each of its channels: the tokens, or nil
-- when one has none yet (tb blocks on it).
local function take_signals(m, tb, op)
  for _, c in ipairs(op.chans) do
    local q = m.queue[chan_key(tb.rank, op.ctype, c)]
    if not q or q.h > q.t then
      local ch = m.G[tb.rank].chan[op.ctype][c + 1]
      block(m, tb, chan_key(tb.rank, op.ctype, c), ("%s (line %d) waits for a signal from gpu %d on %s channel %d")
        :format(op.what, op.line, ch.peer, op.ctype, c))
      return nil
    end
  end
  local from = {}
  for _, c in ipairs(op.chans) do from[#from + 1] = take(m.queue[chan_key(tb.rank, op.ctype, c)]) end
  return from
end

-- An acquire takes a release (or an initial count) of each semaphore.
local function take_releases(m, tb, op)
  for _, s in ipairs(op.sems) do
    local q = m.queue[sem_key(tb.rank, s)]
    if not q or q.h > q.t and q.init == 0 then
      block(m, tb, sem_key(tb.rank, s), ("%s (line %d) waits for a release of gpu %d's semaphore %d"):format(op.what,
        op.line, tb.rank, s))
      return nil
    end
  end
  local from = {}
  for _, s in ipairs(op.sems) do
    local q = m.queue[sem_key(tb.rank, s)]
    if q.init > 0 then
      from[#from + 1], q.init = INIT, q.init - 1
    else
      from[#from + 1] = take(q)
    end
  end
  return from
end

-- A read of LL packets waits for the latest write of each part it reads.
local function take_packets(m, tb, op)
  local from = {}
  for j = op.data.pkt_in == "rest" and 2 or 1, #op.src do
    local x = op.src[j]
    for u = x.idx, x.idx + x.n - 1 do
      local q = m.queue[unit_key(x, u)]
      if not q then
        block(m, tb, unit_key(x, u), ("%s (line %d) waits for LL packets in gpu %d's scratch chunk %d"):format(op.what,
          op.line, x.rank, u // m.L))
        return nil
      end
      from[#from + 1] = q[q.t]
    end
  end
  return from
end

-- tb arrives at a barrier: the last of op.n TBs to arrive lets everyone in
-- it leave together (true); the others wait there (false).
local function pass_barrier(m, tb, op)
  local key = tb.rank .. ":" .. op.barrier
  local inside = m.barrier_in[key] or {}
  m.barrier_in[key] = inside
  inside[#inside + 1] = tb
  if #inside < op.n then
    tb.blocked = function()
      return ("%s (line %d) waits at barrier %d for %d TBs, %d there"):format(op.what, op.line, op.barrier, op.n,
        #inside)
    end
    return false
  end
  m.barrier_in[key] = nil
  local round, vc = 0, {}
  for _, t in ipairs(inside) do
    round = math.max(round, t.round)
    if m.check then t.vc[t.num] = t.vc[t.num] + 1 end
    for i, v in ipairs(t.vc) do vc[i] = math.max(vc[i] or 0, v) end
  end
  for _, t in ipairs(inside) do
    local o = t.ops[t.pc]
    o.round, t.round, t.vc, t.blocked = round + 1, round + 1, table.move(vc, 1, #vc, 1, {}), nil
    t.pc = t.pc + 1
    if t ~= tb then m.rq.ready(t) end
  end
  return true
end

-- op runs on tb after the tokens `from`: its round, clock and accesses,
-- and the packets, signals and releases it sends.
local function complete(m, tb, op, from)
  local check = m.check
  tb.blocked = nil
  local round = tb.round
  if check then tb.vc[tb.num] = tb.vc[tb.num] + 1 end
  for _, t in ipairs(from) do
    if t.op then round = math.max(round, t.op.round + 1) end
    if check then
      local v = tb.vc
      for i = 1, #t.vc do
        if t.vc[i] > v[i] then v[i] = t.vc[i] end
      end
    end
  end
  op.round, tb.round = round, round
  m.done[#m.done + 1] = op
  if op.data then
    if check then
      for _, x in ipairs(op.src) do access(m, tb, op, x, false) end
      for _, x in ipairs(op.dst) do access(m, tb, op, x, true) end
    end
    if op.data.pkt_out then
      local tok = token(m, tb, op)
      for _, x in ipairs(op.dst) do
        if x.pkt then
          for u = x.idx, x.idx + x.n - 1 do push(m, unit_key(x, u), tok) end
        end
      end
    end
  end
  if op.sync == "signal" or op.chans and op.data then
    local tok = token(m, tb, op)
    for _, c in ipairs(op.chans) do
      local peer, id = partner(m, op, c)
      push(m, chan_key(peer, op.ctype, id), tok)
    end
  elseif op.sync == "release" then
    local tok = token(m, tb, op)
    for _, s in ipairs(op.sems) do push(m, sem_key(tb.rank, s), tok) end
  end
  tb.pc = tb.pc + 1
end

-- Try the op at tb's pc: run it (true), or block and say on what (false).
local function step(m, tb)
  local op = tb.ops[tb.pc]
  if op.sync == "barrier" then return pass_barrier(m, tb, op) end
  local from
  if op.sync == "wait" then from = take_signals(m, tb, op)
  elseif op.sync == "acquire" then from = take_releases(m, tb, op)
  elseif op.data and op.data.pkt_in then from = take_packets(m, tb, op)
  else from = {} end
  if not from then return false end
  complete(m, tb, op, from)
  return true
end

-- TBs that never finished: a deadlock, with what the first four wait for.
local function check_stuck(m)
  local stuck = {}
  for _, tb in ipairs(m.tbs) do
    if tb.pc <= #tb.ops then stuck[#stuck + 1] = tb end
  end
  if #stuck == 0 then return end
  local parts = {}
  for i = 1, math.min(#stuck, 4) do
    local why = stuck[i].blocked
    parts[i] = type(why) == "function" and why() or why
  end
  if #stuck > 4 then parts[#parts + 1] = ("and %d more TBs"):format(#stuck - 4) end
  m.rd.fail(stuck[1].ops[stuck[1].pc].line, "deadlock in the file's own schedule: %s", table.concat(parts, "; "))
end

-- Signals nobody waits for stay in the semaphore, and the next launch
-- would take them: a warning each, by line.
local function warn_unwaited(m)
  local left = {}
  for key, q in pairs(m.queue) do
    if type(key) == "string" and key:sub(1, 1) == "c" and q.h <= q.t then
      left[#left + 1] = { line = q[q.h].op.line, key = key, n = q.t - q.h + 1 }
    end
  end
  table.sort(left, function(a, b) return a.line < b.line or a.line == b.line and a.key < b.key end)
  for _, w in ipairs(left) do
    local r, ty, c = w.key:match "^c(%d+):(%a+):(%d+)$"
    m.rd.warn(w.line, "%d signal%s to gpu %s on %s channel %s %s never waited for", w.n, w.n == 1 and "" or "s", r, ty,
      c, w.n == 1 and "is" or "are")
  end
end

--- 3. Run the plan's synchronisation; give each op a round (op.round) and
--- return the ops that ran, in round order; fail on a deadlock or a data race.
local function run(plan, rd)
  local m = machine(plan, rd)
  for _, tb in ipairs(m.tbs) do m.rq.ready(tb) end
  for tb in m.rq.pop do
    while tb.pc <= #tb.ops and step(m, tb) do end
  end
  check_stuck(m)
  warn_unwaited(m)
  table.sort(m.done, import.by_round)
  return m.done
end

-- -------------------------------------------------------------- transfers

local function same(a, b) return a.rank == b.rank and a.buf == b.buf and a.idx == b.idx end
local function overlap(a, b)
  return a.rank == b.rank and a.buf == b.buf and a.idx < b.idx + b.n and b.idx < a.idx + a.n
end
local function name(x) return ("gpu %d %s %d"):format(x.rank, x.file_buf, x.file_idx) end

-- A data op whose pairs move src[i] (or, fanned, src[1]) to dst[i]:
-- xfer(s, d, kind, op) each.
local function pair_transfers(op, xfer, rd)
  for j, d in ipairs(op.dst) do
    local s = op.data.fan and op.src[1] or op.src[j]
    if not same(s, d) then
      if overlap(s, d) then rd.fail(op.line, "%s copies %s into the overlapping %s", op.what, name(s), name(d)) end
      xfer(s, d, "copy", op)
    end
  end
end

-- A reduction dst[1] = src[1] (+) src[2..], also written to dst[2..]: it
-- starts from the source already in place, if any.
local function reduce_transfers(op, xfer, rd)
  local out, base = op.dst[1], 1
  for j, s in ipairs(op.src) do
    if same(s, out) then base = j end
  end
  for j, s in ipairs(op.src) do
    if j ~= base and overlap(s, out) then
      rd.fail(op.line, "%s reads %s while it writes %s", op.what, name(s), name(out))
    end
  end
  if not same(op.src[base], out) then
    if overlap(op.src[base], out) then
      rd.fail(op.line, "%s reads %s while it writes %s", op.what, name(op.src[base]), name(out))
    end
    xfer(op.src[base], out, "copy", op)
  end
  for j, s in ipairs(op.src) do
    if j ~= base then xfer(s, out, "reduce", op) end
  end
  for j = 2, #op.dst do
    if overlap(op.dst[j], out) then rd.fail(op.line, "%s writes %s twice", op.what, name(out)) end
    xfer(out, op.dst[j], "copy", op)
  end
end

--- 4. The data ops, in round order, as transfers; an in-place plan's
--- placement copies around them (import.inplace_copies, in parts).
local function transfers(plan, ops, rd)
  local L = plan.split
  local xs, after = {}, {}
  if plan.inplace then
    local function base(r) return plan.G[r].size.scratch * L end
    xs, after = import.inplace_copies(plan.coll, plan.ranks, plan.C * L, base, function(r) return plan.G[r].line end)
  end
  local function xfer(s, d, kind, op)
    xs[#xs + 1] = import.xfer(s.rank, s.buf, s.idx, d.rank, d.buf, d.idx, s.n, kind, op.round, op.line, op.what)
  end
  for _, op in ipairs(ops) do
    if op.data and op.data.pairs then pair_transfers(op, xfer, rd)
    elseif op.data then reduce_transfers(op, xfer, rd) end
  end
  table.move(after, 1, #after, #xs + 1, xs)
  return xs
end

-- ------------------------------------------------------------------ entry

--- Is this text an MSCCL++ execution plan?
---@param text string
function M.detect(text)
  return text:match "^%s*{" ~= nil and text:find('"gpus"', 1, true) ~= nil
    and (text:find('"threadblocks"', 1, true) ~= nil or text:find('"ops"', 1, true) ~= nil)
end

-- The import record, with the file's TBs per rank and its rounds.
local function record(plan, xs, ops)
  local file_tbs, rounds = {}, 0
  for r = 0, plan.ranks - 1 do file_tbs[r + 1] = #plan.G[r].tbs end
  for _, op in ipairs(ops) do rounds = math.max(rounds, op.round + 1) end
  plan.details.rounds = rounds
  return {
    format = M.format, path = plan.path, line = 1, name = plan.name, collective = plan.coll, ranks = plan.ranks,
    chunks = plan.C * plan.split, inplace = plan.inplace, outofplace = not plan.inplace, xfers = xs,
    file_tbs = file_tbs, warnings = plan.warnings, details = plan.details,
  }
end

--- Import MSCCL++ execution plan text: the passes of the header, in order.
---@param text string
---@param path string file name used in messages and source positions
---@return table imp the common import record (see resccl.import)
function M.import(text, path)
  local plan, rd = read(text, path)
  normalise(plan, rd)
  local ops = run(plan, rd)
  return record(plan, transfers(plan, ops, rd), ops)
end

return M
