"""Tile kernels split by world (docs/PARALLEL.md, "Tile kernels"), bit for bit against eager Warp.

Each tile form the world-split proof accepts (``tile_kernels.CASES``: a Cholesky factor stored to the
world's row, tile atomics into it, stores at ``[w, i]`` with a column offset, a row read then written,
rows passed to a ``@wp.func``) is replayed split over 2 and 8 threads by both interpreters and must
equal eager Warp; each form it refuses (a store to another world's row, a store into the whole array
at offset ``w``, a read of another world's row of a written array) stays serial with its reason.

Warp's CPU tile code finds its tile memory through a static of the loaded module, so the split
launches run in one loaded copy of the range object per thread. Two checks in child processes, so a
crash is a result: the accepted Cholesky kernel replayed split with every thread in one shared copy
(the mutation) crashes or differs from eager, and with the per-thread copies it equals eager while
workers ran chunks.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import textwrap

import pytest

import fork_server
import tile_kernels as tk
from apic.record.parallel.world_split import world_verdict
from apic.replay.cpu import table as tbl
from persist_helpers import child_env
from world_kernels import same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

SPLIT = [name for name, case in tk.CASES.items() if case[2] == "split"]
REFUSED = [name for name, case in tk.CASES.items() if case[2] != "split"]
SLOTS = tbl.OPCODES[tbl.OP_SPLIT].column("slots")
ITEMS = tbl.OPCODES[tbl.OP_SPLIT].column("items")


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
@pytest.mark.parametrize("threads", [2, 8])
@pytest.mark.parametrize("name", SPLIT)
def test_accepted_tile_form_splits_by_world_as_eager(name, threads, interpreter):
    eager, replayed, graph = tk.run(name, threads, interpreter)
    (entry,) = graph.parallel_report(threads)
    assert entry["chunks"] > 1 and not entry["why"], entry
    info = graph.recording.kernels[0]
    assert info.split_world is not None and info.split_tiles, info
    table = graph.parallel_program(threads).table
    (row,) = table[table[:, 0] == tbl.OP_SPLIT]
    slots = int(row[SLOTS])
    assert slots >= 2, row  # every thread that may run a chunk has an entry of its own
    item = (ctypes.c_int64 * tbl.ITEM_WORDS).from_address(int(row[ITEMS]))[:]
    entries = (ctypes.c_int64 * slots).from_address(item[tbl.ITEM_PER_THREAD])[:]
    assert len(set(entries)) == slots, entries  # one loaded copy per thread slot
    assert same_bits(eager, replayed), name


@pytest.mark.parametrize("name", REFUSED)
def test_refused_tile_form_stays_serial_with_its_reason(name):
    eager, replayed, graph = tk.run(name, 2, "numba", replays=2)
    assert (graph.parallel_program(2).table[:, 0] != tbl.OP_SPLIT).all()
    (entry,) = graph.parallel_report(2)
    assert entry["chunks"] == 0 and "nor by world" in entry["why"], entry
    assert "other than the world" in world_verdict(tk.CASES[name][0]).reason
    assert same_bits(eager, replayed), name


def test_tile_print_is_refused():
    import warp as wp

    @wp.kernel(module="unique")
    def prints_tile(m: wp.array3d(dtype=float), out: wp.array3d(dtype=float)):
        w = wp.tid()
        t = wp.tile_load(m[w], shape=(tk.N, tk.N))
        wp.tile_print(t)
        wp.tile_store(out[w], t)

    try:
        verdict = world_verdict(prints_tile)
    finally:
        # wp.tile_print is no builtin of the supported warp-lang versions: this kernel never compiles. Keep it out
        # of Warp's registry, or a later wp.force_load() in this process (capture_begin(force_module_load=True))
        # fails on it, whichever test runs it.
        from warp._src import context as wp_context

        wp_context.user_modules.pop(prints_tile.module.name, None)
    assert not verdict.splittable and "tile_print" in verdict.reason, verdict


_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import tile_kernels as tk
    from apic.replay.parallel import range_entry, split_pool

    if sys.argv[1] == "shared":  # every thread slot runs the one loaded copy: one tile-memory pointer
        def shared(module, module_exec, symbol, slots, world=False):
            return (range_entry.range_entry(module, module_exec, symbol, world),) * slots
        range_entry.per_thread_entries = shared
    eager, replayed, graph = tk.run("cholesky_rows", 2, "numba", replays=20, worlds=4000)
    same = all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(eager, replayed))
    print(json.dumps({"same": same, "helped": split_pool.chunks_run_by_workers()}))
    """
)


def _child(mode: str) -> subprocess.CompletedProcess:
    # The pool's worker threads are what share or own a tile memory: the child replays through the Numba
    # interpreter's pool even in a suite run with APIC_REPLAY=reference (which runs every chunk itself).
    env = dict(child_env(), APIC_REPLAY="numba")
    return fork_server.run([sys.executable, "-c", _CHILD, mode], env=env, capture_output=True, text=True,
                           timeout=600, cwd=tk.__file__.rsplit("/", 1)[0])


def test_per_thread_copies_replay_as_eager():
    done = _child("per thread")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["same"] and found["helped"] > 0, found


def test_mutation_shared_tile_memory_is_caught():
    """With every thread in one loaded copy, the threads' tiles share one tile memory: the replay
    crashes (the process dies) or its results differ from eager."""
    done = _child("shared")
    if done.returncode == 0:
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert not found["same"], found
