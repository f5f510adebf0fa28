"""``apic.uninstall()`` restores warp exactly; ``apic.install()`` puts apic back; apic is quiet.

Each test runs in a fresh interpreter so that installing and uninstalling never disturbs the
other tests (and the state before ``import apic`` can be observed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(TESTS_DIR)

PRELUDE = textwrap.dedent(
    """
    import ctypes, os, sys
    sys.path[:0] = [{repo!r}, {tests!r}]
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    if hasattr(wp, "LOG_WARNING"):
        wp.config.log_level = wp.LOG_WARNING
    wp.init()
    import kernels as K
    wp.launch(K.tick, dim=1, inputs=[wp.zeros(1, dtype=wp.int64, device="cpu")], device="cpu")  # load K
    """
).format(repo=REPO_DIR, tests=TESTS_DIR)


def _run(body: str, *python_args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    result = subprocess.run(
        [sys.executable, *python_args, "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO_DIR,
    )  # fmt: skip
    assert result.returncode == 0, f"subprocess failed:\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


SNAPSHOT = """
from warp._src import context as ctx, types as wtypes, utils as wutils

def owners():
    runtime = ctx.runtime
    found = [wp, ctx, wtypes, wutils, sys.modules["warp.utils"], ctx.Launch, ctx.Device, runtime.core,
             runtime.cpu_device]
    found += [v for v in vars(wtypes).values() if isinstance(v, type) and issubclass(v, object)
              and any(n in vars(v) for n in ("zero_", "fill_", "numpy", "list", "_init_new"))]
    return found

def snapshot():
    return {id(owner): (owner, dict(vars(owner))) for owner in owners()}

def differences(before, after):
    diffs = []
    for key, (owner, attrs) in before.items():
        now = after[key][1]
        name = getattr(owner, "__name__", type(owner).__name__)
        for attr in sorted(set(attrs) | set(now)):
            if attrs.get(attr, "<absent>") is not now.get(attr, "<absent>"):
                diffs.append(f"{name}.{attr}")
    return diffs

def capture_and_replay():
    a = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    b = wp.zeros(8, dtype=wp.float32, device="cpu")
    with wp.ScopedCapture(device="cpu") as capture:
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=8, inputs=[a, b], device="cpu")
        wp.copy(a, b)
        b.fill_(1.0)
        b[::2].zero_()
    assert isinstance(capture.graph, apic.Graph), capture.graph
    assert b.numpy().tolist() == [0.0] * 8, "the capture ran the work"
    wp.capture_launch(capture.graph)
    assert b.numpy().tolist() == [0.0, 1.0] * 4, b.numpy()
    assert a.numpy().tolist() == list(range(8)), a.numpy()
"""


def test_uninstall_restores_warp_exactly_and_install_reinstalls():
    result = _run(
        SNAPSHOT
        + """
before = snapshot()

def named_attributes():
    # the patch points that matter most, by name (a readable subset of the snapshot)
    core, cpu = ctx.runtime.core, ctx.runtime.cpu_device
    return {
        "wp.launch": wp.launch, "ctx.launch": ctx.launch, "wp.copy": wp.copy, "ctx.copy": ctx.copy,
        "array.zero_": vars(wp.array)["zero_"], "array.fill_": vars(wp.array)["fill_"],
        "array._init_new": vars(wp.array)["_init_new"], "array.numpy": vars(wp.array)["numpy"],
        "Launch.launch": vars(ctx.Launch)["launch"], "wp.capture_begin": wp.capture_begin,
        "wp.capture_end": wp.capture_end, "wp.capture_launch": wp.capture_launch,
        "wp.ScopedCapture": wp.ScopedCapture, "ctx.invoke": ctx.invoke,
        "core.wp_memcpy_h2h": core.wp_memcpy_h2h, "core.wp_memset_host": core.wp_memset_host,
        "core.wp_array_scan_float_host": core.wp_array_scan_float_host,
        "cpu.memset": cpu.memset, "cpu.memtile": cpu.memtile,
    }

