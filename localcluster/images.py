"""Container images for the local cluster's real node, built here without Docker or a registry.

Each image has one recipe in RECIPES and a fixed local name (mpiplat.local/<name>:<tag>):

  pause     the pod sandbox: localcluster/images/pause.c compiled with `gcc -static -Os`, as /pause
  coredns   the cluster DNS: the pinned CoreDNS binary from `mpiplat cluster build`, as /coredns
  kueue, jobset, trainer, mpi-operator
            the controllers as their charts (mpi-operator: its manifest) run them: the pinned binary
            as /manager (mpi-operator: /opt/mpi-operator), user 65532, named by the chart's image
            reference (versions.yml `images`)
  openmpi   MPI base images that follow kubeflow mpi-operator's base-image contract (sshd on port
  mpich     2222 for the launcher's mpirun, the user mpiuser with uid 1000 and its non-root sshd
  intel     config ~/.sshd_config, a launcher that waits for its DNS names, python3 + numpy + mpi4py on
            that image's MPI), and that run as any UID with group 0, as OpenShift's restricted-v2 runs
            them (see UID_ENTRYPOINT)

The MPI images are Debian (mmdebstrap --variant=apt, the host's release) plus the recipe's
packages, files and hooks; a build ends with checks in the new root (mpi4py loads that MPI and two
ranks allreduce under mpirun; sshd accepts both configs; as an arbitrary UID with group 0 and no
passwd entry, the user resolves, ssh logs in to a non-root sshd and two ranks allreduce), so a
broken image never reaches the cache.
Each image is written as an OCI image-layout tar (one gzipped layer) whose index names the image
(`io.containerd.image.name`), so `ctr images import` gives it its name.

The CLI builds them (`mpiplat cluster images`); import_into() loads them into a running containerd.

Cache, outside the repo (see mpiplat.versions.cache_dir):
  images/<name>-<key>.tar   key: hash of the recipe and of the package versions it installs
                            (see cache_key); written to a temporary name and renamed when whole
  images/apt-versions.json  the Debian versions per package set, reused while the host's apt
                            lists, dpkg status and apt config are unchanged
  logs/image-<name>.log     the last build's output
"""

from __future__ import annotations

import configparser
import fcntl
import gzip
import hashlib
import io
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import BinaryIO

from mpiplat.errors import MpiplatError
from mpiplat.localcluster.build import binary as binary_path
from mpiplat.localcluster.progress import progress
from mpiplat.versions import cache_dir, mirrored
from mpiplat.versions import load as load_versions

RETRY = "mpiplat cluster images"
# Bumped when what a build writes changes without a recipe change (layout, layer filter, checks).
FORMAT = 1
# The Debian release the MPI images are built from: the host's own (its apt candidate versions
# key the cache), whose python3 is PYTHON and whose glibc is GLIBC (for picking PyPI wheels).
SUITE = "bookworm"
PYTHON = "3.11"
GLIBC = (2, 36)

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
NAME_ANNOTATION = "io.containerd.image.name"
REF_ANNOTATION = "org.opencontainers.image.ref.name"
# Labels set on import: the CRI never garbage-collects a pinned image (these cannot be pulled again).
IMPORT_LABELS = {"io.cri-containerd.pinned": "pinned", "io.cri-containerd.image": "managed"}


class ImageError(MpiplatError, RuntimeError):
    """An image could not be built or imported; the message names it, its log and the retry command."""


# ---------------------------------------------------------------- recipes

@dataclass(frozen=True)
class Recipe:
    """How one image is built. Everything here is part of the image's cache key."""

    name: str  # short name: --only NAME, the cache file and the log
    image: str  # the fixed local image name
    kind: str  # "static": one binary compiled from `source`; "debian": mmdebstrap + hooks;
    #            "binary": one pinned binary built by `mpiplat cluster build`, named `source`
    source: str = ""  # static: the C source (package data, localcluster/<source>); binary: its name
    packages: tuple[str, ...] = ()  # Debian packages in the image
    build_packages: tuple[str, ...] = ()  # installed for the build only, purged at its end
    pypi: dict[str, str] = field(default_factory=dict)  # exact PyPI pins, installed with pip as root
    files: dict[str, str] = field(default_factory=dict)  # path in the image -> content (root, 0644)
    hooks: tuple[str, ...] = ()  # sh commands after the files are in; $1 is the new root
    checks: tuple[str, ...] = ()  # sh commands that must succeed in the finished root
    dirs: tuple[str, ...] = ()  # empty directories added to the layer (mmdebstrap empties /run)
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = ""
    user: str = ""
    # The mpiplat package of this checkout (a wheel built here, unpacked as pip would) as one more layer over the
    # recipe's image, which is cached without it: a change to the package rebuilds that layer in seconds.
    checkout: bool = False
    on_demand: bool = False  # built only when named (--only, or a test that deploys it), not by `up`
    previous: bool = False  # binary: the component's previous pin's (versions.yml `previous`), for an upgrade

    def material(self) -> dict:
        """What the cache key hashes for the recipe itself (the static source's text included); not what does not
        change its image (`checkout` adds a layer of its own key, key_of)."""
        data = asdict(self)
        del data["checkout"], data["on_demand"], data["previous"]  # previous: in the component's version
        if self.kind == "binary":
            data["component"] = _component_of(self.source, self.previous)
        elif self.source:
            data["source_text"] = source_path(self).read_text()
        return data


def _binary_of(r: Recipe) -> Path:
    """Where `mpiplat cluster build` (with --previous for a previous pin's recipe) puts a binary recipe's binary."""
    return binary_path(r.source, load_versions(previous=r.previous))


def _component_of(binary: str, previous: bool = False) -> str:
    """The pinned component (name@version) that provides a built binary."""
    comp = next(c for c in load_versions(previous=previous).values() if binary in c.binaries)
    return f"{comp.name}@{comp.version}"


CHECKOUT = Path(__file__).resolve().parents[1]  # the repository, where the package is installed editable
CHECKOUT_PARTS = ("pyproject.toml", "setup.py", "README.md", "src/mpiplat", "conformance", "localcluster")


