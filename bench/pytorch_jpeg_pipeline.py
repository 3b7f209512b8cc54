#!/usr/bin/env python3
"""PyTorch's peer of bench/jpeg_pipeline_bench.cc's `pipeline`, and the data it runs on.

  pytorch_jpeg_pipeline.py run DIR [--workers 2] [--batch 64] [--epochs 2]
      torchvision.datasets.ImageFolder(DIR, transform=Compose([RandomResizedCrop(224),
      RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet's mean, std)])) under a
      DataLoader(batch_size=64, num_workers=2, shuffle=False); prints one line
      "pytorch: <n> images in <s> s: <rate> images/s" (worker start-up included, as the C++
      program's thread start-up is).
  pytorch_jpeg_pipeline.py make DIR [--images 500]
      writes DIR/class_<k>/<i>.jpg: RGB JPEGs (quality 90) of 300 to 500 pixels a side, mixed,
      in 5 classes, photo-like (smooth colour gradients, shapes and noise) so that decoding has
      detail to work on.

Run `run` as PyTorch's CPU tuning guide advises, with tcmalloc preloaded:
  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /usr/bin/python3 ...
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import openblas_core  # noqa: E402,F401  OPENBLAS_CORETYPE set before torch loads OpenBLAS


def make(folder, count):
    from PIL import Image
    rng = np.random.default_rng(69)
    for i in range(count):
        h, w = (int(v) for v in rng.integers(300, 501, size=2))
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        phase = rng.uniform(0, 6.3, size=3)
        freq = rng.uniform(0.005, 0.05, size=2)
        channels = [127 + 90 * np.sin(x * freq[0] + y * freq[1] + p) for p in phase]
        image = np.stack(channels, axis=-1)
        cy, cx, r = rng.integers(0, h), rng.integers(0, w), rng.integers(20, 120)
        image[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.integers(0, 256, size=3)
        image += rng.normal(0, 8, size=image.shape)
        pixels = np.clip(image, 0, 255).astype(np.uint8)
        class_dir = os.path.join(folder, f"class_{i % 5}")
        os.makedirs(class_dir, exist_ok=True)
        Image.fromarray(pixels).save(os.path.join(class_dir, f"{i:04d}.jpg"), quality=90)


def run(folder, workers, batch, epochs):
    import torch
    import torchvision
    from torchvision import transforms
    torch.set_num_threads(1)  # the workers are the parallelism measured, as in the C++ program
    data = torchvision.datasets.ImageFolder(folder, transform=transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ]))
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=False,
                                         num_workers=workers)
    start = time.perf_counter()
    n, checksum = 0, 0.0
    for _ in range(epochs):
        for images, _labels in loader:
            n += images.shape[0]
            checksum += float(images[0, 0, 112, 112])
    seconds = time.perf_counter() - start
    print(f"pytorch: {n} images in {seconds:.3f} s: {n / seconds:.0f} images/s "
          f"(checksum {checksum:.3f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["run", "make"])
    parser.add_argument("folder")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--images", type=int, default=500)
    args = parser.parse_args()
    if args.mode == "make":
        make(args.folder, args.images)
    else:
        run(args.folder, args.workers, args.batch, args.epochs)


if __name__ == "__main__":
    main()