originals = named_attributes()
PYTHON_LEVEL = [n for n in originals if not n.startswith(("core.", "cpu.", "ctx.invoke"))]

import apic
assert apic.is_installed()
current = named_attributes()
unpatched = [name for name in PYTHON_LEVEL if current[name] is originals[name]]
assert not unpatched, f"import apic did not patch {unpatched}"
capture_and_replay()
assert ctx.runtime.core.wp_memcpy_h2h is not originals["core.wp_memcpy_h2h"], "native sinks not installed"
assert ctx.runtime.cpu_device.memset is not originals["cpu.memset"]
installed = differences(before, snapshot())  # the snapshot sees the patches it must see undone
for point in ("warp.launch", "warp.ScopedCapture", "array.zero_", "Launch.launch", "CDLL.wp_memcpy_h2h",
              "CDLL.wp_array_scan_float_host", "Device.memset", "warp._src.context.invoke",
              "warp.capture_if", "warp.capture_while", "warp.capture_pause", "warp.capture_resume",
              "Device.is_capturing", "warp.utils.array_scan", "warp._src.utils.radix_sort_pairs"):
    assert point in installed, f"{point} not among the patched attributes {installed}"

for cycle in range(2):
    apic.uninstall()
    assert not apic.is_installed()
    diffs = differences(before, snapshot())
    assert not diffs, f"cycle {cycle}: uninstall left these attributes changed: {diffs}"
    now = named_attributes()
    changed = [name for name in originals if now[name] is not originals[name]]
    assert not changed, f"not the original objects: {changed}"
    try:
        apic.capture_begin(device="cpu")
    except apic.CaptureError as error:
        assert "apic.install()" in str(error), error
    else:
        raise AssertionError("apic.capture_begin worked while apic was uninstalled")
    # eager Warp works as before
    a = wp.array(np.arange(4, dtype=np.float32), device="cpu")
    wp.launch(K.ARRAY_ACCUM[wp.float32], dim=4, inputs=[a, a], device="cpu")
    assert a.numpy().tolist() == [0.0, 2.0, 4.0, 6.0]

    apic.install()
    assert apic.is_installed()
    assert wp.launch is not originals["wp.launch"] and wp.ScopedCapture is apic.ScopedCapture
    capture_and_replay()
print("OK")
"""
    )
    assert result.stdout.strip().endswith("OK")


def test_quiet_library():
    """Importing apic, capturing and replaying write nothing to stdout or stderr."""
    result = _run(
        """
libc = ctypes.CDLL(None)
def mark(text):
    sys.stdout.flush(); sys.stderr.flush(); libc.fflush(None)
    os.write(1, text.encode()); os.write(2, text.encode())

mark("<<apic>>\\n")
import apic
a = wp.array(np.arange(8, dtype=np.float32), device="cpu")
b = wp.zeros(8, dtype=wp.float32, device="cpu")
with wp.ScopedCapture(device="cpu") as capture:
    wp.launch(K.ARRAY_ACCUM[wp.float32], dim=8, inputs=[a, b], device="cpu")
    tmp = wp.clone(b)
    wp.copy(a, tmp)
    b[::2].fill_(3.0)
for _ in range(3):
    wp.capture_launch(capture.graph)
capture.graph.launch(repeats=2)
repr(capture.graph)
apic.uninstall()
apic.install()
mark("<<end>>\\n")
""",
        "-W", "always",
    )
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        inside = text.split("<<apic>>\n", 1)[1].split("<<end>>\n", 1)[0]
        assert inside == "", f"apic wrote to {name}: {inside!r}"


def test_import_does_not_initialise_warp():
    """``import apic`` stays light: Warp initialises (and prints, if not quiet) only when used."""
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {REPO_DIR!r})
        import warp as wp
        import apic
        from warp._src import context as ctx
        assert ctx.runtime is None, "import apic initialised Warp"
        assert "numba" not in sys.modules, "import apic imported numba"
        print("OK")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"
