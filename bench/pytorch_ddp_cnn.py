"""PyTorch peer of the benchmarks: DistributedDataParallel, or one plain process.

WORLD processes on 127.0.0.1 with the gloo backend (default 2), THREADS intra-op threads each
(default 1), the tutorial CNN (or the 784-4096-4096-10 MLP), 64 examples per process, Adam 1e-3,
per-example cross-entropy averaged over the global batch. cnn-channels-last: the CNN in
channels-last memory format (model.to(memory_format=...), as PyTorch's CPU tuning guide advises
for CNNs; our reference CNN runs channels-last by itself). WORLD=1 is a plain loop in one
process, without DDP. Prints one line: images/s over the timed steps (median of the rounds).
Run it as PyTorch's CPU tuning guide advises, with tcmalloc preloaded (the bench scripts do).

    /usr/bin/python3 bench/pytorch_ddp_cnn.py [rounds=9] [steps=30] [cnn|cnn-channels-last|mlp] [WORLD=2] [THREADS=1]
"""
import os
import socket
import statistics
import sys
import time

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import openblas_core  # noqa: E402,F401  OPENBLAS_CORETYPE set before torch loads OpenBLAS
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def make_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def make_mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(),
                         nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))


def make_step(model_name, world, distributed):
    """One training step of MODEL_NAME on a fixed random batch of 64, Adam 1e-3, cross-entropy
    averaged over the global batch of 64 x WORLD; under DDP (its process group initialized) when
    DISTRIBUTED. Shared with bench/pytorch_ddp_hosts.py."""
    model = make_mlp() if model_name == "mlp" else make_cnn()
    if model_name == "cnn-channels-last":
        model = model.to(memory_format=torch.channels_last)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(64, 1, 28, 28)
    if model_name == "cnn-channels-last":
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (64,))
    loss_fn = nn.CrossEntropyLoss(reduction="none")

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y).sum() / (64 * world)
        loss.backward()
        opt.step()

    return step


def worker(rank, world, port, rounds, steps, out, model_name, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    step = make_step(model_name, world, distributed=world > 1)
    for _ in range(3):
        step()
    times = []
    for _ in range(rounds):
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - start) / steps)
    if rank == 0:
        out.put(64 * world / statistics.median(times))
    if world > 1:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    model_name = sys.argv[3] if len(sys.argv) > 3 else "cnn"
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    world = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, rounds, steps, out, model_name, threads))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
        if p.exitcode != 0:
            sys.exit(f"a DDP worker failed (exit code {p.exitcode})")
    kind = "ddp" if world > 1 else "plain"
    print(f"pytorch {kind} {model_name} {world}x{threads}: {out.get(timeout=10):.0f} images/s")
