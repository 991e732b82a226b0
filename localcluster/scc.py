"""An emulation of OpenShift's restricted-v2 SCC on the local cluster, by the API server's own admission
policies (ValidatingAdmissionPolicy, and MutatingAdmissionPolicy: beta in 1.34, its feature gate and API
version switched on by configs.kwok_config).

What it does, in OpenShift's annotations and words:
- every namespace gets a UID range and a supplemental-group range when it is created (and again should an
  update drop them): `openshift.io/sa.scc.uid-range` and `openshift.io/sa.scc.supplemental-groups`, both
  `<first>/10000`. OpenShift's cluster-policy-controller hands out blocks in order; here the block comes from a
  hash of the name (a CEL expression: the policies keep no state), so two names may share one, with odds of
  1 in BLOCKS a pair, and names that differ in one character never do;
  With them an SELinux level, `openshift.io/sa.scc.mcs` (`s0:cX,cY`), as OpenShift writes it;
- a pod is written as OpenShift's SCC admission (its sccmatching provider) writes it under restricted-v2, in
  any namespace but the exempt ones, whatever its Pod Security label: each container that sets no runAsUser
  (and whose pod sets none) gets the range's first UID in its own securityContext, with runAsNonRoot,
  allowPrivilegeEscalation false and capabilities dropping ALL where missing; the pod gets fsGroup (the group
  range's first), the namespace's SELinux level and seccomp RuntimeDefault where missing, and the annotation
  `openshift.io/scc: restricted-v2`. restricted-v2's supplementalGroups strategy is RunAsAny: none are added;
- a pod is refused, in restricted-v2's words and fields, when its runAsUser (pod or any container) or fsGroup
  lies outside the ranges, or it asks for what restricted-v2 forbids: privileged, host network, PID or IPC,
  host ports, added capabilities (but NET_BIND_SERVICE), privilege escalation, volumes outside restricted-v2's
  list.
Exempt, as OpenShift's system namespaces are: kube-system, kube-public, kube-node-lease and namespaces labelled
`openshift.io/run-level` 0 or 1 (`up` labels the controllers' namespaces so).
A grant is honoured for anyuid, OpenShift's usual loosening: a pod whose ServiceAccount may `use` the
securitycontextconstraints `anyuid` (RBAC, group security.openshift.io, as `oc adm policy add-scc-to-user` grants
it) is admitted as anyuid admits it: no UID assigned, no range checked, `openshift.io/scc: anyuid`.
Not emulated: SELinux enforcement (the host has none), the requesting user's grants (the local cluster's
controllers act as admin), SCCs other than restricted-v2 and anyuid, and their priority beyond those two.
"""

from __future__ import annotations

from mpiplat.jobs import GROUP_RANGE, SCC_ANNOTATION, UID_RANGE

MCS = "openshift.io/sa.scc.mcs"
# restricted-v2's volume types; the others a pod may name are refused (the API's volume sources, those in use).
VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
           "secret")
OTHER_VOLUMES = ("hostPath", "nfs", "iscsi", "gitRepo", "image", "rbd", "cephfs", "glusterfs", "fc", "flexVolume",
                 "azureFile", "azureDisk", "awsElasticBlockStore", "gcePersistentDisk", "cinder", "portworxVolume",
                 "vsphereVolume")
ALLOWED_CAPABILITIES = ("NET_BIND_SERVICE",)

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


MCS_SPAN = 914  # block b -> categories (110 + b % 914, b // 914): distinct pairs for every block below BLOCKS


def mcs(name: str) -> str:
    """The SELinux level a namespace gets (`openshift.io/sa.scc.mcs`), the larger category first as OpenShift
    writes it: what the CEL expression computes."""
    b = block(name)
    return f"s0:c{110 + b % MCS_SPAN},c{b // MCS_SPAN}"


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


_INDICES = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]"  # containers a pod may have, of each kind


def _each(kind: str, when: str, patch: str) -> str:
    """CEL: a JSONPatch for each container of `kind` (`$c.` in `when` and `patch`: the container; i its index) where
    `when` holds."""
    items = _containers(kind)
    when, patch = (x.replace("$c.", f"{items}[i].") for x in (when, patch))
    return f"{_INDICES}.filter(i, i < size({items}) && {when}).map(i, {patch})"


