"""Which objects the cluster does not hold as written (the module mpiplat.platform.crds applies only those).

A server-side apply of an unchanged object changes nothing, but a large one (Kueue's and Kubeflow Trainer's
CRDs) costs seconds each time. What is compared is what we write: every
top-level field but apiVersion, kind, metadata and status, and the labels and annotations. The live object
may hold more (defaults, fields other managers own); a value we set that differs, or is gone, is drift.
"""

from __future__ import annotations

from typing import Any


def contains(live: Any, want: Any) -> bool:
    """Whether `live` holds every value of `want`: dicts key by key, lists item by item (same length),
    scalars equal or with the same text (a quantity written 1, served "1")."""
    if isinstance(want, dict):
        return isinstance(live, dict) and all(k in live and contains(live[k], v) for k, v in want.items())
    if isinstance(want, list):
        return (isinstance(live, list) and len(live) == len(want)
                and all(contains(a, b) for a, b in zip(live, want, strict=True)))
    return live == want or (live is not None and want is not None and str(live) == str(want))


def written(obj: dict) -> dict:
    meta = obj.get("metadata") or {}
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    body["metadata"] = {k: meta[k] for k in ("labels", "annotations") if meta.get(k)}
    return body


def holds(live: dict | None, desired: dict) -> bool:
    """Whether the cluster's object `live` (None: there is none) holds `desired` as written."""
    return live is not None and contains(live, written(desired))
