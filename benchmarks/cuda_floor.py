"""The floor of a loaded CUDA graph's op-by-op replay: the same ``cuLaunchKernel`` calls, made by one C loop.

``benchmarks/cuda_replay.py`` times it beside apic's op-by-op replay (``launch_vs_floor``: the target is
within 1.2x per node). The loop (``FLOOR_SOURCE``) is compiled at run time with the system's C compiler;
where there is none (a bare GPU image), the same loop written in LLVM IR is compiled with llvmlite (which
Numba brings), and ``Floor.compiler`` says which. ``tests/cuda/test_cuda_rows.py`` checks, against the
stand-in driver library, that both make the calls apic's rows make, argument for argument.
"""

from __future__ import annotations

import ctypes

import numpy as np

# ``w`` holds 10 words per launch (function, grid x y z, block x y z, shared memory, stream, kernelParams);
# the loop makes the graph's context current, calls cuLaunchKernel for each launch, and pops the context.
FLOOR_SOURCE = r"""
#include <stdint.h>
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                        void **, void **);
typedef int (*push_t)(uint64_t);
typedef int (*pop_t)(uint64_t *);

int64_t apic_floor_run(uint64_t launch, uint64_t push, uint64_t pop, uint64_t context, const uint64_t *w,
                       int64_t n) {
    uint64_t popped;
    int err = ((push_t)push)(context);
    if (err) return err;
    for (int64_t i = 0; i < n && !err; i++, w += 10)
        err = ((launch_t)launch)((void *)w[0], (unsigned)w[1], (unsigned)w[2], (unsigned)w[3], (unsigned)w[4],
                                 (unsigned)w[5], (unsigned)w[6], (unsigned)w[7], (void *)w[8], (void **)w[9], 0);
    ((pop_t)pop)(&popped);
    return err;
}
"""
_SIGNATURE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                              ctypes.c_void_p, ctypes.c_int64)
_ENGINES: list = []  # llvmlite's engines: the code they made lives as long as they do


def _built_with_cc(folder: str):
    from benchmarks.cuda_standin import build

    return _SIGNATURE(ctypes.cast(ctypes.CDLL(build(FLOOR_SOURCE, folder, "apic_cuda_floor")).apic_floor_run,
                                  ctypes.c_void_p).value)


def _built_with_llvmlite():
    """``FLOOR_SOURCE``'s loop in LLVM IR (every word an i64, the unsigned ones truncated to i32 as C does)."""
    import llvmlite.binding as ll
    from llvmlite import ir

    i32, i64 = ir.IntType(32), ir.IntType(64)
    module = ir.Module(name="apic_cuda_floor")
    module.triple = ll.get_process_triple()
    fn = ir.Function(module, ir.FunctionType(i64, [i64] * 4 + [i64.as_pointer(), i64]), name="apic_floor_run")
    launch, push, pop, context, words, n = fn.args
    entry, failed, loop, body, done = (fn.append_basic_block(k) for k in ("entry", "failed", "loop", "body", "done"))
    b = ir.IRBuilder(entry)
    pushed = b.call(b.inttoptr(push, ir.FunctionType(i32, [i64]).as_pointer()), [context])
    b.cbranch(b.icmp_signed("!=", pushed, ir.Constant(i32, 0)), failed, loop)
    b.position_at_end(failed)  # the context could not be pushed: nothing to pop
    b.ret(b.sext(pushed, i64))
    b.position_at_end(loop)
    i = b.phi(i64)
    err = b.phi(i32)
    i.add_incoming(ir.Constant(i64, 0), entry)
    err.add_incoming(ir.Constant(i32, 0), entry)
    b.cbranch(b.and_(b.icmp_signed("<", i, n), b.icmp_signed("==", err, ir.Constant(i32, 0))), body, done)
    b.position_at_end(body)
    word = [b.load(b.gep(words, [b.add(b.mul(i, ir.Constant(i64, 10)), ir.Constant(i64, k))])) for k in range(10)]
    launch_type = ir.FunctionType(i32, [i64] + [i32] * 7 + [i64, i64, i64])
    args = [word[0], *[b.trunc(w, i32) for w in word[1:8]], word[8], word[9], ir.Constant(i64, 0)]
    result = b.call(b.inttoptr(launch, launch_type.as_pointer()), args)
    i.add_incoming(b.add(i, ir.Constant(i64, 1)), body)
    err.add_incoming(result, body)
    b.branch(loop)
    b.position_at_end(done)
    slot = b.alloca(i64)
    b.call(b.inttoptr(pop, ir.FunctionType(i32, [i64.as_pointer()]).as_pointer()), [slot])
    b.ret(b.sext(err, i64))
    ll.initialize_native_target()
    ll.initialize_native_asmprinter()
    machine = ll.Target.from_default_triple().create_target_machine(opt=2)
    engine = ll.create_mcjit_compiler(ll.parse_assembly(str(module)), machine)
    engine.finalize_object()
    _ENGINES.append(engine)
    return _SIGNATURE(engine.get_function_address("apic_floor_run"))


class Floor:
    """The floor of a loaded graph's op-by-op replay (``FLOOR_SOURCE``): its kernel launches, in one native loop.

    ``entries`` are the driver's entry points (``apic.replay.cuda.rows.driver_entries``); by default the
    graph's own. A graph with copies or memsets is refused (the floor would leave them out) unless
    ``launches_only``. ``compiler``: ``"cc"`` (the C source; the default where a C compiler is found) or
    ``"llvmlite"`` (the same loop in LLVM IR). Raises ``RuntimeError`` where the entry points cannot be had."""

    def __init__(self, graph, folder: str, entries=None, launches_only: bool = False, compiler=None) -> None:
        from apic.replay.cuda import rows as cuda_rows
        from benchmarks.cuda_standin import compiler as c_compiler

        entries = entries or cuda_rows.driver_entries(graph._cu)
        if not entries:
            raise RuntimeError("the CUDA driver library's entry points cannot be had here")
        self.compiler = compiler or ("cc" if c_compiler() else "llvmlite")
        self._run = _built_with_cc(folder) if self.compiler == "cc" else _built_with_llvmlite()
        stream = int(graph._resources.stream)
        words = [[int(fn), *grid, *block, smem, stream, params]
                 for kind, fn, grid, block, smem, params in (s for s in graph._plan if s[0] == "kernel")]
        if len(words) != len(graph._plan) and not launches_only:
            raise RuntimeError("the C floor makes kernel launches only: this graph has copies or memsets too")
        self.launches = np.array(words, dtype=np.uint64).reshape(-1, 10)
        self._args = (entries["launch"], entries["push"], entries["pop"], int(graph._resources.context),
                      self.launches.ctypes.data, len(self.launches))
        self.graph = graph  # the launches use its memory, kernels and kernelParams arrays

    def run(self) -> None:
        """Make every launch once (raises where the driver returns an error)."""
        err = self._run(*self._args)
        if err:
            raise RuntimeError(f"the floor's cuLaunchKernel returned CUresult {err}")
