"""Loading a suite (one YAML file, or a folder of them) and checking it against its snapshots.

A suite is data a user may write, so loading it is strict and every error
names the file and the case: unknown fields, duplicate ids, a snapshot folder
that does not exist. Two cases asking the same predicate of snapshots with the
same folder name are refused too: the model sees only the folder name, so
they would be the same question with possibly different answers.

``check_suite`` goes further and reads the snapshots through the real tools:
each snapshot must load without problems and every evidence lookup must
succeed and contain its excerpt, so no label rests on a fact the data lacks.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import ValidationError

from assay.eval import seam
from schemas.eval import Case, SuiteFile, SuiteInfo
from schemas.request import SnapshotTarget

if TYPE_CHECKING:
    from schemas.settings import AssaySettings

SUITE_SUFFIXES = (".yaml", ".yml")
DEFAULT_SUITE = Path(__file__).resolve().parents[2] / "examples" / "eval" / "cases"


class SuiteError(ValueError):
    """The suite cannot be used; the message says which file or case and why."""


@dataclass(frozen=True)
class SuiteCase:
    """A case with its snapshot folder resolved."""

    case: Case
    snapshot: Path
    source: Path

    @property
    def id(self) -> str:
        return self.case.id

    @property
    def target_name(self) -> str:
        """The cluster name the model is shown (the snapshot folder's name)."""
        return SnapshotTarget(path=str(self.snapshot)).name


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    cases: tuple[SuiteCase, ...]

    def select(self, patterns: list[str]) -> Suite:
        """The cases whose id matches a glob or whose category is named; all when none given."""
        if not patterns:
            return self
        chosen = tuple(
            c
            for c in self.cases
            if any(fnmatch.fnmatchcase(c.id, p) or c.case.category == p for p in patterns)
        )
        if not chosen:
            raise SuiteError(
                f"no case of suite {self.name} matches {', '.join(patterns)}: "
                "give case ids (globs allowed) or category names"
            )
        return Suite(self.name, self.path, chosen)

    def digest(self) -> str:
        """A fingerprint of the selected cases, so two reports can tell they ran the same ones."""
        payload = [
            {**c.case.model_dump(mode="json"), "snapshot": c.target_name}
            for c in sorted(self.cases, key=lambda c: c.id)
        ]
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def info(self) -> SuiteInfo:
        labels: dict[str, int] = {}
        categories: dict[str, int] = {}
        for c in self.cases:
            labels[c.case.label.value] = labels.get(c.case.label.value, 0) + 1
            categories[c.case.category] = categories.get(c.case.category, 0) + 1
        return SuiteInfo(
            name=self.name,
            path=str(self.path),
            cases=len(self.cases),
            digest=self.digest(),
            labels=dict(sorted(labels.items())),
            categories=dict(sorted(categories.items())),
        )


def suite_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUITE_SUFFIXES and p.is_file())
        if files:
            return files
        raise SuiteError(f"suite folder {path} holds no .yaml case files")
    raise SuiteError(f"suite {path} does not exist: pass a case file or a folder of them")


def load_suite(path: Path) -> Suite:
    """Read and validate a suite; SuiteError says what is wrong and where."""
    path = path.expanduser().resolve()
    cases: list[SuiteCase] = []
    for file in suite_files(path):
        cases.extend(_load_file(file))
    _check_unique(cases)
    name = path.stem if path.is_file() else path.name
    if name == "cases" and path.is_dir():
        name = path.parent.name  # examples/eval/cases -> "eval"
    return Suite(name, path, tuple(cases))


def _load_file(file: Path) -> list[SuiteCase]:
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"cannot read suite file {file}: {exc}") from None
    except yaml.YAMLError as exc:
        raise SuiteError(f"suite file {file} is not valid YAML: {exc}") from None
    try:
        parsed = SuiteFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise SuiteError(
            f"suite file {file} does not follow the case format at {where}: {first['msg']} "
            "(see docs/eval.md)"
        ) from None
    loaded = []
    for case in parsed.cases:
        snapshot = (file.parent / case.snapshot).resolve()
        if not snapshot.is_dir():
            raise SuiteError(
                f"case {case.id} in {file}: snapshot folder {snapshot} does not exist "
                "(snapshot paths are relative to the case file)"
            )
        loaded.append(SuiteCase(case, snapshot, file))
    return loaded


def _check_unique(cases: list[SuiteCase]) -> None:
    seen_ids: dict[str, SuiteCase] = {}
    seen_questions: dict[tuple[str, str], SuiteCase] = {}
    for c in cases:
        if c.id in seen_ids:
            raise SuiteError(f"case id {c.id} appears twice ({seen_ids[c.id].source}, {c.source})")
        seen_ids[c.id] = c
        question = (" ".join(c.case.predicate.casefold().split()), c.target_name)
        if question in seen_questions:
            other = seen_questions[question]
            raise SuiteError(
                f"cases {other.id} and {c.id} ask the same predicate of snapshot "
                f"{c.target_name}: merge them or rename a snapshot folder"
            )
        seen_questions[question] = c


def check_suite(suite: Suite, settings: AssaySettings) -> list[str]:
    """Problems that make a case's label unsupported by its data; empty when sound."""

    problems: list[str] = []
    for snapshot in sorted({c.snapshot for c in suite.cases}):
        for problem in seam.snapshot_problems(snapshot):
            problems.append(f"snapshot {snapshot.name}: {problem}")
    for c in suite.cases:
        for number, hint in enumerate(c.case.evidence, start=1):
            result = seam.lookup(c.snapshot, hint.tool, hint.arguments, settings)
            where = f"case {c.id}, evidence {number} ({hint.tool} {json.dumps(hint.arguments)})"
            if not result.ok:
                problems.append(f"{where}: the lookup failed: {result.output[:200]}")
            elif not result.cites(hint.excerpt):
                problems.append(
                    f"{where}: the output does not contain {hint.excerpt!r} outside the text "
                    "that repeats the lookup's own arguments"
                )
    return problems
