"""A probe's variables (``variables.NAME``), as a ValidatingAdmissionPolicy's: lazily
evaluated, at most once, each able to read the ones before it."""

from __future__ import annotations

import pytest

from workers.policy_engine.cel.programs import BoolProgram, CelError, StepMeter
from workers.policy_engine.probes.run_constants import constant_variables

POD = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "web", "image": "reg/web:1"}]}}
VARIABLES = [
    ("names", "object.spec.containers.map(c, c.name)"),
    ("first", "variables.names[0]"),
    ("broken", "object.spec.nodeName"),  # an error, but never read
]


def test_variables_are_lazy_and_read_earlier_ones() -> None:
    program = BoolProgram("variables.first == 'web' && size(variables.names) == 1",
                          variables=VARIABLES)  # fmt: skip
    assert program({"object": POD}) is True


def test_a_broken_variable_counts_only_where_read() -> None:
    reads_broken = BoolProgram("variables.broken == 'n1' || true", variables=VARIABLES)
    assert reads_broken({"object": POD}) is True  # CEL's || absorbs the error
    with pytest.raises(CelError, match="failed"):
        BoolProgram("variables.broken == 'n1'", variables=VARIABLES)({"object": POD})


def test_a_variable_may_read_only_earlier_ones() -> None:
    with pytest.raises(CelError, match="not defined before"):
        BoolProgram("variables.later == 1", variables=[("x", "variables.later"), ("later", "1")])


def test_variables_use_every_library() -> None:
    variables = [("images", "object.spec.containers.transformList(i, c, c.image)"),
                 ("invalid", "format.dns1123Label().validate(object.metadata.name)")]  # fmt: skip
    expression = "!variables.invalid.hasValue() && variables.images[0].find('[0-9]+') == '1'"
    program = BoolProgram(expression, variables=variables)
    assert program({"object": POD}) is True


PARAMS = (
    "params",
    "has(params.spec) && has(params.spec.parameters) ? params.spec.parameters : null",
)


@pytest.mark.parametrize(
    ("expression", "parameters", "expected"),
    [
        # the API server's `variables` is a map of the declared names: present when declared
        ("has(variables.params)", None, True),
        ("has(variables.params) && has(variables.names)", {"a": 1}, True),
        # cel-go's presence test is false on null (Gatekeeper's params without parameters)
        ("!has(variables.params.exemptImages)", None, True),
        ("has(variables.params.exemptImages)", {"exemptImages": []}, True),
        ("has(variables.first.x)", None, False),  # a string has no fields
        ("has(variables.params.a) && !has(variables.params.b)", {"a": 1}, True),
    ],
)
def test_presence_tests_on_variables(expression: str, parameters: object, expected: bool) -> None:
    spec = {} if parameters is None else {"parameters": parameters}
    program = BoolProgram(expression, variables=[PARAMS, *VARIABLES])
    assert program({"object": POD, "params": {"spec": spec}}) is expected


def test_a_presence_test_keeps_the_variables_error() -> None:
    with pytest.raises(CelError, match="failed"):
        BoolProgram("has(variables.broken)", variables=VARIABLES)({"object": POD})
    with pytest.raises(CelError, match="failed"):  # a missing field before the tested one
        BoolProgram("has(variables.params.a.b)", variables=[PARAMS])(
            {"object": POD, "params": {"spec": {"parameters": {}}}}
        )


def _doubling(first: str, levels: int) -> list[tuple[str, str]]:
    """Variables each the one before concatenated with itself: 2**levels copies of ``first``
    (one `+` each, so no expression has more than one)."""
    return [("v0", first)] + [
        (f"v{i}", f"variables.v{i - 1} + variables.v{i - 1}") for i in range(1, levels + 1)
    ]


@pytest.mark.parametrize(
    "first",
    ["object.metadata.name", "'" + "a" * 1000 + "'", "[" + ", ".join(["1"] * 100) + "]"],
    ids=["input string", "literal string", "literal list"],
)
def test_variables_that_double_each_other_are_refused(first: str) -> None:
    """Red team: 16 variables doubling the one before built a 65 MB string (24: 16 GB, the
    worker killed for memory) for one step; the cost bound now counts each variable's
    concatenations as often as it is read, through the variables it reads."""
    program = BoolProgram("size(variables.v16) > 0", variables=_doubling(first, 16))
    with pytest.raises(CelError, match="too costly"):
        program({"object": {"metadata": {"name": "a" * 1000}}})


def test_doubling_constants_are_not_evaluated() -> None:
    """The same chain of constants (no object read) is not built once per probe run either."""
    meter = StepMeter()
    constants = constant_variables(_doubling("'" + "a" * 1000 + "'", 16), {}, meter)
    assert "v16" not in constants
    assert max((len(v) for v in constants.values()), default=0) <= 1000 * 2**8


def test_constants_that_nest_one_another_stay_lazy() -> None:
    """Red team: constants each a list of the one before twice (no `+`): 20 of them took
    3.4 s and 330 MB to bring into Python once, then 0.8 s per object to bind and measure,
    for one step each (24: minutes and gigabytes). Such a variable stays lazy: the runtime
    shares the copies, as it does for any variable read per object."""
    variables = [("v0", "'a'")] + [
        (f"v{i}", f"[variables.v{i - 1}, variables.v{i - 1}]") for i in range(1, 13)
    ]
    constants = constant_variables(variables, {}, StepMeter())
    assert "v0" in constants and "v12" not in constants
    program = BoolProgram("object.x == 1 && size(variables.v12) == 2", variables=variables,
                          constants=constants)  # fmt: skip
    assert program({"object": {"x": 1}}) is True
