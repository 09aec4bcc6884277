"""An imported policy's probes: one per rule, kind and namespace listed on a target.

Each is an ordinary ``each_object`` probe (schemas/probe.py): one ``get`` lookup of the kind
(in the namespace the rule pins, else the whole cluster), the rule's variables, match
conditions and validations, the policy's params, ``empty_result: pass`` (admission
semantics: with nothing to judge, nothing is violated) and the policy as its ``origin``.
The probe runner evaluates it like any probe; which listed objects the rule selects is the
policy view's part (lookups.py, matching.py).

A stored object comes with no admission request; the one field of it import lets a policy
read is the operation, and a check judges each object as if it were created now:
``request.operation`` reads ``'CREATE'`` (and ``has(request.operation)`` is true), so a
policy that exempts updates (Gatekeeper's templates do, for immutable fields) judges every
object. The policy's own expressions are kept as written (``show``, ``export``).
"""

from __future__ import annotations

from schemas.policy import ImportedPolicy, PolicyRule
from schemas.probe import (
    ProbeCondition,
    ProbeLookup,
    ProbeOrigin,
    ProbeValidation,
    ProbeVariable,
    ProposedProbe,
)
from workers.core.policies.expressions import substitute_field
from workers.core.toolsets.backend import ResourceInfo


def lookup_kind(resource: ResourceInfo) -> str:
    """How a lookup names a served resource unambiguously: ``deployments.v1.apps``, and
    ``pods`` for the core group."""
    if not resource.group:
        return resource.plural
    return f"{resource.plural}.{resource.version}.{resource.group}"


def probe_for(
    policy: ImportedPolicy, rule: PolicyRule, resource: ResourceInfo, namespace: str | None
) -> ProposedProbe:
    args: dict[str, str] = {"kind": lookup_kind(resource)}
    if namespace is not None:
        args["namespace"] = namespace
    return ProposedProbe(
        lookups=[ProbeLookup(tool="get", args=args)],
        scope="each_object",
        variables=[
            ProbeVariable(name=v.name, expression=as_created(v.expression)) for v in rule.variables
        ],
        validations=[
            ProbeValidation(
                expression=as_created(v.expression),
                message=v.message,
                message_expression=as_created(v.message_expression)
                if v.message_expression
                else None,
                reason=v.reason,
            )
            for v in rule.validations
        ],
        match_conditions=[
            ProbeCondition(name=c.name, expression=as_created(c.expression), exception=c.exception)
            for c in rule.match_conditions
        ],
        params=policy.params,
        empty_result="pass",
        origin=ProbeOrigin(
            format=policy.format,
            name=policy.name,
            source=policy.source[:4096],
            validation_actions=policy.validation_actions,
        ),
    )


def as_created(expression: str) -> str:
    """The expression with ``request.operation`` read as ``'CREATE'`` (module docstring)."""
    return substitute_field(expression, "request", "operation", "'CREATE'")
