"""Alerting: where verdict changes go (sinks and their filters) and what they are sent.

A sink is configured under ``notify_sinks`` in the one settings model, keyed by
its name (``ASSAY_NOTIFY_SINKS`` as JSON, or the config file). Secret parts (a
webhook's HMAC key, a Slack URL, which carries its own token) are ``SecretStr``
so they never print, and can come from their own variables, e.g.
``ASSAY_NOTIFY_SINKS__OPS__HMAC_KEY`` from a Kubernetes Secret, merged into the
sink the config file describes.

Secrets are optional when the settings are read, because every process reads
the same settings and only the notifier holds the sinks' secrets;
:func:`missing_secrets` says which are absent, and `assay notify` refuses to
start without them.

The filters are the same for every kind of sink; what a sink does with a change
differs: a webhook and Slack are told about changes, Alertmanager is kept in
sync with the check's current state (see docs/alerting.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints, field_validator

from schemas.report_scope import DEFAULT_EXCLUDED_NAMESPACES
from schemas.verdict import VerdictKind

# Sink names end up in Redis keys and in environment variable names
# (ASSAY_NOTIFY_SINKS__<NAME>__HMAC_KEY), so they stay in an alphabet both accept.
SinkName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,39}$")]

EVENT_TYPE = "assay.verdict.changed"
SIGNATURE_HEADER = "X-Assay-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_MIN_DURATION_SECONDS = 7 * 24 * 3600


class SinkFilter(BaseModel):
    """Which changes a sink hears about; an empty list means "any"."""

    model_config = ConfigDict(extra="forbid")

    checks: list[str] = Field(
        default_factory=list, description="Check ids or shell-style globs (prod-*)."
    )
    targets: list[str] = Field(
        default_factory=list, description="Target names or globs (snapshot:prod-*, prod-eu)."
    )
    from_verdicts: list[VerdictKind] = Field(
        default_factory=list, description="Deliver only changes away from these verdicts."
    )
    to_verdicts: list[VerdictKind] = Field(
        default_factory=list, description="Deliver only changes to these verdicts."
    )
    cannot_determine: bool = Field(
        default=True,
        description="Webhook / Slack: off ignores changes to cannot_determine and judges the "
        "next verdict against the one before it. Alertmanager: on fires while "
        "cannot_determine, like false.",
    )
    min_duration_seconds: float = Field(
        default=0.0,
        ge=0,
        le=MAX_MIN_DURATION_SECONDS,
        description="Deliver a change only if the check is still in its new state this long "
        "after it (damps flapping; 0 = at once).",
    )
    spend: bool = Field(
        default=True,
        description="Also deliver spend-ceiling events: a schedule's, a batch's or the "
        "fleet's ceiling at 80% and at 100%, once each per period (docs/alerting.md). The "
        "check, target and verdict filters do not apply to them.",
    )

    @field_validator("from_verdicts", "to_verdicts", mode="before")
    @classmethod
    def _booleans_name_verdicts(cls, value: Any) -> Any:
        """YAML reads ``[true, false]`` as booleans; here they name verdicts."""
        if isinstance(value, list):
            return [str(v).lower() if isinstance(v, bool) else v for v in value]
        return value


class WebhookSink(SinkFilter):
    """Any HTTP endpoint: CloudEvents 1.0 JSON, signed with HMAC-SHA256 over the body."""

    type: Literal["webhook"]
    url: str = Field(pattern=r"^https?://", description="Where events are POSTed.")
    hmac_key: SecretStr | None = Field(
        default=None,
        description="Key of the X-Assay-Signature header (sha256=HEX of the body). Required "
        "by the notifier; give it as ASSAY_NOTIFY_SINKS__<NAME>__HMAC_KEY.",
    )
    source: str = Field(default="/assay", description="The CloudEvents `source` attribute.")


class SlackSink(SinkFilter):
    """A Slack incoming webhook: one readable message per change."""

    type: Literal["slack"]
    url: SecretStr | None = Field(
        default=None,
        description="The incoming-webhook URL (it is the credential). Required by the "
        "notifier; give it as ASSAY_NOTIFY_SINKS__<NAME>__URL.",
    )


class AlertmanagerSink(SinkFilter):
    """Alertmanager API v2: one alert per check, firing while false, resolved when true."""

    type: Literal["alertmanager"]
    url: str = Field(
        pattern=r"^https?://", description="Alertmanager's base URL, e.g. http://alertmanager:9093."
    )
    cannot_determine: bool = Field(
        default=False, description="Also fire while the check is cannot_determine."
    )
    alertname: str = Field(default="AssayCheckFailed", min_length=1)
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra labels on every alert (severity, team...)."
    )
    resend_seconds: float = Field(
        default=60.0,
        ge=1,
        le=3600,
        description="Firing alerts are re-posted this often, each ending 4 intervals ahead, "
        "so Alertmanager never times them out while the check stays false.",
    )


class PolicyReportSink(SinkFilter):
    """PolicyReports kept up to date in each target cluster (docs/alerting.md).

    Writes with its own credentials, never the workers': ``kubeconfig`` names a file
    whose contexts are named like the targets (or mapped by ``contexts``), bound in each
    cluster to a role that may write the report kinds only; without one, the target
    ``in-cluster`` is written with the notifier pod's own service account. Targets it
    has no cluster for (snapshots, unless mapped) are left out.
    """

    type: Literal["policyreport"]
    api: Literal["wgpolicyk8s", "openreports"] = Field(
        default="wgpolicyk8s",
        description="wgpolicyk8s: wgpolicyk8s.io/v1alpha2 PolicyReport / ClusterPolicyReport; "
        "openreports: openreports.io/v1alpha1 Report / ClusterReport.",
    )
    kubeconfig: str | None = Field(
        default=None,
        description="The report writer's own kubeconfig (not ASSAY_KUBECONFIG, the readers').",
    )
    contexts: dict[str, str] = Field(
        default_factory=dict,
        description="Target name -> context of that kubeconfig, where they differ.",
    )
    resync_seconds: float = Field(
        default=300.0,
        ge=10,
        le=24 * 3600,
        description="Every report is rewritten from the latest verdicts this often (first "
        "verdicts are not changes; a changed verdict is written at once).",
    )
    excluded_namespaces: list[str] = Field(
        default_factory=lambda: list(DEFAULT_EXCLUDED_NAMESPACES),
        max_length=100,
        description="An imported policy's results about objects in these namespaces "
        "(patterns, * wildcards) are left out; by default what Kyverno's default resource "
        "filters skip. [] keeps all.",
    )


Sink = Annotated[
    WebhookSink | SlackSink | AlertmanagerSink | PolicyReportSink, Field(discriminator="type")
]
AnySink = WebhookSink | SlackSink | AlertmanagerSink | PolicyReportSink


def missing_secrets(name: str, sink: AnySink) -> list[str]:
    """The variables that would supply this sink's absent secrets (empty: nothing missing)."""
    field = None
    if isinstance(sink, WebhookSink) and sink.hmac_key is None:
        field = "hmac_key"
    elif isinstance(sink, SlackSink) and sink.url is None:
        field = "url"
    return [f"ASSAY_NOTIFY_SINKS__{name.upper()}__{field.upper()}"] if field else []


