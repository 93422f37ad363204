-- All-pairs all-gather: every rank sends its chunk straight to every other
-- rank in one step (one hop; N-1 connections per rank).
return resccl.algorithm {
  name = "allgather_allpairs",
  collective = "allgather",
  description = "direct all-gather, one step",
  build = function(a)
    for r = 0, a.ranks - 1 do
      for p = 0, a.ranks - 1 do
        if p ~= r then a:transfer(r, p, 0, r, "recv") end
      end
    end
  end,
}
