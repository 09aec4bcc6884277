"""The bounded planner loop: one evaluation of a predicate (or question), as a plain function.

``evaluate(request, deps)`` asks the model for one action per step, runs it,
feeds the result back labelled ``[step N]`` and fenced as data
(workers/engine/fencing.py), and stops at a verdict. It never raises and never
returns ``true`` by accident: budgets, deadlines, provider errors, malformed
output and bugs all end in ``cannot_determine`` with the reason recorded, and a
``true`` or ``false`` stands only once the engine has checked what it cites
(workers/engine/evidence.py; under ``strict`` also the structured-field rule and a
confirmation in a fresh context, workers/engine/confirmation.py). The same function
serves ``assay check``, the Celery task and the scheduler's resumed WAITs
(``state=`` a checkpoint from a ``waiting`` report), so it knows nothing of
Celery, Redis or the CLI.
"""

from __future__ import annotations

import contextlib
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, Protocol, TypedDict, Unpack

import structlog

from schemas.actions import Command, Done, Error, Thought, Wait
from schemas.budget import PROFILES, Budget, resolve_budget
from schemas.probe import ProbeOutcome
from schemas.report import STEP_OUTPUT_LIMIT, RunReport, RunState, Step, StepUsage
from schemas.request import EvaluationRequest
from schemas.settings import AssaySettings
from schemas.verdict import Evidence, Usage, Verdict, VerdictKind
from workers.engine.budget_meter import BudgetExhausted, BudgetMeter, sanitize_usage
from workers.engine.confirmation import (
    confirmation_messages,
    confirmation_outcome,
    confirmation_tools,
)
from workers.engine.conversation import (
    ParsedReply,
    feedback_message,
    format_tool_result,
    initial_messages,
    parse_reply,
    planner_response_format_for,
    repair_prompt,
    shown_output,
    tools_for,
)
from workers.engine.evidence import check_evidence, structured_view
from workers.engine.fencing import neutralise, new_fence_token
from workers.engine.llm import (
    LiteLLMClient,
    LLMCall,
    LLMClient,
    LLMError,
    LLMReply,
    RetryRefused,
    Transport,
    estimate_completion_tokens,
)
from workers.engine.logs import bind_run
from workers.engine.metrics import (
    observe_model_call,
    observe_model_reply,
    observe_tool_call,
    observe_usage_anomaly,
)
from workers.engine.prompt_tally import PromptTally
from workers.engine.spend_guard import BUDGET_KIND as SPEND_CEILING
from workers.engine.spend_guard import Reservation, SpendGuard, SpendRefused
from workers.engine.token_ceiling import request_ceiling
from workers.engine.tokenizer_count import tokenizer_count
from workers.engine.tool_schemas import Tools
from workers.engine.toolsets.base import ToolRegistry
from workers.engine.toolsets.echo import masked
from workers.engine.toolsets.factory import build_registry
from workers.engine.toolsets.redaction import scrubbed
from workers.engine.toolsets.structured import META_KEY as STRUCTURED_META_KEY
from workers.engine.tracing import model_call_span, tool_call_span

MAX_REPAIR_TURNS = 2

ToolsFactory = Callable[[EvaluationRequest, AssaySettings], ToolRegistry]
StepCallback = Callable[[Step], None]


class RateLimiter(Protocol):
    """A fleet-wide limit on model calls (the fleet implements it in Redis).

    ``acquire`` blocks until a call of about ``tokens`` tokens to ``model`` may
    start, and raises ``TimeoutError`` when that would be after ``deadline``,
    a ``time.monotonic()`` instant. Time spent waiting counts against the run.
    """

    def acquire(self, model: str, tokens: int, deadline: float) -> None: ...


# The request is the user's own input (kept verbatim so the run can be evaluated again); the
# checkpoint of a waiting run holds what the model saw, already scrubbed, and must match it.
_UNSCRUBBED_REPORT_FIELDS = frozenset({"request", "checkpoint"})


@dataclass
class EngineDeps:
    """What one evaluation needs from outside; everything but settings has a default."""

    settings: AssaySettings
    llm: LLMClient | None = None
    tools: ToolsFactory = build_registry
    on_step: StepCallback | None = None
    rate_limiter: RateLimiter | None = None
    spend_guard: SpendGuard | None = None  # ceilings over many runs (workers/engine/spend_guard.py)
    allow_defer: bool = False
    sleep: Callable[[float], None] = time.sleep
    # a time.monotonic() instant the run ends by at the latest, whatever its budget says
    not_after: float | None = None


