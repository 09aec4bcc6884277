"""The contract shared by every part of assay.

Everything another process may read (Redis values, HTTP bodies, model output)
is one of these models, so validation happens in one place. This package
imports nothing else of ours.
"""

from schemas.actions import (
    ACTION_TOOL_NAMES,
    Command,
    Done,
    Error,
    EvidenceRef,
    PlannerAction,
    PlannerResponse,
    Thought,
    Wait,
)
from schemas.budget import PROFILES, Budget, Profile, ProfileName, resolve_budget
from schemas.report import RunReport, RunState, RunStatus, Step, StepUsage
from schemas.request import (
    ContextTarget,
    EvaluationKind,
    EvaluationRequest,
    InClusterTarget,
    SnapshotTarget,
    Target,
)
from schemas.verdict import (
    EXIT_CODES,
    EXIT_PENDING,
    EXIT_UNKNOWN,
    EXIT_USAGE,
    Evidence,
    Usage,
    Verdict,
    VerdictKind,
)

__all__ = [
    "ACTION_TOOL_NAMES",
    "EXIT_CODES",
    "EXIT_PENDING",
    "EXIT_UNKNOWN",
    "EXIT_USAGE",
    "PROFILES",
    "Budget",
    "Command",
    "ContextTarget",
    "Done",
    "Error",
    "EvaluationKind",
    "EvaluationRequest",
    "Evidence",
    "EvidenceRef",
    "InClusterTarget",
    "PlannerAction",
    "PlannerResponse",
    "Profile",
    "ProfileName",
    "RunReport",
    "RunState",
    "RunStatus",
    "SnapshotTarget",
    "Step",
    "StepUsage",
    "Target",
    "Thought",
    "Usage",
    "Verdict",
    "VerdictKind",
    "Wait",
    "resolve_budget",
]
