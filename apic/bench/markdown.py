"""Render the suite's results as Markdown tables (for benchmarks/README.md): ``--markdown FILE``."""

from __future__ import annotations

from apic.bench.report import SHORT_LABELS


def _num(value: float) -> str:
    return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


def _cell(entry: dict) -> str:
    if not entry.get("available"):
        return "n/a"
    s = entry["us_per_op"]
    return f"{_num(s['min'])} / {_num(s['median'])}"


def _table(workloads: list[dict], keys: list[str], labels: dict[str, str], describe: bool) -> list[str]:
    head = ["workload", "ops", *(labels[k] for k in keys)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for wl in workloads:
        name = f"{wl['key']}: {wl['title']}" if describe else wl["key"]
        lines.append("| " + " | ".join([name, f"{wl['ops']:,}", *(_cell(wl["methods"][k]) for k in keys)]) + " |")
    return lines


def format_markdown(results: dict) -> str:
    env = results["environment"]
    cfg = env["config"]
    keys = list(results["methods"])
    labels = {k: SHORT_LABELS.get(k, k) for k in keys}
    labels["floor"] = "floor (C)" if env["floor"].endswith("(C)") else "floor (Numba)"
    out = [
        f"#### warp-lang {env['warp']} ({env['kernel_abi']})",
        "",
        f"{env['date']}; {env['platform']}, {env['cpus']} CPUs; Python {env['python']}, numba {env['numba']}, "
        f"apic {env['apic']}; `python -m apic bench{' --quick' if cfg['quick'] else ''}` "
        f"({results['elapsed_s']:.0f} s). Microseconds per op, min / median over {cfg['rounds']} interleaved "
        f"rounds (W2: {cfg['compute_rounds']}; ladder: {cfg['ladder_rounds']}).",
        "",
        *_table(results["workloads"], keys, labels, True),
        "",
        "The ladder: graphs of tiny launches (as W1, dim 1) of growing size.",
        "",
        *_table(results["ladder"], keys, labels, False),
        "",
    ]
    reasons = {labels[k]: e["reason"] for wl in results["workloads"] for k, e in wl["methods"].items() if e["reason"]}
    out += [f"- {label}: {reason}" for label, reason in reasons.items()]

    cap = results["capture"]
    parts = []
    for key, label in (("eager_launch", "eager `wp.launch`"), ("apic_record", "apic recording"),
                       ("apic_end", "apic `capture_end`"), ("apic_total", "apic capture in all"),
                       ("warp_native_total", "Warp's native capture")):
        if cap.get(key):
            parts.append(f"{label} {_num(cap[key]['min'])} / {_num(cap[key]['median'])}")
    out.append(f"- Capture cost, µs per op ({cap['workload']}): " + "; ".join(parts) + ".")
    co = results["call_overhead"]["us_per_call"]
    out.append(f"- One `wp.capture_launch` of a one-op apic graph: {_num(co['min'])} / {_num(co['median'])} µs.")
    noop = results["call_overhead"].get("ctypes_noop_us")
    if noop:
        out.append(f"- One ctypes call of a C no-op, same process: {_num(noop['min'])} / {_num(noop['median'])} µs.")
    first = results["first_replay"]
    out.append(f"- First `wp.capture_launch` in a fresh process ({first['ops']}-op graph, caches warm): "
               f"{_num(first['first_ms']['min'])} / {_num(first['first_ms']['median'])} ms.")
    mujoco = results["mujoco_load"]
    if mujoco["available"]:
        out.append(f"- `capture_load` of a saved mujoco-warp step ({mujoco['ops']} ops): "
                   f"{_num(mujoco['load_ms']['min'])} / {_num(mujoco['load_ms']['median'])} ms.")
    p = results["persistence"]
    if p.get("available"):
        for key, what in (("persistence", "cycling through 12 distinct launches"),
                          ("persistence_distinct", "every launch distinct")):
            p = results[key]
            out.append(
                f"- Save / load of a {p['ops']:,}-op graph, {what}: "
                f"save {_num(p['save_ms']['min'])} / {_num(p['save_ms']['median'])} ms, "
                f"load {_num(p['load_ms']['min'])} / {_num(p['load_ms']['median'])} ms; "
                f"{p['graph_file_bytes']:,} bytes on disk = {p['bytes_per_op']:.1f} bytes per op "
                f"(+ {p['module_bytes']:,} bytes of compiled modules)."
            )
    else:
        out.append(f"- Save / load: saved+loaded: {p['reason']}.")
    out += ["", "| the bar | measured | |", "|---|---|---|"]
    for item in results["bar"]:
        verdict = {True: "**pass**", False: "**MISS**", None: "n/a"}[item["pass"]]
        out.append(f"| {item['target']} | {item['measured']} | {verdict} |")
    return "\n".join(out) + "\n"
