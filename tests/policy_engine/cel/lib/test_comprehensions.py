"""cel-go's two-variable comprehensions (1.32+), against their documented behaviour."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds, value

TRUE = [
    "[1, 2, 3].all(i, j, i < j)",
    "!{'hello': 'world', 'taco': 'taco'}.all(k, v, k != v)",
    "{'h': ['hello', 'hi'], 'j': ['joke', 'jog']}.all(k, vals, vals.all(v, v.startsWith(k)))",
    "{'greeting': 'hello', 'farewell': 'goodbye'}.exists(k, v, k.startsWith('good') || "
    "v.endsWith('bye'))",
    "![1, 2, 4, 8, 16].exists(i, v, v == 1024 && i == 10)",
    "![1, 2, 1, 3, 1, 4].existsOne(i, v, i == 1 || v == 1)",
    "[1, 1, 2, 2, 3, 3].existsOne(i, v, i == 2 && v == 2)",
    "{'i': 0, 'j': 1, 'k': 2}.existsOne(i, v, i == 'l' || v == 1)",
    # exists_one is another name of existsOne with two variables
    "[1, 1, 2, 2, 3, 3].exists_one(i, v, i == 2 && v == 2)",
    "[1, 2, 3].transformList(i, v, (i * v) + v) == [1, 4, 9]",
    "[1, 2, 3].transformList(i, v, i % 2 == 0, (i * v) + v) == [1, 9]",
    # a map's entries in some order: cel-go visits a map literal in its order, the runtime
    # in its own (a known difference; maps from objects have no order in either)
    "sets.equivalent({'greeting': 'hello', 'farewell': 'goodbye'}.transformList(k, _, k), "
    "['greeting', 'farewell'])",
    "sets.equivalent({'greeting': 'hello', 'farewell': 'goodbye'}.transformList(_, v, v), "
    "['hello', 'goodbye'])",
    "[1, 2, 3].transformMap(i, v, (i * v) + v) == {0: 1, 1: 4, 2: 9}",
    "[1, 2, 3].transformMap(i, v, i % 2 == 0, (i * v) + v) == {0: 1, 2: 9}",
    "{'greeting': 'hello'}.transformMap(k, v, v + '!') == {'greeting': 'hello!'}",
    "{'greeting': 'hello'}.transformMapEntry(k, v, {v: k}) == {'hello': 'greeting'}",
    "[1, 2, 3].transformMapEntry(i, v, {v: i}) == {1: 0, 2: 1, 3: 2}",
    "[1, 2, 3].transformMapEntry(i, v, v > 1, {v: i}) == {2: 1, 3: 2}",
    # the one-variable forms are unchanged
    "[1, 2].all(x, x > 0) && [1, 1].exists_one(x, x == 1) == false",
]
ERRORS = [
    (
        "{'greeting': 'aloha', 'farewell': 'aloha'}.transformMapEntry(k, v, {v: k})",
        "already exists",
    ),
    ("[1, 2].transformMapEntry(i, v, {'same': v})", "already exists"),
    ("[1, 2].all(i, i, i > 0)", "does not compile"),  # the two variables must differ
    ("[1, 0].transformMap(i, v, 1 / v)", "divide by zero|division by zero"),
]


@pytest.mark.parametrize("expression", TRUE)
def test_documented_behaviour(expression: str) -> None:
    holds(expression)


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_documented_errors(expression: str, reason: str) -> None:
    fails(expression, match=reason)


def test_over_the_objects_fields() -> None:
    containers = [{"name": "a", "image": "reg/a:1"}, {"name": "b", "image": "b"}]
    pod = {"metadata": {"labels": {"app": "web", "tier": ""}}, "spec": {"containers": containers}}
    data = {"object": pod}
    assert value("object.metadata.labels.all(k, v, v != '')", data) is False
    assert value("object.spec.containers.exists(i, c, i > 0 && !c.image.startsWith('reg/'))", data)
    assert value("object.spec.containers.transformMap(i, c, c.name)", data) == {0: "a", 1: "b"}
    assert value("object.metadata.labels.transformMapEntry(k, v, v != '', {v: k})", data) == {
        "web": "app"
    }


def test_a_call_named_like_a_macro_inside_a_string_is_not_rewritten() -> None:
    assert value("'x.transformMap(a, b, c)'.size()") == len("x.transformMap(a, b, c)")
