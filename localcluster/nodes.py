"""Fake KWOK nodes from a node-pool spec (localcluster/nodepools.yml by default)."""

from __future__ import annotations

from pathlib import Path

import yaml

from mpiplat.errors import MpiplatError

DEFAULT_SPEC = Path(__file__).with_name("nodepools.yml")
GPU_RESOURCE = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL = "mpiplat.io/rack"
POOL_LABEL = "mpiplat.io/node-pool"
MAX_PODS = "250"


class NodePoolError(MpiplatError, ValueError):
    """A node-pool spec is invalid."""


def _check_pool(path: Path, i: int, pool) -> None:
    where = f"{path}: pools[{i}]"
    if not isinstance(pool, dict):
        raise NodePoolError(f"{where} must be a mapping, got {pool!r}")
    name = pool.get("name")
    if not isinstance(name, str) or not name.replace("-", "").isalnum() or name != name.lower():
        raise NodePoolError(f"{where}.name is {name!r}; allowed: lower-case letters, digits and '-'")
    for key in ("count", "gpus"):
        val = pool.get(key)
        if not isinstance(val, int) or isinstance(val, bool) or val < 0:
            raise NodePoolError(f"{where}.{key} is {val!r}; allowed: an integer >= 0")
    for key in ("zones", "racks"):
        val = pool.get(key)
        if not isinstance(val, list) or not val or not all(isinstance(v, str) for v in val):
            raise NodePoolError(f"{where}.{key} is {val!r}; allowed: a non-empty list of strings")
    if not isinstance(pool.get("labels", {}), dict):
        raise NodePoolError(f"{where}.labels is {pool.get('labels')!r}; allowed: a mapping")


def load(path: Path = DEFAULT_SPEC) -> list[dict]:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as err:
        raise NodePoolError(f"cannot read node-pool spec {path}: {err.strerror}; pass an existing file to "
                            "--node-pools") from err
    except yaml.YAMLError as err:
        raise NodePoolError(f"{path} is not valid YAML: fix it, then retry\n{err}") from err
    if not isinstance(data, dict):
        raise NodePoolError(f"{path}: a node-pool spec is a mapping with a 'pools' list")
    pools = data.get("pools")
    if not isinstance(pools, list) or not pools:
        raise NodePoolError(f"{path}: 'pools' must be a non-empty list")
    for i, pool in enumerate(pools):
        _check_pool(path, i, pool)
    names = [p["name"] for p in pools]
    if len(set(names)) != len(names):
        raise NodePoolError(f"{path}: pool names must be unique, got {names}")
    return pools


def manifests(pools: list[dict], taints: list[dict] | None = None) -> list[dict]:
    """Node objects for kwok to manage (annotation kwok.x-k8s.io/node: fake), each with the pool's
    taints plus `taints` (the real node's cluster taints them all, see realnode.KWOK_TAINT)."""
    nodes = []
    for pool in pools:
        for i in range(pool["count"]):
            name = f"{pool['name']}-{i}"
            capacity = {"cpu": str(pool.get("cpu", "32")), "memory": str(pool.get("memory", "128Gi")),
                        "pods": MAX_PODS, "ephemeral-storage": "1Ti"}
            if pool["gpus"]:
                capacity[GPU_RESOURCE] = str(pool["gpus"])
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                POOL_LABEL: pool["name"],
                ZONE_LABEL: pool["zones"][i % len(pool["zones"])],
                RACK_LABEL: pool["racks"][i % len(pool["racks"])],
                **{k: str(v) for k, v in (pool.get("labels") or {}).items()},
            }
            nodes.append({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels,
                             "annotations": {"kwok.x-k8s.io/node": "fake"}},
                "spec": {"taints": [*(pool.get("taints") or []), *(taints or [])]},
                "status": {"capacity": capacity, "allocatable": capacity,
                           "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                                        "kubeletVersion": "fake", "kubeProxyVersion": "fake"}},
            })
    return nodes
