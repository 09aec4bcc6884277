"""Everything ``assay eval`` takes from the engine, in one place.

The eval harness measures the real engine: the same ``evaluate`` that
``assay check`` runs, the same tools over the same snapshot backend, the same
litellm adapter for the no-tools baseline. This module is the only one of
``assay/eval`` that imports ``workers``, so when the engine's modules move
the harness follows by editing the imports below.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.budget import Budget
from schemas.report import RunReport
from schemas.request import EvaluationRequest, SnapshotTarget
from schemas.settings import AssaySettings
from schemas.verdict import Usage
from workers.engine.engine import EngineDeps, evaluate
from workers.engine.evidence import occurs_in
from workers.engine.llm import LiteLLMClient, LLMCall, LLMError
from workers.engine.logs import configure_logging
from workers.engine.toolsets.factory import build_registry
from workers.engine.toolsets.snapshot_backend import SnapshotBackend, SnapshotError

__all__ = [
    "LookupResult",
    "OneShotReply",
    "ask_once",
    "configure_logging",
    "lookup",
    "price_known",
    "run_check",
    "snapshot_problems",
]


def run_check(predicate: str, snapshot: Path, settings: AssaySettings, budget: Budget) -> RunReport:
    """One evaluation through the engine, exactly as ``assay check --snapshot`` runs it."""
    request = EvaluationRequest(
        kind="check",
        text=predicate,
        target=SnapshotTarget(path=str(snapshot)),
        profile=settings.profile,
        budget=budget,
        model=settings.model,
        api_base=settings.api_base,
    )
    return evaluate(request, EngineDeps(settings=settings))


@dataclass(frozen=True)
class OneShotReply:
    """The no-tools baseline's answer: the text, or the error that replaced it."""

    text: str | None
    usage: Usage
    error: str | None = None
    seconds: float = 0.0


def ask_once(
    messages: list[dict[str, Any]],
    settings: AssaySettings,
    *,
    user: str,
    max_tokens: int,
    timeout_seconds: float,
) -> OneShotReply:
    """One plain completion (no tools) through the engine's litellm adapter: retries,
    Retry-After and the local price list behave as in a run."""
    client = LiteLLMClient(settings)
    model = settings.model or ""
    started = time.monotonic()
    call = LLMCall(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        deadline=started + timeout_seconds,
        user=user,
        api_base=settings.api_base,
    )
    try:
        reply = client.complete(call)
    except LLMError as exc:
        return OneShotReply(None, Usage(), exc.message, time.monotonic() - started)
    prompt = reply.prompt_tokens or 0
    completion = reply.completion_tokens or 0
    price = client.price(model)
    usage = Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        cost_usd=price.cost(prompt, completion) if price is not None else None,
    )
    return OneShotReply(reply.content or "", usage, None, time.monotonic() - started)


def price_known(settings: AssaySettings) -> bool:
    """Whether litellm knows the model's price, so that cost (and a cost cap) can be counted."""
    return LiteLLMClient(settings).price(settings.model or "") is not None


@dataclass(frozen=True)
class LookupResult:
    ok: bool
    output: str
    echo: tuple[tuple[int, int], ...] = ()  # where the output repeats the lookup's arguments

    def cites(self, excerpt: str) -> bool:
        """Whether the engine would find ``excerpt`` in this output (never in its echo)."""
        return occurs_in(excerpt, self.output, self.echo)


def lookup(
    snapshot: Path, tool: str, arguments: dict[str, Any], settings: AssaySettings
) -> LookupResult:
    """One read-only tool call against a snapshot, through the registry a run gets."""
    request = EvaluationRequest(text="(suite check)", target=SnapshotTarget(path=str(snapshot)))
    registry = build_registry(request, settings)
    try:
        if tool not in registry:
            return LookupResult(False, f"unknown tool {tool!r}; tools: {sorted(registry.names)}")
        result = registry.call(tool, arguments)
        return LookupResult(result.ok, result.output, result.echo)
    finally:
        registry.close()


def snapshot_problems(snapshot: Path) -> list[str]:
    """Why a snapshot folder cannot be served whole (unreadable files), or nothing."""
    try:
        return list(SnapshotBackend(snapshot).problems)
    except SnapshotError as exc:
        return [str(exc)]
