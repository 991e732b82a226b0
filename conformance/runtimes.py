"""Trainer runtimes for TrainJobs whose ranks run for real (JOB-04, UPG-03): a namespaced copy of the installed MPI
ClusterTrainingRuntime with the settings' image, and the wait until Trainer's webhook sees it."""

from __future__ import annotations

import time
from copy import deepcopy

from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.kube import TRAINJOB, Kind

CLUSTER_TRAINING_RUNTIME = Kind("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes")
TRAINING_RUNTIME = Kind("trainer.kubeflow.org", "v1alpha1", "trainingruntimes")
# Labels JobSet puts on a TrainJob's pods (the JobSet has the TrainJob's name).
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


def copy(kube, runtime: str, namespace: str, image: str) -> None:
    """A TrainingRuntime `runtime` in `namespace`: the installed ClusterTrainingRuntime's spec (its MPI policy,
    replicated jobs, users, sshd command, SSH mount path) with the image of its `node` containers set to `image`.

    Needed because Trainer v2.3 sets a TrainJob's image on the launcher only (trainer.image reaches the job
    labelled trainjob-ancestor-step=trainer) and a runtime patch cannot set an image (its containers take env,
    volumeMounts and securityContext): the node pods of the ClusterTrainingRuntime itself always run its
    own image (ghcr.io/kubeflow/trainer/...-runtime), which a cluster without that registry cannot pull."""
    installed = kube.get(CLUSTER_TRAINING_RUNTIME, runtime)
    spec = deepcopy(installed["spec"])
    replaced = []
    for rjob in spec["template"]["spec"]["replicatedJobs"]:
        for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            if container["name"] == jobs.TRAINER_CONTAINER:
                container["image"] = image
                replaced.append(rjob["name"])
    assert sorted(replaced) == sorted(jobs.TRAINER_MPI_JOBS), \
        f"ClusterTrainingRuntime {runtime}: `{jobs.TRAINER_CONTAINER}` containers in {replaced}, " \
        f"expected one in each of {list(jobs.TRAINER_MPI_JOBS)}"
    assert spec.get("mlPolicy", {}).get("mpi"), f"ClusterTrainingRuntime {runtime} has no MPI policy"
    kube.create(TRAINING_RUNTIME, {"apiVersion": TRAINING_RUNTIME.api_version, "kind": "TrainingRuntime",
                                   "metadata": {"name": runtime, "namespace": namespace,
                                                "labels": dict(installed["metadata"].get("labels") or {})},
                                   "spec": spec})


def wait_seen(kube, trainjob: dict, timeout: float = 30) -> None:
    """Wait until Trainer's validating webhook finds the runtime of `trainjob`: the webhook reads runtimes from
    its informer cache, so a TrainingRuntime created a moment before is refused as "not found" until that
    cache has it. Server-side dry runs probe it; any other refusal is raised at once."""
    meta = trainjob["metadata"]
    until = kube.deadline(timeout)
    while True:
        try:
            kube.custom.create_namespaced_custom_object(TRAINJOB.group, TRAINJOB.version, meta["namespace"],
                                                        TRAINJOB.plural, trainjob, dry_run="All")
            break
        except ApiException as err:
            if "runtime" not in str(err.body) or "not found" not in str(err.body) \
                    or time.monotonic() > until:
                raise
            time.sleep(0.5)
