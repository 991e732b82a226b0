"""The dashboard in a real browser (Debian's chromium, driven by Playwright) against the local cluster, with real
jobs: one created in the form runs on the real node and its logs stream; a failed job shows its diagnosis; a
guardrail's quota refusal shows in the form; queued jobs show their position; 100 jobs filter; and, behind an
identity-passing proxy, a team's user sees only the team's namespaces and cannot act on another team's job; a page
of another origin cannot change anything, a rebinding Host and a request without the token are refused, and no
page breaks its Content-Security-Policy.

Each page's screenshot goes to $MPIPLAT_SCREENSHOTS (docs/images/dashboard holds those of a run), else to the
test's temporary folder. Timed figures come from `python -m mpiplat.dashboard.bench`, not from these tests."""

from __future__ import annotations

import html
import json
import os
import re
import socket
import tarfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import uvicorn
from kubernetes import client

from mpiplat import Client, MPIJob, jobs
from mpiplat.conformance.placement import placement
from mpiplat.dashboard.app import Settings, create_app
from mpiplat.dashboard.security import TOKEN_COOKIE
from mpiplat.kube import CLUSTERQUEUE, LOCALQUEUE, RESOURCEFLAVOR, Kube
from mpiplat.localcluster import cluster
from mpiplat.localcluster.processes import prometheus_url

pytestmark = pytest.mark.cluster
playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Chromium on a machine with no network but the cluster's: nothing of its own fetched in the background.
# REBOUND resolves to 127.0.0.1 in it, as a DNS-rebinding attacker's name does.
REBOUND = "rebound.example"
CHROMIUM_ARGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"]
REAL_IMAGE = "mpiplat.local/openmpi:1"
TICKS = 30  # lines each rank of the logged job prints, one every 0.5 s
GATE = 10  # ... of which it prints these, then waits (300 s at most) until the test makes the file GO in its pod
GO = "/tmp/go"


