"""The dashboard's parts that need no cluster: pinned assets, the job form (MPIJob's checks and messages, the
YAML round trip), the list's filters, event framing and settings. Its pages are tested in a real browser
against the local cluster (test_dashboard_browser.py)."""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile

import pytest
import yaml

from mpiplat.dashboard import app, assets, metrics
from mpiplat.jobs import JobSpecError, MPIJob
from mpiplat.overview import JobSummary


def _tarball(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_an_asset_is_unpacked_only_with_its_pinned_digest_and_only_its_files(tmp_path, monkeypatch):
    data = _tarball({"x.min.css": b"body{}", "assets/fonts/a.woff2": b"font", "docs/big.md": b"no"})
    (tmp_path / "reg" / "@scope" / "pkg" / "-").mkdir(parents=True)
    (tmp_path / "reg" / "@scope" / "pkg" / "-" / "pkg-1.2.3.tgz").write_bytes(data)
    monkeypatch.setattr(assets, "REGISTRY", (tmp_path / "reg").as_uri())
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    good = assets.Asset("pkg", "@scope/pkg", "1.2.3", digest, ("x.min.css", "assets/fonts/**"))

    bad = assets.Asset("pkg", "@scope/pkg", "1.2.3", "sha512-" + "A" * 86 + "==", good.files)
    with pytest.raises(assets.AssetError, match="refusing it"):
        assets.unpack(bad, tmp_path / "out", log=lambda _: None)
    assert not (tmp_path / "out" / "pkg").exists()

    where = assets.unpack(good, tmp_path / "out", log=lambda _: None)
    assert sorted(str(p.relative_to(where)) for p in where.rglob("*") if p.is_file()) == [
        ".complete", "assets/fonts/a.woff2", "x.min.css"]
    (tmp_path / "reg" / "@scope" / "pkg" / "-" / "pkg-1.2.3.tgz").unlink()
    assert assets.unpack(good, tmp_path / "out", log=lambda _: None) == where  # kept: not fetched again


def test_the_pinned_assets_name_a_version_a_digest_and_their_files():
    pinned = {a.name: a for a in assets.pinned()}
    assert set(pinned) == {"patternfly", "htmx", "htmx-ext-sse"}
    for a in pinned.values():
        assert a.integrity.startswith("sha512-") and a.files
        assert a.tarball.startswith(assets.REGISTRY) and a.tarball.endswith(f"-{a.version}.tgz")
    assert pinned["htmx"].version.startswith("2.")  # the pages use htmx 2's SSE extension attributes
    assert pinned["patternfly"].wanted("patternfly.min.css") and pinned["patternfly"].wanted("assets/fonts/x/y.woff2")


FORM = {"namespace": "team-a", "name": "pi", "implementation": "MPICH", "image": "", "command": "python3 pi.py --n 8",
        "workers": "3", "slots": "2", "cpu": "500m", "memory": "1Gi", "gpus": "1", "queue": "team-a", "pvc": ""}


def test_the_form_builds_the_job_the_sdk_would():
    job = app.job_from_form(FORM)
    want = MPIJob(name="pi", namespace="team-a", implementation="MPICH", command=["python3", "pi.py", "--n", "8"],
                  workers=3, slots_per_worker=2, cpu="500m", memory="1Gi", gpus_per_worker=1, queue="team-a")
    assert job.manifest() == want.manifest()


@pytest.mark.parametrize(("field", "value"), [
    ("name", "Bad_Name"), ("workers", "0"), ("workers", "two"), ("slots", "0"), ("gpus", "-1"),
    ("implementation", "LAM"), ("namespace", "Team A"), ("command", "")])
def test_a_bad_field_gets_mpijobs_own_message_next_to_it(field, value):
    with pytest.raises(JobSpecError) as caught:
        app.job_from_form({**FORM, field: value})
    assert app.error_field(str(caught.value)) == field
    if field == "workers" and value == "0":
        assert str(caught.value) == "workers is 0; allowed: an integer >= 1"  # MPIJob's words, unchanged


def test_form_and_yaml_round_trip():
    job = app.job_from_form(FORM)
    text = job.to_yaml()
    loaded = MPIJob.from_yaml(text)
    values = app.form_of(loaded, text)
    for key in ("namespace", "name", "implementation", "workers", "slots", "gpus", "queue"):
        assert values[key] == FORM[key], key
    # The form's fields are applied to the YAML's job; the rest of the YAML stays as written.
    changed = app.job_from_form({**values, "workers": "5"})
    manifest = changed.manifest()
    assert manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 5
    original = yaml.safe_load(text)
    assert manifest["spec"]["mpiReplicaSpecs"]["Launcher"] == original["spec"]["mpiReplicaSpecs"]["Launcher"]


def test_the_list_filters_and_sorts():
    rows = [JobSummary("MPIJob", "a", "train-1", "Running", created="2026-11-20T10:00:00Z", gpus=8),
            JobSummary("MPIJob", "b", "eval-2", "Failed", created="2026-11-27T10:00:00Z", gpus=0),
            JobSummary("TrainJob", "a", "train-3", "Queued", created="2026-11-28T10:00:00Z", gpus=16)]
    names = lambda q: [r.name for r in app.filter_rows(list(rows), q)]  # noqa: E731
    assert names({}) == ["train-3", "eval-2", "train-1"]  # newest first
    assert names({"phase": "Failed"}) == ["eval-2"]
    assert names({"q": "TRAIN"}) == ["train-3", "train-1"]
    assert names({"since": "2026-11-27"}) == ["train-3", "eval-2"]
    assert names({"sort": "gpus", "dir": "desc"}) == ["train-3", "train-1", "eval-2"]
    assert names({"sort": "name", "dir": "asc"}) == ["eval-2", "train-1", "train-3"]


def test_an_event_sends_each_line_of_its_html_as_a_data_line():
    assert app.sse("rows", "<tr>\n<td>1</td>\n</tr>", "7") == "event: rows\nid: 7\ndata: <tr>\ndata: <td>1</td>\n" \
                                                              "data: </tr>\n\n"
    assert app.sse("end", "") == "event: end\ndata: \n\n"


def test_settings_are_checked_before_serving(tmp_path):
    with pytest.raises(ValueError, match="auth is 'oauth'; allowed: kubeconfig, proxy"):
        app.Settings(auth="oauth").check()
    with pytest.raises(ValueError, match="refresh_s is 10; allowed"):
        app.Settings(refresh_s=10).check()
    with pytest.raises(ValueError, match="does not exist; allowed: a report folder"):
        app.Settings(reports=[str(tmp_path / "nope")]).check()


def test_durations_read_as_two_units():
    assert [app.seconds(s) for s in (None, 0, 45, 200, 3600, 3725, 93600)] == [
        "-", "0s", "45s", "3m20s", "1h", "1h2m", "1d2h"]


def test_a_chart_draws_a_line_per_pod_scaled_to_the_top_value():
    panel = metrics.PANELS[1]
    drawn = metrics.svg(panel, {"pi-worker-0": [(100.0, 10.0), (110.0, 20.0)], "pi-worker-1": [(100.0, 5.0)]})
    lines = re.findall(r'<polyline data-pod="([^"]+)"[^>]* points="([^"]+)"', drawn)
    assert [pod for pod, _ in lines] == ["pi-worker-0", "pi-worker-1"]
    ys = [float(xy.split(",")[1]) for xy in lines[0][1].split()]
    assert ys[1] == 20.0 and ys[0] > ys[1]  # the top value at the top (y 20), the half of it lower
    assert ">20<" in drawn and "10 s" in drawn


def test_the_metrics_tab_says_what_to_do_without_a_prometheus():
    assert "--prometheus URL" in metrics.fragment(None, "ns", "pi", None, None)
    with pytest.raises(ValueError, match="prometheus is 'localhost:9090'; allowed: an http:// or https:// URL"):
        app.Settings(prometheus="localhost:9090").check()


# ---------------------------------------------------------------- security.py, on a route of its own

def _guarded(token: str | None):
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from mpiplat.dashboard import security

    guard = security.Guard(token)
    done = []

    async def change(request):
        done.append(request.method)
        return PlainTextResponse("changed")
    return Starlette(routes=[Route("/x", change, methods=["GET", "POST"]), Route("/healthz", change)], middleware=[
        Middleware(security.SecurityHeaders),
        Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost"], www_redirect=False),
        Middleware(security.GuardMiddleware, guard=guard, who=lambda r: r.headers.get("x-forwarded-user", ""))]), \
        guard, done


def _call(asgi, method: str, path: str, **headers: str) -> tuple[int, dict[str, str], str]:
    """One request through the ASGI app: its status, headers (the last of each name) and body."""
    import asyncio

    path, _, query = path.partition("?")
    raw = [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in {"host": "127.0.0.1:8080", **headers}.items()]
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": query.encode(),
             "headers": raw, "scheme": "http", "server": ("127.0.0.1", 8080), "http_version": "1.1", "root_path": ""}
    out: dict = {"body": b""}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
        else:
            out["body"] += message.get("body", b"")
    asyncio.run(asgi(scope, receive, send))
    return out["status"], out["headers"], out["body"].decode()


