"""Reading `assay apply` files: YAML documents with the line each field stands on.

A file, a folder (its ``*.yaml``, ``*.yml`` and ``*.json`` files, sub-folders included,
in name order; entries starting with ``.`` are skipped, which is also how a ConfigMap
mounted as a folder shows each file once) or standard input. Every file is read as a
person's file is (``workers.engine.user_files``: a regular file, at most 4 MiB). Every
document is read with PyYAML's safe loader as the contract wants it
(``yaml_documents.StrictNumbersLoader``: numbers as JSON writes them, nesting and repeated
keys refused) and checked against the contract (``schemas.declarative``); a problem is a
:class:`ManifestProblem` naming the file, the line and the field, in the spelling the
file uses. :func:`load` reads everything and raises :class:`ManifestErrors` with every
problem found, so a bad set of files is refused whole before anything is applied.

Paths in a document (snapshot folders and globs, ``policy.file``) are read from the
folder of the file that holds it; from standard input, from the working directory
(:meth:`Loaded.local_path`). A policy file must lie in that folder (:meth:`Loaded.policy_path`).
"""

from __future__ import annotations

import difflib
import os
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from schemas.declarative import (
    DURATION_HELP,
    KINDS,
    SOURCE_LABEL,
    CheckDocument,
    Document,
    ScheduleDocument,
    ServerDocument,
)
from workers.engine.toolsets.yaml_documents import (
    MAX_NESTING_DEPTH,
    StrictNumbersLoader,
    check_expansion,
    describe_yaml_error,
    nesting_depth_exceeds,
)
from workers.engine.user_files import UnreadableUserFile, read_user_file

SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_PROBLEMS_SHOWN = 20

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class ManifestProblem:
    file: str
    line: int
    field: str
    message: str
    foreign: bool = False  # a document of another API (dropped if a policy.file names its file)
    answer: str = ""
    """Empty for a problem of the document itself; else the API's error code for what only
    the server's state or the other documents can judge (:data:`STATE_ANSWERS`)."""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


# What only the server's state or the request's other documents can judge, by the API's error
# code: 404 (the thing named is not here) or 409 (a conflict). The CLI refuses them all alike.
STATE_ANSWERS: dict[str, int] = {
    "snapshot_outside_roots": 404,
    "policy_not_found": 404,
    "unroutable_model": 404,
    "sink_not_found": 404,
    "targets_empty": 404,
    "duplicate_document": 409,
    "owned_by_other_source": 409,
    "check_id_taken": 409,
    "model_key_missing": 409,
    "no_fleet_model": 409,
    "context_glob_failed": 409,
}


class ManifestErrors(ValueError):
    """The files cannot be applied; ``problems`` says where and why, one per line."""

    def __init__(self, problems: list[ManifestProblem], loaded: list[Loaded] | None = None) -> None:
        self.problems = problems
        self.loaded = loaded
        """The documents read, when every problem is one only the state or the other
        documents can judge (a name given twice): the API plans them to say every problem."""
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = len(problems) - len(shown)
        text = "; ".join(str(p) for p in shown) + (f"; and {more} more" if more else "")
        super().__init__(text)


class Source(NamedTuple):
    """The text of one file (or standard input, or an HTTP body) and where its paths start."""

    name: str
    """Shown in problems: the file's path, ``<stdin>``, ``yaml``."""
    text: str
    folder: Path | None = None
    """Where a relative path in its documents starts: the file's folder, the working
    directory for standard input; None over HTTP (paths are the server's, as written)."""


@dataclass
class Loaded:
    """One document, validated, with where it came from."""

    document: CheckDocument | ScheduleDocument
    file: str
    line: int
    lines: dict[Loc, int] = field(default_factory=dict)
    folder: Path | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.document.kind, self.document.metadata.name)

    def problem(self, loc: Loc, message: str, answer: str = "") -> ManifestProblem:
        """A problem at ``loc``; ``answer``: its code when only the state can judge it."""
        return replace(located(self.file, self.line, self.lines, loc, message), answer=answer)

    def local_path(self, written: str) -> str:
        """A path or glob the document names, made absolute from the document's folder
        (``~`` expanded, ``..`` applied); as written when it has no folder (HTTP)."""
        if self.folder is None:
            return written
        expanded = os.path.expanduser(written)
        if os.path.isabs(expanded):
            return expanded
        return os.path.normpath(os.path.join(self.folder, expanded))

    def policy_path(self, written: str) -> Path:
        """The policy file the document names: relative to its folder and inside it;
        ``ValueError`` saying why not (an absolute path, ``..`` out of the folder)."""
        if self.folder is None:
            raise ValueError("a policy file can only be named by a document read from a file")
        if os.path.isabs(os.path.expanduser(written)):
            raise ValueError(
                f"{written!r} is an absolute path; name the policy file relative to this "
                "document's folder"
            )
        path = Path(os.path.normpath(self.folder / written))
        if not path.is_relative_to(os.path.normpath(self.folder)):
            raise ValueError(
                f"{written!r} leads out of this document's folder ({self.folder}); keep the "
                "policy file in that folder or below it"
            )
        return path