class Served:
    """The dashboard on a free local port, in a thread of this process."""

    def __init__(self, settings: Settings):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.settings = settings
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=self.port, log_level="warning",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the dashboard did not start"
            time.sleep(0.05)

    def login(self, context) -> None:
        """`context` holds the token's cookie, as opening the printed URL leaves it."""
        if self.settings.token:
            context.add_cookies([{"name": TOKEN_COOKIE, "value": self.settings.token, "url": self.url}])

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def served(kube: Kube):
    s = Served(Settings(kubeconfig=str(cluster.kubeconfig_path()), refresh_s=1, prometheus=prometheus_url()))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"no chromium at {CHROMIUM}: `make setup` installs Debian's chromium (or set CHROMIUM)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def csp_watch(page) -> list[str]:
    """The Content-Security-Policy violations `page` reports (none on any of the dashboard's pages)."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(m.text) if "Content Security Policy" in m.text else None)
    return seen


@pytest.fixture
def page(browser, served):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    served.login(context)
    p = context.new_page()
    p.set_default_timeout(20_000)
    violations = csp_watch(p)
    yield p
    context.close()
    assert not violations, violations


def shot(page, name: str, tmp_path: Path) -> None:
    where = Path(os.environ.get("MPIPLAT_SCREENSHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(where / f"{name}.png"), full_page=True)


def _simulated(**kw) -> dict:
    return {**placement(real=False, kwok_nodes=True), **kw}


def test_a_job_created_in_the_form_runs_on_the_real_node_and_its_log_streams(served, page, namespace, kube, tmp_path):
    expect = playwright.expect
    name = f"form-{uuid.uuid4().hex[:6]}"
    page.goto(f"{served.url}/jobs/new")
    page.select_option("#f-namespace", namespace)
    page.fill("#f-name", name)
    page.fill("#f-image", REAL_IMAGE)
    page.fill("#f-command", f"python3 -u -c \"import os, time; tick = lambda i: print('tick', i) or time.sleep(0.5); "
                            f"[tick(i) for i in range({GATE})]; "
                            f"any(os.path.exists('{GO}') or time.sleep(0.2) for _ in range(1500)); "
                            f"[tick(i) for i in range({GATE}, {TICKS})]\"")
    page.fill("#f-workers", "0")
    page.locator("#f-workers").dispatch_event("change")
    expect(page.locator("#help-workers")).to_have_text("workers is 0; allowed: an integer >= 1")  # MPIJob's words
    page.fill("#f-workers", "2")
    page.locator("#f-workers").dispatch_event("change")
    expect(page.locator("#help-workers")).not_to_contain_text("allowed:")
    expect(page.locator("#f-yaml")).to_contain_text(f"name: {name}")  # the YAML beside the form follows it
    shot(page, "create", tmp_path)
    page.click("#create")
    page.wait_for_url(f"{served.url}/jobs/{namespace}/{name}")

    page.click("[data-tab=logs]")
    logs = page.locator("#logs")
    expect(logs).to_contain_text(f"tick {GATE - 1}", timeout=120_000)
    # Live: the first lines are shown while the ranks wait to write the rest (not a race with a slow host: CI35).
    assert f"tick {GATE}" not in logs.inner_text()
    assert Client(namespace, kube=kube).status(name).phase == "Running"
    for worker in (f"{name}-worker-0", f"{name}-worker-1"):
        cluster.kubectl("exec", "-n", namespace, worker, "--", "touch", GO)
    expect(logs).to_contain_text(f"tick {TICKS - 1}", timeout=60_000)
    page.fill("#log-search", "tick 2")
    shown = [t for t in logs.locator(".log-line:visible").all_inner_texts()]
    assert shown and all("tick 2" in t for t in shown), shown
    page.fill("#log-search", "")
    shot(page, "logs", tmp_path)
    download = page.request.get(f"{served.url}/jobs/{namespace}/{name}/logs.txt")
    assert download.ok and f"tick {TICKS - 1}" in download.text()

    page.click("[data-tab=overview]")
    expect(page.locator("#phase")).to_have_text("Succeeded", timeout=60_000)
    shot(page, "details", tmp_path)
    page.click("[data-tab=workers]")
    expect(page.locator("#workers")).to_contain_text("real-0")
    assert page.locator("#workers .simulated").count() == 0  # real pods are not marked simulated
    page.click("[data-tab=metrics]")  # cAdvisor's samples of the real pods, scraped every 5 s
    memory = page.locator("#metrics svg[data-panel='Memory (MiB)'] polyline")
    expect(memory.first).to_be_attached(timeout=30_000)
    assert {memory.nth(i).get_attribute("data-pod") for i in range(memory.count())} >= {
        f"{name}-worker-0", f"{name}-worker-1"}
    shot(page, "metrics", tmp_path)
    page.click("[data-tab=events]")
    expect(page.locator("#events")).to_contain_text("Created")


def test_a_failed_job_shows_its_diagnosis(served, page, namespace, kube, tmp_path):
    failing = MPIJob(name="fails", workers=2, launcher_creation_policy="AtStartup",
                     worker_labels={jobs.FAIL_LABEL: "true"},
                     worker_annotations={jobs.FAIL_REASON: "OOMKilled", jobs.FAIL_EXIT_CODE: "137",
                                         jobs.FAIL_DELAY: "1s"},
                     launcher_labels={jobs.FAIL_LABEL: "true"},
                     launcher_annotations={jobs.FAIL_REASON: "Error", jobs.FAIL_EXIT_CODE: "1", jobs.FAIL_DELAY: "3s"},
                     **_simulated())
    Client(namespace, kube=kube).create(failing)
    page.goto(f"{served.url}/jobs/{namespace}/fails")
    playwright.expect(page.locator("#phase")).to_have_text("Failed", timeout=60_000)
    playwright.expect(page.locator("#diagnosis")).to_contain_text("OOMKilled", timeout=30_000)
    shot(page, "failed", tmp_path)
    page.click("[data-tab=workers]")
    playwright.expect(page.locator("#workers")).to_contain_text("OOMKilled, exit 137")


def test_a_guardrails_quota_refusal_shows_in_the_form(served, page, kube):
    # team-a's ResourceQuota holds fewer GPUs than 4 x 8: the guardrail refuses the job; nothing is created.
    name = f"big-{uuid.uuid4().hex[:6]}"
    page.goto(f"{served.url}/jobs/new")
    page.select_option("#f-namespace", "team-a")
    page.fill("#f-name", name)
    page.fill("#f-workers", "4")
    page.fill("#f-gpus", "8")
    page.fill("#f-queue", "team-a")
    page.click("#create")
    error = page.locator("#form-error")
    try:  # the server answers after the SDK's checks and the refused create: seconds on a loaded machine (CI)
        playwright.expect(error).to_contain_text("refuses MPIJob team-a/" + name, timeout=60_000)
        playwright.expect(error).to_contain_text(re.compile(r"Requested 32 GPUs .*; namespace quota \d+"))
    finally:
        created = [j for j in Client("team-a", kube=kube).list() if j.name == name]
        for job in created:  # a team's queue must not keep a job a failed run left
            Client("team-a", kube=kube).delete(job.name)
    assert not created


def test_queued_jobs_show_their_position(served, page, namespace, kube, tmp_path):
    flavor, cq = f"{namespace}-f", f"{namespace}-cq"
    kube.create(RESOURCEFLAVOR, {"apiVersion": RESOURCEFLAVOR.api_version, "kind": "ResourceFlavor",
                                 "metadata": {"name": flavor}})
    kube.create(CLUSTERQUEUE, {
        "apiVersion": CLUSTERQUEUE.api_version, "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "queueingStrategy": "StrictFIFO", "resourceGroups": [{
            "coveredResources": ["cpu", "memory", jobs.GPU_RESOURCE],
            "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": "10"}, {"name": "memory", "nominalQuota": "10Gi"},
                {"name": jobs.GPU_RESOURCE, "nominalQuota": "4"}]}]}]}})
    kube.create(LOCALQUEUE, {"apiVersion": LOCALQUEUE.api_version, "kind": "LocalQueue",
                             "metadata": {"name": "team", "namespace": namespace}, "spec": {"clusterQueue": cq}})
    sdk = Client(namespace, kube=kube)
    try:
        for i in range(3):  # 4 GPUs each: the first is admitted, the others wait in order
            sdk.create(MPIJob(name=f"q{i}", workers=2, gpus_per_worker=2, queue="team",
                              launcher_annotations={jobs.COMPLETE_AFTER: "300s"}, **_simulated()))
            time.sleep(1.1)  # distinct creation times: Kueue's order
        page.goto(f"{served.url}/jobs?namespace={namespace}")
        row = page.locator(f"tr[data-job='{namespace}/q2'] td.position")
        playwright.expect(row).to_have_text("1", timeout=60_000)
        playwright.expect(page.locator(f"tr[data-job='{namespace}/q1'] td.position")).to_have_text("0")
        playwright.expect(page.locator(f"tr[data-job='{namespace}/q1'] .waiting")).to_contain_text("Kueue: ")
        playwright.expect(page.locator(f"tr[data-job='{namespace}/q2'] .waiting")).to_contain_text(
            "1 job(s) ahead of it in LocalQueue team")
        playwright.expect(page.locator(f"tr[data-job='{namespace}/q0']")).to_have_attribute("data-phase", "Running")
        # On KWOK nodes it "runs" without running: the list says so.
        playwright.expect(page.locator(f"tr[data-job='{namespace}/q0'] .simulated")).to_have_count(1)
        shot(page, "list", tmp_path)
        page.goto(f"{served.url}/queues")
        pending = page.locator(f"tr[data-queue='{cq}'] ol.pending li")
        playwright.expect(pending).to_have_count(2, timeout=30_000)
        assert [pending.nth(i).get_attribute("data-job") for i in range(2)] == [f"{namespace}/q1", f"{namespace}/q2"]
        shot(page, "queues", tmp_path)
        page.goto(f"{served.url}/jobs/{namespace}/q1")  # suspend and resume act on its Workload, as the SDK does
        page.click("text=Suspend")
        playwright.expect(page.locator("#action-result")).to_contain_text("deactivated Kueue Workload")
        assert sdk.workload("q1")["spec"]["active"] is False
        page.click("text=Resume")
        playwright.expect(page.locator("#action-result")).to_contain_text("reactivated Kueue Workload")
        assert sdk.workload("q1")["spec"]["active"] is True
        # A held LocalQueue: a job submitted to it says so, in the list and on its page.
        kube.patch(LOCALQUEUE, "team", {"spec": {"stopPolicy": "Hold"}}, namespace)
        sdk.create(MPIJob(name="held", workers=2, queue="team", **_simulated()))
        page.goto(f"{served.url}/jobs?namespace={namespace}")
        playwright.expect(page.locator(f"tr[data-job='{namespace}/held'] .waiting")).to_contain_text(
            "LocalQueue team is held (stopPolicy: Hold); Kueue: LocalQueue team is inactive", timeout=30_000)
        shot(page, "list-waiting", tmp_path)
        page.goto(f"{served.url}/jobs/{namespace}/held")
        playwright.expect(page.locator("#diagnosis")).to_contain_text(f"LocalQueue {namespace}/team is held")
    finally:
        for i in range(3):
            sdk.delete(f"q{i}", wait=True)
        kube.delete(LOCALQUEUE, "team", namespace)
        kube.delete(CLUSTERQUEUE, cq)
        kube.delete(RESOURCEFLAVOR, flavor)


def test_a_hundred_jobs_list_and_filter(served, page, namespace, kube):
    sdk = Client(namespace, kube=kube)
    with ThreadPoolExecutor(16) as pool:  # suspended, no queue: no pods, no quota
        list(pool.map(lambda i: sdk.create(MPIJob(name=f"many-{i:03d}", suspend=True, **_simulated()),
                                           check_gpus=False, check_pods=False), range(100)))
    page.goto(f"{served.url}/jobs?namespace={namespace}")
    rows = page.locator("#rows tr[data-job]")
    playwright.expect(rows).to_have_count(100)
    page.fill("input[name=q]", "many-04")
    page.click("#filters button[type=submit]")
    playwright.expect(rows).to_have_count(10)
    assert {r.get_attribute("data-phase") for r in rows.all()} == {"Suspended"}
    page.select_option("select[name=phase]", "Running")
    page.click("#filters button[type=submit]")
    playwright.expect(rows).to_have_count(0)


def test_behind_the_proxy_a_user_sees_only_their_teams_jobs_and_cannot_act_on_others(browser, kube, tmp_path):
    proxied = Served(Settings(kubeconfig=str(cluster.kubeconfig_path()), auth="proxy", refresh_s=1))
    name = f"authz-{uuid.uuid4().hex[:6]}"
    admin = {ns: Client(ns, kube=kube) for ns in ("team-a", "team-b")}
    try:
        for c in admin.values():  # suspended, no queue: no pods, and the teams' quotas stay untouched
            c.create(MPIJob(name=name, suspend=True, **_simulated()), check_gpus=False, check_pods=False)
        context = browser.new_context(extra_http_headers={"X-Forwarded-User": "alice@example.com",
                                                          "X-Forwarded-Groups": "team-a-scientists"})
        page = context.new_page()
        page.goto(f"{proxied.url}/jobs")
        playwright.expect(page.locator("#whoami")).to_contain_text("alice@example.com")
        playwright.expect(page.locator(f"tr[data-job='team-a/{name}']")).to_have_count(1)
        assert page.locator(f"tr[data-job='team-b/{name}']").count() == 0
        offered = page.locator("select[name=namespace] option").all_inner_texts()
        assert "team-a" in offered and "team-b" not in offered, offered
        shot(page, "proxied", tmp_path)
        refused = page.request.post(f"{proxied.url}/jobs/team-b/{name}/delete", headers=_csrf(page))
        said = html.unescape(refused.text())
        assert refused.status == 403 and "alice@example.com lacks 'delete' on mpijobs in namespace team-b" in said, said
        assert admin["team-b"].get(name).name == name  # still there
        assert page.request.get(f"{proxied.url}/jobs/team-b/{name}").status == 403
        bare = browser.new_context().new_page()  # no identity: refused
        assert bare.request.get(f"{proxied.url}/jobs").status == 401
        context.close()
    finally:
        proxied.stop()
        for c in admin.values():
            c.delete(name)


def test_an_impersonating_client_sends_each_group_in_a_header_of_its_own(kube: Kube):
    as_bob = kube.impersonating("bob@example.com", ["team-b-scientists", "a,b"])
    review = client.AuthenticationV1Api(as_bob.api_client).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review.status.user_info.username == "bob@example.com"
    assert {"team-b-scientists", "a,b"} <= set(review.status.user_info.groups)  # "a,b" is one group


def test_a_report_opens_from_its_handover_tarball(browser, tmp_path):
    report = tmp_path / "report"
    report.mkdir()
    (report / "results.json").write_text(json.dumps({
        "meta": {"cluster": {"server": "https://cluster.example.com:6443"}}, "summary": {"passed": 1, "failed": 1},
        "requirements": {"JOB-01": {"status": "passed", "evidence": "real", "message": "ran on real pods"},
                         "SCH-01": {"status": "failed", "evidence": "simulated", "message": "gang not admitted"}}}))
    (report / "report.html").write_text("<h1>the hand-over report</h1>")
    with tarfile.open(tmp_path / "handover.tar.gz", "w:gz") as tar:
        tar.add(report, arcname="mpiplat-conformance-x")
    s = Served(Settings(kubeconfig=str(cluster.kubeconfig_path()), reports=[str(tmp_path / "handover.tar.gz")]))
    try:
        context = browser.new_context()
        s.login(context)
        page = context.new_page()
        page.goto(f"{s.url}/reports")
        playwright.expect(page.locator("tr[data-req='SCH-01']")).to_contain_text("failed")
        playwright.expect(page.locator("tr[data-req='JOB-01']")).to_contain_text("real")
        assert "the hand-over report" in page.request.get(f"{s.url}/reports/0/files/report.html").text()
        assert page.request.get(f"{s.url}/reports/0/files/..%2F..%2Fhandover.tar.gz").status == 404
        context.close()
    finally:
        s.stop()


def _csrf(page) -> dict[str, str]:
    """The CSRF header of the page `page` shows, as htmx sends it (hx-headers on <body>)."""
    return json.loads(page.locator("body").get_attribute("hx-headers"))


class Elsewhere:
    """A page of another origin: another port of 127.0.0.1, which a browser counts as the same site, so the
    dashboard's SameSite cookie goes along with its requests."""

    def __init__(self, body: str):
        import http.server

        page = body.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args):
                pass
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


