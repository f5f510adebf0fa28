"""The native splitter of the parallel replay: the task chunks of one ``OP_SPLIT`` row shared with pooled
worker threads.

``splitter_address()`` is the address of a C function (a Numba ``cfunc``) that an ``OP_SPLIT`` row
calls from the interpreter, with the GIL released::

    split(control, items, count, chunks, slots, guards, guard count)

The row's ``count`` work items (``table.ITEM_*``) are launches that may run at the same time: one
large launch, or several independent ones (``apic.replay.parallel.split_planner``). Item ``k`` owns chunks
``[first, first + n)`` of the row's ``chunks``; its chunk ``c`` runs tasks ``[tasks * c // n, tasks *
(c + 1) // n)`` through the kernel's range entry (the cut the reference interpreter makes), or, for an
item with per-thread entries (a kernel using tiles), through the entry of the thread running it: the
replaying thread is slot 0, worker ``k`` slot ``k + 1``, and a worker whose slot has no entry
(``slots`` and above, when ``slots`` is not 0) runs no chunk of the row. A row with guards (launches
split by footprint, docs/PARALLEL.md) first compares each guarded span with its copy, and runs serially
on the caller where one differs. The
splitter publishes the row in the control block, wakes the workers and runs chunks itself. Every
thread, the caller included, claims the next chunk with a compare-and-swap until none is left; the
caller returns once every chunk has run. A worker that the OS does not schedule in time therefore
never holds a row up: the caller runs its chunks (on a machine with busy cores, split launches cost
about what serial ones do, instead of a scheduler time slice each).

Workers are Python threads that entered a Numba ``nogil`` loop and never leave it: they spin briefly
after each row (the next one of a graph usually follows within microseconds), then sleep: on a
futex that the caller wakes (Linux), or in ``nanosleep`` naps until a row begins (the portable wait, any
POSIX C library); ``apic._probes.host_os.wait_primitive`` chooses, when the pool starts. Where neither
can run (or on a CPU family apic does not know) :func:`unavailable` says why and graphs replay serially.
One replay with split launches at a time uses the pool (:func:`workers`).

The pool starts no more workers than the CPUs the process may run on (``thread_count.running``),
whatever thread count a replay asks for. It survives ``os.fork()``: a child has the memory but not the
threads, and inherits the pool's lock as it was, held if another thread was replaying split at the
fork. An at-fork hook gives the child a new lock and a pool with no workers; its next split replay
starts its own, on the same control block (the ``OP_SPLIT`` rows of built tables point to it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import sys
import threading

import numpy as np
from numba import cfunc, njit, types

from apic._probes import host_os
from apic.replay.cpu import table as _table
from apic.replay.parallel import thread_count
from apic.replay.cpu._intrinsics import (atomic_add, atomic_cas, atomic_load, atomic_store, call0_i32, call2_i32,
                                         call4, call4_i32, call10, load_i64_at)
from apic.replay.cpu.jit_cache import CACHE
from apic.targets.cpu import FAMILY_NAMES, cpu_family

# The control block: int64 slots, the contended ones on cache lines of their own.
_CLAIM = 0  # (generation << 32) | next chunk to claim
_DONE = 8  # chunks of the current generation that have run
_SEQ = 16  # futex word (its low 32 bits): incremented at every launch
_SLEEPERS = 24  # workers asleep (or about to be): on the futex, or napping
_HELPED = 25  # chunks run by workers since the pool started (what tests and benchmarks read)
_ITEMS, _COUNT, _CHUNKS, _ROW_SLOTS, _ACTIVE = 32, 33, 34, 35, 37  # the row; workers allowed to help
_SYSCALL, _YIELD, _FUTEX_NR, _MEMCMP = 40, 41, 42, 43  # libc's syscall, sched_yield, memcmp; the futex call number
_NAP, _NAP_SHORT, _NAP_LONG = 48, 50, 52  # the portable wait: nanosleep (0: the futex wait), its two timespecs
_SLOTS = 56
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129  # FUTEX_WAIT / FUTEX_WAKE | FUTEX_PRIVATE_FLAG
_SPINS = 20_000  # idle polls before a worker sleeps (a few tens of microseconds)
_FAMILY = cpu_family(platform.machine())

# Numba freezes these literals into its on-disk cache, keyed on this file only: checked here.
assert (_table.ITEM_ENTRY, _table.ITEM_BOUNDS, _table.ITEM_ARGS, _table.ITEM_TASKS, _table.ITEM_CHUNKS,
        _table.ITEM_FIRST, _table.ITEM_PER_THREAD, _table.ITEM_WORDS) == (0, 1, 2, 3, 4, 5, 6, 7)

lock = threading.Lock()  # one replay with split launches at a time uses the pool


@njit(nogil=True, cache=CACHE)
def _run_chunk(items, count, chunk, slot):
    """Run chunk ``chunk`` of a row's items on thread slot ``slot``: the item owning it, its share of that
    launch's tasks, through the item's range entry or that slot's own one."""
    k = 0
    while k + 1 < count and load_i64_at(items, 7 * (k + 1) + 5) <= chunk:  # ITEM_FIRST of the next item
        k += 1
    at = 7 * k
    tasks = load_i64_at(items, at + 3)
    chunks = load_i64_at(items, at + 4)
    c = chunk - load_i64_at(items, at + 5)
    entry = load_i64_at(items, at)
    per_thread = load_i64_at(items, at + 6)
    if per_thread != 0:
        entry = load_i64_at(per_thread, slot)
    call4(entry, load_i64_at(items, at + 1), load_i64_at(items, at + 2), tasks * c // chunks,
          tasks * (c + 1) // chunks)


@njit(nogil=True, cache=CACHE)
def _help(base, generation, slot):
    """Claim and run chunks of row ``generation`` on thread slot ``slot`` until none is left (or another
    row began)."""
    claim = base + 8 * _CLAIM
    items = atomic_load(base + 8 * _ITEMS)
    count = atomic_load(base + 8 * _COUNT)
    chunks = atomic_load(base + 8 * _CHUNKS)
    slots = atomic_load(base + 8 * _ROW_SLOTS)
    if slots != 0 and slot >= slots:  # the row's per-thread entries have none for this thread
        return
    while True:
        word = atomic_load(claim)
        chunk = word & 0xFFFFFFFF
        # The parameters read above are this row's whenever a claim succeeds: the caller changes
        # them only after every chunk of the row has run, when no claim of it can succeed.
        if (word >> 32) != generation or chunk >= chunks:
            return
        if atomic_cas(claim, word, word + 1) == word:
            _run_chunk(items, count, chunk, slot)
            if slot != 0:
                atomic_add(base + 8 * _HELPED, 1)
            atomic_add(base + 8 * _DONE, 1)


@njit(nogil=True, cache=CACHE)
def _worker(base, index):
    """A pool thread: help every launch it is allowed to (``index < active``); sleep when idle."""
    claim = base + 8 * _CLAIM
    seq = base + 8 * _SEQ
    seen = atomic_load(claim) >> 32
    while True:
        ticket = atomic_load(seq)
        generation = atomic_load(claim) >> 32
        if generation != seen:
            seen = generation
            if index < atomic_load(base + 8 * _ACTIVE):
                _help(base, generation, index + 1)
            continue
        spins = 0
        while spins < _SPINS and (atomic_load(claim) >> 32) == seen:
            spins += 1
        if spins < _SPINS:
            continue
        atomic_add(base + 8 * _SLEEPERS, 1)
        nap = atomic_load(base + 8 * _NAP)
        if nap == 0 and atomic_load(seq) == ticket:  # else a launch began meanwhile: no sleep
            call10(atomic_load(base + 8 * _SYSCALL), atomic_load(base + 8 * _FUTEX_NR), seq, _FUTEX_WAIT,
                   ticket & 0xFFFFFFFF, 0, 0, 0, 0, 0, 0)
        naps = 0
        while nap != 0 and atomic_load(seq) == ticket:  # the portable wait: short naps, then longer ones
            call2_i32(nap, base + 8 * (_NAP_SHORT if naps < 20 else _NAP_LONG), 0)
            naps += 1
        atomic_add(base + 8 * _SLEEPERS, -1)


@njit(nogil=True, cache=CACHE)
def _guards_hold(base, guards, count):
    """Whether each of a row's ``count`` guards (``(address, copy, nbytes)`` int64 rows) holds its copy."""
    memcmp = atomic_load(base + 8 * _MEMCMP)
    for g in range(count):
        if call4_i32(memcmp, load_i64_at(guards, 3 * g), load_i64_at(guards, 3 * g + 1),
                     load_i64_at(guards, 3 * g + 2), 0) != 0:
            return False
    return True


@cfunc(types.void(*[types.int64] * 10), nogil=True, cache=CACHE)
def _splitter(base, items, count, chunks, slots, guards, guard_count, _a7, _a8, _a9):
    if guard_count != 0 and not _guards_hold(base, guards, guard_count):
        # a footprint launch's index data or arguments changed: its verdict no longer holds, so the row
        # runs serially on this thread, its launches in order and each one's chunks in task order
        for chunk in range(chunks):
            _run_chunk(items, count, chunk, 0)
        return
    claim = base + 8 * _CLAIM
    generation = ((atomic_load(claim) >> 32) + 1) & 0x7FFFFFFF
    atomic_store(base + 8 * _ITEMS, items)
    atomic_store(base + 8 * _COUNT, count)
    atomic_store(base + 8 * _CHUNKS, chunks)
    atomic_store(base + 8 * _ROW_SLOTS, slots)
    atomic_store(base + 8 * _DONE, 0)
    atomic_store(claim, generation << 32)  # publishes the row
    atomic_add(base + 8 * _SEQ, 1)
    if atomic_load(base + 8 * _NAP) == 0 and atomic_load(base + 8 * _SLEEPERS) > 0:  # napping ones wake alone
        call10(atomic_load(base + 8 * _SYSCALL), atomic_load(base + 8 * _FUTEX_NR), base + 8 * _SEQ, _FUTEX_WAKE,
               0x7FFFFFFF, 0, 0, 0, 0, 0, 0)
    _help(base, generation, 0)
    spins = 0
    while atomic_load(base + 8 * _DONE) < chunks:  # chunks claimed by workers, still running
        spins += 1
        if spins > 1000:
            call0_i32(atomic_load(base + 8 * _YIELD))  # let a descheduled worker finish its chunk


def unavailable() -> str | None:
    """Why split launches cannot run here (None when they can)."""
    wait = host_os.wait_primitive() if _pool is None else _pool.wait  # a bad APIC_WAIT: its ValueError
    if wait is None:
        return f"parallel replay needs Linux futexes or a C library with nanosleep; this is {sys.platform}"
    if _FAMILY is None:
        return f"parallel replay supports {' and '.join(FAMILY_NAMES)} CPUs; this is {platform.machine()}"
    return None


class _Pool:
    """The control block and the worker threads (started on demand; again in a forked child)."""

    def __init__(self) -> None:
        self._owner = np.zeros(_SLOTS + 8, dtype=np.int64)
        pad = (-self._owner.ctypes.data % 64) // 8
        self.block = self._owner[pad : pad + _SLOTS]
        self.base = self.block.ctypes.data
        self.wait = host_os.wait_primitive()  # "futex" or "portable"
        if self.wait is None:
            raise RuntimeError(unavailable())
        futex = self.wait == "futex"
        self.block[_SYSCALL] = host_os.c_function("syscall") if futex else 0
        self.block[_FUTEX_NR] = host_os.futex_syscall() if futex else 0
        self.block[_NAP] = 0 if futex else host_os.c_function("nanosleep")
        self.block[_NAP_SHORT + 1], self.block[_NAP_LONG + 1] = 50_000, 1_000_000  # tv_nsec: 50 us, then 1 ms
        self.block[_YIELD] = host_os.c_function("sched_yield")
        self.block[_MEMCMP] = host_os.c_function("memcmp")
        self.started = 0
        self.pid = os.getpid()

    def forget_workers(self) -> None:
        """After a fork, in the child: the workers did not come along, so none is asleep or allowed to
        help. The control block keeps its address (and generation: a row the parent had in flight is
        never resumed, the next one starts a new generation); the next :meth:`ensure` starts workers."""
        self.started, self.pid = 0, os.getpid()
        self.block[_SLEEPERS] = 0
        self.block[_ACTIVE] = 0

    def ensure(self, workers: int) -> None:
        if self.pid != os.getpid():  # forked by a route that ran no at-fork hook
            self.forget_workers()
        while self.started < workers:
            threading.Thread(target=_worker, args=(self.base, self.started), daemon=True,
                             name=f"apic-split-{self.started}").start()
            self.started += 1


_pool: _Pool | None = None


def pool() -> _Pool:
    """The process's pool (its control block is what ``OP_SPLIT`` rows point to)."""
    global _pool
    if _pool is None:
        _pool = _Pool()
    return _pool


def chunks_run_by_workers() -> int:
    """How many chunks of split launches pooled workers (not the replaying thread) have run so far."""
    return ctypes.c_int64.from_address(pool().base + 8 * _HELPED).value


def splitter_address() -> int:
    """The address of the native splitter (an ``OP_SPLIT`` row's function)."""
    return _splitter.address


@contextlib.contextmanager
def workers(threads: int):
    """Run the enclosed replay's split launches on ``threads`` threads (the caller and ``threads - 1``
    pooled workers), or on as many as can run (``thread_count.running``: no more than the usable CPUs)."""
    helpers = thread_count.running(threads) - 1
    with lock:
        p = pool()
        p.ensure(helpers)
        p.block[_ACTIVE] = helpers
        yield


def _after_fork_in_child() -> None:
    # The forking thread is the child's only thread: the parent's other threads, and so any holder of
    # the lock (a split replay in flight), are gone. A new lock, and a pool that starts its workers again.
    global lock
    lock = threading.Lock()
    if _pool is not None:
        _pool.forget_workers()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
