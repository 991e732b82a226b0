"""`mpiplat job ...`: MPIJobs from a terminal, through the SDK (mpiplat.sdk).

Exit codes: 0 done (for `wait`: the job reached the state), 1 an error, or `wait` saw the job finish
otherwise (e.g. Failed while waiting for succeeded), 2 a usage error, 124 `wait` timed out.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path

import yaml

from mpiplat.jobs import CLEAN_POD_POLICIES, IMPLEMENTATIONS, LAUNCHER_CREATION_POLICIES, MPIJob
from mpiplat.sdk import UNTIL, WAIT_FOR, Client, JobStatus, JobTimeout, job_status

TIMED_OUT = 124


def _client(args) -> Client:
    if args.local:
        from mpiplat.localcluster import cluster

        if not cluster.status()["healthy"]:
            cluster.up()
        return Client(args.namespace, kubeconfig=str(cluster.kubeconfig_path()), context=args.context)
    return Client(args.namespace, kubeconfig=args.kubeconfig, context=args.context)


def _dump(data, output: str) -> None:
    if output == "json":
        print(json.dumps(data, indent=2, default=str))
    else:
        print(yaml.safe_dump(data, sort_keys=False), end="")


def _age(stamp: str | None) -> str:
    if not stamp:
        return "-"
    then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    secs = int((datetime.datetime.now(datetime.UTC) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


# ---------------------------------------------------------------- commands

def _create(args) -> int:
    program = args.program
    if args.filename:
        if args.name or program:
            args.parser.error("-f takes the whole job from the file: give no NAME and no command")
        text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text()
        job = MPIJob.from_yaml(text)
    else:
        if not args.name or not program:
            args.parser.error("give -f FILE, or NAME and a command after --: create NAME --workers N -- CMD...")
        job = MPIJob(name=args.name, workers=args.workers, slots_per_worker=args.slots, image=args.image,
                     gpus_per_worker=args.gpus, implementation=args.implementation, queue=args.queue,
                     launcher_creation_policy=args.launcher_creation_policy, command=program,
                     cpu=args.cpu, cpu_limit=args.cpu_limit, memory=args.memory, clean_pod_policy=args.clean_pod_policy,
                     required_topology=args.required_topology)
    if args.namespace and job.namespace and job.namespace != args.namespace:
        args.parser.error(f"the file's namespace {job.namespace!r} differs from -n {args.namespace!r}")
    if args.dry_run:
        _dump(job.manifest(), args.output or "yaml")
        return 0
    created = _client(args).create(job, check_gpus=not args.no_gpu_check, check_pods=not args.no_pod_check)
    if args.output:
        _dump(created.source, args.output)
    else:
        print(f"mpijob.kubeflow.org/{created.name} created in namespace {created.namespace}")
    return 0


def _get(args) -> int:
    c = _client(args)
    found = [c.get(args.name)] if args.name else c.list(all_namespaces=args.all_namespaces)
    if args.output:
        items = [j.source for j in found]
        _dump(items[0] if args.name else {"apiVersion": "v1", "kind": "List", "items": items}, args.output)
        return 0
    if not found:
        print(f"no MPIJobs in {'any namespace' if args.all_namespaces else 'namespace ' + c.namespace}",
              file=sys.stderr)
        return 0
    head = (["NAMESPACE"] if args.all_namespaces else []) + ["NAME", "PHASE", "WORKERS", "QUEUE", "AGE"]
    rows = [head]
    for job in found:
        st = job_status(job.source)
        ready = st.replicas.get("Worker", {}).get("active", 0)
        rows.append(([job.namespace] if args.all_namespaces else [])
                    + [job.name, st.phase, f"{ready}/{job.workers}", job.queue or "-",
                       _age(job.source["metadata"].get("creationTimestamp"))])
    print(_table(rows))
    return 0


def _describe(args) -> int:
    found = _client(args).describe(args.name)
    if args.output:
        found["status"] = dataclasses.asdict(found["status"])
        found["diagnosis"] = found["diagnosis"].__dict__
        _dump(found, args.output)
        return 0
    st: JobStatus = found["status"]
    print(f"Name:       {st.namespace}/{st.name}\nPhase:      {st.phase}"
          + (f" ({st.message})" if st.message else ""))
    print(f"Started:    {st.start_time or '-'}\nCompleted:  {st.completion_time or '-'}")
    print("Conditions:")
    for cond in st.conditions:
        print(f"  {cond.get('type'):10} {cond.get('status'):6} {cond.get('reason', '')}: {cond.get('message', '')}")
    q = found["queue"]
    if q:
        print(f"Queue:      LocalQueue {q['local_queue']} (ClusterQueue {q['cluster_queue'] or '-'}), Workload "
              f"{q['workload']}, {'admitted' if q['admitted'] else 'not admitted'}"
              + ("" if q["active"] else ", deactivated (suspended)")
              + (f", position {q['position']}" if q["position"] is not None else ""))
        if q["reason"]:
            print(f"  why not admitted: {q['reason']}")
    else:
        print("Queue:      none (no Kueue Workload)")
    print("Pods:")
    for p in found["pods"]:
        print(f"  {p['name']:32} {p['role']:8} {p['phase']:10} ready={str(p['ready']).lower():5} "
              f"restarts={p['restarts']} node={p['node'] or '-'}")
    print("Events:")
    for e in found["events"]:
        print(f"  {e['time'][:19]:19} {e['type']:7} {e['object']:40} {e['reason']}: {e['message']}")
    print("Diagnosis:")
    print("".join(f"  {line}\n" for line in str(found["diagnosis"]).splitlines()), end="")
    return 0


def _logs(args) -> int:
    c = _client(args)
    which = "all" if args.all else args.worker if args.worker is not None else "launcher"
    if args.follow:
        for line in c.follow_logs(args.name, which=which, grep=args.grep):
            print(line.format(args.timestamps), flush=True)
        return 0
    for line in c.logs(args.name, which=which, grep=args.grep):
        print(line.format(args.timestamps))
    return 0


def _delete(args) -> int:
    _client(args).delete(args.name, wait=args.wait, timeout=args.timeout)
    print(f"mpijob.kubeflow.org/{args.name} deleted")
    return 0


def _wait(args) -> int:
    c = _client(args)
    try:
        st = c.wait(args.name, until=args.for_, timeout=args.timeout)
    except JobTimeout as err:
        print(f"timed out: {err}", file=sys.stderr)
        return TIMED_OUT
    reached = st.phase in UNTIL[args.for_]
    print(f"mpijob.kubeflow.org/{args.name} {st.phase}" + (f": {st.message}" if st.message else ""))
    if not reached:
        print(c.diagnose(args.name), file=sys.stderr)
    return 0 if reached else 1


def _suspend(args) -> int:
    c = _client(args)
    print(f"mpijob.kubeflow.org/{args.name}: " + (c.resume(args.name) if args.resume else c.suspend(args.name)))
    return 0


# ---------------------------------------------------------------- parser

def split_program(argv: list[str]) -> tuple[list[str], list[str]]:
    """`job create NAME ... -- CMD...`: the arguments before `--`, and CMD... (argparse would take CMD's own
    options, like python3's -c, for ours)."""
    if argv[:2] == ["job", "create"] and "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


def add_parser(sub) -> None:
    """`mpiplat job ...` under the top-level parser's subcommands."""
    j = sub.add_parser("job", help="create, watch, read logs of and diagnose MPIJobs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    jsub = j.add_subparsers(dest="action", required=True)

    def _cmd(name: str, func, help_: str, takes_name: bool = True) -> argparse.ArgumentParser:
        p = jsub.add_parser(name, help=help_)
        if takes_name:
            p.add_argument("name", metavar="NAME")
        p.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")
        p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
        p.add_argument("--context", help="kubeconfig context (default: the current context)")
        p.add_argument("--local", action="store_true", help="use the local reference cluster (started if not up)")
        p.set_defaults(func=func, parser=p)
        return p

    c = _cmd("create", _create, "submit a job: -f FILE (upstream YAML), or NAME and flags -- CMD...",
                takes_name=False)
    c.add_argument("name", metavar="NAME", nargs="?")
    c.add_argument("-f", "--filename", help="an MPIJob v2beta1 manifest (- for stdin)")
    c.add_argument("--workers", type=int, default=2)
    c.add_argument("--slots", type=int, default=1, help="slots (ranks) per worker")
    c.add_argument("--image", help="container image (default: the operator's base image of the implementation)")
    c.add_argument("--gpus", type=int, default=0, help="GPUs per worker")
    c.add_argument("--implementation", default="OpenMPI", choices=IMPLEMENTATIONS)
    c.add_argument("--queue", help="Kueue LocalQueue (label kueue.x-k8s.io/queue-name)")
    c.add_argument("--launcher-creation-policy", default="WaitForWorkersReady", choices=LAUNCHER_CREATION_POLICIES)
    c.add_argument("--required-topology", metavar="LABEL",
                   help="a level of the queue's Kueue Topology (a node label, e.g. a rack's) whose one value all "
                        "workers share; the job waits until one such domain has room")
    c.add_argument("--cpu", default="100m", help="CPU request per worker")
    c.add_argument("--cpu-limit", help="CPU limit per worker (default: none, as MPI ranks that poll under a limit "
                                       "stall)")
    c.add_argument("--memory", default="128Mi", help="memory per worker")
    c.add_argument("--clean-pod-policy", default="Running", choices=CLEAN_POD_POLICIES,
                   help="which pods the operator deletes when the job finishes (None: keep the workers and their logs)")
    c.add_argument("--no-gpu-check", action="store_true",
                   help="submit even if the nodes have fewer GPUs than the job asks for (e.g. an autoscaler)")
    c.add_argument("--no-pod-check", action="store_true",
                   help="submit without first asking the API server (a dry run) whether the namespace's Pod Security "
                        "or security context constraints admit the job's pods")
    c.add_argument("--dry-run", action="store_true", help="print the manifest, submit nothing")
    c.add_argument("-o", "--output", choices=["json", "yaml"], help="print the created object")
    c.epilog = "After --: the program mpirun runs, with its arguments (create NAME ... -- python3 train.py)."

    g = _cmd("get", _get, "list jobs, or one job", takes_name=False)
    g.add_argument("name", metavar="NAME", nargs="?")
    g.add_argument("-A", "--all-namespaces", action="store_true")
    g.add_argument("-o", "--output", choices=["json", "yaml"])

    d = _cmd("describe", _describe, "conditions, queue state, pods, events and the diagnosis")
    d.add_argument("-o", "--output", choices=["json", "yaml"])

    lg = _cmd("logs", _logs, "logs of the launcher (default), a worker or all pods, ordered by time")
    which = lg.add_mutually_exclusive_group()
    which.add_argument("--launcher", action="store_true", help="the launcher's log (the default)")
    which.add_argument("--worker", type=int, metavar="I", help="worker I's log")
    which.add_argument("--all", action="store_true", help="every pod's log, interleaved by time")
    lg.add_argument("-f", "--follow", action="store_true", help="stream until the job has finished")
    lg.add_argument("--grep", metavar="RE", help="only lines matching this regular expression")
    lg.add_argument("--timestamps", action="store_true", help="prefix each line with its time")

    dl = _cmd("delete", _delete, "delete a job and its pods")
    dl.add_argument("--wait", action="store_true", help="return once it is gone")
    dl.add_argument("--timeout", type=float, default=120)

    w = _cmd("wait", _wait, f"wait until the job is {'|'.join(WAIT_FOR)} (exit 1 if it finished otherwise, "
                               f"{TIMED_OUT} at the timeout)")
    w.add_argument("--for", dest="for_", default="finished", choices=WAIT_FOR)
    w.add_argument("--timeout", type=float, default=600, help="seconds (default 600)")

    _cmd("suspend", _suspend, "suspend a job (a queued one: its Kueue Workload)").set_defaults(resume=False)
    _cmd("resume", _suspend, "resume a suspended job").set_defaults(resume=True)
