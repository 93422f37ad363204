-- Hierarchical-mesh all-gather (the paper's expert algorithm, Appendix A), on
-- N nodes of G GPUs, rank = node*G + g:
--   1. inter-node ring all-gather among the GPUs with the same g: rank (n, g)
--      ends with chunks k*G + g of every node k;
--   2. intra-node all-gather, direct: every GPU sends those N chunks to its peers.
return resccl.algorithm {
  name = "allgather_hm",
  collective = "allgather",
  description = "hierarchical mesh: inter-node ring AG, then intra-node direct AG",
  build = function(a)
    local N, G = a.nodes, a.gpn
    for s = 0, N - 2 do -- 1
      for n = 0, N - 1 do
        for g = 0, G - 1 do
          a:transfer(a:rank(n, g), a:rank((n + 1) % N, g), s, ((n - s) % N) * G + g, "recv")
        end
      end
    end
    for n = 0, N - 1 do -- 2
      for g = 0, G - 1 do
        for k = 0, N - 1 do
          for g2 = 0, G - 1 do
            if g2 ~= g then a:transfer(a:rank(n, g), a:rank(n, g2), N - 1, k * G + g, "recv") end
          end
        end
      end
    end
  end,
}
