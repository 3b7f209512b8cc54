"""Writes the data of bench/user_jpegs_vs_raw.sh into DIR:
  DIR/jpeg/{train,test}/<class>/*.jpg   RGB JPEGs of mixed sizes (sides 160 to 400), 10 classes
  DIR/raw/{train,test}-0.tfrecord       the same images resized to 224x224 (PIL's antialiased
                                        bilinear) as raw pixels (tf.train.Example: image/encoded
                                        the CHW bytes, image/format "raw", image/channels,
                                        image/height, image/width, image/class/label)
  DIR/resnet18.pt                       torchvision's ResNet-18 for 10 classes, scripted

  user_jpegs_data.py DIR [TRAIN_PER_CLASS=32]
The TFRecord framing and the Example protocol buffer are written here to their specifications
(no TensorFlow on this machine); CRC-32C is computed with a table.
"""
import os
import random
import struct
import sys

import numpy as np
import torch
import torchvision
from PIL import Image

CRC_TABLE = []
for n in range(256):
    c = n
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    CRC_TABLE.append(c)


def crc32c(data):
    crc = 0xFFFFFFFF
    table = CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(number, payload):  # a length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example(features):
    entries = b""
    for name, value in sorted(features.items()):
        if isinstance(value, bytes):
            feature = field(1, field(1, value))  # bytes_list { value }
        else:
            feature = field(3, field(1, b"".join(varint(v) for v in value)))  # int64_list packed
        entries += field(1, field(1, name.encode()) + field(2, feature))
    return field(1, entries)


def write_tfrecord(path, records):
    with open(path, "wb") as f:
        for record in records:
            length = struct.pack("<Q", len(record))
            f.write(length + struct.pack("<I", masked(crc32c(length))))
            f.write(record + struct.pack("<I", masked(crc32c(record))))


def main(root, per_class):
    rng = random.Random(1)
    for split, count in (("train", per_class), ("test", max(2, per_class // 8))):
        records = []
        for label in range(10):
            folder = os.path.join(root, "jpeg", split, "class%d" % label)
            os.makedirs(folder, exist_ok=True)
            for i in range(count):
                w, h = rng.randint(160, 400), rng.randint(160, 400)
                pixels = np.random.default_rng(rng.randint(0, 1 << 30)).integers(0, 256, (h // 8, w // 8, 3))
                image = Image.fromarray(pixels.astype(np.uint8), "RGB").resize((w, h), Image.BICUBIC)
                image.save(os.path.join(folder, "%03d.jpg" % i), quality=90)
                chw = np.asarray(image.resize((224, 224), Image.BILINEAR)).transpose(2, 0, 1)
                records.append(example({"image/encoded": chw.tobytes(), "image/format": b"raw",
                                        "image/channels": [3], "image/height": [224],
                                        "image/width": [224], "image/class/label": [label]}))
        os.makedirs(os.path.join(root, "raw"), exist_ok=True)
        write_tfrecord(os.path.join(root, "raw", split + "-0.tfrecord"), records)
    torch.manual_seed(0)
    torch.jit.script(torchvision.models.resnet18(num_classes=10)).save(os.path.join(root, "resnet18.pt"))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 32)
