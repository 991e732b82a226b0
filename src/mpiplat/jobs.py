"""The one place that builds job manifests: MPIJob (kubeflow.org/v2beta1) and TrainJob.

Tests, the demo and the conformance suite all call these functions.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from dataclasses import dataclass, field

from mpiplat.errors import MpiplatError

MPIJOB_API = "kubeflow.org/v2beta1"
TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Pod-template annotation: the Kueue Topology level (a node label) whose one domain all the pod set's pods share.
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
# Labels mpi-operator puts on an MPIJob's pods (the one definition; the suite and diagnose read them).
JOB_LABEL = "training.kubeflow.org/job-name"
ROLE_LABEL = "training.kubeflow.org/job-role"
INDEX_LABEL = "training.kubeflow.org/replica-index"
# The default GPU resource; clusters may name another (settings `gpu_resource`, Ansible `mpiplat_gpu_resource`).
GPU_RESOURCE = "nvidia.com/gpu"
# OpenShift's namespace annotations, "<first>/<size>": the UIDs and groups restricted-v2 gives its pods.
UID_RANGE = "openshift.io/sa.scc.uid-range"
GROUP_RANGE = "openshift.io/sa.scc.supplemental-groups"
SCC_ANNOTATION = "openshift.io/scc"  # the SCC OpenShift admitted a pod under

# Local reference cluster (KWOK) behaviour, read by localcluster/stages.yaml.
COMPLETE_AFTER = "mpiplat.io/complete-after"  # annotation: Go duration until a Job pod succeeds
FAIL_LABEL = "mpiplat.io/inject-failure"  # label "true": the pod's container fails
FAIL_REASON = "mpiplat.io/failure-reason"  # annotation, e.g. OOMKilled
FAIL_EXIT_CODE = "mpiplat.io/failure-exit-code"  # annotation, e.g. "137"
FAIL_DELAY = "mpiplat.io/failure-delay"  # annotation, Go duration
# Where work that relies on that behaviour goes: the KWOK nodes (label type=kwok). While the local
# cluster has a real node, they carry KWOK's taint kwok.x-k8s.io/node=fake:NoSchedule, so such pods
# need both; on a cluster without a real node the KWOK nodes are untainted and the same placement works.
KWOK_NODE_SELECTOR = {"type": "kwok"}
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}

IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")


def _base_images() -> dict[str, str]:
    from mpiplat.versions import load

    comp = load()["mpi-operator"]
    return {impl: comp.expand(ref) for impl, ref in comp.extra["base_images"].items()}


DEFAULT_IMAGES = _base_images()  # upstream's: where the cluster names none (CLUSTER_IMAGES)
# Where the installer names the cluster's own MPI images per implementation (the mpi_operator role's
# mpi_operator_default_images): a ConfigMap every signed-in user may read. The SDK, CLI and dashboard use them for a job
# that names no image.
CLUSTER_IMAGES = ("kube-public", "mpiplat-mpi-images")
# Per implementation: the command line that starts ranks, and the environment that points it
# at the operator's hostfile (/etc/mpi/hostfile) and a non-root SSH setup.
SSH_ARGS = "-o ConnectionAttempts=10 -o ConnectTimeout=10 -o StrictHostKeyChecking=no -p 2222"
_LAUNCH = {
    "OpenMPI": (["mpirun", "--allow-run-as-root", "-np", "{np}", "--bind-to", "none"],
                {"OMPI_MCA_orte_keep_fqdn_hostnames": "true", "OMPI_MCA_plm_rsh_args": SSH_ARGS}),
    "Intel": (["mpirun", "-n", "{np}", "-ppn", "{slots}"],
              {"I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile", "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": SSH_ARGS,
               "I_MPI_DEBUG": "0",
               # Proxies connect back to mpiexec by its pod IP, not by a name DNS may not have yet.
               "I_MPI_HYDRA_IFACE": "eth0"}),
    "MPICH": (["mpirun", "-n", "{np}", "-ppn", "{slots}"],
              {"HYDRA_HOST_FILE": "/etc/mpi/hostfile", "HYDRA_LAUNCHER_EXTRA_ARGS": SSH_ARGS,
               "HYDRA_IFACE": "eth0"}),
}
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Workload programs (e.g. the suite's conformance/workloads/*.py) reach the images through this
# ConfigMap, which the caller creates (mpiplat.conformance.workloads.configmap).
WORKLOADS_CONFIGMAP = "mpiplat-workloads"
WORKLOADS_DIR = "/opt/mpiplat"
# A label key: an optional DNS-subdomain prefix and '/', then a name of up to 63 characters.
LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
WORKLOAD_RE = re.compile(r"^[a-z][a-z0-9_]*$")
LAUNCHER_CREATION_POLICIES = ("WaitForWorkersReady", "AtStartup")  # mpi-operator v0.8's MPIJobSpec
CLEAN_POD_POLICIES = ("Running", "All", "None")  # runPolicy.cleanPodPolicy


class JobSpecError(MpiplatError, ValueError):
    """Bad job parameters; the message names the field, the value and what is allowed."""


@dataclass
class MPIJob:
    """An MPIJob (kubeflow.org/v2beta1): built from these fields (`manifest()`), or loaded from a manifest
    (`from_manifest`, `from_yaml`), whose dump then is that manifest with the changed fields of MAPPED applied.

    namespace None: the client's (the kubeconfig context's, like kubectl)."""

    name: str
    namespace: str | None = None
    workers: int = 2
    slots_per_worker: int = 1
    implementation: str = "OpenMPI"
    image: str | None = None
    command: list[str] = field(default_factory=lambda: ["hostname"])
    # A workload program run by the launcher's mpirun instead of `command`, e.g. "allreduce":
    # WORKLOADS_DIR/<workload>.py from the WORKLOADS_CONFIGMAP ConfigMap; needs python3 + mpi4py.
    workload: str | None = None
    workload_args: list[str] = field(default_factory=list)
    gpus_per_worker: int = 0
    gpu_resource: str = GPU_RESOURCE
    # A PersistentVolumeClaim mounted at pvc_mount_path in the launcher and every worker.
    pvc: str | None = None
    pvc_mount_path: str = "/data"
    cpu: str = "100m"  # each worker's request
    # Each worker's CPU limit; None: none. MPI ranks poll while they wait, so under a limit (CFS quota) they
    # spend it polling and stall for the rest of each 100 ms period: an 8-byte Allreduce then takes 100 ms.
    cpu_limit: str | None = None
    memory: str = "128Mi"  # each worker's request and limit
    queue: str | None = None
    suspend: bool = False
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    launcher_labels: dict[str, str] = field(default_factory=dict)
    launcher_annotations: dict[str, str] = field(default_factory=dict)
    worker_labels: dict[str, str] = field(default_factory=dict)
    worker_annotations: dict[str, str] = field(default_factory=dict)
    ssh_auth_mount_path: str = "/home/mpiuser/.ssh"
    # None: the cluster's (OpenShift assigns the namespace's first UID; elsewhere the image's USER runs). The
    # pods meet Pod Security `restricted` either way, unless 0 (root).
    run_as_user: int | None = None
    backoff_limit: int = 0
    clean_pod_policy: str = "Running"
    priority_class: str | None = None
    # Pod templates' automountServiceAccountToken: False (default) gives the pods no API token; None leaves the
    # field out, so the cluster's policy decides (the namespace's ServiceAccount, admission policies).
    automount_service_account_token: bool | None = False
    # The launcher's restartPolicy. "Never" (default): one attempt (backoff_limit 0) whose failed pod and log
    # stay for the diagnosis. None: the operator's default, OnFailure, with which a failed container restarts
    # in its pod and the Job controller deletes that pod, and its log, at the backoff limit.
    launcher_restart_policy: str | None = "Never"
    # When mpi-operator creates the launcher: WaitForWorkersReady (default) once every worker is Ready (its sshd
    # answers), so mpirun never races a worker that is not up; AtStartup with the workers (the operator's default).
    launcher_creation_policy: str = "WaitForWorkersReady"
    # Kueue Topology Aware Scheduling: a node label that is a level of the job's flavor's Topology (e.g. a rack
    # label), one value of which all workers must share; the job waits until one such domain has room for them all.
    required_topology: str | None = None
    # The manifest this job was loaded from (from_manifest), status included; None for a built job.
    source: dict | None = field(default=None, repr=False, compare=False)

    def manifest(self) -> dict:
        """The MPIJob manifest: built (mpijob), or the loaded one with the changed MAPPED fields applied."""
        if self.source is None:
            return mpijob(self)
        _check(self)
        out = copy.deepcopy(self.source)
        out.pop("status", None)
        loaded = _mapped(self.source)
        for name, (_, setter) in MAPPED.items():
            value = getattr(self, name)
            if value != loaded[name]:
                setter(out, value, self)
        return out

    @classmethod
    def from_manifest(cls, obj: dict) -> MPIJob:
        """Load an MPIJob manifest (upstream v2beta1 YAML as a dict, or an object read from the API)."""
        if not isinstance(obj, dict) or obj.get("kind") != "MPIJob" or obj.get("apiVersion") != MPIJOB_API:
            found = f"{obj.get('apiVersion')} {obj.get('kind')}" if isinstance(obj, dict) else type(obj).__name__
            raise JobSpecError(f"apiVersion/kind is {found!r}; allowed: {MPIJOB_API} MPIJob")
        specs = (obj.get("spec") or {}).get("mpiReplicaSpecs") or {}
        for role in ("Launcher", "Worker"):
            if not _containers(obj, role):
                raise JobSpecError(f"spec.mpiReplicaSpecs.{role}.template.spec.containers is "
                                   f"{_containers(obj, role)!r}; allowed: a list of at least one container"
                                   if role in specs else f"spec.mpiReplicaSpecs.{role} is missing; allowed: "
                                   "a replica spec with a pod template")
        job = cls(**_mapped(obj), source=copy.deepcopy(obj))
        _check(job)
        return job

    @classmethod
    def from_yaml(cls, text: str) -> MPIJob:
        import yaml

        try:
            obj = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise JobSpecError(f"the YAML does not parse: {err}") from err
        return cls.from_manifest(obj)

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.manifest(), sort_keys=False)

    @property
    def status(self) -> dict:
        """The status the API server returned (jobs read from it); {} otherwise."""
        return dict((self.source or {}).get("status") or {})


def _containers(obj: dict, role: str) -> list:
    spec = ((obj.get("spec") or {}).get("mpiReplicaSpecs") or {}).get(role) or {}
    return ((spec.get("template") or {}).get("spec") or {}).get("containers") or []


def _set(obj: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = value


def _path(*path: str):
    """A getter and setter of one manifest field, with the value it has when absent."""
    def get(obj: dict, default=None):
        for key in path:
            obj = (obj or {}).get(key) if isinstance(obj, dict) else None
        return default if obj is None else obj
    return get, lambda obj, value, _job: _set(obj, path, value)


def _image(obj: dict, default=None):
    return (_containers(obj, "Worker") or [{}])[0].get("image", default)


def _set_image(obj: dict, value, _job) -> None:
    for role in ("Launcher", "Worker"):
        _containers(obj, role)[0]["image"] = value


def _gpus(obj: dict, default=0, resource: str = GPU_RESOURCE):
    limits = ((_containers(obj, "Worker") or [{}])[0].get("resources") or {}).get("limits") or {}
    return int(str(limits.get(resource, default)))


def _set_gpus(obj: dict, value, job) -> None:
    resources = _containers(obj, "Worker")[0].setdefault("resources", {})
    for kind in ("limits", "requests"):
        if value:
            resources.setdefault(kind, {})[job.gpu_resource] = str(value)
        else:
            (resources.get(kind) or {}).pop(job.gpu_resource, None)


def _labels(obj: dict, default=None):
    labels = dict((obj.get("metadata") or {}).get("labels") or {})
    labels.pop(QUEUE_LABEL, None)
    return labels


def _set_labels(obj: dict, value, job) -> None:
    queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    _set(obj, ("metadata", "labels"), {**value, **({QUEUE_LABEL: queue} if queue else {})})


def _queue(obj: dict, default=None):
    return ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL, default)


def _set_queue(obj: dict, value, _job) -> None:
    labels = obj.setdefault("metadata", {}).setdefault("labels", {})
    if value:
        labels[QUEUE_LABEL] = value
    else:
        labels.pop(QUEUE_LABEL, None)


_WORKER_ANNOTATIONS = ("spec", "mpiReplicaSpecs", "Worker", "template", "metadata", "annotations")
_required_topology = _path(*_WORKER_ANNOTATIONS, REQUIRED_TOPOLOGY)[0]


def _set_required_topology(obj: dict, value, _job) -> None:
    annotations = obj
    for key in _WORKER_ANNOTATIONS:
        annotations = annotations.setdefault(key, {})
    if value:
        annotations[REQUIRED_TOPOLOGY] = value
    else:
        annotations.pop(REQUIRED_TOPOLOGY, None)


# The fields a loaded job maps to its manifest: getter(obj, default), setter(obj, value, job). The defaults
# are the operator's for an absent field (launcherCreationPolicy: AtStartup).
_RUN_POLICY = ("spec", "runPolicy")
MAPPED = {
    "name": _path("metadata", "name"),
    "namespace": _path("metadata", "namespace"),
    "labels": (_labels, _set_labels),
    "queue": (_queue, _set_queue),
    "workers": _path("spec", "mpiReplicaSpecs", "Worker", "replicas"),
    "slots_per_worker": _path("spec", "slotsPerWorker"),
    "implementation": _path("spec", "mpiImplementation"),
    "launcher_creation_policy": _path("spec", "launcherCreationPolicy"),
    "suspend": _path(*_RUN_POLICY, "suspend"),
    "backoff_limit": _path(*_RUN_POLICY, "backoffLimit"),
    "clean_pod_policy": _path(*_RUN_POLICY, "cleanPodPolicy"),
    "image": (_image, _set_image),
    "gpus_per_worker": (_gpus, _set_gpus),
    "required_topology": (_required_topology, _set_required_topology),
}
_ABSENT = {"labels": {}, "workers": 1, "slots_per_worker": 1, "implementation": "OpenMPI",
           "launcher_creation_policy": "AtStartup", "suspend": False, "backoff_limit": 6, "clean_pod_policy": "None",
           "gpus_per_worker": 0}


def _mapped(obj: dict) -> dict:
    return {name: getter(obj, _ABSENT.get(name)) for name, (getter, _) in MAPPED.items()}


def _type_ok(value, hint) -> bool:
    """Whether `value` fits a field's type hint (the hints MPIJob uses: plain types, X | None, list[X],
    dict[K, V])."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_type_ok(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_type_ok(k, args[0]) and _type_ok(v, args[1])
                                               for k, v in value.items())
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _check_types(spec) -> None:
    for name, hint in typing.get_type_hints(type(spec)).items():
        if name != "source" and not _type_ok(getattr(spec, name), hint):
            shown = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
            raise JobSpecError(f"{name} is {getattr(spec, name)!r}; allowed: a value of type {shown}")


