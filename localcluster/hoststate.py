"""The host state a real node changes, recorded before `up` changes anything and put back by `down`.

The kubelet, kube-proxy, kube-router and the CNI plugins change the host whatever their flags:
sysctls, iptables/ip6tables chains and rules, ipsets, network links, mounts, cgroups and a few
host paths (see ../shared/REALNODE-NOTES.md). `record()` writes what they look like before the
first change; `restore()` removes what is new since then and writes the recorded sysctls back, so
an `up` that failed or was interrupted is undone as well as a finished one.

A node of another cluster (MPIPLAT_CLUSTER) lives in namespaces of its own: on the host it has only
a veth pair (OTHER_NODE_LINKS, left alone here), a cgroup root and the kernel-wide sysctls its kubelet
sets. Those sysctls are shared: `hold` records them before the first node starts, and `release`
hands them back to the last one to stop.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from mpiplat.localcluster.state import VETH_PREFIX

SYSCTLS = (
    "kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory", "vm.panic_on_oom",
    "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward", "net.ipv4.conf.all.forwarding", "net.ipv6.conf.all.forwarding",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max", "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
)
KERNEL_SYSCTLS = tuple(n for n in SYSCTLS if not n.startswith("net."))  # not per network namespace
SHARED = Path("/run/mpiplat-kernel-sysctls.json")  # gone at reboot, as are the values it records
# Paths the kubelet, containerd and libcni use whatever their flags.
HOST_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/netns",
              "/run/containerd", "/etc/cni")
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle", "raw")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_TOPS = ("kubepods", "kubepods.slice")
LINK_PREFIXES = ("veth", "mpiplat", "kube-")
OTHER_NODE_LINKS = VETH_PREFIX  # host ends of other clusters' nodes' veth pairs


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _run(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    except FileNotFoundError:
        return ""


def _iptables(cmd: str) -> dict[str, dict]:
    """{table: {"chains": [...], "rules": ["-A CHAIN ..."]}} from `<cmd>-save`."""
    out = {}
    for table in TABLES:
        text = _run(f"{cmd}-save", "-t", table)
        out[table] = {"chains": sorted(ln[1:].split()[0] for ln in text.splitlines() if ln.startswith(":")),
                      "rules": [ln for ln in text.splitlines() if ln.startswith("-A ")]}
    return out


def _tree(path: Path) -> list[str] | None:
    """Every path under `path` (relative), or None if it does not exist."""
    if not path.exists() and not path.is_symlink():
        return None
    found = []
    for root, dirs, files in os.walk(path):
        rel = os.path.relpath(root, path)
        found += [os.path.normpath(os.path.join(rel, n)) for n in dirs + files]
    return sorted(found)


def _mounts() -> list[str]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    return [ln.split()[4].encode().decode("unicode_escape") for ln in lines]


def _cgroups() -> list[str]:
    return sorted(str(p) for top in CGROUP_TOPS for p in CGROUP_ROOT.glob(f"*/{top}"))


def snapshot() -> dict:
    """What the host looks like now, in the terms `restore` understands."""
    sysctls = {}
    for name in SYSCTLS:
        try:
            sysctls[name] = _sysctl_path(name).read_text().strip()
        except OSError:
            pass
    links = sorted(ln.split(":")[1].strip().split("@")[0] for ln in _run("ip", "-o", "link", "show").splitlines()
                   if ln.count(":") >= 2)
    return {
        "sysctls": sysctls,
        "iptables": {cmd: _iptables(cmd) for cmd in IPTABLES},
        "ipsets": sorted(_run("ipset", "list", "-n").split()),
        "links": links,
        "mounts": sorted(set(_mounts())),
        "paths": {p: _tree(Path(p)) for p in HOST_PATHS},
        "cgroups": _cgroups(),
    }


def record(path: Path, kernel: dict[str, str]) -> None:
    """Write the snapshot to `path` unless one is there (a failed `up` keeps the first), with the
    kernel-wide sysctls as `hold` recorded them."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    snap = snapshot()
    snap["sysctls"].update(kernel)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(snap, indent=1))
    tmp.replace(path)