class _SpendPerAttempt:
    """Each attempt of a model call is held against the spend ceilings before it is sent: the
    engine reserves the first, this the retries the LLM client makes (a retry a ceiling
    stops is not sent, and the run ends as for any call a ceiling stops), and settles a
    failed attempt at its estimate when the provider may have billed it."""

    def __init__(self, run: _Run, prompt_tokens: int, max_completion: int) -> None:
        self.run, self.prompt_tokens, self.max_completion = run, prompt_tokens, max_completion

    def before_retry(self, attempt: int) -> None:
        try:
            self.run._reserve_spend(self.prompt_tokens, self.max_completion)
        except BudgetExhausted as exc:
            raise RetryRefused(exc.message) from exc

    def attempt_failed(self, billed: bool) -> None:
        self.run._settle_failed_attempt(billed)


def effective_budget(request: EvaluationRequest, settings: AssaySettings) -> Budget:
    """The request's numbers, then the settings' (ASSAY_* / flags), then the profile's."""
    given = request.budget
    merged = Budget(
        max_iterations=given.max_iterations or settings.max_iterations,
        max_tokens=given.max_tokens or settings.max_tokens,
        timeout_seconds=given.timeout_seconds or settings.timeout_seconds,
        max_cost_usd=given.max_cost_usd or settings.max_cost_usd,
    )
    return resolve_budget(request.profile, merged)


def evaluate(
    request: EvaluationRequest,
    deps: EngineDeps,
    state: RunState | None = None,
    *,
    spent_seconds: float = 0.0,
) -> RunReport:
    """Run (or resume) one evaluation to a report. Never raises.

    ``spent_seconds``: time this run already spent before the model (a probe re-run that
    could not answer, workers/fleet/probe_rerun.py), taken off its time budget as a resumed
    run's earlier active time is; the request and its budget stay as given. Ignored on a
    resume, whose ``state`` already counts what the run spent.
    """
    started_at = state.started_at if state else datetime.now(UTC)
    run: _Run | None = None
    try:
        run = _Run(request, deps, state, started_at, spent_seconds=spent_seconds)
        return run.execute()
    except Exception as exc:
        return _crash_report(request, deps, run, started_at, exc)


class _VerdictDetails(TypedDict, total=False):
    """What a verdict may say besides its kind and explanation (all optional).

    One list for ``_Run._end`` (finish the run with this verdict) and
    ``_Run._verdict`` (build it), so the two cannot drift apart.
    """

    reason: str | None
    budget_exhausted: str | None
    evidence: list[Evidence] | None
    findings: list[str] | None
    wake_at: datetime | None
    evidence_verified: bool
    confirmed: bool | None


class _Finished(Exception):
    """Internal: the run has its report."""

    def __init__(self, report: RunReport) -> None:
        self.report = report


