"""The base environment as a whole, per stated Kubernetes version: its options (cross-type
numeric comparisons, code-point sizes, absent fields), what each version adds, and what
Kubernetes does not have."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds
from workers.policy_engine.cel.environment import KUBERNETES_VERSIONS, PROBE_VERSION, parts

POD = {"metadata": {"name": "wéb-1"}, "spec": {"replicas": 3, "containers": [{"name": "web"}]}}
TRUE = [
    # cross-type numeric comparisons (1.28+): ordering across int, uint and double
    "1 < 1.5 && 2u > 1 && 1.0 <= 1 && 3 >= 2u",
    "object.spec.replicas < 3.5 && size(object.spec.containers) > 0.5",
    # heterogeneous equality of numbers in dynamic values
    "object.spec.replicas == 3.0 && dyn(1u) == 1",
    # standard definitions
    "size(object.metadata.name) == 5",  # code points, not bytes
    "'web' in (object.spec.containers.map(c, c.name))",  # `in` with parentheses
    "has(object.spec.replicas) && !has(object.spec.nodeName)",
    "timestamp('2024-01-01T10:00:00Z').getHours() == 10",  # UTC by default
    "duration('1h') > duration('59m') && timestamp('2024-01-01T00:00:00Z') < "
    "timestamp('2024-06-01T00:00:00Z')",
    "'abc'.matches('^a') && !'abc'.matches('^b')",
]
ERRORS = [
    ("object.spec.nodeName == ''", "no such key|Key not found"),  # an absent field is an error
    ("1 == 1.0", "does not compile"),  # equality needs one type (or a dynamic value)
    ("'a' + 1 == 'a1'", "does not compile"),
    ("math.greatest(1, 2) == 2", "does not compile"),  # cel-go math: not in Kubernetes
    ("base64.encode(b'a') == 'YQ=='", "does not compile"),  # encoders: not in Kubernetes
    ("regex.replace('a', 'a', 'b') == 'b'", "does not compile"),  # cel-go regex: not either
    ("cel.bind(x, 1, x == 1)", "does not have"),  # no cel.bind: variables are the way
]


@pytest.mark.parametrize("expression", TRUE)
def test_base_options(expression: str) -> None:
    holds(expression, {"object": POD})


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_what_kubernetes_does_not_have(expression: str, reason: str) -> None:
    fails(expression, {"object": POD}, match=reason)


def test_probes_use_the_environment_both_stated_versions_accept() -> None:
    assert KUBERNETES_VERSIONS == ("1.33", "1.34") and PROBE_VERSION == "1.33"
    holds("semver('1.2.3').major() == 1")  # 1.33+


def test_the_lists_library_comes_with_1_34() -> None:
    assert [p.name for p in parts("1.34") if p not in parts("1.33")] == ["cel-go lists, version 3"]
    expression = "[2, 1, 2].distinct().sort() == [1, 2] && lists.range(3) == [0, 1, 2]"
    holds(expression, version="1.34")
    holds(
        "[1, [2, 3]].flatten() == [1, 2, 3] && [1, 2, 3, 4].slice(1, 3) == [2, 3]", version="1.34"
    )
    fails(expression, match="does not compile")  # not in the probe environment


def test_an_unstated_version_is_refused() -> None:
    with pytest.raises(ValueError, match="not a stated version"):
        parts("1.30")
