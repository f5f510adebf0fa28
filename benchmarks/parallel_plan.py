"""Is the parallel plan of a real client's step the same on every run? One plan per fresh process.

    python -m benchmarks.parallel_plan [--model humanoid] [--worlds 256] [--threads 2] [--runs 10]

Starts ``--runs`` fresh processes one after another; each captures one ``mjw.step`` (the scenes of
``benchmarks.parallel``, default settings), replays it on ``--threads`` threads until its timed replays
are done (``apic.replay.parallel.plan_costs.TIMED_REPLAYS``) and prints the launches its plan splits. The
summary says how many distinct plans the runs made, and for the rows whose time decides, their
measured times nearest the boundary (how far the nearest is from flipping). Needs mujoco-warp.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import subprocess
import sys


def _one(args) -> dict:
    import warp as wp

    from apic._compat import quiet_warp
    from apic.replay.parallel.plan_costs import TIMED_REPLAYS

    from benchmarks.parallel import _capture, _scene

    quiet_warp()
    wp.init()
    model, fresh, step = _scene(args.worlds, args.model)
    step(model, fresh())  # compile every module before capturing
    graph = _capture(step, model, fresh())
    for _ in range(TIMED_REPLAYS + 1):
        wp.capture_launch(graph, threads=args.threads)
    report = graph.parallel_report(args.threads)
    rows = [int(split.rows[0]) for split in graph.program.splits]
    split = sorted(row for row, entry in zip(rows, report) if entry["chunks"])
    timed = [entry["basis"] for entry in report if "the boundary" in entry["basis"]]
    return {"split": split, "launches": sum(entry["count"] for entry in report if entry["chunks"]),
            "of": sum(1 for op in graph.recording.ops if type(op).__name__ == "Launch"),
            "sha": hashlib.sha256(json.dumps(split).encode()).hexdigest()[:12], "timed": timed,
            "load": os.getloadavg()[0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("scene", "humanoid"), default="humanoid")
    parser.add_argument("--worlds", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--verbose", action="store_true", help="print each timed launch's basis")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_one(args)))
        return 0
    plans = collections.Counter()
    for run in range(args.runs):
        done = subprocess.run([sys.executable, "-m", "benchmarks.parallel_plan", "--child", "--model", args.model,
                               "--worlds", str(args.worlds), "--threads", str(args.threads)],
                              capture_output=True, text=True, check=False)
        if done.returncode:
            print(done.stderr[-3000:])
            return 1
        result = json.loads(done.stdout.strip().splitlines()[-1])
        plans[result["sha"]] += 1
        bounds = sorted({line.split("the boundary ")[1] for line in result["timed"]})
        print(f"run {run + 1}: plan {result['sha']}, {result['launches']} of {result['of']} launches on several "
              f"threads, {len(result['timed'])} decided by their time, boundary {', '.join(bounds) or 'none'}, "
              f"load average {result['load']:.1f}")
        if args.verbose or (run == 0 and args.runs == 1):
            for line in result["timed"]:
                print(f"    {line}")
    print(f"{len(plans)} distinct plan(s) in {args.runs} fresh processes: "
          + ", ".join(f"{sha} x{n}" for sha, n in plans.most_common()))
    return 0 if len(plans) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
