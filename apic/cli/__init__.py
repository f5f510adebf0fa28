"""The command-line interface. Each subcommand is a module here with ``add_parser`` and ``run``.

Only the CLI prints. User mistakes (a missing file, a bad argument, a refused graph) end with a
message on stderr and exit status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, in the order ``--help`` lists them.
SUBCOMMANDS = ["demo", "bench", "replay", "inspect_wrp"]


class UserError(Exception):
    """A mistake the user can fix; reported without a traceback."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apic", description=__doc__.splitlines()[0])
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
