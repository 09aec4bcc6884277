"""Probe helpers for the tests: probes over the engine test snapshot's Deployments."""

from __future__ import annotations

from typing import Any

from tests.engine_support import done

LIST_PROD = {"tool": "get", "args": {"kind": "Deployment", "namespace": "prod"}}
READY_TWO = "has(object.status.readyReplicas) && object.status.readyReplicas >= 2"


def probe(
    expression: str = READY_TWO,
    *,
    scope: str = "each_object",
    lookups: list[dict[str, Any]] | None = None,
    **mapping: str,
) -> dict[str, Any]:
    return {"lookups": lookups or [LIST_PROD], "expression": expression, "scope": scope, **mapping}


def done_with_probe(verdict: str, *steps: int, probe_spec: dict[str, Any]) -> dict[str, Any]:
    turn = done(verdict, *steps)
    turn["action"]["probe"] = probe_spec
    return turn
