"""``wp.capture_if`` / ``wp.capture_while`` inside an ``apic=True`` CUDA capture: recorded as Warp builds them.

Warp builds a conditional node and captures each body into its child graph by calling the body once
(pausing and resuming the capture around it). apic hands Warp bodies that record as they run, so the
recording gets the same branch-and-jump layout as a CPU capture (``apic.record.control_flow``), in the
canonical form ``apic.record.cuda.conditional_tree`` reads back into conditional nodes at load time:

* an else-body that records nothing is dropped (with its jump), so ``if`` and ``if / else`` never look alike;
* a failed body (or a Warp error) leaves nothing of the conditional in the recording.

A mixin of ``apic.record.cuda.recorder.CudaRecorder``. While Warp works between the bodies it pauses and
resumes the capture (``warp_internal`` is then True, and ``apic.capture`` lets those calls through; a
``capture_pause`` from inside a body is still refused).
"""

from __future__ import annotations

from apic.record.control_flow import ControlFlowRecording
from apic.record.ops import Branch, Jump


class CudaControlFlow(ControlFlowRecording):
    """Conditional nodes of a CUDA recording (the layout helpers are the CPU recorder's)."""

    warp_internal = False  # Warp's own capture_if / capture_while code runs (outside the user's bodies)
    conditional_depth = 0

    def _body(self, body, before=None):
        """``body`` as Warp will call it: ``before`` first, then the user's code, outside ``warp_internal``."""
        if body is None:
            return None

        def recorded(**kwargs):
            if before is not None:
                before()
            self.warp_internal = False
            try:
                return body(**kwargs)
            finally:
                self.warp_internal = True

        return recorded

    def _in_warp(self, run, *bodies) -> None:
        outer = self.warp_internal
        self.warp_internal = True
        self.conditional_depth += 1
        try:
            run(*bodies)
        finally:
            self.warp_internal = outer
            self.conditional_depth -= 1

    def record_cuda_if(self, condition, on_true, on_false, run) -> None:
        """``run(on_true, on_false)`` is Warp's ``capture_if`` given the recording bodies."""
        cond = self._condition(condition)
        start = len(self.ops)
        try:
            branch = self._reserve()
            marks: dict[str, int] = {}

            def open_else() -> None:
                marks["jump"] = self._reserve()
                marks["else"] = len(self.ops)

            self._in_warp(run, self._body(on_true), self._body(on_false, open_else))
            if "jump" in marks and len(self.ops) == marks["else"]:
                del self.ops[marks["jump"]]  # an empty else-body: nothing to jump over
                otherwise = len(self.ops)
            elif "jump" in marks:
                self._place(marks["jump"], Jump(len(self.ops)))
                otherwise = marks["else"]
            else:
                otherwise = len(self.ops)
            self._place(branch, Branch(cond, otherwise))
        except BaseException:
            del self.ops[start:]
            raise

    def record_cuda_while(self, condition, body, run) -> None:
        """``run(body)`` is Warp's ``capture_while`` given the recording body."""
        cond = self._condition(condition)
        start = len(self.ops)
        try:
            branch = self._reserve()
            self._in_warp(run, self._body(body))
            self._place(self._reserve(), Jump(start))
            self._place(branch, Branch(cond, len(self.ops)))
        except BaseException:
            del self.ops[start:]
            raise
