"""A loaded CUDA graph's plan built as one CUDA graph, its ``capture_if`` / ``capture_while`` as conditional nodes.

The plan (``apic.replay.cuda.lowering``) is a list of plain steps and nested ``("if", cond, then, otherwise)``
/ ``("while", cond, body)`` steps, ``cond`` being the device address of the int32 condition. Each
conditional step becomes what Warp's own ``capture_if`` / ``capture_while`` build (``wp_cuda_graph_insert_if_else``
/ ``_insert_while`` in Warp's native code), made with the driver API alone:

* ``cuGraphConditionalHandleCreate`` on the graph that holds the node;
* a one-thread kernel node running ``apic_set_condition`` (the PTX below: ``cudaGraphSetConditional(handle,
  (*cond != 0) ^ negate)``), so the condition is read on the device when the node is reached;
* ``cuGraphAddNode`` of a ``CU_GRAPH_NODE_TYPE_CONDITIONAL`` node (``CU_GRAPH_COND_TYPE_IF`` or ``_WHILE``,
  one body), whose body graph the driver returns and the body's steps are added to.

An if / else is two IF nodes, the second on a negated handle set before either runs (so a then-body that
changes the condition does not also run the else-body), as Warp does: the CUDA 12.8 and 12.9 drivers
mishandle two-body IF nodes. A while sets its handle before the node and again at the end of its body.
Conditional nodes need a CUDA 12.4 driver (``check_support`` says so, naming the version it found).

Replaying such a plan op by op (``mode="launch"``, no capture running) evaluates each condition on the host:
``cuStreamSynchronize`` and a 4-byte ``cuMemcpyDtoH`` per ``if`` and per loop test, so the host waits for all
the work issued before every test (a round trip of some microseconds plus that work, per evaluation). Inside
a caller's stream capture the plan is added to the capture's graph as nodes, conditional nodes included
(``add_to_capture``), which Warp's own graphs cannot do (warp#1827).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from apic import _compat
from apic.errors import IncompatibleGraphError
from apic.replay.cuda.lowering import add_node, enqueue_step

MIN_DRIVER_VERSION = 12040  # cuDriverGetVersion's number for CUDA 12.4: conditional nodes through cuGraphAddNode

SET_CONDITION_SYMBOL = "apic_set_condition"
# cudaGraphSetConditional(handle, (*cond != 0) ^ negate), launched on one thread. Hand-written PTX (ISA 6.0,
# sm_50) as the fill kernel is: the driver resolves the external cudaGraphSetConditional when it loads it.
SET_CONDITION_PTX = b"""//
// apic set-condition kernel: cudaGraphSetConditional(handle, (*cond != 0) ^ negate)
//
.version 6.0
.target sm_50
.address_size 64

.extern .func cudaGraphSetConditional
(
\t.param .b64 cudaGraphSetConditional_param_0,
\t.param .b32 cudaGraphSetConditional_param_1
)
;

