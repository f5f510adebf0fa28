"""The feature probes behind ``apic._compat``, by job (``internals``, ``cpu``, ``cuda``).

Import the names from ``apic._compat``, which re-exports every one: it stays the one place that says
how supported warp-lang versions differ. This package imports none of its modules: importing one imports
the package first, so a package that imported its modules would be an import cycle.
"""
