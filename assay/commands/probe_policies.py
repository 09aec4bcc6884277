"""`assay probe import|policies` and the `policy:NAME` / `policy-set:NAME` forms of
`assay probe show|test|export|drop` (docs/probes.md, "Imported policies").

* ``import FILE... [--set NAME] [--dry-run]``: store the admission policies the files hold
  (ValidatingAdmissionPolicy + binding + params object, Kyverno ValidatingPolicy or
  ClusterPolicy with validate.cel, Gatekeeper ConstraintTemplate + constraints), each as the
  check ``policy:NAME``; with ``--set``, the set ``policy-set:NAME`` becomes exactly them.
  Every document that cannot be imported is named with the reason.
* ``policies [--set NAME]``: what is imported, and the sets.

Exit codes: ``import`` 0 when every policy document was imported, 65 when some were refused
(the others are stored), 64 for a file that cannot be read (nothing is stored); ``show``,
``export`` and ``drop`` 66 for no such policy or set; ``test`` the verdict's code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from assay.commands.fleet_common import fail
from assay.terminal_text import print_block, print_line
from schemas.exit_codes import EXIT_CODES, EXIT_UNKNOWN, EXIT_USAGE, VerdictKind

if TYPE_CHECKING:
    from schemas.policy import ImportedPolicy, PolicyReference, PolicyResult
    from schemas.settings import AssaySettings
    from workers.engine.toolsets.backend import ClusterBackend
    from workers.fleet.policy_store import PolicyStore
    from workers.policy_engine.probes.export import Exported

EXIT_REFUSED = 65  # sysexits EX_DATAERR: some documents could not be imported


def policy_store(settings: AssaySettings) -> PolicyStore:
    from assay.commands.fleet_common import EXIT_UNAVAILABLE
    from assay.local_mode import require_redis_url
    from workers.fleet.broker import FleetNotConfigured
    from workers.fleet.policy_store import PolicyStore
    from workers.fleet.redis_client import RedisUnreachable, connect

    try:
        client = connect(require_redis_url(settings), fail_fast=True)
    except (FleetNotConfigured, RedisUnreachable) as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    return PolicyStore.from_settings(settings, client)


def run_import(
    files: list[str],
    policy_set: str | None,
    dry_run: bool,
    json_output: bool,
    flags: dict[str, Any] | None = None,
) -> None:
    from assay.commands.options import settings_or_usage
    from workers.fleet.policy_store import import_into
    from workers.policy_engine.policies.documents import (
        UnreadableFile,
        documents_from_text,
        read_files,
    )
    from workers.policy_engine.policies.kyverno_exceptions import Acceptance

    if policy_set is not None:
        from schemas.policy import valid_set_name

        try:
            valid_set_name(policy_set)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--set") from None
    try:
        documents = []
        for name in files:
            if name == "-":
                documents += documents_from_text(sys.stdin.read(), "-")
            else:
                documents += read_files([Path(name)])
    except UnreadableFile as exc:
        fail(f"{exc}; nothing was imported", EXIT_USAGE)
    settings = settings_or_usage(**(flags or {}))
    store = None if dry_run else policy_store(settings)
    report, policies = import_into(
        store,
        documents,
        policy_set=policy_set,
        dry_run=dry_run,
        exceptions_accepted=Acceptance.of(settings),
    )
    if json_output:
        print(report.model_dump_json(indent=2))
    else:
        verb = "would import" if dry_run else "imported"
        for policy in policies:
            again = " (replaced)" if policy.name in report.replaced else ""
            print_line(f"{verb} {policy.predicate}{again}: {describe(policy)}")
        for refusal in report.refused:
            print_line(
                f"refused {refusal.kind} {refusal.name} ({refusal.source}): {refusal.reason}"
            )
        if policy_set is not None and report.refused:
            print_line(f"policy set {policy_set} unchanged: a set is imported whole, and "
                       f"{len(report.refused)} of its documents were refused")  # fmt: skip
        if report.policy_set and not dry_run:
            print_line(f"policy set {report.policy_set}: {len(policies)} policies "
                       f"(run it as the check policy-set:{report.policy_set})")  # fmt: skip
    if not documents:
        fail("the files hold no documents; nothing was imported", EXIT_USAGE)
    if report.refused:
        raise typer.Exit(EXIT_REFUSED)


def describe(policy: ImportedPolicy) -> str:
    kinds: list[str] = []
    for rule in policy.rules:
        for group in rule.match:
            for term in group:
                for kind in term.kinds or []:
                    if kind.name not in kinds:
                        kinds.append(kind.name)
    rules = f"{len(policy.rules)} rule{'s' if len(policy.rules) != 1 else ''}"
    said = f"{policy.format}, {rules}, judges {', '.join(kinds) or 'nothing'}"
    sources = [policy.param_source, *(rule.param_source for rule in policy.rules)]
    told: list[str] = []
    for source in sources:  # read on every run: say so where the import is reported
        if source is None:
            continue
        where = f" in {source.namespace}" if source.namespace else ""
        if source.name:
            which = f"{source.kind} {source.name}"
        elif source.selector is None:
            which = f"no {source.kind}"
        else:
            which = f"{source.kind}s selected"
        missing: str = source.not_found_action
        if source.reader == "kyverno":
            missing = "error" if source.name or missing == "Deny" else "admit"
        text = f", params from the target ({which}{where}; none found: {missing})"
        if text not in told:
            told.append(text)
    said += "".join(told)
    exceptions = sum(d.get("kind") == "PolicyException" for d in policy.documents[1:])
    if exceptions:  # Kyverno's, imported with it
        said += f", {exceptions} PolicyException{'s' if exceptions != 1 else ''}"
    return said


def list_policies(policy_set: str | None, json_output: bool) -> None:
    from assay.commands.options import settings_or_usage

    store = policy_store(settings_or_usage())
    sets = store.sets()
    names = store.names() if policy_set is None else sets.get(policy_set)
    if names is None:
        fail(f"no policy set is named {policy_set!r}", EXIT_UNKNOWN)
    loaded = store.many(names)
    if json_output:
        body = {
            "policies": [p.model_dump(mode="json") for p in loaded.values() if p is not None],
            "sets": sets,
        }
        print(json.dumps(body, indent=2))
        return
    for name, policy in loaded.items():
        member_of = [s for s, members in sets.items() if name in members]
        in_sets = f"  sets: {', '.join(member_of)}" if member_of else ""
        print_line(f"policy:{name}  {describe(policy) if policy else '(unreadable)'}{in_sets}")
    for name, members in sets.items():
        if policy_set is None or name == policy_set:
            print_line(f"policy-set:{name}  {len(members)} policies")


def show(ref: PolicyReference, json_output: bool) -> None:
    from assay.commands.options import settings_or_usage

    store = policy_store(settings_or_usage())
    if ref.kind == "set":
        members = store.set_members(ref.name)
        if members is None:
            fail(f"no policy set is named {ref.name!r}", EXIT_UNKNOWN)
        if json_output:
            print(json.dumps({"policy_set": ref.name, "policies": members}, indent=2))
        else:
            print_line(f"policy set:   {ref.name} ({len(members)} policies)")
            for name in members:
                print_line(f"  policy:{name}")
        return
    policy = _policy(store, ref.name)
    if json_output:
        print(policy.model_dump_json(indent=2))
        return
    print_line(f"policy:       {policy.name} ({describe(policy)})")
    imported = f"{policy.imported_at:%Y-%m-%d %H:%M:%SZ}"
    print_line(f"from:         {policy.source} ({policy.policy_name}), imported {imported}")
    print_line(f"actions:      {', '.join(policy.validation_actions) or '(none given)'}")
    from workers.policy_engine.cel.programs import EXCEPTIONS_VARIABLE
    from workers.policy_engine.policies.kyverno_exceptions import shown

    for rule in policy.rules:
        derived = (
            f" (Kyverno's pod-controller form of {rule.pod_controllers})"
            if rule.pod_controllers
            else ""
        )
        print_line(f"rule {rule.name}{derived}:")
        for variable in rule.variables:
            if variable.name == EXCEPTIONS_VARIABLE:  # Kyverno's, shown by its exceptions
                continue
            print_line(f"  variable {variable.name}: {variable.expression}")
        for condition in rule.match_conditions:
            if condition.exception:  # shown as the exception writes it
                print_line(f"  {shown(condition, policy.documents)}")
                continue
            print_line(f"  match condition {condition.name}: {condition.expression}")
        for exception in rule.exceptions:
            print_line(f"  exempt by PolicyException {exception.name}: what its match selects")
        for validation in rule.validations:
            message = validation.message_expression or validation.message or ""
            said = f"  validation: {validation.expression}"
            print_line(said + (f"  -> {message}" if message else ""))


def _policy(store: PolicyStore, name: str) -> ImportedPolicy:
    from workers.fleet.policy_store import UnreadablePolicy

    try:
        policy = store.get(name)
    except UnreadablePolicy as exc:
        fail(str(exc), EXIT_UNKNOWN)
    if policy is None:
        fail(
            f"no imported policy is named {name!r} (`assay probe policies` lists them)",
            EXIT_UNKNOWN,
        )
    return policy


def drop(ref: PolicyReference) -> None:
    from assay.commands.options import settings_or_usage

    store = policy_store(settings_or_usage())
    dropped = store.drop(ref.name) if ref.kind == "policy" else store.drop_set(ref.name)
    if not dropped:
        fail(f"there is no {ref.predicate}", EXIT_UNKNOWN)
    what = "the policy" if ref.kind == "policy" else "the set (its policies stay)"
    print_line(f"dropped {what} {ref.predicate}")


def export(
    ref: PolicyReference, fmt: str, action: str | None, backend: ClusterBackend | None = None
) -> None:
    from assay.commands.options import settings_or_usage
    from workers.policy_engine.probes.export import NotExportable, export_policy

    if ref.kind == "set":
        fail("export one policy at a time (policy:NAME), not a set", EXIT_USAGE)
    policy = _policy(policy_store(settings_or_usage()), ref.name)
    try:
        exported = export_policy(policy, fmt, action=action, backend=backend)  # type: ignore[arg-type]
    except NotExportable as exc:
        fail(f"{ref.predicate} cannot be exported as {fmt}: {exc}", EXIT_USAGE)
    print_export(exported)


def print_export(exported: Exported) -> None:
    """The YAML on stdout (its warnings as comments in it), each warning on stderr too."""
    for warning in exported.warnings:
        print_line(f"warning: {warning}", sys.stderr)
    print_block(exported.yaml())


def test(
    ref: PolicyReference, target_backend: ClusterBackend, seconds: float, json_output: bool
) -> None:
    """Run the policy (or set) now on an open backend; exit with the verdict's code."""
    import time

    from assay.commands.options import settings_or_usage
    from workers.policy_engine.policies.run import run_policies
    from workers.policy_engine.probes.runner import bind_deadline

    store = policy_store(settings_or_usage())
    if ref.kind == "policy":
        policies = [_policy(store, ref.name)]
    else:
        members = store.set_members(ref.name)
        if members is None:
            fail(f"no policy set is named {ref.name!r}", EXIT_UNKNOWN)
        policies = [p for p in store.many(members).values() if p is not None]
    deadline = time.monotonic() + seconds
    bind_deadline(target_backend, deadline)
    results, shared = run_policies(policies, target_backend, deadline=deadline)
    if json_output:
        print(json.dumps({"results": [r.model_dump(mode="json") for r in results],
                          "listings": shared.requests}, indent=2))  # fmt: skip
    else:
        for result in results:
            print_result(result)
        print_line(f"listings: {shared.requests} list request(s) for {len(results)} policies")
    raise typer.Exit(EXIT_CODES[_overall(results)])


def print_result(result: PolicyResult) -> None:
    line = f"policy:{result.policy}  {result.verdict.value}"
    line += f"  ({result.judged_total} judged, {result.violations_total} violate it)"
    print_line(line)
    if result.reason:
        print_line(f"  reason: {result.reason}")
    for violation in result.violations[:20]:
        where = f"{violation.namespace}/" if violation.namespace else ""
        print_line(f"  {violation.kind} {where}{violation.name}: {violation.message}")
    if result.violations_total > 20:
        print_line(f"  and {result.violations_total - 20} more")


def _overall(results: list[PolicyResult]) -> VerdictKind:
    verdicts = {r.verdict for r in results}
    if VerdictKind.FALSE in verdicts:
        return VerdictKind.FALSE
    if results and verdicts == {VerdictKind.TRUE}:
        return VerdictKind.TRUE
    return VerdictKind.CANNOT_DETERMINE
