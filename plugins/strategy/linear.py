"""mpiplat.platform.linear: Ansible's `linear` strategy, run through Mitogen when it can be (ansible.cfg and
molecule name it).

Mitogen runs each task's module in a warm Python process instead of a fresh one per task, so a task costs
a tenth of a second, not ~0.8 s (most of it importing the kubernetes client). A no-op site.yml on the
local cluster: 21 s instead of 94 s. Where Mitogen is not installed, or does not support this
ansible-core, it is plain `linear`, with one warning that says why.
"""

from __future__ import annotations

from ansible.errors import AnsibleError
from ansible.plugins.strategy.linear import StrategyModule as _Linear
from ansible.utils.display import Display

DOCUMENTATION = """
name: linear
short_description: linear, through Mitogen when installed
description: Ansible's linear strategy; with the mitogen package installed, Mitogen's mitogen_linear.
author: mpiplat
"""

try:
    from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule
except (ImportError, AnsibleError) as err:
    Display().warning(f"mpiplat.platform.linear: running without Mitogen, each task is slower ({err}); "
                      "`pip install mitogen` (mpiplat's dependency) makes it fast")
    StrategyModule = _Linear
