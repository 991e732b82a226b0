"""The fault matrix's mechanics: one fault of the local cluster each, applied and undone here and nowhere else.

A conformance check is proved by a cluster it fails on (docs/field-engineer.md, "The fault matrix").
Each Fault below breaks one thing of the running local cluster (a stopped controller, a deleted policy,
a Kueue configuration without a feature, ...) and puts the cluster back exactly as it was: objects are
read before they are changed or deleted and restored from that copy; controllers are stopped and started
with the local cluster's own functions (processes, realnode, configs). Which rows must fail under each,
with which words, is data: conformance/faults.yml (mpiplat.conformance.faultmatrix), by the same names.

    with fault.applied():      # undo() runs however the block ends; undo() is idempotent
        ...run the suite with --only the fault's rows...

localcluster/tests/test_fault_matrix.py runs the matrix against the local cluster; its offline
selftests check this list against faults.yml.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shlex
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mpiplat.jobs import ROLE_LABEL
from mpiplat.localcluster import configs, images, processes, realnode
from mpiplat.localcluster.kubectl import kubectl
from mpiplat.localcluster.lifecycle import kwok_component, restart_component
from mpiplat.localcluster.state import ClusterError, log_file, state_dir

TEAM = "team-a"  # the first team of conformance/settings/local.yml: the rows that read a team read this one
VIEWER_ROLE = "mpijob-viewer"  # the tenancy role's viewer ClusterRole (tenancy_cluster_roles.viewer)
# Fields the API server sets: dropped from a saved object before it is created again.
SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation", "selfLink",
                 "deletionTimestamp", "deletionGracePeriodSeconds")
WAIT_S = 90


# ---------------------------------------------------------------- objects through kubectl

def _ns(namespace: str | None) -> list[str]:
    return ["-n", namespace] if namespace else []


def get(kind: str, name: str, namespace: str | None = None) -> dict | None:
    """The object as JSON, or None when it does not exist."""
    proc = kubectl("get", kind, name, *_ns(namespace), "-o", "json", "--ignore-not-found", check=True)
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def list_objects(kind: str, namespace: str | None = None, *args: str) -> list[dict]:
    """Objects of `kind` in `namespace` (every namespace with args "-A"), `args` more kubectl options."""
    return json.loads(kubectl("get", kind, *_ns(namespace), *args, "-o", "json").stdout)["items"]


def clean(obj: dict) -> dict:
    """A saved object as it can be created again: without status and the fields the server sets."""
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.get("metadata", {})
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    return out


def create(obj: dict) -> None:
    """Create a saved object again unless an object of that name exists."""
    meta = obj["metadata"]
    if get(obj["kind"], meta["name"], meta.get("namespace")) is None:
        kubectl("create", "-f", "-", input=json.dumps(clean(obj)))


def replace(obj: dict) -> None:
    """Put a saved object back as it was (unconditional update of its spec and metadata)."""
    kubectl("replace", "-f", "-", input=json.dumps(clean(obj)))


def delete(kind: str, name: str, namespace: str | None = None, wait: bool = True) -> None:
    kubectl("delete", kind, name, *_ns(namespace), "--ignore-not-found", f"--wait={str(wait).lower()}",
            f"--timeout={WAIT_S}s")


# ---------------------------------------------------------------- faults

@dataclass
class Fault:
    """One fault: `name` (short, unique; conformance/faults.yml says what it breaks and which rows must fail
    under it) and apply/undo. undo() puts back what apply() changed (read before the change) and may run
    any number of times, also after an apply() that stopped half-way."""

    name: str
    saved: list = field(default_factory=list, repr=False)

    def apply(self) -> None:
        raise NotImplementedError

    def undo(self) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def applied(self) -> Iterator[Fault]:
        try:
            self.apply()
            yield self
        finally:
            self.undo()


@dataclass
class DeletedObjects(Fault):
    """Objects of `kind` (in `namespace`) whose name starts with `prefix` (every one when empty), or the
    one named `only`, are deleted; undo creates them again from their saved copies."""

    kind: str = ""
    namespace: str | None = None
    prefix: str = ""
    only: str = ""
    label: str = ""
    all_namespaces: bool = False

    def _targets(self) -> list[dict]:
        if self.only:
            found = get(self.kind, self.only, self.namespace)
            return [found] if found else []
        args = (["-l", self.label] if self.label else []) + (["-A"] if self.all_namespaces else [])
        items = list_objects(self.kind, self.namespace, *args)
        return [o for o in items if o["metadata"]["name"].startswith(self.prefix)]

    def apply(self) -> None:
        targets = self._targets()
        if not targets:
            raise ClusterError(f"fault {self.name}: no {self.kind} {self.only or self.prefix + '*'} to delete "
                               f"{'in ' + self.namespace if self.namespace else ''}: is the stack installed?")
        for obj in targets:
            self.saved.append(obj)
            delete(self.kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))

    def undo(self) -> None:
        while self.saved:
            create(self.saved[-1])
            self.saved.pop()


@dataclass
class CreatedObjects(Fault):
    """Objects that must not be there, created in order; undo deletes them."""

    objs: list[dict] = field(default_factory=list)

    def apply(self) -> None:
        self.saved.append(True)
        for obj in self.objs:
            kubectl("create", "-f", "-", input=json.dumps(obj))

    def undo(self) -> None:
        for obj in reversed(self.objs):
            meta = obj["metadata"]
            delete(obj["kind"], meta["name"], meta.get("namespace"))
        self.saved.clear()


@dataclass
class ChangedObject(Fault):
    """An object changed by a JSON merge patch (or a JSON patch); undo replaces it with its saved copy."""

    kind: str = ""
    obj_name: str = ""
    namespace: str | None = None
    merge: dict | None = None
    json_patch: list | None = None

    def apply(self) -> None:
        before = get(self.kind, self.obj_name, self.namespace)
        if before is None:
            raise ClusterError(f"fault {self.name}: {self.kind} {self.obj_name} not found: is the stack installed?")
        self.saved.append(before)
        how = ["--type=merge", "-p", json.dumps(self.merge)] if self.merge is not None else \
            ["--type=json", "-p", json.dumps(self.json_patch)]
        kubectl("patch", self.kind, self.obj_name, *_ns(self.namespace), *how)

    def undo(self) -> None:
        if self.saved:
            replace(self.saved[-1])
            self.saved.clear()


@dataclass
class RuleNotLoaded(ChangedObject):
    """A PrometheusRule changed so that the cluster's Prometheus drops its `alerts`: apply waits until it has,
    undo until they are loaded again (the rule sync, like the Prometheus Operator's, follows within seconds)."""

    alerts: tuple[str, ...] = ()

    def _wait(self, loaded: bool) -> None:
        deadline = time.monotonic() + WAIT_S
        while (set(self.alerts) <= _loaded_alerts()) != loaded:
            if time.monotonic() > deadline:
                raise ClusterError(f"fault {self.name}: Prometheus has {'not loaded' if loaded else 'kept'} the "
                                   f"alerts {list(self.alerts)} after {WAIT_S}s: see "
                                   f"{log_file('prometheus-rules')}")
            time.sleep(0.5)

    def apply(self) -> None:
        super().apply()
        self._wait(loaded=False)

    def undo(self) -> None:
        if self.saved:
            super().undo()
            self._wait(loaded=True)


def _loaded_alerts() -> set[str]:
    """The names of the alerting rules the cluster's Prometheus has loaded."""
    with urllib.request.urlopen(f"{processes.prometheus_url()}/api/v1/rules", timeout=5) as resp:
        groups = json.load(resp)["data"]["groups"]
    return {r["name"] for g in groups for r in g["rules"] if r.get("type") == "alerting"}


# ---------------------------------------------------------------- controllers and the real node

def _wait_controller(ctl: processes.Controller, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not processes.healthy(ctl):
        if time.monotonic() > deadline:
            raise ClusterError(f"{ctl.name} not healthy {timeout:.0f}s after its restart: see {log_file(ctl.name)}")
        time.sleep(0.25)


def start_controller(name: str, config: dict | None = None) -> None:
    """(Re)start a host-run controller with `config` (default: the local cluster's own), until healthy."""
    ctl = processes.controller(name)
    pki = state_dir() / "pki"
    processes.stop(ctl)
    processes.start(ctl, pki, config if config is not None else configs.controller_config(ctl, pki))
    _wait_controller(ctl)


@dataclass
class ControllerStopped(Fault):
    controller: str = ""

    def apply(self) -> None:
        self.saved.append(True)
        processes.stop(processes.controller(self.controller))

    def undo(self) -> None:
        if self.saved or not processes.running_pid(processes.pid_file(processes.controller(self.controller))):
            start_controller(self.controller)
        self.saved.clear()


@dataclass
class KueueConfigured(Fault):
    """Kueue restarted with its local configuration less `drop` (dotted keys) or a framework, or with feature
    gates turned off or on."""

    drop: tuple[str, ...] = ()
    framework_off: str = ""
    gates: dict[str, bool] = field(default_factory=dict)  # feature gate -> on or off

    def config(self) -> dict:
        ctl = processes.controller("kueue")
        conf = configs.controller_config(ctl, state_dir() / "pki")
        for key in self.drop:
            *path, last = key.split(".")
            node = conf
            for part in path:
                node = node.get(part, {})
            if last not in node:
                raise ClusterError(f"fault {self.name}: Kueue's local configuration has no {key}")
            node.pop(last)
        if self.framework_off:
            frameworks = conf["integrations"]["frameworks"]
            frameworks.remove(self.framework_off)
        if self.gates:
            conf.setdefault("featureGates", {}).update(self.gates)
        return conf

    def apply(self) -> None:
        self.saved.append(True)
        start_controller("kueue", self.config())

    def undo(self) -> None:
        if self.saved:
            start_controller("kueue")
            self.saved.clear()


# Kueue's TopologyAwareScheduling gate, and the gates on by default in v0.19 that Kueue refuses to run without it.
KUEUE_TAS_GATES = ("TopologyAwareScheduling", "TASProfileMixed", "TASHandleOverlappingFlavors",
                   "TASFailedNodeReplacement", "TASFailedNodeReplacementFailFast", "TASReplaceNodeOnPodTermination",
                   "TASReplaceNodeOnNodeTaints", "TASMultiLayerTopology", "TASRecomputeAssignmentWithinSchedulingCycle")


@dataclass
class NodeProcessStopped(Fault):
    """One of the real node's host processes stopped; undo starts it again with realnode's own start."""

    process: str = ""

    def apply(self) -> None:
        self.saved.append(True)
        realnode.stop_process(self.process)

    def undo(self) -> None:
        if self.saved or not realnode.process_running(self.process):
            realnode.start_process(self.process, timeout=WAIT_S)
        self.saved.clear()


@dataclass
class SchedulerPluginsOff(Fault):
    """kube-scheduler restarted with filter plugins disabled (a KubeSchedulerConfiguration), as a scheduler
    that ignores taints (TaintToleration) or selectors (NodeAffinity) would place pods; undo restarts it as
    kwokctl runs it, and waits until it is ready."""

    plugins: tuple[str, ...] = ()

    def config(self, args: list[str]) -> Path:
        kubeconfig = next(a.split("=", 1)[1] for a in args if a.startswith("--kubeconfig="))
        conf = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": kubeconfig, "qps": 5000, "burst": 10000},
                "leaderElection": {"leaderElect": False},  # as kwokctl runs it (configs.SCHEDULER_PATCH)
                "profiles": [{"schedulerName": "default-scheduler",
                              "plugins": {"filter": {"disabled": [{"name": p} for p in self.plugins]}}}]}
        path = state_dir() / "faults" / f"{self.name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(conf, sort_keys=False))
        return path

    def apply(self) -> None:
        comp = kwok_component("kube-scheduler")
        args = [a for a in comp["args"] if not a.startswith(("--kubeconfig=", "--kube-api-"))]
        self.saved.append(True)
        restart_component("kube-scheduler", [comp["binary"], *args, f"--config={self.config(comp['args'])}"])

    def undo(self) -> None:
        if self.saved:
            comp = kwok_component("kube-scheduler")
            restart_component("kube-scheduler", [comp["binary"], *comp["args"]])
            self.saved.clear()


# What kube-router's firewall adds to the host (filter table chains, ipsets); removed by kube_router_firewall_off.
KUBE_ROUTER_CHAINS = ("KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-")
KUBE_ROUTER_IPSETS = ("KUBE-SRC-", "KUBE-DST-", "kube-router-")


def _node_net(*argv: str) -> subprocess.CompletedProcess:
    """Run a command in the network namespace of the cluster's node (the host's for the default cluster)."""
    return subprocess.run([*processes.in_node_net(), *argv], capture_output=True, text=True, check=True)


def _iptables_save() -> str:
    return _node_net("iptables-save", "-t", "filter").stdout


def kube_router_firewall_off() -> None:
    """Remove kube-router's NetworkPolicy firewall from the node while kube-router is stopped: the jumps from
    the built-in chains, its chains and its ipsets. (Its --cleanup-config also flushes every IPVS table and
    destroys every ipset of the host, so this removes only what is kube-router's.) kube-router programs it
    all again when it starts."""
    rules = _iptables_save().splitlines()
    for line in rules:
        if line.startswith("-A ") and " -j " in line and line.split()[1] in ("INPUT", "FORWARD", "OUTPUT") \
                and line.rsplit(" -j ", 1)[1].split()[0].startswith(KUBE_ROUTER_CHAINS):
            _node_net("iptables", "-t", "filter", "-D", *shlex.split(line[3:]))
    chains = [line[1:].split()[0] for line in rules if line.startswith(":") and line[1:].startswith(KUBE_ROUTER_CHAINS)]
    for flag in ("-F", "-X"):
        for chain in chains:
            _node_net("iptables", "-t", "filter", flag, chain)
    sets = _node_net("ipset", "list", "-n").stdout.split()
    for name in sets:
        if name.startswith(KUBE_ROUTER_IPSETS):
            _node_net("ipset", "destroy", name)


@dataclass
class KubeRouterStopped(NodeProcessStopped):
    """NetworkPolicies not enforced: kube-router stopped and its firewall (iptables chains, ipsets) removed;
    undo starts it again (realnode's own start), which programs every policy anew."""

    process: str = "kube-router"

    def apply(self) -> None:
        super().apply()
        kube_router_firewall_off()
        left = [line for line in _iptables_save().splitlines() if any(c in line for c in KUBE_ROUTER_CHAINS)]
        if left:
            raise ClusterError(f"fault {self.name}: kube-router's firewall left {len(left)} iptables lines, e.g. "
                               f"{left[0]}")


SAVED_IMAGES = "fault-saved.local"  # where image faults keep the originals (not mpiplat.local: faults.baseline)


def _ctr(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*realnode.ctr(), *args], capture_output=True, text=True)


