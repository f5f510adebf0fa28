"""The C toolchain an export links with: the system's C compiler driver (``$CC``, else ``cc``, ``gcc`` or
``clang``), which compiles the runtime and links it with the graph's kernel objects into a shared library."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

from apic._probes import host_os
from apic.errors import ApicError

INSTALL_HINT = ("install a C compiler and linker (Debian/Ubuntu: apt-get install gcc; Fedora: dnf install gcc; "
                "conda: conda install -c conda-forge c-compiler), or name one with the CC environment variable")


class ToolchainError(ApicError, RuntimeError):
    """No C compiler to link the export with, or it failed (its output in the message)."""


def compiler() -> list[str]:
    """The C compiler's command (``$CC`` split like a shell, else the first of cc, gcc, clang on PATH)."""
    named = os.environ.get("CC")
    if named:
        words = shlex.split(named)
        if words and shutil.which(words[0]):
            return [shutil.which(words[0]), *words[1:]]
        raise ToolchainError(f"CC={named!r} names no program on PATH; {INSTALL_HINT}")
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return [found]
    raise ToolchainError(f"apic export needs a C compiler to link the library and found none (cc, gcc, clang); "
                         f"{INSTALL_HINT}")


def check_system(system: str | None = None) -> None:
    """Refuse (``ToolchainError``) a system (default: this one) whose modules are not ELF objects: the export
    links them with the GNU linker's options into a Linux shared library (a ``.dylib`` of Mach-O objects on
    macOS would need ld64's options instead: not done)."""
    system = sys.platform if system is None else system
    found = host_os.object_format(system)
    if found != "ELF":
        raise ToolchainError(f"apic export links ELF objects into a shared library with the GNU linker's options; "
                             f"this system ({system}) compiles {found} objects, which it does not link yet")


def run(command: list[str], folder: str, what: str) -> None:
    """Run ``command`` in ``folder``; a ``ToolchainError`` with its output if it fails."""
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ToolchainError(f"{what} failed: {error}") from error
    if done.returncode:
        output = (done.stderr or done.stdout).strip()[-3000:]
        raise ToolchainError(f"{what} failed ({' '.join(command[:1])} exited with {done.returncode}):\n{output}")


def link(folder: str, sources: list[str], objects: list[str], prefix: str, output: str, libraries=()) -> None:
    """Compile ``sources`` (in ``folder``) and link them with ``objects`` into the shared library ``output``.

    Every symbol the kernels need must resolve within the library, the C library or libm
    (``--no-undefined``): a kernel that needs more of Warp's runtime fails here, naming the symbol."""
    cc = compiler()
    command = [*cc, "-shared", "-fPIC", "-O2", "-std=gnu11", f"-DAPIC_PREFIX={prefix}",
               "-I.", "-o", output, *sources, *objects, "-Wl,--no-undefined", "-Wl,-z,noexecstack",
               "-Wl,--version-script=exports.map", "-pthread", "-lm", *libraries]
    run(command, folder, "linking the exported library")
