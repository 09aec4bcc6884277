"""The sensitivity search (workers/policy_engine/probes/sensitivity.py) over hand-written objects: a
table of legitimate probes (a counterfactual flips them) and tautologies (none does), and
properties over generated expressions and objects."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.probe import ProposedProbe
from workers.policy_engine.cel.programs import BoolProgram
from workers.policy_engine.probes.sensitivity import (
    BUDGET_SECONDS,
    INSENSITIVE,
    MAX_EVALUATIONS,
    check_sensitivity,
    mentioned,
)


def _deployment(name: str, replicas: int, ready: int | None, **extra: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"replicas": replicas}
    if ready is not None:
        status["readyReplicas"] = ready
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "prod", "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "containers": [
                        {"name": name, "image": f"registry.example.com/{name}:1.0"},
                    ]
                }
            },
        },
        "status": status,
        **extra,
    }


def _pod(name: str, user: int | None, image: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": name, "image": image}]}
    if user is not None:
        spec["securityContext"] = {"runAsUser": user}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": spec,
        "status": {"phase": "Running"},
    }


DEPLOYMENTS = [_deployment("api", 3, 3), _deployment("web", 2, 2)]
SHORT = [_deployment("api", 3, 3), _deployment("web", 2, 1)]
PODS = [_pod("api-1", 1000, "registry.example.com/api:1"), _pod("web-1", 1001, "docker.io/web")]
EVENTS = [
    {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e1", "namespace": "prod"},
        "type": "Warning",
        "reason": "BackOff",
        "involvedObject": {"kind": "Pod", "name": "api-1"},
    }
]
DEPLOY = {"tool": "get", "args": {"kind": "Deployment", "namespace": "prod"}}
POD = {"tool": "get", "args": {"kind": "Pod", "namespace": "prod"}}
EVENT = {"tool": "events", "args": {"namespace": "prod"}}
NAMED = {"tool": "get", "args": {"kind": "Deployment", "namespace": "prod", "name": "api"}}


def _probe(expression: str, scope: str, lookups: list[dict[str, Any]]) -> ProposedProbe:
    return ProposedProbe.model_validate(
        {"lookups": lookups, "expression": expression, "scope": scope}
    )


def _value(probe: ProposedProbe, results: list[Any]) -> bool:
    program = BoolProgram(probe.expression)
    if probe.scope == "results":
        return program({"results": results})
    return all(program({"object": obj}) for obj in results[0])


EVENT_POD = {"tool": "events", "args": {"namespace": "prod", "involved_kind": "Pod"}}
STAMP = "2024-05-01T00:00:00Z"
STAMPED = [{**d, "metadata": {**d["metadata"], "creationTimestamp": STAMP}} for d in DEPLOYMENTS]
Case = tuple[str, str, list[dict[str, Any]], list[Any]]
# What an expression is evaluated over: scope, lookups, the objects they returned.
CONTEXTS: dict[str, tuple[str, list[dict[str, Any]], list[Any]]] = {
    "deployments": ("each_object", [DEPLOY], [DEPLOYMENTS]),
    "short": ("each_object", [DEPLOY], [SHORT]),
    "deployments-r": ("results", [DEPLOY], [DEPLOYMENTS]),
    "short-r": ("results", [DEPLOY], [SHORT]),
    "pods": ("each_object", [POD], [PODS]),
    "one pod": ("each_object", [POD], [PODS[:1]]),
    "pods-r": ("results", [POD], [PODS]),
    "named-r": ("results", [DEPLOY, NAMED], [DEPLOYMENTS, DEPLOYMENTS[0]]),
    "events-r": ("results", [EVENT], [EVENTS]),
    "pod events-r": ("results", [EVENT_POD], [EVENTS]),
    "stamped": ("each_object", [DEPLOY], [STAMPED]),
}


def _cases(table: list[tuple[str, str]]) -> list[Case]:
    return [(expression, *CONTEXTS[context]) for expression, context in table]


READY = "has(object.status.readyReplicas) && object.status.readyReplicas >= 2"
LEGIT = _cases(
    [
        (READY, "deployments"),
        (READY, "short"),
        ("object.status.readyReplicas >= 2", "short"),
        ("object.spec.replicas >= 1", "deployments"),
        ("results[0].all(d, d.spec.replicas >= 2)", "deployments-r"),
        ("results[0].exists(d, d.status.readyReplicas < 2)", "short-r"),
        ("results[0].exists(d, d.status.readyReplicas < 2)", "deployments-r"),
        (
            "!results[0].exists(p, has(p.spec.securityContext) && "
            "p.spec.securityContext.runAsUser == 0)",
            "pods-r",
        ),
        ("object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))", "pods"),
        ("object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))", "one pod"),
        ("object.spec.template.spec.containers.all(c, has(c.readinessProbe))", "deployments"),
        (
            "object.spec.template.spec.containers.all(c, !c.image.endsWith(':latest'))",
            "deployments",
        ),
        ("'app' in object.metadata.labels", "deployments"),
        ("!('debug' in object.metadata.labels)", "deployments"),
        ("object.status.phase == 'Running'", "pods"),
        ("size(results[0]) >= 2", "deployments-r"),
        ("size(results[0]) >= 3", "deployments-r"),
        ("results[1].spec.replicas == 3", "named-r"),
        ("results[0].filter(d, d.spec.replicas > 1).size() == size(results[0])", "deployments-r"),
        ("results[0].map(d, d.spec.replicas).all(r, r >= 2)", "deployments-r"),
        ("!results[0].exists(e, e.type == 'Warning')", "events-r"),
        ("results[0].exists(e, e.reason == 'BackOff')", "events-r"),
        ("object.metadata.name != 'web'", "deployments"),
        ("object.metadata.labels.all(k, k.startsWith('app'))", "deployments"),
        (
            "timestamp(object.metadata.creationTimestamp) < timestamp('2030-01-01T00:00:00Z')",
            "stamped",
        ),
    ]
)
TAUTOLOGIES = _cases(
    [
        ("size(results) >= 0", "deployments-r"),
        ("object.metadata.name == object.metadata.name", "deployments"),
        ("results[0].all(d, true)", "deployments-r"),
        ("has(object.metadata) || true", "deployments"),
        ("size(results[0]) >= 0", "deployments-r"),
        ("size(results[0]) > 0", "deployments-r"),
        ("results[0].exists(d, true)", "deployments-r"),
        ("results[0].all(d, d.spec.replicas >= 2) || true", "short-r"),
        ("object.spec.replicas >= 2 && false", "deployments"),
        ("object.spec.replicas == object.spec.replicas", "deployments"),
        ("results[0].all(d, d.metadata.name == d.metadata.name)", "deployments-r"),
        ("has(object.metadata.name)", "deployments"),
        ("object.metadata.name != ''", "deployments"),
        ("size(object.metadata.name) >= 0", "deployments"),
        ("object.kind == 'Deployment'", "deployments"),
        ("object.apiVersion == 'apps/v1'", "deployments"),
        ("object.metadata.namespace == 'prod'", "deployments"),
        ("has(object.metadata.namespace)", "deployments"),
        ("has(object.spec)", "deployments"),
        ("size(object.metadata) > 0", "deployments"),
        ("results[1].metadata.name == 'api'", "named-r"),
        ("results[0].all(e, e.involvedObject.kind == 'Pod')", "pod events-r"),
        ("!has(object.status) || has(object.status)", "deployments"),
        ("object.spec.replicas > 0 || object.spec.replicas <= 0", "deployments"),
    ]
)


def _ids(cases: list[Case]) -> list[str]:
    return [f"{expression} [{scope}]" for expression, scope, _, _ in cases]


@pytest.mark.parametrize(("expression", "scope", "lookups", "results"), LEGIT, ids=_ids(LEGIT))
def test_a_probe_that_reads_the_cluster_is_flipped_by_a_counterfactual(
    expression: str, scope: str, lookups: list[dict[str, Any]], results: list[Any]
) -> None:
    probe = _probe(expression, scope, lookups)
    before = copy.deepcopy(results)
    found = check_sensitivity(probe, results, _value(probe, results))
    assert found.sensitive, found
    assert found.flip and found.evaluations <= MAX_EVALUATIONS
    assert results == before  # the real objects are not changed


@pytest.mark.parametrize(
    ("expression", "scope", "lookups", "results"), TAUTOLOGIES, ids=_ids(TAUTOLOGIES)
)
def test_a_tautology_is_flipped_by_no_counterfactual(
    expression: str, scope: str, lookups: list[dict[str, Any]], results: list[Any]
) -> None:
    probe = _probe(expression, scope, lookups)
    found = check_sensitivity(probe, results, _value(probe, results))
    assert not found.sensitive and found.flip is None
    assert found.reason().startswith(INSENSITIVE)
    assert 0 < found.evaluations <= MAX_EVALUATIONS


def test_the_search_is_bounded_in_evaluations_and_time() -> None:
    """A tautology over a large listing: the search stops at its bounds and refuses."""
    many = [_deployment(f"d{i}", 2, 2) for i in range(2000)]
    probe = _probe("results[0].all(d, d.metadata.name == d.metadata.name)", "results", [DEPLOY])
    began = time.monotonic()
    found = check_sensitivity(probe, [many], True, max_evaluations=50)
    assert not found.sensitive and found.evaluations <= 50
    assert time.monotonic() - began < BUDGET_SECONDS + 1.0
    quick = check_sensitivity(probe, [many], True, budget_seconds=0.0)
    assert not quick.sensitive and quick.exhausted and quick.evaluations == 0


def test_an_expression_that_errors_under_every_counterfactual_is_refused() -> None:
    probe = _probe("object.status.readyReplicas / 0 == 1 || true", "each_object", [DEPLOY])
    assert not check_sensitivity(probe, [DEPLOYMENTS], True).sensitive


def test_paths_are_resolved_through_nested_comprehensions() -> None:
    found = mentioned(
        "results[0].all(d, d.spec.template.spec.containers.all(c, c.image.startsWith('r/')))"
    )
    texts = [target.text() for target in found.targets]
    assert "results[0][*].spec.template.spec.containers[*].image" in texts
    assert "r/" in found.literals


OPS = ["==", "!=", "<", "<=", ">", ">="]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    replicas=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=4),
    op=st.sampled_from(OPS),
    bound=st.integers(min_value=-2, max_value=7),
    scope=st.sampled_from(["each_object", "results"]),
    guard=st.booleans(),
)
def test_property_a_comparison_on_a_field_is_always_sensitive(
    replicas: list[int], op: str, bound: int, scope: str, guard: bool
) -> None:
    """Whatever the objects hold and whatever the comparison, a probe whose value is a test of
    a field the objects carry is flipped by some counterfactual (so it is never refused for
    being insensitive)."""
    objects = [_deployment(f"d{i}", r, r) for i, r in enumerate(replicas)]
    test = f"x.status.readyReplicas {op} {bound}"
    if guard:
        test = f"has(x.status.readyReplicas) && {test}"
    expression = (
        test.replace("x.", "object.") if scope == "each_object" else f"results[0].all(x, {test})"
    )
    probe = _probe(expression, scope, [DEPLOY])
    found = check_sensitivity(probe, [objects], _value(probe, [objects]))
    assert found.sensitive, (expression, replicas, found)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    replicas=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=4),
    op=st.sampled_from(OPS),
    bound=st.integers(min_value=-2, max_value=7),
    wrap=st.sampled_from(
        [
            "({}) || true",
            "({}) && false",
            "true || ({})",
            "size(results) >= 0 || ({})",
            "({}) || !({})",
            "({}) && !({})",
        ]
    ),
)
def test_property_a_field_test_made_constant_is_never_accepted(
    replicas: list[int], op: str, bound: int, wrap: str
) -> None:
    """The same tests made constant by a wrapper: no counterfactual may flip them."""
    objects = [_deployment(f"d{i}", r, r) for i, r in enumerate(replicas)]
    test = f"results[0].all(x, x.status.readyReplicas {op} {bound})"
    expression = wrap.format(test, test)
    probe = _probe(expression, "results", [DEPLOY])
    found = check_sensitivity(probe, [objects], _value(probe, [objects]))
    assert not found.sensitive, (expression, found)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    objects=st.lists(
        st.fixed_dictionaries(
            {
                "apiVersion": st.just("v1"),
                "kind": st.just("ConfigMap"),
                "metadata": st.fixed_dictionaries(
                    {
                        "name": st.text("abcdef", min_size=1, max_size=6),
                        "namespace": st.just("prod"),
                    }
                ),
                "data": st.dictionaries(
                    st.text("xyz", min_size=1, max_size=3),
                    st.one_of(st.text(max_size=5), st.integers(), st.booleans()),
                    max_size=4,
                ),
            }
        ),
        min_size=1,
        max_size=4,
    ),
    expression=st.sampled_from(
        [
            "object.metadata.name == object.metadata.name",
            "has(object.metadata) || true",
            "size(object.data) >= 0",
            "object.kind == 'ConfigMap'",
            "has(object.data) || !has(object.data)",
        ]
    ),
)
def test_property_a_tautology_is_refused_whatever_the_objects(
    objects: list[dict[str, Any]], expression: str
) -> None:
    probe = _probe(
        expression,
        "each_object",
        [{"tool": "get", "args": {"kind": "ConfigMap", "namespace": "prod"}}],
    )
    found = check_sensitivity(probe, [objects], _value(probe, [objects]))
    assert not found.sensitive, (objects, found)