def _save_image(fault: Fault, image: str) -> None:
    """Keep `image` under a second name, so that its content stays while its own name is gone or replaced."""
    saved = f"{SAVED_IMAGES}/{fault.name}/{image.split('/', 1)[-1]}"
    images.tag(realnode.ctr(), image, saved)
    fault.saved.append((image, saved))


def _restore_images(fault: Fault, recipes: tuple[str, ...]) -> None:
    """Each saved image under its own name again (a tag: nothing is imported), then the second names
    removed; an image that was never saved and is missing is imported from the image cache."""
    for image, saved in fault.saved:
        images.tag(realnode.ctr(), saved, image)
        _ctr("images", "rm", saved)
    fault.saved.clear()
    present = images.images_in(realnode.ctr())
    missing = tuple(r for r in recipes if images.recipe(r).image not in present)
    if missing:
        images.import_into(realnode.ctr(), missing, stream=io.StringIO())


@dataclass
class ImageRemoved(Fault):
    """Local images removed from the real node's containerd (the node pulls from no registry); undo
    gives them their names back (their content was kept under a second name)."""

    recipes: tuple[str, ...] = ()

    def apply(self) -> None:
        for name in self.recipes:
            image = images.recipe(name).image
            _save_image(self, image)
            _ctr("images", "rm", image)
            if image in images.images_in(realnode.ctr()):
                raise ClusterError(f"fault {self.name}: {image} is still in the real node's containerd")

    def undo(self) -> None:
        _restore_images(self, self.recipes)


