"""The checkout is the Ansible collection mpiplat.platform (galaxy.yml): roles are called by their full
names, find each other's files through the collection's path lookup (no `role_path/..`), and the venv's
Ansible finds this checkout (`make setup` links it into .venv's ansible_collections)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.parent.parent.name for p in (ROOT / "roles").glob("*/meta/main.yml"))
SOURCES = [p for d in ("playbooks", "roles", "molecule") for p in (ROOT / d).rglob("*")
           if p.suffix in (".yml", ".j2") and p.is_file()]


def test_galaxy_yml_names_the_collection():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == ("mpiplat", "platform")
    assert (ROOT / "meta" / "runtime.yml").is_file()


def test_every_role_is_called_by_its_full_name():
    short = re.compile(r"(?:- role:|(?:include|import)_role:\s*\n\s*name:)\s*\"?([\w.{} ]+)")
    found, wrong = 0, []
    for path in SOURCES:
        for name in short.findall(path.read_text()):
            found += 1
            if not (name.startswith("mpiplat.platform.") and
                    (name.removeprefix("mpiplat.platform.") in ROLES or "{{" in name)):
                wrong.append(f"{path.relative_to(ROOT)}: {name}")
    assert found > 20 and not wrong, wrong


def test_no_role_finds_files_through_relative_paths():
    up = re.compile(r"role_path[^\n]*/\.\.|/\.\./\.\./roles")
    wrong = [str(p.relative_to(ROOT)) for p in SOURCES if up.search(p.read_text())]
    assert not wrong


def _debug(expr: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "ansible.builtin.debug",
                           "-a", f"msg={expr}"], cwd="/", env=env, capture_output=True, text=True, timeout=120)


def test_the_venvs_ansible_finds_this_checkout_from_any_folder():
    proc = _debug("{{ lookup('mpiplat.platform.path', 'charts/mpi-tenant') }}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.split("=>", 1)[1])["msg"] == str(ROOT / "charts" / "mpi-tenant")
    proc = _debug("{{ lookup('mpiplat.platform.path', 'charts/nope') }}")
    assert proc.returncode != 0 and "'charts/nope' is not a file or folder of the collection" in proc.stdout


def test_the_built_collection_holds_the_roles_playbooks_and_plugins_only(tmp_path):
    galaxy = str(Path(sys.executable).parent / "ansible-galaxy")
    proc = subprocess.run([galaxy, "collection", "build", "--output-path", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(tmp_path / "mpiplat-platform-0.1.0.tar.gz") as tar:
        tops = {name.split("/")[0] for name in tar.getnames()}
    assert {"roles", "playbooks", "plugins", "charts", "meta", "MANIFEST.json"} <= tops
    assert not tops & {".ansible", ".venv", "conformance", "localcluster", "src", "molecule", "build"}, tops
