"""The checks of the emulated AArch64 tier (scripts/aarch64_tier.sh), one process per step, so that "load in a
fresh process" is a real one; each step exits non-zero with the reason when a check fails.

    python tests/aarch64/tier.py save DIR         (AArch64) eager steps of tier_kernels (the oracle) into
                                                  DIR/expected.npz; capture; the live replay equal to eager;
                                                  DIR/graph.wrp saved with its source, DIR/objects.wrp without
    python tests/aarch64/tier.py load DIR [X86]   (AArch64, a fresh process) the probe names the CPU; DIR's
                                                  files loaded and replayed equal to eager; a threaded replay
                                                  (threads=2, split) equal to the serial one; the outputs of
                                                  `python -m apic replay` (DIR/cli_*.npy) equal to eager; with X86 (a
                                                  folder `save` wrote on x86-64): its graph.wrp compiled here
                                                  from its source and equal to this machine's eager run, its
                                                  objects.wrp refused, naming the family it needs
    python tests/aarch64/tier.py save-host DIR    (x86-64) what `save` writes, on this family, for the above
    python tests/aarch64/tier.py load-host DIR    (x86-64) DIR (written by `save`): graph.wrp compiled here and
                                                  equal to this machine's eager run, objects.wrp refused
    python tests/aarch64/tier.py golden [FOLDER...] (AArch64) the x86-64 golden files (tests/data/golden): those of
                                                  this warp-lang compiled here from their source and equal to
                                                  this machine's eager run of their program, those of another
                                                  warp-lang refused (golden_across.py; default GOLDEN_DEFAULT)

Not a pytest file: the ordinary suite runs ``tests/aarch64/test_aarch64_golden.py`` (the x86-64 half); these
steps run only where scripts/aarch64_tier.sh starts them.
"""

from __future__ import annotations

import json
import os
import platform
import sys

import numpy as np
import warp as wp

if os.environ.get("APIC_AARCH64_KERNELS"):  # the tier keeps Warp's kernel cache between runs
    wp.config.kernel_cache_dir = os.environ["APIC_AARCH64_KERNELS"]

import apic  # noqa: E402
from apic import _compat  # noqa: E402

_compat.quiet_warp()
from apic.targets import cpu as cpu_facts  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: host_cpus
import host_cpus  # noqa: E402


def fail(message: str):
    sys.exit(f"aarch64 tier: {message}")


def check_same(what: str, got: dict, expected: dict) -> None:
    import tier_kernels as tk

    differ = tk.same_bits(got, expected)
    if differ:
        fail(f"{what}: {', '.join(differ)} differ from the expected run")


LEVEL, BELOW = "armv8.2-a", "armv8-a"  # a level the emulated CPU has, and one without its atomics and CRC


def save(folder: str, argv_level: bool = True) -> dict:
    import tier_kernels as tk

    os.makedirs(folder, exist_ok=True)
    expected = tk.eager()
    np.savez(os.path.join(folder, "expected.npz"), **expected)
    graph, s = tk.capture()
    check_same("the live replay", tk.replayed(graph, live=s), expected)
    graph, s = tk.capture()
    tk.save(graph, s, os.path.join(folder, "graph.wrp"), source_fallback=True)
    tk.save(graph, s, os.path.join(folder, "objects.wrp"))
    if argv_level:  # objects for an AArch64 level: Warp's clang given target("arch=<level>") on every function
        tk.save(graph, s, os.path.join(folder, "level.wrp"), cpu_target=LEVEL)
    return {"saved": folder, "machine": platform.machine()}


def _loaded(path: str):
    return wp.capture_load(path)