def _check(spec: MPIJob) -> None:
    _check_types(spec)
    if not isinstance(spec.name, str) or not NAME_RE.match(spec.name):
        raise JobSpecError(f"name {spec.name!r} is invalid; allowed: a DNS-1035 label "
                           "(lower-case letters, digits, '-', starting with a letter, no dots)")
    if spec.namespace is not None and not NAMESPACE_RE.match(spec.namespace):
        raise JobSpecError(f"namespace {spec.namespace!r} is invalid; allowed: a DNS-1123 label, or None for the "
                           "client's namespace")
    if spec.implementation not in IMPLEMENTATIONS:
        raise JobSpecError(f"implementation {spec.implementation!r} is unknown; "
                           f"allowed: {', '.join(IMPLEMENTATIONS)}")
    for fname in ("workers", "slots_per_worker"):
        val = getattr(spec, fname)
        if not isinstance(val, int) or val < 1:
            raise JobSpecError(f"{fname} is {val!r}; allowed: an integer >= 1")
    if spec.workload is not None and not WORKLOAD_RE.match(spec.workload):
        raise JobSpecError(f"workload {spec.workload!r} is invalid; allowed: a program name "
                           "(lower-case letters, digits and '_', starting with a letter)")
    if spec.run_as_user is not None and spec.run_as_user < 0:
        raise JobSpecError(f"run_as_user is {spec.run_as_user}; allowed: a uid >= 0, or None for the cluster's "
                           "(OpenShift: the namespace's; elsewhere the image's user)")
    if spec.gpus_per_worker < 0:
        raise JobSpecError(f"gpus_per_worker is {spec.gpus_per_worker}; allowed: an integer >= 0")
    if spec.launcher_creation_policy not in LAUNCHER_CREATION_POLICIES:
        raise JobSpecError(f"launcher_creation_policy is {spec.launcher_creation_policy!r}; allowed: "
                           f"{', '.join(LAUNCHER_CREATION_POLICIES)}")
    if spec.clean_pod_policy not in CLEAN_POD_POLICIES:
        raise JobSpecError(f"clean_pod_policy is {spec.clean_pod_policy!r}; allowed: "
                           f"{', '.join(CLEAN_POD_POLICIES)}")
    if spec.required_topology is not None and not LABEL_KEY_RE.match(spec.required_topology):
        raise JobSpecError(f"required_topology is {spec.required_topology!r}; allowed: a node label key (a level "
                           "of the flavor's Kueue Topology, e.g. topology.kubernetes.io/zone), or None")
    if spec.launcher_restart_policy not in (None, "Never", "OnFailure"):
        raise JobSpecError(f"launcher_restart_policy is {spec.launcher_restart_policy!r}; allowed: Never, OnFailure "
                           "or None (the operator's default)")


