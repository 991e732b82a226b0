"""What the verdicts rest on, read from the cluster for the handover: the cluster (server version, nodes
with their GPU and topology labels, the stack's controllers and CRDs) and, for a failed test, its
namespaces (job objects, pod statuses, events, logs, diagnoses) before the run deletes them.

Read-only, and never in the way of a verdict: what cannot be read is written down as an error."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import yaml
from kubernetes import client

from mpiplat.conformance.capabilities import is_kwok
from mpiplat.diagnose import diagnose
from mpiplat.kube import JOBSET, MPIJOB, TRAINJOB, WORKLOAD, Kube
from mpiplat.versions import load

REQUEST_TIMEOUT_S = 10
LOG_TAIL_LINES = 200
MAX_POD_LOGS = 20  # per namespace: a failed scale run has many pods
# Extra CRD groups and workloads worth naming beside the stack's own (versions.yml components with images).
EXTRA_CRD_GROUPS = ("nvidia.com", "monitoring.coreos.com")
EXTRA_WORKLOADS = ("dcgm",)


def _try(errors: list[str], what: str, read: Callable[[], Any], default: Any = None) -> Any:
    try:
        return read()
    except Exception as err:  # noted, never raised: the handover must not change a verdict
        errors.append(f"{what}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        return default


# ---------------------------------------------------------------- the cluster

def _topology(key: str) -> bool:
    return "topology" in key or key.rsplit("/", 1)[-1] in ("rack", "block", "zone", "region")


def node(n, gpu_resource: str) -> dict:
    """One node as the handover shows it."""
    labels = n.metadata.labels or {}
    alloc = n.status.allocatable or {}
    info = n.status.node_info
    return {"name": n.metadata.name, "simulated": is_kwok(n),
            "ready": any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []),
            "unschedulable": bool(n.spec.unschedulable),
            "kubelet": info.kubelet_version if info else None,
            "os_image": info.os_image if info else None,
            "container_runtime": info.container_runtime_version if info else None,
            "allocatable": {"cpu": alloc.get("cpu"), "memory": alloc.get("memory"),
                            gpu_resource: alloc.get(gpu_resource, "0")},
            "gpu_labels": {k: v for k, v in sorted(labels.items()) if k.startswith("nvidia.com/")},
            "topology_labels": {k: v for k, v in sorted(labels.items()) if _topology(k)},
            "taints": [f"{t.key}={t.value or ''}:{t.effect}" for t in n.spec.taints or []]}


def node_summary(nodes: list[dict], gpu_resource: str) -> dict:
    def gpus(ns):
        return sum(int(str(n["allocatable"].get(gpu_resource) or 0)) for n in ns)

    real = [n for n in nodes if not n["simulated"]]
    kwok = [n for n in nodes if n["simulated"]]
    return {"real": len(real), "simulated": len(kwok), "gpus_real": gpus(real), "gpus_simulated": gpus(kwok),
            "kubelets": sorted({n["kubelet"] for n in real if n.get("kubelet")})}


def _images(workload) -> list[str]:
    spec = workload.spec.template.spec
    return [c.image for c in [*(spec.init_containers or []), *spec.containers]]


def controllers(workloads: list, components: dict) -> tuple[list[dict], list[str]]:
    """The Deployments/DaemonSets/StatefulSets of the stack (their name or an image names a component of
    versions.yml that installs images, or dcgm), with images, readiness and the pinned version; and the
    components found in none."""
    names = {c.name: c.version for c in components.values() if c.extra.get("images")}
    found, seen = [], set()
    for w in workloads:
        images = _images(w)
        matches = [c for c in (*names, *EXTRA_WORKLOADS)
                   if c in w.metadata.name or any(c in img.rsplit(":", 1)[0] for img in images)]
        if not matches:
            continue
        seen.update(matches)
        status = w.status
        ready = getattr(status, "ready_replicas", None) or getattr(status, "number_ready", None) or 0
        wanted = getattr(status, "desired_number_scheduled", None)
        if wanted is None:
            wanted = w.spec.replicas if getattr(w.spec, "replicas", None) is not None else 1
        found.append({"component": matches[0], "pinned": names.get(matches[0]), "kind": w.kind or type(w).__name__,
                      "namespace": w.metadata.namespace, "name": w.metadata.name, "images": images,
                      "ready": f"{ready}/{wanted}"})
    return found, sorted(set(names) - seen)


def crds(items: list, components: dict) -> list[dict]:
    """CRDs of the stack's API groups (versions.yml served_crds) and of EXTRA_CRD_GROUPS."""
    groups = {name.split(".", 1)[1] for c in components.values() for name in c.extra.get("served_crds") or {}}
    groups |= set(EXTRA_CRD_GROUPS)
    out = []
    for crd in items:
        if crd.spec.group not in groups:
            continue
        labels, notes = crd.metadata.labels or {}, crd.metadata.annotations or {}
        out.append({"name": crd.metadata.name,
                    "served": [v.name for v in crd.spec.versions if v.served],
                    "storage": next((v.name for v in crd.spec.versions if v.storage), None),
                    "version_label": labels.get("app.kubernetes.io/version"),
                    "controller_gen": notes.get("controller-gen.kubebuilder.io/version")})
    return sorted(out, key=lambda c: c["name"])