def load(folder: str, x86: str | None = None) -> dict:
    import tier_kernels as tk  # its helpers; the graphs come from the files, never from its kernels

    expected = dict(np.load(os.path.join(folder, "expected.npz")))
    host = _compat.native_target()
    family = cpu_facts.cpu_family(host["machine"])
    if family is None or family.NAME != "AArch64" or "neon" not in host["features"]:
        fail(f"the host probe names this CPU {host['cpu']} with {len(host['features'])} features")
    report = {"cpu": host["cpu"], "features": len(host["features"]),
              "levels": [lv for lv in family.CPU_LEVELS if family.CPU_LEVELS[lv] <= set(host["features"])]}
    for name in ("graph.wrp", "objects.wrp"):
        check_same(f"{name} loaded in a fresh process", tk.replayed(_loaded(os.path.join(folder, name))), expected)
    serial = tk.replayed(_loaded(os.path.join(folder, "graph.wrp")))
    threaded_graph = _loaded(os.path.join(folder, "graph.wrp"))
    threaded = tk.replayed(threaded_graph, threads=2)
    check_same("the threaded replay (threads=2)", threaded, serial)
    chunks = max(entry["chunks"] for entry in threaded_graph.parallel_report(2))
    if chunks < 2:
        fail(f"the threaded replay split no launch ({threaded_graph.parallel_report(2)})")
    report["threaded_chunks"] = chunks
    cli = {name: np.load(os.path.join(folder, f"cli_{name}.npy")) for name in tk.OUTPUTS}
    check_same("`python -m apic replay`", cli, expected)
    if os.path.exists(os.path.join(folder, "level.wrp")):
        check_same(f"the objects saved for {LEVEL}", tk.replayed(_loaded(os.path.join(folder, "level.wrp"))),
                   expected)
        host_target = _compat.host_target
        host_cpus.pretend(BELOW)  # a CPU of that level, as the load sees the host (the library has no hook)
        try:
            _loaded(os.path.join(folder, "level.wrp"))
        except apic.IncompatibleGraphError as error:
            if LEVEL not in str(error) or "lse" not in str(error):
                fail(f"objects for {LEVEL} refused on an {BELOW} CPU without naming the level: {error}")
            report["level refused"] = str(error)
        else:
            fail(f"objects for {LEVEL} loaded on an {BELOW} CPU")
        finally:
            _compat.host_target = host_target
    if x86:
        moved = _loaded(os.path.join(x86, "graph.wrp"))
        check_same("the x86-64 file, compiled here from its source", tk.replayed(moved), expected)
        try:
            _loaded(os.path.join(x86, "objects.wrp"))
        except apic.IncompatibleGraphError as error:
            if "x86-64" not in str(error) or "source_fallback=True" not in str(error):
                fail(f"the x86-64 objects were refused without naming the family and the way out: {error}")
            report["refused"] = str(error)
        else:
            fail("x86-64 objects loaded on AArch64")
    return report


def load_host(folder: str) -> dict:
    """On x86-64: AArch64's graph.wrp compiled here from its source and equal to this machine's eager run, its
    objects.wrp refused naming AArch64."""
    import tier_kernels as tk

    check_same("the AArch64 file, compiled here from its source", tk.replayed(_loaded(os.path.join(folder,
                                                                                                   "graph.wrp"))),
               tk.eager())
    try:
        _loaded(os.path.join(folder, "objects.wrp"))
    except apic.IncompatibleGraphError as error:
        if "AArch64" not in str(error) or "source_fallback=True" not in str(error):
            fail(f"the AArch64 objects were refused without naming the family and the way out: {error}")
    else:
        fail("AArch64 objects loaded on x86-64")
    return {"loaded on": platform.machine()}


# The golden folders `golden` checks by default, each costing a compile under the emulator (a minute or more on 2
# cores): of this warp-lang, format 3 (a loop, named parameters set after the load), compiled from its source and
# replayed; of another, format 1, refused once its source fails to compile under this warp-lang (Warp's generated
# C++ compiles only against the headers of the warp-lang that generated it: the refusal is the compile's).
GOLDEN_DEFAULT = ("v3-warp{version}", "v1-warp1.12.1")


def golden(folders: list[str]) -> dict:
    """The other family's golden files (tests/data/golden), as ``golden_across.check`` loads them."""
    import golden_across

    folders = folders or [name.format(version=wp.config.version) for name in GOLDEN_DEFAULT]
    report = {}
    for folder in folders:
        try:
            report[folder] = golden_across.check(folder)
        except AssertionError as error:
            fail(f"golden {error}")
    if "replayed" not in report.values():
        fail(f"golden: no folder of warp-lang {wp.config.version} was replayed ({report})")
    return report


def main(argv: list[str]) -> None:
    if argv[:1] == ["golden"]:
        print(json.dumps(golden(argv[1:])))
        return
    if len(argv) < 2 or argv[0] not in ("save", "load", "save-host", "load-host"):
        sys.exit(__doc__)
    if argv[0] == "load":
        report = load(argv[1], argv[2] if len(argv) > 2 else None)
    elif argv[0] == "load-host":
        report = load_host(argv[1])
    else:
        if (argv[0] == "save") != (platform.machine().lower() in ("aarch64", "arm64")):
            fail(f"`{argv[0]}` runs on {'AArch64' if argv[0] == 'save' else 'x86-64'}")
        report = save(argv[1], argv_level=argv[0] == "save")
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
