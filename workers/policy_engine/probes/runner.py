"""Run a probe: its lookups against a cluster backend, then its CEL expression over the objects.

The lookups use the same argument models as the planner's tools (workers/engine/toolsets/
kubernetes.py) but read *objects* from the backend, not the rendered text: each object as
the API server holds it (``as_stored``), as admission judges it, never a scrubbed copy (a
scrubbed label no longer matches its selector). The one thing withheld is a Secret's
``data`` / ``stringData`` (and their last-applied copy): absent, as if RBAC hid them. A
probe that reads Secrets and names those fields is refused (:func:`_refuse_secret_values`):
without them its value would be a guess. What the run says about the objects (its
messages, its error) is scrubbed with the backend's scrubber before it is returned, since
it leaves the process (model, store, reports, logs).

:func:`run_probe` never raises and never guesses: a kind the cluster does not
serve, a failed lookup, an expression error or a non-boolean value gives a
:class:`ProbeRun` with ``error`` set and no verdict, which callers treat as
"the probe could not run" (never ``true``).

With a ``deadline`` (a ``time.monotonic()`` instant: a re-run's time budget), the
run gives a verdict only if it finished by then. The backend's own lookups end by
it once it is bound to the backend (``ToolRegistry.bind_deadline``: the live
backend's transport); the runner itself looks at the clock before each lookup,
between the objects a listing streams (a snapshot answers from memory and takes no
deadline; a live listing pages), before the expression, between the objects
``each_object`` evaluates, and after it. A run that fails with no time left, for
whatever reason, has ``budget_exhausted="deadline"``: its caller has no time to try
anything else either.

:func:`run_probe_for` is the on-demand run (``assay probe test``, ``POST
/v1/checks/{id}/probe/test``): the same run with a time budget of its own, bound to the
backend, so a hanging live cluster cannot hold a CLI or an API worker thread past it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from schemas.budget import Budget, ProfileName, resolve_budget
from schemas.probe import (
    MAX_OBJECTS_JUDGED,
    MAX_VIOLATIONS,
    JudgedObject,
    ObjectRef,
    ProbeLookup,
    ProbeRun,
    ProbeViolation,
    ProposedProbe,
)
from workers.engine.toolsets.backend import BackendError, ClusterBackend, ResourceInfo
from workers.engine.toolsets.kubernetes import DescribeArgs, EventsArgs, GetArgs
from workers.engine.toolsets.redaction import (
    LAST_APPLIED_ANNOTATION,
    SECRET_VALUE_FIELDS,
    is_secret,
    scrubbed,
)
from workers.policy_engine.cel.programs import CelError
from workers.policy_engine.cel.syntax.parser import CelSyntaxError, parse
from workers.policy_engine.cel.syntax.reads import names
from workers.policy_engine.probes.admission_inputs import AdmissionInputMissing, AdmissionInputs
from workers.policy_engine.probes.program import ProbeProgram

if TYPE_CHECKING:
    from schemas.settings import AssaySettings

MAX_OBJECTS = MAX_OBJECTS_JUDGED  # per probe run: a bound on memory and evaluation time
OBJECTS_SHOWN = 50  # object references kept in a ProbeRun
DECIDING_SHOWN = 10  # first failing objects kept in ProbeRun.deciding
_ALL_NAMESPACES = frozenset({"", "all", "*", "--all-namespaces", "all-namespaces"})
_ARGS: dict[str, type[BaseModel]] = {"get": GetArgs, "describe": DescribeArgs, "events": EventsArgs}
_WITHHELD_NAMES = frozenset({*SECRET_VALUE_FIELDS, LAST_APPLIED_ANNOTATION})
SECRET_VALUES_NAMED = _WITHHELD_NAMES  # what naming a Secret's withheld values means
SECRET_VALUES_WITHHELD = (
    "it reads a Secret's data or stringData, which assay withholds from every probe and "
    "imported policy, as RBAC would (a Secret's metadata, labels and type stay readable), "
    "so its value here would be a guess"
)


class ProbeFailure(Exception):
    """Internal: why a probe could not run (becomes ``ProbeRun.error``)."""


class ProbeOutOfTime(ProbeFailure):
    """Internal: the run's deadline came before the probe finished."""


