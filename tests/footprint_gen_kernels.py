"""Kernels generated from a hypothesis draw, for the differential test of the footprint evaluator
(``tests/parallel/test_footprint_differential.py``; docs/PARALLEL.md, "Why a footprint split cannot race").

A generated kernel takes fixed arguments (:data:`SIGNATURE`): int32, uint32 and int8 scalars, index arrays of
int32, int8, uint8, uint32 and bool, a float array, and two float arrays it writes, ``out`` and ``acc``
(64 elements). Its body is drawn: integer expressions across the builtins and integer types the evaluator
meets (arithmetic, shifts, bit operations, ``//`` and ``%``, ``min``/``max``/``abs``, conversions
``int()``/``wp.int8()``/``wp.uint8()``/``wp.uint32()``, fixed-width arithmetic on int8, uint8 and uint32
values, reads of the index arrays at drawn indices), conditions on them and on floats and written elements,
``if``/``else``, ``for`` loops with drawn bounds, arrays chosen per task (in a branch, by ``pick``), and the
helpers of ``footprint_gen_funcs`` (a default bound there). Every store writes ``t * 1024 + k + 0.5`` (k the
store's number) and every atomic adds 1.0, so a task's writes change what they write: comparing memory
finds them all. Every index is masked into bounds (``& 63``, ``& 15``); divisors are ``(e & 7) + 1``.
"""

from __future__ import annotations

import importlib.util
import sys

from hypothesis import strategies as st

SIGNATURE = ("n: int, u: wp.uint32, w: wp.uint32, b8: wp.int8, idx: wp.array(dtype=int), "
             "s8: wp.array(dtype=wp.int8), u8: wp.array(dtype=wp.uint8), u32: wp.array(dtype=wp.uint32), "
             "flag: wp.array(dtype=wp.bool), x: wp.array(dtype=float), out: wp.array(dtype=float), "
             "acc: wp.array(dtype=float)")
HEADER = ("import warp as wp\n\nfrom footprint_gen_funcs import mix, narrow, pick, put_at\n\n"
          "FAR = 1  # not the default put_at was defined with\n\n\n@wp.kernel\ndef generated({signature}):\n"
          "    t = wp.tid()\n")
WRITTEN = ("out", "acc")
INDEX_LENGTH, WRITTEN_LENGTH = 16, 64


