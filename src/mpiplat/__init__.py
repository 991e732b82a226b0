"""mpiplat: installer and conformance suite for MPI training on Kubernetes."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mpiplat")
except PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
    __version__ = "0+unknown"
