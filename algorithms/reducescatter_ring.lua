-- Ring reduce-scatter: at step s, rank r sends chunk r-s-1 (reduced at the
-- previous step) to rank r+1, which reduces it into its own copy. After N-1
-- steps rank r holds chunk r, fully reduced.
return resccl.algorithm {
  name = "reducescatter_ring",
  collective = "reducescatter",
  description = "ring reduce-scatter, N-1 steps",
  build = function(a)
    local N = a.ranks
    for r = 0, N - 1 do
      for step = 0, N - 2 do
        a:transfer(r, (r + 1) % N, step, (r - step - 1) % N, "rrc")
      end
    end
  end,
}