class _Source:
    """One kernel's body, drawn statement by statement."""

    def __init__(self, draw) -> None:
        self.draw = draw
        self.lines: list[str] = []
        self.names = ["t"]  # int32 names in scope
        self.stores = 0
        self.loops = 0
        # > 0 while drawing a condition: fixed-width values (unknown to the evaluator, which then follows both
        # ways) appear there; an index drawn from one would refuse the launch, so indices rarely hold them
        self.in_condition = 0

    def choice(self, options):
        return self.draw(st.sampled_from(options))

    def index(self, depth: int) -> str:
        return f"(({self.expr(depth)}) & {INDEX_LENGTH - 1})"

    def typed(self, depth: int) -> str:
        """An expression of int8, uint8 or uint32 (wrapping at its width), converted to int32."""
        i, j = self.index(depth), self.index(depth)
        return self.choice([
            f"int(s8[{i}])", f"int(u8[{i}])", f"int(u32[{i}])", "int(u)", "int(b8)",
            f"int(s8[{i}] + s8[{j}])", f"int(u8[{i}] * u8[{j}])", f"int(u32[{i}] - u)", "int(u - w)",
            f"int(s8[{i}] >> wp.int8(1))", f"int(wp.int8({self.expr(depth)}))", f"int(wp.uint8({self.expr(depth)}))",
            f"int(wp.uint32({self.expr(depth)}) - w)", f"narrow(wp.uint8({self.expr(depth)}))"])

    def expr(self, depth: int = 0) -> str:
        """An int32 expression."""
        if depth >= 3 or self.draw(st.integers(0, 3)) == 0:
            kind = self.draw(st.integers(0, 5))
            if kind == 0:
                if self.draw(st.integers(0, 15)) == 0:  # rarely: one that overflows int32 when added to
                    return self.choice(["2147483647", "-2147483647"])
                return str(self.draw(st.integers(-3, 40)))
            if kind == 1:
                return self.choice(["n", "len(idx)", "idx.shape[0]"])
            return self.choice(self.names)
        d = depth + 1
        kind = self.draw(st.integers(0, 9))
        if kind in (0, 7):
            return f"idx[{self.index(d)}]"
        if kind in (1, 8, 9):
            rarely = self.draw(st.integers(0, 3 if self.in_condition else 15)) == 0
            return self.typed(d) if rarely else self.expr(d)
        if kind == 2:
            op = self.choice(["+", "-", "*", "&", "|", "^"])
            return f"({self.expr(d)} {op} {self.expr(d)})"
        if kind == 3:  # a negative dividend is not followed (Warp's // and % differ from Python's there)
            op = self.choice(["//", "%"])
            left = self.expr(d) if self.draw(st.integers(0, 3)) == 0 else f"({self.expr(d)} & 1023)"
            return f"({left} {op} (({self.expr(d)} & 7) + 1))"
        if kind == 4:
            shift = self.choice(["<< ((", ">> (("])
            return f"({self.expr(d)} {shift}{self.expr(d)}) & {7 if shift[0] == '<' else 31}))"
        if kind == 5:
            f = self.choice(["min", "max", "mix", "abs"])
            return f"{f}({self.expr(d)}, {self.expr(d)})" if f != "abs" else f"abs({self.expr(d)})"
        return f"({self.expr(d)} if {self.condition(d)} else {self.expr(d)})"

    def condition(self, depth: int = 0) -> str:
        self.in_condition += 1
        try:
            return self._condition(depth)
        finally:
            self.in_condition -= 1

    def _condition(self, depth: int) -> str:
        kind = self.draw(st.integers(0, 9))
        d = depth + 1
        if kind <= 2 or kind >= 7:
            op = self.choice(["<", "<=", "==", "!=", ">"])
            return f"{self.expr(d)} {op} {self.expr(d)}"
        if kind == 3:
            i, j = self.index(d), self.index(d)
            return self.choice([f"u32[{i}] > u", f"s8[{i}] + s8[{j}] < b8", "u - w > u", f"u8[{i}] + u8[{j}] < u8[{j}]"])
        if kind == 4:
            return self.choice([f"x[{self.index(d)}] > 0.5", f"flag[{self.index(d)}]",
                                f"out[({self.expr(d)}) & {WRITTEN_LENGTH - 1}] > 0.0"])
        if kind == 5 and depth < 2:
            return f"({self.condition(d)}) {self.choice(['and', 'or'])} ({self.condition(d)})"
        return f"not ({self.expr(d)} < 0)"

    def value(self) -> str:
        self.stores += 1
        return f"float(t * 1024 + {self.stores}) + 0.5"

    def slot(self) -> str:
        if self.draw(st.booleans()):  # the task's own pair of elements (up to 32 tasks): a launch that may split
            return f"(t * 2 + (({self.expr()}) & 1)) & {WRITTEN_LENGTH - 1}"
        return f"({self.expr()}) & {WRITTEN_LENGTH - 1}"

    def block(self, indent: int, depth: int) -> None:
        for _ in range(self.draw(st.integers(1, 3 if depth else 4))):
            self.statement(indent, depth)

    def statement(self, indent: int, depth: int) -> None:
        pad = "    " * indent
        kind = self.draw(st.integers(0, 8 if depth < 2 else 3))
        if kind in (4, 5) and self.draw(st.integers(0, 3)):  # an array chosen per task: refused, so rarely
            kind = 1
        if kind == 0:
            name = f"v{len(self.names)}"
            self.lines.append(f"{pad}{name} = {self.expr()}")
            if depth == 0:  # a name bound in a block is used only there (Warp needs it bound on every way)
                self.names.append(name)
        elif kind == 1:
            self.lines.append(f"{pad}{self.choice(WRITTEN)}[{self.slot()}] = {self.value()}")
        elif kind == 2:
            self.lines.append(f"{pad}wp.atomic_add({self.choice(WRITTEN)}, {self.slot()}, 1.0)")
        elif kind == 3:
            self.lines.append(f"{pad}put_at({self.choice(WRITTEN)}, {self.expr()}, {self.value()})")
        elif kind == 4:  # an array chosen per task
            self.lines.append(f"{pad}arr = out")
            self.lines.append(f"{pad}if {self.condition()}:")
            self.lines.append(f"{pad}    arr = acc")
            self.lines.append(f"{pad}arr[{self.slot()}] = {self.value()}")
        elif kind == 5:
            self.lines.append(f"{pad}chosen = pick({self.condition()}, out, acc)")
            self.lines.append(f"{pad}chosen[{self.slot()}] = {self.value()}")
        elif kind in (6, 7):
            self.lines.append(f"{pad}if {self.condition()}:")
            self.block(indent + 1, depth + 1)
            if self.draw(st.booleans()):
                self.lines.append(f"{pad}else:")
                self.block(indent + 1, depth + 1)
        else:
            self.loops += 1
            name = f"i{self.loops}"
            low = self.draw(st.sampled_from(["0", "t & 1", f"idx[{self.index(2)}] & 3"]))
            self.lines.append(f"{pad}for {name} in range({low}, ({self.expr(1)} & 3) + 1):")
            self.names.append(name)
            self.block(indent + 1, depth + 1)
            self.names.remove(name)


@st.composite
def kernel_sources(draw) -> str:
    """The source of a module holding one generated kernel, ``generated``."""
    source = _Source(draw)
    source.block(1, 0)
    return HEADER.format(signature=SIGNATURE) + "\n".join(source.lines) + "\n"


def load(source: str, folder, name: str):
    """The kernel ``generated`` of ``source``, written as module ``name`` into ``folder`` and imported."""
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.generated
