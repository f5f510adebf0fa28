"""A mujoco-warp step on a GPU: Warp's own replays and apic's, side by side on one card, in one run.

    python -m benchmarks.cuda_mujoco [--worlds 64,1024] [--conditional both] [--replays 20] [--rounds 5] [--json PATH]

The scene is the client tests' (``tests/clients/test_mujoco_warp.py``: contacts, a constraint solve), run at each
batch size of ``--worlds`` with each setting of mujoco-warp's ``opt.graph_conditional`` (``--conditional``:
``on`` is its GPU default, the solver exiting early through a ``capture_while`` that becomes a CUDA conditional
node; ``off``, fixed solver iterations, no conditional nodes; ``both``, the default). For each, each method
steps its own Data from the same start, the same number of times:

* ``warp graph``: Warp's own CUDA graph of one step, replayed with Warp's ``wp.capture_launch``: the floor;
* ``warp APIC loaded``: Warp's native APIC (1.13+) with apic's shims off: saved and loaded by Warp;
* ``apic loaded, graph`` / ``apic loaded, launch``: apic's saved step loaded, replayed as one CUDA graph or one
  ``cuLaunchKernel`` per node (with conditional nodes, each condition read on the host: a synchronisation per
  solver iteration).

Afterwards every method's ``qpos`` is compared with the floor's: "bit for bit", or the largest difference
(float atomics on a GPU need not add in the same order twice). Without a GPU or mujoco-warp it says so and exits 3.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks.cuda_methods import Method
from benchmarks.cuda_replay import gpu_reason, summarise, time_rounds, write_json

_STARTED = time.monotonic()


def progress(message: str) -> None:
    """One line on stderr with the seconds since the start: a run cut short by a time limit shows how far it got."""
    print(f"[{time.monotonic() - _STARTED:6.1f} s] {message}", file=sys.stderr, flush=True)

NO_GPU_EXIT = 3
# put_data's sizes are per world (the client tests' scene: at most a few contacts per world). Until 2026-11-28
# they were multiplied by the number of worlds: a 1,024-world Data of several GB that the runs could not save.
CONTACTS_PER_WORLD, CONSTRAINTS_PER_WORLD = 32, 64
SCENE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "clients",
                          "test_mujoco_warp.py")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda_mujoco", description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=_sizes, default=(64, 1024),
                        help="batch sizes, comma-separated (default 64,1024)")
    parser.add_argument("--conditional", choices=("both", "on", "off"), default="both",
                        help="opt.graph_conditional settings to run (default both)")
    parser.add_argument("--replays", type=int, default=20, help="replays per timed batch (default 20)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return parser.parse_args(argv)


def _sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(int(part) for part in text.split(",") if part.strip())
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected positive batch sizes, got {text!r}")
    return sizes


def settings(args) -> list[tuple[int, bool]]:
    """``(worlds, graph_conditional)`` of each run, in order: every size with the setting(s) asked for."""
    flags = {"both": (True, False), "on": (True,), "off": (False,)}[args.conditional]
    return [(worlds, flag) for worlds in args.worlds for flag in flags]


def scene_xml() -> str:
    """The client tests' scene (read from their file: this benchmark must not import the test suite)."""
    import ast

    with open(SCENE_FILE) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "SCENE":
            return ast.literal_eval(node.value)
    raise RuntimeError(f"no SCENE in {SCENE_FILE}")


def build(worlds: int, conditional: bool, device: str):
    """The model and a ``fresh()`` that makes equal Data (put_data's uninitialised arrays zeroed)."""
    import mujoco
    import mujoco_warp as mjw
    import warp as wp

    mjm = mujoco.MjModel.from_xml_string(scene_xml())
    mjm.opt.iterations, mjm.opt.ls_iterations = 8, 8
    m = mjw.put_model(mjm)
    m.opt.graph_conditional = conditional
    mjd = mujoco.MjData(mjm)
    mjd.qvel[:3] = (0.4, -0.2, 0.0)

    def fresh():
        data = mjw.put_data(mjm, mjd, nworld=worlds, nconmax=CONTACTS_PER_WORLD, njmax=CONSTRAINTS_PER_WORLD)
        for name in ("contact", "efc"):
            for arr in vars(getattr(data, name, None) or object()).values():
                if isinstance(arr, wp.array):
                    arr.zero_()
        return data

    mjw.step(m, fresh())  # loads every module outside any capture
    wp.synchronize_device(device)
    return m, fresh


