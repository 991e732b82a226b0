"""mpiplat.platform.closest_name: the known variable name most like a misspelt one, for "did you mean" hints."""

from __future__ import annotations

import difflib


def closest_name(name: str, known: list[str], cutoff: float = 0.8) -> str:
    """The closest of `known` to `name` (difflib's ratio >= cutoff), or "" when none is close.

    The cutoff is above difflib's 0.6: names share their role prefix, which alone makes e.g.
    tenancy_colour 0.69 like tenancy_state; a misspelling (kueue_namespce) scores above 0.9.
    """
    matches = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=cutoff)
    return matches[0] if matches else ""


class FilterModule:
    def filters(self):
        return {"closest_name": closest_name}
