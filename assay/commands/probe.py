"""`assay probe show|test|export|drop CHECK`: a check's stored probe (docs/probes.md).

* ``show``: the current version, the probe, how it has agreed with the model, the versions;
* ``test``: run it now against ``--snapshot PATH`` or ``--context NAME`` and print the
  verdict and what it looked at (objects, fields, the first object it is false for);
* ``export --format vap|kyverno``: the admission policy of a per-object probe, as YAML;
* ``drop``: forget the probe, its versions and its history (the next run asks the model).

Exit codes: ``show``/``export``/``drop`` 0, or 66 when the check has no probe (64 when the
probe has no policy form); ``test`` exits with the verdict's code (3 when it cannot run,
including when it runs out of its time budget: the check's, or ``--timeout``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from assay.commands import probe_policies
from assay.commands.fleet_common import ERROR_PREFIX, EXIT_UNAVAILABLE, fail
from assay.commands.options import confined_snapshot, settings_or_usage
from assay.terminal_text import print_line
from schemas.exit_codes import EXIT_CODES, EXIT_UNKNOWN, EXIT_USAGE, VerdictKind

if TYPE_CHECKING:
    from schemas.policy import PolicyReference
    from schemas.probe import ProbeRecord, ProbeRun
    from schemas.settings import AssaySettings
    from workers.engine.toolsets.backend import ClusterBackend
    from workers.fleet.probe_store import ProbeStore

probe_app = typer.Typer(
    help="Show, test, export or drop a check's probe (its deterministic re-check); import "
    "admission policies as checks.",
    no_args_is_help=True,
)
CheckArg = Annotated[
    str, typer.Argument(metavar="CHECK", help="The check id, or any unique prefix of it.")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def policy_reference(text: str) -> PolicyReference | None:
    """The policy or set ``text`` names (schemas.policy, imported when a command runs: its
    models are not for ``assay --help``)."""
    from schemas.policy import policy_reference as reference

    return reference(text)


def _store(settings: AssaySettings) -> ProbeStore:
    from assay.local_mode import require_redis_url
    from workers.fleet.probe_store import ProbeStore
    from workers.fleet.redis_client import FleetNotConfigured, RedisUnreachable, connect

    try:
        client = connect(require_redis_url(settings), fail_fast=True)
    except (FleetNotConfigured, RedisUnreachable) as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    return ProbeStore(
        client, prefix=settings.key_prefix, history_limit=settings.probe_history_limit
    )


def _record(store: ProbeStore, check_id: str) -> ProbeRecord:
    """The probe of check ``check_id``, or of the one check a prefix of an id stands for
    (``assay.id_prefixes``); exit 66 when there is none."""
    from schemas.ids import InvalidId

    try:
        check_id = _full_check_id(store, check_id)
        record = store.current(check_id)
    except InvalidId as exc:
        fail(str(exc), EXIT_USAGE)
    if record is None:
        fail(f"check {check_id!r} has no probe (a run compiles one when the model proposes "
             f"a probe that reproduces its verdict){_imported_hint(store, check_id)}",
             EXIT_UNKNOWN)  # fmt: skip
    return record


def _full_check_id(store: ProbeStore, given: str) -> str:
    """The check id ``given`` stands for: itself when a check or a probe has that id, else
    the stored check a unique prefix of it names (a table's cut id, an ellipsis copied
    along dropped), else ``given`` as it is."""
    from assay.commands.fleet_common import expand_id
    from assay.id_prefixes import pasted
    from schemas.settings import load_settings
    from workers.fleet.store import VerdictStore

    given = pasted(given)
    checks = VerdictStore.from_settings(load_settings(), store.client)  # checked by the command
    if store.current(given) is not None or checks.latest_verdict(given) is not None:
        return given
    expanded = expand_id(checks, given, ("check",))
    return given if expanded is None else expanded[1]


def _imported_hint(store: ProbeStore, name: str) -> str:
    """Point a user who left off ``policy:`` or ``policy-set:`` at the imported policy or set
    of that name, if there is one."""
    from workers.fleet.policy_store import PolicyStore

    policies = PolicyStore(store.client, prefix=store.prefix)
    try:
        if policies.get(name) is not None:
            return f"; an imported policy has this name: policy:{name}"
        if policies.set_members(name) is not None:
            return f"; an imported policy set has this name: policy-set:{name}"
    except ValueError:  # not a policy name (UnreadablePolicy is one too): no hint
        return ""
    return ""


@probe_app.command("show")
def show(check_id: CheckArg, json_output: JsonFlag = False) -> None:
    """The check's current probe, its agreement with the model and its versions; for
    policy:NAME (policy-set:NAME) the imported policy (the set's policies)."""
    if (ref := policy_reference(check_id)) is not None:
        return probe_policies.show(ref, json_output)
    store = _store(settings_or_usage())
    record = _record(store, check_id)
    check_id = record.check_id  # the full id, when a prefix of it was given
    history = store.agreement(check_id)
    if json_output:
        body = {
            "probe": record.model_dump(mode="json"),
            "agreement": [entry.model_dump(mode="json") for entry in history],
            "versions": [v.version for v in store.versions(check_id)],
        }
        print(json.dumps(body, indent=2))
        return
    state = "active" if record.active else f"retired: {record.retired_reason}"
    print_line(f"check:        {record.check_id}")
    print_line(f"version:      {record.version} ({state})")
    compiled_at = f"{record.compiled_at:%Y-%m-%d %H:%M:%SZ}"
    print_line(f"compiled by:  run {record.compiled_by_run} at {compiled_at}")
    print_line(f"scope:        {record.probe.scope} (true -> {record.probe.when_true}, "
               f"false -> {record.probe.when_false})")  # fmt: skip
    for index, lookup in enumerate(record.probe.lookups):
        print_line(f"lookup {index}:     {lookup.tool} {json.dumps(lookup.args, sort_keys=True)}")
    print_line(f"expression:   {record.probe.summary()}")
    since = f"{record.runs_since_validation} probe runs since the model last agreed"
    agreed = f"{record.agreements} agreed, {record.disagreements} disagreed"
    print_line(f"agreement:    {agreed}; {since}")
    for entry in history[-10:]:
        mark = "agreed" if entry.agreed else "DISAGREED"
        probe_said = entry.probe_verdict.value if entry.probe_verdict else "-"
        print_line(f"  {entry.at:%Y-%m-%d %H:%M:%S} v{entry.version} {entry.why:<10} probe "
                   f"{probe_said:<5} model {entry.model_verdict.value:<5} {mark}")  # fmt: skip


def _positive_seconds(value: float | None) -> float | None:
    """``--timeout`` must leave the probe some time: 0 or less is a usage error (64)."""
    if value is not None and not value > 0:
        raise typer.BadParameter("must be more than 0 seconds", param_hint="--timeout")
    return value


ProbeTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        callback=_positive_seconds,
        help="Seconds the probe may take (default: the check's time budget, "
        "ASSAY_TIMEOUT_SECONDS or its profile's); past it, cannot_determine (exit 3).",
    ),
]