def methods(m, fresh, device: str, folder: str) -> tuple[list[Method], dict, dict]:
    """The four methods, each with its Data's ``qpos`` reader; errors by method name. Warp's native APIC comes
    last: at 1,024 worlds a run stalled after Warp's own capture (twice, on an H200), and apic's figures should
    not wait on it."""
    import mujoco_warp as mjw
    import warp as wp

    import apic

    found, errors, qpos = [], {}, {}

    def qpos_of_graph(graph, like):
        out = wp.empty_like(like)
        graph.get_param("qpos", out)
        return out.numpy()

    apic.uninstall()
    try:
        warp_launch = wp.capture_launch
        data = fresh()
        with wp.ScopedCapture(device=device) as cap:
            mjw.step(m, data)
        graph = cap.graph
        found.append(Method("warp graph", lambda: warp_launch(graph), lambda: 0))
        qpos["warp graph"] = lambda d=data: d.qpos.numpy()
        progress("captured: warp graph")
    finally:
        apic.install()
    data = fresh()
    with wp.ScopedCapture(device=device, apic=True) as cap:
        mjw.step(m, data)
    stem = os.path.join(folder, "apic")
    wp.capture_save(cap.graph, stem, inputs={"qpos": data.qpos, "qvel": data.qvel})
    progress("captured and saved: apic")
    for mode in ("graph", "launch"):
        loaded = wp.capture_load(stem, device=device)
        loaded.mode = mode
        found.append(Method(f"apic loaded, {mode}", lambda g=loaded: wp.capture_launch(g), lambda: 0))
        qpos[f"apic loaded, {mode}"] = lambda g=loaded, like=data.qpos: qpos_of_graph(g, like)
    progress("loaded: apic")
    apic.uninstall()
    try:
        if not hasattr(wp, "capture_load"):
            raise RuntimeError(f"warp-lang {wp.config.version} has no native APIC (1.13+)")
        data = fresh()
        with wp.ScopedCapture(device=device, apic=True) as cap:
            mjw.step(m, data)
        stem = os.path.join(folder, "warp_apic")
        wp.capture_save(cap.graph, stem, inputs={"qpos": data.qpos, "qvel": data.qvel})
        native = wp.capture_load(stem, device=device)
        found.append(Method("warp APIC loaded", lambda: warp_launch(native), lambda: 0))
        qpos["warp APIC loaded"] = lambda g=native, like=data.qpos: qpos_of_graph(g, like)
        progress("captured, saved and loaded: warp APIC")
    except Exception as error:  # noqa: BLE001  (reported; the other methods still run)
        errors["warp APIC loaded"] = f"{type(error).__name__}: {error}"
    finally:
        apic.install()
    return found, errors, qpos


def run(args) -> dict:
    import warp as wp

    import apic

    wp.init()
    dev = wp.get_device(args.device)
    results = {"benchmark": "cuda_mujoco", "status": "ok", "device": dev.name, "arch": dev.arch,
               "warp": wp.config.version, "apic": apic.__version__, "replays": args.replays, "rounds": args.rounds,
               "runs": []}
    for worlds, conditional in settings(args):
        results["runs"].append(run_one(args, worlds, conditional))
        write_json(args.json, results)  # what ran so far, should a later run outlast the caller's time limit
    return results


def run_one(args, worlds: int, conditional: bool) -> dict:
    """Every method at one batch size and one graph_conditional setting."""
    import warp as wp

    run = {"worlds": worlds, "graph_conditional": conditional, "methods": {}}
    progress(f"{worlds} worlds, graph_conditional {conditional}: building")
    with wp.ScopedDevice(args.device), tempfile.TemporaryDirectory() as folder:
        try:
            m, fresh = build(worlds, conditional, args.device)
            progress("built (every module loaded)")
            found, errors, qpos = methods(m, fresh, args.device, folder)
        except Exception as error:  # noqa: BLE001  (reported; the other runs still go)
            run["error"] = f"{type(error).__name__}: {error}"
            return run
        time_rounds(found, args.replays, args.rounds, lambda: wp.synchronize_device(args.device))
        progress("timed")
        floor = qpos["warp graph"]()
        for method in found:
            got = qpos[method.name]()
            same = np.array_equal(got.view(np.uint8), floor.view(np.uint8))
            run["methods"][method.name] = {
                "total": summarise(method.total, 1), "issue": summarise(method.issue, 1), "replays": method.replays,
                "qpos_vs_warp_graph": "bit for bit" if same else f"max abs diff {float(np.abs(got - floor).max()):.3g}"}
        for name, error in errors.items():
            run["methods"][name] = {"error": error}
    return run


def table(results: dict) -> str:
    """One table per run, then each method's step with conditional nodes against without, per batch size."""
    lines = [f"mujoco-warp step on {results['device']} (warp-lang {results['warp']}; {results['rounds']} rounds of "
             f"{results['replays']} replays)"]
    medians: dict = {}
    for run in results["runs"]:
        setting = "graph_conditional" if run["graph_conditional"] else "unrolled solver"
        lines += ["", f"{run['worlds']} worlds, {setting}", ""]
        if run.get("error"):
            lines.append(f"not run: {run['error']}")
            continue
        lines += ["| method | us per step (min / median) | issue us per step (median) | qpos vs warp graph |",
                  "|---|---|---|---|"]
        for name, m in run["methods"].items():
            if m.get("error"):
                lines.append(f"| {name} | not run: {m['error']} | | |")
                continue
            total = m["total"]["per_replay_us"]
            medians[(name, run["worlds"], run["graph_conditional"])] = total["median"]
            lines.append(f"| {name} | {total['min']:.1f} / {total['median']:.1f} | "
                         f"{m['issue']['per_replay_us']['median']:.1f} | {m['qpos_vs_warp_graph']} |")
    pairs = sorted({(name, worlds) for name, worlds, flag in medians if (name, worlds, not flag) in medians},
                   key=lambda p: (p[1], p[0]))
    if pairs:
        lines += ["", "| method | worlds | us per step with conditional nodes | without | ratio |",
                  "|---|---|---|---|---|"]
        for name, worlds in pairs:
            on, off = medians[(name, worlds, True)], medians[(name, worlds, False)]
            lines.append(f"| {name} | {worlds} | {on:.1f} | {off:.1f} | {on / off:.2f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    from apic._compat import quiet_warp

    quiet_warp()
    reason = gpu_reason(args.device)
    try:
        import mujoco_warp  # noqa: F401
    except ImportError as error:
        reason = reason or f"mujoco-warp is not importable: {error}"
    if reason:
        print(f"cuda_mujoco needs a GPU and mujoco-warp: {reason}")
        write_json(args.json, {"benchmark": "cuda_mujoco", "status": "no-gpu", "reason": reason})
        return NO_GPU_EXIT
    results = run(args)
    write_json(args.json, results)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
