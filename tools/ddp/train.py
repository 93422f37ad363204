#!/usr/bin/env python3
"""A small PyTorch DDP training run: an MLP on synthetic data, fixed seed, one GPU per rank.

    torchrun --nnodes=1 --nproc_per_node=N --master_addr=127.0.0.1 --master_port=29500 \\
        tools/ddp/train.py [--steps S] [--size WIDTH] [--dtype f32|bf16] [--bucket-mb MB] [--out FILE]
    python3 tools/ddp/train.py ...          one process on one GPU (world size 1), no launcher

Every rendezvous stays on loopback: launch with --master_addr=127.0.0.1 (torchrun's static
rendezvous), or --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT. Where the launcher set
no MASTER_ADDR, this script sets 127.0.0.1 (and RANK, WORLD_SIZE, LOCAL_RANK for a lone
process); NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME and RESCCL_SOCKET_IFNAME default to lo.

The model is a 64-wide input layer, --layers hidden Linear(size, size) layers and a head
through 256 to 16, trained with SGD (momentum) toward a fixed random teacher. DDP's
all-reduces are its gradient buckets, filled from the last layer back, each closed once it
holds --bucket-mb (default 25 in f32, 12.5 in bf16: the same layers per bucket; DDP closes
its first bucket at 1 MiB). With the defaults (width 2048, 4 layers) that is, from the second
step on (DDP rebuilds its buckets in the order the first step's gradients came), four
all-reduces a step: the head (2 MiB in f32, 1 MiB in bf16), two of two hidden layers
(32 MiB, 16 MiB) and the input layer (520 KiB, 260 KiB).

Rank 0 prints each step's loss and writes FILE: the losses, the final parameters' sum and
sum of absolute values (in float64) and sha256 of their bytes, whether every rank ended
with the same parameters, steps/s, world size, dtype, the torch and NCCL versions, DDP's
record of its buckets, which libnccl the process mapped and whether libresccl-nccl.so was
preloaded.
tools/ddp/compare.py compares two such files; tools/ddp/run.sh runs both sides.

Parsing and the result's layout need no torch (torch is imported in train()), so that
`train.py --help` and compare.py run on machines without it.
"""
import argparse
import hashlib
import json
import os
import sys
import time

FORMAT = "resccl-ddp-train/1"
IN_DIM, HEAD, OUT_DIM = 64, 256, 16
LOOPBACK = ("127.", "localhost", "::1")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="A small DDP training run on synthetic data (see the file's header).")
    p.add_argument("--steps", type=int, default=50, help="optimizer steps (default 50)")
    p.add_argument("--size", type=int, default=2048, help="width of the hidden layers (default 2048)")
    p.add_argument("--layers", type=int, default=4, help="hidden size x size layers (default 4)")
    p.add_argument("--batch", type=int, default=64, help="samples per rank and step (default 64)")
    p.add_argument("--dtype", choices=("f32", "bf16"), default="f32", help="parameters and gradients (default f32)")
    p.add_argument("--bucket-mb", dest="bucket_mb", type=float,
                   help="DDP's bucket_cap_mb: MiB of gradients that close a bucket (default 25 f32, 12.5 bf16)")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, the teacher and the data (default 0)")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of steps/s (default 5)")
    p.add_argument("--out", help="JSON file rank 0 writes at the end")
    args = p.parse_args(argv)
    for name in ("steps", "size", "layers", "batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.bucket_mb is None:
        args.bucket_mb = 25.0 if args.dtype == "f32" else 12.5
    if args.bucket_mb <= 0:
        p.error("--bucket-mb must be positive")
    if args.warmup < 0:
        p.error("--warmup must not be negative")
    return args


def loopback_env(env=os.environ):
    """Defaults that keep every rendezvous on loopback and let a lone process start;
    returns a warning when the launcher chose another MASTER_ADDR (it cannot be moved now)."""
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", "29500")
    for k in ("RANK", "LOCAL_RANK"):
        env.setdefault(k, "0")
    env.setdefault("WORLD_SIZE", "1")
    for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "RESCCL_SOCKET_IFNAME"):
        env.setdefault(k, "lo")
    # deterministic cuBLAS, so that two runs differ only by their all-reduces
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    addr = env["MASTER_ADDR"]
    if not addr.startswith(LOOPBACK):
        return f"MASTER_ADDR={addr} is not loopback: launch with --master_addr=127.0.0.1"
    return None


def mapped_libs(maps="/proc/self/maps"):
    """Paths of libnccl and libresccl-nccl mapped into this process."""
    found = set()
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if "libnccl" in path or "libresccl-nccl" in path:
                    found.add(path)
    except OSError:
        pass
    return sorted(found)


