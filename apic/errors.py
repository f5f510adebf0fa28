"""apic's exceptions. Each is also the built-in type a Warp user would expect to catch."""

from __future__ import annotations


class ApicError(Exception):
    """Base class of every error apic raises on purpose."""


class CaptureError(ApicError, RuntimeError):
    """A capture cannot proceed (nested capture, wrong device, unknown memory, ...)."""


class UnsupportedOperationError(ApicError, NotImplementedError):
    """An operation issued during a capture that apic cannot record. The message names it, and the capture as
    upstream Warp does ("during a CPU APIC graph capture")."""

    def __init__(self, operation: str, hint: str = "", capture: str = "CPU APIC"):
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


class GraphMemoryError(ApicError, MemoryError, RuntimeError):
    """A loaded graph needs more memory than this process may give it (its regions are allocated up front).

    Also a ``RuntimeError``, which is what upstream Warp's ``capture_load`` raises for any failed load.
    """


class GraphLoadError(ApicError, OSError, RuntimeError):
    """A saved graph's file cannot be read (missing, unreadable): "Failed to load APIC graph from <path>.wrp".

    An ``OSError`` (with the original ``errno`` and ``filename``) as before, and a ``RuntimeError``, which is
    what upstream Warp's ``capture_load`` raises for a missing file.
    """

    def __str__(self) -> str:
        # the message alone, as upstream prints it (OSError's default adds "[Errno N]" and the path)
        return self.strerror if self.strerror else super().__str__()


class GraphNotFoundError(GraphLoadError, FileNotFoundError):
    """The saved graph's ``.wrp`` file does not exist (a ``GraphLoadError`` and a ``FileNotFoundError``)."""


class LoopLimitError(ApicError, RuntimeError):
    """A replayed ``capture_while`` loop ran more iterations than ``apic.max_loop_iterations()`` allows."""


class ReplayError(ApicError, RuntimeError):
    """A replay stopped at an operation whose inputs in graph memory are invalid (a segmented sort's range).

    A ``RuntimeError``, as upstream Warp's ``capture_launch`` raises: "CPU graph replay failed: ...".
    """


class ReplayIndexError(ReplayError, IndexError):
    """A loaded graph's replay stopped before native code would use a value of graph memory out of range:
    an indexed array's index, a Mesh's triangle index, or an array of handle ids holding something else
    than the id of a handle of the kinds its kernel took (a ``ReplayError``)."""