def test_a_foreign_host_is_refused_and_every_answer_has_the_security_headers():
    asgi, guard, done = _guarded(None)
    status, headers, _ = _call(asgi, "GET", "/x", host="evil.example")
    assert status == 400 and not done
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "script-src 'self';" in headers["content-security-policy"]  # no inline script, no eval
    assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "no-referrer"
    assert _call(asgi, "GET", "/x", host="localhost:8080")[0] == 200


def test_a_change_needs_the_pages_csrf_token_and_the_dashboards_own_origin():
    asgi, guard, done = _guarded(None)
    token = guard.csrf_token("alice")
    assert _call(asgi, "POST", "/x", x_forwarded_user="alice")[0] == 403  # no token: a form from anywhere
    assert _call(asgi, "POST", "/x", x_forwarded_user="alice", x_csrf_token=guard.csrf_token("bob"))[0] == 403
    status, _, said = _call(asgi, "POST", "/x", x_forwarded_user="alice", x_csrf_token=token,
                            origin="http://evil.example", sec_fetch_site="cross-site")
    assert status == 403 and "Sec-Fetch-Site is cross-site" in said
    status, _, said = _call(asgi, "POST", "/x", x_forwarded_user="alice", x_csrf_token=token,
                            origin="http://127.0.0.1:9999")  # another port: another origin
    assert status == 403 and "Origin http://127.0.0.1:9999 is not this dashboard" in said
    assert not done
    assert _call(asgi, "POST", "/x", x_forwarded_user="alice", x_csrf_token=token, origin="http://127.0.0.1:8080",
                 sec_fetch_site="same-origin")[0] == 200
    assert done == ["POST"]


