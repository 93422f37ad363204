--- Output files, written whole or not at all.
local M = {}

local core = require "resccl.core"

-- Refuse to replace what is not a regular file: renaming over a device, a
-- FIFO or a socket puts a file in its place. A symbolic link is replaced
-- itself, as rename does.
local function check_target(path)
  local kind = core.file_kind(path)
  if kind and kind ~= "file" and kind ~= "link" then
    error(("cannot write %s: not a regular file (%s)"):format(path, kind), 0)
  end
end

--- Write text to path ("-": standard output): into a new file of its own
--- beside PATH, renamed over PATH once every byte is written and the file
--- closed (core.write_file); on any failure PATH is left as it was. A
--- symbolic link at PATH is replaced, never its target.
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
  local ok, err = core.write_file(path, text)
  if not ok then error(("cannot write %s: %s"):format(path, err), 0) end
end

return M
