"""`mpiplat cluster down` (marked last: it stops the session's cluster)."""

from __future__ import annotations

import pytest

from mpiplat.localcluster import cluster, processes

pytestmark = [pytest.mark.cluster, pytest.mark.last]


def test_down_leaves_no_process_or_port_and_is_idempotent(kube):
    pids = [c["pid"] for c in cluster.status()["components"].values() if c["pid"]]
    assert pids
    cluster.down()
    assert not any(processes.alive(pid) for pid in pids)
    assert not [p for p in cluster.all_ports() if processes.port_open(p)]
    assert not cluster.state_dir().exists()
    cluster.down()  # a second down is a no-op
    assert not cluster.status()["healthy"]