def _checkout_files() -> list[str]:
    """What the checkout's wheel is built from, as git lists it: tracked files, and untracked ones not ignored (a
    clean clone and a work tree of one commit agree; build outputs and caches are not in it)."""
    if not (CHECKOUT / "pyproject.toml").is_file():
        raise ImageError(f"an image of the mpiplat package is built from its checkout; {CHECKOUT} is none")
    try:
        listed = subprocess.run(["git", "-C", str(CHECKOUT), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard", "--", *CHECKOUT_PARTS],
                                capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError) as err:
        raise ImageError(f"an image of the mpiplat package lists its checkout's files with git: {err}") from err
    return sorted(rel for rel in set(listed) if rel and (CHECKOUT / rel).is_file())  # not one deleted, still tracked


def _checkout_hash() -> str:
    digest = hashlib.sha256()
    for rel in _checkout_files():
        digest.update(rel.encode() + b"\0" + (CHECKOUT / rel).read_bytes() + b"\0")
    return digest.hexdigest()


def source_path(recipe: Recipe) -> Path:
    return Path(str(resources.files("mpiplat.localcluster") / recipe.source))


def _in_root(*argv: str) -> str:
    """A hook line that runs argv in the new root."""
    return 'chroot "$1" ' + shlex.join(argv)


def _controller_recipe(component: str, binary: str, entrypoint: str, previous: bool = False) -> Recipe:
    """A pinned controller binary as the image its chart (or manifest) runs: named by the component's
    first `images` entry in versions.yml (the chart's reference, so the chart runs unchanged with its
    IfNotPresent pull policy), the binary where the chart's command expects it, and the distroless
    images' numeric non-root user (the charts ask runAsNonRoot with no runAsUser). With `previous`, the
    previous pin's (NAME-previous, built on demand: an upgrade's starting point)."""
    comp = load_versions(previous=previous)[component]
    return Recipe(name=component + ("-previous" if previous else ""), image=comp.expand(comp.extra["images"][0]),
                  kind="binary", source=binary, entrypoint=(entrypoint,), user=CONTROLLER_USER,
                  on_demand=previous, previous=previous)


CONTROLLER_USER = "65532:65532"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The image's default user (a numeric USER, so that runAsNonRoot holds without a runAsUser); its group is 0.
MPIUSER, MPIUSER_UID = "mpiuser", 1000
HOME = f"/home/{MPIUSER}"
# A UID as OpenShift assigns them (the first of a namespace's range), for the build's checks.
ARBITRARY_UID = 1000680000
# The MPI images' entrypoint. Pods run ARGS through it (the job builder sets args, not command). OpenShift's
# restricted-v2 (and Pod Security `restricted` with any runAsUser) runs them as a UID the image does not know,
# with group 0; ssh, sshd and Hydra refuse a user without a passwd entry. So a UID without one takes over
# mpiuser's entry (name, home), in /etc/passwd, which group 0 may write; HOME follows (the runtime set "/").
UID_ENTRYPOINT_PATH = "/usr/local/bin/uid-entrypoint"
LAUNCHER_DNS_WAIT_S = 45  # beyond kubeadm's CoreDNS negative TTL (30 s): a name asked too early
UID_ENTRYPOINT = f"""\
#!/bin/sh
# mpiplat: run as any UID with group 0 (OpenShift restricted-v2). See the MPI image contract in docs/sdk.md.
if ! whoami >/dev/null 2>&1; then
    entry="{MPIUSER}:x:$(id -u):$(id -g):MPI user:{HOME}:/bin/bash"
    others=$(grep -v '^{MPIUSER}:' /etc/passwd)
    printf '%s\\n%s\\n' "$others" "$entry" > /etc/passwd \\
        || echo "uid-entrypoint: uid $(id -u) has no passwd entry and cannot add one (is its group 0?)" >&2
    export HOME={HOME}
fi
# As mpi-operator's base images do: a launcher waits until each worker's name resolves in the cluster DNS,
# since a pod's record follows its readiness (kubeflow/mpi-operator#443), and its own, which Hydra's proxies
# (Intel MPI, MPICH) call back unless told an interface (Open MPI's daemons call back by address); then it
# goes on. It says how long it waited, when it did; it does not wait on a cluster DNS that answers nothing.
if [ "$K_MPI_JOB_ROLE" = launcher ]; then
    own=$(hostname -f)
    [ -z "$OMPI_MCA_orte_keep_fqdn_hostnames$I_MPI_HYDRA_IFACE$HYDRA_IFACE" ] || own=
    tries=0
    getent -s dns hosts kubernetes.default.svc >/dev/null \
        || echo "uid-entrypoint: the cluster DNS does not answer (kubernetes.default.svc does not resolve)" >&2
    for host in $(sed 's/[: ].*//' /etc/mpi/hostfile 2>/dev/null) $own; do
        until getent -s dns hosts "$host" >/dev/null || [ $tries -ge $((5 * {LAUNCHER_DNS_WAIT_S})) ] \
                || ! getent -s dns hosts kubernetes.default.svc >/dev/null; do
            tries=$((tries + 1))
            sleep 0.2
        done
        getent -s dns hosts "$host" >/dev/null || echo "uid-entrypoint: $host does not resolve" >&2
    done
    [ $tries -eq 0 ] || echo "uid-entrypoint: waited $((tries / 5)).$((tries % 5 * 2)) s for the DNS names" >&2
fi
exec "$@"
"""

# sshd and ssh settings go in drop-ins that Debian's /etc/ssh/sshd_config and ssh_config include
# before their own lines (the first value of a keyword wins in both).
SSHD_DROPIN = f"""\
# mpiplat: sshd for MPI workers (mpi-operator base-image contract).
Port 2222
# The SSH keys are mounted from a Secret: skip the ownership and mode checks on them.
StrictModes no
# No host keys are baked into the image. A worker's sshd uses the mounted key of the user it runs
# as (mpi-operator mounts it at sshAuthMountPath); a root sshd without one can run `ssh-keygen -A`.
HostKey {HOME}/.ssh/id_rsa
HostKey /root/.ssh/id_rsa
HostKey /etc/ssh/ssh_host_ed25519_key
# Public-key logins without PAM, so that sshd also works as a non-root user in a container.
UsePAM no
"""
SSH_DROPIN = """\
# mpiplat: the MPI launcher's ssh to the workers (mpi-operator base-image contract).
Host *
    Port 2222
    # Workers are new pods with keys from a Secret: no known_hosts to check or write.
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
"""
# The non-root sshd config of the mpi-operator contract (`sshd -f ~/.sshd_config`), owned by mpiuser.
USER_SSHD_CONFIG = f"""\
PidFile {HOME}/sshd.pid
HostKey {HOME}/.ssh/id_rsa
StrictModes no
Port 2222
"""
BASE_PACKAGES = ("openssh-server", "openssh-client", "python3", "python3-numpy")
BASE_FILES = {
    UID_ENTRYPOINT_PATH: UID_ENTRYPOINT,
    "/etc/ssh/sshd_config.d/mpiplat.conf": SSHD_DROPIN,
    "/etc/ssh/ssh_config.d/mpiplat.conf": SSH_DROPIN,
    f"{HOME}/.sshd_config": USER_SSHD_CONFIG,
    # The runtime mounts the pod's own /etc/hosts, /etc/hostname and /etc/resolv.conf; without one
    # (`ctr run`), localhost still resolves.
    "/etc/hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
}
BASE_HOOKS = (  # after the files are in: the home directory exists already
    _in_root("useradd", "--no-create-home", "--home-dir", HOME, "--uid", str(MPIUSER_UID), "--gid", "0",
             "--shell", "/bin/bash", MPIUSER),
    # "*" rather than useradd's "!": sshd without PAM refuses a login to a locked account.
    _in_root("usermod", "--password", "*", MPIUSER),
    # ~/.ssh is where mpi-operator mounts the SSH Secret (sshAuthMountPath). Group 0 gets the owner's rights on
    # the home and may complete /etc/passwd, as any UID runs with group 0 (UID_ENTRYPOINT).
    f'mkdir -p "$1{HOME}/.ssh" && cp -rn "$1/etc/skel/." "$1{HOME}/" && chroot "$1" chown -R {MPIUSER}:0 {HOME} '
    f'&& chmod -R g=u "$1{HOME}" && chmod g+w "$1/etc/passwd" && chmod 0755 "$1{UID_ENTRYPOINT_PATH}"',
    # No shared host keys in the image (openssh-server's postinst generated some).
    'rm -f "$1"/etc/ssh/ssh_host_*',
    # mmdebstrap leaves the build host's copies.
    'rm -f "$1/etc/hostname" "$1/etc/resolv.conf"',
)
ALLREDUCE = ("from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; "
             "s = c.allreduce(c.Get_rank() + 1); y = np.zeros(4); c.Allreduce(np.ones(4), y); "
             "assert c.Get_size() == 2 and s == 3 and (y == 2).all(), (c.Get_size(), s, y); "
             "print('allreduce ok on rank', c.Get_rank())")


def _mpi_checks(library: str, mpirun: tuple[str, ...]) -> tuple[str, ...]:
    probe = ("import numpy; from mpi4py import MPI; v = MPI.Get_library_version().strip(); "
             f"print(v.splitlines()[0]); assert v.startswith({library!r}), v")
    key = f"{HOME}/.ssh/id_rsa"
    sshd = (f"mkdir -p /run/sshd && ssh-keygen -q -t ed25519 -N '' -f {key} "
            f"&& sshd -t && sshd -t -f {HOME}/.sshd_config && rm -f {key} {key}.pub")
    ssh = ("ssh -G worker-0 | grep -qx 'port 2222' && ssh -G worker-0 | grep -qx 'stricthostkeychecking false' "
           "&& ssh -G worker-0 | grep -qx 'userknownhostsfile /dev/null'")
    return (
        _in_root("python3", "-c", probe),
        _in_root(*mpirun, "python3", "-c", ALLREDUCE),
        _in_root("sh", "-ec", sshd),
        _in_root("sh", "-ec", ssh),
        _in_root("id", MPIUSER),
        _in_root("hostname"),
        _as_arbitrary_uid(mpirun),
    )


# Run in the image's root as ARBITRARY_UID (group 0, no passwd entry) through the entrypoint, by _as_arbitrary_uid.
ARBITRARY_UID_CHECK = f"""\
test "$(id -u)" = {ARBITRARY_UID} && test "$(whoami)" = {MPIUSER} && test "$HOME" = {HOME}
ssh-keygen -q -t ed25519 -N '' -f {HOME}/.ssh/id_rsa && cp {HOME}/.ssh/id_rsa.pub {HOME}/.ssh/authorized_keys
port=$((20000 + $$ % 20000))
/usr/sbin/sshd -f {HOME}/.sshd_config -p "$port" -o ListenAddress=127.0.0.1
trap 'kill "$(cat {HOME}/sshd.pid)"' EXIT
who=$(ssh -p "$port" -o BatchMode=yes 127.0.0.1 'echo "$(id -u) $(whoami) $HOME"')
test "$who" = "{ARBITRARY_UID} {MPIUSER} {HOME}" || {{ echo "ssh login gave: $who" >&2; exit 1; }}
"""


def _as_arbitrary_uid(mpirun: tuple[str, ...]) -> str:
    """A check hook: through the entrypoint, as ARBITRARY_UID with group 0 and no passwd entry, the user
    resolves to mpiuser with its home, a non-root sshd takes an ssh login by key, and two ranks allreduce.
    The root's /etc/passwd and home are put back as they were, whatever the outcome."""
    script = ARBITRARY_UID_CHECK + shlex.join([*mpirun, "python3", "-c", ALLREDUCE])
    run = shlex.join(["chroot", f"--userspec={ARBITRARY_UID}:0", "--groups=", "ROOT", UID_ENTRYPOINT_PATH,
                      "sh", "-ec", script]).replace(" ROOT ", ' "$1" ')
    return (f'cp -a "$1/etc/passwd" "$1/etc/passwd.check" && cp -a "$1{HOME}" "$1{HOME}.check"; rc=0; '
            f'{run} || rc=$?; cat "$1/etc/passwd.check" > "$1/etc/passwd"; rm -rf "$1/etc/passwd.check" "$1{HOME}" '
            f'&& mv "$1{HOME}.check" "$1{HOME}"; exit $rc')


def _mpi_recipe(name: str, library: str, mpirun: tuple[str, ...], packages: tuple[str, ...] = (),
                pypi: dict[str, str] | None = None, files: dict[str, str] | None = None,
                hooks: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Recipe:
    return Recipe(
        name=name, image=f"mpiplat.local/{name}:1", kind="debian",
        packages=(*BASE_PACKAGES, *packages),
        build_packages=("python3-pip",) if pypi else (),
        pypi=dict(pypi or {}),
        files={**BASE_FILES, **(files or {})},
        hooks=(*BASE_HOOKS, *hooks),
        checks=_mpi_checks(library, mpirun),
        dirs=("/run/sshd",),  # sshd's privilege separation directory (/var/run/sshd)
        env={"PATH": PATH, **(env or {})},
        entrypoint=(UID_ENTRYPOINT_PATH,),
        cmd=("/bin/bash",),
        workdir=HOME,
        user=f"{MPIUSER_UID}:0",
    )


MPI4PY = "4.1.2"  # the same pin as conformance/workloads/mpienv.py
# The dashboard's run-time dependencies (starlette, uvicorn, python-multipart, kubernetes, jinja2, pyyaml, as
# pyproject.toml allows them) with everything they need, resolved for the image's Python.
DASHBOARD_PYPI = {
    "anyio": "4.16.0", "certifi": "2026.10.19.post1", "cffi": "2.1.1", "charset-normalizer": "3.5.3",
    "click": "8.5.1", "cryptography": "50.0.2", "durationpy": "0.11", "google-auth": "2.63.0", "h11": "0.16.0",
    "idna": "3.20", "jinja2": "3.1.6", "kubernetes": "34.1.0", "markupsafe": "3.0.4", "oauthlib": "4.0.1",
    "pyasn1": "0.6.5", "pyasn1-modules": "0.4.2", "pycparser": "3.12", "python-dateutil": "4.0.0",
    "python-multipart": "0.0.34", "pyyaml": "6.0.4", "requests": "2.34.2", "requests-oauthlib": "2.0.0",
    "six": "1.17.0", "starlette": "1.10.0", "typing-extensions": "4.16.0", "tzdata": "2026.6", "urllib3": "2.3.0",
    "uvicorn": "0.54.0", "websocket-client": "1.9.2",
}
# (component, binary, entrypoint) of each controller image: where its chart's command expects the binary.
CONTROLLERS = (("kueue", "kueue", "/manager"), ("jobset", "jobset", "/manager"),
               ("trainer", "trainer-controller-manager", "/manager"),
               ("mpi-operator", "mpi-operator", "/opt/mpi-operator"))
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe(name="pause", image="mpiplat.local/pause:1", kind="static", source="images/pause.c",
           entrypoint=("/pause",), user="65535:65535"),
    # The cluster's DNS (a pod behind the kube-dns Service): the pinned CoreDNS, a static Go binary.
    Recipe(name="coredns", image=f"mpiplat.local/coredns:{load_versions()['coredns'].version}", kind="binary",
           source="coredns", entrypoint=("/coredns",)),
    # The controllers the upstream charts and manifests install, from the same binaries the host runs; and the
    # previous pins' (on demand: an upgrade's starting point).
    *(_controller_recipe(*c) for c in CONTROLLERS),
    *(_controller_recipe(*c, previous=True) for c in CONTROLLERS),
    # Debian's Open MPI and its python3-mpi4py (built against it).
    _mpi_recipe(
        "openmpi", "Open MPI", ("mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"),
        packages=("openmpi-bin", "python3-mpi4py"),
        # Containers lack CAP_SYS_PTRACE, which Open MPI's single-copy shared memory (CMA) needs.
        hooks=("printf '%s\\n' '# mpiplat: containers lack CAP_SYS_PTRACE for CMA single copy' "
               "'btl_vader_single_copy_mechanism = none' >> \"$1/etc/openmpi/openmpi-mca-params.conf\"",),
    ),
    # Debian's MPICH with PyPI's mpi4py wheel (Debian's python3-mpi4py is built against Open MPI).
    # The wheel carries an MPICH-ABI and an Open MPI-ABI module and picks one by the libmpi it
    # finds: Debian names MPICH's library libmpich.so.12, hence the libmpi.so.12 link.
    _mpi_recipe(
        "mpich", "MPICH", ("mpirun", "-n", "2"),
        packages=("mpich",),
        pypi={"mpi4py": MPI4PY},
        hooks=('lib=$(dirname "$1"/usr/lib/*/libmpich.so.12) && ln -s libmpich.so.12 "$lib/libmpi.so.12"',),
    ),
    # Intel MPI from PyPI's impi-rt (into /usr/local: mpirun, mpiexec.hydra and hydra_pmi_proxy
    # on every PATH, libmpi.so.12 on the loader's path), with the same mpi4py wheel.
    # impi-rt 2021.19.0 needs libfabric>=2.6, which PyPI lacks; 2021.18.1 bundles its libfabric.
    _mpi_recipe(
        "intel", "Intel(R) MPI", ("env", "I_MPI_FABRICS=shm", "mpirun", "-n", "2"),
        pypi={"impi-rt": "2021.18.1", "mpi4py": MPI4PY},
        env={"FI_PROVIDER_PATH": "/usr/local/lib"},
    ),
    # The dashboard role's images (on demand: only its test deploys them). The dashboard: Debian's python3,
    # the dashboard's PyPI dependencies (pyproject.toml's, resolved for Python 3.11) and this checkout's mpiplat.
    Recipe(name="dashboard", image="mpiplat.local/dashboard:1", kind="debian", packages=("python3",),
           build_packages=("python3-pip",), pypi=DASHBOARD_PYPI, checkout=True, on_demand=True,
           checks=('chroot "$1" python3 -c "import jinja2, kubernetes, multipart, starlette, uvicorn, yaml"',),
           env={"PATH": PATH, "HOME": "/tmp"}, entrypoint=("mpiplat", "dashboard"), user="1001:0"),
    # Its identity-passing proxy for clusters without one: Debian's nginx (basic auth, then X-Forwarded-User and
    # -Groups to the dashboard); the role's ConfigMap holds its configuration.
    Recipe(name="dashboard-proxy", image="mpiplat.local/dashboard-proxy:1", kind="debian", packages=("nginx",),
           on_demand=True, checks=('chroot "$1" nginx -v',), env={"PATH": PATH},
           entrypoint=("nginx", "-e", "stderr", "-g", "daemon off;", "-c", "/etc/mpiplat-proxy/nginx.conf"),
           user="1001:0"),
)}
PAUSE_IMAGE = RECIPES["pause"].image
COREDNS_IMAGE = RECIPES["coredns"].image
# Implementation (mpiplat.jobs.IMPLEMENTATIONS) -> the local image that runs it.
LOCAL_IMAGES: dict[str, str] = {
    "OpenMPI": RECIPES["openmpi"].image,
    "Intel": RECIPES["intel"].image,
    "MPICH": RECIPES["mpich"].image,
}
HOST_TOOLS = {"static": ("gcc", "libc6-dev"), "debian": ("mmdebstrap",), "binary": ()}
TOOL_PACKAGE = {"gcc": "gcc", "mmdebstrap": "mmdebstrap", "apt-cache": "apt"}


