"""ISO: isolation and security of job pods."""

from __future__ import annotations

import pytest

from conformance.watch import JOB_LABEL, all_running, wait_pods
from mpiplat import jobs
from mpiplat.kube import MPIJOB


@pytest.mark.requirement("ISO-02")
def test_job_pods_get_no_api_token(kube, run, settings):
    ns = run.namespace()
    kube.create(MPIJOB, jobs.mpijob(jobs.MPIJobSpec(name="tokenless", namespace=ns, workers=2,
                                                    image=settings.images["OpenMPI"],
                                                    launcher_annotations={jobs.COMPLETE_AFTER: "60s"})))
    pods = wait_pods(kube, ns, f"{JOB_LABEL}=tokenless", all_running(3), timeout=120)
    for pod in pods:
        mounts = [m.mount_path for c in pod.spec.containers for m in (c.volume_mounts or [])]
        assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts, pod.metadata.name
        assert pod.spec.service_account_name in (None, "default")
