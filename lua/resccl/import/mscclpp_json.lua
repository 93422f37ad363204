--- MSCCL++ execution plans (JSON, v1 and v2 schemas): recognised, not imported.
--
-- A plan's one-sided operations (put, get, rres, signal/wait on semaphores)
-- do not pair into send/receive transfers the way MSCCL XML steps do, so
-- this module only names the format, so that users get a precise message
-- instead of "unknown format".
local M = {}

M.format = "MSCCL++ JSON"

--- Is this text an MSCCL++ execution plan?
function M.detect(text)
  return text:match "^%s*{" ~= nil and text:find('"gpus"', 1, true) ~= nil
    and (text:find('"threadblocks"', 1, true) ~= nil or text:find('"ops"', 1, true) ~= nil)
end

--- Always an error: the plan's format and why it cannot be imported.
function M.import(text, path)
  local name = text:match '"name"%s*:%s*"([^"]*)"' or "?"
  error(("%s:1: MSCCL++ execution plan '%s' is not supported: its one-sided operations (put, get, rres, "
    .. "signal/wait) have no send/receive pairs to import; import the MSCCL XML form of the algorithm instead")
    :format(path, name), 0)
end

return M
