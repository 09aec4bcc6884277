"""CEL optional types (1.28+, the runtime's own library), against their documented
behaviour."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds

POD = {
    "metadata": {"name": "web", "labels": {"app": "web"}},
    "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]},
}
TRUE = [
    "object.?spec.?nodeName.orValue('none') == 'none'",
    "object.?metadata.?labels.?app.orValue('') == 'web'",
    "object.metadata.labels[?'tier'].orValue('none') == 'none'",
    "!object.spec.containers[?3].hasValue() && object.spec.containers[?0].value().name == 'a'",
    "optional.of(10).value() == 10 && !optional.none().hasValue()",
    "!optional.ofNonZeroValue('').hasValue() && !optional.ofNonZeroValue([]).hasValue()",
    "!optional.ofNonZeroValue(0).hasValue() && optional.ofNonZeroValue([1, 2, 3]).hasValue()",
    "optional.of(b'hello').hasValue() && !optional.ofNonZeroValue({}).hasValue()",
    "optional.none().or(optional.of(2)).value() == 2",
    "object.?spec.?containers.optMap(c, size(c)).orValue(0) == 1",
    "object.?spec.?containers.optFlatMap(c, c[?0]).value().name == 'a'",
    # version 2: first and last of a list
    "[1, 2, 3].first().value() == 1 && [1, 2, 3].last().value() == 3 && ![].first().hasValue()",
    # optional entries of list and map literals
    "[?optional.none(), 1] == [1] && {?'a': optional.none(), 'b': 1} == {'b': 1}",
    # cel-go: `or` and `orValue` give a receiver that is not an optional as it is
    "object.metadata.labels.orValue({}).app == 'web'",
    "object.metadata.?labels.orValue({}).app == 'web' && object.?status.orValue({}) == {}",
    "object.spec.containers.orValue([]).size() == 1 && object.metadata.name.orValue('') == 'web'",
    "object.metadata.labels.or(optional.of({})).app == 'web'",
    "object.?spec.?containers[?0].?name.orValue('none') == 'a'",
    "object.spec.containers.all(c, c.resources.requests.orValue({}).cpu == '1')",
]
ERRORS = [
    ("optional.ofNonZeroValue({}).value()", "optional.none"),
    ("object.spec.nodeName == 'n1'", "no such key|Key not found"),  # a plain absent field
    # not in the runtime's optional library: cel-go's optional.unwrap / unwrapOpt
    ("optional.unwrap([optional.of(42), optional.none()]) == [42]", "does not compile"),
    # the receiver of a fallback is still evaluated: its error is the call's
    ("object.spec.nodeName.orValue('none') == 'none'", "no such key|Key not found"),
]


@pytest.mark.parametrize("expression", TRUE)
def test_documented_behaviour(expression: str) -> None:
    holds(expression, {"object": POD})


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_documented_errors(expression: str, reason: str) -> None:
    fails(expression, {"object": POD}, match=reason)


def test_a_fallback_inside_a_comprehension_reads_each_element() -> None:
    """Each element's optional chain is its own: the runtime's lazily bound values, inside a
    comprehension in a variable's scope, were kept from one iteration to the next."""
    from workers.policy_engine.cel.programs import BoolProgram, StepMeter
    from workers.policy_engine.probes.run_constants import constant_variables

    variables = [
        ("all", "object.spec.containers + object.spec.?initContainers.orValue([]) + "
                "object.spec.?ephemeralContainers.orValue([])"),
        ("kinds", "['a_t', 'b_t', 'c_t']"),
        ("ok", "object.spec.?sc.?o.?type.orValue('') == '' || "
               "variables.kinds.exists(type, type == object.spec.sc.o.type)"),
    ]  # fmt: skip
    expression = ("variables.ok && variables.all.all(c, c.?sc.?o.?type.orValue('') == '' || "
                  "variables.kinds.exists(type, type == c.sc.o.type))")  # fmt: skip
    pod = {"spec": {"containers": [{"name": "a"}],
                    "initContainers": [{"name": "b", "sc": {"o": {"type": "b_t"}}},
                                       {"name": "c", "sc": {"o": {"user": "u"}}}]}}  # fmt: skip
    constants = constant_variables(variables, {}, StepMeter())
    program = BoolProgram(expression, variables=variables, constants=constants)
    assert program({"object": pod}) is True
