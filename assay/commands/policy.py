"""`assay policy translate PATH... --to vap|kyverno`: a verified translation between policy
engines (docs/probes.md, "Translate a policy between engines").

PATHs are policy files (a Gatekeeper ConstraintTemplate and its constraint, a Kyverno
policy, a ValidatingAdmissionPolicy with its binding and params), and the objects to prove
the translation on: objects in those files, a Kyverno CLI test or Gatekeeper suite (the
policy's own test objects; a folder is searched for them), and with ``--against SNAPSHOT``
or ``--context NAME`` every object there of a kind the policies judge. Each object is
judged by the originals and by the translation; the translation is written (stdout, or
``-o FILE``) only when they agree on every object, unless ``--force``.

Exit codes: 0 written and proven; 1 an object is judged differently, or could not be
judged (each named on stderr; nothing written without ``--force``); 64 usage, a file that
cannot be read, a policy that cannot be imported or translated (the reason in one sentence).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from assay.commands.fleet_common import fail
from schemas.exit_codes import EXIT_USAGE

if TYPE_CHECKING:
    from schemas.settings import AssaySettings
    from workers.core.policies.documents import SourcedDocument
    from workers.core.probes.translation import Proof
    from workers.core.toolsets.backend import ClusterBackend

EXIT_DISAGREES = 1
POLICY_GROUPS = frozenset(
    {"admissionregistration.k8s.io", "kyverno.io", "policies.kyverno.io",
     "templates.gatekeeper.sh", "constraints.gatekeeper.sh", "cli.kyverno.io",
     "test.gatekeeper.sh"}
)  # fmt: skip
MAX_SHOWN = 20

policy_app = typer.Typer(
    help="Translate admission policies between engines, proven on objects.",
    no_args_is_help=True,
)


@policy_app.command("translate")
def translate(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="PATH...",
            help="Policy files, objects to prove on, Kyverno tests or Gatekeeper suites "
            "(a folder: the tests in it).",
        ),
    ],
    to: Annotated[str, typer.Option("--to", help="vap or kyverno.")] = "vap",
    against: Annotated[
        Path | None,
        typer.Option("--against", help="Prove it on every object of this snapshot too."),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option("--context", help="Prove it on every object of this cluster too (read only)."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the translation here.")
    ] = None,
    action: Annotated[
        str | None,
        typer.Option("--action", help="Audit, Warn or Deny (default: the policy's own)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Write it even when an object disagrees.")
    ] = False,
) -> None:
    """Translate policies (Gatekeeper, Kyverno, VAP) into a ValidatingAdmissionPolicy (or a
    Kyverno ValidatingPolicy) and prove the two judge every object alike."""
    from assay.commands.options import settings_or_usage
    from workers.core.policies.documents import UnreadableFile
    from workers.core.probes.export import NotExportable
    from workers.core.probes.translation import NotProvable

    if to not in ("vap", "kyverno"):
        raise typer.BadParameter("use vap or kyverno", param_hint="--to")
    if action not in (None, "Audit", "Warn", "Deny"):
        raise typer.BadParameter("use Audit, Warn or Deny", param_hint="--action")
    if against is not None and context is not None:
        raise typer.BadParameter("give at most one of --against SNAPSHOT or --context NAME")
    settings = settings_or_usage()
    try:
        documents, objects = _inputs(paths)
    except UnreadableFile as exc:
        fail(f"{exc}; nothing was translated", EXIT_USAGE)
    target = _target(against, context, settings)
    try:
        _run(documents, objects, target, to, action, force, output)
    except NotExportable as exc:
        fail(f"it cannot be translated to {to}: {exc}", EXIT_USAGE)
    except NotProvable as exc:
        fail(str(exc), EXIT_DISAGREES)
    finally:
        if target is not None:
            target.close()


def _run(
    documents: list[SourcedDocument],
    objects: list[dict[str, Any]],
    target: ClusterBackend | None,
    to: str,
    action: str | None,
    force: bool,
    output: Path | None,
) -> None:
    import tempfile

    from workers.core.policies.importer import import_documents
    from workers.core.probes.translation import (
        objects_to_judge,
        prove,
        reimport,
        translate,
    )

    policies, refusals = import_documents(documents)
    if refusals:
        shown = "; ".join(f"{r.kind} {r.name}: {r.reason}" for r in refusals)
        fail(f"some documents cannot be translated: {shown}", EXIT_USAGE)
    if not policies:
        fail("the files hold no policy to translate", EXIT_USAGE)
    with tempfile.TemporaryDirectory(prefix="assay-translate-") as folder:
        given = _snapshot_of(objects, Path(folder)) if objects else None
        kinds = target or given
        exported = translate(
            policies,
            "kyverno" if to == "kyverno" else "vap",
            action=action,  # type: ignore[arg-type]
            backend=kinds,
        )
        translated = reimport(exported)
        proof = prove(policies, translated, given, objects) if given is not None else None
        if target is not None:
            found = list(objects_to_judge(policies + translated, target))
            on_target = prove(policies, translated, target, found)
            proof = on_target if proof is None else _joined(proof, on_target)
        if proof is None:
            fail(
                "there is nothing to prove it on: give objects (the policy's own tests, or "
                "files of objects) or --against SNAPSHOT or --context NAME",
                EXIT_USAGE,
            )
    for warning in exported.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    _report(proof)
    if not proof.proven and not force:
        print(
            "not written: the translation is not proven (--force writes it anyway)",
            file=sys.stderr,
        )
        raise typer.Exit(EXIT_DISAGREES)
    text = exported.yaml()
    if output is None:
        print(text, end="")
    else:
        output.write_text(text, encoding="utf-8")
        print(f"wrote {len(exported.documents)} documents to {output}", file=sys.stderr)
    raise typer.Exit(0 if proof.proven else EXIT_DISAGREES)


def _joined(first: Proof, second: Proof) -> Proof:
    from workers.core.probes.translation import Proof

    return Proof(first.verdicts + second.verdicts)


def _report(proof: Proof) -> None:
    print(proof.summary(), file=sys.stderr)
    for verdict in proof.disagreements[:MAX_SHOWN]:
        print(f"  disagrees: {verdict.describe()}", file=sys.stderr)
    if len(proof.disagreements) > MAX_SHOWN:
        print(f"  and {len(proof.disagreements) - MAX_SHOWN} more", file=sys.stderr)


def _inputs(paths: list[Path]) -> tuple[list[SourcedDocument], list[dict[str, Any]]]:
    """The policy documents, and the objects to prove on (module docstring)."""
    from assay.testing.policy_corpus import read_library
    from workers.core.policies.documents import UnreadableFile, read_files

    documents: list[SourcedDocument] = []
    objects: list[dict[str, Any]] = []
    policy_files: list[Path] = []
    for path in paths:
        if path.is_dir() or _is_test(path):
            root = path if path.is_dir() else path.parent
            fixtures = read_library(root).fixtures
            if not path.is_dir():
                fixtures = [f for f in fixtures if Path(f.source).resolve() == path.resolve()]
            if not fixtures:
                raise UnreadableFile(f"{path} holds no Kyverno test or Gatekeeper suite")
            policy_files += [Path(f) for fx in fixtures for f in fx.policy_files]
            objects += [fixture.obj for fixture in fixtures]
        else:
            policy_files.append(path)
    seen: set[Path] = set()
    for file in policy_files:
        if file.resolve() in seen:
            continue
        seen.add(file.resolve())
        for document in read_files([file]):
            if document.api_group in POLICY_GROUPS:
                documents.append(document)
            else:
                objects.append(document.document)
    documents += _params_objects(documents, objects)
    return documents, _unique(objects)


def _is_test(path: Path) -> bool:
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:4000]
    except OSError:
        return False
    return ("kind: Test" in head and "cli.kyverno.io" in head) or (
        "kind: Suite" in head and "test.gatekeeper.sh" in head
    )


def _params_objects(
    documents: list[SourcedDocument], objects: list[dict[str, Any]]
) -> list[SourcedDocument]:
    """The objects a ValidatingAdmissionPolicy of the files takes as params (they are
    policy documents, though they are also judged like any object)."""
    from workers.core.policies.documents import SourcedDocument

    kinds = set()
    for document in documents:
        spec = document.document.get("spec")
        kind = spec.get("paramKind") if isinstance(spec, dict) else None
        if isinstance(kind, dict):
            kinds.add((kind.get("apiVersion"), kind.get("kind")))
    return [
        SourcedDocument("params", o)
        for o in objects
        if (o.get("apiVersion"), o.get("kind")) in kinds
    ]


def _unique(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each object once (by kind, namespace and name), with the namespace a namespaced
    object left without one is created in (``default``)."""
    from assay.testing.policy_corpus import with_namespace

    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for obj in objects:
        if not isinstance(obj, dict) or not obj.get("kind"):
            continue
        obj = with_namespace(obj)
        meta = obj.get("metadata") or {}
        key = (obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name"))
        out.setdefault(key, obj)
    return list(out.values())


def _snapshot_of(objects: list[dict[str, Any]], folder: Path) -> ClusterBackend:
    """A snapshot of the given objects: their kinds (CRDs among them) and namespaces."""
    import json

    from workers.core.toolsets.snapshot_backend import SnapshotBackend

    for number, obj in enumerate(objects):
        (folder / f"{number}.json").write_text(json.dumps(obj), encoding="utf-8")
    return SnapshotBackend(folder)


def _target(
    snapshot: Path | None, context: str | None, settings: AssaySettings
) -> ClusterBackend | None:
    if snapshot is None and context is None:
        return None
    from assay.commands.probe import target_backend

    return target_backend(snapshot, context, settings, unreadable=EXIT_USAGE)


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")