def recipe(name: str) -> Recipe:
    """A recipe by its short name or its image name."""
    for r in RECIPES.values():
        if name in (r.name, r.image):
            return r
    raise ImageError(f"unknown image {name!r}; allowed: {', '.join(RECIPES)} (or their image names: "
                     f"{', '.join(r.image for r in RECIPES.values())})")


def _select(names: Iterable[str] | None) -> list[Recipe]:
    if not names:
        return [r for r in RECIPES.values() if not r.on_demand]
    wanted = {recipe(n).name for n in names}
    return [r for r in RECIPES.values() if r.name in wanted]


# ---------------------------------------------------------------- cache key

def images_dir() -> Path:
    return cache_dir() / "images"


APT_STATE = (Path("/var/lib/apt/lists"), Path("/var/lib/dpkg/status"), Path("/etc/apt"))


def _apt_stamp() -> str:
    """Changes whenever apt's candidate versions may have: its lists, dpkg's status, its config."""
    entries = []
    for top in APT_STATE:
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else []
        for p in paths:
            st = p.stat()
            entries.append(f"{p}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def _apt_closure(packages: Iterable[str]) -> list[str]:
    """The packages and everything they depend on, recursively (without Recommends/Suggests).
    Alternatives and virtual packages make it a superset of what is installed, which is harmless
    for a cache key."""
    out = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
         "--no-breaks", "--no-replaces", "--no-enhances", *packages],
        capture_output=True, text=True, check=True).stdout
    return sorted({line.strip() for line in out.splitlines() if line and not line[0].isspace()
                   and not line.startswith("<")})


