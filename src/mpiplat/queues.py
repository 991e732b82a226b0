"""Kueue ClusterQueue GPU arithmetic: what a queue owns, uses, and may borrow from its cohort.
The suite sizes its jobs with it and `diagnose` explains queued jobs with it."""

from __future__ import annotations

from dataclasses import dataclass

from mpiplat.kube import CLUSTERQUEUE, Kube, condition


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
    borrow_ceiling: int  # GPUs it could borrow with the rest of the cohort idle

    @property
    def available(self) -> int:
        return self.nominal - self.reserved + self.borrowable

    @property
    def most(self) -> int:
        """The largest request this queue can ever admit (nominal quota plus all it may borrow)."""
        return self.nominal + self.borrow_ceiling


def held(queue: dict | None) -> str | None:
    """"is held (stopPolicy: Hold)" where a ClusterQueue's or LocalQueue's stopPolicy holds it; None otherwise."""
    policy = ((queue or {}).get("spec") or {}).get("stopPolicy") or "None"
    return None if policy == "None" else f"is held (stopPolicy: {policy})"


def admits_nothing(cq: dict) -> tuple[str, str] | None:
    """("held" or "inactive", why) where ClusterQueue `cq` admits no job whatever its quota: held by its
    stopPolicy, or not Active (e.g. a ResourceFlavor it names is missing); None otherwise."""
    if why := held(cq):
        return "held", why
    active = condition(cq, "Active")
    if active is None or active.get("status") != "True":
        return "inactive", (f"is inactive ({(active or {}).get('reason', 'no Active condition')}: "
                            f"{(active or {}).get('message', '')})")
    return None


def gpu_capacity(kube: Kube, name: str, gpu: str) -> GpuCapacity:
    """Raises KeyError when no ClusterQueue `name` exists."""
    listed = kube.custom.list_cluster_custom_object(CLUSTERQUEUE.group, CLUSTERQUEUE.version, CLUSTERQUEUE.plural)
    return capacity({c["metadata"]["name"]: c for c in listed["items"]}, name, gpu)


def capacity(cqs: dict[str, dict], name: str, gpu: str) -> GpuCapacity:
    """GPU capacity of ClusterQueue `name` among `cqs` (every ClusterQueue, by name)."""
    cq = cqs[name]
    entries = _gpu_entries(cq, gpu)
    nominal = sum(_num(r.get("nominalQuota")) for r in entries)
    limit = None if any(r.get("borrowingLimit") is None for r in entries) else \
        sum(_num(r["borrowingLimit"]) for r in entries)
    lendable = idle = 0
    if _cohort(cq):
        for other_name, other in cqs.items():
            if other_name == name or _cohort(other) != _cohort(cq):
                continue
            own = lend = 0
            for r in _gpu_entries(other, gpu):
                own += _num(r.get("nominalQuota"))
                lend += min(_num(r.get("nominalQuota")), _num(r.get("lendingLimit", r.get("nominalQuota"))))
            # A queue's usage fills the part it does not lend first.
            lendable += lend
            idle += lend - min(lend, max(0, _reserved(other, gpu) - (own - lend)))
    cap = (lambda n: n) if limit is None else (lambda n: min(n, limit))
    return GpuCapacity(nominal, _reserved(cq, gpu), cap(idle), cap(lendable))
