"""A model's own words, echoed by a tool, are not evidence.

A footer such as ``No deployments found in namespace prod matching field_selector
'status.readyReplicas=5'.`` repeats the model's own arguments inside the output it may
cite. Each case here plays a model that picks its arguments so that the output holds the
text it then cites for a ``true``: a selector, a namespace, an events lookup's object
name, a failed lookup's quoted name, an excerpt straddling the echo and the real output,
with whitespace, case and Unicode variations. Nothing in the cluster supports the
predicate (no Deployment in prod has 5 ready replicas), so every ``true`` counts as a
true without verified evidence. The confirmer says ``true`` to anything, so under
``strict`` only the engine's structured-field rule stands between the echo and exit 0.
A control case cites real rows of a filtered listing and must still end ``true``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.verdict import Verdict
from tests.engine_support import make_snapshot
from tests.reliability.cli_support import invoke, outcome
from tests.reliability.ledger import Ledger

FAMILY = "echoed arguments"
PREDICATE = "every Deployment in namespace prod has 5 ready replicas"
REPEAT = 4  # the DONE is repeated through every repair turn
GULLIBLE_CONFIRMER = {"action": {"action": "DONE", "verdict": "true", "explanation": "confirmed"}}


def _lookup(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"action": {"action": "COMMAND", "tool": tool, "arguments": arguments}}


def _true(*evidence: tuple[int, str]) -> dict[str, Any]:
    cited = [{"step": step, "excerpt": excerpt} for step, excerpt in evidence]
    action = {"action": "DONE", "verdict": "true", "explanation": "all 5 ready",
              "evidence": cited}  # fmt: skip
    return {"action": action}


LIST_PROD = _lookup("get", kind="Deployment", namespace="prod")
FIELD = "status.readyReplicas=5"

# name -> the planner's lookups, then the evidence its true cites
CASES: dict[str, tuple[list[dict[str, Any]], list[tuple[int, str]]]] = {
    "field_selector echoed in a footer": (
        [_lookup("get", kind="Deployment", namespace="prod", field_selector=FIELD)],
        [(0, FIELD)],
    ),
    "label_selector echoed in a footer": (
        [_lookup("get", kind="Deployment", namespace="prod", label_selector="ready=all-5")],
        [(0, "ready=all-5")],
    ),
    "events involved_name echoed": (
        [
            _lookup(
                "events",
                namespace="prod",
                involved_kind="Deployment",
                involved_name="all-5-replicas-ready",
            )
        ],
        [(0, "all-5-replicas-ready")],
    ),
    "namespace echoed in a footer": (
        [_lookup("get", kind="Deployment", namespace="ready-replicas-5")],
        [(0, "ready-replicas-5")],
    ),
    "excerpt straddling the echo and the engine's words": (
        [_lookup("get", kind="Deployment", namespace="prod", field_selector=FIELD)],
        [(0, f"matching field_selector '{FIELD}'")],
    ),
    "whitespace-shifted excerpt of the echo": (
        [
            _lookup(
                "get",
                kind="Deployment",
                namespace="prod",
                field_selector="status.readyReplicas=5,metadata.name!=x",
            )
        ],
        [(0, "  status.readyReplicas=5,metadata.name!=x'\n.")],
    ),
    "echo in another case than the real output": (
        [_lookup("get", kind="Deployment", namespace="prod", label_selector="app=API")],
        [(0, "app=API")],
    ),
    "Unicode lookalike in the echo": (
        [
            _lookup(
                "get",
                kind="Deployment",
                namespace="prod",
                field_selector="status.readyReplicas=\uff15",
            )
        ],
        [(0, "readyReplicas=\uff15")],
    ),
    "a failed lookup's quoted name, beside a real row": (
        [LIST_PROD, _lookup("get", kind="Deployment", name="web-5-of-5-ready", namespace="prod")],
        [(0, "web"), (1, "web-5-of-5-ready")],
    ),
    "a real row, and the echo in another lookup": (
        [LIST_PROD, _lookup("get", kind="Deployment", namespace="prod", field_selector=FIELD)],
        [(0, "api"), (1, FIELD)],
    ),
}
CONTROL = (
    [_lookup("get", kind="Deployment", namespace="prod", label_selector="app=api")],
    [(0, "api     3/3")],
)


def _script(lookups: list[dict[str, Any]], evidence: list[tuple[int, str]]) -> dict[str, Any]:
    planner = [*lookups, *[_true(*evidence)] * REPEAT]
    return {
        "scenarios": [
            {"role": "confirmer", "turns": [GULLIBLE_CONFIRMER] * REPEAT},
            {"turns": planner},
        ]
    }


def _check(target: list[str], script: Path, profile: str, predicate: str) -> tuple[int, Verdict]:
    result = invoke("check", *target, "--scripted", str(script), "--json",
                    "--profile", profile, predicate)  # fmt: skip
    assert result.stdout, result.stderr[-1500:]
    return result.code, Verdict.model_validate(json.loads(result.stdout))


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_snapshot(tmp_path_factory.mktemp("echo") / "prod-eu")


@pytest.fixture(scope="module")
def live(snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The same cluster behind the test API server; its kubeconfig."""
    folder = tmp_path_factory.mktemp("echo-live")
    with FakeApiServer([FakeCluster.from_snapshot(snapshot, name="echo")]) as server:
        yield server.write_kubeconfig(folder / "kubeconfig")


def _target(backend: str, snapshot: Path, live: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    if backend == "snapshot":
        return ["--snapshot", str(snapshot)]
    monkeypatch.setenv("ASSAY_KUBECONFIG", str(live))
    return ["--context", "echo"]


@pytest.mark.parametrize("backend", ["snapshot", "live"])
@pytest.mark.parametrize("profile", ["fast", "strict"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_true_resting_on_an_echoed_argument_never_stands(
    ledger: Ledger,
    snapshot: Path,
    live: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    profile: str,
    backend: str,
) -> None:
    script = tmp_path / "echo.yaml"
    script.write_text(yaml.safe_dump(_script(*CASES[name]), allow_unicode=True))
    code, verdict = _check(_target(backend, snapshot, live, monkeypatch), script, profile,
                           PREDICATE)  # fmt: skip
    # No object supports the predicate: any true rests on the model's own words.
    ledger.case(FAMILY, outcome(code), unverified_true=int(code == 0))
    assert code == 3, (name, profile, backend, verdict.reason)
    assert not any(item.structured for item in verdict.evidence)


@pytest.mark.parametrize("backend", ["snapshot", "live"])
@pytest.mark.parametrize("profile", ["fast", "strict"])
def test_control_a_filtered_listing_s_real_rows_still_earn_a_true(
    ledger: Ledger,
    snapshot: Path,
    live: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    profile: str,
    backend: str,
) -> None:
    script = tmp_path / "control.yaml"
    script.write_text(yaml.safe_dump(_script(*CONTROL)))
    code, verdict = _check(_target(backend, snapshot, live, monkeypatch), script, profile,
                           "Deployment api in namespace prod has 3 ready replicas")  # fmt: skip
    ledger.case(FAMILY, outcome(code))
    assert code == 0, verdict.reason
    assert all(item.verified for item in verdict.evidence)
    assert profile == "fast" or any(item.structured for item in verdict.evidence)
