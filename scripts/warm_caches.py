"""Fill Warp's kernel cache and Numba's cache for one interpreter before a test run of it, so that the run reads
what it would otherwise compile. ``.ci/run`` starts it in the background (``nice``), while earlier steps leave a
core idle: warp-lang 1.12.x has no precompiled headers and spends about 3.5 s of CPU on every module it
compiles, which an empty cache made most of its step's time.

It imports every test file of TESTS_FOLDER (as ``tests/conftest.py`` puts them on the path: the kernels at their
module level register with Warp), loads every Warp module they defined on the CPU, as a launch would, and replays
one captured launch (Numba compiles apic's replay loops). It checks nothing: a file that fails to import is
skipped, as is a module that fails to build; the test run itself compiles whatever was not warmed, and reports
errors. It writes nothing but the caches, and prints one summary line.

usage: python scripts/warm_caches.py TESTS_FOLDER
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pathlib
import sys
import time


@contextlib.contextmanager
def _silenced():
    """Test files and Warp may print at import and build; this script's output is one line."""
    saved = os.dup(1), os.dup(2)
    with open(os.devnull, "w") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def main() -> int:
    tests = pathlib.Path(sys.argv[1]).resolve()
    start = time.perf_counter()
    folders = [tests] + sorted(p for p in tests.iterdir() if p.is_dir() and p.name not in ("data", "fuzz", "clients"))
    sys.path[:0] = [str(folder) for folder in folders]
    imported = failed_imports = built = failed_builds = 0
    with _silenced():
        import warp as wp

        wp.config.quiet = True
        import apic  # noqa: F401  (the shims, as the tests import it)

        wp.init()
        for folder in folders:
            for path in sorted(folder.glob("*.py")):
                if path.name == "conftest.py" or path.name.startswith("_"):
                    continue
                try:
                    importlib.import_module(path.stem)
                    imported += 1
                except BaseException:  # noqa: BLE001  (a file that needs pytest's fixtures, or skips: not ours)
                    failed_imports += 1
        from apic import _compat

        # the test files' own modules first: Warp's (warp.fem's many, imported whole) may not all be loaded by a test
        modules = sorted(_compat.wp_context.user_modules.values(), key=lambda m: m.name.startswith("warp."))
        for module in modules:
            try:
                wp.force_load(device="cpu", modules=[module])
                built += 1
            except BaseException:  # noqa: BLE001
                failed_builds += 1
        _replay_once(wp)
    print(f"warm_caches: {imported} test files imported ({failed_imports} not), {built} Warp modules loaded "
          f"({failed_builds} not), in {time.perf_counter() - start:.0f} s")
    return 0


def _replay_once(wp) -> None:
    """One captured launch replayed: Numba compiles (or loads) apic's replay loops into its cache."""
    import kernels

    counter = wp.zeros(1, dtype=wp.int64, device="cpu")
    with wp.ScopedCapture(device="cpu") as capture:
        wp.launch(kernels.tick, dim=1, inputs=[counter], device="cpu")
    wp.capture_launch(capture.graph)


if __name__ == "__main__":
    sys.exit(main())
