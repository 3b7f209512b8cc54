#!/usr/bin/env python3
"""Joins the timelines of a job's tasks into one file, one process row per task.

dist-train --timeline FILE makes each task of a cluster write its own file (FILE with its task
before the extension: trace.chief-0.json, trace.worker-0.json, ...). Their timestamps are on the
system clock, so they line up when the hosts' clocks agree. ui.perfetto.dev opens the result.

  scripts/merge_timelines.py OUT.json trace.worker-0.json trace.worker-1.json ...
"""
import json
import os
import sys


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out, inputs = argv[1], argv[2:]
    events, dropped = [], 0
    for path in inputs:
        try:
            with open(path) as f:
                trace = json.load(f)
        except (OSError, ValueError) as e:
            print(f"merge_timelines: cannot read the timeline '{path}': {e}", file=sys.stderr)
            return 1
        if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
            print(f"merge_timelines: '{path}' is not a timeline (no traceEvents list)",
                  file=sys.stderr)
            return 1
        events.extend(trace["traceEvents"])
        dropped += trace.get("otherData", {}).get("dropped_spans", 0)
    merged = {"displayTimeUnit": "ms",
              "otherData": {"recorded_by": "distribute", "dropped_spans": dropped,
                            "merged_from": inputs},
              "traceEvents": events}
    with open(out + ".tmp", "w") as f:
        json.dump(merged, f, separators=(",", ":"))
    os.replace(out + ".tmp", out)
    print(f"merge_timelines: {len(events)} events of {len(inputs)} tasks in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
