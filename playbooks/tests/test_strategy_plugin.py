"""plugins/strategy/linear.py (mpiplat.platform.linear): Mitogen's linear strategy when it loads, else Ansible's own."""

from __future__ import annotations

import configparser
import importlib.util
import sys
from pathlib import Path

from ansible.plugins.strategy.linear import StrategyModule as Linear

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "strategy" / "linear.py"


def _load():
    spec = importlib.util.spec_from_file_location("mpiplat_linear_under_test", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ansible_cfg_and_molecule_name_the_strategy():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    assert cfg["defaults"]["strategy"] == "mpiplat.platform.linear"
    for scenario in ("default", "helm"):
        text = (ROOT / "molecule" / scenario / "molecule.yml").read_text()
        assert "ANSIBLE_STRATEGY: mpiplat.platform.linear" in text, scenario


def test_with_mitogen_installed_the_strategy_is_mitogens():
    from ansible_mitogen.strategy import StrategyMixin

    strategy = _load().StrategyModule
    assert issubclass(strategy, StrategyMixin) and issubclass(strategy, Linear)


def test_without_mitogen_it_is_plain_linear_and_says_why(monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "ansible_mitogen" or m.startswith("ansible_mitogen.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ansible_mitogen", None)  # import fails as if not installed
    assert _load().StrategyModule is Linear
    err = capsys.readouterr().err
    assert "running without Mitogen" in err and "pip install mitogen" in err
