-- Ring all-reduce: a ring reduce-scatter (steps 0..N-2, reducing) followed by
-- a ring all-gather of the reduced chunks (steps N-1..2N-3, copying).
return resccl.algorithm {
  name = "allreduce_ring",
  collective = "allreduce",
  description = "ring all-reduce: reduce-scatter then all-gather, 2(N-1) steps",
  build = function(a)
    local N = a.ranks
    for r = 0, N - 1 do
      local peer = (r + 1) % N
      for step = 0, N - 2 do
        a:transfer(r, peer, step, (r - step - 1) % N, "rrc")
      end
      for step = 0, N - 2 do
        a:transfer(r, peer, N - 1 + step, (r - step) % N, "recv")
      end
    end
  end,
}
