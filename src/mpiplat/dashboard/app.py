"""The dashboard's web application: pages, fragments (htmx) and event streams (SSE), on Starlette.

Who acts: with `auth="kubeconfig"` the kubeconfig's user (a laptop); with `auth="proxy"` each request's user as
the identity-passing proxy in front of it names them (headers `user_header` and `groups_header`), through
Kubernetes impersonation: the dashboard's own identity only lists namespace names and impersonates, and every
read and write is the user's own, so the API server's RBAC decides what each user sees and does. What keeps it safe
to expose (allowed hosts, the kubeconfig mode's token, CSRF, the security headers) is security.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import html
import json
import secrets
import shlex
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import yaml
from kubernetes.client.exceptions import ApiException
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from mpiplat import __version__
from mpiplat.conformance.capabilities import is_kwok
from mpiplat.conformance.prometheus import Prometheus
from mpiplat.dashboard import assets, metrics, security
from mpiplat.jobs import DEFAULT_IMAGES, IMPLEMENTATIONS, JobSpecError, MPIJob
from mpiplat.kube import Kube
from mpiplat.overview import KINDS, JobSummary
from mpiplat.sdk import PHASES, AsyncClient, Forbidden, JobError, JobNotFound

HERE = Path(__file__).parent
AUTH_MODES = ("kubeconfig", "proxy")
REFRESH_S = 2.0  # how often the list, a job's page and the queues are re-read for their streams
NAMESPACES_TTL_S = 30.0  # how long a user's visible namespaces are kept
SIMULATED_TTL_S = 30.0  # how long the names of the simulated (KWOK) nodes are kept
ACTIONS = ("suspend", "resume", "delete")
PING_S = 15.0  # an SSE comment this often keeps proxies from closing an idle stream


@dataclass
class Settings:
    kubeconfig: str | None = None
    context: str | None = None
    auth: str = "kubeconfig"
    user_header: str = "X-Forwarded-User"
    groups_header: str = "X-Forwarded-Groups"  # comma-separated
    namespaces: list[str] | None = None  # the namespaces to offer (default: those the identity may list)
    reports: list[str] = field(default_factory=list)  # report folders or handover tarballs to browse
    prometheus: str | None = None  # the cluster's Prometheus (the Metrics tab), its base URL
    prometheus_token_file: str | None = None  # a bearer token for it (e.g. OpenShift's thanos-querier)
    refresh_s: float = REFRESH_S
    # The Host names it answers (DNS rebinding): a name, or *.domain; default 127.0.0.1 and localhost.
    allowed_hosts: list[str] = field(default_factory=lambda: list(security.DEFAULT_HOSTS))
    token: str | None = None  # with auth kubeconfig: the token every request needs (default: a random one)

    def check(self) -> None:
        if self.auth not in AUTH_MODES:
            raise ValueError(f"auth is {self.auth!r}; allowed: {', '.join(AUTH_MODES)}")
        if self.refresh_s <= 0 or self.refresh_s > 5:
            raise ValueError(f"refresh_s is {self.refresh_s}; allowed: a number of seconds > 0 and <= 5")
        if self.prometheus and not self.prometheus.startswith(("http://", "https://")):
            raise ValueError(f"prometheus is {self.prometheus!r}; allowed: an http:// or https:// URL")
        if self.prometheus_token_file and not Path(self.prometheus_token_file).is_file():
            raise ValueError(f"prometheus_token_file {self.prometheus_token_file!r} does not exist; allowed: a "
                             "file holding a bearer token")
        for host in self.allowed_hosts:
            if not host or "/" in host or ":" in host or " " in host or "*" in host.removeprefix("*."):
                raise ValueError(f"allowed host {host!r}; allowed: a host name or address without port or scheme "
                                 "(example.com, 10.0.0.5), or *.domain for its subdomains")
        if self.token is not None and (self.auth != "kubeconfig" or len(self.token) < 16):
            raise ValueError("token is set; allowed: with auth kubeconfig only, at least 16 characters")
        for path in self.reports:
            if not Path(path).exists():
                raise ValueError(f"report {path!r} does not exist; allowed: a report folder (results.json in it) "
                                 "or a handover tarball (mpiplat-conformance-*.tar.gz)")


@dataclass
class User:
    name: str
    groups: tuple[str, ...]
    client: AsyncClient
    namespaces_at: float = 0.0
    visible: list[str] | None = None  # None: every namespace


# ---------------------------------------------------------------- formatting (templates' filters)

def age(stamp: str | None) -> str:
    if not stamp:
        return "-"
    then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return seconds(int((datetime.datetime.now(datetime.UTC) - then).total_seconds()))


def seconds(value: float | None) -> str:
    """A duration as its two largest units: 45s, 3m20s, 1h5m, 2d3h."""
    if value is None:
        return "-"
    secs, parts = int(value), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if secs >= size or (unit == "s" and not parts):
            parts.append(f"{secs // size}{unit}")
            secs %= size
    return "".join(parts[:2])


PHASE_COLOURS = {"Succeeded": "green", "Failed": "red", "Running": "blue", "Queued": "orange",
                 "Suspended": "grey", "Created": "teal", "Pending": "grey"}


def sse(event: str, data: str, event_id: str | None = None) -> str:
    """One server-sent event: every line of `data` its own data: line."""
    lines = [f"event: {event}"] + ([f"id: {event_id}"] if event_id else [])
    lines += [f"data: {line}" for line in (data.splitlines() or [""])]
    return "\n".join(lines) + "\n\n"


# ---------------------------------------------------------------- the job form

FORM_FIELDS = ("namespace", "name", "implementation", "image", "command", "workers", "slots", "cpu", "memory",
               "gpus", "queue", "pvc")
# MPIJob's field -> the form's (MPIJob's messages start with its field's name).
FIELD_OF = {"slots_per_worker": "slots", "gpus_per_worker": "gpus", "command": "command", "pvc": "pvc"}
HELP = {
    "namespace": "Your team's namespace: the job runs and is charged there.",
    "name": "Lower-case letters, digits and '-', starting with a letter (a DNS-1035 label).",
    "implementation": "The MPI the image has: " + ", ".join(IMPLEMENTATIONS) + ".",
    "image": "The launcher's and workers' image; empty: mpiplat's image for the implementation.",
    "command": "The program each rank runs (mpirun starts it on every slot), as shell words.",
    "workers": "How many worker pods (an integer >= 1).",
    "slots": "MPI ranks per worker (an integer >= 1).",
    "cpu": "Each worker's CPU request, e.g. 500m or 2.",
    "memory": "Each worker's memory request and limit, e.g. 512Mi or 4Gi.",
    "gpus": "GPUs per worker (an integer >= 0).",
    "queue": "The Kueue LocalQueue to submit to; empty: none (the namespace's default queue, if any).",
    "pvc": "A PersistentVolumeClaim mounted at /data in every pod; empty: none.",
}


def _int(value: str):
    value = value.strip()
    return int(value) if value.lstrip("-").isdigit() else value


def job_from_form(form: dict[str, str]) -> MPIJob:
    """The form's job, checked as MPIJob checks it (JobSpecError names the field). With `source_yaml` the job is
    that YAML's, with the form's fields that map to it applied."""
    fields = {k: (form.get(k) or "").strip() for k in FORM_FIELDS}
    if form.get("source_yaml"):
        job = MPIJob.from_yaml(form["source_yaml"])
    else:
        try:
            command = shlex.split(fields["command"])
        except ValueError as err:
            raise JobSpecError(f"command {fields['command']!r} does not parse as shell words: {err}") from err
        if not command:
            raise JobSpecError("command is empty; allowed: the program each rank runs, e.g. python3 train.py")
        job = MPIJob(name=fields["name"], command=command, cpu=fields["cpu"] or "100m",
                     memory=fields["memory"] or "128Mi", pvc=fields["pvc"] or None)
    job.name = fields["name"]
    job.namespace = fields["namespace"] or None
    job.implementation = fields["implementation"] or "OpenMPI"
    job.image = fields["image"] or None
    job.workers = _int(fields["workers"] or "1")
    job.slots_per_worker = _int(fields["slots"] or "1")
    job.gpus_per_worker = _int(fields["gpus"] or "0")
    job.queue = fields["queue"] or None
    job.manifest()  # MPIJob's own checks
    return job


def form_of(job: MPIJob, source_yaml: str = "") -> dict[str, str]:
    """The form's values for a job (a YAML's: its fields that the form has)."""
    built = not source_yaml
    return {"namespace": job.namespace or "", "name": job.name, "implementation": job.implementation,
            "image": job.image or "", "command": shlex.join(job.command) if built else "",
            "workers": str(job.workers), "slots": str(job.slots_per_worker), "cpu": job.cpu if built else "",
            "memory": job.memory if built else "", "gpus": str(job.gpus_per_worker), "queue": job.queue or "",
            "pvc": (job.pvc or "") if built else "", "source_yaml": source_yaml}


def error_field(message: str) -> str:
    """The form field an MPIJob message is about ("" for the whole form)."""
    first = message.split(" ", 1)[0]
    name = FIELD_OF.get(first, first)
    return name if name in FORM_FIELDS else ""


# ---------------------------------------------------------------- reports

def open_report(path: str, into: Path) -> Path:
    """A report folder (results.json in it, or in one folder below) for a folder or a handover tarball."""
    p = Path(path)
    if p.is_file():
        into.mkdir(parents=True, exist_ok=True)
        with tarfile.open(p) as tar:
            tar.extractall(into, filter="data")
        p = into
    found = [p] if (p / "results.json").is_file() else sorted(x.parent for x in p.glob("*/results.json"))
    if not found:
        raise ValueError(f"{path}: no results.json in it; allowed: a conformance report folder or handover tarball")
    return found[0]


# ---------------------------------------------------------------- the application

class Dashboard:
    def __init__(self, settings: Settings):
        settings.check()
        if settings.auth == "kubeconfig" and settings.token is None:
            settings.token = secrets.token_urlsafe(24)
        self.settings = settings
        self.guard = security.Guard(settings.token if settings.auth == "kubeconfig" else None)
        self.kube = Kube(settings.kubeconfig, settings.context)
        self.users: dict[tuple[str, tuple[str, ...]], User] = {}
        self.own: User | None = None
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters.update(age=age, seconds=seconds)
        self.templates.env.globals.update(PHASE_COLOURS=PHASE_COLOURS, version=__version__, help=HELP)
        self.reports_dir = Path(tempfile.mkdtemp(prefix="mpiplat-dashboard-reports-"))
        self.reports = [open_report(r, self.reports_dir / str(i)) for i, r in enumerate(settings.reports)]
        self.prometheus = Prometheus.from_settings({"url": settings.prometheus,
                                                    "token_file": settings.prometheus_token_file})
        self._simulated: tuple[float, frozenset[str]] = (-SIMULATED_TTL_S, frozenset())

    async def simulated(self) -> frozenset[str]:
        """The names of the cluster's simulated (KWOK) nodes, where a pod "runs" without running: read with the
        dashboard's own identity every SIMULATED_TTL_S; none where it may not list nodes."""
        at, names = self._simulated
        if time.monotonic() - at > SIMULATED_TTL_S:
            try:
                nodes = await asyncio.to_thread(self.kube.core.list_node, _request_timeout=10)
                names = frozenset(n.metadata.name for n in nodes.items if is_kwok(n))
            except ApiException:
                names = frozenset()
            self._simulated = (time.monotonic(), names)
        return names

    # ---- who asks
    def user(self, request: Request) -> User:
        s = self.settings
        if s.auth == "kubeconfig":
            if self.own is None:
                own = AsyncClient(kube=self.kube)
                self.own = User(own.sync.whoami() or self.kube.context or "the kubeconfig's user", (), own)
            return self.own
        name = (request.headers.get(s.user_header) or "").strip()
        if not name:
            raise HTTPException(401, f"no {s.user_header} header: the dashboard serves only behind its "
                                     "identity-passing proxy")
        groups = tuple(sorted({g.strip() for g in request.headers.get(s.groups_header, "").split(",") if g.strip()}))
        key = (name, groups)
        if key not in self.users:
            self.users[key] = User(name, groups, AsyncClient(kube=self.kube.impersonating(name, groups)))
        return self.users[key]

    async def visible(self, user: User) -> list[str] | None:
        """The namespaces whose MPIJobs `user` may list (None: all), asked as the user, kept NAMESPACES_TTL_S."""
        if time.monotonic() - user.namespaces_at > NAMESPACES_TTL_S:
            candidates = self.settings.namespaces
            if candidates is None and self.settings.auth == "proxy":
                # Namespace names from the dashboard's own identity; which of them the user may see, the user's.
                names = await asyncio.to_thread(self.kube.core.list_namespace)
                candidates = [n.metadata.name for n in names.items]
            user.visible = await user.client.namespaces(candidates)
            user.namespaces_at = time.monotonic()
        return user.visible

    async def rows(self, user: User, q: dict[str, str]) -> list[JobSummary]:
        visible = await self.visible(user)
        ns = q.get("namespace") or ""
        kinds = (q["kind"],) if q.get("kind") in KINDS else KINDS
        if ns:
            if visible is not None and ns not in visible:
                return []
            found = await user.client.summaries(ns, kinds=kinds)
        elif visible is None:
            found = await user.client.summaries(all_namespaces=True, kinds=kinds)
        else:
            parts = await asyncio.gather(*(user.client.summaries(n, kinds=kinds) for n in visible))
            found = [r for part in parts for r in part]
        return filter_rows(found, q)

    def who(self, request: Request) -> str:
        """Whom a CSRF token is bound to: the proxied user (the kubeconfig's session has its one token)."""
        return request.headers.get(self.settings.user_header, "") if self.settings.auth == "proxy" else ""

    def page(self, request: Request, template: str, user: User, **context) -> HTMLResponse:
        return self.templates.TemplateResponse(request, template, {
            "user": user, "settings": self.settings, "csrf_token": self.guard.csrf_token(self.who(request)),
            **context})

    # ---- pages
    async def jobs(self, request: Request) -> Response:
        user = self.user(request)
        q = dict(request.query_params)
        rows = await self.rows(user, q)
        def sort_url(key: str) -> str:
            down = not (q.get("sort") == key and q.get("dir") == "desc")
            return "?" + urlencode({**q, "sort": key, "dir": "desc" if down else "asc"})
        return self.page(request, "jobs.html", user, rows=rows, q=q, namespaces=await self.offered(user),
                         simulated=await self.simulated(),
                         every=await self.visible(user) is None, phases=PHASES, kinds=KINDS,
                         query=request.url.query, sort_url=sort_url)

    async def jobs_stream(self, request: Request) -> Response:
        user = self.user(request)
        q = dict(request.query_params)

        async def render() -> str:
            rows = await self.rows(user, q)
            return self.templates.get_template("rows.html").render(rows=rows, q=q, PHASE_COLOURS=PHASE_COLOURS,
                                                                   simulated=await self.simulated())
        return self._stream(request, {"rows": render})

    def _stream(self, request: Request, parts: dict) -> StreamingResponse:
        """An SSE stream that re-renders each of `parts` every refresh_s and sends those that changed."""
        async def events() -> AsyncIterator[str]:
            last: dict[str, str] = {}
            pinged = time.monotonic()
            while not await request.is_disconnected():
                for event, render in parts.items():
                    try:
                        html = await render()
                    except JobNotFound:
                        yield sse("gone", "")
                        return
                    except JobError as err:
                        html = self.templates.get_template("alert.html").render(message=str(err))
                    if html != last.get(event):
                        last[event] = html
                        yield sse(event, html)
                        pinged = time.monotonic()
                if time.monotonic() - pinged > PING_S:
                    yield ": ping\n\n"
                    pinged = time.monotonic()
                await asyncio.sleep(self.settings.refresh_s)
        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def job(self, request: Request) -> Response:
        user = self.user(request)
        ns, name = request.path_params["namespace"], request.path_params["name"]
        try:
            found = await user.client.describe(name, ns)
            source = (await user.client.get(name, ns)).source
        except JobError as err:
            raise HTTPException(404 if isinstance(err, JobNotFound) else 403 if isinstance(err, Forbidden) else 400,
                                str(err)) from err
        source.get("metadata", {}).pop("managedFields", None)
        return self.page(request, "job.html", user, ns=ns, name=name, d=found, simulated=await self.simulated(),
                         config=yaml.safe_dump(source, sort_keys=False),
                         tab=request.query_params.get("tab", "overview"))

    async def job_stream(self, request: Request) -> Response:
        user = self.user(request)
        ns, name = request.path_params["namespace"], request.path_params["name"]
        parts = ("overview", "actions", "workers", "events")
        tpl = {k: self.templates.get_template(f"job_{k}.html") for k in parts}
        latest: dict = {}

        async def part(kind: str):
            async def render() -> str:
                if kind == "overview":  # the other two parts use the overview's read
                    latest["d"] = await user.client.describe(name, ns)
                return tpl[kind].render(d=latest["d"], ns=ns, name=name, PHASE_COLOURS=PHASE_COLOURS,
                                        age=age, seconds=seconds, simulated=await self.simulated())
            return render
        return self._stream(request, {k: await part(k) for k in parts})

    async def logs_stream(self, request: Request) -> Response:
        """The job's launcher and worker logs as they are written: one `line` event each (JSON: time, pod,
        text), then `end` once the job has finished and its streams are drained."""
        user = self.user(request)
        ns, name = request.path_params["namespace"], request.path_params["name"]

        async def events() -> AsyncIterator[str]:
            n = 0
            while not await request.is_disconnected():
                try:
                    async for line in user.client.follow_logs(name, ns, "all", poll=0.5):
                        n += 1
                        yield sse("line", json.dumps({"t": line.time.isoformat() if line.time else "",
                                                      "pod": line.pod, "text": line.text}), str(n))
                        if await request.is_disconnected():
                            return
                    yield sse("end", "")
                    return
                except JobError as err:  # no pod with a log yet: say so, and try again
                    yield sse("wait", str(err))
                    await asyncio.sleep(self.settings.refresh_s)
        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def job_metrics(self, request: Request) -> Response:
        """The Metrics tab: the job's pods' CPU, memory and GPU use over its life, from Prometheus. The job is read
        as the user first: who may not read it sees none of its metrics."""
        user = self.user(request)
        ns, name = request.path_params["namespace"], request.path_params["name"]
        try:
            status = await user.client.status(name, ns)
        except JobError as err:
            return self.templates.TemplateResponse(request, "alert.html", {"message": str(err)}, status_code=403)
        fragment = await asyncio.to_thread(metrics.fragment, self.prometheus, ns, name, status.start_time,
                                           status.completion_time)
        return HTMLResponse(fragment)

    async def logs_download(self, request: Request) -> Response:
        user = self.user(request)
        ns, name = request.path_params["namespace"], request.path_params["name"]
        try:
            lines = await user.client.logs(name, ns, "all")
        except JobError as err:
            return PlainTextResponse(str(err) + "\n", status_code=404)
        text = "".join(ln.format(timestamps=True) + "\n" for ln in lines)
        return PlainTextResponse(text, headers={"Content-Disposition": f'attachment; filename="{ns}-{name}.log"'})

    async def act(self, request: Request) -> Response:
        user = self.user(request)
        ns, name, action = (request.path_params[k] for k in ("namespace", "name", "action"))
        if action not in ACTIONS:
            raise HTTPException(404, f"no action {action!r}; allowed: {', '.join(ACTIONS)}")
        try:
            if action == "delete":
                await user.client.delete(name, ns)
                return Response(status_code=204, headers={"HX-Redirect": "/jobs"})
            message = await getattr(user.client, action)(name, ns)
        except JobError as err:
            return self.templates.TemplateResponse(request, "alert.html", {"message": str(err)},
                                                   status_code=403 if isinstance(err, Forbidden) else 409)
        return self.templates.TemplateResponse(request, "alert.html", {"message": message, "kind": "success"})

    # ---- create
    async def offered(self, user: User) -> list[str]:
        """The namespaces the form offers: those the user may list MPIJobs in."""
        visible = await self.visible(user)
        if visible is not None:
            return visible
        if self.settings.namespaces is not None:
            return self.settings.namespaces
        names = await asyncio.to_thread(self.kube.core.list_namespace)  # the user may list MPIJobs in every one
        return sorted(n.metadata.name for n in names.items)

    async def images(self, user: User) -> dict[str, str]:
        """The image a job without one gets, per implementation: the cluster's (jobs.CLUSTER_IMAGES), else
        upstream's."""
        return {**DEFAULT_IMAGES, **await user.client.default_images()}

    @staticmethod
    def help_with(images: dict[str, str]) -> dict[str, str]:
        return {**HELP, "image": "The launcher's and workers' image; empty: the cluster's image for the "
                                 "implementation (" + ", ".join(f"{k}: {v}" for k, v in images.items()) + ")."}

    async def new(self, request: Request) -> Response:
        user = self.user(request)
        visible = await self.offered(user)
        images = await self.images(user)
        values = {"namespace": (visible or [user.client.namespace])[0], "implementation": "OpenMPI", "workers": "2",
                  "slots": "1", "cpu": "100m", "memory": "128Mi", "gpus": "0",
                  "command": "python3 -c 'import socket; print(socket.gethostname())'"}
        return self.page(request, "new.html", user, v=values, errors={}, namespaces=visible,
                         implementations=IMPLEMENTATIONS, default_images=images, help=self.help_with(images),
                         yaml_text="")

    async def new_post(self, request: Request) -> Response:
        """check: the form's errors and YAML; from-yaml: the form from a YAML; create: submit."""
        user = self.user(request)
        form = {k: str(v) for k, v in (await request.form()).items()}
        step = request.path_params.get("step", "create")
        errors: dict[str, str] = {}
        yaml_text = form.get("yaml", "")
        values = dict(form)
        images = await self.images(user)
        try:
            if step == "from-yaml":
                job = MPIJob.from_yaml(yaml_text)
                values = form_of(job, yaml_text)
            else:
                job = job_from_form(form)
            job.image = job.image or images.get(job.implementation)
            yaml_text = job.to_yaml()
            if step == "create":
                created = await user.client.create(job)
                return Response(status_code=204, headers={
                    "HX-Redirect": f"/jobs/{created.namespace}/{created.name}"})
        except JobSpecError as err:
            errors[error_field(str(err)) or "_form"] = str(err)
        except JobError as err:  # the cluster's refusal: quota, guardrail, RBAC, Pod Security, GPUs
            errors["_form"] = str(err)
        return self.templates.TemplateResponse(request, "new_form.html", {
            "v": values, "errors": errors, "namespaces": await self.offered(user), "implementations": IMPLEMENTATIONS,
            "default_images": images, "yaml_text": yaml_text, "help": self.help_with(images)})

    # ---- queues, reports
    async def queues(self, request: Request) -> Response:
        user = self.user(request)
        try:
            found, error = await user.client.cluster_queues(), ""
        except JobError as err:
            found, error = [], str(err)
        fragment = request.headers.get("HX-Request") == "true"
        return self.page(request, "queues_body.html" if fragment else "queues.html", user, queues=found,
                         error=error)

    async def reports_page(self, request: Request) -> Response:
        user = self.user(request)
        index = int(request.path_params.get("index", 0))
        if not self.reports:
            return self.page(request, "report.html", user, report=None, index=0)
        if index >= len(self.reports):
            raise HTTPException(404, f"no report {index}")
        data = json.loads((self.reports[index] / "results.json").read_text())
        return self.page(request, "report.html", user, report=data, index=index, paths=self.settings.reports)

    async def report_file(self, request: Request) -> Response:
        self.user(request)
        index = int(request.path_params["index"])
        if index >= len(self.reports):
            raise HTTPException(404, f"no report {index}")
        root = self.reports[index].resolve()
        path = (root / request.path_params["path"]).resolve()
        if root not in path.parents or not path.is_file():
            raise HTTPException(404, "no such file in the report")
        return FileResponse(path)

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok\n")


