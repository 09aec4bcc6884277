"""Snapshot variants: a base snapshot plus small, named edits, written out as plain folders.

The eval suite needs the same cluster with one fact changed (a container
that runs as root, a certificate that is not Ready) so that one predicate
can be labelled ``true`` on the base and ``false`` on the variant. Editing
copies by hand drifts; this module applies edits declared in a YAML spec
(``examples/eval/variants.yaml``), deterministically, and writes each variant
as an ordinary snapshot folder that ``assay check --snapshot`` can read.

Every edit must change something: an edit that matches no object, or sets a
value that is already there, is an error, because a variant identical to its
base would make its labels wrong. Edits are JSON Pointers (RFC 6901), so keys
such as ``app.kubernetes.io/name`` need no quoting rules of our own
(``/`` in a key is written ``~1``). Top-level keys starting with ``x-`` are
ignored, so a spec can hold YAML anchors that several variants share.

    python -m assay.eval.variants examples/eval/variants.yaml          # write
    python -m assay.eval.variants examples/eval/variants.yaml --check  # exit 1 on drift
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

_OBJECT_SUFFIXES = (".yaml", ".yml", ".json")
_LOGS = "logs"
_ABOUT_FILE = "GENERATED.md"


class VariantError(ValueError):
    """The spec is invalid or an edit does not apply; the message names the variant and edit."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Match(_Strict):
    """Which objects an edit touches: every field given must match."""

    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    name_prefix: str | None = None

    def matches(self, obj: dict[str, Any]) -> bool:
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name", ""))
        return (
            (self.kind is None or obj.get("kind") == self.kind)
            and (self.namespace is None or metadata.get("namespace") == self.namespace)
            and (self.name is None or name == self.name)
            and (self.name_prefix is None or name.startswith(self.name_prefix))
        )

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.model_dump(exclude_none=True).items())


class Edit(_Strict):
    match: Match
    set: dict[str, Any] = Field(default_factory=dict, description="JSON Pointer -> new value.")
    remove: list[str] = Field(default_factory=list, description="JSON Pointers to delete.")


class LogEdit(_Strict):
    append: str | None = None
    write: str | None = None


class Variant(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    about: str = Field(min_length=1, description="What differs from the base, for a reader.")
    edits: list[Edit] = Field(default_factory=list)
    delete: list[Match] = Field(default_factory=list, description="Objects removed.")
    add: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict, description="New files (relative path -> objects)."
    )
    logs: dict[str, LogEdit] = Field(
        default_factory=dict, description="logs/ file (NS/POD/CONTAINER.log) -> change."
    )
    delete_logs: list[str] = Field(
        default_factory=list, description="logs/ sub-folders removed, e.g. payments."
    )


class VariantSpec(_Strict):
    base: str = Field(description="The base snapshot folder, relative to the spec file.")
    out: str = Field(description="Where variants are written (one folder each), relative.")
    variants: list[Variant] = Field(min_length=1)


# ---------------------------------------------------------------------- JSON Pointer


