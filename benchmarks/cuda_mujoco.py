"""A mujoco-warp step on a GPU: Warp's own replays and apic's, side by side on one card, in one run.

    python -m benchmarks.cuda_mujoco [--worlds 64] [--replays 20] [--rounds 5] [--json PATH]

The scene is the client tests' (``tests/clients/test_mujoco_warp.py``: contacts, a constraint solve) with
``opt.graph_conditional = False`` (fixed solver iterations: an ``apic=True`` capture cannot hold conditional
nodes). Each method steps its own Data from the same start, the same number of times:

* ``warp graph``: Warp's own CUDA graph of one step, replayed with Warp's ``wp.capture_launch``: the floor;
* ``warp APIC loaded``: Warp's native APIC (1.13+) with apic's shims off: saved and loaded by Warp;
* ``apic loaded, graph`` / ``apic loaded, launch``: apic's saved step loaded, replayed as one CUDA graph or one
  ``cuLaunchKernel`` per node.

Afterwards every method's ``qpos`` is compared with the floor's: "bit for bit", or the largest difference
(float atomics on a GPU need not add in the same order twice). Without a GPU or mujoco-warp it says so and exits 3.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

from benchmarks.cuda_replay import Method, gpu_reason, summarise, time_rounds, write_json

NO_GPU_EXIT = 3
SCENE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "clients",
                          "test_mujoco_warp.py")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda_mujoco", description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=64, help="worlds in the batch (default 64)")
    parser.add_argument("--replays", type=int, default=20, help="replays per timed batch (default 20)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return parser.parse_args(argv)


def scene_xml() -> str:
    """The client tests' scene (read from their file: this benchmark must not import the test suite)."""
    import ast

    with open(SCENE_FILE) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "SCENE":
            return ast.literal_eval(node.value)
    raise RuntimeError(f"no SCENE in {SCENE_FILE}")


def build(args):
    """The model and a ``fresh()`` that makes equal Data (put_data's uninitialised arrays zeroed)."""
    import mujoco
    import mujoco_warp as mjw
    import warp as wp

    mjm = mujoco.MjModel.from_xml_string(scene_xml())
    mjm.opt.iterations, mjm.opt.ls_iterations = 8, 8
    m = mjw.put_model(mjm)
    m.opt.graph_conditional = False
    mjd = mujoco.MjData(mjm)
    mjd.qvel[:3] = (0.4, -0.2, 0.0)

    def fresh():
        data = mjw.put_data(mjm, mjd, nworld=args.worlds, nconmax=16 * args.worlds, njmax=32 * args.worlds)
        for name in ("contact", "efc"):
            for arr in vars(getattr(data, name, None) or object()).values():
                if isinstance(arr, wp.array):
                    arr.zero_()
        return data

    mjw.step(m, fresh())  # loads every module outside any capture
    wp.synchronize_device(args.device)
    return m, fresh


def methods(m, fresh, device: str, folder: str) -> tuple[list[Method], dict, dict]:
    """The four methods, each with its Data's ``qpos`` reader; errors by method name."""
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
        except Exception as error:  # noqa: BLE001  (reported; the other methods still run)
            errors["warp APIC loaded"] = f"{type(error).__name__}: {error}"
    finally:
        apic.install()
    data = fresh()
    with wp.ScopedCapture(device=device, apic=True) as cap:
        mjw.step(m, data)
    stem = os.path.join(folder, "apic")
    wp.capture_save(cap.graph, stem, inputs={"qpos": data.qpos, "qvel": data.qvel})
    for mode in ("graph", "launch"):
        loaded = wp.capture_load(stem, device=device)
        loaded.mode = mode
        found.append(Method(f"apic loaded, {mode}", lambda g=loaded: wp.capture_launch(g), lambda: 0))
        qpos[f"apic loaded, {mode}"] = lambda g=loaded, like=data.qpos: qpos_of_graph(g, like)
    return found, errors, qpos


def run(args) -> dict:
    import warp as wp

    import apic

    wp.init()
    dev = wp.get_device(args.device)
    results = {"benchmark": "cuda_mujoco", "status": "ok", "device": dev.name, "arch": dev.arch,
               "warp": wp.config.version, "apic": apic.__version__, "worlds": args.worlds,
               "replays": args.replays, "rounds": args.rounds, "methods": {}}
    with wp.ScopedDevice(args.device), tempfile.TemporaryDirectory() as folder:
        m, fresh = build(args)
        found, errors, qpos = methods(m, fresh, args.device, folder)
        time_rounds(found, args.replays, args.rounds, lambda: wp.synchronize_device(args.device))
        floor = qpos["warp graph"]()
        for method in found:
            got = qpos[method.name]()
            same = np.array_equal(got.view(np.uint8), floor.view(np.uint8))
            results["methods"][method.name] = {
                "total": summarise(method.total, 1), "issue": summarise(method.issue, 1), "replays": method.replays,
                "qpos_vs_warp_graph": "bit for bit" if same else f"max abs diff {float(np.abs(got - floor).max()):.3g}"}
        for name, error in errors.items():
            results["methods"][name] = {"error": error}
    return results


def table(results: dict) -> str:
    lines = [f"mujoco-warp step, {results['worlds']} worlds, on {results['device']} (warp-lang {results['warp']}; "
             f"{results['rounds']} rounds of {results['replays']} replays)", "",
             "| method | us per step (min / median) | issue us per step (median) | qpos vs warp graph |",
             "|---|---|---|---|"]
    for name, m in results["methods"].items():
        if m.get("error"):
            lines.append(f"| {name} | not run: {m['error']} | | |")
            continue
        total = m["total"]["per_replay_us"]
        lines.append(f"| {name} | {total['min']:.1f} / {total['median']:.1f} | "
                     f"{m['issue']['per_replay_us']['median']:.1f} | {m['qpos_vs_warp_graph']} |")
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
