"""Every Prometheus metric assay exports, defined once, with small functions to move them.

Workers, the scheduler and the API each expose one registry per process (the
default one). Workers run Celery's threads pool, so every evaluation of a
worker shares the process and its counters; prometheus-client's multiprocess
mode is not needed. Code elsewhere never touches a metric object directly: it
calls one of the ``observe_*`` functions, so a metric's name and labels live
in this file only.

Some gauges are read at scrape time rather than kept up to date: the broker's
queue depth (``workers.fleet.queue_depth``, which knows the broker's keys), the
scheduler's due / in-flight timers, each check's latest verdict (served by the
API) and each notification sink's backlog (served by the notifier). Their
collectors ask Redis when Prometheus scrapes, so they are right even when
nothing in this process moved them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from schemas.verdict import Verdict

NAMESPACE = "assay"

# --- evaluations --------------------------------------------------------------------------------
EVALUATIONS = Counter(
    "evaluations",
    "Finished evaluations by verdict, profile and kind (check or query).",
    ["verdict", "profile", "kind"],
    namespace=NAMESPACE,
)
EVALUATION_DURATION = Histogram(
    "evaluation_duration_seconds",
    "Wall-clock duration of finished evaluations, from start to verdict.",
    ["profile"],
    namespace=NAMESPACE,
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, float("inf")),
)
BUDGET_EXHAUSTIONS = Counter(
    "budget_exhaustions",
    "Evaluations that ended because a budget ran out, by which one.",
    ["kind"],
    namespace=NAMESPACE,
)

# --- model calls -----------------------------------------------------------------------------
MODEL_CALLS = Counter(
    "model_calls",
    "Model calls by model and outcome (ok or error), retries not counted separately.",
    ["model", "outcome"],
    namespace=NAMESPACE,
)
MODEL_TOKENS = Counter(
    "model_tokens",
    "Tokens the provider reported, by model and type (prompt or completion).",
    ["model", "type"],
    namespace=NAMESPACE,
)
MODEL_USAGE_ANOMALIES = Counter(
    "model_usage_anomalies",
    "Model replies whose reported token usage was missing, negative or absurd (an estimate "
    "or a ceiling was charged instead), by model.",
    ["model"],
    namespace=NAMESPACE,
)
MODEL_RETRIES = Counter(
    "model_call_retries",
    "Model-call attempts that failed transiently and were retried, by model.",
    ["model"],
    namespace=NAMESPACE,
)

# --- spend guard (workers/fleet/spend.py) ------------------------------------------------------
SPEND_TOKENS = Counter(
    "spend_tokens",
    "Tokens model calls used, fleet-wide, as each call settled (a worker's own calls).",
    namespace=NAMESPACE,
)
SPEND_COST = Counter(
    "spend_cost_usd",
    "US dollars model calls cost, fleet-wide, as each call settled (models with a known price).",
    namespace=NAMESPACE,
)
SPEND_SCHEDULE_TOKENS = Counter(
    "spend_schedule_tokens",
    "Tokens the runs of each schedule used, as each call settled.",
    ["schedule_id"],
    namespace=NAMESPACE,
)
SPEND_SCHEDULE_COST = Counter(
    "spend_schedule_cost_usd",
    "US dollars the runs of each schedule cost, as each call settled.",
    ["schedule_id"],
    namespace=NAMESPACE,
)
SPEND_REFUSALS = Counter(
    "spend_refusals",
    "Model calls a spend ceiling stopped (their runs ended cannot_determine), by ceiling "
    "(fleet-hour, fleet-day, schedule, batch) and resource (tokens, cost).",
    ["ceiling", "resource"],
    namespace=NAMESPACE,
)
SCHEDULE_FIRES_SKIPPED = Counter(
    "schedule_fires_skipped",
    "Schedule fires skipped because the schedule's spend ceiling for that UTC day is reached.",
    ["schedule_id"],
    namespace=NAMESPACE,
)

# --- tools --------------------------------------------------------------------------------------
TOOL_CALLS = Counter(
    "tool_calls",
    "Read-only tool calls by tool and outcome (ok or error).",
    ["tool", "outcome"],
    namespace=NAMESPACE,
)

# --- scheduler ----------------------------------------------------------------------------------
SCHEDULER_LATENESS = Histogram(
    "scheduler_lateness_seconds",
    "Time from a timer's due instant to its evaluation being enqueued.",
    ["kind"],
    namespace=NAMESPACE,
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, float("inf")),
)

# --- API ----------------------------------------------------------------------------------------
API_REQUESTS = Counter(
    "api_requests",
    "HTTP API requests by route template, method and status code.",
    ["route", "method", "status"],
    namespace=NAMESPACE,
)
API_REQUEST_DURATION = Histogram(
    "api_request_duration_seconds",
    "HTTP API request latency by route template.",
    ["route"],
    namespace=NAMESPACE,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, float("inf")),
)

# --- notifier -----------------------------------------------------------------------------------
NOTIFY_CHANGES = Counter(
    "notify_changes",
    "Verdict changes a notifier finished with, by sink and outcome "
    "(delivered, filtered, dead_lettered).",
    ["sink", "outcome"],
    namespace=NAMESPACE,
)
NOTIFY_ATTEMPT_FAILURES = Counter(
    "notify_attempt_failures",
    "Delivery attempts a sink did not accept (retried or dead-lettered), by sink.",
    ["sink"],
    namespace=NAMESPACE,
)


@lru_cache(maxsize=1024)
def _child(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, kept: prometheus_client checks and sorts the label values and
    takes a lock on every ``labels()`` call (about 2 us; a 3-step evaluation makes a dozen).
    Bounded, since a model name is the caller's; an evicted child is fetched again."""
    return metric.labels(*values)


