"""The command-line interface. Each subcommand is a module here with ``add_parser`` and ``run``.

Only the CLI prints. User mistakes (a missing or unreadable file, a bad argument, a name the graph does
not have, a value that does not fit, a refused graph) end with one line, ``error: <message>``, on
stderr and exit status 2, without a traceback; the message is escaped to one line (it may quote a
string from a hostile file). So does any other exception (Python's, Warp's, a library's), its type named
in the line (``APIC_TRACEBACK=1`` shows its traceback instead). Output paths are opened for writing
before the work, and a write that fails names the file. Ctrl-C ends with exit status 130, also without
a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import platform
import sys
from importlib import metadata

# Set (to anything) to see the traceback of an unexpected error instead of its one line.
TRACEBACK_VARIABLE = "APIC_TRACEBACK"

# Subcommand modules, in the order ``--help`` lists them.
SUBCOMMANDS = ["demo", "bench", "replay", "inspect_wrp", "export"]


class UserError(Exception):
    """A mistake the user can fix; reported without a traceback."""


class _Version(argparse.Action):
    """``--version``: apic's version, then the warp-lang and Python it runs with (for bug reports)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print apic's version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        # lazy: importing any apic module imports apic, and so Warp (a quick --help)
        from apic._version import __version__

        try:
            warp = metadata.version("warp-lang")
        except metadata.PackageNotFoundError:
            warp = "not installed"
        print(f"apic {__version__} (warp-lang {warp}, Python {platform.python_version()})")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its mistakes reported as every other: one ``error:`` line, exit status 2 (the usage
    is one ``--help`` away, named in the line). Subcommand parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, _error_line(f"{message} (see {self.prog} --help)") + "\n")


def int_option(lo: int, hi: int | None = None):
    """An argparse ``type`` for an integer option in ``[lo, hi]`` (``hi`` None: no upper bound): out of range
    is argparse's usage error (exit 2, before any work), not a failure deep in the run."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if hi is None and value < lo:
            raise argparse.ArgumentTypeError(f"must be {lo} or more, got {text}")
        if hi is not None and not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}, got {text}")
        return value

    parse.__name__ = "integer"  # what argparse names the type in its messages
    return parse


def check_graph_path(path: str) -> None:
    """Refuse a path that names an existing file other than a graph's ``.wrp`` (a ``.npy``, a script):
    the loader would look for ``<path>.wrp`` and report that missing, which hides the mistake."""
    if path and not path.endswith(".wrp") and os.path.isfile(path) and not os.path.exists(path + ".wrp"):
        raise UserError(f"{path} is not a saved graph: name its .wrp file (wp.capture_save writes <stem>.wrp, "
                        "and <stem>_modules/ beside it)")


def check_output_path(where: str, path: str) -> None:
    """Refuse, before any work, an output path that cannot be written: a folder, in a folder that does not
    exist, or one the system will not open for writing (a read-only file system, a name too long, no
    permission), found by opening it: an existing file is opened without truncating it, a new one is
    created and removed again (``where``: the option, for the message). What opens but refuses writes is
    found by writing: nothing to an existing file (an empty write changes no file, pipe or terminal, and
    fails where every write would, as on ``/dev/full``), one byte to a new one (a full disk)."""
    if os.path.isdir(path):
        raise UserError(f"{where}: is a folder; name a file to write")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UserError(f"{where}: the folder {folder} does not exist")
    existed = os.path.lexists(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | (0 if existed else os.O_CREAT | os.O_EXCL), 0o666)
    except OSError as error:
        raise UserError(f"{where}: cannot write the file: {error.strerror or error}") from None
    try:
        os.write(fd, b"" if existed else b"\0")
    except OSError as error:
        raise UserError(f"{where}: cannot write the file: {error.strerror or error}") from None
    finally:
        os.close(fd)
        if not existed:  # the file this check created, removed again
            with contextlib.suppress(OSError):
                os.unlink(path)


@contextlib.contextmanager
def naming(where: str):
    """An I/O error inside (disk full, file too large) becomes a ``UserError`` naming the option and the
    file (``where``), not a bare errno message."""
    try:
        yield
    except OSError as error:
        raise UserError(f"{where}: cannot write the file: {error.strerror or error}") from None


def write_output(where: str, path: str, *chunks) -> None:
    """Write the bytes-like ``chunks`` into the file ``path``, every byte or an error naming it (``naming``).

    Unbuffered, each short write continued until the system refuses one: a buffered writer (and NumPy's
    ``tofile`` under ``np.save``) let a file-size limit cut an output short with no error at all."""
    with naming(where), open(path, "wb", buffering=0) as f:
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            while view:
                written = f.write(view)
                if not written:
                    raise OSError(errno.EIO, "the system wrote nothing")
                view = view[written:]


def _error_line(error) -> str:
    """``error: <message>`` on one line: a message can quote a string from the file or the command line."""
    from apic._text import one_line  # lazy: importing any apic module imports apic, and so Warp (a quick --help)

    return f"error: {one_line(error)}"


def _stdout_closed() -> int:
    """The reader of our output went away (``inspect ... | head``): stop quietly, as other tools do."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush at exit then has nowhere to fail
    except (OSError, ValueError):
        pass
    return 1


def main(argv=None) -> int:
    parser = _Parser(
        prog="python -m apic",
        description=(
            "apic: capture, save, inspect and replay NVIDIA Warp graphs (python -m apic COMMAND --help for a command)"
        ),
    )
    parser.add_argument("--version", action=_Version)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"apic.cli.{name}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(_run=module.run)
    args = parser.parse_args(argv)
    try:
        code = args._run(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except (UserError, OSError) as error:
        print(_error_line(error), file=sys.stderr)
        return 2
    except Exception as error:
        from apic.errors import ApicError  # lazy: any apic module imports apic, and so Warp (a quick --help)

        if isinstance(error, ApicError):
            print(_error_line(error), file=sys.stderr)
            return 2
        if os.environ.get(TRACEBACK_VARIABLE):
            raise
        # not a refusal apic words itself (Python's, Warp's, a library's): one line still, its type named
        print(_error_line(f"{type(error).__name__}: {error} (run with {TRACEBACK_VARIABLE}=1 for a traceback)"),
              file=sys.stderr)
        return 2
