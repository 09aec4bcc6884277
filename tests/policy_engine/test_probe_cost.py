"""The probe cost bound (workers/policy_engine/probes/cost.py): hostile expressions over a
large listing are refused before the library runs them, end as "cannot run" with the
reason, never ``true``, and the check falls back to the model as for any other probe failure.

Each hostile expression here would hold the worker's GIL for minutes to days without the
bound (the library cannot be interrupted); the generous pytest timeout is the hang guard.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.probe import ProbeOutcome, ProbeRun, ProposedProbe
from schemas.request import SnapshotTarget
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.engine_support import PREDICATE, get_deployments, script
from tests.probe_support import done_with_probe, probe
from workers.engine.toolsets.factory import backend_for
from workers.fleet.probe_store import ProbeStore
from workers.fleet.redis_client import connect
from workers.policy_engine.cel.programs import BoolProgram, CelError
from workers.policy_engine.probes.cost import MAX_STEPS, analyse
from workers.policy_engine.probes.runner import run_probe

pytestmark = pytest.mark.timeout(120)

LISTING = 3000  # Deployments: n^2 = 9e6 body runs, n^3 = 2.7e10 (days)
LIST_ALL = [{"tool": "get", "args": {"kind": "Deployment", "namespace": "prod"}}]
HOSTILE = {
    "three nested alls": "results[0].all(a, results[0].all(b, results[0].all(c, "
    "a.metadata.name != '' && b.metadata.name != '' && c.metadata.name != '')))",
    "self join": "results[0].all(a, results[0].exists(b, a.metadata.name == b.metadata.name))",
    "membership scan per element": "results[0].all(a, a in results[0])",
    "quadratic map": "results[0].map(d, d.metadata.name).size() > 0",
    "quadratic filter": "results[0].filter(d, has(d.spec)).size() >= 0",
    "whole-list comparison per element": "results[0].all(a, results[0] == results[0])",
    "two-variable self join": "results[0].all(i, a, results[0].exists(j, b, i != j && "
    "a.metadata.name == b.metadata.name))",
    "quadratic transformList": "results[0].transformList(i, d, d.metadata.name).size() > 0",
    "quadratic transformMap": "size(results[0].transformMap(i, d, d.metadata.name)) > 0",
    # the library compiles the pattern on every call (~1 ms for 2,500 characters)
    "long pattern per element": "results[0].all(d, !d.metadata.name.matches('^("
    + "|".join(f"name{i}[a-z]+x{i}" for i in range(230))
    + ")$'))",
}


def _deployment(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"web-{index:05d}", "namespace": "prod"},
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "app", "image": "example/app:1"},
                                                 {"name": "proxy", "image": "example/px:1"}]}},
        },
        "status": {"readyReplicas": 2},
    }  # fmt: skip


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("large") / "snap"
    (folder / "prod").mkdir(parents=True)
    objects = [_deployment(i) for i in range(LISTING)]
    (folder / "prod" / "deployments.yaml").write_text(yaml.safe_dump_all(objects))
    return folder


def _run(expression: str, snapshot: Path, scope: str = "results") -> ProbeRun:
    spec = ProposedProbe.model_validate(
        {"lookups": LIST_ALL, "expression": expression, "scope": scope}
    )
    backend = backend_for(SnapshotTarget(path=str(snapshot)), load_settings())
    try:
        return run_probe(spec, backend)
    finally:
        backend.close()


@pytest.mark.parametrize("expression", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_expressions_over_a_large_listing_cannot_run(large: Path, expression: str) -> None:
    run = _run(expression, large)
    assert run.verdict is None and run.value is None
    assert run.error is not None and "too costly" in run.error
    assert run.objects_read == LISTING  # the lookups ran; the expression was refused


def test_fleet_sized_linear_probes_still_run(large: Path) -> None:
    per_container = (
        "results[0].all(d, d.spec.template.spec.containers.all(c, c.image.startsWith('example/')))"
    )
    run = _run(per_container, large)
    assert run.error is None and run.verdict == VerdictKind.TRUE
    each = _run("object.spec.template.spec.containers.exists(c, c.name == 'proxy')", large,
                scope="each_object")  # fmt: skip
    assert each.error is None and each.verdict == VerdictKind.TRUE
    join = (
        "results[0].all(a, results[0].size() == 3000 && a.metadata.name in ['x', a.metadata.name])"
    )
    assert _run(join, large).verdict == VerdictKind.TRUE  # size() and literal lists are cheap


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        (" || ".join(f"x.exists(a{i}, true)" for i in range(17)), "more than 16 comprehensions"),
        # side by side: 33 `+` in one chain nest deeper than the runtime's parser allows
        ("[" + ", ".join(["s + s"] * 33) + "] == []", "more than 32 '\\+'"),
    ],
    ids=["count", "concatenations"],
)
def test_shapes_over_the_static_bounds_are_refused_at_compile_time(
    expression: str, why: str
) -> None:
    with pytest.raises(CelError, match=why):
        BoolProgram(expression)


def test_nesting_is_costed_over_the_input_not_refused_by_depth() -> None:
    """As the API server's cost limit: four nested comprehensions over small lists run (a
    Gatekeeper template nests volumes, allowed paths, containers and their mounts); over
    large ones the estimate refuses them."""
    four = "object.v.all(a, object.p.exists(b, object.c.all(c, c.m.all(m, m != a + b))))"
    small = {"v": [1, 2], "p": [3], "c": [{"m": [0, 1]}, {"m": [2]}]}
    assert BoolProgram(four)({"object": small}) is True
    large = {"v": list(range(200)), "p": list(range(200)), "c": [{"m": list(range(200))}] * 200}
    with pytest.raises(CelError, match="too costly"):
        BoolProgram(four)({"object": large})


def test_a_computed_pattern_is_costed_by_its_length_per_call() -> None:
    """As the API server accepts `s.matches(params.regex)` and bounds its cost: each call is
    charged its pattern's actual length, a pattern over the bound refused whatever the
    value (a hostile pattern per element is refused, not run)."""
    obj = {"object": {"s": "web-1", "p": "^web-[0-9]+$", "l": ["web-1", "web-2"] * 50}}
    assert BoolProgram("object.s.matches(object.p)")(obj) is True
    assert BoolProgram("matches(object.s, object.p) && object.s.matches('^w')")(obj) is True
    long = {"object": {**obj["object"], "p": "(a|b)" * 7_000}}
    with pytest.raises(CelError, match=r"too costly.*pattern of 35,000"):
        BoolProgram("object.s.matches(object.p) || true")(long)
    per_element = {"object": {**obj["object"], "p": "q" * 20_000}}
    program = BoolProgram("object.l.all(x, !x.matches(object.p))", max_steps=100_000)
    with pytest.raises(CelError, match="too costly"):
        program(per_element)


def test_a_variables_range_is_bounded_by_its_own_concatenations() -> None:
    """A range read from a probe variable is at most the input's longest list times one
    more than the `+` of its definition (not of every message concatenation around it);
    a constant variable is measured as it is."""
    variables = {"both": "object.a + object.b", "few": "['x']"}
    message = " + ".join(["'m'"] * 12)
    expression = f"variables.both.all(x, variables.both.all(y, x != y || {message} != ''))"
    data = {"object": {"a": [1, 2], "b": [3]}}
    assert analyse(expression, variables).estimate(data) < 100  # each range at most 2 x 2
    constant = "variables.few.all(x, variables.few.all(y, x == y))"
    assert analyse(constant, variables).estimate({**data, "variables": {"few": ["x"]}}) <= 4


def test_a_literal_range_counts_its_elements() -> None:
    """A list written in the expression may be longer than any list of the input."""
    literal = "[" + ", ".join(str(i) for i in range(300)) + "]"
    model = analyse(f"{literal}.all(a, {literal}.all(b, object.x != a + b))")
    assert model.estimate({"object": {"x": -1}}) >= 300 * 300


def test_the_estimate_bounds_the_real_iterations() -> None:
    """The estimate is an upper bound: descending ranges add up, independent ones multiply."""
    pods = [{"c": [{"e": [1, 2, 3]}] * 4} for _ in range(10)]
    model = analyse("pods.all(p, p.c.all(c, c.e.all(e, e > 0)))")
    assert 10 + 40 + 120 <= model.estimate({"pods": pods}) < 10 * 4 * 3 * 10
    assert analyse("pods.all(a, pods.all(b, true))").estimate({"pods": pods}) >= 10 * 10
    assert analyse("pods.size() > 0").estimate({"pods": pods}) == 0


def test_two_variable_comprehensions_are_costed() -> None:
    """The second variable is a list's element or a map's value: ranges read from it are
    measured on those values."""
    data = {"m": {f"k{i}": [1, 2, 3] for i in range(10)}}
    model = analyse("m.all(k, v, v.all(e, e > 0))")
    assert 10 + 30 <= model.estimate(data) < 10 * 3 * 10
    pods = {"pods": [{"c": [1, 2, 3, 4]} for _ in range(10)]}
    assert analyse("pods.all(i, p, p.c.all(j, c, c > i))").estimate(pods) >= 10 + 40


def test_steps_add_up_over_a_probe_run() -> None:
    """each_object evaluates once per object: the bound holds for the run, not per call."""
    obj = {"object": {"c": list(range(1, 11))}}
    one = BoolProgram("object.c.all(x, x > 0)")
    assert one(obj)
    program = BoolProgram("object.c.all(x, x > 0)", max_steps=4 * one.steps + one.steps // 2)
    for _ in range(4):
        assert program(obj)
    with pytest.raises(CelError, match="too costly"):
        program(obj)
    assert MAX_STEPS >= 1_000_000  # 50,000 objects in one linear `all` stay in


def test_concatenating_a_large_string_costs_its_length() -> None:
    """A chain of 24 copies of a 1 MB annotation per object: hundreds of MB copied (24: the
    runtime's parser refuses an expression nested more than 32 deep)."""
    big = {"object": {"metadata": {"annotations": {"big": "x" * 1_000_000}}}}
    expression = "(" + " + ".join(["object.metadata.annotations['big']"] * 24) + ").size() > 0"
    assert analyse(expression).estimate(big) >= 23 * 1_000_000 // 16_384
    small = {"object": {"metadata": {"annotations": {"big": "x"}}}}
    assert analyse(expression).estimate(small) == 0
    program = BoolProgram(expression, max_steps=20_000)
    with pytest.raises(CelError, match="too costly"):
        for _ in range(20):  # each evaluation costs ~18,000 steps: refused at the second
            program(big)


# Kubernetes' libraries are Python functions the runtime calls: each call is costed over its
# actual arguments as it is made (the static shape check cannot see a function's work).
LIBRARY_HOSTILE = {
    # a 4,000-character string with each 'a' replaced by itself: 16 million characters
    "replace growing a string by its square": (
        "object.s.replace('a', object.s).size() > 0",
        {"s": "a" * 4000},
    ),
    "format of a list into a long string": (
        "'%s%s%s%s%s%s%s%s'.format([object.s, object.s, object.s, object.s, object.s, "
        "object.s, object.s, object.s]).size() > 0",
        {"s": "x" * 1_500_000},
    ),
    "a precision of a gigabyte": ("'%.1000000000f'.format([1.0]).size() > 0", {}),
}


@pytest.mark.parametrize(
    ("expression", "data"), list(LIBRARY_HOSTILE.values()), ids=list(LIBRARY_HOSTILE)
)
def test_library_calls_over_hostile_input_are_refused(expression: str, data: Any) -> None:
    with pytest.raises(CelError, match="too costly"):
        BoolProgram(expression)({"object": data})


def test_a_costly_library_call_cannot_hide_behind_an_or() -> None:
    """CEL's ``||`` absorbs an error where the other side is true: a call refused for its cost
    still leaves the evaluation with no value (as the API server's cost limit aborts it)."""
    data = {"object": {"s": "a" * 4000}}
    with pytest.raises(CelError, match="too costly"):
        BoolProgram("object.s.replace('a', object.s) == '' || true")(data)
    assert BoolProgram("object.s.replace('a', 'bb').size() == 8000 || true")(data) is True


def test_library_calls_add_up_over_a_probe_run() -> None:
    """Each call's cost is charged to the run's steps, as the comprehensions' are."""
    data = {"object": {"s": "a" * 256_000}}
    one = BoolProgram("object.s.indexOf('b') == -1")
    assert one(data) is True
    assert one.steps >= 1000  # the call: reading 256,000 characters
    program = BoolProgram("object.s.indexOf('b') == -1", max_steps=4 * one.steps + one.steps // 2)
    for _ in range(4):
        assert program(data) is True
    with pytest.raises(CelError, match="too costly"):
        program(data)


def test_a_library_call_is_charged_the_python_it_runs() -> None:
    """A URL is parsed in Python character by character on every call (~0.4 us each): 100
    calls over a 100 KB URL are costed as ~40 ms each, not as a fast read of 100 KB, and the
    URL is sized inside the opaque value that carries it."""
    data = {"object": {"u": "https://example.com/" + "a" * 100_000, "items": list(range(100))}}
    expression = "object.items.all(i, url(object.u).getHost() == 'example.com')"
    with pytest.raises(CelError, match="too costly"):
        BoolProgram(expression, max_steps=100_000)(data)
    once = BoolProgram("url(object.u).getHost() == 'example.com'", max_steps=100_000)
    assert once(data) is True  # two calls fit


# The runtime's own functions are not charged as they run: their cost is estimated over the
# input before evaluation.
_LONG = [f"a{i}" for i in range(20_000)]
NATIVE_HOSTILE = {
    # every pair compared: 4e8 comparisons, 7-9 s of held GIL per call
    "sets.intersects of two long lists": (
        "!sets.intersects(object.a, object.b)",
        {"a": _LONG, "b": [f"b{i}" for i in range(20_000)]},
        (),
    ),
    "sets.contains, every element found": (
        "sets.contains(object.a, object.b)",
        {"a": _LONG, "b": _LONG[::-1]},
        (),
    ),
    "sets.equivalent": (
        "sets.equivalent(object.a, object.b)",
        {"a": _LONG, "b": _LONG[::-1]},
        (),
    ),
    "sets over lists of lists, each pair compared deeply": (
        "!sets.intersects(object.a, object.b)",
        {
            "a": [[*range(1000), i] for i in range(700)],
            "b": [[*range(1000), -i] for i in range(700)],
        },
        (),
    ),
    "sets over strings split at run time": (
        "!sets.intersects(object.s.split(','), object.t.split(','))",
        {"s": ",".join(_LONG), "t": ",".join(x.upper() for x in _LONG)},
        (),
    ),
    "sets over variables split at run time": (
        "!sets.intersects(variables.mine, variables.theirs)",
        {"s": ",".join(_LONG), "t": ",".join(x.upper() for x in _LONG)},
        (("mine", "object.s.split(',')"), ("theirs", "object.t.split(',')")),
    ),
    "sets in a loop": (
        "object.items.all(i, !sets.intersects(i.tags, object.b))",
        {"items": [{"tags": _LONG[:2000]}] * 100, "b": [f"b{i}" for i in range(2000)]},
        (),
    ),
    # counting the code points of a 2 MB string 10,000 times: ~40 s
    "a whole string sized in a loop": (
        "object.items.all(i, size(object.s) > i)",
        {"s": "x" * 2_000_000, "items": list(range(10_000))},
        (),
    ),
}


@pytest.mark.parametrize(
    ("expression", "data", "variables"), list(NATIVE_HOSTILE.values()), ids=list(NATIVE_HOSTILE)
)
def test_native_calls_over_hostile_input_are_refused_before_evaluation(
    expression: str, data: Any, variables: tuple[tuple[str, str], ...]
) -> None:
    program = BoolProgram(expression, variables=variables)
    with pytest.raises(CelError, match=r"too costly.*evaluation steps over this input"):
        program.meter.charge(program.compiled, {"object": data})  # the estimate alone refuses
    with pytest.raises(CelError, match="too costly"):
        program({"object": data})


def test_set_calls_of_real_policies_still_run(large: Path) -> None:
    """Sets over a container's lists and a short literal, per object over 3,000 objects."""
    expression = (
        "object.spec.template.spec.containers.all(c, "
        "!sets.intersects([c.name], ['sidecar', 'debug'])) && "
        "sets.contains(['app', 'proxy', 'init'], "
        "object.spec.template.spec.containers.map(c, c.name))"
    )
    run = _run(expression, large, scope="each_object")
    assert run.error is None and run.verdict == VerdictKind.TRUE
    policy = BoolProgram(
        "variables.containers.all(c, sets.contains(variables.allowed, c.caps))",
        variables=[
            ("allowed", "object.allowed.split(',')"),
            ("containers", "object.spec.containers + object.spec.init"),
        ],
    )
    pod = {"allowed": "CHOWN,NET_BIND_SERVICE", "note": "x" * 100_000,
           "spec": {"containers": [{"caps": ["CHOWN"]}] * 3, "init": []}}  # fmt: skip
    for _ in range(1000):
        assert policy({"object": pod}) is True


def test_a_too_costly_probe_falls_back_to_the_model(redis_url: str, large: Path) -> None:
    """Stored probe over the bound: auto asks the model (which decides), only ends
    cannot_determine, the reason is on the run's report."""
    from tests.engine_support import request_for
    from tests.engine_support import scripted as scripted_model
    from workers.engine.engine import EngineDeps
    from workers.fleet.probe_rerun import evaluate_check

    probes = ProbeStore(connect(redis_url), prefix="tc")
    hostile = ProposedProbe.model_validate(
        {"lookups": LIST_ALL, "expression": HOSTILE["three nested alls"], "scope": "results"}
    )
    outcome = ProbeOutcome(status="accepted", reason="stored by the test", probe=hostile,
                           run=ProbeRun(verdict=VerdictKind.TRUE))  # fmt: skip
    probes.save_compiled(
        "chk-costly", "run-0", outcome, VerdictKind.TRUE, predicate=PREDICATE, profile="fast"
    )
    turns = script(get_deployments(), done_with_probe("false", 0, probe_spec=probe()))
    for mode, calls_expected in (("only", 0), ("auto", 2)):
        with scripted_model(turns) as model:
            settings = load_settings(model="openai/scripted", api_base=model.url)
            request = request_for(large).model_copy(
                update={"check_id": "chk-costly", "probe": mode}
            )
            report = evaluate_check(request, EngineDeps(settings=settings), probes)
            assert len(model.requests) == calls_expected
        assert report.verdict is not None and report.verdict.verdict != VerdictKind.TRUE
        if mode == "only":
            assert report.verdict.verdict == VerdictKind.CANNOT_DETERMINE
            assert report.probe is not None and "too costly" in (report.probe.run.error or "")
        else:
            assert report.verdict.source == "model" and report.verdict.verdict == VerdictKind.FALSE


def _doubling(levels: int, seed: str, pair: str) -> list[dict[str, str]]:
    chain = [{"name": "v0", "expression": seed}]
    for n in range(1, levels + 1):
        chain.append({"name": f"v{n}", "expression": pair.format(f"variables.v{n - 1}")})
    return chain


@pytest.mark.parametrize(
    ("seed", "pair"),
    [("[object.metadata.name]", "[{0}, {0}]"),
     ("{object.metadata.name: 1}", "{{'a': {0}, 'b': {0}}}")],
)  # fmt: skip
def test_variables_nesting_one_another_are_charged_their_copies(seed: str, pair: str) -> None:
    """Red team 2: variables that hold the one before twice in a list or map literal (no
    `+`) build a value of 2^n copies, shared by the runtime; comparing it walks every copy
    (26 levels: 7 s list, 18 s map, for 1 step; 29 levels: minutes per object), and a
    message expression giving it was converted to Python whole (24 levels: 13 s). Each read
    of a variable is charged the copies of the input it may hold."""
    probe = ProposedProbe.model_validate(
        {
            "lookups": [{"tool": "get", "args": {"kind": "Pod"}}],
            "scope": "each_object",
            "validations": [{"expression": "variables.v22 == variables.v22"}],
            "variables": _doubling(22, seed, pair),
            "empty_result": "pass",
            "origin": {"format": "vap", "name": "p", "source": "-"},
        }
    )
    from workers.policy_engine.probes.program import ProbeProgram

    with pytest.raises(CelError, match="too costly"):
        ProbeProgram(probe).judge({"object": {"metadata": {"name": "x"}}})


def test_a_run_past_its_bound_is_refused_at_that_bound() -> None:
    """A library call's cost is added after it ran, so a refused call can leave the run
    past its bound; each object after it (each_object goes on) was then estimated against
    what was left, below zero, and refused "for more than -5 evaluation steps"."""
    obj = {"object": {"l": ["a" * 2000] * 30, "p": "a+"}}
    expression = "object.l.all(x, x.matches(object.p))"
    one = BoolProgram(expression)
    assert one(obj)
    bound = one.steps - 5
    program = BoolProgram(expression, max_steps=bound)
    with pytest.raises(CelError, match="assay_matches"):
        program(obj)
    assert program.steps > bound  # what the refused call spent was charged
    for _ in range(2):  # the objects after it
        with pytest.raises(CelError) as refused:
            program(obj)
        assert str(refused.value) == (
            f"the expression is too costly to run: more than {bound:,} evaluation steps in "
            "this probe run"
        )


def test_a_refusal_with_part_of_the_run_spent_says_what_was_left_of_which_bound() -> None:
    obj = {"object": {"c": list(range(1, 11))}}
    one = BoolProgram("object.c.all(x, x > 0)")
    assert one(obj)
    bound = one.steps + one.steps // 2
    program = BoolProgram("object.c.all(x, x > 0)", max_steps=bound)
    assert program(obj)
    with pytest.raises(CelError) as refused:
        program(obj)
    left = bound - one.steps
    assert str(refused.value).endswith(f"; {left:,} of this probe run's {bound:,} were left")
