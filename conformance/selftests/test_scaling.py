"""Scaling analysis on recorded figures (PERF-02, PERF-03)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from mpiplat.conformance import scaling
from mpiplat.conformance.watch import percentile

# Recorded NCCL all-reduce bus bandwidth (GB/s) of a cluster that scales well, and one that does not.
GOOD = {1: 180.0, 2: 352.0, 4: 690.0, 8: 1310.0, 16: 2380.0}
POOR = {1: 180.0, 2: 300.0, 4: 480.0, 8: 1080.0, 16: 1900.0}
TARGETS = {8: 0.85, 16: 0.75}


def test_speedup_and_efficiency():
    points = {p.nodes: p for p in scaling.analyse(GOOD)}
    assert points[1].speedup == 1 and points[1].efficiency == 1
    assert points[8].speedup == pytest.approx(1310 / 180)
    assert points[8].efficiency == pytest.approx(1310 / 180 / 8)


def test_perf02_passes_a_well_scaling_cluster_and_names_the_failing_node_counts():
    assert scaling.efficiency_failures(scaling.analyse(GOOD), TARGETS) == []
    failures = scaling.efficiency_failures(scaling.analyse(POOR), TARGETS)
    assert failures == ["8 nodes: efficiency 75.0% below target 85%", "16 nodes: efficiency 66.0% below target 75%"]
    missing = scaling.efficiency_failures(scaling.analyse({1: 1.0, 2: 2.0}), TARGETS)
    assert missing[0].startswith("8 nodes: not measured")


def test_perf03_time_ratio():
    assert scaling.time_ratio(1000, 280) == pytest.approx(0.28)
    assert scaling.time_ratio(1000, 350) > 0.30


@pytest.mark.parametrize("bad, message", [({2: 1.0}, "needs a 1-node measurement"), ({1: 0.0}, "throughputs > 0")])
def test_bad_measurements_are_rejected(bad, message):
    with pytest.raises(ValueError, match=message):
        scaling.analyse(bad)


def test_svg_plot_is_well_formed_and_shows_every_point():
    svg = scaling.svg_plot(scaling.analyse(GOOD), TARGETS)
    root = ET.fromstring(svg)
    circles = [e for e in root.iter() if e.tag.endswith("circle")]
    assert len(circles) == len(GOOD)


@pytest.mark.parametrize(("n", "pct", "rank"), [(10, 95, 10), (20, 95, 19), (100, 95, 95), (10, 50, 5), (200, 95, 190),
                                                (1, 95, 1), (3, 0, 1)])
def test_percentile_is_the_nearest_rank(n, pct, rank):
    """JOB-06 and SCALE-01's p50/p95: of 20 submissions the p95 is the 19th, so one slow one is allowed; of 10 it
    is the slowest."""
    assert percentile([float(v) for v in range(n, 0, -1)], pct) == rank
