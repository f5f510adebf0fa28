"""The default CPU backend: the native serial interpreter, loaded from apic's cache without importing Numba
(``apic.replay.cpu.native_interpreter``; built with Numba when the cache has none for this key), or, where it
cannot be had, the Numba dispatcher of the same loop (``apic.replay.cpu.interpreter``)."""

from __future__ import annotations

from apic.replay.cpu import native_interpreter
from apic.replay.backends.cpu import CpuBackend


class CpuNative(CpuBackend):
    name = "cpu_native"

    def _bind_interpreter(self) -> None:
        try:
            self._native = native_interpreter.load_serial_run()
        except Exception:  # noqa: BLE001 - no native object here (build or loader failed): the dispatcher runs it
            from apic.replay.cpu.interpreter import run_table  # lazy: importing Numba costs about a second

            self._run_table, self._pooled, self._native = run_table, True, False


BACKEND = CpuNative()
