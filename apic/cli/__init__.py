"""The command-line interface. Each subcommand is a module here with ``add_parser`` and ``run``.

Only the CLI prints. User mistakes (a missing file, a bad argument, a refused graph) end with a
message on stderr and exit status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
from importlib import metadata

# Subcommand modules, in the order ``--help`` lists them.
SUBCOMMANDS = ["demo", "bench", "replay", "inspect_wrp"]


class UserError(Exception):
    """A mistake the user can fix; reported without a traceback."""


class _Version(argparse.Action):
    """``--version``: apic's version, then the warp-lang and Python it runs with (for bug reports)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print apic's version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from apic._version import __version__  # lazy: importing any apic module imports apic, and so Warp (a quick --help)

        try:
            warp = metadata.version("warp-lang")
        except metadata.PackageNotFoundError:
            warp = "not installed"
        print(f"apic {__version__} (warp-lang {warp}, Python {platform.python_version()})")
        parser.exit()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m apic",
        description="apic: capture, save, inspect and replay NVIDIA Warp graphs (python -m apic COMMAND --help for a command)",
    )
    parser.add_argument("--version", action=_Version)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"apic.cli.{name}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(_run=module.run)
    args = parser.parse_args(argv)
    try:
        return args._run(args) or 0
    except (UserError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        from apic.errors import ApicError  # lazy: any apic module imports apic, and so Warp (a quick --help)

        if isinstance(error, ApicError):
            print(f"error: {error}", file=sys.stderr)
            return 2
        raise
