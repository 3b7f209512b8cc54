"""PyTorch's side of bench/compare_torchscript.sh: torchvision's ResNet-18 (1 channel, 10
classes: make_torchscript_models.resnet18_for_mnist, the module resnet18.pt scripts) trained
eagerly under DistributedDataParallel, as examples/torchscript_mirrored.cc trains the scripted
one under MirroredStrategy: 2 processes on 127.0.0.1 (gloo), 1 intra-op thread each, Fashion-MNIST
shuffled, BATCH images per process and step (a global batch of 2 x BATCH split between the
processes), Adam 1e-3, cross-entropy. The first 10 steps warm up; prints one line with the
images/s of the others. Run it with tcmalloc preloaded, as PyTorch's CPU tuning guide advises
(the bench script does).

MODE alone runs the same steps without DistributedDataParallel: each process trains its own
copy on its own half of the batch and nothing crosses between them but the two barriers around
the timed steps. That is the compute ceiling of this step on these cores and kernels: what any
data-parallel framework would reach if summing the gradients cost nothing.

    /usr/bin/python3 bench/torchscript_ddp_resnet18.py [STEPS=60] [BATCH=64] [MODE=ddp|alone]
"""
import gzip
import os
import socket
import sys
import time

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import openblas_core  # noqa: E402,F401  OPENBLAS_CORETYPE set before torch loads OpenBLAS
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "python"))
import make_torchscript_models  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
WORLD = 2
WARM_UP = 10


def read_idx(name, header):
    with gzip.open(os.path.join(DATA, name)) as f:
        return torch.frombuffer(bytearray(f.read()[header:]), dtype=torch.uint8)


def worker(rank, port, steps, batch, alone, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    images = read_idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    labels = read_idx("train-labels-idx1-ubyte.gz", 8).long()
    torch.manual_seed(2)  # resnet18.pt's initial weights
    model = make_torchscript_models.resnet18_for_mnist()
    if not alone:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    global_batch = WORLD * batch
    per_epoch = images.shape[0] // global_batch
    generator = torch.Generator().manual_seed(1)
    order = torch.randperm(images.shape[0], generator=generator)
    started = None
    for step in range(steps):
        if step % per_epoch == 0 and step > 0:
            order = torch.randperm(images.shape[0], generator=generator)
        first = (step % per_epoch) * global_batch + rank * batch
        index = order[first:first + batch]
        x = images[index].float() / 255  # the scaling of the C++ side
        optimizer.zero_grad()
        loss = loss_fn(model(x), labels[index])
        loss.backward()
        optimizer.step()
        if step + 1 == WARM_UP:
            dist.barrier()
            started = time.perf_counter()
    dist.barrier()
    took = time.perf_counter() - started
    if rank == 0:
        out.put((steps - WARM_UP) * global_batch / took)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    mode = sys.argv[3] if len(sys.argv) > 3 else "ddp"
    if mode not in ("ddp", "alone"):
        sys.exit(f"MODE must be ddp or alone, got {mode}")
    if steps <= WARM_UP:
        sys.exit(f"STEPS must be more than the {WARM_UP} warm-up steps, got {steps}")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    alone = mode == "alone"
    procs = [ctx.Process(target=worker, args=(r, port, steps, batch, alone, out))
             for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=1800)
        if p.exitcode != 0:
            sys.exit(f"a {mode} worker failed (exit code {p.exitcode})")
    print(f"pytorch {mode} resnet18 {WORLD}x1, {steps} steps of {WORLD * batch} images: "
          f"{out.get(timeout=10):.1f} images/s (steps {WARM_UP + 1} to {steps})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
