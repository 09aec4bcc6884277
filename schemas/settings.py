"""The one configuration model: ``ASSAY_*`` env vars, an optional file, CLI flags on top.

Every process (CLI, worker, scheduler, API) builds its settings through
:func:`load_settings`, so they all read the same configuration the same way.
Precedence, highest first: explicit overrides (CLI flags), ``ASSAY_*``
environment variables, the config file named by ``ASSAY_CONFIG`` (YAML or
TOML), then the defaults below.

Nested values can be given piece by piece with ``__`` between the parts:
``ASSAY_NOTIFY_SINKS__OPS__HMAC_KEY`` sets the ``hmac_key`` of sink ``ops``
and is merged into what ``ASSAY_NOTIFY_SINKS`` or the config file says about
it, so secrets can come from their own variables (a Kubernetes Secret).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from schemas.budget import UNATTENDED_PROFILE, ProfileName
from schemas.cpu_list import normalized as normalized_affinity
from schemas.notify import Sink, SinkName
from schemas.spend import (
    MAX_CEILING_COST_USD,
    MAX_CEILING_TOKENS,
    MIN_CEILING_COST_USD,
    MIN_CEILING_TOKENS,
)


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "assay"


ReportCodec = Literal["dictionary", "zlib", "off"]
"""How full run reports are stored (workers/fleet/report_codec.py)."""
# what earlier versions' boolean report_compression meant, as the environment spells it
_COMPRESSION_FLAGS = {"true": "dictionary", "1": "dictionary", "yes": "dictionary",
                      "on": "dictionary", "false": "off", "0": "off", "no": "off"}  # fmt: skip


class AssaySettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ASSAY_", extra="ignore", validate_default=True, env_nested_delimiter="__"
    )

    # --- the model -----------------------------------------------------------------
    model: str | None = Field(
        default=None, description="litellm model name, e.g. openai/gpt-4o-mini. Required."
    )
    api_base: str | None = Field(default=None, description="OpenAI-compatible endpoint URL.")
    api_key: SecretStr | None = Field(default=None, description="Model API key.")
    transport: Literal["auto", "tools", "json"] = Field(
        default="auto",
        description="auto = native tool calling unless litellm knows the model lacks it.",
    )
    llm_call_timeout_seconds: float = Field(default=120.0, gt=0)
    llm_max_retries: int = Field(default=6, ge=0, le=50)
    llm_fast_path: bool = Field(
        default=True,
        description="Call OpenAI-compatible endpoints (api_base set, a model litellm has no "
        "data on) with one direct POST instead of through litellm: same body, same retries "
        "and errors, a quarter of the CPU. See docs/fleet.md.",
    )

    # --- budgets and profile (request values win; these fill the gaps) --------------
    profile: ProfileName = Field(
        default="fast",
        description="The profile of check, query and submit when no --profile is given; "
        "batches and schedules that name none run strict unless this is set "
        "(unattended_profile).",
    )
    max_iterations: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=100)
    timeout_seconds: float | None = Field(default=None, gt=0)
    max_cost_usd: float | None = Field(default=None, gt=0)
    wait_inline_cap_seconds: float = Field(
        default=30.0, ge=0, description="WAITs up to this long sleep in place; longer ones defer."
    )

    # --- tools -----------------------------------------------------------------------
    kubeconfig: str | None = Field(default=None, description="kubeconfig path for --context.")
    tool_output_limit_chars: int = Field(default=6000, ge=500)
    discovery_ttl_seconds: float = Field(default=300.0, ge=0)
    kube_qps: float = Field(default=20.0, gt=0, description="Client-side API QPS per target.")
    kube_request_timeout_seconds: float = Field(
        default=15.0, gt=0, description="Timeout of one API server request (connect and read)."
    )
    kube_retry_deadline_seconds: float = Field(
        default=30.0, gt=0, description="How long one lookup keeps retrying transient API errors."
    )
    kube_page_size: int = Field(
        default=500, ge=1, le=5000, description="Objects per page when listing (limit)."
    )
    shell_config: Path | None = Field(
        default=None, description="YAML file enabling the shell toolset (off when unset)."
    )
    snapshot_roots: Annotated[list[Path] | None, NoDecode] = Field(
        default=None,
        description="Folders snapshot targets must lie in (symlinks resolved); a JSON list or "
        "':'-separated paths. Unset: none over HTTP (the API refuses snapshot targets), the "
        "working directory for the CLI, client, workers and scheduler. See docs/fleet.md.",
    )

    # --- fleet -------------------------------------------------------------------------
    redis_url: str | None = Field(
        default=None, description="None = embedded local mode (private redis-server)."
    )
    broker_url: str | None = Field(default=None, description="Celery broker; None = redis_url.")
    broker_sentinel_master: str | None = Field(
        default=None,
        description="Redis Sentinel broker (broker_url sentinel://host:port;sentinel://...): "
        "the name of the master its sentinels monitor. Required with such a broker.",
    )
    broker_sentinel_password: SecretStr | None = Field(
        default=None,
        description="Redis Sentinel broker: the password of the sentinels themselves (their "
        "requirepass), not the master's (that one goes in broker_url). Unset: the sentinels "
        "are asked without a password.",
    )
    broker_sentinel_username: str | None = Field(
        default=None,
        description="Redis Sentinel broker: the ACL user the sentinels know the password "
        "under (broker_sentinel_password); unset = the default user.",
    )
    redis_outage_log_seconds: float = Field(
        default=10.0,
        gt=0,
        description="While the fleet's Redis does not answer, the workers and the scheduler "
        "log so at once, then every this many seconds, and once when it answers again.",
    )
    key_prefix: str = Field(
        default="assay",
        pattern=r"^(?:[A-Za-z0-9_.-]+|\{[A-Za-z0-9_.-]+\})$",
        description="What every Redis key of this deployment starts with (and its queue's "
        "name); in braces (`{assay}`), a Redis Cluster hash tag: every key in one slot.",
    )
    history_limit: int = Field(default=500, ge=1, description="Verdicts kept per check.")
    # --- probes (docs/probes.md) ---------------------------------------------------------
    kyverno_policy_exceptions: bool = Field(
        default=True,
        description="Apply the Kyverno PolicyExceptions imported with a policy, as a Kyverno "
        "with features.policyExceptions.enabled does (its chart's default is off); when off, "
        "each is reported among the import's refusals.",
    )
    kyverno_policy_exceptions_namespace: str = Field(
        default="*",
        pattern=r"^(\*|[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$",
        description="Apply only the PolicyExceptions in this namespace ('*': any), as "
        "Kyverno's features.policyExceptions.namespace.",
    )
    probe_revalidate_runs: int = Field(
        default=96,
        ge=1,
        description="Re-validate an accepted probe with the model after this many probe runs.",
    )
    probe_revalidate_seconds: float = Field(
        default=24 * 3600.0,
        gt=0,
        description="Re-validate an accepted probe with the model once this long has passed "
        "since it last agreed with the model.",
    )
    probe_history_limit: int = Field(
        default=200, ge=1, description="Agreement entries kept per probe."
    )
    probe_compile_wait_seconds: float = Field(
        default=60.0,
        ge=0,
        description="Single-flight probe compilation: while one run of a check (or of a "
        "batch) asks the model with no probe yet, the others wait up to this long for the "
        "probe it compiles before asking the model themselves; also the longest a live "
        "holder keeps the claim. A killed holder stops renewing the claim's short lease, so "
        "its waiters go on within seconds (docs/probes.md). 0 turns the waiting off.",
    )
    run_ttl_seconds: int = Field(
        default=30 * 24 * 3600,
        ge=60,
        description="How long the full report of a run that changed its check's verdict is "
        "kept (and a batch's tally and rows while it runs, or once one of its runs changed a "
        "verdict). A check's latest verdict and its history (history_limit entries) are kept "
        "regardless (docs/fleet.md, Retention and sizing).",
    )
    report_ttl_seconds: int = Field(
        default=3 * 24 * 3600,
        ge=60,
        description="How long the full report of any other run is kept (a model run that kept "
        "the verdict, a probe or policy re-run that found something the latest report did "
        "not say), and a finished batch none of whose runs changed a verdict; at most "
        "run_ttl_seconds. A probe or policy re-run that found exactly the same stores no "
        "report of its own: it repeats the latest one, which is kept at least this long after "
        "its last repeat.",
    )
    report_compression: ReportCodec = Field(
        default="dictionary",
        description="How full run reports are stored: 'dictionary' (zlib with a preset "
        "dictionary of the report's schema, about 40% smaller; assay before it cannot read "
        "it), 'zlib' (plain zlib), 'off' (plain JSON). Every form reads back whatever the "
        "setting (docs/fleet.md, Retention and sizing). true/false mean dictionary/off.",
    )
    worker_concurrency: int = Field(default=64, ge=1)
    worker_processes: int = Field(
        default=1,
        ge=1,
        description="Worker processes `assay worker` runs, each with worker_concurrency runs.",
    )
    worker_pool: Literal["threads", "prefork", "solo", "gevent", "eventlet"] = "threads"
    worker_cpu_affinity: str = Field(
        default="off",
        description="off (default: the kernel places the threads), or hold each threads-pool "
        "worker process to one CPU so its threads hand the GIL over on one core: adaptive "
        "(the CPU others use least, left when others crowd it), auto (process i of `assay "
        "worker --processes N` on the i-th CPU it may use, for good: only where those CPUs are "
        "the fleet's own), or a list like 0-3,8. When a hold helps: docs/fleet.md, CPU affinity.",
    )
    max_deliveries: int = Field(default=3, ge=1, description="Redelivery cap per run.")
    batch_fanout_lease_seconds: float = Field(
        default=120.0,
        gt=0,
        description="A batch's fan-out holds a lease on it, renewed every fifth of this while "
        "targets are submitted; a batch whose submitter stopped (killed) without sealing it is "
        "closed as incomplete once the lease has lapsed, and finishes with the runs it has.",
    )
    broker_visibility_timeout_seconds: float = Field(
        default=7200.0,
        ge=2,
        description="Redis broker: an unacknowledged task is redelivered after this long "
        "(how soon a killed worker's runs restart); keep it above the longest run deadline.",
    )
    task_events: bool = Field(
        default=False,
        description="Celery task events (sent, started, succeeded: Redis publishes on every "
        "evaluation). Turn on for Flower or a Celery exporter; off, nothing listens.",
    )
    llm_rpm: int | None = Field(
        default=None, ge=1, description="Fleet-wide requests/min per model."
    )
    llm_tpm: int | None = Field(default=None, ge=1, description="Fleet-wide tokens/min per model.")

    # --- spend guard: ceilings over many runs (docs/fleet.md, "Spend guard") -------------
    spend_fleet_tokens_per_hour: int | None = Field(
        default=None,
        ge=MIN_CEILING_TOKENS,
        le=MAX_CEILING_TOKENS,
        description="Most tokens the whole fleet may spend per UTC hour; unset = no ceiling.",
    )
    spend_fleet_cost_usd_per_day: float | None = Field(
        default=None,
        ge=MIN_CEILING_COST_USD,
        le=MAX_CEILING_COST_USD,
        allow_inf_nan=False,
        description="Most US dollars the whole fleet may spend per UTC day (models with a "
        "known price); unset = no ceiling.",
    )
    spend_schedule_tokens_per_day: int | None = Field(
        default=None,
        ge=MIN_CEILING_TOKENS,
        le=MAX_CEILING_TOKENS,
        description="Token ceiling per UTC day of a schedule that sets none of its own.",
    )
    spend_schedule_cost_usd_per_day: float | None = Field(
        default=None,
        ge=MIN_CEILING_COST_USD,
        le=MAX_CEILING_COST_USD,
        allow_inf_nan=False,
        description="Cost ceiling (USD) per UTC day of a schedule that sets none of its own.",
    )
    spend_batch_tokens: int | None = Field(
        default=None,
        ge=MIN_CEILING_TOKENS,
        le=MAX_CEILING_TOKENS,
        description="Token ceiling over all runs of a batch that sets none of its own.",
    )
    spend_batch_cost_usd: float | None = Field(
        default=None,
        ge=MIN_CEILING_COST_USD,
        le=MAX_CEILING_COST_USD,
        allow_inf_nan=False,
        description="Cost ceiling (USD) over all runs of a batch that sets none of its own.",
    )
    spend_lease_margin_seconds: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description="A model call's reservation lives until its run's deadline plus this; a "
        "reservation whose worker died is charged in full once it has passed.",
    )
    spend_history_days: int = Field(
        default=35, ge=1, le=400, description="Days of spend kept for `assay spend`."
    )

    # --- scheduler -----------------------------------------------------------------------
    scheduler_tick_seconds: float = Field(default=0.2, gt=0)
    scheduler_lease_seconds: float = Field(default=30.0, gt=0)
    min_interval_seconds: float = Field(default=60.0, gt=0)
    scheduler_misfire_grace_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A schedule fire claimed later than this after its instant counts as "
        "missed, and the schedule's misfire policy (skip or run_once) applies.",
    )

    # --- API -------------------------------------------------------------------------------
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=1, le=65535)
    api_tokens: dict[str, Literal["read", "write"]] = Field(
        default_factory=dict, description="Bearer token -> scope."
    )
    api_tokens_file: Path | None = None
    api_allow_anonymous_read: bool = False
    api_max_body_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Request bodies larger than this get 413."
    )
    api_max_documents_body_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="The same for the routes that take documents (POST /v1/apply, "
        "/v1/policies, /v1/policy-translations: a folder of checks, a policy library), for a "
        "caller with a write token; others keep api_max_body_bytes there too.",
    )
    api_max_batch_targets: int = Field(
        default=1000, ge=1, description="Most targets one batch submitted over HTTP may name."
    )

    # --- alerting (`assay notify`; docs/alerting.md) -------------------------------------
    notify_sinks: dict[SinkName, Sink] = Field(
        default_factory=dict,
        description="Where verdict changes go, by sink name (webhook, slack, alertmanager).",
    )
    notify_run_link_base: str | None = Field(
        default=None,
        pattern=r"^https?://",
        description="Base URL of run links in notifications: BASE/v1/runs/RUN_ID.",
    )
    notify_max_attempts: int = Field(
        default=8,
        ge=1,
        le=100,
        description="Delivery attempts per change and sink before it is dead-lettered.",
    )
    notify_retry_max_seconds: float = Field(
        default=60.0, gt=0, description="Longest pause between two delivery attempts."
    )
    notify_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Timeout of one delivery (connect and read)."
    )
    notify_claim_idle_seconds: float = Field(
        default=60.0,
        ge=1,
        description="A change held this long by a notifier that stopped answering is taken over "
        "by another; keep it above notify_timeout_seconds.",
    )
    notify_batch_size: int = Field(
        default=50, ge=1, le=1000, description="Changes one notifier holds per sink at once."
    )
    metrics_max_checks: int = Field(
        default=10_000,
        ge=0,
        description="Checks exported as assay_check_* gauges (the most recently run ones).",
    )

    # --- process ---------------------------------------------------------------------------
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: str = "INFO"
    data_dir: Path = Field(default_factory=_default_data_dir)
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Prometheus /metrics port for worker and scheduler processes; None = off.",
    )
    otel_exporter: Literal["none", "console", "otlp"] = Field(
        default="none", description="OpenTelemetry span exporter (needs the `otel` extra)."
    )
    otel_endpoint: str | None = Field(
        default=None, description="OTLP/HTTP endpoint; None = the exporter's default."
    )

    @field_validator("api_base")
    @classmethod
    def _http_address(cls, value: str | None) -> str | None:
        """An endpoint that is no http(s) address is refused when the settings load (64 on
        the CLI, a worker that does not start), not discovered by every run as 3."""
        if value is not None and not value.strip():
            return None  # ASSAY_API_BASE= (a blank placeholder) means none, as before
        if value is not None and not re.match(r"^https?://[^\s/]+", value.strip()):
            raise ValueError(
                "not an http(s) address; write the endpoint in full, "
                "e.g. http://localhost:11434/v1 (--api-base or ASSAY_API_BASE)"
            )
        return value

    @field_validator("report_compression", mode="before")
    @classmethod
    def _compression_flag(cls, value: Any) -> Any:
        """Earlier versions took a boolean; it still means the default codec, or none."""
        if isinstance(value, bool):
            return "dictionary" if value else "off"
        if isinstance(value, str):
            name = value.strip().lower()
            return _COMPRESSION_FLAGS.get(name, name)
        return value

    @field_validator("snapshot_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: Any) -> Any:
        """``ASSAY_SNAPSHOT_ROOTS`` as a JSON list or as ``/a:/b`` (like PATH)."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part for part in text.split(os.pathsep) if part.strip()]

    @field_validator("worker_cpu_affinity")
    @classmethod
    def _cpu_list(cls, value: str) -> str:
        return normalized_affinity(value)

    def unattended_profile(self) -> ProfileName:
        """The profile of a batch or a schedule that names none: ``ASSAY_PROFILE`` when it
        is set, else ``strict`` (``schemas.budget.UNATTENDED_PROFILE`` says why). A one-off
        check or submit keeps ``profile``'s own default, ``fast``."""
        return self.profile if "profile" in self.model_fields_set else UNATTENDED_PROFILE

    @model_validator(mode="after")
    def _sentinel_needs_master(self) -> AssaySettings:
        """A Sentinel broker is unusable without the master's name: say so at start-up,
        not as kombu's ValueError on the first message sent."""
        url = self.broker_url or self.redis_url or ""
        if url.startswith("sentinel://") and not self.broker_sentinel_master:
            raise ValueError(
                "a Redis Sentinel broker (sentinel://) needs the name of the master its "
                "sentinels monitor: set ASSAY_BROKER_SENTINEL_MASTER"
            )
        if self.broker_sentinel_username and self.broker_sentinel_password is None:
            raise ValueError(
                "ASSAY_BROKER_SENTINEL_USERNAME is set without its password: set "
                "ASSAY_BROKER_SENTINEL_PASSWORD too"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("ASSAY_CONFIG")
        if config_file:
            sources.append(_config_file_source(settings_cls, Path(config_file)))
        return tuple(sources)


def _config_file_source(settings_cls: type[BaseSettings], path: Path) -> PydanticBaseSettingsSource:
    """The ``ASSAY_CONFIG`` file as a settings source; a file that cannot be used is a
    ``ValueError`` naming it, so every front door reports one sentence (not a parser's
    traceback, whose exit code 1 a CI job would read as a ``false`` verdict)."""
    import tomllib

    import yaml

    if not path.is_file():
        raise ValueError(f"ASSAY_CONFIG names {path}, which is not a file")
    toml = path.suffix == ".toml"
    try:
        if toml:
            return TomlConfigSettingsSource(settings_cls, toml_file=path)
        return YamlConfigSettingsSource(settings_cls, yaml_file=path)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"ASSAY_CONFIG file {path} is not valid TOML ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"ASSAY_CONFIG file {path} is not valid YAML ({where}{problem})") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ValueError(f"ASSAY_CONFIG file {path} cannot be read ({reason})") from None
    except (ValueError, TypeError, AttributeError):  # a list or a scalar at the top
        raise ValueError(
            f"ASSAY_CONFIG file {path} must hold settings as key: value pairs at its top "
            "level (see schemas/settings.py for the keys)"
        ) from None


# Values of these settings are never repeated in an error message: keys, tokens, URLs
# that may carry a password, sinks with their HMAC keys.
_SECRET_FIELD = re.compile(r"^(api_key|api_tokens|notify_sinks)$|_url$|secret|password")


def settings_problem(exc: Exception) -> str:
    """What is wrong with the configuration, in one line that names what to fix.

    A ``ValidationError`` names the ``ASSAY_*`` variable when the value came from the
    environment (else the setting's key, as in the config file), the reason, and the value
    unless it could be a secret; anything else (an unreadable ``ASSAY_CONFIG``) is its
    message on one line.
    """
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return " ".join(str(exc).split())
    parts: list[str] = []
    for error in exc.errors():
        loc = [str(part) for part in error.get("loc") or ()]
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if not loc:
            parts.append(message)
            continue
        where = _where(loc)
        value = error.get("input")
        shown = ""
        if (
            isinstance(value, str | int | float)
            and not _SECRET_FIELD.search(loc[0])
            and len(repr(value)) <= 60
        ):
            shown = f" (got {value!r})"
        parts.append(f"{where}{shown}: {message}")
    return "; ".join(parts)


def _where(loc: list[str]) -> str:
    """The ``ASSAY_*`` variable a value came from, else its key (``notify_sinks.ops.url``).

    Variable names are compared case-insensitively, as the settings read them.
    """
    names = {name.upper() for name in os.environ}
    parts = [part for part in loc if part != "[key]"]  # pydantic's marker for a dict key
    dotted = ".".join(parts)
    exact = "ASSAY_" + "__".join(parts).upper()
    top = f"ASSAY_{parts[0].upper()}"
    if exact in names:
        return exact
    if top in names:
        return f"{dotted} (in {top})"
    return dotted


# ASSAY_* variables that are not settings but are read elsewhere: the config file's path,
# and what deploy/compose.yaml substitutes on the host.
NOT_SETTINGS = frozenset(
    {"ASSAY_CONFIG", "ASSAY_IMAGE", "ASSAY_UID", "ASSAY_GID", "ASSAY_KUBE_DIR"}
)


def unknown_settings() -> list[str]:
    """One sentence per ``ASSAY_*`` variable or ``ASSAY_CONFIG`` key that names no setting.

    The settings ignore unknown names (one stale key must not stop a worker), so a typo
    (``ASSAY_MAX_TOKEN``, ``modle:``) would change nothing and say nothing; the front
    doors print these as warnings. Call it after the settings loaded (the file parses).
    """
    import difflib

    fields = list(AssaySettings.model_fields)
    variables = [f"ASSAY_{name.upper()}" for name in fields]
    found: list[str] = []
    for name in sorted(os.environ):
        if not name.startswith("ASSAY_") or name in NOT_SETTINGS:
            continue
        if name.split("__")[0] in variables:
            continue
        # Compared without the shared ASSAY_ prefix, which would make any name look close.
        stem = name.split("__")[0].removeprefix("ASSAY_")
        close = difflib.get_close_matches(stem, [v.removeprefix("ASSAY_") for v in variables], n=1)
        hint = f" (did you mean ASSAY_{close[0]}?)" if close else ""
        found.append(f"{name} is not an assay setting and is ignored{hint}")
    config_file = os.environ.get("ASSAY_CONFIG")
    for key in _config_keys(Path(config_file)) if config_file else []:
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            found.append(f"{key!r} in {config_file} is not an assay setting and is ignored{hint}")
    return found


def _config_keys(path: Path) -> list[str]:
    """The top-level keys of the config file (empty when it cannot be read)."""
    import tomllib

    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):
        return []
    return [str(key) for key in data] if isinstance(data, dict) else []


def load_settings(**overrides: Any) -> AssaySettings:
    """Settings with ``overrides`` (CLI flags) on top; ``None`` overrides are ignored."""
    return AssaySettings(**{k: v for k, v in overrides.items() if v is not None})


def environment_has(name: str) -> bool:
    """Whether variable ``name`` is set and not empty. For the provider keys litellm reads by
    itself (``OPENAI_API_KEY``, ...), which are no assay setting: this module is the one
    that reads the environment (``workers.engine.provider_keys``)."""
    return bool(os.environ.get(name, "").strip())
