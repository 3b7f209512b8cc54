#!/usr/bin/python3
"""Writes TorchScript classifiers that the C++ strategies train (dist/models/torchscript_model.h).

    /usr/bin/python3 examples/python/make_torchscript_models.py OUT_DIR [--test-files]

Needs Debian's python3-torch and python3-torchvision (1.13 / 0.14, the LibTorch of the C++
side: a newer PyTorch may write files this LibTorch cannot read). Every model takes a float
image batch N x C x H x W (28 x 28, C = 1, values in [0, 1] as the built-in models) and returns
N x 10 logits. Written into OUT_DIR:

  cnn_scripted.pt     a small CNN (convolution, pooling, dense; no dropout), torch.jit.script
  cnn_traced.pt       the same module with the same weights, torch.jit.trace
  resnet18.pt         torchvision's ResNet-18, first convolution for 1 channel, 10 classes
  tutorial_cnn.pt     the twin of the C++ tutorial CNN (dist::models::make_tutorial_cnn):
                      the same layers under the same names (conv1, conv2, dense1, dense2), so
                      that given the C++ model's weights it computes the same function

With --test-files, beside each model NAME.pt, what the C++ tests compare with:

  NAME.parameters.txt  the state_dict keys of the parameters, one a line, in order
  NAME.buffers.txt     the state_dict keys of the buffers, one a line, in order
  NAME.input.f32       a fixed input batch 4 x 1 x 28 x 28, raw little-endian float32
  NAME.output.f32      the module's output on it in eval mode, 4 x 10 raw float32

and modules that must be refused, each with what is wrong in its name:
  no_forward.pt, no_parameters.pt, frozen_weights.pt (no parameter requires a gradient),
  state_dict.pt (torch.save of a state dict: no code), newer_version.pt (the file format
  version record raised past what PyTorch 1.13 reads), newer_operator.pt (calls an operator
  PyTorch 1.13 lacks), damaged.pt (its data.pkl damaged), and modules whose forward returns
  something else than N x 10 float logits: forward_tuple.pt, forward_list.pt, forward_rank3.pt,
  forward_one_row.pt (reduced over the batch), forward_long.pt (class indices), and
  forward_raises.pt (raises ValueError on 1-channel images), int_parameter.pt (an int64
  parameter beside the CNN's: no optimizer can step it), and slow_forward.pt (a forward that
  runs for minutes, for the tests of a SIGTERM during dist-train's check of it);

and partly_frozen.pt, the CNN with conv1's parameters requires_grad False (a module that
trains, its frozen layer unchanged).
"""

import argparse
import os
import sys
import zipfile

import torch
import torchvision
from torch import nn
from torch.nn import functional as F


class SmallCnn(nn.Module):
    """Convolution, pooling and dense layers for 1 x 28 x 28 images; no dropout, no batch norm."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.dense1 = nn.Linear(16 * 5 * 5, 32)
        self.dense2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.dense2(F.relu(self.dense1(torch.flatten(x, 1))))


class TutorialCnn(nn.Module):
    """The C++ tutorial CNN (src/models/reference_models.cc): Conv2D 32 3x3 relu, MaxPool 2,
    Conv2D 64 3x3 relu, MaxPool 2, Flatten, Dense 64 relu, Dense 10. Like the C++ model it
    computes in channels-last memory (dist/models/channels_last.h), in which oneDNN convolves
    without reordering at each layer (measured: 0.79 of the C++ model's images/s in NCHW, 1.04
    channels-last; bench/compare_torchscript.sh). The layout changes no value's meaning:
    Flatten reads C x H x W in either. Its parameter names are the C++ model's."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.dense1 = nn.Linear(64 * 5 * 5, 64)
        self.dense2 = nn.Linear(64, 10)

    def forward(self, x):
        x = x.contiguous()
        if x.size(1) == 1:
            # With one channel, contiguous(memory_format=torch.channels_last) keeps NCHW's
            # strides (the same bytes), and the convolution would infer NCHW from them:
            # restride the same memory as channels-last instead.
            x = x.as_strided(x.size(), [x.size(2) * x.size(3), 1, x.size(3), 1])
        else:
            x = x.contiguous(memory_format=torch.channels_last)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.dense2(F.relu(self.dense1(torch.flatten(x, 1))))


def resnet18_for_mnist():
    """torchvision's ResNet-18 for 1-channel images and 10 classes."""
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


def example_input():
    generator = torch.Generator().manual_seed(2024)
    return torch.rand(4, 1, 28, 28, generator=generator)


def write_raw(path, tensor):
    with open(path, "wb") as out:
        out.write(tensor.detach().contiguous().to(torch.float32).numpy().tobytes())


def write_lines(path, lines):
    with open(path, "w") as out:
        out.writelines(line + "\n" for line in lines)


def write_test_files(out_dir, name, scripted):
    """The names and the eval-mode output the C++ tests compare the loaded module with."""
    state = scripted.state_dict()
    parameters = [n for n, _ in scripted.named_parameters()]
    buffers = [n for n, _ in scripted.named_buffers()]
    assert sorted(parameters + buffers) == sorted(state.keys()), name
    write_lines(os.path.join(out_dir, name + ".parameters.txt"), parameters)
    write_lines(os.path.join(out_dir, name + ".buffers.txt"), buffers)
    x = example_input()
    training = scripted.training
    scripted.eval()
    with torch.no_grad():
        y = scripted(x)
    scripted.train(training)
    write_raw(os.path.join(out_dir, name + ".input.f32"), x)
    write_raw(os.path.join(out_dir, name + ".output.f32"), y)


