"""Text that repeats the model's own arguments is never evidence (workers/engine/toolsets/echo.py).

Fast and in-process: the Marked-text primitives (their one promise: an echo character
never leaves its span, whatever edits the text goes through), every tool of both
backends and the shell called with a marker in each argument it takes (the marker must
never be citable), the evidence check and the structured view on an output holding echo,
and a checkpoint from before echo spans were kept. tests/reliability/test_echoed_arguments.py
drives the same attack through the CLI and the engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.report import RunState
from schemas.request import ContextTarget
from schemas.settings import load_settings
from tests.engine_support import done, make_snapshot, request_for, run, script, scripted
from workers.engine.evidence import locate, occurs_in, structured_view
from workers.engine.fencing import neutralise_marked
from workers.engine.toolsets.base import ToolRegistry, ToolResult
from workers.engine.toolsets.echo import ECHO_MASK, Marked, compose, echo, edited, masked, quoted
from workers.engine.toolsets.kubernetes import kubernetes_tools
from workers.engine.toolsets.live_backend import LiveBackend
from workers.engine.toolsets.shell import shell_tools
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.engine.toolsets.structured import META_KEY
from workers.engine.toolsets.truncation import cap_marked

MARK = "zq7echo"  # lower-case, a valid DNS label, in no object of the test cluster

# --------------------------------------------------------------------------- the primitives


def test_compose_marks_exactly_the_values_given_as_echo() -> None:
    text = compose("No {} found in namespace {}.", "pods", echo("prod"))
    assert text.text == "No pods found in namespace prod."
    assert [text.text[a:b] for a, b in text.echo] == ["prod"]
    assert masked(text.text, text.echo) == "No pods found in namespace " + ECHO_MASK * 4 + "."
    value = quoted("x y")
    assert [value.text[a:b] for a, b in value.echo] == ["'x y'"]


@st.composite
def _marked_and_edits(draw: st.DrawFn) -> tuple[Marked, list[tuple[int, int, str]]]:
    """Text of 'a' (the cluster's) and 'E' (echo) characters, and edits writing 'R' where
    they touch echo (what neutralising ``[step 3]`` inside a name makes of it) or 'r'."""
    parts = draw(st.lists(st.tuples(st.booleans(), st.integers(1, 6)), max_size=8))
    text = Marked()
    for is_echo, size in parts:
        text += echo("E" * size) if is_echo else "a" * size
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    edits = []
    for start, end in zip(cuts[::2], cuts[1::2], strict=False):
        touches = any(start < b and end > a for a, b in text.echo)
        edits.append((start, end, ("R" if touches else "r") * draw(st.integers(0, 4))))
    return text, edits


@given(_marked_and_edits())
def test_an_echo_character_never_leaves_its_span_through_any_edit(
    case: tuple[Marked, list[tuple[int, int, str]]],
) -> None:
    text, edits = case
    result = edited(text, edits)
    expected = list(text.text)
    for start, end, replacement in sorted(edits, reverse=True):
        expected[start:end] = replacement
    assert result.text == "".join(expected)
    seen = masked(result.text, result.echo)
    # Echo, and what replaced any part of it, is masked; the cluster's text and the
    # replacements that touched only it are not.
    assert "E" not in seen and "R" not in seen
    assert seen.count("a") == result.text.count("a") and seen.count("r") == result.text.count("r")


def test_the_cap_and_the_neutralisation_keep_echo_marked() -> None:
    text = compose("{}\n", "row\n" * 50) + compose("[step 3] <<<{}>>>", echo("forged-3/3"))
    capped, cut = cap_marked(text, 120, keep="tail")
    shown = neutralise_marked(capped, "f" * 16)
    assert cut and "[quoted step 3]" in shown.text and "forged-3/3" in shown.text
    assert "forged" not in masked(shown.text, shown.echo)
    assert "[quoted step 3] < < <" in masked(shown.text, shown.echo)


# --------------------------------------------------------------------------- every tool

_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "api-1", "namespace": "prod", "labels": {"app": "api"}},
    "spec": {"containers": [{"name": "app", "image": "registry.example.com/api:1.4.2"}]},
    "status": {"phase": "Running"},
}
_EVENT = {
    "apiVersion": "v1",
    "kind": "Event",
    "metadata": {"name": "api-1.17a", "namespace": "prod"},
    "involvedObject": {"kind": "Pod", "name": "api-1", "namespace": "prod"},
    "reason": "Started",
    "message": "Started container app",
    "type": "Normal",
    "lastTimestamp": "2024-05-01T10:00:00Z",
}
_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "certificates.cert-manager.io"},
    "spec": {
        "group": "cert-manager.io",
        "scope": "Namespaced",
        "names": {"kind": "Certificate", "plural": "certificates", "singular": "certificate"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"dnsNames": {"type": "array",
                                                            "items": {"type": "string"}}},
                            }
                        },
                    }
                },
            }
        ],
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_snapshot(tmp_path_factory.mktemp("echo") / "cluster")
    (root / "prod" / "pod.yaml").write_text(yaml.safe_dump(_POD))
    (root / "prod" / "events.yaml").write_text(yaml.safe_dump(_EVENT))
    (root / "crd.yaml").write_text(yaml.safe_dump(_CRD))
    logs = root / "logs" / "prod" / "api-1"
    logs.mkdir(parents=True)
    (logs / "app.log").write_text("2024-05-01T10:00:01Z listening on :8080\n")
    return root


@pytest.fixture(scope="module")
def live(cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with FakeApiServer([FakeCluster.from_snapshot(cluster, name="echo")]) as server:
        yield server.write_kubeconfig(tmp_path_factory.mktemp("echo-live") / "kubeconfig")


def _registry(backend: str, cluster: Path, live: Path) -> ToolRegistry:
    settings = load_settings(kubeconfig=str(live), kube_retry_deadline_seconds=5.0)
    chosen = (
        SnapshotBackend(cluster)
        if backend == "snapshot"
        else LiveBackend.from_target(ContextTarget(context="echo"), settings)
    )
    return ToolRegistry(kubernetes_tools(chosen, settings), scrubber=chosen.scrubber)


# Per tool, a call that succeeds, and per string argument the value carrying the marker
# (a form the tool accepts, so each path is reached: a footer, a header, an error).
BASE_CALLS: dict[str, dict[str, Any]] = {
    "get": {"kind": "Deployment", "namespace": "prod"},
    "describe": {"kind": "Pod", "name": "api-1", "namespace": "prod"},
    "logs": {"namespace": "prod", "pod": "api-1"},
    "events": {"namespace": "prod"},
    "api_resources": {},
    "explain": {"kind": "Certificate", "field_path": "spec"},
}
MARKED_VALUES: dict[str, list[str]] = {
    "kind": [MARK, f"deployment/{MARK}"],
    "name": [MARK],
    "namespace": [MARK],
    "label_selector": [f"app=api,{MARK}!=x", f"app={MARK}", f"app in ({MARK})"],
    "field_selector": [f"metadata.name=api,metadata.namespace!={MARK}", f"spec.x={MARK}"],
    "pod": [MARK],
    "container": [MARK, "app"],
    "involved_kind": [MARK.capitalize()],
    "involved_name": [MARK, "api-1"],
    "field_path": [f"spec.{MARK}", f"certificate.spec.{MARK}"],
}


def _marked_calls(registry: ToolRegistry) -> Iterator[tuple[str, dict[str, Any]]]:
    for tool in registry:
        base = BASE_CALLS[tool.name]
        yield tool.name, base
        for field, info in tool.args_model.model_fields.items():
            if str not in (info.annotation, *getattr(info.annotation, "__args__", ())):
                continue
            assert field in MARKED_VALUES, f"{tool.name}.{field} takes text: give it a marker"
            for value in MARKED_VALUES[field]:
                yield tool.name, {**base, field: value}
                if field == "name":  # a get by name, with selectors the tool ignores
                    yield tool.name, {**base, field: value, "label_selector": f"a={MARK}"}


def _citable(result: ToolResult) -> str:
    return masked(result.output, result.echo).casefold()


@pytest.mark.parametrize("backend", ["snapshot", "live"])
def test_no_tool_lets_an_argument_it_repeats_be_cited(
    backend: str, cluster: Path, live: Path
) -> None:
    registry = _registry(backend, cluster, live)
    outcomes = {True: 0, False: 0}
    try:
        for tool, arguments in _marked_calls(registry):
            result = registry.call(tool, arguments)
            outcomes[result.ok] += 1
            assert MARK not in _citable(result), (tool, arguments, result.output)
            if "label_selector" in arguments and "app=api," in arguments["label_selector"]:
                assert result.ok and MARK in result.output.casefold()  # shown, not citable
                assert occurs_in("api 3/3", result.output, result.echo)  # real rows still are
        for arguments in ({"kind": MARK}, {"kind": "Pod", "bogus": MARK}):
            result = registry.call("get", arguments)  # refused by the registry itself
            assert not result.ok and MARK not in _citable(result)
        unknown = registry.call(MARK, {})
        assert not unknown.ok and MARK not in _citable(unknown)
    finally:
        registry.close()
    assert outcomes[True] >= 8 and outcomes[False] >= 8  # both footers and errors were seen


def test_a_failed_lookup_keeps_the_engine_s_own_words_citable(cluster: Path, live: Path) -> None:
    registry = _registry("snapshot", cluster, live)
    result = registry.call("get", {"kind": "Deployment", "name": MARK, "namespace": "prod"})
    assert result.output == f"not found: Deployment '{MARK}' not found in namespace 'prod'"
    assert occurs_in("not found: Deployment", result.output, result.echo)
    assert occurs_in("not found in namespace", result.output, result.echo)
    assert not occurs_in(f"Deployment '{MARK}'", result.output, result.echo)


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], ToolRegistry]:
    """A shell toolset whose `date -u +*` entry is (or is not) marked as repeating arguments."""
    monkeypatch.setenv("PATH", os.environ.get("PATH", "/usr/bin:/bin"))

    def build(repeats: bool) -> ToolRegistry:
        policy = {
            "available_commands": [
                {"pattern": "date -u +*", "description": "the time in a format",
                 "output_repeats_arguments": repeats},
                {"pattern": "date -u", "description": "the time"},
            ],
            "allow": ["date **"],
            "working_dir": str(tmp_path),
        }  # fmt: skip
        path = tmp_path / "shell.yaml"
        path.write_text(yaml.safe_dump(policy))
        return ToolRegistry(shell_tools(load_settings(shell_config=path)))

    return build


def test_the_shell_never_lets_its_command_line_or_an_echoing_program_be_cited(
    shell: Callable[[bool], ToolRegistry],
) -> None:
    registry = shell(True)
    for command in (f"date -u +{MARK}", f"date -u -d {MARK}", f"{MARK} -u", f"date -u +{MARK};"):
        result = registry.call("run_command", {"command": command})
        assert MARK not in _citable(result), (command, result.output)
    plain = registry.call("run_command", {"command": "date -u"})
    assert plain.ok and occurs_in("exit code: 0", plain.output, plain.echo)
    assert not occurs_in("$ date -u", plain.output, plain.echo)  # the command line is echo
    # The operator's flag is what marks a program's output: without it, date's output is data.
    unflagged = shell(False).call("run_command", {"command": f"date -u +{MARK}"})
    assert unflagged.ok and MARK in _citable(unflagged)


# --------------------------------------------------------------------------- the checks


def _listing(cluster: Path, **arguments: Any) -> ToolResult:
    registry = ToolRegistry(kubernetes_tools(SnapshotBackend(cluster), load_settings()))
    return registry.call("get", {"kind": "Deployment", "namespace": "prod", **arguments})


@pytest.mark.parametrize(
    "excerpt",
    [
        "status.readyReplicas=5",  # the echo alone
        "'status.readyReplicas=5'.",  # with the engine's quotes around it
        "field_selector 'status.readyReplicas=5'",  # straddling the engine's words and it
        "found in namespace prod",  # the namespace asked for is echo too
        "status.readyReplicas=5'\n.",  # whitespace moved
        f"status.readyReplicas{ECHO_MASK}5",  # the mask itself
    ],
)
def test_no_excerpt_touching_the_echo_verifies(cluster: Path, excerpt: str) -> None:
    result = _listing(cluster, field_selector="status.readyReplicas=5")
    assert "status.readyReplicas=5" in result.output  # the model is shown its selector
    assert not occurs_in(excerpt, result.output, result.echo)
    assert occurs_in("No deployments found in namespace", result.output, result.echo)


def test_the_structured_view_withholds_the_echo_and_keeps_the_rows(cluster: Path) -> None:
    result = _listing(cluster, label_selector="app=api")
    rendering = result.meta[META_KEY]()
    view = structured_view(masked(result.output, result.echo), rendering)
    assert locate(view, "api     3/3") is not None
    assert locate(view, "1 Deployment in namespace") is not None
    assert locate(view, "app=api") is None and locate(view, "prod") is None


def test_the_engine_refuses_a_true_citing_its_own_selector_in_every_profile(tmp_path: Path) -> None:
    snapshot = make_snapshot(tmp_path / "snap")
    lookup = {
        "action": {
            "action": "COMMAND",
            "tool": "get",
            "arguments": {
                "kind": "Deployment",
                "namespace": "prod",
                "field_selector": "status.readyReplicas=5",
            },
        }
    }
    turns = script(lookup, *[done("true", 0, excerpt="status.readyReplicas=5")] * 3)
    with scripted(turns) as model:
        report = run(model, request_for(snapshot))
    assert report.verdict is not None and report.verdict.exit_code == 3
    assert [s.kind for s in report.steps] == ["COMMAND", "REPAIR", "REPAIR", "REPAIR"]
    assert "repeat your own arguments" in (report.steps[1].error or "")


def test_a_checkpoint_without_echo_spans_counts_every_output_as_echo(tmp_path: Path) -> None:
    """A run resumed from a checkpoint written before the spans were kept cites nothing old."""
    snapshot = make_snapshot(tmp_path / "snap")
    wait = {"action": {"action": "WAIT", "seconds": 3600}}
    honest = done("true", 0, excerpt="web 2/2")
    with scripted(script({"action": {"action": "COMMAND", "tool": "get",
                                     "arguments": {"kind": "Deployment", "namespace": "prod"}}},
                         wait, honest, honest, honest, honest)) as model:  # fmt: skip
        request = request_for(snapshot)
        parked = run(model, request, allow_defer=True)
        assert parked.status == "waiting" and parked.checkpoint is not None
        stored = RunState.model_validate_json(parked.checkpoint.model_dump_json())
        assert stored.echo_spans is not None  # the listing's footer names namespace prod
        legacy = stored.model_copy(update={"echo_spans": None})
        resumed = run(model, request, state=legacy)
        current = run(model, request, state=stored)
    assert resumed.verdict is not None and resumed.verdict.exit_code == 3
    assert current.verdict is not None and current.verdict.exit_code == 0  # the control
