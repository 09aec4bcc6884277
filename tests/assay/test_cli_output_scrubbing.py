"""`--trace` and `--json` print model text only after the run's secret scrubber.

A model can repeat what it read (or was told) in a thought, an explanation, an
excerpt or a finding; none of that is tool output, so only the CLI's own pass
(assay/output_scrubbing.py) stands between it and a terminal or a CI log. The
canary cluster (tests/secret_canaries.py) plants Secret values and
credential-shaped values; the scripted model repeats every one of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.assay.test_cli_check import assay
from tests.secret_canaries import NAMESPACE, POD, CanaryCluster, spoken, write_canary_cluster
from workers.engine.toolsets.backend import REDACTED


@pytest.fixture
def cluster(tmp_path: Path) -> CanaryCluster:
    return write_canary_cluster(tmp_path)


def blabbing_script(cluster: CanaryCluster, verdict: str) -> dict[str, Any]:
    """A model that says every canary in each field it can fill."""
    said = " ; ".join(map(spoken, cluster.canaries))
    lookup = {"kind": "Pod", "name": POD, "namespace": NAMESPACE}
    done = {
        "action": "DONE",
        "verdict": verdict,
        "explanation": f"the pod runs with {said}",
        "evidence": [{"step": 1, "excerpt": f"name: {POD}"}],
        "findings": [f"seen: {said}"],
    }
    turns = [
        {"action": {"action": "THOUGHT", "thought": f"remember {said}"}},
        {"action": {"action": "COMMAND", "tool": "get", "arguments": lookup, "reason": said}},
        {"action": done},
    ]
    return {"scenarios": [{"turns": turns}]}


@pytest.mark.parametrize(("command", "verdict"), [("check", "false"), ("query", "true")])
def test_trace_and_json_never_print_a_canary(
    tmp_path: Path, cluster: CanaryCluster, command: str, verdict: str
) -> None:
    script = tmp_path / "blab.yaml"
    script.write_text(yaml.safe_dump(blabbing_script(cluster, verdict)))
    result = assay(
        command, "--snapshot", str(cluster.path), "--scripted", str(script),
        "--trace", "--json", f"is pod {POD} in {NAMESPACE} running?",
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    printed = json.loads(result.stdout)
    assert "[step 0] THOUGHT" in result.stderr and "[step 2] DONE" in result.stderr
    assert REDACTED in result.stderr and REDACTED in result.stdout
    assert cluster.leaks(result.stdout) == []
    assert cluster.leaks(result.stderr) == []
    assert printed  # the answer is still there, only its secret parts are gone


def test_the_engine_returns_the_model_text_scrubbed(cluster: CanaryCluster) -> None:
    """What the fleet stores and serves is the engine's report: no canary in it either."""
    from assay.testing.scripted_model import ScriptedModel
    from schemas.request import EvaluationRequest, SnapshotTarget
    from tests.engine_support import run

    request = EvaluationRequest(
        text=f"is pod {POD} in {NAMESPACE} running?", target=SnapshotTarget(path=str(cluster.path))
    )
    with ScriptedModel(blabbing_script(cluster, "false")) as model:
        report = run(model, request)
    stored = report.model_dump_json()
    assert report.verdict is not None and REDACTED in (report.verdict.explanation or "")
    assert cluster.leaks(stored) == []
    assert report.request == request  # the user's own input is kept verbatim
