"""The footprint evaluator run on a kernel's AST alone, over NumPy arrays (no launch): what the footprint tests
use to see what it claims, or refuses, for given argument values."""

from __future__ import annotations

import numpy as np

from apic.record.parallel.footprint import written_params
from apic.record.parallel.footprint_eval import Array, Evaluation, View


def evaluate(kernel, values: dict, tasks: int) -> Evaluation:
    """Evaluate ``kernel`` over ``tasks`` tasks with ``values`` (NumPy arrays stand for its arrays, at their
    addresses; anything else is a scalar), within the evaluator's step budget of 100,000."""
    written = written_params(kernel)
    args = {label: View(Array(label, v.ctypes.data, v.shape, v.strides, v.dtype, label in written))
            if isinstance(v, np.ndarray) else v for label, v in values.items()}
    evaluation = Evaluation(kernel, args, (tasks,), 100_000)
    evaluation.run()
    return evaluation
