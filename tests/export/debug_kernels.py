"""A module built in Warp's debug mode (its kernels' asserts compiled in), for the export's assertion test."""

import warp as wp

wp.set_module_options({"mode": "debug"})


@wp.kernel
def checked_double(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    assert x[i] < 5.0
    y[i] = x[i] * 2.0
