#!/usr/bin/env python3
"""Projects a model's training speed to more hosts and faster links than these machines have,
from one worker's measured step parts and each algorithm's traffic (docs/scaling.md).

  scripts/project_scaling.py ONE_HOST TWO_HOSTS MODEL [options]

ONE_HOST, TWO_HOSTS: worker 0's files from `dist-train --timeline` of plain runs (no
compression, no sharding) of one worker per host, 1 intra-op thread, on 1 and on 2 hosts
(bench/hosts_scaling.sh's gloo+timeline variant keeps them). The one-host run gives the
compute: data, forward, backward and optimizer, and the rest of its step (bookkeeping,
metrics); the two-host run gives the gradient packs (bytes, and when each is ready in
backward), the small collectives of a step (the agreements before each collective, the loss
and metrics: latency-bound) and the time of the fastest tenth of them (the latency per hop).
MODEL: cnn or mlp (their parameter shapes are needed for PowerSGD's traffic).

  --validate "HOSTS:GBIT:CORES=IMAGES_PER_SEC,..."   predictions beside measurements, where
        CORES is the cores the HOSTS workers share (namespace hosts on one machine: each
        worker's compute takes max(1, HOSTS/CORES) times longer)
  --latency-us US     the per-hop latency of the projection (default 50: TCP on a data-centre
                      switch); the validation uses the one measured in TIMELINE
  --efficiency E      the share of a link's rate TCP delivers (default 0.95, measured with tbf)
  --hook-ms "bf16=MS,powersgd:4=MS"   the hooks' arithmetic per step (default: the figures
                      of bench/hook_compute.sh in docs/scaling.md)

The model, for N hosts of one worker each, a link of B bytes/s each way per host (a switch of
full bisection), latency a per message:
  ring all-reduce of S bytes      2(N-1) (a + S / (N B))               (Gloo's ring; sharding 1, 2:
                                                                       a reduce-scatter and an
                                                                       all-gather, the same)
  hierarchical (groups of g = ~sqrt N hosts): reduce-scatter in the group, ring all-reduce of
                                  S/g across the groups, all-gather in the group:
                                  2(g-1)(a + S/(g B)) + 2(N/g-1)(a + S/(N B))
  bf16 / fp16 (half_sum_hook.cc)  two exchanges with every other host of S/2 per host:
                                  2 ((N-1) a + (N-1)/N S/(2 B))
  PowerSGD rank r                 three ring all-reduces: P (n r per matrix), the uncompressed
                                  vectors and small matrices, Q (m r per matrix)
  sharding stage 3                1.5x the ring's bytes (a layer gathered for forward and again
                                  for backward), every gather on the critical path
Each small collective of a step costs 2(N-1) a, on the critical path. Packs go out in order as
backward makes them, one at a time on the link; the step is
  data + forward + max(backward, the last pack's end) + optimizer + rest + small collectives
(the optimizer's time over N at every sharding stage). What it leaves out: the CPU time TCP and
the collective threads take beside compute (it matters on shared namespace cores), stragglers,
and a switch that is not full bisection. PowerSGD's and bf16's arithmetic is added as measured
by bench/hook_compute.sh (one thread, nothing on a link).
"""
import argparse
import json
import math
import statistics
import sys

# Parameter shapes (facts of the models, as tools/ builds them).
SHAPES = {
    "mlp": [(4096, 784), (4096,), (4096, 4096), (4096,), (10, 4096), (10,)],
    "cnn": [(32, 1, 3, 3), (32,), (64, 32, 3, 3), (64,), (64, 1600), (64,), (10, 64), (10,)],
}
# Per-step arithmetic of the compressing hooks on one thread, seconds: bench/hook_compute.sh
# (docs/scaling.md, "Beyond these machines"); --hook-ms replaces them.
HOOK_COMPUTE = {
    ("mlp", "bf16"): 0.0082, ("mlp", "powersgd:4"): 0.0340,
    ("cnn", "bf16"): 0.0005, ("cnn", "powersgd:4"): 0.0004,
}
IMAGES_PER_WORKER = 64
POWERSGD_MIN_PACK_BYTES = 1 << 20  # CommunicationHook::min_pack_bytes of PowerSGD
ALGORITHMS = ["ring", "hierarchical", "bf16", "powersgd:4", "sharding 1/2", "sharding 3"]


