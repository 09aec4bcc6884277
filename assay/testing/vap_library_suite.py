"""Labelled fixtures from a ValidatingAdmissionPolicy library tested against a real API server.

The layout read is kubescape's cel-admission-library: ``controls/<id>/policy.yaml`` (one
ValidatingAdmissionPolicy) beside ``tests.json``, a list of cases ``{name, template,
expected: pass|fail|warn, field_change_list, binding_template, param_template}``. Each case
takes an object from ``test-resources/<template>``, sets the listed fields
(``spec.containers.[0].image=nginx``: a dotted path, ``[N]`` a list index, the value read as
JSON when it is JSON), and applies it with a server-side dry run under a binding
(``test-resources/<binding_template>``, ``policy-binding.yaml`` by default) whose
``paramRef`` names a params object made from ``test-resources/<param_template>``
(``default-control-configuration.yaml`` by default). The API server's answer is the label:
``pass`` admitted; ``fail`` refused by the policy; ``warn`` admitted with the policy's
warning (so the policy itself judged the object false).

The binding and params of each case are written to a scratch folder the caller keeps, named
after the policy as the library's runner names them.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class LibraryCase:
    source: str
    policy_files: tuple[str, ...]
    policy: str
    obj: dict[str, Any] = field(hash=False, compare=False)
    allowed: bool
    label: str


def is_library_root(root: Path) -> bool:
    return (root / "controls").is_dir() and (root / "test-resources").is_dir()


def _one(path: Path) -> dict[str, Any] | None:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return document if isinstance(document, dict) else None


def set_field(obj: dict[str, Any], change: str) -> None:
    """Apply one ``path=value`` change as the library's runner does (containers made as the
    next step of the path needs them; a list grown with nulls to reach an index)."""
    path, sep, text = change.partition("=")
    if not sep:
        raise ValueError(f"a field change without '=': {change}")
    value: Any
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    steps: list[str | int] = [
        int(s[1:-1]) if s.startswith("[") and s.endswith("]") else s for s in path.split(".")
    ]
    node: Any = obj
    for here, after in pairwise(steps):
        empty: Any = [] if isinstance(after, int) else {}
        node = _child(node, here, empty)
    last = steps[-1]
    if isinstance(last, int):
        if not isinstance(node, list):
            raise ValueError(f"{path}: an index into something that is not a list")
        node.extend([None] * (last + 1 - len(node)))
    elif not isinstance(node, dict):
        raise ValueError(f"{path}: a field of something that is not a mapping")
    node[last] = value


def _child(node: Any, step: str | int, empty: Any) -> Any:
    if isinstance(step, int):
        if not isinstance(node, list):
            raise ValueError("an index into something that is not a list")
        node.extend([None] * (step + 1 - len(node)))
        if node[step] is None:
            node[step] = empty
        return node[step]
    if not isinstance(node, dict):
        raise ValueError("a field of something that is not a mapping")
    if node.get(step) is None:
        node[step] = empty
    return node[step]


def read_vap_library(root: Path, scratch: Path, skipped: Counter[str]) -> list[LibraryCase]:
    """Every case of every control under ``root/controls``."""
    resources = root / "test-resources"
    out: list[LibraryCase] = []
    for tests_file in sorted((root / "controls").glob("*/tests.json")):
        policy_file = tests_file.parent / "policy.yaml"
        policy = _one(policy_file)
        try:
            cases = json.loads(tests_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            skipped["a tests.json that is not JSON"] += 1
            continue
        if policy is None or not isinstance(cases, list):
            skipped["a control without a readable policy and list of cases"] += 1
            continue
        name = str((policy.get("metadata") or {}).get("name") or "")
        for number, case in enumerate(cases):
            made = _case(case, name, resources, scratch / tests_file.parent.name)
            if isinstance(made, str):
                skipped[made] += 1
                continue
            obj, binding_file, params_file = made
            expected = str(case.get("expected") or "")
            out.append(
                LibraryCase(
                    source=f"{tests_file}#{number} {case.get('name')}",
                    policy_files=(str(policy_file), str(binding_file), str(params_file)),
                    policy=name,
                    obj=obj,
                    allowed=expected == "pass",
                    label=expected,
                )
            )
    return out


def _case(
    case: Any, policy: str, resources: Path, folder: Path
) -> tuple[dict[str, Any], Path, Path] | str:
    if not isinstance(case, dict) or case.get("expected") not in ("pass", "fail", "warn"):
        return "a library case without pass, fail or warn"
    template = _one(resources / str(case.get("template") or ""))
    binding = _one(resources / str(case.get("binding_template") or "policy-binding.yaml"))
    params = _one(
        resources / str(case.get("param_template") or "default-control-configuration.yaml")
    )
    if template is None or binding is None or params is None:
        return "a library case whose template, binding or params file is missing"
    obj = copy.deepcopy(template)
    try:
        for change in case.get("field_change_list") or []:
            set_field(obj, str(change))
    except ValueError:
        return "a library case whose field change does not apply"
    binding = copy.deepcopy(binding)
    binding.setdefault("metadata", {})["name"] = f"{policy}-binding"
    spec = binding.setdefault("spec", {})
    spec["policyName"] = policy
    if isinstance(spec.get("paramRef"), dict):
        spec["paramRef"]["name"] = f"{policy}-params"
    params = copy.deepcopy(params)
    params.setdefault("metadata", {})["name"] = f"{policy}-params"
    # one folder per (binding, params) pair, so cases sharing them share one import
    folder = folder / f"{case.get('binding_template') or ''}-{case.get('param_template') or ''}"
    folder.mkdir(parents=True, exist_ok=True)
    binding_file, params_file = folder / "binding.yaml", folder / "params.yaml"
    binding_file.write_text(yaml.safe_dump(binding), encoding="utf-8")
    params_file.write_text(yaml.safe_dump(params), encoding="utf-8")
    return obj, binding_file, params_file