class _Run:
    def __init__(
        self,
        request: EvaluationRequest,
        deps: EngineDeps,
        state: RunState | None,
        started_at: datetime,
        *,
        spent_seconds: float = 0.0,
    ) -> None:
        self.request = request
        self.deps = deps
        self.settings = deps.settings
        self.state = state
        self.started_at = started_at
        self.profile = PROFILES[request.profile]
        self.log = bind_run(
            structlog.get_logger("assay.engine"),
            run_id=request.run_id,
            check_id=request.check_id,
            batch_id=request.batch_id,
        )
        self.llm: LLMClient = deps.llm or LiteLLMClient(deps.settings)
        self.model = (state.model if state else None) or request.model or deps.settings.model or ""
        self.budget = state.budget if state else effective_budget(request, deps.settings)
        self.steps: list[Step] = list(state.steps) if state else []
        self.messages: list[dict[str, Any]] = list(state.messages) if state else []
        self.consecutive_repairs = state.consecutive_repairs if state else 0
        self.transport: Transport = state.transport if state else "tools"
        # Per run, kept across a deferred WAIT: the fence token, and per COMMAND step the
        # output as the model saw it (and its structured view), which citations are checked on.
        self.fence = (state.fence if state else "") or new_fence_token()
        self.seen: dict[int, str] = dict(state.seen_outputs) if state else {}
        self.views: dict[int, str] = dict(state.structured_outputs) if state else {}
        # per step, the spans of seen output repeating the model's arguments (never evidence)
        self.echoes: dict[int, list[tuple[int, int]]] = _echoes_of(state)
        self.meter = BudgetMeter(
            self.budget,
            usage=state.usage if state else None,
            iterations=state.iterations if state else 0,
            active_seconds=state.active_seconds if state else max(0.0, spent_seconds),
            not_after=deps.not_after,
        )
        self.cost_unchecked = state.cost_unchecked if state else False
        self.registry: ToolRegistry | None = None
        self.tool_schemas: Tools | None = None
        self.response_format: dict[str, Any] | None = None
        # the last call's padded prompt estimate: what a reply reporting no usage is charged
        self._last_prompt_estimate = 0
        self.probe_outcome: ProbeOutcome | None = None
        # The planner conversation's prompt estimate, kept per run (each message bounded once).
        self.tally = PromptTally()
        self._reservation: Reservation | None = None  # the spend guard's, until settled
        self._reserved: tuple[int, float | None] = (0, None)  # its tokens and cost

    # -- the loop ----------------------------------------------------------------------

    def execute(self) -> RunReport:
        try:
            self._prepare()
            while True:
                self._step()
        except _Finished as finished:
            report = finished.report
        except BudgetExhausted as exc:
            report = self._budget_report(exc)
        finally:
            self._release_tools()
        if self.registry is not None:
            # Model text (thoughts, explanation, findings, excerpts) is not tool output, so no
            # tool scrubbed it: a model can repeat a Secret's value it was told or guessed.
            done = scrubbed(
                report,
                keep=_UNSCRUBBED_REPORT_FIELDS,
                scrubber=self.registry.scrubber,
                revalidate=False,  # what the scrub changed, it validates again
            )
            report = done.model
            report._scrubbed_dump = done.dump  # the store searches only what changes after
        self.log.info(
            "run_finished",
            status=report.status,
            verdict=report.verdict.verdict.value if report.verdict else None,
            iterations=self.meter.iterations,
            total_tokens=self.meter.usage.total_tokens,
        )
        return report

    def _release_tools(self) -> None:
        """Close what the tools hold (a live client's connections); never changes the verdict."""
        if self.registry is not None:
            with contextlib.suppress(Exception):
                self.registry.close()

    def _prepare(self) -> None:
        if not self.model:
            self._end(
                VerdictKind.CANNOT_DETERMINE,
                "No model is configured, so nothing was evaluated.",
                reason="no model configured: set ASSAY_MODEL or pass --model",
            )
        if self.state is not None and self.state.run_id != self.request.run_id:
            self._end(
                VerdictKind.CANNOT_DETERMINE,
                "The checkpoint given belongs to another run.",
                reason=f"checkpoint of run {self.state.run_id} given to run {self.request.run_id}",
            )
        try:
            registry = self.deps.tools(self.request, self.settings)
        except Exception as exc:
            self._end(
                VerdictKind.CANNOT_DETERMINE,
                f"The cluster {self.request.target.name} could not be read.",
                reason=f"the tools could not be set up: {exc}",
            )
        self.registry = registry
        self.meter.price = self.llm.price(self.model)
        if not self.meter.cost_checkable:
            self.cost_unchecked = True
        if self.state is None:
            self.transport = self.llm.transport_for(self.model)
            self.messages = initial_messages(self.request, self.transport, registry)
        elif self.state.pending_wait_step is not None:
            self._feed_wait_result(self.state.pending_wait_step, self.state.wake_at)
        self.tool_schemas = tools_for(self.transport, registry)
        self.response_format = planner_response_format_for(self.transport)
        if math.isfinite(self.meter.deadline):  # lookups, too, end with the run's time budget
            registry.bind_deadline(self.meter.deadline)
        self.log.info("run_started", model=self.model, transport=self.transport)

    def _step(self) -> None:
        try:
            reply = self._call_model(self.messages, self.tool_schemas, self.response_format)
        except LLMError as exc:
            self._end(
                VerdictKind.CANNOT_DETERMINE,
                "The model could not be reached, so nothing was concluded.",
                reason=exc.message,
            )
        started_at = datetime.now(UTC) - timedelta(seconds=reply.latency_seconds)
        step_usage = self._charge(reply)
        assert self.registry is not None
        parsed = parse_reply(reply, self.transport, self.registry.names)
        self.messages.append(parsed.assistant_message)
        index = len(self.steps)
        if parsed.action is None:
            self._malformed(index, parsed, step_usage, started_at)
            return
        action = parsed.action
        base = {
            "index": index,
            "action": action.model_dump(mode="json"),
            "usage": step_usage,
            "started_at": started_at,
        }
        if parsed.dropped_calls:
            base["error"] = f"{parsed.dropped_calls} more tool calls in the reply were ignored"
        if isinstance(action, Done):
            self._done(index, action, parsed, base)
            return
        self.consecutive_repairs = 0
        if isinstance(action, Command):
            self._command(index, action, parsed, base)
        elif isinstance(action, Thought):
            self._record(Step(kind="THOUGHT", **base))
            self._feed(f"[step {index}] noted.", parsed)
        elif isinstance(action, Wait):
            self._wait(index, action, parsed, base)
        elif isinstance(action, Error):
            self._record(Step(kind="ERROR", **base))
            self._end(
                VerdictKind.CANNOT_DETERMINE,
                action.message,
                reason=f"the model gave up: {action.message}",
            )

    # -- one model call ------------------------------------------------------------------

    def _call_model(
        self,
        messages: list[dict[str, Any]],
        tools: Tools | None,
        response_format: dict[str, Any] | None,
    ) -> LLMReply:
        """One model call within the budget; LLMError when it failed (deadline: BudgetExhausted)."""
        bound = self._prompt_estimate(messages, tools, response_format)
        tighter = self._tokenizer_count(messages, tools, response_format)
        allowance = self.meter.allow_call(bound, tighter=tighter)
        if self.deps.rate_limiter is not None:
            tokens = allowance.prompt_tokens_estimate + allowance.max_completion_tokens
            try:
                self.deps.rate_limiter.acquire(self.model, tokens, self.meter.deadline)
            except TimeoutError as exc:
                raise BudgetExhausted(
                    "deadline",
                    f"the fleet's model rate limit left no time before the deadline: {exc}",
                ) from exc
            allowance = self.meter.allow_call(bound, tighter=tighter)
        # what the call was capped by: charged for a reply that reports no usage
        self._last_prompt_estimate = allowance.prompt_tokens_estimate
        self._reserve_spend(allowance.prompt_tokens_estimate, allowance.max_completion_tokens)
        call = LLMCall(
            model=self.model,
            messages=messages,
            max_tokens=allowance.max_completion_tokens,
            deadline=self.meter.deadline,
            user=self.request.run_id,
            tools=tools,
            response_format=response_format,
            api_base=self.request.api_base or self.settings.api_base,
            observer=_SpendPerAttempt(self, allowance.prompt_tokens_estimate,
                                      allowance.max_completion_tokens)
            if self.deps.spend_guard is not None else None,
        )  # fmt: skip
        try:
            with model_call_span(self.model, iteration=self.meter.iterations):
                reply = self.llm.complete(call)
        except RetryRefused as exc:  # a ceiling stopped a retry before it was sent
            observe_model_call(self.model, ok=False)
            raise BudgetExhausted(SPEND_CEILING, exc.message) from exc
        except LLMError as exc:
            observe_model_call(self.model, ok=False)
            self._settle_spend(0, 0)  # no attempt left unsettled, unless no attempt was sent
            if exc.kind == "deadline":
                raise BudgetExhausted("deadline", exc.message) from exc
            raise
        if messages is self.messages:  # the provider's count bounds the next request
            self.tally.counted(
                messages, tools, response_format,
                estimate=allowance.prompt_tokens_estimate, reported=reply.prompt_tokens,
            )  # fmt: skip
        if self.meter.remaining_seconds() < 0:
            # A reply trickled in past every per-read timeout: spent, but not acted on.
            self._charge(reply)
            raise BudgetExhausted(
                "deadline",
                f"the model's reply arrived after the run's deadline "
                f"({-self.meter.remaining_seconds():.1f}s late)",
            )
        return reply

    def _prompt_estimate(
        self,
        messages: list[dict[str, Any]],
        tools: Tools | None,
        response_format: dict[str, Any] | None,
    ) -> int:
        """At least the prompt tokens of a request, without a tokenizer
        (workers/engine/prompt_tally.py)."""
        if messages is self.messages:
            return self.tally.estimate(messages, tools, response_format)
        # the confirmation's fresh context: bounded whole from its size
        return request_ceiling(messages, tools, response_format)

    def _tokenizer_count(
        self,
        messages: list[dict[str, Any]],
        tools: Tools | None,
        response_format: dict[str, Any] | None,
    ) -> Callable[[], int | None]:
        """The request's count by the model's tokenizer, worked out when first asked for and
        kept for the call: the meter asks only near the budget
        (workers/engine/tokenizer_count.py)."""
        counted: list[int | None] = []

        def count() -> int | None:
            if not counted:  # imports litellm: only a call near the budget gets here
                counted.append(tokenizer_count(self.model, messages, tools, response_format))
                self.log.debug("prompt_counted", tokens=counted[0])
            return counted[0]

        return count

    def _charge(self, reply: LLMReply) -> StepUsage:
        """Charge a reply to the budget. Usage the provider reported is data too: a negative,
        missing or absurd number is replaced (estimate or ceiling) and the anomaly recorded,
        so the spent count never goes down and the metrics never see a negative."""
        prompt, completion, anomaly = sanitize_usage(
            reply.prompt_tokens,
            reply.completion_tokens,
            prompt_estimate=self._last_prompt_estimate,
            completion_estimate=estimate_completion_tokens(reply),
        )
        usage = self.meter.record(prompt, completion)
        self._settle_spend(prompt + completion, usage.cost_usd)
        observe_model_reply(
            self.model, prompt_tokens=prompt, completion_tokens=completion, attempts=reply.attempts
        )
        if anomaly is not None:
            observe_usage_anomaly(self.model)
            self.log.warning(
                "model_usage_anomaly",
                anomaly=anomaly,
                reported_prompt_tokens=reply.prompt_tokens,
                reported_completion_tokens=reply.completion_tokens,
            )
        return StepUsage(
            **usage.model_dump(), latency_seconds=reply.latency_seconds, anomaly=anomaly
        )

    def _reserve_spend(self, prompt_tokens: int, max_completion: int) -> None:
        """Hold the call's estimate against the ceilings shared with other runs, if any."""
        guard = self.deps.spend_guard
        if guard is None:
            return
        price = self.meter.price
        cost = price.cost(prompt_tokens, max_completion) if price is not None else None
        try:
            self._reservation = guard.reserve(
                self.request, prompt_tokens + max_completion, cost, self.meter.deadline
            )
        except SpendRefused as exc:
            raise BudgetExhausted(SPEND_CEILING, exc.message) from exc
        self._reserved = (prompt_tokens + max_completion, cost)

    def _settle_spend(self, tokens: int, cost_usd: float | None) -> None:
        reservation, self._reservation = self._reservation, None
        if reservation is not None and self.deps.spend_guard is not None:
            self.deps.spend_guard.settle(reservation, tokens, cost_usd)

    def _settle_failed_attempt(self, billed: bool) -> None:
        """An attempt failed: its estimate is spent when the provider may have billed it
        (a timeout, a dropped connection, a 5xx), nothing when it refused it (a 4xx, a
        connection never opened)."""
        tokens, cost = self._reserved if billed else (0, 0.0)
        self._settle_spend(tokens, cost)

    # -- actions -------------------------------------------------------------------------

    def _command(
        self, index: int, action: Command, parsed: ParsedReply, base: dict[str, Any]
    ) -> None:
        assert self.registry is not None
        began = time.monotonic()
        with tool_call_span(action.tool, step=index):
            result = self.registry.call(action.tool, action.arguments)
        observe_tool_call(action.tool, ok=result.ok)
        tool_seconds = time.monotonic() - began
        limit = int(self.settings.tool_output_limit_chars * 1.5)
        marked = shown_output(result, limit, self.fence)
        shown = marked.text
        self.seen[index] = shown
        if marked.echo:
            self.echoes[index] = list(marked.echo)
        render_structured = result.meta.get(STRUCTURED_META_KEY)
        if result.ok and callable(render_structured) and self._strict_check:
            structured = neutralise(str(render_structured()), self.fence)
            # The model's own arguments, repeated, are never a structured field.
            self.views[index] = structured_view(masked(shown, marked.echo), structured)
        self._record(
            Step(
                kind="COMMAND",
                tool=action.tool,
                arguments=action.arguments,
                ok=result.ok,
                output=shown[:STEP_OUTPUT_LIMIT],
                tool_latency_seconds=tool_seconds,
                **base,
            )
        )
        self._feed(
            format_tool_result(index, action.tool, action.arguments, result.ok, shown, self.fence),
            parsed,
        )

    def _wait(self, index: int, action: Wait, parsed: ParsedReply, base: dict[str, Any]) -> None:
        now = datetime.now(UTC)
        wake_at = (
            action.until
            if action.until is not None
            else now + timedelta(seconds=action.seconds or 0)
        )
        seconds = max(0.0, (wake_at - now).total_seconds())
        self._record(Step(kind="WAIT", **base))
        cap = self.settings.wait_inline_cap_seconds
        if seconds > cap and self.deps.allow_defer:
            raise _Finished(self._waiting_report(index, wake_at))
        if seconds > cap:
            self._end(
                VerdictKind.CANNOT_DETERMINE,
                f"The model asked to wait until {wake_at.isoformat()}, longer than this run "
                f"can wait in place ({cap:g}s).",
                reason=f"WAIT of {seconds:.0f}s exceeds the inline cap of {cap:g}s; "
                "schedule the check for that instant instead",
                wake_at=wake_at,
            )
        if seconds >= self.meter.remaining_seconds():
            self._end(
                VerdictKind.CANNOT_DETERMINE,
                f"The model asked to wait until {wake_at.isoformat()}, after the run's deadline.",
                reason=f"WAIT of {seconds:.0f}s would pass the run's deadline",
                budget_exhausted="deadline",
                wake_at=wake_at,
            )
        if seconds > 0:
            self.deps.sleep(seconds)
        self._feed_wait_result(index, wake_at, parsed.tool_call_id)

    def _feed_wait_result(
        self, index: int, wake_at: datetime | None, tool_call_id: str | None = None
    ) -> None:
        if tool_call_id is None and self.transport == "tools" and self.messages:
            calls = self.messages[-1].get("tool_calls") or []
            tool_call_id = calls[0]["id"] if calls else None
        now = datetime.now(UTC).isoformat(timespec="seconds")
        until = wake_at.isoformat(timespec="seconds") if wake_at else "the requested time"
        self.messages.append(
            feedback_message(f"[step {index}] waited until {until}; it is now {now}.", tool_call_id)
        )

    @property
    def _strict_check(self) -> bool:
        """A check under a profile whose true needs a structured field and a confirmation."""
        return self.profile.confirm_true and self.request.kind == "check"

    def _done(self, index: int, action: Done, parsed: ParsedReply, base: dict[str, Any]) -> None:
        step = Step(kind="DONE", **base)
        self._within_budget(step)
        needs_confirmation = action.verdict == VerdictKind.TRUE and self._strict_check
        check = check_evidence(
            action.evidence,
            self.steps,
            self.seen,
            self.views,
            echoes=self.echoes,
            verdict=action.verdict.value,
            decisive=action.verdict in (VerdictKind.TRUE, VerdictKind.FALSE),
            needs_structure=needs_confirmation,
        )
        if check.problems:
            problems = "; ".join(check.problems)
            self._record(Step(kind="REPAIR", **{**base, "error": problems}))
            self._repair_or_end(index, problems, parsed, what="evidence")
            return
        self.consecutive_repairs = 0
        self._record(step)
        self.probe_outcome = self._judge_probe(action)
        # strict: a true needs the fresh-context confirmation, agreeing probe or not. The probe
        # is the planner's own expression, and one that agrees can be written for any true.
        confirmed = self._confirm(check.evidence) if needs_confirmation else None
        self._end(
            action.verdict,
            action.explanation,
            evidence=check.evidence,
            findings=list(action.findings),
            evidence_verified=check.verified,
            confirmed=confirmed,
        )

    def _judge_probe(self, action: Done) -> ProbeOutcome | None:
        """Run the probe the model proposed with a check's true/false
        (workers/policy_engine/probes).

        Within the run's deadline (already bound to the registry's backend by ``_prepare``):
        the runner also watches the clock, so an ``each_object`` probe over a big snapshot ends
        by it. A probe that runs out is not judged (``failed``) and the verdict is handled as
        with any unjudged probe: it stands on its evidence, and under strict a true still needs
        the confirmation, which the spent budget then refuses (``cannot_determine``).
        """
        decisive = action.verdict in (VerdictKind.TRUE, VerdictKind.FALSE)
        if not decisive or self.request.kind != "check":
            return None
        if action.probe is None:
            if action.probe_dropped is None:
                return None
            # Not a valid probe: dropped with its reason; the verdict stands on its evidence.
            reason = f"the proposed probe was dropped: {action.probe_dropped}"
            self.log.info("probe_judged", status="failed", reason=reason)
            return ProbeOutcome(status="failed", reason=reason)
        # Here, not at the top: the probes bring the CEL library, which a run that proposes
        # no probe (and `assay check` starting up) need not import.
        from workers.policy_engine.probes.acceptance import judge
        from workers.policy_engine.probes.runner import backend_of

        deadline = self.meter.deadline if math.isfinite(self.meter.deadline) else None
        probe = action.probe.as_probe()
        outcome = judge(probe, action.verdict, backend_of(self.registry), deadline=deadline)
        self.log.info("probe_judged", status=outcome.status, reason=outcome.reason)
        return outcome

    def _within_budget(self, step: Step) -> None:
        """Record ``step`` and end the run when its reply took the run past its budget.

        Each call's ``max_tokens`` is capped to what is left, but a provider may ignore the
        cap (or report that it did); a verdict must not rest on a call the budget did not
        allow. A lookup or thought past the budget needs nothing here: the next call is
        refused by ``allow_call``.
        """
        try:
            self.meter.ensure_within()
        except BudgetExhausted:
            self._record(step.model_copy(update={"error": "not acted on: past the budget"}))
            raise

    def _confirm(self, evidence: list[Evidence]) -> bool:
        """Ask a fresh context whether the cited evidence settles the predicate as true.

        Returns True only on an explicit ``true``; anything else ends the run here.
        """
        index = len(self.steps)
        # A token of its own: the planner, whose conversation held this run's token, never sees it.
        messages = confirmation_messages(self.request, evidence, self.views, new_fence_token())
        began = datetime.now(UTC)
        try:
            reply = self._call_model(
                messages,
                confirmation_tools(self.transport),
                planner_response_format_for(self.transport),
            )
        except LLMError as exc:
            self._record(Step(index=index, kind="CONFIRM", error=exc.message, started_at=began))
            self._unconfirmed(evidence, f"the confirmation call failed: {exc.message}")
        usage = self._charge(reply)
        parsed = parse_reply(reply, self.transport, set())
        confirmed, outcome = confirmation_outcome(parsed)
        step = Step(
            index=index,
            kind="CONFIRM",
            action=parsed.action.model_dump(mode="json") if parsed.action else None,
            raw=(parsed.raw or "")[:STEP_OUTPUT_LIMIT] or None,
            error=None if confirmed else outcome,
            usage=usage,
            started_at=began,
        )
        self._within_budget(step)
        self._record(step)
        if not confirmed:
            self._unconfirmed(evidence, outcome)
        return True

    def _unconfirmed(self, evidence: list[Evidence], outcome: str) -> NoReturn:
        self._end(
            VerdictKind.CANNOT_DETERMINE,
            "The planner's true was not confirmed by a separate look at the evidence it cited, "
            "so nothing was concluded.",
            reason=f"strict profile: the confirmation in a fresh context did not confirm the "
            f"true ({outcome})",
            evidence=evidence,
            evidence_verified=True,
            confirmed=False,
        )

    def _malformed(
        self, index: int, parsed: ParsedReply, usage: StepUsage, started_at: datetime
    ) -> None:
        error = parsed.error or "the reply could not be read"
        raw = (parsed.raw or "")[:STEP_OUTPUT_LIMIT]
        self._record(
            Step(
                index=index,
                kind="MALFORMED",
                raw=raw,
                error=error,
                usage=usage,
                started_at=started_at,
            )
        )
        self._repair_or_end(index, error, parsed)

    def _repair_or_end(
        self, index: int, error: str, parsed: ParsedReply, what: str = "output"
    ) -> None:
        if self.consecutive_repairs >= MAX_REPAIR_TURNS:
            problem = (
                "evidence still failed the engine's check"
                if what == "evidence"
                else "output was still invalid"
            )
            self._end(
                VerdictKind.CANNOT_DETERMINE,
                "The model's answers could not be used, so nothing was concluded.",
                reason=f"the model's {problem} after {MAX_REPAIR_TURNS} repair turns: {error}",
            )
        self.consecutive_repairs += 1
        self._feed(f"[step {index}] {repair_prompt(error)}", parsed)

    # -- bookkeeping ---------------------------------------------------------------------

    def _feed(self, text: str, parsed: ParsedReply) -> None:
        tool_call_id = parsed.tool_call_id if self.transport == "tools" else None
        self.messages.append(feedback_message(text, tool_call_id))

    def _record(self, step: Step) -> None:
        self.steps.append(step)
        self.log.debug("step", index=step.index, kind=step.kind, tool=step.tool, ok=step.ok)
        if self.deps.on_step is not None:
            try:
                self.deps.on_step(step)
            except Exception as exc:  # a display problem must not change the verdict
                self.log.warning("on_step_failed", error=repr(exc))

    def _end(
        self, kind: VerdictKind, explanation: str, **details: Unpack[_VerdictDetails]
    ) -> NoReturn:
        raise _Finished(self._report(self._verdict(kind, explanation, **details)))

    def _budget_report(self, exc: BudgetExhausted) -> RunReport:
        verdict = self._verdict(
            VerdictKind.CANNOT_DETERMINE,
            f"The run stopped before reaching a verdict: {exc.message}.",
            reason=exc.message,
            budget_exhausted=exc.which,
        )
        return self._report(verdict)

    def _verdict(
        self, kind: VerdictKind, explanation: str, **details: Unpack[_VerdictDetails]
    ) -> Verdict:
        reason = details.get("reason")
        if self.cost_unchecked:
            note = (
                f"the cost cap of ${self.budget.max_cost_usd:g} was not checked: "
                f"litellm has no price for model {self.model}"
            )
            reason = f"{reason}; {note}" if reason else note
        return Verdict.of_request(
            self.request,
            kind,
            explanation,
            model=self.model or "(none)",
            started_at=self.started_at,
            finished_at=datetime.now(UTC),
            evidence=details.get("evidence") or [],
            findings=details.get("findings") or [],
            evidence_verified=details.get("evidence_verified", False),
            confirmed=details.get("confirmed"),
            reason=reason,
            budget_exhausted=details.get("budget_exhausted"),
            wake_at=details.get("wake_at"),
            iterations=self.meter.iterations,
            usage=self.meter.usage,
            duration_seconds=round(self.meter.active_seconds(), 4),
        )

    def _report(self, verdict: Verdict) -> RunReport:
        return RunReport.finished(
            self.request,
            verdict,
            budget=self.budget,
            model=self.model or "(none)",
            steps=self.steps,
            wake_at=verdict.wake_at,
            probe=self.probe_outcome,
        )

    def _waiting_report(self, index: int, wake_at: datetime) -> RunReport:
        state = RunState(
            run_id=self.request.run_id,
            model=self.model,
            transport=self.transport,
            budget=self.budget,
            messages=self.messages,
            steps=self.steps,
            usage=self.meter.usage,
            iterations=self.meter.iterations,
            active_seconds=self.meter.active_seconds(),
            consecutive_repairs=self.consecutive_repairs,
            cost_unchecked=self.cost_unchecked,
            fence=self.fence,
            seen_outputs=self.seen,
            structured_outputs=self.views,
            echo_spans=self.echoes,
            pending_wait_step=index,
            wake_at=wake_at,
            started_at=self.started_at,
        )
        return RunReport(
            run_id=self.request.run_id,
            check_id=self.request.check_id,
            status="waiting",
            request=self.request,
            budget=self.budget,
            model=self.model,
            steps=self.steps,
            wake_at=wake_at,
            checkpoint=state,
        )


