"""cel-go's sets extension (1.29+, the runtime's own), against its documented behaviour."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds

TRUE = [
    "sets.contains([], []) && !sets.contains([], [1])",
    "sets.contains([1, 2, 3, 4], [2, 3])",
    "sets.contains([1, 2.0, 3u], [1.0, 2u, 3])",  # CEL equality across number types
    "sets.contains([[1], [2, 3]], [[2, 3.0]])",
    "sets.equivalent([], []) && sets.equivalent([1], [1, 1])",
    "sets.equivalent([1], [1u, 1.0]) && sets.equivalent([1, 2, 3], [3u, 2.0, 1])",
    "!sets.equivalent([1, 2], [2, 2, 2])",
    "!sets.intersects([1], []) && sets.intersects([1], [1, 2])",
    "sets.intersects([[1], [2, 3]], [[1, 2], [2, 3.0]])",
]


@pytest.mark.parametrize("expression", TRUE)
def test_documented_behaviour(expression: str) -> None:
    holds(expression)


def test_a_set_of_something_else_is_refused() -> None:
    fails("sets.contains('ab', ['a'])", match="does not compile")
