"""The conformance suite's pytest plugin: options, requirement ids, capabilities, throwaway
namespaces, per-test timeouts, evidence, figures, reports and the handover tarball.

    pytest conformance/suite [--kubeconfig K] [--context C] [--profile simulated|cluster|gpu|preflight|upgrade]
        [--phase before|after] [--settings FILE] [--only IDS] [--fail-fast-rows] [--keep] [--report-dir D]
        [--capability NAME=true|false]
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.conformance import capabilities as caps
from mpiplat.conformance import catalog, handover, report, snapshot, verdicts
from mpiplat.conformance.placement import Placement, placement, ran_on
from mpiplat.conformance.placement import level as placement_level
from mpiplat.conformance.prometheus import Prometheus
from mpiplat.conformance.run import RUN_LABEL, Run
from mpiplat.conformance.settings import Settings, SettingsError, load
from mpiplat.conformance.verdicts import Evidence
from mpiplat.kube import Kube, KubeconfigError

SUITE = Path(__file__).resolve().parent
PROFILES = {
    "preflight": lambda where: False,  # only tests marked read_only
    "simulated": lambda where: "sim" in where,
    "cluster": lambda where: "sim" in where or "real" in where,
    "gpu": lambda where: where != "upgrade",
    "upgrade": lambda where: where == "upgrade",  # in two phases, around an upgrade of the stack (test_upgrade.py)
}
PHASES = ("before", "after")


@dataclass
class SuiteState:
    """What one run of the suite keeps between pytest's hooks and fixtures (state(config))."""

    settings: Settings
    started: float = field(default_factory=time.monotonic)
    outcomes: list[dict] = field(default_factory=list)  # one per test, as it ends
    failures: list[dict] = field(default_factory=list)  # what handover.write packs for each failed test
    failed_rows: set[str] = field(default_factory=set)  # --fail-fast-rows: rows with a failed test
    not_run: dict[str, str] = field(default_factory=dict)  # catalog rows without a selected test, and why
    last_module: Path | None = None  # the suite's last test module: its teardown ends the run
    run: Run | None = None
    kube: Kube | None = None
    cluster: dict = field(default_factory=dict)
    capabilities: dict = field(default_factory=dict)


STATE = pytest.StashKey[SuiteState]()


def state(config) -> SuiteState:
    return config.stash[STATE]


def pytest_addoption(parser):
    g = parser.getgroup("mpiplat conformance")
    g.addoption("--kubeconfig", help="kubeconfig of the cluster under test (default: $KUBECONFIG, else ~/.kube/config)")
    g.addoption("--context", help="kubeconfig context (default: the current context)")
    g.addoption("--profile", default="simulated", choices=sorted(PROFILES),
                help="which requirements run (default simulated)")
    g.addoption("--phase", choices=PHASES,
                help="profile upgrade: before the stack's upgrade (submit and record jobs) or after it (judge them)")
    g.addoption("--settings", help="settings file (default conformance/settings/local.yml)")
    g.addoption("--only", help="comma-separated requirement ids, e.g. JOB-01,FAIL-03")
    g.addoption("--fail-fast-rows", action="store_true",
                help="once a test of a requirement failed, skip its other tests (the row is failed either way)")
    g.addoption("--keep", action="store_true", help="keep the run's namespaces for debugging")
    g.addoption("--report-dir", default="reports/conformance", help="where reports go")
    g.addoption("--ai-checklist", default=catalog.AI_CONFORMANCE["checklist"],
                choices=sorted(catalog.AI_CONFORMANCE["checklists"]),
                help="the Kubernetes AI Conformance checklist ai-conformance.yaml answers (default the newest)")
    g.addoption("--strict-verdicts", action="store_true",
                help="exit non-zero (1) when a row shows less than the profile expects: skipped, partial, or "
                     "passed without real pods where the catalog runs it on real pods")
    g.addoption("--capability", action="append", default=[], metavar="NAME=BOOL",
                help=f"override a detected capability ({', '.join(caps.NAMES)})")


