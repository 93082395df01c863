"""One PNG of the benchmark's figures: throughput per system, and latency per offered load.

usage: python -m bench.chart FIGURES.json [--out bench-chart.png] [--title TEXT]

`render_chart` takes plain data, so that whatever the benchmark measured can be drawn:

    throughput  {"system name": messages per second, ...}             drawn top to bottom as given
    latency     {"load label": {"p50": ms, "p95": ms, "p99": ms}, ...}  one group of bars per load

Left panel: horizontal bars, each labelled with its rate. Right panel: the latency percentiles of
each offered load side by side, labelled, in ms or (when the largest is 10 s or more) in seconds.
FIGURES.json holds {"throughput": {...}, "latency": {...}} in those shapes. Matplotlib draws with
its non-interactive Agg backend: no display is needed.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display, no GUI toolkit

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

PERCENTILES = ("p50", "p95", "p99")
COLOURS = ("#4c78a8", "#f58518", "#e45756")


def render_chart(
    throughput: Mapping[str, float],
    latency: Mapping[str, Mapping[str, float]],
    path: Path,
    *,
    title: str | None = None,
) -> Path:
    """Draw both panels into the PNG `path` and return it; an empty mapping leaves its panel blank."""
    figure, (left, right) = plt.subplots(
        1, 2, figsize=(13, max(3.5, 0.6 * len(throughput) + 2)), gridspec_kw={"width_ratios": [3, 2]}
    )
    throughput_panel(left, throughput)
    latency_panel(right, latency)
    if title:
        figure.suptitle(title, fontsize=13)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def throughput_panel(axes: Axes, rates: Mapping[str, float]) -> None:
    """Horizontal bars of msg/s, the first system on top, each labelled with its rate."""
    axes.set_title("Throughput (msg/s, higher is better)")
    if not rates:
        axes.set_axis_off()
        return
    names = list(rates)
    values = [rates[n] for n in names]
    bars = axes.barh(names, values, color=COLOURS[0])
    axes.invert_yaxis()
    axes.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=4)
    axes.set_xlim(0, max(values) * 1.2)
    axes.xaxis.set_major_formatter(lambda x, _pos: f"{x:,.0f}")
    axes.grid(axis="x", alpha=0.3)
    axes.set_axisbelow(True)


def latency_panel(axes: Axes, loads: Mapping[str, Mapping[str, float]]) -> None:
    """Grouped bars: p50, p95 and p99 of each offered load, labelled with their values."""
    if not loads:
        axes.set_title("Latency")
        axes.set_axis_off()
        return
    largest = max((v for figures in loads.values() for v in figures.values()), default=0.0)
    scale, unit = (1000.0, "s") if largest >= 10_000 else (1.0, "ms")
    axes.set_title(f"Latency per offered load ({unit}, lower is better)")
    width = 0.8 / len(PERCENTILES)
    for i, (name, colour) in enumerate(zip(PERCENTILES, COLOURS, strict=True)):
        values = [loads[load].get(name, float("nan")) / scale for load in loads]
        positions = [x + (i - 1) * width for x in range(len(loads))]
        bars = axes.bar(positions, values, width, label=name, color=colour)
        axes.bar_label(bars, labels=[f"{v:,.1f}" if unit == "s" else f"{v:,.0f}" for v in values], padding=2)
    axes.set_xticks(range(len(loads)), list(loads))
    axes.set_ylim(0, largest / scale * 1.3 if largest > 0 else 1)  # room for the legend
    axes.legend(loc="upper center", ncols=len(PERCENTILES))
    axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("figures", type=Path, help='JSON: {"throughput": {...}, "latency": {...}}')
    parser.add_argument("--out", type=Path, default=Path("bench-chart.png"))
    parser.add_argument("--title")
    args = parser.parse_args()
    figures = json.loads(args.figures.read_text(encoding="utf-8"))
    path = render_chart(figures.get("throughput", {}), figures.get("latency", {}), args.out, title=args.title)
    print(path)


if __name__ == "__main__":
    main()
