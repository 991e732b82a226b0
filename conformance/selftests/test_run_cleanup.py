"""Run's namespace bookkeeping under interrupts, against a fake API (no cluster): whenever Ctrl-C or
SIGTERM arrives, every namespace the run created is deleted."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

from mpiplat.conformance.run import RUN_LABEL, Run, signals_held


class FakeCore:
    """Namespaces in memory; `on` runs a hook inside a call (e.g. to send a signal mid-request)."""

    def __init__(self):
        self.namespaces: dict[str, dict] = {}  # name -> labels (+ "terminating")
        self.calls: list[tuple[str, str]] = []
        self.on: dict[str, object] = {}
        self.pods_deleted: list[tuple[str, bool, int | None]] = []  # (namespace, was terminating, grace)
        self.sa_after = 0  # reads of a new namespace's ServiceAccounts before its default one shows

    def _hook(self, what: str, name: str = "") -> None:
        self.calls.append((what, name))
        hook = self.on.pop(what, None)
        if hook:
            hook()

    def create_namespace(self, body, **_kw):
        name = body.metadata.name
        self._hook("create", name)
        self.namespaces[name] = {"labels": dict(body.metadata.labels), "terminating": False}
        return body

    def list_namespace(self, label_selector="", **_kw):
        self._hook("list")
        key, _, value = label_selector.partition("=")
        items = [SimpleNamespace(metadata=SimpleNamespace(
            name=n, deletion_timestamp=datetime.now(UTC) if ns["terminating"] else None))
            for n, ns in self.namespaces.items() if ns["labels"].get(key) == value]
        return SimpleNamespace(items=items)

    def list_namespaced_service_account(self, namespace, field_selector="", **_kw):
        self._hook("list serviceaccounts", namespace)
        if self.sa_after > 0:
            self.sa_after -= 1
            return SimpleNamespace(items=[])
        return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name="default"))])

    def delete_namespace(self, name, **_kw):
        self._hook("delete", name)
        ns = self.namespaces.get(name)
        if ns is None:
            raise ApiException(status=404)
        if ns["terminating"]:
            raise ApiException(status=409)
        ns["terminating"] = True

    def delete_collection_namespaced_pod(self, namespace, grace_period_seconds=None, **_kw):
        self._hook("delete pods", namespace)
        self.pods_deleted.append((namespace, self.namespaces[namespace]["terminating"], grace_period_seconds))

    def finish_terminating(self) -> None:
        """The namespace controller removes what is terminating."""
        self.namespaces = {n: ns for n, ns in self.namespaces.items() if not ns["terminating"]}


@pytest.fixture
def core():
    return FakeCore()


@pytest.fixture
def run(core):
    return Run(SimpleNamespace(core=core), SimpleNamespace(namespace_prefix="conf"))


def _signal(sig=signal.SIGINT):
    return lambda: os.kill(os.getpid(), sig)


@pytest.fixture(autouse=True)
def _signals_like_the_suite():
    """The suite turns SIGTERM into KeyboardInterrupt and sets Ctrl-C's own handler, whatever it
    inherited (conformance/suite/conftest.py): a shell's background job starts with SIGINT ignored."""
    def interrupt(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, interrupt), signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGTERM, old[0])
    signal.signal(signal.SIGINT, old[1])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_signals_held_finishes_the_block_then_raises(sig):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            os.kill(os.getpid(), sig)
            done.append("after the signal")
    assert done == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers are put back


def test_signals_held_raises_nothing_without_a_signal():
    with signals_held():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_interrupt_during_namespace_creation_leaves_the_namespace_recorded(run, core):
    core.on["create"] = _signal()
    with pytest.raises(KeyboardInterrupt):
        run.namespace()
    assert run.namespaces == [f"conf-{run.id}-0"] and f"conf-{run.id}-0" in core.namespaces
    assert run.cleanup(wait=0) == [f"conf-{run.id}-0"]  # its delete was made; it is terminating
    core.finish_terminating()
    assert run.cleanup(wait=0) == [] and core.namespaces == {}


def test_each_namespaces_pods_are_deleted_at_once_once_it_is_terminating(run, core):
    """So that the namespace controller finds no pod to wait for; no new pod is admitted by then."""
    names = [run.namespace() for _ in range(2)]
    run.delete_namespaces()
    assert sorted(core.pods_deleted) == [(n, True, 0) for n in names]


