"""Kueue ClusterQueue arithmetic the suite sizes its jobs with."""

from __future__ import annotations

from dataclasses import dataclass

from mpiplat.kube import CLUSTERQUEUE, Kube


def _num(value) -> int:
    return int(str(value)) if value is not None else 0


def _gpu_entries(cq: dict, gpu: str) -> list[dict]:
    return [r for g in cq["spec"].get("resourceGroups", []) for f in g.get("flavors", [])
            for r in f.get("resources", []) if r["name"] == gpu]


def _reserved(cq: dict, gpu: str) -> int:
    return sum(_num(r.get("total", 0)) for f in (cq.get("status") or {}).get("flavorsReservation", [])
               for r in f.get("resources", []) if r["name"] == gpu)


def _cohort(cq: dict) -> str:
    return cq["spec"].get("cohortName") or cq["spec"].get("cohort") or ""


@dataclass(frozen=True)
class GpuCapacity:
    nominal: int
    reserved: int
    borrowable: int  # idle GPUs of the cohort this queue may borrow now

    @property
    def available(self) -> int:
        return self.nominal - self.reserved + self.borrowable


def gpu_capacity(kube: Kube, name: str, gpu: str) -> GpuCapacity:
    listed = kube.custom.list_cluster_custom_object(CLUSTERQUEUE.group, CLUSTERQUEUE.version, CLUSTERQUEUE.plural)
    cqs = {c["metadata"]["name"]: c for c in listed["items"]}
    cq = cqs[name]
    entries = _gpu_entries(cq, gpu)
    nominal = sum(_num(r.get("nominalQuota")) for r in entries)
    limit = None if any(r.get("borrowingLimit") is None for r in entries) else \
        sum(_num(r["borrowingLimit"]) for r in entries)
    idle = 0
    if _cohort(cq):
        for other_name, other in cqs.items():
            if other_name == name or _cohort(other) != _cohort(cq):
                continue
            for r in _gpu_entries(other, gpu):
                lendable = _num(r.get("nominalQuota"))
                if r.get("lendingLimit") is not None:
                    lendable = min(lendable, _num(r["lendingLimit"]))
                idle += lendable
            idle -= min(_reserved(other, gpu), idle)
    borrowable = idle if limit is None else min(idle, limit)
    return GpuCapacity(nominal, _reserved(cq, gpu), borrowable)
