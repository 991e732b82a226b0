"""Small helpers over the `kubernetes` client: clients, custom resources, watches.

Cluster access works like kubectl's: --kubeconfig if given, else $KUBECONFIG (a list of files
joined by ':'), else ~/.kube/config, else in a pod its ServiceAccount; --context if given, else the kubeconfig's
current context.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3._collections import HTTPHeaderDict  # urllib3 1.26 and 2.x
from urllib3.exceptions import HTTPError

from mpiplat.errors import MpiplatError


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


MPIJOB = Kind("kubeflow.org", "v2beta1", "mpijobs")
TRAINJOB = Kind("trainer.kubeflow.org", "v1alpha1", "trainjobs")
JOBSET = Kind("jobset.x-k8s.io", "v1alpha2", "jobsets")
WORKLOAD = Kind("kueue.x-k8s.io", "v1beta2", "workloads")
CLUSTERQUEUE = Kind("kueue.x-k8s.io", "v1beta2", "clusterqueues")
LOCALQUEUE = Kind("kueue.x-k8s.io", "v1beta2", "localqueues")
RESOURCEFLAVOR = Kind("kueue.x-k8s.io", "v1beta2", "resourceflavors")
TOPOLOGY = Kind("kueue.x-k8s.io", "v1beta2", "topologies")


SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# Connections kept per API server: enough for the SDK's concurrent requests (AsyncClient's threads).
POOL_SIZE = 32


class KubeconfigError(MpiplatError, RuntimeError):
    """No usable kubeconfig or context; the message says what was tried and what to do."""


def kubeconfig_files(kubeconfig: str | None = None) -> list[str]:
    """The kubeconfig file(s) kubectl would read."""
    if kubeconfig:
        return [os.path.expanduser(kubeconfig)]
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return [os.path.expanduser(p) for p in env.split(os.pathsep) if p]
    return [os.path.expanduser("~/.kube/config")]


class Kube:
    """One API client plus the typed and custom-object APIs on it.

    `wait_scale` stretches every wait made through it (the conformance suite's timeouts.wait_scale, for a
    cluster slower than the timeouts assume): wait_for() scales its timeout, and waited()/deadline() give the
    scaled seconds for waits of the caller's own."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, wait_scale: float = 1.0):
        self.wait_scale = wait_scale
        files = kubeconfig_files(kubeconfig)
        existing = [f for f in files if os.path.isfile(f)]
        source = "--kubeconfig" if kubeconfig else "$KUBECONFIG" if os.environ.get("KUBECONFIG") else "default"
        if not existing and not kubeconfig and not os.environ.get("KUBECONFIG") and os.environ.get(
                "KUBERNETES_SERVICE_HOST"):  # in a pod, like kubectl: its ServiceAccount
            self._in_cluster()
            return
        if not existing or (kubeconfig and existing != files):
            raise KubeconfigError(
                f"no kubeconfig at {os.pathsep.join(files)} ({source}); pass --kubeconfig FILE or set KUBECONFIG "
                "(for the local reference cluster: eval \"$(mpiplat cluster env)\", or --local where offered)")
        cfg = client.Configuration()
        try:
            config.load_kube_config(config_file=os.pathsep.join(existing), context=context, client_configuration=cfg)
            contexts, current = config.list_kube_config_contexts(config_file=os.pathsep.join(existing))
        except ConfigException as err:
            raise KubeconfigError(f"kubeconfig {os.pathsep.join(existing)}: {err}; "
                                  "check --context and the file (kubectl config get-contexts)") from err
        cfg.connection_pool_maxsize = POOL_SIZE
        self.kubeconfig = os.pathsep.join(existing)
        self.context = context or (current or {}).get("name", "")
        chosen = next((c for c in contexts if c.get("name") == self.context), current) or {}
        # Where namespaced requests go unless told otherwise: the context's namespace, like kubectl.
        self.namespace = (chosen.get("context") or {}).get("namespace") or "default"
        self.user: tuple[str, tuple[str, ...]] | None = None  # whom it impersonates (impersonating())
        self._apis(client.ApiClient(cfg))

    def _in_cluster(self) -> None:
        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except ConfigException as err:
            raise KubeconfigError(f"in a pod, but its ServiceAccount's token cannot be read: {err}") from err
        cfg.connection_pool_maxsize = POOL_SIZE
        self.kubeconfig, self.context, self.user = "", "in-cluster", None
        ns_file = Path(SA_NAMESPACE_FILE)
        self.namespace = ns_file.read_text().strip() if ns_file.is_file() else "default"
        self._apis(client.ApiClient(cfg))

    def _apis(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.apiext = client.ApiextensionsV1Api(api_client)

    def impersonating(self, user: str, groups: Sequence[str] = ()) -> Kube:
        """A Kube on the same cluster whose every request acts as `user` in `groups` (Kubernetes impersonation;
        this client's own identity needs the `impersonate` verb on users and groups). The API server reads each
        Impersonate-Group header as one group, so each group goes in its own header (the generated client keeps
        one value per header name: the headers are set below it, on the connection's request)."""
        other = copy.copy(self)
        other.user = (user, tuple(groups))
        api_client = client.ApiClient(self.api_client.configuration)
        rest = api_client.rest_client
        plain = rest.request

        def request(*args, **kwargs):
            headers = HTTPHeaderDict({k: v for k, v in (kwargs.get("headers") or {}).items()
                                      if not k.lower().startswith("impersonate-")})
            headers["Impersonate-User"] = user
            for group in groups:
                headers.add("Impersonate-Group", group)
            kwargs["headers"] = headers
            return plain(*args, **kwargs)

        rest.request = request
        other._apis(api_client)
        return other

    def identity(self) -> dict:
        """What names the cluster in a report: API server URL, server version and context."""
        try:
            version = client.VersionApi(self.api_client).get_code(_request_timeout=10).git_version
        except (ApiException, HTTPError, OSError) as err:
            raise KubeconfigError(f"cannot reach the API server {self.api_client.configuration.host} "
                                  f"(context {self.context!r}): {err}") from err
        return {"server": self.api_client.configuration.host, "version": version, "context": self.context}

    def get_path(self, path: str, timeout: float = 10) -> dict:
        """GET an API path (discovery, a subresource the typed APIs lack) as JSON; ApiException otherwise."""
        return self.call_path("GET", path, timeout=timeout)

    def dry_run_create(self, path: str, body: dict, timeout: float = 10) -> dict:
        """POST `body` to a collection's path as a server-side dry run (admission runs, nothing is stored); the
        object as the server would store it, or ApiException with its refusal. The body goes as plain JSON: the
        typed APIs would first check it against this client's models and refuse what the API server takes (an
        integer cpu, a field newer than the client)."""
        return self.call_path("POST", path, body, [("dryRun", "All")], timeout)

    def call_path(self, method: str, path: str, body: dict | None = None, query: list | None = None,
                  timeout: float = 10) -> dict:
        """One call of an API path with a JSON body and answer; ApiException when it is not a success."""
        api = self.api_client
        headers = {"Accept": "application/json", **({"Content-Type": "application/json"} if body is not None else {})}
        if not hasattr(api, "param_serialize"):  # kubernetes < 35: the python-legacy generator
            return api.call_api(path, method, query_params=query or [], header_params=headers, body=body,
                                response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True,
                                _request_timeout=timeout)
        request = api.param_serialize(method, path, query_params=query or [], header_params=headers, body=body,
                                      auth_settings=["BearerToken"])
        resp = api.call_api(*request, _request_timeout=timeout)
        resp.read()
        if not 200 <= resp.status <= 299:
            raise ApiException.from_response(http_resp=resp, body=None, data=None)
        return json.loads(resp.data)

    # ---- custom objects
    def create(self, kind: Kind, obj: dict) -> dict:
        ns = obj["metadata"].get("namespace")
        if ns:
            return self.custom.create_namespaced_custom_object(kind.group, kind.version, ns, kind.plural, obj)
        return self.custom.create_cluster_custom_object(kind.group, kind.version, kind.plural, obj)

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict:
        if namespace:
            return self.custom.get_namespaced_custom_object(kind.group, kind.version, namespace,
                                                            kind.plural, name)
        return self.custom.get_cluster_custom_object(kind.group, kind.version, kind.plural, name)

    def find(self, kind: Kind, name: str, namespace: str | None = None) -> dict | None:
        """The object, or None where the API answers 404 (no such object, or its kind is not served)."""
        try:
            return self.get(kind, name, namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def patch(self, kind: Kind, name: str, body: dict, namespace: str | None = None) -> dict:
        if namespace:
            return self.custom.patch_namespaced_custom_object(kind.group, kind.version, namespace,
                                                              kind.plural, name, body)
        return self.custom.patch_cluster_custom_object(kind.group, kind.version, kind.plural, name, body)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        try:
            if namespace:
                self.custom.delete_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name,
                    body=client.V1DeleteOptions(propagation_policy="Foreground"))
            else:
                self.custom.delete_cluster_custom_object(kind.group, kind.version, kind.plural, name)
        except ApiException as err:
            if err.status != 404:
                raise

    def list(self, kind: Kind, namespace: str | None, label_selector: str = "") -> list[dict]:
        """The objects of `namespace`; None: of every namespace, or the cluster-scoped kind's."""
        if namespace is None:
            return self.custom.list_cluster_custom_object(kind.group, kind.version, kind.plural,
                                                          label_selector=label_selector)["items"]
        return self.custom.list_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural,
                                                         label_selector=label_selector)["items"]

    def watch_object(self, kind: Kind, name: str, namespace: str, timeout: float) -> Iterator[dict]:
        """Yield the object now and at every change until `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lst = self.custom.list_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, field_selector=f"metadata.name={name}")
            yield from lst["items"]
            w = watch.Watch()
            remaining = max(1, int(deadline - time.monotonic()))
            for ev in w.stream(self.custom.list_namespaced_custom_object, kind.group, kind.version,
                               namespace, kind.plural, field_selector=f"metadata.name={name}",
                               resource_version=lst["metadata"]["resourceVersion"],
                               timeout_seconds=remaining):
                if ev["type"] in ("ADDED", "MODIFIED"):
                    yield ev["object"]
                if time.monotonic() >= deadline:
                    w.stop()
                    break

    def waited(self, seconds: float) -> float:
        """How long a wait of `seconds` lasts here: `seconds` times wait_scale."""
        return seconds * self.wait_scale

    def deadline(self, seconds: float) -> float:
        """The time.monotonic() at which a wait of `seconds` (scaled) ends."""
        return time.monotonic() + self.waited(seconds)

    def wait_for(self, kind: Kind, name: str, namespace: str, predicate: Callable[[dict], bool],
                 timeout: float, what: str = "") -> dict:
        """Watch until predicate(obj) holds, for waited(timeout) seconds; raise TimeoutError with the last state
        otherwise."""
        timeout = self.waited(timeout)
        last: dict | None = None
        for obj in self.watch_object(kind, name, namespace, timeout):
            last = obj
            if predicate(obj):
                return obj
        raise TimeoutError(f"{kind.plural}/{namespace}/{name}: {what or 'condition'} not reached in "
                           f"{timeout:.0f}s; last status: {(last or {}).get('status')}")


def wait_default_service_account(core: client.CoreV1Api, namespace: str, timeout: float, **kw) -> None:
    """Wait until `namespace` has its default ServiceAccount (kube-controller-manager makes it): until then the
    API refuses the namespace's pods ("serviceaccount default not found"), and an operator that retries them backs
    off. `kw` goes to each list call (e.g. _request_timeout). TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not core.list_namespaced_service_account(namespace, field_selector="metadata.name=default", **kw).items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {namespace} got no default ServiceAccount in {timeout:.0f}s: the cluster's "
                               "ServiceAccount controller (kube-controller-manager) is not keeping up")
        time.sleep(0.2)


