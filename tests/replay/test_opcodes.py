"""The opcode table (``apic.replay.cpu.table.OPCODES``): every opcode it lists runs in both interpreters, the
Numba loop and the pure-Python reference, with the same effect, found by running a row of it (native
functions here are ctypes callbacks that log their arguments); an opcode no table lists stops both with
a status that raises, naming it."""

from __future__ import annotations

import ctypes
import re
import struct

import numpy as np
import pytest

import apic  # noqa: F401  (installs apic, as every user of these modules has)
from apic.errors import ReplayError, ReplayIndexError
from apic.replay.cpu import reference
from apic.replay.parallel import split_planner
from apic.replay.cpu import table as tbl

pytestmark = [pytest.mark.once]

I64 = ctypes.c_int64


def _numba(table, repeats=1):
    from apic.replay.parallel import split_pool
    from apic.replay.cpu.interpreter import run_table

    with split_pool.workers(2):  # an OP_SPLIT row calls the pooled splitter
        return run_table(table, repeats)


INTERPRETERS = {"numba": _numba, "reference": lambda table: reference.run_table(table, 1)}


class Probe:
    """Native functions (ctypes callbacks) that log their calls, and graph memory for rows to point at."""

    def __init__(self) -> None:
        self.log: list = []
        self.keep: list = []  # callbacks and buffers, alive while the table runs

    def fn(self, tag: str, arity: int = 0, argtypes=None, returns=None) -> int:
        """A callback logging its calls; ``returns`` (a CUDA driver call's CUresult) gives its result."""

        def called(*args):
            self.log.append((tag, *args))
            return returns

        callback = ctypes.CFUNCTYPE(None if returns is None else ctypes.c_int, *(argtypes or [I64] * arity))(called)
        self.keep.append(callback)
        return ctypes.cast(callback, ctypes.c_void_p).value

    def words(self, values, ctype=I64) -> int:
        buffer = (ctype * max(len(values), 1))(*values)
        self.keep.append(buffer)
        return ctypes.addressof(buffer)


def _table(*rows) -> np.ndarray:
    table = np.zeros((len(rows), tbl.OP_COLUMNS), dtype=np.int64)
    for i, row in enumerate(rows):
        table[i, : len(row)] = row
    return table


def _call_row(n: int):
    def make(probe: Probe, good: bool):
        return _table([tbl.CALL_OPCODES[n], probe.fn(f"call{n}", n), *range(1, n + 1)])
    return make


def _jump(probe: Probe, good: bool):
    return _table([tbl.OP_JUMP, 0, 2], [tbl.OP_CALL2, probe.fn("skipped", 2), 0, 0],
                  [tbl.OP_CALL2, probe.fn("end", 2), 7, 8])


def _branch(probe: Probe, good: bool):
    cond = probe.words([0 if good else 1], ctypes.c_int32)  # zero: continue at the target
    return _table([tbl.OP_BRANCH_IF_ZERO, 0, cond, 2], [tbl.OP_CALL2, probe.fn("body", 2), 1, 2],
                  [tbl.OP_CALL2, probe.fn("end", 2), 3, 4])


def _argv(probe: Probe, good: bool):
    return _table([tbl.OP_CALL_ARGV, probe.fn("argv", tbl.ARGV_ARGS), probe.words(range(100, 100 + tbl.ARGV_ARGS))])


def _call5_d2(probe: Probe, good: bool):
    fn = probe.fn("d2", argtypes=[I64, I64, ctypes.c_double, I64, I64])
    return _table([tbl.OP_CALL5_D2, fn, 1, 2, struct.unpack("<q", struct.pack("<d", 2.5))[0], 4, 5])


def _split(probe: Probe, good: bool):
    from apic.replay.parallel import split_pool

    entry = probe.fn("range", 4)  # a kernel's range entry: (bounds, args, begin, end)
    per_thread = probe.words([probe.fn("range", 4), probe.fn("range", 4)])  # the second's, one per thread slot
    # two launches: 3 and 2 chunks
    items = probe.words([entry, 11, 12, 10, 3, 0, 0, entry, 21, 22, 4, 2, 3, per_thread])
    return _table([tbl.OP_SPLIT, split_pool.splitter_address(), split_pool.pool().base, items, 2, 5, 2])


def _segmented_sort(probe: Probe, good: bool):
    starts, ends = probe.words([0, 2], ctypes.c_int32), probe.words([2, 4 if good else 9], ctypes.c_int32)
    return _table([tbl.OP_SEGMENTED_SORT, probe.fn("sort", 10), 1, 2, 4, starts, ends, 2])


