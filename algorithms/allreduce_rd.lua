-- Recursive halving and doubling all-reduce (Rabenseifner), N a power of two.
-- Halving (reduce-scatter): with distance d = N/2, N/4, ..., 1, rank r and
-- its partner r ~ d exchange the halves of their current chunk range: r
-- sends the chunks whose bit d differs from its own and keeps the rest.
-- Afterwards rank r holds chunk r reduced. Doubling (all-gather) retraces the
-- rounds in reverse, sending everything held so far.
local function is_pow2(n) return n >= 1 and n & (n - 1) == 0 end

return resccl.algorithm {
  name = "allreduce_rd",
  collective = "allreduce",
  description = "recursive halving reduce-scatter + recursive doubling all-gather",
  supports = function(a)
    return is_pow2(a.ranks), "needs a power-of-two number of ranks"
  end,
  build = function(a)
    local N, step = a.ranks, 0
    -- The chunks rank r holds once the bits above and including d are settled.
    local function held(r, d)
      local lo = r & ~(2 * d - 1) -- bits of r above d (d itself cleared below)
      return lo, 2 * d
    end
    local d = N // 2
    while d >= 1 do -- halving
      for r = 0, N - 1 do
        local base, width = held(r, d)
        for c = base, base + width - 1 do
          if (c & d) ~= (r & d) then a:transfer(r, r ~ d, step, c, "rrc") end
        end
      end
      step, d = step + 1, d // 2
    end
    d = 1
    while d < N do -- doubling
      for r = 0, N - 1 do
        local base = r & ~(d - 1)
        for c = base, base + d - 1 do a:transfer(r, r ~ d, step, c, "recv") end
      end
      step, d = step + 1, d * 2
    end
  end,
}