def located(
    file: str, first: int, lines: dict[Loc, int], loc: Loc, message: str
) -> ManifestProblem:
    """A problem at the deepest part of ``loc`` the document has a line for (its first line
    when it has none of it: a missing field)."""
    line = first
    for cut in range(len(loc), 0, -1):
        found = lines.get(tuple(loc[:cut]))
        if found is not None:
            line = found
            break
    return ManifestProblem(file, line, _dotted(loc), message)


_ADAPTER: TypeAdapter[CheckDocument | ScheduleDocument] = TypeAdapter(Document)
# The server's variant (POST /v1/apply): what its published schema says.
SERVER_ADAPTER: TypeAdapter[CheckDocument | ScheduleDocument] = TypeAdapter(ServerDocument)


def read_sources(paths: Iterable[str], stdin_text: str | None = None) -> list[Source]:
    """Every file the paths name; ``-`` is standard input."""
    found: list[Source] = []
    problems: list[ManifestProblem] = []
    for raw in paths:
        if raw == "-":
            found.append(Source("<stdin>", stdin_text or "", Path.cwd()))
            continue
        path = Path(raw)
        if path.is_dir():
            files = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and p.suffix in SUFFIXES
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not files:
                problems.append(
                    ManifestProblem(raw, 0, "", "no .yaml, .yml or .json file in this folder")
                )
        elif os.path.lexists(path):
            files = [path]
        else:
            problems.append(ManifestProblem(raw, 0, "", "no such file or folder"))
            continue
        for file in files:
            try:
                text = read_user_file(file, limit=MAX_FILE_BYTES)
            except UnreadableUserFile as exc:
                problems.append(ManifestProblem(str(file), 0, "", str(exc)))
                continue
            found.append(Source(str(file), text, file.parent.absolute()))
    if problems:
        raise ManifestErrors(problems)
    return found


def load(sources: Iterable[Source | tuple[str, str]]) -> list[Loaded]:
    """Every document of ``sources``, validated; :class:`ManifestErrors` lists every problem."""
    found: list[Loaded | None] = []
    problems: list[ManifestProblem] = []
    for source in (Source(*item) for item in sources):
        try:
            nodes = list(yaml.compose_all(source.text, Loader=StrictNumbersLoader))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else 0
            reason = describe_yaml_error(exc).removeprefix(f"line {line}: ")
            problems.append(ManifestProblem(source.name, line, "", f"not valid YAML ({reason})"))
            continue
        for node in nodes:
            if not _empty(node):
                found.append(_from_node(source, node, problems))
    referenced = _policy_files(found)
    problems = [p for p in problems if not (p.foreign and _resolved(p.file) in referenced)]
    return _unique(found, problems)


def _empty(node: yaml.Node | None) -> bool:
    """A document with nothing in it (``---`` twice, as joined files give), skipped as
    kubectl skips it."""
    return node is None or (
        isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"
    )


def _resolved(path: str | Path) -> Path:
    try:
        return Path(path).resolve()
    except OSError:
        return Path(path)


def _policy_files(found: list[Loaded | None]) -> set[Path]:
    """Files a document imports as its policy: their documents are policies, not errors."""
    files = set()
    for item in found:
        policy = item.document.spec.policy if item is not None else None
        if item is not None and policy is not None and policy.file is not None:
            try:
                files.add(_resolved(item.policy_path(policy.file)))
            except ValueError:
                continue  # refused when the document is planned
    return files


def load_objects(items: list[Any], name: str = "documents") -> list[Loaded]:
    """:func:`load` for documents already parsed (a JSON body of the API): named
    ``documents[N]``, held to the same nesting limit as a file's and validated with the
    server's variant of the models (:data:`SERVER_ADAPTER`)."""
    problems: list[ManifestProblem] = []
    found: list[Loaded | None] = []
    for index, item in enumerate(items):
        where = f"{name}[{index}]"
        if nesting_depth_exceeds(item):
            message = f"nested deeper than {MAX_NESTING_DEPTH} levels of mappings and lists"
            problems.append(ManifestProblem(where, 0, "", message))
            found.append(None)
        else:
            found.append(_validated(where, item, 0, {}, problems, adapter=SERVER_ADAPTER))
    return _unique(found, problems)


def _unique(found: list[Loaded | None], problems: list[ManifestProblem]) -> list[Loaded]:
    loaded: list[Loaded] = []
    seen: dict[tuple[str, str], Loaded] = {}
    for item in found:
        if item is None:
            continue
        earlier = seen.get(item.key)
        if earlier is not None:
            where = f"{earlier.file}:{earlier.line}" if earlier.line else earlier.file
            problems.append(
                item.problem(
                    ("metadata", "name"),
                    f"{item.key[0]} {item.key[1]!r} is also defined at {where}",
                    "duplicate_document",
                )
            )
            continue
        seen[item.key] = item
        loaded.append(item)
    if problems:
        raise ManifestErrors(problems, loaded if all(p.answer for p in problems) else None)
    return loaded


