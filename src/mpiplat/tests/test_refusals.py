"""Client.create asks the API server, with a server-side dry run of each replica's pod, whether the namespace's
Pod Security or security context constraints (OpenShift's SCCs, or a policy in their words) would admit the job's
pods, and turns a refusal into one line. Offline: a fake API server on 127.0.0.1 answers as a cluster would."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from mpiplat import AsyncClient, Client, MPIJob, PodsRefused, cli
from mpiplat.refusals import pod_refusal

# The API server's words (kube-apiserver's PodSecurity admission; OpenShift's SCC admission).
PSA = ('pods "pi-worker-dryrun" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation '
       '!= false (container "worker" must set securityContext.allowPrivilegeEscalation=false), unrestricted '
       'capabilities (container "worker" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true '
       '(pod or container "worker" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container '
       '"worker" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')
PSA_LINE = ('the Worker pods would be refused by namespace team-a\'s Pod Security "restricted:latest": '
            'container "worker" must set securityContext.allowPrivilegeEscalation=false; '
            'container "worker" must set securityContext.capabilities.drop=["ALL"]; '
            'pod or container "worker" must set securityContext.runAsNonRoot=true; '
            'pod or container "worker" must set securityContext.seccompProfile.type to "RuntimeDefault" or '
            '"Localhost"')
SCC = ('pods "pi-launcher-dryrun" is forbidden: unable to validate against any security context constraint: '
       '[provider "anyuid": Forbidden: not usable by user or serviceaccount, provider restricted-v2: '
       '.containers[0].runAsUser: Invalid value: 1000: must be in the ranges: [1000680000, 1000689999], '
       'provider "restricted": Forbidden: not usable by user or serviceaccount, provider "nonroot-v2": Forbidden: '
       'not usable by user or serviceaccount, provider "privileged": Forbidden: not usable by user or '
       'serviceaccount]')
# The local cluster's ValidatingAdmissionPolicy says it in OpenShift's words.
SCC_VAP = ('pods "pi-launcher-dryrun" is forbidden: ValidatingAdmissionPolicy \'mpiplat-scc\' with binding '
           '\'mpiplat-scc\' denied request: unable to validate against any security context constraint: '
           '[provider "restricted-v2": Forbidden: ..., .containers[0].runAsUser: Invalid value: 1000: must be in '
           'the ranges: [1000680000, 1000689999]]')
SCC_REASON = "containers[0].runAsUser is 1000; allowed: 1000680000-1000689999 (leave runAsUser unset to get the " \
             "namespace's UID)"
SCC_LINE = f"the Launcher pods would be refused by namespace team-a's security context constraints: {SCC_REASON}"
RBAC = ('pods "pi-launcher-dryrun" is forbidden: User "system:serviceaccount:team-a:ci" cannot create resource '
        '"pods" in API group "" in the namespace "team-a"')
MPIJOBS = "/apis/kubeflow.org/v2beta1/namespaces/team-a/mpijobs"
PODS = "/api/v1/namespaces/team-a/pods"


class FakeAPI:
    """Answers a pod create with `pods[replica]` ((status, message); default: 201, admitted) and stores an MPIJob
    create; `calls` holds (method, path, query, body) of each request, in order."""

    def __init__(self):
        self.pods: dict[str, tuple[int, str]] = {}
        self.calls: list[tuple[str, str, dict, dict]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                url = urllib.parse.urlsplit(self.path)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                api.calls.append(("POST", url.path, urllib.parse.parse_qs(url.query), body))
                status, message = 201, ""
                if url.path == PODS:
                    replica = body["metadata"]["name"].split("-")[-2]
                    status, message = api.pods.get(replica, (201, ""))
                elif url.path == MPIJOBS:
                    body["metadata"]["uid"] = "u-1"
                else:
                    status, message = 404, "the server could not find the requested resource"
                self._answer(status, body if status < 300 else {
                    "kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": status})

            def do_GET(self):
                api.calls.append(("GET", self.path, {}, {}))
                self._answer(404, {"kind": "Status", "code": 404, "message": "not found"})

            def _answer(self, status: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def kubeconfig(self, path) -> str:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{self.server.server_port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}]}))
        return str(path)

    def paths(self) -> list[str]:
        return [f"{method} {path}" for method, path, _, _ in self.calls]


@pytest.fixture
def api():
    fake = FakeAPI()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture
def jobs(api, tmp_path) -> Client:
    return Client(kubeconfig=api.kubeconfig(tmp_path / "kc"))


def _job() -> MPIJob:
    return MPIJob(name="pi", workers=2, command=["hostname"], image="example.com/mpi:1")  # no lookup of the cluster's


def test_a_pod_security_refusal_is_one_line_naming_the_replica_the_namespace_and_each_field(api, jobs):
    api.pods["worker"] = (403, PSA)
    with pytest.raises(PodsRefused) as err:
        jobs.create(_job())
    assert str(err.value) == PSA_LINE
    assert err.value.refusals == {"Worker": PSA}
    assert api.paths() == [f"POST {PODS}", f"POST {PODS}"]  # no MPIJob was created


def test_the_dry_run_pods_are_the_templates_as_they_are(api, jobs):
    manifest = _job().manifest()
    jobs.create(_job())
    (_, _, q1, launcher), (_, _, q2, worker), (_, path, _, created) = api.calls
    assert q1 == q2 == {"dryRun": ["All"]} and path == MPIJOBS
    for pod, replica in ((launcher, "Launcher"), (worker, "Worker")):
        template = manifest["spec"]["mpiReplicaSpecs"][replica]["template"]
        assert pod["kind"] == "Pod" and pod["metadata"]["name"] == f"pi-{replica.lower()}-dryrun"
        assert pod["metadata"]["namespace"] == "team-a"
        assert pod["metadata"].get("labels") == template.get("metadata", {}).get("labels")
        assert pod["metadata"].get("annotations") == template.get("metadata", {}).get("annotations")
        assert pod["spec"] == template["spec"]


@pytest.mark.parametrize(("status", "message"), [(403, SCC), (422, SCC_VAP)])
def test_an_scc_refusal_is_one_line_with_the_value_and_the_allowed_range(api, jobs, status, message):
    api.pods["launcher"] = (status, message)
    with pytest.raises(PodsRefused) as err:
        jobs.create(_job())
    assert str(err.value) == SCC_LINE
    assert MPIJOBS not in api.paths()[-1]


def test_both_replicas_refused_alike_share_the_line(api, jobs):
    api.pods["launcher"] = api.pods["worker"] = (403, SCC)
    with pytest.raises(PodsRefused, match=r"^the Launcher and Worker pods would be refused by namespace team-a's "
                                          r"security context constraints: containers\[0\]\.runAsUser is 1000;"):
        jobs.create(_job())


@pytest.mark.parametrize(("status", "message"), [
    (403, RBAC),  # the user may create MPIJobs, not pods
    (404, 'namespaces "team-a" not found'),
    (405, "method not allowed"),
    (400, 'admission webhook "example.io" does not support dry run'),
    (403, 'pods "x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0'),
    (500, "etcdserver: request timed out"),
])
def test_a_dry_run_that_fails_otherwise_does_not_stop_the_create(api, jobs, status, message):
    api.pods["launcher"] = api.pods["worker"] = (status, message)
    created = jobs.create(_job())
    assert created.name == "pi" and created.source["metadata"]["uid"] == "u-1"
    assert api.paths() == [f"POST {PODS}", f"POST {PODS}", f"POST {MPIJOBS}"]


def test_a_dry_run_that_passes_creates_the_job(api, jobs):
    created = jobs.create(_job())
    assert (created.name, created.namespace, created.workers) == ("pi", "team-a", 2)
    assert api.paths() == [f"POST {PODS}", f"POST {PODS}", f"POST {MPIJOBS}"]


def test_check_pods_false_makes_no_dry_run(api, jobs):
    api.pods["worker"] = (403, PSA)
    jobs.create(_job(), check_pods=False)
    assert api.paths() == [f"POST {MPIJOBS}"]


def test_a_dict_job_is_checked_from_its_own_templates(api, jobs):
    """An upstream manifest, with what this client's typed models would refuse (an integer cpu)."""
    manifest = copy.deepcopy(_job().manifest())
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["containers"][0]["resources"] = {"limits": {"cpu": 1, "memory": "1Gi"}}
    api.pods["worker"] = (403, PSA)
    with pytest.raises(PodsRefused, match="^the Worker pods would be refused"):
        jobs.create(manifest)
    assert api.calls[1][3]["spec"] == worker
    api.pods.clear()
    assert jobs.create(manifest).name == "pi"


