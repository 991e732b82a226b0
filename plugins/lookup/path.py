"""mpiplat.platform.path: the absolute path of a file or folder of this collection, e.g.
`lookup('mpiplat.platform.path', 'charts/mpi-tenant')`. The one place that knows where the collection's
root is (two folders above this plugin), so roles need no `role_path/../..`."""

from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = """
name: path
short_description: a path inside the mpiplat.platform collection
description: The absolute path of each term, relative to the collection's root; an error when it does not exist.
options:
  _terms:
    description: paths relative to the collection's root, e.g. charts/mpi-tenant
    required: true
author: mpiplat
"""

ROOT = Path(__file__).resolve().parents[2]


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        out = []
        for term in terms:
            path = (ROOT / str(term)).resolve()
            if ROOT not in (path, *path.parents) or not path.exists():
                raise AnsibleLookupError(f"mpiplat.platform.path: {term!r} is not a file or folder of the "
                                         f"collection at {ROOT}")
            out.append(str(path))
        return out
