"""The documented CEL subset (docs/probes.md), table-driven over hand-written objects.

Every row is an expression a probe may use and the value the library must give; the
error rows are what must never become a verdict (workers/policy_engine/cel/programs.py
raises CelError).
"""

from __future__ import annotations

from typing import Any

import pytest

from workers.policy_engine.cel.programs import (
    CelError,
    evaluate_bool,
    field_paths,
    unsupported_calls,
)

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "shop-7", "namespace": "shop", "labels": {"tier": "front"}},
    "spec": {
        "containers": [
            {"name": "app", "image": "registry.internal/shop:4.2",
             "securityContext": {"runAsNonRoot": True}},
            {"name": "proxy", "image": "docker.io/envoy:1.30", "resources": {}},
        ],
        "hostNetwork": False,
    },
    "status": {"phase": "Running", "restarts": 3},
}  # fmt: skip

TRUE_CASES = [
    ("all", "object.spec.containers.all(c, c.name != '')"),
    ("exists", "object.spec.containers.exists(c, c.name == 'proxy')"),
    ("exists_one", "object.spec.containers.exists_one(c, has(c.securityContext))"),
    ("map", "object.spec.containers.map(c, c.name) == ['app', 'proxy']"),
    ("filter", "object.spec.containers.filter(c, has(c.resources)).size() == 1"),
    ("has present", "has(object.metadata.labels.tier)"),
    ("has absent", "!has(object.metadata.annotations)"),
    ("startsWith", "object.spec.containers[0].image.startsWith('registry.internal/')"),
    ("endsWith", "object.metadata.name.endsWith('-7')"),
    ("contains", "object.spec.containers[1].image.contains('envoy')"),
    ("matches", "object.spec.containers[0].image.matches('^[a-z.]+/shop:[0-9.]+$')"),
    ("size of string", "size(object.metadata.name) == 6"),
    ("size of list", "object.spec.containers.size() == 2"),
    ("in list", "object.status.phase in ['Running', 'Succeeded']"),
    ("in map", "'tier' in object.metadata.labels"),
    ("map index", "object.metadata.labels['tier'] == 'front'"),
    ("arithmetic", "object.status.restarts * 2 + 1 == 7"),
    ("ternary", "(object.spec.hostNetwork ? 1 : 0) == 0"),
    ("list concat", "size(object.spec.containers + object.spec.containers) == 4"),
    ("timestamp", "timestamp('2026-01-01T00:00:00Z') < timestamp('2027-01-01T00:00:00Z')"),
    ("results list", "results[0].all(p, p.status.phase == 'Running')"),
]


@pytest.mark.parametrize(("name", "expression"), TRUE_CASES, ids=[c[0] for c in TRUE_CASES])
def test_subset_evaluates_true(name: str, expression: str) -> None:
    assert evaluate_bool(expression, {"object": POD, "results": [[POD]]}) is True


@pytest.mark.parametrize(
    "expression",
    [
        "object.spec.containers.all(c, has(c.securityContext) && c.securityContext.runAsNonRoot)",
        "object.spec.containers.exists(c, c.image.startsWith('quay.io/'))",
        "object.status.phase == 'Pending'",
    ],
)
def test_subset_evaluates_false(expression: str) -> None:
    assert evaluate_bool(expression, {"object": POD}) is False


ERROR_CASES = [
    ("missing field", "object.spec.nodeName == 'n1'"),
    ("not a boolean", "object.status.restarts + 1"),
    ("string value", "object.metadata.name"),
    ("type mismatch", "object.metadata.name + 1 == 2"),
    ("division by zero", "object.status.restarts / 0 == 1"),
    ("syntax", "object.spec.containers.all(c, "),
    ("unknown variable", "cluster.ready"),
    # strings version 3 (reverse) and cel.bind are not in Kubernetes' environment
    ("outside Kubernetes' environment", "object.metadata.name.reverse() == '7-pohs'"),
    ("cel.bind", "cel.bind(n, object.metadata.name, n == 'shop-7')"),
    ("null field", "object.spec.x.y == 1"),
    (
        "field missing in one element",
        "object.spec.containers.all(c, c.securityContext.runAsNonRoot)",
    ),
]


@pytest.mark.parametrize(("name", "expression"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_failures_raise_never_return(name: str, expression: str) -> None:
    with pytest.raises(CelError):
        evaluate_bool(expression, {"object": {**POD, "spec": {**POD["spec"], "x": None}}})


def test_unsupported_calls_ignore_string_literals() -> None:
    assert unsupported_calls("object.metadata.name == 'cel.bind(x)'") == []
    assert unsupported_calls("cel.bind(x, 1, x == 1)") == ["cel.bind"]


def test_field_paths_name_what_the_expression_reads() -> None:
    paths = field_paths("object.spec.containers.all(c, c.securityContext.runAsNonRoot == true)")
    assert "spec.containers" in paths
    assert "securityContext.runAsNonRoot" in paths
