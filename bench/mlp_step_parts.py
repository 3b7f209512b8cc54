#!/usr/bin/env python3
# The parts of one step of the 784-4096-4096-10 MLP on one thread (docs/design.md, "The step by
# packs"): forward and backward of 64 examples, and Adam over its 20M parameters (foreach off,
# one parameter at a time, as LibTorch 1.13's C++ Adam). Debian's python3-torch, the same engine.
#
#   LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /usr/bin/python3 bench/mlp_step_parts.py
import statistics
import time

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import openblas_core  # noqa: E402,F401  OPENBLAS_CORETYPE set before torch loads OpenBLAS
import torch

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(784, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096),
                            torch.nn.ReLU(), torch.nn.Linear(4096, 10))
adam = torch.optim.Adam(model.parameters(), 1e-3, foreach=False)
x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))


def forward_backward():
    adam.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()


for _ in range(3):  # warm-up, and Adam's first step makes its slots
    forward_backward()
    adam.step()
passes, steps = [], []
for _ in range(7):
    t = time.perf_counter()
    forward_backward()
    passes.append(time.perf_counter() - t)
    t = time.perf_counter()
    adam.step()
    steps.append(time.perf_counter() - t)
print(f"forward+backward {statistics.median(passes):.3f} s, adam {statistics.median(steps):.3f} s "
      f"(medians of 7)")
