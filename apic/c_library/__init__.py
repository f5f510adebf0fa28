"""A saved CPU graph exported to a C shared library that runs with no Python (docs/EXPORT.md):
``apic.c_library.library.export`` and ``python -m apic export``. Modules: ``from_graph`` (what is read of a loaded
graph), ``relocatable`` (its table and arena without addresses), ``emit`` (the C sources and package files),
``toolchain`` (the C compiler that links them), ``library`` (the export itself); the runtime's C sources are in
``c/``."""
