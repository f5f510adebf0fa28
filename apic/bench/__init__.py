"""The dispatch-overhead benchmark suite behind ``python -m apic bench`` (part of the installed package).

Results, figures and the other measurement scripts live in the repository's ``benchmarks/`` folder.
"""
