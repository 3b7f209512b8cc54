"""The new user's job of issue 69, written as a user has it: a folder of colour images of mixed
sizes in 5 classes, and a CNN for 3x64x64 images and 5 classes written in Python and scripted.

  new_user_images.py make DIR        DIR/train/<class>/*.jpg, DIR/test/<class>/*.jpg, DIR/cnn5.pt
                                     (and DIR/strided_cnn5.pt, the same without max-pooling)
  new_user_images.py evaluate MODEL TEST_DIR SIZE MEANS STDS
                                     the accuracy of a trained module on TEST_DIR, the images
                                     prepared by torchvision as a user does in Python

Each class is a shape (of a random colour) on a noisy background: a small model learns most of
it in a few epochs, not all, so that an accuracy read back tells models apart. Most training images are RGB JPEGs; a few are stored the other ways users'
folders hold (grey JPEG, RGBA and palette PNG, CMYK JPEG, 16-bit grey PNG), which the trainer
must convert. The test images are RGB JPEGs only: Python and the trainer decode them alike.
"""
import json
import os
import random
import sys

import numpy as np
import torch
from PIL import Image, ImageDraw

CLASSES = ["circle", "square", "stripes", "columns", "cross"]
COLOURS = [(220, 40, 40), (40, 200, 60), (50, 80, 230), (230, 210, 40), (200, 60, 210)]


def draw(label, rng):
    width, height = rng.randint(48, 96), rng.randint(48, 96)
    noise = np.random.default_rng(rng.randint(0, 1 << 30)).integers(0, 140, (height, width, 3))
    image = Image.fromarray(noise.astype(np.uint8), "RGB")
    pen = ImageDraw.Draw(image)
    colour = COLOURS[rng.randrange(len(COLOURS))]
    w, h = width, height
    if label == 0:
        pen.ellipse([w * 0.2, h * 0.2, w * 0.8, h * 0.8], fill=colour)
    elif label == 1:
        pen.rectangle([w * 0.25, h * 0.25, w * 0.75, h * 0.75], fill=colour)
    elif label == 2:
        for y in range(0, h, 8):
            pen.rectangle([0, y, w, y + 3], fill=colour)
    elif label == 3:
        for x in range(0, w, 8):
            pen.rectangle([x, 0, x + 3, h], fill=colour)
    else:
        pen.rectangle([w * 0.45, 0, w * 0.55, h], fill=colour)
        pen.rectangle([0, h * 0.45, w, h * 0.55], fill=colour)
    return image


def save(image, path_stem, mode):
    """The image stored in one of the ways a user's folder holds images."""
    if mode == "grey":
        image.convert("L").save(path_stem + ".jpg", quality=90)
    elif mode == "rgba":
        image.convert("RGBA").save(path_stem + ".png")
    elif mode == "palette":
        image.convert("P", palette=Image.ADAPTIVE).save(path_stem + ".png")
    elif mode == "cmyk":
        image.convert("CMYK").save(path_stem + ".jpg", quality=90)
    elif mode == "grey16":
        grey = np.asarray(image.convert("L"), dtype=np.uint16) * 257
        Image.fromarray(grey, "I;16").save(path_stem + ".png")
    else:
        image.save(path_stem + ".jpg", quality=90)


class Cnn5(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.dense = torch.nn.Linear(32, 5)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.conv3(x)).mean(dim=(2, 3))
        return self.dense(x)


class StridedCnn5(torch.nn.Module):
    """Cnn5 without max-pooling (strided convolutions): float32 max-pooling routes a gradient
    by exact ties, which differently blocked convolutions (one device's batch against a
    replica's half) can order differently, so equivalence over many steps is checked on this."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.dense = torch.nn.Linear(32, 5)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.dense(x.mean(dim=(2, 3)))


def make(root):
    rng = random.Random(69)
    odd_modes = ["grey", "rgba", "palette", "cmyk", "grey16"]
    for split, per_class in (("train", 40), ("test", 12)):
        for label, name in enumerate(CLASSES):
            folder = os.path.join(root, split, name)
            os.makedirs(folder, exist_ok=True)
            for i in range(per_class):
                mode = "rgb"
                # The first training image stays RGB (the data's first image); a few others not.
                if split == "train" and i % 8 == 5:
                    mode = odd_modes[(label + i) % len(odd_modes)]
                save(draw(label, rng), os.path.join(folder, "%03d" % i), mode)
    torch.manual_seed(0)
    torch.jit.script(Cnn5()).save(os.path.join(root, "cnn5.pt"))
    torch.jit.script(StridedCnn5()).save(os.path.join(root, "strided_cnn5.pt"))


def evaluate(model_path, test_dir, size, means, stds):
    from torchvision import transforms

    height, width = (int(v) for v in size.split("x"))
    prepare = transforms.Compose([
        transforms.Resize((height, width)),  # PIL's antialiased bilinear
        transforms.ToTensor(),
        transforms.Normalize([float(v) for v in means.split(",")],
                             [float(v) for v in stds.split(",")]),
    ])
    model = torch.jit.load(model_path).eval()
    right = total = 0
    with torch.no_grad():
        for label, name in enumerate(sorted(os.listdir(test_dir))):
            folder = os.path.join(test_dir, name)
            for file in sorted(os.listdir(folder)):
                image = Image.open(os.path.join(folder, file)).convert("RGB")
                logits = model(prepare(image).unsqueeze(0))
                right += int(logits.argmax(1).item() == label)
                total += 1
    print(json.dumps({"accuracy": right / total, "images": total}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        evaluate(*sys.argv[2:7])