def _padded_transpose(probe: Probe, good: bool):
    offsets = probe.words([0, 2, 3] if good else [0, 3, 2], ctypes.c_int32)
    return _table([tbl.OP_PADDED_TRANSPOSE, probe.fn("transpose", tbl.ARGV_ARGS),
                   probe.words(range(tbl.ARGV_ARGS)), offsets, 2, 3])


def _check_indices(probe: Probe, good: bool):
    values = probe.words([0, 3, 1] if good else [0, 4, 1], ctypes.c_int32)
    return _table([tbl.OP_CHECK_INDICES, 0, values, 3, 4], [tbl.OP_CALL2, probe.fn("after", 2), 1, 2])


def _check_ids(probe: Probe, good: bool):
    values = probe.words([7, 9] if good else [7, 8])
    return _table([tbl.OP_CHECK_IDS, 0, values, 2, probe.words([9, 7]), 2], [tbl.OP_CALL2, probe.fn("after", 2), 1, 2])


def _cuda_block(probe: Probe, context: int = 0x100, current: int = 0x100, pushed: int = 0) -> int:
    """A CUDA block (``table.CUDA_*``): stream 0x57, the graph's ``context``, ``pushed`` (1: as if an entry row
    pushed it), cuCtxPopCurrent a callback logging ``("pop", 0)``; and the driver's ``current`` context."""
    block = probe.words([0] * tbl.CUDA_WORDS)
    words = (I64 * tbl.CUDA_WORDS).from_address(block)
    words[tbl.CUDA_STREAM], words[tbl.CUDA_CONTEXT], words[tbl.CUDA_PUSHED] = 0x57, context, pushed

    def pop(out):
        probe.log.append(("pop", 0))  # out: the block's scratch word, whose address varies
        return 0

    callback = ctypes.CFUNCTYPE(ctypes.c_int, I64)(pop)
    probe.keep.append(callback)
    words[tbl.CUDA_POP] = ctypes.cast(callback, ctypes.c_void_p).value
    probe.current = current
    return block


def _cuda_launch(probe: Probe, good: bool):
    cuda = _cuda_block(probe, pushed=1)  # a failed call pops the context the rows pushed
    fn = probe.fn("launch", 11, returns=0 if good else 719)  # CUDA_ERROR_LAUNCH_FAILED
    return _table([tbl.OP_CUDA_LAUNCH, fn, 0xF0, 1, 2, 3, 4, 5, 6, 7, 0xAA, cuda],
                  [tbl.OP_CALL2, probe.fn("after", 2), 1, 2])


def _cuda_call3(probe: Probe, good: bool):
    cuda = _cuda_block(probe)
    return _table([tbl.OP_CUDA_CALL3, probe.fn("copy", 4, returns=0 if good else 1), 0xD0, 0x50, 64, cuda],
                  [tbl.OP_CALL2, probe.fn("after", 2), 1, 2])


def _cuda_call1(probe: Probe, good: bool):
    cuda = _cuda_block(probe)
    return _table([tbl.OP_CUDA_CALL1, probe.fn("graph", 2, returns=0 if good else 1), 0xE0, cuda],
                  [tbl.OP_CALL2, probe.fn("after", 2), 1, 2])


def _context_calls(probe: Probe, cuda: int, good: bool) -> tuple[int, int, int]:
    """cuCtxGetCurrent, cuCtxPushCurrent, cuCtxPopCurrent stand-ins over ``probe.current``."""
    def get_current(out):
        probe.log.append(("get_current",))
        I64.from_address(out).value = probe.current
        return 0

    def push(context):
        probe.log.append(("push", context))
        probe.current = context
        return 0 if good else 201  # CUDA_ERROR_INVALID_CONTEXT

    def pop(out):
        probe.log.append(("pop",))
        I64.from_address(out).value = probe.current
        probe.current = 0x200
        return 0

    made = [ctypes.CFUNCTYPE(ctypes.c_int, I64)(f) for f in (get_current, push, pop)]
    probe.keep.extend(made)
    return tuple(ctypes.cast(f, ctypes.c_void_p).value for f in made)


def _cuda_enter(probe: Probe, good: bool):
    """Another context is current: the graph's is pushed (and popped by the leave row); a failed push stops."""
    cuda = _cuda_block(probe, current=0x200)
    get_current, push, pop = _context_calls(probe, cuda, good)
    return _table([tbl.OP_CUDA_ENTER, push, cuda, get_current], [tbl.OP_CALL2, probe.fn("after", 2), 1, 2],
                  [tbl.OP_CUDA_LEAVE, pop, cuda], [tbl.OP_CUDA_ENTER, push, cuda, get_current])