def _print_run(run: ProbeRun) -> None:
    verdict = run.verdict.value if run.verdict else "cannot_determine"
    print_line(f"verdict:  {verdict}")
    if run.error:
        print_line(f"error:    {run.error}")
    print_line(f"value:    {run.value}")
    print_line(f"objects:  {run.objects_read} read in {run.duration_seconds * 1000:.1f} ms")
    for ref in run.objects[:20]:
        where = f"{ref.namespace}/" if ref.namespace else ""
        print_line(f"  {ref.kind} {where}{ref.name}")
    if run.fields:
        print_line(f"fields:   {', '.join(run.fields)}")
    for ref in run.deciding:
        where = f"{ref.namespace}/" if ref.namespace else ""
        print_line(f"false for: {ref.kind} {where}{ref.name}")


@probe_app.command("test")
def test(
    check_id: CheckArg,
    snapshot: Annotated[
        Path | None, typer.Option("--snapshot", help="Snapshot folder to run the probe on.")
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="kubeconfig context to run the probe on.")
    ] = None,
    timeout: ProbeTimeoutOpt = None,
    json_output: JsonFlag = False,
) -> None:
    """Run the probe now against a snapshot or a context; print the verdict and what it read.

    It has a time budget, bound to the cluster it reads: a live cluster that hangs would
    otherwise hold the command for as long as the kube client retries, per lookup.
    """
    from workers.policy_engine.probes.runner import check_timeout_seconds, run_probe_for

    if (snapshot is None) == (context is None):
        raise typer.BadParameter("give exactly one of --snapshot PATH or --context NAME")
    settings = settings_or_usage()
    ref = policy_reference(check_id)
    record = _record(_store(settings), check_id) if ref is None else None
    backend = target_backend(
        snapshot, context, settings, unreadable=EXIT_CODES[VerdictKind.CANNOT_DETERMINE]
    )
    profile = record.profile if record is not None else None
    seconds = timeout if timeout is not None else check_timeout_seconds(profile, settings)
    if ref is not None:  # an imported policy or set: its probes, over shared listings
        try:
            return probe_policies.test(ref, backend, seconds, json_output)
        finally:
            backend.close()
    assert record is not None
    try:
        run = run_probe_for(record.probe, backend, seconds)
    finally:
        backend.close()
    if json_output:
        print(run.model_dump_json(indent=2))
    else:
        _print_run(run)
    if run.budget_exhausted == "deadline":
        print(f"{ERROR_PREFIX}time ran out: the probe did not finish within {seconds:g}s "
              "(--timeout sets how long it may take)", file=sys.stderr)  # fmt: skip
    raise typer.Exit(EXIT_CODES[run.verdict or VerdictKind.CANNOT_DETERMINE])


