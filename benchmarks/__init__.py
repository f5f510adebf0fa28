"""apic's dispatch-overhead benchmark suite (run it with ``python -m apic bench``).

``workloads`` defines what is run, ``methods`` the ways of running it (eager Warp, prebuilt
``Launch`` objects, apic replay live and saved-then-loaded, Warp's own CPU replay, and a native
floor from ``floor``), and ``run`` times them in interleaved rounds and returns plain data. Nothing
here prints: the command line (``apic/cli/bench.py``) renders the results.
"""
