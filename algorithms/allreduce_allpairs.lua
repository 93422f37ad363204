-- All-pairs (one-shot) all-reduce: in one step every rank sends its whole
-- buffer to every other rank, into a scratch slot of its own there, and
-- each rank then reduces what arrived into its output. One hop, so the least
-- latency; each rank sends N-1 buffers (the ring: 2(N-1)/N, the same on two
-- ranks) and reduces N-1 (the ring: (N-1)/N). The scratch keeps the sent
-- values apart from the reduction, so the program serves in-place calls too;
-- out of place the compiler folds the first receive and its reduction into
-- one (on two ranks: a put reduced where it lands, two TBs per rank).
return resccl.algorithm {
  name = "allreduce_allpairs",
  collective = "allreduce",
  description = "one-shot all-reduce: every rank reduces every other rank's buffer, one step",
  build = function(a)
    local N, C = a.ranks, a.chunks
    local function slot(r, p) return (r < p and r or r - 1) * C end -- r's slot in p's scratch
    for p = 0, N - 1 do
      for r = 0, N - 1 do
        if r ~= p then a:chunk(r, "input", 0, C):copy(p, "scratch", slot(r, p)) end
      end
    end
    for p = 0, N - 1 do
      local acc = a:chunk(p, "input", 0, C):copy(p, "output", 0)
      for r = 0, N - 1 do
        if r ~= p then acc = acc:reduce(a:chunk(p, "scratch", slot(r, p), C)) end
      end
    end
  end,
}