def step_parts(path):
    """Median compute parts (s, with "rest": the step less its parts), the packs [(bytes, ready
    at this fraction of backward)], the small collectives per step and the latency per hop (s)
    of a plain run's timeline."""
    events = json.load(open(path))["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    steps = sorted((e for e in spans if e["name"] == "step"), key=lambda e: e["ts"])[2:]
    opened, collectives = {}, []
    for e in events:
        if e.get("ph") == "b":
            opened[(e["id"], e["name"])] = e
        elif e.get("ph") == "e":
            b = opened.pop((e["id"], e["name"]), None)
            if b:
                collectives.append((b["ts"], e["ts"] - b["ts"], b["name"], b["args"].get("bytes", 0)))
    parts = {name: [] for name in ("data", "forward", "backward", "optimizer", "rest")}
    packs_per_step, small, small_counts = [], [], []
    for s in steps:
        inside = [e for e in spans if s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
        for name in parts:
            parts[name].append(sum(e["dur"] for e in inside if e["name"] == name) / 1e6)
        parts["rest"][-1] = s["dur"] / 1e6 - sum(parts[k][-1] for k in parts if k != "rest")
        back = [e for e in inside if e["name"] == "backward"]
        if not back:
            continue
        b0, bd = back[0]["ts"], back[0]["dur"]
        packs = [(nbytes, min(1.0, max(0.0, (ts - b0) / bd)))
                 for ts, _, name, nbytes in collectives
                 if name == "all_reduce" and nbytes >= 4096 and s["ts"] <= ts < s["ts"] + s["dur"]]
        packs_per_step.append(packs)
        mine = [d / 1e6 for ts, d, name, nbytes in collectives
                if name == "all_reduce" and nbytes <= 64 and s["ts"] <= ts < s["ts"] + s["dur"]]
        small += mine
        small_counts.append(len(mine))
    compute = {name: statistics.median(v) for name, v in parts.items()}
    packs = statistics.mode([tuple(p) for p in packs_per_step])  # the usual step's packs
    # A small all-reduce between 2 workers is 2 hops; most of them also wait for the other
    # worker to arrive, so the fastest tenth says what a hop costs.
    small.sort()
    latency = small[len(small) // 10] / 2 if small else 50e-6
    return compute, list(packs), statistics.median(small_counts) if small_counts else 0, latency


def ring(nbytes, n, bw, a):
    return 2 * (n - 1) * (a + nbytes / (n * bw)) if n > 1 else 0.0


def hierarchical(nbytes, n, bw, a):
    if n <= 1:
        return 0.0
    g = max(1, round(math.sqrt(n)))
    groups = n / g
    inside = 2 * (g - 1) * (a + nbytes / (g * bw))
    across = 2 * (groups - 1) * (a + nbytes / (n * bw)) if groups > 1 else 0.0
    return inside + across


def half(nbytes, n, bw, a):
    return 2 * ((n - 1) * a + (n - 1) / n * nbytes / 2 / bw) if n > 1 else 0.0


def powersgd_parts(model, rank=4):
    """Bytes of P, of the uncompressed rest and of Q for the whole model (one pack's worth)."""
    p = rest = q = 0
    for shape in SHAPES[model]:
        n = shape[0]
        m = math.prod(shape[1:]) if len(shape) > 1 else 1
        if len(shape) == 1 or n * m <= 2 * (n + m) * rank:
            rest += 4 * n * m
        else:
            p, q = p + 4 * n * rank, q + 4 * m * rank
    return p, rest, q


def step_time(algorithm, model, compute, packs, n, gbit, a, efficiency, slowdown=1.0, small=0):
    bw = gbit * 1e9 / 8 * efficiency
    data, fwd, bwd, opt, rest = (compute[k] * slowdown
                                 for k in ("data", "forward", "backward", "optimizer", "rest"))
    check = 0.0  # the agreements are among the step's small collectives
    total = sum(nbytes for nbytes, _ in packs)
    extra = 0.0
    if algorithm == "powersgd:4":
        p, plain, q = powersgd_parts(model)
        # Per pack: P and the rest during backward, Q after it (its all-reduce waits for P's);
        # a pack under PowerSGD's threshold (1 MiB) crosses as a plain all-reduce.
        compressed = [nbytes >= POWERSGD_MIN_PACK_BYTES for nbytes, _ in packs]
        share = [nbytes / total for nbytes, _ in packs]
        cost = [(ring(p * s, n, bw, a) + ring(plain * s, n, bw, a) + ring(q * s, n, bw, a)
                 + 3 * check) if c else ring(nbytes, n, bw, a) + check
                for s, c, (nbytes, _) in zip(share, compressed, packs)]
        extra = HOOK_COMPUTE[(model, algorithm)] * slowdown * any(compressed)
    elif algorithm == "bf16":
        cost = [half(nbytes, n, bw, a) + check for nbytes, _ in packs]
        extra = HOOK_COMPUTE[(model, algorithm)] * slowdown
    elif algorithm == "hierarchical":
        cost = [hierarchical(nbytes, n, bw, a) + check for nbytes, _ in packs]
    elif algorithm == "sharding 3":
        cost = [1.5 * ring(nbytes, n, bw, a) + 3 * check for nbytes, _ in packs]
    else:  # ring, sharding 1/2 (a reduce-scatter and an all-gather: the ring's bytes)
        cost = [ring(nbytes, n, bw, a) + check * (2 if algorithm == "sharding 1/2" else 1)
                for nbytes, _ in packs]
    if algorithm.startswith("sharding"):
        opt /= n
    end = fwd
    for (nbytes, ready), c in zip(packs, cost):
        end = max(end, fwd + ready * bwd) + c
    return data + max(fwd + bwd, end) + opt + rest + extra + small * ring(0, n, bw, a)


def images_per_second(*args, **kwargs):
    n = args[4]
    return IMAGES_PER_WORKER * n / step_time(*args, **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("one_host")
    parser.add_argument("two_hosts")
    parser.add_argument("model", choices=sorted(SHAPES))
    parser.add_argument("--validate", default="")
    parser.add_argument("--latency-us", type=float, default=50.0)
    parser.add_argument("--efficiency", type=float, default=0.95)
    parser.add_argument("--hook-ms", default="")
    args = parser.parse_args()
    for item in filter(None, args.hook_ms.split(",")):
        name, ms = item.split("=")
        HOOK_COMPUTE[(args.model, name)] = float(ms) / 1e3
    compute = step_parts(args.one_host)[0]
    _, packs, small, measured_latency = step_parts(args.two_hosts)
    one = sum(compute.values())
    print(f"{args.model}: compute per step {one * 1e3:.1f} ms (" +
          ", ".join(f"{k} {v * 1e3:.1f}" for k, v in compute.items()) + "); packs " +
          ", ".join(f"{b / 1e6:.2f} MB at {r:.2f} of backward" for b, r in packs) +
          f"; {small:g} small collectives a step; latency per hop {measured_latency * 1e6:.0f} us"
          " (measured)")
    if args.validate:
        print("\n| hosts | link | cores shared | algorithm | predicted images/s | measured | predicted / measured |")
        print("|---:|---|---:|---|---:|---:|---:|")
        for item in args.validate.split(","):
            where, measured = item.split("=")
            fields = where.split(":")
            hosts, gbit, cores = int(fields[0]), float(fields[1]), int(fields[2])
            fields = where.split(":", 3)
            algorithm = fields[3] if len(fields) > 3 else "ring"
            slowdown = max(1.0, hosts / cores)
            predicted = images_per_second(algorithm, args.model, compute, packs, hosts, gbit,
                                          measured_latency, args.efficiency, slowdown, small)
            print(f"| {hosts} | {gbit:g} Gbit/s | {cores} | {algorithm} | {predicted:.0f} | "
                  f"{float(measured):.0f} | {predicted / float(measured):.3f} |")
    a = args.latency_us * 1e-6
    for gbit in (10, 25, 100):
        print(f"\n{args.model}, {gbit} Gbit/s, latency {args.latency_us:g} us: images/s "
              f"(scaling efficiency: images/s over N x one host's {IMAGES_PER_WORKER / one:.0f})\n")
        print("| hosts | " + " | ".join(ALGORITHMS) + " |")
        print("|---:|" + "---:|" * len(ALGORITHMS))
        for n in (8, 16, 32, 64, 128, 256):
            cells = []
            for algorithm in ALGORITHMS:
                ips = images_per_second(algorithm, args.model, compute, packs, n, gbit, a,
                                        args.efficiency, 1.0, small)
                cells.append(f"{ips:,.0f} ({ips / (n * IMAGES_PER_WORKER / one):.2f})")
            print(f"| {n} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