def observe_verdict(verdict: Verdict) -> None:
    """Count a finished evaluation; call once per run, where its verdict is recorded."""
    _child(EVALUATIONS, verdict.verdict.value, verdict.profile, verdict.kind).inc()
    _child(EVALUATION_DURATION, verdict.profile).observe(max(verdict.duration_seconds, 0.0))
    if verdict.budget_exhausted:
        _child(BUDGET_EXHAUSTIONS, verdict.budget_exhausted).inc()


def observe_model_call(
    model: str, *, ok: bool, prompt_tokens: int = 0, completion_tokens: int = 0
) -> None:
    """Count one model call (after its retries) and the tokens it used."""
    _child(MODEL_CALLS, model, "ok" if ok else "error").inc()
    # Counters only go up: a negative figure (a provider's bug) must not crash the caller.
    if prompt_tokens > 0:
        _child(MODEL_TOKENS, model, "prompt").inc(prompt_tokens)
    if completion_tokens > 0:
        _child(MODEL_TOKENS, model, "completion").inc(completion_tokens)


def observe_model_reply(
    model: str, *, prompt_tokens: int | None, completion_tokens: int | None, attempts: int
) -> None:
    """Count a model call that answered after ``attempts`` tries (the extra ones were retries)."""
    observe_model_call(
        model, ok=True, prompt_tokens=prompt_tokens or 0, completion_tokens=completion_tokens or 0
    )
    if attempts > 1:
        _child(MODEL_RETRIES, model).inc(attempts - 1)


def observe_usage_anomaly(model: str) -> None:
    """Count a reply whose usage figures could not be taken as reported."""
    _child(MODEL_USAGE_ANOMALIES, model).inc()


def observe_spend(schedule_id: str | None, tokens: int, cost_usd: float | None) -> None:
    """Count what one model call used, fleet-wide and for its schedule."""
    tokens = max(0, tokens)
    SPEND_TOKENS.inc(tokens)
    if cost_usd is not None and cost_usd > 0:
        SPEND_COST.inc(cost_usd)
    if schedule_id:
        _child(SPEND_SCHEDULE_TOKENS, schedule_id).inc(tokens)
        if cost_usd is not None and cost_usd > 0:
            _child(SPEND_SCHEDULE_COST, schedule_id).inc(cost_usd)


def observe_spend_refusal(ceiling: str, resource: str) -> None:
    """Count a model call a spend ceiling stopped."""
    _child(SPEND_REFUSALS, ceiling, resource).inc()


def observe_schedule_skips(schedule_id: str, fires: int) -> None:
    """Count schedule fires skipped for a reached spend ceiling."""
    if fires > 0:
        _child(SCHEDULE_FIRES_SKIPPED, schedule_id).inc(fires)


def observe_tool_call(tool: str, *, ok: bool) -> None:
    """Count one tool call by its outcome."""
    _child(TOOL_CALLS, tool, "ok" if ok else "error").inc()


def observe_lateness(seconds: float, kind: str = "timer") -> None:
    """Record how late the scheduler enqueued a due timer (negative = early, kept at 0)."""
    SCHEDULER_LATENESS.labels(kind=kind).observe(max(seconds, 0.0))


def observe_api_request(route: str, method: str, status: int, seconds: float) -> None:
    """Count one API request; ``route`` is the template (``/v1/runs/{run_id}``), never the path."""
    API_REQUESTS.labels(route=route, method=method, status=str(status)).inc()
    API_REQUEST_DURATION.labels(route=route).observe(seconds)


def observe_notify(sink: str, outcome: str) -> None:
    """Count one change a notifier finished with for ``sink``."""
    NOTIFY_CHANGES.labels(sink=sink, outcome=outcome).inc()


