--- Importers: algorithm files from runtimes and synthesizers -> ReSCCLang.
--
-- Each format is one module in this directory with
--   M.format            a name for reports ("MSCCL XML", "TACCL JSON", ...)
--   M.detect(text)      true when the text looks like this format
--   M.import(text, path) -> the import record below, or error("file:line: ...", 0)
-- and is listed in FORMATS. Adding a synthesizer is adding a file here.
-- Each importer's header lists its passes, and its M.import calls one
-- function per pass in that order. What two or more of them (or the MSCCL
-- XML exporter) share is here: messages and JSON checks (checker, shown,
-- json_decode, liner), the collectives' geometry and in-place aliasing
-- (COLLECTIVES, buffer_sizes, inplace_ref, inplace_copies), walks over a
-- file's TBs (tb_list, step_list, runqueue, by_round), the transfer
-- record (xfer) and a file's name without its extension (base_name).
--
-- The import record:
--   { format, path, line, name, collective, ranks, chunks, inplace, outofplace,
--     xfers = { { src, sbuf, sidx, dst, dbuf, didx, cnt, op, step, line, hint, what }, ... },
--     file_tbs = { TBs of rank 0, ... } or nil, hints = true or nil,
--     warnings = { "file:line: ...", ... }, details = {...} }
-- Transfers are in an order that respects the file's dependencies; `step`
-- never decreases along it, so the core's (step, record order) sort keeps it.
-- With `hints`, each transfer from the file has `hint` = { send_tb,
-- send_step, recv_tb, recv_step, channel } (a receive and the send it feeds
-- share a TB and step: a fused step, such as rcs); M.algorithm records it
-- with prog:hint, so `--tb manual` runs the file's own TBs, and puts
-- placement copies the file lacks on one extra TB. A format whose TBs do not
-- map to send/receive pairs reports `file_tbs` without hints.
local resccl = require "resccl"

local M = {}

-- Tried in this order; JSON formats are told apart by their keys.
local FORMATS = { "msccl_xml", "taccl_json", "teccl_json", "mscclpp_json" }

--- The collectives' names in files, and resccl's name for each.
M.COLLECTIVES = {
  allreduce = "allreduce", allgather = "allgather", alltoall = "alltoall",
  reducescatter = "reducescatter", reduce_scatter = "reducescatter",
}

