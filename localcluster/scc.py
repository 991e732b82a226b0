"""An emulation of OpenShift's restricted-v2 SCC on the local cluster, by the API server's own admission
policies (ValidatingAdmissionPolicy, and MutatingAdmissionPolicy: beta in 1.34, its feature gate and API
version switched on by configs.kwok_config).

What it does, in OpenShift's annotations and words:
- every namespace gets a UID range and a supplemental-group range when it is created (and again should an
  update drop them): `openshift.io/sa.scc.uid-range` and `openshift.io/sa.scc.supplemental-groups`, both
  `<first>/10000`. OpenShift's cluster-policy-controller hands out blocks in order; here the block comes from a
  hash of the name (a CEL expression: the policies keep no state), so two names may share one, with odds of
  1 in BLOCKS a pair, and names that differ in one character never do;
- a pod that sets no runAsUser runs as the range's first UID, and with no fsGroup gets the first group;
- a pod whose runAsUser (pod or any container) or fsGroup lies outside the ranges is refused, with
  restricted-v2's message.
Exempt, as OpenShift's system namespaces are: kube-system, kube-public, kube-node-lease and namespaces labelled
`openshift.io/run-level` 0 or 1 (`up` labels the controllers' namespaces so).
Not emulated: SELinux MCS labels, SCC priority and other SCCs a user may be granted, and restricted-v2's own
defaults (capabilities drop ALL, seccomp, no privilege escalation): Pod Security `restricted`, which the team
namespaces enforce, refuses a pod without them where OpenShift would add them.
"""

from __future__ import annotations

from mpiplat.jobs import GROUP_RANGE, UID_RANGE

RUN_LEVEL = "openshift.io/run-level"
EXEMPT_RUN_LEVEL = {RUN_LEVEL: "0"}
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
FIRST_UID, BLOCK = 1_000_000_000, 10_000
BLOCKS = 99_991  # a prime: a linear hash modulo it tells apart names that differ in one character
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-"  # a namespace name's characters (a DNS label)
MAX_NAME = 63
# Weights of the name's characters by position, fixed pseudo-random numbers below BLOCKS.
WEIGHTS = [(7_919 * (i + 1) ** 2 + 104_729 * (i + 3)) % BLOCKS or 1 for i in range(MAX_NAME)]
POLICY = "mpiplat-restricted-v2"
API = "admissionregistration.k8s.io"


def block(name: str) -> int:
    """The block a namespace gets: what the CEL expression computes, in Python (for tests and docs)."""
    return sum((ALPHABET.index(c) + 1) * WEIGHTS[i] for i, c in enumerate(name)) % BLOCKS


def uid_range(name: str) -> str:
    """The annotations' value for a namespace: `<first>/<size>`."""
    return f"{FIRST_UID + block(name) * BLOCK}/{BLOCK}"


_BLOCK_CEL = (f"{list(range(MAX_NAME))}.filter(i, i < size(object.metadata.name))"
              f".map(i, ('{ALPHABET}'.indexOf(object.metadata.name.substring(i, i + 1)) + 1) * {WEIGHTS}[i])"
              f".sum() % {BLOCKS}")
_NO_RANGE = (f"!has(object.metadata.annotations) || !('{UID_RANGE}' in object.metadata.annotations)")
_EXEMPT = {"matchExpressions": [
    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(SYSTEM_NAMESPACES)},
    {"key": RUN_LEVEL, "operator": "NotIn", "values": ["0", "1"]}]}
_PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
# The namespace's ranges, as [first, last] (the pod policies' variables).
_RANGE_VARS = [
    {"name": "uids", "expression": f"namespaceObject.metadata.annotations['{UID_RANGE}'].split('/')"},
    {"name": "firstUid", "expression": "int(variables.uids[0])"},
    {"name": "lastUid", "expression": "int(variables.uids[0]) + int(variables.uids[1]) - 1"},
    {"name": "groups", "expression": f"(has(namespaceObject.metadata.annotations) && '{GROUP_RANGE}' in "
                                     f"namespaceObject.metadata.annotations ? namespaceObject.metadata.annotations["
                                     f"'{GROUP_RANGE}'] : namespaceObject.metadata.annotations['{UID_RANGE}'])"
                                     ".split('/')"},
    {"name": "firstGroup", "expression": "int(variables.groups[0].split(',')[0])"},
    {"name": "lastGroup", "expression": "int(variables.groups[0].split(',')[0]) + int(variables.groups[1]) - 1"},
]
_HAS_RANGE = (f"has(namespaceObject.metadata.annotations) && '{UID_RANGE}' in namespaceObject.metadata.annotations")
_POD_SC = "has(object.spec.securityContext)"


def _containers(kind: str) -> str:
    return f"object.spec.?{kind}.orValue([])"


def _bad_users(kind: str, path: str) -> str:
    """CEL: a list of restricted-v2's complaints about the runAsUser of each container of `kind` out of range."""
    items = _containers(kind)
    return (f"[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15].filter(i, i < size({items}) && "
            f"has({items}[i].securityContext) && has({items}[i].securityContext.runAsUser) && "
            f"({items}[i].securityContext.runAsUser < variables.firstUid || "
            f"{items}[i].securityContext.runAsUser > variables.lastUid))"
            f".map(i, '.{path}[' + string(i) + '].runAsUser: Invalid value: ' + "
            f"string({items}[i].securityContext.runAsUser) + ': must be in the ranges: [' + "
            "string(variables.firstUid) + ', ' + string(variables.lastUid) + ']')")


