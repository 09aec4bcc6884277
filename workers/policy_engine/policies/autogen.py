"""Kyverno's pod-controller rules ("autogen"), for imported Kyverno policies.

Kyverno applies a policy written for Pods to the controllers that make Pods as well: for a
Deployment, StatefulSet, DaemonSet, Job, ReplicaSet or ReplicationController it judges the
pod template (``spec.template``), for a CronJob the job's pod template
(``spec.jobTemplate.spec.template``), by rewriting the rule's ``object.spec`` and
``object.metadata`` references. A scan of stored objects needs the same rules: Pods made
by a controller are often absent from a snapshot, and a controller whose template breaks
the policy is what a team fixes.

This module says when Kyverno derives such rules (the conditions of its autogen) and builds
them from a rule. ``object.metadata.namespace`` is not rewritten: a template has no
namespace, the controller's is meant.
"""

from __future__ import annotations

from schemas.policy import KindRef, PolicyRule, ResourceFilter
from schemas.probe import ProbeCondition, ProbeValidation, ProbeVariable
from workers.policy_engine.policies.expressions import rewrite_roots

TEMPLATE = {"spec": "spec.template.spec", "metadata": "spec.template.metadata"}
JOB_TEMPLATE = {
    "spec": "spec.jobTemplate.spec.template.spec",
    "metadata": "spec.jobTemplate.spec.template.metadata",
}
KEEP = frozenset({"namespace"})
TEMPLATE_CONTROLLERS: dict[str, KindRef] = {
    "DaemonSet": KindRef(group="apps", version="v1", name="DaemonSet"),
    "Deployment": KindRef(group="apps", version="v1", name="Deployment"),
    "Job": KindRef(group="batch", version="v1", name="Job"),
    "StatefulSet": KindRef(group="apps", version="v1", name="StatefulSet"),
    "ReplicaSet": KindRef(group="apps", version="v1", name="ReplicaSet"),
    "ReplicationController": KindRef(group="", version="v1", name="ReplicationController"),
}
CRONJOB = KindRef(group="batch", version="v1", name="CronJob")
# A ValidatingPolicy's controllers are named by resource, and it has no ReplicationController.
VALIDATING_POLICY_CONTROLLERS = {
    "daemonsets": "DaemonSet",
    "deployments": "Deployment",
    "jobs": "Job",
    "statefulsets": "StatefulSet",
    "replicasets": "ReplicaSet",
    "cronjobs": "CronJob",
}


def rewritten(rule: PolicyRule, prefixes: dict[str, str]) -> dict[str, object]:
    """The rule's conditions, variables and validations with object paths moved into the
    pod template ``prefixes`` names."""

    def move(expression: str) -> str:
        return rewrite_roots(expression, "object", prefixes, keep=KEEP)

    return {
        "match_conditions": [
            ProbeCondition(name=c.name, expression=move(c.expression))
            for c in rule.match_conditions
        ],
        "variables": [
            ProbeVariable(name=v.name, expression=move(v.expression)) for v in rule.variables
        ],
        "validations": [
            ProbeValidation(
                expression=move(v.expression),
                message=v.message,
                message_expression=move(v.message_expression) if v.message_expression else None,
                reason=v.reason,
            )
            for v in rule.validations
        ],
    }


def controller_rules(
    rule: PolicyRule, controllers: list[str], *, names: tuple[str, str]
) -> list[PolicyRule]:
    """The rules Kyverno derives from a Pod ``rule`` for ``controllers`` (kind names).

    ``names``: the derived rules' names (the template controllers', the CronJob's). Every
    match and exclude term that names Pod judges the controllers instead.
    """
    out: list[PolicyRule] = []
    template_kinds = [TEMPLATE_CONTROLLERS[c] for c in controllers if c in TEMPLATE_CONTROLLERS]
    if template_kinds:
        out.append(_derived(rule, names[0], template_kinds, TEMPLATE))
    if "CronJob" in controllers:
        out.append(_derived(rule, names[1], [CRONJOB], JOB_TEMPLATE))
    return out


def _derived(
    rule: PolicyRule, name: str, kinds: list[KindRef], prefixes: dict[str, str]
) -> PolicyRule:
    return rule.model_copy(
        update={
            "name": name[:63],
            "match": [[_swap(term, kinds) for term in group] for group in rule.match],
            "exclude": [[_swap(term, kinds) for term in group] for group in rule.exclude],
            "pod_controllers": rule.name,
            **rewritten(rule, prefixes),
        }
    )


def _swap(term: ResourceFilter, kinds: list[KindRef]) -> ResourceFilter:
    if term.kinds is None or not any(is_pod(kind) for kind in term.kinds):
        return term
    return term.model_copy(update={"kinds": list(kinds)})


def is_pod(kind: KindRef) -> bool:
    return kind.name in ("Pod", "pods") and kind.group in ("", "*")
