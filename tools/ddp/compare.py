#!/usr/bin/env python3
"""Compare two runs of tools/ddp/train.py (their --out JSON files).

    tools/ddp/compare.py A.json B.json [--rtol R] [--atol A] [--exact] [--rows N]

Exits 0 when both runs trained the same (same world size, dtype, steps and
shape), every step's loss agrees within tolerance, the final parameters' sum
of absolute values agrees too, and every rank of each run ended with the same
parameters; 1 when they differ; 2 when a file is unreadable or not train.py's.

Tolerance, |a - b| <= rtol * max(|a|, |b|) + atol: by default rtol 1e-5 for
f32 and 2e-2 for bf16. Another library sums the ranks' gradients in another
order, and that changes the last bit of a sum (2^-24 relative in f32, 2^-8 in
bf16), which later steps carry on; with two ranks the order cannot change a
sum (a + b == b + a), so two-rank runs often agree exactly. --exact demands
bit-equal losses and parameters (the same hash of their bytes).

Pure Python, no torch: tools/ddp/test_compare.sh runs it on hand-made files.
"""
import argparse
import json
import math
import sys

FORMAT = "resccl-ddp-train/1"
RTOL = {"f32": 1e-5, "bf16": 2e-2}
# what both runs must share for their losses to be comparable
SAME = ("world_size", "dtype", "steps", "size", "layers", "batch", "seed", "lr", "bucket_cap_mb")


def load(path):
    """A run's JSON, checked for the fields compare needs; raises ValueError."""
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: {e}") from e
    if not isinstance(run, dict) or run.get("format") != FORMAT:
        raise ValueError(f"{path}: not a train.py result (format {FORMAT!r})")
    losses = run.get("losses")
    if not isinstance(losses, list) or not all(isinstance(x, (int, float)) for x in losses):
        raise ValueError(f"{path}: 'losses' is not a list of numbers")
    for key in ("world_size", "dtype", "param_abs_sum", "param_sha256"):
        if key not in run:
            raise ValueError(f"{path}: no '{key}'")
    return run


def close(a, b, rtol, atol):
    if math.isnan(a) or math.isnan(b):
        return False
    return abs(a - b) <= rtol * max(abs(a), abs(b)) + atol


def rel(a, b):
    d = abs(a - b)
    return 0.0 if d == 0 else d / max(abs(a), abs(b))


def rows_to_show(n, bad, worst, limit):
    """Steps for the table: all when few, else first, last, worst, some failures, evenly between."""
    if n <= limit:
        return list(range(n))
    keep = {0, n - 1, worst, *bad[: limit // 4]}
    room = max(0, limit - len(keep))
    keep.update(round(i * (n - 1) / (room + 1)) for i in range(1, room + 1))
    return sorted(keep)


def compare(a, b, names, rtol=None, atol=1e-7, exact=False, rows=20, out=sys.stdout):
    """Print the table; return the problems found (empty: the runs agree)."""
    problems = []
    for key in SAME:
        if a.get(key) != b.get(key):
            problems.append(f"{key} differs: {a.get(key)!r} vs {b.get(key)!r}")
    if rtol is None:
        rtol = RTOL.get(a.get("dtype"), RTOL["f32"])
    la, lb = a["losses"], b["losses"]
    if len(la) != len(lb):
        problems.append(f"{len(la)} losses vs {len(lb)}")
    n = min(len(la), len(lb))
    bad = [i for i in range(n) if not (la[i] == lb[i] if exact else close(la[i], lb[i], rtol, atol))]
    worst = max(range(n), key=lambda i: rel(la[i], lb[i])) if n else 0
    wa, wb = (names[0][:16], names[1][:16])
    print(f"{'step':>5}  {wa:>16}  {wb:>16}  {'rel diff':>9}", file=out)
    for i in rows_to_show(n, bad, worst, rows):
        mark = "  <-- differs" if i in bad else ""
        print(f"{i:>5}  {la[i]:>16.9g}  {lb[i]:>16.9g}  {rel(la[i], lb[i]):>9.2e}{mark}", file=out)
    if n:
        print(f"losses: {n} steps, largest relative difference {rel(la[worst], lb[worst]):.2e} at step {worst}"
              f" ({'exact' if exact else f'rtol {rtol:g}, atol {atol:g}'}, {a.get('dtype')})", file=out)
    if bad:
        problems.append(f"{len(bad)} of {n} losses differ (first at step {bad[0]})")
    sa, sb = float(a["param_abs_sum"]), float(b["param_abs_sum"])
    same_hash = a["param_sha256"] == b["param_sha256"]
    print(f"parameters: sum |p| {sa:.12g} vs {sb:.12g} (rel {rel(sa, sb):.2e}), bytes "
          f"{'identical' if same_hash else 'differ'}", file=out)
    if exact and not same_hash:
        problems.append("parameters differ (sha256 of their bytes)")
    elif not close(sa, sb, rtol, atol):
        problems.append(f"sum of |parameters| differs beyond rtol {rtol:g}")
    for run, name in ((a, names[0]), (b, names[1])):
        if run.get("ranks_agree") is False:
            problems.append(f"{name}: the ranks ended with different parameters")
    for key in ("steps_per_s", "nccl", "resccl_preloaded"):
        if key in a or key in b:
            print(f"{key}: {a.get(key)} vs {b.get(key)}", file=out)
    return problems


def main(argv=None):
    p = argparse.ArgumentParser(description="Compare two tools/ddp/train.py results.")
    p.add_argument("a", help="first run's JSON (e.g. NCCL alone)")
    p.add_argument("b", help="second run's JSON (e.g. with libresccl-nccl.so preloaded)")
    p.add_argument("--rtol", type=float, help="relative tolerance (default: 1e-5 f32, 2e-2 bf16)")
    p.add_argument("--atol", type=float, default=1e-7, help="absolute tolerance (default 1e-7)")
    p.add_argument("--exact", action="store_true", help="bit-equal losses and parameters")
    p.add_argument("--rows", type=int, default=20, help="most table rows (default 20)")
    args = p.parse_args(argv)
    try:
        a, b = load(args.a), load(args.b)
    except ValueError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 2
    problems = compare(a, b, (args.a.rsplit("/", 1)[-1], args.b.rsplit("/", 1)[-1]), args.rtol, args.atol,
                       args.exact, args.rows)
    for msg in problems:
        print(f"compare.py: {msg}")
    print("compare.py: " + ("the runs agree" if not problems else "the runs DIFFER"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