def test_the_async_client_refuses_alike(api, tmp_path):
    api.pods["worker"] = (403, PSA)

    async def main():
        async with AsyncClient(kubeconfig=api.kubeconfig(tmp_path / "kc")) as c:
            await c.create(_job())
    with pytest.raises(PodsRefused) as err:
        asyncio.run(main())
    assert str(err.value) == PSA_LINE


def test_job_create_prints_the_refusal_as_one_line_and_exits_1(api, tmp_path, capsys):
    kc = api.kubeconfig(tmp_path / "kc")
    api.pods["worker"] = (403, PSA)
    assert cli.main(["job", "create", "pi", "--kubeconfig", kc, "--", "hostname"]) == 1
    out = capsys.readouterr()
    assert out.err == f"error: {PSA_LINE}\n" and out.out == ""
    assert cli.main(["job", "create", "pi", "--kubeconfig", kc, "--no-pod-check", "--", "hostname"]) == 0
    assert capsys.readouterr().out == "mpijob.kubeflow.org/pi created in namespace team-a\n"


@pytest.mark.parametrize(("message", "want"), [
    # OpenShift 4's list: errors of SCCs that may be used, the others left out; Go's []int64{...} unwrapped.
    ('pods "p" is forbidden: unable to validate against any security context constraint: [provider "anyuid": '
     'Forbidden: not usable by user or serviceaccount, provider restricted-v2: .spec.securityContext.fsGroup: '
     'Invalid value: []int64{1000}: 1000 is not an allowed group, provider restricted-v2: .containers[0].runAsUser: '
     'Invalid value: 1000: must be in the ranges: [1000680000, 1000689999]]',
     ("security context constraints", [
         "spec.securityContext.fsGroup is 1000; 1000 is not an allowed group (leave fsGroup unset to get the "
         "namespace's group)", SCC_REASON])),
    # One error, no brackets; a quoted value; errors before any provider.
    ('pods "p" is forbidden: unable to validate against any security context constraint: provider restricted-v2: '
     '.spec.volumes[0]: Invalid value: "hostPath": hostPath volumes are not allowed to be used',
     ("security context constraints", ['spec.volumes[0] is "hostPath"; hostPath volumes are not allowed to be used'])),
    ('pods "p" is forbidden: unable to validate against any security context constraint: '
     '[pod.metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]: Forbidden: seccomp may not be set]',
     ("security context constraints", ["pod.metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]: "
                                       "seccomp may not be set"])),
    # Several SCCs that may be used: each reason names its SCC.
    ('pods "p" is forbidden: unable to validate against any security context constraint: [provider restricted-v2: '
     '.containers[0].securityContext.privileged: Invalid value: true: Privileged containers are not allowed, '
     'provider nonroot-v2: .containers[0].capabilities.add: Invalid value: "NET_ADMIN": capability may not be added]',
     ("security context constraints", [
         "restricted-v2: containers[0].securityContext.privileged is true; Privileged containers are not allowed",
         'nonroot-v2: containers[0].capabilities.add is "NET_ADMIN"; capability may not be added'])),
    ('pods "p" is forbidden: unable to validate against any security context constraint: [provider "anyuid": '
     'Forbidden: not usable by user or serviceaccount]',
     ("security context constraints", ["none of them may be used by the user or the pod's service account"])),
    # Pod Security checks whose detail is no "must": the check and its detail as Pod Security words them.
    ('pods "p" is forbidden: violates PodSecurity "baseline:v1.30": host namespaces (hostNetwork=true), hostPort '
     '(container "w" uses hostPort 22), privileged (container "w" must not set securityContext.privileged=true)',
     ('Pod Security "baseline:v1.30"', ["host namespaces (hostNetwork=true)", 'hostPort (container "w" uses '
                                        'hostPort 22)', 'container "w" must not set securityContext.privileged=true'])),
    (RBAC, None),
    ('pods "p" is forbidden: exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0', None),
])
def test_refusal_messages_parse_into_who_refuses_and_why(message, want):
    assert pod_refusal(message) == want


def test_an_unrecognised_scc_list_still_gives_one_line_with_the_apis_words():
    old = ('pods "p" is forbidden: unable to validate against any security context constraint: [fsGroup: '
           'Invalid value: []int64{185}: 185 is not an allowed group spec.containers[0].securityContext.runAsUser: '
           'Invalid value: 0: must be\n in the ranges: [1, 2]]')
    policy, reasons = pod_refusal(old)
    line = "; ".join(reasons)
    assert policy == "security context constraints" and "\n" not in line
    assert "185 is not an allowed group" in line and "spec.containers[0].securityContext.runAsUser" in line