@probe_app.command("export")
def export(
    check_id: CheckArg,
    fmt: Annotated[str, typer.Option("--format", help="vap or kyverno.")] = "vap",
    action: Annotated[
        str | None,
        typer.Option(
            "--action", help="Audit (default; an imported policy keeps its own), Warn or Deny."
        ),
    ] = None,
    snapshot: Annotated[
        Path | None,
        typer.Option("--snapshot", help="Resolve custom kinds from this snapshot's CRDs."),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option("--context", help="Resolve custom kinds (and schemas) from this cluster."),
    ] = None,
) -> None:
    """Print the probe as a ValidatingAdmissionPolicy + binding, or a Kyverno ValidatingPolicy
    (checked as the API server would, refused with the reason otherwise)."""
    from workers.policy_engine.probes.export import NotExportable, export_probe

    if fmt not in ("vap", "kyverno"):
        raise typer.BadParameter("use vap or kyverno", param_hint="--format")
    if action not in (None, "Audit", "Warn", "Deny"):
        raise typer.BadParameter("use Audit, Warn or Deny", param_hint="--action")
    if snapshot is not None and context is not None:
        raise typer.BadParameter("give at most one of --snapshot PATH or --context NAME")
    settings = settings_or_usage()
    backend = _export_target(snapshot, context, settings)
    try:
        if (ref := policy_reference(check_id)) is not None:
            return probe_policies.export(ref, fmt, action, backend)
        record = _record(_store(settings), check_id)
        try:
            exported = export_probe(record, fmt, action=action, backend=backend)  # type: ignore[arg-type]
        except NotExportable as exc:
            fail(f"probe v{record.version} of {check_id} cannot be exported: {exc}", EXIT_USAGE)
        probe_policies.print_export(exported)
    finally:
        if backend is not None:
            backend.close()


