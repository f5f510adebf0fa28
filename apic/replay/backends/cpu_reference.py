"""The reference CPU backend (``APIC_REPLAY=reference``): the pure-Python interpreter of
``apic.replay.cpu.reference``, a second implementation of every opcode that must leave each graph's memory
as the native one does, bit for bit (microseconds per op: a check, not a replay path)."""

from __future__ import annotations

from apic.replay.cpu import reference
from apic.replay.backends.cpu import CpuBackend


class CpuReference(CpuBackend):
    name = "cpu_reference"

    def _bind_interpreter(self) -> None:
        # no Numba: the point is a second implementation; it runs OP_SPLIT rows itself (no pool)
        self._run_table, self._pooled, self._native = reference.run_table, False, False


BACKEND = CpuReference()
