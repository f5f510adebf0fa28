"""Opt-in multi-threaded CPU launches, bit-identical to Warp's serial task loop or not split at all.

:func:`launch` is ``wp.launch`` on the CPU with a ``threads`` argument: when the kernel is proved
splittable (:func:`apic.record.parallel.splittable.kernel_verdict`), no array it writes overlaps another array
argument, every written array is contiguous, and the launch has at least ``min_tasks_per_thread``
tasks per thread, its tasks ``[0, n)`` run as ``threads`` contiguous ranges through the range entry
of :mod:`apic.replay.parallel.range_entry`; otherwise it is one ordinary ``wp.launch``. It returns whether it
split, so callers (and tests) can see the decision.

Graphs use the same verdict and range entries through the op table instead (``wp.capture_launch(graph,
threads=N)``, :mod:`apic.replay.parallel.split_pool`); this launch-level form runs its ranges on Python threads.
"""

from __future__ import annotations

import ctypes

import warp as wp

from apic import _compat
from apic.replay.parallel import range_entry, thread_count
from apic.record.parallel.splittable import kernel_verdict, launch_arrays_disjoint
from apic.targets import cpu as cpu_target

# Below this many tasks per thread, starting threads costs more than the tasks (tens of microseconds).
MIN_TASKS_PER_THREAD = 4096


def _array_span(a) -> tuple[int, int]:
    """``(address, bytes)`` covered by a Warp array (its extent, strides included)."""
    if a.size == 0:
        return (int(a.ptr or 0), 0)
    last = sum((s - 1) * st for s, st in zip(a.shape, a.strides))
    return (int(a.ptr), last + wp.types.type_size_in_bytes(a.dtype))


def _split_refusal(kernel, inputs) -> str | None:
    """Why this launch must stay serial, or None when it may be split."""
    verdict = kernel_verdict(kernel)
    if not verdict.splittable:
        return verdict.reason
    written, others = [], []
    for var, value in zip(kernel.adj.args, inputs):
        if isinstance(value, wp.array):
            if value.device is None or not value.device.is_cpu:
                return f"argument {var.label} is not on the CPU"
            span = _array_span(value)
            if var.label in verdict.written:
                if not value.is_contiguous:
                    return f"written array {var.label} is not contiguous"
                written.append(span)
            else:
                others.append(span)
        elif not isinstance(value, (int, float, bool)) and not wp.types.is_value(type(value)):
            return f"argument {var.label} is neither an array nor a value"
    if not launch_arrays_disjoint(written, others):
        return "a written array overlaps another array argument"
    return None


def prepare(kernel, dim, inputs, threads: int = 2, min_tasks_per_thread: int = MIN_TASKS_PER_THREAD):
    """Prepare a CPU launch for repeated issue; returns ``(run, split)``.

    ``run()`` issues the launch (split over threads when that is provably exact, else Warp's own
    recorded launch); ``split`` says which. The arrays in ``inputs`` must outlive ``run``.

    ``threads`` is an ``int`` >= 1 (else ``ValueError``); the launch runs on at most as many OS threads
    as the process may use (``apic.replay.parallel.thread_count.running``), whatever it asks for.
    """
    threads = thread_count.running(thread_count.check(threads))
    thread_count.check(min_tasks_per_thread, "min_tasks_per_thread")
    record = wp.launch(kernel, dim=dim, inputs=inputs, device="cpu", record_cmd=True)
    kernel = record.kernel  # the overload a generic kernel resolved to
    size = record.bounds.size
    # As many threads as have min_tasks_per_thread tasks each; fewer than two is not worth a thread.
    threads = min(threads, size // max(min_tasks_per_thread, 1))
    if threads < 2 or _split_refusal(kernel, inputs) is not None:
        return record.launch, False
    params = record.params
    fields = [(var.label, type(params[1 + i])) for i, var in enumerate(kernel.adj.args)]
    args_type = type("ArgsStruct", (ctypes.Structure,), {"_fields_": fields})
    args = args_type()
    for i, (label, _) in enumerate(fields):
        setattr(args, label, params[1 + i])
    module_exec = next(
        m
        for m in kernel.module.execs.values()
        if m is not None and any(h is record.hooks for h in m.kernel_hooks.values())
    )
    symbol = _compat.kernel_symbol(module_exec, kernel, adjoint=False)[: -len(cpu_target.KERNEL_SUFFIX[False])]
    try:
        address = range_entry.range_entry(kernel.module.name, module_exec, symbol)
    except LookupError:  # no range object can be built here: Warp's own launch, serial
        return record.launch, False
    bounds_ptr, args_ptr = ctypes.addressof(params[0]), ctypes.addressof(args)

    def run() -> None:
        # record and args keep the bounds and the argument struct alive as long as run is.
        range_entry.run_split(address, bounds_ptr, args_ptr, size, threads, _keep=(record, args))

    return run, True


def launch(kernel, dim, inputs, threads: int = 2, min_tasks_per_thread: int = MIN_TASKS_PER_THREAD) -> bool:
    """Launch ``kernel`` on the CPU, its tasks split over ``threads`` threads when that is provably exact
    (at most as many as can run: see :func:`prepare`).

    Returns True when the launch ran split, False when it ran as one ordinary Warp launch.
    """
    run, split = prepare(kernel, dim, inputs, threads, min_tasks_per_thread)
    run()
    return split
