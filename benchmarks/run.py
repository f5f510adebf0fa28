"""Run the dispatch-overhead suite from a checkout: ``python -m benchmarks.run`` is ``python -m apic bench``.

The suite itself is part of the package (``apic/bench/``), so an installed apic runs it too.
"""

from __future__ import annotations

import sys

from apic.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
