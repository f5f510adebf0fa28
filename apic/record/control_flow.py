"""Control flow in a CPU capture: ``wp.capture_if`` / ``wp.capture_while`` bodies recorded inline, and a
finished graph launched inside a capture (its ops, inline, as a CUDA child graph).

A mixin of ``apic.record.cpu.recorder.Recorder``: it uses the recorder's op list, noting and interning; and
``control_flow_problem``, the rule every op sequence keeps (the reader checks a file's, lowering its own).
"""

from __future__ import annotations

import dataclasses

from apic import _compat
from apic.errors import CaptureError, UnsupportedOperationError
from apic.record.effects import BRANCH, EFFECTS, JUMP, control_of
from apic.record.op_addresses import intern_op, unresolve_op
from apic.record.ops import Branch, Jump, RawPtr, is_cpu_launch
from apic.record.recording import ModuleInfo


class ControlFlowRecording:
    """Branches, loops and nested graphs of a CPU recorder."""

    def _reserve(self) -> int:
        """A place in the op list for a control-flow op whose target is not known yet."""
        self.ops.append(None)
        return len(self.ops) - 1

    def _place(self, index: int, op) -> None:
        self.ops[index] = intern_op(op, self._interned, self._ranges)

    def _condition(self, condition) -> RawPtr:
        """The int32 a branch reads at replay time: the first element of ``condition``."""
        if not condition.ptr or condition.size < 1:
            raise CaptureError("the condition of wp.capture_if / capture_while must be an int32 array with an element")
        self.note_values([condition])
        return RawPtr(condition.ptr, condition.ptr, condition.ptr + 4)

    def record_if(self, condition, on_true, on_false) -> None:
        """``capture_if``: ``on_true`` / ``on_false`` (callables or None) record the two bodies inline.

        Layout: ``branch(cond == 0 -> else); <on_true>; [jump -> end; else: <on_false>;] end:``.
        """
        cond = self._condition(condition)
        start = len(self.ops)
        try:
            branch = self._reserve()
            if on_true is not None:
                on_true()
            if on_false is not None:
                jump = self._reserve()
                otherwise = len(self.ops)
                on_false()
                self._place(jump, Jump(len(self.ops)))
            else:
                otherwise = len(self.ops)
            self._place(branch, Branch(cond, otherwise))
        except BaseException:
            del self.ops[start:]  # a failed body leaves nothing behind (the capture may go on)
            raise

    def record_while(self, condition, body) -> None:
        """``capture_while``: ``top: branch(cond == 0 -> end); <body>; jump -> top; end:``."""
        cond = self._condition(condition)
        start = len(self.ops)
        try:
            branch = self._reserve()
            body()
            self._place(self._reserve(), Jump(start))
            self._place(branch, Branch(cond, len(self.ops)))
        except BaseException:
            del self.ops[start:]
            raise

    def record_graph(self, graph) -> None:
        """A finished apic graph launched (or used as a branch body) inside this capture: its ops, inline."""
        recording = graph.recording
        if recording.abi != _compat.KERNEL_ABI:
            raise UnsupportedOperationError(
                "launching a loaded graph saved for another kernel ABI inside a capture",
                f"it calls kernels as {recording.abi}, this warp-lang as {_compat.KERNEL_ABI}",
            )
        self.keepalive.append(graph)  # its arrays, external buffers, modules and loaded memory
        for handle in recording.handles:
            self.note_handle(handle.obj)
        for spec in recording.params:
            self.note_param(spec)
        values = getattr(graph, "param_values", {})
        addresses = graph.region_addresses
        for region in recording.regions:
            lo = addresses[region.id]
            self._ranges.note(lo, lo + region.nbytes, used=True, owned=region.owned, array=region.array)
        kernels = [self._kernel_from(recording, info) for info in recording.kernels]
        base = len(self.ops)
        converted: dict[int, object] = {}  # by id: ops shared in the graph stay shared
        for op in recording.ops:
            done = converted.get(id(op))
            if done is None:
                done = unresolve_op(op, graph.address_of, values)
                if is_cpu_launch(done):
                    done = dataclasses.replace(done, kernel=kernels[done.kernel])
                elif control_of(done):
                    done = dataclasses.replace(done, target=done.target + base)
                converted[id(op)] = done
            self._append(done)

    def _kernel_from(self, recording, info) -> int:
        """This capture's index of a kernel of another recording (same loaded module, same symbol)."""
        module = recording.modules[info.module]
        return self._intern_kernel(module.module_exec, info.symbol, lambda: ModuleInfo(module.name, module.module_exec),
                                   lambda index: dataclasses.replace(info, module=index))


def control_flow_problem(ops) -> str | None:
    """Why the branches and jumps of an op sequence could loop without a loop head, or None.

    Every loop must pass a branch that counts it (a loop head): a branch only goes forward, and a
    jump goes forward or back to a branch whose forward target lies past the jump (the jump is
    inside the code that branch skips), as ``capture_while`` writes ``L0: branch(-> L2); body;
    jump(-> L0); L2:``. A jump to itself or to anything else that is not such a branch is refused.
    """
    if not any(EFFECTS[kind].control for kind in set(map(type, ops))):
        return None  # straight-line code (the common case: found without a loop over positions)
    for position, op in enumerate(ops):
        control = control_of(op)
        if control == BRANCH and op.target <= position:
            return f"the branch at position {position} goes back to position {op.target} (branches only go forward)"
        if control == JUMP and op.target <= position:
            head = ops[op.target]
            if control_of(head) != BRANCH or head.target <= position:
                return (f"the jump at position {position} goes back to position {op.target}, which is not the "
                        f"branch that ends a loop around it: it could loop forever without a condition")
    return None


def nesting_depth(ops) -> int:
    """How deep bodies nest in an op sequence: the most forward spans of branches and jumps (from the
    position after one to its target) that hold one position. Any reading of the sequence as nested
    bodies (the DOT picture's ``if`` / ``else`` / ``while`` clusters, CUDA's conditional nodes) nests no
    deeper, since each body lies inside the span of the branch or jump before it; the reader bounds it.
    Linear in the length, with no recursion: a hostile file's depth is measured before anything nests."""
    if not any(EFFECTS[kind].control for kind in set(map(type, ops))):
        return 0
    opened = [0] * (len(ops) + 1)  # +1 where a span opens, -1 where it closes
    for position, op in enumerate(ops):
        if control_of(op) and op.target > position + 1:
            opened[position + 1] += 1
            opened[min(op.target, len(ops))] -= 1
    depth = deepest = 0
    for change in opened:
        depth += change
        deepest = max(deepest, depth)
    return deepest
