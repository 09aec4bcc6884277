"""`assay notify`: run the notifier, send a sample to one sink, show every sink's backlog.

Sinks come from the settings (``notify_sinks``; docs/alerting.md). Exit codes:
64 for a wrong command line or configuration (no sinks, an unknown sink name),
69 when Redis cannot be reached or a sample delivery failed. The notifier,
httpx and redis are imported inside the commands so ``assay --help`` stays fast.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/assay/test_cli_check.py keeps the engine out).
from typing import TYPE_CHECKING, Annotated

import typer

from assay.commands.fleet_common import EXIT_UNAVAILABLE, fail, stdout_console
from assay.commands.options import settings_or_usage
from schemas.exit_codes import EXIT_USAGE

if TYPE_CHECKING:
    from schemas.notify import Sink, SinkStatus
    from schemas.settings import AssaySettings

notify_app = typer.Typer(
    rich_markup_mode=None,  # plain help: no box drawing, no <bool> placeholders
    name="notify",
    help="Deliver verdict changes to webhooks, Slack and Alertmanager (docs/alerting.md). "
    "Without a subcommand: run a notifier replica (SIGTERM stops it cleanly).",
    invoke_without_command=True,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]


def _fleet_settings() -> AssaySettings:
    from assay.local_mode import require_redis_url
    from workers.fleet.redis_client import FleetNotConfigured

    settings = settings_or_usage()
    try:
        url = require_redis_url(settings)
    except FleetNotConfigured as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    return settings.model_copy(update={"redis_url": url})


def _no_sinks() -> None:
    fail(
        "no sinks are configured: add notify_sinks to the ASSAY_CONFIG file or set "
        "ASSAY_NOTIFY_SINKS (see docs/alerting.md)",
        EXIT_USAGE,
    )


def _sink(settings: AssaySettings, name: str) -> Sink:
    if not settings.notify_sinks:
        _no_sinks()
    config = settings.notify_sinks.get(name)
    if config is None:
        known = ", ".join(sorted(settings.notify_sinks))
        fail(f"there is no sink named {name!r}: the configured sinks are {known}", EXIT_USAGE)
    return config


def _require_secrets(settings: AssaySettings, only: str | None = None) -> None:
    from schemas.notify import missing_secrets

    missing = [
        variable
        for name, config in sorted(settings.notify_sinks.items())
        if only is None or name == only
        for variable in missing_secrets(name, config)
    ]
    if missing:
        fail(
            f"a sink's secret is missing: set {', '.join(missing)} (from a Secret or the "
            "environment; see docs/alerting.md)",
            EXIT_USAGE,
        )


def _redis_trouble(exc: Exception) -> None:
    fail(
        f"could not reach the fleet's Redis ({type(exc).__name__}); check it is running "
        "or fix ASSAY_REDIS_URL",
        EXIT_UNAVAILABLE,
    )


@notify_app.callback()
def notify(ctx: typer.Context) -> None:
    """Run a notifier replica: every verdict change to every sink, at least once each."""
    if ctx.invoked_subcommand is not None:
        return
    import threading

    import redis.exceptions

    from notifier.service import run_notifier, stop_on_signals
    from workers.engine.logs import configure_logging

    settings = _fleet_settings()
    if not settings.notify_sinks:
        _no_sinks()
    _require_secrets(settings)
    configure_logging(settings)
    stop = threading.Event()
    stop_on_signals(stop)
    try:
        run_notifier(settings, stop)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        _redis_trouble(exc)


@notify_app.command("test")
def test(
    sink: Annotated[str, typer.Argument(help="The sink's name, as configured.")],
) -> None:
    """Send a sample change (true -> false of check assay-notify-test) to one sink."""
    from notifier.alertmanager import build_alert
    from notifier.events import sample_notification
    from notifier.service import http_client
    from notifier.sinks import AlertmanagerClient, DeliveryError, SlackSender, WebhookSender
    from schemas.fleet import CheckSummary
    from schemas.notify import (
        AlertmanagerSink,
        ChangeEventData,
        PolicyReportSink,
        SlackSink,
        WebhookSink,
    )

    settings = settings_or_usage()
    config = _sink(settings, sink)
    if isinstance(config, PolicyReportSink):
        fail(
            f"sink {sink} writes PolicyReports, which have no sample; `assay report --format "
            "policyreport` prints what it writes",
            EXIT_USAGE,
        )
    _require_secrets(settings, only=sink)
    sample = sample_notification(settings, sink)
    with http_client(settings) as http:
        try:
            if isinstance(config, AlertmanagerSink):
                data = sample.data
                assert isinstance(data, ChangeEventData)  # the sample is a verdict change
                summary = CheckSummary(
                    check_id=data.check_id,
                    kind=data.kind,
                    text=data.text,
                    target=data.target,
                    verdict=data.to_verdict,
                    exit_code=data.exit_code,
                    run_id=data.run_id,
                    finished_at=data.changed_at,
                    changed_at=data.changed_at,
                    previous_verdict=data.from_verdict,
                )
                alert = build_alert(config, summary, None, "firing", data.changed_at, data.run_url)
                AlertmanagerClient(sink, config, http).post_alerts([alert])
            elif isinstance(config, SlackSink):
                SlackSender(sink, config, http).deliver(sample)
            elif isinstance(config, WebhookSink):
                WebhookSender(sink, config, http).deliver(sample)
        except DeliveryError as exc:
            fail(f"the sample was not delivered: {exc}; check the sink's URL and key", 69)
    note = ""
    if isinstance(config, AlertmanagerSink):
        minutes = config.resend_seconds * 4 / 60
        note = f"; the test alert resolves by itself in {minutes:g} minutes"
    typer.echo(f"sent a sample change to sink {sink} ({config.type}){note}")


@notify_app.command("status")
def status(json: JsonOpt = False) -> None:
    """Each sink's backlog: lag, pending, oldest pending, retries and dead letters."""
    import redis.exceptions

    from workers.fleet.notify_feed import SinkFeed
    from workers.fleet.store import VerdictStore

    settings = _fleet_settings()
    if not settings.notify_sinks:
        _no_sinks()
    try:
        store = VerdictStore.from_settings(settings)
        rows = [
            SinkFeed(store, name, "status").status(config.type)
            for name, config in sorted(settings.notify_sinks.items())
        ]
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        _redis_trouble(exc)
        return
    if json:
        import json as json_lib

        typer.echo(json_lib.dumps([row.model_dump(mode="json") for row in rows], indent=2))
        return
    _print_status(rows)


def _print_status(rows: list[SinkStatus]) -> None:
    """One line per sink, no box drawing when piped (``assay.render.make_table``), and
    within 80 columns, like the fleet's other tables (``sent``: delivered, ``dead``: dead
    letters)."""
    from rich.markup import escape

    from assay.render import make_table

    console = stdout_console()
    table = make_table(
        console,
        *("sink", "type", "lag", "pending", "oldest", "sent", "filtered", "retries", "dead"),
        collapse_padding=True,  # narrow gaps and no edges: nine columns fit in 80
        pad_edge=False,
        show_edge=False,
    )
    for column in table.columns:
        column.no_wrap = True
        column.overflow = "ellipsis"
    for row in rows:
        lag = "not started" if not row.started else "?" if row.lag is None else str(row.lag)
        oldest = "-" if row.oldest_pending_seconds is None else f"{row.oldest_pending_seconds:.0f}s"
        table.add_row(
            escape(row.sink),
            row.type,
            lag,
            str(row.pending),
            oldest,
            str(row.delivered),
            str(row.filtered),
            str(row.retries),
            str(row.dead_letters),
        )
    console.print(table, soft_wrap=False)


def register(app: typer.Typer) -> None:
    app.add_typer(notify_app, name="notify")
