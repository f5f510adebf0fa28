"""The serial interpreter as one relocatable native object, which a later process loads without Numba.

Numba compiles ``_serial_entry`` (the loop of ``interpreter.run_rows``, on raw pointers) once; this
module then takes the machine code of that compilation: the module is copied, given a plain C entry
point, every other symbol made internal, optimized again (which drops Numba's unused runtime helpers)
and emitted as an object for this CPU. ``native_interpreter.py`` keeps it in apic's cache and loads it
with Warp's CPU loader. The object must need nothing of Numba's runtime: the only external symbols
allowed are the C library's memory functions, which Warp's loader resolves for its own kernels too;
anything else fails the build (``NativeBuildError``) and replays keep the Numba dispatcher.

The C entry (named ``native_interpreter.ENTRY_SYMBOL``) takes one pointer: ctypes converts each
argument of a call, on every ``wp.capture_launch``, so there is one::

    int64_t apic_serial_run(const int64_t call[CALL_WORDS])  /* table, rows, repeats, limits, loops, counts */

It runs ``table`` (``rows`` rows of ``table.OP_COLUMNS``, an address) ``repeats`` times as
``interpreter.run_table`` does and returns its ``STATUS_*`` code, or the error status it is given
(``native_interpreter.STATUS_NATIVE_ERROR``) should Numba's code report an error (it raises none).
``limits`` is the address of ``table.LIMITS_SIZE`` int64 (``table.LIMIT_*``); ``counts`` that of one
zeroed int64 per loop head (``loops``, at least one).
"""

from __future__ import annotations

import llvmlite.binding as ll
from numba import carray, njit, types

from apic.replay.cpu import table as _table
from apic.replay.cpu.interpreter import run_rows

CALL_WORDS = 6  # the call block: table, rows, repeats, limits, loops, counts
# Symbols the object may leave to the loader: the C library's memory functions (LLVM emits calls
# to them for large copies and fills), which Warp resolves for its kernels' objects too.
ALLOWED_EXTERNALS = frozenset({"memset", "memcpy", "memmove"})

_P64 = types.CPointer(types.int64)
_SIGNATURE = types.int64(_P64, types.int64, types.int64, _P64, types.int64, _P64)


class NativeBuildError(RuntimeError):
    """The serial interpreter could not be made into a self-contained object."""


def _serial_entry(table, rows, repeats, limits, loops, counts):
    grid = carray(table, (rows, _table.OP_COLUMNS))
    slots = carray(counts, (max(loops, 1),))
    return run_rows(grid, repeats, carray(limits, (_table.LIMITS_SIZE,)), slots, 0, 0, None, None)


def _compile():
    """Numba's compilation of the entry: its code library and the native function's name."""
    # no wrappers: neither a Python one nor Numba's C one (which reports errors through the C-API)
    dispatcher = njit(_SIGNATURE, nogil=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)(_serial_entry)
    result = dispatcher.overloads[_SIGNATURE.args]
    return result.library, result.fndesc.mangled_name


def _wrapper_ir(native, entry: str, error_status: int) -> str:
    """The C entry: read the call block's words, call Numba's native function (status, return slot,
    exception slot, arguments) and return its result, or ``error_status`` on an error status."""
    params = list(native.arguments)
    ret_type, exc_type = str(params[0].type), str(params[1].type)
    arg_types = [str(p.type) for p in params[2:]]
    declared = ", ".join(str(p.type) for p in params)
    # the return and exception slots' own types: typed pointers (older LLVM) name them, opaque ones do not
    ret_slot = ret_type[:-1] if ret_type.endswith("*") else "i64"
    exc_slot = exc_type[:-1] if exc_type.endswith("*") else "ptr"
    block_type = "i64*" if ret_type.endswith("*") else "ptr"
    reads = []
    for k, t in enumerate(arg_types):
        reads.append(f"  %at{k} = getelementptr i64, {block_type} %block, i64 {k}")
        reads.append(f"  %w{k} = load i64, {block_type} %at{k}")
        reads.append(f"  %a{k} = inttoptr i64 %w{k} to {t}" if t != "i64" else f"  %a{k} = add i64 %w{k}, 0")
    actuals = ", ".join(f"{t} %a{k}" for k, t in enumerate(arg_types))
    body = "\n".join(reads)
    return f"""
declare i32 @"{native.name}"({declared})

define i64 @{entry}({block_type} %block) {{
entry:
  %ret = alloca {ret_slot}
  %exc = alloca {exc_slot}
  store {ret_slot} 0, {ret_type} %ret
  store {exc_slot} null, {exc_type} %exc
{body}
  %status = call i32 @"{native.name}"({ret_type} %ret, {exc_type} %exc, {actuals})
  %value = load {ret_slot}, {ret_type} %ret
  %ok = icmp eq i32 %status, 0
  %out = select i1 %ok, i64 %value, i64 {error_status}
  ret i64 %out
}}
"""


def _target_machine():
    """This CPU, position-independent code (Warp's loader may place the object anywhere)."""
    target = ll.Target.from_triple(ll.get_process_triple())
    return target.create_target_machine(cpu=ll.get_host_cpu_name(), features=ll.get_host_cpu_features().flatten(),
                                        opt=3, reloc="pic", codemodel="default")


def _externals(module) -> list[str]:
    """The symbols ``module`` uses without defining (intrinsics aside)."""
    names = [f.name for f in module.functions if f.is_declaration and not f.name.startswith("llvm.")]
    return sorted(names + [g.name for g in module.global_variables if g.is_declaration])


def build_object(entry: str, error_status: int) -> bytes:
    """The serial interpreter as a relocatable object for this CPU, its C entry named ``entry``, which
    returns ``error_status`` should Numba's code report an error.

    Raises ``NativeBuildError`` when the code would need any symbol outside ``ALLOWED_EXTERNALS``.
    """
    library, native_name = _compile()
    module = ll.parse_assembly(str(library._final_module))  # a copy: Numba's own module stays as it is
    module.link_in(ll.parse_assembly(_wrapper_ir(module.get_function(native_name), entry, error_status)))
    for function in module.functions:
        if not function.is_declaration and function.name != entry:
            function.linkage = "internal"
    for variable in module.global_variables:
        if not variable.is_declaration:
            variable.linkage = "internal"
    machine = _target_machine()
    builder = ll.create_pass_builder(machine, ll.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)
    cleanup = ll.create_new_module_pass_manager()
    cleanup.add_global_dead_code_eliminate_pass()
    cleanup.add_strip_dead_prototype_pass()
    cleanup.run(module, builder)
    module.verify()
    unknown = [name for name in _externals(module) if name not in ALLOWED_EXTERNALS]
    if unknown:
        raise NativeBuildError(f"the native serial interpreter would need {', '.join(unknown)}")
    if module.get_function(entry).is_declaration:
        raise NativeBuildError("the native serial interpreter lost its entry point")
    return machine.emit_object(module)
