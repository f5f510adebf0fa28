"""Render a suite's results: the text report (``format_report``) and the figure (``plot``)."""

from __future__ import annotations

from apic.bench import methods as m


def _cell(entry: dict) -> str:
    if not entry.get("available"):
        return "n/a"
    s = entry["us_per_op"]
    return f"{s['min']:.4g} / {s['median']:.4g}"


SHORT_LABELS = {
    "warp_launch": "wp.launch", "launch_objects": "Launch.launch", "apic_live": "apic live",
    "apic_parallel": f"apic {m.PARALLEL_THREADS} threads",
    "apic_loaded": "apic saved+loaded", "warp_native": "Warp native replay", "floor": "floor",
}


def format_report(results: dict) -> str:
    env = results["environment"]
    cfg = env["config"]
    keys = list(results["methods"])
    lines = [
        f"apic {env['apic']} bench: warp-lang {env['warp']} ({env['kernel_abi']}), Python {env['python']}, "
        f"numba {env['numba']}, {env['platform']}, {env['cpus']} CPUs, {env['date']}"
        + (f", load average {env['load_average']} at start, {results.get('load_average_end')} at end"
           if env.get("load_average") is not None else ""),
        f"{'quick smoke run (timings meaningless)' if cfg['quick'] else 'full run'}: min / median over "
        f"{cfg['rounds']} interleaved rounds (W2: {cfg['compute_rounds']}, ladder: {cfg['ladder_rounds']}); "
        "every method verified bit for bit against eager first",
        "",
    ]

    short = {key: SHORT_LABELS.get(key, key) for key in keys}
    short["floor"] = "floor (C)" if env["floor"].endswith("(C)") else "floor (Numba)"

    def table(workloads: list[dict], title: str, describe: bool) -> None:
        widths = [max(len(short[k]), 19) for k in keys]
        lines.append(title)
        if describe:
            lines.extend(f"  {wl['key']:<14}{wl['title']}" for wl in workloads)
        lines.append(f"  {'':<14}" + "".join(f" {short[k]:>{wd}}" for k, wd in zip(keys, widths)))
        for wl in workloads:
            cells = "".join(f" {_cell(wl['methods'][k]):>{wd}}" for k, wd in zip(keys, widths))
            lines.append(f"  {wl['key']:<14}{cells}")
        lines.append("")

    table(results["workloads"], "Workloads (us per op, min / median)", True)
    table(results["ladder"], "Ladder: graphs of 10 to 100,000 tiny launches, dim 1 (us per op, min / median)", False)
    unavailable = {
        results["methods"][k]: e["reason"]
        for wl in results["workloads"] for k, e in wl["methods"].items() if not e["available"]
    }
    for label, reason in unavailable.items():
        lines.append(f"  {label}: {reason}")
    if unavailable:
        lines.append("")

    cap = results["capture"]
    lines.append(f"Capture cost ({cap['workload']}), us per op, min / median")
    for key, label in (
        ("eager_launch", "eager wp.launch"), ("apic_record", "apic: recording"), ("apic_end", "apic: capture_end"),
        ("apic_total", "apic: capture total"), ("warp_native_total", "Warp native capture"),
    ):
        s = cap.get(key)
        value = f"{s['min']:8.3f} / {s['median']:8.3f}" if s else f"n/a ({cap.get('warp_native_reason', '')})"
        lines.append(f"  {label:<24} {value}")
    co = results["call_overhead"]["us_per_call"]
    lines.append(f"  one wp.capture_launch call of a 1-op apic graph: {co['min']:.3f} / {co['median']:.3f} us")
    noop = results["call_overhead"].get("ctypes_noop_us")
    if noop:
        lines.append(f"  one ctypes call of a C no-op:                    {noop['min']:.3f} / {noop['median']:.3f} us")
    first = results["first_replay"]
    lines.append(f"  first wp.capture_launch in a fresh process ({first['ops']} ops): {first['first_ms']['min']:.1f} / "
                 f"{first['first_ms']['median']:.1f} ms")
    lines.append("")

    p = results["persistence"]
    if p.get("available"):
        lines.append(f"Save/load of a {p['ops']:,}-op graph of tiny launches, ms (min / median)")
        for key, what in (("persistence", "12 distinct ops"), ("persistence_distinct", "every op distinct")):
            p = results[key]
            lines.append(
                f"  {what:<18} save {p['save_ms']['min']:7.1f} / {p['save_ms']['median']:7.1f}, "
                f"load {p['load_ms']['min']:7.1f} / {p['load_ms']['median']:7.1f}; file {p['graph_file_bytes']:,} "
                f"bytes = {p['bytes_per_op']:.1f} bytes/op (+ modules {p['module_bytes']:,} bytes)"
            )
    else:
        lines.append(f"Save/load: saved+loaded: {p['reason']}")
    lines.append("")

    lines.append("The bar")
    for item in results["bar"]:
        verdict = {True: "PASS", False: "MISS", None: "n/a "}[item["pass"]]
        lines.append(f"  [{verdict}] {item['target']}: {item['measured']}")
    lines.append("")
    lines.append(f"{len(results['checks']['verified'])} method/workload pairs verified bit for bit; "
                 f"total time {results['elapsed_s']:.1f} s")
    return "\n".join(lines)


def plot(results: dict, path: str) -> None:
    """Per-op time against graph size (the ladder) and per workload; needs matplotlib."""
    import matplotlib  # lazy: an optional dependency, needed by --plot only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above; after choosing the Agg backend

    keys = list(results["methods"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.6))
    colors = {key: f"C{i}" for i, key in enumerate(keys)}  # the same colour for a method in both panels
    for key in keys:
        points = [(wl["ops"], wl["methods"][key]) for wl in results["ladder"] if wl["methods"][key]["available"]]
        if not points:
            continue
        xs = [n for n, _ in points]
        mins = [e["us_per_op"]["min"] for _, e in points]
        medians = [e["us_per_op"]["median"] for _, e in points]
        left.plot(xs, mins, marker="o", color=colors[key], label=results["methods"][key])
        left.fill_between(xs, mins, medians, color=colors[key], alpha=0.2)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("ops in the graph (tiny launches, dim 1)")
    left.set_ylabel("µs per op (line: min, band: to median)")
    left.set_title("Dispatch cost against graph size")
    left.grid(True, which="both", alpha=0.3)

    workloads = results["workloads"]
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        xs, ys = [], []
        for j, wl in enumerate(workloads):
            entry = wl["methods"][key]
            if entry["available"]:
                xs.append(j + (i - (len(keys) - 1) / 2) * width)
                ys.append(entry["us_per_op"]["min"])
        right.bar(xs, ys, width=width, color=colors[key], label=results["methods"][key])
    right.set_xticks(range(len(workloads)))
    right.set_xticklabels([wl["key"] for wl in workloads])
    right.set_yscale("log")
    right.set_ylabel("µs per op (min over rounds)")
    right.set_title("Workloads")
    right.grid(True, axis="y", which="both", alpha=0.3)
    env = results["environment"]
    fig.suptitle(f"apic {env['apic']} on warp-lang {env['warp']}, {env['platform']}, {env['cpus']} CPUs")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in keys]
    fig.legend(handles, [results["methods"][k] for k in keys], loc="lower center", ncol=len(keys), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