def observe_notify_failure(sink: str) -> None:
    """Count one delivery attempt ``sink`` did not accept."""
    NOTIFY_ATTEMPT_FAILURES.labels(sink=sink).inc()


# --- scrape-time collectors -----------------------------------------------------------------------


class TimerCollector(Collector):
    """``assay_timers_due`` and ``assay_timers_in_flight``, read from the scheduler's keys.

    ``read_counts`` returns ``(due, in_flight)``; the scheduler's own module reads
    its keys (it is the only code that knows their layout).
    """

    def __init__(self, read_counts: Callable[[], tuple[int, int]]) -> None:
        self._read_counts = read_counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            due, in_flight = self._read_counts()
        except Exception:  # Redis down: no sample beats a wrong one
            return
        yield GaugeMetricFamily(
            f"{NAMESPACE}_timers_due",
            "Timers in the scheduler's due set: waiting for their instant or for a claim.",
            value=due,
        )
        yield GaugeMetricFamily(
            f"{NAMESPACE}_timers_in_flight",
            "Timers claimed by a scheduler replica and not yet acknowledged.",
            value=in_flight,
        )


class CheckGaugeRow(Protocol):
    """One check's latest verdict as the store reads it for the gauges below."""

    @property
    def check_id(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def exit_code(self) -> int: ...
    @property
    def finished_at(self) -> float: ...
    @property
    def source(self) -> str: ...


class CheckVerdictCollector(Collector):
    """Per-check gauges from the verdict store, so users can write their own alert rules.

    - ``assay_check_verdict{check_id, target}``: the latest verdict's exit code
      (0 true, 1 false, 2 poorly posed, 3 cannot determine);
    - ``assay_check_last_verdict_timestamp_seconds{check_id, target}``: when it finished;
    - ``assay_check_verdict_source{check_id, target, source}``: 1 for where it came from
      (``probe`` or ``model``).

    ``read_rows`` returns the rows (the store's ``check_gauges``); Redis down means
    no samples and ``assay_check_gauges_up 0``, never stale numbers.
    """

    def __init__(self, read_rows: Callable[[], Iterable[CheckGaugeRow]]) -> None:
        self._read_rows = read_rows

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            f"{NAMESPACE}_check_gauges_up", "1 when the verdict store answered the last scrape."
        )
        try:
            rows = list(self._read_rows())
        except Exception:  # a scrape must never fail because Redis is down
            up.add_metric([], 0)
            yield up
            return
        verdict = GaugeMetricFamily(
            f"{NAMESPACE}_check_verdict",
            "Latest verdict of each check as its exit code: 0 true, 1 false, "
            "2 poorly_posed, 3 cannot_determine.",
            labels=["check_id", "target"],
        )
        finished = GaugeMetricFamily(
            f"{NAMESPACE}_check_last_verdict_timestamp_seconds",
            "When each check's latest verdict finished (Unix time).",
            labels=["check_id", "target"],
        )
        source = GaugeMetricFamily(
            f"{NAMESPACE}_check_verdict_source",
            "1 for where each check's latest verdict came from: probe or model.",
            labels=["check_id", "target", "source"],
        )
        for row in rows:
            verdict.add_metric([row.check_id, row.target], row.exit_code)
            finished.add_metric([row.check_id, row.target], row.finished_at)
            source.add_metric([row.check_id, row.target, row.source], 1)
        up.add_metric([], 1)
        yield verdict
        yield finished
        yield source
        yield up


class SinkStatusRow(Protocol):
    """One sink's backlog as its consumer group reports it (schemas.notify.SinkStatus)."""

    @property
    def sink(self) -> str: ...
    @property
    def lag(self) -> int | None: ...
    @property
    def pending(self) -> int: ...
    @property
    def oldest_pending_seconds(self) -> float | None: ...
    @property
    def dead_letters(self) -> int: ...


class NotifyCollector(Collector):
    """``assay_notify_*`` backlog gauges per sink, read from the sinks' consumer groups."""

    def __init__(self, read_statuses: Callable[[], Iterable[SinkStatusRow]]) -> None:
        self._read_statuses = read_statuses

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            statuses = list(self._read_statuses())
        except Exception:  # Redis down: no sample beats a wrong one
            return
        families = {
            "lag": GaugeMetricFamily(
                f"{NAMESPACE}_notify_lag",
                "Verdict changes no notifier has read yet, by sink.",
                labels=["sink"],
            ),
            "pending": GaugeMetricFamily(
                f"{NAMESPACE}_notify_pending",
                "Verdict changes read but not yet acknowledged (in delivery, waiting out a "
                "minimum duration, or retrying), by sink.",
                labels=["sink"],
            ),
            "oldest": GaugeMetricFamily(
                f"{NAMESPACE}_notify_oldest_pending_seconds",
                "Age of the oldest change not yet acknowledged, by sink (0 when none).",
                labels=["sink"],
            ),
            "dead": GaugeMetricFamily(
                f"{NAMESPACE}_notify_dead_letters",
                "Verdict changes given up on after the delivery limit, by sink.",
                labels=["sink"],
            ),
        }
        for status in statuses:
            if status.lag is not None:
                families["lag"].add_metric([status.sink], status.lag)
            families["pending"].add_metric([status.sink], status.pending)
            families["oldest"].add_metric([status.sink], status.oldest_pending_seconds or 0.0)
            families["dead"].add_metric([status.sink], status.dead_letters)
        yield from families.values()


