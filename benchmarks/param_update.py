"""What ``graph.set_param`` of a named scalar parameter costs, next to one replay of the same graph.

    python -m benchmarks.param_update [--rounds 9] [--calls 2000]

Graphs (each parameter ``apic.param``, captured once):

* ``demo chain``: the demo simulation step (``apic.demo.Chain``, 64 particles, 8 substeps, 49 ops)
  captured with its time step as ``apic.param("dt", wp.float32)``: the gravity and integrate launches of
  every substep receive it (repeated launches share one argument block: 2 slots);
* ``1,000 launches``: 1,000 launches of a small kernel over distinct arrays, each receiving one
  float32 parameter (1,000 slots to rewrite);
* ``vec3 gravity``: the same 1,000 launches receiving a ``wp.vec3`` parameter.

Each round times ``--calls`` calls of ``graph.set_param`` (alternating two values) and ``--calls``
replays (``graph.launch(1)``, as ``wp.capture_launch``), in alternating order; the report gives
min / median microseconds per call and the ratio of the medians. Re-capturing the graph, the only
way to change a scalar without a parameter, is timed once per round for scale.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import numpy as np
import warp as wp

wp.config.quiet = True

import apic  # noqa: E402
from apic.demo import Chain  # noqa: E402

N_LAUNCHES = 1000


@wp.kernel
def scale(x: wp.array(dtype=float), dt: float):
    i = wp.tid()
    x[i] = x[i] * dt


@wp.kernel
def fall(v: wp.array(dtype=wp.vec3), g: wp.vec3):
    i = wp.tid()
    v[i] = v[i] + g


class _ParamChain(Chain):
    """The demo chain with its time step a named parameter (received by the gravity and integrate launches)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.dt = apic.param("dt", wp.float32, self.dt)


def _graphs() -> dict:
    chain = _ParamChain(64, 8)
    with wp.ScopedCapture(device="cpu"):
        chain.step()
    xs = [wp.zeros(4, dtype=float, device="cpu") for _ in range(N_LAUNCHES)]
    vs = [wp.zeros(4, dtype=wp.vec3, device="cpu") for _ in range(N_LAUNCHES)]
    dt = apic.param("dt", wp.float32, 0.5)
    g = apic.param("g", wp.vec3, (0.0, -9.8, 0.0))

    def many():
        for x in xs:
            wp.launch(scale, dim=4, inputs=[x, dt], device="cpu")

    def gravity():
        for v in vs:
            wp.launch(fall, dim=4, inputs=[v, g], device="cpu")

    wp.launch(scale, dim=4, inputs=[xs[0], dt], device="cpu")  # compile outside any capture
    wp.launch(fall, dim=4, inputs=[vs[0], g], device="cpu")
    found = {"demo chain (49 ops, dt in 16 launches)": (chain.step, "dt", (0.01, 0.005))}
    found[f"{N_LAUNCHES:,} launches (float32 dt in each)"] = (many, "dt", (0.5, 0.25))
    found[f"{N_LAUNCHES:,} launches (vec3 g in each)"] = (gravity, "g", ((0.0, -9.8, 0.0), (0.0, -1.6, 0.0)))
    return found


def _capture(step):
    with wp.ScopedCapture(device="cpu") as capture:
        step()
    return capture.graph


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    wp.init()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.system()} {platform.machine()}; "
          f"Python {platform.python_version()}, warp-lang {wp.config.version}, NumPy {np.__version__}; "
          f"`python -m benchmarks.param_update --rounds {args.rounds} --calls {args.calls}`")
    print()
    print("| graph | slots | set_param us (min / median) | replay us (min / median) | set_param / replay "
          "(medians) | re-capture ms (median) |")
    print("|---|---|---|---|---|---|")
    for name, (step, param, values) in _graphs().items():
        graph = _capture(step)
        slots = len(graph.program.param_offsets[param])
        graph.launch(1)  # the jitted interpreter is loaded outside the timing
        setting, replaying, capturing = [], [], []
        for r in range(args.rounds):
            for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                start = time.perf_counter_ns()
                if which == 0:
                    for i in range(args.calls):
                        graph.set_param(param, values[i & 1])
                    setting.append((time.perf_counter_ns() - start) / args.calls / 1e3)
                else:
                    for _ in range(args.calls):
                        graph.launch(1)
                    replaying.append((time.perf_counter_ns() - start) / args.calls / 1e3)
            start = time.perf_counter_ns()
            _capture(step)
            capturing.append((time.perf_counter_ns() - start) / 1e6)
        sm, sd = min(setting), statistics.median(setting)
        rm, rd = min(replaying), statistics.median(replaying)
        print(f"| {name} | {slots} | {sm:.2f} / {sd:.2f} | {rm:.2f} / {rd:.2f} | {sd / rd:.2f} | "
              f"{statistics.median(capturing):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