def filter_rows(rows: list[JobSummary], q: dict[str, str]) -> list[JobSummary]:
    """The list's filters (phase, created since a date, a name's substring) and sorting (sort: a column,
    dir: asc or desc)."""
    phase, since, text = q.get("phase") or "", q.get("since") or "", (q.get("q") or "").lower()
    out = [r for r in rows if (not phase or r.phase == phase) and (not text or text in r.name.lower())
           and (not since or (r.created or "") >= since)]
    key = q.get("sort") or "created"
    if key in {f.name for f in dataclasses.fields(JobSummary)}:
        out.sort(key=lambda r: (getattr(r, key) is None, getattr(r, key) or 0 if key in (
            "workers", "gpus", "position", "workers_ready") else str(getattr(r, key) or "")),
            reverse=(q.get("dir") or ("desc" if key == "created" else "asc")) == "desc")
    return out


def create_app(settings: Settings) -> Starlette:
    d = Dashboard(settings)
    vendor = assets.location()
    routes = [
        Route("/", lambda r: RedirectResponse("/jobs")),
        Route("/healthz", d.healthz),
        Route("/jobs", d.jobs),
        Route("/jobs/stream", d.jobs_stream),
        Route("/jobs/new", d.new),
        Route("/jobs/new/{step:str}", d.new_post, methods=["POST"]),
        Route("/jobs/{namespace}/{name}", d.job),
        Route("/jobs/{namespace}/{name}/stream", d.job_stream),
        Route("/jobs/{namespace}/{name}/logs/stream", d.logs_stream),
        Route("/jobs/{namespace}/{name}/logs.txt", d.logs_download),
        Route("/jobs/{namespace}/{name}/metrics", d.job_metrics),
        Route("/jobs/{namespace}/{name}/{action:str}", d.act, methods=["POST"]),
        Route("/queues", d.queues),
        Route("/reports", d.reports_page),
        Route("/reports/{index:int}", d.reports_page),
        Route("/reports/{index:int}/files/{path:path}", d.report_file),
        Mount("/static/vendor", StaticFiles(directory=str(vendor)), name="vendor"),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    async def http_error(request: Request, exc: HTTPException) -> Response:
        """An error page inside the dashboard's layout (a fragment's error: the detail alone)."""
        if request.headers.get("HX-Request") == "true":
            return HTMLResponse(html.escape(str(exc.detail)), status_code=exc.status_code)
        title = {400: "Bad request", 401: "Not signed in", 403: "Forbidden", 404: "Not found"}.get(exc.status_code, "")
        return d.templates.TemplateResponse(request, "error.html", {
            "status": exc.status_code, "title": title, "detail": exc.detail, "user": None, "csrf_token": ""},
            status_code=exc.status_code)

    # The first is the outermost: the security headers go on every answer, the Host check's refusal too.
    middleware = [Middleware(security.SecurityHeaders),
                  Middleware(TrustedHostMiddleware, allowed_hosts=settings.allowed_hosts, www_redirect=False),
                  Middleware(security.GuardMiddleware, guard=d.guard, who=d.who)]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error}, middleware=middleware)
    app.state.dashboard = d
    return app


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8080) -> None:
    import uvicorn

    if host not in ("0.0.0.0", "::") and host not in settings.allowed_hosts:
        settings.allowed_hosts = [*settings.allowed_hosts, host]  # the address it was asked to listen on
    app = create_app(settings)
    who = "each proxied user" if settings.auth == "proxy" else "the kubeconfig's user"
    shown = f"[{host}]" if ":" in host else host
    url = app.state.dashboard.guard.login_url(f"http://{shown}:{port}")
    print(f"mpiplat dashboard: {url} (acting as {who}; answers Host {', '.join(settings.allowed_hosts)})",
          flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