def _container_defaults(kind: str) -> str:
    """CEL: restricted-v2's writes to each container of `kind`: the range's first UID where neither the pod nor the
    container sets one, runAsNonRoot, allowPrivilegeEscalation false and capabilities dropping ALL where missing."""
    at = f"'/spec/{kind}/' + string(i) + '/securityContext"
    typ = f"Object.spec.{kind}.securityContext"
    sc = "has($c.securityContext)"  # `$c.`: the container (_each)
    pod_user = f"{_POD_SC} && has(object.spec.securityContext.runAsUser)"
    caps = f"{sc} && has($c.securityContext.capabilities)"
    return " + ".join([
        _each(kind, f"!{sc}", f"JSONPatch{{op: 'add', path: {at}', value: {typ}{{}}}}"),
        _each(kind, f"!({pod_user}) && !({sc} && has($c.securityContext.runAsUser))",
              f"JSONPatch{{op: 'add', path: {at}/runAsUser', value: variables.firstUid}}"),
        _each(kind, f"!({sc} && has($c.securityContext.runAsNonRoot))",
              f"JSONPatch{{op: 'add', path: {at}/runAsNonRoot', value: true}}"),
        # Not beside privileged: the API refuses that pair before the policy could say "Privileged containers are
        # not allowed", as OpenShift says it.
        _each(kind, f"!({sc} && has($c.securityContext.allowPrivilegeEscalation)) && "
                    f"!({sc} && has($c.securityContext.privileged) && $c.securityContext.privileged)",
              f"JSONPatch{{op: 'add', path: {at}/allowPrivilegeEscalation', value: false}}"),
        _each(kind, f"!({caps})",
              f"JSONPatch{{op: 'add', path: {at}/capabilities', value: {typ}.capabilities{{drop: ['ALL']}}}}"),
        _each(kind, f"{caps} && !has($c.securityContext.capabilities.drop)",
              f"JSONPatch{{op: 'add', path: {at}/capabilities/drop', value: ['ALL']}}"),
        _each(kind, f"{caps} && has($c.securityContext.capabilities.drop) && "
                    "!('ALL' in $c.securityContext.capabilities.drop)",
              f"JSONPatch{{op: 'add', path: {at}/capabilities/drop/-', value: 'ALL'}}"),
    ])


def _pod_field(field: str, value: str) -> str:
    return (f"({_POD_SC} && has(object.spec.securityContext.{field}) ? [] : "
            f"[JSONPatch{{op: 'add', path: '/spec/securityContext/{field}', value: {value}}}])")


# The pod's ServiceAccount may use anyuid (a ClusterRoleBinding or RoleBinding to `use` it).
_ANYUID = ("authorizer.serviceAccount(request.namespace, object.spec.?serviceAccountName.orValue('default'))"
           ".group('security.openshift.io').resource('securitycontextconstraints').name('anyuid').check('use')"
           ".allowed()")
_MCS_OF_NS = (f"has(namespaceObject.metadata.annotations) && '{MCS}' in namespaceObject.metadata.annotations ? "
              f"namespaceObject.metadata.annotations['{MCS}'] : ''")
# restricted-v2's writes, as one JSON patch (OpenShift's sccmatching provider: the pod's then each container's).
def _annotate(scc: str) -> str:
    return (f"[has(object.metadata.annotations) ? "
            f"JSONPatch{{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('{SCC_ANNOTATION}'), "
            f"value: '{scc}'}} : "
            f"JSONPatch{{op: 'add', path: '/metadata/annotations', value: {{'{SCC_ANNOTATION}': '{scc}'}}}}]")


_POD_DEFAULTS = (
    f"!({_HAS_RANGE}) ? [] : variables.anyuid ? {_annotate('anyuid')} : "
    f"(!{_POD_SC} ? [JSONPatch{{op: 'add', path: '/spec/securityContext', value: Object.spec.securityContext{{}}}}]"
    " : []) + "
    + _pod_field("fsGroup", "variables.firstGroup") + " + "
    + _pod_field("seccompProfile", "Object.spec.securityContext.seccompProfile{type: 'RuntimeDefault'}") + " + "
    + "(variables.mcs == '' ? [] : " + _pod_field(
        "seLinuxOptions", "Object.spec.securityContext.seLinuxOptions{level: variables.mcs}") + ") + "
    + f"{_container_defaults('initContainers')} + {_container_defaults('containers')} + "
    + _annotate("restricted-v2"))


