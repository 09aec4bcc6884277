"""Helpers for the engine and CLI tests: a small real snapshot folder and script builders."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from assay.testing.scripted_model import ScriptedModel
from schemas.budget import Budget
from schemas.report import RunReport, RunState
from schemas.request import EvaluationRequest, SnapshotTarget
from schemas.settings import load_settings
from workers.engine.engine import EngineDeps, evaluate

CANARY = "CANARY-7f3a9c-do-not-leak"
PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"

_DEPLOYMENTS = """\
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: api, namespace: prod, labels: {app: api}}
  spec: {replicas: 3}
  status: {replicas: 3, readyReplicas: 3, availableReplicas: 3, updatedReplicas: 3}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web, namespace: prod, labels: {app: web}}
  spec: {replicas: 2}
  status: {replicas: 2, readyReplicas: %(web_ready)s, availableReplicas: 2, updatedReplicas: 2}
"""
_SECRET = f"""\
apiVersion: v1
kind: Secret
metadata: {{name: db-credentials, namespace: prod}}
type: Opaque
data: {{password: {base64.b64encode(CANARY.encode()).decode()}}}
stringData: {{token: {CANARY}}}
"""


def make_snapshot(root: Path, web_ready: int = 2) -> Path:
    """A snapshot folder with two Deployments in prod and a Secret holding the canary."""
    (root / "prod").mkdir(parents=True, exist_ok=True)
    (root / "prod" / "deployments.yaml").write_text(_DEPLOYMENTS % {"web_ready": web_ready})
    (root / "prod" / "secret.yaml").write_text(_SECRET)
    return root


def get_deployments(**extra: Any) -> dict[str, Any]:
    return {
        "action": {
            "action": "COMMAND",
            "tool": "get",
            "arguments": {"kind": "Deployment", "namespace": "prod"},
            "reason": "list the Deployments",
        },
        **extra,
    }


def done(
    verdict: str,
    *steps: int,
    explanation: str = "checked",
    excerpt: str = "web",
    **extra: Any,
) -> dict[str, Any]:
    """A DONE citing ``steps``; the default excerpt occurs in every lookup of the test snapshot's
    Deployments (the ``web`` row of the list, ``name: web`` of the object)."""
    evidence = [{"step": step, "excerpt": excerpt} for step in steps]
    action = {"action": "DONE", "verdict": verdict, "explanation": explanation,
              "evidence": evidence}  # fmt: skip
    return {"action": action, **extra}


def done_ignoring_max_tokens(usage: dict[str, int], excerpt: str = "web") -> dict[str, Any]:
    """A raw completion carrying ``done(true)`` citing step 0 and reporting ``usage``, whatever
    max_tokens was asked: the scripted model itself keeps to the cap, as a real server does,
    so a provider that does not is replayed as a whole reply."""
    action = done("true", 0, excerpt=excerpt)["action"]
    arguments = {key: value for key, value in action.items() if key != "action"}
    call = {"id": "call_1", "type": "function",
            "function": {"name": "done", "arguments": json.dumps(arguments)}}  # fmt: skip
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    completion = {
        "id": "chatcmpl-overspent",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]},
    }
    return {"body": json.dumps(completion)}


def script(*turns: dict[str, Any], delay: float = 0.0) -> dict[str, Any]:
    return {"scenarios": [{"turns": list(turns)}], "delay": delay}


@contextmanager
def scripted(turns_script: dict[str, Any]) -> Iterator[ScriptedModel]:
    with ScriptedModel(turns_script) as model:
        yield model


def request_for(
    snapshot: Path,
    *,
    kind: str = "check",
    text: str = PREDICATE,
    profile: str = "fast",
    model: str | None = None,
    **budget: Any,
) -> EvaluationRequest:
    return EvaluationRequest(
        kind=kind,
        text=text,
        target=SnapshotTarget(path=str(snapshot)),
        profile=profile,
        budget=Budget(**budget),
        model=model,
    )


def run(
    model: ScriptedModel,
    request: EvaluationRequest,
    *,
    state: RunState | None = None,
    **deps: Any,
) -> RunReport:
    settings_overrides = deps.pop("settings", {})
    settings = load_settings(model="openai/scripted", api_base=model.url, **settings_overrides)
    return evaluate(request, EngineDeps(settings=settings, **deps), state=state)
