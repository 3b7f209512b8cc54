#!/usr/bin/env python3
"""Where a step's time goes, from one worker's timeline (dist-train --timeline).

    bench/lib/timeline_phases.py TRACE.json [FIRST_STEP=3]

For every step from FIRST_STEP on (counting from 0; the first steps carry the warm-up, and
PowerSGD's plain ones), sums each span's time inside the step by row (loop, replica N) and
name, and prints the medians over those steps, with the step's own median and each span's
share of it; collectives (begin/end pairs) are summed by kind with their payload bytes. Spans
nest (apply_gradients holds wait and optimizer), so the shares of one row do not add up to 1.
"""
import collections
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def row_names(events):
    return {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}


def steps_of(events, rows):
    loop = [tid for tid, name in rows.items() if name == "loop"]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("ph") == "X" and e.get("name") == "step" and e["tid"] in loop)
    return spans


def collective_spans(events):
    """(begin, end, kind, bytes) of each collective, pairing b/e events by id."""
    open_ones, spans = {}, []
    for e in events:
        if e.get("ph") == "b":
            open_ones[(e.get("id"), e["name"])] = e
        elif e.get("ph") == "e":
            begin = open_ones.pop((e.get("id"), e["name"]), None)
            if begin is not None:
                spans.append((begin["ts"], e["ts"], e["name"], begin.get("args", {}).get("bytes", 0)))
    return spans


def main():
    path = sys.argv[1]
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    events = load(path)
    rows = row_names(events)
    steps = steps_of(events, rows)[first:]
    if not steps:
        sys.exit(f"{path}: no step spans after step {first}")
    totals = collections.defaultdict(lambda: [0.0] * len(steps))
    for e in events:
        if e.get("ph") != "X" or e.get("name") == "step":
            continue
        for i, (begin, end) in enumerate(steps):
            if begin <= e["ts"] < end:
                totals[(rows.get(e["tid"], str(e["tid"])), e["name"])][i] += e["dur"]
                break
    for begin_ts, end_ts, kind, size in collective_spans(events):
        for i, (begin, end) in enumerate(steps):
            if begin <= begin_ts < end:
                totals[("collectives", f"{kind} ({size} B)")][i] += end_ts - begin_ts
                break
    step_ms = statistics.median(end - begin for begin, end in steps) / 1000
    print(f"{path}: {len(steps)} steps from step {first}, median step {step_ms:.1f} ms")
    for (row, name), values in sorted(totals.items()):
        ms = statistics.median(values) / 1000
        print(f"  {row:12} {name:40} {ms:9.1f} ms  {ms / step_ms:6.3f}")


if __name__ == "__main__":
    main()
