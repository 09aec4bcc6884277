"""Probe helpers for the tests: probes over the engine test snapshot's Deployments."""

from __future__ import annotations

import copy
from typing import Any

from tests.engine_support import done
from tests.fleet_support import three_step_script

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


# The probe the fleet tests' planner proposes: every Deployment in prod has 2 ready replicas.
FLEET_PROBE = probe("object.status.readyReplicas >= 2")


def fleet_script_with_probe(delay: float = 0.0) -> dict[str, Any]:
    """The fleet tests' planner (``three_step_script``), its every DONE carrying FLEET_PROBE."""
    script = copy.deepcopy(three_step_script(delay=delay))
    done_turn = script["scenarios"][-1]["turns"][-1]  # type: ignore[index]
    for option in done_turn["when"]:
        option["action"]["probe"] = FLEET_PROBE
    return script