SSH_PORT = 2222


def worker_command(run_as_user: int | None) -> list[str]:
    """sshd on port 2222, as the MPI base images expect: as root with the image's sshd_config, else
    with the non-root config the images put in mpiuser's home (host key = the job's mounted key)."""
    if run_as_user == 0:
        return ["/usr/sbin/sshd", "-De", "-p", "2222"]
    return ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]


def security_context(run_as_user: int | None) -> dict:
    """A launcher's or worker's container securityContext: what Pod Security `restricted` asks (and OpenShift's
    restricted-v2 grants), with runAsUser only when one is chosen; for root (0), as root sshd needs it."""
    if run_as_user == 0:
        return {"runAsUser": 0, "runAsNonRoot": False}
    return {**({"runAsUser": run_as_user} if run_as_user is not None else {}), "runAsNonRoot": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


# How many tries, a second apart, a launcher waits for its workers to answer over SSH, and at most how many
# seconds (see launcher_command).
LAUNCHER_SSH_WAIT_S = 30
# What ssh says when waiting will not help: the launcher's uid has no passwd entry, the worker refused the key,
# the key is unreadable.
SSH_FINAL = ("No user exists for uid", "You don't exist", "Permission denied")
HOSTFILE = "/etc/mpi/hostfile"  # the operator's, in every implementation's format ("host slots=N", "host:N")
# The launcher's first line (stderr), followed by its uid and gid: who it really ran as, for JOB-11.
LAUNCHER_IDENTITY = "mpiplat: launcher runs as uid"


# The launcher's listener for the workers' connect-back check (see launcher_command): it writes its port to the
# FIFO its argument names, then accepts and closes connections until it is killed. The launcher's shell starts
# it as its own child and reaps it before it execs mpirun: MPICH's mpiexec takes any child it reaps for one of
# its own, and a killed one fails the job ("one of the processes terminated badly").
_LISTENER = """import socket,sys
s=socket.socket();s.bind(("",0));s.listen(64)
open(sys.argv[1],"w").write(str(s.getsockname()[1]))
while 1:s.accept()[0].close()"""


def launcher_command(implementation: str, np: int, slots: int, program: list[str]) -> list[str]:
    """The launcher's command: mpirun for `implementation` running `program` on `np` ranks, once every
    worker of the hostfile answers over SSH and can connect back to the launcher. It first prints
    LAUNCHER_IDENTITY with its uid and gid.

    A network plugin programs a new pod's NetworkPolicy rules a moment after the pod starts (kube-router:
    about a second, more on a loaded node). mpirun started in that moment has its first connections refused
    and fails at once ("ORTE was unable to reliably start one or more daemons"): mpirun's ssh to a worker,
    and the daemons' or Hydra proxies' connections from the workers back to mpirun, whose address is the new
    launcher pod's. So the launcher tries once a second `ssh <worker>` with a command that connects back to a
    port the launcher listens on (where the launcher has python3 and the worker bash; else `true`), at most
    LAUNCHER_SSH_WAIT_S tries, or seconds where one try is slow (a name lookup that times out while the
    cluster's DNS is down), in all; then it runs mpirun anyway, after printing the last error for each worker
    that did not answer or connect back, so the diagnosis can name it. An error that waiting cannot mend
    (SSH_FINAL: no user for the launcher's uid, a key refused or unreadable) ends the wait, and the launcher then
    fails without mpirun, which would fail too, or hang (MPICH's and Intel's Hydra)."""
    argv, _ = _LAUNCH[implementation]
    final = "|".join(f'*"{e}"*' for e in SSH_FINAL)
    listener = _LISTENER.replace("'", "'\\''")
    wait = (f'echo "{LAUNCHER_IDENTITY} $(id -u), gid $(id -g)" >&2; '
            'back=true; lpid=; pf=; if command -v python3 >/dev/null 2>&1 && pf=$(mktemp -u 2>/dev/null) && '
            'mkfifo -m 600 "$pf" 2>/dev/null; then '
            f"python3 -c '{listener}' \"$pf\" 2>/dev/null & lpid=$!; port=$(timeout 5 cat \"$pf\"); "
            "ip=$(hostname -i 2>/dev/null | cut -d' ' -f1); "
            'if [ -n "$port" ] && [ -n "$ip" ]; then '
            'back="if command -v bash >/dev/null && command -v timeout >/dev/null; then timeout 2 bash -c '
            "'</dev/tcp/$ip/$port' 2>/dev/null || "
            '{ echo \\"mpiplat: cannot connect back to the launcher at $ip:$port\\" >&2; exit 1; }; fi"; fi; fi; '
            f'i=0; t0=$(date +%s); final=; for h in $(sed "s/[ :].*//" {HOSTFILE}); do '
            f'until err=$(ssh -o ConnectionAttempts=1 -o ConnectTimeout=2 -o BatchMode=yes {SSH_ARGS} "$h" "$back" '
            '2>&1 >/dev/null); do i=$((i+1)); '
            f'[ $(($(date +%s) - t0)) -le {LAUNCHER_SSH_WAIT_S} ] || i={LAUNCHER_SSH_WAIT_S}; '
            f'case "$err" in {final}) i={LAUNCHER_SSH_WAIT_S}; final=1;; esac; '
            f'if [ "$i" -ge {LAUNCHER_SSH_WAIT_S} ]; then echo "$err" >&2; case "$err" in '
            '*"cannot connect back"*) echo "mpiplat: worker $h could not connect back to the launcher" >&2;; '
            '*) echo "mpiplat: worker $h did not answer over SSH" >&2;; esac; break; fi; sleep 1; done; done; '
            '[ -z "$lpid" ] || { kill "$lpid" 2>/dev/null; wait "$lpid" 2>/dev/null; }; [ -z "$pf" ] || rm -f "$pf"; '
            'if [ -n "$final" ]; then echo "mpiplat: ssh cannot log in, and waiting will not change that: mpirun '
            'not started" >&2; exit 1; fi; '
            f'[ "$i" -eq 0 ] || [ "$i" -ge {LAUNCHER_SSH_WAIT_S} ] || '
            'echo "mpiplat: waited ${i}s for the workers to answer over SSH" >&2; exec "$@"')
    return ["sh", "-c", wait, "mpiplat-launcher", *[a.format(np=np, slots=slots) for a in argv], *program]


def mpijob(spec: MPIJob) -> dict:
    """An MPIJob v2beta1 manifest."""
    _check(spec)
    image = spec.image or DEFAULT_IMAGES[spec.implementation]
    _, env = _LAUNCH[spec.implementation]
    np = spec.workers * spec.slots_per_worker
    security = security_context(spec.run_as_user)
    worker_resources = {"cpu": spec.cpu, "memory": spec.memory}
    limits = {**({"cpu": spec.cpu_limit} if spec.cpu_limit else {}), "memory": spec.memory}
    if spec.gpus_per_worker:
        limits[spec.gpu_resource] = str(spec.gpus_per_worker)
    program = spec.command
    volumes, mounts = [], []
    if spec.workload:
        program = ["python3", f"{WORKLOADS_DIR}/{spec.workload}.py", *spec.workload_args]
        volumes = [{"name": "workloads", "configMap": {"name": WORKLOADS_CONFIGMAP}}]
        mounts = [{"name": "workloads", "mountPath": WORKLOADS_DIR, "readOnly": True}]
    if spec.pvc:
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": spec.pvc}})
        mounts.append({"name": "data", "mountPath": spec.pvc_mount_path})
    pod_spec_common = {
        **({"automountServiceAccountToken": spec.automount_service_account_token}
           if spec.automount_service_account_token is not None else {}),
        # The volume's files belong to the pods' group, so the non-root MPI user can write them (with no chosen
        # user, the cluster's fsGroup: OpenShift's first supplemental group).
        **({"securityContext": {"fsGroup": spec.run_as_user}} if spec.pvc and spec.run_as_user else {}),
        **({"volumes": volumes} if volumes else {}),
        **({"nodeSelector": dict(spec.node_selector)} if spec.node_selector else {}),
        **({"tolerations": list(spec.tolerations)} if spec.tolerations else {}),
        **({"priorityClassName": spec.priority_class} if spec.priority_class else {}),
    }
    launcher = {
        "replicas": 1,
        # The operator sets the launcher pod's restartPolicy from the replica spec's (not the pod template's).
        **({"restartPolicy": spec.launcher_restart_policy} if spec.launcher_restart_policy else {}),
        "template": {
            "metadata": {"labels": {"sidecar.istio.io/inject": "false", **spec.launcher_labels},
                         "annotations": dict(spec.launcher_annotations)},
            "spec": {
                **pod_spec_common,
                "containers": [{
                    "name": "launcher",
                    "image": image,
                    # args, not command: the image's entrypoint runs first (ours gives any UID a user).
                    "args": launcher_command(spec.implementation, np, spec.slots_per_worker, program),
                    **({"volumeMounts": mounts} if mounts else {}),
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "securityContext": security,
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                  "limits": {"cpu": "500m", "memory": "256Mi"}},
                }],
            },
        },
    }
    worker = {
        "replicas": spec.workers,
        "template": {
            "metadata": {"labels": {"sidecar.istio.io/inject": "false", **spec.worker_labels},
                         "annotations": {**spec.worker_annotations, **(
                             {REQUIRED_TOPOLOGY: spec.required_topology} if spec.required_topology else {})}},
            "spec": {
                **pod_spec_common,
                "containers": [{
                    "name": "worker",
                    "image": image,
                    "args": worker_command(spec.run_as_user),
                    # Ready once sshd accepts connections, so WaitForWorkersReady means what it says.
                    "readinessProbe": {"tcpSocket": {"port": SSH_PORT}, "periodSeconds": 1},
                    **({"volumeMounts": mounts} if mounts else {}),
                    "securityContext": security,
                    "resources": {"requests": worker_resources, "limits": limits},
                }],
            },
        },
    }
    labels = dict(spec.labels)
    if spec.queue:
        labels[QUEUE_LABEL] = spec.queue
    return {
        "apiVersion": MPIJOB_API,
        "kind": "MPIJob",
        "metadata": {"name": spec.name, **({"namespace": spec.namespace} if spec.namespace else {}),
                     "labels": labels},
        "spec": {
            "slotsPerWorker": spec.slots_per_worker,
            "mpiImplementation": spec.implementation,
            "sshAuthMountPath": spec.ssh_auth_mount_path,
            # WaitForWorkersReady: mpirun starts only once every worker's sshd is ready (no launcher racing workers).
            "launcherCreationPolicy": spec.launcher_creation_policy,
            "runPolicy": {"cleanPodPolicy": spec.clean_pod_policy, "suspend": spec.suspend,
                          "backoffLimit": spec.backoff_limit},
            "mpiReplicaSpecs": {"Launcher": launcher, "Worker": worker},
        },
    }