def save(module, out_dir, name, test_files):
    path = os.path.join(out_dir, name + ".pt")
    module.save(path)
    if test_files:
        write_test_files(out_dir, name, module)
    return path


# Modules the C++ loader and the forward check must refuse, each by name.


class NoForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(4, 2)

    @torch.jit.export
    def predict(self, x):
        return self.dense(x)


class NoParameters(nn.Module):
    def forward(self, x):
        return torch.flatten(x, 1)[:, :10]


class BadForward(nn.Module):
    """A SmallCnn whose forward returns what `kind` says instead of N x 10 logits."""

    def __init__(self, kind: str):
        super().__init__()
        self.net = SmallCnn()
        self.kind = kind

    def forward(self, x):
        if self.kind == "raises" and x.size(1) != 3:
            raise ValueError("this model wants 3 channels")
        y = self.net(x)
        if self.kind == "rank3":
            return y.unsqueeze(2)
        if self.kind == "one_row":
            return y.mean(0, keepdim=True)
        if self.kind == "long":
            return y.argmax(1, keepdim=True).expand(-1, 10)
        return y


class ForwardTuple(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = SmallCnn()

    def forward(self, x):
        y = self.net(x)
        return y, y


class ForwardList(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = SmallCnn()

    def forward(self, x):
        return [self.net(x)]


class IntParameter(nn.Module):
    """A SmallCnn with an int64 parameter (requires_grad False: it cannot have a gradient)."""

    def __init__(self):
        super().__init__()
        self.net = SmallCnn()
        self.steps = nn.Parameter(torch.zeros(3, dtype=torch.long), requires_grad=False)

    def forward(self, x):
        return self.net(x)


class SlowForward(nn.Module):
    """A SmallCnn whose forward adds zero to its logits `rounds` times (about 10 us each)."""

    def __init__(self, rounds: int):
        super().__init__()
        self.net = SmallCnn()
        self.rounds = rounds

    def forward(self, x):
        y = self.net(x)
        for _ in range(self.rounds):
            y = y + 0.0
        return y


def rewrite_records(path, change):
    """Rewrites the zip's records through change(name, data) -> data (checksums recomputed)."""
    with zipfile.ZipFile(path) as old:
        entries = [(info, old.read(info.filename)) for info in old.infolist()]
    with zipfile.ZipFile(path, "w") as new:
        for info, data in entries:
            new.writestr(info, change(info.filename, data))


def raise_version(name, data):
    """The file format version record(s) as a newer PyTorch than 1.13 would write them."""
    if name.endswith("/version") or name.endswith("/.data/version"):
        return b"99\n"
    return data


def newer_operator(name, data):
    """An operator this LibTorch lacks, as in a module a newer PyTorch scripted."""
    if name.endswith("code/__torch__.py"):
        return data.replace(b"torch.flatten(", b"torch.flattex(")
    return data


def damage_pickle(name, data):
    """A damaged data.pkl: a name in it no longer an identifier."""
    if name.endswith("/data.pkl"):
        return data.replace(b"__torch__", b"__t\xd1rch__", 1)
    return data


def write_bad_models(out_dir):
    torch.manual_seed(5)
    for name, module in [("no_forward", NoForward()), ("no_parameters", NoParameters()),
                         ("forward_tuple", ForwardTuple()), ("forward_list", ForwardList()),
                         ("forward_rank3", BadForward("rank3")),
                         ("forward_one_row", BadForward("one_row")),
                         ("forward_raises", BadForward("raises")),
                         ("forward_long", BadForward("long")),
                         ("int_parameter", IntParameter()),
                         ("slow_forward", SlowForward(20_000_000))]:
        torch.jit.script(module).save(os.path.join(out_dir, name + ".pt"))
    frozen = SmallCnn()
    for p in frozen.parameters():
        p.requires_grad_(False)
    torch.jit.script(frozen).save(os.path.join(out_dir, "frozen_weights.pt"))
    partly = SmallCnn()
    for p in partly.conv1.parameters():
        p.requires_grad_(False)
    torch.jit.script(partly).save(os.path.join(out_dir, "partly_frozen.pt"))
    torch.save(SmallCnn().state_dict(), os.path.join(out_dir, "state_dict.pt"))
    for name, change in [("newer_version", raise_version), ("newer_operator", newer_operator),
                         ("damaged", damage_pickle)]:
        path = os.path.join(out_dir, name + ".pt")
        torch.jit.script(SmallCnn()).save(path)
        rewrite_records(path, change)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--test-files", action="store_true",
                        help="also names, outputs and bad modules for the C++ tests")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)

    torch.manual_seed(1)
    cnn = SmallCnn()
    save(torch.jit.script(cnn), args.out_dir, "cnn_scripted", args.test_files)
    save(torch.jit.trace(cnn, example_input()), args.out_dir, "cnn_traced", args.test_files)
    torch.manual_seed(2)
    save(torch.jit.script(resnet18_for_mnist()), args.out_dir, "resnet18", args.test_files)
    torch.manual_seed(3)
    save(torch.jit.script(TutorialCnn()), args.out_dir, "tutorial_cnn", args.test_files)
    if args.test_files:
        write_bad_models(args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