def _export_target(
    snapshot: Path | None, context: str | None, settings: AssaySettings
) -> ClusterBackend | None:
    """The target an export resolves custom kinds on, if one was given."""
    if snapshot is None and context is None:
        return None
    return target_backend(snapshot, context, settings, unreadable=EXIT_USAGE)


def target_backend(
    snapshot: Path | None, context: str | None, settings: AssaySettings, *, unreadable: int
) -> ClusterBackend:
    """The snapshot (inside the snapshot roots) or kubeconfig context named; one that cannot
    be read ends the command with ``unreadable``."""
    from schemas.request import ContextTarget, SnapshotTarget
    from workers.engine.toolsets.factory import ToolsetUnavailable, backend_for

    target: SnapshotTarget | ContextTarget
    if snapshot is not None:
        target = SnapshotTarget(path=str(confined_snapshot(snapshot, settings)))
    else:
        assert context is not None
        target = ContextTarget(context=context, kubeconfig=settings.kubeconfig)
    try:
        return backend_for(target, settings)
    except ToolsetUnavailable as exc:
        fail(f"the target cannot be read: {exc}", unreadable)


@probe_app.command("drop")
def drop(check_id: CheckArg) -> None:
    """Forget the check's probe, its versions and its history (policy:NAME: the imported
    policy; policy-set:NAME: the set, not its policies)."""
    from schemas.ids import InvalidId

    if (ref := policy_reference(check_id)) is not None:
        return probe_policies.drop(ref)
    store = _store(settings_or_usage())
    try:
        check_id = _full_check_id(store, check_id)
        dropped = store.drop(check_id)
    except InvalidId as exc:
        fail(str(exc), EXIT_USAGE)
    if not dropped:
        fail(f"check {check_id!r} has no probe", EXIT_UNKNOWN)
    print_line(f"dropped the probe of {check_id}")


@probe_app.command("import")
def import_policies(
    files: Annotated[
        list[str],
        typer.Argument(metavar="FILE...", help="Policy files (YAML or JSON); - reads stdin."),
    ],
    policy_set: Annotated[
        str | None,
        typer.Option("--set", help="Make these policies the set NAME (policy-set:NAME)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be imported; store nothing.")
    ] = False,
    exceptions: Annotated[
        bool | None,
        typer.Option(
            "--exceptions/--no-exceptions",
            help="Apply the Kyverno PolicyExceptions of the files, as a Kyverno with "
            "features.policyExceptions.enabled (default: ASSAY_KYVERNO_POLICY_EXCEPTIONS, on).",
            show_default=False,
        ),
    ] = None,
    exceptions_namespace: Annotated[
        str | None,
        typer.Option(
            "--exceptions-namespace",
            metavar="NAMESPACE",
            help="Apply only PolicyExceptions in this namespace ('*': any), as Kyverno's "
            "features.policyExceptions.namespace.",
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Import admission policies as checks: policy:NAME each, policy-set:NAME with --set.

    Reads ValidatingAdmissionPolicy (+ binding, + its params object), Kyverno ValidatingPolicy
    and ClusterPolicy (validate.cel) with their PolicyExceptions, Gatekeeper
    ConstraintTemplate (K8sNativeValidation) + its constraints. Exit 65 when some documents
    were refused (the rest are imported).
    """
    flags = {
        "kyverno_policy_exceptions": exceptions,
        "kyverno_policy_exceptions_namespace": exceptions_namespace,
    }
    probe_policies.run_import(
        files, policy_set, dry_run, json_output, {k: v for k, v in flags.items() if v is not None}
    )


@probe_app.command("policies")
def policies(
    policy_set: Annotated[
        str | None, typer.Option("--set", help="Only the policies of this set.")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """The imported policies and policy sets."""
    probe_policies.list_policies(policy_set, json_output)


def register(app: typer.Typer) -> None:
    app.add_typer(probe_app, name="probe")
