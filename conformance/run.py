"""One conformance run: its id, its labelled throwaway namespaces, and its measured figures.

An interrupt (Ctrl-C, or SIGTERM, which the suite turns into one) never leaves a namespace behind:
a namespace's name is recorded before it is created and its create call cannot be cut short, the
delete calls are never cut short either (`signals_held`), and the final wait deletes again whatever
namespace of the run it still finds alive (a create the server finished after an interrupt).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat.conformance.settings import Settings, Team
from mpiplat.kube import LOCALQUEUE, Kube, wait_default_service_account

RUN_LABEL = "mpiplat.io/conformance-run"
TEAM_LABEL = "mpiplat.io/team"
# Every namespace of a run enforces Pod Security `restricted`, as team namespaces do (the mpi-tenant chart's
# default): what the suite runs there, users' jobs can run under OpenShift's restricted-v2.
POD_SECURITY = {"pod-security.kubernetes.io/enforce": "restricted"}
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REQUEST_TIMEOUT_S = 30  # bounds each call made while signals are held


@contextlib.contextmanager
def signals_held(signums: tuple[int, ...] = HELD_SIGNALS) -> Iterator[None]:
    """Run the block to its end even when SIGINT or SIGTERM arrives; the first such signal is then
    delivered to the handler that was in place (Ctrl-C's KeyboardInterrupt) once the block is over.
    Outside the main thread (where Python cannot set handlers) the block runs unprotected."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def hold(signum, _frame):
        got.append(signum)

    previous = {}
    try:
        for s in signums:
            previous[s] = signal.signal(s, hold)
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)  # None: set outside Python
        if got:
            signal.raise_signal(got[0])  # the restored handler runs now, e.g. raises KeyboardInterrupt


@dataclass
class Figure:
    requirement: str
    name: str
    value: float
    unit: str = ""
    target: float | None = None
    better: str = "lower"  # lower | higher: which side of the target passes

    @property
    def meets_target(self) -> bool | None:
        if self.target is None:
            return None
        return self.value <= self.target if self.better == "lower" else self.value >= self.target