def test_with_a_token_every_request_needs_it_and_its_url_sets_an_httponly_cookie():
    asgi, guard, done = _guarded("s3cret-token-0123456789")
    assert _call(asgi, "GET", "/x")[0] == 401
    assert _call(asgi, "GET", "/x?token=wrong")[0] == 403
    assert _call(asgi, "GET", "/healthz")[0] == 200  # says ok, nothing else
    status, headers, _ = _call(asgi, "GET", "/x?token=s3cret-token-0123456789&tab=logs")
    assert status == 303 and headers["location"] == "/x?tab=logs"  # the token leaves the address bar
    cookie = headers["set-cookie"]
    assert cookie.startswith("mpiplat-dashboard-token=s3cret-token-0123456789;")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert _call(asgi, "GET", "/x", cookie="mpiplat-dashboard-token=s3cret-token-0123456789")[0] == 200
    assert _call(asgi, "GET", "/x", authorization="token s3cret-token-0123456789")[0] == 200
    assert done == ["GET", "GET", "GET"]


def test_the_security_settings_are_checked():
    with pytest.raises(ValueError, match="allowed host 'http://x.example'"):
        app.Settings(allowed_hosts=["http://x.example"]).check()
    with pytest.raises(ValueError, match="with auth kubeconfig only"):
        app.Settings(auth="proxy", token="0123456789abcdef").check()


@pytest.mark.parametrize("phase, shown", [
    ("Running", ["Suspend", "Delete"]), ("Pending", ["Suspend", "Delete"]), ("Queued", ["Suspend", "Resume", "Delete"]),
    ("Suspended", ["Resume", "Delete"]), ("Succeeded", ["Delete"]), ("Failed", ["Delete"])])
def test_a_job_page_offers_only_the_actions_that_apply(phase, shown):
    from types import SimpleNamespace

    from jinja2 import Environment, FileSystemLoader

    env = Environment(loader=FileSystemLoader(str(app.HERE / "templates")), autoescape=True)
    html = env.get_template("job_actions.html").render(d=SimpleNamespace(status=SimpleNamespace(phase=phase)),
                                                       ns="ns", name="j")
    assert re.findall(r">(Suspend|Resume|Delete)</button>", html) == shown
