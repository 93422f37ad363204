-- Hierarchical-mesh all-reduce (the paper's expert algorithm, Appendix A),
-- on N nodes of G GPUs, rank = node*G + g, one data buffer of N*G chunks:
--   1. intra-node reduce-scatter, direct: chunk c is reduced on local GPU c % G;
--   2. inter-node ring reduce-scatter among the GPUs with the same g, over
--      chunks k*G + g: afterwards rank (n, g) holds chunk n*G + g, reduced;
--   3. inter-node ring all-gather of those chunks among the same GPUs;
--   4. intra-node all-gather, direct: every GPU sends its N chunks to its peers.
return resccl.algorithm {
  name = "allreduce_hm",
  collective = "allreduce",
  description = "hierarchical mesh: intra RS, inter ring RS, inter ring AG, intra AG",
  build = function(a)
    local N, G = a.nodes, a.gpn
    for n = 0, N - 1 do -- 1
      for g = 0, G - 1 do
        for c = 0, N * G - 1 do
          if c % G ~= g then a:transfer(a:rank(n, g), a:rank(n, c % G), 0, c, "rrc") end
        end
      end
    end
    for s = 0, N - 2 do -- 2
      for n = 0, N - 1 do
        for g = 0, G - 1 do
          a:transfer(a:rank(n, g), a:rank((n + 1) % N, g), 1 + s, ((n - s - 1) % N) * G + g, "rrc")
        end
      end
    end
    for s = 0, N - 2 do -- 3
      for n = 0, N - 1 do
        for g = 0, G - 1 do
          a:transfer(a:rank(n, g), a:rank((n + 1) % N, g), N + s, ((n - s) % N) * G + g, "recv")
        end
      end
    end
    for n = 0, N - 1 do -- 4
      for g = 0, G - 1 do
        for k = 0, N - 1 do
          for g2 = 0, G - 1 do
            if g2 ~= g then a:transfer(a:rank(n, g), a:rank(n, g2), 2 * N - 1, k * G + g, "recv") end
          end
        end
      end
    end
  end,
}