def _apt_candidates(packages: Iterable[str]) -> dict[str, str]:
    """apt's candidate version of each package ("(none)" when it has none)."""
    packages = list(packages)
    if not packages:
        return {}
    out = subprocess.run(["apt-cache", "policy", *packages], capture_output=True, text=True, check=True).stdout
    versions, current = {}, None
    for line in out.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1]
        elif current and line.strip().startswith("Candidate:"):
            versions[current] = line.split(":", 1)[1].strip()
    return versions


def debian_versions(packages: Iterable[str]) -> dict[str, str]:
    """Candidate versions, from the host's apt, of `packages` and their dependencies.

    Memoized in images/apt-versions.json while the host's apt state is unchanged (apt-cache takes
    a second or two per package set; an unchanged cache should cost nothing)."""
    packages = sorted(set(packages))
    if not packages:
        return {}
    if shutil.which("apt-cache") is None:  # not a Debian host: the build itself will say what is missing
        return {p: "unknown (no apt-cache)" for p in packages}
    memo_path = images_dir() / "apt-versions.json"
    stamp, key = _apt_stamp(), ",".join(packages)
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if memo.get("stamp") != stamp:
        memo = {"stamp": stamp, "sets": {}}
    if key not in memo["sets"]:
        try:
            memo["sets"][key] = _apt_candidates(_apt_closure(packages))
        except subprocess.CalledProcessError as err:
            why = ((err.stderr or "").strip().splitlines() or [f"exit {err.returncode}"])[-1]
            raise ImageError(f"the host's apt cannot resolve {' '.join(packages)} ({why}): run `apt-get update`, "
                             f"then retry with `{RETRY}`") from err
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(memo_path, json.dumps(memo, indent=1, sort_keys=True).encode())
    return memo["sets"][key]


