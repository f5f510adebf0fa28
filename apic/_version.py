"""apic's version (here, at the bottom of the package, so that the writers can name it without importing apic)."""

__version__ = "0.1.0"