def wait_gone(read: Callable[[], object], timeout: float, what: str) -> None:
    """Poll `read` (an API read of one object) until the API answers 404; TimeoutError naming `what` after
    `timeout` seconds. A deleted object can stay a while (finalizers, a CRD's instances being removed)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            read()
        except ApiException as err:
            if err.status == 404:
                return
            raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} still there {timeout:.0f}s after its deletion")
        time.sleep(0.5)


def condition(obj: dict, ctype: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def has_condition(obj: dict, ctype: str) -> bool:
    c = condition(obj, ctype)
    return bool(c and c.get("status") == "True")


def label_selector(sel: dict | None) -> str:
    """A LabelSelector (API dict) as a label selector string ("" selects everything)."""
    sel = sel or {}
    parts = [f"{k}={v}" for k, v in (sel.get("matchLabels") or {}).items()]
    for e in sel.get("matchExpressions") or []:
        op, key, values = e["operator"], e["key"], ",".join(e.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": key, "DoesNotExist": f"!{key}"}[op])
    return ",".join(parts)


def owner_name(obj: dict) -> str:
    """The name of the object's first owner (a Workload's job), else its own."""
    owners = obj["metadata"].get("ownerReferences") or [obj["metadata"]]
    return owners[0]["name"]


class ConditionWatch:
    """When each object of `kind` in `namespaces` was first seen with each of `conditions` True (monotonic
    seconds, keyed (namespace, name, condition)): a watch per namespace, opened before it returns, so that an
    object created after it is never missed. `name_of` names an object in the keys (default: its own name;
    owner_name keys a Workload by its job); `first_seen` when each (namespace, name) was first seen at all.
    stop() ends the watches (within their 5 s timeout)."""

    def __init__(self, kube: Kube, kind: Kind, namespaces: list[str], conditions: tuple[str, ...],
                 name_of: Callable[[dict], str] = lambda obj: obj["metadata"]["name"]):
        self.kind, self.conditions, self.name_of = kind, conditions, name_of
        self.seen: dict[tuple[str, str, str], float] = {}
        self.first_seen: dict[tuple[str, str], float] = {}
        self._stop = threading.Event()
        self._ready = threading.Barrier(len(namespaces) + 1)
        for ns in namespaces:
            threading.Thread(target=self._watch, args=(kube, ns), daemon=True).start()
        self._ready.wait()

    def _watch(self, kube: Kube, namespace: str) -> None:
        k = self.kind
        listed = kube.custom.list_namespaced_custom_object(k.group, k.version, namespace, k.plural)
        self._note(namespace, listed["items"])
        rv = listed["metadata"]["resourceVersion"]
        self._ready.wait()
        while not self._stop.is_set():
            for ev in watch.Watch().stream(kube.custom.list_namespaced_custom_object, k.group, k.version, namespace,
                                           k.plural, resource_version=rv, timeout_seconds=5):
                rv = ev["object"]["metadata"]["resourceVersion"]
                self._note(namespace, [ev["object"]])
                if self._stop.is_set():
                    break

    def _note(self, namespace: str, objs: list[dict]) -> None:
        now = time.monotonic()
        for obj in objs:
            name = self.name_of(obj)
            self.first_seen.setdefault((namespace, name), now)
            for ctype in self.conditions:
                key = (namespace, name, ctype)
                if key not in self.seen and has_condition(obj, ctype):
                    self.seen[key] = now

    def wait_for(self, keys: list[tuple[str, str, str]], timeout: float) -> list[tuple[str, str, str]]:
        """Wait until every key was seen, at most `timeout` seconds; returns those not seen."""
        return self._wait(lambda: [k for k in keys if k not in self.seen], timeout)

    def wait_any(self, names: list[tuple[str, str]], conditions: tuple[str, ...],
                 timeout: float) -> list[tuple[str, str]]:
        """Wait until each (namespace, name) was seen with one of `conditions`, at most `timeout` seconds;
        returns those not seen so."""
        return self._wait(lambda: [(ns, n) for ns, n in names
                                   if not any((ns, n, c) in self.seen for c in conditions)], timeout)

    @staticmethod
    def _wait(missing: Callable[[], list], timeout: float) -> list:
        until = time.monotonic() + timeout
        while True:
            left = missing()
            if not left or time.monotonic() > until:
                return left
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()


def label_selects(selector: dict | None, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector (API dict; empty selects all) selects `labels`."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) \
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True
