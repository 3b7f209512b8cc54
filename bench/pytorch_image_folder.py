#!/usr/bin/env python3
"""PyTorch's peer of bench/input_pipeline_bench.cc: the decode pipeline alone, no training.

torchvision.datasets.ImageFolder(DIR, transform=Compose([Grayscale(), ToTensor()])) under a
DataLoader(batch_size=64, num_workers=2, shuffle=False): decode, grey, scale to float [0, 1],
batch. Times --epochs passes in file order (worker start-up included, as the C++ program's
thread start-up is) and prints one line "pytorch: <n> images in <s> s: <rate> images/s".

Run it as PyTorch's CPU tuning guide advises, with tcmalloc preloaded:
  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 /usr/bin/python3 \
      bench/pytorch_image_folder.py /data/images/train [--workers 2] [--batch 64] [--limit N]

--pil-grey opens each file straight to grey (PIL convert("L")) instead of ImageFolder's
default loader (convert("RGB"), then Grayscale): a faster loader a user could write.
"""
import argparse
import time

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import openblas_core  # noqa: E402,F401  OPENBLAS_CORETYPE set before torch loads OpenBLAS
import torch
import torchvision
from PIL import Image
from torchvision import transforms


def grey_loader(path):
    with open(path, "rb") as f:
        return Image.open(f).convert("L")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--limit", type=int, default=0, help="only the first N images (0: all)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--pil-grey", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the workers are the parallelism measured, as in the C++ program

    kwargs = {"loader": grey_loader} if args.pil_grey else {}
    data = torchvision.datasets.ImageFolder(
        args.folder, transform=transforms.Compose([transforms.Grayscale(), transforms.ToTensor()]),
        **kwargs)
    if args.limit > 0:
        data = torch.utils.data.Subset(data, range(min(args.limit, len(data))))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=False,
                                         num_workers=args.workers)
    start = time.perf_counter()
    n, checksum = 0, 0.0
    for _ in range(args.epochs):
        for images, _labels in loader:
            n += images.shape[0]
            checksum += float(images[0, 0, 14, 14])
    seconds = time.perf_counter() - start
    print(f"pytorch: {n} images in {seconds:.3f} s: {n / seconds:.0f} images/s "
          f"(checksum {checksum:.3f})")


if __name__ == "__main__":
    main()