@dataclass
class ImageReplaced(Fault):
    """Local images replaced in the real node's containerd, under their names, by variants with `files` added
    (path -> (content, mode)); undo gives the originals their names back."""

    recipes: tuple[str, ...] = ()
    files: dict = field(default_factory=dict)

    def apply(self) -> None:
        work = state_dir() / "faults"
        work.mkdir(parents=True, exist_ok=True)
        for image, archive in images.ensure_built(self.recipes, io.StringIO()).items():
            variant = work / f"{self.name}-{archive.name}"
            images.with_files(archive, self.files, variant)
            _save_image(self, image)
            images.import_archive(realnode.ctr(), image, variant, io.StringIO())
            variant.unlink()

    def undo(self) -> None:
        _restore_images(self, self.recipes)


@dataclass
class Scaled(Fault):
    """A Deployment scaled to `replicas`; undo scales it back and waits for its rollout."""

    namespace: str = ""
    deployment: str = ""
    replicas: int = 0

    def apply(self) -> None:
        before = get("deployment", self.deployment, self.namespace)
        if before is None:
            raise ClusterError(f"fault {self.name}: no Deployment {self.namespace}/{self.deployment}")
        self.saved.append(before["spec"].get("replicas", 1))
        kubectl("-n", self.namespace, "scale", f"deployment/{self.deployment}", f"--replicas={self.replicas}")

    def undo(self) -> None:
        if self.saved:
            kubectl("-n", self.namespace, "scale", f"deployment/{self.deployment}", f"--replicas={self.saved[-1]}")
            kubectl("-n", self.namespace, "rollout", "status", f"deployment/{self.deployment}", f"--timeout={WAIT_S}s")
            self.saved.clear()


