"""``python -m apic``: the command-line interface (see ``apic.cli``)."""

import sys

from apic.cli import main

sys.exit(main())
