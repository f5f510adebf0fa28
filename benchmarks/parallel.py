"""Parallel graph replay (issue 15) on a real client's step: serial vs ``threads=N``, one run.

    python -m benchmarks.parallel [--model scene|humanoid] [--worlds 256] [--threads 2] [--rounds 7]
                                  [--min-tasks 4096 256]

Captures one ``mjw.step`` of mujoco-warp (``scene``: the scene of ``tests/clients/test_mujoco_warp.py``,
a free box and a hinged capsule over a plane; ``humanoid``: mujoco-warp's own humanoid test model, each
world with its own random velocities) with ``--worlds`` worlds, then replays it serially and split
over ``--threads`` threads, for each ``--min-tasks`` (the graph's ``min_tasks_per_thread``: launches
with fewer tasks per thread stay serial). Rounds interleave the modes; the minimum and the median per
step are printed, with the kernels whose launches ran split and the heaviest ones that did not (and
why), and the split coverage: the share of a serial step's time (``apic.profile``) in the kernels
whose launches ran split. Before timing, a serial and a split replay of two graphs captured from
identical states must leave every array of ``Data`` identical bit for bit. Needs ``pip install
mujoco-warp``.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

import numpy as np
import warp as wp

import apic
from apic._compat import quiet_warp
from apic.replay.parallel.plan_costs import TIMED_REPLAYS

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "clients"))


def _scene(worlds: int, name: str):
    import mujoco
    import mujoco_warp as mjw
    from test_mujoco_warp import SCENE

    if name == "humanoid":
        mjm = mujoco.MjModel.from_xml_path(os.path.join(os.path.dirname(mjw.__file__), "test_data", "humanoid",
                                                        "humanoid.xml"))
    else:
        mjm = mujoco.MjModel.from_xml_string(SCENE)
    mjd = mujoco.MjData(mjm)
    mjd.qvel[:3] = (0.4, -0.2, 0.0)
    model = mjw.put_model(mjm)
    qvel = np.random.default_rng(3).standard_normal((worlds, mjm.nv)).astype(np.float32) * 0.5

    def made():
        if name == "humanoid":  # each world its own velocities: the solver iterates differently per world
            data = mjw.put_data(mjm, mjd, nworld=worlds)
            data.qvel.assign(qvel)
            return data
        # per world, as the client tests' scene (before 2026-11-28: times the number of worlds, far too many)
        return mjw.put_data(mjm, mjd, nworld=worlds, nconmax=32, njmax=64)

    # put_data leaves a few arrays uninitialised (as wp.empty): both copies start them zeroed
    from client_helpers import raw

    first, second = _arrays(made()), _arrays(made())
    uninitialised = [name for name in first if not np.array_equal(raw(first[name]), raw(second[name]))]

    def fresh():
        data = made()
        arrays = _arrays(data)
        for name in uninitialised:
            arrays[name].zero_()
        return data

    return model, fresh, mjw.step


def _arrays(data) -> dict:
    from client_helpers import warp_arrays

    return warp_arrays(data)


def differing(serial_data, again_data, split_data) -> tuple[list[str], list[str]]:
    """``(unset, differ)``: the Data arrays two serial replays leave different (uninitialised memory: wp.empty past
    the contacts, left out), and the others where the split replay differs from the serial one."""
    from client_helpers import raw

    a, b, c = _arrays(serial_data), _arrays(again_data), _arrays(split_data)
    unset = [name for name in a if not np.array_equal(raw(a[name]), raw(b[name]))]
    return unset, [name for name in a if name not in unset and not np.array_equal(raw(a[name]), raw(c[name]))]


def interleaved(graph, thread_counts: list[int], rounds: int, steps: int) -> dict[int, list[float]]:
    """ms per replay of ``graph`` on each thread count: ``rounds`` samples of ``steps`` replays each, the
    counts interleaved and their order reversed every other round (a noisy machine slows them alike)."""
    times = {threads: [] for threads in thread_counts}
    for r in range(rounds):
        for threads in (thread_counts if r % 2 == 0 else thread_counts[::-1]):
            start = time.perf_counter()
            for _ in range(steps):
                wp.capture_launch(graph, threads=threads)
            times[threads].append((time.perf_counter() - start) / steps * 1e3)
    return times


def _capture(step, model, data):
    with wp.ScopedCapture(device="cpu") as capture:
        step(model, data)
    return capture.graph


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("scene", "humanoid"), default="scene")
    parser.add_argument("--worlds", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3, help="replays per timed sample")
    parser.add_argument("--min-tasks", type=int, nargs="+", default=[4096, 256])
    args = parser.parse_args(argv)
    quiet_warp()
    wp.init()
    wp.set_device("cpu")  # the step runs on the CPU even where a GPU is the default device

    model, fresh, step = _scene(args.worlds, args.model)
    step(model, fresh())  # compile every module before capturing
    print(f"mujoco-warp step ({args.model}), {args.worlds} worlds, warp-lang {wp.config.version}, "
          f"apic {apic.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{args.rounds} interleaved rounds of {args.steps} steps, ms per step (min / median)\n")
    for min_tasks in args.min_tasks:
        serial_data, again_data, split_data = fresh(), fresh(), fresh()
        serial, again = _capture(step, model, serial_data), _capture(step, model, again_data)
        split = _capture(step, model, split_data)
        split.min_tasks_per_thread = min_tasks
        # the timed replays first (serial, plan_costs.TIMED_REPLAYS), then split ones on the plan they lead to
        for _ in range(TIMED_REPLAYS + 2):
            wp.capture_launch(serial)
            wp.capture_launch(again)
            wp.capture_launch(split, threads=args.threads)
        unset, differ = differing(serial_data, again_data, split_data)
        if differ:
            print(f"split replay differs from serial replay in {differ}")
            return 1
        times = interleaved(split, [1, args.threads], args.rounds, args.steps)
        report = split.parallel_report(args.threads)
        ran = collections.Counter(e["kernel"] for e in report for _ in range(e["count"]) if e["chunks"])
        proved_keys = {k.key for k in split.recording.kernels if k.split_writes is not None}
        kept = collections.Counter((e["kernel"], e["why"]) for e in report
                                   if not e["chunks"] and e["kernel"] in proved_keys)
        (s_min, s_med), (p_min, p_med) = ((min(t), statistics.median(t)) for t in times.values())
        print(f"min_tasks_per_thread {min_tasks}: serial {s_min:.1f} / {s_med:.1f}, threads={args.threads} "
              f"{p_min:.1f} / {p_med:.1f}: ratio {p_min / s_min:.2f} (medians {p_med / s_med:.2f}); "
              f"bit-identical to serial" + (f" (uninitialised, not compared: {', '.join(unset)})" if unset else ""))
        print(f"  {sum(ran.values())} of {sum(1 for op in split.recording.ops if type(op).__name__ == 'Launch')} "
              f"launches on several threads: {', '.join(f'{k} x{n}' for k, n in ran.items()) or 'none'}")
        print(f"  splittable kernels kept serial: {', '.join(f'{k} ({why})' for (k, why) in kept) or 'none'}")
        proved = sum(1 for k in split.recording.kernels if k.split_writes is not None)
        by_world = sum(1 for k in split.recording.kernels if k.split_world is not None)
        print(f"  {proved} of {len(split.recording.kernels)} kernels proved splittable at capture "
              f"({by_world} of them by world)")
        profiled = apic.profile(serial, replays=args.steps).rows
        shares = {row.name: row.share for row in profiled if row.kind == "launch"}
        print(f"  split coverage: {sum(shares.get(kernel, 0.0) for kernel in ran):.1%} of a serial step's time "
              "in kernels whose launches ran split")
        why_of = {e["kernel"]: e["why"] for e in report if not e["chunks"]}
        rest = sorted(((share, name) for name, share in shares.items() if name not in ran), reverse=True)
        remainder = [f"{name} {share:.1%} ({why_of.get(name, 'not a kernel launch')[:90]})"
                     for share, name in rest[:8] if share >= 0.001]
        print("  serial remainder (share of a serial step, why): " + "; ".join(remainder) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
