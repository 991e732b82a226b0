"""mpiplat: installer and conformance suite for MPI training on Kubernetes, and an MPIJob SDK:

    from mpiplat import Client, MPIJob   (also AsyncClient, JobStatus, JobError; see mpiplat.sdk)
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mpiplat")
except PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
    __version__ = "0+unknown"

# The SDK's names, imported on first use so `mpiplat --version` does not load the Kubernetes client.
_SDK = {"MPIJob": "mpiplat.jobs", "JobSpecError": "mpiplat.jobs", "Client": "mpiplat.sdk",
        "AsyncClient": "mpiplat.sdk", "JobStatus": "mpiplat.sdk", "JobError": "mpiplat.sdk",
        "PodsRefused": "mpiplat.sdk"}
__all__ = ["__version__", *_SDK]


def __getattr__(name: str):
    if name in _SDK:
        return getattr(import_module(_SDK[name]), name)
    raise AttributeError(f"module 'mpiplat' has no attribute {name!r}")
