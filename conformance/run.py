"""One conformance run: its id, its labelled throwaway namespaces, and its measured figures."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat.conformance.settings import Settings, Team
from mpiplat.kube import LOCALQUEUE, Kube

RUN_LABEL = "mpiplat.io/conformance-run"
TEAM_LABEL = "mpiplat.io/team"


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

    def namespace(self, team: Team | None = None, labels: dict[str, str] | None = None) -> str:
        """A new throwaway namespace labelled with the run id; with `team`, it is labelled
        mpiplat.io/team=<team> (so the team's ClusterQueue admits it) and a LocalQueue `lq` in it
        points at the team's ClusterQueue."""
        name = f"{self.settings.namespace_prefix}-{self.id}-{len(self.namespaces)}"
        team_label = {TEAM_LABEL: team.name} if team else {}
        self.kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
            name=name, labels={RUN_LABEL: self.id, "app.kubernetes.io/part-of": "mpiplat-conformance",
                               **team_label, **(labels or {})})))
        self.namespaces.append(name)
        if team and team.cluster_queue:
            self.kube.create(LOCALQUEUE, {"apiVersion": LOCALQUEUE.api_version, "kind": "LocalQueue",
                                          "metadata": {"name": "lq", "namespace": name},
                                          "spec": {"clusterQueue": team.cluster_queue}})
        return name

    def record(self, requirement: str, name: str, value: float, unit: str = "", target: float | None = None,
               better: str = "lower") -> Figure:
        fig = Figure(requirement, name, round(float(value), 3), unit, target, better)
        self.figures.append(fig)
        return fig

    def delete_namespaces(self) -> None:
        """Start deleting every namespace of this run (also ones a crashed earlier step left)."""
        if self.keep:
            return
        names = {n.metadata.name for n in self.kube.core.list_namespace(label_selector=self._selector).items}
        for name in names | set(self.namespaces):
            try:
                self.kube.core.delete_namespace(name)
            except ApiException as err:
                if err.status not in (404, 409):  # gone, or already terminating
                    raise

    @property
    def _selector(self) -> str:
        return f"{RUN_LABEL}={self.id}"

    def cleanup(self, wait: float = 120) -> list[str]:
        """Delete every namespace of this run and wait until they are gone. Returns what is left.
        An interrupt (Ctrl-C, SIGTERM) during the wait is raised once it is over; a second one at once."""
        if self.keep:
            return []
        self.delete_namespaces()
        interrupt: BaseException | None = None
        deadline = time.monotonic() + wait
        while True:
            try:
                left = [n.metadata.name for n in self.kube.core.list_namespace(label_selector=self._selector).items]
                if not left or time.monotonic() >= deadline:
                    break
                time.sleep(1)
            except KeyboardInterrupt as err:
                if interrupt:
                    raise
                interrupt = err
        if interrupt:
            raise interrupt
        return left