@pytest.mark.parametrize("during", ["list", "delete"])
def test_an_interrupt_during_deletion_does_not_stop_the_delete_calls(run, core, during):
    names = [run.namespace() for _ in range(3)]
    core.on[during] = _signal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        run.delete_namespaces()
    assert all(core.namespaces[n]["terminating"] for n in names)


def test_the_label_list_finds_a_namespace_the_run_did_not_record(run, core):
    """E.g. one created by a create call the server finished after the client gave up on it."""
    core.namespaces["late"] = {"labels": {RUN_LABEL: run.id}, "terminating": False}
    core.namespaces["someone-elses"] = {"labels": {RUN_LABEL: "other"}, "terminating": False}
    run.delete_namespaces()
    assert core.namespaces["late"]["terminating"] and not core.namespaces["someone-elses"]["terminating"]


def test_cleanup_deletes_a_namespace_that_appears_during_the_wait(run, core, monkeypatch):
    run.namespace()
    sleeps = []

    def sleep(_s):
        sleeps.append(_s)
        if len(sleeps) == 1:  # a create the server finished late shows up during the wait
            core.namespaces["late"] = {"labels": {RUN_LABEL: run.id}, "terminating": False}
        else:
            core.finish_terminating()

    monkeypatch.setattr("mpiplat.conformance.run.time.sleep", sleep)
    assert run.cleanup() == []
    assert ("delete", "late") in core.calls and core.namespaces == {}


def test_an_interrupt_during_the_wait_is_raised_once_everything_is_gone(run, core, monkeypatch):
    run.namespace()
    sleeps = []

    def sleep(_s):
        sleeps.append(_s)
        if len(sleeps) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        else:
            core.finish_terminating()

    monkeypatch.setattr("mpiplat.conformance.run.time.sleep", sleep)
    with pytest.raises(KeyboardInterrupt):
        run.cleanup()
    assert core.namespaces == {} and len(sleeps) == 2


def test_a_second_interrupt_ends_the_wait_and_later_cleanups_do_not_wait(run, core, monkeypatch):
    name = run.namespace()
    sleeps = []

    def sleep(_s):
        sleeps.append(_s)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr("mpiplat.conformance.run.time.sleep", sleep)
    with pytest.raises(KeyboardInterrupt):
        run.cleanup()
    assert len(sleeps) == 2 and core.namespaces[name]["terminating"]  # deleting, not waited for
    assert run.wait_abandoned
    assert run.cleanup() == [name] and len(sleeps) == 2  # the backstop deletes again but does not wait


def test_an_interrupt_before_any_delete_call_leaves_the_wait_to_delete(run, core, monkeypatch):
    """Should the interrupt land before delete_namespaces' calls, the wait deletes what it finds alive."""
    name = run.namespace()
    monkeypatch.setattr(run, "delete_namespaces", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    monkeypatch.setattr("mpiplat.conformance.run.time.sleep", lambda _s: core.finish_terminating())
    with pytest.raises(KeyboardInterrupt):
        run.cleanup()
    assert ("delete", name) in core.calls and core.namespaces == {}


def test_keep_deletes_nothing(core):
    r = Run(SimpleNamespace(core=core), SimpleNamespace(namespace_prefix="conf"), keep=True)
    r.namespace()
    assert r.cleanup() == [] and all(not ns["terminating"] for ns in core.namespaces.values())


def test_a_run_knows_when_its_namespaces_are_gone(run, core, monkeypatch):
    """The session's last-resort cleanup (pytest_unconfigure) skips a run whose cleanup saw them gone."""
    monkeypatch.setattr("mpiplat.conformance.run.time.sleep", lambda _s: core.finish_terminating())
    run.namespace()
    assert not run.gone
    assert run.cleanup() == [] and run.gone
    run.namespace()
    assert not run.gone


def test_a_new_namespace_is_handed_out_once_it_has_its_default_service_account(run, core):
    """As a team's namespace is: until the ServiceAccount controller has made it, the API refuses pods."""
    core.sa_after = 2
    name = run.namespace()
    assert [c for c in core.calls if c[0] == "list serviceaccounts"] == [("list serviceaccounts", name)] * 3

