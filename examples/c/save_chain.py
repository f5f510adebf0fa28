"""Capture the demo scene's step (a falling mass-spring chain), save it, and export it to a C library.

    python examples/c/save_chain.py build/chain      # writes build/chain.wrp and build/chain/lib...

Then build and run the C program with CMake (examples/c/README.md).
"""

import os
import sys

import warp as wp

import apic
from apic.demo import Chain
from apic.c_library.library import export

stem = sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "chain")
os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
wp.config.quiet = True
chain = Chain(particles=32, substeps=8)
with wp.ScopedCapture(device="cpu", apic=True) as capture:
    chain.step()
apic.capture_save(capture.graph, stem, inputs={"x": chain.x, "v": chain.v})
for path in export(stem + ".wrp", stem, name="chain").values():
    print(path)