class CeilingRow(Protocol):
    """One ceiling of a current period, as the spend store reads it (schemas.spend)."""

    @property
    def resource(self) -> str: ...
    @property
    def limit(self) -> float: ...
    @property
    def spent(self) -> float: ...
    @property
    def remaining(self) -> float: ...


class SpendRow(Protocol):
    """One scope's current period (schemas.spend.ScopeSpend)."""

    @property
    def scope(self) -> str: ...
    @property
    def scope_id(self) -> str | None: ...
    @property
    def period(self) -> str: ...
    @property
    def skipped_fires(self) -> int: ...
    @property
    def ceilings(self) -> Iterable[CeilingRow]: ...


class SpendCollector(Collector):
    """Spend ceilings now, read from Redis at scrape time (the API serves them).

    - ``assay_spend_ceiling_remaining{scope, scope_id, resource}``: what is left of each
      ceiling in its current period (limit - spent - held by calls in flight);
    - ``assay_spend_ceiling_limit`` and ``assay_spend_ceiling_spent``, same labels;
    - ``assay_spend_schedule_skipped_fires{schedule_id}``: fires skipped today (UTC).

    ``scope`` is fleet_hour, fleet_day, schedule or batch. Redis down: no samples and
    ``assay_spend_gauges_up 0``.
    """

    def __init__(self, read_rows: Callable[[], Iterable[SpendRow]]) -> None:
        self._read_rows = read_rows

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            f"{NAMESPACE}_spend_gauges_up", "1 when the spend store answered the last scrape."
        )
        try:
            rows = list(self._read_rows())
        except Exception:  # a scrape must never fail because Redis is down
            up.add_metric([], 0)
            yield up
            return
        labels = ["scope", "scope_id", "resource"]
        remaining = GaugeMetricFamily(
            f"{NAMESPACE}_spend_ceiling_remaining",
            "What is left of each spend ceiling in its current period (tokens, or US dollars "
            "for resource cost_usd): limit minus spent minus what calls in flight hold.",
            labels=labels,
        )
        limit = GaugeMetricFamily(
            f"{NAMESPACE}_spend_ceiling_limit", "Each spend ceiling, per period.", labels=labels
        )
        spent = GaugeMetricFamily(
            f"{NAMESPACE}_spend_ceiling_spent",
            "What was spent against each ceiling in its current period.",
            labels=labels,
        )
        skipped = GaugeMetricFamily(
            f"{NAMESPACE}_spend_schedule_skipped_fires",
            "Fires of each schedule skipped today (UTC) because its spend ceiling is reached.",
            labels=["schedule_id"],
        )
        for row in rows:
            scope = row.scope
            if scope == "fleet":
                scope = "fleet_hour" if "T" in row.period else "fleet_day"
            for ceiling in row.ceilings:
                values = [scope, row.scope_id or "", ceiling.resource]
                remaining.add_metric(values, ceiling.remaining)
                limit.add_metric(values, ceiling.limit)
                spent.add_metric(values, ceiling.spent)
            if row.scope == "schedule":
                skipped.add_metric([row.scope_id or ""], row.skipped_fires)
        up.add_metric([], 1)
        yield remaining
        yield limit
        yield spent
        yield skipped
        yield up


_registered: dict[str, Collector] = {}


def register_collector(
    name: str, collector: Collector, registry: CollectorRegistry = REGISTRY
) -> None:
    """Register a scrape-time collector under ``name``, replacing the one registered before
    under it: an app built later in the same process (an embedding, a test) reads its own
    store, not the first app's."""
    earlier = _registered.pop(name, None)
    if earlier is not None:
        registry.unregister(earlier)
    registry.register(collector)
    _registered[name] = collector


def render_latest(registry: CollectorRegistry = REGISTRY) -> tuple[bytes, str]:
    """The exposition text and its content type, for the API's ``/metrics``."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


_server_port: int | None = None


def start_metrics_server(port: int, addr: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` on ``port`` in a daemon thread; later calls in the process do nothing."""
    global _server_port
    if _server_port is not None:
        return
    start_http_server(port, addr=addr)
    _server_port = port
