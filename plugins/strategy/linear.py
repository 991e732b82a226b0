"""mpiplat.platform.linear: Ansible's `linear` strategy, run through Mitogen when it can be (ansible.cfg and
molecule name it).

Mitogen runs each task's module in a warm Python process instead of a fresh one per task, so a task costs
a tenth of a second, not ~0.8 s (most of it importing the kubernetes client). A no-op site.yml on the
local cluster: 21 s instead of 94 s. Where Mitogen is not installed, or does not support this
ansible-core, it is plain `linear`, with one warning that says why.
"""

from __future__ import annotations

import functools
import gc

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
    import ansible_mitogen.planner as _planner
    from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule as _MitogenLinear
except (ImportError, AnsibleError) as err:
    Display().warning(f"mpiplat.platform.linear: running without Mitogen, each task is slower ({err}); "
                      "`pip install mitogen` (mpiplat's dependency) makes it fast")
    StrategyModule = _Linear
else:
    class StrategyModule(_MitogenLinear):
        """Mitogen's linear, with two savings for the worker Ansible forks for each task (a no-op site.yml on the
        local cluster: 13-14 CPU-s; about a fifth less with the first, a tenth less again with the second):
        - Mitogen lists every installed collection (the ansible package's 94) for each task of a collection's
          module, in that worker, where what it learnt dies with the task. The list does not change during a run:
          it is made once, here, before any worker forks.
        - The objects this process has made so far are frozen (gc.freeze): a worker's garbage collection then
          does not walk them, nor copy their pages."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if hasattr(_planner, "_load_collections"):
                _collection_dirs()  # here, in the parent, once a run
                _planner._load_collections = _load_collections
            gc.freeze()

    @functools.cache
    def _collection_dirs() -> tuple[str, ...]:
        from ansible.collections.list import list_collection_dirs

        return tuple(d.decode("utf-8") for d in list_collection_dirs())

    def _load_collections(invocation) -> None:
        invocation._extra_sys_paths.update(_collection_dirs())