def _cuda_leave(probe: Probe, good: bool):
    """The graph's context is current already: nothing is pushed, and so nothing popped."""
    cuda = _cuda_block(probe, current=0x100)
    get_current, push, pop = _context_calls(probe, cuda, good)
    if not good:  # a failing pop: pushed by an earlier entry
        (I64 * tbl.CUDA_WORDS).from_address(cuda)[tbl.CUDA_PUSHED] = 1
        pop = probe.fn("pop", 1, returns=1)
    return _table([tbl.OP_CUDA_LEAVE, pop, cuda], [tbl.OP_CUDA_ENTER, push, cuda, get_current],
                  [tbl.OP_CALL2, probe.fn("after", 2), 1, 2], [tbl.OP_CUDA_LEAVE, pop, cuda])


def _nop(probe: Probe, good: bool):
    return _table([tbl.OP_NOP], [tbl.OP_CALL2, probe.fn("after", 2), 1, 2])


PROBES = {  # opcode -> (probe, good) -> a table whose run shows what the opcode does
    tbl.OP_NOP: _nop, **{number: _call_row(n) for n, number in tbl.CALL_OPCODES.items()}, tbl.OP_JUMP: _jump,
    tbl.OP_BRANCH_IF_ZERO: _branch, tbl.OP_CALL_ARGV: _argv, tbl.OP_CALL5_D2: _call5_d2, tbl.OP_SPLIT: _split,
    tbl.OP_SEGMENTED_SORT: _segmented_sort, tbl.OP_PADDED_TRANSPOSE: _padded_transpose,
    tbl.OP_CHECK_INDICES: _check_indices, tbl.OP_CHECK_IDS: _check_ids, tbl.OP_CUDA_LAUNCH: _cuda_launch,
    tbl.OP_CUDA_CALL3: _cuda_call3, tbl.OP_CUDA_CALL1: _cuda_call1, tbl.OP_CUDA_ENTER: _cuda_enter,
    tbl.OP_CUDA_LEAVE: _cuda_leave,
}
EXPECTED = {  # opcode -> the log of a good run
    tbl.OP_NOP: [("after", 1, 2)],
    **{number: [(f"call{n}", *range(1, n + 1))] for n, number in tbl.CALL_OPCODES.items()},
    tbl.OP_JUMP: [("end", 7, 8)],
    tbl.OP_BRANCH_IF_ZERO: [("end", 3, 4)],
    tbl.OP_CALL_ARGV: [("argv", *range(100, 100 + tbl.ARGV_ARGS))],
    tbl.OP_CALL5_D2: [("d2", 1, 2, 2.5, 4, 5)],
    tbl.OP_SPLIT: sorted([("range", 11, 12, 0, 3), ("range", 11, 12, 3, 6), ("range", 11, 12, 6, 10),
                          ("range", 21, 22, 0, 2), ("range", 21, 22, 2, 4)]),
    tbl.OP_SEGMENTED_SORT: [("sort", 1, 2, 4, None, None, 2, 0, 0, 0, 0)],
    tbl.OP_PADDED_TRANSPOSE: [("transpose", *range(tbl.ARGV_ARGS))],
    tbl.OP_CHECK_INDICES: [("after", 1, 2)],
    tbl.OP_CHECK_IDS: [("after", 1, 2)],
    # cuLaunchKernel(function, grid, block, smem, the block's stream, params, NULL)
    tbl.OP_CUDA_LAUNCH: [("launch", 0xF0, 1, 2, 3, 4, 5, 6, 7, 0x57, 0xAA, 0), ("after", 1, 2)],
    tbl.OP_CUDA_CALL3: [("copy", 0xD0, 0x50, 64, 0x57), ("after", 1, 2)],
    tbl.OP_CUDA_CALL1: [("graph", 0xE0, 0x57), ("after", 1, 2)],
    tbl.OP_CUDA_ENTER: [("get_current",), ("push", 0x100), ("after", 1, 2), ("pop",), ("get_current",),
                        ("push", 0x100)],
    tbl.OP_CUDA_LEAVE: [("get_current",), ("after", 1, 2)],
}
# opcodes whose check is of what their call returned: a failed run has made that call, and only it
FAILED_CALL = {tbl.OP_CUDA_LAUNCH: [("launch", 0xF0, 1, 2, 3, 4, 5, 6, 7, 0x57, 0xAA, 0), ("pop", 0)],
               tbl.OP_CUDA_CALL3: [("copy", 0xD0, 0x50, 64, 0x57)], tbl.OP_CUDA_CALL1: [("graph", 0xE0, 0x57)],
               tbl.OP_CUDA_ENTER: [("get_current",), ("push", 0x100)], tbl.OP_CUDA_LEAVE: [("pop", 0)]}


