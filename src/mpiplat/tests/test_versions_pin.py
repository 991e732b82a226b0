"""mpiplat.versions.pin and mirrored: the one reading of versions.yml that the roles (the filter
mpiplat.platform.pin) and the local cluster share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from mpiplat import versions

ROOT = Path(__file__).resolve().parents[3]


def test_a_pin_fills_in_the_version_and_splits_its_images_through_a_mirror(tmp_path):
    path = tmp_path / "versions.yml"
    path.write_text(yaml.safe_dump({"components": {"kueue": {
        "version": "v0.19.2", "module": "sigs.k8s.io/kueue", "build": "wrapper",
        "ldflags": "-X v={version}", "chart": {"name": "kueue"},
        "images": ["registry.k8s.io/kueue/kueue:{version}", "busybox:{number}"]}}}))
    pin = versions.pin("kueue", path=path)
    assert (pin["version"], pin["number"], pin["ldflags"], pin["chart"]) == \
        ("v0.19.2", "0.19.2", "-X v=v0.19.2", {"version": "0.19.2", "name": "kueue"})
    assert pin["image_parts"] == [
        {"registry": "registry.k8s.io", "path": "kueue/kueue", "repository": "registry.k8s.io/kueue/kueue",
         "tag": "v0.19.2"},
        {"registry": "docker.io", "path": "busybox", "repository": "docker.io/busybox", "tag": "0.19.2"}]
    over = versions.pin("kueue", "v0.20.0", "mirror.example.com/mpiplat/", path=path)
    assert over["version"] == "v0.20.0" and over["images"][0] == "registry.k8s.io/kueue/kueue:v0.20.0"
    assert [p["repository"] for p in over["image_parts"]] == ["mirror.example.com/mpiplat/kueue/kueue",
                                                              "mirror.example.com/mpiplat/busybox"]
    assert versions.pin("nope", path=path) == {}


def test_the_playbooks_filter_is_that_function():
    """Through Ansible, the collection's filter (plugins/filter/versions.py): the same entry."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
    ansible = str(Path(sys.executable).parent / "ansible")
    proc = subprocess.run([ansible, "localhost", "-m", "ansible.builtin.debug", "-a",
                           "msg={{ 'kueue' | mpiplat.platform.pin('', 'mirror.example.com/m') | to_json }}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.split("=>", 1)[1])
    assert json.loads(result["msg"]) == versions.pin("kueue", "", "mirror.example.com/m")