# Trainer v2.3's MPI runtimes (deepspeed-distributed, mlx-distributed): the replicated jobs whose pods run ranks (the
# launcher is a node too: runLauncherAsNode) and the container in each that Trainer configures (and whose image and
# command trainer.image/command set, on the launcher only).
TRAINER_MPI_JOBS = ("node", "launcher")
TRAINER_CONTAINER = "node"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
# How long a workload TrainJob's launcher waits for its own DNS name (see trainjob_launcher_command).
TRAINJOB_DNS_WAIT_S = 120
MPI_RUNTIME = "deepspeed-distributed"  # the MPI ClusterTrainingRuntime Trainer installs, a TrainJob's default


@dataclass
class TrainJob:
    name: str
    namespace: str = "default"
    runtime: str = MPI_RUNTIME
    # ClusterTrainingRuntime, or TrainingRuntime: one in the TrainJob's namespace.
    runtime_kind: str = "ClusterTrainingRuntime"
    num_nodes: int = 2
    command: list[str] | None = None
    image: str | None = None
    # Environment of the trainer's containers (Trainer refuses the MPI variables its MPI plugin sets).
    env: dict[str, str] = field(default_factory=dict)
    # A workload program run on every slot of the runtime's hostfile by the launcher's mpirun (Open MPI: the
    # only MPI of Trainer v2.3's MPI plugin), instead of `command`: WORKLOADS_DIR/<workload>.py from the
    # WORKLOADS_CONFIGMAP ConfigMap, mounted into the `placed_jobs`' pods by a runtime patch.
    workload: str | None = None
    workload_args: list[str] = field(default_factory=list)
    queue: str | None = None
    suspend: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # Pod placement, put on the pods of the runtime's replicated jobs `placed_jobs` (deepspeed-distributed's
    # and mlx-distributed's: node and launcher) through a runtime patch; a workload is mounted there too.
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=list)
    placed_jobs: list[str] = field(default_factory=lambda: list(TRAINER_MPI_JOBS))


