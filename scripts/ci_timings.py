"""Print where CI's test time went, from the rows ``scripts/ci_timings_plugin.py`` wrote: per run (a venv and
interpreter choice), the total, and the slowest test files with their share spent loading (on a cold cache:
compiling) Warp modules, waiting for child processes, and the rest.

usage: python scripts/ci_timings.py FOLDER [--top N]
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    totals: dict = collections.defaultdict(lambda: [0.0, 0.0, 0.0])  # (run, file) -> seconds, Warp, children
    for path in sorted(args.folder.glob("timings-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            sums = totals[(row["run"], row["file"])]
            sums[0] += row["seconds"]
            sums[1] += row["warp_modules"]
            sums[2] += row["children"]
    by_run: dict = collections.defaultdict(float)
    for (run, _), (seconds, _, _) in totals.items():
        by_run[run] += seconds
    print("test time per run (worker-seconds: parallel workers add up):")
    for run, seconds in sorted(by_run.items(), key=lambda kv: -kv[1]):
        print(f"  {run:40s} {seconds / 60:6.1f} min")
    print(f"\nthe {args.top} slowest files: seconds, and the share loading/compiling Warp modules, in child "
          "processes, and the rest")
    print(f"  {'run':28s} {'file':58s} {'s':>7s} {'warp':>5s} {'child':>5s} {'rest':>5s}")
    slowest = sorted(totals.items(), key=lambda kv: -kv[1][0])[: args.top]
    for (run, file), (seconds, warp, children) in slowest:
        shares = (warp, children, max(seconds - warp - children, 0.0))
        shown = " ".join(f"{100 * part / seconds:4.0f}%" if seconds else "    -" for part in shares)
        print(f"  {run[:28]:28s} {file[:58]:58s} {seconds:7.1f} {shown}")


if __name__ == "__main__":
    main()
