#!/bin/sh
# Summarise a RESCCL_TRACE file (docs/runtime.md): per GPU, placement, rank,
# TB, primitive and micro-batch, the mean over slices of when it began and
# ended (us from the GPU's first event) and the latest end, in order of
# beginning. Flag waits (kind 0) show as "wait", waits for a slice's previous
# unit (kind 2) as "slice". With `blocks`: one line per block instead (its
# SM, first begin, last end, time in primitives and in waits of both kinds,
# primitives run), slowest last.
#   tools/gpu/trace-summary.sh TRACE [PLACEMENT] [blocks]     PLACEMENT: out (default) or in
set -u
if [ "${3:-}" = blocks ]; then
  awk -v want="${2:-out}" '
  $2 == want {
    k = $1 " " $4 " " $5 " " $6
    if (!(k in b) || $11 < b[k]) b[k] = $11
    if ($12 > e[k]) e[k] = $12
    if ($10 == 1) { p[k] += $12 - $11; n[k]++ } else w[k] += $12 - $11
    sm[k] = $13
  }
  END {
    for (k in b) {
      split(k, f, " ")
      printf "%10.2f %10.2f %10.2f %10.2f %6d  gpu %s rank %s tb %s chan %s sm %s\n", b[k] / 1e3, e[k] / 1e3, p[k] / 1e3,
        w[k] / 1e3, n[k], f[1], f[2], f[3], f[4], sm[k]
    }
  }' "$1" | sort -k2 -n | awk 'BEGIN { print "     begin        end      prims      waits  prims  (us)" } { print }'
  exit
fi
awk -v want="${2:-out}" '
$2 == want {
  k = $1 " " $4 " " $5 " " $8 " " $9 " " $10
  n[k]++; b[k] += $11; e[k] += $12
  if ($12 > last[k]) last[k] = $12
}
END {
  for (k in n) {
    split(k, f, " ")
    printf "%10.2f %10.2f %10.2f  gpu %s rank %s tb %s %s %s m %s (%d)\n", b[k] / n[k] / 1e3, e[k] / n[k] / 1e3,
      last[k] / 1e3, f[1], f[2], f[3], f[6] == 0 ? "wait" : f[6] == 2 ? "slice" : "prim", f[4], f[5], n[k]
  }
}' "$1" | sort -n | awk 'BEGIN { print "     begin        end   last end  (us; mean over slices)" } { print }'