def cache_key(r: Recipe, versions: dict[str, str]) -> str:
    """Hash of the recipe (packages, PyPI pins, files, hooks, checks, image config; a static image's
    source), the Debian versions it installs or builds with, the release and FORMAT."""
    material = {"format": FORMAT, "suite": SUITE, "recipe": r.material(), "debian": versions}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def base_key(r: Recipe) -> str:
    """The key of the image the recipe builds (for a `checkout` recipe, without the package's layer)."""
    return cache_key(r, debian_versions((*r.packages, *r.build_packages, *HOST_TOOLS[r.kind])))


def key_of(r: Recipe) -> str:
    key = base_key(r)
    if r.checkout:
        key = hashlib.sha256(f"{key}\0{_checkout_hash()}".encode()).hexdigest()[:16]
    return key


def cached_path(r: Recipe, key: str) -> Path:
    return images_dir() / f"{r.name}-{key}.tar"


def base_path(r: Recipe, key: str) -> Path:
    """Where a `checkout` recipe's image without the package is cached."""
    return images_dir() / f"{r.name}-base-{key}.tar"


def _older(r: Recipe, keep: Path) -> list[Path]:
    """The cache's other entries of the same kind as `keep` (another key), of this recipe only: dashboard's
    are not dashboard-proxy's."""
    stem = keep.name[:-len("-0123456789abcdef.tar")]
    pattern = re.compile(re.escape(stem) + r"-[0-9a-f]{16}\.tar")
    return [p for p in images_dir().glob(f"{stem}-*.tar") if p != keep and pattern.fullmatch(p.name)]


def log_path(r: Recipe) -> Path:
    return cache_dir() / "logs" / f"image-{r.name}.log"


# ---------------------------------------------------------------- OCI image layout

class _Digest:
    """A write-only file that hashes and counts what passes through it to `out`."""

    def __init__(self, out: BinaryIO | None = None):
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        if self.out is not None:
            self.out.write(data)
        return len(data)

    def flush(self) -> None:
        if self.out is not None:
            self.out.flush()

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


@dataclass(frozen=True)
class Layer:
    path: Path  # the gzipped layer
    digest: str  # of the gzipped bytes
    size: int
    diff_id: str  # digest of the uncompressed tar


def _tar_dirs(dirs: Iterable[str]) -> Iterator[tarfile.TarInfo]:
    for d in dirs:
        info = tarfile.TarInfo("." + d.rstrip("/"))
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
        yield info


def write_layer(dest: Path, members: Iterable[tuple[tarfile.TarInfo, BinaryIO | None]]) -> Layer:
    """Write the gzipped layer tar of `members` (tarinfo, file object for regular files) to dest."""
    with open(dest, "wb") as raw:
        gz_out = _Digest(raw)
        with gzip.GzipFile(fileobj=gz_out, mode="wb", compresslevel=6, mtime=0) as gz:
            tar_out = _Digest(gz)
            with tarfile.open(fileobj=tar_out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for info, fileobj in members:
                    tar.addfile(info, fileobj)
    return Layer(dest, gz_out.digest, gz_out.size, tar_out.digest)


def rootfs_members(rootfs_tar: Path, dirs: Iterable[str] = ()) -> Iterator[tuple[tarfile.TarInfo, BinaryIO | None]]:
    """The members of mmdebstrap's tarball for an image layer: without the device nodes under
    ./dev (the runtime makes /dev), plus the empty `dirs`."""
    with tarfile.open(rootfs_tar, mode="r|") as tar:
        for info in tar:
            if info.name.startswith("./dev/"):
                continue
            yield info, (tar.extractfile(info) if info.isreg() else None)
    for info in _tar_dirs(dirs):
        yield info, None


def image_config(r: Recipe, diff_ids: list[str], arch: str) -> dict:
    conf: dict = {}
    if r.env:
        conf["Env"] = [f"{k}={v}" for k, v in r.env.items()]
    if r.entrypoint:
        conf["Entrypoint"] = list(r.entrypoint)
    if r.cmd:
        conf["Cmd"] = list(r.cmd)
    if r.workdir:
        conf["WorkingDir"] = r.workdir
    if r.user:
        conf["User"] = r.user
    conf["Labels"] = {"org.opencontainers.image.title": r.image, "io.mpiplat.recipe": r.name}
    return {"architecture": arch, "os": "linux", "config": conf,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [{"created_by": f"mpiplat.localcluster.images recipe {r.name}"}]}


def _json_bytes(data: dict) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def write_oci_archive(dest: Path, image: str, config: dict, layers: list[Layer]) -> str:
    """Write an OCI image-layout tar holding one image; returns its manifest digest.

    The index's descriptor carries `io.containerd.image.name` (the full name, which `ctr images
    import` gives the image) and `org.opencontainers.image.ref.name` (the tag)."""
    config_bytes = _json_bytes(config)
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2, "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": MT_LAYER, "digest": la.digest, "size": la.size} for la in layers],
    }
    manifest_bytes = _json_bytes(manifest)
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    index = {
        "schemaVersion": 2, "mediaType": MT_INDEX,
        "manifests": [{
            "mediaType": MT_MANIFEST, "digest": manifest_digest, "size": len(manifest_bytes),
            "platform": {"architecture": config["architecture"], "os": config["os"]},
            "annotations": {NAME_ANNOTATION: image, REF_ANNOTATION: image.rsplit(":", 1)[-1]},
        }],
    }
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        _add_bytes(tar, "oci-layout", _json_bytes({"imageLayoutVersion": "1.0.0"}))
        _add_bytes(tar, "index.json", _json_bytes(index))
        _add_bytes(tar, f"blobs/sha256/{manifest_digest[7:]}", manifest_bytes)
        _add_bytes(tar, f"blobs/sha256/{config_digest[7:]}", config_bytes)
        for la in layers:
            info = tarfile.TarInfo(f"blobs/sha256/{la.digest[7:]}")
            info.size, info.mode, info.mtime = la.size, 0o644, 0
            with open(la.path, "rb") as fh:
                tar.addfile(info, fh)
    return manifest_digest


