"""A seed with control flow over two Warp modules: a ``capture_while`` whose body launches kernels
over arrays and a ``capture_if`` with both branches (kernels from this module and from persist_kernels,
so the saved graph holds more than one module)."""

from __future__ import annotations

import os

import numpy as np
import warp as wp

import apic  # noqa: F401  (installs the capture shims)


@wp.kernel
def _add(x: wp.array(dtype=float), v: float):
    i = wp.tid()
    x[i] = x[i] + v


@wp.kernel
def _less_than(x: wp.array(dtype=float), bound: float, flag: wp.array(dtype=wp.int32)):
    flag[0] = wp.where(x[0] < bound, 1, 0)


def save_control(folder: str, other_kernel) -> str:
    """Capture and save the control-flow seed into ``folder/control.wrp``; ``other_kernel(x, dst, s)`` is a
    kernel from another module, launched in the ``capture_if`` branch."""
    cpu = "cpu"
    x = wp.array(np.linspace(-1.0, 1.0, 16, dtype=np.float32), device=cpu)
    flag = wp.zeros(1, dtype=wp.int32, device=cpu)
    other = wp.zeros(16, dtype=float, device=cpu)
    with wp.ScopedCapture(device=cpu, apic=True) as cap:
        wp.launch(_less_than, dim=1, inputs=[x, 4.0, flag], device=cpu)

        def body():
            wp.launch(_add, dim=16, inputs=[x, 1.5], device=cpu)
            wp.launch(_less_than, dim=1, inputs=[x, 4.0, flag], device=cpu)

        wp.capture_while(flag, body)
        wp.launch(_less_than, dim=1, inputs=[x, 5.0, flag], device=cpu)
        wp.capture_if(flag, on_true=lambda: wp.launch(other_kernel, dim=16, inputs=[x, other, 2.0], device=cpu),
                      on_false=lambda: other.fill_(3.0))
    wp.capture_save(cap.graph, os.path.join(folder, "control"), inputs={"x": x}, outputs={"other": other})
    return os.path.join(folder, "control.wrp")
