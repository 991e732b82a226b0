"""Bad input fails in preflight, before any change, naming the variable, its value and what is allowed.

Each file in inventories/invalid/ is a set of variables laid over the local inventory; its
`# expect:` line is a regular expression the failure message must match.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "inventories" / "invalid").glob("*.yml"))

pytestmark = pytest.mark.cluster


def _expect(case: Path) -> str:
    match = re.search(r"^# expect: (.+)$", case.read_text(), re.M)
    assert match, f"{case} has no '# expect:' line"
    return match.group(1)


def test_there_are_at_least_ten_invalid_inventories():
    assert len(CASES) >= 10


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_site_fails_in_preflight_before_any_change(case, ansible_env):
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventories/local/hosts.yml",
         "playbooks/site.yml", "-e", f"@{case}"],
        cwd=ROOT, env=ansible_env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert re.search(_expect(case), out), f"expected /{_expect(case)}/ in:\n{out[-3000:]}"
    recap = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", out)
    assert recap and recap.group(1) == "0", out[-2000:]
    # The failure happened in the preflight play: the install play never started.
    assert "PLAY [Install or upgrade the MPI training stack]" not in out