def with_files(archive: Path, files: dict[str, tuple[str, int]], dest: Path) -> str:
    """Write to `dest` the image of `archive` (written by write_oci_archive) under the same name, with one more
    layer holding `files` (path in the image -> (content, mode)); returns the new manifest digest."""
    return with_layer(archive, [_member(path, content.encode(), mode) for path, (content, mode) in files.items()],
                      dest)


def _member(path: str, data: bytes, mode: int) -> tuple[tarfile.TarInfo, BinaryIO]:
    """A layer's regular file at `path` in the image."""
    info = tarfile.TarInfo("." + path)
    info.size, info.mode, info.mtime = len(data), mode, 0
    return info, io.BytesIO(data)


def with_layer(archive: Path, members: Iterable[tuple[tarfile.TarInfo, BinaryIO | None]], dest: Path) -> str:
    """Write to `dest` the image of `archive` under the same name, with one more layer of `members`; returns
    the new manifest digest."""
    parts: list[Path] = []
    try:
        with tarfile.open(archive) as tar:
            def blob(digest: str) -> BinaryIO:
                member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
                if member is None:
                    raise ImageError(f"{archive} lacks blob {digest}")
                return member

            desc = json.loads(blob(read_index(archive)["manifests"][0]["digest"]).read())
            config = json.loads(blob(desc["config"]["digest"]).read())
            layers = []
            for i, la in enumerate(desc["layers"]):
                parts.append(dest.with_name(f"{dest.name}.{i}"))
                with open(parts[-1], "wb") as out:
                    shutil.copyfileobj(blob(la["digest"]), out)
                layers.append(Layer(parts[-1], la["digest"], la["size"], config["rootfs"]["diff_ids"][i]))
        parts.append(dest.with_name(f"{dest.name}.extra"))
        extra = write_layer(parts[-1], members)
        config["rootfs"]["diff_ids"].append(extra.diff_id)
        name = read_index(archive)["manifests"][0]["annotations"][NAME_ANNOTATION]
        return write_oci_archive(dest, name, config, [*layers, extra])
    finally:
        for part in parts:
            part.unlink(missing_ok=True)


def read_index(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ImageError(f"{archive} has no index.json")
        return json.loads(member.read())


def manifest_digest(archive: Path) -> str:
    """The digest of the image manifest in an archive written by write_oci_archive."""
    return read_index(archive)["manifests"][0]["digest"]


def oci_arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}.get(machine, machine)


# ---------------------------------------------------------------- building

def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _need_tools(r: Recipe) -> None:
    if r.kind == "binary":
        if not _binary_of(r).is_file():
            component = _component_of(r.source, r.previous).split("@")[0]
            build = f"build --only {component}" + (" --previous" if r.previous else "")
            raise ImageError(f"building image {r.image} needs the pinned {r.source} binary: run `mpiplat cluster "
                             f"{build}`, then retry with `{_retry(r.name)}`")
        return
    tools = ("gcc",) if r.kind == "static" else ("mmdebstrap", "apt-cache")
    for tool in tools:
        if shutil.which(tool) is None:
            raise ImageError(f"building image {r.image} needs {tool}: install the Debian package "
                             f"{TOOL_PACKAGE[tool]} (apt-get install {TOOL_PACKAGE[tool]}), then retry with "
                             f"`{_retry(r.name)}`")


def _retry(only: str | None) -> str:
    return f"{RETRY} --only {only}" if only else RETRY


def _run(cmd: list[str], log: BinaryIO, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    log.write(f"$ {shlex.join(cmd)}\n".encode())
    log.flush()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    try:
        returncode = proc.wait()
    except KeyboardInterrupt:
        # Not subprocess.run's SIGKILL: mmdebstrap must get to unmount what it mounted in the new
        # root. The terminal's Ctrl-C reached it too; else SIGTERM asks it to clean up.
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                proc.send_signal(sig)
            try:
                proc.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                continue
        raise
    if returncode != 0:
        raise subprocess.CalledProcessError(returncode, cmd)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    return [mp for mp in (line.split()[4] for line in lines) if mp.startswith(prefix)]


def _remove_workdir(work: Path) -> None:
    """Remove a build's scratch directory, but never through a mount an interrupted build left
    (mmdebstrap binds /dev, /proc and /sys into the new root while hooks run)."""
    if not work.exists():
        return
    left = _mounts_under(work)
    if left:
        raise ImageError(f"{work} still has mounts from an interrupted build ({', '.join(left)}): "
                         f"unmount them (umount -R), remove {work}, then retry with `{RETRY}`")
    shutil.rmtree(work)


def _download_wheels(r: Recipe, dest: Path, log: BinaryIO) -> None:
    """The recipe's PyPI pins as wheels for the image's Python and glibc, by this Python's pip
    (its cache makes a rebuild offline-fast); pip in the image installs them without an index."""
    glibc_tags = [f"manylinux_2_{minor}_{platform.machine()}" for minor in range(GLIBC[1], 4, -1)]
    old_tags = [f"manylinux{t}_{platform.machine()}" for t in ("2014", "2010", "1")]
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "--no-deps",
           "--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp",
           "--abi", f"cp{PYTHON.replace('.', '')}", "--abi", "abi3", "--abi", "none",
           *[a for t in (*glibc_tags, *old_tags) for a in ("--platform", t)],
           "--dest", str(dest), *[f"{k}=={v}" for k, v in r.pypi.items()]]
    _run(cmd, log)


def _pip_hooks(r: Recipe, wheels: Path) -> list[str]:
    if not r.pypi:
        return []
    inside = f"/tmp/{wheels.name}"
    hooks = [
        f"copy-in {wheels} /tmp",
        _in_root("python3", "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-cache-dir",
                 "--break-system-packages", "--root-user-action=ignore", "--no-index", "--find-links", inside,
                 *[f"{k}=={v}" for k, v in r.pypi.items()]),
        f'rm -rf "$1{inside}"',
    ]
    return hooks


def _purge_hooks(r: Recipe) -> list[str]:
    hooks = []
    if r.build_packages:
        hooks.append(_in_root("apt-get", "purge", "-y", "--auto-remove", *r.build_packages))
    # Wheels carry each shared library under every soname alias (zip has no links): link them.
    hooks.append(_in_root("hardlink", "--quiet", "--ignore-time", "/usr/local"))
    hooks.append(_in_root("ldconfig"))
    return hooks