_COMPLAINTS = (
    f"({_POD_SC} && has(object.spec.securityContext.runAsUser) && "
    "(object.spec.securityContext.runAsUser < variables.firstUid || "
    "object.spec.securityContext.runAsUser > variables.lastUid) ? ['.spec.securityContext.runAsUser: Invalid value: ' "
    "+ string(object.spec.securityContext.runAsUser) + ': must be in the ranges: [' + string(variables.firstUid) + "
    "', ' + string(variables.lastUid) + ']'] : []) + "
    f"{_bad_users('initContainers', 'initContainers')} + {_bad_users('containers', 'containers')} + "
    f"({_POD_SC} && has(object.spec.securityContext.fsGroup) && "
    "(object.spec.securityContext.fsGroup < variables.firstGroup || "
    "object.spec.securityContext.fsGroup > variables.lastGroup) ? ['.spec.securityContext.fsGroup: Invalid value: ' "
    "+ string(object.spec.securityContext.fsGroup) + ': must be in the ranges: [' + string(variables.firstGroup) + "
    "', ' + string(variables.lastGroup) + ']'] : [])")


_POD_DEFAULTS = (
    f"!({_HAS_RANGE}) ? [] : !{_POD_SC} ? [JSONPatch{{op: 'add', path: '/spec/securityContext', "
    "value: Object.spec.securityContext{runAsUser: variables.firstUid, fsGroup: variables.firstGroup}}] : "
    "(has(object.spec.securityContext.runAsUser) ? [] : [JSONPatch{op: 'add', "
    "path: '/spec/securityContext/runAsUser', value: variables.firstUid}]) + "
    "(has(object.spec.securityContext.fsGroup) ? [] : [JSONPatch{op: 'add', "
    "path: '/spec/securityContext/fsGroup', value: variables.firstGroup}])")


def _binding(kind: str, policy: str, **spec) -> dict:
    return {"apiVersion": f"{API}/{'v1beta1' if kind.startswith('Mutating') else 'v1'}", "kind": f"{kind}Binding",
            "metadata": {"name": policy}, "spec": {"policyName": policy, **spec}}


def manifests() -> list[dict]:
    """The policies and their bindings."""
    ranges = f"{POLICY}-namespace-ranges"
    defaults = f"{POLICY}-pod-defaults"
    check = f"{POLICY}-pod-ranges"
    return [
        {"apiVersion": f"{API}/v1beta1", "kind": "MutatingAdmissionPolicy", "metadata": {"name": ranges},
         "spec": {
             "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                     "operations": ["CREATE", "UPDATE"],
                                                     "resources": ["namespaces"]}]},
             "matchConditions": [{"name": "no-uid-range", "expression": _NO_RANGE}],
             "variables": [{"name": "first", "expression": f"string({FIRST_UID} + ({_BLOCK_CEL}) * {BLOCK})"}],
             "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": (
                 f"Object{{metadata: Object.metadata{{annotations: {{'{UID_RANGE}': variables.first + '/{BLOCK}', "
                 f"'{GROUP_RANGE}': variables.first + '/{BLOCK}'}}}}}}")}}],
             "reinvocationPolicy": "Never", "failurePolicy": "Fail"}},
        _binding("MutatingAdmissionPolicy", ranges),
        {"apiVersion": f"{API}/v1beta1", "kind": "MutatingAdmissionPolicy", "metadata": {"name": defaults},
         "spec": {
             "matchConstraints": {"resourceRules": [_PODS], "namespaceSelector": _EXEMPT},
             "variables": _RANGE_VARS,
             # A JSON patch: an apply configuration would first convert the pod to a typed object, which fails on
             # what the API takes (mpi-operator's launchers repeat env names).
             "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": _POD_DEFAULTS}}],
             "reinvocationPolicy": "Never", "failurePolicy": "Fail"}},
        _binding("MutatingAdmissionPolicy", defaults),
        {"apiVersion": f"{API}/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": check},
         "spec": {
             "matchConstraints": {"resourceRules": [_PODS], "namespaceSelector": _EXEMPT},
             "variables": [*_RANGE_VARS, {"name": "complaints", "expression": _COMPLAINTS}],
             "validations": [
                 {"expression": _HAS_RANGE, "reason": "Forbidden",
                  "message": "unable to validate against any security context constraint: [provider "
                             f"\"restricted-v2\": Forbidden: unable to find annotation {UID_RANGE}]"},
                 {"expression": f"!({_HAS_RANGE}) || size(variables.complaints) == 0", "reason": "Forbidden",
                  "messageExpression": "'unable to validate against any security context constraint: [provider "
                                       "\"restricted-v2\": ' + variables.complaints.join(', ') + ']'"}],
             "failurePolicy": "Fail"}},
        _binding("ValidatingAdmissionPolicy", check, validationActions=["Deny"]),
    ]
