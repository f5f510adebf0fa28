"""The undo log of apic's patches on warp, and the hook a capture calls before it begins.

Both sit at the bottom of the package so that every module that patches warp (the shims, the CUDA
recording, the capture API) can use them while only ``apic.installation``, at the top, decides what is
installed and when.
"""

from __future__ import annotations

from typing import Callable

from apic.errors import CaptureError


class Patches:
    """A log of attribute replacements that can be undone exactly, in reverse order."""

    def __init__(self) -> None:
        self._log: list[tuple[object, str, bool, object]] = []

    def __bool__(self) -> bool:
        return bool(self._log)

    def set(self, owner, name: str, value) -> None:
        """Set ``owner.name = value``, remembering whether ``owner`` had its own ``name`` and its value."""
        own = vars(owner)
        self._log.append((owner, name, name in own, own.get(name)))
        setattr(owner, name, value)

    def restore(self) -> None:
        """Undo every replacement, newest first: an attribute ``owner`` did not have is deleted again."""
        while self._log:
            owner, name, had_own, original = self._log.pop()
            if had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)


# What must be in place before a capture begins (the native sinks, which need an initialised runtime and
# so are installed at the first capture): set by ``apic.installation.install``, cleared by ``uninstall``.
_before_capture: Callable[[bool], None] | None = None


def set_before_capture(hook: Callable[[bool], None] | None) -> None:
    """Register ``hook(cuda)``, called by every capture before it begins (None: apic is uninstalled)."""
    global _before_capture
    _before_capture = hook


def before_capture(cuda: bool) -> None:
    """Make ready for a capture (``cuda``: an ``apic=True`` CUDA recording); refuses while uninstalled."""
    if _before_capture is None:
        raise CaptureError("apic is uninstalled; call apic.install() first")
    _before_capture(cuda)