def mmdebstrap_command(r: Recipe, files_dir: Path, wheels: Path, out: Path) -> list[str]:
    hooks = [f"sync-in {files_dir} /", *_pip_hooks(r, wheels), *_purge_hooks(r), *r.hooks,
             *r.checks]
    return [
        "mmdebstrap", "--variant=apt", "--format=tar",
        f"--include={','.join((*r.packages, *r.build_packages))}",
        # Slim, like Debian's slim images: no manuals, docs (but copyrights) or translations.
        "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-include=/usr/share/doc/*/copyright", "--dpkgopt=path-exclude=/usr/share/info/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        *[f"--customize-hook={h}" for h in hooks],
        SUITE, str(out),
    ]


def _stage_files(r: Recipe, root: Path) -> None:
    for path, content in r.files.items():
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(content)
        dest.chmod(0o644)


def _build_debian(r: Recipe, work: Path, log: BinaryIO) -> list[Layer]:
    files_dir, wheels, rootfs = work / "files", work / "wheels", work / "rootfs.tar"
    files_dir.mkdir()
    _stage_files(r, files_dir)
    os.chmod(files_dir, 0o755)
    for d in files_dir.rglob("*"):
        if d.is_dir():
            d.chmod(0o755)
    wheels.mkdir()
    if r.pypi:
        _download_wheels(r, wheels, log)
    # mmdebstrap makes its scratch root under TMPDIR: keep it on the cache's disk, in `work`. Its
    # hooks keep the environment: none of this Python's or pip's settings may reach the image's.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    _run(mmdebstrap_command(r, files_dir, wheels, rootfs), log, env={**env, "TMPDIR": str(work)})
    log.write(b"$ (layer) gzip the root without ./dev/*\n")
    layer = write_layer(work / "layer.tar.gz", rootfs_members(rootfs, r.dirs))
    rootfs.unlink()
    return [layer]


def _build_binary(r: Recipe, work: Path, log: BinaryIO) -> list[Layer]:
    built = _binary_of(r)
    log.write(f"$ (layer) {built} as {r.entrypoint[0]}\n".encode())
    parents = [str(d) for d in reversed(Path(r.entrypoint[0]).parents[:-1])]  # /opt for /opt/mpi-operator
    members = [(d, None) for d in _tar_dirs([*parents, *r.dirs])]
    info = tarfile.TarInfo("." + r.entrypoint[0])
    info.size, info.mode, info.mtime = built.stat().st_size, 0o755, 0
    with open(built, "rb") as fh:
        return [write_layer(work / "layer.tar.gz", [*members, (info, fh)])]


def _build_static(r: Recipe, work: Path, log: BinaryIO) -> list[Layer]:
    binary = work / Path(r.entrypoint[0]).name
    _run(["gcc", "-static", "-Os", "-s", "-Wall", "-o", str(binary), str(source_path(r))], log)
    info = tarfile.TarInfo("." + r.entrypoint[0])
    info.size, info.mode, info.mtime = binary.stat().st_size, 0o755, 0
    with open(binary, "rb") as fh:
        return [write_layer(work / "layer.tar.gz", [(info, fh)])]


@contextmanager
def _locked(r: Recipe) -> Iterator[None]:
    """One build of an image at a time (two `cluster up` lanes may ask at once)."""
    with open(images_dir() / f".{r.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_image(r: Recipe, key: str, log: BinaryIO) -> Path:
    """Build `r` into the cache as <name>-<key>.tar (atomically); remove its older entries. A `checkout` recipe's
    image is its base image (cached as <name>-base-<key>.tar, built when missing) plus the package's layer."""
    final = cached_path(r, key)
    if r.checkout:
        base = base_path(r, base_key(r))
        if not base.is_file():
            _build_into(r, base, log)
        _with_checkout(base, final, log)
        for old in _older(r, base):
            old.unlink(missing_ok=True)
    else:
        _build_into(r, final, log)
    for old in _older(r, final):
        old.unlink(missing_ok=True)
    return final


def _build_into(r: Recipe, dest: Path, log: BinaryIO) -> None:
    work = images_dir() / f".work-{r.name}-{os.getpid()}"
    _remove_workdir(work)
    work.mkdir(parents=True)
    try:
        layers = {"static": _build_static, "binary": _build_binary, "debian": _build_debian}[r.kind](r, work, log)
        config = image_config(r, [la.diff_id for la in layers], oci_arch())
        tmp = work / dest.name
        digest = write_oci_archive(tmp, r.image, config, layers)
        log.write(f"manifest {digest}, {tmp.stat().st_size} bytes\n".encode())
        os.replace(tmp, dest)
    finally:
        _remove_workdir(work)


SITE_PACKAGES = "/usr/lib/python3/dist-packages"  # Debian's python3 imports from it, whatever its minor


def _with_checkout(base: Path, dest: Path, log: BinaryIO) -> None:
    """`base` plus a layer of the checkout's wheel, unpacked into SITE_PACKAGES with its console scripts in
    /usr/local/bin, as pip installs a pure wheel (its run-time dependencies are the base's)."""
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix=".wheel-") as scratch:
        src, out = Path(scratch, "src"), Path(scratch, "out")
        for rel in _checkout_files():  # a copy of just these: setuptools' build/ keeps files the checkout deleted
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(CHECKOUT / rel, src / rel)
        _run([str(Path(sys.executable).with_name("uv")), "build", "--wheel", "--quiet", "--out-dir", str(out),
              str(src)], log)
        wheel = next(out.glob("mpiplat-*.whl"))
        log.write(f"$ (layer) {wheel.name} into {SITE_PACKAGES}\n".encode())
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
        try:
            with zipfile.ZipFile(wheel) as whl:
                with_layer(base, _wheel_members(whl), tmp)
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)


def _wheel_members(whl: zipfile.ZipFile) -> Iterator[tuple[tarfile.TarInfo, BinaryIO | None]]:
    names = sorted(n for n in whl.namelist() if not n.endswith("/"))
    dirs = {str(p) for n in names for p in Path(SITE_PACKAGES, n).parents if len(p.parts) > 3}  # below /usr/lib
    yield from ((info, None) for info in _tar_dirs(sorted(dirs)))
    for name in names:
        yield _member(f"{SITE_PACKAGES}/{name}", whl.read(name), 0o644)
    entry_points = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.read_string(whl.read(entry_points).decode() if entry_points else "")
    for script, target in (parser["console_scripts"].items() if parser.has_section("console_scripts") else []):
        module, _, func = target.strip().partition(":")
        script_text = f"#!/usr/bin/python3\nimport sys\nfrom {module} import {func}\n\nsys.exit({func}())\n"
        yield _member(f"/usr/local/bin/{script}", script_text.encode(), 0o755)


def _stale_workdirs(r: Recipe) -> None:
    """Scratch directories that builds of `r` killed outright left behind (we hold its lock)."""
    for work in images_dir().glob(f".work-{r.name}-*"):
        try:
            _remove_workdir(work)
        except ImageError:
            pass  # still mounted: leave it; the error shows when the same pid builds again


