"""Where Numba keeps apic's compiled replay loops (``cache=True``): the user's cache folder.

Numba's default is ``__pycache__`` beside the source wherever that folder is writable: for an installed
apic, inside site-packages, where ``pip uninstall`` leaves the files behind (an ``apic/`` folder without
``__init__.py``, which then imports as an empty namespace package). For apic's own files, Numba uses its
per-user cache folder instead (``$XDG_CACHE_HOME/numba``, by default ``~/.cache/numba``; a
``NUMBA_CACHE_DIR`` still comes first), which also lets apic run from a read-only install. Other
packages' functions keep Numba's own order.

Where no cache folder is writable (a container user without a home), ``CACHE`` is False: the jitted
modules then compile in memory, once per process (a few seconds), where ``cache=True`` would have made
their import fail. A cache write that fails later (a full disk) leaves the function compiled in memory.
"""

from __future__ import annotations

import contextlib
import os

from numba.core import caching

# the apic package folder: this locator serves its files only
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _numba_class(name: str):
    """One of Numba's caching classes (recent Numba releases dropped the leading underscore of their names)."""
    return getattr(caching, name, None) or getattr(caching, "_" + name, None)


_USER_WIDE = _numba_class("UserWideCacheLocator")
_USER_PROVIDED = _numba_class("UserProvidedCacheLocator")


def _probe():
    """A function of apic's package (``apic/replay/cpu``), where every jitted function of apic lives."""


def _install() -> bool:
    """Put apic's files in Numba's user-wide cache folder; whether a cache folder is writable."""
    impl = _numba_class("CacheImpl")
    if _USER_WIDE is None or _USER_PROVIDED is None or not isinstance(getattr(impl, "_locator_classes", None), list):
        return True  # a Numba whose caching this does not know: keep its default (``__pycache__`` or user-wide)

    class ApicUserCacheLocator(_USER_WIDE):
        """Numba's user-wide cache folder, for apic's files only."""

        @classmethod
        def from_function(cls, py_func, py_file):
            if (os.path.dirname(os.path.abspath(py_file)) + os.sep).startswith(_PACKAGE + os.sep):
                return super().from_function(py_func, py_file)
            return None

    classes = impl._locator_classes
    if not any(c.__name__ == ApicUserCacheLocator.__name__ for c in classes):  # once, even if re-imported
        # after NUMBA_CACHE_DIR's locator (the user's explicit choice), before the one beside the source
        classes.insert(classes.index(_USER_PROVIDED) + 1 if _USER_PROVIDED in classes else 0, ApicUserCacheLocator)
    locators = (_USER_PROVIDED, ApicUserCacheLocator)
    return any(locator.from_function(_probe, __file__) is not None for locator in locators)


def _serves_apic(cache) -> bool:
    """Whether a Numba ``Cache`` keeps a function of apic's package."""
    code = getattr(getattr(cache, "_py_func", None), "__code__", None)
    return code is not None and (
        (os.path.dirname(os.path.abspath(code.co_filename)) + os.sep).startswith(_PACKAGE + os.sep)
    )


def _tolerate_io_errors() -> None:
    """Make a cache file of apic's that cannot be written or read (a full disk, a file-size limit, a folder
    gone read-only after the check above) cost a compile in memory, never the replay: Numba saves an
    overload after adding it to the dispatcher, and its guard around cache I/O swallows errors on Windows
    only, so a failed write raised out of the first call of a replay loop. Other packages' functions keep
    Numba's behaviour."""
    cache_class = _numba_class("Cache")
    original = getattr(cache_class, "_guard_against_spurious_io_errors", None)
    if original is None or getattr(original, "apic_tolerant", False):
        return  # a Numba whose caching this does not know, or done already (apic imported again)

    @contextlib.contextmanager
    def guard(self):
        if not _serves_apic(self):
            with original(self):
                yield
            return
        try:
            with original(self):
                yield
        except OSError:
            pass  # the overload is compiled and in use: only its copy on disk is lost (a load: compiled again)

    guard.apic_tolerant = True
    cache_class._guard_against_spurious_io_errors = guard


CACHE = _install()  # pass as ``cache=`` to every njit / cfunc of apic
_tolerate_io_errors()
