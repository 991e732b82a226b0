"""The `mpiplat` command."""

from __future__ import annotations

import argparse
import json
import sys


def _cluster_build(args) -> int:
    from localcluster.build import BuildError, build

    try:
        build(only=args.only)
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def _cluster(args) -> int:
    from localcluster import cluster

    try:
        if args.action == "up":
            cluster.up(node_pools=args.node_pools, bare=args.bare)
        elif args.action == "down":
            cluster.down()
        elif args.action == "status":
            report = cluster.status()
            if args.json:
                print(json.dumps(report, indent=2))
            else:
                cluster.print_status(report)
            return 0 if report["healthy"] else 1
        elif args.action == "env":
            from localcluster.build import binary

            print(f"export KUBECONFIG={cluster.kubeconfig_path()}")
            print(f"export MPIPLAT_HELM={binary('helm')}")
    except cluster.ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def _bundle(args) -> int:
    from pathlib import Path

    from mpiplat import bundle

    try:
        if args.checksums_only:
            bundle.write_checksums(Path(args.dir))
            print(f"rewrote {Path(args.dir) / 'SHA256SUMS'}")
        elif args.verify:
            bad = bundle.verify(Path(args.dir))
            print("bundle intact" if not bad else "checksum mismatch: " + ", ".join(bad))
            return 1 if bad else 0
        else:
            bundle.make(Path(args.dir))
    except (bundle.BundleError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def _conformance(args) -> int:
    from mpiplat.versions import REPO_ROOT

    argv = [str(REPO_ROOT / "conformance" / "suite"), "-p", "no:cacheprovider",
            "-q", f"--profile={args.profile}", f"--report-dir={args.report_dir}", "--rootdir", str(REPO_ROOT)]
    for flag in ("kubeconfig", "context", "settings", "only"):
        if getattr(args, flag):
            argv.append(f"--{flag}={getattr(args, flag)}")
    argv += ["--keep"] if args.keep else []
    argv += [f"--capability={c}" for c in args.capability]
    import pytest

    # In this process, so Ctrl-C and SIGTERM reach the suite's own cleanup of its namespaces.
    return int(pytest.main(argv))


def _diagnose(args) -> int:
    from localcluster import cluster
    from mpiplat.diagnose import diagnose
    from mpiplat.kube import Kube

    namespace, _, name = args.job.partition("/")
    if not name:
        print(f"error: expected NAMESPACE/JOB, got {args.job!r}", file=sys.stderr)
        return 2
    kube = Kube(args.kubeconfig or str(cluster.kubeconfig_path()), args.context)
    found = diagnose(kube, namespace, name, args.gpu_resource)
    print(json.dumps(found.__dict__, indent=2) if args.json else found)
    return 0


def _demo(args) -> int:
    from localcluster import demo

    return demo.run()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mpiplat", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("cluster", help="the local reference cluster")
    csub = c.add_subparsers(dest="action", required=True)
    b = csub.add_parser("build", help="build the pinned upstream binaries into the cache")
    b.add_argument("--only", action="append", metavar="COMPONENT",
                   help="build only this component (repeatable)")
    b.set_defaults(func=_cluster_build)
    u = csub.add_parser("up", help="start the cluster (idempotent)")
    u.add_argument("--node-pools", metavar="FILE", help="node-pool spec (default: localcluster/nodepools.yml)")
    u.add_argument("--bare", action="store_true",
                   help="control plane and nodes only: no upstream CRDs or controllers (for Helm installs)")
    u.set_defaults(func=_cluster)
    csub.add_parser("down", help="stop everything and remove the cluster (idempotent)").set_defaults(
        func=_cluster)
    s = csub.add_parser("status", help="health of each component")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cluster)
    csub.add_parser("env", help="print the KUBECONFIG (and the helm binary) to export").set_defaults(func=_cluster)

    bd = sub.add_parser("bundle", help="build an offline bundle of the pinned charts and manifests")
    bd.add_argument("dir", help="new or empty directory")
    bd.add_argument("--verify", action="store_true", help="check an existing bundle against SHA256SUMS")
    bd.add_argument("--checksums-only", action="store_true",
                    help="rewrite SHA256SUMS of an existing bundle (after adding a chart by hand)")
    bd.set_defaults(func=_bundle)

    cf = sub.add_parser("conformance", help="the conformance suite")
    cfsub = cf.add_subparsers(dest="action", required=True)
    cr = cfsub.add_parser("run", help="run the suite against a cluster and write its reports")
    cr.add_argument("--kubeconfig", help="cluster under test (default: the local reference cluster)")
    cr.add_argument("--context")
    cr.add_argument("--profile", default="simulated", choices=["simulated", "cluster", "gpu", "preflight"])
    cr.add_argument("--settings", help="settings file (default conformance/settings/local.yml)")
    cr.add_argument("--only", help="comma-separated requirement ids")
    cr.add_argument("--keep", action="store_true", help="keep the run's namespaces")
    cr.add_argument("--report-dir", default="reports/conformance")
    cr.add_argument("--capability", action="append", default=[], metavar="NAME=BOOL")
    cr.set_defaults(func=_conformance)

    dg = sub.add_parser("diagnose", help="root cause and remedy for a job")
    dg.add_argument("job", metavar="NAMESPACE/JOB")
    dg.add_argument("--kubeconfig")
    dg.add_argument("--context")
    dg.add_argument("--gpu-resource", default="nvidia.com/gpu")
    dg.add_argument("--json", action="store_true")
    dg.set_defaults(func=_diagnose)

    sub.add_parser("demo", help="run an MPIJob on the local reference cluster").set_defaults(func=_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
