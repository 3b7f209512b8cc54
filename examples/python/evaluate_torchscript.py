#!/usr/bin/python3
"""Runs a TorchScript classifier written back by C++ (dist::models::save_torchscript) in Python.

    /usr/bin/python3 examples/python/evaluate_torchscript.py MODEL.pt IMAGES.f32 \\
        [--shape 1,28,28] [--labels LABELS.i64] [--outputs OUTPUTS.f32]

IMAGES.f32 holds N images of --shape (C,H,W) as raw little-endian float32, scaled as training
scaled them. The module runs in evaluation mode without gradients. Prints one JSON line:
{"images": N, "classes": K}, with "accuracy" (the fraction of argmax predictions equal to the
labels) when --labels names N raw little-endian int64 labels. --outputs writes the N x K logits
as raw float32; without it and without labels the logits are printed, one row a line.
"""

import argparse
import json
import sys

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("images")
    parser.add_argument("--shape", default="1,28,28", help="C,H,W of one image")
    parser.add_argument("--labels", help="raw int64 labels, one per image")
    parser.add_argument("--outputs", help="where to write the logits, raw float32")
    args = parser.parse_args()

    shape = [int(n) for n in args.shape.split(",")]
    with open(args.images, "rb") as f:
        images = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    per_image = shape[0] * shape[1] * shape[2]
    if images.numel() % per_image:
        sys.exit(f"{args.images}: {images.numel()} floats is not a whole number of "
                 f"{args.shape} images")
    images = images.reshape([-1] + shape)

    model = torch.jit.load(args.model)
    model.eval()
    with torch.no_grad():
        logits = model(images)
    result = {"images": images.shape[0], "classes": logits.shape[1]}
    if args.labels:
        with open(args.labels, "rb") as f:
            labels = torch.frombuffer(bytearray(f.read()), dtype=torch.int64)
        if labels.numel() != images.shape[0]:
            sys.exit(f"{args.labels}: {labels.numel()} labels for {images.shape[0]} images")
        result["accuracy"] = (logits.argmax(1) == labels).double().mean().item()
    if args.outputs:
        with open(args.outputs, "wb") as f:
            f.write(logits.contiguous().numpy().tobytes())
    elif not args.labels:
        for row in logits.tolist():
            print(" ".join(f"{v:.9g}" for v in row))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