def trainjob_launcher_command(subdomain: str, program: list[str]) -> list[str]:
    """The launcher's command of a workload TrainJob: Open MPI's mpirun over the hostfile Trainer mounts (the
    slots and hosts come from Trainer's OMPI_MCA_* environment), once the launcher's own name resolves.

    With runLauncherAsNode the hostfile lists the launcher as `<pod hostname>.<subdomain>` (the subdomain is the
    TrainJob's name), which resolves only once the headless Service lists the launcher pod, a few seconds after
    it starts. Until then Open MPI takes that host for a remote one and fails (`ssh: Could not resolve hostname`),
    and the launcher restarts; so the command waits for the name first (at most TRAINJOB_DNS_WAIT_S seconds,
    then runs mpirun anyway, which then fails with that message)."""
    wait = (f'i=0; until getent hosts "$(hostname).$0" >/dev/null; do i=$((i+1)); '
            f'[ "$i" -ge {TRAINJOB_DNS_WAIT_S} ] && break; sleep 1; done; '
            '[ "$i" -eq 0 ] || echo "mpiplat: waited ${i}s for $(hostname).$0 to resolve" >&2; exec "$@"')
    return ["sh", "-c", wait, subdomain, "mpirun", "--allow-run-as-root", "--bind-to", "none", *program]


