"""The named-parameter API every apic graph has, CPU or CUDA, live or loaded, as ``warp.Graph`` in Warp 1.19.

``params``, ``set_param``, ``get_param`` and ``get_param_ptr`` find the parameter, refuse with the same errors on
both kinds of graph, and leave the copy to the graph's backend (``apic.replay.backends``): its ``write_binding`` /
``read_binding`` move data between a user array and the graph's memory (host memory for a CPU graph, device memory
for a CUDA one), and ``_set_scalar`` writes a named scalar parameter (``apic.param``; CPU graphs only).
"""

from __future__ import annotations

from apic.errors import BindingError
from apic.record.params import unpack


class NamedParams:
    """Array bindings (``bindings``: name -> ``apic.record.bindings.Binding``, loaded graphs) and named scalar
    parameters (``scalars``: name -> ``apic.record.params.ScalarParam``, with their packed ``param_values``)."""

    bindings: dict = {}
    scalars: dict = {}
    param_values: dict = {}
    is_loaded = False

    @property
    def params(self) -> dict:
        """Parameter name -> ``{"size": bytes, "kind", "dtype", "shape", "strides"}`` for the array bindings of a
        loaded graph, and ``{"size", "kind": "scalar", "dtype", "shape": (), "value"}`` for each named scalar."""
        found = {name: b.describe() for name, b in self.bindings.items()}
        found.update((name, p.describe(self.param_values[name])) for name, p in self.scalars.items())
        return found

    def _binding(self, name: str, method: str):
        """The array binding ``name``, or the error that says why ``method`` cannot use it."""
        if name in self.scalars:
            raise BindingError(f"{method}('{name}'): '{name}' is a named scalar parameter, not an array: "
                               f"set it with set_param('{name}', value) and read it with get_param('{name}')")
        if not self.is_loaded:
            if self.scalars:  # a BindingError is a RuntimeError too, as upstream raises here
                raise BindingError(f"{method}(): this live graph has no parameter named {name!r} (its named scalar "
                                   f"parameters: {', '.join(sorted(self.scalars))}); array parameters are only "
                                   "supported on loaded APIC graphs")
            raise RuntimeError(f"{method}() is only supported on loaded APIC graphs")
        binding = self.bindings.get(name)
        if binding is None:
            known = ", ".join(sorted(self.params)) or "none"
            raise BindingError(f"{method}(): the graph has no parameter named {name!r} (its parameters: {known})")
        return binding

    def set_param(self, name: str, arr) -> None:
        """Copy ``arr`` into the named parameter (dtype, shape and size must match): a Warp array, or, on a
        CPU graph, any array-like NumPy takes (NumPy, list, memoryview, torch tensor; shape ``shape + element
        shape``). Always a copy: changing ``arr`` later does not change the graph.

        For a named scalar parameter (``apic.param``; live or loaded CPU graph), ``arr`` is its new value: a
        number, or a vector / matrix as a Warp value or a sequence of its shape. It is checked (type,
        integer range, shape) and packed as Warp packs a kernel argument, then written into every launch
        that received the parameter; the next replay sees it."""
        scalar = self.scalars.get(name)
        if scalar is not None:
            self._set_scalar(scalar, arr)
            return
        self.backend.write_binding(self, self._binding(name, "set_param"), arr)

    def get_param(self, name: str, arr=None):
        """Copy the named parameter into ``arr``: a Warp array (dtype, shape and size must match) or, on a
        CPU graph, a NumPy array of the parameter's element type and ``shape + element shape``. A read-only
        destination raises ``BindingError``; nothing is written.

        A named scalar parameter (``apic.param``) is returned instead (``arr`` omitted): a Python
        ``float`` / ``int`` / ``bool``, or a NumPy array for a vector or matrix."""
        scalar = self.scalars.get(name)
        if scalar is not None:
            if arr is not None:
                raise BindingError(f"get_param('{name}'): '{name}' is a named scalar parameter; "
                                   f"get_param('{name}') returns its value")
            return unpack(scalar, self.param_values[name])
        if arr is None:
            raise TypeError(f"get_param('{name}'): pass the array to copy the parameter into")
        self.backend.read_binding(self, self._binding(name, "get_param"), arr)
        return None

    def get_param_ptr(self, name: str):
        """Address of the named parameter's first element (host memory on a CPU graph, device memory on a
        CUDA one), or None if there is no such parameter."""
        if name in self.scalars:
            raise BindingError(f"get_param_ptr('{name}'): a named scalar parameter has no one address (each launch "
                               f"that received it holds a copy); use set_param('{name}', value)")
        if not self.is_loaded:
            raise RuntimeError("get_param_ptr() is only supported on loaded APIC graphs")
        binding = self.bindings.get(name)
        return None if binding is None else self.region_addresses[binding.region] + binding.offset

    # --- what each kind of graph does ------------------------------------------------------------------
    def _set_scalar(self, scalar, value) -> None:  # pragma: no cover - a graph with scalars implements it
        raise NotImplementedError
