"""The controller images (mpiplat.localcluster.images: kueue, jobset, trainer, mpi-operator) run on the
real node as their charts run them: by the chart's image reference with no registry (IfNotPresent),
under the charts' security context (runAsNonRoot with no runAsUser, a read-only root, no
capabilities), the binary at the image's entrypoint taking the flag the chart (or manifest) passes."""

from __future__ import annotations

import pytest
from kubernetes import client

from mpiplat.conformance.watch import wait_pods
from mpiplat.localcluster import images, realnode

pytestmark = pytest.mark.cluster

# Controller recipe -> a flag its chart's (mpi-operator: manifest's) args pass, which --help must list.
FLAGS = {"kueue": "-config", "jobset": "-config", "trainer": "-config", "mpi-operator": "-lock-namespace"}


LABEL = "mpiplat.io/test=controller-images"


def _pod(name: str, recipe: images.Recipe) -> client.V1Pod:
    key, value = LABEL.split("=")
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={key: value}),
        spec=client.V1PodSpec(
            node_name=realnode.NAME, restart_policy="Never", automount_service_account_token=False,
            security_context=client.V1PodSecurityContext(
                run_as_non_root=True, seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault")),
            containers=[client.V1Container(
                name="manager", image=recipe.image, image_pull_policy="IfNotPresent",
                command=[*recipe.entrypoint, "--help"],
                security_context=client.V1SecurityContext(
                    read_only_root_filesystem=True, allow_privilege_escalation=False,
                    capabilities=client.V1Capabilities(drop=["ALL"])))]))


def test_each_controller_image_runs_its_binary_as_non_root_by_the_charts_reference(kube, namespace):
    pods = {name: f"image-{name}" for name in FLAGS}
    for name, pod in pods.items():
        kube.core.create_namespaced_pod(namespace, _pod(pod, images.recipe(name)))
    try:
        wait_pods(kube, namespace, LABEL, lambda ps: len(ps) == len(pods)
                  and all(p.status.phase in ("Succeeded", "Failed") for p in ps), timeout=120)
    except TimeoutError:
        pass  # each pod still waiting is reported below, with its reason
    wrong = []
    for name, pod in pods.items():
        status = kube.core.read_namespaced_pod(pod, namespace).status
        waiting = [cs.state.waiting for cs in status.container_statuses or [] if cs.state.waiting]
        log = kube.core.read_namespaced_pod_log(pod, namespace) if status.phase in ("Succeeded", "Failed") else ""
        if status.phase != "Succeeded" or f"  {FLAGS[name]} " not in log:
            why = f"{waiting[0].reason}: {waiting[0].message}" if waiting else log[-800:]
            wrong.append(f"{images.recipe(name).image} ({name}): {status.phase}; {why}")
    assert not wrong, "\n".join(wrong)