class ChangeEventData(BaseModel):
    """The ``data`` of a webhook's CloudEvent (and what Slack's message is made from)."""

    model_config = ConfigDict(extra="forbid")

    check_id: str
    target: str
    kind: str = Field(description="check or query.")
    text: str = Field(description="The predicate, as written.")
    from_verdict: VerdictKind = Field(
        description="The verdict this sink last heard of (the recorded previous one at first)."
    )
    to_verdict: VerdictKind
    exit_code: int
    run_id: str = Field(description="The run that produced the new verdict.")
    run_url: str | None = Field(default=None, description="Link to the run, when configured.")
    explanation: str | None = None
    source: str = Field(description="Where the new verdict came from: probe or model.")
    changed_at: datetime


class SinkStatus(BaseModel):
    """One row of `assay notify status`."""

    model_config = ConfigDict(extra="forbid")

    sink: str
    type: str
    started: bool = Field(description="Whether a notifier has created this sink's group yet.")
    lag: int | None = Field(
        default=None, description="Changes not yet read by any notifier (None: unknown)."
    )
    pending: int = Field(default=0, description="Read but not yet acknowledged.")
    oldest_pending_seconds: float | None = None
    consumers: int = 0
    delivered: int = 0
    filtered: int = 0
    retries: int = 0
    dead_letters: int = Field(default=0, description="Changes given up on (kept for reading).")
