#!/usr/bin/env python3
# The report of bench/hosts_scaling.sh: reads its results.tsv (one run a line: model, backend,
# hosts, link rate, images/s, bytes per step per worker from eth0, ..., column 8 dist-train's own
# bytes counter, column 9 the first error line of a failed run) and prints, per model, a table
# of the medians of every cell with Horovod's scaling efficiency and bytes against the ring
# all-reduce's 2(N-1)/N x gradient bytes; then the headline at 2 hosts on 1gbit (Gloo, MPI and
# DDP, builds against each other, the gradient compression variants, multi_worker_bench like
# for like).
#
#   bench/lib/hosts_scaling_report.py RESULTS_TSV
import collections, statistics, sys
rows = collections.defaultdict(list)
library = collections.defaultdict(list)  # dist-train's own bytes/step/worker (column 8)
errors = collections.defaultdict(list)   # first error line of each failed run (column 9)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 7 or f[0] == "#":
        continue
    model, backend, hosts, rate, ips, bps = f[0], f[1], int(f[2]), f[3], f[4], f[5]
    rows[(model, backend, hosts, rate)].append((float(ips) if ips != "failed" else None,
                                                float(bps) if bps not in ("na", "failed") else None))
    cols = line.rstrip("\n").split("\t")
    lib = cols[7] if len(cols) > 7 else "na"
    library[(model, backend, hosts, rate)].append(float(lib) if lib not in ("na", "failed", "") else None)
    if ips == "failed":
        errors[(model, backend, hosts, rate)].append(cols[8] if len(cols) > 8 and cols[8] != "-" else "?")
def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None
params = {"cnn": 121930, "mlp": 20037642}
def cell(model, backend, hosts, rate):
    r = rows.get((model, backend, hosts, rate))
    if not r:
        return None, None, 0
    return med([a for a, _ in r]), med([b for _, b in r]), len(r)
print("CPU: see docs/hosts-scaling.md; results from", sys.argv[1])
for model in ("cnn", "mlp"):
    grad = params[model] * 4
    print(f"\n{model}: {params[model]} parameters, {grad} gradient bytes (float32)")
    print(f"{'backend':7} {'hosts':>5} {'link':>9} {'images/s':>9} {'eff':>6} {'MB/step/worker':>15} {'x theory':>9} {'runs':>4}")
    known = ["gloo", "mpi", "mpiring", "ddp", "mwb", "ddp-s"]
    extra = sorted({b for (_, b, _, _) in rows if b not in known})  # mwb-LAYOUT rows
    for backend in known + extra:
        one, _, _ = cell(model, {"mpiring": "mpi", "ddp-s": "ddp"}.get(backend, backend), 1, "none")
        for hosts, rate in [(1, "none")] + [(h, r) for h in (2, 4) for r in ("unlimited", "10gbit", "1gbit")]:
            if hosts == 1 and (backend in ("mpiring", "ddp-s") or backend in extra):
                continue
            ips, bps, n = cell(model, backend, hosts, rate)
            if n == 0:
                continue
            eff = f"{ips / (hosts * one):.3f}" if ips and one else "-"
            theory = 2 * (hosts - 1) / hosts * grad
            mb = f"{bps / 1e6:.3f}" if bps is not None else "-"
            x = f"{bps / theory:.3f}" if bps is not None and hosts > 1 else "-"
            print(f"{backend:7} {hosts:>5} {rate:>9} {ips if ips is None else round(ips, 1)!s:>9} {eff:>6} {mb:>15} {x:>9} {n:>4}")
print("\nHeadline, 2 hosts at 1gbit (medians):")
link, _, _ = cell("link", "tcp", 2, "1gbit")
if link:
    print(f"  the link: {link * 8 / 1e6:.0f} Mbit/s each way on eth0 (a TCP stream each way at "
          f"once); a run's limit is 2 x 64 images a step x that / its eth0 bytes a step")
