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
from assay.terminal_text import print_block, print_line
from schemas.exit_codes import EXIT_USAGE

if TYPE_CHECKING:
    from schemas.settings import AssaySettings
    from workers.engine.toolsets.backend import ClusterBackend
    from workers.policy_engine.policies.documents import SourcedDocument
    from workers.policy_engine.probes.export import Exported
    from workers.policy_engine.probes.translation import Proof

EXIT_DISAGREES = 1
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
    from workers.policy_engine.policies.documents import UnreadableFile
    from workers.policy_engine.probes.export import NotExportable
    from workers.policy_engine.probes.translation import (
        NotProvable,
        NotTranslatable,
        translate_and_prove,
    )

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
        exported, proof = translate_and_prove(
            documents,
            objects,
            "kyverno" if to == "kyverno" else "vap",
            action=action,  # type: ignore[arg-type]
            target=target,
        )
    except (NotTranslatable, NotExportable) as exc:
        fail(str(exc), EXIT_USAGE)
    except NotProvable as exc:
        fail(str(exc), EXIT_DISAGREES)
    finally:
        if target is not None:
            target.close()
    _write(exported, proof, force, output)


def _write(exported: Exported, proof: Proof, force: bool, output: Path | None) -> None:
    """The warnings and the proof on stderr; the translation when proven (or forced)."""
    for warning in exported.warnings:
        print_line(f"warning: {warning}", sys.stderr)
    print_line(proof.summary(), sys.stderr)
    for verdict in proof.disagreements[:MAX_SHOWN]:
        print_line(f"  disagrees: {verdict.describe()}", sys.stderr)
    if len(proof.disagreements) > MAX_SHOWN:
        print(f"  and {len(proof.disagreements) - MAX_SHOWN} more", file=sys.stderr)
    if not proof.proven and not force:
        print("not written: the translation is not proven (--force writes it anyway)",
              file=sys.stderr)  # fmt: skip
        raise typer.Exit(EXIT_DISAGREES)
    text = exported.yaml()
    if output is None:
        print_block(text)
    else:
        output.write_text(text, encoding="utf-8")
        print_line(f"wrote {len(exported.documents)} documents to {output}", sys.stderr)
    raise typer.Exit(0 if proof.proven else EXIT_DISAGREES)


def _inputs(paths: list[Path]) -> tuple[list[SourcedDocument], list[dict[str, Any]]]:
    """The policy documents, and the objects to prove on (module docstring)."""
    from assay.testing.policy_corpus import read_library
    from workers.policy_engine.policies.documents import UnreadableFile, read_files
    from workers.policy_engine.probes.translation import split_documents

    files: list[Path] = []
    objects: list[dict[str, Any]] = []
    for path in paths:
        if path.is_dir() or _is_test(path):
            fixtures = read_library(path if path.is_dir() else path.parent).fixtures
            if not path.is_dir():
                fixtures = [f for f in fixtures if Path(f.source).resolve() == path.resolve()]
            if not fixtures:
                raise UnreadableFile(f"{path} holds no Kyverno test or Gatekeeper suite")
            files += [Path(file) for fixture in fixtures for file in fixture.policy_files]
            objects += [fixture.obj for fixture in fixtures]
        else:
            files.append(path)
    unique = list({file.resolve(): file for file in files}.values())
    documents, more = split_documents(read_files(unique))
    return documents, objects + more


def _is_test(path: Path) -> bool:
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:4000]
    except OSError:
        return False
    return ("kind: Test" in head and "cli.kyverno.io" in head) or (
        "kind: Suite" in head and "test.gatekeeper.sh" in head
    )


def _target(
    snapshot: Path | None, context: str | None, settings: AssaySettings
) -> ClusterBackend | None:
    if snapshot is None and context is None:
        return None
    from assay.commands.probe import target_backend

    return target_backend(snapshot, context, settings, unreadable=EXIT_USAGE)


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")
