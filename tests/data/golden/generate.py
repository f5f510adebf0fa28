"""Write the golden files: one small saved graph per format version, with the eager results it must give.

    python tests/data/golden/generate.py          (from the repository root, with apic importable)

writes ``v<format>-warp<version>/`` beside this script for the running warp-lang: ``graph.wrp`` with its
``graph_modules/``, and ``expected.npz``, the eager results of ``REPLAYS`` steps of the same program
(the oracle), by output binding name. ``tests/format/test_golden.py`` loads every folder with the current apic
under the running warp-lang and checks the replays bit for bit. Run it once per warp-lang a release
supports, when a format version is added; never rewrite a folder that is checked in.

* format 1: ``capture_while`` (a countdown), ``capture_if``/else and plain launches; no native handles.
* format 2: a ``wp.Mesh`` whose points a kernel moves, refit inside the capture, then queried.
* format 3: named scalar parameters (a float32 ``dt`` in two kernels, a ``vec3`` ``g`` in a ``capture_while``
  body), captured with one value, set to ``SAVED`` on the live graph before the save; ``set.json`` holds
  other values (``SET``) and ``expected_set.npz`` the eager results with them, which a load must give
  after ``set_param``.

    python tests/data/golden/generate.py 3        (only format 3: folders already checked in are never rewritten)

With ``--cpu-target LEVEL`` (an x86-64 level, ``capture_save(cpu_target=LEVEL)``) the objects are compiled for
that level instead of the host CPU, into ``v<format>-warp<version>-<LEVEL>/``: files that load without their
source on any CPU with the level's features (the folders without a level hold objects for the CPU that wrote
them, which a smaller CPU loads only by compiling their source, and only under the same warp-lang).

    python tests/data/golden/generate.py --cpu-target x86-64-v2
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import warp as wp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
wp.config.quiet = True

import apic  # noqa: E402
from apic.format import schema  # noqa: E402

import golden_mesh  # noqa: E402

REPLAYS = 3
CPU = "cpu"


@wp.kernel
def add(x: wp.array(dtype=float), amount: float):
    i = wp.tid()
    x[i] = x[i] + amount


@wp.kernel
def scale(x: wp.array(dtype=float), factor: float):
    i = wp.tid()
    x[i] = x[i] * factor


@wp.kernel
def reload(counter: wp.array(dtype=wp.int32), steps: wp.array(dtype=wp.int32)):
    counter[0] = steps[0]


@wp.kernel
def decrement(counter: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] - 1


def flow_state() -> dict:
    return {"x": wp.array(np.linspace(-1.0, 1.0, 8, dtype=np.float32), dtype=float, device=CPU),
            "counter": wp.zeros(1, dtype=wp.int32, device=CPU),
            "steps": wp.array(np.array([3], dtype=np.int32), dtype=wp.int32, device=CPU),
            "flag": wp.array(np.array([1], dtype=np.int32), dtype=wp.int32, device=CPU)}


def flow_step(s: dict) -> None:
    """x += 0.25 three times (a while loop), then x *= 1.5 if flag else x -= 1, then x += 0.125."""
    wp.launch(reload, dim=1, inputs=[s["counter"], s["steps"]], device=CPU)

    def body():
        wp.launch(add, dim=8, inputs=[s["x"], 0.25], device=CPU)
        wp.launch(decrement, dim=1, inputs=[s["counter"]], device=CPU)

    wp.capture_while(s["counter"], body)
    wp.capture_if(s["flag"], on_true=lambda: wp.launch(scale, dim=8, inputs=[s["x"], 1.5], device=CPU),
                  on_false=lambda: wp.launch(add, dim=8, inputs=[s["x"], -1.0], device=CPU))
    wp.launch(add, dim=8, inputs=[s["x"], 0.125], device=CPU)


@wp.kernel
def push(v: wp.array(dtype=wp.vec3), x: wp.array(dtype=float), g: wp.vec3, dt: float):
    i = wp.tid()
    v[i] = v[i] + g * dt
    x[i] = x[i] + v[i][1] * dt


# format 3: the values the capture sees, those saved (set on the live graph), those a load sets
CAPTURED = {"dt": 0.5, "g": (1.0, 2.0, 3.0)}
SAVED = {"dt": 0.125, "g": (0.0, -9.8, 0.0)}
SET = {"dt": 1.0 / 3.0, "g": (0.5, -1.5, 2.0)}
PARAMS = {"dt": apic.param("dt", wp.float32, CAPTURED["dt"]), "g": apic.param("g", wp.vec3, CAPTURED["g"])}


def params_state() -> dict:
    return {"x": wp.array(np.linspace(-1.0, 1.0, 8, dtype=np.float32), dtype=float, device=CPU),
            "v": wp.zeros(8, dtype=wp.vec3, device=CPU),
            "counter": wp.zeros(1, dtype=wp.int32, device=CPU),
            "steps": wp.array(np.array([2], dtype=np.int32), dtype=wp.int32, device=CPU)}


def params_step(s: dict) -> None:
    """v += g dt, x += v.y dt twice (a while loop), then x *= dt."""
    wp.launch(reload, dim=1, inputs=[s["counter"], s["steps"]], device=CPU)

    def body():
        wp.launch(push, dim=8, inputs=[s["v"], s["x"], PARAMS["g"], PARAMS["dt"]], device=CPU)
        wp.launch(decrement, dim=1, inputs=[s["counter"]], device=CPU)

    wp.capture_while(s["counter"], body)
    wp.launch(scale, dim=8, inputs=[s["x"], PARAMS["dt"]], device=CPU)


def mesh_state() -> dict:
    points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], dtype=np.float32), dtype=wp.vec3,
                      device=CPU)
    indices = wp.array(np.array([0, 1, 2, 1, 3, 2], dtype=np.int32), dtype=wp.int32, device=CPU)
    queries = np.array([[0.2, 0.2, 1.0], [0.9, 0.8, -2.0], [0.5, 0.1, 0.3]], dtype=np.float32)
    return {"points": points, "mesh": wp.Mesh(points=points, indices=indices),
            "queries": wp.array(queries, dtype=wp.vec3, device=CPU), "out": wp.zeros(3, dtype=float, device=CPU)}


def mesh_step(s: dict) -> None:
    wp.launch(golden_mesh.lift, dim=4, inputs=[s["points"], 0.25], device=CPU)
    s["mesh"].refit()
    wp.launch(golden_mesh.closest, dim=3, inputs=[s["mesh"].id, s["queries"], s["out"]], device=CPU)


# format version -> (fresh state, one step, inputs, outputs)
PROGRAMS = {
    schema.BASE_VERSION: (flow_state, flow_step, ("steps", "flag"), ("x", "counter")),
    schema.HANDLES_VERSION: (mesh_state, mesh_step, ("queries",), ("points", "out")),
    schema.PARAMS_VERSION: (params_state, params_step, ("steps",), ("x", "v")),
}


def _eager(make, step, values: dict | None = None) -> dict:
    """``REPLAYS`` eager steps from a fresh state, the named parameters holding ``values``."""
    for name, value in (values or {}).items():
        PARAMS[name].value = value
    state = make()
    for _ in range(REPLAYS):
        step(state)
    return state


def write(version: int, folder: str, cpu_target: str | None = None) -> None:
    """Capture, save and run eagerly the program of format ``version`` into ``folder``."""
    make, step, inputs, outputs = PROGRAMS[version]
    params = version == schema.PARAMS_VERSION
    eager = _eager(make, step, SAVED if params else None)
    for name, value in CAPTURED.items():
        PARAMS[name].value = value
    captured = make()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        step(captured)
    if params:  # the file must hold the values set on the live graph, not those captured
        for name, value in SAVED.items():
            capture.graph.set_param(name, value)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "graph.wrp")
    # source_fallback: a golden file must replay on any CPU of its kind, and a saved object runs only on
    # a CPU with the saving host's instruction-set features; the kept source is compiled where it cannot
    wp.capture_save(capture.graph, path, inputs={n: captured[n] for n in inputs},
                    outputs={n: captured[n] for n in outputs}, source_fallback=True, cpu_target=cpu_target)
    with open(path, "rb") as f:
        written = schema.HEADER.unpack(f.read(schema.HEADER.size))[1]
    if written != version:
        raise SystemExit(f"format {version}: the program was written as format {written}")
    np.savez(os.path.join(folder, "expected.npz"), **{n: eager[n].numpy() for n in outputs})
    if params:
        with open(os.path.join(folder, "set.json"), "w") as f:
            json.dump(SET, f)
        again = _eager(make, step, SET)
        np.savez(os.path.join(folder, "expected_set.npz"), **{n: again[n].numpy() for n in outputs})


def main(argv=None) -> int:
    """Write the folders of the format versions named on the command line (default: all), never over one."""
    args = list(sys.argv[1:] if argv is None else argv)
    cpu_target = None
    if "--cpu-target" in args:
        at = args.index("--cpu-target")
        cpu_target = args[at + 1]
        del args[at : at + 2]
    versions = [int(v) for v in args] or list(PROGRAMS)
    wp.init()
    for version in versions:
        folder = os.path.join(HERE, f"v{version}-warp{wp.config.version}" + (f"-{cpu_target}" if cpu_target else ""))
        if os.path.exists(folder):
            raise SystemExit(f"{os.path.relpath(folder)} exists: a golden folder is never rewritten")
        write(version, folder, cpu_target)
        print(f"wrote {os.path.relpath(folder)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
