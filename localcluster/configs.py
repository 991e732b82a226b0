"""Config files of the local cluster: kwokctl's, and each host-run controller's.

Kueue's config is the kueue role's own template (roles/kueue/templates/manager-config.yaml.j2),
rendered from the role's defaults overridden by the local inventory
(inventories/local/group_vars/all/main.yml), so that the local cluster and an installed cluster
share one definition and the local values (e.g. waitForPodsReady's timeout) are set in one place.
Only what a host process needs differs from it (KUEUE_HOST_SETTINGS).

Both files are in the mpiplat checkout, not in the wheel: `mpiplat cluster up` runs from a
checkout (it builds the control plane from source); without one it stops with a ClusterError.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import yaml

from mpiplat.localcluster import build, realnode
from mpiplat.localcluster.processes import Controller, address, conf_dir, controller, prometheus_rules_dir
from mpiplat.localcluster.state import ClusterError, control_plane_ports, state_dir
from mpiplat.localcluster.webhooks import docs
from mpiplat.versions import Component, module_dir

CHECKOUT = Path(__file__).resolve().parents[1]  # localcluster/ lives at the top of the checkout
KUEUE_TEMPLATE = "roles/kueue/templates/manager-config.yaml.j2"
KUEUE_DEFAULTS = "roles/kueue/defaults/main.yml"
LOCAL_VARS = "inventories/local/group_vars/all/main.yml"
MONITORING_DEFAULTS = "roles/monitoring/defaults/main.yml"
PROMETHEUS_SA = ("kube-system", "mpiplat-prometheus")

STAGES = Path(__file__).with_name("stages.yaml")
UPSTREAM_STAGES = ("kustomize/stage/node/fast/node-initialize.yaml",
                   "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                   "kustomize/stage/pod/fast/pod-ready.yaml",
                   "kustomize/stage/pod/fast/pod-delete.yaml")
GO_DURATION = re.compile(r"([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+")
CLIENT_CONNECTION = {"qps": 100, "burst": 200}  # JobSet's: upstream's 20/30 throttles 50 concurrent jobs
# Every pod change of a job with a Service makes kube-controller-manager write its Endpoints; batched per
# second, as nothing here reads them. EndpointSlices are not batched (the default): CoreDNS and webhook
# routing follow them, and a delay would widen the race between a worker's readiness and its DNS record
# (kubeflow/mpi-operator#443) beyond a default cluster's.
# kube-controller-manager and kube-scheduler run one instance each: no leader election (their Lease writes were a
# third of an idle cluster's API requests, and a leader that misses a renewal under load exits).
CONTROLLER_MANAGER_PATCH = {"name": "kube-controller-manager", "extraArgs": [
    {"key": "endpoint-updates-batch-period", "value": "1s"},
    {"key": "leader-elect", "value": "false"},
]}
SCHEDULER_PATCH = {"name": "kube-scheduler", "extraArgs": [{"key": "leader-elect", "value": "false"}]}


# ---------------------------------------------------------------- the checkout's files

def checkout_file(rel: str) -> Path:
    path = CHECKOUT / rel
    if not path.is_file():
        raise ClusterError(f"{path} not found: the local cluster reads {rel} from the mpiplat checkout; run "
                           "`mpiplat cluster up` from a git clone installed with `pip install -e .` "
                           "(an installed wheel has no roles/ or inventories/)")
    return path


def _yaml_vars(rel: str) -> dict:
    path = checkout_file(rel)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ClusterError(f"{path} is not valid YAML: fix it, then retry\n{err}") from err
    if not isinstance(data, dict):
        raise ClusterError(f"{path} must be a mapping of variables, got {type(data).__name__}")
    return data


def local_vars(prefix: str) -> dict:
    """The local inventory's variables that start with `prefix` (e.g. kueue_, guardrails_)."""
    return {k: v for k, v in _yaml_vars(LOCAL_VARS).items() if k.startswith(prefix)}


