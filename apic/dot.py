"""A picture of an apic graph: its ops as a Graphviz DOT document.

Ops are nodes in execution order; an edge goes from the last op that wrote a memory region to each
later op that reads it, labelled with the region's name (a binding's name where the graph has one).
``wp.capture_if`` / ``capture_while`` bodies become clusters, and a run of identical ops (or of an
identical group of ops, as a loop unrolled by the capture) is folded into one box with its count.

What an op reads and writes comes from ``apic.record.effects``: a memcpy reads its source and writes
its destination; a memset, memtile or fill writes; a branch reads its condition. For a kernel launch
or a native call the file records which regions each array argument points into, not whether the
kernel reads or writes them, so every region it reaches counts as read and written (the legend says
so), but an indexed array's index buffer, which native code only reads.

Every string taken from the graph (kernel names, binding names, dtypes) is escaped: a hostile file
cannot inject DOT. Nothing here runs anything from the graph.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

from apic.record import ops as rec
from apic.record.effects import BRANCH, JUMP, control_of, effects_of

_MAX_PERIOD = 16  # the longest repeated group of ops that is folded
_MAX_INDENT = 64  # clusters nested deeper are indented no further


def escape(text) -> str:
    """``text`` as the inside of a DOT double-quoted string: quotes, backslashes and newlines escaped."""
    out = []
    for ch in str(text):
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch < " " or ch == "\x7f":
            out.append(f"\\\\x{ord(ch):02x}")  # shown, not interpreted
        else:
            out.append(ch)
    return "".join(out)


def effects(op, handles=()) -> tuple[set, set]:
    """``(memory read, memory written)`` by ``op`` (``apic.record.effects``): a region id, or ``("h", index)``
    for a native handle (a mesh, ...), whose methods read the handle's arrays and write it, and which a
    kernel that receives its id reads."""
    found = effects_of(op, "drawing a graph")
    return found.reads(op, handles), found.writes(op)


def _launch_label(op, kernels, region_name) -> str:
    kernel = kernels[op.kernel]
    return f"{op.kind.name.lower()} {kernel.key}{' (backward)' if kernel.adjoint else ''}\ndim={tuple(op.dim)}"


_LABELS = {  # op type -> (op, kernels, region_name) -> the label of its node, where it says more than _op_label
    rec.Launch: _launch_label,
    rec.CudaLaunch: _launch_label,
    rec.Memcpy: lambda op, kernels, name: f"memcpy {op.nbytes} B\n{name(op.src.region)} -> {name(op.dst.region)}",
    rec.Memset: lambda op, kernels, name: f"memset {name(op.dst.region)} = {op.value:#04x}\n{op.nbytes} B",
    rec.Memtile: lambda op, kernels, name: f"memtile {name(op.dst.region)}\n{len(op.value.data)} B x {op.count}",
    rec.ArrayCopy: lambda op, kernels, name: f"array_copy elem {op.elem_size} B",
    rec.ArrayFill: lambda op, kernels, name: f"array_fill {len(op.value.data)} B",
    rec.Alloc: lambda op, kernels, name: f"alloc {name(op.dst.region)} {op.nbytes} B",
    rec.NativeCall: lambda op, kernels, name: f"wp_{op.name}",
    rec.HandleCall: lambda op, kernels, name: f"wp_{op.name}\nhandle {op.handle.index}",
}


def _op_label(op, kernels, region_name) -> str:
    """The label of an op's node: its own in ``_LABELS``, else its kind and ``OpEffects.label``."""
    label = _LABELS.get(type(op))
    if label is not None:
        return label(op, kernels, region_name)
    name = effects_of(op, "drawing a graph").label(op, kernels)
    kind = rec.SPEC_OF_TYPE[type(op)].name
    return kind if name == kind else f"{kind} {name}"


# --- structure: control flow and folded repeats -----------------------------------------------------
@dataclass
class _Block:
    """A cluster: an ``if`` / ``else`` / ``while`` body, or a folded repeat (``count`` > 1)."""

    title: str
    items: list = field(default_factory=list)  # int (an op position) or _Block
    count: int = 1