.visible .entry apic_set_condition(
\t.param .u64 apic_set_condition_param_0,
\t.param .u64 apic_set_condition_param_1,
\t.param .u32 apic_set_condition_param_2
)
{
\t.reg .pred \t%p<2>;
\t.reg .b32 \t%r<5>;
\t.reg .b64 \t%rd<4>;

\tld.param.u64 \t%rd1, [apic_set_condition_param_0];
\tld.param.u64 \t%rd2, [apic_set_condition_param_1];
\tld.param.u32 \t%r1, [apic_set_condition_param_2];
\tcvta.to.global.u64 \t%rd3, %rd2;
\tld.global.u32 \t%r2, [%rd3];
\tsetp.ne.s32 \t%p1, %r2, 0;
\tselp.u32 \t%r3, 1, 0, %p1;
\txor.b32 \t%r4, %r3, %r1;
\t{
\t.param .b64 param0;
\tst.param.b64 \t[param0+0], %rd1;
\t.param .b32 param1;
\tst.param.b32 \t[param1+0], %r4;
\tcall.uni cudaGraphSetConditional, (param0, param1);
\t}
\tret;
}
\x00"""

CONDITIONAL_STEPS = ("if", "while")


def has_conditional_steps(plan: list) -> bool:
    """Whether a plan holds an ``"if"`` or ``"while"`` step (at its top level: bodies are inside those)."""
    return any(step[0] in CONDITIONAL_STEPS for step in plan)


def check_support(cu) -> None:
    """Refuse, naming what is needed, a driver (before CUDA 12.4) or cuda-python without conditional nodes."""
    version = int(cu("cuDriverGetVersion"))
    if version < MIN_DRIVER_VERSION:
        raise IncompatibleGraphError(
            f"this graph holds conditional nodes (wp.capture_if / wp.capture_while), which need a CUDA driver "
            f"for CUDA 12.4 or newer; this driver is for CUDA {version // 1000}.{version % 1000 // 10}"
        )
    missing = [name for name in ("CUgraphNodeParams", "cuGraphAddNode", "cuGraphConditionalHandleCreate")
               if not hasattr(cu.cu, name)]
    if missing:
        raise IncompatibleGraphError(
            f"this graph holds conditional nodes, and this cuda-python has no {', '.join(missing)}: "
            "install cuda-python 12.4 or newer"
        )


@dataclass
class Builder:
    """What adding a plan's nodes needs: the driver, the context, the set-condition kernel, and the host memory
    the set-condition nodes' parameters live in (kept as long as the graph)."""

    cu: object
    context: object
    set_condition: object  # the CUfunction of apic_set_condition (None for a plan without conditionals)
    keep: list = field(default_factory=list)

    def add(self, plan: list, graph, previous: list) -> list:
        """Add ``plan``'s steps to ``graph`` in order after ``previous``; the nodes a next step must follow."""
        for step in plan:
            if step[0] == "if":
                previous = self._add_if(step, graph, previous)
            elif step[0] == "while":
                previous = self._add_while(step, graph, previous)
            else:
                previous = [add_node(step, graph, previous, self.cu, self.context)]
        return previous

    def _handle(self, graph):
        return self.cu("cuGraphConditionalHandleCreate", graph, self.context, 0, 0)

    def _set(self, graph, previous: list, handle, cond: int, negate: int):
        """A node running apic_set_condition(handle, cond, negate) after ``previous``."""
        values = (ctypes.c_uint64 * 3)(int(handle), cond, negate)  # the u32 reads the low half of the third
        base = ctypes.addressof(values)
        params = (ctypes.c_void_p * 3)(base, base + 8, base + 16)
        self.keep.extend((values, params))
        step = ("kernel", self.set_condition, (1, 1, 1), (1, 1, 1), 0, ctypes.addressof(params))
        return add_node(step, graph, previous, self.cu, self.context)

    def _node(self, graph, previous: list, handle, kind: str):
        """A conditional node (one body) after ``previous``: ``(node, its body graph)``."""
        driver = self.cu.cu
        params = driver.CUgraphNodeParams()
        params.type = driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = handle
        params.conditional.type = getattr(driver.CUgraphConditionalNodeType, f"CU_GRAPH_COND_TYPE_{kind}")
        params.conditional.size = 1
        params.conditional.ctx = self.context
        node = self.cu("cuGraphAddNode", graph, *_compat.cuda_dependency_args(driver, "cuGraphAddNode", previous),
                       params)
        return node, params.conditional.phGraph_out[0]  # the driver fills in the body graph

    def _add_if(self, step: tuple, graph, previous: list) -> list:
        _, cond, then, otherwise = step
        handle = self._handle(graph)
        if otherwise is None:
            node, body = self._node(graph, [self._set(graph, previous, handle, cond, 0)], handle, "IF")
            self.add(then, body, [])
            return [node]
        other = self._handle(graph)
        setter = self._set(graph, [self._set(graph, previous, handle, cond, 0)], other, cond, 1)
        node, body = self._node(graph, [setter], handle, "IF")
        self.add(then, body, [])
        node, body = self._node(graph, [node], other, "IF")
        self.add(otherwise, body, [])
        return [node]

    def _add_while(self, step: tuple, graph, previous: list) -> list:
        _, cond, loop = step
        handle = self._handle(graph)
        node, body = self._node(graph, [self._set(graph, previous, handle, cond, 0)], handle, "WHILE")
        self._set(body, self.add(loop, body, []), handle, cond, 0)  # tested again after each pass
        return [node]


def build_graph(plan: list, cu, res, set_condition=None) -> list:
    """One CUDA graph of the plan's steps, instantiated (``res.graph``, ``res.exec``); the host memory the
    set-condition nodes point into, to keep with the graph."""
    builder = Builder(cu, res.context, set_condition)
    res.graph = cu("cuGraphCreate", 0)
    builder.add(plan, res.graph, [])
    name, args = _compat.cuda_graph_instantiate_call(cu.cu, res.graph)  # differs between cuda-python 11 and 12+
    res.exec = cu(name, *args)
    return builder.keep


def add_to_capture(plan: list, stream, cu, context, set_condition, keep: list) -> None:
    """Add the plan to the graph a capture on ``stream`` is building (after what the capture last added), then
    make the capture go on after it: how a replay with conditional nodes joins a caller's capture."""
    driver = cu.cu
    info = cu(_compat.cuda_capture_info_call(driver), stream)  # (status, id, graph, dependencies, ..., count)
    graph, count = info[2], int(info[-1])
    dependencies = list(info[3] or ())[:count]
    builder = Builder(cu, context, set_condition, keep)
    last = builder.add(plan, graph, dependencies)
    flags = driver.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES
    cu("cuStreamUpdateCaptureDependencies", stream,
       *_compat.cuda_dependency_args(driver, "cuStreamUpdateCaptureDependencies", last), flags)


def run_on_host(plan: list, stream, cu) -> None:
    """Enqueue the plan op by op on ``stream``, each condition read on the host when it is reached (see the
    module docstring for what that costs)."""
    for step in plan:
        if step[0] == "if":
            _, cond, then, otherwise = step
            body = then if read_condition(cond, stream, cu) else otherwise
            if body:
                run_on_host(body, stream, cu)
        elif step[0] == "while":
            while read_condition(step[1], stream, cu):
                run_on_host(step[2], stream, cu)
        else:
            enqueue_step(step, stream, cu)


def read_condition(cond: int, stream, cu) -> bool:
    """The int32 at device address ``cond`` once everything issued on ``stream`` before has run."""
    cu("cuStreamSynchronize", stream)
    value = ctypes.c_int32()
    cu("cuMemcpyDtoH", ctypes.addressof(value), cond, 4)
    return value.value != 0