def _tokens(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise ValueError(f"{pointer!r} is not a JSON Pointer (it must start with /)")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def _step(node: Any, token: str, pointer: str, create: bool) -> Any:
    if isinstance(node, list):
        index = int(token)
        if index >= len(node):
            raise ValueError(f"{pointer}: index {index} is past the end of a {len(node)}-item list")
        return node[index]
    if not isinstance(node, dict):
        raise ValueError(f"{pointer}: {token!r} is under a value that is not a mapping")
    if token not in node:
        if not create:
            raise ValueError(f"{pointer}: there is no {token!r}")
        node[token] = {}
    return node[token]


def set_pointer(obj: dict[str, Any], pointer: str, value: Any) -> None:
    """Set ``value`` at ``pointer``, creating mappings on the way; ``/-`` appends to a list."""
    *parents, last = _tokens(pointer)
    node: Any = obj
    for token in parents:
        node = _step(node, token, pointer, create=True)
    if isinstance(node, list):
        if last == "-":
            node.append(copy.deepcopy(value))
            return
        index = int(last)
        if index >= len(node):
            raise ValueError(f"{pointer}: index {index} is past the end of the list")
        node[index] = copy.deepcopy(value)
    elif isinstance(node, dict):
        node[last] = copy.deepcopy(value)
    else:
        raise ValueError(f"{pointer}: the parent is not a mapping or a list")


def remove_pointer(obj: dict[str, Any], pointer: str) -> None:
    *parents, last = _tokens(pointer)
    node: Any = obj
    for token in parents:
        node = _step(node, token, pointer, create=False)
    if isinstance(node, list):
        del node[int(last)]
    elif isinstance(node, dict) and last in node:
        del node[last]
    else:
        raise ValueError(f"{pointer}: there is nothing to remove")


# ---------------------------------------------------------------------- a snapshot in memory


@dataclass
class _File:
    """One object file: its documents, whether it was a List, and whether an edit touched it."""

    raw: bytes
    documents: list[Any]
    suffix: str
    changed: bool = False

    def objects(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for document in self.documents:
            if isinstance(document, dict) and isinstance(document.get("items"), list):
                found.extend(item for item in document["items"] if isinstance(item, dict))
            elif isinstance(document, dict):
                found.append(document)
        return found

    def render(self) -> bytes:
        if not self.changed:
            return self.raw
        if self.suffix == ".json":
            return (json.dumps(self.documents[0], indent=2) + "\n").encode()
        return dump_yaml(self.documents).encode()


def dump_yaml(documents: list[Any]) -> str:
    """The house style of the suite's snapshots: block mappings, short collections inline."""
    return yaml.safe_dump_all(
        documents, sort_keys=False, width=110, default_flow_style=None, allow_unicode=True
    )


@dataclass
class _Snapshot:
    files: dict[str, _File] = field(default_factory=dict)
    logs: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def read(cls, root: Path) -> _Snapshot:
        snapshot = cls()
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            relative = path.relative_to(root).as_posix()
            raw = path.read_bytes()
            if relative.startswith(_LOGS + "/"):
                snapshot.logs[relative[len(_LOGS) + 1 :]] = raw
            elif path.suffix.lower() in _OBJECT_SUFFIXES:
                text = raw.decode("utf-8")
                if path.suffix.lower() == ".json":
                    documents = [json.loads(text)]
                else:
                    documents = [d for d in yaml.safe_load_all(text) if d is not None]
                snapshot.files[relative] = _File(raw, documents, path.suffix.lower())
        return snapshot

    def render(self) -> dict[str, bytes]:
        out = {name: file.render() for name, file in self.files.items() if file.documents}
        out.update({f"{_LOGS}/{name}": raw for name, raw in self.logs.items()})
        return out


# ---------------------------------------------------------------------- applying a variant


def build_variant(base: Path, variant: Variant) -> dict[str, bytes]:
    """The files of ``variant`` (relative path -> bytes), from the base folder."""
    snapshot = _Snapshot.read(base)
    where = f"variant {variant.name}"
    for number, edit in enumerate(variant.edits, start=1):
        _apply_edit(snapshot, edit, f"{where}, edit {number} ({edit.match.describe()})")
    for match in variant.delete:
        _delete(snapshot, match, f"{where}, delete ({match.describe()})")
    for relative, objects in variant.add.items():
        if relative in snapshot.files or not relative.endswith((".yaml", ".yml")):
            raise VariantError(f"{where}: add {relative!r} must name a new .yaml file")
        snapshot.files[relative] = _File(b"", [copy.deepcopy(o) for o in objects], ".yaml", True)
    for prefix in variant.delete_logs:
        doomed = [name for name in snapshot.logs if name.startswith(prefix.rstrip("/") + "/")]
        if not doomed:
            raise VariantError(f"{where}: delete_logs {prefix!r} matches no log file")
        for name in doomed:
            del snapshot.logs[name]
    for relative, change in variant.logs.items():
        _edit_log(snapshot, relative, change, where)
    files = snapshot.render()
    files[_ABOUT_FILE] = _about(base, variant).encode()
    return files


def _apply_edit(snapshot: _Snapshot, edit: Edit, where: str) -> None:
    touched = 0
    for file in snapshot.files.values():
        for obj in file.objects():
            if not edit.match.matches(obj):
                continue
            before = copy.deepcopy(obj)
            try:
                for pointer, value in edit.set.items():
                    set_pointer(obj, pointer, value)
                for pointer in edit.remove:
                    remove_pointer(obj, pointer)
            except (ValueError, IndexError) as exc:
                raise VariantError(f"{where}: {exc}") from None
            if obj == before:
                name = obj["metadata"].get("name")
                raise VariantError(f"{where}: the edit leaves {obj.get('kind')} {name} unchanged")
            file.changed = True
            touched += 1
    if not touched:
        raise VariantError(f"{where}: no object matches")


def _delete(snapshot: _Snapshot, match: Match, where: str) -> None:
    removed = 0
    for file in snapshot.files.values():
        kept_documents = []
        for document in file.documents:
            if isinstance(document, dict) and isinstance(document.get("items"), list):
                items = [i for i in document["items"] if not match.matches(i)]
                removed += len(document["items"]) - len(items)
                if len(items) != len(document["items"]):
                    file.changed = True
                    document["items"] = items
                if items:
                    kept_documents.append(document)
            elif isinstance(document, dict) and match.matches(document):
                removed += 1
                file.changed = True
            else:
                kept_documents.append(document)
        file.documents = kept_documents
    if not removed:
        raise VariantError(f"{where}: no object matches")


def _edit_log(snapshot: _Snapshot, relative: str, change: LogEdit, where: str) -> None:
    if (change.append is None) == (change.write is None):
        raise VariantError(f"{where}: log {relative!r} needs exactly one of append or write")
    if change.write is not None:
        snapshot.logs[relative] = change.write.encode()
        return
    if relative not in snapshot.logs:
        raise VariantError(f"{where}: log {relative!r} does not exist in the base to append to")
    assert change.append is not None
    snapshot.logs[relative] += change.append.encode()


def _about(base: Path, variant: Variant) -> str:
    about = " ".join(variant.about.split())
    return (
        f"# {variant.name}\n\n"
        f"Generated from `{base.name}` by `python -m assay.eval.variants`; do not edit by hand.\n"
        f"The snapshot backend reads only YAML/JSON and logs/, so this note never reaches a "
        f"model.\n\n{about}\n"
    )


# ---------------------------------------------------------------------- the spec, the folders


def load_spec(path: Path) -> VariantSpec:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise VariantError(f"cannot read variant spec {path}: {exc}") from None
    if isinstance(data, dict):  # like compose files: x-* keys only hold YAML anchors
        data = {k: v for k, v in data.items() if not str(k).startswith("x-")}
    try:
        spec = VariantSpec.model_validate(data)
    except ValidationError as exc:
        raise VariantError(f"variant spec {path} is invalid: {exc}") from None
    names = [v.name for v in spec.variants]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise VariantError(f"variant spec {path}: duplicate names {', '.join(duplicates)}")
    return spec


def render_all(spec_path: Path) -> dict[Path, dict[str, bytes]]:
    """Every variant folder and its files, from a spec file."""
    spec = load_spec(spec_path)
    base = (spec_path.parent / spec.base).resolve()
    out = (spec_path.parent / spec.out).resolve()
    if not base.is_dir():
        raise VariantError(f"the base snapshot {base} does not exist")
    return {out / variant.name: build_variant(base, variant) for variant in spec.variants}


def drift(rendered: dict[Path, dict[str, bytes]]) -> list[str]:
    """Files that differ between ``rendered`` and the folders on disk."""
    problems = []
    for folder, files in rendered.items():
        on_disk = {
            p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }
        for name in sorted(set(files) | set(on_disk)):
            if files.get(name) != on_disk.get(name):
                problems.append(f"{folder.name}/{name}")
    return problems


def write_all(rendered: dict[Path, dict[str, bytes]]) -> None:
    for folder, files in rendered.items():
        if folder.exists():
            shutil.rmtree(folder)
        for name, data in files.items():
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m assay.eval.variants",
        description="Write the snapshot variants a spec declares (or --check them).",
    )
    parser.add_argument("spec", type=Path, help="variant spec, e.g. examples/eval/variants.yaml")
    parser.add_argument("--check", action="store_true", help="exit 1 if a folder differs")
    args = parser.parse_args(argv)
    try:
        rendered = render_all(args.spec)
    except VariantError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 64
    if args.check:
        problems = drift(rendered)
        if problems:
            print("variant drift: " + ", ".join(problems), file=sys.stderr)
            print(f"run `python -m assay.eval.variants {args.spec}` and commit", file=sys.stderr)
            return 1
        return 0
    write_all(rendered)
    print(f"wrote {len(rendered)} variants to {next(iter(rendered)).parent}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
