"""Cross-version round trip, one half per process: save under one warp-lang, replay under another.

    python tests/cross_version.py save DIR    capture persist_kernels' Sim, save DIR/sim.wrp, and
                                              write the eager results of ITERS steps to DIR/expected_*.npy
    python tests/cross_version.py check DIR   (any other warp-lang, a fresh process that never imports
                                              the kernels) load DIR/sim.wrp, replay ITERS times with
                                              wp.capture_launch and through `python -m apic replay`,
                                              and compare every output with the eager results, bit for bit

Exit status 0 on success; ``check`` prints one line saying which versions it compared.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import warp as wp

if hasattr(wp, "LOG_WARNING"):
    wp.config.log_level = wp.LOG_WARNING
wp.config.quiet = True

import apic  # noqa: E402

ITERS = 3
OUTPUTS = ("x", "v", "x_prev", "energy", "grid", "column", "acc", "sq", "w_adj")


def save(folder: str) -> None:
    import persist_kernels as pk

    os.makedirs(folder, exist_ok=True)
    sim = pk.Sim(11)
    wp.capture_save(pk.capture(sim), os.path.join(folder, "sim"), inputs=sim.inputs(), outputs=sim.outputs())
    eager = pk.Sim(11)
    for _ in range(ITERS):
        eager.step()
    for name in OUTPUTS:
        np.save(os.path.join(folder, f"expected_{name}.npy"), eager.numpy(name))


def check(folder: str) -> None:
    path = os.path.join(folder, "sim")
    graph = wp.capture_load(path)
    for _ in range(ITERS):
        wp.capture_launch(graph)
    failures = []
    for name in OUTPUTS:
        expected = np.load(os.path.join(folder, f"expected_{name}.npy"))
        got = np.ascontiguousarray(graph.param_numpy(name))
        if got.shape != expected.shape or not np.array_equal(got.view(np.uint8), expected.view(np.uint8)):
            failures.append(f"{name} (capture_load)")
    args = [sys.executable, "-m", "apic", "replay", path + ".wrp", "--iters", str(ITERS)]
    for name in OUTPUTS:
        args += ["--output", f"{name}={os.path.join(folder, 'cli_' + name + '.npy')}"]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        failures.append(f"python -m apic replay: {done.stderr.strip()}")
    else:
        for name in OUTPUTS:
            expected = np.load(os.path.join(folder, f"expected_{name}.npy"))
            got = np.load(os.path.join(folder, f"cli_{name}.npy"))
            if got.shape != expected.shape or not np.array_equal(got.view(np.uint8), expected.view(np.uint8)):
                failures.append(f"{name} (CLI)")
    if "persist_kernels" in sys.modules:
        failures.append("the checking process imported the kernels' module")
    from apic.format import reader

    with open(path + ".wrp", "rb") as f:
        saved_by = reader.read(f.read()).writer["warp"]
    if failures:
        sys.exit(f"cross-version replay (saved with warp-lang {saved_by}, replayed with {wp.config.version}) "
                 f"differs from eager: {', '.join(failures)}")
    print(f"ok: saved with warp-lang {saved_by}, replayed with warp-lang {wp.config.version} "
          f"(apic {apic.__version__}): {len(OUTPUTS)} outputs equal the eager run bit for bit")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "check"):
        sys.exit(__doc__)
    (save if sys.argv[1] == "save" else check)(sys.argv[2])
