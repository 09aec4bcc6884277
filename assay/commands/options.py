"""The flags every evaluating command shares, and turning them into settings or a budget.

`assay check`/`query` run the engine here and feed the model, budget and
profile flags into the settings; `assay submit`/`batch` send them with the
request instead. Both read the same options, checked the same way, from this
module. Only typer is imported at module level so ``assay --help`` stays fast.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/test_cli_check.py keeps the engine out).
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from pydantic import ValidationError

    from schemas.budget import Budget
    from schemas.settings import AssaySettings

SnapshotOpt = Annotated[
    Path | None,
    typer.Option(
        "--snapshot",
        help="Evaluate against a snapshot folder of Kubernetes YAML; it must lie under the "
        "snapshot roots (env ASSAY_SNAPSHOT_ROOTS, default: the current directory).",
        exists=True,
        file_okay=False,
        dir_okay=True,
        resolve_path=True,
    ),
]
ContextOpt = Annotated[
    str | None, typer.Option("--context", help="Evaluate against this kubeconfig context.")
]
ModelOpt = Annotated[
    str | None, typer.Option("--model", help="litellm model name (env ASSAY_MODEL).")
]
FLEET_MODEL_HELP = (
    "litellm model for this run; it overrides the workers' ASSAY_MODEL, which is used "
    "otherwise (the ASSAY_MODEL of this shell is not sent)."
)
FleetModelOpt = Annotated[str | None, typer.Option("--model", help=FLEET_MODEL_HELP)]
FleetApiBaseOpt = Annotated[
    str | None,
    typer.Option(
        "--api-base",
        help="OpenAI-compatible endpoint for this run; overrides the workers' ASSAY_API_BASE.",
    ),
]
ApiBaseOpt = Annotated[
    str | None,
    typer.Option("--api-base", help="OpenAI-compatible endpoint URL (env ASSAY_API_BASE)."),
]
MaxIterationsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-iterations",
        min=1,
        help="Model steps allowed (env ASSAY_MAX_ITERATIONS; for submit and batch, the workers').",
    ),
]
MaxTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        min=100,
        help="Total tokens allowed (env ASSAY_MAX_TOKENS; for submit and batch, the workers').",
    ),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        min=0.1,
        help="Seconds allowed (env ASSAY_TIMEOUT_SECONDS; for submit and batch, the workers').",
    ),
]


def _positive_cost(value: float | None) -> float | None:
    """A cost limit of 0 or less is refused: the budget needs more than 0, and a request's
    0 used to be dropped as "no limit", the opposite of what was asked."""
    if value is not None and not value > 0:
        raise typer.BadParameter("must be more than 0 (USD); leave it out for no cost limit")
    return value


MaxCostOpt = Annotated[
    float | None,
    typer.Option(
        "--max-cost",
        callback=_positive_cost,
        help="USD allowed, more than 0 (env ASSAY_MAX_COST_USD; for submit and batch, "
        "the workers').",
    ),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option("--profile", help="smoke, fast or strict (env ASSAY_PROFILE)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the verdict as JSON on stdout.")]

ID_HELP = "1-128 of A-Z a-z 0-9 . _ - (no ':'), starting with a letter or digit"


ProbeOpt = Annotated[
    str | None,
    typer.Option(
        "--probe",
        help="auto (default): re-run a check's accepted probe for 0 model tokens, falling back "
        "to the model; off: always the model; only: the probe or cannot_determine.",
    ),
]
PROBE_MODES = ("auto", "off", "only")


def check_probe_mode(mode: str | None) -> None:
    """Refuse an unknown --probe value with the three that exist."""
    if mode is not None and mode not in PROBE_MODES:
        raise typer.BadParameter(f"use one of {', '.join(PROBE_MODES)}", param_hint="--probe")


def id_checker(what: str) -> Callable[[str | None], str | None]:
    """A typer callback refusing an id outside the alphabet of ``schemas.ids`` (exit 64)."""

    def check(value: str | None) -> str | None:
        from schemas.ids import InvalidId, check_id

        if value is None:
            return None
        try:
            return check_id(value, what)
        except InvalidId as exc:
            raise typer.BadParameter(str(exc)) from None

    return check


@dataclass(frozen=True)
class EngineFlags:
    """The model, budget and profile flags, as one value the commands pass along.

    Fields are in the order every command declares the flags, so a command
    builds it positionally from its own parameters.
    """

    model: str | None = None
    api_base: str | None = None
    max_iterations: int | None = None
    max_tokens: int | None = None
    timeout: float | None = None
    max_cost: float | None = None
    profile: str | None = None

    def settings_overrides(self) -> dict[str, Any]:
        """The flags as ``load_settings`` keywords (an unset flag keeps ``ASSAY_*``)."""
        return {
            "model": self.model,
            "api_base": self.api_base,
            "max_iterations": self.max_iterations,
            "max_tokens": self.max_tokens,
            "timeout_seconds": self.timeout,
            "max_cost_usd": self.max_cost,
            "profile": self.profile,
        }

    def budget(self) -> Budget:
        """The flags as a request's own budget (an unset limit keeps the profile's)."""
        from schemas.budget import Budget

        return Budget(
            max_iterations=self.max_iterations,
            max_tokens=self.max_tokens,
            timeout_seconds=self.timeout,
            max_cost_usd=self.max_cost,
        )


def settings_or_usage(**flags: Any) -> AssaySettings:
    """The settings with ``flags`` on top; an invalid configuration is a usage error (64)."""
    from schemas.settings import load_settings, settings_problem, unknown_settings

    try:
        settings = load_settings(**flags)
    except ValueError as exc:  # pydantic's ValidationError is one too
        raise typer.BadParameter(f"the configuration is invalid: {settings_problem(exc)}") from None
    for problem in unknown_settings():
        typer.echo(f"assay: warning: {problem}", err=True)
    return settings


def check_profile(profile: str | None) -> None:
    from schemas.budget import PROFILES

    if profile is not None and profile not in PROFILES:
        raise typer.BadParameter(
            f"unknown profile {profile!r}: use one of {', '.join(PROFILES)}", param_hint="--profile"
        )


def confined_snapshot(snapshot: Path, settings: AssaySettings) -> Path:
    """The snapshot folder resolved inside the CLI's snapshot roots, else a usage error (64)."""
    from workers.core.snapshot_roots import SnapshotOutsideRoots, SnapshotRoots

    try:
        return SnapshotRoots.for_local(settings).confine(snapshot)
    except SnapshotOutsideRoots as exc:
        raise typer.BadParameter(str(exc), param_hint="--snapshot") from None


def require_one_target(snapshot: Path | None, context: str | None) -> None:
    if (snapshot is None) == (context is None):
        raise typer.BadParameter(
            "give exactly one target: --snapshot PATH (a folder of YAML) or --context NAME"
        )


def validation_detail(exc: ValidationError) -> str:
    """A pydantic error's messages on one line, for a usage error."""
    return "; ".join(
        str(error["msg"]).removeprefix("Value error, ")  # pydantic's prefix for our own checks
        for error in exc.errors()
    )
