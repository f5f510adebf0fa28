"""A child of ``test_native_interpreter.py``: a 10-launch graph, launched (or saved, or loaded and
launched), compared with eager Warp on a second array; it reports what the process imported.

Run as ``python native_replay_child.py launch|save|load [path]`` (a file: Warp reads kernels' source).
"""
import json
import sys
import numpy as np
import warp as wp
wp.config.quiet = True
import apic  # noqa: E402  (after Warp is told to be quiet)

@wp.kernel
def step(a: wp.array(dtype=float), k: float):
    i = wp.tid()
    a[i] = a[i] * k + 0.1 * float(i)

mode, path = sys.argv[1], sys.argv[2]
start = np.linspace(-1.0, 1.0, 64, dtype=np.float32)
eager = wp.array(start, device="cpu")
for n in range(10):
    wp.launch(step, dim=64, inputs=[eager, 1.0 + 0.01 * n], device="cpu")
live = wp.array(start, device="cpu")
with wp.ScopedCapture(device="cpu", apic=True) as capture:
    for n in range(10):
        wp.launch(step, dim=64, inputs=[live, 1.0 + 0.01 * n], device="cpu")
if mode == "save":
    apic.capture_save(capture.graph, path, outputs={"a": live})
elif mode == "launch":
    wp.capture_launch(capture.graph)
else:
    graph = apic.capture_load(path)
    wp.capture_launch(graph)
    graph.get_param("a", live)
same = live.numpy().tobytes() == eager.numpy().tobytes()
print(json.dumps({"same": same, "numba": "numba" in sys.modules, "llvmlite": "llvmlite" in sys.modules}))
