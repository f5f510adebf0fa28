"""Numba intrinsics that call a C function through a pointer held as runtime data.

Every argument is passed as a 64-bit integer. That is exact for pointers and ``size_t`` and safe for
C ``int``/``bool`` parameters on the platforms Warp supports (x86-64 SysV and Win64, AArch64), where
an integer argument occupies a whole register and the callee reads only its low bits. Return values
are ignored: declaring a ``bool``-returning function ``void`` is ABI-safe, it only leaves a register
unread. Function addresses arrive as array data, never as globals, so ``cache=True`` stays correct.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

_I64 = ir.IntType(64)


def _codegen(context, builder, signature, llargs):
    """Emit ``inttoptr`` + ``call``: the first argument is the function address, the rest its i64 args."""
    arity = len(llargs) - 1
    fnty = ir.FunctionType(ir.VoidType(), [_I64] * arity)
    target = builder.inttoptr(llargs[0], fnty.as_pointer())
    values = [context.cast(builder, v, t, types.int64) for v, t in zip(llargs[1:], signature.args[1:])]
    builder.call(target, values)
    return context.get_dummy_value()


def _typed_call(*arg_types):
    """Typing shared by every arity: integers only (anything else is not ours: return None)."""
    if not all(isinstance(t, types.Integer) for t in arg_types):
        return None
    return types.void(*arg_types), _codegen


def _codegen_i32(context, builder, signature, llargs):
    """As ``_codegen``, for a function returning a C ``int`` (a CUDA driver call's ``CUresult``): its value."""
    arity = len(llargs) - 1
    fnty = ir.FunctionType(ir.IntType(32), [_I64] * arity)
    target = builder.inttoptr(context.cast(builder, llargs[0], signature.args[0], types.int64), fnty.as_pointer())
    values = [context.cast(builder, v, t, types.int64) for v, t in zip(llargs[1:], signature.args[1:])]
    return builder.call(target, values)


def _typed_call_i32(*arg_types):
    if not all(isinstance(t, types.Integer) for t in arg_types):
        return None
    return types.int32(*arg_types), _codegen_i32


@intrinsic
def call1_i32(typingctx, fn, a0):
    return _typed_call_i32(fn, a0)


@intrinsic
def call2_i32(typingctx, fn, a0, a1):
    return _typed_call_i32(fn, a0, a1)


@intrinsic
def call4_i32(typingctx, fn, a0, a1, a2, a3):
    return _typed_call_i32(fn, a0, a1, a2, a3)


@intrinsic
def call11_i32(typingctx, fn, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10):
    """``cuLaunchKernel``'s eleven arguments (its ``unsigned int`` ones as 64-bit integers: see above)."""
    return _typed_call_i32(fn, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10)


@intrinsic
def call1(typingctx, fn, a0):
    return _typed_call(fn, a0)


@intrinsic
def call0_i32(typingctx, fn):
    """Call ``int fn(void)`` and return its result (``PyGILState_Ensure``, ``PyOS_InterruptOccurred``)."""
    if not isinstance(fn, types.Integer):
        return None

    def codegen(context, builder, signature, llargs):
        fnty = ir.FunctionType(ir.IntType(32), [])
        target = builder.inttoptr(context.cast(builder, llargs[0], signature.args[0], types.int64), fnty.as_pointer())
        return builder.call(target, [])

    return types.int32(fn), codegen


@intrinsic
def call2(typingctx, fn, a0, a1):
    return _typed_call(fn, a0, a1)


@intrinsic
def call3(typingctx, fn, a0, a1, a2):
    return _typed_call(fn, a0, a1, a2)


@intrinsic
def call4(typingctx, fn, a0, a1, a2, a3):
    return _typed_call(fn, a0, a1, a2, a3)


@intrinsic
def call5(typingctx, fn, a0, a1, a2, a3, a4):
    return _typed_call(fn, a0, a1, a2, a3, a4)


@intrinsic
def call10(typingctx, fn, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9):
    return _typed_call(fn, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9)


@intrinsic
def call_argv20(typingctx, fn, argv):
    """Call ``fn`` with the 20 int64 arguments stored at the integer address ``argv``."""
    if not (isinstance(fn, types.Integer) and isinstance(argv, types.Integer)):
        return None

    def codegen(context, builder, signature, llargs):
        fnty = ir.FunctionType(ir.VoidType(), [_I64] * 20)
        base = builder.inttoptr(context.cast(builder, llargs[1], signature.args[1], types.int64), _I64.as_pointer())
        values = [builder.load(builder.gep(base, [ir.Constant(_I64, k)]), align=1) for k in range(20)]
        target = builder.inttoptr(context.cast(builder, llargs[0], signature.args[0], types.int64), fnty.as_pointer())
        builder.call(target, values)
        return context.get_dummy_value()

    return types.void(fn, argv), codegen


@intrinsic
def call5_d2(typingctx, fn, a0, a1, a2, a3, a4):
    """Call ``fn(a0, a1, (double)a2, a3, a4)``: ``a2`` holds the bits of a C double (a hash grid radius)."""
    if not all(isinstance(t, types.Integer) for t in (fn, a0, a1, a2, a3, a4)):
        return None

    def codegen(context, builder, signature, llargs):
        double = ir.DoubleType()
        fnty = ir.FunctionType(ir.VoidType(), [_I64, _I64, double, _I64, _I64])
        target = builder.inttoptr(llargs[0], fnty.as_pointer())
        values = [context.cast(builder, v, t, types.int64) for v, t in zip(llargs[1:], signature.args[1:])]
        values[2] = builder.bitcast(values[2], double)
        builder.call(target, values)
        return context.get_dummy_value()

    return types.void(fn, a0, a1, a2, a3, a4), codegen


@intrinsic
def load_i32(typingctx, address):
    """The int32 at an integer ``address`` (any alignment): a branch condition in graph memory."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, llargs):
        value = context.cast(builder, llargs[0], signature.args[0], types.int64)
        return builder.load(builder.inttoptr(value, ir.IntType(32).as_pointer()), align=1)

    return types.int32(address), codegen


def _load_at(width: int):
    """The codegen of a load of the ``width``-bit integer ``index`` places after an integer address."""
    element = ir.IntType(width)

    def codegen(context, builder, signature, llargs):
        base = context.cast(builder, llargs[0], signature.args[0], types.int64)
        at = context.cast(builder, llargs[1], signature.args[1], types.int64)
        return builder.load(builder.gep(builder.inttoptr(base, element.as_pointer()), [at]), align=1)

    return codegen


@intrinsic
def load_i64_at(typingctx, address, index):
    """The int64 ``index`` places after an integer ``address`` (any alignment): a word of handle ids."""
    if not (isinstance(address, types.Integer) and isinstance(index, types.Integer)):
        return None
    return types.int64(address, index), _load_at(64)


@intrinsic
def store_i64_at(typingctx, address, index, value):
    """Store the int64 ``value`` ``index`` places after an integer ``address`` (a CUDA block's word)."""
    if not all(isinstance(t, types.Integer) for t in (address, index, value)):
        return None

    def codegen(context, builder, signature, llargs):
        base = context.cast(builder, llargs[0], signature.args[0], types.int64)
        at = context.cast(builder, llargs[1], signature.args[1], types.int64)
        v = context.cast(builder, llargs[2], signature.args[2], types.int64)
        builder.store(v, builder.gep(builder.inttoptr(base, _I64.as_pointer()), [at]), align=1)
        return context.get_dummy_value()

    return types.void(address, index, value), codegen


@intrinsic
def load_i32_at(typingctx, address, index):
    """The int32 ``index`` places after an integer ``address`` (any alignment): an index buffer's entry."""
    if not (isinstance(address, types.Integer) and isinstance(index, types.Integer)):
        return None
    return types.int32(address, index), _load_at(32)


# --- atomics on int64 words at integer addresses (the parallel replay's pool, ``split_pool.py``) -----
def _address_i64(context, builder, signature, llargs, index=0):
    value = context.cast(builder, llargs[index], signature.args[index], types.int64)
    return builder.inttoptr(value, _I64.as_pointer())


@intrinsic
def atomic_load(typingctx, address):
    """The int64 at ``address``, read with acquire ordering."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, llargs):
        return builder.load_atomic(_address_i64(context, builder, signature, llargs), "acquire", 8)

    return types.int64(address), codegen


@intrinsic
def atomic_store(typingctx, address, value):
    """Store the int64 ``value`` at ``address`` with release ordering."""
    if not (isinstance(address, types.Integer) and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, llargs):
        v = context.cast(builder, llargs[1], signature.args[1], types.int64)
        builder.store_atomic(v, _address_i64(context, builder, signature, llargs), "release", 8)
        return context.get_dummy_value()

    return types.void(address, value), codegen


@intrinsic
def atomic_add(typingctx, address, value):
    """Add ``value`` to the int64 at ``address`` (sequentially consistent); the old value."""
    if not (isinstance(address, types.Integer) and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, llargs):
        v = context.cast(builder, llargs[1], signature.args[1], types.int64)
        return builder.atomic_rmw("add", _address_i64(context, builder, signature, llargs), v, "seq_cst")

    return types.int64(address, value), codegen


@intrinsic
def atomic_cas(typingctx, address, expected, value):
    """Compare-and-swap the int64 at ``address`` (sequentially consistent); the value found there."""
    if not all(isinstance(t, types.Integer) for t in (address, expected, value)):
        return None

    def codegen(context, builder, signature, llargs):
        e = context.cast(builder, llargs[1], signature.args[1], types.int64)
        v = context.cast(builder, llargs[2], signature.args[2], types.int64)
        pair = builder.cmpxchg(_address_i64(context, builder, signature, llargs), e, v, "seq_cst", "seq_cst")
        return builder.extract_value(pair, 0)

    return types.int64(address, expected, value), codegen


@intrinsic
def now_ns(typingctx, fn, clock_id):
    """``clock_gettime(clock_id, &ts)`` through the function address ``fn``; ``ts`` as nanoseconds."""
    if not (isinstance(fn, types.Integer) and isinstance(clock_id, types.Integer)):
        return None

    def codegen(context, builder, signature, llargs):
        timespec = ir.LiteralStructType([_I64, _I64])  # struct timespec on 64-bit Linux
        slot = builder.alloca(timespec)
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), timespec.as_pointer()])
        target = builder.inttoptr(context.cast(builder, llargs[0], signature.args[0], types.int64), fnty.as_pointer())
        clock = builder.trunc(context.cast(builder, llargs[1], signature.args[1], types.int64), ir.IntType(32))
        builder.call(target, [clock, slot])
        zero = ir.Constant(ir.IntType(32), 0)
        sec = builder.load(builder.gep(slot, [zero, zero]))
        nsec = builder.load(builder.gep(slot, [zero, ir.Constant(ir.IntType(32), 1)]))
        return builder.add(builder.mul(sec, ir.Constant(_I64, 1_000_000_000)), nsec)

    return types.int64(fn, clock_id), codegen
