"""`mpiplat cluster down` (marked last: it stops the session's cluster)."""

from __future__ import annotations

import pytest

from mpiplat.localcluster import cluster, hoststate, processes, realnode

pytestmark = [pytest.mark.cluster, pytest.mark.last]


def test_down_leaves_no_process_or_port_and_is_idempotent(kube):
    pids = [c["pid"] for c in cluster.status()["components"].values() if c["pid"]]
    assert pids
    # What `up` recorded before the real node changed the host (sysctls, iptables, ipsets, links,
    # mounts, host paths, cgroups): `down` must leave the host exactly so.
    before = hoststate.load(realnode.snapshot_file())
    assert before is not None, "the cluster runs no real node, or `up` did not record the host"
    assert hoststate.differences(before, hoststate.snapshot()), "the real node changed nothing: the check is void"
    cluster.down()
    assert hoststate.differences(before, hoststate.snapshot()) == []
    assert not [p for p in realnode.all_ports() if processes.port_open(p)]
    assert not any(processes.alive(pid) for pid in pids)
    assert not [p for p in cluster.all_ports() if processes.port_open(p)]
    assert not cluster.state_dir().exists()
    cluster.down()  # a second down is a no-op
    assert not cluster.status()["healthy"]
