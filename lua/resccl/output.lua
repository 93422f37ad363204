--- Output files, written whole or not at all.
local M = {}

local ENOENT = 2 -- io.open's error number for a path that does not exist

-- Refuse to replace what is not a regular file: renaming over a device, a
-- FIFO or a socket puts a file in its place. Lua's io has no stat, so: a
-- regular file opens for reading and writing (a FIFO does too, at once, but
-- cannot seek) and has nothing past its end (/dev/zero and /dev/full do);
-- /dev/null passes both, hence the path check.
local function check_target(path)
  local f, err, code = io.open(path, "r+b")
  if not f then
    if code == ENOENT then return end
    error("cannot write " .. err, 0)
  end
  local size = f:seek "end"
  local past = size and f:read(1)
  f:close()
  if not size or past or path:match "^/dev/" then error(("cannot write %s: not a regular file"):format(path), 0) end
end

--- Write text to path ("-": standard output): into PATH.tmp, renamed over
--- PATH once every byte is written and the file closed; on any failure
--- PATH is left as it was and PATH.tmp removed. A symbolic link at PATH is
--- replaced, never its target.
---@param path string
---@param text string
function M.write(path, text)
  if path == "-" then
    local ok, err = io.stdout:write(text)
    if ok then ok, err = io.stdout:flush() end
    if not ok then error("cannot write to standard output: " .. err, 0) end
    return
  end
  check_target(path)
  local tmp = path .. ".tmp"
  local f, err = io.open(tmp, "wb")
  local ok = f
  if f then
    ok, err = f:write(text)
    local closed, cerr = f:close()
    ok, err = ok and closed, err or cerr
    if ok then ok, err = os.rename(tmp, path) end
    if not ok then os.remove(tmp) end
  end
  if not ok then error(("cannot write %s: %s"):format(path, err), 0) end
end

return M
