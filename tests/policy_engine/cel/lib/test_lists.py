"""Kubernetes' lists library, against its documented behaviour."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds, value

TRUE = [
    "[1, 2, 3].isSorted() && ['a', 'b', 'b', 'c'].isSorted() && ![2.0, 1.0].isSorted()",
    "[1].isSorted() && [].isSorted()",
    "[1, 3].sum() == 4 && [1.0, 3.0].sum() == 4.0 && [].sum() == 0",
    "[1, 3].min() == 1 && [1, 3].max() == 3 && [1].min() == 1",
    "['b', 'a', 'c'].max() == 'c'",
    "[1, 2, 2, 3].indexOf(2) == 1 && ['a', 'b', 'b', 'c'].lastIndexOf('b') == 2",
    "[1.0].indexOf(1.1) == -1 && [].indexOf('string') == -1",
    "[0.5, 0.25, 0.25].sum() == 1.0",
]
ERRORS = [
    ("[].min()", "empty list"),
    ("[].max()", "empty list"),
    # elements that cannot be compared: Kubernetes refuses such a literal list at creation
    ("[1, 'a'].isSorted()", "cannot be compared"),
    ("object.items.isSorted()", "cannot be compared"),
    ("[1, 'a'].min()", "cannot be compared"),
    ("[1, 2.5].sum()", "mixed"),
    # a known difference: durations and timestamps cannot come back from the library
    ("[duration('1m'), duration('1s')].sum() == duration('61s')", "not supported"),
    ("[timestamp('2024-01-01T00:00:00Z')].max()", "not supported"),
]


@pytest.mark.parametrize("expression", TRUE)
def test_documented_behaviour(expression: str) -> None:
    holds(expression)


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_documented_errors(expression: str, reason: str) -> None:
    fails(expression, {"object": {"items": ["b", 2, "a"]}}, match=reason)


def test_lists_of_the_object() -> None:
    deployment = {"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}}
    assert value("object.spec.template.spec.containers.map(c, c.name).isSorted()",
                 {"object": deployment}) is True  # fmt: skip
