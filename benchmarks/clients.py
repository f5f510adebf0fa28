"""Eager vs captured replay per step for the client tier's scenes (mujoco-warp, newton) on the CPU.

For each scene: eager Warp (the client's own step), apic's replay of a capture made the way the
client captures, and upstream Warp's own CPU capture of the same step (``apic.uninstall()``
around it; warp-lang 1.19 captures on the CPU natively), all in one run. Prints a Markdown table.

    python benchmarks/clients.py [--steps N] [--repeats R]

Needs the clients installed (``pip install mujoco-warp newton``) and warp-lang 1.19 for the
upstream column. The scenes are those of ``tests/clients`` (imported from there).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import warp as wp

import apic
from apic._compat import quiet_warp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "clients"))


def per_step(step, steps: int, repeats: int) -> float:
    """Best over ``repeats`` of the mean seconds per call of ``step`` over ``steps`` calls."""
    step()  # warm: first replay loads the interpreter
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - start) / steps)
    return best


def scenes():
    """``(name, make)``: ``make()`` returns ``(simulate, capture_target)`` on a fresh state."""
    import mujoco
    import mujoco_warp as mjw
    import newton  # noqa: F401
    from test_mujoco_warp import SCENE
    from test_newton import EXAMPLES, Scene, make_example

    mjm = mujoco.MjModel.from_xml_string(SCENE)
    mjd = mujoco.MjData(mjm)
    m = mjw.put_model(mjm)

    def mujoco_scene():
        d = mjw.put_data(mjm, mjd, nworld=2, nconmax=32, njmax=64)
        return lambda: mjw.step(m, d)

    def newton_scene():
        return Scene().simulate

    found = [("mujoco-warp: box + hinge, 2 worlds (mjw.step)", mujoco_scene),
             ("newton: sphere + box, XPBD, 4 substeps/frame", newton_scene)]
    for name in EXAMPLES:
        found.append((f"newton example basic_{name} (1 frame)",
                      lambda name=name: make_example(name, captured=False).simulate))
    return found


def measure(make, steps: int, repeats: int) -> dict:
    eager = per_step(make(), steps, repeats)
    simulate = make()
    with wp.ScopedCapture(device="cpu") as capture:
        simulate()
    graph = capture.graph
    replay = per_step(lambda: wp.capture_launch(graph), steps, repeats)
    upstream = None
    apic.uninstall()
    try:
        simulate = make()
        with wp.ScopedCapture(device="cpu") as capture:
            simulate()
        native = capture.graph
        upstream = per_step(lambda: wp.capture_launch(native), steps, repeats)
    except Exception as error:  # noqa: BLE001 - reported in the table, not hidden
        upstream = f"fails: {type(error).__name__}: {str(error)[:80]}"
    finally:
        apic.install()
    return {"eager": eager, "apic": replay, "upstream": upstream}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    quiet_warp()
    wp.init()
    rows = []
    for name, make in scenes():
        make()()  # compile the modules before anything is timed
        rows.append((name, measure(make, args.steps, args.repeats)))
    print(f"warp-lang {wp.config.version}, {platform.processor() or platform.machine()}, "
          f"{args.steps} steps x best of {args.repeats}\n")
    print("| scene | eager (us/step) | apic replay (us/step) | upstream CPU replay (us/step) "
          "| eager / apic | upstream / apic |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows:
        up = r["upstream"]
        up_text = f"{up * 1e6:,.1f}" if isinstance(up, float) else up
        ratio = f"{up / r['apic']:.2f}x" if isinstance(up, float) else "-"
        print(f"| {name} | {r['eager'] * 1e6:,.1f} | {r['apic'] * 1e6:,.1f} | {up_text} | "
              f"{r['eager'] / r['apic']:.1f}x | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