@dataclass
class NodesCordoned(Fault):
    """Every schedulable node that advertises GPUs (`real`: every schedulable node that is not KWOK's) is
    cordoned; undo uncordons exactly those."""

    resource: str = "nvidia.com/gpu"
    real: bool = False

    def _chosen(self, node: dict) -> bool:
        if self.real:
            return (node["metadata"].get("annotations") or {}).get("kwok.x-k8s.io/node") != "fake"
        return int((node["status"].get("allocatable") or {}).get(self.resource, "0")) > 0

    def apply(self) -> None:
        for node in list_objects("nodes"):
            if self._chosen(node) and not node["spec"].get("unschedulable"):
                self.saved.append(node["metadata"]["name"])
        for name in self.saved:
            kubectl("cordon", name)

    def undo(self) -> None:
        while self.saved:
            kubectl("uncordon", self.saved[-1])
            self.saved.pop()


@dataclass
class WorkerMemoryCapped(Fault):
    """A worker OOM: while applied, every MPIJob worker pod that runs on the real node gets its pod cgroup's
    memory limit set a few MiB above what it uses when it starts (sshd alone), so the kernel's OOM killer
    takes the MPI rank that mpirun then starts there. Nothing is changed outside those pods' cgroups."""

    margin_mib: int = 24
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    capped: set = field(default_factory=set, repr=False)

    def _cap(self) -> None:
        while not self._stop.wait(0.5):
            try:
                pods = json.loads(kubectl("get", "pods", "-A", "-l", f"{ROLE_LABEL}=worker",
                                          "--field-selector", f"spec.nodeName={realnode.NAME}", "-o", "json",
                                          check=False).stdout or "{}").get("items", [])
            except ValueError:
                continue
            for pod in pods:
                uid = pod["metadata"]["uid"]
                statuses = pod["status"].get("containerStatuses") or []
                running = any("running" in (cs.get("state") or {}) for cs in statuses)
                if uid in self.capped or not running:
                    continue
                for d in _pod_cgroups(uid):
                    try:
                        used = int((d / "memory.usage_in_bytes").read_text())
                        (d / "memory.limit_in_bytes").write_text(str(used + self.margin_mib * 2**20))
                        self.capped.add(uid)
                    except OSError:
                        pass

    def apply(self) -> None:
        self.saved.append(True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._cap, name=f"fault-{self.name}", daemon=True)
        self._thread.start()

    def undo(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        self._thread = None
        self.capped.clear()
        self.saved.clear()


def _pod_cgroups(uid: str) -> list[Path]:
    """The memory cgroup directories of a pod (cgroup v1, the kubelet's cgroupfs driver)."""
    root = Path(f"/sys/fs/cgroup/memory{realnode.network().cgroup_root}/kubepods")
    return [p for p in root.glob(f"**/pod{uid}") if p.is_dir()] if root.is_dir() else []


# ---------------------------------------------------------------- the matrix

def _v1_version() -> list[dict]:
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return [{"op": "add", "path": "/spec/versions/-",
             "value": {"name": "v1", "served": True, "storage": False, "schema": schema}}]


def matrix() -> list[Fault]:
    """Every fault of the matrix, new objects (each holds what it saved while applied)."""
    return [
        KubeRouterStopped("netpol-not-enforced"),
        DeletedObjects("team-netpols-deleted", kind="networkpolicies", namespace=TEAM),
        ChangedObject("ssh-blocked", kind="networkpolicy", obj_name=f"{TEAM}-mpijob-launcher-to-worker",
                      namespace=TEAM, json_patch=[{"op": "add", "path": "/spec/ingress/0/ports",
                                                   "value": [{"protocol": "TCP", "port": 2223}]}]),
        DeletedObjects("guardrails-absent", kind="validatingadmissionpolicybindings", prefix="mpiplat-"),
        CreatedObjects("istio-injector-unguarded", objs=[
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
             "metadata": {"name": "mpiplat-fault-istio-sidecar-injector"},
             # Registered, never called: its object selector matches no pod, and its URL serves nothing.
             "webhooks": [{"name": "object.sidecar-injector.istio.io", "sideEffects": "None",
                           "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore",
                           "clientConfig": {"url": "https://127.0.0.1:9/inject"},
                           "objectSelector": {"matchLabels": {"mpiplat.io/fault-never": "true"}},
                           "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                      "resources": ["pods"]}]}]}]),
        ChangedObject("token-automount", kind="serviceaccount", obj_name="default", namespace=TEAM,
                      merge={"automountServiceAccountToken": True}),
        CreatedObjects("viewer-bound-to-edit", objs=[
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "mpiplat-fault-viewer-edit", "namespace": TEAM},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                           "name": "auditor@example.com"}]}]),
        CreatedObjects("team-a-members-in-team-b", objs=[
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "mpiplat-fault-team-a-in-team-b", "namespace": "team-b"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                           "name": "team-a-scientists"}]}]),
        KueueConfigured("kueue-no-waitforpodsready", gates={"DisableWaitForPodsReady": True}),
        KueueConfigured("kueue-default-pods-ready-timeout", drop=("waitForPodsReady",)),
        KueueConfigured("kueue-no-fairsharing", drop=("fairSharing",)),
        KueueConfigured("kueue-no-tas", gates=dict.fromkeys(KUEUE_TAS_GATES, False)),
        KueueConfigured("kueue-no-mpijob", framework_off="kubeflow.org/mpijob"),
        ControllerStopped("kueue-stopped", controller="kueue"),
        ControllerStopped("mpi-operator-stopped", controller="mpi-operator"),
        ControllerStopped("trainer-stopped", controller="trainer-controller-manager"),
        CreatedObjects("launcher-at-startup", objs=[
            {"apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "MutatingAdmissionPolicy",
             "metadata": {"name": "mpiplat-fault-launcher-at-startup"},
             "spec": {"matchConstraints": {"resourceRules": [
                 {"apiGroups": ["kubeflow.org"], "apiVersions": ["v2beta1"], "operations": ["CREATE"],
                  "resources": ["mpijobs"]}]},
                 "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                     "[JSONPatch{op: 'add', path: '/spec/launcherCreationPolicy', value: 'AtStartup'}]")}}],
                 "reinvocationPolicy": "Never", "failurePolicy": "Fail"}},
            {"apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "MutatingAdmissionPolicyBinding",
             "metadata": {"name": "mpiplat-fault-launcher-at-startup"},
             "spec": {"policyName": "mpiplat-fault-launcher-at-startup"}}]),
        ChangedObject("mpijob-v1-crd", kind="crd", obj_name="mpijobs.kubeflow.org",
                      json_patch=_v1_version()),
        DeletedObjects("team-queue-deleted", kind="clusterqueues.kueue.x-k8s.io", only=TEAM),
        CreatedObjects("clusterqueue-inactive", objs=[
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
             "metadata": {"name": "mpiplat-fault-inactive"},
             "spec": {"namespaceSelector": {"matchLabels": {"mpiplat.io/fault": "none"}},
                      "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                          {"name": "mpiplat-fault-missing-flavor",
                           "resources": [{"name": "cpu", "nominalQuota": "1"}]}]}]}}]),
        ImageRemoved("mpi-images-missing", recipes=("openmpi", "intel", "mpich")),
        ImageReplaced("mpi-images-need-passwd", recipes=("openmpi", "intel", "mpich"),
                      files={images.UID_ENTRYPOINT_PATH: ('#!/bin/sh\nexec "$@"\n', 0o755)}),
        CreatedObjects("anyuid-granted", objs=[  # `oc adm policy add-scc-to-group anyuid system:serviceaccounts`
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "mpiplat-fault-scc-anyuid"},
             "rules": [{"apiGroups": ["security.openshift.io"], "resources": ["securitycontextconstraints"],
                        "resourceNames": ["anyuid"], "verbs": ["use"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "mpiplat-fault-scc-anyuid"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "mpiplat-fault-scc-anyuid"},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                           "name": "system:serviceaccounts"}]}]),
        ChangedObject("team-queue-selects-others", kind="clusterqueues.kueue.x-k8s.io", obj_name=TEAM,
                      merge={"spec": {"namespaceSelector": {"matchLabels": {"mpiplat.io/team": "team-x"}}}}),
        ChangedObject("team-localqueue-held", kind="localqueues.kueue.x-k8s.io", obj_name=f"{TEAM}-queue",
                      namespace=TEAM, merge={"spec": {"stopPolicy": "Hold"}}),
        ChangedObject("team-cpu-quota-zero", kind="clusterqueues.kueue.x-k8s.io", obj_name=TEAM, json_patch=[
            {"op": "test", "path": "/spec/resourceGroups/0/flavors/0/resources/0/name", "value": "cpu"},
            {"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota", "value": "0"}]),
        CreatedObjects("team-quota-no-secrets", objs=[
            {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "mpiplat-fault-no-secrets",
                                                                       "namespace": TEAM},
             "spec": {"hard": {"count/secrets": "0"}}}]),
        CreatedObjects("team-limitrange-below-request", objs=[
            {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "mpiplat-fault-tiny", "namespace": TEAM},
             "spec": {"limits": [{"type": "Container", "max": {"cpu": "10m"}}]}}]),
        ChangedObject("team-not-restricted", kind="namespace", obj_name=TEAM,
                      merge={"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}),
        CreatedObjects("team-quota-no-pods", objs=[
            {"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": "mpiplat-fault-no-pods", "namespace": TEAM}, "spec": {"hard": {"pods": "0"}}}]),
        Scaled("coredns-stopped", namespace="kube-system", deployment="coredns", replicas=0),
        WorkerMemoryCapped("worker-oom"),
        DeletedObjects("dashboard-deleted", kind="configmaps", all_namespaces=True,
                       label="grafana_dashboard=1", prefix="mpiplat-mpijob-overview-dashboard"),
        DeletedObjects("prometheus-rule-deleted", kind="prometheusrules.monitoring.coreos.com",
                       namespace="mpiplat-monitoring", only="mpiplat-mpi-training"),
        RuleNotLoaded("prometheus-rule-not-selected", kind="prometheusrules.monitoring.coreos.com",
                      obj_name="mpiplat-mpi-training", namespace="mpiplat-monitoring",
                      merge={"metadata": {"labels": {"app.kubernetes.io/part-of": "not-mpiplat"}}},
                      alerts=("MPIJobFailed", "MPIJobPendingTooLong")),
        RuleNotLoaded("mpijobfailed-rule-removed", kind="prometheusrules.monitoring.coreos.com",
                      obj_name="mpiplat-mpi-training", namespace="mpiplat-monitoring", alerts=("MPIJobFailed",),
                      json_patch=[{"op": "test", "path": "/spec/groups/0/rules/0/alert", "value": "MPIJobFailed"},
                                  {"op": "remove", "path": "/spec/groups/0/rules/0"}]),
        ControllerStopped("prometheus-stopped", controller="prometheus"),
        SchedulerPluginsOff("scheduler-ignores-taints", plugins=("TaintToleration",)),
        SchedulerPluginsOff("scheduler-ignores-node-selectors", plugins=("NodeAffinity",)),
        NodeProcessStopped("storage-provisioner-stopped", process="local-path-provisioner"),
        NodesCordoned("gpu-nodes-cordoned"),
    ]