def _echoes_of(state: RunState | None) -> dict[int, list[tuple[int, int]]]:
    """Per step, the spans of its seen output that repeat the model's arguments.

    A checkpoint written before these spans were kept (``echo_spans`` absent) cannot say
    where its outputs repeat the model's words: each counts as echo as a whole, so a run
    resumed from it never verifies a citation of a lookup made before the upgrade.
    """
    if state is None:
        return {}
    if state.echo_spans is None:
        return {index: [(0, len(text))] for index, text in state.seen_outputs.items()}
    return {
        index: [(start, end) for start, end in spans] for index, spans in state.echo_spans.items()
    }


def _crash_report(
    request: EvaluationRequest,
    deps: EngineDeps,
    run: _Run | None,
    started_at: datetime,
    exc: Exception,
) -> RunReport:
    """The report of a run that hit a bug: cannot_determine, with the error on record."""
    error = f"{type(exc).__name__}: {exc}"
    structlog.get_logger("assay.engine").error(
        "run_crashed",
        run_id=request.run_id,
        check_id=request.check_id,
        error=error,
        traceback=traceback.format_exc(limit=8),
    )
    model = (run.model if run else None) or request.model or deps.settings.model or "(none)"
    usage = run.meter.usage if run else Usage()
    verdict = Verdict.of_request(
        request,
        VerdictKind.CANNOT_DETERMINE,
        "The evaluation failed with an internal error, so nothing was concluded.",
        reason=f"internal error: {error}",
        iterations=run.meter.iterations if run else 0,
        usage=usage,
        duration_seconds=round(run.meter.active_seconds(), 4) if run else 0.0,
        model=model,
        started_at=started_at,
        finished_at=datetime.now(UTC),
    )
    return RunReport.finished(
        request,
        verdict,
        budget=run.budget if run else request.budget,
        model=model,
        steps=run.steps if run else [],
    )