def _structure(ops, lo: int, hi: int, region_name) -> list:
    """The items of positions ``[lo, hi)``: op positions and control-flow blocks (layout in recorder.py).

    Bodies are read with a stack of their own, not by recursion: a graph's nesting is bounded by what the
    reader accepts (``schema.MAX_CPU_NESTING``), and a live graph's by nothing but memory, so the picture
    of any graph that loads or replays never meets Python's recursion limit."""
    # a frame: [next position, end of the body, its items, where its folded items go (None: the result)]
    stack: list = [[lo, hi, [], None]]
    while True:
        frame = stack[-1]
        p, end, items, done = frame
        if p >= end:
            stack.pop()
            folded = _fold(items, ops)
            if done is None:
                return folded
            done.extend(folded)
            continue
        op = ops[p]
        t = op.target if control_of(op) == BRANCH else -1
        if not (p < t <= end):  # not a branch, or one this reader cannot nest: a plain op
            items.append(p)
            frame[0] = p + 1
            continue
        cond = f"int32 at {region_name(op.cond.region)}+{op.cond.offset}"
        last = ops[t - 1]
        # the branch (and the jump that closes a body) are drawn inside the cluster they control; a body's
        # items go into its block when the body is done (the block is already in place in its parent)
        if t - 1 > p and control_of(last) == JUMP and last.target == p:  # while: branch; body; jump top
            block = _Block(f"while {cond} != 0", [p])
            items.append(block)
            frame[0] = t
            stack.append([p + 1, t - 1, [], _Closing(block.items, t - 1)])
        elif t - 1 > p and control_of(last) == JUMP and t <= last.target <= end:  # if / else
            then, otherwise = _Block(f"if {cond} != 0", [p]), _Block("else")
            items += [then, otherwise]
            frame[0] = last.target
            stack.append([t, last.target, [], otherwise.items])
            stack.append([p + 1, t - 1, [], _Closing(then.items, t - 1)])
        else:
            block = _Block(f"if {cond} != 0", [p])
            items.append(block)
            frame[0] = t
            stack.append([p + 1, t, [], block.items])


class _Closing:
    """Where a body's items go when its block ends in one more position (the jump that closes it)."""

    def __init__(self, items: list, last: int) -> None:
        self.items, self.last = items, last

    def extend(self, body: list) -> None:
        self.items += [*body, self.last]


