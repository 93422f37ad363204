--- What the commands print: the report every command starts from, JSON,
--- and the text forms they share.
local M = {}

--- The TB policies as the reports name them.
M.NAMED = { state = "state-based", conn = "connection-based", manual = "hand-placed", merge = "merged" }

--- t as JSON text (lua-cjson).
function M.json(t)
  return require("cjson").encode(t)
end

--- The base report: the plan's (plan:report(), when there is a plan), the
--- algorithm's and the program's keys, and the verifier's verdict.
function M.new(alg, prog, topo, plan, err)
  local p, t = prog:info(), topo:info()
  local r = plan and plan:report() or {}
  r.algorithm, r.file, r.collective, r.ranks, r.topo = alg.name, alg.file, p.collective, p.ranks, t.spec
  r.chunks_per_block, r.transfers = p.chunks, p.transfers
  r.verify = err or (r.verified and "ok" or "not run")
  return r
end

--- Counts per rank: each for a few ranks, their range for many.
function M.per_rank(l)
  if #l <= 16 then return table.concat(l, " ") end
  local lo, hi = math.huge, -math.huge
  for _, v in ipairs(l) do lo, hi = math.min(lo, v), math.max(hi, v) end
  if lo == hi then return ("%d on each of %d ranks"):format(lo, #l) end
  return ("%d to %d over %d ranks"):format(lo, hi, #l)
end

--- One line of a key-value report (run, import).
function M.line(k, v) print(("%-12s %s"):format(k, v)) end

return M