def baseline() -> dict:
    """What every fault must leave as it found it: the team namespace's labels, its NetworkPolicies,
    ServiceAccount and RoleBindings, ClusterQueues, CRD versions, admission policies, the monitoring role's
    dashboard and PrometheusRule, the images of the real node, cordons and CoreDNS replicas."""

    # One kubectl call per scope, not one per kind: the matrix reads this after every fault.
    def by_kind(*args: str) -> dict[str, list[dict]]:
        found: dict[str, list[dict]] = {}
        for o in json.loads(kubectl("get", *args, "-o", "json").stdout)["items"]:
            found.setdefault(o["kind"], []).append(o)
        return found

    def specs(objects: list[dict]) -> dict:
        return {o["metadata"]["name"]: o.get("spec") for o in objects}

    team = by_kind("namespaces,networkpolicies,rolebindings,serviceaccounts", "-n", TEAM)
    cluster = by_kind("clusterqueues.kueue.x-k8s.io,crds,validatingadmissionpolicybindings,"
                      "mutatingadmissionpolicies.admissionregistration.k8s.io,nodes")
    monitoring = by_kind("configmaps,prometheusrules.monitoring.coreos.com", "-A", "-l",
                         "app.kubernetes.io/part-of=mpiplat")
    ns = next((o for o in team.get("Namespace", []) if o["metadata"]["name"] == TEAM), {})
    sa = next((o for o in team.get("ServiceAccount", []) if o["metadata"]["name"] == "default"), {})
    return {
        "team_labels": (ns.get("metadata") or {}).get("labels"),
        "networkpolicies": specs(team.get("NetworkPolicy", [])),
        "rolebindings": {o["metadata"]["name"]: [o["roleRef"], o.get("subjects")] for o in team.get("RoleBinding", [])},
        "automount": sa.get("automountServiceAccountToken"),
        "clusterqueues": specs(cluster.get("ClusterQueue", [])),
        "crds": {o["metadata"]["name"]: sorted(v["name"] for v in o["spec"]["versions"] if v["served"])
                 for o in cluster.get("CustomResourceDefinition", [])},
        "guardrails": specs(cluster.get("ValidatingAdmissionPolicyBinding", [])),
        "mutating_policies": specs(cluster.get("MutatingAdmissionPolicy", [])),
        "dashboards": sorted(o["metadata"]["name"] for o in monitoring.get("ConfigMap", [])
                             if (o["metadata"].get("labels") or {}).get("grafana_dashboard") == "1"),
        "prometheusrules": specs(monitoring.get("PrometheusRule", [])),
        "cordoned": sorted(o["metadata"]["name"] for o in cluster.get("Node", []) if o["spec"].get("unschedulable")),
        "coredns": (get("deployment", "coredns", "kube-system") or {}).get("spec", {}).get("replicas"),
        "images": sorted(i for i in images.images_in(realnode.ctr()) if i.startswith("mpiplat.local/")),
    }
