"""Kyverno's transform library (``listObjToMap`` and ``transform.listObjToMap``): two lists
of maps paired into one map, with Kyverno's errors; only inside a Kyverno
ValidatingPolicy."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.kyverno_support import (
    in_kyverno_policy,
    kyverno_fails,
    kyverno_value,
)
from tests.policy_engine.cel.lib.support import fails, value

KEYS = "[{'id': 'web', 'tier': 'a'}, {'id': 'db', 'tier': 'b'}]"
VALUES = "[{'port': 80}, {'port': 5432}]"
CASES = [
    (f"transform.listObjToMap({KEYS}, {VALUES}, 'id', 'port')", {"web": 80, "db": 5432}),
    (f"listObjToMap({KEYS}, {VALUES}, 'id', 'port')", {"web": 80, "db": 5432}),
    # a value map without the field: null
    (f"listObjToMap({KEYS}, [{{'port': 80}}, {{}}], 'id', 'port')", {"web": 80, "db": None}),
    # a repeated key: the last wins
    ("listObjToMap([{'k': 'x'}, {'k': 'x'}], [{'v': 1}, {'v': 2}], 'k', 'v')", {"x": 2}),
    ("listObjToMap([], [], 'k', 'v')", {}),
]
# each call Kyverno refuses, and what its error says
ERRORS = {
    "listObjToMap([{'k': 'x'}], [], 'k', 'v')": "equal length. list1: 1, list2: 0",
    "listObjToMap([{'k': 1}], [{'v': 1}], 'k', 'v')": "key name cannot be handled as a string",
    "listObjToMap([{'j': 'x'}], [{'v': 1}], 'k', 'v')": "key name cannot be handled",
    "listObjToMap(['x'], [{'v': 1}], 'k', 'v')": "not a map",
    "listObjToMap([{'k': 'x'}], [{1: 2}], 'k', 'v')": "value object list",
    "listObjToMap([{'k': 'x'}], [{'v': 1}], 'k')": "no matching overload|undeclared",
}


@pytest.mark.parametrize(("expression", "expected"), CASES)
def test_list_obj_to_map_pairs_the_lists(expression: str, expected: object) -> None:
    assert kyverno_value(expression) == expected


@pytest.mark.parametrize(("expression", "reason"), ERRORS.items())
def test_what_kyverno_refuses_gives_no_value(expression: str, reason: str) -> None:
    kyverno_fails(f"size({expression}) >= 0", match=reason)


def test_objects_fields_pair_as_literals_do() -> None:
    data = {"object": {"spec": {"names": [{"n": "a"}], "ports": [{"p": 1}]}}}
    with in_kyverno_policy():
        expression = "listObjToMap(object.spec.names, object.spec.ports, 'n', 'p')"
        assert value(expression, data) == {"a": 1}


def test_outside_a_kyverno_policy_a_call_gives_no_value() -> None:
    fails("size(listObjToMap([], [], 'k', 'v')) == 0", match="Kyverno's library")
