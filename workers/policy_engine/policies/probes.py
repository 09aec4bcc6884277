"""An imported policy's probes: one per rule, kind and namespace listed on a target.

Each is an ordinary ``each_object`` probe (schemas/probe.py): one ``get`` lookup of the kind
(in the namespace the rule pins, else the whole cluster), the rule's variables, match
conditions and validations, the policy's params, ``empty_result: pass`` (admission
semantics: with nothing to judge, nothing is violated) and the policy as its ``origin``.
The probe runner evaluates it like any probe; which listed objects the rule selects is the
policy view's part (lookups.py, matching.py).

A check judges each stored object as if it were created now: the runner serves the policy
``request`` of that CREATE, ``oldObject`` null and ``namespaceObject`` from the target
(probes/admission_inputs.py), so a policy that exempts updates (Gatekeeper's templates do,
for immutable fields) judges every object. The policy's expressions run as written.
"""

from __future__ import annotations

from typing import Any

from schemas.policy import ImportedPolicy, PolicyRule
from schemas.probe import (
    ProbeCondition,
    ProbeLookup,
    ProbeOrigin,
    ProbeValidation,
    ProbeVariable,
    ProposedProbe,
)
from workers.engine.toolsets.backend import ResourceInfo

_FROM_POLICY: Any = object()  # probe_for: bind the policy's own params


def lookup_kind(resource: ResourceInfo) -> str:
    """How a lookup names a served resource unambiguously: ``deployments.v1.apps``, and
    ``pods`` for the core group."""
    if not resource.group:
        return resource.plural
    return f"{resource.plural}.{resource.version}.{resource.group}"


def probe_for(
    policy: ImportedPolicy,
    rule: PolicyRule,
    resource: ResourceInfo,
    namespace: str | None,
    *,
    params: Any = _FROM_POLICY,
) -> ProposedProbe:
    """The probe of ``rule`` over ``resource`` objects (in ``namespace``); ``params``: the
    params object to bind instead of the policy's own (one read from the target)."""
    args: dict[str, str] = {"kind": lookup_kind(resource)}
    if namespace is not None:
        args["namespace"] = namespace
    return ProposedProbe(
        lookups=[ProbeLookup(tool="get", args=args)],
        scope="each_object",
        variables=[ProbeVariable(name=v.name, expression=v.expression) for v in rule.variables],
        validations=[
            ProbeValidation(
                expression=v.expression,
                message=v.message,
                message_expression=v.message_expression,
                reason=v.reason,
            )
            for v in rule.validations
        ],
        match_conditions=[
            ProbeCondition(name=c.name, expression=c.expression, exception=c.exception)
            for c in rule.match_conditions
        ],
        params=policy.params if params is _FROM_POLICY else params,
        empty_result="pass",
        origin=ProbeOrigin(
            format=policy.format,
            name=policy.name,
            source=policy.source[:4096],
            validation_actions=policy.validation_actions,
        ),
    )
