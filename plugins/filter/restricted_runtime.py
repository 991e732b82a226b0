"""mpiplat.platform.restricted_runtime: Trainer's runtimes made to run under OpenShift's restricted-v2 and Pod Security
`restricted`, by mpiplat.jobs.restricted_runtime (the one definition, which the local cluster applies too)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def restricted_runtime_docs(docs: list[dict]) -> list[dict]:
    try:
        from mpiplat.jobs import restricted_runtime
    except ImportError as err:
        raise AnsibleFilterError(f"mpiplat.platform.restricted_runtime needs the mpiplat package where Ansible runs "
                                 f"(`make setup` installs both into .venv): {err}") from err
    try:
        return [restricted_runtime(doc) for doc in docs]
    except (KeyError, TypeError, AttributeError) as err:
        raise AnsibleFilterError(f"a runtime manifest lacks spec.template.spec.replicatedJobs[].template.spec."
                                 f"template.spec: {err!r}") from err


class FilterModule:
    def filters(self):
        return {"restricted_runtime": restricted_runtime_docs}
