#!/bin/sh
# compare.py on hand-made results of train.py (no torch, no GPU): the same
# run agrees, a loss or the parameters off by more than the dtype's tolerance
# differ (1), a file that is not train.py's is refused (2); train.py parses
# its arguments without torch. CTest ddp_compare.
#   tools/ddp/test_compare.sh [PYTHON]
set -u
py=${1:-python3}
dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# result NAME DTYPE LOSS2 ABS_SUM "KEY=JSON;...": a result whose third loss and sum of |p| are given
result() {
  "$py" - "$tmp/$1.json" "$2" "$3" "$4" "$5" <<'EOF' || exit 2
import json, sys
path, dtype, loss2, pabs, extra = sys.argv[1:6]
r = {"format": "resccl-ddp-train/1", "world_size": 2, "dtype": dtype, "steps": 4, "size": 2048,
     "layers": 4, "batch": 64, "bucket_cap_mb": 25.0, "lr": 0.01, "seed": 0,
     "losses": [1.25, 0.75, float(loss2), 0.3125], "param_sum": 12.5, "param_abs_sum": float(pabs),
     "param_sha256": "ab" * 32, "param_count": 1000, "ranks_agree": True, "steps_per_s": 10.0}
for kv in filter(None, extra.split(";")):
    k, v = kv.split("=")
    r[k] = json.loads(v)
json.dump(r, open(path, "w"))
EOF
}
# expect RC ARGS...: compare.py ARGS exits RC
expect() {
  want=$1
  shift
  "$py" "$dir/compare.py" "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" != "$want" ]; then
    cat "$tmp/out"
    echo "FAIL: compare.py $* exited $rc, not $want"
    fail=1
  fi
}
result a f32 0.5 1000 ""
result same f32 0.5 1000 ""
result near f32 0.500001 1000.001 'param_sha256="cd"'      # 2e-6 and 1e-6 relative
result far f32 0.5001 1000 ""                              # 2e-4
result pfar f32 0.5 1000.1 ""                              # parameters 1e-4 off
result split f32 0.5 1000 'ranks_agree=false'
result short f32 0.5 1000 'losses=[1.25,0.75,0.5]'
result ws f32 0.5 1000 'world_size=4'
result ba bf16 0.5 1000 'bucket_cap_mb=12.5'
result bnear bf16 0.505 1000 'bucket_cap_mb=12.5'          # 1e-2: within bf16's 2e-2
result bfar bf16 0.55 1000 'bucket_cap_mb=12.5'            # 9e-2
result nan f32 NaN 1000 ""
expect 0 "$tmp/a.json" "$tmp/same.json"
expect 0 "$tmp/a.json" "$tmp/same.json" --exact
expect 0 "$tmp/a.json" "$tmp/near.json"
expect 1 "$tmp/a.json" "$tmp/near.json" --exact
expect 1 "$tmp/a.json" "$tmp/near.json" --rtol 1e-7
expect 1 "$tmp/a.json" "$tmp/far.json"
expect 0 "$tmp/a.json" "$tmp/far.json" --rtol 1e-3
expect 1 "$tmp/a.json" "$tmp/pfar.json"
expect 1 "$tmp/a.json" "$tmp/split.json"
expect 1 "$tmp/a.json" "$tmp/short.json"
expect 1 "$tmp/a.json" "$tmp/ws.json"
expect 1 "$tmp/a.json" "$tmp/ba.json"
expect 0 "$tmp/ba.json" "$tmp/bnear.json"
expect 1 "$tmp/ba.json" "$tmp/bfar.json"
expect 1 "$tmp/a.json" "$tmp/nan.json"
echo '{"format": "other"}' >"$tmp/other.json"
echo '{' >"$tmp/broken.json"
expect 2 "$tmp/a.json" "$tmp/other.json"
expect 2 "$tmp/a.json" "$tmp/broken.json"
expect 2 "$tmp/a.json" "$tmp/missing.json"
# the table names the step that differs
"$py" "$dir/compare.py" "$tmp/a.json" "$tmp/far.json" >"$tmp/out" 2>&1
grep -q '^ *2 .*<-- differs' "$tmp/out" || { cat "$tmp/out"; echo "FAIL: step 2 not marked"; fail=1; }
# train.py: --help and a bad argument need no torch
"$py" "$dir/train.py" --help >"$tmp/out" 2>&1 || { cat "$tmp/out"; echo "FAIL: train.py --help"; fail=1; }
"$py" "$dir/train.py" --dtype f16 >"$tmp/out" 2>&1
[ $? = 2 ] || { cat "$tmp/out"; echo "FAIL: train.py --dtype f16 not refused"; fail=1; }
[ $fail = 0 ] && echo "test_compare: passed"
exit $fail