def role_vars(defaults: str, prefix: str) -> dict:
    """A role's defaults overridden by the local inventory (`prefix`* only)."""
    merged = {k: v for k, v in _yaml_vars(defaults).items() if k.startswith(prefix)}
    merged |= local_vars(prefix)
    for key, val in merged.items():
        if isinstance(val, str) and ("{{" in val or "{%" in val):
            raise ClusterError(f"{key} is the Jinja expression {val!r} in {LOCAL_VARS} or {defaults}; "
                               "the local cluster needs a plain value there")
    return merged


def kueue_vars() -> dict:
    """The kueue role's defaults overridden by the local inventory (kueue_* only)."""
    merged = role_vars(KUEUE_DEFAULTS, "kueue_")
    timeout = str(merged.get("kueue_wait_for_pods_ready_timeout", ""))
    if not GO_DURATION.fullmatch(timeout):
        raise ClusterError(f"kueue_wait_for_pods_ready_timeout is {timeout!r} in {LOCAL_VARS}; "
                           "allowed: a Go duration such as 30s or 5m")
    return merged


# ---------------------------------------------------------------- kueue

def _to_bool(value) -> bool:  # Ansible's `bool` filter
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("yes", "on", "1", "true", "y", "t")


def _to_nice_yaml(value, indent: int = 4, **kw) -> str:  # Ansible's `to_nice_yaml` filter
    return yaml.safe_dump(value, indent=indent, default_flow_style=False, allow_unicode=True, **kw)


def render_role_template(rel: str, variables: dict) -> dict:
    """A role's YAML template, rendered like Ansible does (trim_blocks) with `variables`."""
    path = checkout_file(rel)
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters |= {"bool": _to_bool, "to_nice_yaml": _to_nice_yaml}
    try:
        return yaml.safe_load(env.from_string(path.read_text()).render(**variables))
    except (jinja2.TemplateError, yaml.YAMLError) as err:
        raise ClusterError(f"cannot render {path} for the local cluster ({type(err).__name__}: {err}); it is "
                           "rendered with plain Jinja2 and the Ansible filters bool and to_nice_yaml") from err


def kueue_host_settings(ctl: Controller, pki: Path) -> dict:
    """What differs for Kueue as a host process: where it listens, its certificate, one replica."""
    return {
        "health": {"healthProbeBindAddress": f"{address()}:{ctl.health_port}"},
        "metrics": {"bindAddress": f"{address()}:{ctl.metrics_port}"},
        "webhook": {"host": address(), "port": ctl.webhook_port, "certDir": str(pki)},
        "internalCertManagement": {"enable": False},  # our certificate is in certDir
        "leaderElection": {"leaderElect": False},
        "featureGates": {"VisibilityOnDemand": False},  # needs an APIService backed by a Service
    }


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, val in over.items():
        out[key] = _merge(out[key], val) if isinstance(val, dict) and isinstance(out.get(key), dict) else val
    return out


def kueue_config(ctl: Controller, pki: Path) -> dict:
    return _merge(render_role_template(KUEUE_TEMPLATE, kueue_vars()), kueue_host_settings(ctl, pki))


# ---------------------------------------------------------------- Prometheus

def prometheus_rbac() -> list[dict]:
    """Prometheus's identity: a ServiceAccount that may read /metrics (Kueue and JobSet check each scrape's
    token with the API server) and the kubelet's metrics."""
    ns, name = PROMETHEUS_SA
    labels = {"app.kubernetes.io/managed-by": "mpiplat-localcluster"}
    role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"mpiplat-localcluster-{name}"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns, "labels": labels}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": role["name"], "labels": labels},
         "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
                   {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": role["name"], "labels": labels}, "roleRef": role,
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]},
    ]


def write_prometheus_files(token: str) -> None:
    """Prometheus's ServiceAccount token, beside its config."""
    confdir = conf_dir(controller("prometheus"))
    confdir.mkdir(parents=True, exist_ok=True)
    (confdir / "token").write_text(token)
    (confdir / "token").chmod(0o600)