class _Deadline:
    """The instant a probe run must end by, shared by all its lookups (not one per lookup)."""

    def __init__(self, at: float | None) -> None:
        self.at = at

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def check(self, doing: str) -> None:
        """Raise :class:`ProbeOutOfTime` once the deadline has passed."""
        if self.passed():
            raise ProbeOutOfTime(f"out of time {doing}")


def _namespace(value: str | None) -> str | None:
    if value is None or value.strip().lower() in _ALL_NAMESPACES:
        return None
    return value.strip()


def _ref(obj: Any, kind: str) -> ObjectRef:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    return ObjectRef(
        kind=str(obj.get("kind") or kind) if isinstance(obj, dict) else kind,
        name=str(meta.get("name", "?")),
        namespace=meta.get("namespace"),
    )


def _judged(obj: Any, passed: bool, message: str) -> JudgedObject:
    """``obj`` as a report names it (apiVersion, kind, namespace, name, uid when known)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    api_version = obj.get("apiVersion") if isinstance(obj, dict) else None
    uid = meta.get("uid")
    return JudgedObject(
        **_ref(obj, "?").model_dump(),
        api_version=str(api_version) if api_version else None,
        uid=str(uid) if uid else None,
        passed=passed,
        message=None if passed else message[:1024],
    )


def exempted(obj: Any, exception: str) -> JudgedObject:
    """``obj`` as exempt from the policy by the Kyverno PolicyException ``exception``."""
    return _judged(obj, True, "").model_copy(update={"exception": exception})


class _Reader:
    """Reads lookups into plain objects, counting what it read."""

    def __init__(self, backend: ClusterBackend, max_objects: int, deadline: _Deadline) -> None:
        self.backend = backend
        self.max_objects = max_objects
        self.deadline = deadline
        self.refs: list[ObjectRef] = []
        self.count = 0
        self.secrets = 0  # Secrets read: their values withheld
        self.resources: list[ResourceInfo | None] = []  # each lookup's kind (None: events)

    def _keep(self, objects: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
        kept: list[dict[str, Any]] = []
        for obj in objects:
            self.deadline.check(f"after {self.count} object(s) had been read")
            self.count += 1
            if self.count > self.max_objects:
                raise ProbeFailure(f"the lookups returned more than {self.max_objects} objects")
            kept.append(obj)
            self.secrets += is_secret(obj)
            if len(self.refs) < OBJECTS_SHOWN:
                self.refs.append(_ref(obj, kind))
        return kept

    def read(self, lookup: ProbeLookup) -> Any:
        model = _ARGS[lookup.tool]
        try:
            args: Any = model.model_validate(lookup.args)
        except ValidationError as exc:
            problems = "; ".join(e["msg"] for e in exc.errors()[:3])
            raise ProbeFailure(f"invalid arguments for {lookup.tool}: {problems}") from None
        self.deadline.check(f"before the lookup {lookup.tool} {lookup.args}")
        try:
            value = self._read(lookup.tool, args)
        except BackendError as exc:
            failure = f"{lookup.tool} failed: {exc.code}: {exc.message}"
            # A lookup the deadline cut short may fail as anything (a discovery it cut says
            # the kind is not served): past the deadline, the time budget is the reason.
            if exc.out_of_time or self.deadline.passed():
                raise ProbeOutOfTime(f"out of time: {failure}") from None
            raise ProbeFailure(failure) from None
        return value

    def _read(self, tool: str, args: Any) -> Any:
        if tool == "events":
            self.resources.append(None)
            events = self.backend.events(
                _namespace(args.namespace), args.involved_kind, args.involved_name, as_stored=True
            )
            return self._keep(events, "Event")
        resource = self.backend.resolve(args.kind)
        self.resources.append(resource)
        namespace = _namespace(args.namespace)
        if tool == "describe" or args.name:
            obj = self.backend.get(resource, args.name, namespace, as_stored=True)
            return self._keep([obj], resource.kind)[0]
        objects = self.backend.list_objects(
            resource, namespace, args.label_selector, args.field_selector, as_stored=True
        )
        return self._keep(objects, resource.kind)


def run_probe(
    probe: ProposedProbe,
    backend: ClusterBackend | None,
    *,
    max_objects: int = MAX_OBJECTS,
    deadline: float | None = None,
) -> ProbeRun:
    """Run ``probe`` against ``backend``. Never raises; a verdict only from a clean boolean.

    ``deadline``: the ``time.monotonic()`` instant the whole run (every lookup and the
    expression) must end by; bind the same instant to the backend so a lookup in flight
    ends by it too. None: no deadline (the lookups' own limits only).
    """
    return run_probe_with_results(probe, backend, max_objects=max_objects, deadline=deadline)[0]


def run_probe_with_results(
    probe: ProposedProbe,
    backend: ClusterBackend | None,
    *,
    max_objects: int = MAX_OBJECTS,
    deadline: float | None = None,
) -> tuple[ProbeRun, list[Any] | None]:
    """:func:`run_probe`, and the objects its lookups returned (as stored: never to be shown)
    when it gave a verdict (None otherwise): what the sensitivity check (sensitivity.py)
    builds its counterfactuals from. The run is scrubbed with the backend's scrubber."""
    run, results = _run_probe(probe, backend, max_objects, deadline)
    if backend is not None:
        run = scrubbed(run, scrubber=backend.scrubber, revalidate=False).model
    return run, results


def _run_probe(
    probe: ProposedProbe,
    backend: ClusterBackend | None,
    max_objects: int,
    deadline: float | None,
) -> tuple[ProbeRun, list[Any] | None]:
    began = time.perf_counter()
    fields: list[str] = []
    if backend is None:
        return ProbeRun(error="no cluster backend to run the lookups on", fields=fields), None
    clock = _Deadline(deadline)
    reader = _Reader(backend, max_objects, clock)
    try:
        program = ProbeProgram(probe)  # before any lookup: a bad one costs nothing
        fields = program.fields()
        _refuse_blind(probe, program)
        results = [reader.read(lookup) for lookup in probe.lookups]
        _refuse_secret_values(probe, reader)
        _refuse_incomplete(backend)
        _refuse_empty(probe, results)
        clock.check("after the lookups, before the expression")
        inputs = _admission_inputs(program, backend, reader)
        value, tally = _evaluate(probe, program, results, clock, inputs)
        # The expression cannot be interrupted (its cost is bounded, docs/probes.md): a value
        # that came after the deadline is refused like a model's reply past the budget.
        clock.check("while the expression was evaluated")
    except (ProbeFailure, CelError) as exc:
        out_of_time = isinstance(exc, ProbeOutOfTime) or clock.passed()
        return _failed(str(exc), reader, fields, began, out_of_time=out_of_time), None
    except Exception as exc:  # a bug or an unexpected backend fault: never a verdict
        error = f"internal error: {type(exc).__name__}: {exc}"
        return _failed(error, reader, fields, began, out_of_time=clock.passed()), None
    run = ProbeRun(
        value=value,
        verdict=probe.verdict_for(value),
        objects_read=reader.count,
        objects=reader.refs,
        fields=fields,
        deciding=tally.deciding,
        violations=tally.violations,
        violations_total=tally.violations_total,
        judged_total=tally.judged,
        judged=tally.objects if probe.scope == "each_object" else None,
        duration_seconds=round(time.perf_counter() - began, 6),
    )
    return run, results


def _refuse_blind(probe: ProposedProbe, program: ProbeProgram) -> None:
    """An expression that does not read what the lookups return agrees with any verdict and
    never flips when the cluster changes, so re-runs would repeat it until re-validation.

    Not so an imported policy's (``empty_result: pass``): which objects it judges is its
    match (the kinds listed, the rule's selectors and match conditions), so one whose
    validation is a constant (``false``: a deprecated API, a kind no one may create) is
    violated exactly by the objects the match selects, and holds where there are none; its
    value depends on the cluster through its lookups, as the API server's decision depends
    on the request. A model's probe never takes ``empty_result: pass`` (schemas/probe.py)."""
    if probe.origin is not None and probe.empty_result == "pass":
        return
    variable = "results" if probe.scope == "results" else "object"
    if not program.reads(variable):
        raise ProbeFailure(
            f"the expression does not read `{variable}` (the objects its lookups return), "
            "so its value cannot depend on the cluster"
        )


def _refuse_secret_values(probe: ProposedProbe, reader: _Reader) -> None:
    """A Secret's values are withheld (absent), so over Secrets an expression that names
    them would read their absence: ``has(object.data)`` false, ``'tls.crt' in
    object.data`` an error or, behind ``?.``, a default. Its value would not be the
    engine's. Named means a field, a key or a string of the expressions (variables and
    messages included) is ``data``, ``stringData`` or the last-applied annotation, so a
    key compared with ``'data'`` counts too; a probe that reads no Secret is not affected."""
    if not reader.secrets:
        return
    for expression in probe.expressions():
        try:
            spelled = names(parse(expression).root)
        except CelSyntaxError:
            continue  # it cannot run at all: compiling it says why
        if spelled & _WITHHELD_NAMES:
            raise ProbeFailure(SECRET_VALUES_WITHHELD)


def _refuse_empty(probe: ProposedProbe, results: list[Any]) -> None:
    """Vacuous truth is not evidence, in either scope: an empty listing may be a wrong
    namespace or a snapshot that lacks the kind, and ``all`` (or ``!exists``) over it is true
    whatever the cluster holds. The probe cannot decide; the model looks instead."""
    if probe.empty_result == "pass":
        return  # an imported policy: an empty listing has nothing to violate
    for number, (lookup, value) in enumerate(zip(probe.lookups, results, strict=True)):
        if isinstance(value, list) and not value:
            raise ProbeFailure(
                f"lookup {number} ({lookup.tool} {lookup.args}) returned no objects, so the "
                "expression could hold vacuously"
            )


def _refuse_incomplete(backend: ClusterBackend) -> None:
    """A snapshot with files it could not read may lack the very object that decides: the
    model is told so in every tool output; a probe cannot weigh that, so it does not decide."""
    problems = list(getattr(backend, "problems", None) or ())
    if problems:
        raise ProbeFailure(
            f"the snapshot has {len(problems)} problem(s), so the objects may be incomplete: "
            f"{problems[0]}"
        )


class _Tally:
    """each_object: what was judged and what failed, as the ProbeRun reports it."""

    def __init__(self) -> None:
        self.judged = 0
        self.objects: list[JudgedObject] = []
        self.violations_total = 0
        self.violations: list[ProbeViolation] = []
        self.deciding: list[ObjectRef] = []

    def passed(self, obj: Any) -> None:
        self.judged += 1
        self.objects.append(_judged(obj, True, ""))

    def exempt(self, obj: Any, exception: str) -> None:
        """An object a Kyverno PolicyException exempts: not judged, reported ``skip``."""
        self.objects.append(exempted(obj, exception))

    def failed(self, obj: Any, message: str) -> None:
        self.judged += 1
        self.objects.append(_judged(obj, False, message))
        self.violations_total += 1
        ref = _ref(obj, "?")
        if len(self.violations) < MAX_VIOLATIONS:
            self.violations.append(ProbeViolation(**ref.model_dump(), message=message[:1024]))
        if len(self.deciding) < DECIDING_SHOWN:
            self.deciding.append(ref)


def _admission_inputs(
    program: ProbeProgram, backend: ClusterBackend, reader: _Reader
) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """What an imported policy reads besides each object (``request``, ``oldObject``,
    ``namespaceObject``: admission_inputs.py), for the kind its one lookup lists; None when
    it reads none of them."""
    if not program.admission_inputs:
        return None
    resource = reader.resources[0] if reader.resources else None
    if resource is None:
        raise ProbeFailure("only a probe that lists one kind can read its admission inputs")
    inputs = AdmissionInputs(backend, program.admission_inputs)

    def of(obj: dict[str, Any]) -> dict[str, Any]:
        try:
            return inputs.for_object(obj, resource)
        except AdmissionInputMissing as exc:
            raise ProbeFailure(str(exc)) from None

    return of


def _evaluate(
    probe: ProposedProbe,
    program: ProbeProgram,
    results: list[Any],
    clock: _Deadline,
    inputs: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[bool, _Tally]:
    tally = _Tally()
    if probe.scope == "results":
        judgement = program.judge({"results": results})
        return judgement.passed, tally
    # A model's probe stops at the first false (the value is settled, and that object is the
    # evidence); an imported policy judges every object, to name each offending one.
    every = probe.origin is not None
    program.refuse_beyond(len(results[0]))
    for number, obj in enumerate(results[0]):
        clock.check(f"after the expression had been evaluated for {number} object(s)")
        bindings = {"object": obj} if inputs is None else {"object": obj, **inputs(obj)}
        judgement = program.judge(bindings)
        if not judgement.judged:
            if judgement.exception is not None:
                tally.exempt(obj, judgement.exception)
            continue
        if judgement.passed:
            tally.passed(obj)
        else:
            tally.failed(obj, judgement.message)
            if not every:
                break
    if tally.judged == 0 and probe.empty_result != "pass":
        raise ProbeFailure(
            "no object was judged (the match conditions excluded every object), so the "
            "expression could hold vacuously"
        )
    return tally.violations_total == 0, tally


def _failed(
    error: str, reader: _Reader, fields: list[str], began: float, *, out_of_time: bool = False
) -> ProbeRun:
    return ProbeRun(
        error=error,
        budget_exhausted="deadline" if out_of_time else None,
        objects_read=reader.count,
        objects=reader.refs,
        fields=fields,
        duration_seconds=round(time.perf_counter() - began, 6),
    )


def backend_of(registry: Any) -> ClusterBackend | None:
    """The cluster backend behind a tool registry, when it has one (see factory.build_registry)."""
    backend = getattr(registry, "backend", None)
    return backend if backend is not None else None


def check_timeout_seconds(profile: ProfileName | None, settings: AssaySettings) -> float:
    """The time budget a run of a check would have with no budget of its own in the request:
    the settings' ``timeout_seconds``, else its profile's (as ``effective_budget`` resolves
    it). ``profile``: the check's, from its probe record; None (an old record) takes the
    settings' profile."""
    budget = resolve_budget(
        profile or settings.profile, Budget(timeout_seconds=settings.timeout_seconds)
    )
    assert budget.timeout_seconds is not None  # every profile has one
    return budget.timeout_seconds


def bind_deadline(backend: ClusterBackend, deadline: float) -> None:
    """End the backend's later lookups by ``deadline``, as ``ToolRegistry.bind_deadline`` does
    for a run's registry: only a backend bound to one run takes it (a live cluster's); a
    snapshot, shared by runs, answers from memory and the runner watches the clock instead."""
    bind = getattr(backend, "bind_deadline", None)
    if callable(bind):
        bind(deadline)


def run_probe_for(
    probe: ProposedProbe, backend: ClusterBackend, timeout_seconds: float
) -> ProbeRun:
    """Run ``probe`` now within ``timeout_seconds`` (a run of its own on ``backend``).

    Why: without a deadline a live cluster that hangs held the caller (a CLI, an API worker
    thread) for as long as the kube client kept retrying, per lookup. A run that runs out
    gives no verdict (``budget_exhausted="deadline"``) and says so in ``error``.
    """
    deadline = time.monotonic() + timeout_seconds
    bind_deadline(backend, deadline)
    run = run_probe(probe, backend, deadline=deadline)
    if run.budget_exhausted == "deadline":
        error = f"time ran out: the probe did not finish within {timeout_seconds:g}s ({run.error})"
        run = run.model_copy(update={"error": error})
    return run
