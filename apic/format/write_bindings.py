"""The named bindings of a graph being saved: ``capture_save``'s ``inputs`` and ``outputs`` checked and turned
into ``Binding`` records (``collect_bindings``), and their wire form (``binding_wire``, ``scalar_binding_wire``),
which ``apic.format.writer`` puts into the body."""

from __future__ import annotations

from apic.errors import BindingError
from apic.record.bindings import Binding, make_binding
from apic.targets import target as targets


def target_of(recording) -> targets.Target:
    """The target a recording's kernels were compiled for (from its ABI tag)."""
    target = targets.of_abi(recording.abi)
    if target is None:
        raise ValueError(f"cannot save a graph with kernel ABI {recording.abi!r}: no target of apic calls its kernels")
    return target


def binding_wire(binding: Binding) -> dict:
    """A named array binding on the wire (docs/FORMAT.md, bindings)."""
    return {
        "name": binding.name, "kind": binding.kind, "region": binding.region, "offset": binding.offset,
        "nbytes": binding.nbytes, "dtype": binding.dtype, "shape": list(binding.shape),
        "strides": list(binding.strides), "elem_size": binding.elem_size, "np_dtype": binding.np_dtype,
        "elem_shape": list(binding.elem_shape),
    }


def scalar_binding_wire(param, value: bytes) -> dict:
    """A named scalar parameter on the wire (format 3): its type and value; the launch blobs list its slots."""
    return {"name": param.name, "kind": "scalar", "dtype": param.dtype, "nbytes": param.nbytes,
            "np_dtype": param.np_dtype, "elem_shape": list(param.elem_shape), "value": bytes(value)}


def named_arrays(inputs, outputs):
    """``(kind, name, array)`` for each entry of ``capture_save``'s ``inputs`` and ``outputs``."""
    seen = set()
    for kind, mapping in (("input", inputs), ("output", outputs)):
        if mapping is None:
            continue
        if not hasattr(mapping, "items"):
            raise TypeError(f"{kind}s must be a dict mapping names to Warp arrays, got {type(mapping).__name__}")
        for name, arr in mapping.items():
            if name in seen:
                raise ValueError(f"binding name '{name}' is used twice (in inputs and outputs)")
            seen.add(name)
            yield kind, name, arr


def collect_bindings(graph, inputs, outputs) -> list[Binding]:
    """The named bindings of ``inputs`` and ``outputs`` (name -> Warp array) for ``graph``."""
    regions = graph.recording.regions
    scalars = {p.name for p in graph.recording.params}
    device = None if target_of(graph.recording) is targets.CPU else graph.device  # CPU: any CPU array
    found: dict[str, Binding] = {}
    for kind, name, arr in named_arrays(inputs, outputs):
        if name in scalars:
            raise BindingError(f"{kind} '{name}': the graph has a named scalar parameter '{name}' (apic.param); "
                               "an array binding cannot take its name")
        found[name] = make_binding(name, kind, arr, regions, graph.region_addresses, device)
    # A loaded graph saved again keeps its parameters, unless a new binding takes the name.
    kept = [b for name, b in getattr(graph, "bindings", {}).items() if name not in found]
    return kept + list(found.values())