-- Largest ranks x (input + output) chunks an import may describe, and
-- chunks per block (core.program's bound).
local MAX_LOCATIONS, MAX_CHUNKS = 1 << 22, 1 << 16

local function readfile(path)
  local f, err = io.open(path, "rb")
  local s
  if f then
    s, err = f:read "a" -- nil and a message for a directory
    f:close()
  end
  if not s then error(("%s: cannot read: %s"):format(path, err), 0) end
  return s
end

--- The keys of a table, sorted (importers walk JSON objects in a stable order).
---@param t table
---@return table
function M.sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

--- Running a file's TBs abstractly: a queue of runnable TBs, each in it at
--- most once, and TBs blocked on a key until that key is woken.
function M.runqueue()
  local q, h, t, queued, waiters = {}, 1, 0, {}, {}
  local rq = {}
  function rq.ready(tb)
    if not queued[tb] then
      queued[tb] = true
      t = t + 1
      q[t] = tb
    end
  end
  --- The next runnable TB, or nil when none is left.
  function rq.pop()
    if h > t then return nil end
    local tb = q[h]
    q[h], h, queued[tb] = nil, h + 1, nil
    return tb
  end
  function rq.block(tb, key)
    local w = waiters[key]
    if not w then
      w = {}
      waiters[key] = w
    end
    w[#w + 1] = tb
  end
  function rq.wake(key)
    for _, tb in ipairs(waiters[key] or {}) do rq.ready(tb) end
    waiters[key] = nil
  end
  return rq
end

--- A function from byte offset to 1-based line in text (one scan, then a
--- binary search per call).
---@param text string
---@return fun(at: integer): integer
function M.liner(text)
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

--- The 1-based line of byte offset `at` in text.
---@param text string
---@param at integer
function M.line_of(text, at)
  return M.liner(text)(at)
end

--- A JSON value as messages show it: integers without ".0" (cjson decodes
--- every number as a float), strings quoted and cut short.
---@param v any
---@param null any cjson's null
function M.shown(v, null)
  if type(v) == "string" then return "'" .. v:sub(1, 40) .. "'" end
  if v == nil then return "nothing" end
  if v == null then return "null" end
  if type(v) == "table" then return "a list or object" end
  return tostring(math.tointeger(v) or v)
end

--- An importer's messages about one file, and the checks of its JSON values.
--- c.fail(line, fmt, ...) raises "path:line: ..."; c.warn(line, fmt, ...)
--- adds it to `warnings`; c.shown(v) is M.shown with cjson's null; c.int,
--- c.list and c.object return a value of that type or fail with `what`.
---@param path string
---@param warnings table|nil
---@param null any cjson's null (nil for other formats)
function M.checker(path, warnings, null)
  local c = {}
  function c.fail(line, fmt, ...) error(("%s:%d: " .. fmt):format(path, line or 0, ...), 0) end
  function c.warn(line, fmt, ...) warnings[#warnings + 1] = ("%s:%d: " .. fmt):format(path, line or 0, ...) end
  function c.shown(v) return M.shown(v, null) end
  --- An integer in lo..hi.
  function c.int(v, what, line, lo, hi)
    local n = math.type(v) and math.tointeger(v)
    if not n or n < lo or n > hi then
      c.fail(line, "%s must be an integer in %d..%d, got %s", what, lo, hi, c.shown(v))
    end
    return n
  end
  --- A list (a table with keys 1..n only); with `optional`, nothing is {}.
  function c.list(v, what, line, optional)
    if v == nil and optional then return {} end
    local ok = type(v) == "table"
    if ok then
      local n = #v
      for k in pairs(v) do
        if math.type(k) ~= "integer" or k < 1 or k > n then ok = false break end
      end
    end
    if not ok then c.fail(line, "%s must be a list, got %s", what, c.shown(v)) end
    return v
  end
  function c.object(v, what, line)
    if type(v) ~= "table" then c.fail(line, "%s must be an object, got %s", what, c.shown(v)) end
    return v
  end
  return c
end

--- A file's base name without its extension, or `dflt` when it has none.
---@param path string
---@param dflt string
function M.base_name(path, dflt)
  return path:match "([^/]+)%.[^.]*$" or dflt
end

--- One transfer of the import record.
function M.xfer(src, sbuf, sidx, dst, dbuf, didx, cnt, op, step, line, what, hint)
  return { src = src, sbuf = sbuf, sidx = sidx, dst = dst, dbuf = dbuf, didx = didx, cnt = cnt, op = op, step = step,
    line = line, what = what, hint = hint }
end

--- Input and output chunks per rank of a collective with C chunks per block.
---@return integer input, integer output
function M.buffer_sizes(coll, R, C)
  return (coll == "reducescatter" or coll == "alltoall") and R * C or C,
    (coll == "allgather" or coll == "alltoall") and R * C or C
end

-- In-place files address one buffer through both names. The core aliases
-- the output in place; but a reduce-scatter's in-place buffer is its input,
-- which out of place is the caller's and stays as it was (NCCL's sendbuff
-- is const), so such a file works in scratch after its own (from `base`):
-- the input copied there first and the result copied out last, in both
-- placements (the program is one).

--- Where rank r's (buf, idx) of an in-place file lives in resccl's buffers.
---@param base integer the rank's first scratch chunk after the file's own
---@return string buf, integer idx
function M.inplace_ref(coll, C, base, r, buf, idx)
  if coll == "reducescatter" then
    if buf ~= "scratch" then return "scratch", base + (buf == "output" and r * C or 0) + idx end
  elseif buf == "input" then
    return "output", (coll == "allgather" and r * C or 0) + idx
  end
  return buf, idx
end

--- The placement copies of an in-place file: on each rank the input enters
--- the in-place buffer first (a copy the core drops for in-place calls), and
--- a reduce-scatter's result leaves scratch last.
---@param base fun(r: integer): integer the rank's `base` for M.inplace_ref
---@param line fun(r: integer): integer the line a rank's copies show
---@return table before, table after transfers
function M.inplace_copies(coll, R, C, base, line)
  local before, after = {}, {}
  local nin = M.buffer_sizes(coll, R, C)
  for r = 0, R - 1 do
    local buf, idx = M.inplace_ref(coll, C, base(r), r, "input", 0)
    before[r + 1] = M.xfer(r, "input", 0, r, buf, idx, coll == "allgather" and C or nin, "copy", -1, line(r),
      "in-place input")
    if coll == "reducescatter" then
      buf, idx = M.inplace_ref(coll, C, base(r), r, "output", 0)
      after[r + 1] = M.xfer(r, buf, idx, r, "output", 0, C, "copy", 1 << 30, line(r), "in-place output")
    end
  end
  return before, after
end

--- The TBs of ranks 0..R-1 (gpus[r].tbs), in order, as one list.
function M.tb_list(gpus, R)
  local list = {}
  for r = 0, R - 1 do
    for _, tb in ipairs(gpus[r].tbs) do list[#list + 1] = tb end
  end
  return list
end

--- The entries of list `key` (steps, ops) of the TBs, in order, as one list.
function M.step_list(tbs, key)
  local list = {}
  for _, tb in ipairs(tbs) do
    for _, st in ipairs(tb[key]) do list[#list + 1] = st end
  end
  return list
end

--- Steps (or ops) in the order a file's run gave them: by round, then by
--- st.seq, the step's place in the order of ranks, TB ids and the TB's steps.
function M.by_round(x, y)
  if x.round ~= y.round then return x.round < y.round end
  return x.seq < y.seq
end

--- Decode JSON with lua-cjson; malformed input is "file:line: malformed JSON: ...".
---@param text string
---@param path string
function M.json_decode(text, path)
  local cjson = require("cjson").new()
  cjson.decode_invalid_numbers(false)
  cjson.decode_max_depth(64)
  local ok, v = pcall(cjson.decode, text)
  if not ok then
    local msg = tostring(v)
    local at = tonumber(msg:match "character (%d+)")
    msg = msg:gsub(" at character %d+", "")
    error(("%s:%d: malformed JSON: %s"):format(path, at and M.line_of(text, at) or 1, msg), 0)
  end
  return v, cjson.null
end

--- Which importer module takes this text (nil when none).
---@param text string
---@return table|nil module
function M.detect(text)
  for _, name in ipairs(FORMATS) do
    local mod = require("resccl.import." .. name)
    if mod.detect(text) then return mod end
  end
  return nil
end

--- Does `path` name a file an importer reads (by extension or first byte)?
---@param path string
function M.claims(path)
  if path:match "%.[xX][mM][lL]$" or path:match "%.[jJ][sS][oO][nN]$" then return true end
  local f = io.open(path, "rb")
  if not f then return false end
  local head = f:read(256) or ""
  f:close()
  return head:match "^\239?\187?\191?%s*[<{]" ~= nil
end

--- A file's name for an algorithm, as resccl.algorithm{} takes it: bytes
--- other than letters, digits and '_.+-' become '_', as does a first '.+-',
--- cut at 63 bytes; an empty one comes from the file's name.
---@param name string|nil the file's own name for it
---@param path string
---@return string
function M.algorithm_name(name, path)
  local function word(s) return (s:sub(1, 63):gsub("[^A-Za-z0-9_.+-]", "_"):gsub("^[.+-]", "_")) end
  if name and name ~= "" then return word(name) end
  local base = path:match "([^/]*)$"
  base = base:gsub("%.[^.]*$", "")
  return base ~= "" and word(base) or "imported"
end

-- The module that reads text in `format`, or the one that detects it.
local function module_for(text, path, format)
  if format then return require("resccl.import." .. format) end
  local mod = M.detect(text)
  if not mod and path:match "%.[xX][mM][lL]$" then mod = require "resccl.import.msccl_xml" end
  if mod then return mod end
  local json = text:match "^%s*[%[{]"
  if json then M.json_decode(text, path) end -- report malformed JSON first
  error(("%s:1: not a known algorithm format (%s)"):format(path, json
    and "JSON without TACCL 'steps'/'sends', TE-CCL 'Flows' or MSCCL++ 'gpus'"
    or "MSCCL XML, TACCL JSON, TE-CCL JSON, MSCCL++ JSON"), 0)
end

-- Refuse a record that moves nothing, or that is larger than the core keeps
-- state for (per rank and chunk; no real file comes near).
local function check_size(imp, path)
  local moved = 0 -- transfers other than placement copies (steps -1 and 2^30)
  for _, x in ipairs(imp.xfers) do
    if x.step >= 0 and x.step < 1 << 30 then moved = moved + 1 end
  end
  if moved == 0 then error(("%s:%d: the file moves no data"):format(path, imp.line or 1), 0) end
  local nin, nout = M.buffer_sizes(imp.collective, imp.ranks, imp.chunks)
  local per = nin + nout
  if imp.chunks > MAX_CHUNKS then
    error(("%s:%d: %d chunks per block, more than resccl handles (%d)"):format(path, imp.line or 1, imp.chunks,
      MAX_CHUNKS), 0)
  end
  if imp.ranks * per > MAX_LOCATIONS then
    error(("%s:%d: %d ranks with %d chunks per block make %d buffer chunks, more than resccl handles (%d)"):format(
      path, imp.line or 1, imp.ranks, imp.chunks, imp.ranks * per, MAX_LOCATIONS), 0)
  end
end

--- Import text in the given (or detected) format.
---@param text string
---@param path string
---@param format string|nil module name, e.g. "taccl_json"
---@return table imp
function M.from_text(text, path, format)
  local imp = module_for(text, path, format).import(text, path)
  imp.name = M.algorithm_name(imp.name, path)
  check_size(imp, path)
  return imp
end

--- Read and import a file.
---@param path string
---@return table imp
function M.read(path)
  return M.from_text(readfile(path), path)
end

--- A ReSCCLang algorithm that records the imported transfers, with the
--- file's positions and TB hints.
---@param imp table an import record
---@return table algorithm
function M.algorithm(imp)
  local alg = resccl.algorithm {
    name = imp.name,
    collective = imp.collective,
    description = ("%s imported from %s"):format(imp.format, imp.path),
    ranks = imp.ranks,
    chunks = imp.chunks,
    inplace = imp.inplace,
    build = function(a)
      local prog = resccl.builder_program(a)
      for _, x in ipairs(imp.xfers) do
        local first, n = prog:xfer(x.src, x.sbuf, x.sidx, x.dst, x.dbuf, x.didx, x.cnt, x.op, x.step,
          ("%s:%d"):format(imp.path, x.line or 0))
        local h = x.hint
        if not h and imp.hints then
          -- A placement copy the file does not have (it is in-place only):
          -- one extra TB per rank runs them, input first, output last.
          local tb = imp.file_tbs[x.src + 1]
          h = { tb, x.step < 0 and 0 or 1, tb, x.step < 0 and 0 or 1, -1 }
        end
        -- A transfer that spans blocks is recorded as one per block; every
        -- piece keeps the file's TB and step (pipeline order breaks the tie).
        for i = first, first + (n or 1) - 1 do
          if h then prog:hint(i, h[1], h[2], h[3], h[4], h[5]) end
        end
      end
    end,
  }
  alg.file, alg.line = imp.path, imp.line or 1
  alg.import = imp
  return alg
end

--- Load a file as an algorithm (what resccl.load does for .xml and .json).
---@param path string
---@return table algorithm
function M.load(path)
  return M.algorithm(M.read(path))
end

-- ---------------------------------------------------------- ReSCCLang out

-- Text from the input in the Lua written, as one line of printable ASCII:
-- control bytes, bytes above 127, '"' and '\' become \ddd escapes. In a
-- "..." literal it reads back as the same bytes; in a -- comment it ends
-- nothing and starts no line.
local function lua_text(s)
  return (tostring(s):gsub('[%c"\\\128-\255]', function(c) return ("\\%03d"):format(c:byte()) end))
end

local function lua_string(s) return '"' .. lua_text(s) .. '"' end

--- Write an import record as an editable ReSCCLang program (chunk style).
---@param imp table
---@return string source
function M.to_lua(imp)
  local o = {}
  local function w(fmt, ...) o[#o + 1] = fmt:format(...) end
  local base = imp.path:match "([^/]+)$"
  w("-- %s: %s on %d ranks, %d chunk%s per block, %d transfers.", lua_text(imp.name), lua_text(imp.collective),
    imp.ranks, imp.chunks, imp.chunks == 1 and "" or "s", #imp.xfers)
  w("-- Imported from %s (%s) by `resccl import`; edit freely.", lua_text(imp.path), imp.format)
  w("-- Each line is one transfer, in an order that respects the original's")
  w("-- dependencies; the comment gives the original's line and operation.")
  w("-- resccl reschedules it (HPDS) and allocates its own thread blocks.")
  w("return resccl.algorithm {")
  w("  name = %s,", lua_string(imp.name))
  w("  collective = %s,", lua_string(imp.collective))
  w("  description = %s,", lua_string(("imported from %s (%s)"):format(base, imp.format)))
  w("  ranks = %d,", imp.ranks)
  w("  chunks = %d,", imp.chunks)
  w("  inplace = %s,", tostring(imp.inplace))
  w("  build = function(a)")
  local round
  for _, x in ipairs(imp.xfers) do
    if x.step ~= round then
      round = x.step
      if round < 0 then w("    -- placement: the input enters the in-place buffer")
      elseif round >= 1 << 30 then w("    -- placement: the result leaves the in-place buffer")
      else w("    -- round %d", round) end
    end
    local n = x.cnt > 1 and (", " .. x.cnt) or ""
    local note = ("  -- %s:%d %s"):format(lua_text(base), x.line or 0, lua_text(x.what or ""))
    if x.op == "reduce" then
      w("    a:chunk(%d, %s, %d%s):reduce(a:chunk(%d, %s, %d%s))%s", x.dst, lua_string(x.dbuf), x.didx, n, x.src,
        lua_string(x.sbuf), x.sidx, n, note)
    else
      w("    a:chunk(%d, %s, %d%s):copy(%d, %s, %d)%s", x.src, lua_string(x.sbuf), x.sidx, n, x.dst,
        lua_string(x.dbuf), x.didx, note)
    end
  end
  w("  end,")
  w("}")
  return table.concat(o, "\n") .. "\n"
end

return M