@contextmanager
def _shared():
    """The shared record of kernel-wide sysctls, locked (flock on its directory) while in use."""
    fd = os.open(SHARED.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield load(SHARED) or {}
    finally:
        os.close(fd)


def _write_shared(data: dict) -> None:
    tmp = SHARED.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(SHARED)


def hold(owner: str) -> dict[str, str]:
    """Register cluster `owner`'s real node; the kernel-wide sysctls as they were before the first
    registered node started (read now when none is registered)."""
    with _shared() as data:
        if not data.get("owners"):
            data = {"owners": [], "sysctls": {k: v for k, v in snapshot()["sysctls"].items()
                                              if k in KERNEL_SYSCTLS}}
        if owner not in data["owners"]:
            data["owners"].append(owner)
        _write_shared(data)
        return data["sysctls"]


def release(owner: str) -> dict[str, str] | None:
    """Unregister cluster `owner`'s node; the recorded kernel-wide sysctls when it was the last
    registered one (to write back; {} when none were recorded), None while others remain."""
    with _shared() as data:
        owners = data.get("owners", [])
        if owner not in owners:
            return None if owners else {}
        owners.remove(owner)
        if owners:
            _write_shared(data)
            return None
        SHARED.unlink(missing_ok=True)
        return data.get("sysctls", {})


def write_sysctl(name: str, val: str, say=print) -> None:
    try:
        if _sysctl_path(name).read_text().strip() != val:
            _sysctl_path(name).write_text(val)
    except OSError as err:
        say(f"  could not restore sysctl {name}={val}: {err}")


def load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def differences(before: dict, after: dict) -> list[str]:
    """What differs between two snapshots, one line each (empty: the same)."""
    out = []
    for name, val in before["sysctls"].items():
        if after["sysctls"].get(name) != val:
            out.append(f"sysctl {name}: {val} -> {after['sysctls'].get(name)}")
    for cmd in IPTABLES:
        for table in TABLES:
            b, a = before["iptables"][cmd][table], after["iptables"][cmd][table]
            out += [f"{cmd} -t {table}: new chain {c}" for c in sorted(set(a["chains"]) - set(b["chains"]))]
            out += [f"{cmd} -t {table}: new rule {r}" for r in a["rules"] if r not in b["rules"]]
    out += [f"new ipset {s}" for s in sorted(set(after["ipsets"]) - set(before["ipsets"]))]
    out += [f"new link {n}" for n in sorted(set(after["links"]) - set(before["links"]))
            if not n.startswith(OTHER_NODE_LINKS)]
    out += [f"new mount {m}" for m in sorted(set(after["mounts"]) - set(before["mounts"]))]
    for p, tree in before["paths"].items():
        now = after["paths"].get(p)
        if tree is None and now is not None:
            out.append(f"new path {p}")
        elif tree is not None and now is not None:
            out += [f"new path {p}/{n}" for n in sorted(set(now) - set(tree))]
    out += [f"new cgroup {c}" for c in sorted(set(after["cgroups"]) - set(before["cgroups"]))]
    return out


# ---------------------------------------------------------------- restore

def _unmount_new(before: dict, under: list[str], say) -> None:
    prefixes = tuple(p.rstrip("/") + "/" for p in under)
    new = [m for m in set(_mounts()) - set(before["mounts"]) if (m + "/").startswith(prefixes)]
    for mount in sorted(new, key=len, reverse=True):
        if subprocess.run(["umount", mount], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mount], capture_output=True)
    if new:
        say(f"  unmounted {len(new)} mount(s)")


def _restore_iptables(before: dict, say) -> None:
    removed = 0
    for cmd in IPTABLES:
        now = _iptables(cmd)
        for table in TABLES:
            b, a = before["iptables"][cmd][table], now[table]
            for rule in reversed(a["rules"]):
                if rule not in b["rules"]:
                    args = ["-D", *_split_rule(rule)[1:]]
                    subprocess.run([cmd, "-w", "-t", table, *args], capture_output=True)
                    removed += 1
            for chain in sorted(set(a["chains"]) - set(b["chains"])):
                subprocess.run([cmd, "-w", "-t", table, "-F", chain], capture_output=True)
            for chain in sorted(set(a["chains"]) - set(b["chains"])):
                subprocess.run([cmd, "-w", "-t", table, "-X", chain], capture_output=True)
                removed += 1
    if removed:
        say(f"  removed {removed} iptables rule(s) and chain(s)")


def _split_rule(rule: str) -> list[str]:
    import shlex

    return shlex.split(rule)


def restore(before: dict, under: list[str], say=print) -> list[str]:
    """Undo what changed since `before`; `under` are our own directories (mounts there go too).
    Returns what still differs afterwards."""
    _unmount_new(before, [*under, *HOST_PATHS], say)
    _restore_iptables(before, say)
    for name in sorted(set(_run("ipset", "list", "-n").split()) - set(before["ipsets"])):
        subprocess.run(["ipset", "destroy", name], capture_output=True)
    now = snapshot()
    for link in sorted(set(now["links"]) - set(before["links"])):
        if link.startswith(LINK_PREFIXES):
            subprocess.run(["ip", "link", "delete", link], capture_output=True)
    for name, val in before["sysctls"].items():
        if now["sysctls"].get(name) != val:
            write_sysctl(name, val, say)
    for p, tree in before["paths"].items():
        path, current = Path(p), now["paths"].get(p)
        if current is None:
            continue
        if tree is None:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            continue
        for rel in sorted(set(current) - set(tree), key=len, reverse=True):
            target = path / rel
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
    for cg in sorted(set(_cgroups()) - set(before["cgroups"])):
        remove_cgroup(Path(cg))
    return differences(before, snapshot())


def remove_cgroup(cgroup: Path) -> None:
    """Kill what is left in a cgroup tree a node made, then remove the tree."""
    if not cgroup.exists():
        return
    _kill_members(cgroup)
    for root, dirs, _ in sorted(os.walk(cgroup), key=lambda t: len(t[0]), reverse=True):
        for d in dirs:
            _rmdir(Path(root) / d)
    _rmdir(cgroup)


def _kill_members(cgroup: Path) -> None:
    """SIGKILL every process left in a cgroup tree the node made (a container whose runtime is gone)."""
    pids = set()
    for procs in cgroup.rglob("cgroup.procs"):
        try:
            pids |= {int(p) for p in procs.read_text().split()}
        except (OSError, ValueError):
            pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = {p for p in pids if Path(f"/proc/{p}").exists()}
        time.sleep(0.1)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
