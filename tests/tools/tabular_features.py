"""The Python side of dist-train's --features tests (tests/tools/dist_train_features_test.cc).

  tabular_features.py make DIR
      Writes DIR/regress.pt and DIR/classify.pt: small MLPs for rows of 10 features (one output,
      three class logits), scripted, as a user writes them.
  tabular_features.py evaluate MODEL ROWS TARGETS
      Loads the trained MODEL (torch.jit.load) and prints {"mse": ...} on one JSON line: the
      mean squared error of its one output against TARGETS on ROWS (raw little-endian float32
      files of N x 10 and N values, written by the test).
"""
import json
import sys

import torch


class Mlp(torch.nn.Module):
    def __init__(self, outputs: int):
        super().__init__()
        self.hidden = torch.nn.Linear(10, 32)
        self.out = torch.nn.Linear(32, outputs)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(rows)))


def make(directory):
    torch.manual_seed(0)
    torch.jit.script(Mlp(1)).save(directory + "/regress.pt")
    torch.jit.script(Mlp(3)).save(directory + "/classify.pt")


def evaluate(model_path, rows_path, targets_path):
    model = torch.jit.load(model_path).eval()
    with open(rows_path, "rb") as f:
        rows = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(-1, 10)
    with open(targets_path, "rb") as f:
        targets = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(-1, 1)
    with torch.no_grad():
        mse = ((model(rows) - targets) ** 2).mean().item()
    print(json.dumps({"mse": mse}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "evaluate":
        evaluate(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