def cluster(kube: Kube, gpu_resource: str) -> dict:
    """The cluster the verdicts rest on (see the module's doc)."""
    errors: list[str] = []
    components = load()
    apps = client.AppsV1Api(kube.api_client)
    opts = {"_request_timeout": REQUEST_TIMEOUT_S}
    version = _try(errors, "server version", lambda: client.VersionApi(kube.api_client).get_code(**opts))
    nodes = [node(n, gpu_resource) for n in _try(errors, "nodes", lambda: kube.core.list_node(**opts).items, [])]
    workloads = []
    for kind, read in (("Deployment", apps.list_deployment_for_all_namespaces),
                       ("DaemonSet", apps.list_daemon_set_for_all_namespaces),
                       ("StatefulSet", apps.list_stateful_set_for_all_namespaces)):
        for w in _try(errors, f"{kind}s", lambda read=read: read(**opts).items, []):
            w.kind = kind
            workloads.append(w)
    found, missing = controllers(workloads, components)
    return {"taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "server": kube.api_client.configuration.host, "context": getattr(kube, "context", ""),
            "version": version.git_version if version else None,
            "platform": version.platform if version else None,
            "nodes": nodes, "node_summary": node_summary(nodes, gpu_resource),
            "controllers": found, "controllers_not_found": missing,
            "crds": crds(_try(errors, "CRDs", lambda: kube.apiext.list_custom_resource_definition(**opts).items, []),
                         components),
            "errors": errors}


# ---------------------------------------------------------------- a failed test's namespaces

JOB_KINDS = (("MPIJob", MPIJOB), ("TrainJob", TRAINJOB), ("JobSet", JOBSET), ("Workload", WORKLOAD))


def _clean(kube: Kube, obj) -> dict:
    body = obj if isinstance(obj, dict) else kube.api_client.sanitize_for_serialization(obj)
    body.get("metadata", {}).pop("managedFields", None)
    return body


def _dump(docs: list[dict]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False) if docs else ""


def _pod_line(p) -> str:
    states = []
    for cs in p.status.container_statuses or []:
        st = cs.state
        if st and st.terminated:
            states.append(f"{cs.name}=terminated({st.terminated.reason}, exit {st.terminated.exit_code})")
        elif st and st.waiting:
            states.append(f"{cs.name}=waiting({st.waiting.reason})")
        elif st and st.running:
            states.append(f"{cs.name}=running")
        if cs.restart_count:
            states.append(f"{cs.name} restarts={cs.restart_count}")
    return f"{p.metadata.name}  {p.status.phase}  node={p.spec.node_name or '-'}  {' '.join(states)}".rstrip()


def _event_line(e) -> str:
    when = e.last_timestamp or e.event_time or e.first_timestamp or e.metadata.creation_timestamp
    obj = e.involved_object
    return f"{when.isoformat() if when else '-'}  {e.type}  {e.reason}  {obj.kind}/{obj.name}: {e.message}"


def namespace(kube: Kube, ns: str, gpu_resource: str) -> dict[str, str]:
    """A failed test's namespace as files (name -> text): its jobs, pods, events, logs and diagnoses.
    Secrets are never read."""
    errors: list[str] = []
    opts = {"_request_timeout": REQUEST_TIMEOUT_S}
    files: dict[str, str] = {}
    objects, jobs = [], []
    for kind_name, kind in JOB_KINDS:
        items = _try(errors, f"{kind_name}s", lambda kind=kind: kube.custom.list_namespaced_custom_object(
            kind.group, kind.version, ns, kind.plural, **opts)["items"], [])
        objects += [_clean(kube, o) for o in items]
        jobs += [(kind_name, o["metadata"]["name"]) for o in items if kind_name in ("MPIJob", "TrainJob")]
    reads = (("Jobs", lambda: kube.batch.list_namespaced_job(ns, **opts).items),
             ("NetworkPolicies", lambda: client.NetworkingV1Api(kube.api_client)
              .list_namespaced_network_policy(ns, **opts).items),
             ("ResourceQuotas", lambda: kube.core.list_namespaced_resource_quota(ns, **opts).items),
             ("hostfile ConfigMaps", lambda: [c for c in kube.core.list_namespaced_config_map(ns, **opts).items
                                              if c.metadata.name.endswith(("-config", "-hostfile"))]))
    for what, read in reads:
        objects += [_clean(kube, o) for o in _try(errors, what, read, [])]
    files["objects.yaml"] = _dump(objects)
    pods = _try(errors, "pods", lambda: kube.core.list_namespaced_pod(ns, **opts).items, [])
    files["pods.txt"] = "\n".join(_pod_line(p) for p in pods) + "\n"
    files["pods.yaml"] = _dump([_clean(kube, p) for p in pods])
    events = _try(errors, "events", lambda: kube.core.list_namespaced_event(ns, **opts).items, [])
    files["events.txt"] = "\n".join(_event_line(e) for e in events) + "\n"
    for p in pods[:MAX_POD_LOGS]:
        for c in p.spec.containers:
            log = _try(errors, f"log of {p.metadata.name}/{c.name}", lambda p=p, c=c: kube.core.read_namespaced_pod_log(
                p.metadata.name, ns, container=c.name, tail_lines=LOG_TAIL_LINES, **opts))
            if log:
                files[f"logs/{p.metadata.name}.{c.name}.log"] = log
    if len(pods) > MAX_POD_LOGS:
        errors.append(f"logs of {len(pods) - MAX_POD_LOGS} more pods not collected (at most {MAX_POD_LOGS})")
    diagnoses = [str(d) for kind_name, name in jobs
                 if (d := _try(errors, f"diagnosis of {kind_name} {name}",
                               lambda name=name: diagnose(kube, ns, name, gpu_resource)))]
    if diagnoses:
        files["diagnoses.txt"] = "\n\n".join(diagnoses) + "\n"
    if errors:
        files["errors.txt"] = "\n".join(errors) + "\n"
    return files