def test_every_opcode_of_the_table_has_a_probe():
    assert set(PROBES) == set(EXPECTED) == set(tbl.OPCODES)


def _run(interpreter: str, opcode: int, good: bool):
    probe = Probe()
    table = PROBES[opcode](probe, good)
    status = INTERPRETERS[interpreter](table)
    log = [entry for entry in probe.log]
    if opcode == tbl.OP_SEGMENTED_SORT:  # its starts and ends are addresses of this run's buffers
        log = [(tag, a, b, c, None, None, *rest) for tag, a, b, c, _, _, *rest in log]
    return status, (sorted(log) if opcode == tbl.OP_SPLIT else log), table


@pytest.mark.parametrize("opcode", sorted(tbl.OPCODES), ids=[tbl.OPCODES[n].name for n in sorted(tbl.OPCODES)])
@pytest.mark.parametrize("interpreter", sorted(INTERPRETERS))
def test_each_interpreter_runs_each_opcode(interpreter, opcode):
    status, log, _ = _run(interpreter, opcode, True)
    assert (status, log) == (tbl.STATUS_DONE, EXPECTED[opcode])


STOPPING = sorted(n for n, spec in tbl.OPCODES.items() if spec.stops is not None)


@pytest.mark.parametrize("opcode", STOPPING, ids=[tbl.OPCODES[n].name for n in STOPPING])
@pytest.mark.parametrize("interpreter", sorted(INTERPRETERS))
def test_each_interpreter_stops_where_a_check_fails(interpreter, opcode):
    status, log, table = _run(interpreter, opcode, False)
    if opcode == tbl.OP_CUDA_LEAVE:  # the pop's out-pointer is the block's scratch word: its address varies
        log = [(tag, 0) for tag, *_ in log]
    # stopped at row 0, before its call (or the row after a check), or right after its failed driver call
    assert (status, log) == (-1, FAILED_CALL.get(opcode, []))
    error = tbl.stop_error(status, table)
    if opcode in FAILED_CALL:
        from apic.replay.cuda.driver import CudaReplayError

        assert isinstance(error, CudaReplayError)
        assert re.search(r"CUDA graph replay failed: .* returned \w+ \(\d+\) at op-table row 0", str(error)), error
        return
    assert isinstance(error, ReplayIndexError if tbl.OPCODES[opcode].guard else ReplayError)
    assert "CPU graph replay failed" in str(error)


def test_only_the_branch_and_jump_continue_elsewhere():
    assert {spec.number for spec in tbl.JUMPS} == {tbl.OP_JUMP, tbl.OP_BRANCH_IF_ZERO}
    table = np.concatenate([_jump(Probe(), True), _branch(Probe(), True)])
    assert split_planner.jump_targets(table) == {2}


@pytest.mark.parametrize("interpreter", sorted(INTERPRETERS))
def test_an_unknown_opcode_stops_the_replay_naming_it(interpreter):
    probe = Probe()
    table = _table([tbl.OP_CALL2, probe.fn("first", 2), 1, 2], [99], [tbl.OP_CALL2, probe.fn("never", 2), 3, 4])
    status = INTERPRETERS[interpreter](table)
    assert (status, probe.log) == (-2, [("first", 1, 2)])
    with pytest.raises(ReplayError, match="op-table row 1 holds opcode 99, which the interpreter does not run"):
        raise tbl.stop_error(status, table)


def test_every_checked_native_call_is_an_allowed_call_of_the_row_its_opcode_checks():
    from apic.record import natives

    for (name, arity), spec in tbl.CHECKED_CALLS.items():
        assert natives.signature(name, arity) is not None, name
        passed = natives.native_arity(name, arity)
        call = tbl.CALL_OPCODES[min(n for n in tbl.CALL_OPCODES if n >= passed)] if arity <= tbl.MAX_ARGS else None
        assert spec.calls == (call or tbl.OP_CALL_ARGV), name


def test_every_segmented_sort_and_padded_transpose_the_recorder_allows_is_checked():
    """A native call whose replay reads ranges from graph memory runs only after its opcode's check."""
    from apic.record import natives

    checked = {(name, arity) for name, arity in natives._SIGNATURES
               if name.startswith("segmented_sort_pairs_") or (name == natives.PADDED_TRANSPOSE and arity == 12)}
    assert checked == set(tbl.CHECKED_CALLS)
