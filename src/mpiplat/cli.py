"""The `mpiplat` command.

Commands that talk to a cluster find it like kubectl (--kubeconfig, else $KUBECONFIG, else
~/.kube/config; --context, else the current context). Only `mpiplat cluster ...` and `--local`
start or build the local reference cluster. Exit codes: 0 ok, 1 a domain error (one line on
stderr) or a failed check, 2 a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from importlib import resources

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from mpiplat import __version__
from mpiplat.errors import MpiplatError


def _print_json(data) -> None:
    print(json.dumps(data, indent=2, default=str))


def _local_kubeconfig() -> str:
    """Start the local reference cluster unless it is healthy; its kubeconfig."""
    from mpiplat.localcluster import cluster

    if not cluster.status()["healthy"]:
        cluster.up()
    return str(cluster.kubeconfig_path())


def _kube(args):
    from mpiplat.kube import Kube

    return Kube(_local_kubeconfig() if args.local else args.kubeconfig, args.context)


# ---------------------------------------------------------------- cluster

def _cluster_build(args) -> int:
    from mpiplat.localcluster.build import build

    built = build(only=args.only, stream=sys.stderr if args.json else sys.stdout, previous=args.previous,
                  kubernetes=args.kubernetes or "")
    if args.json:
        _print_json({"built": built})
    return 0


def _cluster_images(args) -> int:
    from mpiplat.localcluster import realnode
    from mpiplat.localcluster.images import build

    if args.image_registry and not args.load:
        raise MpiplatError("--image-registry names the images that --load imports into the real node: give --load too")
    if args.load:
        realnode.check_running()  # before any build
    results = build(names=args.only, stream=sys.stderr if args.json else sys.stdout)
    if args.load:
        realnode.load_images(args.only, args.image_registry or "", stream=sys.stderr if args.json else sys.stdout)
    if args.json:
        _print_json({"images": [{"name": r.name, "image": r.image, "path": str(r.path), "key": r.key,
                                 "built": r.built, "seconds": r.seconds, "bytes": r.size} for r in results]})
    return 0


def _cluster(args) -> int:
    from mpiplat.localcluster import cluster

    if args.action == "up":
        cluster.up(node_pools=args.node_pools, bare=args.bare, real_node=not args.no_real_node,
                   image_registry=args.image_registry or "", kubernetes=args.kubernetes or "")
    elif args.action == "upgrade":
        cluster.upgrade(args.kubernetes)
    elif args.action == "down":
        cluster.down()
    elif args.action == "status":
        report = cluster.status()
        if args.json:
            _print_json(report)
        else:
            cluster.print_status(report)
        return 0 if report["healthy"] else 1
    elif args.action == "env":
        from mpiplat.localcluster.build import binary
        from mpiplat.localcluster.processes import prometheus_url

        env = {"KUBECONFIG": str(cluster.kubeconfig_path()), "MPIPLAT_HELM": str(binary("helm")),
               "MPIPLAT_PROMETHEUS_URL": prometheus_url()}
        if args.json:
            _print_json(env)
        else:
            print("".join(f"export {k}={v}\n" for k, v in env.items()), end="")
    return 0


# ---------------------------------------------------------------- bundle

def _bundle(args) -> int:
    from pathlib import Path

    from mpiplat import bundle

    if args.checksums_only:
        bundle.write_checksums(Path(args.dir))
        print(f"rewrote {Path(args.dir) / 'SHA256SUMS'}")
    elif args.verify:
        bad = bundle.verify(Path(args.dir))
        if args.json:
            _print_json({"intact": not bad, "mismatched": bad})
        else:
            print("bundle intact" if not bad else "checksum mismatch: " + ", ".join(bad))
        return 1 if bad else 0
    else:
        bundle.make(Path(args.dir), previous=args.previous)
    return 0


# ---------------------------------------------------------------- conformance

def _conformance(args) -> int:
    import pytest

    from mpiplat.conformance.settings import load

    if (args.profile == "upgrade") != bool(args.phase):
        raise MpiplatError("--phase before|after goes with --profile upgrade, and only with it: got --profile "
                           f"{args.profile} and --phase {args.phase or '(none)'}")
    load(args.settings)  # bad settings fail here, as one line, before any cluster access
    kubeconfig = _local_kubeconfig() if args.local else args.kubeconfig
    _kube(argparse.Namespace(local=False, kubeconfig=kubeconfig, context=args.context)).identity()
    suite = resources.files("mpiplat.conformance") / "suite"
    argv = [str(suite), "-p", "no:cacheprovider", "-q", "-o", "console_output_style=classic",
            f"--profile={args.profile}", f"--report-dir={args.report_dir}", f"--ai-checklist={args.ai_checklist}",
            "--rootdir", str(suite)]
    for flag, value in (("kubeconfig", kubeconfig), ("context", args.context), ("settings", args.settings),
                        ("only", args.only), ("phase", args.phase)):
        if value:
            argv.append(f"--{flag}={value}")
    argv += ["--keep"] if args.keep else []
    argv += ["--fail-fast-rows"] if args.fail_fast_rows else []
    argv += ["--strict-verdicts"] if args.strict else []
    argv += [f"--capability={c}" for c in args.capability]
    # In this process, so Ctrl-C and SIGTERM reach the suite's own cleanup of its namespaces.
    # With --json, pytest's own output goes to stderr and stdout carries the results only.
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        code = int(pytest.main(argv))
    if args.json:
        from pathlib import Path

        results = Path(args.report_dir) / "results.json"
        _print_json(json.loads(results.read_text()) if results.is_file() else {"exit_code": code})
    return code


# ---------------------------------------------------------------- diagnose, demo

def _diagnose(args) -> int:
    from mpiplat.diagnose import diagnose

    namespace, _, name = args.job.partition("/")
    if not namespace or not name:
        args.parser.error(f"expected NAMESPACE/JOB, got {args.job!r}")
    found = diagnose(_kube(args), namespace, name, args.gpu_resource)
    if args.json:
        _print_json(found.__dict__)
    else:
        print(found)
    return 0


def _dashboard(args) -> int:
    from mpiplat.dashboard.app import Settings, serve
    from mpiplat.dashboard.security import DEFAULT_HOSTS

    kubeconfig, prometheus = args.kubeconfig, args.prometheus
    if args.local:
        from mpiplat.localcluster import cluster, processes

        if not cluster.status()["healthy"]:
            cluster.up()
        kubeconfig = str(cluster.kubeconfig_path())
        prometheus = prometheus or processes.prometheus_url()
    settings = Settings(kubeconfig=kubeconfig, context=args.context, auth=args.auth, user_header=args.user_header,
                        groups_header=args.groups_header, namespaces=args.namespaces, reports=args.report,
                        prometheus=prometheus, prometheus_token_file=args.prometheus_token_file,
                        allowed_hosts=[*DEFAULT_HOSTS, *args.allowed_hosts],
                        token=os.environ.get("MPIPLAT_DASHBOARD_TOKEN") if args.auth == "kubeconfig" else None)
    try:
        settings.check()
    except ValueError as err:
        raise MpiplatError(str(err)) from err
    serve(settings, args.host, args.port)
    return 0


def _demo(args) -> int:
    from mpiplat.localcluster import demo

    return demo.run(_kube(args))


# ---------------------------------------------------------------- parser

def _cluster_access(p: argparse.ArgumentParser, local_help: str) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: the current context)")
    p.add_argument("--local", action="store_true", help=local_help)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mpiplat", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"mpiplat {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("cluster", help="the local reference cluster")
    csub = c.add_subparsers(dest="action", required=True)
    b = csub.add_parser("build", help="build the pinned upstream binaries into the cache")
    b.add_argument("--only", action="append", metavar="COMPONENT",
                   help="build only this component (repeatable)")
    b.add_argument("--json", action="store_true", help="print what was built as JSON")
    b.add_argument("--previous", action="store_true",
                   help="build the previous pins (versions.yml `previous`: where playbooks/upgrade.yml starts)")
    b.add_argument("--kubernetes", metavar="VERSION",
                   help="Kubernetes at this version or minor of versions.yml's kubernetes.matrix (e.g. 1.36)")
    b.set_defaults(func=_cluster_build)
    im = csub.add_parser("images", help="build the real node's images (pause, CoreDNS, MPI bases) into the cache")
    im.add_argument("--only", action="append", metavar="NAME",
                    help="build only this image (repeatable): pause, coredns, a controller (kueue, jobset, trainer, "
                         "mpi-operator, or NAME-previous for its previous pin), openmpi, mpich, intel, dashboard")
    im.add_argument("--json", action="store_true", help="print the images (cache paths, built or cached) as JSON")
    im.add_argument("--load", action="store_true",
                    help="also import them into the running cluster's real node (MPIPLAT_CLUSTER selects the "
                         "cluster), e.g. the NAME-previous controller images before the previous pins' install")
    im.add_argument("--image-registry", metavar="REGISTRY",
                    help="with --load: also name the controller images as this mirror does (as `up` does)")
    im.set_defaults(func=_cluster_images)
    u = csub.add_parser("up", help="start the cluster (idempotent)")
    u.add_argument("--node-pools", metavar="FILE", help="node-pool spec (default: the packaged nodepools.yml)")
    u.add_argument("--bare", action="store_true",
                   help="control plane and nodes only: no upstream CRDs or controllers (for Helm installs)")
    u.add_argument("--no-real-node", action="store_true",
                   help="KWOK nodes only: no real node real-0 (no pods run for real)")
    u.add_argument("--image-registry", metavar="REGISTRY",
                   help="also name the controller images on the real node as this mirror does "
                        "(the installer's mpiplat_image_registry, e.g. mirror.example.com/mpiplat)")
    u.add_argument("--kubernetes", metavar="VERSION",
                   help="run Kubernetes at this version or minor of versions.yml's kubernetes.matrix (e.g. 1.36; "
                        "default: the version the cluster runs, else the pin); built once a version")
    u.set_defaults(func=_cluster)
    ug = csub.add_parser("upgrade", help="upgrade the running cluster's Kubernetes one minor up, as kubeadm orders "
                                         "it: the control plane, then the real node's kubelet and kube-proxy")
    ug.add_argument("--kubernetes", metavar="VERSION", required=True,
                    help="a version or minor of versions.yml's kubernetes.matrix, one minor above the running one")
    ug.set_defaults(func=_cluster)
    csub.add_parser("down", help="stop everything and remove the cluster (idempotent)").set_defaults(
        func=_cluster)
    s = csub.add_parser("status", help="health of each component")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cluster)
    e = csub.add_parser("env", help="print the KUBECONFIG, the helm binary and the cluster's Prometheus to export")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_cluster)

    bd = sub.add_parser("bundle", help="build an offline bundle of the pinned charts and manifests")
    bd.add_argument("dir", help="new or empty directory")
    bd.add_argument("--verify", action="store_true", help="check an existing bundle against SHA256SUMS")
    bd.add_argument("--checksums-only", action="store_true",
                    help="rewrite SHA256SUMS of an existing bundle (after adding a chart by hand)")
    bd.add_argument("--json", action="store_true", help="with --verify: print the result as JSON")
    bd.add_argument("--previous", action="store_true",
                    help="the previous pins' charts and manifests (versions.yml `previous`), for an upgrade's start")
    bd.set_defaults(func=_bundle)

    from mpiplat.conformance.catalog import AI_CONFORMANCE

    cf = sub.add_parser("conformance", help="the conformance suite")
    cfsub = cf.add_subparsers(dest="action", required=True)
    cr = cfsub.add_parser("run", help="run the suite against a cluster and write its reports")
    _cluster_access(cr, "test the local reference cluster (started if it is not up)")
    cr.add_argument("--profile", default="simulated", choices=["simulated", "cluster", "gpu", "preflight", "upgrade"])
    cr.add_argument("--phase", choices=["before", "after"],
                    help="profile upgrade: before the stack's upgrade (start and record jobs) or after it (judge them)")
    cr.add_argument("--settings", help="settings file (default: the packaged local.yml)")
    cr.add_argument("--only", help="comma-separated requirement ids")
    cr.add_argument("--keep", action="store_true", help="keep the run's namespaces")
    cr.add_argument("--fail-fast-rows", action="store_true",
                    help="once a test of a requirement failed, skip its other tests (the row is failed either way)")
    cr.add_argument("--strict", action="store_true",
                    help="exit 1 when a row shows less than the profile expects: skipped, partial, or passed "
                         "without real pods where the catalog runs it on real pods (e.g. the real nodes cordoned)")
    cr.add_argument("--report-dir", default="reports/conformance")
    cr.add_argument("--ai-checklist", choices=sorted(AI_CONFORMANCE["checklists"]), default=AI_CONFORMANCE["checklist"],
                    help="the Kubernetes AI Conformance checklist ai-conformance.yaml answers (default the newest)")
    cr.add_argument("--capability", action="append", default=[], metavar="NAME=BOOL")
    cr.add_argument("--json", action="store_true", help="print results.json on stdout (progress goes to stderr)")
    cr.set_defaults(func=_conformance)

    dg = sub.add_parser("diagnose", help="root cause and remedy for a job")
    dg.add_argument("job", metavar="NAMESPACE/JOB")
    _cluster_access(dg, "use the local reference cluster (started if it is not up)")
    dg.add_argument("--gpu-resource", default="nvidia.com/gpu")
    dg.add_argument("--json", action="store_true")
    dg.set_defaults(func=_diagnose, parser=dg)

    from mpiplat import jobcli

    jobcli.add_parser(sub)

    db = sub.add_parser("dashboard", help="serve the MPIJobs dashboard (list, create, details, logs, queues, reports)")
    _cluster_access(db, "use the local reference cluster (started if it is not up)")
    db.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    db.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    db.add_argument("--auth", choices=["kubeconfig", "proxy"], default="kubeconfig",
                    help="kubeconfig: act as the kubeconfig's user (a laptop); proxy: act as each request's user, "
                         "named by the identity-passing proxy in front (headers below), through impersonation")
    db.add_argument("--user-header", default="X-Forwarded-User", help="with --auth proxy: the user's header")
    db.add_argument("--groups-header", default="X-Forwarded-Groups",
                    help="with --auth proxy: the user's groups' header (comma-separated)")
    db.add_argument("--namespace", action="append", dest="namespaces", metavar="NS",
                    help="offer this namespace (repeatable; default: those the user may list MPIJobs in)")
    db.add_argument("--report", action="append", default=[], metavar="DIR_OR_TARBALL",
                    help="a conformance report folder or handover tarball to browse (repeatable)")
    db.add_argument("--prometheus", metavar="URL",
                    help="the cluster's Prometheus, for the Metrics tab (with --local: the local cluster's)")
    db.add_argument("--prometheus-token-file", metavar="FILE", help="a bearer token for --prometheus")
    db.add_argument("--allowed-host", action="append", default=[], dest="allowed_hosts", metavar="HOST",
                    help="also answer requests for this Host (repeatable; a name, or *.domain): 127.0.0.1, localhost "
                         "and --host are answered, any other Host is refused (DNS rebinding)")
    db.set_defaults(func=_dashboard)

    dm = sub.add_parser("demo", help="run an MPIJob and narrate it (on the local cluster: --local)")
    _cluster_access(dm, "use the local reference cluster (started if it is not up)")
    dm.set_defaults(func=_demo)
    return p


def _api_error(err: ApiException) -> str:
    try:
        message = json.loads(err.body or "{}").get("message", "")
    except ValueError:
        message = ""
    return f"the API server answered {err.status} {err.reason}: {message or err.body or ''}".strip()


def main(argv: list[str] | None = None) -> int:
    from mpiplat.jobcli import split_program

    argv, program = split_program(sys.argv[1:] if argv is None else list(argv))
    args = parser().parse_args(argv)
    args.program = program
    try:
        return args.func(args)
    except MpiplatError as err:
        error = str(err)
    except ApiException as err:
        error = _api_error(err)
    except HTTPError as err:  # no answer from the API server
        error = f"cannot reach the API server: {err}"
    except OSError as err:  # e.g. a report directory or cache that cannot be written
        error = f"{err.strerror or err}: {err.filename}" if err.filename else str(err)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    lines = error.strip().splitlines() or ["unknown error"]
    print(f"error: {lines[0]}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
