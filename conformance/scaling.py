"""Scaling analysis: speedup and efficiency from throughput at 1..N nodes (PERF-02, PERF-03),
and an inline SVG efficiency plot for the HTML report."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    nodes: int
    throughput: float  # work per second (samples/s, bus GB/s, ...)
    speedup: float
    efficiency: float  # speedup / nodes


def analyse(throughput: dict[int, float]) -> list[Point]:
    """Speedup and efficiency of each node count against the single-node throughput."""
    if 1 not in throughput:
        raise ValueError(f"scaling analysis needs a 1-node measurement; got node counts {sorted(throughput)}")
    bad = {n: t for n, t in throughput.items() if n < 1 or t <= 0}
    if bad:
        raise ValueError(f"node counts must be >= 1 and throughputs > 0; got {bad}")
    base = throughput[1]
    return [Point(n, t, t / base, t / base / n) for n, t in sorted(throughput.items())]


def efficiency_failures(points: list[Point], targets: dict[int, float]) -> list[str]:
    """PERF-02: a message per node count whose efficiency is below its target (missing counts too)."""
    by_nodes = {p.nodes: p for p in points}
    out = []
    for nodes, target in sorted(targets.items()):
        p = by_nodes.get(nodes)
        if p is None:
            out.append(f"{nodes} nodes: not measured (target {target:.0%})")
        elif p.efficiency < target:
            out.append(f"{nodes} nodes: efficiency {p.efficiency:.1%} below target {target:.0%}")
    return out


def time_ratio(single_node_s: float, multi_node_s: float) -> float:
    """PERF-03: the multi-worker run's time as a fraction of the single-node time."""
    if single_node_s <= 0 or multi_node_s <= 0:
        raise ValueError("times must be > 0")
    return multi_node_s / single_node_s


def svg_plot(points: list[Point], targets: dict[int, float], width: int = 480, height: int = 260) -> str:
    """A small self-contained SVG: efficiency per node count, with the targets as markers."""
    pad, max_n = 40, max([p.nodes for p in points] + list(targets) + [1])

    def x(n: float) -> float:
        return pad + (width - 2 * pad) * (n - 1) / max(max_n - 1, 1)

    def y(e: float) -> float:
        return height - pad - (height - 2 * pad) * min(max(e, 0), 1.2) / 1.2

    line = " ".join(f"{x(p.nodes):.1f},{y(p.efficiency):.1f}" for p in points)
    dots = "".join(f'<circle cx="{x(p.nodes):.1f}" cy="{y(p.efficiency):.1f}" r="3"/>'
                   f'<text x="{x(p.nodes):.1f}" y="{y(p.efficiency) - 8:.1f}" font-size="10" text-anchor="middle">'
                   f"{p.efficiency:.0%}</text>" for p in points)
    goals = "".join(f'<line x1="{x(n) - 6:.1f}" x2="{x(n) + 6:.1f}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
                    f'stroke="#cf222e" stroke-width="2"/>' for n, t in targets.items())
    ticks = "".join(f'<text x="{x(p.nodes):.1f}" y="{height - pad + 14}" font-size="10" text-anchor="middle">'
                    f"{p.nodes}</text>" for p in points)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="scaling efficiency"><rect width="100%" height="100%" fill="white"/>'
            f'<line x1="{pad}" y1="{y(1):.1f}" x2="{width - pad}" y2="{y(1):.1f}" stroke="#ccc"/>'
            f'<polyline fill="none" stroke="#0969da" stroke-width="2" points="{line}"/>{dots}{goals}{ticks}'
            f'<text x="{width / 2}" y="{height - 6}" font-size="11" text-anchor="middle">nodes</text>'
            f'<text x="12" y="{pad - 12}" font-size="11">efficiency (red: targets)</text></svg>')
