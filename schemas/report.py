"""The run report: every step of a run, for `assay run ID` and post-mortems.

Tool output is stored truncated and already redacted; nothing in a report may
hold a Secret value.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from schemas.budget import Budget
from schemas.policy import PolicyResult, PolicySetResult
from schemas.probe import ProbeOutcome
from schemas.request import EvaluationRequest
from schemas.verdict import Usage, Verdict

RunStatus = Literal["queued", "running", "waiting", "done"]
STEP_OUTPUT_LIMIT = 4000


class StepUsage(Usage):
    latency_seconds: float = 0.0
    anomaly: str | None = Field(
        default=None,
        description="What was wrong with the usage the provider reported (negative, absurd, "
        "missing) and what was charged instead.",
    )


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int
    kind: Literal["THOUGHT", "COMMAND", "WAIT", "DONE", "ERROR", "MALFORMED", "REPAIR", "CONFIRM"]
    action: dict[str, Any] | None = Field(default=None, description="The parsed action, if any.")
    raw: str | None = Field(default=None, description="Model output that failed validation.")
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    ok: bool | None = Field(default=None, description="Tool outcome for COMMAND steps.")
    output: str | None = Field(
        default=None, description=f"Tool output, cut at {STEP_OUTPUT_LIMIT} chars."
    )
    error: str | None = None
    usage: StepUsage = Field(default_factory=StepUsage)
    tool_latency_seconds: float = 0.0
    started_at: datetime


class RunState(BaseModel):
    """Everything needed to resume a run after a deferred WAIT (the checkpoint).

    Stored by the caller while the run waits; ``workers.engine.engine.evaluate(request,
    deps, state=...)`` continues the same run id with what is left of its budget.
    Time spent waiting is not in ``active_seconds``: only active time counts
    against the timeout.
    """

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    run_id: str
    model: str
    transport: Literal["tools", "json"]
    budget: Budget
    messages: list[dict[str, Any]] = Field(description="The conversation so far (redacted).")
    steps: list[Step] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    iterations: int = 0
    active_seconds: float = 0.0
    consecutive_repairs: int = 0
    confirm_asked: bool = Field(
        default=False, description="Unused since the confirmation runs in a fresh context."
    )
    cost_unchecked: bool = False
    fence: str = Field(
        default="", description="This run's boundary token around tool output (new if empty)."
    )
    seen_outputs: dict[int, str] = Field(
        default_factory=dict,
        description="Per COMMAND step, the output exactly as the model was shown it: what "
        "cited excerpts are checked against.",
    )
    structured_outputs: dict[int, str] = Field(
        default_factory=dict,
        description="Per successful get/describe step of a strict check, that output with its "
        "free-text parts withheld: what a strict true must rest on, what the confirmation sees.",
    )
    echo_spans: dict[int, list[tuple[int, int]]] | None = Field(
        default=None,
        description="Per COMMAND step, the [start, end) character spans of its seen output "
        "that repeat the model's own arguments, which never verify a citation. None (a "
        "checkpoint from before they were kept): every seen output counts as such as a whole.",
    )
    pending_wait_step: int | None = Field(
        default=None, description="The WAIT step whose result is fed back on resume."
    )
    wake_at: datetime | None = None
    started_at: datetime


class RunReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    check_id: str
    status: RunStatus
    request: EvaluationRequest
    budget: Budget = Field(description="The resolved budget that was enforced.")
    model: str
    steps: list[Step] = Field(default_factory=list)
    verdict: Verdict | None = None
    attempts: int = Field(default=1, description="Deliveries of this run to a worker.")
    probe: ProbeOutcome | None = Field(
        default=None, description="What became of the probe this run proposed or re-ran."
    )
    policy: PolicyResult | None = Field(
        default=None,
        description="A `policy:NAME` check: the imported policy's probes and the objects that "
        "violate it (docs/probes.md).",
    )
    policy_set: PolicySetResult | None = Field(
        default=None, description="A `policy-set:NAME` check: each policy's verdict and run."
    )
    wake_at: datetime | None = None
    checkpoint: RunState | None = Field(
        default=None, description="Set while status is waiting: pass it back to resume."
    )
    repeat_of: str | None = Field(
        default=None,
        description="A probe or policy re-run that found exactly what an earlier run found "
        "stores no report of its own: this names that run, whose findings this report shows "
        "with this run's own id, attempts and times (docs/fleet.md, Retention and sizing).",
    )
    # Not part of the report: the engine's scrubbed JSON dump of its fields, so the store's
    # pattern pass searches only fields that changed since (workers/engine/toolsets/redaction.py
    # ``scrubbed``, its ``clean``). A private attribute: never serialized, kept by model_copy.
    _scrubbed_dump: dict[str, Any] | None = PrivateAttr(default=None)

    @classmethod
    def finished(
        cls,
        request: EvaluationRequest,
        verdict: Verdict,
        *,
        budget: Budget,
        model: str,
        **fields: Any,
    ) -> RunReport:
        """The report of a run that reached ``verdict``, naming its run and check the one way,
        whichever path (model, probe, policy, a give-up) reached it."""
        return cls(
            run_id=request.run_id,
            check_id=request.check_id,
            status="done",
            request=request,
            budget=budget,
            model=model,
            verdict=verdict,
            **fields,
        )
