"""What the API server's admission says when it refuses a pod: Pod Security's or OpenShift's security context
constraints' words, parsed into who refuses and one reason per field, each naming what is allowed. Core: the SDK
and diagnose both read refusals with it."""

from __future__ import annotations

import re
from collections.abc import Iterator

_PSA = re.compile(r'violates PodSecurity "([^"]+)": (.*)', re.S)
_SCC = re.compile(r"unable to validate against any security context constraints?:? ?(.*)", re.S)
_SCC_PROVIDER = re.compile(r'^provider "?([^":\s]+)"?: *')
_FIELD_ERROR = re.compile(r"^(?:(\S+): )?(Invalid value|Forbidden|Required value|Unsupported value|Duplicate value|"
                          r"Not found|Too long|Too many|Internal error)(?:: (.*))?$", re.S)
_NOT_USABLE = "not usable by user or serviceaccount"
_RANGES = re.compile(r"^must be in the ranges?: ?((?:\[\s*\d+\s*,\s*\d+\s*\]\s*)+)$")
_UNSET_HINT = {"runAsUser": "leave runAsUser unset to get the namespace's UID",
               "fsGroup": "leave fsGroup unset to get the namespace's group",
               "supplementalGroups": "leave supplementalGroups unset to get the namespace's groups"}


def _scan(text: str) -> Iterator[tuple[int, int, bool]]:
    """Each character's index, the depth of brackets around it (a bracket counts as inside what it opens or
    closes) and whether it is inside double quotes."""
    depth, quoted = 0, False
    for i, ch in enumerate(text):
        if ch == '"' and text[i - 1:i] != "\\":
            quoted = not quoted
        elif not quoted and ch in "([{":
            depth += 1
        elif not quoted and ch in ")]}":
            yield i, depth, quoted
            depth = max(depth - 1, 0)
            continue
        yield i, depth, quoted


def _split_top(text: str, sep: str = ", ") -> list[str]:
    """`text` split at `sep` outside brackets, braces, parentheses and double quotes."""
    parts, start = [], 0
    for i, depth, quoted in _scan(text):
        if i >= start and not quoted and depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _closing(text: str) -> int:
    """The index of the bracket that closes the one text starts with (len(text) if none does)."""
    return next((i for i, depth, quoted in _scan(text) if depth == 1 and not quoted and text[i] in ")]}"),
                len(text))


def _psa_reasons(details: str) -> list[str]:
    """Pod Security's "check (detail), check (detail)" list as one reason each; the detail names the field and
    what is allowed ("container "worker" must set securityContext.runAsNonRoot=true") where Pod Security says so."""
    reasons = []
    for item in _split_top(details):
        found = re.fullmatch(r"(.*?) \((.*)\)", item, re.S)
        reasons.append(found.group(2) if found and " must " in found.group(2) else item)
    return reasons


def _scc_value(value: str) -> str:
    found = re.fullmatch(r"\[\]\w+\{(.*)\}", value)  # Go's []int64{1000}
    return found.group(1) if found else value


def _scc_reasons(errors: str) -> list[str]:
    """The field errors of the security context constraints that the user or the pod's service account may use
    ("provider restricted-v2: .containers[0].runAsUser: Invalid value: 1000: must be in the ranges: [a, b]"), one
    reason each; the constraints nobody may use are left out."""
    errors = " ".join(errors.split())
    if errors.startswith("["):  # the list, up to its closing bracket
        errors = errors[1:_closing(errors)]
    errors = errors.strip()
    found: list[tuple[str, str]] = []
    provider = ""
    for item in _split_top(errors):
        named = _SCC_PROVIDER.match(item)
        if named:
            provider, item = named.group(1), item[named.end():]
        error = _FIELD_ERROR.match(item)
        if not error:
            found.append((provider, item))
            continue
        path, kind, rest = (error.group(1) or "").lstrip("."), error.group(2), (error.group(3) or "").strip()
        if kind == "Forbidden" and not path and (rest == _NOT_USABLE or not rest.strip(". ")):
            if rest == _NOT_USABLE:
                provider = ""  # what follows without a provider of its own is not this one's
            continue
        if kind == "Invalid value" and path:
            value, *detail = _split_top(rest, ": ")
            detail = ": ".join(detail)
            ranges = _RANGES.match(detail)
            if ranges:
                spans = re.findall(r"\[\s*(\d+)\s*,\s*(\d+)\s*\]", ranges.group(1))
                detail = "allowed: " + ", ".join(f"{lo}-{hi}" for lo, hi in spans)
            text = f"{path} is {_scc_value(value)}; {detail}"
            hint = _UNSET_HINT.get(re.split(r"[.\]]", path)[-1])
            found.append((provider, f"{text} ({hint})" if hint else text))
        else:
            found.append((provider, ": ".join(p for p in (path, rest or kind) if p)))
    several = len({p for p, _ in found if p}) > 1
    reasons = [f"{p}: {r}" if several and p else r for p, r in found]
    return list(dict.fromkeys(reasons))


def pod_refusal(message: str) -> tuple[str, list[str]] | None:
    """What an admission refusal of a pod says: who refuses it (Pod Security "level:version", or the security
    context constraints) and the reasons, each naming a field and what is allowed; None when the message is no
    Pod Security or SCC refusal. An unrecognised list gives the API's words as the one reason."""
    message = " ".join(message.split())
    scc = _SCC.search(message)
    if scc:
        reasons = _scc_reasons(scc.group(1))
        return "security context constraints", reasons or [
            "none of them may be used by the user or the pod's service account"]
    psa = _PSA.search(message)
    if psa:
        return f'Pod Security "{psa.group(1)}"', _psa_reasons(psa.group(2)) or [message]
    return None
