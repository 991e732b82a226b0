"""The Metrics tab: a job's CPU, memory and (where DCGM exports them) GPU use from the cluster's Prometheus, the
same queries as the monitoring role's Grafana dashboard (roles/monitoring/files/mpijob-overview.json), drawn as
SVG line charts on the server (no chart library in the browser)."""

from __future__ import annotations

import datetime
import html
import time
from dataclasses import dataclass

from mpiplat.conformance.prometheus import Prometheus, PrometheusError

POINTS = 60  # samples per series over the job's life
COLOURS = ("#0066cc", "#3e8635", "#f0ab00", "#c9190b", "#8476d1", "#009596", "#ec7a08", "#6a6e73")


@dataclass(frozen=True)
class Panel:
    title: str
    query: str  # {pods} and {ns} filled in
    unit: str
    scale: float = 1.0


PANELS = (
    Panel("CPU (cores)", 'sum by (pod) (rate(container_cpu_usage_seconds_total{{pod=~"{pods}", namespace="{ns}", '
                         'container!=""}}[1m]))', "cores"),
    Panel("Memory (MiB)", 'sum by (pod) (container_memory_working_set_bytes{{pod=~"{pods}", namespace="{ns}", '
                          'container!=""}})', "MiB", 1 / 2**20),
    Panel("GPU utilisation (%)", 'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{{pod=~"{pods}", namespace="{ns}"}})', "%"),
)


def _epoch(stamp: str | None) -> float | None:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def series(prom: Prometheus, ns: str, name: str, start: str | None, end: str | None) -> list[tuple[Panel, dict]]:
    """Each panel with its series (pod -> [(time, value)]) over the job's life (start to end, or now)."""
    t1 = _epoch(end) or time.time()
    t0 = _epoch(start) or t1 - 600
    t0, t1 = t0 - 30, t1 + 30  # the samples just before and after
    step = max(5.0, (t1 - t0) / POINTS)
    pods = f"{name}-(worker|launcher).*"
    out = []
    for panel in PANELS:
        found = prom.query_range(panel.query.format(pods=pods, ns=ns), t0, t1, step)
        out.append((panel, {s["metric"].get("pod", "?"): [(float(t), float(v) * panel.scale) for t, v in s["values"]]
                            for s in found}))
    return out


def svg(panel: Panel, data: dict[str, list[tuple[float, float]]], width: int = 640, height: int = 200) -> str:
    """A line chart: one polyline per pod, a time axis in seconds from the first sample, the top value."""
    points = [p for values in data.values() for p in values]
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    top = max(v for _, v in points) or 1.0
    pad = 40
    x = lambda t: pad + (t - t0) / ((t1 - t0) or 1) * (width - pad - 10)  # noqa: E731
    y = lambda v: height - 20 - v / top * (height - 40)  # noqa: E731
    lines = [f'<svg class="chart" data-panel="{html.escape(panel.title)}" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-label="{html.escape(panel.title)}">',
             f'<line x1="{pad}" y1="{height - 20}" x2="{width - 10}" y2="{height - 20}" stroke="#d2d2d2"/>',
             f'<text x="2" y="24" font-size="11">{top:.3g}</text><text x="2" y="{height - 22}" font-size="11">0</text>',
             f'<text x="{width - 60}" y="{height - 4}" font-size="11">{t1 - t0:.0f} s</text>']
    for i, (pod, values) in enumerate(sorted(data.items())):
        colour = COLOURS[i % len(COLOURS)]
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in values)
        lines.append(f'<polyline data-pod="{html.escape(pod)}" fill="none" stroke="{colour}" stroke-width="1.5" '
                     f'points="{coords}"/>')
        lines.append(f'<text x="{pad + 8}" y="{16 + 13 * i}" font-size="11" fill="{colour}">{html.escape(pod)}</text>')
    lines.append("</svg>")
    return "\n".join(lines)


def fragment(prom: Prometheus | None, ns: str, name: str, start: str | None, end: str | None) -> str:
    """The Metrics tab's HTML."""
    if prom is None:
        return ("<p>No Prometheus named: start the dashboard with <code>--prometheus URL</code> (the cluster's "
                "Prometheus, e.g. OpenShift's thanos-querier) to see the job's CPU, memory and GPU use.</p>")
    try:
        panels = series(prom, ns, name, start, end)
    except PrometheusError as err:
        return f'<div class="pf-v6-c-alert pf-m-inline pf-m-warning"><p>{html.escape(str(err))}</p></div>'
    parts = []
    for panel, data in panels:
        parts.append(f'<h3 class="pf-v6-c-title pf-m-md">{html.escape(panel.title)}</h3>')
        parts.append(svg(panel, data) if data else
                     f'<p class="no-data" data-panel="{html.escape(panel.title)}">No samples in Prometheus for this '
                     "job's pods" + (" (DCGM exports GPU use where the GPU Operator runs)" if "GPU" in panel.title
                                     else "") + ".</p>")
    return "\n".join(parts)