@pytest.mark.parametrize("auth", ["kubeconfig", "proxy"])
def test_a_page_of_another_origin_cannot_change_a_job(browser, kube, namespace, auth):
    """Behind the role's nginx the browser re-sends basic auth with any request (here: the proxy's headers on every
    request of the context); with --auth kubeconfig the token's cookie goes along (same site). Neither is enough:
    the other origin's form POST is refused, and the dashboard's own Delete button works."""
    s = Served(Settings(kubeconfig=str(cluster.kubeconfig_path()), auth=auth, refresh_s=1))
    name = f"csrf-{uuid.uuid4().hex[:6]}"
    sdk = Client(namespace, kube=kube)
    sdk.create(MPIJob(name=name, suspend=True, **_simulated()), check_gpus=False, check_pods=False)
    target = f"{s.url}/jobs/{namespace}/{name}/delete"
    attacker = Elsewhere(f'<form id="f" method="post" action="{html.escape(target)}"><input name="x" value="1">'
                         '</form><script>document.getElementById("f").submit()</script>')
    identity = {"X-Forwarded-User": "csrf-tester", "X-Forwarded-Groups": "system:masters"}
    context = browser.new_context(extra_http_headers=identity if auth == "proxy" else {})
    s.login(context)
    try:
        page = context.new_page()
        with page.expect_response(target) as answered:
            page.goto(attacker.url)
        assert answered.value.status == 403, answered.value.text()
        assert "Cross-site request refused" in answered.value.text()  # Sec-Fetch-Site: same-site
        assert sdk.get(name).name == name  # the job survives
        own = context.new_page()
        violations = csp_watch(own)
        own.goto(f"{s.url}/jobs/{namespace}/{name}")
        own.once("dialog", lambda d: d.accept())
        own.click("text=Delete")
        own.wait_for_url(f"{s.url}/jobs")
        assert not violations, violations
        deadline = time.monotonic() + 30
        while any(j.name == name for j in sdk.list()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(j.name == name for j in sdk.list())
    finally:
        context.close()
        attacker.stop()
        s.stop()
        if any(j.name == name for j in sdk.list()):
            sdk.delete(name)


def test_a_rebinding_host_a_missing_token_and_framing_are_refused(browser, served):
    bare = browser.new_context()
    page = bare.new_page()
    assert page.goto(f"{served.url}/jobs").status == 401  # no token
    answer = page.goto(f"{served.url}/jobs?token={served.settings.token}")  # the printed URL
    assert answer.status == 200 and page.url == f"{served.url}/jobs", page.url  # the token left the address bar
    assert page.evaluate("document.cookie") == ""  # its cookie is HttpOnly: no script reads it
    headers = answer.headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "no-referrer"
    missing = page.goto(f"{served.url}/jobs/default/no-such-job")  # an error page, inside the dashboard's layout
    assert missing.status == 404 and page.locator(".pf-v6-c-masthead").count() == 1
    playwright.expect(page.locator("#error")).to_contain_text("404 Not found")
    # A name that rebinds to 127.0.0.1: the browser sends Host: rebound.example, refused even with the token.
    rebound = served.url.replace("127.0.0.1", REBOUND)
    assert page.goto(f"{rebound}/jobs?token={served.settings.token}").status == 400
    # Framed by a page of the same site (the token's cookie goes along): the browser shows nothing of it.
    framer = Elsewhere(f'<iframe id="f" src="{served.url}/jobs"></iframe>')
    try:
        with page.expect_response(f"{served.url}/jobs") as framed:
            page.goto(framer.url)
        assert framed.value.status == 200  # served, with the token's cookie ...
        page.wait_for_timeout(500)
        assert page.frame_locator("#f").locator("#whoami").count() == 0  # ... and not shown
    finally:
        framer.stop()
        bare.close()


def test_the_forms_default_image_is_the_clusters(served, page):
    """The installer names the cluster's MPI images (kube-public/mpiplat-mpi-images): the local ones. A form with no
    image makes a job of the cluster's image for its MPI, not upstream's (which the real node does not have)."""
    page.goto(f"{served.url}/jobs/new")
    playwright.expect(page.locator("#help-image")).to_contain_text("OpenMPI: mpiplat.local/openmpi:1")
    page.fill("#f-name", "default-image")
    page.locator("#f-name").dispatch_event("change")
    playwright.expect(page.locator("#f-yaml")).to_contain_text("image: mpiplat.local/openmpi:1", timeout=20_000)
    page.select_option("#f-implementation", "MPICH")  # its change event has the form checked again
    playwright.expect(page.locator("#f-yaml")).to_contain_text("image: mpiplat.local/mpich:1", timeout=20_000)
