"""Why the reference CNN runs channels-last: one training step of the tutorial CNN in PyTorch
(the same engine as LibTorch), 1 thread, batch 64, Adam, with NCHW activations against
channels-last ones made by restriding the one-channel input (what dist::models::to_channels_last
does), and against converting the weights to channels-last inside every forward. Prints the
median ms per step of each over ROUNDS alternating rounds, and the ratios.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \\
        /usr/bin/python3 bench/channels_last_probe.py [rounds=3] [steps=60]
"""
import statistics
import sys
import time

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import openblas_core  # noqa: E402,F401  OPENBLAS_CORETYPE set before torch loads OpenBLAS
import torch
import torch.nn as nn
import torch.nn.functional as F


class RestrideToChannelsLast(nn.Module):
    def forward(self, x):
        n, c, h, w = x.shape
        if c != 1:
            return x.contiguous(memory_format=torch.channels_last)
        x = x.contiguous()
        return x.as_strided(x.shape, (h * w, 1, w, 1))


class WeightsChannelsLastPerForward(nn.Conv2d):
    def forward(self, x):
        return F.conv2d(x, self.weight.contiguous(memory_format=torch.channels_last), self.bias)


def make_cnn(variant):
    torch.manual_seed(0)
    conv = WeightsChannelsLastPerForward if variant == "weights per forward" else nn.Conv2d
    layers = [conv(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), conv(32, 64, 3), nn.ReLU(),
              nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 64), nn.ReLU(), nn.Linear(64, 10)]
    if variant == "channels-last input":
        layers.insert(0, RestrideToChannelsLast())
    return nn.Sequential(*layers)


def ms_per_step(variant, steps):
    model = make_cnn(variant)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    x, y = torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,))

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    torch.set_num_threads(1)
    variants = ["NCHW", "channels-last input", "weights per forward"]
    times = {v: [] for v in variants}
    for _ in range(rounds):
        for v in variants:
            times[v].append(ms_per_step(v, steps))
    median = {v: statistics.median(t) for v, t in times.items()}
    for v in variants:
        print(f"{v}: {median[v]:.2f} ms/step (median of {rounds})")
    print(f"NCHW / channels-last input: {median['NCHW'] / median['channels-last input']:.2f}x")
    print(f"NCHW / weights per forward: {median['NCHW'] / median['weights per forward']:.2f}x")
