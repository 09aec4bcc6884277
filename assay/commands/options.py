"""The flags every evaluating command shares, and turning them into settings or a budget.

`assay check`/`query` run the engine here and feed the model, budget and
profile flags into the settings; `assay submit`/`batch` send them with the
request instead. Both read the same options, checked the same way, from this
module. Only typer is imported at module level so ``assay --help`` stays fast.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/assay/test_cli_check.py keeps the engine out).
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from assay.terminal_text import print_line
from schemas.numbers import NotANumber, amount, whole_number

if TYPE_CHECKING:
    from pydantic import ValidationError

    from schemas.budget import Budget
    from schemas.settings import AssaySettings
    from schemas.spend import SpendCeiling

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


class StrictNumber:
    """A limit flag's reader (typer's ``parser``): the number as JSON writes one
    (``schemas.numbers``: ``5_000``, ``+5000``, ``5,000`` and other scripts' digits are
    refused), held to its bounds with a message that names the bound it broke.

    ``above``: the value must be more than ``minimum`` (a cost: 0 is no limit at all, and a
    request's 0 used to be dropped as "no limit", the opposite of what was asked)."""

    def __init__(
        self,
        parse: Callable[[str], float],
        minimum: float,
        *,
        above: bool = False,
        maximum: float | None = None,
    ) -> None:
        self.parse, self.minimum, self.above, self.maximum = parse, minimum, above, maximum

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, str):  # a default, already a number
            return value
        try:
            number = self.parse(value)
        except NotANumber as exc:
            raise _refusal(str(exc)) from None
        low, high = self.minimum, self.maximum
        if number <= low if self.above else number < low:
            bound = "more than" if self.above else "at least"
            raise _refusal(f"must be {bound} {low:,g}; got {value}")
        if high is not None and number > high:
            raise _refusal(f"must be at most {high:,g}; got {value}")
        return number

    def rule(self) -> str:
        """The bounds, for a flag's help."""
        return f"{'more than' if self.above else 'at least'} {self.minimum:,g}"


def _refusal(message: str) -> Exception:
    """What typer's ``parser`` raises for the user to read as written (a ``ValueError``
    would be shown after pydantic's "Value error, ")."""
    from pydantic_core import PydanticCustomError

    return PydanticCustomError("number", message)


def _budget_flag(name: str, what: str, variable: str, number: StrictNumber) -> tuple[Any, Any]:
    """The option of one budget limit, as the local run reads it (check, query, eval) and as
    a fleet run does (submit, batch, schedule add: unset, the workers' own setting fills
    it in)."""
    rule = f", {number.rule()}"
    local = typer.Option(name, help=f"{what}{rule} (env {variable}).", parser=number)
    fleet = typer.Option(
        name,
        help=f"{what} per run{rule} (default: the workers' {variable}, else the profile's).",
        parser=number,
    )
    return local, fleet


_ITERATIONS = _budget_flag(
    "--max-iterations", "Model steps allowed", "ASSAY_MAX_ITERATIONS", StrictNumber(whole_number, 1)
)
_TOKENS = _budget_flag(
    "--max-tokens", "Total tokens allowed", "ASSAY_MAX_TOKENS", StrictNumber(whole_number, 100)
)
_TIMEOUT = _budget_flag(
    "--timeout", "Seconds allowed", "ASSAY_TIMEOUT_SECONDS", StrictNumber(amount, 0.1)
)
_COST = _budget_flag(
    "--max-cost", "USD allowed", "ASSAY_MAX_COST_USD", StrictNumber(amount, 0, above=True)
)
MaxIterationsOpt = Annotated[int | None, _ITERATIONS[0]]
MaxTokensOpt = Annotated[int | None, _TOKENS[0]]
TimeoutOpt = Annotated[float | None, _TIMEOUT[0]]
MaxCostOpt = Annotated[float | None, _COST[0]]
FleetMaxIterationsOpt = Annotated[int | None, _ITERATIONS[1]]
FleetMaxTokensOpt = Annotated[int | None, _TOKENS[1]]
FleetTimeoutOpt = Annotated[float | None, _TIMEOUT[1]]
FleetMaxCostOpt = Annotated[float | None, _COST[1]]
ProfileOpt = Annotated[
    str | None,
    typer.Option("--profile", help="smoke, fast or strict (env ASSAY_PROFILE)."),
]
UNATTENDED_PROFILE_HELP = (
    "smoke, fast or strict (default strict, or ASSAY_PROFILE when set: unattended runs "
    "feed alerts and gates)."
)
UnattendedProfileOpt = Annotated[
    str | None, typer.Option("--profile", help=UNATTENDED_PROFILE_HELP)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the verdict as JSON on stdout.")]
FORMATS = ("text", "json", "junit")
FormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        help="text, json (as --json) or junit (JUnit XML for CI: one test case per check and "
        "target; false is a failure, cannot_determine and poorly_posed are errors).",
    ),
]


