--- Importers: algorithm files from runtimes and synthesizers -> ReSCCLang.
--
-- Each format is one module in this directory with
--   M.format            a name for reports ("MSCCL XML", "TACCL JSON", ...)
--   M.detect(text)      true when the text looks like this format
--   M.import(text, path) -> the import record below, or error("file:line: ...", 0)
-- and is listed in FORMATS. Adding a synthesizer is adding a file here.
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

--- The 1-based line of byte offset `at` in text.
---@param text string
---@param at integer
function M.line_of(text, at)
  local n = 1
  for _ in text:sub(1, math.max(0, at - 1)):gmatch "\n" do n = n + 1 end
  return n
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

--- Import text in the given (or detected) format.
---@param text string
---@param path string
---@param format string|nil module name, e.g. "taccl_json"
---@return table imp
function M.from_text(text, path, format)
  local mod
  if format then
    mod = require("resccl.import." .. format)
  else
    mod = M.detect(text)
    if not mod and path:match "%.[xX][mM][lL]$" then mod = require "resccl.import.msccl_xml" end
    if not mod then
      local json = text:match "^%s*[%[{]"
      if json then M.json_decode(text, path) end -- report malformed JSON first
      error(("%s:1: not a known algorithm format (%s)"):format(path, json
        and "JSON without TACCL 'steps'/'sends', TE-CCL 'Flows' or MSCCL++ 'gpus'"
        or "MSCCL XML, TACCL JSON, TE-CCL JSON, MSCCL++ JSON"), 0)
    end
  end
  local imp = mod.import(text, path)
  imp.name = M.algorithm_name(imp.name, path)
  local moved = 0 -- transfers other than placement copies (steps -1 and 2^30)
  for _, x in ipairs(imp.xfers) do
    if x.step >= 0 and x.step < 1 << 30 then moved = moved + 1 end
  end
  if moved == 0 then error(("%s:%d: the file moves no data"):format(path, imp.line or 1), 0) end
  -- The core keeps state per rank and chunk; refuse sizes no real file has.
  local per = imp.chunks * ((imp.collective == "allreduce") and 2 or (imp.collective == "alltoall") and 2 * imp.ranks
    or imp.ranks + 1)
  if imp.chunks > MAX_CHUNKS then
    error(("%s:%d: %d chunks per block, more than resccl handles (%d)"):format(path, imp.line or 1, imp.chunks,
      MAX_CHUNKS), 0)
  end
  if imp.ranks * per > MAX_LOCATIONS then
    error(("%s:%d: %d ranks with %d chunks per block make %d buffer chunks, more than resccl handles (%d)"):format(
      path, imp.line or 1, imp.ranks, imp.chunks, imp.ranks * per, MAX_LOCATIONS), 0)
  end
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