def against_link(ips, bps):  # "; 0.83 of the link's limit (191.2 images/s)", or ""
    if not (link and ips and bps):
        return ""
    limit = 2 * 64 * link / bps
    return f"; {ips / limit:.3f} of the link's limit ({limit:.1f} images/s)"
for model in ("cnn", "mlp"):
    g, _, _ = cell(model, "gloo", 2, "1gbit")
    m, _, _ = cell(model, "mpi", 2, "1gbit")
    d, _, _ = cell(model, "ddp", 2, "1gbit")
    mr, _, _ = cell(model, "mpiring", 2, "1gbit")
    def ratio(a, b):
        return f"{a / b:.3f}" if a and b else "n/a"
    print(f"  {model}: gloo {g}, mpi {m}, mpi ring {mr}, ddp {d} images/s; dist (gloo) / ddp "
          f"{ratio(g, d)}; mpi / gloo {ratio(m, g)}; mpi ring / gloo {ratio(mr, g)}; "
          f"dist (mpi) / ddp {ratio(m, d)}")
    for b in ("gloo", "mpi", "ddp"):
        ips, bps, _ = cell(model, b, 2, "1gbit")
        if against_link(ips, bps):
            print(f"    {b}: {ips} images/s, {bps:,.0f} eth0 bytes a step{against_link(ips, bps)}")
    for other in sorted({b for (_, b, _, _) in rows if b.startswith("gloo@")}):
        b, _, _ = cell(model, other, 2, "1gbit")
        if b:
            print(f"  {model}: {other} {b} images/s; gloo / {other} {ratio(g, b)}; "
                  f"{other} / ddp {ratio(b, d)}")
    compressed = sorted({b for (m, b, h, r) in rows if m == model and h == 2 and r == "1gbit"
                         and b.startswith(("gloo+", "ddp+"))}, key=lambda b: (b.startswith("ddp+"), b))
    if compressed:
        ddps = ["ddp"] + [b for b in compressed if b.startswith("ddp+")]
        print(f"  {model}, gradient compression: images/s, / gloo (speed-up), / each DDP run; "
              f"bytes/step/worker eth0 and library counter:")
        for b in ["gloo"] + compressed:
            ips, bps, n = cell(model, b, 2, "1gbit")
            if n == 0:
                continue
            lib = med(library[(model, b, 2, "1gbit")])
            failed = errors.get((model, b, 2, "1gbit"), [])
            text = f"    {b:18} "
            if ips is None:
                text += f"failed ({len(failed)} of {n} runs): {failed[0]}"
                print(text)
                continue
            text += f"{ips:8.1f} images/s{against_link(ips, bps)}"
            if b != "gloo":
                text += f"; / gloo {ratio(ips, g)}"
            others = [f"/ {d} {ratio(ips, cell(model, d, 2, '1gbit')[0])}" for d in ddps
                      if d != b and cell(model, d, 2, "1gbit")[0]]
            if others:
                text += "; " + ", ".join(others)
            text += f"; eth0 {bps:,.0f}" if bps is not None else "; eth0 -"
            if not b.startswith("ddp"):
                text += f", library {lib:,.0f}" if lib is not None else ", library -"
            _, gb, _ = cell(model, "gloo", 2, "1gbit")
            if b != "gloo" and bps is not None and gb:
                text += f" ({bps / gb:.3f} of gloo's eth0)"
            text += f"; runs {n}"
            if failed:
                text += f", {len(failed)} failed: {failed[0]}"
            print(text)
    for rate in ("1gbit", "unlimited"):
        ds, _, _ = cell(model, "ddp-s", 2, rate)
        for variant in ["mwb"] + sorted({b for (_, b, _, _) in rows if b.startswith("mwb-")}):
            w, _, _ = cell(model, variant, 2, rate)
            if w and ds:
                print(f"  {model}, 2 hosts at {rate}, like for like ({variant} / ddp): "
                      f"{w} / {ds} = {ratio(w, ds)}")
