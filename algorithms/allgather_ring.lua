-- Ring all-gather (the paper's Fig. 5a): at step s, rank r sends chunk r-s,
-- the one it received at step s-1, to rank r+1. N-1 steps.
return resccl.algorithm {
  name = "allgather_ring",
  collective = "allgather",
  description = "ring all-gather, N-1 steps",
  build = function(a)
    local N = a.ranks
    for r = 0, N - 1 do
      for step = 0, N - 2 do
        a:transfer(r, (r + 1) % N, step, (r - step) % N, "recv")
      end
    end
  end,
}