def _fold(items: list, ops) -> list:
    """Runs of an identical op, or of an identical group of plain ops, become one ``_Block`` with a count."""
    out, i, n = [], 0, len(items)

    def same(a, b):
        return isinstance(a, int) and isinstance(b, int) and not control_of(ops[a]) and ops[a] == ops[b]

    while i < n:
        best_k, best_m = 1, 1
        for k in range(1, min(_MAX_PERIOD, (n - i) // 2) + 1):
            m = 1
            while i + (m + 1) * k <= n and all(same(items[i + j], items[i + m * k + j]) for j in range(k)):
                m += 1
            if m > 1 and k * m > best_k * best_m:
                best_k, best_m = k, m
        if best_m > 1:
            out.append(_Block(f"x {best_m}", items[i : i + best_k], best_m))
            i += best_k * best_m
        else:
            out.append(items[i])
            i += 1
    return out


def to_dot(recording, bindings=(), title: str = "apic graph") -> str:
    """The DOT document of ``recording`` (``bindings``: ``apic.record.bindings.Binding`` naming regions)."""
    names: dict[int, list] = {}
    for b in bindings:
        names.setdefault(b.region, []).append(b.name)

    def region_name(region) -> str:
        if isinstance(region, tuple):  # a native handle
            handle = recording.handles[region[1]] if 0 <= region[1] < len(recording.handles) else None
            return f"{getattr(handle, 'kind', 'handle')} {region[1]}"
        if region in names:
            return "/".join(names[region])
        info = recording.regions[region].array if 0 <= region < len(recording.regions) else None
        return f"r{region}" + (f" {info.dtype}{list(info.shape)}" if info else "")

    ops = recording.ops
    lines = ["digraph apic {", f'  label="{escape(title)}"; labelloc=t; rankdir=TB;',
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9, color="#777777"];']
    node_of: dict[int, str] = {}  # op position -> the node that shows it
    folded: dict[int, int] = {}  # a folded copy's position -> the position shown
    clusters: list = []

    def emit(items, indent: str) -> None:
        # a stack of (items left, indent, the last plain op of the list, the block they are in), not
        # recursion: clusters nest as deep as the graph's bodies (see _structure)
        stack = [[iter(items), indent, None, None]]
        while stack:
            frame = stack[-1]
            item = next(frame[0], None)
            if item is None:
                stack.pop()
                block = frame[3]
                if block is not None:
                    if block.count > 1:  # the folded copies are shown by the first one (their items are positions)
                        period = len(block.items)
                        for copy in range(1, block.count):
                            for first in block.items:
                                folded[first + copy * period] = first
                    lines.append(f"{stack[-1][1]}}}")
                continue
            indent = frame[1]
            if isinstance(item, _Block):
                frame[2] = None  # the invisible edges keep order within one list
                clusters.append(item)
                cluster = f"cluster_{len(clusters)}"
                style = 'style="dashed"; color="#4c72b0"' if item.count > 1 else 'style="rounded"; color="#c44e52"'
                lines.append(f'{indent}subgraph {cluster} {{ label="{escape(item.title)}"; {style};')
                # (indented at most _MAX_INDENT levels: the text stays linear in the ops however deep they nest)
                stack.append([iter(item.items), indent + "  " * (len(indent) < 2 * _MAX_INDENT), None, item])
                continue
            node = f"op{item}"
            node_of[item] = node
            label = f"#{item} {_op_label(ops[item], recording.kernels, region_name)}"
            shape = ', shape=diamond, fillcolor="#fbeeee"' if control_of(ops[item]) else ""
            lines.append(f'{indent}{node} [label="{escape(label)}"{shape}];')
            if frame[2] is not None:
                lines.append(f"{indent}{frame[2]} -> {node} [style=invis];")
            frame[2] = node

    emit(_structure(ops, 0, len(ops), region_name), "  ")
    for pos, shown in folded.items():
        node_of.setdefault(pos, node_of.get(shown, f"op{shown}"))

    edges: dict[tuple[str, str], set] = {}
    last_writer: dict[int, str] = {}
    for pos, op in enumerate(ops):
        node = node_of.get(pos)
        if node is None:
            continue
        reads, writes = effects(op, recording.handles)
        if control_of(op) == JUMP and op.target <= pos and op.target in node_of:  # a loop's way back
            lines.append(f'  {node} -> {node_of[op.target]} [style=dashed, color="#c44e52", label="loop"];')
        for region in sorted(reads, key=str):
            writer = last_writer.get(region)
            if writer is not None and writer != node:
                edges.setdefault((writer, node), set()).add(region_name(region))
        for region in writes:
            last_writer[region] = node
    for (src, dst), regions in edges.items():
        lines.append(f'  {src} -> {dst} [label="{escape(", ".join(sorted(regions)))}"];')
    legend = ("edges: memory an op reads after another op wrote it (region or binding name)\n"
              "kernel launches and native calls count as reading and writing every array they receive\n"
              "(the file does not say which), but an indexed array's index buffer, only read\n"
              "dashed boxes: identical ops folded, with their count\n"
              "red boxes: capture_if / capture_while bodies")
    lines.append(f'  legend [shape=note, fillcolor="#ffffff", label="{escape(legend)}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_to_dot(graph) -> str:
    """The DOT document of an apic ``Graph`` (live or loaded)."""
    return to_dot(graph.recording, tuple(getattr(graph, "bindings", {}).values()))


def render_png(dot_text: str, path: str) -> None:
    """Render DOT to a PNG through Graphviz's ``dot``; a clear error saying how to get it when absent."""
    exe = shutil.which("dot")
    if exe is None:
        raise FileNotFoundError("Graphviz's 'dot' program is not installed: install it (e.g. "
                                "'apt-get install graphviz', 'brew install graphviz' or 'conda install graphviz'), "
                                "or write a .dot file with --dot and render it elsewhere")
    result = subprocess.run([exe, "-Tpng", "-o", path], input=dot_text.encode(), capture_output=True, timeout=120)
    if result.returncode:
        raise RuntimeError(f"Graphviz dot failed: {result.stderr.decode(errors='replace').strip()}")


def make_capture_debug_dot_print(original):
    """``wp.capture_debug_dot_print`` for apic graphs too; any other graph goes to Warp's ``original``."""

    def capture_debug_dot_print(graph, path: str, verbose: bool = True):
        """Export a graph to a DOT file for visualization (an apic CPU graph, or a CUDA graph as Warp does).

        Args:
            graph: A graph as returned by ``wp.capture_end()`` or ``wp.capture_load()``
            path: Path to save the DOT file
            verbose: Whether to include additional debug information in the output (Warp's CUDA graphs)
        """
        if hasattr(graph, "recording") and hasattr(graph, "program"):  # an apic.Graph (CPU)
            with open(path, "w", encoding="utf-8") as f:
                f.write(graph_to_dot(graph))
            return
        if original is None:
            raise RuntimeError("this warp-lang has no capture_debug_dot_print for non-apic graphs")
        return original(graph, path, verbose)

    if original is not None:
        capture_debug_dot_print.__wrapped__ = original
    return capture_debug_dot_print
