"""apic's exceptions. Each is also the built-in type a Warp user would expect to catch."""

from __future__ import annotations


class ApicError(Exception):
    """Base class of every error apic raises on purpose."""


class CaptureError(ApicError, RuntimeError):
    """A capture cannot proceed (nested capture, wrong device, unknown memory, ...)."""


class UnsupportedOperationError(ApicError, NotImplementedError):
    """An operation issued during a capture that apic cannot record. The message names it."""

    def __init__(self, operation: str, hint: str = "", capture: str = "CPU"):
        message = f"apic cannot record '{operation}' during a {capture} graph capture"
        if hint:
            message += f": {hint}"
        super().__init__(message)
        self.operation = operation


class FormatError(ApicError, ValueError, RuntimeError):
    """A .wrp file (or byte string) is corrupt, truncated, foreign or of an unsupported version.

    Also a ``RuntimeError``, which is what upstream Warp's ``capture_load`` raises for a bad file.
    """


class BindingError(ApicError, ValueError, RuntimeError):
    """A named binding was used with the wrong name, size, dtype or shape.

    Also a ``RuntimeError``, which is what upstream Warp raises for an unknown name or a size mismatch.
    """


class IncompatibleGraphError(ApicError, RuntimeError):
    """A saved graph cannot run safely in this process (other CPU, OS, or native struct layouts)."""


class GraphMemoryError(ApicError, MemoryError):
    """A loaded graph needs more memory than this process may give it (its regions are allocated up front)."""


class LoopLimitError(ApicError, RuntimeError):
    """A replayed ``capture_while`` loop ran more iterations than ``apic.max_loop_iterations()`` allows."""
