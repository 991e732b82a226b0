"""GPU benchmarks over torch.distributed, launched by mpirun: all-reduce bus bandwidth and
DDP synthetic-training throughput (PERF-01..03).

Usage: mpirun -n N python torchbench.py allreduce [--min-size 1024] [--max-size 67108864]
       mpirun -n N python torchbench.py ddp [--batch 64] [--steps 30] [--width 1024]

Rank, world size and local rank come from the MPI launcher's environment (Open MPI's
OMPI_COMM_WORLD_*, Hydra's PMI_* / MPI_LOCALRANKID, PMIx's PMIX_RANK). The rendezvous
address is MASTER_ADDR/MASTER_PORT when set; otherwise rank 0's host name and a free port
are shared with mpi4py when it is installed, or 127.0.0.1:29500 is used.

--backend auto picks NCCL on CUDA GPUs (one per local rank) and gloo on CPU.

allreduce: for each size (powers of two), every rank fills a float32 tensor with rank+1 and
the sum n(n+1)/2 is checked on every element and rank, then --iterations timed all-reduces
give time_us, algbw_GBps = size / time and busbw_GBps = algbw * 2(n-1)/n (nccl-tests'
definition; 0 for one rank).

ddp: an MLP learns a fixed linear teacher on synthetic data under DistributedDataParallel;
throughput is samples per second over all ranks after --warmup steps. The check: the loss
fell, stayed finite, and every rank ends with identical parameters.

Each rank 0 record is printed as ``MPIPLAT_RESULT {"program": "torchbench", "bench": ...,
"check": "pass"|"fail", "ranks": n, ...figures}``; exits 1 when a check fails.

Standalone on purpose (shipped into images by ConfigMap): imports only torch, the stdlib and,
when present, mpi4py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

PROGRAM = "torchbench"
PREFIX = "MPIPLAT_RESULT"
DEFAULT_PORT = 29500


def emit(record: dict) -> None:
    print(f"{PREFIX} {json.dumps(record, sort_keys=True)}", flush=True)


def sig(value: float) -> float:
    return float(f"{value:.6g}")


def first_env(*names: str, default: str | None = None) -> str | None:
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    return default


def mpi_layout() -> tuple[int, int, int, int]:
    """(rank, world size, local rank, local size) from the MPI launcher's environment."""
    rank = first_env("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK", default="0")
    size = first_env("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", default="1")
    local = first_env("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "LOCAL_RANK", default="0")
    local_size = first_env("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", "LOCAL_WORLD_SIZE",
                           default=size)
    return int(rank), int(size), int(local), int(local_size)


def rendezvous(rank: int) -> tuple[str, int]:
    """MASTER_ADDR/PORT, else rank 0's host name and a free port shared over MPI."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if addr and port:
        return addr, int(port)
    try:
        from mpi4py import MPI
    except ImportError:
        return addr or "127.0.0.1", int(port or DEFAULT_PORT)
    chosen = None
    if rank == 0:
        with socket.socket() as probe:
            probe.bind(("", 0))
            free = probe.getsockname()[1]
        chosen = (addr or socket.getfqdn(), int(port or free))
    return MPI.COMM_WORLD.bcast(chosen, root=0)


def init(backend: str, timeout_s: int) -> tuple[int, int, int, torch.device, str]:
    rank, size, local, local_size = mpi_layout()
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise SystemExit("--backend nccl needs CUDA GPUs, and torch sees none")
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(local_size, 1)))
    addr, port = rendezvous(rank)
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=size,
                            timeout=timedelta(seconds=timeout_s))
    return rank, size, local, device, backend


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sizes(lo: int, hi: int) -> list[int]:
    out, size = [], lo
    while size <= hi:
        out.append(size)
        size *= 2
    return out


def bench_allreduce(args: argparse.Namespace, rank: int, size: int, device: torch.device, base: dict) -> bool:
    ok = True
    want = size * (size + 1) / 2
    for nbytes in sizes(args.min_size, args.max_size):
        count = max(1, nbytes // 4)
        buf = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
        if rank == args.inject_wrong_rank:
            buf[0] += 1
        dist.all_reduce(buf)
        wrong = int((buf != want).sum().item())
        wrong_all = torch.tensor([wrong], dtype=torch.int64, device=device)
        dist.all_reduce(wrong_all)
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        sync(device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.iterations):
            dist.all_reduce(buf)
        sync(device)
        elapsed = time.perf_counter() - start
        # The slowest rank's time is the collective's time.
        slowest = torch.tensor([elapsed], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        per_op = slowest.item() / args.iterations
        algbw = count * 4 / per_op / 1e9
        passed = int(wrong_all.item()) == 0
        ok &= passed
        if rank == 0:
            emit({**base, "bench": "allreduce", "check": "pass" if passed else "fail", "size_bytes": count * 4,
                  "iterations": args.iterations, "wrong_elements": int(wrong_all.item()),
                  "time_us": sig(per_op * 1e6), "algbw_GBps": sig(algbw),
                  "busbw_GBps": sig(algbw * 2 * (size - 1) / size)})
            print(f"# {count * 4:>12} bytes  {per_op * 1e6:12.1f} us  busbw {algbw * 2 * (size - 1) / size:9.3f} GB/s"
                  f"{'' if passed else f'  WRONG ({int(wrong_all.item())} elements)'}", flush=True)
    return ok


def bench_ddp(args: argparse.Namespace, rank: int, size: int, device: torch.device, base: dict) -> bool:
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)  # the same teacher everywhere; DDP broadcasts rank 0's initial weights anyway
    teacher = torch.randn(args.width, args.outputs, device=device) / math.sqrt(args.width)
    layers: list[torch.nn.Module] = []
    for _ in range(args.depth - 1):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.width, args.outputs)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimiser = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    generator = torch.Generator(device=device).manual_seed(1000 + rank)  # each rank its own shard
    x = torch.randn(args.batch, args.width, device=device, generator=generator)
    y = x @ teacher
    losses: list[float] = []
    start = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            sync(device)
            dist.barrier()
            start = time.perf_counter()
        optimiser.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimiser.step()
        losses.append(float(loss.item()))
    sync(device)
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
    if rank == args.inject_desync_rank:
        with torch.no_grad():
            next(model.parameters()).view(-1)[0] += 1.0
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    # Parameters must agree on every rank: compare each rank's checksum with rank 0's.
    checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    gathered = [torch.zeros_like(checksum) for _ in range(size)]
    dist.all_gather(gathered, checksum)
    spread = max(abs(float(g.item()) - float(gathered[0].item())) for g in gathered)
    in_sync = spread <= 1e-9 * max(1.0, abs(float(gathered[0].item())))
    finite = all(math.isfinite(v) for v in losses)
    learned = finite and losses[-1] < losses[0]
    passed = in_sync and learned
    if rank == 0:
        seconds = elapsed.item()
        samples = args.batch * size * args.steps
        emit({**base, "bench": "ddp", "check": "pass" if passed else "fail", "batch_per_rank": args.batch,
              "steps": args.steps, "width": args.width, "depth": args.depth,
              "parameters": sum(p.numel() for p in model.parameters()),
              "samples_per_s": sig(samples / seconds), "samples_per_s_per_rank": sig(samples / seconds / size),
              "step_time_ms": sig(seconds / args.steps * 1e3), "seconds": sig(seconds),
              "loss_first": sig(losses[0]), "loss_last": sig(losses[-1]), "params_in_sync": in_sync})
        print(f"# ddp {size} ranks: {samples / seconds:.1f} samples/s, loss {losses[0]:.4g} -> {losses[-1]:.4g}"
              f"{'' if in_sync else f', PARAMETERS DIVERGED by {spread:.3g}'}", flush=True)
    return passed


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    parser.add_argument("--timeout", type=int, default=300, help="rendezvous and collective timeout in seconds")
    sub = parser.add_subparsers(dest="bench", required=True)
    ar = sub.add_parser("allreduce", help="all-reduce bus bandwidth over a message-size sweep")
    ar.add_argument("--min-size", type=int, default=1 << 10, help="smallest message in bytes (default: 1 KiB)")
    ar.add_argument("--max-size", type=int, default=1 << 26, help="largest message in bytes (default: 64 MiB)")
    ar.add_argument("--iterations", type=int, default=20)
    ar.add_argument("--warmup", type=int, default=5)
    ar.add_argument("--inject-wrong-rank", type=int, default=-1, help="self-test: this rank adds 1 to its input")
    ddp = sub.add_parser("ddp", help="DistributedDataParallel synthetic-training throughput")
    ddp.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    ddp.add_argument("--steps", type=int, default=30, help="timed steps")
    ddp.add_argument("--warmup", type=int, default=5)
    ddp.add_argument("--width", type=int, default=1024)
    ddp.add_argument("--depth", type=int, default=4, help="linear layers")
    ddp.add_argument("--outputs", type=int, default=16)
    ddp.add_argument("--lr", type=float, default=0.01)
    ddp.add_argument("--inject-desync-rank", type=int, default=-1,
                     help="self-test: this rank alters a weight at the end")
    args = parser.parse_args(argv)
    if args.bench == "allreduce" and not 4 <= args.min_size <= args.max_size:
        parser.error(f"need 4 <= --min-size <= --max-size, got {args.min_size} and {args.max_size}")
    if args.bench == "ddp" and min(args.batch, args.steps, args.width, args.depth, args.outputs) < 1:
        parser.error("--batch, --steps, --width, --depth and --outputs must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, size, _, device, backend = init(args.backend, args.timeout)
    bad_rank = getattr(args, "inject_wrong_rank", getattr(args, "inject_desync_rank", -1))
    if bad_rank >= size:
        dist.destroy_process_group()
        raise SystemExit(f"cannot inject into rank {bad_rank}: not a rank of this {size}-rank job")
    base = {"program": PROGRAM, "ranks": size, "backend": backend, "device": device.type,
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None}
    try:
        ok = (bench_allreduce if args.bench == "allreduce" else bench_ddp)(args, rank, size, device, base)
    finally:
        dist.destroy_process_group()
    if not ok and rank == 0:
        sys.stderr.write(f"torchbench {args.bench}: check FAILED (see the result lines)\n")
    return 0 if ok else 1


def _exit(code: int) -> None:
    """Exit without interpreter finalization: a gloo worker thread can still be releasing a finished
    collective's tensors then, and its GIL acquire during finalization aborts the process (exit 134
    instead of the check's 1; pytorch/pytorch#179291). MPI, when it was used, is finalized first."""
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