def _from_node(source: Source, node: yaml.Node, problems: list[ManifestProblem]) -> Loaded | None:
    line = node.start_mark.line + 1
    try:
        check_expansion(node)  # before anything walks it: an alias bomb is a problem
        data = StrictNumbersLoader("").construct_document(node)
    except yaml.YAMLError as exc:
        problems.append(ManifestProblem(source.name, line, "", f"not valid YAML ({exc})"))
        return None
    lines: dict[Loc, int] = {}
    _index_lines(node, lines)
    return _validated(source.name, data, line, lines, problems, source.folder)


def _validated(
    name: str,
    data: Any,
    line: int,
    lines: dict[Loc, int],
    problems: list[ManifestProblem],
    folder: Path | None = None,
    adapter: TypeAdapter[CheckDocument | ScheduleDocument] = _ADAPTER,
) -> Loaded | None:
    if not isinstance(data, dict):
        problems.append(ManifestProblem(name, line, "", "a document must be a mapping"))
        return None
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        shown = f"{kind!r}" if kind is not None else "missing"
        foreign = not str(data.get("apiVersion", "")).startswith("assay.dev/")
        problems.append(
            ManifestProblem(
                name,
                lines.get(("kind",), line),
                "kind",
                f"must be Check or Schedule, not {shown}",
                foreign,
            )
        )
        return None
    metadata = data.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("labels"), dict):
        labels = dict(metadata["labels"])
        labels.pop(SOURCE_LABEL, None)  # managed by apply: a file's value is ignored
        data = {**data, "metadata": {**metadata, "labels": labels}}
    try:
        # Strict over HTTP: a JSON value is taken as the type the schema says, never converted
        # (``0`` is no ``false``); a file's numbers are already JSON's (StrictNumbersLoader).
        # None, not False, for files: ``strict=False`` would override the fields' own
        # StrictInt / StrictFloat and read a ceiling of '5000' as a number.
        document = adapter.validate_python(data, strict=True if adapter is SERVER_ADAPTER else None)
    except ValidationError as exc:
        said: set[Loc] = set()
        for error in exc.errors():
            loc = tuple(error.get("loc", ()))
            if loc and loc[0] == kind:  # the union's tag
                loc = loc[1:]
            message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
            if error.get("type") == "extra_forbidden":
                message = _unknown_field(KINDS[kind], loc)
            if loc and str(loc[-1]) in _UNION_BRANCHES:  # one problem for the field
                loc = loc[:-1]
                if loc in said:
                    continue
                message = DURATION_HELP.get(str(loc[-1]), message)
            said.add(loc)
            problems.append(located(name, line, lines, loc, message))
        return None
    return Loaded(document, name, line, lines, folder)


# How pydantic names the branches of a field that takes a string or a number (a duration).
_UNION_BRANCHES = {"str", "float", "constrained-str", "constrained-float"}


def _unknown_field(document: type[BaseModel], loc: Loc) -> str:
    """kubectl's "unknown field", with the fields that object takes and the likeliest one
    meant, so a typo is fixed at once rather than looked up."""
    model: Any = document
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        fields = _fields_by_key(model) if _is_model(model) else {}
        model = _inner_model(fields[part].annotation) if part in fields else None
        if model is None:
            return f"unknown field {loc[-1]!r}"
    if not _is_model(model):
        return f"unknown field {loc[-1]!r}"
    names = sorted(_fields_by_key(model))
    folded = {name.lower().replace("_", ""): name for name in names}
    close = difflib.get_close_matches(str(loc[-1]).lower().replace("_", ""), folded, n=1)
    meant = f"; did you mean {folded[close[0]]!r}?" if close else ""
    return f"unknown field {loc[-1]!r}{meant} (this object takes: {', '.join(names)})"


def _fields_by_key(model: type[BaseModel]) -> dict[str, Any]:
    """A model's fields by the key a file writes them under (the alias, where there is one),
    as the error locations name them."""
    return {info.alias or name: info for name, info in model.model_fields.items()}


def _is_model(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, through Optional, lists and dicts."""
    if _is_model(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        if (inner := _inner_model(arg)) is not None:
            return inner
    return None


def _index_lines(root: yaml.Node, lines: dict[Loc, int]) -> None:
    """Line of every key (and list item) under ``root``, by its path (a loop, not recursion:
    the loader bounds the nesting, this walk need not be the next thing to overflow)."""
    pending: list[tuple[yaml.Node, Loc]] = [(root, ())]
    while pending:
        node, loc = pending.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    path = (*loc, key.value)
                    lines[path] = key.start_mark.line + 1
                    pending.append((value, path))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                path = (*loc, index)
                lines[path] = item.start_mark.line + 1
                pending.append((item, path))


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