def _forbidden(kind: str, path: str) -> str:
    """CEL: restricted-v2's complaints about what the containers of `kind` ask for: privileged, escalation, added
    capabilities, host ports (`$c.`: the container, as in _each)."""
    where = f"'.{path}[' + string(i) + ']."
    others = f"filter(a, !(a in {list(ALLOWED_CAPABILITIES)}))"
    return " + ".join([
        _each(kind, "has($c.securityContext) && has($c.securityContext.privileged) && $c.securityContext.privileged",
              f"{where}privileged: Invalid value: true: Privileged containers are not allowed'"),
        _each(kind, "has($c.securityContext) && has($c.securityContext.allowPrivilegeEscalation) && "
                    "$c.securityContext.allowPrivilegeEscalation",
              f"{where}allowPrivilegeEscalation: Invalid value: true: Allowing privilege escalation for containers "
              "is not allowed'"),
        _each(kind, "has($c.securityContext) && has($c.securityContext.capabilities) && "
                    f"has($c.securityContext.capabilities.add) && $c.securityContext.capabilities.add"
                    f".exists(a, !(a in {list(ALLOWED_CAPABILITIES)}))",
              f"{where}capabilities.add: Invalid value: \"' + $c.securityContext.capabilities.add.{others}[0] + "
              "'\": capability may not be added'"),
        _each(kind, "has($c.ports) && $c.ports.exists(p, has(p.hostPort) && p.hostPort != 0)",
              f"{where}hostPort: Invalid value: ' + string($c.ports.filter(p, has(p.hostPort) && "
              "p.hostPort != 0)[0].hostPort) + ': Host ports are not allowed to be used'"),
    ])


_HOST = [("hostNetwork", "Host network"), ("hostPID", "Host PID"), ("hostIPC", "Host IPC")]
_VOLUMES = "object.spec.?volumes.orValue([])"
_FORBIDDEN = " + ".join(
    [f"(has(object.spec.{f}) && object.spec.{f} ? ['.spec.securityContext.{f}: Invalid value: true: {what} is not "
     "allowed to be used'] : [])" for f, what in _HOST]
    + [_forbidden("initContainers", "initContainers"), _forbidden("containers", "containers")]
    + [f"{_INDICES}.filter(i, i < size({_VOLUMES}) && has({_VOLUMES}[i].{v})).map(i, 'spec.volumes[' + string(i) + "
       f"']: Invalid value: \"{v}\": {v} volumes are not allowed to be used')" for v in OTHER_VOLUMES])


def _message(complaints: str) -> str:
    return ("'unable to validate against any security context constraint: [provider \"restricted-v2\": ' + "
            f"({complaints}).join(', ') + ']'")


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
             "variables": [{"name": "block", "expression": _BLOCK_CEL},
                           {"name": "first", "expression": f"string({FIRST_UID} + variables.block * {BLOCK})"},
                           {"name": "mcs", "expression": f"'s0:c' + string(110 + variables.block % {MCS_SPAN}) + "
                                                         f"',c' + string(variables.block / {MCS_SPAN})"}],
             "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": (
                 f"Object{{metadata: Object.metadata{{annotations: {{'{UID_RANGE}': variables.first + '/{BLOCK}', "
                 f"'{GROUP_RANGE}': variables.first + '/{BLOCK}', '{MCS}': variables.mcs}}}}}}")}}],
             "reinvocationPolicy": "Never", "failurePolicy": "Fail"}},
        _binding("MutatingAdmissionPolicy", ranges),
        {"apiVersion": f"{API}/v1beta1", "kind": "MutatingAdmissionPolicy", "metadata": {"name": defaults},
         "spec": {
             "matchConstraints": {"resourceRules": [_PODS], "namespaceSelector": _EXEMPT},
             "variables": [*_RANGE_VARS, {"name": "mcs", "expression": _MCS_OF_NS},
                           {"name": "anyuid", "expression": _ANYUID}],
             # A JSON patch: an apply configuration would first convert the pod to a typed object, which fails on
             # what the API takes (mpi-operator's launchers repeat env names).
             "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": _POD_DEFAULTS}}],
             "reinvocationPolicy": "Never", "failurePolicy": "Fail"}},
        _binding("MutatingAdmissionPolicy", defaults),
        {"apiVersion": f"{API}/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": check},
         "spec": {
             "matchConstraints": {"resourceRules": [_PODS], "namespaceSelector": _EXEMPT},
             # A message expression may not use the authorizer: the anyuid grant decides in the expressions.
             "variables": [*_RANGE_VARS, {"name": "anyuid", "expression": _ANYUID},
                           {"name": "ranges", "expression": _COMPLAINTS},
                           {"name": "forbidden", "expression": _FORBIDDEN}],
             "validations": [
                 {"expression": _HAS_RANGE, "reason": "Forbidden",
                  "message": "unable to validate against any security context constraint: [provider "
                             f"\"restricted-v2\": Forbidden: unable to find annotation {UID_RANGE}]"},
                 {"expression": f"!({_HAS_RANGE}) || variables.anyuid || size(variables.ranges) == 0",
                  "reason": "Forbidden", "messageExpression": _message("variables.ranges + variables.forbidden")},
                 {"expression": f"!({_HAS_RANGE}) || size(variables.forbidden) == 0",
                  "reason": "Forbidden", "messageExpression": _message("variables.forbidden")}],
             "failurePolicy": "Fail"}},
        _binding("ValidatingAdmissionPolicy", check, validationActions=["Deny"]),
    ]