_FIXED_IDS = ("runAsUser", "runAsGroup", "fsGroup")


def restricted_runtime(runtime: dict) -> dict:
    """A (Cluster)TrainingRuntime whose pods run under OpenShift's restricted-v2 and Pod Security `restricted`
    (Trainer's own fix uid 1000 and set none of what `restricted` asks): in each replicated job's pod no fixed
    runAsUser, runAsGroup or fsGroup (the cluster's apply), every container with security_context(None), and
    its command put in front of its args, so that the image's entrypoint runs first (ours gives any UID a user;
    the NVIDIA base images' execs its arguments)."""
    out = copy.deepcopy(runtime)
    for rjob in out["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        kept = {k: v for k, v in (pod.get("securityContext") or {}).items() if k not in _FIXED_IDS}
        pod.pop("securityContext", None)
        if kept:
            pod["securityContext"] = kept
        for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            own = {k: v for k, v in (container.get("securityContext") or {}).items() if k not in _FIXED_IDS}
            container["securityContext"] = {**own, **security_context(None)}
            if "command" in container:
                container["args"] = [*container.pop("command"), *container.get("args", [])]
    return out


def _runtime_patch(manager: str, job_names: list[str], pod_spec: dict) -> dict:
    """A TrainJob runtime patch (Trainer v2.3's per-job pod settings) of the pod templates of `job_names`."""
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": name, "template": {"spec": {"template": {"spec": pod_spec}}}} for name in job_names]}}}}


def trainjob(spec: TrainJob) -> dict:
    """A TrainJob (trainer.kubeflow.org/v1alpha1) on a ClusterTrainingRuntime (or a TrainingRuntime)."""
    if not NAME_RE.match(spec.name):
        raise JobSpecError(f"name {spec.name!r} is invalid; allowed: a DNS-1035 label")
    if not isinstance(spec.num_nodes, int) or spec.num_nodes < 1:
        raise JobSpecError(f"num_nodes is {spec.num_nodes!r}; allowed: an integer >= 1")
    if spec.runtime_kind not in RUNTIME_KINDS:
        raise JobSpecError(f"runtime_kind {spec.runtime_kind!r} is unknown; allowed: {', '.join(RUNTIME_KINDS)}")
    if spec.workload is not None and not WORKLOAD_RE.match(spec.workload):
        raise JobSpecError(f"workload {spec.workload!r} is invalid; allowed: a program name "
                           "(lower-case letters, digits and '_', starting with a letter)")
    if spec.workload and spec.command:
        raise JobSpecError(f"command {spec.command!r} and workload {spec.workload!r} are both set; allowed: one "
                           "of them (a workload's command is the launcher's mpirun)")
    placed = bool(spec.node_selector or spec.tolerations)
    if (placed or spec.workload) and (not spec.placed_jobs
                                      or not all(isinstance(n, str) and n for n in spec.placed_jobs)):
        raise JobSpecError(f"placed_jobs is {spec.placed_jobs!r}; allowed: the names of the runtime's replicated "
                           "jobs that get node_selector, tolerations and the workload, e.g. ['node', 'launcher']")
    trainer: dict = {"numNodes": spec.num_nodes}
    if spec.workload:
        # args, not command: the image's entrypoint runs first (ours gives any UID a user).
        trainer["args"] = trainjob_launcher_command(
            spec.name, ["python3", f"{WORKLOADS_DIR}/{spec.workload}.py", *spec.workload_args])
    elif spec.command:
        trainer["command"] = list(spec.command)
    if spec.image:
        trainer["image"] = spec.image
    if spec.env:
        trainer["env"] = [{"name": k, "value": str(v)} for k, v in spec.env.items()]
    labels = dict(spec.labels)
    if spec.queue:
        labels[QUEUE_LABEL] = spec.queue
    body: dict = {"runtimeRef": {"name": spec.runtime, "kind": spec.runtime_kind,
                                 "apiGroup": "trainer.kubeflow.org"},
                  "trainer": trainer}
    if spec.suspend:
        body["suspend"] = True
    patches = []
    if placed:
        # Keyed by its manager (Kueue adds its own entry on admission, with the flavor's selector and tolerations).
        patches.append(_runtime_patch("mpiplat.io/placement", spec.placed_jobs, {
            **({"nodeSelector": dict(spec.node_selector)} if spec.node_selector else {}),
            **({"tolerations": [dict(t) for t in spec.tolerations]} if spec.tolerations else {})}))
    if spec.workload:
        # A patch may add volumes and mounts (not an image, a command or, for the `node` container, env).
        patches.append(_runtime_patch("mpiplat.io/workload", spec.placed_jobs, {
            "volumes": [{"name": "workloads", "configMap": {"name": WORKLOADS_CONFIGMAP}}],
            "containers": [{"name": TRAINER_CONTAINER, "volumeMounts": [
                {"name": "workloads", "mountPath": WORKLOADS_DIR, "readOnly": True}]}]}))
    if patches:
        body["runtimePatches"] = patches
    return {
        "apiVersion": TRAINJOB_API,
        "kind": "TrainJob",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels,
                     "annotations": dict(spec.annotations)},
        "spec": body,
    }