def result(args, world_size, losses, params, seconds, timed_steps, ranks_agree, info):
    """The JSON rank 0 writes. params: (sum, sum of |p|, sha256 hex, number of elements)."""
    psum, pabs, sha, count = params
    r = {
        "format": FORMAT,
        "world_size": world_size,
        "dtype": args.dtype,
        "steps": args.steps,
        "size": args.size,
        "layers": args.layers,
        "batch": args.batch,
        "bucket_cap_mb": args.bucket_mb,
        "lr": args.lr,
        "seed": args.seed,
        "losses": losses,
        "param_sum": psum,
        "param_abs_sum": pabs,
        "param_sha256": sha,
        "param_count": count,
        "ranks_agree": ranks_agree,
        "time_s": seconds,
        "steps_per_s": timed_steps / seconds if seconds > 0 and timed_steps > 0 else None,
    }
    r.update(info)
    return r


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def train(args):
    warning = loopback_env()
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0 and warning:
        print(f"train.py: warning: {warning}", file=sys.stderr)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]

    # the same model on every rank (DDP broadcasts rank 0's anyway)
    torch.manual_seed(args.seed)
    layers = [nn.Linear(IN_DIM, args.size), nn.GELU()]
    for _ in range(args.layers):
        layers += [nn.Linear(args.size, args.size), nn.GELU()]
    layers += [nn.Linear(args.size, HEAD), nn.GELU(), nn.Linear(HEAD, OUT_DIM)]
    model = nn.Sequential(*layers).to(device=dev, dtype=dtype)
    teacher = torch.randn(IN_DIM, OUT_DIM, generator=torch.Generator().manual_seed(args.seed + 1)) / IN_DIM**0.5
    teacher = teacher.to(dev)
    ddp = DDP(model, device_ids=[local_rank], bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)

    # each rank its own data, the same in every run: seeded by (seed, rank)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed * 1000003 + 7919 * (rank + 1))
    losses = []
    t0 = None
    torch.cuda.synchronize()
    start = time.perf_counter()
    for step in range(args.steps):
        if step == min(args.warmup, args.steps - 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        x = torch.randn(args.batch, IN_DIM, device=dev, generator=gen)
        y = torch.tanh(x @ teacher)
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(ddp(x.to(dtype)).float(), y)
        loss.backward()
        opt.step()
        value = loss.item()  # rank 0's own loss: it follows the parameters every all-reduce made
        losses.append(value)
        if rank == 0:
            print(f"step {step:4d}  loss {value:.9g}", flush=True)
    torch.cuda.synchronize()
    end = time.perf_counter()
    timed = args.steps - min(args.warmup, args.steps - 1)

    # final parameters: every rank hashes its own, and all must agree
    h = hashlib.sha256()
    psum = pabs = 0.0
    count = 0
    with torch.no_grad():
        for _, p in model.named_parameters():
            t = p.detach().contiguous()
            psum += t.double().sum().item()
            pabs += t.double().abs().sum().item()
            count += t.numel()
            h.update(t.flatten().view(torch.uint8).cpu().numpy().tobytes())  # numpy has no bf16
    sha = h.hexdigest()
    hashes = [None] * world
    dist.all_gather_object(hashes, sha)
    try:  # DDP's record of its buckets (bucket_sizes, rebuilt_bucket_sizes), a private API
        buckets = {k: v for k, v in ddp._get_ddp_logging_data().items() if "bucket" in k}
    except Exception:
        buckets = None
    nccl = torch.cuda.nccl.version()
    libs = mapped_libs()
    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
        "device": torch.cuda.get_device_name(dev),
        "bucket_sizes": buckets,
        "libs": libs,
        "resccl_preloaded": any("libresccl-nccl" in p for p in libs),
        "total_s": end - start,
        "argv": sys.argv[1:],
    }
    dist.destroy_process_group()  # the shim prints its call counts here (RESCCL_DEBUG=INFO)
    if rank == 0:
        r = result(args, world, losses, (psum, pabs, sha, count), end - t0, timed, len(set(hashes)) == 1, info)
        print(f"train.py: {world} ranks, {args.dtype}, {args.steps} steps, "
              f"{r['steps_per_s'] or 0:.2f} steps/s, params sha256 {sha[:16]}, ranks agree: {r['ranks_agree']}")
        if args.out:
            write_json(args.out, r)
        if not r["ranks_agree"]:
            return 1
    return 0


def main(argv=None):
    return train(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