def prometheus_config(ctl: Controller) -> dict:
    """Scrape the host-run controllers, kube-state-metrics and the real node's kubelet (cAdvisor) every
    monitoring_scrape_interval, and evaluate the rule files (rulesync's, from the PrometheusRules) as often."""
    confdir = conf_dir(ctl)
    interval = role_vars(MONITORING_DEFAULTS, "monitoring_")["monitoring_scrape_interval"]
    secure = {"scheme": "https", "tls_config": {"insecure_skip_verify": True},  # this host only
              "authorization": {"credentials_file": str(confdir / "token")}}

    def job(name: str, port: int, host: str = "", **kw) -> dict:
        return {"job_name": name, **kw, "static_configs": [{"targets": [f"{host or address()}:{port}"]}]}

    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(prometheus_rules_dir() / "*.yml")],
        "scrape_configs": [
            job("mpi-operator", controller("mpi-operator").metrics_port),
            job("kueue", controller("kueue").metrics_port, **secure),
            job("jobset", controller("jobset").metrics_port, **secure),
            job("kube-state-metrics", controller("kube-state-metrics").metrics_port),
            job("kubelet-cadvisor", realnode.PORTS["kubelet"], host=realnode.network().node_ip,
                metrics_path="/metrics/cadvisor", **secure),
        ],
    }


# ---------------------------------------------------------------- the other controllers

def controller_config(ctl: Controller, pki: Path) -> dict | None:
    """The config file a controller reads (mpi-operator takes flags only)."""
    if ctl.name == "kueue":
        return kueue_config(ctl, pki)
    if ctl.name == "jobset":
        return {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"{address()}:{ctl.health_port}"},
            "metrics": {"bindAddress": f"{address()}:{ctl.metrics_port}"},
            "webhook": {"host": address(), "port": ctl.webhook_port, "certDir": str(pki)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": dict(CLIENT_CONNECTION),
        }
    if ctl.name == "prometheus":
        return prometheus_config(ctl)
    if ctl.name == "trainer-controller-manager":
        return {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "webhook": {"host": address(), "port": ctl.webhook_port},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"{address()}:{ctl.health_port}"},
            "certManagement": {"enable": False},
        }
    return None


# ---------------------------------------------------------------- kwokctl

def kwok_config(comps: dict[str, Component], options: dict | None = None, patches: list[dict] | None = None) -> Path:
    """Write kwokctl's config (local binaries, loopback binding, our Stages, CONTROLLER_MANAGER_PATCH and
    SCHEDULER_PATCH) plus extra `options` and componentsPatches (the real node's, see
    realnode.apiserver_patches); its path."""
    ports = control_plane_ports()
    extra, options = options or {}, {
        "runtime": "binary",
        "kubeApiserverPort": ports["kube-apiserver"],
        "etcdPort": ports["etcd"],
        "etcdPeerPort": ports["etcd-peer"],
        "kubeControllerManagerPort": ports["kube-controller-manager"],
        "kubeSchedulerPort": ports["kube-scheduler"],
        "kwokControllerPort": ports["kwok-controller"],
        "kubeVersion": comps["kubernetes"].version.lstrip("v"),
        "bindAddress": "127.0.0.1",
        "kubeApiserverBinary": str(build.binary("kube-apiserver", comps)),
        "kubeControllerManagerBinary": str(build.binary("kube-controller-manager", comps)),
        "kubeSchedulerBinary": str(build.binary("kube-scheduler", comps)),
        "kubectlBinary": str(build.binary("kubectl", comps)),
        "etcdBinary": str(build.binary("etcd", comps)),
        "kwokControllerBinary": str(build.binary("kwok", comps)),
        # MutatingAdmissionPolicy (beta in 1.34, off by default): the restricted-v2 emulation (scc) needs it.
        "kubeFeatureGates": "MutatingAdmissionPolicy=true",
        "kubeRuntimeConfig": "admissionregistration.k8s.io/v1beta1=true",
    }
    options |= extra
    conf = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokctlConfiguration", "options": options,
            "componentsPatches": [CONTROLLER_MANAGER_PATCH, SCHEDULER_PATCH, *(patches or [])]}
    kwok_dir = module_dir(comps["kwok"])
    path = state_dir() / "kwokctl.yaml"
    path.write_text(yaml.safe_dump_all([conf, *docs([kwok_dir / s for s in UPSTREAM_STAGES]), *docs([STAGES])],
                                       sort_keys=False))
    return path