def pytest_configure(config):
    config.addinivalue_line("markers", "requirement(id, needs=[]): the catalog id a test proves")
    config.addinivalue_line("markers", "read_only: the test changes nothing (runs in the preflight profile)")
    config.addinivalue_line("markers", "phase(name): the upgrade profile's phase the test runs in (before, after)")
    config.addinivalue_line("markers", "before_failures: the test reads a cluster-wide failure signal (runs before "
                                       "the tests whose jobs fail)")
    # SIGTERM ends the run like Ctrl-C, so fixtures' cleanup runs; and Ctrl-C works even when the
    # run inherited SIGINT ignored (a shell's background job does).
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        config.stash[STATE] = SuiteState(load(config.getoption("--settings")))
    except SettingsError as err:
        raise pytest.UsageError(str(err)) from err


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config):
    """The last word on the run's namespaces, reached however the session ended: an interrupt can
    cut a fixture's teardown short (pytest then drops the finalizers after it), never this."""
    s = config.stash.get(STATE, None)  # None: the settings were refused at configure
    r = s.run if s else None
    if r is None or r.keep or not r.namespaces or r.gone:  # every namespace of the run is recorded before its create
        return
    try:
        left = r.cleanup()
    except Exception as err:  # one line, as the session is over
        left = [f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"]
    if left:
        sys.stderr.write(f"error: namespaces of conformance run {r.id} may be left after cleanup: {left}; "
                         f"kubectl delete namespace -l {RUN_LABEL}={r.id}\n")


def _requirement(item) -> tuple[str, list[str]] | None:
    mark = item.get_closest_marker("requirement")
    if not mark:
        return None
    return mark.args[0], list(mark.kwargs.get("needs", []))


@pytest.hookimpl(tryfirst=True)  # before `-m` selects: the suite's tests are `cluster` tests
def pytest_collection_modifyitems(config, items):
    profile, phase = config.getoption("--profile"), config.getoption("--phase")
    if (profile == "upgrade") != bool(phase):
        raise pytest.UsageError("--phase before|after goes with --profile upgrade, and only with it: "
                                f"got --profile {profile} and --phase {phase or '(none)'}")
    only = {i.strip().upper() for i in (config.getoption("--only") or "").split(",") if i.strip()}
    unknown = only - set(catalog.REQUIREMENTS)
    if unknown:
        raise pytest.UsageError(f"--only: unknown requirement id(s) {sorted(unknown)}; see conformance/catalog.yml")
    settings = state(config).settings
    # Per-test timeouts from the settings, unless --timeout or the test's own marker says otherwise.
    timed = config.pluginmanager.hasplugin("timeout") and config.getoption("timeout", None) is None
    keep, drop = [], []
    for item in items:
        if SUITE not in item.path.parents:  # other test folders of the repo, in the same session
            keep.append(item)
            continue
        req = _requirement(item)
        if req is None:
            raise pytest.UsageError(f"{item.nodeid} carries no requirement id (@pytest.mark.requirement)")
        item.add_marker(pytest.mark.cluster)
        rid = req[0]
        if rid not in catalog.REQUIREMENTS:
            raise pytest.UsageError(f"{item.nodeid}: requirement {rid} is not in conformance/catalog.yml")
        if timed and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(settings.test_timeout_s(rid)))
        where = catalog.REQUIREMENTS[rid]["where"]
        in_profile = PROFILES[profile](where) or (profile == "preflight" and item.get_closest_marker("read_only"))
        marked = item.get_closest_marker("phase")
        in_profile = in_profile and (marked.args[0] if marked else None) == phase
        (keep if in_profile and (not only or rid in only) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = sorted(keep, key=lambda i: not i.get_closest_marker("before_failures"))  # stable: else as collected
    state(config).not_run = _not_run(profile, only, {_requirement(i)[0] for i in keep if SUITE in i.path.parents},
                                     phase)


def _not_run(profile: str, only: set[str], kept: set[str], phase: str | None = None) -> dict[str, str]:
    """Why each catalog row without a selected test is not run (the report lists every row)."""
    why = {}
    for rid, row in catalog.REQUIREMENTS.items():
        if rid in kept:
            continue
        if only and rid not in only:
            why[rid] = "not asked for (--only)"
        elif profile == "preflight":
            why[rid] = "profile preflight: it runs read-only tests only, and this row has none"
        elif not PROFILES[profile](row["where"]):
            why[rid] = f"profile {profile} (the row's where: {row['where']})"
        elif phase:
            why[rid] = f"no test of the row runs in --phase {phase}"
        else:
            why[rid] = "no test selected"
    return why


@pytest.fixture(scope="session")
def settings(pytestconfig):
    return state(pytestconfig).settings


@pytest.fixture(scope="session")
def kube(pytestconfig):
    """The cluster under test, found like kubectl finds it (--kubeconfig, else $KUBECONFIG, else
    ~/.kube/config; --context, else the current context). The suite never starts a cluster. Every wait of the
    suite goes through it, scaled by the settings' timeouts.wait_scale (kube.wait_for, kube.waited/deadline)."""
    try:
        k = Kube(pytestconfig.getoption("--kubeconfig"), pytestconfig.getoption("--context"),
                 wait_scale=state(pytestconfig).settings.timeouts["wait_scale"])
        state(pytestconfig).cluster = k.identity()
        state(pytestconfig).kube = k
    except KubeconfigError as err:
        pytest.exit(f"error: {err}", returncode=pytest.ExitCode.USAGE_ERROR)
    return k


@pytest.fixture(scope="session")
def capabilities(pytestconfig, kube, settings):
    overrides = dict(settings.capabilities)
    for spec in pytestconfig.getoption("--capability"):
        name, _, value = spec.partition("=")
        if name not in caps.NAMES or value.lower() not in ("true", "false"):
            raise pytest.UsageError(f"--capability {spec!r}: allowed NAME=true|false with NAME in {caps.NAMES}")
        overrides[name] = value.lower() == "true"
    found = caps.detect(kube, settings.gpu_resource, overrides, settings.tolerations)
    state(pytestconfig).capabilities = found.as_dict()
    return found


@pytest.fixture(scope="session")
def place(pytestconfig, settings, capabilities):
    """place(real=False, node_selector=None, tolerations=()) -> Placement: where a job's pods go
    (mpiplat.conformance.placement): the settings' node selector and tolerations with a test's own
    merged in; unless `real`, on the cluster's KWOK nodes where it has any. Pods the suite makes
    itself get it through placement.pod_spec. Each placement handed out is reported in the running test's
    evidence as `placed`; its level comes from where the pods ran (_observe)."""

    def _place(*, real: bool = False, node_selector: dict[str, str] | None = None,
               tolerations: list[dict] | tuple = ()) -> Placement:
        shown = getattr(getattr(pytestconfig, "_mpiplat_item", None), "_mpiplat_evidence", None)
        if shown is not None:
            shown.placed_pods(placement_level(real=real, kwok_nodes=capabilities.kwok_nodes))
        return placement(real=real, kwok_nodes=capabilities.kwok_nodes,
                         node_selector={**settings.node_selector, **(node_selector or {})},
                         tolerations=[*settings.tolerations, *tolerations])

    return _place


@pytest.fixture(scope="session")
def mpijob_spec(settings, place):
    """mpijob_spec(name, namespace, *, real=False, implementation="OpenMPI", **kw) -> jobs.MPIJob:
    how every suite test builds its MPIJobs. Image settings.images[implementation] and gpu_resource
    from the settings (unless given), placement from `place` (real=True: the job runs real pods and
    checks them; False: it relies on simulated behaviour, or needs more than real nodes may offer)."""

    def _spec(name: str, namespace: str, *, real: bool = False, implementation: str = "OpenMPI",
              node_selector: dict[str, str] | None = None, tolerations: list[dict] | tuple = (),
              **kw) -> jobs.MPIJob:
        kw.setdefault("image", settings.images[implementation])
        kw.setdefault("gpu_resource", settings.gpu_resource)
        return jobs.MPIJob(name=name, namespace=namespace, implementation=implementation,
                           **place(real=real, node_selector=node_selector, tolerations=tolerations), **kw)

    return _spec


@pytest.fixture(scope="session")
def prometheus(settings) -> Prometheus:
    """The settings' Prometheus (mpiplat.conformance.prometheus); a test that asks for it skips where the
    settings name none."""
    found = Prometheus.from_settings(settings.prometheus)
    if found is None:
        pytest.skip("no prometheus.url in the settings: this row reads the cluster's Prometheus")
    return found


@pytest.fixture(scope="session")
def trainjob_spec(place):
    """trainjob_spec(name, namespace, *, real=False, **kw) -> jobs.TrainJob, placed like mpijob_spec."""

    def _spec(name: str, namespace: str, *, real: bool = False, node_selector: dict[str, str] | None = None,
              tolerations: list[dict] | tuple = (), **kw) -> jobs.TrainJob:
        return jobs.TrainJob(name=name, namespace=namespace,
                             **place(real=real, node_selector=node_selector, tolerations=tolerations), **kw)

    return _spec


@pytest.fixture(scope="session")
def _session_run(pytestconfig, kube, settings, capabilities):
    r = Run(kube, settings, keep=pytestconfig.getoption("--keep"))
    state(pytestconfig).run = r
    if pytestconfig.getoption("--profile") == "preflight":
        r.namespace = _read_only  # type: ignore[method-assign]
    return r


def pytest_collection_finish(session):
    suite = [item.path for item in session.items if SUITE in item.path.parents]
    state(session.config).last_module = suite[-1] if suite else None


@pytest.fixture(scope="module")
def run(_session_run, request):
    """The run (one id and one set of figures for the session). Its namespaces are deleted after
    each module, so nothing outlives the suite's own tests in a longer pytest session; the wait
    until they are gone comes after the suite's last module, or at once when interrupted. The delete
    calls themselves are never cut short (Run.delete_namespaces holds the signals), and should an
    interrupt skip this teardown, pytest_unconfigure deletes and waits."""
    yield _session_run
    session = request.session
    if request.path == state(session.config).last_module or session.exitstatus == pytest.ExitCode.INTERRUPTED:
        left = _session_run.cleanup()
        if left:
            raise RuntimeError(f"namespaces left after cleanup: {left}")
    else:
        _session_run.delete_namespaces()


def _read_only(*_args, **_kwargs):
    raise RuntimeError("the preflight profile is read-only: this test may not create namespaces")


def _test_namespaces(item) -> list[str]:
    """The namespaces the run created while `item` ran (from its setup on), and those it says it used
    (`item._mpiplat_namespaces_used`: the upgrade profile's, which outlives a run)."""
    run = state(item.config).run
    made = run.namespaces[getattr(item, "_mpiplat_namespaces_from", 0):] if run else []
    return made + list(getattr(item, "_mpiplat_namespaces_used", []))


@pytest.fixture(scope="session", autouse=True)
def _observe(pytestconfig):
    """How a test's evidence learns where its pods ran, called as it ends: placement.ran_on over the
    namespaces the test created. Where the API cannot say, its pods showed nothing."""

    def observe(item) -> set[str]:
        kube, names = state(item.config).kube, _test_namespaces(item)
        try:
            return ran_on(kube, names) if kube and names else set()
        except (ApiException, OSError, urllib3.exceptions.HTTPError):
            return set()

    pytestconfig._mpiplat_observe = observe


@pytest.fixture
def evidence(request) -> Evidence:
    """This test's evidence (mpiplat.conformance.verdicts.Evidence). The placement fixtures fill in what
    its pods ran on; the test calls evidence.partial(reason) when it checks less than its catalog row
    says, and evidence.at_most(level, reason) when it judged less than its pods could show (e.g. objects
    only, although its pods ran)."""
    return request.node._mpiplat_evidence


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Start the test's evidence: a read-only test creates nothing, so it shows objects at most."""
    if _requirement(item) is None:
        return
    item._mpiplat_evidence = Evidence()
    if item.get_closest_marker("read_only"):
        item._mpiplat_evidence.at_most("objects", "read-only: it creates nothing")
    run = state(item.config).run
    item._mpiplat_namespaces_from = len(run.namespaces) if run else 0
    item.config._mpiplat_item = item


@pytest.fixture(autouse=True)
def _needs(request, capabilities):
    req = _requirement(request.node)
    if req and req[0] in state(request.config).failed_rows:  # only with --fail-fast-rows
        pytest.skip(f"{req[0]}: not run, an earlier test of {req[0]} failed (--fail-fast-rows)")
    if req:
        missing = capabilities.missing(req[1])
        if missing:
            pytest.skip(f"{req[0]}: " + "; ".join(
                f"{caps.WHY_NOT[m]} (capability {m} is false; override with --capability {m}=true)" for m in missing))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    req = _requirement(item)
    if req is None or not (rep.when == "call" or (rep.when == "setup" and rep.outcome != "passed")):
        return
    message = ""
    if rep.outcome == "skipped" and isinstance(rep.longrepr, tuple):
        message = rep.longrepr[2].removeprefix("Skipped: ")
    elif rep.outcome == "failed":
        message = str(getattr(rep.longrepr, "reprcrash", None) and rep.longrepr.reprcrash.message or rep.longrepr)
    shown = getattr(item, "_mpiplat_evidence", None) or Evidence()
    observe = getattr(item.config, "_mpiplat_observe", None)
    if observe and rep.outcome != "skipped":
        shown.ran_on(observe(item))
    outcome = {"requirement": req[0], "name": item.name, "duration_s": rep.duration, "message": message,
               "diagnosis": getattr(item, "_mpiplat_diagnosis", ""), **shown.outcome(rep.outcome)}
    if outcome["status"] == "partial":
        outcome["message"] = "; ".join(outcome["partial"])
    state(item.config).outcomes.append(outcome)
    if rep.outcome == "failed":
        _collect_failure(item, outcome)
        if item.config.getoption("--fail-fast-rows"):
            state(item.config).failed_rows.add(req[0])
    rep._mpiplat_line = (f"  {req[0]:9} {outcome['status'].upper():8} {outcome['evidence'] or '-':9} "
                         f"{rep.duration:6.1f}s  {item.name}")


def _collect_failure(item, outcome: dict) -> None:
    """A failed test's namespaces as the handover keeps them (snapshot.namespace), read now: the run
    deletes them when the module ends."""
    config = item.config
    kube, names = state(config).kube, _test_namespaces(item)
    text = outcome["message"] + (f"\n\ndiagnosis:\n{outcome['diagnosis']}" if outcome["diagnosis"] else "")
    state(config).failures.append({
        "requirement": outcome["requirement"], "test": item.name, "message": text,
        "namespaces": {ns: snapshot.namespace(kube, ns, state(config).settings.gpu_resource) for ns in names}
        if kube else {}})


def pytest_report_teststatus(report, config):
    """Requirement by requirement, one line each as it ends (instead of pytest's dots)."""
    line = getattr(report, "_mpiplat_line", None)
    if line and config.get_verbosity() <= 0:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr:
            tr.ensure_newline()
            tr.write_line(line)
        return report.outcome, "", report.outcome.upper()
    return None


def _not_reached(config) -> dict[str, str]:
    """Every catalog row with no outcome: why it was not selected, or that the session ended first
    (deselected by -k/-m, or stopped early)."""
    ran = {o["requirement"] for o in state(config).outcomes}
    why = state(config).not_run
    return {rid: why.get(rid, "selected, but the session ended before it or -k/-m deselected it")
            for rid in catalog.REQUIREMENTS if rid not in ran}


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    outcomes = state(config).outcomes
    if not outcomes:
        return
    run = state(config).run
    settings = state(config).settings
    kube = state(config).kube
    meta = {"run_id": run.id if run else None, "started": report.now(), "profile": config.getoption("--profile"),
            "phase": config.getoption("--phase"),
            "cluster": state(config).cluster, "settings": settings.source,
            "capabilities": state(config).capabilities, "thresholds": settings.thresholds,
            "wait_scale": settings.timeouts["wait_scale"], "differing": catalog.differing(settings.thresholds),
            "ai_checklist": config.getoption("--ai-checklist"),
            "duration_s": time.monotonic() - state(config).started,
            "handover": f"{handover.name(run.id if run else None)}.tar.gz"}
    out = Path(config.getoption("--report-dir"))
    data = report.write(out, outcomes, run.figures if run else [], meta, run.plots if run else [],
                        catalog.loosened(settings.thresholds),
                        snapshot.cluster(kube, settings.gpu_resource) if kube else None, _not_reached(config))
    tarball = handover.write(out, meta["run_id"], data["files"], state(config).failures)
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr:
        tr.write_sep("=", "mpiplat conformance")
        for rid, r in data["requirements"].items():
            if r["status"] == "not run":  # counted below; the reports list each with why
                continue
            first = r["message"].splitlines()[0][:80] if r["message"] else ""
            tr.write_line(f"  {rid:9} {r['status'].upper():8} {r['evidence'] or '-':9} {first}")
        for lo in data["loosened"]:
            tr.write_line(f"  threshold looser than the catalog's: {lo['text']} ({', '.join(lo['rows'])})")
        summary = ", ".join(f"{n} {s}" for s, n in data["summary"].items())
        tr.write_line(f"requirements: {summary} in {meta['duration_s']:.0f}s; reports in {out}/ (report.html, "
                      f"report.md, results.json, junit.xml, checklist.md, {report.AI_FILE}); handover {tarball}")
    if config.getoption("--strict-verdicts"):
        short = verdicts.short_of_profile(data["requirements"],
                                          {rid: row["where"] for rid, row in catalog.REQUIREMENTS.items()})
        if short and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if tr and short:
            tr.write_line(f"strict: {len(short)} row(s) showed less than the profile expects, exit 1: "
                          + "; ".join(short))
