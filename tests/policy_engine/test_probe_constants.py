"""A probe's variables that read no object (only params, or nothing) are constants of the
probe run: evaluated once, read as values, not bound around every expression."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.probe import ProposedProbe
from workers.policy_engine.cel.programs import CelError, StepMeter
from workers.policy_engine.probes.program import ProbeProgram
from workers.policy_engine.probes.run_constants import constant_variables

CHAIN = [("v0", "params.spec.limit")] + [(f"v{n}", f"variables.v{n - 1} + 1") for n in range(1, 31)]


def _probe(expression: str, variables: list[tuple[str, str]], params: Any) -> ProposedProbe:
    return ProposedProbe.model_validate(
        {
            "lookups": [{"tool": "get", "args": {"kind": "Pod"}}],
            "scope": "each_object",
            "validations": [{"expression": expression}],
            "variables": [{"name": n, "expression": e} for n, e in variables],
            "params": params,
            "empty_result": "pass",
            "origin": {"format": "vap", "name": "p", "source": "-"},
        }
    )


def test_a_long_chain_of_params_variables_runs() -> None:
    """Bound around the expression, 31 variables passed the runtime's parser nesting of 32."""
    probe = _probe("object.spec.replicas <= variables.v30", CHAIN, {"spec": {"limit": 1}})
    program = ProbeProgram(probe)
    assert program.judge({"object": {"spec": {"replicas": 31}}}).passed
    assert not program.judge({"object": {"spec": {"replicas": 32}}}).passed


def test_only_variables_that_read_no_object_are_constants() -> None:
    variables = [
        ("limit", "params.spec.limit"),
        ("broken", "params.spec.missing"),  # errs: stays lazy, an error only where read
        ("after", "variables.broken + 1"),
        ("replicas", "object.spec.replicas"),
        ("unsigned", "uint(variables.limit)"),  # would come back as an int
        ("literal", "['a', 'b']"),
    ]
    found = constant_variables(variables, {"params": {"spec": {"limit": 3}}}, StepMeter())
    assert found == {"limit": 3, "literal": ["a", "b"]}


def test_an_erring_constant_is_read_lazily() -> None:
    variables = [("broken", "params.spec.missing"), ("limit", "params.spec.limit")]
    probe = _probe("object.spec.replicas <= variables.limit", variables, {"spec": {"limit": 2}})
    assert ProbeProgram(probe).judge({"object": {"spec": {"replicas": 2}}}).passed
    failing = _probe("variables.broken == 1", variables, {"spec": {"limit": 2}})
    with pytest.raises(CelError, match="failed"):
        ProbeProgram(failing).judge({"object": {"spec": {"replicas": 2}}})


def test_an_export_with_many_variables_compiles_each_read_as_a_declared_name() -> None:
    """The API server compiles `variables.NAME` as a declared name; bound around the text,
    31 variables each reading the one before passed the runtime's parser nesting of 32."""
    from schemas.probe import ProbeLookup, ProbeValidation, ProbeVariable
    from tests.policy_engine.test_policy_export import _record
    from workers.policy_engine.probes.export import export_documents

    chain = [("v0", "object.spec.replicas"), *CHAIN[1:]]
    probe = ProposedProbe(
        lookups=[ProbeLookup(tool="get", args={"kind": "Deployment"})],
        scope="each_object",
        variables=[ProbeVariable(name=n, expression=e) for n, e in chain],
        validations=[ProbeValidation(expression="variables.v30 < 100")],
    )
    policy, _ = export_documents(_record(probe), "vap")
    assert len(policy["spec"]["variables"]) == 31