@dataclass
class Run:
    kube: Kube
    settings: Settings
    keep: bool = False
    id: str = field(default_factory=lambda: time.strftime("%m%d%H%M") + "-" + uuid.uuid4().hex[:4])
    namespaces: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    plots: list[dict] = field(default_factory=list)  # {"requirement", "title", "svg"}
    wait_abandoned: bool = False  # a second interrupt ended cleanup's wait: later cleanups do not wait again
    gone: bool = False  # the last cleanup saw every namespace of the run gone (until the next is created)
    _deleting: set[str] = field(default_factory=set, repr=False)  # delete accepted, or already terminating

    def namespace(self, team: Team | None = None, labels: dict[str, str] | None = None) -> str:
        """A new throwaway namespace labelled with the run id, enforcing Pod Security `restricted`
        (POD_SECURITY, unless `labels` say otherwise); with `team`, it is labelled mpiplat.io/team=<team>
        (so the team's ClusterQueue admits it) and a LocalQueue `lq` in it points at the team's ClusterQueue."""
        name = f"{self.settings.namespace_prefix}-{self.id}-{len(self.namespaces)}"
        team_label = {TEAM_LABEL: team.name} if team else {}
        body = client.V1Namespace(metadata=client.V1ObjectMeta(
            name=name, labels={RUN_LABEL: self.id, "app.kubernetes.io/part-of": "mpiplat-conformance",
                               **POD_SECURITY, **team_label, **(labels or {})}))
        # Recorded first, and the create is not cut short: whatever the server did, cleanup knows the name.
        with signals_held():
            self.namespaces.append(name)
            self.gone = False
            self.kube.core.create_namespace(body, _request_timeout=REQUEST_TIMEOUT_S)
        if team and team.cluster_queue:
            self.kube.create(LOCALQUEUE, {"apiVersion": LOCALQUEUE.api_version, "kind": "LocalQueue",
                                          "metadata": {"name": "lq", "namespace": name},
                                          "spec": {"clusterQueue": team.cluster_queue}})
        # As a team's namespace: with its default ServiceAccount, so that the API takes its pods (JOB-06's first
        # job in a new namespace took 35 s to run while the operator backed off, the next ones 1-3 s). Set-up,
        # not a row's wait: not scaled by wait_scale.
        wait_default_service_account(self.kube.core, name, 60, _request_timeout=REQUEST_TIMEOUT_S)
        return name

    def record(self, requirement: str, name: str, value: float, unit: str = "", target: float | None = None,
               better: str = "lower") -> Figure:
        fig = Figure(requirement, name, round(float(value), 3), unit, target, better)
        self.figures.append(fig)
        return fig

    @property
    def _selector(self) -> str:
        return f"{RUN_LABEL}={self.id}"

    def _list(self) -> list[client.V1Namespace]:
        return self.kube.core.list_namespace(label_selector=self._selector, _request_timeout=REQUEST_TIMEOUT_S).items

    def _delete(self, names: set[str]) -> None:
        """Delete each namespace, then its pods at once (grace period 0); one failing does not stop the others
        (the first error is raised after).

        The namespace controller waits 5 s before it empties a deleted namespace, then requeues it for about
        half of its pods' remaining grace period: a namespace that still had a pod took 10.4 s to go, 5.3 s
        with its pods deleted at once. A terminating namespace admits no new pod, so none comes back."""
        error: Exception | None = None
        for name in sorted(names):
            try:
                self.kube.core.delete_namespace(name, _request_timeout=REQUEST_TIMEOUT_S)
                self._deleting.add(name)
                self.kube.core.delete_collection_namespaced_pod(name, grace_period_seconds=0,
                                                                _request_timeout=REQUEST_TIMEOUT_S)
            except ApiException as err:
                if err.status == 409:  # already terminating
                    self._deleting.add(name)
                elif err.status != 404:  # 404: gone, or its create failed (the label list finds a late one)
                    error = error or err
            except Exception as err:  # e.g. a timeout: the other deletes are still tried
                error = error or err
        if error:
            raise error

    def delete_namespaces(self) -> None:
        """Start deleting every namespace of this run (also ones a crashed earlier step left). An
        interrupt does not cut this short: it is raised once every delete call has been made."""
        if self.keep:
            return
        with signals_held():
            names = set(self.namespaces) - self._deleting
            try:
                names |= {n.metadata.name for n in self._list() if not n.metadata.deletion_timestamp}
            finally:  # the recorded names are deleted even when the list fails
                self._delete(names)

    def cleanup(self, wait: float = 120) -> list[str]:
        """Delete every namespace of this run and wait until they are gone. Returns what is left.
        A namespace of the run found alive during the wait (e.g. one whose create the server finished
        after an interrupt) is deleted too. An interrupt (Ctrl-C, SIGTERM) during the wait is raised
        once it is over; a second one ends the wait at once (every delete call has been made by then)."""
        if self.keep:
            return []
        if self.wait_abandoned:
            wait = 0
        interrupt: BaseException | None = None
        try:
            self.delete_namespaces()
        except KeyboardInterrupt as err:  # held until every delete was made; the wait still runs
            interrupt = err
        deadline = time.monotonic() + wait
        left: list[str] = []
        while True:
            try:
                found = self._list()
                left = [n.metadata.name for n in found]
                alive = {n.metadata.name for n in found if not n.metadata.deletion_timestamp}
                if alive:
                    with signals_held():
                        self._delete(alive)
                if not left or time.monotonic() >= deadline:
                    break
                time.sleep(1)
            except KeyboardInterrupt as err:
                if interrupt:
                    self.wait_abandoned = True
                    raise
                interrupt = err
        if interrupt:
            raise interrupt
        self.gone = not left
        return left