def _failed(r: Recipe, err: Exception, log: Path) -> ImageError:
    retry = _retry(r.name)
    if isinstance(err, ImageError):
        return err
    why = f"exit {err.returncode}" if isinstance(err, subprocess.CalledProcessError) else str(err)
    cmd = " ".join(err.cmd[:3]) + ": " if isinstance(err, subprocess.CalledProcessError) else ""
    tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:]) if log.exists() else ""
    return ImageError(f"building image {r.image} failed ({cmd}{why}); see {log}, then retry with `{retry}`"
                      f"\nlast lines of the log:\n{tail}")


def _size(n: int) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 10e6 else f"{n / 1e6:.1f} MB"


@dataclass(frozen=True)
class Result:
    name: str
    image: str
    path: Path
    key: str
    built: bool
    seconds: float | None
    size: int


def build(names: Iterable[str] | None = None, stream=None) -> list[Result]:
    """Build each selected image (all by default) that is not in the cache; report every one."""
    stream = stream or sys.stdout
    recipes = _select(names)
    images_dir().mkdir(parents=True, exist_ok=True)
    (cache_dir() / "logs").mkdir(parents=True, exist_ok=True)
    keyed = [(r, key_of(r)) for r in recipes]
    todo = [(r, k) for r, k in keyed if not cached_path(r, k).is_file()]
    results: dict[str, Result] = {}
    for r, k in keyed:
        if (r, k) not in todo:
            path = cached_path(r, k)
            print(f"  cached   {r.image} ({path.name})", file=stream, flush=True)
            results[r.name] = Result(r.name, r.image, path, k, False, None, path.stat().st_size)
    for i, (r, k) in enumerate(todo, 1):
        log = log_path(r)
        print(f"[{i}/{len(todo)}] building {r.image}; log: {log}", file=stream, flush=True)
        start = time.monotonic()
        try:
            _need_tools(r)
            with _locked(r):
                path = cached_path(r, k)
                if not path.is_file():  # else another process built it while we waited
                    _stale_workdirs(r)
                    with open(log, "wb") as fh, progress(f"building {r.image}", stream=stream):
                        path = build_image(r, k, fh)
        except (subprocess.CalledProcessError, OSError, tarfile.TarError, ImageError) as err:
            raise _failed(r, err, log) from err
        seconds = time.monotonic() - start
        size = path.stat().st_size
        print(f"    done in {seconds:.0f}s ({_size(size)})", file=stream, flush=True)
        results[r.name] = Result(r.name, r.image, path, k, True, seconds, size)
    print(f"images: {images_dir()} ({len(todo)} built, {len(keyed) - len(todo)} cached)", file=stream, flush=True)
    return [results[r.name] for r in recipes]


def ensure_built(names: Iterable[str] | None = None, stream=None) -> dict[str, Path]:
    """Image name -> its OCI archive in the cache, building the missing ones."""
    return {res.image: res.path for res in build(names, stream)}


# ---------------------------------------------------------------- containerd

# Recipes named as their charts' images (the previous pins' too: an upgrade's starting point).
CONTROLLER_IMAGES = tuple(n for c, _, _ in CONTROLLERS for n in (c, f"{c}-previous"))


def tag(ctr: list[str], image: str, target: str) -> None:
    """`image` also named `target` in containerd (the same content; `target` replaced if it exists), pinned
    for the CRI like an imported image."""
    for cmd in ([*ctr, "images", "tag", "--force", image, target],
                [*ctr, "images", "label", target, *[f"{k}={v}" for k, v in IMPORT_LABELS.items()]]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ImageError(f"`{shlex.join(cmd)}` failed: {(proc.stderr or proc.stdout).strip()}")


def tag_mirrored(ctr: list[str], registry: str, stream=None) -> list[str]:
    """Tag the controller images in containerd also as the installer references them through
    `registry` (mpiplat_image_registry), so the charts' pods run there without a pull. Returns the new names."""
    stream = stream or sys.stdout
    have, tagged = images_in(ctr), []
    for name in CONTROLLER_IMAGES:
        image = RECIPES[name].image
        target = mirrored(image, registry)
        if image not in have or have.get(target) == have[image]:
            continue
        tag(ctr, image, target)
        print(f"  tagged   {target}", file=stream, flush=True)
        tagged.append(target)
    return tagged


def images_in(ctr: list[str]) -> dict[str, str]:
    """Image name -> target (manifest) digest, as `ctr images ls` shows them."""
    proc = subprocess.run([*ctr, "images", "ls"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"`{shlex.join([*ctr, 'images', 'ls'])}` failed: {proc.stderr.strip() or proc.returncode}")
    found = {}
    for line in proc.stdout.splitlines()[1:]:  # REF TYPE DIGEST SIZE PLATFORMS LABELS
        parts = line.split()
        if len(parts) >= 3 and parts[2].startswith("sha256:"):
            found[parts[0]] = parts[2]
    return found


def import_into(ctr: list[str], names: Iterable[str] | None = None, stream=None,
                snapshotter: str | None = None) -> list[str]:
    """Import the selected images (built first when missing) into the containerd that `ctr` (the
    argv prefix of a ctr command, e.g. [ctr, "--address", sock, "-n", "k8s.io"]) talks to, each
    unless containerd already has it under its name with the same manifest digest. Imported images
    are pinned for the CRI (its image garbage collection leaves them). Returns the names imported."""
    stream = stream or sys.stdout
    archives = ensure_built(names, stream)
    have = images_in(ctr)
    imported = []
    for image, path in archives.items():
        digest = manifest_digest(path)
        if have.get(image) == digest:
            print(f"  present  {image} ({digest[:19]})", file=stream, flush=True)
            continue
        import_archive(ctr, image, path, stream, snapshotter)
        imported.append(image)
    return imported


def import_archive(ctr: list[str], image: str, path: Path, stream=None, snapshotter: str | None = None) -> None:
    """Import the archive `path` of `image` into containerd (see import_into), pinned for the CRI."""
    stream = stream or sys.stdout
    digest = manifest_digest(path)
    cmd = [*ctr, "images", "import", *[a for k, v in IMPORT_LABELS.items() for a in ("--label", f"{k}={v}")],
           *(["--snapshotter", snapshotter] if snapshotter else []), str(path)]
    start = time.monotonic()
    with progress(f"importing {image}", stream=stream):
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"importing image {image} from {path} failed: {shlex.join(cmd)}: "
                         f"{(proc.stderr or proc.stdout).strip() or proc.returncode}")
    now = images_in(ctr).get(image)
    if now != digest:
        raise ImageError(f"importing image {image} from {path}: containerd has it at {now}, expected {digest}; "
                         f"remove it (`ctr images rm {image}`), then retry")
    print(f"  imported {image} in {time.monotonic() - start:.0f}s", file=stream, flush=True)
