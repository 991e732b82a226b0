"""roles/dashboard on the local cluster: the dashboard runs in a pod behind the role's identity-passing proxy
(nginx, basic auth), which names each user to it; the dashboard acts as that user (impersonation), so a team-a
scientist sees team-a's jobs and not team-b's and may not delete team-b's. Re-applying changes nothing, and
state absent leaves nothing behind."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from mpiplat import Client, MPIJob
from mpiplat.conformance.placement import placement
from mpiplat.kube import Kube
from mpiplat.localcluster import images, realnode

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cluster


def _play(env: dict[str, str], **settings) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventories/local/hosts.yml",
         "playbooks/dashboard.yml", "-e", json.dumps(settings)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _changed(run: subprocess.CompletedProcess) -> int:
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    return int(re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", run.stdout).group(1))


def _hash(password: str) -> str:
    return subprocess.run(["openssl", "passwd", "-6", password], capture_output=True, text=True,
                          check=True).stdout.strip()


def _get(url: str, user: str | None = None, password: str = "", method: str = "GET",
         headers: dict | None = None) -> tuple[int, str]:
    """A request to the dashboard's pod, for its Service's name (the Host it answers) unless `headers` say else."""
    req = urllib.request.Request(url, method=method, headers={"Host": "mpiplat-dashboard", **(headers or {})})
    if user:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture(scope="module")
def deployed(kube: Kube, ansible_env: dict[str, str]):
    images.import_into(realnode.ctr(), ["dashboard", "dashboard-proxy"], stream=io.StringIO())
    ns = f"dash-{uuid.uuid4().hex[:6]}"
    settings = {"dashboard_namespace": ns, "dashboard_users": [
        {"name": "alice", "password_hash": _hash("alice-pw"), "groups": ["team-a-scientists"]},
        {"name": "bob", "password_hash": _hash("bob-pw"), "groups": ["team-b-scientists"]}]}
    first = _play(ansible_env, **settings)
    try:
        assert _changed(first) > 0
        pod = kube.core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/name=mpiplat-dashboard").items[0]
        yield {"ns": ns, "url": f"http://{pod.status.pod_ip}:8080", "settings": settings}
    finally:
        gone = _play(ansible_env, dashboard_state="absent", **settings)
        assert gone.returncode == 0, (gone.stdout + gone.stderr)[-3000:]
        left = [n.metadata.name for n in kube.core.list_namespace().items if n.metadata.name == ns]
        roles = [r.metadata.name for r in client.RbacAuthorizationV1Api(kube.api_client).list_cluster_role(
            label_selector="mpiplat.io/component=dashboard").items if r.metadata.name.endswith(ns)]
        assert not left and not roles, (left, roles)


def test_behind_the_proxy_each_user_sees_and_does_only_what_their_rbac_allows(deployed, kube, ansible_env):
    url, name = deployed["url"], f"role-{uuid.uuid4().hex[:6]}"
    admin = {ns: Client(ns, kube=kube) for ns in ("team-a", "team-b")}
    try:
        for c in admin.values():  # suspended, no queue: no pods, the teams' quotas untouched
            c.create(MPIJob(name=name, suspend=True, **placement(real=False, kwok_nodes=True)),
                     check_gpus=False, check_pods=False)
        assert _get(f"{url}/jobs")[0] == 401  # no user, no page
        assert _get(f"{url}/jobs", "alice", "wrong")[0] == 401
        code, page = _get(f"{url}/jobs", "alice", "alice-pw", headers={"X-Forwarded-User": "bob"})
        assert code == 200, page
        assert re.search(r'id="whoami">alice \(team-a-scientists\)', page), page[:2000]  # not the header sent
        assert _get(f"{url}/static/vendor/patternfly/patternfly.min.css", "alice", "alice-pw")[0] == 200  # the wheel's
        assert f'data-job="team-a/{name}"' in page and f'data-job="team-b/{name}"' not in page
        csrf = json.loads(html.unescape(re.search(r"hx-headers='([^']*)'", page).group(1)))
        assert _get(f"{url}/jobs", "alice", "alice-pw", headers={"Host": "evil.example"})[0] == 400  # rebinding
        delete_a = f"{url}/jobs/team-a/{name}/delete"
        code, said = _get(delete_a, "alice", "alice-pw", method="POST")  # a form from any page the user visits
        assert code == 403 and "CSRF token missing" in said, said
        code, said = _get(delete_a, "alice", "alice-pw", method="POST", headers={
            **csrf, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
        assert code == 403 and "Cross-site request refused" in said, said
        assert admin["team-a"].get(name).name == name  # both refused: the job is there
        code, said = _get(f"{url}/jobs/team-b/{name}/delete", "alice", "alice-pw", method="POST", headers=csrf)
        assert code == 403 and "alice lacks 'delete' on mpijobs in namespace team-b" in html.unescape(said), said
        assert admin["team-b"].get(name).name == name
        code, page = _get(f"{url}/jobs", "bob", "bob-pw")
        assert f'data-job="team-b/{name}"' in page and f'data-job="team-a/{name}"' not in page
        assert _changed(_play(ansible_env, **deployed["settings"])) == 0  # a re-run changes nothing
    finally:
        for c in admin.values():
            c.delete(name)


def test_the_dashboard_pod_meets_pod_security_restricted(deployed, kube):
    ns = kube.core.read_namespace(deployed["ns"])
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    deadline = time.monotonic() + 5
    while not (pods := kube.core.list_namespaced_pod(deployed["ns"]).items) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pods and all(p.status.phase == "Running" for p in pods)
