#!/bin/sh
# Summarise a RESCCL_TRACE file (docs/runtime.md): per GPU, placement, rank,
# TB, primitive and micro-batch, the mean over channels of when it began and
# ended (us from the GPU's first event) and the latest end, in order of
# beginning. Flag waits (kind 0) show as "wait".
#   tools/trace-summary.sh TRACE [PLACEMENT]     PLACEMENT: out (default) or in
set -u
awk -v want="${2:-out}" '
$2 == want {
  k = $1 " " $4 " " $5 " " $7 " " $8 " " $9
  n[k]++; b[k] += $10; e[k] += $11
  if ($11 > last[k]) last[k] = $11
  ch[k] = $6 + 1 > ch[k] ? $6 + 1 : ch[k]
}
END {
  for (k in n) {
    split(k, f, " ")
    printf "%10.2f %10.2f %10.2f  gpu %s rank %s tb %s %s %s m %s (%d ch)\n", b[k] / n[k] / 1e3, e[k] / n[k] / 1e3,
      last[k] / 1e3, f[1], f[2], f[3], f[6] == 0 ? "wait" : "prim", f[4], f[5], n[k]
  }
}' "$1" | sort -n | awk 'BEGIN { print "     begin        end   last end  (us; mean over channels)" } { print }'
