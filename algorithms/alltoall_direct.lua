-- Direct all-to-all, in MSCCLang's chunk style: block p of rank r's input goes
-- to block r of rank p's output; the rank's own block is a local copy.
return resccl.algorithm {
  name = "alltoall_direct",
  collective = "alltoall",
  description = "direct all-to-all, one step",
  params = { chunks = 1 },
  chunks = function(a) return a.args.chunks end,
  build = function(a)
    local C = a.chunks
    for r = 0, a.ranks - 1 do
      for p = 0, a.ranks - 1 do
        a:chunk(r, "input", p * C, C):copy(p, "output", r * C)
      end
    end
  end,
}
