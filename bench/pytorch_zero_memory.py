"""PyTorch's peak memory per worker for the sharding memory bench (bench/sharding_memory.sh):
the MLP of dist-train's --model mlp_wide (784-10240-10240-10, 113M parameters) or mlp_deep (784,
seven hidden layers of 4096, 10: 104M) under DDP with Adam, plain or through
torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO stage 1), a few steps over random
batches, gloo backend. Run it as bench/sharding_memory.sh does: one process per worker,
MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE in the environment, tcmalloc preloaded.

  python3 bench/pytorch_zero_memory.py plain|zero STEPS BATCH_PER_WORKER [mlp_wide|mlp_deep]

Prints, on rank 0, one line: "pytorch MODE peak_rss_bytes N" (the largest VmHWM of the ranks).
"""
import os
import sys

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import openblas_core  # noqa: E402,F401  OPENBLAS_CORETYPE set before torch loads OpenBLAS
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel


def peak_resident_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    mode, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(5)
    shape = sys.argv[4] if len(sys.argv) > 4 else "mlp_wide"
    hidden, hidden_layers = {"mlp_wide": (10240, 2), "mlp_deep": (4096, 7)}[shape]
    layers = [torch.nn.Flatten()]
    for k in range(hidden_layers):
        layers += [torch.nn.Linear(784 if k == 0 else hidden, hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(hidden, 10))
    ddp = DistributedDataParallel(model)
    if mode == "zero":
        optimizer = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam,
                                            lr=1e-3)
    else:
        optimizer = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        images = torch.randn(batch, 1, 28, 28)
        labels = torch.randint(0, 10, (batch,))
        optimizer.zero_grad()
        loss_fn(ddp(images), labels).backward()
        optimizer.step()
    peak = torch.tensor([peak_resident_bytes()], dtype=torch.int64)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(f"pytorch {mode} peak_rss_bytes {peak.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
