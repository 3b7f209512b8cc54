#!/usr/bin/env python3
"""The character language model of examples/char_lm/ (docs/guide.md, "Sequences").

A small GPT: token and position embeddings, a few pre-norm blocks of causal self-attention and
an MLP, a final norm and a linear head giving next-byte logits. Written here, scripted with
torch.jit.script, trained from C++ (examples/char_lm/char_lm.cc) and read back here.

  char_lm.py model VOCAB OUT.pt [--layers 2] [--dim 64] [--heads 4] [--max-len 128] [--seed 0]
      writes the scripted, untrained model for the vocabulary VOCAB (char_lm prepare writes
      it: the distinct bytes of the text, token id i = the i-th byte).
  char_lm.py sample TRAINED.pt VOCAB [--eval DIR] [--prompt TEXT] [--length 200] [--seed 0]
      with --eval: the mean next-byte loss over the real tokens of DIR/eval_inputs.i64 and
      DIR/eval_targets.i64 (what char_lm train evaluated, described by DIR/eval.json), as JSON;
      then a sample of --length bytes continuing --prompt.

Uses Debian's python3-torch (/usr/bin/python3), the version of the library's LibTorch.
"""
import argparse
import json
import math
import sys
from typing import Optional

import torch
from torch import Tensor, nn


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, mask: Optional[Tensor]) -> Tensor:
        batch, time, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=2)
        head_dim = dim // self.heads
        q = q.view(batch, time, self.heads, head_dim).transpose(1, 2)
        k = k.view(batch, time, self.heads, head_dim).transpose(1, 2)
        v = v.view(batch, time, self.heads, head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)
        # Position t sees positions up to t, and only real tokens: the first token of a row is
        # real, so no row is left with nothing to attend to. A finite fill keeps it NaN-free.
        allowed = torch.ones(time, time, dtype=torch.bool, device=x.device).tril()
        if mask is not None:
            allowed = allowed.unsqueeze(0) & mask.to(torch.bool).unsqueeze(1)
            allowed = allowed.unsqueeze(1)
        scores = scores.masked_fill(~allowed, -1e9)
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(batch, time, dim))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = CausalSelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Tensor, mask: Optional[Tensor]) -> Tensor:
        x = x + self.attention(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))


class CharLM(nn.Module):
    """forward(tokens [batch, time] int64, mask [batch, time] bool or None) -> logits
    [batch, time, vocabulary]: the logits at t predict the token at t + 1."""

    def __init__(self, vocabulary: int, layers: int, dim: int, heads: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.vocabulary = vocabulary
        self.token_embedding = nn.Embedding(vocabulary, dim)
        self.position_embedding = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocabulary)

    def forward(self, tokens: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        if tokens.dim() != 2:
            raise ValueError("tokens must be [batch, time] token ids")
        time = tokens.size(1)
        if time > self.max_len:
            raise ValueError(f"a sequence of {time} tokens is longer than the model's "
                             f"max_len of {self.max_len}")
        positions = torch.arange(time, device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions).unsqueeze(0)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def read_vocabulary(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def make_model(args) -> None:
    vocabulary = read_vocabulary(args.vocab)
    if not vocabulary:
        sys.exit(f"char_lm.py: the vocabulary {args.vocab} is empty")
    torch.manual_seed(args.seed)
    model = CharLM(len(vocabulary), args.layers, args.dim, args.heads, args.max_len)
    scripted = torch.jit.script(model)
    scripted.save(args.out)
    parameters = sum(p.numel() for p in model.parameters())
    print(json.dumps({"model": args.out, "vocabulary": len(vocabulary), "parameters": parameters,
                      "max_len": args.max_len}))


def raw_int64(path: str, rows: int, time: int) -> Tensor:
    with open(path, "rb") as f:
        data = bytearray(f.read())
    values = torch.frombuffer(data, dtype=torch.int64)
    if values.numel() != rows * time:
        sys.exit(f"char_lm.py: {path} holds {values.numel()} values, not {rows} x {time}")
    return values.reshape(rows, time).clone()


def evaluate(model, directory: str) -> dict:
    with open(f"{directory}/eval.json") as f:
        meta = json.load(f)
    rows, time, padding_id = meta["rows"], meta["time"], meta["padding_id"]
    inputs = raw_int64(f"{directory}/eval_inputs.i64", rows, time)
    targets = raw_int64(f"{directory}/eval_targets.i64", rows, time)
    mask = targets != padding_id
    with torch.no_grad():
        logits = model(inputs, mask)
        losses = nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), torch.where(mask, targets, torch.zeros_like(targets)).reshape(-1),
            reduction="none").reshape(rows, time)
        loss = (losses * mask).sum() / mask.sum()
    return {"loss": loss.item(), "tokens": int(mask.sum()), "cpp_loss": meta.get("loss")}


def sample(args) -> None:
    model = torch.jit.load(args.model)
    model.eval()
    vocabulary = read_vocabulary(args.vocab)
    if args.eval:
        print(json.dumps(evaluate(model, args.eval)))
    index = {byte: i for i, byte in enumerate(vocabulary)}
    prompt = args.prompt.encode()
    unknown = [chr(b) for b in prompt if b not in index]
    if unknown:
        sys.exit(f"char_lm.py: the prompt has bytes outside the vocabulary: {unknown}")
    tokens = [index[b] for b in prompt]
    generator = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for _ in range(args.length):
            context = torch.tensor([tokens[-model.max_len:]])
            logits = model(context)[0, -1] / args.temperature
            tokens.append(int(torch.multinomial(torch.softmax(logits, 0), 1, generator=generator)))
    print(bytes(vocabulary[t] for t in tokens).decode(errors="replace"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("model", help="write the scripted, untrained model")
    m.add_argument("vocab")
    m.add_argument("out")
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--dim", type=int, default=64)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--max-len", type=int, default=128)
    m.add_argument("--seed", type=int, default=0)
    s = commands.add_parser("sample", help="evaluate a trained model and sample from it")
    s.add_argument("model")
    s.add_argument("vocab")
    s.add_argument("--eval", help="the directory char_lm train wrote its evaluation into")
    s.add_argument("--prompt", default="The ")
    s.add_argument("--length", type=int, default=200)
    s.add_argument("--temperature", type=float, default=0.8)
    s.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.command == "model":
        make_model(args)
    else:
        sample(args)


if __name__ == "__main__":
    main()
