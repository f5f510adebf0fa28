"""Shared test setup: a quiet Warp with apic installed, and the eager-versus-replay oracle.

The oracle (``eager_vs_replay``) is the core check of the suite: the same function runs eagerly on
one fresh state and, on a second fresh state, is captured once and replayed; after every run the
two states must be identical bit for bit.
"""

from __future__ import annotations

import gc
import os
import sys
import sysconfig

import numpy as np
import pytest
import warp as wp

TESTS = os.path.dirname(os.path.abspath(__file__))
# The support modules (kernels, helpers, child scripts) live in tests/ itself; test files live in one folder per
# subject (tests/README.md) and a few import another's helpers or fixtures by module name, from any folder.
SUBJECTS = sorted(entry.name for entry in os.scandir(TESTS)
                  if entry.is_dir() and entry.name not in ("data", "fuzz", "__pycache__"))
for _folder in reversed([TESTS] + [os.path.join(TESTS, name) for name in SUBJECTS]):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)

import apic  # noqa: E402  (installs the shims)
from apic._compat import quiet_warp  # noqa: E402

# scripts/test_wheel.sh runs this suite against the installed wheel (APIC_TEST_INSTALLED=1): stop at once
# unless `import apic` found that install, not a checkout on sys.path.
if os.environ.get("APIC_TEST_INSTALLED"):
    _site = os.path.realpath(sysconfig.get_paths()["purelib"])
    if os.path.commonpath([os.path.realpath(apic.__file__), _site]) != _site:
        pytest.exit(f"APIC_TEST_INSTALLED is set, but apic was imported from {apic.__file__}, not from {_site}",
                    returncode=3)

# Warp prints an init banner and module-load lines unless told not to (before wp.init).
quiet_warp()
wp.init()

CPU = "cpu"


@pytest.fixture(scope="session", autouse=True)
def _load_test_kernels():
    """Compile the test kernels once, before any test captures (compilation is not captured)."""
    import kernels

    # a launch loads the module exactly as the tests' launches will (same block_dim variant)
    wp.launch(kernels.tick, dim=1, inputs=[wp.zeros(1, dtype=wp.int64, device=CPU)], device=CPU)


@pytest.fixture(autouse=True)
def _no_capture_leaks():
    """A test must never leave a capture running on this thread."""
    yield
    from apic.record.cpu.recorder import active

    leaked = active()
    if leaked is not None:
        leaked.abort()
        pytest.fail("the test left a CPU capture running")


def as_bytes(value) -> np.ndarray:
    """The raw bytes of an array-like value (Warp array, NumPy array, torch tensor)."""
    if isinstance(value, (wp.array, wp.indexedarray)):
        value = value.numpy()
    elif not isinstance(value, np.ndarray):
        value = np.asarray(value)
    return np.ascontiguousarray(value).view(np.uint8).reshape(-1)


def snapshot(state: dict) -> dict:
    return {name: as_bytes(value).copy() for name, value in state.items() if _is_array_like(value)}


def _is_array_like(value) -> bool:
    return isinstance(value, (wp.array, wp.indexedarray, np.ndarray)) or hasattr(value, "__array__")


def assert_same(expected: dict, actual: dict, context: str) -> None:
    assert expected.keys() == actual.keys()
    for name in expected:
        assert np.array_equal(expected[name], actual[name]), f"{context}: '{name}' differs from the eager run"


def eager_vs_replay(fn, make_state, repeats: int = 3, check_record_only: bool = True):
    """Run ``fn(state)`` eagerly ``repeats`` times and captured-then-replayed ``repeats`` times.

    ``make_state()`` builds a fresh dict of named arrays (same contents each call). Every array-like
    entry of the eager state and of the replayed state is compared bit for bit after each run. With
    ``check_record_only`` the capture itself must change nothing (it only records). Returns the
    graph and the replayed state.
    """
    eager_state, replay_state = make_state(), make_state()
    names = [name for name, value in eager_state.items() if _is_array_like(value)]
    initial = snapshot({n: replay_state[n] for n in names})
    assert_same(snapshot({n: eager_state[n] for n in names}), initial, "make_state is not deterministic")

    expected = []
    for _ in range(repeats):
        fn(eager_state)
        expected.append(snapshot({n: eager_state[n] for n in names}))

    with wp.ScopedCapture(device=CPU) as capture:
        fn(replay_state)
    graph = capture.graph
    del capture
    assert isinstance(graph, apic.Graph)
    if check_record_only:
        assert_same(initial, snapshot({n: replay_state[n] for n in names}), "capture executed work")
    churn(generation=1)  # temporaries of ``fn`` are gone: memory the graph failed to keep alive gets reused


    for run in range(repeats):
        wp.capture_launch(graph)
        assert_same(expected[run], snapshot({n: replay_state[n] for n in names}), f"replay {run + 1}")
    return graph, replay_state


def churn(generation: int = 2) -> None:
    """Collect garbage, then allocate and free memory so that freed buffers get reused and overwritten.

    ``generation`` < 2 collects only young objects (a full collection costs tens of milliseconds).
    """
    gc.collect(generation)
    junk = [np.full(n, -7, np.int64) for n in (8, 16, 32, 64, 128, 1024) for _ in range(16)]
    junk += [wp.full(n, -7, dtype=wp.int64, device=CPU) for n in (8, 16, 32, 64, 128) for _ in range(16)]
    del junk


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def random_values(shape, np_dtype, seed: int = 0) -> np.ndarray:
    """Small exactly representable values of ``np_dtype`` (booleans, or integers in [-8, 8))."""
    gen = rng(seed)
    np_dtype = np.dtype(np_dtype)
    if np_dtype == np.bool_:
        return gen.integers(0, 2, size=shape).astype(np.bool_)
    low = 0 if np_dtype.kind == "u" else -8
    return gen.integers(low, 8, size=shape).astype(np_dtype)