def output_format(value: str, json_output: bool) -> str:
    """The output a command prints: ``--json`` is ``--format json``; anything else is 64."""
    if value not in FORMATS:
        raise typer.BadParameter(
            f"must be one of {', '.join(FORMATS)}, not {value!r}", param_hint="--format"
        )
    return "json" if json_output else value


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


def id_checker(what: str, *, lookup: bool = False) -> Callable[[str | None], str | None]:
    """A typer callback refusing an id outside the alphabet of ``schemas.ids`` (exit 64).

    ``lookup`` (an id a command looks up, never one it creates): an ellipsis copied along
    with a table's cut id is dropped (``assay.id_prefixes``)."""

    def check(value: str | None) -> str | None:
        from schemas.ids import InvalidId, check_id

        if value is None:
            return None
        if lookup:
            from assay.id_prefixes import pasted

            value = pasted(value)
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


class SetupProblem(Exception):
    """A usage error (64) in the environment, not on the command line: the settings, a
    missing key. ``assay.cli.main`` prints it as one sentence after ``assay: error:``,
    with no pointer to a command's ``--help``, which says nothing of ``ASSAY_*``."""


def settings_or_usage(**flags: Any) -> AssaySettings:
    """The settings with ``flags`` on top; an invalid configuration is a usage error (64)."""
    from schemas.settings import load_settings, settings_problem, unknown_settings

    try:
        settings = load_settings(**flags)
    except ValueError as exc:  # pydantic's ValidationError is one too
        raise SetupProblem(f"the configuration is invalid: {settings_problem(exc)}") from None
    for problem in unknown_settings():
        print_line(f"assay: warning: {problem}", sys.stderr)
    return settings


def check_text(text: str, argument: str = "PREDICATE") -> None:
    """Refuse an empty or over-long predicate (or question) before anything runs, prints a
    banner or is queued: one sentence in our words, not pydantic's."""
    from schemas.request import MAX_TEXT_LENGTH

    what = argument.lower()
    if not text.strip():
        raise typer.BadParameter(f"the {what} text is empty: say what to evaluate")
    if len(text) > MAX_TEXT_LENGTH:
        raise typer.BadParameter(
            f"the {what} is {len(text):,} characters long and at most {MAX_TEXT_LENGTH:,} are "
            "taken: shorten it"
        )


def check_profile(profile: str | None) -> None:
    from schemas.budget import PROFILES

    if profile is not None and profile not in PROFILES:
        raise typer.BadParameter(
            f"unknown profile {profile!r}: use one of {', '.join(PROFILES)}", param_hint="--profile"
        )


def confined_snapshot(snapshot: Path, settings: AssaySettings) -> Path:
    """The snapshot folder resolved inside the CLI's snapshot roots, else a usage error (64)."""
    from workers.engine.snapshot_roots import SnapshotOutsideRoots, SnapshotRoots

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


def spend_ceiling(
    tokens: str | None, cost: str | None, *, tokens_flag: str, cost_flag: str
) -> SpendCeiling | None:
    """A spend ceiling (schemas/spend.py) from its two flags; None when neither is given.

    A value that is not a number as JSON writes one (``schemas.numbers``: not ``5,000``,
    ``5_000``, ``$5``), negative, zero, fractional tokens, or out of bounds (under 1,000 or
    over a trillion tokens, under $0.000001 or over ten million dollars) is a usage error
    (64) naming the flag and the bound.
    """
    from pydantic import ValidationError

    from schemas.spend import SpendCeiling

    if tokens is None and cost is None:
        return None
    fields: dict[str, Any] = {}
    try:
        if tokens is not None:
            fields["tokens"] = whole_number(tokens)
    except NotANumber as exc:
        raise typer.BadParameter(f"{tokens_flag} {exc}") from None
    try:
        if cost is not None:
            fields["cost_usd"] = amount(cost)
    except NotANumber as exc:
        raise typer.BadParameter(f"{cost_flag} {exc}") from None
    try:
        return SpendCeiling.model_validate(fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str((error.get("loc") or ("",))[0])
        flag = {"tokens": tokens_flag, "cost_usd": cost_flag}.get(
            field, f"{tokens_flag}/{cost_flag}"
        )
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        raise typer.BadParameter(f"{flag}: {message}") from None
