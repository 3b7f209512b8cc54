#!/usr/bin/env python3
"""Draws one step of a timeline as an SVG picture: a row per thread of each process, and its
collectives, over the step's time (a picture for a page; ui.perfetto.dev is the tool to explore).

  scripts/draw_timeline.py TRACE.json OUT.svg [STEP]

TRACE is a file of dist-train --timeline or scripts/merge_timelines.py. STEP (default: the
middle one) counts each process's "step" spans from 0 in time order, across epochs; the
processes' spans of that step set the window, from the earliest start to the latest end.
"""
import html
import json
import sys

COLOURS = {
    "step": "#d9d9d9", "data": "#9ecae1", "forward": "#74c476", "backward": "#31a354",
    "apply_gradients": "#fdd0a2", "optimizer": "#e6550d", "wait": "#de2d26",
    "agreement": "#fb6a4a", "settle": "#fcbba1", "gather layer": "#9e9ac8",
    "checkpoint": "#636363", "commit": "#969696", "all_reduce": "#3182bd",
    "reduce_scatter": "#6baed6", "all_gather": "#756bb1", "broadcast": "#bcbddc",
    "send": "#c6dbef",
}
ROW, LEFT, WIDTH, TOP = 22, 190, 900, 40


def load(path):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    names, spans, opened = {}, [], {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            names[(e["pid"], None)] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["ph"] == "X":
            spans.append(e)
        elif e["ph"] == "b":
            opened[e["id"]] = dict(e)
        elif e["ph"] == "e" and e["id"] in opened:
            b = opened.pop(e["id"])
            b["dur"] = e["ts"] - b["ts"]
            spans.append(b)
    return names, spans


def lanes(spans):
    """Packs each row's spans into lanes so that overlapping collectives stack."""
    out = {}
    for s in sorted(spans, key=lambda s: s["ts"]):
        row = out.setdefault((s["pid"], s.get("tid", 0)), [])
        for lane in row:
            if lane[-1]["ts"] + lane[-1]["dur"] <= s["ts"]:
                lane.append(s)
                break
        else:
            row.append([s])
    return out


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    names, spans = load(argv[1])
    by_process = {}
    for s in sorted((s for s in spans if s["name"] == "step"), key=lambda s: s["ts"]):
        by_process.setdefault(s["pid"], []).append(s)
    if not by_process:
        print(f"draw_timeline: {argv[1]} has no step spans", file=sys.stderr)
        return 1
    count = min(len(steps) for steps in by_process.values())
    index = int(argv[3]) if len(argv) > 3 else count // 2
    if not 0 <= index < count:
        print(f"draw_timeline: no step {index} (steps 0..{count - 1})", file=sys.stderr)
        return 1
    chosen = [steps[index] for steps in by_process.values()]
    begin = min(s["ts"] for s in chosen)
    end = max(s["ts"] + s["dur"] for s in chosen)
    scale = WIDTH / max(end - begin, 1e-9)
    shown = [s for s in spans if s["ts"] < end and s["ts"] + s["dur"] > begin]
    rows, y = [], TOP
    parts = []
    for (pid, tid), row in sorted(lanes(shown).items()):
        label = f'{names.get((pid, None), pid)} {names.get((pid, tid), tid)}'
        for depth, lane in enumerate(row):
            parts.append(f'<text x="4" y="{y + 15}" font-size="12">'
                         f'{html.escape(label if depth == 0 else "")}</text>')
            for s in lane:
                x0 = LEFT + (max(s["ts"], begin) - begin) * scale
                x1 = LEFT + (min(s["ts"] + s["dur"], end) - begin) * scale
                colour = COLOURS.get(s["name"], "#bdbdbd")
                args = ", ".join(f"{k}={v}" for k, v in s.get("args", {}).items())
                parts.append(f'<rect x="{x0:.1f}" y="{y + 2}" width="{max(x1 - x0, 0.5):.1f}" '
                             f'height="{ROW - 4}" fill="{colour}" stroke="#444" stroke-width="0.3">'
                             f'<title>{html.escape(s["name"])} {s["dur"] / 1000:.3f} ms '
                             f'{html.escape(args)}</title></rect>')
                if x1 - x0 > 7 * len(s["name"]):
                    parts.append(f'<text x="{x0 + 3:.1f}" y="{y + 15}" font-size="11">'
                                 f'{html.escape(s["name"])}</text>')
            y += ROW
        rows.append(label)
    total_ms = (end - begin) / 1000
    for i in range(11):
        x = LEFT + WIDTH * i / 10
        parts.append(f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{y}" stroke="#ccc" '
                     f'stroke-width="0.5"/><text x="{x - 10:.1f}" y="{TOP - 10}" '
                     f'font-size="10">{total_ms * i / 10:.1f}</text>')
    title = f"step {index}: {total_ms:.1f} ms (milliseconds from its start)"
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 20}" '
           f'height="{y + 10}" font-family="sans-serif"><rect width="100%" height="100%" '
           f'fill="white"/><text x="4" y="14" font-size="13">{html.escape(title)}</text>'
           + "".join(parts) + "</svg>\n")
    with open(argv[2], "w") as f:
        f.write(svg)
    print(f"draw_timeline: step {index} of {len(rows)} rows in {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
