"""The contract shared by every part of assay.

Everything another process may read (Redis values, HTTP bodies, model output)
is one of these models, so validation happens in one place. This package
imports nothing else of ours.

The names below are loaded when first asked for (``from schemas import Verdict``), not
when the package is: a command that needs one model (``assay --help`` needs none) does
not build every model's validator.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "ACTION_TOOL_NAMES": "schemas.actions",
    "Budget": "schemas.budget",
    "Command": "schemas.actions",
    "ContextTarget": "schemas.request",
    "Done": "schemas.actions",
    "EXIT_CODES": "schemas.verdict",
    "EXIT_PENDING": "schemas.verdict",
    "EXIT_UNKNOWN": "schemas.verdict",
    "EXIT_USAGE": "schemas.verdict",
    "Error": "schemas.actions",
    "EvaluationKind": "schemas.request",
    "EvaluationRequest": "schemas.request",
    "Evidence": "schemas.verdict",
    "EvidenceRef": "schemas.actions",
    "InClusterTarget": "schemas.request",
    "PROFILES": "schemas.budget",
    "PlannerAction": "schemas.actions",
    "PlannerResponse": "schemas.actions",
    "Profile": "schemas.budget",
    "ProfileName": "schemas.budget",
    "RunReport": "schemas.report",
    "RunState": "schemas.report",
    "RunStatus": "schemas.report",
    "SnapshotTarget": "schemas.request",
    "Step": "schemas.report",
    "StepUsage": "schemas.report",
    "Target": "schemas.request",
    "Thought": "schemas.actions",
    "Usage": "schemas.verdict",
    "Verdict": "schemas.verdict",
    "VerdictKind": "schemas.verdict",
    "Wait": "schemas.actions",
    "resolve_budget": "schemas.budget",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'schemas' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
